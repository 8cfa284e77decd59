//! Following a session another member owns: its live events subscribed first, then its record
//! replayed from the owner after the follower's `seq`, then the live events past what the replay
//! gave. Each live event says the `seq` of the session's event before it, so one missed (the
//! server dropped it, or it was published while the server was away) is seen and read from the
//! owner's record before the event is passed on: the follower gets the owner's `seq`s in order,
//! none twice and none left out.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use intendant_core::host::EventStream;
use intendant_fleet::Member;
use intendant_fleet::route::{ControlOp, FleetEvent, Replayed, Surface};
use intendant_protocol::daemon::{HostError, HostErrorCode, StreamItem};
use tokio::sync::mpsc;

/// The follower's queue (what it has not read yet); a follower slower than the events holds up
/// its own stream alone, and what the server drops meanwhile is read back from the record.
const QUEUE: usize = 1024;

/// Session `session` of `owner`, after `after` (`0`: everything; `None`: only new events).
pub async fn subscribe(
    member: Arc<Member>,
    owner: String,
    session: &str,
    after: Option<u64>,
) -> Result<EventStream, HostError> {
    // Subscribed before the replay is asked for: nothing published in between is missed.
    let live = member.follow(&owner, session).await?;
    let first = match after {
        Some(after) => Some(replay(&member, &owner, session, after).await?),
        None => None,
    };
    let history_end = first.as_ref().map_or(0, |r| r.history_end);
    let (tx, rx) = mpsc::channel(QUEUE);
    let follower = Follower {
        member,
        owner,
        session: session.to_owned(),
        last: after,
        tx,
    };
    tokio::spawn(follower.run(live, first));
    Ok(EventStream::new(rx, history_end))
}

/// One subscription's task.
struct Follower {
    member: Arc<Member>,
    owner: String,
    session: String,
    /// The `seq` of the last event passed on (`None`: only new ones wanted, none passed yet).
    last: Option<u64>,
    tx: mpsc::Sender<StreamItem>,
}

impl Follower {
    async fn run(mut self, mut live: BoxStream<'static, FleetEvent>, first: Option<Replayed>) {
        if let Some(first) = first {
            let end = first.history_end;
            if self.pass(first).await.is_err() || self.catch_up(end).await.is_err() {
                return;
            }
        }
        loop {
            let next = tokio::select! {
                () = self.tx.closed() => return,
                next = live.next() => next,
            };
            let Some(FleetEvent { prev, event }) = next else {
                return;
            };
            if let Some(last) = self.last {
                if event.seq <= last {
                    continue;
                }
                if prev > last && self.catch_up(event.seq).await.is_err() {
                    return;
                }
                if self.last.is_some_and(|last| event.seq <= last) {
                    continue;
                }
            }
            self.last = Some(event.seq);
            if self
                .tx
                .send(StreamItem::Event(Arc::new(event)))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Reads the owner's record after the last event passed on until `until` is passed on (or
    /// the record has nothing more).
    async fn catch_up(&mut self, until: u64) -> Result<(), HostError> {
        while self.last.unwrap_or(0) < until {
            let after = self.last.unwrap_or(0);
            let replayed = replay(&self.member, &self.owner, &self.session, after).await?;
            let more = replayed.more;
            if !self.pass(replayed).await? || !more {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Passes on the replayed events past the last one; whether any was.
    async fn pass(&mut self, replayed: Replayed) -> Result<bool, HostError> {
        let mut any = false;
        for event in replayed.events {
            if self.last.is_some_and(|last| event.seq <= last) {
                continue;
            }
            self.last = Some(event.seq);
            any = true;
            self.tx
                .send(StreamItem::Event(Arc::new(event)))
                .await
                .map_err(|_| HostError::new(HostErrorCode::Unavailable, "the follower left"))?;
        }
        Ok(any)
    }
}

/// One page of `session`'s record on `owner` after `after`.
async fn replay(
    member: &Member,
    owner: &str,
    session: &str,
    after: u64,
) -> Result<Replayed, HostError> {
    let op = ControlOp::Replay {
        session_id: session.to_owned(),
        after,
    };
    let value = member.route(owner, Surface::Human, op).await?;
    serde_json::from_value(value).map_err(|e| {
        HostError::new(
            HostErrorCode::Internal,
            format!("member {owner} replayed what does not read: {e}"),
        )
    })
}

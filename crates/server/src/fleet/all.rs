//! A fleet member's stream of every session (`subscribe` of no session: the dashboard's live
//! stream, a socket client's): this daemon's own events as its supervisor gives them (resumable
//! by `seq`, a `lagged` ending it), and every other member's as the server delivers them, each
//! marked with its member ([`Envelope::member`], its `seq` that member's). The others' are
//! live only: one the server dropped is not read back here (a session followed by its id is:
//! [`super::follow`]).
//!
//! [`Envelope::member`]: intendant_protocol::daemon::Envelope::member

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use intendant_core::host::{EventStream, SessionHost};
use intendant_fleet::Member;
use intendant_fleet::route::FleetEvent;
use intendant_protocol::daemon::{HostError, StreamItem};
use tokio::sync::mpsc;

/// The subscriber's queue; a subscriber slower than the events holds up its own stream alone
/// (this daemon's events then lag as they would without a fleet).
const QUEUE: usize = 1024;

/// This daemon's events after `after` (as `local` gives them) and every other member's from
/// now on.
pub async fn subscribe(
    local: &dyn SessionHost,
    member: Arc<Member>,
    after: Option<u64>,
) -> Result<EventStream, HostError> {
    // The server away: this member's own events alone, as without a fleet.
    let others = member.follow_all().await.ok();
    let mut own = local.subscribe(None, after).await?;
    let history_end = own.history_end();
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let mut others = others;
        loop {
            let item = tokio::select! {
                () = tx.closed() => return,
                item = own.next() => match item {
                    Some(item) => item,
                    None => return,
                },
                Some((name, FleetEvent { event, .. })) = next(&mut others) => {
                    let mut event = event;
                    event.member = Some(name);
                    StreamItem::Event(Arc::new(event))
                }
            };
            let lagged = matches!(item, StreamItem::Lagged { .. });
            if tx.send(item).await.is_err() || lagged {
                return;
            }
        }
    });
    Ok(EventStream::new(rx, history_end))
}

/// The next event of another member, or never when there is no subscription (or it ended).
async fn next(
    others: &mut Option<BoxStream<'static, (String, FleetEvent)>>,
) -> Option<(String, FleetEvent)> {
    match others {
        Some(stream) => match stream.next().await {
            Some(item) => Some(item),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

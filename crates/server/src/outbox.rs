//! What a connection has yet to send its client, bounded in bytes (`[daemon]
//! client_buffer_kib`), and the one way a stream of events is copied into it.
//!
//! The control socket queues its lines here, the dashboard its server-sent events. An item
//! takes room until the connection's writer has handed it on; a stream item that finds no room
//! makes its stream lag (`lagged`, with the seq to re-read from), so a client that reads nothing
//! holds at most the budget, however large the events and however fast they come. The host's
//! stream is read as fast as it publishes: its own queue, bounded in events, never fills behind
//! a slow client.

use std::future::Future;
use std::sync::Arc;

use intendant_core::host::EventStream;
use intendant_protocol::daemon::StreamItem;
use intendant_protocol::socket::StreamEnd;
use tokio::sync::{Semaphore, TryAcquireError, mpsc};

/// The sending side of a connection's queue.
pub(crate) struct Outbox<T> {
    tx: mpsc::UnboundedSender<Queued<T>>,
    room: Arc<Semaphore>,
    /// The whole room, in bytes: a longer item takes all of it.
    budget: u32,
}

// Not derived: `T` need not be `Clone` for its queue to be shared.
impl<T> Clone for Outbox<T> {
    fn clone(&self) -> Self {
        Outbox {
            tx: self.tx.clone(),
            room: self.room.clone(),
            budget: self.budget,
        }
    }
}

/// A queued item and the room it holds, given back (`add_permits` on [`Outbox::room`]) once
/// the item is handed on.
pub(crate) struct Queued<T> {
    pub(crate) item: T,
    pub(crate) room: u32,
}

/// Why [`Outbox::try_send`] did not queue an item.
pub(crate) enum Full {
    /// Not enough room now.
    NoRoom,
    /// The connection is gone.
    Closed,
}

impl<T> Outbox<T> {
    /// A queue of at most `bytes`, and its receiving side.
    pub(crate) fn new(bytes: usize) -> (Outbox<T>, mpsc::UnboundedReceiver<Queued<T>>) {
        let budget = u32::try_from(bytes.max(1)).unwrap_or(u32::MAX);
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(budget as usize));
        (Outbox { tx, room, budget }, rx)
    }

    /// The room left, shared with the writer that gives it back.
    pub(crate) fn room(&self) -> &Arc<Semaphore> {
        &self.room
    }

    fn cost(&self, bytes: usize) -> u32 {
        u32::try_from(bytes).unwrap_or(u32::MAX).min(self.budget)
    }

    /// Queues `item` of `bytes` once there is room for it; `Err` when the connection is gone.
    pub(crate) async fn send(&self, item: T, bytes: usize) -> Result<(), ()> {
        let room = self.cost(bytes);
        self.room.acquire_many(room).await.map_err(drop)?.forget();
        self.tx.send(Queued { item, room }).map_err(drop)
    }

    /// Queues `item` of `bytes` if there is room for it now.
    pub(crate) fn try_send(&self, item: T, bytes: usize) -> Result<(), Full> {
        let room = self.cost(bytes);
        match self.room.try_acquire_many(room) {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::NoPermits) => return Err(Full::NoRoom),
            Err(TryAcquireError::Closed) => return Err(Full::Closed),
        }
        self.tx
            .send(Queued { item, room })
            .map_err(|_| Full::Closed)
    }
}

/// Copies `events` into `out` until the host ends the stream, `cancelled` completes, or `out`
/// has no room (then the `lagged` item telling the client from which seq to re-read is
/// returned, to be queued with [`Outbox::send`] once the host's stream is dropped: a lagging
/// client's events stop piling up behind it while its last items wait for room). `render`
/// turns a stream item into what is queued and its size in bytes.
pub(crate) async fn forward<T>(
    mut events: EventStream,
    out: &Outbox<T>,
    cancelled: impl Future<Output = ()>,
    mut render: impl FnMut(StreamItem) -> (T, usize),
) -> (StreamEnd, Option<(T, usize)>) {
    tokio::pin!(cancelled);
    loop {
        let item = tokio::select! {
            () = &mut cancelled => return (StreamEnd::Unsubscribed, None),
            item = events.next() => item,
        };
        let Some(item) = item else {
            return (StreamEnd::Closed, None);
        };
        let resume = item.resume_seq();
        if matches!(item, StreamItem::Lagged { .. }) {
            return (StreamEnd::Lagged, Some(render(item)));
        }
        let (rendered, bytes) = render(item);
        match (out.try_send(rendered, bytes), resume) {
            (Ok(()), _) => {}
            // Another fleet member's event on a stream of every session is live only: without
            // room it is left out (its `seq` is that member's, not one to resume this stream at).
            (Err(Full::NoRoom), None) => {}
            (Err(Full::NoRoom), Some(next_seq)) => {
                return (
                    StreamEnd::Lagged,
                    Some(render(StreamItem::Lagged { next_seq })),
                );
            }
            (Err(Full::Closed), _) => return (StreamEnd::Closed, None),
        }
    }
}

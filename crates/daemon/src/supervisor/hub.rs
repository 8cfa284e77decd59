//! The daemon's event stream: one counter numbering every published event (so `seq` order is
//! publish order, daemon-wide and gapless), a bounded ring of recent envelopes, and one bounded
//! queue per subscriber.
//!
//! A subscriber never blocks the daemon: publishing only `try_send`s, always keeping one slot
//! free for the [`StreamItem::Lagged`] that ends a subscriber whose queue filled up. A
//! subscriber that asks for history is first *catching up*: its replay (the logs, then the
//! ring) is fed by its own task, while what is published meanwhile waits in a bounded pending
//! list; once both are delivered the subscriber goes live.

use std::collections::VecDeque;
use std::sync::Arc;

use intendant_protocol::daemon::{Envelope, StreamItem};
use tokio::sync::mpsc;

/// Envelopes kept in memory for subscribers asking for recent history.
pub const RING_CAPACITY: usize = 4096;
/// The most bytes of envelopes (as JSON) the ring keeps, however few they are: past it the
/// oldest go, and a subscriber asking for them reads them from the logs.
pub const RING_BYTES: usize = 16 << 20;
/// Items one subscriber may have queued (and, while catching up, pending) before it lags.
pub const SUBSCRIBER_CAPACITY: usize = 1024;
/// The most bytes of envelopes a catching-up subscriber keeps pending, however few they are (a
/// larger one alone): the one that does not fit makes it lag (its reader re-reads from that
/// seq).
pub const PENDING_BYTES: usize = 256 << 10;

/// What a subscriber wants: one session's events or everyone's.
pub(crate) type Filter = Option<String>;

fn matches(filter: &Filter, env: &Envelope) -> bool {
    filter.as_ref().is_none_or(|s| *s == env.session_id)
}

enum Mode {
    Live,
    /// Replay still being fed; published envelopes wait here.
    CatchingUp {
        /// Each with its size in bytes of JSON.
        pending: VecDeque<(Arc<Envelope>, usize)>,
        /// What `pending` holds, in bytes of JSON.
        pending_bytes: usize,
        /// The first seq that did not fit in `pending`.
        lagged_at: Option<u64>,
    },
}

struct Subscriber {
    id: u64,
    filter: Filter,
    tx: mpsc::Sender<StreamItem>,
    mode: Mode,
}

/// The counter, the ring and the subscribers (kept under the supervisor's one lock).
pub(crate) struct Hub {
    next_seq: u64,
    /// Shared with the catching-up subscribers replaying it, each of which copies an envelope
    /// only as it sends it; each with its size in bytes of JSON.
    ring: VecDeque<(Arc<Envelope>, usize)>,
    /// What the ring holds, in bytes of JSON.
    ring_bytes: usize,
    ring_capacity: usize,
    ring_max_bytes: usize,
    subscriber_capacity: usize,
    pending_max_bytes: usize,
    subscribers: Vec<Subscriber>,
    next_subscriber: u64,
}

/// What a catching-up subscriber must replay: everything matching after `after` up to the ring
/// (from the logs, below `ring_first`), then `ring`.
pub(crate) struct Catchup {
    pub(crate) subscriber: u64,
    pub(crate) ring_first: u64,
    pub(crate) ring: Vec<Arc<Envelope>>,
}

/// The next thing a catching-up subscriber's task should do.
pub(crate) enum Drain {
    /// Deliver this pending envelope.
    Deliver(Arc<Envelope>),
    /// Deliver `Lagged { next_seq }` and end.
    Lagged(u64),
    /// Nothing pending: the subscriber is live now.
    Live,
    /// The subscriber was dropped (its reader went away, or the daemon shut down).
    Gone,
}

impl Hub {
    /// A hub whose first event gets `first_seq`.
    pub(crate) fn new(first_seq: u64, ring_capacity: usize, subscriber_capacity: usize) -> Hub {
        Hub {
            next_seq: first_seq.max(1),
            ring: VecDeque::new(),
            ring_bytes: 0,
            ring_capacity: ring_capacity.max(1),
            ring_max_bytes: RING_BYTES,
            subscriber_capacity: subscriber_capacity.max(2),
            pending_max_bytes: PENDING_BYTES,
            subscribers: Vec::new(),
            next_subscriber: 1,
        }
    }

    /// The seq the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A subscriber queue, sized so one slot always stays free for `Lagged`.
    pub(crate) fn channel(&self) -> (mpsc::Sender<StreamItem>, mpsc::Receiver<StreamItem>) {
        mpsc::channel(self.subscriber_capacity)
    }

    /// Numbers `event`'s envelope (`make` gets its seq and runs before any subscriber sees
    /// it), keeps it in the ring and hands it to every subscriber.
    pub(crate) fn publish(&mut self, make: impl FnOnce(u64) -> Envelope) -> Arc<Envelope> {
        let env = Arc::new(make(self.next_seq));
        self.next_seq += 1;
        let bytes = env.json_bytes();
        let (cap, max_bytes) = (self.subscriber_capacity, self.pending_max_bytes);
        self.subscribers.retain_mut(|sub| {
            if !matches(&sub.filter, &env) {
                return !sub.tx.is_closed();
            }
            match &mut sub.mode {
                Mode::Live => deliver_live(&sub.tx, &env),
                Mode::CatchingUp {
                    pending,
                    pending_bytes,
                    lagged_at,
                } => {
                    if lagged_at.is_none() {
                        // A first event larger than the bound waits alone (it is shared with
                        // the ring and the other subscribers, not copied).
                        let room = pending.is_empty() || *pending_bytes + bytes <= max_bytes;
                        if pending.len() < cap && room {
                            pending.push_back((env.clone(), bytes));
                            *pending_bytes += bytes;
                        } else {
                            *lagged_at = Some(env.seq);
                        }
                    }
                    !sub.tx.is_closed()
                }
            }
        });
        self.ring.push_back((env.clone(), bytes));
        self.ring_bytes += bytes;
        while self.ring.len() > self.ring_capacity
            || (self.ring_bytes > self.ring_max_bytes && self.ring.len() > 1)
        {
            if let Some((_, gone)) = self.ring.pop_front() {
                self.ring_bytes -= gone;
            }
        }
        env
    }

    /// A live subscriber of what comes from now on.
    pub(crate) fn subscribe_live(&mut self, filter: Filter, tx: mpsc::Sender<StreamItem>) {
        let id = self.take_id();
        self.add(Subscriber {
            id,
            filter,
            tx,
            mode: Mode::Live,
        });
    }

    /// A catching-up subscriber of everything after `after`.
    pub(crate) fn subscribe_from(
        &mut self,
        filter: Filter,
        after: u64,
        tx: mpsc::Sender<StreamItem>,
    ) -> Catchup {
        let ring_first = self.ring.front().map_or(self.next_seq, |(e, _)| e.seq);
        let ring = self
            .ring
            .iter()
            .map(|(e, _)| e)
            .filter(|e| e.seq > after && matches(&filter, e))
            .cloned()
            .collect();
        let id = self.take_id();
        self.add(Subscriber {
            id,
            filter,
            tx,
            mode: Mode::CatchingUp {
                pending: VecDeque::new(),
                pending_bytes: 0,
                lagged_at: None,
            },
        });
        Catchup {
            subscriber: id,
            ring_first,
            ring,
        }
    }

    /// The next step of catching-up subscriber `id`; [`Drain::Live`] and [`Drain::Lagged`]
    /// settle it (live, or removed).
    pub(crate) fn drain(&mut self, id: u64) -> Drain {
        let Some(pos) = self.subscribers.iter().position(|s| s.id == id) else {
            return Drain::Gone;
        };
        let sub = &mut self.subscribers[pos];
        let step = match &mut sub.mode {
            Mode::Live => Drain::Live,
            Mode::CatchingUp {
                pending,
                pending_bytes,
                lagged_at,
            } => match (pending.pop_front(), *lagged_at) {
                (Some((env, bytes)), _) => {
                    *pending_bytes -= bytes;
                    Drain::Deliver(env)
                }
                (None, Some(seq)) => Drain::Lagged(seq),
                (None, None) => Drain::Live,
            },
        };
        match &step {
            Drain::Live => sub.mode = Mode::Live,
            Drain::Lagged(_) => {
                self.subscribers.remove(pos);
            }
            Drain::Deliver(_) | Drain::Gone => {}
        }
        step
    }

    /// Drops subscriber `id` (its reader went away).
    pub(crate) fn unsubscribe(&mut self, id: u64) {
        self.subscribers.retain(|s| s.id != id);
    }

    /// Ends every subscription (at shutdown): their streams end after what is queued.
    pub(crate) fn close(&mut self) {
        self.subscribers.clear();
    }

    /// Adds `sub`, dropping first every subscriber whose reader went away. A publish drops
    /// them too, but an idle daemon publishes nothing: without this a client subscribing and
    /// unsubscribing in a loop grew it by each stream's queue until the next event (700 MiB in
    /// two seconds). So the hub never holds more than the streams open at its last
    /// subscription, which the client limits bound.
    fn add(&mut self, sub: Subscriber) {
        self.subscribers.retain(|s| !s.tx.is_closed());
        self.subscribers.push(sub);
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_subscriber;
        self.next_subscriber += 1;
        id
    }
}

/// Hands `env` to a live subscriber; `false` once the subscriber is gone (closed, or lagged:
/// its queue had only the slot kept for `Lagged` left).
fn deliver_live(tx: &mpsc::Sender<StreamItem>, env: &Arc<Envelope>) -> bool {
    if tx.capacity() > 1 {
        tx.try_send(StreamItem::Event(env.clone())).is_ok()
    } else {
        let _ = tx.try_send(StreamItem::Lagged { next_seq: env.seq });
        false
    }
}

/// Sends `item` from a catching-up subscriber's own task, waiting for room but always leaving
/// one slot free (for a `Lagged` once the subscriber is live). `false` once the reader is gone.
pub(crate) async fn send_keeping_a_slot(tx: &mpsc::Sender<StreamItem>, item: StreamItem) -> bool {
    match tx.reserve_many(2).await {
        Ok(mut permits) => match permits.next() {
            Some(permit) => {
                permit.send(item);
                true
            }
            None => false,
        },
        Err(_) => false,
    }
}

/// Sends a catching-up subscriber's history `items` from its own task once its queue is empty,
/// as many at a time as leave one slot free: what a replay has queued ahead of its reader is
/// one step's, however large its events, not a queue's worth (1024 events of a megabyte each
/// is a gigabyte). `false` once the reader is gone.
pub(crate) async fn send_when_drained(
    tx: &mpsc::Sender<StreamItem>,
    items: impl IntoIterator<Item = Arc<Envelope>>,
) -> bool {
    let capacity = tx.max_capacity();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let Ok(permits) = tx.reserve_many(capacity).await else {
            return false;
        };
        for (permit, env) in permits
            .take(capacity.saturating_sub(1).max(1))
            .zip(&mut items)
        {
            permit.send(StreamItem::Event(env));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::events::AppEvent;

    /// An envelope of `event` for `session`, numbered by the hub.
    fn envelope_of(session: &str, event: AppEvent) -> impl FnOnce(u64) -> Envelope {
        let session = session.to_owned();
        move |seq| Envelope {
            member: None,
            record_end: None,
            seq,
            session_id: session,
            ts: String::new(),
            event,
        }
    }

    fn envelope(session: &str) -> impl FnOnce(u64) -> Envelope {
        envelope_of(session, AppEvent::TurnStarted { turn: 1 })
    }

    fn seq(item: StreamItem) -> u64 {
        match item {
            StreamItem::Event(e) => e.seq,
            StreamItem::Lagged { next_seq } => panic!("lagged at {next_seq}"),
        }
    }

    #[test]
    fn streams_whose_readers_went_away_are_not_kept_while_nothing_is_published() {
        let mut hub = Hub::new(1, 100, 4);
        for i in 0..10_000 {
            let (tx, rx) = hub.channel();
            if i % 2 == 0 {
                hub.subscribe_live(None, tx);
            } else {
                hub.subscribe_from(Some("s".into()), 0, tx);
            }
            drop(rx);
        }
        assert_eq!(
            hub.subscribers.len(),
            1,
            "only the last, its reader just gone"
        );
        let (tx, _kept) = hub.channel();
        hub.subscribe_live(None, tx);
        let (tx, _also_kept) = hub.channel();
        hub.subscribe_live(None, tx);
        assert_eq!(hub.subscribers.len(), 2, "the open ones stay");
    }

    #[tokio::test]
    async fn a_full_queue_lags_and_ends_without_blocking() {
        let mut hub = Hub::new(1, 100, 4);
        let (tx, mut rx) = hub.channel();
        hub.subscribe_live(None, tx);
        for _ in 0..10 {
            hub.publish(envelope("a"));
        }
        // Three events fit (one slot stays for Lagged), then Lagged at the fourth.
        assert_eq!(seq(rx.recv().await.unwrap()), 1);
        assert_eq!(seq(rx.recv().await.unwrap()), 2);
        assert_eq!(seq(rx.recv().await.unwrap()), 3);
        assert_eq!(rx.recv().await, Some(StreamItem::Lagged { next_seq: 4 }));
        assert_eq!(rx.recv().await, None, "the stream ends after Lagged");
        assert_eq!(hub.next_seq(), 11);
    }

    #[tokio::test]
    async fn catching_up_keeps_what_is_published_meanwhile_in_order() {
        let mut hub = Hub::new(1, 3, 8);
        for s in ["a", "b", "a", "a"] {
            hub.publish(envelope(s));
        }
        let (tx, mut rx) = hub.channel();
        let catchup = hub.subscribe_from(Some("a".into()), 0, tx.clone());
        // The ring kept seqs 2..=4; of session a: 3 and 4. Seq 1 is the logs' part.
        assert_eq!(catchup.ring_first, 2);
        let ring: Vec<u64> = catchup.ring.iter().map(|e| e.seq).collect();
        assert_eq!(ring, [3, 4]);
        hub.publish(envelope("a"));
        hub.publish(envelope("b"));
        for env in catchup.ring {
            assert!(send_keeping_a_slot(&tx, StreamItem::Event(env)).await);
        }
        while let Drain::Deliver(env) = hub.drain(catchup.subscriber) {
            assert!(send_keeping_a_slot(&tx, StreamItem::Event(env)).await);
        }
        hub.publish(envelope("a"));
        let got: Vec<u64> = (0..4).map(|_| seq(rx.try_recv().unwrap())).collect();
        assert_eq!(got, [3, 4, 5, 7]);
    }

    #[tokio::test]
    async fn history_is_sent_once_the_reader_has_taken_what_was_sent_before() {
        let hub = Hub::new(1, 8, 4);
        let (tx, mut rx) = hub.channel();
        let history: Vec<Arc<Envelope>> = (1..=7).map(|n| Arc::new(envelope("a")(n))).collect();
        let sender = tokio::spawn(async move { send_when_drained(&tx, history).await });
        // Three at a time (a slot kept free), the next three only once all three are taken.
        let mut got = Vec::new();
        for want in [vec![1, 2, 3], vec![4, 5, 6], vec![7]] {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let mut step = Vec::new();
            while let Ok(item) = rx.try_recv() {
                step.push(seq(item));
            }
            assert_eq!(step, want);
            got.extend(step);
        }
        assert!(sender.await.unwrap());
        assert_eq!(got, (1..=7).collect::<Vec<u64>>());
        // A reader gone: the sender stops.
        let (tx, rx) = hub.channel();
        drop(rx);
        assert!(!send_when_drained(&tx, vec![Arc::new(envelope("a")(1))]).await);
    }

    /// What catching-up subscriber `id` is given until it lags: each delivered seq, then 1000
    /// plus the seq it lagged at.
    fn drained_until_lagged(hub: &mut Hub, id: u64) -> Vec<u64> {
        let mut steps = Vec::new();
        loop {
            match hub.drain(id) {
                Drain::Deliver(env) => steps.push(env.seq),
                Drain::Lagged(next) => {
                    steps.push(1000 + next);
                    return steps;
                }
                Drain::Live | Drain::Gone => panic!("should lag"),
            }
        }
    }

    fn big(session: &str, bytes: usize) -> impl FnOnce(u64) -> Envelope {
        let message = "w".repeat(bytes);
        envelope_of(session, AppEvent::Warning { message })
    }

    #[test]
    fn the_ring_keeps_its_bytes_bound_however_few_its_events() {
        let mut hub = Hub::new(1, 100, 8);
        hub.ring_max_bytes = 10_000;
        for _ in 0..10 {
            hub.publish(big("a", 3_000));
        }
        // Three envelopes of some 3 KB fit in 10 KB: the ring starts at the eighth.
        let (tx, _rx) = hub.channel();
        let catchup = hub.subscribe_from(None, 0, tx);
        assert_eq!(catchup.ring_first, 8);
        assert_eq!(catchup.ring.len(), 3);
        assert!(hub.ring_bytes <= 10_000, "{}", hub.ring_bytes);
        let held: usize = hub.ring.iter().map(|(_, b)| b).sum();
        assert_eq!(held, hub.ring_bytes);
        // One envelope larger than the bound is kept alone (the newest is always there).
        hub.publish(big("a", 20_000));
        assert_eq!(hub.ring.len(), 1);
        assert_eq!(hub.ring.front().map(|(e, _)| e.seq), Some(11));
        // Small ones again: the large one goes once they need its room.
        for _ in 0..5 {
            hub.publish(envelope("a"));
        }
        assert_eq!(hub.ring.len(), 5);
        assert!(hub.ring_bytes < 10_000);
    }

    #[test]
    fn a_catching_up_subscriber_lags_when_its_pending_bytes_pass_the_bound() {
        let mut hub = Hub::new(1, 100, 1000);
        hub.pending_max_bytes = 10_000;
        let (tx, _rx) = hub.channel();
        let catchup = hub.subscribe_from(None, 0, tx);
        for _ in 0..5 {
            hub.publish(big("a", 3_000));
        }
        let steps = drained_until_lagged(&mut hub, catchup.subscriber);
        // Three fit in 10 KB; the fourth is where its reader re-reads from.
        assert_eq!(steps, [1, 2, 3, 1004]);
        // What was taken from pending gives its room back.
        let (tx, _rx) = hub.channel();
        let catchup = hub.subscribe_from(None, 5, tx);
        for round in 0..4 {
            hub.publish(big("a", 3_000));
            hub.publish(big("a", 3_000));
            for _ in 0..2 {
                assert!(
                    matches!(hub.drain(catchup.subscriber), Drain::Deliver(_)),
                    "round {round}"
                );
            }
        }
        assert!(matches!(hub.drain(catchup.subscriber), Drain::Live));
        // A first event larger than the bound waits alone; the next one makes it lag.
        let (tx, _rx) = hub.channel();
        let catchup = hub.subscribe_from(None, 13, tx);
        hub.publish(big("a", 20_000));
        hub.publish(envelope("a"));
        assert_eq!(
            drained_until_lagged(&mut hub, catchup.subscriber),
            [14, 1015]
        );
    }

    #[test]
    fn a_catching_up_subscriber_that_overflows_lags_after_its_pending_events() {
        let mut hub = Hub::new(10, 100, 2);
        let (tx, _rx) = hub.channel();
        let catchup = hub.subscribe_from(None, 0, tx);
        for _ in 0..3 {
            hub.publish(envelope("a"));
        }
        let steps = drained_until_lagged(&mut hub, catchup.subscriber);
        assert_eq!(steps, [10, 11, 1012]);
    }
}

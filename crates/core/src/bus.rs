//! The EventBus: one bounded broadcast ring of [`AppEvent`]s for best-effort renderers, plus two
//! lossless lanes fed at the emit point for consumers that must never miss an event.
//!
//! The ring drops the oldest events when a subscriber lags; that is fine for a spinner and wrong
//! for an approval click or the session log, which is why intents and the lifecycle subset are
//! also pushed into unbounded per-subscriber queues. Those subsets are low-volume by construction
//! (no deltas), so the queues stay small. Frontends read both through [`FrontendReceiver`]: the
//! ring's order and deltas, with the lifecycle lane filling in whatever the ring dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_protocol::events::{AppEvent, ControlMsg};
use tokio::sync::{broadcast, mpsc};

/// Capacity of the broadcast ring (events a lagging subscriber may fall behind before it loses
/// the oldest ones).
pub const BUS_CAPACITY: usize = 4096;

/// The shared event bus. Cheap to clone; every clone is the same bus.
#[derive(Clone)]
pub struct EventBus {
    ring: broadcast::Sender<AppEvent>,
    lanes: Arc<Mutex<Lanes>>,
}

/// A synchronous observer of every event (see [`EventBus::tap`]).
pub type Tap = Arc<dyn Fn(&AppEvent) + Send + Sync>;

#[derive(Default)]
struct Lanes {
    intents: Vec<mpsc::UnboundedSender<ControlMsg>>,
    /// Whether [`EventBus::close_intents`] was called: a lane subscribed later starts ended.
    intents_closed: bool,
    session_log: Vec<mpsc::UnboundedSender<AppEvent>>,
    taps: Vec<Tap>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> EventBus {
        EventBus::with_capacity(BUS_CAPACITY)
    }

    /// A bus whose ring holds `capacity` events (at least 1). The ring is allocated whole up
    /// front, so a process holding many buses nobody renders from (the daemon's sessions, read
    /// through the supervisor's own ring) gives them a small one.
    pub fn with_capacity(capacity: usize) -> EventBus {
        let (ring, _) = broadcast::channel(capacity.max(1));
        EventBus {
            ring,
            lanes: Arc::new(Mutex::new(Lanes::default())),
        }
    }

    /// Publishes `event` to the ring and to every lossless lane it belongs to.
    pub fn emit(&self, event: AppEvent) {
        {
            let mut lanes = self.lock();
            if let AppEvent::ControlCommand(msg) = &event {
                lanes.intents.retain(|tx| tx.send(msg.clone()).is_ok());
            }
            if event.is_lifecycle() {
                lanes
                    .session_log
                    .retain(|tx| tx.send(event.clone()).is_ok());
            }
            for tap in &lanes.taps {
                tap(&event);
            }
        }
        // No subscriber is not an error: a headless run may have nobody watching the ring.
        let _ = self.ring.send(event);
    }

    /// Publishes a user intent (as [`AppEvent::ControlCommand`]).
    pub fn send_intent(&self, msg: ControlMsg) {
        self.emit(AppEvent::ControlCommand(msg));
    }

    /// A best-effort receiver of every event emitted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<AppEvent> {
        self.ring.subscribe()
    }

    /// A lossless receiver of every intent sent from now on; already ended (`None` at once)
    /// once [`EventBus::close_intents`] was called, so a late subscriber never waits for a human
    /// who is gone.
    pub fn subscribe_intents(&self) -> mpsc::UnboundedReceiver<ControlMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut lanes = self.lock();
        if !lanes.intents_closed {
            lanes.intents.push(tx);
        }
        rx
    }

    /// A lossless receiver of every lifecycle event ([`AppEvent::is_lifecycle`]) from now on.
    pub fn subscribe_session_log(&self) -> mpsc::UnboundedReceiver<AppEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().session_log.push(tx);
        rx
    }

    /// A frontend's receiver: every event in emit order, the lifecycle subset lossless (see
    /// [`FrontendReceiver`]).
    pub fn subscribe_frontend(&self) -> FrontendReceiver {
        let (tx, lane) = mpsc::unbounded_channel();
        // Both under the lanes lock, so no event can reach one and miss the other for good.
        let mut lanes = self.lock();
        lanes.session_log.push(tx);
        let ring = self.ring.subscribe();
        drop(lanes);
        FrontendReceiver {
            ring,
            lane,
            unmatched: VecDeque::new(),
            ready: VecDeque::new(),
            lagged: 0,
        }
    }

    /// Calls `tap` with every event emitted from now on, deltas included, synchronously at the
    /// emit point and in emit order (the daemon numbers events there). The tap must be quick
    /// and never block, and must not emit on this bus.
    pub fn tap(&self, tap: Tap) {
        self.lock().taps.push(tap);
    }

    /// Ends every intents lane: receivers get what was already sent, then `None`. Frontends
    /// call this when their input ends (stdin EOF), so a loop waiting for a human stops waiting.
    pub fn close_intents(&self) {
        let mut lanes = self.lock();
        lanes.intents.clear();
        lanes.intents_closed = true;
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        // A panic while holding the lock cannot leave the sender lists inconsistent.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a frontend renders: the ring for order and streaming deltas, backed by a lossless
/// lifecycle lane so an approval request or a question is never lost when the renderer falls
/// behind (only deltas can be, and [`FrontendReceiver::take_lagged`] says so).
///
/// Every lifecycle event reaches the lane before the ring (see [`EventBus::emit`]), so when the
/// ring delivers one, its lane copy is already queued; lane events queued before that copy are
/// the ones the ring dropped, and they are delivered first, in order.
pub struct FrontendReceiver {
    ring: broadcast::Receiver<AppEvent>,
    lane: mpsc::UnboundedReceiver<AppEvent>,
    /// Lane events not yet matched with their ring copy.
    unmatched: VecDeque<AppEvent>,
    /// Events to hand out before reading the ring again.
    ready: VecDeque<AppEvent>,
    /// Ring events skipped since the last [`FrontendReceiver::take_lagged`].
    lagged: u64,
}

impl FrontendReceiver {
    /// The next event, `None` once the bus is gone and everything was delivered.
    /// Cancel-safe: the only await is the ring's own cancel-safe `recv`.
    pub async fn recv(&mut self) -> Option<AppEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            match self.ring.recv().await {
                Ok(event) if !event.is_lifecycle() => return Some(event),
                Ok(event) => {
                    while let Ok(e) = self.lane.try_recv() {
                        self.unmatched.push_back(e);
                    }
                    match self.unmatched.iter().position(|e| *e == event) {
                        Some(pos) => self.ready.extend(self.unmatched.drain(..=pos)),
                        // Emitted between the two subscriptions: only the ring has it.
                        None => self.ready.push_back(event),
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => self.lagged += n,
                Err(broadcast::error::RecvError::Closed) => {
                    while let Ok(e) = self.lane.try_recv() {
                        self.unmatched.push_back(e);
                    }
                    self.ready.extend(self.unmatched.drain(..));
                    if self.ready.is_empty() {
                        return None;
                    }
                }
            }
        }
    }

    /// How many ring events were skipped since the last call (their lifecycle events were
    /// still delivered; what is lost is streamed text only).
    pub fn take_lagged(&mut self) -> u64 {
        std::mem::take(&mut self.lagged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ring_and_lanes_receive() {
        let bus = EventBus::new();
        let mut ring = bus.subscribe();
        let mut log = bus.subscribe_session_log();
        let mut intents = bus.subscribe_intents();
        bus.emit(AppEvent::ModelResponseDelta { text: "d".into() });
        bus.emit(AppEvent::TurnStarted { turn: 1 });
        bus.send_intent(ControlMsg::Approve { id: 2 });

        assert_eq!(ring.recv().await.unwrap().name(), "model_response_delta");
        assert_eq!(ring.recv().await.unwrap().name(), "turn_started");
        assert_eq!(ring.recv().await.unwrap().name(), "control_command");
        // Deltas are not lifecycle; the intent is.
        assert_eq!(log.recv().await.unwrap().name(), "turn_started");
        assert_eq!(log.recv().await.unwrap().name(), "control_command");
        assert_eq!(intents.recv().await.unwrap(), ControlMsg::Approve { id: 2 });
    }

    #[tokio::test]
    async fn lanes_are_lossless_when_the_ring_lags() {
        let bus = EventBus::new();
        let mut ring = bus.subscribe();
        let mut intents = bus.subscribe_intents();
        for i in 0..(BUS_CAPACITY as u32 + 10) {
            bus.emit(AppEvent::ModelResponseDelta {
                text: i.to_string(),
            });
        }
        bus.send_intent(ControlMsg::Skip { id: 9 });
        assert!(matches!(
            ring.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        assert_eq!(intents.recv().await.unwrap(), ControlMsg::Skip { id: 9 });
    }

    #[tokio::test]
    async fn a_small_ring_lags_sooner_and_its_lanes_lose_nothing() {
        let bus = EventBus::with_capacity(2);
        let mut ring = bus.subscribe();
        let mut log = bus.subscribe_session_log();
        for turn in 1..=3 {
            bus.emit(AppEvent::TurnStarted { turn });
        }
        assert!(matches!(
            ring.recv().await,
            Err(broadcast::error::RecvError::Lagged(1))
        ));
        for turn in 1..=3 {
            assert_eq!(log.recv().await.unwrap(), AppEvent::TurnStarted { turn });
        }
    }

    #[tokio::test]
    async fn closing_intents_ends_the_lane_after_pending_ones() {
        let bus = EventBus::new();
        let mut intents = bus.subscribe_intents();
        bus.send_intent(ControlMsg::Input { text: "x".into() });
        bus.close_intents();
        bus.send_intent(ControlMsg::Input {
            text: "late".into(),
        });
        assert_eq!(
            intents.recv().await,
            Some(ControlMsg::Input { text: "x".into() })
        );
        assert_eq!(intents.recv().await, None);
        // A lane subscribed after the close (the egress proxy's, attached when the loop starts
        // behind a closed stdin) starts ended instead of waiting for nobody.
        let mut late = bus.subscribe_intents();
        bus.send_intent(ControlMsg::Approve { id: 1 });
        assert_eq!(late.recv().await, None);
    }

    #[tokio::test]
    async fn a_frontend_gets_every_event_in_order() {
        let bus = EventBus::new();
        let mut front = bus.subscribe_frontend();
        bus.emit(AppEvent::TurnStarted { turn: 1 });
        bus.emit(AppEvent::ModelResponseDelta { text: "a".into() });
        bus.send_intent(ControlMsg::Approve { id: 1 });
        bus.emit(AppEvent::TurnStarted { turn: 1 });
        let names: Vec<&str> = [
            front.recv().await.unwrap(),
            front.recv().await.unwrap(),
            front.recv().await.unwrap(),
            front.recv().await.unwrap(),
        ]
        .iter()
        .map(AppEvent::name)
        .collect();
        assert_eq!(
            names,
            [
                "turn_started",
                "model_response_delta",
                "control_command",
                "turn_started"
            ]
        );
        assert_eq!(front.take_lagged(), 0);
        drop(bus);
        assert_eq!(front.recv().await, None);
    }

    #[tokio::test]
    async fn a_lagging_frontend_loses_deltas_but_no_lifecycle_event() {
        let bus = EventBus::new();
        let mut front = bus.subscribe_frontend();
        // Far more than the ring holds, with lifecycle events spread through the flood.
        let total = BUS_CAPACITY as u32 * 3;
        for i in 0..total {
            if i % 1000 == 0 {
                bus.emit(AppEvent::TurnStarted { turn: i });
            } else {
                bus.emit(AppEvent::ModelResponseDelta {
                    text: i.to_string(),
                });
            }
        }
        bus.emit(AppEvent::Done {
            message: "end".into(),
        });
        let mut turns = Vec::new();
        let mut deltas = 0;
        loop {
            match front.recv().await.unwrap() {
                AppEvent::TurnStarted { turn } => turns.push(turn),
                AppEvent::ModelResponseDelta { .. } => deltas += 1,
                AppEvent::Done { .. } => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        let want: Vec<u32> = (0..total).filter(|i| i % 1000 == 0).collect();
        assert_eq!(turns, want, "every lifecycle event, once, in order");
        assert!(deltas < total as usize - want.len(), "the ring lagged");
        assert!(front.take_lagged() > 0);
        assert_eq!(front.take_lagged(), 0);
    }

    #[test]
    fn a_tap_sees_every_event_in_emit_order() {
        let bus = EventBus::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        bus.tap(Arc::new(move |e: &AppEvent| {
            into.lock().unwrap().push(e.name())
        }));
        bus.emit(AppEvent::ModelResponseDelta { text: "d".into() });
        bus.send_intent(ControlMsg::Approve { id: 1 });
        assert_eq!(
            *seen.lock().unwrap(),
            ["model_response_delta", "control_command"]
        );
    }

    #[test]
    fn dropped_lane_is_pruned() {
        let bus = EventBus::new();
        drop(bus.subscribe_intents());
        bus.send_intent(ControlMsg::Input { text: "x".into() });
        assert!(bus.lock().intents.is_empty());
    }
}

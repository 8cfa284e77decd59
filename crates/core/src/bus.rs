//! The EventBus: one bounded broadcast ring of [`AppEvent`]s for best-effort renderers, plus two
//! lossless lanes fed at the emit point for consumers that must never miss an event.
//!
//! The ring drops the oldest events when a subscriber lags; that is fine for a spinner and wrong
//! for an approval click or the session log, which is why intents and the lifecycle subset are
//! also pushed into unbounded per-subscriber queues. Those subsets are low-volume by construction
//! (no deltas), so the queues stay small.

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

#[derive(Default)]
struct Lanes {
    intents: Vec<mpsc::UnboundedSender<ControlMsg>>,
    session_log: Vec<mpsc::UnboundedSender<AppEvent>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> EventBus {
        let (ring, _) = broadcast::channel(BUS_CAPACITY);
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

    /// A lossless receiver of every intent sent from now on.
    pub fn subscribe_intents(&self) -> mpsc::UnboundedReceiver<ControlMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().intents.push(tx);
        rx
    }

    /// A lossless receiver of every lifecycle event ([`AppEvent::is_lifecycle`]) from now on.
    pub fn subscribe_session_log(&self) -> mpsc::UnboundedReceiver<AppEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().session_log.push(tx);
        rx
    }

    /// Ends every intents lane: receivers get what was already sent, then `None`. Frontends
    /// call this when their input ends (stdin EOF), so a loop waiting for a human stops waiting.
    pub fn close_intents(&self) {
        self.lock().intents.clear();
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        // A panic while holding the lock cannot leave the sender lists inconsistent.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
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
    }

    #[test]
    fn dropped_lane_is_pruned() {
        let bus = EventBus::new();
        drop(bus.subscribe_intents());
        bus.send_intent(ControlMsg::Input { text: "x".into() });
        assert!(bus.lock().intents.is_empty());
    }
}

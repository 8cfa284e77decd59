//! [`IntentInbox`]: the agent loop's view of the intents lane, able to wait for one kind of
//! intent while keeping the others for later.
//!
//! A follow-up typed while an approval is pending must not be lost, and must not be mistaken for
//! the approval answer, so a selective wait buffers what it does not want.

use std::collections::VecDeque;

use intendant_protocol::events::ControlMsg;
use tokio::sync::mpsc;

use crate::bus::EventBus;

/// The intents lane plus a buffer of intents received but not yet wanted.
pub struct IntentInbox {
    rx: mpsc::UnboundedReceiver<ControlMsg>,
    buffered: VecDeque<ControlMsg>,
}

impl IntentInbox {
    /// Subscribes to `bus`'s intents lane.
    pub fn new(bus: &EventBus) -> IntentInbox {
        IntentInbox::from_receiver(bus.subscribe_intents())
    }

    /// Wraps an existing intents receiver.
    pub fn from_receiver(rx: mpsc::UnboundedReceiver<ControlMsg>) -> IntentInbox {
        IntentInbox {
            rx,
            buffered: VecDeque::new(),
        }
    }

    /// The next intent matching `pred` (buffered ones first, oldest first); non-matching intents
    /// are kept. `None` once the lane is closed and nothing buffered matches.
    pub async fn next_where(&mut self, pred: impl Fn(&ControlMsg) -> bool) -> Option<ControlMsg> {
        if let Some(pos) = self.buffered.iter().position(&pred) {
            return self.buffered.remove(pos);
        }
        while let Some(msg) = self.rx.recv().await {
            if pred(&msg) {
                return Some(msg);
            }
            self.buffered.push_back(msg);
        }
        None
    }

    /// The next intent of any kind.
    pub async fn next(&mut self) -> Option<ControlMsg> {
        self.next_where(|_| true).await
    }

    /// Moves every already-arrived intent into the buffer without waiting.
    pub fn drain_ready(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            self.buffered.push_back(msg);
        }
    }

    /// Removes and returns the texts of buffered follow-ups (including ones that already
    /// arrived on the lane), in arrival order.
    pub fn take_buffered_follow_ups(&mut self) -> Vec<String> {
        self.drain_ready();
        let mut texts = Vec::new();
        self.buffered.retain(|msg| match msg {
            ControlMsg::FollowUp { text } => {
                texts.push(text.clone());
                false
            }
            ControlMsg::Approve { .. }
            | ControlMsg::Deny { .. }
            | ControlMsg::Skip { .. }
            | ControlMsg::ApproveAll { .. }
            | ControlMsg::Input { .. } => true,
        });
        texts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn selective_wait_buffers_the_rest() {
        let bus = EventBus::new();
        let mut inbox = IntentInbox::new(&bus);
        bus.send_intent(ControlMsg::FollowUp { text: "a".into() });
        bus.send_intent(ControlMsg::Input { text: "x".into() });
        bus.send_intent(ControlMsg::Approve { id: 4 });
        let got = inbox
            .next_where(|m| matches!(m, ControlMsg::Approve { .. }))
            .await;
        assert_eq!(got, Some(ControlMsg::Approve { id: 4 }));
        bus.send_intent(ControlMsg::FollowUp { text: "b".into() });
        assert_eq!(inbox.take_buffered_follow_ups(), vec!["a", "b"]);
        assert_eq!(
            inbox.next().await,
            Some(ControlMsg::Input { text: "x".into() })
        );
    }

    #[tokio::test]
    async fn closed_lane_ends_the_wait() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inbox = IntentInbox::from_receiver(rx);
        tx.send(ControlMsg::Input { text: "x".into() }).unwrap();
        drop(tx);
        let got = inbox
            .next_where(|m| matches!(m, ControlMsg::Deny { .. }))
            .await;
        assert_eq!(got, None);
        assert_eq!(
            inbox.next().await,
            Some(ControlMsg::Input { text: "x".into() })
        );
    }
}

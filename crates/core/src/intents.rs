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

    /// The next intent matching `pred` still to come off the lane; buffered intents are kept
    /// for later but never match. Call [`IntentInbox::drain_ready`] just before showing a
    /// question, then this: an answer typed before the question was shown cannot answer it,
    /// and one sent the moment it was shown is not lost.
    pub async fn next_unbuffered_where(
        &mut self,
        pred: impl Fn(&ControlMsg) -> bool,
    ) -> Option<ControlMsg> {
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

    /// The next follow-up of a session waiting between rounds: the buffered ones joined (blank
    /// line between), else the next one to arrive (plain input counts); `None` once the lane is
    /// closed. Safe to drop and call again.
    pub async fn next_follow_up(&mut self) -> Option<String> {
        let buffered = self.take_buffered_follow_ups();
        if !buffered.is_empty() {
            return Some(buffered.join("\n\n"));
        }
        match self
            .next_where(|m| matches!(m, ControlMsg::FollowUp { .. } | ControlMsg::Input { .. }))
            .await
        {
            Some(ControlMsg::FollowUp { text } | ControlMsg::Input { text }) => Some(text),
            Some(
                ControlMsg::Approve { .. }
                | ControlMsg::Deny { .. }
                | ControlMsg::Skip { .. }
                | ControlMsg::ApproveAll { .. }
                | ControlMsg::AllowHost { .. },
            )
            | None => None,
        }
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
            | ControlMsg::AllowHost { .. }
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
    async fn an_unbuffered_wait_ignores_what_arrived_before_the_drain() {
        let input = |t: &str| ControlMsg::Input { text: t.into() };
        let is_input = |m: &ControlMsg| matches!(m, ControlMsg::Input { .. });
        let bus = EventBus::new();
        let mut inbox = IntentInbox::new(&bus);
        bus.send_intent(input("stale"));
        inbox.drain_ready();
        // Sent after the drain (the question was shown): this one answers.
        bus.send_intent(ControlMsg::Approve { id: 1 });
        bus.send_intent(input("fresh"));
        assert_eq!(
            inbox.next_unbuffered_where(is_input).await,
            Some(input("fresh"))
        );
        // What did not match is kept, in arrival order.
        assert_eq!(inbox.next().await, Some(input("stale")));
        assert_eq!(inbox.next().await, Some(ControlMsg::Approve { id: 1 }));
        // Nothing new before the lane closes: the wait ends empty-handed.
        bus.send_intent(input("old"));
        inbox.drain_ready();
        bus.close_intents();
        assert_eq!(inbox.next_unbuffered_where(is_input).await, None);
        assert_eq!(inbox.next().await, Some(input("old")));
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

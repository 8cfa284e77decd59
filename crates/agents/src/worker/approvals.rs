//! The approval bridge: a worker's approval requests go to the session's [`ApprovalGate`], one
//! at a time, so they show in the same queue and log as the native loop's.
//!
//! The question waits on the intents inbox while the session loop keeps reading the worker, so
//! the gate and the inbox are moved into the pending question and given back with its answer.

use std::collections::VecDeque;

use futures::future::BoxFuture;
use intendant_core::approval::{ApprovalAnswer, ApprovalGate, Denial, ExternalAction};
use intendant_core::bus::EventBus;
use intendant_core::intents::IntentInbox;

type Asked<T> = BoxFuture<'static, (ApprovalGate, IntentInbox, T, ApprovalAnswer)>;

/// The session's gate and inbox, and the worker's questions waiting for them.
pub struct ApprovalQueue<T> {
    session_id: String,
    bus: EventBus,
    idle: Option<(ApprovalGate, IntentInbox)>,
    asking: Option<Asked<T>>,
    waiting: VecDeque<(T, ExternalAction)>,
}

impl<T: Send + 'static> ApprovalQueue<T> {
    /// The queue of session `session_id`.
    pub fn new(
        session_id: &str,
        bus: EventBus,
        gate: ApprovalGate,
        inbox: IntentInbox,
    ) -> ApprovalQueue<T> {
        ApprovalQueue {
            session_id: session_id.to_owned(),
            bus,
            idle: Some((gate, inbox)),
            asking: None,
            waiting: VecDeque::new(),
        }
    }

    /// Queues one question; `ticket` comes back with its answer.
    pub fn ask(&mut self, ticket: T, action: ExternalAction) {
        self.waiting.push_back((ticket, action));
    }

    /// Whether a question is open or queued (the worker is legitimately quiet meanwhile).
    pub fn busy(&self) -> bool {
        self.asking.is_some() || !self.waiting.is_empty()
    }

    /// The next answer. Pending while nothing is asked; safe to drop and call again (the open
    /// question stays open).
    pub async fn next_answer(&mut self) -> (T, ApprovalAnswer) {
        loop {
            if let Some(asking) = self.asking.as_mut() {
                let (gate, inbox, ticket, answer) = asking.await;
                self.asking = None;
                self.idle = Some((gate, inbox));
                return (ticket, answer);
            }
            let next = match (self.idle.take(), self.waiting.pop_front()) {
                (Some(idle), Some(next)) => (idle, next),
                (idle, next) => {
                    self.idle = idle;
                    if let Some(next) = next {
                        self.waiting.push_front(next);
                    }
                    return std::future::pending().await;
                }
            };
            let ((mut gate, mut inbox), (ticket, action)) = next;
            let session_id = self.session_id.clone();
            let bus = self.bus.clone();
            self.asking = Some(Box::pin(async move {
                let answer = gate
                    .review_external(&session_id, &action, &bus, &mut inbox)
                    .await;
                (gate, inbox, ticket, answer)
            }));
        }
    }

    /// Waits until no question is open and drops queued ones (their turn is over), then lends
    /// the gate and inbox (`None` only if a question's future was lost mid-flight).
    pub async fn settle(&mut self) -> Option<(&mut ApprovalGate, &mut IntentInbox)> {
        self.waiting.clear();
        if let Some(asking) = self.asking.take() {
            let (gate, inbox, _, _) = asking.await;
            self.idle = Some((gate, inbox));
        }
        self.idle.as_mut().map(|(gate, inbox)| (gate, inbox))
    }

    /// The most recent denial (once settled).
    pub fn last_denial(&self) -> Option<&Denial> {
        self.idle.as_ref().and_then(|(gate, _)| gate.last_denial())
    }
}

//! The approval bridge: a worker's approval requests go to the session's [`ApprovalGate`], one
//! at a time, so they show in the same queue and log as the native loop's.
//!
//! The question waits on the intents inbox while the session loop keeps reading the worker, so
//! the gate and the inbox are moved into the pending question and given back with its answer.
//! A question ends without a human answer two ways: the turn is interrupted (it is resolved
//! `deny`, and that answer goes to the worker), or the worker takes it back or its turn ends (it
//! is withdrawn: resolved `skip` on the bus, so every queue showing it drops it, and no answer
//! goes to the worker).

use std::collections::VecDeque;

use futures::future::BoxFuture;
use intendant_core::approval::{ApprovalAnswer, ApprovalGate, Denial, ExternalAction};
use intendant_core::bus::EventBus;
use intendant_core::child::CancelToken;
use intendant_core::intents::IntentInbox;

type Asked = BoxFuture<'static, (ApprovalGate, IntentInbox, ApprovalAnswer)>;

/// The question open with the human.
struct Asking<T> {
    answer: Asked,
    ticket: T,
    /// Cancelled when the worker withdraws it.
    withdrawn: CancelToken,
}

/// The session's gate and inbox, and the worker's questions waiting for them.
pub struct ApprovalQueue<T> {
    session_id: String,
    bus: EventBus,
    idle: Option<(ApprovalGate, IntentInbox)>,
    asking: Option<Asking<T>>,
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

    /// Withdraws the questions whose ticket `is` matches (the worker took them back): a queued
    /// one is dropped, the open one is resolved on the bus and its answer never comes back.
    pub fn withdraw(&mut self, is: impl Fn(&T) -> bool) {
        self.waiting.retain(|(ticket, _)| !is(ticket));
        if let Some(asking) = &self.asking
            && is(&asking.ticket)
        {
            asking.withdrawn.cancel();
        }
    }

    /// Whether a question is open or queued (the worker is legitimately quiet meanwhile).
    pub fn busy(&self) -> bool {
        self.asking.is_some() || !self.waiting.is_empty()
    }

    /// The next answer; a question asked now is given up (resolved `deny`) once `turn` is
    /// cancelled. Pending while nothing is asked; safe to drop and call again (the open
    /// question stays open).
    pub async fn next_answer(&mut self, turn: &CancelToken) -> (T, ApprovalAnswer) {
        loop {
            if let Some(asking) = self.asking.as_mut() {
                let (gate, inbox, answer) = asking.answer.as_mut().await;
                self.idle = Some((gate, inbox));
                let Some(done) = self.asking.take() else {
                    continue;
                };
                // A withdrawn question's answer has nobody to go to.
                if done.withdrawn.is_cancelled() {
                    continue;
                }
                return (done.ticket, answer);
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
            let turn = turn.clone();
            let withdrawn = CancelToken::new();
            let watched = withdrawn.clone();
            self.asking = Some(Asking {
                answer: Box::pin(async move {
                    let answer = gate
                        .review_external(&session_id, &action, &bus, &mut inbox, &turn, &watched)
                        .await;
                    (gate, inbox, answer)
                }),
                ticket,
                withdrawn,
            });
        }
    }

    /// Withdraws every question (their turn is over), waits until the open one is resolved,
    /// then lends the gate and inbox (`None` only if a question's future was lost mid-flight).
    pub async fn settle(&mut self) -> Option<(&mut ApprovalGate, &mut IntentInbox)> {
        self.waiting.clear();
        if let Some(asking) = self.asking.as_mut() {
            asking.withdrawn.cancel();
            let (gate, inbox, _) = asking.answer.as_mut().await;
            self.asking = None;
            self.idle = Some((gate, inbox));
        }
        self.idle.as_mut().map(|(gate, inbox)| (gate, inbox))
    }

    /// The most recent denial (once settled).
    pub fn last_denial(&self) -> Option<&Denial> {
        self.idle.as_ref().and_then(|(gate, _)| gate.last_denial())
    }
}

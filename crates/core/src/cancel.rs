//! [`SessionCancel`]: the one way to end a session's current turn or the session itself, for
//! every caller (a signal of the one-shot CLI, `ctl interrupt` / `ctl stop`, daemon shutdown).
//!
//! The design decision to know: it is built on the child supervisor's [`CancelToken`], not beside
//! it. Each turn (one round: the task or a follow-up) gets a fresh token from
//! [`SessionCancel::begin_turn`]; everything the turn waits on watches that one token: the model
//! stream, an approval, a question, and the running batch, whose runtime the runner then stops
//! with its whole process tree. [`SessionCancel::interrupt`] cancels the current turn's token
//! only; [`SessionCancel::stop`] cancels it and the session's own token, which also ends the wait
//! for a follow-up and makes every later turn start cancelled. [`SessionCancel::cancellations`]
//! lets a dependent (a sub-agent of this session) follow both: it is stopped when its parent is
//! interrupted or stopped.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::child::CancelToken;

/// A session's cancellation handle; clones share one state, so the loop keeps one and any
/// number of frontends keep the others.
#[derive(Debug, Clone, Default)]
pub struct SessionCancel {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Cancelled by [`SessionCancel::stop`]: the session ends.
    session: CancelToken,
    /// The turn running now, if any, with the number that identifies it.
    turn: Mutex<Option<(u64, CancelToken)>>,
    /// Numbers handed out to turns.
    turns: std::sync::atomic::AtomicU64,
    /// Counts the interrupts that ended a turn and the stops.
    cancellations: tokio::sync::watch::Sender<u64>,
    /// Why the session was stopped, when whoever stopped it said (the first to say wins).
    reason: Mutex<Option<String>>,
}

impl Inner {
    fn turn(&self) -> MutexGuard<'_, Option<(u64, CancelToken)>> {
        lock(&self.turn)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section sets or reads one value whole; a panic elsewhere cannot tear it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionCancel {
    /// A handle for a session that is neither interrupted nor stopped.
    pub fn new() -> SessionCancel {
        SessionCancel::default()
    }

    /// Ends the current turn: its model stream is dropped, a pending approval or question is
    /// given up, the running batch is killed (its whole process tree), and the round ends
    /// `interrupted`; the session stays open for follow-ups. Returns whether a turn was
    /// running (an interrupt between turns does nothing).
    pub fn interrupt(&self) -> bool {
        match &*self.inner.turn() {
            Some((_, token)) if !token.is_cancelled() => {
                token.cancel();
                self.inner.cancellations.send_modify(|n| *n += 1);
                true
            }
            Some(_) | None => false,
        }
    }

    /// Ends the session: the current turn as [`SessionCancel::interrupt`] would, and then the
    /// session itself, which ends `interrupted` instead of waiting for a follow-up. Permanent.
    pub fn stop(&self) {
        self.inner.session.cancel();
        if let Some((_, token)) = &*self.inner.turn() {
            token.cancel();
        }
        self.inner.cancellations.send_modify(|n| *n += 1);
    }

    /// [`SessionCancel::stop`], saying why: the session's end gives `reason` instead of "the
    /// session was stopped" (unless an earlier stop said why first).
    pub fn stop_because(&self, reason: impl Into<String>) {
        lock(&self.inner.reason).get_or_insert_with(|| reason.into());
        self.stop();
    }

    /// Why a turn that was cut short ended, for the round's (and the session's) end: the stop's
    /// own reason, else "the session was stopped"; "the turn was interrupted" when only the
    /// turn was.
    pub fn interrupted_reason(&self) -> String {
        if !self.is_stopped() {
            return "the turn was interrupted".to_owned();
        }
        lock(&self.inner.reason)
            .clone()
            .unwrap_or_else(|| "the session was stopped".to_owned())
    }

    /// A receiver that changes at every effective interrupt and at every stop, from now on.
    pub fn cancellations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.cancellations.subscribe()
    }

    /// Whether [`SessionCancel::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.session.is_cancelled()
    }

    /// Resolves once the session is stopped (at once if it already is).
    pub async fn stopped(&self) {
        self.inner.session.cancelled().await;
    }

    /// Whether a turn is running (begun and its [`Turn`] not yet dropped).
    pub fn turn_running(&self) -> bool {
        self.inner.turn().is_some()
    }

    /// Starts a turn: what it waits on watches [`Turn::token`], which an interrupt or a stop
    /// cancels. A turn begun after the session was stopped is cancelled from the start. The
    /// turn ends when the returned [`Turn`] is dropped.
    pub fn begin_turn(&self) -> Turn {
        let number = self
            .inner
            .turns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = CancelToken::new();
        {
            let mut turn = self.inner.turn();
            *turn = Some((number, token.clone()));
        }
        // Checked after the turn is visible, so a stop in between cancels it one way or the
        // other.
        if self.is_stopped() {
            token.cancel();
        }
        Turn {
            owner: self.clone(),
            number,
            token,
        }
    }
}

/// One running turn of a session; dropping it ends the turn.
#[derive(Debug)]
pub struct Turn {
    owner: SessionCancel,
    number: u64,
    token: CancelToken,
}

impl Turn {
    /// The token everything this turn waits on watches (pass it to
    /// [`RuntimeRunner::run_batch`](crate::runner::RuntimeRunner::run_batch) and
    /// [`ApprovalGate::review`](crate::approval::ApprovalGate::review)).
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// Whether the turn was interrupted or the session stopped.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turn = self.owner.inner.turn();
        if turn.as_ref().is_some_and(|(n, _)| *n == self.number) {
            *turn = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_ends_the_turn_only() {
        let cancel = SessionCancel::new();
        assert!(!cancel.interrupt(), "nothing to interrupt between turns");
        let turn = cancel.begin_turn();
        assert!(cancel.turn_running());
        assert!(cancel.interrupt());
        assert!(turn.is_cancelled());
        assert!(!cancel.interrupt(), "already interrupted");
        assert!(!cancel.is_stopped());
        drop(turn);
        assert!(!cancel.turn_running());
        let next = cancel.begin_turn();
        assert!(!next.is_cancelled(), "the next turn starts afresh");
    }

    #[test]
    fn stop_ends_the_turn_and_every_later_one() {
        let cancel = SessionCancel::new();
        let turn = cancel.begin_turn();
        let frontend = cancel.clone();
        frontend.stop();
        assert!(turn.is_cancelled());
        assert!(cancel.is_stopped());
        drop(turn);
        assert!(cancel.begin_turn().is_cancelled());
    }

    #[test]
    fn a_stop_that_says_why_is_ended_with_its_reason_and_the_first_reason_stands() {
        let plain = SessionCancel::new();
        assert_eq!(plain.interrupted_reason(), "the turn was interrupted");
        plain.stop();
        assert_eq!(plain.interrupted_reason(), "the session was stopped");
        let cancel = SessionCancel::new();
        let turn = cancel.begin_turn();
        cancel.stop_because("its log could not be written");
        assert!(turn.is_cancelled());
        assert!(cancel.is_stopped());
        cancel.stop_because("a second reason");
        cancel.stop();
        assert_eq!(cancel.interrupted_reason(), "its log could not be written");
    }

    #[test]
    fn an_old_turn_dropped_late_does_not_end_the_new_one() {
        let cancel = SessionCancel::new();
        let old = cancel.begin_turn();
        let new = cancel.begin_turn();
        drop(old);
        assert!(cancel.turn_running());
        assert!(cancel.interrupt());
        assert!(new.is_cancelled());
    }

    #[tokio::test]
    async fn cancellations_change_at_an_interrupt_and_a_stop_only() {
        let cancel = SessionCancel::new();
        let mut changes = cancel.cancellations();
        assert!(!cancel.interrupt());
        assert!(!changes.has_changed().unwrap(), "no turn, no interrupt");
        let turn = cancel.begin_turn();
        assert!(cancel.interrupt());
        changes.changed().await.unwrap();
        drop(turn);
        cancel.stop();
        changes.changed().await.unwrap();
    }

    #[tokio::test]
    async fn stopped_resolves_for_every_clone() {
        let cancel = SessionCancel::new();
        let waiter = cancel.clone();
        let wait = tokio::spawn(async move { waiter.stopped().await });
        cancel.stop();
        wait.await.unwrap();
        cancel.stopped().await;
    }
}

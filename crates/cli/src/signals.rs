//! SIGINT, SIGTERM and SIGHUP of the one-shot `intendant TASK`: each goes through the session's
//! [`SessionCancel`], so the runner stops the runtime with its commands, the frontend and the
//! log writer see `session_ended` (status `interrupted`), and the exit status says which
//! signal ended the run.
//!
//! - SIGTERM stops the session, and so does SIGHUP (a closed terminal's, whose default action
//!   killed the run outright, its record left without an end).
//! - SIGINT with the terminal frontend on a terminal interrupts the running turn (the round
//!   ends `interrupted` and the prompt takes a follow-up); between turns, or while an interrupt
//!   is still winding the turn down, it stops the session. Anywhere else (`--json`, no
//!   terminal) it stops the session.
//! - A signal after the session was told to stop ends the run at once (see
//!   [`SignalWatch::forced`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use intendant_core::cancel::SessionCancel;
use intendant_core::child::CancelToken;
use tokio::signal::unix::{SignalKind, signal};

/// Watches SIGINT, SIGTERM and SIGHUP for one session, for as long as it lives.
pub struct SignalWatch {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// The signal that stopped the session (0: none did).
    stopped_by: AtomicI32,
    /// Cancelled by a signal that came after the stop.
    forced: CancelToken,
}

impl SignalWatch {
    /// Starts watching: signals act on `cancel`; `interrupts_turns` makes SIGINT interrupt the
    /// running turn first (the terminal frontend on a terminal). Needs a tokio runtime with
    /// signals enabled; once this returns, none of the signals kills the process by itself.
    pub fn install(cancel: SessionCancel, interrupts_turns: bool) -> std::io::Result<SignalWatch> {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            loop {
                let signo = tokio::select! {
                    _ = interrupt.recv() => libc::SIGINT,
                    _ = terminate.recv() => libc::SIGTERM,
                    _ = hangup.recv() => libc::SIGHUP,
                };
                if state.stopped_by.load(Ordering::SeqCst) != 0 {
                    state.forced.cancel();
                    return;
                }
                if signo == libc::SIGINT && interrupts_turns && cancel.interrupt() {
                    continue;
                }
                state.stopped_by.store(signo, Ordering::SeqCst);
                cancel.stop();
            }
        });
        Ok(SignalWatch { shared, task })
    }

    /// The exit status of a run a signal stopped: 128 + the signal's number (130 for SIGINT,
    /// 143 for SIGTERM, 129 for SIGHUP), as a shell reports a process the signal killed; `None` when no signal
    /// stopped it.
    pub fn exit_code(&self) -> Option<u8> {
        let signo = self.shared.stopped_by.load(Ordering::SeqCst);
        (signo != 0)
            .then(|| u8::try_from(128 + signo).ok())
            .flatten()
    }

    /// Resolves when a second signal asks to end at once: the caller drops the session (which
    /// KILLs the running runtime's tree), ends the containment and exits without waiting for
    /// `session_ended` (the log then reads as `interrupted`, as a killed controller's does).
    pub async fn forced(&self) {
        self.shared.forced.cancelled().await;
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Sends `signo` to this process, then waits (bounded) until `done` holds.
    async fn raise_until(signo: i32, done: impl Fn() -> bool) {
        // SAFETY: raise(2) with a signal whose handler tokio installed.
        unsafe {
            libc::raise(signo);
        }
        for _ in 0..6000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("signal {signo} had no effect");
    }

    #[tokio::test]
    async fn on_a_terminal_sigint_interrupts_then_stops_then_a_third_signal_forces() {
        let cancel = SessionCancel::new();
        let watch = SignalWatch::install(cancel.clone(), true).unwrap();
        let turn = cancel.begin_turn();
        raise_until(libc::SIGINT, || turn.is_cancelled()).await;
        assert!(!cancel.is_stopped(), "the first Ctrl-C only interrupts");
        assert_eq!(watch.exit_code(), None);
        // The interrupted turn is still winding down: the next Ctrl-C stops the session.
        raise_until(libc::SIGINT, || cancel.is_stopped()).await;
        assert_eq!(watch.exit_code(), Some(130));
        raise_until(libc::SIGTERM, || watch.shared.forced.is_cancelled()).await;
        watch.forced().await;
        assert_eq!(watch.exit_code(), Some(130), "the stopping signal is kept");
    }

    #[tokio::test]
    async fn without_a_terminal_sigint_stops_and_sigterm_always_does() {
        let cancel = SessionCancel::new();
        let watch = SignalWatch::install(cancel.clone(), false).unwrap();
        let turn = cancel.begin_turn();
        raise_until(libc::SIGINT, || cancel.is_stopped()).await;
        assert!(turn.is_cancelled());
        assert_eq!(watch.exit_code(), Some(130));

        let cancel = SessionCancel::new();
        let watch = SignalWatch::install(cancel.clone(), true).unwrap();
        let turn = cancel.begin_turn();
        raise_until(libc::SIGTERM, || cancel.is_stopped()).await;
        assert!(turn.is_cancelled());
        assert_eq!(watch.exit_code(), Some(143));
    }
}

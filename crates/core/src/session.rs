//! A session's lifecycle on the bus: `session_started` first, then the agent loop's rounds, then
//! `session_ended` last, whatever happened. This is the one place both are emitted, for every
//! frontend that starts a session (the one-shot `intendant TASK` today).
//!
//! Frontends and the session-log writer stop at `session_ended`, so a session started anywhere
//! else would leave them waiting: [`run_session`] is the only way to run the loop.

use std::path::PathBuf;

use intendant_protocol::events::{AppEvent, EndStatus};

use crate::agent_loop::{LoopConfig, LoopError, SessionOutcome, run_direct_mode};
use crate::bus::EventBus;
use crate::conversation::Conversation;
use crate::intents::IntentInbox;

/// What `session_started` announces beyond the loop's own configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStart {
    /// The task text (the first round's instruction).
    pub task: String,
    /// Provider name as the user chose it (`openai`, `mock`, ...).
    pub provider: String,
    /// Project root the session works in.
    pub project_root: PathBuf,
    /// Whether an earlier session is resumed.
    pub resumed: bool,
}

/// Runs one session on `bus`: emits `session_started`, runs `start.task` (and any follow-ups)
/// in `conversation`, and emits `session_ended` last (after an `error` event when the loop
/// failed).
pub async fn run_session(
    start: SessionStart,
    cfg: LoopConfig,
    conversation: Conversation,
    bus: EventBus,
    inbox: IntentInbox,
) -> Result<SessionOutcome, LoopError> {
    let session_id = cfg.session_id.clone();
    bus.emit(AppEvent::SessionStarted {
        session_id: session_id.clone(),
        task: start.task.clone(),
        model: cfg.model.clone(),
        provider: start.provider,
        project_root: start.project_root.display().to_string(),
        resumed: start.resumed,
    });
    let result = run_direct_mode(cfg, conversation, start.task, bus.clone(), inbox).await;
    let (status, reason) = match &result {
        Ok(outcome) => (outcome.status, outcome.reason.clone()),
        Err(e) => {
            let message = e.to_string();
            bus.emit(AppEvent::Error {
                message: message.clone(),
            });
            (EndStatus::Failed, message)
        }
    };
    bus.emit(AppEvent::SessionEnded {
        session_id,
        status,
        reason,
    });
    result
}

//! A session's lifecycle on the bus: `session_started` first, then the backend's rounds, then
//! `session_ended` last, whatever happened. This is the one place both are emitted, for every
//! frontend that starts a session (the one-shot `intendant TASK`, the daemon).
//!
//! Frontends and the session-log writer stop at `session_ended`, so a session started anywhere
//! else would leave them waiting: [`run_session`] is the only way to run a backend.
//!
//! What runs the turns is a [`SessionBackend`]: Intendant's own loop ([`DirectBackend`]) or an
//! external agent CLI supervised as a worker (in `intendant_agents`). Both see the same bus and
//! inbox, so every frontend renders them alike.

pub mod assemble;

use std::path::PathBuf;

use futures::future::BoxFuture;
use intendant_protocol::events::{AppEvent, EndStatus};

use crate::agent_loop::{LoopConfig, run_direct_mode};
use crate::approval::ApprovalGate;
use crate::bus::EventBus;
use crate::conversation::Conversation;
use crate::intents::IntentInbox;
use crate::outcome::{SessionError, SessionOutcome};
use crate::session_log::SessionLog;

/// What `session_started` announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStart {
    /// Session id (also the log directory name).
    pub session_id: String,
    /// The task text (the first round's instruction).
    pub task: String,
    /// Provider name as the user chose it (`openai`, `mock`, ...; the worker for an agent).
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Project root the session works in.
    pub project_root: PathBuf,
    /// Whether an earlier session is resumed.
    pub resumed: bool,
    /// The project's repository as resolved before any command ran (`None`: not in one);
    /// its sub-agents' worktrees are made from it.
    pub git: Option<crate::git::GitRepo>,
    /// The network mode its commands were given (its sub-agents are held within it).
    pub network: crate::network::NetworkMode,
}

/// What runs a session's rounds: the task, then follow-ups from the inbox, until the session
/// ends. It emits everything between `session_started` and `session_ended` on `bus`.
pub trait SessionBackend: Send {
    /// Runs `task` and any follow-ups to the session's end.
    fn run(
        self: Box<Self>,
        task: String,
        bus: EventBus,
        inbox: IntentInbox,
    ) -> BoxFuture<'static, Result<SessionOutcome, SessionError>>;
}

/// Intendant's own agent loop with a model provider.
pub struct DirectBackend {
    /// The loop's configuration.
    pub cfg: LoopConfig,
    /// The conversation to continue (fresh, or rebuilt from a log on resume).
    pub conversation: Conversation,
}

impl SessionBackend for DirectBackend {
    fn run(
        self: Box<Self>,
        task: String,
        bus: EventBus,
        inbox: IntentInbox,
    ) -> BoxFuture<'static, Result<SessionOutcome, SessionError>> {
        Box::pin(run_direct_mode(
            self.cfg,
            self.conversation,
            task,
            bus,
            inbox,
        ))
    }
}

/// What a worker backend gets from the session it runs in: everything Intendant decided about
/// the session, so the worker's own sandbox and approval settings can follow it.
pub struct WorkerContext {
    /// Session id.
    pub session_id: String,
    /// Project root (the worker's working directory).
    pub project_root: PathBuf,
    /// Model name asked for (`None`: the worker's own default).
    pub model: Option<String>,
    /// For `acp`, the agent's command line (`--agent acp -- COMMAND ARGS...`); empty for every
    /// other worker.
    pub command: Vec<String>,
    /// The session's approval gate: the worker's approval requests go through it, so they show
    /// in the same queue as the native loop's.
    pub approval_gate: ApprovalGate,
    /// The session log (the worker's own conversation id is recorded there for resume).
    pub session_log: SessionLog,
    /// When resuming: the earlier session this one continues.
    pub resumed_from: Option<String>,
    /// The session's cancellation handle: the worker ends its current turn when
    /// [`SessionCancel::interrupt`](crate::cancel::SessionCancel::interrupt) is called (the
    /// round ends `interrupted`), and the session when it is stopped (it ends `interrupted`),
    /// killing what it runs either way. Await [`Turn::token`](crate::cancel::Turn::token) of
    /// [`SessionCancel::begin_turn`](crate::cancel::SessionCancel::begin_turn) per round.
    pub cancel: crate::cancel::SessionCancel,
    /// The project's `[agent.<name>]` tables (trusted), so a daemon serving many projects
    /// configures each worker from its own project.
    pub agent_config: std::collections::BTreeMap<String, toml::Table>,
    /// Where the project is checkpointed before and after each of the worker's rounds (`None`:
    /// a trusted `[checkpoints] enabled = false`).
    pub checkpoints: Option<crate::checkpoint::CheckpointPlan>,
    /// The session's cgroups: the worker is moved into them right after its start, so it and
    /// what it runs are bounded and ended with the session's other processes (`None`: none).
    pub placement: Option<crate::containment::Placement>,
    /// The runtime the worker is started below as its guard (`intendant-runtime --guard`),
    /// which ends it and everything it started if the controller dies (`None`: the worker is
    /// started directly, as a test's may be).
    pub guard: Option<PathBuf>,
}

/// Builds the backend of an external agent session (implemented in `intendant_agents`, which
/// knows the CLIs; core only knows the name).
pub trait WorkerFactory: Send + Sync {
    /// The backend running the CLI profile `name` for the session `ctx` describes; an unknown
    /// or unusable profile is an error message for the user.
    fn build(&self, name: &str, ctx: WorkerContext) -> Result<Box<dyn SessionBackend>, String>;
}

/// Runs one session on `bus`: emits `session_started`, runs `start.task` (and any follow-ups)
/// through `backend`, and emits `session_ended` last (after an `error` event when the backend
/// failed).
pub async fn run_session(
    start: SessionStart,
    backend: Box<dyn SessionBackend>,
    bus: EventBus,
    inbox: IntentInbox,
) -> Result<SessionOutcome, SessionError> {
    let session_id = start.session_id.clone();
    bus.emit(AppEvent::SessionStarted {
        session_id: session_id.clone(),
        task: start.task.clone(),
        model: start.model,
        provider: start.provider,
        project_root: start.project_root.display().to_string(),
        resumed: start.resumed,
    });
    let result = backend.run(start.task, bus.clone(), inbox).await;
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

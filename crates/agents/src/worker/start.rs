//! How every worker starts, whatever its protocol: the command built from the CLI's profile and
//! `[agent.<name>]`, the child spawned, the protocol's handshake ([`Opening`]), the worker's
//! conversation id recorded, and the session loop run ([`WorkerStart`]).
//!
//! The one design decision to know: a backend says only what differs (its arguments, its
//! handshake, its protocol). A worker that dies during the handshake is reported by how it ended
//! and its last stderr lines; a handshake that fails otherwise stops the worker before the error
//! is returned.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use intendant_core::autonomy::SharedLevel;
use intendant_core::bus::EventBus;
use intendant_core::cancel::SessionCancel;
use intendant_core::containment::Placement;
use intendant_core::intents::IntentInbox;
use intendant_core::outcome::{SessionError, SessionOutcome};
use intendant_core::session::{SessionBackend, WorkerContext};
use intendant_core::session_log::SessionLog;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::EndStatus;
use tokio::net::unix::pipe;

use super::WorkerError;
use super::actions::record_conversation;
use super::driver::{Opened, Protocol, Relaunch, Served, Started, Timing, WorkerSession};
use super::framing::{FrameReader, MAX_LINE_BYTES};
use super::process::{LineSender, WorkerCommand, WorkerProcess};
use crate::config::AgentConfig;
use crate::env::{ChildEnv, HostEnv, child_env};
use crate::profile::AgentProfile;

/// Time between closing a worker's stdin and TERM, and between TERM and KILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// Longest a worker may take to finish its handshake by default (the CLIs take well under a
/// second; `[agent.NAME] handshake_timeout_secs` sets it).
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(60);

/// What a worker needs besides the session: its `[agent.<name>]` settings and the caller's
/// environment (the worker's own is built from it by the profile's policy).
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    /// `[agent.<name>]`.
    pub config: AgentConfig,
    /// The caller's environment.
    pub host: HostEnv,
}

/// The child of a worker session: `program args` in `cwd` with exactly `env`, lines bounded by
/// the framing's default.
pub fn worker_command(
    program: PathBuf,
    args: Vec<OsString>,
    env: ChildEnv,
    cwd: PathBuf,
) -> WorkerCommand {
    WorkerCommand {
        program,
        args,
        env: env.os_vars(),
        cwd,
        secrets: env.secrets,
        max_line: MAX_LINE_BYTES,
        grace: GRACE,
    }
}

/// The child of a profiled CLI's worker: its executable found by the profile (or `[agent.<name>]
/// path`), its auth chosen under `config` overrides (refused where the CLI takes none), and its
/// environment built by the profile's policy. Of the auth variables, the `provider_keys`
/// (Intendant's own keys the CLI also reads) are admitted only when `[agent.<name>] env` names
/// them.
pub fn profiled_command(
    profile: &AgentProfile,
    setup: &WorkerSetup,
    config: &[String],
    provider_keys: &[&str],
    args: Vec<OsString>,
    cwd: PathBuf,
) -> Result<WorkerCommand, String> {
    let cfg = &setup.config;
    let program = crate::discover::find_executable(profile, cfg.path.as_deref(), &setup.host)
        .map_err(|e| e.message.clone())?;
    crate::delegate::check_overrides(profile, config).map_err(|e| e.message.clone())?;
    let auth = crate::discover::choose_auth(profile, &setup.host, config, &cfg.allowed_auth)
        .map_err(|e| e.message.clone())?;
    let auth_env: Vec<String> = auth
        .admit_env
        .into_iter()
        .filter(|name| !provider_keys.contains(&name.as_str()) || cfg.env.contains(name))
        .collect();
    let env = child_env(&setup.host, &profile.env, &auth_env, &cfg.env);
    Ok(worker_command(program, args, env, cwd))
}

/// What a worker's handshake reads of its session, kept for each of its starts.
#[derive(Clone)]
pub struct OpenContext {
    /// The project root (the worker's working directory).
    pub project_root: PathBuf,
    /// The session's autonomy level, live.
    pub level: SharedLevel,
    /// The session log (the worker's conversation id is recorded there).
    pub session_log: SessionLog,
}

impl OpenContext {
    fn of(ctx: &WorkerContext) -> OpenContext {
        OpenContext {
            project_root: ctx.project_root.clone(),
            level: ctx.approval_gate.level_handle(),
            session_log: ctx.session_log.clone(),
        }
    }
}

/// One protocol's handshake: from the worker's pipes to the protocol the session loop drives.
/// Cloned for each start of the worker (a worker let go while its session waited is started
/// again for the next follow-up).
pub trait Opening: Clone + Send + Sync + 'static {
    /// The protocol it opens.
    type Protocol: Protocol + 'static;

    /// The arguments of a start that takes up the worker's conversation `resume` at `level`,
    /// when the command line names it (claude's `--resume`); `None`: the command as built, the
    /// handshake taking it up.
    fn resuming_args(&self, _resume: &str, _level: AutonomyLevel) -> Option<Vec<OsString>> {
        None
    }

    /// Talks to the just-started worker until it is ready for its first turn, taking up its
    /// conversation `resume` when given. A [`WorkerError::Closed`] means the worker went away,
    /// and is reported as its exit.
    fn open(
        self,
        reader: FrameReader<pipe::Receiver>,
        sender: LineSender,
        ctx: &OpenContext,
        resume: Option<&str>,
    ) -> impl Future<Output = Result<Opened<Self::Protocol>, WorkerError>> + Send;
}

/// A worker as a session's backend: what to start, how to open it, and the session it serves.
pub struct WorkerStart<O> {
    /// The worker's name in messages (`codex`, `claude-code`, `kimi`, an ACP agent's).
    pub name: String,
    /// What to run.
    pub command: WorkerCommand,
    /// The handshake.
    pub opening: O,
    /// The session's context.
    pub ctx: WorkerContext,
    /// The model usage is priced for, when known.
    pub model: Option<String>,
    /// `[agent.<name>] wedge_after_secs`, `idle_exit_secs` and `handshake_timeout_secs`.
    pub timing: Timing,
}

/// The conversation of the worker a resumed session recorded, to take up.
pub fn recorded_conversation(ctx: &WorkerContext) -> Option<String> {
    ctx.session_log
        .meta()
        .agent_thread
        .filter(|_| ctx.resumed_from.is_some())
}

/// Starts a worker: its command (naming the conversation to take up where the command line
/// does), spawned in the session's groups, its handshake, its conversation id recorded.
pub struct Launcher<O> {
    name: String,
    command: WorkerCommand,
    opening: O,
    ctx: OpenContext,
    placement: Option<Placement>,
    /// The runtime the worker runs below (`WorkerContext::guard`).
    guard: Option<PathBuf>,
    /// The session's stop, which ends a start under way.
    cancel: SessionCancel,
    /// Longest its handshake may take.
    handshake_wait: Duration,
}

impl<O: Opening> Launcher<O> {
    /// Starts the worker, taking up its conversation `resume` when given.
    pub async fn start(&self, resume: Option<&str>) -> Result<Started<O::Protocol>, WorkerError> {
        let mut command = self.command.clone();
        if let Some(args) =
            resume.and_then(|id| self.opening.resuming_args(id, self.ctx.level.get()))
        {
            command.args = args;
        }
        let (mut process, reader, sender) = WorkerProcess::spawn(
            &self.name,
            command,
            self.placement.as_ref(),
            self.guard.as_deref(),
        )?;
        let opening = self.opening.clone();
        // A worker that never finishes its handshake neither holds its session past a stop
        // (it was ended only when the daemon gave up on the session, 10 s later) nor forever.
        let opened = tokio::select! {
            opened = opening.open(reader, sender, &self.ctx, resume) => opened,
            () = self.cancel.stopped() => Err(WorkerError::Stopped),
            () = tokio::time::sleep(self.handshake_wait) => Err(WorkerError::Protocol(format!(
                "{} did not finish its handshake within {} s (`handshake_timeout_secs` of its \
                 `[agent]` entry)",
                self.name,
                self.handshake_wait.as_secs(),
            ))),
        };
        let opened = match opened {
            Ok(opened) => opened,
            Err(WorkerError::Closed) => return Err(process.exit_error().await),
            Err(e) => {
                drop(process.stop().await);
                return Err(e);
            }
        };
        if let Some(id) = &opened.conversation {
            record_conversation(&self.ctx.session_log, id);
        }
        Ok(Started { opened, process })
    }
}

impl<O: Opening> Relaunch<O::Protocol> for Launcher<O> {
    fn again<'a>(
        &'a self,
        resume: &'a str,
    ) -> BoxFuture<'a, Result<Started<O::Protocol>, WorkerError>> {
        Box::pin(self.start(Some(resume)))
    }
}

impl<O: Opening> WorkerStart<O> {
    /// Starts the worker, opens it, and runs `task` and the follow-ups to the session's end.
    pub async fn run(
        self,
        task: String,
        bus: EventBus,
        inbox: IntentInbox,
    ) -> Result<SessionOutcome, WorkerError> {
        let WorkerStart {
            name,
            command,
            opening,
            ctx,
            model,
            timing,
        } = self;
        let launcher = Launcher {
            name,
            command,
            opening,
            ctx: OpenContext::of(&ctx),
            placement: ctx.placement.clone(),
            guard: ctx.guard.clone(),
            cancel: ctx.cancel.clone(),
            handshake_wait: timing
                .handshake_timeout_secs
                .map_or(HANDSHAKE_WAIT, Duration::from_secs),
        };
        let started = match launcher.start(recorded_conversation(&ctx).as_deref()).await {
            Ok(started) => started,
            // Stopped before its first round: nothing ran.
            Err(WorkerError::Stopped) => {
                return Ok(SessionOutcome {
                    status: EndStatus::Interrupted,
                    reason: ctx.cancel.interrupted_reason(),
                    turns: 0,
                });
            }
            Err(e) => return Err(e),
        };
        let served = Served { ctx, bus, inbox };
        WorkerSession::new(
            started,
            Box::new(launcher),
            served,
            model.as_deref(),
            timing,
        )
        .run(task)
        .await
    }
}

impl<O: Opening> SessionBackend for WorkerStart<O> {
    fn run(
        self: Box<Self>,
        task: String,
        bus: EventBus,
        inbox: IntentInbox,
    ) -> BoxFuture<'static, Result<SessionOutcome, SessionError>> {
        Box::pin(async move {
            WorkerStart::run(*self, task, bus, inbox)
                .await
                .map_err(SessionError::from)
        })
    }
}

//! `session_meta.json`: what a session is, how far it got, and whether its writer still runs.

use std::path::{Path, PathBuf};

use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Backend, WorktreeInfo};
use intendant_protocol::events::{AppEvent, EndStatus, RecordedStatus};
use intendant_protocol::network::NetworkMode;
use intendant_providers::Usage;
use serde::{Deserialize, Serialize};

use crate::skills::invoked_skill;
use crate::usage::reported_usage;

/// `session_meta.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionMeta {
    /// Session id, also the directory name: `20261130T101530Z-1a2b3c`, sortable by time.
    pub id: String,
    /// When the session was created (RFC 3339 UTC).
    pub created: String,
    /// When this file was last rewritten (RFC 3339 UTC).
    pub updated: String,
    /// Project root the session works in.
    pub project_root: PathBuf,
    /// The task text of the first round.
    pub task: String,
    /// `running` until the session ends, then the `session_ended` status (`completed`,
    /// `failed`, `denied`, ...).
    pub status: RecordedStatus,
    /// Why the session ended, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Model name.
    pub model: String,
    /// Provider wire name.
    pub provider: String,
    /// Process that last wrote the session (tells a crashed `running` session from a live one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Start time of that process (Linux: clock ticks since boot), so a reused pid is not
    /// mistaken for the writer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// Model turns so far.
    pub turns: u32,
    /// Token totals so far.
    pub usage: Usage,
    /// Cost so far in USD.
    pub cost_usd: f64,
    /// How many times the session was resumed.
    pub resumes: u32,
    /// The session that started this one as a sub-agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// A sub-agent's role, as its parent asked for it (absent for none, and in records older
    /// than this field), so a resume tells it the same role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A sub-agent's depth among sub-agents (0, absent: a top session; read through
    /// [`SessionMeta::sub_agent_depth`]), so a resume on its own is bounded as it was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// Its first run was given the orchestration prompt (`--orchestrate`, or the daemon's own
    /// choice), so a resume is given it too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orchestrated: bool,
    /// What ran the session (absent in records older than this field), so a resume continues
    /// on the same backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// An external worker's own conversation id (codex thread, claude session), so a resumed
    /// session continues the same worker conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_thread: Option<String>,
    /// The autonomy level in force, as last set (absent in records older than this field), so
    /// a restarted daemon lists it and a resume restores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomy: Option<AutonomyLevel>,
    /// The skills the session invoked, in first-use order, so a restarted daemon still lists
    /// them (absent in records older than this field, and while none was invoked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// The network its commands got, as its last run began (absent in records older than this
    /// field), so a resume keeps it ([`NetworkChoice::Recorded`](crate::network::NetworkChoice)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkMode>,
    /// The token budget each of its runs was given (absent without one, and in records older
    /// than this field), so a resume that names none keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// A sub-agent's worktree and, once ended, what became of it (absent for a session that had
    /// none, and in records older than this field), so a restarted daemon still lists where it
    /// worked and which branch holds its commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeInfo>,
}

impl SessionMeta {
    /// Metadata for a new session (the id and times are filled in by [`SessionLog::create`](super::SessionLog::create)).
    pub fn new(project_root: &Path, task: &str, model: &str, provider: &str) -> SessionMeta {
        SessionMeta {
            project_root: project_root.to_path_buf(),
            task: task.to_owned(),
            status: RecordedStatus::Running,
            model: model.to_owned(),
            provider: provider.to_owned(),
            ..SessionMeta::default()
        }
    }

    /// What ran the session: [`SessionMeta::backend`], else (a record older than that field)
    /// the worker named as its provider when it recorded a worker conversation, else unknown.
    pub fn recorded_backend(&self) -> Option<Backend> {
        self.backend.clone().or_else(|| {
            self.agent_thread
                .as_ref()
                .map(|_| Backend::named(&self.provider))
        })
    }

    /// The depth it ran at among sub-agents: as recorded, and at least 1 for a sub-agent (a
    /// record older than [`SessionMeta::depth`] names only its parent).
    pub fn sub_agent_depth(&self) -> u32 {
        if self.parent.is_some() {
            self.depth.max(1)
        } else {
            self.depth
        }
    }

    /// `status`, except that a `running` session whose writing process no longer exists is
    /// `interrupted`.
    pub fn effective_status(&self) -> RecordedStatus {
        match self.status {
            RecordedStatus::Running if !self.writer_alive() => {
                RecordedStatus::Ended(EndStatus::Interrupted)
            }
            status @ (RecordedStatus::Running | RecordedStatus::Ended(_)) => status,
        }
    }

    /// Why a session recorded `running` whose writer is gone ended: it did not, it was left.
    pub fn left_unfinished(&self) -> String {
        let process = match self.pid {
            Some(pid) => format!("the process running it (pid {pid})"),
            None => "the process running it".to_owned(),
        };
        format!(
            "left unfinished: {process} ended before the session did (it was killed, or the \
             session's record could not be written)"
        )
    }

    /// Whether this session, recorded in `dir`, never ran: still recorded `running` and its log
    /// holds no run's start ([`super::has_started`]), as one queued for a slot when its daemon
    /// stopped is left (its conversation lacks its task). A session that ended, or a log that
    /// does not read, is taken to have run.
    pub fn never_ran(&self, dir: &Path) -> bool {
        self.status == RecordedStatus::Running && !super::has_started(dir).unwrap_or(true)
    }

    /// Why a session whose writer is gone and that [never ran](Self::never_ran) ended: it did
    /// not start, and a resume runs the task it was started with.
    pub fn left_unstarted(&self) -> String {
        let process = match self.pid {
            Some(pid) => format!("the process that took it (pid {pid})"),
            None => "the process that took it".to_owned(),
        };
        format!(
            "never ran: {process} ended before it started (queued for a slot when its daemon \
             stopped); a resume runs its task"
        )
    }

    /// Why a session in `dir` recorded `running` whose writer is gone ended: it
    /// [never ran](Self::never_ran) or was [left unfinished](Self::left_unfinished), and the
    /// follow-ups sent to it that it never took ([`super::unsent_follow_ups`]), which a resume
    /// sends.
    pub fn left_behind(&self, dir: &Path) -> String {
        let why = if self.never_ran(dir) {
            self.left_unstarted()
        } else {
            self.left_unfinished()
        };
        match super::unsent_follow_ups(dir).map(|texts| texts.len()) {
            Ok(0) | Err(_) => why,
            Ok(1) => format!("{why}; a follow-up sent to it was never taken: a resume sends it"),
            Ok(n) => {
                format!("{why}; {n} follow-ups sent to it were never taken: a resume sends them")
            }
        }
    }

    /// Whether the process recorded as the writer still runs (true when no writer is recorded,
    /// or when the platform cannot tell).
    pub fn writer_alive(&self) -> bool {
        match self.pid {
            Some(pid) => process_alive(pid, self.pid_start),
            None => true,
        }
    }

    /// Marks this process as the writer.
    pub(super) fn claim_writer(&mut self) {
        let pid = std::process::id();
        self.pid = Some(pid);
        self.pid_start = process_start(pid);
    }

    /// Total tokens (input plus output).
    pub fn total_tokens(&self) -> u64 {
        self.usage.input_tokens + self.usage.output_tokens
    }

    /// Folds one lifecycle event into the totals and status, and says when the file must show
    /// it. `turn_base` is the number of turns taken before this run (a resumed session's runs
    /// count turns from 1 each).
    pub(super) fn absorb(&mut self, event: &AppEvent, turn_base: u32) -> Fold {
        match event {
            AppEvent::TurnStarted { turn } => {
                self.turns = self.turns.max(turn_base + *turn);
                Fold::Soon
            }
            AppEvent::Usage { .. } => {
                if let Some((usage, cost_usd)) = reported_usage(event) {
                    self.usage.add(&usage);
                    self.cost_usd += cost_usd;
                }
                Fold::Now
            }
            AppEvent::SessionEnded { status, reason, .. } => {
                self.status = RecordedStatus::Ended(*status);
                self.reason = Some(reason.clone());
                Fold::Now
            }
            AppEvent::AutonomyChanged { level, .. } => {
                self.autonomy = Some(*level);
                Fold::Now
            }
            AppEvent::ToolCall {
                name, arguments, ..
            } => match invoked_skill(name, arguments) {
                Some(skill) if !self.skills.iter().any(|k| k == skill) => {
                    self.skills.push(skill.to_owned());
                    Fold::Now
                }
                Some(_) | None => Fold::Unchanged,
            },
            AppEvent::RoundComplete { .. } | AppEvent::Done { .. } | AppEvent::Error { .. } => {
                Fold::Settled
            }
            AppEvent::SessionStarted { .. }
            | AppEvent::ModelResponseDelta { .. }
            | AppEvent::ModelResponse { .. }
            | AppEvent::Refusal { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::ToolBatchResult { .. }
            | AppEvent::ApprovalRequired { .. }
            | AppEvent::ApprovalResolved { .. }
            | AppEvent::HumanQuestion { .. }
            | AppEvent::HumanAnswer { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Egress { .. }
            | AppEvent::Warning { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. }
            | AppEvent::ControlCommand(_) => Fold::Unchanged,
        }
    }
}

/// When `session_meta.json` must show what an event changed.
///
/// The design decision to know: a turn's start is written with the turn's usage, which
/// follows it within the same model call, so a turn costs one rewrite, not two. Until then the
/// file may count one turn less, which is harmless because nothing of that turn is on disk
/// yet: the turn's first file writes the pending change before it is created
/// ([`SessionLog::write_turn_file`](super::SessionLog::write_turn_file)), so a resume never
/// numbers its turns over an earlier turn's files. A round's end (or an error) writes whatever
/// is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fold {
    /// Nothing changed.
    Unchanged,
    /// Changed; written with the next write (at the latest when the round ends).
    Soon,
    /// Changed; written now.
    Now,
    /// Nothing changed, and a change still pending is written now (a round ended).
    Settled,
}

/// Start time of process `pid` (field 22 of `/proc/<pid>/stat`); `None` when it is gone or
/// has exited and waits to be reaped (a zombie, or dead: it writes nothing any more, and a
/// writer killed while its parent did not reap it yet must not read as still running).
#[cfg(target_os = "linux")]
pub(super) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesized and may hold spaces; count after it.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // Field 3, the state: Z (zombie) and X (dead) have exited.
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
pub(super) fn process_start(_pid: u32) -> Option<u64> {
    None
}

/// A count left out of the record while it is 0.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Whether process `pid` still runs: it exists and has not exited (a zombie waiting to be
/// reaped has). Where the platform cannot tell, true.
pub fn process_running(pid: u32) -> bool {
    process_alive(pid, None)
}

#[cfg(target_os = "linux")]
fn process_alive(pid: u32, recorded_start: Option<u64>) -> bool {
    match (process_start(pid), recorded_start) {
        (None, _) => false,
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
    }
}

#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32, _recorded_start: Option<u64>) -> bool {
    // Without /proc there is no cheap, safe probe; report the recorded status unchanged.
    true
}

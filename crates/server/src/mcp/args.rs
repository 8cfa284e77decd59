//! The arguments of each tool, as the client sends them. Each type derives its JSON Schema (the
//! tool's `inputSchema`) and refuses unknown fields, so a misspelled argument is an error instead
//! of being ignored.

use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::RewindScope;
use intendant_protocol::events::ControlMsg;
use intendant_protocol::network::NetworkMode;
use schemars::JsonSchema;
use serde::Deserialize;

/// The longest a tool call may wait for a session, in seconds: below the usual 60 s tool
/// timeout of MCP clients, so a wait never outlives the call.
pub const MAX_WAIT_S: u64 = 50;
/// Events one `get_session` call returns by default.
pub const DEFAULT_EVENTS: usize = 50;
/// Events one `get_session` call returns at most.
pub const MAX_EVENTS: usize = 200;
/// Sessions one `list_sessions` call returns by default: the newest.
pub const DEFAULT_SESSIONS: usize = 50;
/// Sessions one `list_sessions` call returns at most.
pub const MAX_SESSIONS: usize = 200;
/// Default deadline of a `delegate` call, in seconds.
pub const DEFAULT_DELEGATE_S: u64 = MAX_WAIT_S;
/// The longest deadline a `delegate` call may ask for (the contract's default).
pub const MAX_DELEGATE_S: u64 = 600;

/// An autonomy level: what a session may do without asking.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Autonomy {
    /// Ask for everything but reading files.
    Low,
    /// Ask for writes, deletes, command execution and destructive actions.
    Medium,
    /// Auto-approve everything but destructive actions.
    High,
    /// Auto-approve everything that is not denied.
    Full,
}

impl From<Autonomy> for AutonomyLevel {
    fn from(level: Autonomy) -> AutonomyLevel {
        match level {
            Autonomy::Low => AutonomyLevel::Low,
            Autonomy::Medium => AutonomyLevel::Medium,
            Autonomy::High => AutonomyLevel::High,
            Autonomy::Full => AutonomyLevel::Full,
        }
    }
}

/// `run_task`: start a sandboxed Intendant session.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTask {
    /// What the session should do.
    pub task: String,
    /// The project directory to work in (absolute, or relative to the MCP server's working
    /// directory); it must exist.
    pub project_dir: String,
    /// Autonomy level; the daemon's default when absent.
    #[serde(default)]
    pub autonomy: Option<Autonomy>,
    /// Model provider (`openai`, `anthropic`, `gemini`, `openai-chat`, `mock`); the usual
    /// selection when absent.
    #[serde(default)]
    pub provider: Option<String>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// What runs the session: `native` (Intendant's own loop) or an agent CLI name (`codex`,
    /// `claude-code`, `kimi`); the daemon's default when absent.
    #[serde(default)]
    pub backend: Option<String>,
    /// What network the session's commands get; the project's settings when absent, and never
    /// more open than they are.
    #[serde(default)]
    pub network: Option<Network>,
    /// Seconds to wait for the first round to end (0 to return the session id at once; at
    /// most 50). The wait also ends when the session needs a human.
    #[serde(default)]
    pub wait_s: u64,
}

/// What network a session's commands get.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Their own network, out only through Intendant's egress proxy (host allow lists; a new
    /// host is asked).
    Proxy,
    /// Their own loopback only.
    None,
    /// The host's network: only where the project's trusted settings already give it.
    Host,
}

impl From<Network> for NetworkMode {
    fn from(mode: Network) -> NetworkMode {
        match mode {
            Network::Proxy => NetworkMode::Proxy,
            Network::None => NetworkMode::None,
            Network::Host => NetworkMode::Host,
        }
    }
}

/// `resume_session`: an ended session continued.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeSession {
    /// The session (stopped, interrupted by a restart of the daemon, or finished).
    pub session_id: String,
    /// What it should do now (empty: go on with what it was doing).
    #[serde(default)]
    pub text: String,
    /// Autonomy level; the one it ran at when absent (held to this server's ceiling).
    #[serde(default)]
    pub autonomy: Option<Autonomy>,
    /// Seconds to wait for its round to end (0 to return at once; at most 50). The wait also
    /// ends when the session needs a human.
    #[serde(default)]
    pub wait_s: u64,
}

/// `send_message`: a follow-up instruction to a session.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The session.
    pub session_id: String,
    /// The instruction.
    pub text: String,
    /// Seconds to wait for the round it starts to end (0 to return at once; at most 50).
    #[serde(default)]
    pub wait_s: u64,
}

/// `get_session`: status, final text, usage, and a page of events.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetSession {
    /// The session.
    pub session_id: String,
    /// Return events after this `seq` (0 for the first page; pass the last `next_after_seq`
    /// to read on).
    #[serde(default)]
    pub after_seq: u64,
    /// Events per page (default 50, at most 200).
    #[serde(default)]
    pub max_events: Option<usize>,
}

/// A session id alone (`interrupt`, `stop`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRef {
    /// The session.
    pub session_id: String,
}

/// `list_sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessions {
    /// Only sessions in this status (`queued`, `running`, `waiting_for_human`, `idle`,
    /// `done`, `failed`, `interrupted`).
    #[serde(default)]
    pub status: Option<String>,
    /// At most this many, the newest (default 50, at most 200); `omitted` counts the older.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only sessions listed before this one (pass `next_before` to read further back).
    #[serde(default)]
    pub before: Option<String>,
}

/// `list_approvals`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListApprovals {
    /// Only the approvals of this session.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// What `agenda` does.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgendaAction {
    /// Every entry, oldest first.
    List,
    /// Park a work item (`text`, optional `remind_at`).
    Add,
    /// Mark item `id` done (or cancel a schedule that has not run).
    Done,
    /// Move item `id`'s reminder to `until`.
    Snooze,
}

impl AgendaAction {
    /// Its name in the tool's arguments.
    pub fn name(self) -> &'static str {
        match self {
            AgendaAction::List => "list",
            AgendaAction::Add => "add",
            AgendaAction::Done => "done",
            AgendaAction::Snooze => "snooze",
        }
    }
}

/// `agenda`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agenda {
    /// What to do.
    pub action: AgendaAction,
    /// `add`: what to do.
    #[serde(default)]
    pub text: Option<String>,
    /// `add`: when to remind (RFC 3339 with Z or an offset, a date and time with an IANA zone
    /// name such as "2026-12-03T09:00 Europe/Paris", or relative: +10m, +2h, +1d, +1h30m).
    #[serde(default)]
    pub remind_at: Option<String>,
    /// `done`, `snooze`: the entry's id.
    #[serde(default)]
    pub id: Option<u64>,
    /// `snooze`: the new time (as `remind_at`).
    #[serde(default)]
    pub until: Option<String>,
}

/// `schedule`: one session at a time, waiting for its owner's approval.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// When to start it: RFC 3339 with Z or an offset (2026-12-03T09:00:00+01:00), a date and
    /// time with an IANA zone name ("2026-12-03T09:00 Europe/Paris"), or relative (+10m, +2h,
    /// +1d); in the future.
    pub at: String,
    /// What the session should do.
    pub task: String,
    /// The project directory to work in (absolute, or relative to the MCP server's working
    /// directory); it must exist.
    pub project_dir: String,
    /// Autonomy level; the daemon's default now when absent (stored in the request).
    #[serde(default)]
    pub autonomy: Option<Autonomy>,
    /// Model provider; the usual selection at its time when absent.
    #[serde(default)]
    pub provider: Option<String>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// What runs the session: `native` or an agent CLI name; the daemon's default when absent.
    #[serde(default)]
    pub backend: Option<String>,
    /// What network the session's commands get; the project's settings when absent.
    #[serde(default)]
    pub network: Option<Network>,
}

/// A verdict on a pending approval.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this command.
    Approve,
    /// Refuse it (the session stops its task).
    Deny,
    /// Do not run it; the model is told so and goes on.
    Skip,
    /// Run it and everything after it in this session without asking.
    ApproveAll,
    /// A network approval's host for good: the session's and the project's allow list. A
    /// human's answer only (this client's elicitation); `resolve_approval` refuses it.
    AllowHost,
}

impl Decision {
    /// The intent answering approval `id`.
    pub fn intent(self, id: u64) -> ControlMsg {
        match self {
            Decision::Approve => ControlMsg::Approve { id },
            Decision::Deny => ControlMsg::Deny { id },
            Decision::Skip => ControlMsg::Skip { id },
            Decision::ApproveAll => ControlMsg::ApproveAll { id },
            Decision::AllowHost => ControlMsg::AllowHost { id },
        }
    }
}

/// `resolve_approval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveApproval {
    /// The session asking (from `list_approvals`).
    pub session_id: String,
    /// The approval id (from `list_approvals`).
    pub approval_id: u64,
    /// The verdict.
    pub decision: Decision,
}

/// `answer_question`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerQuestion {
    /// The session asking.
    pub session_id: String,
    /// The answer.
    pub text: String,
}

/// `set_autonomy`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetAutonomy {
    /// The session; absent to set the default of new sessions (persisted).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The level.
    pub level: Autonomy,
}

/// What a rewind puts back.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The project's files and the conversation.
    #[default]
    Both,
    /// Only the project's files.
    Code,
    /// Only the conversation (the next follow-up continues from before the turn).
    Conversation,
}

impl From<Scope> for RewindScope {
    fn from(scope: Scope) -> RewindScope {
        match scope {
            Scope::Both => RewindScope::Both,
            Scope::Code => RewindScope::Code,
            Scope::Conversation => RewindScope::Conversation,
        }
    }
}

/// `rewind`: a session's files and conversation back to before a turn.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewind {
    /// The session.
    pub session_id: String,
    /// Rewind to before this turn (as the session's checkpoints number it); absent with
    /// `undo`.
    #[serde(default)]
    pub to_turn: Option<u32>,
    /// Undo the session's last rewind instead.
    #[serde(default)]
    pub undo: bool,
    /// What to put back (default both).
    #[serde(default)]
    pub scope: Scope,
    /// Rewind even when files changed since the session's last checkpoint by something other
    /// than the session (their changes are lost).
    #[serde(default)]
    pub force: bool,
    /// Change nothing; say what the rewind would change (the files and the diff).
    #[serde(default)]
    pub preview: bool,
    /// Rewind the session's sub-agents' worktrees too, each to how it was when the turn
    /// began (default: they are left as they are).
    #[serde(default)]
    pub with_children: bool,
}

/// `delegate`: one bounded task to an external CLI.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Delegate {
    /// The CLI: `codex` or `claude-code`.
    pub agent: String,
    /// The prompt.
    pub prompt: String,
    /// The JSON Schema (Draft 2020-12) the answer must match.
    pub schema: serde_json::Value,
    /// The model; required unless `[agent.<name>] model` is set in the project's
    /// intendant.toml.
    #[serde(default)]
    pub model: Option<String>,
    /// Reasoning effort, for CLIs that take one.
    #[serde(default)]
    pub effort: Option<String>,
    /// Deadline in seconds (default 50, at most 600: raise the client's tool timeout to match).
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Limit on the CLI's output in bytes.
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// The project whose intendant.toml configures the CLI (default: the MCP server's working
    /// directory); its security-relevant settings count only once trusted.
    #[serde(default)]
    pub project_dir: Option<String>,
}

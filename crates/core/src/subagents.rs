//! Sub-agents: a session splits its task and hands parts to child sessions that run in parallel,
//! each a full supervised session (own approvals, transcript, log), each reporting a structured
//! result back.
//!
//! The model drives it with five tools the controller handles itself (they never reach the
//! runtime): a parent has `spawn_sub_agent`, `wait_sub_agents`, `message_sub_agent` and
//! `stop_sub_agent`; a child has `submit_result`, and ends once it has submitted. [`SubAgents`]
//! answers a parent's calls through the daemon's [`SessionHost`], so children are ordinary
//! sessions everywhere sessions show (nested under their parent, their approvals in the same
//! queue). The limits ([`SubAgentLimits`], `[subagents]` in `intendant.toml`) are enforced here
//! with a tool error the model can read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    Backend, HostErrorCode, Isolation, SessionIntent, SessionStatus, SessionSummary, StartRequest,
    SubmittedResult,
};
use intendant_protocol::events::ControlMsg;
use intendant_protocol::tools::ToolName;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::autonomy::SharedLevel;
use crate::host::SessionHost;
use crate::tool_args::Args;

/// Longest one `wait_sub_agents` call may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// The wait when the model gives none.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// How often a wait looks at its children again.
const WAIT_POLL: Duration = Duration::from_millis(200);
/// Most characters of a child's final text or summary returned to the parent per child.
const REPORT_CHARS: usize = 8000;

/// `[subagents]` in `intendant.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubAgentLimits {
    /// Deepest nesting: a session at this depth (the top session is depth 0) cannot spawn.
    pub max_depth: u32,
    /// Children of one session running at once.
    pub max_children: u32,
}

impl Default for SubAgentLimits {
    fn default() -> SubAgentLimits {
        SubAgentLimits {
            max_depth: 2,
            max_children: 4,
        }
    }
}

/// A parent's or child's sub-agent tool call, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum SubAgentCall {
    /// `spawn_sub_agent`.
    Spawn(SpawnRequest),
    /// `wait_sub_agents`: the children to wait for (empty: all of this session's) and the wait.
    Wait {
        /// Child session ids.
        ids: Vec<String>,
        /// Bounded wait.
        timeout: Duration,
    },
    /// `message_sub_agent`: a follow-up to a running child.
    Message {
        /// Child session id.
        id: String,
        /// The follow-up.
        text: String,
    },
    /// `stop_sub_agent`.
    Stop {
        /// Child session id.
        id: String,
    },
    /// `submit_result` (a child's report; ends the child).
    Submit {
        /// Summary of what was done.
        summary: String,
        /// Structured fields.
        fields: Value,
    },
}

/// What `spawn_sub_agent` asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnRequest {
    /// The child's task.
    pub task: String,
    /// Its role (research, implementation, review, ...).
    pub role: Option<String>,
    /// Where it works.
    pub isolation: Isolation,
    /// What runs it: `native` or an external agent CLI's name.
    pub backend: Backend,
    /// Model name.
    pub model: Option<String>,
    /// Autonomy level (no higher than the parent's).
    pub autonomy: Option<AutonomyLevel>,
    /// Token budget, carved from the parent's.
    pub token_budget: Option<u64>,
}

/// A required text argument of `tool`; a blank one is as missing as an absent one.
fn required_text(tool: ToolName, a: &Args<'_>, key: &str) -> Result<String, String> {
    let value = a.required(key)?;
    if value.trim().is_empty() {
        return Err(format!("{tool}: missing required argument `{key}`"));
    }
    Ok(value)
}

/// Validates the arguments of `spawn_sub_agent`.
pub(crate) fn parse_spawn(a: &Args<'_>) -> Result<SubAgentCall, String> {
    let name = ToolName::SpawnSubAgent;
    let isolation = match a.string("isolation")? {
        None => Isolation::Worktree,
        Some(given) => Isolation::from_name(&given)
            .ok_or_else(|| format!("{name}: isolation {given:?} is not `worktree` or `shared`"))?,
    };
    let backend = a
        .string("backend")?
        .as_deref()
        .map_or(Backend::Native, Backend::named);
    let autonomy = a
        .string("autonomy")?
        .map(|l| {
            l.parse::<AutonomyLevel>()
                .map_err(|e| format!("{name}: {e}"))
        })
        .transpose()?;
    let positive = || format!("{name}: `token_budget` must be a positive integer");
    let token_budget = match a.integer("token_budget").map_err(|_| positive())? {
        Some(0) => return Err(positive()),
        budget => budget,
    };
    Ok(SubAgentCall::Spawn(SpawnRequest {
        task: required_text(name, a, "task")?,
        role: a.string("role")?,
        isolation,
        backend,
        model: a.string("model")?,
        autonomy,
        token_budget,
    }))
}

/// Validates the arguments of `wait_sub_agents`.
pub(crate) fn parse_wait(a: &Args<'_>) -> Result<SubAgentCall, String> {
    let name = ToolName::WaitSubAgents;
    let ids = match a.map.get("ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{name}: `ids` must be strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("{name}: `ids` must be an array of session ids")),
    };
    let timeout = a
        .integer("timeout_s")
        .map_err(|_| format!("{name}: `timeout_s` must be a whole number"))?
        .map_or(DEFAULT_WAIT, |s| Duration::from_secs(s).min(MAX_WAIT));
    Ok(SubAgentCall::Wait { ids, timeout })
}

/// Validates the arguments of `message_sub_agent`.
pub(crate) fn parse_message(a: &Args<'_>) -> Result<SubAgentCall, String> {
    let name = ToolName::MessageSubAgent;
    Ok(SubAgentCall::Message {
        id: required_text(name, a, "id")?,
        text: required_text(name, a, "text")?,
    })
}

/// Validates the arguments of `stop_sub_agent`.
pub(crate) fn parse_stop(a: &Args<'_>) -> Result<SubAgentCall, String> {
    let id = required_text(ToolName::StopSubAgent, a, "id")?;
    Ok(SubAgentCall::Stop { id })
}

/// Validates the arguments of `submit_result`.
pub(crate) fn parse_submit(a: &Args<'_>) -> Result<SubAgentCall, String> {
    let name = ToolName::SubmitResult;
    let fields = match a.map.get("fields") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(format!("{name}: `fields` must be a JSON object")),
    };
    Ok(SubAgentCall::Submit {
        summary: required_text(name, a, "summary")?,
        fields,
    })
}

/// A child's report in a tool call named `name` with `arguments`, as `submit_result` validates
/// it; `None` when the call is another tool or not a valid report.
pub fn submitted_result(name: &str, arguments: &Value) -> Option<SubmittedResult> {
    if ToolName::from_name(name) != Some(ToolName::SubmitResult) {
        return None;
    }
    let map = arguments.as_object()?;
    match parse_submit(&Args::new(name, map)) {
        Ok(SubAgentCall::Submit { summary, fields }) => Some(SubmittedResult { summary, fields }),
        Ok(
            SubAgentCall::Spawn(_)
            | SubAgentCall::Wait { .. }
            | SubAgentCall::Message { .. }
            | SubAgentCall::Stop { .. },
        )
        | Err(_) => None,
    }
}

/// The tool definitions of the parent side (`spawn`, `wait`, `message`, `stop`).
pub fn parent_tools() -> Vec<(ToolName, &'static str, Value)> {
    vec![
        (
            ToolName::SpawnSubAgent,
            "Start a child session on a part of the task; it runs in parallel with you and reports \
             back with a summary and structured fields. Returns its id at once. isolation \
             `worktree` (default) gives it its own git worktree on a new branch from your HEAD \
             (merge its branch when it reports); `shared` works in your directory.",
            json!({"type": "object", "properties": {
                "task": {"type": "string", "description": "What the child must do, self-contained."},
                "role": {"type": "string", "description": "research, implementation or review (its role prompt)."},
                "isolation": {"type": "string", "enum": Isolation::ALL.map(Isolation::name)},
                "backend": {"type": "string", "description": "native (default) or an agent CLI: codex, claude-code, kimi."},
                "model": {"type": "string"},
                "autonomy": {"type": "string", "enum": AutonomyLevel::ALL.map(AutonomyLevel::name), "description": "No higher than yours."},
                "token_budget": {"type": "integer", "minimum": 1, "description": "Carved from your budget."}
            }, "required": ["task"], "additionalProperties": false}),
        ),
        (
            ToolName::WaitSubAgents,
            "Wait (bounded) until the given children (default: all of yours) have reported or \
             ended; returns each one's status and submitted result.",
            json!({"type": "object", "properties": {
                "ids": {"type": "array", "items": {"type": "string"}},
                "timeout_s": {"type": "integer", "minimum": 0, "maximum": 600, "description": "Default 60."}
            }, "additionalProperties": false}),
        ),
        (
            ToolName::MessageSubAgent,
            "Send a follow-up message to one of your children. One that has ended (stopped, \
             or interrupted by a restart of the daemon) is resumed with it: it goes on with its \
             conversation (and its worktree, if still there), in its budget carved again from \
             yours; wait for it as for a new one.",
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "text": {"type": "string"}
            }, "required": ["id", "text"], "additionalProperties": false}),
        ),
        (
            ToolName::StopSubAgent,
            "Stop one of your children (it ends interrupted; its worktree is kept if dirty).",
            json!({"type": "object", "properties": {"id": {"type": "string"}},
                   "required": ["id"], "additionalProperties": false}),
        ),
    ]
}

/// The tool definition of the child side (`submit_result`).
pub fn child_tools() -> Vec<(ToolName, &'static str, Value)> {
    vec![(
        ToolName::SubmitResult,
        "Report your result to the session that started you, and end. Call it once your part \
         is done (commit your work first when you are in a worktree).",
        json!({"type": "object", "properties": {
            "summary": {"type": "string", "description": "What you did and found."},
            "fields": {"type": "object", "description": "Structured results, e.g. {\"branch\": ..., \"files\": [...]}."}
        }, "required": ["summary"], "additionalProperties": false}),
    )]
}

/// Where a session stands among sub-agents, and the host its children run on.
#[derive(Clone)]
pub struct SubAgents {
    host: Arc<dyn SessionHost>,
    /// This session's id.
    session_id: String,
    /// The directory children start in (this session's project directory).
    project: String,
    /// This session's autonomy level as its approval gate reads it, live: no child may have more
    /// than it has at the spawn, and a child's own level is held under it afterwards.
    autonomy: SharedLevel,
    /// This session's depth (0: a top session).
    depth: u32,
    /// Whether this session is a child (it has `submit_result`).
    is_child: bool,
    limits: SubAgentLimits,
}

impl std::fmt::Debug for SubAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgents")
            .field("session_id", &self.session_id)
            .field("depth", &self.depth)
            .field("is_child", &self.is_child)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The answer to one sub-agent call: the tool output and whether it is an error.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// Tool output (JSON text).
    pub output: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl CallResult {
    fn ok(value: Value) -> CallResult {
        CallResult {
            output: value.to_string(),
            is_error: false,
        }
    }

    fn error(message: impl Into<String>) -> CallResult {
        CallResult {
            output: json!({ "error": message.into() }).to_string(),
            is_error: true,
        }
    }
}

impl SubAgents {
    /// The sub-agent side of session `session_id`, at `depth`, whose children start in
    /// `project` on `host`.
    pub fn new(
        host: Arc<dyn SessionHost>,
        session_id: impl Into<String>,
        project: impl Into<String>,
        autonomy: SharedLevel,
        depth: u32,
        limits: SubAgentLimits,
    ) -> SubAgents {
        SubAgents {
            host,
            session_id: session_id.into(),
            project: project.into(),
            autonomy,
            depth,
            is_child: depth > 0,
            limits,
        }
    }

    /// Whether this session may spawn (offered the parent tools).
    pub fn can_spawn(&self) -> bool {
        self.depth < self.limits.max_depth
    }

    /// Whether this session is a child (offered `submit_result`).
    pub fn is_child(&self) -> bool {
        self.is_child
    }

    /// Answers a parent-side call (`Submit` is the loop's to handle: it ends the session).
    /// `budget_left` is what remains of this session's token budget (`None`: no budget);
    /// a spawn's budget is carved from it, and the tokens carved are returned with the result.
    pub async fn handle(&self, call: SubAgentCall, budget_left: Option<u64>) -> (CallResult, u64) {
        match call {
            SubAgentCall::Spawn(request) => self.spawn(request, budget_left).await,
            SubAgentCall::Wait { ids, timeout } => {
                // Its children may need the slot this round holds: given to them meanwhile,
                // and the round goes on once it has one again.
                self.host.set_aside(&self.session_id).await;
                let result = self.wait(ids, timeout).await;
                self.host.rejoin(&self.session_id).await;
                (result, 0)
            }
            SubAgentCall::Message { id, text } => self.message(&id, text, budget_left).await,
            SubAgentCall::Stop { id } => (self.stop(&id).await, 0),
            SubAgentCall::Submit { .. } => (
                CallResult::error("submit_result is handled by the session itself"),
                0,
            ),
        }
    }

    /// Whether one more child may be alive, within `max_children`; why not, else. An idle
    /// child is alive (a follow-up wakes it), so it counts: only an ended one frees its place.
    async fn room_for_a_child(&self) -> Result<(), String> {
        let children = self.children().await?;
        let alive = children.iter().filter(|c| !c.status.is_finished()).count();
        if alive >= self.limits.max_children as usize {
            return Err(format!(
                "{alive} children are alive (running or idle) and at most {} may be at once \
                 ([subagents] max_children); wait for one to finish, or stop an idle one with \
                 stop_sub_agent",
                self.limits.max_children
            ));
        }
        Ok(())
    }

    async fn children(&self) -> Result<Vec<SessionSummary>, String> {
        self.host
            .children(&self.session_id)
            .await
            .map_err(|e| e.to_string())
    }

    async fn spawn(&self, request: SpawnRequest, budget_left: Option<u64>) -> (CallResult, u64) {
        if !self.can_spawn() {
            return (
                CallResult::error(format!(
                    "spawn_sub_agent refused: this session is at depth {} and the maximum depth \
                     is {} ([subagents] max_depth)",
                    self.depth, self.limits.max_depth
                )),
                0,
            );
        }
        if let Err(why) = self.room_for_a_child().await {
            return (
                CallResult::error(format!("spawn_sub_agent refused: {why}")),
                0,
            );
        }
        // The level now, not the one this session started with: a human may have lowered it.
        let current = self.autonomy.get();
        let autonomy = request.autonomy.unwrap_or(current);
        if autonomy > current {
            return (
                CallResult::error(format!(
                    "spawn_sub_agent refused: autonomy {autonomy} is higher than this session's \
                     ({current})"
                )),
                0,
            );
        }
        let token_budget = match carved(request.token_budget, budget_left) {
            Ok(budget) => budget,
            Err(why) => {
                return (
                    CallResult::error(format!("spawn_sub_agent refused: {why}")),
                    0,
                );
            }
        };
        let start = StartRequest {
            task: request.task,
            project: self.project.clone(),
            autonomy: Some(autonomy),
            model: request.model,
            backend: Some(request.backend),
            parent: Some(self.session_id.clone()),
            isolation: Some(request.isolation),
            role: request.role,
            token_budget,
            ..StartRequest::default()
        };
        match self.host.start(start).await {
            Ok(child) => {
                let carved = if budget_left.is_some() {
                    token_budget.unwrap_or(0)
                } else {
                    0
                };
                (
                    CallResult::ok(json!({
                        "id": child.id,
                        "status": child.status.name(),
                        "worktree": child.worktree,
                        "autonomy": child.autonomy,
                        "token_budget": token_budget,
                    })),
                    carved,
                )
            }
            Err(e) => (CallResult::error(format!("spawn_sub_agent: {e}")), 0),
        }
    }

    /// Waits until every child in `ids` (all of this session's when empty) has reported or
    /// ended, or `timeout` passed; reports each one.
    async fn wait(&self, ids: Vec<String>, timeout: Duration) -> CallResult {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let children = match self.children().await {
                Ok(children) => children,
                Err(e) => return CallResult::error(format!("wait_sub_agents: {e}")),
            };
            let by_id: BTreeMap<&str, &SessionSummary> =
                children.iter().map(|c| (c.id.as_str(), c)).collect();
            if let Some(unknown) = ids.iter().find(|id| !by_id.contains_key(id.as_str())) {
                return CallResult::error(format!(
                    "wait_sub_agents: {unknown:?} is not a child of this session"
                ));
            }
            let wanted: Vec<&SessionSummary> = if ids.is_empty() {
                children.iter().collect()
            } else {
                ids.iter()
                    .filter_map(|id| by_id.get(id.as_str()).copied())
                    .collect()
            };
            if wanted.is_empty() {
                return CallResult::error("wait_sub_agents: this session has no children");
            }
            let settled = |c: &SessionSummary| {
                c.status.is_finished() || c.status == SessionStatus::Idle || c.result.is_some()
            };
            let all_settled = wanted.iter().all(|c| settled(c));
            if all_settled || tokio::time::Instant::now() >= deadline {
                // A listing cuts long texts: each child reported is read whole.
                let mut reports = Vec::with_capacity(wanted.len());
                for listed in wanted {
                    let whole = self.host.session(&listed.id).await;
                    reports.push(report(whole.as_ref().unwrap_or(listed)));
                }
                return CallResult::ok(json!({
                    "all_reported": all_settled,
                    "children": reports,
                }));
            }
            tokio::time::sleep(WAIT_POLL.min(deadline - tokio::time::Instant::now())).await;
        }
    }

    async fn own_child(&self, tool: ToolName, id: &str) -> Result<SessionSummary, CallResult> {
        match self.host.session(id).await {
            Ok(s) if s.parent.as_deref() == Some(self.session_id.as_str()) => Ok(s),
            Ok(_) | Err(_) => Err(CallResult::error(format!(
                "{tool}: {id:?} is not a child of this session"
            ))),
        }
    }

    /// A follow-up to child `id`; one that has ended is resumed with it ([`SubAgents::resume`]).
    async fn message(&self, id: &str, text: String, budget_left: Option<u64>) -> (CallResult, u64) {
        if let Err(e) = self.own_child(ToolName::MessageSubAgent, id).await {
            return (e, 0);
        }
        let intent = SessionIntent {
            session_id: id.to_owned(),
            msg: ControlMsg::FollowUp { text: text.clone() },
        };
        match self.host.send(intent).await {
            Ok(sent) => (
                CallResult::ok(json!({ "id": id, "delivered": true, "sent": sent })),
                0,
            ),
            Err(e) if e.code == HostErrorCode::SessionFinished => {
                self.resume(id, text, budget_left).await
            }
            Err(e) => (
                CallResult::error(format!("{}: {e}", ToolName::MessageSubAgent)),
                0,
            ),
        }
    }

    /// Resumes child `id`, which has ended, with `text`: within `max_children` as a spawn is,
    /// under this session again (its level, its stop; the host places it so), in a budget carved
    /// from this session's as a spawn's default is. A daemon restart ends every child a parent
    /// waited on; without this its parent could only start new ones, from scratch.
    async fn resume(&self, id: &str, text: String, budget_left: Option<u64>) -> (CallResult, u64) {
        let name = ToolName::MessageSubAgent;
        let refused = |why: String| {
            (
                CallResult::error(format!("{name}: {id} has ended and was not resumed: {why}")),
                0,
            )
        };
        if let Err(why) = self.room_for_a_child().await {
            return refused(why);
        }
        let token_budget = match carved(None, budget_left) {
            Ok(budget) => budget,
            Err(why) => return refused(why),
        };
        let start = StartRequest {
            task: text,
            resume: Some(id.to_owned()),
            token_budget,
            ..StartRequest::default()
        };
        match self.host.start(start).await {
            Ok(child) => (
                CallResult::ok(json!({
                    "id": child.id,
                    "resumed": true,
                    "status": child.status.name(),
                    "worktree": child.worktree,
                    "autonomy": child.autonomy,
                    "token_budget": token_budget,
                })),
                token_budget.unwrap_or(0),
            ),
            Err(e) => (
                CallResult::error(format!(
                    "{name}: {id} has ended and could not be resumed: {e}"
                )),
                0,
            ),
        }
    }

    async fn stop(&self, id: &str) -> CallResult {
        if let Err(e) = self.own_child(ToolName::StopSubAgent, id).await {
            return e;
        }
        match self.host.stop(id).await {
            Ok(()) => CallResult::ok(json!({ "id": id, "stopping": true })),
            Err(e) => CallResult::error(format!("{}: {e}", ToolName::StopSubAgent)),
        }
    }
}

/// The token budget a child is given from what is `left` of this session's (`None`: it has
/// none): what it `asked`, at most what is left, else half of it; why not when nothing is left.
fn carved(asked: Option<u64>, left: Option<u64>) -> Result<Option<u64>, String> {
    match (asked, left) {
        (_, Some(0)) => Err("no token budget is left to carve".to_owned()),
        (Some(asked), Some(left)) => Ok(Some(asked.min(left))),
        (None, Some(left)) => Ok(Some(left / 2)),
        (asked, None) => Ok(asked),
    }
}

/// One child as the parent sees it after a wait.
fn report(child: &SessionSummary) -> Value {
    let clip = |text: &str| -> String {
        match text.char_indices().nth(REPORT_CHARS) {
            Some((cut, _)) => format!("{}… [cut]", &text[..cut]),
            None => text.to_owned(),
        }
    };
    json!({
        "id": child.id,
        "task": clip(&child.task),
        "status": child.status.name(),
        "submitted": child.result.as_ref().map(|r| json!({
            "summary": clip(&r.summary),
            "fields": r.fields,
        })),
        "final_text": child.final_text.as_deref().map(clip),
        "worktree": child.worktree,
        "tokens": child.input_tokens + child.output_tokens,
    })
}

#[cfg(test)]
mod tests {
    use intendant_protocol::daemon::SubmittedResult;

    use super::*;
    use crate::host::double::HostDouble;

    fn summary(id: &str, parent: Option<&str>, status: SessionStatus) -> SessionSummary {
        SessionSummary {
            id: id.into(),
            parent: parent.map(Into::into),
            project: "/p".into(),
            task: format!("task of {id}"),
            backend: Backend::Native,
            provider: "mock".into(),
            model: "m".into(),
            status,
            reason: None,
            autonomy: AutonomyLevel::Medium,
            created: "2026-12-01T00:00:00Z".into(),
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.0,
            pending_approvals: 0,
            skills: Vec::new(),
            final_text: None,
            result: None,
            worktree: None,
            usage: None,
            run_by: None,
            network: None,
        }
    }

    fn parent(host: &Arc<HostDouble>, depth: u32) -> SubAgents {
        let host: Arc<dyn SessionHost> = host.clone();
        SubAgents::new(
            host,
            "p",
            "/p",
            SharedLevel::new(AutonomyLevel::Medium),
            depth,
            SubAgentLimits {
                max_depth: 2,
                max_children: 2,
            },
        )
    }

    fn spawn(task: &str) -> SubAgentCall {
        SubAgentCall::Spawn(SpawnRequest {
            task: task.into(),
            role: Some("implementation".into()),
            isolation: Isolation::Worktree,
            backend: Backend::Native,
            model: None,
            autonomy: None,
            token_budget: Some(1000),
        })
    }

    fn output(r: &CallResult) -> Value {
        serde_json::from_str(&r.output).unwrap()
    }

    #[tokio::test]
    async fn a_spawn_starts_a_child_of_this_session_with_a_carved_budget() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        let (result, carved) = me.handle(spawn("edit a"), Some(600)).await;
        assert!(!result.is_error, "{result:?}");
        assert_eq!(output(&result)["id"], "c1");
        assert_eq!(carved, 600, "asked 1000, only 600 left");
        let started = host.started()[0].clone();
        assert_eq!(started.parent.as_deref(), Some("p"));
        assert_eq!(started.project, "/p");
        assert_eq!(started.isolation, Some(Isolation::Worktree));
        assert_eq!(started.token_budget, Some(600));
        assert_eq!(started.autonomy, Some(AutonomyLevel::Medium));
        // Without a budget of its own the parent gives what was asked and carves nothing.
        let (_, carved) = me.handle(spawn("edit b"), None).await;
        assert_eq!(carved, 0);
        assert_eq!(host.started()[1].token_budget, Some(1000));
    }

    #[tokio::test]
    async fn limits_refuse_with_a_tool_error() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        me.handle(spawn("a"), None).await;
        me.handle(spawn("b"), None).await;
        let (third, _) = me.handle(spawn("c"), None).await;
        assert!(third.is_error);
        assert!(third.output.contains("max_children"), "{}", third.output);
        // Depth: a child at the maximum depth cannot spawn.
        let deep = parent(&host, 2);
        assert!(!deep.can_spawn());
        let (refused, _) = deep.handle(spawn("d"), None).await;
        assert!(refused.output.contains("max_depth"), "{}", refused.output);
        // Autonomy no higher than the parent's.
        let mut high = spawn("e");
        if let SubAgentCall::Spawn(req) = &mut high {
            req.autonomy = Some(AutonomyLevel::Full);
        }
        host.clear_sessions();
        let (refused, _) = me.handle(high, None).await;
        assert!(refused.output.contains("higher than"), "{}", refused.output);
        // No budget left to carve.
        let (refused, _) = me.handle(spawn("f"), Some(0)).await;
        assert!(refused.output.contains("budget"), "{}", refused.output);
        assert_eq!(host.started().len(), 2);
    }

    #[tokio::test]
    async fn idle_children_count_against_max_children_and_ended_ones_do_not() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        me.handle(spawn("a"), None).await;
        me.handle(spawn("b"), None).await;
        for child in ["c1", "c2"] {
            host.set_status(child, SessionStatus::Idle);
        }
        let (third, _) = me.handle(spawn("c"), None).await;
        assert!(third.is_error, "two idle children are two alive");
        assert!(third.output.contains("stop_sub_agent"), "{}", third.output);
        host.set_status("c1", SessionStatus::Done);
        let (third, _) = me.handle(spawn("c"), None).await;
        assert!(!third.is_error, "{}", third.output);
        assert_eq!(host.started().len(), 3);
    }

    #[tokio::test]
    async fn a_spawn_reads_this_sessions_level_now_not_the_one_it_started_with() {
        let host = HostDouble::with_ids("c");
        let level = SharedLevel::new(AutonomyLevel::High);
        let host_dyn: Arc<dyn SessionHost> = host.clone();
        let me = SubAgents::new(
            host_dyn,
            "p",
            "/p",
            level.clone(),
            0,
            SubAgentLimits::default(),
        );
        // A human lowers the session after it started.
        level.set(AutonomyLevel::Low);
        let (ok, _) = me.handle(spawn("a"), None).await;
        assert!(!ok.is_error, "{ok:?}");
        assert_eq!(
            host.started()[0].autonomy,
            Some(AutonomyLevel::Low),
            "a child asked for no level gets the parent's level now"
        );
        let mut high = spawn("b");
        if let SubAgentCall::Spawn(req) = &mut high {
            req.autonomy = Some(AutonomyLevel::High);
        }
        let (refused, _) = me.handle(high, None).await;
        assert!(
            refused.is_error && refused.output.contains("higher than this session's (low)"),
            "{}",
            refused.output
        );
        assert_eq!(host.started().len(), 1);
    }

    #[tokio::test]
    async fn a_message_to_an_ended_child_resumes_it_within_the_limits_and_the_budget() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        host.insert(summary("c0", Some("p"), SessionStatus::Interrupted));
        host.insert(summary("x", None, SessionStatus::Interrupted));
        let message = |id: &str| SubAgentCall::Message {
            id: id.into(),
            text: "go on from where you were".into(),
        };
        // Not this session's child: refused, nothing started.
        let (refused, _) = me.handle(message("x"), None).await;
        assert!(refused.is_error, "{refused:?}");
        // No budget left to resume it with: refused.
        let (refused, _) = me.handle(message("c0"), Some(0)).await;
        assert!(refused.output.contains("no token budget"), "{refused:?}");
        assert!(host.started().is_empty());

        let (resumed, carved) = me.handle(message("c0"), Some(900)).await;
        assert!(!resumed.is_error, "{resumed:?}");
        assert_eq!(output(&resumed)["resumed"], true);
        assert_eq!(carved, 450, "carved as a spawn's default is");
        let start = host.started().pop().unwrap();
        assert_eq!(start.resume.as_deref(), Some("c0"));
        assert_eq!(start.task, "go on from where you were");
        assert_eq!(start.token_budget, Some(450));
        // The host places it (its parent, project, level): the request names none of them.
        assert_eq!(
            (start.parent, start.project.as_str(), start.autonomy),
            (None, "", None)
        );

        assert_eq!(
            output(&resumed)["id"],
            "c0",
            "the same child, running again"
        );
        // Two alive (the resumed one and a new one): a third is not.
        let (second, _) = me.handle(spawn("b"), None).await;
        assert!(!second.is_error, "{second:?}");
        host.insert(summary("c9", Some("p"), SessionStatus::Interrupted));
        let (full, _) = me.handle(message("c9"), None).await;
        assert!(full.output.contains("max_children"), "{full:?}");
        assert_eq!(host.started().len(), 2);
    }

    #[tokio::test]
    async fn wait_reports_each_child_and_failures_as_results() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        let mut done = summary("c1", Some("p"), SessionStatus::Done);
        let long = "edited a. ".repeat(600);
        done.result = Some(SubmittedResult {
            summary: long.clone(),
            fields: json!({"branch": "intendant/c1"}),
        });
        host.insert(done);
        host.insert(summary("c2", Some("p"), SessionStatus::Failed));
        host.insert(summary("other", Some("q"), SessionStatus::Running));
        let call = SubAgentCall::Wait {
            ids: Vec::new(),
            timeout: Duration::from_secs(5),
        };
        let (result, _) = me.handle(call, None).await;
        let value = output(&result);
        assert_eq!(value["all_reported"], true);
        let children = value["children"].as_array().unwrap();
        assert_eq!(children.len(), 2, "only this session's children: {value}");
        assert_eq!(children[0]["submitted"]["fields"]["branch"], "intendant/c1");
        assert_eq!(
            children[0]["submitted"]["summary"], long,
            "the whole summary, longer than a listing keeps"
        );
        assert_eq!(children[1]["status"], "failed");
        // A child still running when the wait ends is reported as running.
        host.set_status("c2", SessionStatus::Running);
        let (result, _) = me
            .handle(
                SubAgentCall::Wait {
                    ids: vec!["c2".into()],
                    timeout: Duration::ZERO,
                },
                None,
            )
            .await;
        let value = output(&result);
        assert_eq!(value["all_reported"], false);
        assert_eq!(value["children"][0]["status"], "running");
        let (unknown, _) = me
            .handle(
                SubAgentCall::Wait {
                    ids: vec!["other".into()],
                    timeout: Duration::ZERO,
                },
                None,
            )
            .await;
        assert!(unknown.is_error && unknown.output.contains("not a child"));
    }

    #[tokio::test]
    async fn message_and_stop_reach_only_own_children() {
        let host = HostDouble::with_ids("c");
        let me = parent(&host, 0);
        host.insert(summary("c1", Some("p"), SessionStatus::Running));
        host.insert(summary("x", None, SessionStatus::Running));
        let (ok, _) = me
            .handle(
                SubAgentCall::Message {
                    id: "c1".into(),
                    text: "also b".into(),
                },
                None,
            )
            .await;
        assert!(!ok.is_error);
        assert_eq!(
            host.intents()[0],
            SessionIntent {
                session_id: "c1".into(),
                msg: ControlMsg::FollowUp {
                    text: "also b".into()
                }
            }
        );
        let (refused, _) = me.handle(SubAgentCall::Stop { id: "x".into() }, None).await;
        assert!(refused.is_error);
        let (ok, _) = me
            .handle(SubAgentCall::Stop { id: "c1".into() }, None)
            .await;
        assert!(!ok.is_error);
        assert_eq!(host.stopped(), ["c1"]);
    }
}

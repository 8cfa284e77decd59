//! The frontend vocabulary: [`AppEvent`] (what happened, rendered by every frontend and persisted
//! to the session log) and [`ControlMsg`] (what a user asks for: approvals, answers, follow-ups).
//!
//! Intents ride the bus as [`AppEvent::ControlCommand`], so one subscriber sees both directions.
//! `intendant --json` prints [`AppEvent`]s one per stdout line and reads [`ControlMsg`]s from stdin.
//! Fields that are closed sets are enums ([`EndStatus`], [`RoundEnd`], [`Verdict`],
//! [`ContextAction`], [`ActionCategory`]) serialized as their snake_case names; the session log
//! stores each event as a [`SessionLogRecord`].

mod kinds;
mod record;

use serde::{Deserialize, Serialize};

use crate::autonomy::AutonomyLevel;
pub use crate::network::EgressVerdict;

pub use kinds::{
    ActionCategory, AgendaNotice, ContextAction, EndStatus, McpServerState, RecordedStatus,
    RoundEnd, UnknownCategory, Verdict,
};
pub use record::SessionLogRecord;

/// One thing that happened in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AppEvent {
    /// A session began (fresh or resumed).
    SessionStarted {
        /// Session id (also the log directory name).
        session_id: String,
        /// The task text.
        task: String,
        /// Model name.
        model: String,
        /// Provider wire name.
        provider: String,
        /// Project root the session works in.
        project_root: String,
        /// Whether an earlier session was resumed.
        resumed: bool,
    },
    /// A session ended.
    SessionEnded {
        /// Session id.
        session_id: String,
        /// How it ended (a session log whose writer died without this event also reads as
        /// `interrupted`).
        status: EndStatus,
        /// Human-readable reason.
        reason: String,
    },
    /// A model turn is about to be requested.
    TurnStarted {
        /// 1-based turn number within the session.
        turn: u32,
    },
    /// Visible model text as it streams (never persisted).
    ModelResponseDelta {
        /// The new text.
        text: String,
    },
    /// A whole model response.
    ModelResponse {
        /// Turn number.
        turn: u32,
        /// Visible text.
        text: String,
        /// Reasoning text, when the provider returned some.
        reasoning: String,
        /// The tool calls, in order.
        tool_calls: Vec<ToolCallInfo>,
    },
    /// The model refused the request, or the provider's safety filter stopped its answer: the
    /// round ends here (a follow-up may rephrase).
    Refusal {
        /// Turn number.
        turn: u32,
        /// The model's refusal, or the provider's reason when the model said nothing.
        text: String,
    },
    /// The output token cap cut the model's response short; when the loop goes on, the model
    /// is told.
    Truncated {
        /// Turn number.
        turn: u32,
        /// What was cut, e.g. the tool calls that were not run.
        detail: String,
    },
    /// The model called a tool.
    ToolCall {
        /// Call id (maps the result back).
        call_id: String,
        /// Tool name as the model sees it, e.g. `exec_command`.
        name: String,
        /// Parsed arguments (the raw text as a string when it was not JSON).
        arguments: serde_json::Value,
    },
    /// The runtime input of one batch, with the protocol token stripped.
    ToolBatch {
        /// Turn number.
        turn: u32,
        /// The `AgentInput`, token fields removed.
        input: serde_json::Value,
    },
    /// The result of one tool call, as sent back to the model.
    AgentOutput {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Result text.
        output: String,
    },
    /// Summary of one runtime batch.
    ToolBatchResult {
        /// Turn number.
        turn: u32,
        /// Per-command results and runner diagnostics (discarded lines, truncation, timeout).
        output: serde_json::Value,
    },
    /// A command waits for a human verdict.
    ApprovalRequired {
        /// Approval id, answered by [`ControlMsg::Approve`] and friends.
        id: u64,
        /// Session id.
        session_id: String,
        /// The whole command (`$ COMMAND`, `edit PATH (OPERATION)`, ...), never cut, with
        /// invisible and bidi characters escaped as `\u{..}`.
        command_preview: String,
        /// For an edit, what it changes (replaced text and replacement, or the content),
        /// escaped the same way and bounded (64 KiB, then "… N more bytes").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// Action category that required approval.
        category: ActionCategory,
    },
    /// An approval was decided.
    ApprovalResolved {
        /// Approval id.
        id: u64,
        /// The decision.
        verdict: Verdict,
    },
    /// The model asked the human a question (answer with [`ControlMsg::Input`]).
    HumanQuestion {
        /// Question id.
        id: u64,
        /// The question.
        question: String,
    },
    /// The human answered a question.
    HumanAnswer {
        /// Question id.
        id: u64,
        /// The answer.
        text: String,
    },
    /// Token use is near (or at) the session budget.
    BudgetWarning {
        /// Tokens used so far.
        used_tokens: u64,
        /// The budget.
        budget_tokens: u64,
        /// `used / budget`.
        fraction: f64,
    },
    /// The conversation was compacted or edited.
    ContextManagement {
        /// What kind of change.
        action: ContextAction,
        /// What was done.
        detail: String,
    },
    /// Token usage of one turn.
    Usage {
        /// Turn number.
        turn: u32,
        /// Input tokens, cached included.
        input_tokens: u64,
        /// Cached input tokens.
        cached_input_tokens: u64,
        /// Output tokens, reasoning included.
        output_tokens: u64,
        /// Reasoning tokens.
        reasoning_tokens: u64,
        /// Cost of this turn in USD (0 when the model has no known price).
        cost_usd: f64,
    },
    /// One round (a task or a follow-up) finished; the session may continue with a follow-up.
    RoundComplete {
        /// 1-based round number.
        round: u32,
        /// Turns taken so far in the session.
        turns: u32,
        /// Why the round ended.
        reason: RoundEnd,
        /// Session totals so far.
        input_tokens: u64,
        /// Session totals so far.
        output_tokens: u64,
        /// Session cost so far in USD.
        cost_usd: f64,
    },
    /// The model declared the task done (or the round ended without tool calls).
    Done {
        /// Final message.
        message: String,
    },
    /// Something failed.
    Error {
        /// What went wrong (secrets masked).
        message: String,
    },
    /// Something looks wrong but nothing ended (an external worker silent while its turn is
    /// open, a content part the provider sent that was skipped, the switch to the text tool
    /// path): shown to the user, who may interrupt.
    Warning {
        /// What looks wrong.
        message: String,
    },
    /// The autonomy level in force changed: a human set it (`ctl autonomy`, the dashboard),
    /// approve-all raised it, or, for a sub-agent, its parent's level changed (a sub-agent is
    /// never above its parent's level now).
    AutonomyChanged {
        /// The level in force now: what the next approval decision reads.
        level: AutonomyLevel,
        /// The session's own level; above `level` while its parent's level caps it.
        own: AutonomyLevel,
    },
    /// One run of one hook (`[hooks]`): which, for what, what it counted as and how long it
    /// took. A failed run (timeout, too much output, invalid output, a non-zero exit, a hook
    /// that cannot be started) says so in `failure`; the verdict is then what the failure
    /// counts as (`ask` for `pre_tool_use` and `approval_request`, `none` for the others).
    HookRun {
        /// The hook's command line, as configured.
        hook: String,
        /// The event it ran for (named so beside a log record's own `event`).
        hook_event: crate::hooks::HookEvent,
        /// What the run counted as.
        verdict: crate::hooks::HookVerdict,
        /// Wall-clock time of the run, in milliseconds.
        duration_ms: u64,
        /// The tool call it was about, when it was about one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// The hook's reason (bounded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// What went wrong, when the run failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
    },
    /// One connection a command asked the session's egress proxy for (`[sandbox] network =
    /// "proxy"`): the decision, and once it closed, what it carried.
    Egress {
        /// The destination host as the command asked for it (lower case; an address literal
        /// in its plain form).
        host: String,
        /// The destination port.
        port: u16,
        /// What the proxy did.
        verdict: EgressVerdict,
        /// The rule or answer that decided it, or why the connection failed.
        rule: String,
        /// Bytes from the command to the host.
        bytes_up: u64,
        /// Bytes from the host to the command.
        bytes_down: u64,
        /// From the request to the connection's end, in milliseconds.
        duration_ms: u64,
    },
    /// A configured MCP server (`[mcp_servers.NAME]`) started, failed, ended, is restarted or
    /// changed its tools. Its tool calls are ordinary `tool_call` / `agent_output` events.
    McpServer {
        /// The server's name.
        server: String,
        /// What happened.
        state: McpServerState,
        /// Details for a human: the tool count, the failure, the last lines of its stderr
        /// (bounded; never a credential the controller holds).
        detail: String,
    },
    /// Something on the daemon's agenda happened: an item's reminder is due, or a scheduled
    /// session was started, missed or could not start. Published once, by the daemon that
    /// took it, under the pseudo-session `agenda`.
    Agenda {
        /// The agenda entry.
        id: u64,
        /// What happened.
        notice: AgendaNotice,
        /// The item's text, or the scheduled task.
        text: String,
        /// The session started, or why it was not (empty for a reminder).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// Sessions whose records a prune removed (`intendant sessions prune`, `[daemon]
    /// session_retention_days`): they are no longer listed, and nothing more is published under
    /// their ids. Published by the daemon under the pseudo-session `daemon`, at most
    /// [`SessionsPage::SIZE`](crate::daemon::SessionsPage::SIZE) ids an event.
    SessionsPruned {
        /// The removed sessions' ids, oldest first.
        ids: Vec<String>,
    },
    /// Sessions whose listing changed with no event of theirs: recorded under the state root by
    /// another process (a one-shot run) and found since the daemon started, or listed as their
    /// record says once the process writing it is gone. A frontend holding a listing reads
    /// these rows again. Published by the daemon under the pseudo-session `daemon`, at most
    /// [`SessionsPage::SIZE`](crate::daemon::SessionsPage::SIZE) ids an event.
    SessionsChanged {
        /// The sessions' ids, oldest first.
        ids: Vec<String>,
    },
    /// A follow-up the daemon holds until the session can take it: the session is idle and
    /// waits for a running slot, or its round waits for a human's answers. It reaches the session
    /// later as a [`ControlMsg::FollowUp`] (those held together joined as one, as the loop joins
    /// follow-ups that arrive together). Recorded so that one still held when its daemon stopped
    /// is not lost: a resume of the session sends it.
    FollowUpHeld {
        /// The follow-up's text.
        text: String,
    },
    /// A user intent travelling on the bus.
    ControlCommand(ControlMsg),
}

/// A tool call as shown to frontends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallInfo {
    /// Call id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments (the raw text as a string when it was not JSON).
    pub arguments: serde_json::Value,
}

/// A user intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Approve one pending command.
    Approve {
        /// Approval id.
        id: u64,
    },
    /// Deny one pending command (stops the task).
    Deny {
        /// Approval id.
        id: u64,
    },
    /// Skip one pending command (the model is told it was not run).
    Skip {
        /// Approval id.
        id: u64,
    },
    /// Approve this command and everything after it in the session.
    ApproveAll {
        /// Approval id.
        id: u64,
    },
    /// Answers a `network` approval for good: this connection, the host for the rest of the
    /// session, and the host added to the project's `[sandbox.network] allow` (the file's trust
    /// re-recorded only when a human had trusted it, or it relaxed nothing, before). A human's
    /// answer: no surface sends it for a model, and it answers no other category.
    AllowHost {
        /// Approval id.
        id: u64,
    },
    /// Answer to a pending human question.
    Input {
        /// The answer.
        text: String,
    },
    /// A new instruction for the conversation.
    FollowUp {
        /// The instruction.
        text: String,
    },
}

impl AppEvent {
    /// Whether this event belongs to the persisted lifecycle subset (everything but deltas).
    pub fn is_lifecycle(&self) -> bool {
        match self {
            AppEvent::ModelResponseDelta { .. } => false,
            AppEvent::SessionStarted { .. }
            | AppEvent::SessionEnded { .. }
            | AppEvent::TurnStarted { .. }
            | AppEvent::ModelResponse { .. }
            | AppEvent::Refusal { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolCall { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::ToolBatchResult { .. }
            | AppEvent::ApprovalRequired { .. }
            | AppEvent::ApprovalResolved { .. }
            | AppEvent::HumanQuestion { .. }
            | AppEvent::HumanAnswer { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Usage { .. }
            | AppEvent::RoundComplete { .. }
            | AppEvent::Done { .. }
            | AppEvent::Error { .. }
            | AppEvent::Warning { .. }
            | AppEvent::AutonomyChanged { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::Egress { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. }
            | AppEvent::ControlCommand(_) => true,
        }
    }

    /// The `type` tag, e.g. `tool_call`.
    pub fn name(&self) -> &'static str {
        match self {
            AppEvent::SessionStarted { .. } => "session_started",
            AppEvent::SessionEnded { .. } => "session_ended",
            AppEvent::TurnStarted { .. } => "turn_started",
            AppEvent::ModelResponseDelta { .. } => "model_response_delta",
            AppEvent::ModelResponse { .. } => "model_response",
            AppEvent::Refusal { .. } => "refusal",
            AppEvent::Truncated { .. } => "truncated",
            AppEvent::ToolCall { .. } => "tool_call",
            AppEvent::ToolBatch { .. } => "tool_batch",
            AppEvent::AgentOutput { .. } => "agent_output",
            AppEvent::ToolBatchResult { .. } => "tool_batch_result",
            AppEvent::ApprovalRequired { .. } => "approval_required",
            AppEvent::ApprovalResolved { .. } => "approval_resolved",
            AppEvent::HumanQuestion { .. } => "human_question",
            AppEvent::HumanAnswer { .. } => "human_answer",
            AppEvent::BudgetWarning { .. } => "budget_warning",
            AppEvent::ContextManagement { .. } => "context_management",
            AppEvent::Usage { .. } => "usage",
            AppEvent::RoundComplete { .. } => "round_complete",
            AppEvent::Done { .. } => "done",
            AppEvent::Error { .. } => "error",
            AppEvent::Warning { .. } => "warning",
            AppEvent::AutonomyChanged { .. } => "autonomy_changed",
            AppEvent::HookRun { .. } => "hook_run",
            AppEvent::Egress { .. } => "egress",
            AppEvent::McpServer { .. } => "mcp_server",
            AppEvent::Agenda { .. } => "agenda",
            AppEvent::SessionsPruned { .. } => "sessions_pruned",
            AppEvent::SessionsChanged { .. } => "sessions_changed",
            AppEvent::FollowUpHeld { .. } => "follow_up_held",
            AppEvent::ControlCommand(_) => "control_command",
        }
    }
}

impl ControlMsg {
    /// The `action` tag, e.g. `approve_all`.
    pub fn name(&self) -> &'static str {
        match self {
            ControlMsg::Approve { .. } => "approve",
            ControlMsg::Deny { .. } => "deny",
            ControlMsg::Skip { .. } => "skip",
            ControlMsg::ApproveAll { .. } => "approve_all",
            ControlMsg::AllowHost { .. } => "allow_host",
            ControlMsg::Input { .. } => "input",
            ControlMsg::FollowUp { .. } => "follow_up",
        }
    }
}

/// One event of every variant, for tests that must meet them all (what renders or stores
/// events); `every_event_round_trips_and_fits_a_log_record` checks that none is missing.
// Over 100 lines on purpose: one literal event per variant, in one list, so a test meets them
// all.
#[cfg(any(test, feature = "fixtures"))]
pub fn one_of_each() -> Vec<AppEvent> {
    vec![
        AppEvent::SessionStarted {
            session_id: "s".into(),
            task: "t".into(),
            model: "m".into(),
            provider: "p".into(),
            project_root: "/r".into(),
            resumed: false,
        },
        AppEvent::SessionEnded {
            session_id: "s".into(),
            status: EndStatus::Completed,
            reason: "ok".into(),
        },
        AppEvent::TurnStarted { turn: 1 },
        AppEvent::ModelResponseDelta { text: "x".into() },
        AppEvent::ModelResponse {
            turn: 1,
            text: "x".into(),
            reasoning: "r".into(),
            tool_calls: vec![ToolCallInfo {
                call_id: "c".into(),
                name: "exec_command".into(),
                arguments: serde_json::json!({"command": "ls"}),
            }],
        },
        AppEvent::Refusal {
            turn: 1,
            text: "I can't help with that.".into(),
        },
        AppEvent::Truncated {
            turn: 1,
            detail: "cut".into(),
        },
        AppEvent::ToolCall {
            call_id: "c".into(),
            name: "exec_command".into(),
            arguments: serde_json::json!({"command": "ls"}),
        },
        AppEvent::ToolBatch {
            turn: 1,
            input: serde_json::json!({"commands": []}),
        },
        AppEvent::AgentOutput {
            call_id: "c".into(),
            name: "exec_command".into(),
            output: "o".into(),
        },
        AppEvent::ToolBatchResult {
            turn: 1,
            output: serde_json::json!({"results": []}),
        },
        AppEvent::ApprovalRequired {
            id: 1,
            session_id: "s".into(),
            command_preview: "$ ls".into(),
            detail: None,
            category: ActionCategory::CommandExec,
        },
        AppEvent::ApprovalResolved {
            id: 1,
            verdict: Verdict::Deny,
        },
        AppEvent::HumanQuestion {
            id: 2,
            question: "q".into(),
        },
        AppEvent::HumanAnswer {
            id: 2,
            text: "a".into(),
        },
        AppEvent::BudgetWarning {
            used_tokens: 9,
            budget_tokens: 10,
            fraction: 0.9,
        },
        AppEvent::ContextManagement {
            action: ContextAction::DropTurns,
            detail: "d".into(),
        },
        AppEvent::Usage {
            turn: 1,
            input_tokens: 1,
            cached_input_tokens: 0,
            output_tokens: 1,
            reasoning_tokens: 0,
            cost_usd: 0.5,
        },
        AppEvent::RoundComplete {
            round: 1,
            turns: 1,
            reason: RoundEnd::TurnCap,
            input_tokens: 1,
            output_tokens: 1,
            cost_usd: 0.5,
        },
        AppEvent::Done {
            message: "m".into(),
        },
        AppEvent::Error {
            message: "e".into(),
        },
        AppEvent::Warning {
            message: "w".into(),
        },
        AppEvent::AutonomyChanged {
            level: AutonomyLevel::Low,
            own: AutonomyLevel::Low,
        },
        AppEvent::HookRun {
            hook: "./guard.py".into(),
            hook_event: crate::hooks::HookEvent::PreToolUse,
            verdict: crate::hooks::HookVerdict::Deny,
            duration_ms: 12,
            tool: Some("exec_command".into()),
            reason: Some("no rm -rf".into()),
            failure: None,
        },
        AppEvent::Agenda {
            id: 4,
            notice: AgendaNotice::Reminder,
            text: "call the vendor".into(),
            detail: String::new(),
        },
        AppEvent::SessionsPruned {
            ids: vec!["20261205-000000-aaaa".into()],
        },
        AppEvent::SessionsChanged {
            ids: vec!["20261206-000000-bbbb".into()],
        },
        AppEvent::FollowUpHeld {
            text: "and the tests".into(),
        },
        AppEvent::ControlCommand(ControlMsg::Skip { id: 1 }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_tag_matches_name() {
        let events = [
            AppEvent::TurnStarted { turn: 1 },
            AppEvent::ModelResponseDelta { text: "x".into() },
            AppEvent::Done {
                message: "ok".into(),
            },
            AppEvent::Warning {
                message: "quiet".into(),
            },
            AppEvent::AutonomyChanged {
                level: AutonomyLevel::Low,
                own: AutonomyLevel::High,
            },
            AppEvent::McpServer {
                server: "files".into(),
                state: McpServerState::Ready,
                detail: "14 tools".into(),
            },
            AppEvent::ControlCommand(ControlMsg::Approve { id: 3 }),
        ];
        for e in events {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["type"], e.name(), "{v}");
            let back: AppEvent = serde_json::from_value(v).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn control_command_flattens_intent() {
        let e = AppEvent::ControlCommand(ControlMsg::FollowUp { text: "go".into() });
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"type":"control_command","action":"follow_up","text":"go"}"#
        );
    }

    #[test]
    fn control_msgs_parse_from_wire() {
        let m: ControlMsg = serde_json::from_str(r#"{"action":"approve_all","id":7}"#).unwrap();
        assert_eq!(m, ControlMsg::ApproveAll { id: 7 });
        assert_eq!(m.name(), "approve_all");
        let m: ControlMsg = serde_json::from_str(r#"{"action":"allow_host","id":8}"#).unwrap();
        assert_eq!(m, ControlMsg::AllowHost { id: 8 });
        assert_eq!(m.name(), "allow_host");
        let m: ControlMsg = serde_json::from_str(r#"{"action":"input","text":"yes"}"#).unwrap();
        assert_eq!(m, ControlMsg::Input { text: "yes".into() });
        assert!(serde_json::from_str::<ControlMsg>(r#"{"action":"nuke"}"#).is_err());
        assert!(serde_json::from_str::<ControlMsg>(r#"{"action":"approve"}"#).is_err());
    }

    #[test]
    fn closed_set_fields_travel_as_their_old_strings() {
        let lines: Vec<String> = one_of_each()
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    AppEvent::SessionEnded { .. }
                        | AppEvent::ApprovalRequired { .. }
                        | AppEvent::ApprovalResolved { .. }
                        | AppEvent::ContextManagement { .. }
                        | AppEvent::RoundComplete { .. }
                )
            })
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                r#"{"type":"session_ended","session_id":"s","status":"completed","reason":"ok"}"#,
                r#"{"type":"approval_required","id":1,"session_id":"s","command_preview":"$ ls","category":"command_exec"}"#,
                r#"{"type":"approval_resolved","id":1,"verdict":"deny"}"#,
                r#"{"type":"context_management","action":"drop_turns","detail":"d"}"#,
                r#"{"type":"round_complete","round":1,"turns":1,"reason":"turn_cap","input_tokens":1,"output_tokens":1,"cost_usd":0.5}"#,
            ]
        );
    }

    #[test]
    fn every_event_round_trips_and_fits_a_log_record() {
        let events = one_of_each();
        let names: std::collections::BTreeSet<&str> = events.iter().map(AppEvent::name).collect();
        assert_eq!(names.len(), events.len(), "one sample per variant");
        for event in events {
            let v = serde_json::to_value(&event).unwrap();
            assert_eq!(v["type"], event.name());
            // The record puts `ts`, `seq` and `event` beside the fields: no event may own those
            // names.
            assert!(
                v.get("ts").is_none() && v.get("seq").is_none() && v.get("event").is_none(),
                "{v}"
            );
            assert_eq!(serde_json::from_value::<AppEvent>(v).unwrap(), event);
            let record = SessionLogRecord {
                ts: "2026-11-30T10:15:30Z".into(),
                seq: None,
                event,
            };
            let line = serde_json::to_string(&record).unwrap();
            assert_eq!(
                serde_json::from_str::<SessionLogRecord>(&line).unwrap(),
                record
            );
        }
    }

    #[test]
    fn deltas_are_not_lifecycle() {
        assert!(!AppEvent::ModelResponseDelta { text: "x".into() }.is_lifecycle());
        assert!(AppEvent::TurnStarted { turn: 1 }.is_lifecycle());
    }
}

//! The frontend vocabulary: [`AppEvent`] (what happened, rendered by every frontend and persisted
//! to the session log) and [`ControlMsg`] (what a user asks for: approvals, answers, follow-ups).
//!
//! Intents ride the bus as [`AppEvent::ControlCommand`], so one subscriber sees both directions.
//! `intendant --json` prints [`AppEvent`]s one per stdout line and reads [`ControlMsg`]s from stdin.

use serde::{Deserialize, Serialize};

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
        /// `completed`, `failed`, `budget_exhausted`, `turn_cap` or `denied` (a session log
        /// whose writer died without this event reads as `interrupted`).
        status: String,
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
        /// Short description of the command.
        command_preview: String,
        /// Action category that required approval.
        category: String,
    },
    /// An approval was decided.
    ApprovalResolved {
        /// Approval id.
        id: u64,
        /// `approve`, `skip` or `deny`.
        verdict: String,
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
        /// `auto_compact`, `drop_turns` or `summarize`.
        action: String,
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
        /// Why the round ended: `done`, `budget_exhausted`, `turn_cap` or `denied`.
        reason: String,
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
            ControlMsg::Input { .. } => "input",
            ControlMsg::FollowUp { .. } => "follow_up",
        }
    }
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
        let m: ControlMsg = serde_json::from_str(r#"{"action":"input","text":"yes"}"#).unwrap();
        assert_eq!(m, ControlMsg::Input { text: "yes".into() });
        assert!(serde_json::from_str::<ControlMsg>(r#"{"action":"nuke"}"#).is_err());
        assert!(serde_json::from_str::<ControlMsg>(r#"{"action":"approve"}"#).is_err());
    }

    #[test]
    fn deltas_are_not_lifecycle() {
        assert!(!AppEvent::ModelResponseDelta { text: "x".into() }.is_lifecycle());
        assert!(AppEvent::TurnStarted { turn: 1 }.is_lifecycle());
    }
}

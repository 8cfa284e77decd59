//! The hooks' vocabulary (`[hooks]` in `intendant.toml`, `docs/hooks.md`): the events a hook is
//! bound to, the verdicts, the JSON object a hook reads on stdin ([`HookInput`]) and the one it
//! answers on stdout ([`HookOutput`]).
//!
//! The answer is read strictly (an unknown key or a decision the event does not take is invalid
//! output), so a misspelt `"decison"` fails as loudly as garbage instead of being ignored.

use serde::{Deserialize, Serialize};

use crate::autonomy::AutonomyLevel;
use crate::closed_set::closed_set;
use crate::events::{ActionCategory, EndStatus};

closed_set! {
    /// When a hook runs.
    pub enum HookEvent ("hook event") {
        /// Once, as the session's loop starts (fresh or resumed).
        SessionStart = "session_start",
        /// Before each task or follow-up reaches the model.
        UserPrompt = "user_prompt",
        /// Before each tool call is approved and run.
        PreToolUse = "pre_tool_use",
        /// After each tool call that ran, before its result reaches the model.
        PostToolUse = "post_tool_use",
        /// Before a human is asked to approve an action: the external reviewer.
        ApprovalRequest = "approval_request",
        /// When the model finished a round (it may be sent on).
        Stop = "stop",
        /// Once, as the session's loop ends.
        SessionEnd = "session_end",
    }
}

closed_set! {
    /// A hook's decision (`decision` on stdout), or what a run counted as (`verdict` of
    /// [`crate::events::AppEvent::HookRun`]).
    pub enum HookVerdict ("hook decision") {
        /// No objection (`pre_tool_use`: the call goes on to the ordinary approval).
        Allow = "allow",
        /// Refused: the call is not run, the prompt not sent, the reviewer's answer is no; for
        /// `post_tool_use` and `stop`, the reason goes to the model.
        Deny = "deny",
        /// A human must decide (`pre_tool_use`, `approval_request`).
        Ask = "ask",
        /// The reviewer approves (`approval_request` only).
        Approve = "approve",
        /// The hook decided nothing (empty output, or an event that takes no decision); never a
        /// decision a hook may print.
        None = "none",
    }
}

impl HookEvent {
    /// The decisions a hook of this event may print.
    pub fn decisions(self) -> &'static [HookVerdict] {
        match self {
            HookEvent::PreToolUse => &[HookVerdict::Allow, HookVerdict::Deny, HookVerdict::Ask],
            HookEvent::ApprovalRequest => {
                &[HookVerdict::Approve, HookVerdict::Deny, HookVerdict::Ask]
            }
            HookEvent::UserPrompt | HookEvent::PostToolUse | HookEvent::Stop => {
                &[HookVerdict::Allow, HookVerdict::Deny]
            }
            HookEvent::SessionStart | HookEvent::SessionEnd => &[HookVerdict::Allow],
        }
    }

    /// Whether a failed run of this event's hooks counts as `ask` (the call is asked, or denied
    /// where no human can answer) rather than being passed over with a warning.
    pub fn fails_closed(self) -> bool {
        match self {
            HookEvent::PreToolUse | HookEvent::ApprovalRequest => true,
            HookEvent::SessionStart
            | HookEvent::UserPrompt
            | HookEvent::PostToolUse
            | HookEvent::Stop
            | HookEvent::SessionEnd => false,
        }
    }
}

/// The tool call a hook is told about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookTool {
    /// Tool name as the model called it (`exec_command`).
    pub name: String,
    /// Call id.
    pub call_id: String,
    /// Parsed arguments (the raw text as a string when it was not JSON).
    pub arguments: serde_json::Value,
}

/// A tool call's result, as the model would see it (`post_tool_use`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookToolResult {
    /// The result text.
    pub output: String,
    /// Whether the model is told it failed.
    pub is_error: bool,
}

/// The action a reviewer is asked about (`approval_request`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookApproval {
    /// What the human would be shown (`$ rm -rf build`), escaped.
    pub preview: String,
    /// The action category whose rule asks.
    pub category: ActionCategory,
    /// For a file change, what it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The one JSON object a hook reads on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookInput {
    /// The event that ran it.
    pub event: HookEvent,
    /// Session id.
    pub session_id: String,
    /// The project root (also the hook's working directory).
    pub project_root: String,
    /// The autonomy level in force.
    pub autonomy: AutonomyLevel,
    /// `pre_tool_use`, `post_tool_use`, and `approval_request` where the action is a tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<HookTool>,
    /// `post_tool_use`: what the call returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<HookToolResult>,
    /// `user_prompt`: the task or follow-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `approval_request`: what a human would be asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<HookApproval>,
    /// `stop`: the model's final message; `session_end`: why the session ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `stop`: how many times a `stop` hook already sent this round on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued: Option<u32>,
    /// `session_end`: how the session ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EndStatus>,
}

/// The one JSON object a hook answers on stdout (empty output: no decision).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookOutput {
    /// The decision; absent: none.
    #[serde(default)]
    pub decision: Option<HookVerdict>,
    /// Why, for the user and (on a deny) the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// Text added for the model (`session_start`, `user_prompt`, `post_tool_use`).
    #[serde(default)]
    pub additional_context: Option<String>,
}

impl HookOutput {
    /// Reads a hook's answer: exactly one JSON object of these keys (a JSON array or any other
    /// value is refused, though serde would read an empty array as a struct).
    pub fn parse(text: &str) -> Result<HookOutput, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !value.is_object() {
            return Err("the answer is not a JSON object".to_owned());
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_wire_names_are_pinned() {
        let events: Vec<&str> = HookEvent::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(
            events,
            [
                "session_start",
                "user_prompt",
                "pre_tool_use",
                "post_tool_use",
                "approval_request",
                "stop",
                "session_end"
            ]
        );
        let verdicts: Vec<&str> = HookVerdict::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(verdicts, ["allow", "deny", "ask", "approve", "none"]);
        for event in HookEvent::ALL {
            assert!(
                !event.decisions().contains(&HookVerdict::None),
                "{event} takes none"
            );
        }
    }

    #[test]
    fn the_answer_is_read_strictly() {
        let ok = HookOutput::parse(r#"{"decision":"deny","reason":"no rm -rf"}"#).unwrap();
        assert_eq!(ok.decision, Some(HookVerdict::Deny));
        assert_eq!(ok.reason.as_deref(), Some("no rm -rf"));
        let empty = HookOutput::parse("{}").unwrap();
        assert_eq!(empty, HookOutput::default());
        for bad in [
            r#"{"decison":"deny"}"#,
            r#"{"decision":"block"}"#,
            r#"{"decision":1}"#,
            "[]",
            "\"deny\"",
            "{} {}",
        ] {
            assert!(HookOutput::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_tool_call_gates_fail_closed() {
        let closed: Vec<HookEvent> = HookEvent::ALL
            .into_iter()
            .filter(|e| e.fails_closed())
            .collect();
        assert_eq!(closed, [HookEvent::PreToolUse, HookEvent::ApprovalRequest]);
    }
}

//! The MCP server's vocabulary: its tools ([`McpTool`]) and the stable codes of a failed call
//! (`{"error": {"code", "message"}}`, [`ToolErrorCode`]): the daemon's own [`HostErrorCode`]s,
//! the delegation contract's [`ErrorCode`]s for `delegate`, and the few the MCP server adds
//! itself. The three sets of codes share no name, so a code names one variant.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::closed_set::{UnknownName, closed_set};
use crate::daemon::HostErrorCode;
use crate::delegation::ErrorCode;

closed_set! {
    /// A tool the MCP server offers, by the name an MCP client calls it.
    pub enum McpTool ("MCP tool") {
        /// Start a session on a task.
        RunTask = "run_task",
        /// Continue an ended session (stopped, interrupted by a daemon restart, or finished).
        ResumeSession = "resume_session",
        /// A follow-up instruction to a session.
        SendMessage = "send_message",
        /// One session's status, result and a page of its events.
        GetSession = "get_session",
        /// Every session the daemon knows.
        ListSessions = "list_sessions",
        /// Every approval waiting for a human.
        ListApprovals = "list_approvals",
        /// Answer a pending approval (only with `[mcp] allow_model_approvals`).
        ResolveApproval = "resolve_approval",
        /// Answer the question a session asked its human.
        AnswerQuestion = "answer_question",
        /// End a session's current turn.
        Interrupt = "interrupt",
        /// End a session.
        Stop = "stop",
        /// Set an autonomy level (only with `[mcp] allow_model_approvals`).
        SetAutonomy = "set_autonomy",
        /// Rewind a session's files and conversation to before a turn (or preview it).
        Rewind = "rewind",
        /// One bounded task for an external agent CLI.
        Delegate = "delegate",
        /// The daemon's agenda: list, add, done, snooze (never approve a schedule).
        Agenda = "agenda",
        /// Schedule one session at a time: it waits for its owner's approval (never a
        /// model's).
        Schedule = "schedule",
    }
}

closed_set! {
    /// A code only the MCP server gives (the request never reached the daemon or a CLI).
    pub enum CallErrorCode ("MCP call error code") {
        /// The arguments fail the tool's schema.
        InvalidArguments = "invalid_arguments",
        /// No tool has that name.
        UnknownTool = "unknown_tool",
        /// The client cancelled the call.
        Cancelled = "cancelled",
    }
}

/// Why an MCP tool call failed, as its `error.code` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum ToolErrorCode {
    /// The daemon refused or failed the request.
    Host(HostErrorCode),
    /// `delegate`: the delegation contract's code.
    Delegation(ErrorCode),
    /// The MCP server's own.
    Call(CallErrorCode),
}

impl ToolErrorCode {
    /// The wire name, e.g. `unknown_session`, `runtime_timeout` or `invalid_arguments`.
    pub fn name(self) -> &'static str {
        match self {
            ToolErrorCode::Host(code) => code.name(),
            ToolErrorCode::Delegation(code) => code.name(),
            ToolErrorCode::Call(code) => code.name(),
        }
    }

    /// The code whose wire name is `name`; `None` for any other string.
    pub fn from_name(name: &str) -> Option<ToolErrorCode> {
        HostErrorCode::from_name(name)
            .map(ToolErrorCode::Host)
            .or_else(|| ErrorCode::from_name(name).map(ToolErrorCode::Delegation))
            .or_else(|| CallErrorCode::from_name(name).map(ToolErrorCode::Call))
    }
}

impl From<HostErrorCode> for ToolErrorCode {
    fn from(code: HostErrorCode) -> ToolErrorCode {
        ToolErrorCode::Host(code)
    }
}

impl From<ErrorCode> for ToolErrorCode {
    fn from(code: ErrorCode) -> ToolErrorCode {
        ToolErrorCode::Delegation(code)
    }
}

impl From<CallErrorCode> for ToolErrorCode {
    fn from(code: CallErrorCode) -> ToolErrorCode {
        ToolErrorCode::Call(code)
    }
}

impl From<ToolErrorCode> for &'static str {
    fn from(code: ToolErrorCode) -> &'static str {
        code.name()
    }
}

impl TryFrom<String> for ToolErrorCode {
    type Error = UnknownName;

    fn try_from(name: String) -> Result<ToolErrorCode, UnknownName> {
        ToolErrorCode::from_name(&name).ok_or(UnknownName {
            what: "MCP tool error code",
            value: name,
            expected: &[],
        })
    }
}

impl fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_tool_names_are_pinned() {
        let table = [
            (McpTool::RunTask, "run_task"),
            (McpTool::ResumeSession, "resume_session"),
            (McpTool::SendMessage, "send_message"),
            (McpTool::GetSession, "get_session"),
            (McpTool::ListSessions, "list_sessions"),
            (McpTool::ListApprovals, "list_approvals"),
            (McpTool::ResolveApproval, "resolve_approval"),
            (McpTool::AnswerQuestion, "answer_question"),
            (McpTool::Interrupt, "interrupt"),
            (McpTool::Stop, "stop"),
            (McpTool::SetAutonomy, "set_autonomy"),
            (McpTool::Rewind, "rewind"),
            (McpTool::Delegate, "delegate"),
            (McpTool::Agenda, "agenda"),
            (McpTool::Schedule, "schedule"),
        ];
        assert_eq!(table.map(|(tool, _)| tool), McpTool::ALL);
        for (tool, name) in table {
            assert_eq!(tool.name(), name);
            assert_eq!(McpTool::from_name(name), Some(tool));
        }
        assert_eq!(McpTool::from_name("exec_command"), None);
    }

    /// Every code an MCP client may see, exactly as it has always been spelled.
    #[test]
    fn tool_error_codes_are_pinned_and_name_one_variant_each() {
        let table: Vec<(ToolErrorCode, &str)> = vec![
            (HostErrorCode::UnknownSession.into(), "unknown_session"),
            (HostErrorCode::UnknownApproval.into(), "unknown_approval"),
            (HostErrorCode::AlreadyAnswered.into(), "already_answered"),
            (HostErrorCode::SessionFinished.into(), "session_finished"),
            (HostErrorCode::InvalidRequest.into(), "invalid_request"),
            (HostErrorCode::ShuttingDown.into(), "shutting_down"),
            (HostErrorCode::Unavailable.into(), "unavailable"),
            (HostErrorCode::Forbidden.into(), "forbidden"),
            (HostErrorCode::Busy.into(), "busy"),
            (HostErrorCode::Internal.into(), "internal"),
            (
                ErrorCode::CliMissingExecutable.into(),
                "runtime_missing_executable",
            ),
            (
                ErrorCode::CliUnsupportedVersion.into(),
                "runtime_unsupported_version",
            ),
            (
                ErrorCode::CliUnsupportedCapability.into(),
                "runtime_unsupported_capability",
            ),
            (
                ErrorCode::CliNotAuthenticated.into(),
                "runtime_not_authenticated",
            ),
            (
                ErrorCode::CliStateUnwritable.into(),
                "runtime_state_unwritable",
            ),
            (ErrorCode::CliModelRequired.into(), "runtime_model_required"),
            (ErrorCode::CliModelMismatch.into(), "runtime_model_mismatch"),
            (
                ErrorCode::CliInputTooLarge.into(),
                "runtime_input_too_large",
            ),
            (
                ErrorCode::CliOutputTooLarge.into(),
                "runtime_output_too_large",
            ),
            (ErrorCode::CliTimeout.into(), "runtime_timeout"),
            (ErrorCode::CliCancelled.into(), "runtime_cancelled"),
            (ErrorCode::CliNonzeroExit.into(), "runtime_nonzero_exit"),
            (
                ErrorCode::CliMalformedProtocol.into(),
                "runtime_malformed_protocol",
            ),
            (
                ErrorCode::CliMissingTerminalState.into(),
                "runtime_missing_terminal_state",
            ),
            (ErrorCode::CliTurnFailed.into(), "runtime_turn_failed"),
            (ErrorCode::CliSchemaInvalid.into(), "runtime_schema_invalid"),
            (
                ErrorCode::CliApplicationInvalid.into(),
                "runtime_application_invalid",
            ),
            (
                ErrorCode::CliPermissionDenied.into(),
                "runtime_permission_denied",
            ),
            (CallErrorCode::InvalidArguments.into(), "invalid_arguments"),
            (CallErrorCode::UnknownTool.into(), "unknown_tool"),
            (CallErrorCode::Cancelled.into(), "cancelled"),
        ];
        let every = HostErrorCode::ALL.len() + ErrorCode::ALL.len() + CallErrorCode::ALL.len();
        assert_eq!(table.len(), every, "every code is pinned");
        for (code, name) in table {
            assert_eq!(code.name(), name);
            assert_eq!(code.to_string(), name);
            // Parsing the name gives this variant back: no two sets share a name.
            assert_eq!(ToolErrorCode::from_name(name), Some(code), "{name}");
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{name}\""));
            let back: ToolErrorCode = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, code);
        }
        assert_eq!(ToolErrorCode::from_name("cli_timeout"), None);
        assert!(serde_json::from_str::<ToolErrorCode>("\"oops\"").is_err());
    }
}

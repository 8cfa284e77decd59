//! The model-facing tool names: the native loop offers these tools, the worker codecs map an
//! external agent's own tools onto them where one matches, and frontends render their results.
//!
//! An event names a tool by string ([`AppEvent::ToolCall`](crate::events::AppEvent)'s `name`),
//! because an external worker or an MCP server may call tools Intendant does not know; such a
//! name is simply not a [`ToolName`] (`from_name` gives `None`) and is shown by its own name.

use crate::closed_set::closed_set;
use crate::runtime::Function;

closed_set! {
    /// A tool Intendant itself defines, by the name the model calls it.
    pub enum ToolName ("tool") {
        /// Run a shell command to completion (`execAsAgent`).
        ExecCommand = "exec_command",
        /// Structured file edit without a shell (`editFile`).
        EditFile = "edit_file",
        /// Stat a path (`inspectPath`).
        InspectPath = "inspect_path",
        /// Run a command in a persistent pseudo-terminal (`execPty`).
        ExecPty = "exec_pty",
        /// Fetch a public web page as text (`browse`).
        BrowseUrl = "browse_url",
        /// Ask the human and wait for the answer (`askHuman`).
        AskHuman = "ask_human",
        /// PNG screenshot of an X display (`captureScreen`).
        CaptureScreen = "capture_screen",
        /// The model declares the task finished.
        SignalDone = "signal_done",
        /// The model drops or summarizes its own earlier turns.
        ManageContext = "manage_context",
        /// The model reads a skill's instructions and file list (answered by the controller
        /// from the copy read at the session's start).
        InvokeSkill = "invoke_skill",
        /// A parent starts a child session on part of its task.
        SpawnSubAgent = "spawn_sub_agent",
        /// A parent waits (bounded) for its children's reports.
        WaitSubAgents = "wait_sub_agents",
        /// A parent sends a follow-up to a running child.
        MessageSubAgent = "message_sub_agent",
        /// A parent stops one of its children.
        StopSubAgent = "stop_sub_agent",
        /// A child reports its result to its parent, and ends.
        SubmitResult = "submit_result",
        /// The model saves or reads a named JSON document of its session (answered by the
        /// controller from the state root's database).
        WorkflowCheckpoint = "workflow_checkpoint",
        /// Full-text search of the memories of the session's project and of the user.
        MemorySearch = "memory_search",
        /// One memory, whole, by id.
        MemoryRead = "memory_read",
        /// Proposes a fact to remember; it becomes a memory only once a human approves it.
        MemoryPropose = "memory_propose",
    }
}

impl ToolName {
    /// The runtime function a call of this tool becomes; `None` for a tool the controller
    /// answers itself (`signal_done`, `manage_context`, `invoke_skill`, the sub-agent and
    /// memory tools).
    pub fn runtime_function(self) -> Option<Function> {
        match self {
            ToolName::ExecCommand => Some(Function::ExecAsAgent),
            ToolName::EditFile => Some(Function::EditFile),
            ToolName::InspectPath => Some(Function::InspectPath),
            ToolName::ExecPty => Some(Function::ExecPty),
            ToolName::BrowseUrl => Some(Function::Browse),
            ToolName::AskHuman => Some(Function::AskHuman),
            ToolName::CaptureScreen => Some(Function::CaptureScreen),
            ToolName::SignalDone
            | ToolName::ManageContext
            | ToolName::InvokeSkill
            | ToolName::SpawnSubAgent
            | ToolName::WaitSubAgents
            | ToolName::MessageSubAgent
            | ToolName::StopSubAgent
            | ToolName::SubmitResult
            | ToolName::WorkflowCheckpoint
            | ToolName::MemorySearch
            | ToolName::MemoryRead
            | ToolName::MemoryPropose => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names models, session logs and `--json` consumers have always seen: a renamed
    /// variant must not rename the tool.
    #[test]
    fn tool_wire_names_are_pinned() {
        let table = [
            (ToolName::ExecCommand, "exec_command"),
            (ToolName::EditFile, "edit_file"),
            (ToolName::InspectPath, "inspect_path"),
            (ToolName::ExecPty, "exec_pty"),
            (ToolName::BrowseUrl, "browse_url"),
            (ToolName::AskHuman, "ask_human"),
            (ToolName::CaptureScreen, "capture_screen"),
            (ToolName::SignalDone, "signal_done"),
            (ToolName::ManageContext, "manage_context"),
            (ToolName::InvokeSkill, "invoke_skill"),
            (ToolName::SpawnSubAgent, "spawn_sub_agent"),
            (ToolName::WaitSubAgents, "wait_sub_agents"),
            (ToolName::MessageSubAgent, "message_sub_agent"),
            (ToolName::StopSubAgent, "stop_sub_agent"),
            (ToolName::SubmitResult, "submit_result"),
            (ToolName::WorkflowCheckpoint, "workflow_checkpoint"),
            (ToolName::MemorySearch, "memory_search"),
            (ToolName::MemoryRead, "memory_read"),
            (ToolName::MemoryPropose, "memory_propose"),
        ];
        assert_eq!(ToolName::ALL.len(), table.len(), "every variant is pinned");
        for ((tool, name), listed) in table.into_iter().zip(ToolName::ALL) {
            assert_eq!(tool, listed, "ALL keeps declaration order");
            assert_eq!(tool.name(), name);
            assert_eq!(tool.to_string(), name);
            assert_eq!(serde_json::to_string(&tool).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<ToolName>(&format!("\"{name}\"")).unwrap(),
                tool
            );
            assert_eq!(name.parse::<ToolName>(), Ok(tool));
            assert_eq!(ToolName::from_name(name), Some(tool));
        }
    }

    #[test]
    fn an_unknown_tool_is_no_tool_name_and_the_error_lists_ours() {
        // A worker's own tool (claude's `Grep`) or an MCP tool keeps its own name.
        for other in ["Grep", "mcp__fs_read", "web_search", "", "EXEC_COMMAND"] {
            assert_eq!(ToolName::from_name(other), None, "{other}");
        }
        let e = "rm_rf".parse::<ToolName>().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown tool \"rm_rf\": expected one of exec_command, edit_file,"),
            "{e}"
        );
        assert!(serde_json::from_str::<ToolName>("\"rm_rf\"").is_err());
    }

    #[test]
    fn runtime_tools_map_to_their_functions() {
        let runtime: Vec<(&str, &str)> = ToolName::ALL
            .into_iter()
            .filter_map(|t| t.runtime_function().map(|f| (t.name(), f.wire_name())))
            .collect();
        assert_eq!(
            runtime,
            [
                ("exec_command", "execAsAgent"),
                ("edit_file", "editFile"),
                ("inspect_path", "inspectPath"),
                ("exec_pty", "execPty"),
                ("browse_url", "browse"),
                ("ask_human", "askHuman"),
                ("capture_screen", "captureScreen"),
            ]
        );
    }
}

//! The native tool catalog the model sees, and the mapping from a tool call to either a runtime
//! [`Command`] or a caller-handled action.
//!
//! Tool names are the model-facing vocabulary (`exec_command`, ...); runtime function names
//! (`execAsAgent`, ...) never reach the model. Arguments are validated here so a malformed call
//! is answered with a precise error instead of a confusing runtime failure.
//!
//! `text`: the same tools for models without native tool calling, described in the system
//! prompt and called through JSON in the answer's text.

use std::sync::{Arc, Mutex};

use intendant_protocol::events::ContextAction;
use intendant_protocol::runtime::{Command, EditOperation, Function};
use intendant_protocol::tools::ToolName;

pub mod text;

use crate::memory::{self, MemoryCall};
use crate::subagents::{self, SubAgentCall};
use crate::tool_args::Args;
use intendant_providers::{ToolCall, ToolDefinition};
use serde_json::{Value, json};

/// What one tool call asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAction {
    /// A command for the runtime.
    Runtime(Box<Command>),
    /// The model declares the task finished.
    SignalDone {
        /// Final message.
        message: String,
    },
    /// The model edits its own context.
    ManageContext(ContextDirective),
    /// A sub-agent tool, handled by the controller ([`crate::subagents`]).
    SubAgent(SubAgentCall),
    /// The model asks for a skill's instructions ([`crate::skills`]), answered by the
    /// controller from the copy read at the session's start.
    InvokeSkill {
        /// The skill's name.
        name: String,
    },
    /// The model saves or reads a workflow checkpoint ([`crate::workflow`]).
    WorkflowCheckpoint(crate::workflow::CheckpointCall),
    /// A memory tool, answered by the controller from the store ([`crate::memory`]).
    Memory(MemoryCall),
    /// The call cannot be executed; the text goes back to the model as an error.
    Invalid(String),
}

/// A `manage_context` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextDirective {
    /// Drop the oldest `count` turns.
    DropTurns {
        /// Turns to drop.
        count: usize,
    },
    /// Replace earlier history with the model's own summary.
    Summarize {
        /// The summary.
        summary: String,
    },
}

/// Which tools a session offers besides the runtime's and the context tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolSet {
    /// `spawn_sub_agent`, `wait_sub_agents`, `message_sub_agent`, `stop_sub_agent`.
    pub sub_agents: bool,
    /// `submit_result` (a sub-agent's report).
    pub submit_result: bool,
    /// `invoke_skill` (the session found skills).
    pub skills: bool,
    /// `workflow_checkpoint` (the session has the state root's database).
    pub workflow: bool,
    /// `memory_search`, `memory_read`, `memory_propose` (the session has the store).
    pub memory: bool,
}

/// [`tool_definitions`] for `set`, built once per set in this process and shared by every
/// session's every request (they never change while it runs).
pub fn shared_tool_definitions(set: ToolSet) -> Arc<[ToolDefinition]> {
    static BUILT: Mutex<Vec<(ToolSet, Arc<[ToolDefinition]>)>> = Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, tools)) = built.iter().find(|(built_for, _)| *built_for == set) {
        return tools.clone();
    }
    let tools: Arc<[ToolDefinition]> = tool_definitions(set).into();
    built.push((set, tools.clone()));
    tools
}

// Long because it is one table: each definition is the wire contract the model reads, kept in
// the order it is offered, so reading the whole offer is reading one function.
/// Every tool definition offered to the model in a session offering `set`.
pub fn tool_definitions(set: ToolSet) -> Vec<ToolDefinition> {
    let def = |tool: ToolName, description: &str, parameters: Value| ToolDefinition {
        name: tool.name().to_owned(),
        description: description.to_owned(),
        parameters,
    };
    let ops: Vec<&str> = EditOperation::ALL.iter().map(|op| op.wire_name()).collect();
    vec![
        def(
            ToolName::ExecCommand,
            "Run a shell command in the project (bash -c) to completion. Returns exit_code and the \
             last 10 KB of stdout/stderr (full logs are saved). Use wait_for_port to start a \
             server and return once it listens.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "Shell command."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Kill after this many ms (default 120000)."},
                "wait_for_port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "Return once this loopback port listens."},
                "display": {"type": "integer", "minimum": 0, "description": "X display number for GUI commands."}
            }, "required": ["command"], "additionalProperties": false}),
        ),
        def(
            ToolName::EditFile,
            "Edit a file without a shell. Operations: write (whole file), append, replace (every \
             occurrence of match_content), insert_at (before line_number, 1-based), replace_lines \
             (line_number..=end_line, 1-based).",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string"},
                "operation": {"type": "string", "enum": ops},
                "content": {"type": "string"},
                "match_content": {"type": "string"},
                "line_number": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}
            }, "required": ["file_path", "operation"], "additionalProperties": false}),
        ),
        def(
            ToolName::InspectPath,
            "Stat a path: whether it exists, type, size, modification time, mode, owner.",
            json!({"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"], "additionalProperties": false}),
        ),
        def(
            ToolName::ExecPty,
            "Run a command in a persistent pseudo-terminal (state such as cwd survives between \
             calls within one batch). Returns ANSI-stripped output; 30 s per command.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "shell_id": {"type": "string", "description": "PTY session key (default \"default\")."}
            }, "required": ["command"], "additionalProperties": false}),
        ),
        def(
            ToolName::BrowseUrl,
            "Fetch a public web page and return it as text (first 50 KB).",
            json!({"type": "object", "properties": {"url": {"type": "string"}},
                   "required": ["url"], "additionalProperties": false}),
        ),
        def(
            ToolName::AskHuman,
            "Ask the human a question and wait for the answer. Use only when you cannot proceed \
             on a reasonable assumption.",
            json!({"type": "object", "properties": {"question": {"type": "string"}},
                   "required": ["question"], "additionalProperties": false}),
        ),
        def(
            ToolName::CaptureScreen,
            "Take a PNG screenshot of an X display; returns the file path and size.",
            json!({"type": "object", "properties": {"display": {"type": "integer", "minimum": 0}},
                   "additionalProperties": false}),
        ),
        def(
            ToolName::SignalDone,
            "Declare the task complete. Call this once the work is done and verified.",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "Summary for the user."}},
                   "required": ["message"], "additionalProperties": false}),
        ),
        def(
            ToolName::ManageContext,
            "Free context space: drop_turns removes the oldest `count` turns; summarize replaces \
             the earlier history with your `summary`.",
            json!({"type": "object", "properties": {
                "action": {"type": "string", "enum": [ContextAction::DropTurns.name(), ContextAction::Summarize.name()]},
                "count": {"type": "integer", "minimum": 1},
                "summary": {"type": "string"}
            }, "required": ["action"], "additionalProperties": false}),
        ),
    ]
    .into_iter()
    .chain(set.skills.then(|| {
        def(
            ToolName::InvokeSkill,
            "Read a skill listed in the context: returns its instructions and the files in its \
             folder, which you read or run with the other tools. Call it before starting a task \
             a skill describes.",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "The skill's name, as listed."}
            }, "required": ["name"], "additionalProperties": false}),
        )
    }))
    .chain(
        set.sub_agents
            .then(subagents::parent_tools)
            .into_iter()
            .flatten()
            .chain(set.submit_result.then(subagents::child_tools).into_iter().flatten())
            .map(|(tool, description, parameters)| def(tool, description, parameters)),
    )
    .chain(
        set.workflow
            .then(crate::workflow::definition)
            .map(|(tool, description, parameters)| def(tool, description, parameters)),
    )
    .chain(
        set.memory
            .then(memory::tools)
            .into_iter()
            .flatten()
            .map(|(tool, description, parameters)| def(tool, description, parameters)),
    )
    .collect()
}

/// Parses the call's JSON arguments; the raw text as a string when it is not JSON.
pub fn parse_arguments(call: &ToolCall) -> Value {
    if call.arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

/// Maps one tool call to its action; `nonce` identifies the runtime command.
pub fn map_tool_call(call: &ToolCall, nonce: u64) -> ToolAction {
    let args = match parse_arguments(call) {
        Value::Object(map) => map,
        _ => {
            return ToolAction::Invalid(format!(
                "arguments of {} must be a JSON object",
                call.name
            ));
        }
    };
    let arg = Args::new(&call.name, &args);
    match map_inner(&call.name, &arg, nonce) {
        Ok(action) => action,
        Err(message) => ToolAction::Invalid(message),
    }
}

fn map_inner(name: &str, a: &Args<'_>, nonce: u64) -> Result<ToolAction, String> {
    let Some(tool) = ToolName::from_name(name) else {
        return Err(format!("unknown tool {name:?}"));
    };
    let command = |f: Function| Command {
        function: f.wire_name().to_owned(),
        nonce,
        ..Command::default()
    };
    let action = match tool {
        ToolName::ExecCommand => ToolAction::Runtime(Box::new(Command {
            command: Some(a.required("command")?),
            timeout_ms: a.integer("timeout_ms")?,
            wait_for_port: a.narrow("wait_for_port")?,
            display: a.narrow("display")?,
            ..command(Function::ExecAsAgent)
        })),
        ToolName::EditFile => {
            let operation = a.required("operation")?;
            if EditOperation::from_wire_name(&operation).is_none() {
                return Err(format!("edit_file: unknown operation {operation:?}"));
            }
            ToolAction::Runtime(Box::new(Command {
                file_path: Some(a.required("file_path")?),
                operation: Some(operation),
                content: a.string("content")?,
                match_content: a.string("match_content")?,
                line_number: a.integer("line_number")?,
                end_line: a.integer("end_line")?,
                ..command(Function::EditFile)
            }))
        }
        ToolName::InspectPath => ToolAction::Runtime(Box::new(Command {
            path: Some(a.required("path")?),
            ..command(Function::InspectPath)
        })),
        ToolName::ExecPty => ToolAction::Runtime(Box::new(Command {
            command: Some(a.required("command")?),
            shell_id: a.string("shell_id")?,
            ..command(Function::ExecPty)
        })),
        ToolName::BrowseUrl => ToolAction::Runtime(Box::new(Command {
            url: Some(a.required("url")?),
            ..command(Function::Browse)
        })),
        ToolName::AskHuman => ToolAction::Runtime(Box::new(Command {
            question: Some(a.required("question")?),
            ..command(Function::AskHuman)
        })),
        ToolName::CaptureScreen => ToolAction::Runtime(Box::new(Command {
            display: a.narrow("display")?,
            ..command(Function::CaptureScreen)
        })),
        ToolName::SignalDone => ToolAction::SignalDone {
            message: a.string("message")?.unwrap_or_default(),
        },
        ToolName::ManageContext => {
            let action = a.required("action")?;
            ToolAction::ManageContext(match ContextAction::from_name(&action) {
                Some(ContextAction::DropTurns) => ContextDirective::DropTurns {
                    count: a.narrow("count")?.unwrap_or(1),
                },
                Some(ContextAction::Summarize) => ContextDirective::Summarize {
                    summary: a.required("summary")?,
                },
                // Compaction is the controller's own action and a rewind a human's, never the
                // model's to ask for.
                Some(ContextAction::AutoCompact | ContextAction::Rewind) | None => {
                    return Err(format!(
                        "manage_context: unknown action {action:?}; use drop_turns or summarize"
                    ));
                }
            })
        }
        ToolName::InvokeSkill => ToolAction::InvokeSkill {
            name: a.required("name")?,
        },
        ToolName::SpawnSubAgent => ToolAction::SubAgent(subagents::parse_spawn(a)?),
        ToolName::WaitSubAgents => ToolAction::SubAgent(subagents::parse_wait(a)?),
        ToolName::MessageSubAgent => ToolAction::SubAgent(subagents::parse_message(a)?),
        ToolName::StopSubAgent => ToolAction::SubAgent(subagents::parse_stop(a)?),
        ToolName::SubmitResult => ToolAction::SubAgent(subagents::parse_submit(a)?),
        ToolName::WorkflowCheckpoint => ToolAction::WorkflowCheckpoint(crate::workflow::parse(a)?),
        ToolName::MemorySearch => ToolAction::Memory(memory::parse_search(a)?),
        ToolName::MemoryRead => ToolAction::Memory(memory::parse_read(a)?),
        ToolName::MemoryPropose => ToolAction::Memory(memory::parse_propose(a)?),
    };
    Ok(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            call_id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
            thought_signature: None,
            provider_id: false,
        }
    }

    #[test]
    fn shared_definitions_are_built_once_per_set_and_equal_a_fresh_build() {
        let plain = ToolSet::default();
        let parent = ToolSet {
            sub_agents: true,
            ..ToolSet::default()
        };
        let first = shared_tool_definitions(plain);
        assert!(Arc::ptr_eq(&first, &shared_tool_definitions(plain)));
        assert_eq!(&first[..], &tool_definitions(plain)[..]);
        let other = shared_tool_definitions(parent);
        assert_eq!(&other[..], &tool_definitions(parent)[..]);
        assert!(other.iter().any(|t| t.name == "spawn_sub_agent"));
        assert!(!first.iter().any(|t| t.name == "spawn_sub_agent"));
    }

    #[test]
    fn exec_command_maps_fields() {
        let ToolAction::Runtime(cmd) = map_tool_call(
            &call("exec_command", r#"{"command":"ls","timeout_ms":5}"#),
            7,
        ) else {
            panic!("not runtime");
        };
        assert_eq!(cmd.function, "execAsAgent");
        assert_eq!(cmd.nonce, 7);
        assert_eq!(cmd.command.as_deref(), Some("ls"));
        assert_eq!(cmd.timeout_ms, Some(5));
    }

    #[test]
    fn every_runtime_tool_maps_to_its_function() {
        let cases = [
            (
                "edit_file",
                r#"{"file_path":"a","operation":"append","content":"x"}"#,
                "editFile",
            ),
            ("inspect_path", r#"{"path":"."}"#, "inspectPath"),
            ("exec_pty", r#"{"command":"pwd"}"#, "execPty"),
            ("browse_url", r#"{"url":"https://example.com"}"#, "browse"),
            ("ask_human", r#"{"question":"?"}"#, "askHuman"),
            ("capture_screen", r#"{"display":99}"#, "captureScreen"),
        ];
        for (name, args, function) in cases {
            match map_tool_call(&call(name, args), 1) {
                ToolAction::Runtime(cmd) => assert_eq!(cmd.function, function),
                other => panic!("{name}: {other:?}"),
            }
        }
        let names: Vec<String> = tool_definitions(ToolSet::default())
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names.len(), 9);
    }

    #[test]
    fn sub_agent_tools_are_offered_by_role() {
        let names =
            |set| -> Vec<String> { tool_definitions(set).into_iter().map(|d| d.name).collect() };
        let parent = names(ToolSet {
            sub_agents: true,
            ..ToolSet::default()
        });
        assert_eq!(parent.len(), 13);
        for tool in [
            "spawn_sub_agent",
            "wait_sub_agents",
            "message_sub_agent",
            "stop_sub_agent",
        ] {
            assert!(parent.iter().any(|n| n == tool), "{tool}");
        }
        assert!(!parent.iter().any(|n| n == "submit_result"));
        let leaf = names(ToolSet {
            submit_result: true,
            ..ToolSet::default()
        });
        assert_eq!(leaf.last().map(String::as_str), Some("submit_result"));
        assert_eq!(leaf.len(), 10);
    }

    #[test]
    fn invoke_skill_is_offered_only_with_skills_and_needs_a_name() {
        let offered = |set| {
            tool_definitions(set)
                .iter()
                .any(|d| d.name == "invoke_skill")
        };
        assert!(!offered(ToolSet::default()));
        assert!(offered(ToolSet {
            skills: true,
            ..ToolSet::default()
        }));
        assert_eq!(
            map_tool_call(&call("invoke_skill", r#"{"name":"lint"}"#), 1),
            ToolAction::InvokeSkill {
                name: "lint".into()
            }
        );
        match map_tool_call(&call("invoke_skill", "{}"), 1) {
            ToolAction::Invalid(message) => assert!(message.contains("`name`"), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sub_agent_calls_are_validated() {
        match map_tool_call(
            &call(
                "spawn_sub_agent",
                r#"{"task":"edit a","role":"implementation","autonomy":"low","token_budget":500}"#,
            ),
            1,
        ) {
            ToolAction::SubAgent(SubAgentCall::Spawn(req)) => {
                assert_eq!(req.task, "edit a");
                assert_eq!(
                    req.isolation,
                    intendant_protocol::daemon::Isolation::Worktree
                );
                assert_eq!(req.token_budget, Some(500));
                assert_eq!(req.autonomy, Some(crate::autonomy::AutonomyLevel::Low));
            }
            other => panic!("{other:?}"),
        }
        for (name, args, want) in [
            (
                "spawn_sub_agent",
                r#"{}"#,
                "missing required argument `task`",
            ),
            (
                "spawn_sub_agent",
                r#"{"task":"x","isolation":"vm"}"#,
                "not `worktree` or `shared`",
            ),
            (
                "spawn_sub_agent",
                r#"{"task":"x","autonomy":"max"}"#,
                "unknown autonomy level",
            ),
            (
                "spawn_sub_agent",
                r#"{"task":"x","token_budget":0}"#,
                "positive integer",
            ),
            ("wait_sub_agents", r#"{"ids":"s1"}"#, "array of session ids"),
            ("message_sub_agent", r#"{"id":"s1"}"#, "`text`"),
            (
                "submit_result",
                r#"{"summary":"s","fields":[1]}"#,
                "JSON object",
            ),
        ] {
            match map_tool_call(&call(name, args), 1) {
                ToolAction::Invalid(message) => assert!(message.contains(want), "{message}"),
                other => panic!("{name} {args}: {other:?}"),
            }
        }
        match map_tool_call(&call("wait_sub_agents", r#"{"timeout_s":9999}"#), 1) {
            ToolAction::SubAgent(SubAgentCall::Wait { ids, timeout }) => {
                assert!(ids.is_empty());
                assert_eq!(timeout, crate::subagents::MAX_WAIT);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn caller_handled_tools() {
        assert_eq!(
            map_tool_call(&call("signal_done", r#"{"message":"ok"}"#), 1),
            ToolAction::SignalDone {
                message: "ok".into()
            }
        );
        assert_eq!(
            map_tool_call(
                &call("manage_context", r#"{"action":"drop_turns","count":2}"#),
                1
            ),
            ToolAction::ManageContext(ContextDirective::DropTurns { count: 2 })
        );
    }

    /// Every tool of the closed set is offered to some session and understood when called, and
    /// nothing else is offered.
    #[test]
    fn every_tool_name_is_offered_and_mapped() {
        let every = ToolSet {
            sub_agents: true,
            submit_result: true,
            skills: true,
            workflow: true,
            memory: true,
        };
        let offered: Vec<String> = tool_definitions(every)
            .into_iter()
            .map(|d| d.name)
            .collect();
        let all: Vec<&str> = ToolName::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(offered, all);
        for tool in ToolName::ALL {
            if let ToolAction::Invalid(message) = map_tool_call(&call(tool.name(), "{}"), 1) {
                assert!(!message.contains("unknown tool"), "{tool}: {message}");
            }
        }
    }

    #[test]
    fn bad_calls_are_explained() {
        let cases = [
            ("exec_command", "{}", "missing required argument `command`"),
            ("exec_command", r#"{"command":5}"#, "must be a string"),
            (
                "edit_file",
                r#"{"file_path":"a","operation":"nuke"}"#,
                "unknown operation",
            ),
            ("exec_command", "not json", "must be a JSON object"),
            ("rm_rf", "{}", "unknown tool"),
            (
                "exec_command",
                r#"{"command":"x","wait_for_port":70000}"#,
                "out of range",
            ),
            ("manage_context", r#"{"action":"forget"}"#, "unknown action"),
            // The controller's own compaction is not the model's to ask for.
            (
                "manage_context",
                r#"{"action":"auto_compact"}"#,
                "unknown action",
            ),
            // Nor is a rewind, which only a human makes.
            ("manage_context", r#"{"action":"rewind"}"#, "unknown action"),
        ];
        for (name, args, want) in cases {
            match map_tool_call(&call(name, args), 1) {
                ToolAction::Invalid(msg) => assert!(msg.contains(want), "{name} {args}: {msg}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}

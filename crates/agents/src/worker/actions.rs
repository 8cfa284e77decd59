//! What the line-by-line protocol codecs (claude-code's stream-json, ACP) hand the session loop:
//! [`Step`]s, pure values, so each protocol is tested message by message without a child; and a
//! worker's tool request as the approval question the gate asks about ([`ExternalAction`]), built
//! from our runtime vocabulary so it is classified, previewed and remembered like our own
//! commands.

use intendant_core::approval::ExternalAction;
use intendant_core::classify::{ActionCategory, classify};
use intendant_core::preview::{command_preview, edit_detail, escape_invisible};
use intendant_core::session_log::SessionLog;
use intendant_core::usage::Usage;
use intendant_protocol::runtime::Command;
use serde_json::Value;

use super::WorkerError;
use super::driver::{Turn, TurnEnd};
use super::events::{MAX_OUTPUT_BYTES, bounded};
use super::process::LineSender;

/// One thing the session loop must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Write this JSON value as one line to the worker's stdin.
    Send(serde_json::Value),
    /// Visible model text as it streams.
    Delta(String),
    /// One whole model message.
    Message {
        /// Visible text.
        text: String,
        /// Reasoning text.
        reasoning: String,
    },
    /// The worker started a tool.
    ToolCall {
        /// Call id.
        call_id: String,
        /// Tool name (ours where one exists: `exec_command`, `edit_file`).
        name: String,
        /// Its input.
        arguments: Value,
    },
    /// A tool's result.
    ToolOutput {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Result text.
        output: String,
    },
    /// Usage of the turn, with the cost the worker reported.
    Usage(Usage, Option<f64>),
    /// The worker asks whether it may act: the gate's answer goes back with this key.
    Ask(String, ExternalAction),
    /// The worker took back its question with this key: it leaves the approval queue.
    Withdraw(String),
    /// The worker's own conversation id (recorded in the session log, so a resume continues
    /// it).
    WorkerSession(String),
    /// Something looks wrong; nothing ended.
    Warning(String),
    /// The open turn ended, as the protocol says.
    TurnEnded(TurnEnd),
}

/// Records the worker's own conversation id in the session log at once, so a session that dies
/// later still resumes that conversation. Only an id that reads as one
/// ([`is_conversation_id`]) is recorded: a start that takes it up may name it on the worker's
/// command line (claude's `--resume ID`), where one beginning with `-` would read as an option.
pub fn record_conversation(log: &SessionLog, id: &str) {
    if !is_conversation_id(id) {
        return;
    }
    // The log's own writer reports a failing disk; the session goes on without resume.
    let _ = log.update_meta(|meta| meta.agent_thread = Some(id.to_owned()));
}

/// Whether `id` reads as a worker's conversation id (codex's and claude's UUIDs, kimi's
/// `session_<uuid>`): 1 to 256 letters, digits, `-`, `_`, `.` or `:`, not beginning with `-`.
pub fn is_conversation_id(id: &str) -> bool {
    (1..=256).contains(&id.len())
        && !id.starts_with('-')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Carries out `steps` (but [`Step::TurnEnded`], which it returns): lines to `out`, events and
/// questions into `turn`, the worker's conversation id into `log`.
pub async fn perform(
    steps: Vec<Step>,
    out: &LineSender,
    turn: &mut Turn<'_, String>,
    log: &SessionLog,
) -> Result<Option<TurnEnd>, WorkerError> {
    let mut end = None;
    for step in steps {
        match step {
            Step::Send(line) => out.send(line).await?,
            Step::Delta(text) => turn.events.text_delta(&text),
            Step::Message { text, reasoning } => turn.events.message(&text, &reasoning),
            Step::ToolCall {
                call_id,
                name,
                arguments,
            } => turn.events.tool_call(&call_id, &name, arguments),
            Step::ToolOutput {
                call_id,
                name,
                output,
            } => turn.events.tool_output(&call_id, &name, &output),
            Step::Usage(usage, cost) => turn.events.usage(&usage, cost),
            Step::Ask(key, action) => turn.ask(key, action),
            Step::Withdraw(key) => turn.withdraw(|ticket| *ticket == key),
            Step::WorkerSession(id) => record_conversation(log, &id),
            Step::Warning(message) => turn.events.warning(message),
            Step::TurnEnded(e) => end = Some(e),
        }
    }
    Ok(end)
}

/// A shell command as a runtime command.
pub fn exec_action(command: &str) -> Command {
    Command {
        function: "execAsAgent".into(),
        command: Some(command.to_owned()),
        ..Command::default()
    }
}

/// A whole-file write (`old` absent) or a replacement as a runtime command.
pub fn edit_action(path: &str, old: Option<&str>, new: &str) -> Command {
    Command {
        function: "editFile".into(),
        file_path: Some(path.to_owned()),
        operation: Some(if old.is_some() { "replace" } else { "write" }.into()),
        match_content: old.map(str::to_owned),
        content: Some(new.to_owned()),
        ..Command::default()
    }
}

/// A read of `path` as a runtime command.
pub fn read_action(path: &str) -> Command {
    Command {
        function: "inspectPath".into(),
        path: Some(path.to_owned()),
        ..Command::default()
    }
}

/// A fetch of `url` as a runtime command.
pub fn browse_action(url: &str) -> Command {
    Command {
        function: "browse".into(),
        url: Some(url.to_owned()),
        ..Command::default()
    }
}

/// How strict a category is, for the one that decides a question with several (a destructive
/// shell command is asked about as destructive, not as a plain command).
fn strictness(category: ActionCategory) -> u8 {
    match category {
        // Never a command's category (a schedule is the agenda's), but the strictest if it were.
        ActionCategory::Schedule => 9,
        ActionCategory::Destructive => 8,
        ActionCategory::FileDelete => 7,
        ActionCategory::CommandExec => 6,
        ActionCategory::FileWrite => 5,
        ActionCategory::DisplayControl => 4,
        ActionCategory::Network => 3,
        ActionCategory::ToolCall | ActionCategory::Mcp => 2,
        ActionCategory::FileRead => 1,
        // A worker's action is never a memory proposal; listed for the match only.
        ActionCategory::HumanInput | ActionCategory::Memory => 0,
    }
}

/// The question about `cmd`: its preview and edit detail as the native loop shows them, and its
/// strictest category.
pub fn question(cmd: &Command) -> ExternalAction {
    let category = classify(cmd)
        .into_iter()
        .max_by_key(|c| strictness(*c))
        .unwrap_or(ActionCategory::ToolCall);
    ExternalAction {
        preview: command_preview(cmd),
        category,
        detail: edit_detail(cmd),
    }
}

/// The question about a tool we have no runtime equivalent for: a generic tool call, its input
/// shown as the detail.
pub fn tool_question(tool: &str, input: &Value) -> ExternalAction {
    let name = if tool.is_empty() { "tool" } else { tool };
    ExternalAction {
        preview: escape_invisible(&format!("tool {name}")),
        category: ActionCategory::ToolCall,
        detail: (!input.is_null())
            .then(|| bounded(&escape_invisible(&input.to_string()), MAX_OUTPUT_BYTES)),
    }
}

/// The string field `key` of `v`.
pub fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The unsigned field `key` of `v`, or 0.
pub fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn questions_read_like_our_own_commands() {
        let q = question(&exec_action("touch a.txt"));
        assert_eq!(q.preview, "$ touch a.txt");
        assert_eq!(q.category, ActionCategory::CommandExec);
        let q = question(&exec_action("rm -rf /tmp/x"));
        assert_eq!(q.category, ActionCategory::Destructive);
        let q = question(&edit_action("a.txt", Some("x"), "y"));
        assert_eq!(q.preview, "edit a.txt (replace)");
        assert_eq!(q.category, ActionCategory::FileWrite);
        assert!(q.detail.unwrap().contains("+ y"));
        assert_eq!(
            question(&edit_action("a", None, "")).category,
            ActionCategory::FileDelete
        );
        assert_eq!(
            question(&read_action("a")).category,
            ActionCategory::FileRead
        );
        assert_eq!(
            question(&browse_action("https://x")).category,
            ActionCategory::Network
        );
        let q = tool_question("Task", &json!({"prompt": "p"}));
        assert_eq!(q.category, ActionCategory::ToolCall);
        assert_eq!(q.preview, "tool Task");
    }

    #[test]
    fn only_an_id_that_reads_as_one_is_a_conversation_id() {
        for id in [
            "5612c104-5a13-41f9-8e23-993ac203c16b",
            "session_4be91c12-bf79-4ec2-9ed6-8ae383f4d107",
            "thr_01.abc:2",
        ] {
            assert!(is_conversation_id(id), "{id}");
        }
        let long = "a".repeat(257);
        for id in [
            "",
            "--dangerously-skip-permissions",
            "-x",
            "a b",
            "a\nb",
            "../x/y",
            long.as_str(),
        ] {
            assert!(!is_conversation_id(id), "{id:?}");
        }
    }
}

//! The text tool path, for models without native tool calling (`[provider] tool_mode =
//! "text"`): the system prompt describes the tools and asks for JSON commands, and each answer's
//! commands are extracted from its text: the whole answer as JSON (structured output), fenced
//! code blocks, or bare JSON objects within prose. An explicit `{"done": true}` ends the task.
//!
//! The commands become ordinary [`ToolCall`]s, so they pass the same mapping, approvals, limits
//! and logs as native calls. JSON that is malformed or cut off is never guessed at: the problem
//! goes back to the model in words.

use intendant_protocol::tools::ToolName;
use intendant_providers::{ToolCall, ToolDefinition};
use serde_json::{Map, Value};

/// What one answer asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum TextCommands {
    /// No JSON command in the answer: it is a plain final answer.
    None,
    /// Calls to run, in order; an explicit `done` becomes a trailing `signal_done` call.
    Calls(Vec<ToolCall>),
    /// The answer held JSON that cannot be used; the text explains why, for the model.
    Invalid(String),
}

/// How a text-mode answer must look, appended to the system prompt with the tool list.
const FORMAT: &str = "\
You have no native tool calling here. To use a tool, answer with one JSON object (in a ```json \
code block or alone), nothing after it:
{\"calls\": [{\"tool\": \"exec_command\", \"arguments\": {\"command\": \"ls\"}}]}
Several calls may go in one list; they run in order and their results come back in the next \
message. When the task is complete and verified, answer:
{\"done\": true, \"message\": \"a short summary of what changed\"}
Only a JSON object with `calls` or `done` is acted on; anything else ends the task.";

/// The system prompt section that describes `tools` and the answer format.
pub fn text_mode_prompt(tools: &[ToolDefinition]) -> String {
    let mut out = String::from("# Tools\n\n");
    out.push_str(FORMAT);
    out.push_str("\n\nThe tools, each with the JSON Schema of its arguments:\n");
    for tool in tools {
        out.push_str(&format!(
            "\n- {}: {}\n  arguments: {}\n",
            tool.name, tool.description, tool.parameters
        ));
    }
    out
}

/// Reminder sent after an answer whose JSON could not be used.
fn invalid(problem: &str) -> TextCommands {
    TextCommands::Invalid(format!(
        "Your last answer was not run: {problem}. Answer with one complete JSON object, \
         {{\"calls\": [{{\"tool\": NAME, \"arguments\": {{...}}}}]}} or {{\"done\": true, \
         \"message\": SUMMARY}}, in a ```json block or alone."
    ))
}

/// Extracts the commands of one answer; `turn` names the synthesized call ids.
pub fn extract_commands(text: &str, turn: u32) -> TextCommands {
    let documents = match documents(text) {
        Ok(documents) => documents,
        Err(problem) => return invalid(&problem),
    };
    let mut calls = Vec::new();
    let mut done: Option<String> = None;
    for document in &documents {
        if let Err(problem) = read_document(document, turn, &mut calls, &mut done) {
            return invalid(&problem);
        }
    }
    if documents.is_empty() {
        return TextCommands::None;
    }
    if let Some(message) = done {
        calls.push(ToolCall {
            call_id: format!("text_{turn}_{}", calls.len()),
            name: ToolName::SignalDone.name().to_owned(),
            arguments: serde_json::json!({ "message": message }).to_string(),
            thought_signature: None,
            provider_id: false,
        });
    }
    if calls.is_empty() {
        return invalid("the JSON held neither calls nor `\"done\": true`");
    }
    TextCommands::Calls(calls)
}

/// The command documents in `text`: the whole text, else every fenced block, else every bare
/// object; JSON that fails to parse where a command was plainly meant is an error.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        return Ok(commands_in(value));
    }
    let fences = fenced_blocks(text);
    if !fences.is_empty() {
        let mut found = Vec::new();
        for (index, block) in fences.iter().enumerate() {
            let block = block.trim();
            if !(block.starts_with('{') || block.starts_with('[')) {
                continue;
            }
            match serde_json::from_str::<Value>(block) {
                Ok(value) => found.extend(commands_in(value)),
                Err(e) => {
                    return Err(format!(
                        "the JSON in code block {} is not valid ({})",
                        index + 1,
                        e
                    ));
                }
            }
        }
        if !found.is_empty() {
            return Ok(found);
        }
    }
    bare_objects(text)
}

/// The contents of the ``` fenced blocks of `text`; an unclosed last fence runs to the end (a
/// cut-off answer), so its partial JSON is reported rather than ignored.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // The info string (`json`) runs to the end of the fence's line.
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                blocks.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

/// Objects embedded in prose: each `{` that opens a JSON object is tried in turn; the command
/// documents among them are kept. An object that starts like a command and does not parse is
/// an error (incomplete when the text ends inside it).
fn bare_objects(text: &str) -> Result<Vec<Value>, String> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find('{') {
        let start = at + offset;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                let end = start + stream.byte_offset();
                let commands = commands_in(value);
                if commands.is_empty() {
                    at = start + 1;
                } else {
                    found.extend(commands);
                    at = end;
                }
            }
            Some(Err(e)) => {
                let rest = &text[start..];
                let after_braces = rest.trim_start_matches('{');
                if looks_like_a_command(after_braces) {
                    return Err(if e.is_eof() {
                        "the JSON object ends before it is complete (the answer may have been \
                         cut off at the output limit)"
                            .to_owned()
                    } else {
                        format!("the JSON object is not valid ({})", e)
                    });
                }
                // Every brace of a run but the last fails alike (`{{` opens no object), so the
                // run is read once, not once per brace: `{` repeated is linear, not quadratic.
                let run = rest.len() - after_braces.len();
                at = start + run.max(2) - 1;
            }
            None => at = start + 1,
        }
    }
    Ok(found)
}

/// Whether JSON text (that failed to parse), given after its opening braces, was meant as a
/// command: its first key is a command key.
fn looks_like_a_command(after_braces: &str) -> bool {
    let first_key = after_braces.trim_start();
    ["\"calls\"", "\"commands\"", "\"done\"", "\"tool\""]
        .iter()
        .any(|key| first_key.starts_with(key))
}

/// The command documents a parsed value holds: an object with `calls`, `commands`, `done` or a
/// single `tool`, or an array of such objects or of calls.
fn commands_in(value: Value) -> Vec<Value> {
    match value {
        Value::Object(map) if is_command(&map) => vec![Value::Object(map)],
        Value::Array(items) => {
            let all_calls = !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.as_object().is_some_and(|m| call_name(m).is_some()));
            if all_calls {
                vec![serde_json::json!({ "calls": items })]
            } else {
                items.into_iter().flat_map(commands_in).collect()
            }
        }
        Value::Object(_) | Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            Vec::new()
        }
    }
}

fn is_command(map: &Map<String, Value>) -> bool {
    map.contains_key("calls")
        || map.contains_key("commands")
        || map.contains_key("done")
        || map.contains_key("tool")
}

/// The tool a call object names (`tool`, or `name`).
fn call_name(map: &Map<String, Value>) -> Option<&str> {
    map.get("tool")
        .or_else(|| map.get("name"))
        .and_then(Value::as_str)
}

/// Adds the calls and the done signal of one command document.
fn read_document(
    document: &Value,
    turn: u32,
    calls: &mut Vec<ToolCall>,
    done: &mut Option<String>,
) -> Result<(), String> {
    let Some(map) = document.as_object() else {
        return Err("a command must be a JSON object".to_owned());
    };
    match map.get("done") {
        None | Some(Value::Bool(false) | Value::Null) => {}
        Some(Value::Bool(true)) => {
            let message = map
                .get("message")
                .or_else(|| map.get("summary"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            *done = Some(message.to_owned());
        }
        Some(_) => return Err("`done` must be true or false".to_owned()),
    }
    let list = match (
        map.get("calls").or_else(|| map.get("commands")),
        map.get("tool"),
    ) {
        (Some(Value::Array(list)), _) => list.clone(),
        (Some(Value::Null) | None, Some(_)) => vec![document.clone()],
        (Some(Value::Null) | None, None) => Vec::new(),
        (Some(_), _) => return Err("`calls` must be a list of calls".to_owned()),
    };
    for item in list {
        let number = calls.len() + 1;
        let Some(call) = item.as_object() else {
            return Err(format!("call {number} is not a JSON object"));
        };
        let Some(name) = call_name(call) else {
            return Err(format!("call {number} names no `tool`"));
        };
        let arguments = match call.get("arguments").or_else(|| call.get("args")) {
            Some(Value::Object(args)) => Value::Object(args.clone()),
            // Some models write the arguments as a JSON string, as native calls carry them.
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(value @ Value::Object(_)) => value,
                Ok(_) | Err(_) => {
                    return Err(format!(
                        "the arguments of call {number} ({name}) are not an object"
                    ));
                }
            },
            Some(_) => {
                return Err(format!(
                    "the arguments of call {number} ({name}) are not an object"
                ));
            }
            // The flat form: every other key is an argument.
            None => Value::Object(
                call.iter()
                    .filter(|(key, _)| !matches!(key.as_str(), "tool" | "name"))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            ),
        };
        calls.push(ToolCall {
            call_id: format!("text_{turn}_{}", calls.len()),
            name: name.to_owned(),
            arguments: arguments.to_string(),
            thought_signature: None,
            provider_id: false,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

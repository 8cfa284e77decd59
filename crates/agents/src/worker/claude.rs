//! claude-code as a worker: `claude -p --input-format stream-json --output-format stream-json
//! --verbose --permission-prompt-tool stdio --permission-mode MODE`, stdin open for the whole
//! session.
//!
//! The wire (learned from the pinned CLI, recorded under `tests/fixtures/workers/`): we send an
//! `initialize` control request, then one `user` message per round; the CLI sends `system`
//! (`init` carries its session id, recorded for `--resume`), `assistant` (one content block per
//! line), `user` (tool results) and one `result` per round, which is the turn's end. Tool
//! permissions come as `control_request` / `can_use_tool`, answered `allow` + `updatedInput` or
//! `deny` + `message` (+ `interrupt` to end the turn); the CLI may withdraw one with
//! `control_cancel_request`. An interrupt is our own control request. Any other control request
//! gets an error response, never silence.

use std::collections::HashMap;
use std::ffi::OsString;

use async_trait::async_trait;
use intendant_core::approval::{ApprovalAnswer, DENIED_OUTPUT, SKIPPED_OUTPUT};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::session::{SessionBackend, WorkerContext};
use intendant_core::session_log::SessionLog;
use intendant_core::usage::Usage;
use intendant_protocol::tools::ToolName;
use serde_json::{Value, json};
use tokio::net::unix::pipe;

use super::WorkerError;
use super::actions::{
    Step, browse_action, edit_action, exec_action, perform, question, read_action, str_field,
    tool_question, u64_field,
};
use super::driver::{Opened, Protocol, Timing, Turn, TurnEnd};
use super::framing::FrameReader;
use super::process::{LineSender, spawn_reader};
use super::start::{OpenContext, Opening, WorkerSetup, WorkerStart, profiled_command};
use crate::profiles::claude_code::PROFILE;

/// Intendant's own provider key that claude also reads; passed only when `[agent.claude-code]
/// env` names it.
const PROVIDER_KEYS: &[&str] = &["ANTHROPIC_API_KEY"];

/// claude's permission mode at each autonomy level: `plan` (it neither writes nor runs) at
/// `low`, else `default`, so every action claude would ask about reaches our approval gate,
/// which follows the level and the `[approval]` rules (`bypassPermissions` would skip them).
pub fn permission_mode(level: AutonomyLevel) -> &'static str {
    match level {
        AutonomyLevel::Low => "plan",
        AutonomyLevel::Medium | AutonomyLevel::High | AutonomyLevel::Full => "default",
    }
}

/// What the command line is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaudeLaunch {
    /// `--model`.
    pub model: Option<String>,
    /// `--effort`.
    pub effort: Option<String>,
    /// The session's autonomy level (sets `--permission-mode`).
    pub autonomy: AutonomyLevel,
    /// `--resume`: the claude session id an earlier session recorded.
    pub resume: Option<String>,
    /// Extra arguments (`[agent.claude-code] args`).
    pub extra_args: Vec<String>,
}

/// The arguments after the executable.
pub fn launch_args(launch: &ClaudeLaunch) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
        "--permission-mode",
        permission_mode(launch.autonomy),
        // No settings file (the user's, the project's, its local one) may pre-allow a tool:
        // their allow rules would answer for our approval gate.
        "--setting-sources",
        "",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if let Some(model) = &launch.model {
        args.extend(["--model".into(), model.into()]);
    }
    if let Some(effort) = &launch.effort {
        args.extend(["--effort".into(), effort.into()]);
    }
    if let Some(id) = &launch.resume {
        args.extend(["--resume".into(), id.into()]);
    }
    args.extend(launch.extra_args.iter().map(OsString::from));
    args
}

/// The claude-code worker backend (built by the factory).
pub fn backend(setup: WorkerSetup, ctx: WorkerContext) -> Result<Box<dyn SessionBackend>, String> {
    let cfg = &setup.config;
    let model = ctx.model.clone().or_else(|| cfg.model.clone());
    // The session a resume takes up is named on the command line: [`Opening::resuming_args`].
    let launch = ClaudeLaunch {
        model: model.clone(),
        effort: cfg.effort.clone(),
        autonomy: ctx.approval_gate.level(),
        resume: None,
        extra_args: cfg.args.clone(),
    };
    let command = profiled_command(
        &PROFILE,
        &setup,
        &[],
        PROVIDER_KEYS,
        launch_args(&launch),
        ctx.project_root.clone(),
    )?;
    Ok(Box::new(WorkerStart {
        name: "claude-code".to_owned(),
        command,
        opening: ClaudeOpening { launch },
        ctx,
        model,
        timing: Timing::of(cfg),
    }))
}

/// claude's handshake: our `initialize` control request, sent without waiting for its answer
/// (the session id comes with `system`/`init`, recorded as a step).
#[derive(Clone)]
struct ClaudeOpening {
    /// The command line's settings (a start that takes up a session names it there).
    launch: ClaudeLaunch,
}

impl Opening for ClaudeOpening {
    type Protocol = ClaudeProtocol;

    fn resuming_args(&self, resume: &str, level: AutonomyLevel) -> Option<Vec<OsString>> {
        Some(launch_args(&ClaudeLaunch {
            autonomy: level,
            resume: Some(resume.to_owned()),
            ..self.launch.clone()
        }))
    }

    async fn open(
        self,
        reader: FrameReader<pipe::Receiver>,
        sender: LineSender,
        ctx: &OpenContext,
        _resume: Option<&str>,
    ) -> Result<Opened<ClaudeProtocol>, WorkerError> {
        let messages = spawn_reader(reader);
        let mut codec = ClaudeCodec::new();
        sender.send(codec.initialize()).await?;
        Ok(Opened {
            protocol: ClaudeProtocol {
                codec,
                out: sender,
                log: ctx.session_log.clone(),
            },
            messages,
            conversation: None,
            resumable: true,
        })
    }
}

struct ClaudeProtocol {
    codec: ClaudeCodec,
    out: LineSender,
    log: SessionLog,
}

#[async_trait]
impl Protocol for ClaudeProtocol {
    type Ticket = String;
    type Message = Value;

    async fn start_turn(
        &mut self,
        text: &str,
        _turn: &mut Turn<'_, String>,
    ) -> Result<(), WorkerError> {
        let line = self.codec.user_message(text);
        self.out.send(line).await
    }

    async fn on_message(
        &mut self,
        message: Value,
        turn: &mut Turn<'_, String>,
    ) -> Result<Option<TurnEnd>, WorkerError> {
        let steps = self.codec.handle(&message)?;
        perform(steps, &self.out, turn, &self.log).await
    }

    async fn answer(
        &mut self,
        ticket: String,
        answer: ApprovalAnswer,
        turn: &mut Turn<'_, String>,
    ) -> Result<(), WorkerError> {
        // A question claude withdrew meanwhile needs no answer.
        let steps = self.codec.answer(&ticket, answer).into_iter().collect();
        perform(steps, &self.out, turn, &self.log).await.map(drop)
    }

    async fn interrupt(&mut self, _turn: &mut Turn<'_, String>) -> Result<(), WorkerError> {
        let line = self.codec.interrupt();
        self.out.send(line).await
    }
}

/// What one of our control requests was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnRequest {
    Initialize,
    Interrupt,
}

/// The stream-json protocol state of one claude process: pure, message by message.
#[derive(Debug, Default)]
pub struct ClaudeCodec {
    next_request: u64,
    own: HashMap<String, OwnRequest>,
    /// Open `can_use_tool` requests: request id to the tool input (echoed as `updatedInput`).
    asks: HashMap<String, Value>,
    /// Tool names by call id (tool results name their call only).
    tools: HashMap<String, String>,
    session_id: Option<String>,
    cost_so_far: f64,
    interrupted: bool,
}

impl ClaudeCodec {
    /// A codec for a fresh process.
    pub fn new() -> ClaudeCodec {
        ClaudeCodec::default()
    }

    /// The `initialize` control request (the first line).
    pub fn initialize(&mut self) -> Value {
        self.control(
            OwnRequest::Initialize,
            json!({"subtype": "initialize", "hooks": null}),
        )
    }

    /// A user message (the task or a follow-up); it opens a turn.
    pub fn user_message(&mut self, text: &str) -> Value {
        self.interrupted = false;
        json!({
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": null,
            "session_id": self.session_id.clone().unwrap_or_default(),
        })
    }

    /// The interrupt control request (claude withdraws its open questions and ends the turn
    /// with a `result`).
    pub fn interrupt(&mut self) -> Value {
        self.interrupted = true;
        self.control(OwnRequest::Interrupt, json!({"subtype": "interrupt"}))
    }

    /// The answer to the question `key`; `None` when it is no longer open.
    pub fn answer(&mut self, key: &str, answer: ApprovalAnswer) -> Option<Step> {
        let input = self.asks.remove(key)?;
        let response = match answer {
            ApprovalAnswer::Approve | ApprovalAnswer::ApproveAll => {
                json!({"behavior": "allow", "updatedInput": input})
            }
            ApprovalAnswer::Skip => {
                json!({"behavior": "deny", "message": SKIPPED_OUTPUT, "interrupt": false})
            }
            ApprovalAnswer::Deny => {
                self.interrupted = true;
                json!({"behavior": "deny", "message": DENIED_OUTPUT, "interrupt": true})
            }
        };
        Some(Step::Send(json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": key, "response": response},
        })))
    }

    /// Translates one message from claude.
    pub fn handle(&mut self, msg: &Value) -> Result<Vec<Step>, WorkerError> {
        let kind = str_field(msg, "type").ok_or_else(|| malformed("a message without `type`"))?;
        match kind {
            "system" => Ok(self.on_system(msg)),
            "assistant" => self.on_assistant(msg),
            "user" => Ok(self.on_user(msg)),
            "stream_event" => Ok(on_stream_event(msg)),
            "result" => Ok(self.on_result(msg)),
            "control_request" => self.on_control_request(msg),
            "control_response" => self.on_control_response(msg),
            // The question is gone: it leaves our queue, and a later answer to it is dropped
            // (see `answer`).
            "control_cancel_request" => {
                let id = str_field(msg, "request_id")
                    .ok_or_else(|| malformed("control_cancel_request without request_id"))?;
                Ok(match self.asks.remove(id) {
                    Some(_) => vec![Step::Withdraw(id.to_owned())],
                    None => Vec::new(),
                })
            }
            // Status, rate-limit and progress notes carry nothing our events show.
            _ => Ok(Vec::new()),
        }
    }

    fn control(&mut self, what: OwnRequest, request: Value) -> Value {
        self.next_request += 1;
        let id = format!("intendant-{}", self.next_request);
        self.own.insert(id.clone(), what);
        json!({"type": "control_request", "request_id": id, "request": request})
    }

    fn on_system(&mut self, msg: &Value) -> Vec<Step> {
        if str_field(msg, "subtype") != Some("init") {
            return Vec::new();
        }
        match str_field(msg, "session_id") {
            Some(id) if self.session_id.as_deref() != Some(id) => {
                self.session_id = Some(id.to_owned());
                vec![Step::WorkerSession(id.to_owned())]
            }
            Some(_) | None => Vec::new(),
        }
    }

    fn on_assistant(&mut self, msg: &Value) -> Result<Vec<Step>, WorkerError> {
        // A sub-agent's own messages are its business; its permission questions still come.
        if is_subagent(msg) {
            return Ok(Vec::new());
        }
        let blocks = msg
            .pointer("/message/content")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("an assistant message without content blocks"))?;
        let (mut text, mut reasoning, mut steps) = (String::new(), String::new(), Vec::new());
        for block in blocks {
            match str_field(block, "type") {
                Some("text") => text.push_str(str_field(block, "text").unwrap_or_default()),
                Some("thinking") => {
                    reasoning.push_str(str_field(block, "thinking").unwrap_or_default());
                }
                Some("tool_use") => {
                    let call_id = str_field(block, "id").unwrap_or_default().to_owned();
                    let name = our_tool_name(str_field(block, "name").unwrap_or_default());
                    self.tools.insert(call_id.clone(), name.clone());
                    steps.push(Step::ToolCall {
                        call_id,
                        name,
                        arguments: block.get("input").cloned().unwrap_or(Value::Null),
                    });
                }
                Some(_) | None => {}
            }
        }
        if !text.is_empty() || !reasoning.is_empty() {
            steps.insert(0, Step::Message { text, reasoning });
        }
        Ok(steps)
    }

    fn on_user(&mut self, msg: &Value) -> Vec<Step> {
        if is_subagent(msg) {
            return Vec::new();
        }
        let Some(blocks) = msg.pointer("/message/content").and_then(Value::as_array) else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter(|b| str_field(b, "type") == Some("tool_result"))
            .map(|b| {
                let call_id = str_field(b, "tool_use_id").unwrap_or_default().to_owned();
                Step::ToolOutput {
                    name: self.tools.get(&call_id).cloned().unwrap_or_default(),
                    call_id,
                    output: tool_result_text(b.get("content")),
                }
            })
            .collect()
    }

    fn on_result(&mut self, msg: &Value) -> Vec<Step> {
        // A question still open when the turn ends is moot.
        self.asks.clear();
        let usage = msg.get("usage").cloned().unwrap_or(Value::Null);
        let cached = u64_field(&usage, "cache_read_input_tokens");
        // `total_cost_usd` is the process's running total; each turn reports its own share.
        let total = msg
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or(self.cost_so_far);
        let cost = (total - self.cost_so_far).max(0.0);
        self.cost_so_far = total;
        let usage = Usage {
            input_tokens: u64_field(&usage, "input_tokens")
                + cached
                + u64_field(&usage, "cache_creation_input_tokens"),
            cached_input_tokens: cached,
            output_tokens: u64_field(&usage, "output_tokens"),
            reasoning_tokens: usage
                .pointer("/output_tokens_details/thinking_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        };
        let is_error = msg.get("is_error").and_then(Value::as_bool) == Some(true);
        let end = if str_field(msg, "subtype") == Some("success") && !is_error {
            TurnEnd::Completed
        } else if self.interrupted {
            TurnEnd::Interrupted
        } else {
            let subtype = str_field(msg, "subtype").unwrap_or("unknown");
            let detail = str_field(msg, "result")
                .map(str::to_owned)
                .or_else(|| {
                    let errors = msg.get("errors").and_then(Value::as_array)?;
                    Some(
                        errors
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                })
                .filter(|t| !t.is_empty());
            TurnEnd::Failed(match detail {
                Some(d) => format!("claude-code reported the turn failed ({subtype}): {d}"),
                None => format!("claude-code reported the turn failed ({subtype})"),
            })
        };
        self.interrupted = false;
        vec![Step::Usage(usage, Some(cost)), Step::TurnEnded(end)]
    }

    fn on_control_request(&mut self, msg: &Value) -> Result<Vec<Step>, WorkerError> {
        let id = str_field(msg, "request_id")
            .ok_or_else(|| malformed("control_request without request_id"))?
            .to_owned();
        let request = msg.get("request").cloned().unwrap_or(Value::Null);
        match str_field(&request, "subtype") {
            Some("can_use_tool") => {
                let tool = str_field(&request, "tool_name").unwrap_or_default();
                let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
                let action = tool_question_of(tool, &input);
                self.asks.insert(id.clone(), input);
                Ok(vec![Step::Ask(id, action)])
            }
            other => {
                let what = other.unwrap_or("(none)");
                Ok(vec![
                    Step::Warning(format!(
                        "claude-code asked for `{what}`, which intendant does not handle: refused"
                    )),
                    Step::Send(json!({
                        "type": "control_response",
                        "response": {
                            "subtype": "error",
                            "request_id": id,
                            "error": format!("intendant does not handle control request `{what}`"),
                        },
                    })),
                ])
            }
        }
    }

    fn on_control_response(&mut self, msg: &Value) -> Result<Vec<Step>, WorkerError> {
        let response = msg
            .get("response")
            .ok_or_else(|| malformed("control_response without `response`"))?;
        let id = str_field(response, "request_id").unwrap_or_default();
        let Some(what) = self.own.remove(id) else {
            return Ok(Vec::new());
        };
        if str_field(response, "subtype") != Some("error") {
            return Ok(Vec::new());
        }
        let message = str_field(response, "error").unwrap_or("no reason given");
        match what {
            OwnRequest::Initialize => Err(WorkerError::Protocol(format!(
                "claude-code refused initialize: {message}"
            ))),
            // No turn was running: nothing to end.
            OwnRequest::Interrupt => {
                self.interrupted = false;
                Ok(Vec::new())
            }
        }
    }
}

fn malformed(what: &str) -> WorkerError {
    WorkerError::Protocol(format!("claude-code sent {what}"))
}

fn is_subagent(msg: &Value) -> bool {
    msg.get("parent_tool_use_id").is_some_and(|p| !p.is_null())
}

/// Our name for claude's tools where we have one.
fn our_tool_name(tool: &str) -> String {
    match tool {
        "Bash" => ToolName::ExecCommand.name().to_owned(),
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => ToolName::EditFile.name().to_owned(),
        other => other.to_owned(),
    }
}

/// Streamed text (`--include-partial-messages`): only visible text deltas.
fn on_stream_event(msg: &Value) -> Vec<Step> {
    if is_subagent(msg) {
        return Vec::new();
    }
    let delta = msg
        .get("event")
        .filter(|e| str_field(e, "type") == Some("content_block_delta"))
        .and_then(|e| e.get("delta"))
        .filter(|d| str_field(d, "type") == Some("text_delta"))
        .and_then(|d| str_field(d, "text"))
        .unwrap_or_default();
    if delta.is_empty() {
        Vec::new()
    } else {
        vec![Step::Delta(delta.to_owned())]
    }
}

/// A tool result's content: a string, or text blocks.
fn tool_result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| str_field(b, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(_) | None => String::new(),
    }
}

/// claude's tool request as our approval question, through our runtime vocabulary.
pub fn tool_question_of(tool: &str, input: &Value) -> intendant_core::approval::ExternalAction {
    let s = |k: &str| str_field(input, k);
    let path = s("file_path").or(s("notebook_path"));
    let cmd = match (tool, s("command"), path) {
        ("Bash", Some(command), _) => exec_action(command),
        ("Write", _, Some(path)) => edit_action(path, None, s("content").unwrap_or_default()),
        ("Edit", _, Some(path)) => edit_action(
            path,
            Some(s("old_string").unwrap_or_default()),
            s("new_string").unwrap_or_default(),
        ),
        ("NotebookEdit", _, Some(path)) => {
            edit_action(path, None, s("new_source").unwrap_or_default())
        }
        ("Read", _, Some(path)) => read_action(path),
        ("WebFetch", _, _) if s("url").is_some() => browse_action(s("url").unwrap_or_default()),
        _ => return tool_question(tool, input),
    };
    question(&cmd)
}

#[cfg(test)]
mod tests;

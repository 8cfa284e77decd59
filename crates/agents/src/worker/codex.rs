//! `codex app-server` as a session worker: JSON lines on stdio, JSON-RPC without the `jsonrpc`
//! member. `initialize` then `initialized`, `thread/start` (or `thread/resume` with the thread id
//! the session log recorded), one `turn/start` per round; the turn ends at `turn/completed`.
//! `item/completed` is the authoritative item; deltas only stream text. The server's
//! `item/commandExecution/requestApproval` and `item/fileChange/requestApproval` are answered
//! from the session's approval gate; any other server request gets a JSON-RPC error.
//!
//! Autonomy (`docs/agents.md`): `low` runs codex read-only and declines every file change
//! without asking; `medium` makes codex ask before every untrusted command and every file change;
//! `high` lets codex run inside its workspace sandbox and ask only to leave it; `full` never asks.

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use intendant_core::approval::{ApprovalAnswer, ExternalAction};
use intendant_core::autonomy::{AutonomyLevel, SharedLevel};
use intendant_core::classify::ActionCategory;
use intendant_core::session::{SessionBackend, WorkerContext};
use intendant_core::usage::Usage;
use intendant_protocol::tools::ToolName;
use serde_json::{Value, json};
use tokio::net::unix::pipe;

use super::WorkerError;
use super::driver::{Opened, Protocol, Timing, Turn, TurnEnd};
use super::events::{MAX_OUTPUT_BYTES, WorkerEvents, bounded};
use super::framing::FrameReader;
use super::process::LineSender;
use super::rpc::{Dialect, Incoming, Peer};
use super::start::{OpenContext, Opening, WorkerSetup, WorkerStart, profiled_command};
use crate::profiles::codex::PROFILE;

/// How long an interrupt waits for codex to acknowledge it.
const INTERRUPT_ANSWER: Duration = Duration::from_secs(10);
/// Keys an Intendant provider key is read from; passed to codex only when `[agent.codex] env`
/// names them.
const PROVIDER_KEYS: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"];

/// Codex's approval policy and sandbox for an autonomy level.
pub fn settings_for(level: AutonomyLevel) -> (&'static str, &'static str) {
    match level {
        AutonomyLevel::Low => ("untrusted", "read-only"),
        AutonomyLevel::Medium => ("untrusted", "workspace-write"),
        AutonomyLevel::High => ("on-request", "workspace-write"),
        AutonomyLevel::Full => ("never", "workspace-write"),
    }
}

/// `turn/start`'s `sandboxPolicy` at `level`: the object form of [`settings_for`]'s sandbox.
fn sandbox_policy(level: AutonomyLevel) -> Value {
    match level {
        AutonomyLevel::Low => json!({"type": "readOnly"}),
        AutonomyLevel::Medium | AutonomyLevel::High | AutonomyLevel::Full => {
            json!({"type": "workspaceWrite"})
        }
    }
}

/// The codex worker backend (built by the factory).
pub fn backend(setup: WorkerSetup, ctx: WorkerContext) -> Result<Box<dyn SessionBackend>, String> {
    let cfg = &setup.config;
    let mut args: Vec<OsString> = vec!["app-server".into()];
    for entry in &cfg.config {
        args.push("-c".into());
        args.push(entry.into());
    }
    args.extend(cfg.args.iter().map(OsString::from));
    let command = profiled_command(
        &PROFILE,
        &setup,
        &cfg.config,
        PROVIDER_KEYS,
        args,
        ctx.project_root.clone(),
    )?;
    let model = ctx.model.clone().or_else(|| cfg.model.clone());
    Ok(Box::new(WorkerStart {
        name: "codex".to_owned(),
        command,
        opening: CodexOpening {
            model: model.clone(),
            effort: cfg.effort.clone(),
        },
        ctx,
        model,
        timing: Timing::of(cfg),
    }))
}

/// Codex's handshake: a thread at the session's level, for the model.
#[derive(Clone)]
struct CodexOpening {
    model: Option<String>,
    effort: Option<String>,
}

impl Opening for CodexOpening {
    type Protocol = CodexProtocol;

    async fn open(
        self,
        reader: FrameReader<pipe::Receiver>,
        sender: LineSender,
        ctx: &OpenContext,
        resume: Option<&str>,
    ) -> Result<Opened<CodexProtocol>, WorkerError> {
        let (peer, messages) = Peer::start(reader, sender, Dialect::Bare);
        let live_level = ctx.level.clone();
        let level = live_level.get();
        let thread_id = open_thread(&peer, ctx, level, self.model.as_deref(), resume).await?;
        Ok(Opened {
            conversation: Some(thread_id.clone()),
            resumable: true,
            protocol: CodexProtocol {
                peer,
                thread_id,
                turn_id: None,
                interrupting: None,
                level,
                live_level,
                effort: self.effort,
                items: HashMap::new(),
                outputs: HashMap::new(),
            },
            messages,
        })
    }
}

/// The handshake, then a new thread or the recorded one; returns the thread id.
async fn open_thread(
    peer: &Peer,
    ctx: &OpenContext,
    level: AutonomyLevel,
    model: Option<&str>,
    resume: Option<&str>,
) -> Result<String, WorkerError> {
    peer.request(
        "initialize",
        json!({"clientInfo": {"name": "intendant", "title": "Intendant",
                              "version": env!("CARGO_PKG_VERSION")}}),
    )
    .await?;
    peer.notify("initialized", None).await?;
    let (approval_policy, sandbox) = settings_for(level);
    let mut params = json!({
        "cwd": ctx.project_root.display().to_string(),
        "approvalPolicy": approval_policy,
        "sandbox": sandbox,
    });
    if let Some(model) = model {
        params["model"] = json!(model);
    }
    let response = match resume {
        Some(thread_id) => {
            params["threadId"] = json!(thread_id);
            peer.request("thread/resume", params).await?
        }
        None => peer.request("thread/start", params).await?,
    };
    response
        .pointer("/thread/id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| WorkerError::Protocol("codex answered without a thread id".to_owned()))
}

/// An approval request of codex, answered by its id.
struct Ticket {
    id: Value,
}

/// Codex's answer to our `turn/interrupt`, awaited once the turn has completed.
type InterruptAnswer = BoxFuture<'static, Result<Value, WorkerError>>;

struct CodexProtocol {
    peer: Peer,
    thread_id: String,
    turn_id: Option<String>,
    /// Our `turn/interrupt` of the open turn, not yet answered.
    interrupting: Option<InterruptAnswer>,
    /// The level codex's thread runs at (its approval policy and sandbox).
    level: AutonomyLevel,
    /// The session's level as its gate reads it: a human may lower it (or its parent's) while
    /// the session runs, and codex must then ask for what it ran unasked before.
    live_level: SharedLevel,
    effort: Option<String>,
    /// Items started and not yet completed (a file change approval names only the item).
    items: HashMap<String, Value>,
    /// Streamed command output per item, bounded (the completed item's own output wins).
    outputs: HashMap<String, String>,
}

#[async_trait]
impl Protocol for CodexProtocol {
    type Ticket = Ticket;
    type Message = Incoming;

    async fn start_turn(
        &mut self,
        text: &str,
        _turn: &mut Turn<'_, Ticket>,
    ) -> Result<(), WorkerError> {
        let mut params = json!({
            "threadId": self.thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        });
        if let Some(effort) = &self.effort {
            params["effort"] = json!(effort);
        }
        // Codex decides itself what runs unasked, by the policy it was given: the level is read
        // again at every turn, and a changed one is handed over for this turn and the next.
        let level = self.live_level.get();
        if level != self.level {
            params["approvalPolicy"] = json!(settings_for(level).0);
            params["sandboxPolicy"] = sandbox_policy(level);
        }
        let response = self.peer.request("turn/start", params).await?;
        self.level = level;
        let turn_id = response
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .ok_or_else(|| WorkerError::Protocol("turn/start answered without a turn id".into()))?;
        self.turn_id = Some(turn_id.to_owned());
        Ok(())
    }

    async fn on_message(
        &mut self,
        message: Incoming,
        turn: &mut Turn<'_, Ticket>,
    ) -> Result<Option<TurnEnd>, WorkerError> {
        match message {
            Incoming::Request { id, method, params } => {
                self.on_request(id, &method, &params, turn).await?;
                Ok(None)
            }
            Incoming::Notification { method, params } => {
                let end = self.on_notification(&method, &params, turn);
                if end.is_some() {
                    self.interrupt_answered(turn).await;
                }
                Ok(end)
            }
        }
    }

    async fn answer(
        &mut self,
        ticket: Ticket,
        answer: ApprovalAnswer,
        _turn: &mut Turn<'_, Ticket>,
    ) -> Result<(), WorkerError> {
        self.peer
            .respond(ticket.id, json!({"decision": decision(answer)}))
            .await
    }

    async fn interrupt(&mut self, _turn: &mut Turn<'_, Ticket>) -> Result<(), WorkerError> {
        let Some(turn_id) = self.turn_id.clone() else {
            return Ok(());
        };
        // Its answer is awaited at `turn/completed`: meanwhile the loop answers codex's pending
        // approval requests (`cancel`), which codex may need before it stops the turn.
        let answer = self
            .peer
            .call(
                "turn/interrupt",
                json!({"threadId": self.thread_id, "turnId": turn_id}),
            )
            .await?;
        self.interrupting = Some(Box::pin(answer));
        Ok(())
    }
}

impl CodexProtocol {
    /// Once the interrupted turn has completed: codex's answer to our `turn/interrupt`.
    async fn interrupt_answered(&mut self, turn: &mut Turn<'_, Ticket>) {
        let Some(answer) = self.interrupting.take() else {
            return;
        };
        match tokio::time::timeout(INTERRUPT_ANSWER, answer).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => turn
                .events
                .error(format!("codex refused the interrupt: {e}")),
            Err(_) => turn
                .events
                .warning("codex has not acknowledged the interrupt"),
        }
    }
}

/// Codex's decision for our answer: skip declines (the turn goes on), deny cancels the turn.
fn decision(answer: ApprovalAnswer) -> &'static str {
    match answer {
        ApprovalAnswer::Approve => "accept",
        ApprovalAnswer::ApproveAll => "acceptForSession",
        ApprovalAnswer::Skip => "decline",
        ApprovalAnswer::Deny => "cancel",
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

impl CodexProtocol {
    async fn on_request(
        &mut self,
        id: Value,
        method: &str,
        params: &Value,
        turn: &mut Turn<'_, Ticket>,
    ) -> Result<(), WorkerError> {
        match method {
            "item/commandExecution/requestApproval" => {
                let command = str_field(params, "command");
                let category = if params
                    .get("networkApprovalContext")
                    .is_some_and(|n| !n.is_null())
                {
                    ActionCategory::Network
                } else {
                    ActionCategory::CommandExec
                };
                let reason = str_field(params, "reason");
                let cwd = str_field(params, "cwd");
                let mut detail = Vec::new();
                if !cwd.is_empty() {
                    detail.push(format!("in {cwd}"));
                }
                if !reason.is_empty() {
                    detail.push(format!("codex says: {reason}"));
                }
                turn.ask(
                    Ticket { id },
                    ExternalAction {
                        preview: intendant_core::preview::escape_invisible(&format!("$ {command}")),
                        category,
                        detail: (!detail.is_empty()).then(|| detail.join("\n")),
                    },
                );
            }
            "item/fileChange/requestApproval" => {
                if self.live_level.get() == AutonomyLevel::Low {
                    turn.events.warning(
                        "codex asked to change files; autonomy `low` never lets a worker write: declined",
                    );
                    return self.peer.respond(id, json!({"decision": "decline"})).await;
                }
                let item = self.items.get(str_field(params, "itemId"));
                let (preview, detail, category) = file_change_question(item);
                turn.ask(
                    Ticket { id },
                    ExternalAction {
                        preview,
                        category,
                        detail,
                    },
                );
            }
            other => {
                turn.events.warning(format!(
                    "codex asked for `{other}`, which intendant does not handle: refused"
                ));
                self.peer.refuse(id, other).await?;
            }
        }
        Ok(())
    }

    fn on_notification(
        &mut self,
        method: &str,
        params: &Value,
        turn: &mut Turn<'_, Ticket>,
    ) -> Option<TurnEnd> {
        let events = &mut *turn.events;
        match method {
            "item/started" => {
                let item = params.get("item").cloned().unwrap_or(Value::Null);
                let id = str_field(&item, "id").to_owned();
                if let Some((name, arguments)) = tool_of(&item) {
                    events.tool_call(&id, &name, arguments);
                }
                self.items.insert(id, item);
            }
            "item/completed" => {
                let item = params.get("item").cloned().unwrap_or(Value::Null);
                self.item_completed(item, events);
            }
            // A request of codex settled without our answer (its turn was interrupted): it
            // leaves our approval queue.
            "serverRequest/resolved" => {
                if let Some(id) = params.get("requestId") {
                    turn.withdraw(|ticket| ticket.id == *id);
                }
            }
            "item/agentMessage/delta" => events.text_delta(str_field(params, "delta")),
            "item/commandExecution/outputDelta" => {
                let id = str_field(params, "itemId").to_owned();
                let out = self.outputs.entry(id).or_default();
                if out.len() < MAX_OUTPUT_BYTES {
                    out.push_str(str_field(params, "delta"));
                }
            }
            "thread/tokenUsage/updated" => {
                if let Some(last) = params.pointer("/tokenUsage/last") {
                    let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
                    let usage = Usage {
                        input_tokens: n("inputTokens"),
                        cached_input_tokens: n("cachedInputTokens"),
                        output_tokens: n("outputTokens"),
                        reasoning_tokens: n("reasoningOutputTokens"),
                    };
                    events.usage(&usage, None);
                }
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported an error");
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    events.warning(format!("codex: {message} (retrying)"));
                } else {
                    events.error(format!("codex: {message}"));
                }
            }
            "turn/completed" => {
                let completed = params.get("turn").cloned().unwrap_or(Value::Null);
                return self.turn_completed(&completed);
            }
            _ => {}
        }
        None
    }

    /// `item/completed`: the authoritative item, as a message or a tool's output.
    fn item_completed(&mut self, item: Value, events: &mut WorkerEvents) {
        let id = str_field(&item, "id").to_owned();
        self.items.remove(&id);
        let streamed = self.outputs.remove(&id).unwrap_or_default();
        match str_field(&item, "type") {
            "agentMessage" => events.message(str_field(&item, "text"), ""),
            "commandExecution" => {
                let output = match item.get("aggregatedOutput").and_then(Value::as_str) {
                    Some(o) => o.to_owned(),
                    None => streamed,
                };
                let status = str_field(&item, "status");
                let exit = item.get("exitCode").and_then(Value::as_i64);
                let text = match exit {
                    Some(code) => format!("{output}\n[{status}, exit code {code}]"),
                    None => format!("{output}\n[{status}]"),
                };
                events.tool_output(&id, ToolName::ExecCommand.name(), text.trim_start());
            }
            "fileChange" => {
                let paths: Vec<&str> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|c| c.iter().map(|c| str_field(c, "path")).collect())
                    .unwrap_or_default();
                events.tool_output(
                    &id,
                    ToolName::EditFile.name(),
                    &format!("{}: {}", str_field(&item, "status"), paths.join(", ")),
                );
            }
            "mcpToolCall" | "dynamicToolCall" | "webSearch" => {
                if let Some((name, _)) = tool_of(&item) {
                    let result = item
                        .get("result")
                        .or_else(|| item.get("error"))
                        .or_else(|| item.get("contentItems"))
                        .map(Value::to_string)
                        .unwrap_or_else(|| str_field(&item, "status").to_owned());
                    events.tool_output(&id, &name, &result);
                }
            }
            _ => {}
        }
    }

    /// `turn/completed`: the end of our open turn (another turn's end is not ours).
    fn turn_completed(&mut self, completed: &Value) -> Option<TurnEnd> {
        let id = str_field(completed, "id");
        if self.turn_id.as_deref() != Some(id) {
            return None;
        }
        self.turn_id = None;
        Some(match str_field(completed, "status") {
            "interrupted" => TurnEnd::Interrupted,
            "failed" => TurnEnd::Failed(
                completed
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given")
                    .to_owned(),
            ),
            _ => TurnEnd::Completed,
        })
    }
}

/// The tool call an item is, in our vocabulary where one exists.
fn tool_of(item: &Value) -> Option<(String, Value)> {
    match str_field(item, "type") {
        "commandExecution" => Some((
            ToolName::ExecCommand.name().to_owned(),
            json!({"command": str_field(item, "command"), "cwd": str_field(item, "cwd")}),
        )),
        "fileChange" => {
            let changes: Vec<Value> = item
                .get("changes")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .map(|c| json!({"path": str_field(c, "path"), "kind": c.pointer("/kind/type")}))
                        .collect()
                })
                .unwrap_or_default();
            Some((
                ToolName::EditFile.name().to_owned(),
                json!({"changes": changes}),
            ))
        }
        "mcpToolCall" => Some((
            format!(
                "mcp__{}_{}",
                str_field(item, "server"),
                str_field(item, "tool")
            ),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        )),
        "dynamicToolCall" => Some((
            str_field(item, "tool").to_owned(),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        )),
        "webSearch" => Some((
            "web_search".to_owned(),
            json!({"query": str_field(item, "query")}),
        )),
        _ => None,
    }
}

/// Preview, detail and category of a file change approval, from the started item.
fn file_change_question(item: Option<&Value>) -> (String, Option<String>, ActionCategory) {
    let changes: Vec<&Value> = item
        .and_then(|i| i.get("changes"))
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    if changes.is_empty() {
        return (
            "edit (files not named by codex)".to_owned(),
            None,
            ActionCategory::FileWrite,
        );
    }
    let kinds: Vec<&str> = changes
        .iter()
        .map(|c| {
            c.pointer("/kind/type")
                .and_then(Value::as_str)
                .unwrap_or("update")
        })
        .collect();
    let category = if kinds.iter().all(|k| *k == "delete") {
        ActionCategory::FileDelete
    } else {
        ActionCategory::FileWrite
    };
    let preview = changes
        .iter()
        .zip(&kinds)
        .map(|(c, k)| format!("edit {} ({k})", str_field(c, "path")))
        .collect::<Vec<_>>()
        .join(", ");
    let diff: String = changes
        .iter()
        .map(|c| str_field(c, "diff"))
        .collect::<Vec<_>>()
        .join("\n");
    let preview = intendant_core::preview::escape_invisible(&preview);
    let detail = (!diff.is_empty()).then(|| {
        bounded(
            &intendant_core::preview::escape_invisible(&diff),
            MAX_OUTPUT_BYTES,
        )
    });
    (preview, detail, category)
}

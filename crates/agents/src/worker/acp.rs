//! The Agent Client Protocol (JSON-RPC 2.0, one message a line on stdio) from the client side:
//! `kimi acp`, and any other ACP agent (`--agent acp -- COMMAND ARGS...`, `[agent.acp.NAME]`).
//!
//! The wire (recorded from the pinned kimi under `tests/fixtures/workers/`): `initialize`, then
//! `session/new` (or `session/load` of the recorded session id, which the agent must offer as
//! `loadSession`), then one `session/prompt` per round, whose response (`stopReason`) is the
//! turn's end. Meanwhile `session/update` notifications stream text, thoughts and tool calls,
//! and the agent asks `session/request_permission`, answered with one of its options by kind
//! (`allow_once`, `allow_always`, `reject_once`, `reject_always`), or `cancelled` after a
//! `session/cancel` (our interrupt: the prompt then answers `stopReason: cancelled`); the agent
//! may take a question back with `$/cancel_request`. We offer no file system and no terminal, so the agent's own tools act; any
//! other request gets a JSON-RPC error, never silence.
//!
//! At `low` autonomy the session is switched to the agent's read-only mode (`plan`); an agent
//! without one cannot honour `low`, and the session refuses to start.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use async_trait::async_trait;
use futures::future::BoxFuture;
use intendant_core::approval::{ApprovalAnswer, ExternalAction};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::session::{SessionBackend, WorkerContext};
use intendant_core::session_log::SessionLog;
use intendant_core::usage::Usage;
use intendant_protocol::tools::ToolName;
use serde_json::{Value, json};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::WorkerError;
use super::actions::{
    Step, browse_action, edit_action, exec_action, perform, question, read_action, str_field,
    tool_question, u64_field,
};
use super::driver::{Opened, Protocol, Timing, Turn, TurnEnd};
use super::framing::{FrameError, FrameReader};
use super::process::{INCOMING_CAPACITY, LineSender, WorkerCommand};
use super::rpc::{Dialect, Incoming, IncomingStream, METHOD_NOT_FOUND, Peer};
use super::start::{
    OpenContext, Opening, WorkerSetup, WorkerStart, profiled_command, worker_command,
};
use crate::env::{ChildEnvPolicy, child_env};
use crate::profiles::kimi;

/// The ACP protocol version we speak.
pub const PROTOCOL_VERSION: u64 = 1;
/// The notification an agent takes back one of its requests with (`{"requestId": ID}`).
const CANCEL_REQUEST: &str = "$/cancel_request";
/// The read-only mode ids tried at `low`, in order.
const READ_ONLY_MODES: &[&str] = &["plan", "read-only", "read_only", "readonly"];
/// What an ACP agent without a profile gets besides the base list: colour off.
const GENERIC_ENV: ChildEnvPolicy = ChildEnvPolicy {
    keep: &[],
    fixed: &[("NO_COLOR", "1")],
};

/// How an ACP session is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpLaunch {
    /// The agent's name in messages (`kimi`, or the `[agent.acp.NAME]` name).
    pub worker: String,
    /// The working directory, sent as the session's `cwd`.
    pub cwd: String,
    /// The session's autonomy level.
    pub autonomy: AutonomyLevel,
    /// The agent's session id an earlier session recorded, to load.
    pub resume: Option<String>,
}

/// The kimi worker backend (`kimi acp`).
pub fn kimi_backend(
    setup: WorkerSetup,
    ctx: WorkerContext,
) -> Result<Box<dyn SessionBackend>, String> {
    let cfg = &setup.config;
    let mut args: Vec<OsString> = vec!["acp".into()];
    args.extend(cfg.args.iter().map(OsString::from));
    let command = profiled_command(
        &kimi::PROFILE,
        &setup,
        &[],
        &[],
        args,
        ctx.project_root.clone(),
    )?;
    Ok(acp_backend("kimi", command, Timing::of(cfg), ctx))
}

/// An ACP agent without a profile, run as `command` (`[agent.acp.NAME]` or `--agent acp --
/// COMMAND ARGS...`) with only `env` admitted into its environment besides the base list.
pub fn generic_backend(
    name: &str,
    command: &[String],
    env_names: &[String],
    setup: &WorkerSetup,
    ctx: WorkerContext,
) -> Result<Box<dyn SessionBackend>, String> {
    let Some((program, args)) = command.split_first() else {
        return Err(format!("the ACP agent `{name}` has no command"));
    };
    let program = if program.contains('/') {
        std::path::absolute(program).unwrap_or_else(|_| PathBuf::from(program))
    } else {
        crate::discover::on_path(program, &setup.host)
            .ok_or_else(|| format!("the ACP agent `{name}`: `{program}` was not found on PATH"))?
    };
    let env = child_env(&setup.host, &GENERIC_ENV, &[], env_names);
    let command = worker_command(
        program,
        args.iter().map(OsString::from).collect(),
        env,
        ctx.project_root.clone(),
    );
    Ok(acp_backend(name, command, Timing::of(&setup.config), ctx))
}

/// An ACP agent's backend: `command` opened by the ACP handshake.
fn acp_backend(
    name: &str,
    command: WorkerCommand,
    timing: Timing,
    ctx: WorkerContext,
) -> Box<dyn SessionBackend> {
    let model = ctx.model.clone();
    Box::new(WorkerStart {
        name: name.to_owned(),
        command,
        opening: AcpOpening {
            name: name.to_owned(),
        },
        ctx,
        model,
        timing,
    })
}

/// The ACP handshake of the agent `name`.
#[derive(Clone)]
struct AcpOpening {
    name: String,
}

impl Opening for AcpOpening {
    type Protocol = AcpProtocol;

    async fn open(
        self,
        reader: FrameReader<pipe::Receiver>,
        sender: LineSender,
        ctx: &OpenContext,
        resume: Option<&str>,
    ) -> Result<Opened<AcpProtocol>, WorkerError> {
        let (peer, incoming) = Peer::start(reader, sender.clone(), Dialect::V2);
        let (mut messages, answers) = merge(incoming);
        let launch = AcpLaunch {
            worker: self.name.clone(),
            cwd: ctx.project_root.display().to_string(),
            autonomy: ctx.level.get(),
            resume: resume.map(str::to_owned),
        };
        let handshake = Handshake {
            peer: &peer,
            messages: &mut messages,
            answers: &answers,
        };
        let (session_id, resumable) = open_session(handshake, &launch).await?;
        Ok(Opened {
            protocol: AcpProtocol {
                codec: AcpCodec::new(&self.name, &session_id),
                peer,
                out: sender,
                answers,
                log: ctx.session_log.clone(),
            },
            messages,
            conversation: Some(session_id),
            resumable,
        })
    }
}

/// One message for the session loop: the agent's own, or the answer to our prompt.
#[derive(Debug)]
pub enum AcpMessage {
    /// A request or notification of the agent.
    Incoming(Incoming),
    /// The answer to one of our requests (`session/prompt`: the turn's end).
    Answer(Result<Value, WorkerError>),
}

type PendingAnswer = BoxFuture<'static, Result<Value, WorkerError>>;

/// One stream of the agent's messages and the answers to our requests, in the agent's order: an
/// answer is delivered only after every message the agent sent before it (one request at a time).
fn merge(
    mut incoming: IncomingStream,
) -> (
    mpsc::Receiver<Result<AcpMessage, FrameError>>,
    mpsc::Sender<PendingAnswer>,
) {
    let (tx, rx) = mpsc::channel(INCOMING_CAPACITY);
    let (prompt_tx, mut prompt_rx) = mpsc::channel::<PendingAnswer>(1);
    tokio::spawn(async move {
        let mut open: Option<PendingAnswer> = None;
        loop {
            let waiting = open.is_some();
            // The peer queues a message before it routes a later response, so polling the
            // queue first keeps the agent's order.
            let next = {
                let answered = async {
                    match open.as_mut() {
                        Some(answer) => answer.await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    m = incoming.recv() => Next::Message(m),
                    p = prompt_rx.recv(), if !waiting => Next::Prompt(p),
                    r = answered => Next::Answered(r),
                }
            };
            let item = match next {
                Next::Message(Some(m)) => m.map(AcpMessage::Incoming),
                Next::Prompt(Some(p)) => {
                    open = Some(p);
                    continue;
                }
                Next::Answered(r) => {
                    open = None;
                    Ok(AcpMessage::Answer(r))
                }
                Next::Message(None) | Next::Prompt(None) => return,
            };
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    (rx, prompt_tx)
}

enum Next {
    Message(Option<Result<Incoming, FrameError>>),
    Prompt(Option<PendingAnswer>),
    Answered(Result<Value, WorkerError>),
}

/// Our requests before the session loop runs: each answer comes through the merged stream, so
/// everything the agent sent before it (a loaded session's replayed history, already in our
/// log) is seen and dropped first; a request of the agent meanwhile is refused.
struct Handshake<'a> {
    peer: &'a Peer,
    messages: &'a mut mpsc::Receiver<Result<AcpMessage, FrameError>>,
    answers: &'a mpsc::Sender<PendingAnswer>,
}

impl Handshake<'_> {
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, WorkerError> {
        let answer = self.peer.call(method, params).await?;
        self.answers
            .send(Box::pin(answer))
            .await
            .map_err(|_| WorkerError::Closed)?;
        loop {
            match self.messages.recv().await {
                Some(Ok(AcpMessage::Answer(r))) => return r,
                Some(Ok(AcpMessage::Incoming(Incoming::Request { id, method, .. }))) => {
                    self.peer.refuse(id, &method).await?;
                }
                Some(Ok(AcpMessage::Incoming(Incoming::Notification { .. }))) => {}
                Some(Err(e)) => return Err(WorkerError::Frame(e)),
                None => return Err(WorkerError::Closed),
            }
        }
    }
}

/// The handshake: `initialize`, a new session or the recorded one, and at `low` the read-only
/// mode. Returns the session id, and whether the agent can load it again (`loadSession`).
async fn open_session(
    mut hs: Handshake<'_>,
    launch: &AcpLaunch,
) -> Result<(String, bool), WorkerError> {
    let init = hs
        .request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false,
                },
                "clientInfo": {"name": "intendant", "version": env!("CARGO_PKG_VERSION")},
            }),
        )
        .await?;
    let can_load = init
        .pointer("/agentCapabilities/loadSession")
        .and_then(Value::as_bool)
        == Some(true);
    let (session_id, opened) = match &launch.resume {
        Some(id) if can_load => {
            let loaded = hs
                .request(
                    "session/load",
                    json!({"sessionId": id, "cwd": launch.cwd, "mcpServers": []}),
                )
                .await?;
            (id.clone(), loaded)
        }
        Some(_) => {
            return Err(WorkerError::Protocol(format!(
                "{} does not offer loadSession, so its session cannot be resumed",
                launch.worker
            )));
        }
        None => {
            let opened = hs
                .request("session/new", json!({"cwd": launch.cwd, "mcpServers": []}))
                .await?;
            let id = str_field(&opened, "sessionId").ok_or_else(|| {
                WorkerError::Protocol(format!("{} opened a session without an id", launch.worker))
            })?;
            (id.to_owned(), opened)
        }
    };
    match launch.autonomy {
        AutonomyLevel::Low => {
            let mode = read_only_mode(&opened).ok_or_else(|| {
                WorkerError::Protocol(format!(
                    "{} offers no read-only mode (plan), so autonomy `low` cannot be honoured; \
                     use medium or higher",
                    launch.worker
                ))
            })?;
            hs.request(
                "session/set_mode",
                json!({"sessionId": session_id, "modeId": mode}),
            )
            .await?;
        }
        AutonomyLevel::Medium | AutonomyLevel::High | AutonomyLevel::Full => {}
    }
    Ok((session_id, can_load))
}

/// The first read-only mode the agent offers (`modes.availableModes[].id`).
fn read_only_mode(opened: &Value) -> Option<String> {
    let modes = opened.pointer("/modes/availableModes")?.as_array()?;
    READ_ONLY_MODES.iter().find_map(|want| {
        modes
            .iter()
            .filter_map(|m| str_field(m, "id"))
            .find(|id| id == want)
            .map(str::to_owned)
    })
}

struct AcpProtocol {
    codec: AcpCodec,
    peer: Peer,
    out: LineSender,
    answers: mpsc::Sender<PendingAnswer>,
    log: SessionLog,
}

#[async_trait]
impl Protocol for AcpProtocol {
    type Ticket = String;
    type Message = AcpMessage;

    async fn start_turn(
        &mut self,
        text: &str,
        _turn: &mut Turn<'_, String>,
    ) -> Result<(), WorkerError> {
        let answer = self
            .peer
            .call("session/prompt", self.codec.prompt(text))
            .await?;
        self.answers
            .send(Box::pin(answer))
            .await
            .map_err(|_| WorkerError::Closed)
    }

    async fn on_message(
        &mut self,
        message: AcpMessage,
        turn: &mut Turn<'_, String>,
    ) -> Result<Option<TurnEnd>, WorkerError> {
        let steps = match message {
            AcpMessage::Incoming(Incoming::Request { id, method, params }) => {
                self.codec.on_request(id, &method, &params)
            }
            AcpMessage::Incoming(Incoming::Notification { method, params }) => {
                self.codec.on_notification(&method, &params)
            }
            AcpMessage::Answer(answer) => self.codec.on_prompt_answer(answer)?,
        };
        perform(steps, &self.out, turn, &self.log).await
    }

    async fn answer(
        &mut self,
        ticket: String,
        answer: ApprovalAnswer,
        turn: &mut Turn<'_, String>,
    ) -> Result<(), WorkerError> {
        let steps = self.codec.answer(&ticket, answer);
        perform(steps, &self.out, turn, &self.log).await.map(drop)
    }

    async fn interrupt(&mut self, turn: &mut Turn<'_, String>) -> Result<(), WorkerError> {
        let steps = self.codec.cancel();
        perform(steps, &self.out, turn, &self.log).await.map(drop)
    }
}

/// A tool call as the updates have described it so far.
#[derive(Debug, Clone, Default)]
struct ToolCallState {
    title: String,
    kind: String,
    input: Option<Value>,
    /// The last text content (the output, once the call is done).
    text: String,
    /// The last text content that was a JSON object: kimi streams a call's arguments there
    /// before (and without) `rawInput`.
    streamed_args: Option<Value>,
    diff: Option<(String, Option<String>, String)>,
    announced: bool,
    finished: bool,
}

impl ToolCallState {
    /// Our name for the call where we have one (`exec_command`, `edit_file`), else its title.
    fn our_name(&self) -> String {
        match self.kind.as_str() {
            "execute" => ToolName::ExecCommand.name().to_owned(),
            "edit" | "delete" | "move" => ToolName::EditFile.name().to_owned(),
            _ => self.title.clone(),
        }
    }
}

/// An open permission question: its JSON-RPC id and the offered options (id, kind).
#[derive(Debug, Clone)]
struct OpenAsk {
    id: Value,
    options: Vec<(String, String)>,
}

/// The ACP state of one open session: pure, message by message.
#[derive(Debug)]
pub struct AcpCodec {
    worker: String,
    session_id: String,
    asks: HashMap<String, OpenAsk>,
    tools: HashMap<String, ToolCallState>,
    in_turn: bool,
    cancelled: bool,
    text: String,
    thought: String,
}

impl AcpCodec {
    /// The codec of session `session_id` of the agent `worker`.
    pub fn new(worker: &str, session_id: &str) -> AcpCodec {
        AcpCodec {
            worker: worker.to_owned(),
            session_id: session_id.to_owned(),
            asks: HashMap::new(),
            tools: HashMap::new(),
            in_turn: false,
            cancelled: false,
            text: String::new(),
            thought: String::new(),
        }
    }

    /// The params of `session/prompt` for `text`; opens a turn.
    pub fn prompt(&mut self, text: &str) -> Value {
        self.in_turn = true;
        self.cancelled = false;
        json!({"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]})
    }

    /// Cancels the open turn: `session/cancel`, and every open question answered `cancelled`
    /// (the agent then answers the prompt with `stopReason: cancelled`).
    pub fn cancel(&mut self) -> Vec<Step> {
        if !self.in_turn || self.cancelled {
            return Vec::new();
        }
        self.cancelled = true;
        let mut steps = vec![Step::Send(json!({
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": self.session_id},
        }))];
        for (_, ask) in self.asks.drain() {
            steps.push(Step::Send(outcome(ask.id, json!({"outcome": "cancelled"}))));
        }
        steps
    }

    /// The answer to question `key` (nothing when it is no longer open). A deny also cancels
    /// the turn: our deny stops the task.
    pub fn answer(&mut self, key: &str, answer: ApprovalAnswer) -> Vec<Step> {
        let Some(ask) = self.asks.remove(key) else {
            return Vec::new();
        };
        let kinds: &[&str] = match answer {
            ApprovalAnswer::Approve => &["allow_once", "allow_always"],
            ApprovalAnswer::ApproveAll => &["allow_always", "allow_once"],
            ApprovalAnswer::Skip | ApprovalAnswer::Deny => &["reject_once", "reject_always"],
        };
        let chosen = kinds
            .iter()
            .find_map(|k| ask.options.iter().find(|(_, kind)| kind == k));
        let result = match chosen {
            Some((option_id, _)) => json!({"outcome": "selected", "optionId": option_id}),
            // No option of that kind: not choosing is the one answer that never allows.
            None => json!({"outcome": "cancelled"}),
        };
        let mut steps = vec![Step::Send(outcome(ask.id, result))];
        if answer == ApprovalAnswer::Deny {
            steps.extend(self.cancel());
        }
        steps
    }

    /// A request of the agent: a permission question, or a JSON-RPC error for anything else.
    pub fn on_request(&mut self, id: Value, method: &str, params: &Value) -> Vec<Step> {
        if method != "session/request_permission" {
            return vec![
                Step::Warning(format!(
                    "{} asked for `{method}`, which intendant does not offer: refused",
                    self.worker
                )),
                Step::Send(json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": METHOD_NOT_FOUND,
                        "message": format!("intendant does not offer `{method}`"),
                    },
                })),
            ];
        }
        let call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .map(|opts| {
                opts.iter()
                    .filter_map(|o| {
                        Some((
                            str_field(o, "optionId")?.to_owned(),
                            str_field(o, "kind")?.to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let call_id = str_field(&call, "toolCallId").unwrap_or_default();
        let mut state = self.tools.get(call_id).cloned().unwrap_or_default();
        absorb(&mut state, &call);
        let mut steps = self.flush();
        if self.cancelled {
            // Asked after our cancel: nothing may run any more.
            steps.push(Step::Send(outcome(id, json!({"outcome": "cancelled"}))));
            return steps;
        }
        let key = id.to_string();
        self.asks.insert(key.clone(), OpenAsk { id, options });
        steps.push(Step::Ask(key, state_question(&state)));
        steps
    }

    /// A notification of the agent: `session/update`, or `$/cancel_request` taking back one of
    /// its permission questions (others carry nothing for us).
    pub fn on_notification(&mut self, method: &str, params: &Value) -> Vec<Step> {
        if method == CANCEL_REQUEST {
            let key = params.get("requestId").map(Value::to_string);
            return match key.filter(|k| self.asks.remove(k).is_some()) {
                Some(key) => vec![Step::Withdraw(key)],
                None => Vec::new(),
            };
        }
        if method != "session/update" || str_field(params, "sessionId") != Some(&self.session_id) {
            return Vec::new();
        }
        let Some(update) = params.get("update") else {
            return Vec::new();
        };
        match str_field(update, "sessionUpdate") {
            Some("agent_message_chunk") => {
                let text = chunk_text(update);
                if text.is_empty() {
                    return Vec::new();
                }
                self.text.push_str(&text);
                vec![Step::Delta(text)]
            }
            Some("agent_thought_chunk") => {
                self.thought.push_str(&chunk_text(update));
                Vec::new()
            }
            Some("tool_call" | "tool_call_update") => self.on_tool_update(update),
            // Plans, commands, modes, titles and context size show nothing our events carry.
            Some(_) | None => Vec::new(),
        }
    }

    /// The prompt's answer: the turn's end.
    pub fn on_prompt_answer(
        &mut self,
        answer: Result<Value, WorkerError>,
    ) -> Result<Vec<Step>, WorkerError> {
        let mut steps = self.flush();
        self.in_turn = false;
        // Questions still open belong to a turn that is over.
        self.asks.clear();
        let result = match answer {
            Ok(result) => result,
            Err(WorkerError::Rpc { error, .. }) => {
                steps.push(Step::TurnEnded(if self.cancelled {
                    TurnEnd::Interrupted
                } else {
                    TurnEnd::Failed(format!("{} failed the prompt: {error}", self.worker))
                }));
                return Ok(steps);
            }
            Err(e) => return Err(e),
        };
        if let Some(usage) = result.get("usage").filter(|u| u.is_object()) {
            let cached = u64_field(usage, "cachedReadTokens");
            let usage = Usage {
                input_tokens: u64_field(usage, "inputTokens")
                    + cached
                    + u64_field(usage, "cachedWriteTokens"),
                cached_input_tokens: cached,
                output_tokens: u64_field(usage, "outputTokens"),
                reasoning_tokens: u64_field(usage, "thoughtTokens"),
            };
            steps.push(Step::Usage(usage, None));
        }
        steps.push(Step::TurnEnded(
            match str_field(&result, "stopReason").unwrap_or("end_turn") {
                "end_turn" => TurnEnd::Completed,
                "cancelled" => TurnEnd::Interrupted,
                other => TurnEnd::Failed(format!("{} stopped the turn: {other}", self.worker)),
            },
        ));
        Ok(steps)
    }

    /// The text streamed since the last flush as one message.
    fn flush(&mut self) -> Vec<Step> {
        if self.text.is_empty() && self.thought.is_empty() {
            return Vec::new();
        }
        vec![Step::Message {
            text: std::mem::take(&mut self.text),
            reasoning: std::mem::take(&mut self.thought),
        }]
    }

    fn on_tool_update(&mut self, update: &Value) -> Vec<Step> {
        let Some(call_id) = str_field(update, "toolCallId").map(str::to_owned) else {
            return Vec::new();
        };
        let mut steps = self.flush();
        let state = self.tools.entry(call_id.clone()).or_default();
        absorb(state, update);
        let done = matches!(
            str_field(update, "status").unwrap_or_default(),
            "completed" | "failed"
        );
        if !state.announced && (state.input.is_some() || done) {
            state.announced = true;
            steps.push(Step::ToolCall {
                call_id: call_id.clone(),
                name: state.our_name(),
                arguments: state.input.clone().unwrap_or(Value::Null),
            });
        }
        if done && !state.finished {
            state.finished = true;
            let output = match update.get("rawOutput") {
                Some(Value::String(s)) => s.clone(),
                Some(v) if !v.is_null() => v.to_string(),
                Some(_) | None => state.text.clone(),
            };
            steps.push(Step::ToolOutput {
                call_id,
                name: state.our_name(),
                output,
            });
        }
        steps
    }
}

/// A JSON-RPC result for a permission question.
fn outcome(id: Value, outcome: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": outcome}})
}

/// Folds what one `tool_call` / `tool_call_update` (or a permission request's `toolCall`) says
/// into the call's state.
fn absorb(state: &mut ToolCallState, update: &Value) {
    // kimi retitles a call "Running: COMMAND" once approved; the first title names the tool.
    if let Some(title) = str_field(update, "title").filter(|t| !t.is_empty())
        && state.title.is_empty()
    {
        state.title = title.to_owned();
    }
    if let Some(kind) = str_field(update, "kind") {
        state.kind = kind.to_owned();
    }
    if let Some(input) = update.get("rawInput").filter(|v| !v.is_null()) {
        state.input = Some(input.clone());
    }
    for item in update
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match str_field(item, "type") {
            Some("content") => {
                if let Some(text) = item.get("content").and_then(|c| str_field(c, "text")) {
                    if let Ok(args @ Value::Object(_)) = serde_json::from_str::<Value>(text) {
                        state.streamed_args = Some(args);
                    }
                    state.text = text.to_owned();
                }
            }
            Some("diff") => {
                state.diff = Some((
                    str_field(item, "path").unwrap_or_default().to_owned(),
                    str_field(item, "oldText").map(str::to_owned),
                    str_field(item, "newText").unwrap_or_default().to_owned(),
                ));
            }
            Some(_) | None => {}
        }
    }
}

/// The call as our approval question: by its ACP `kind` and its input (`rawInput`, else the
/// arguments the agent streamed), or the diff it carries; else a generic tool call.
fn state_question(state: &ToolCallState) -> ExternalAction {
    let input = state.input.clone().or_else(|| state.streamed_args.clone());
    let field = |keys: &[&str]| {
        input
            .as_ref()
            .and_then(|i| keys.iter().find_map(|k| str_field(i, k)).map(str::to_owned))
    };
    let path = field(&["path", "file_path", "filePath"]);
    let shell = state.kind == "execute"
        || ["bash", "shell", "terminal"].contains(&state.title.to_lowercase().as_str());
    let cmd = match (&state.diff, field(&["command", "cmd"]), path) {
        (_, Some(command), _) if shell => exec_action(&command),
        (Some((path, old, new)), _, _) => edit_action(path, old.as_deref(), new),
        (None, _, Some(path)) if matches!(state.kind.as_str(), "edit" | "delete" | "move") => {
            let content = field(&["content", "new_string", "newText"]).unwrap_or_default();
            edit_action(
                &path,
                field(&["old_string", "oldText"]).as_deref(),
                &content,
            )
        }
        (None, _, Some(path)) if state.kind == "read" => read_action(&path),
        (None, _, _) if state.kind == "fetch" && field(&["url"]).is_some() => {
            browse_action(&field(&["url"]).unwrap_or_default())
        }
        (None, _, _) => return tool_question(&state.title, input.as_ref().unwrap_or(&Value::Null)),
    };
    question(&cmd)
}

fn chunk_text(update: &Value) -> String {
    update
        .get("content")
        .filter(|c| str_field(c, "type") == Some("text"))
        .and_then(|c| str_field(c, "text"))
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests;

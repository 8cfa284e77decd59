//! OpenAI-compatible Chat Completions (`POST {base}/chat/completions`) for Ollama, llama.cpp
//! server, vLLM and proxies, streamed.
//!
//! Tool calls arrive as fragments keyed by `index`. Servers differ: some send a whole call in one
//! chunk, some omit ids (they are synthesized), some reuse index 0 for every call, so a fragment
//! with a new id, or a new name, at an index already in use starts a new call.
//!
//! A delta's `content` is a string, or (Mistral's reasoning models) an array of typed parts:
//! `text`, and `thinking` whose own content is a string or an array of text parts. A part of a
//! type this wire does not read is skipped with a [`StreamEvent::Warning`], once per type and
//! response. A refusal (`delta.refusal`, content `null`) streams as refusal text.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind};
use crate::http::HttpClient;
use crate::openai_responses::effort_name;
use crate::sse::{DeltaKind, SseEvent, WireParser, malformed_event, push_delta, truncated_error};
use crate::{
    ChatProvider, ChatRequest, ConversationItem, EventStream, ProviderError, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolDefinition, Usage, wire_tools,
};

const KIND: ProviderKind = ProviderKind::OpenAiChat;

/// The Chat Completions wire.
#[derive(Debug, Clone)]
pub struct OpenAiChatProvider {
    http: HttpClient,
}

impl OpenAiChatProvider {
    /// A provider for `config`.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            http: HttpClient::new(KIND, config)?,
        })
    }
}

#[async_trait::async_trait]
impl ChatProvider for OpenAiChatProvider {
    fn name(&self) -> &'static str {
        KIND.as_str()
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError> {
        let key = self.http.api_key(KIND)?;
        let url = self.http.config.endpoint("/chat/completions")?;
        let mut headers = Vec::new();
        if let Some(key) = key {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        let body = request_body(request)?;
        self.http
            .post_sse(&url, &headers, body, ChatParser::new())
            .await
    }
}

/// The JSON body this wire sends for `request`.
pub fn request_body(request: &ChatRequest) -> Result<String, ProviderError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages(request)));
    if !request.tools.is_empty() {
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(effort) = request.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort_name(effort)));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {
                "name": schema.name, "schema": schema.schema, "strict": true,
            }}),
        );
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    wire_tools::body_with_tools(KIND, request, tools, &body)
}

/// The body's `tools` (encoded once per set).
fn tools(tools: &[ToolDefinition]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters,
            }})
        })
        .collect()
}

fn messages(request: &ChatRequest) -> Vec<Value> {
    let mut out = Vec::new();
    if !request.system.is_empty() {
        out.push(json!({"role": "system", "content": request.system}));
    }
    // Assistant text and the tool calls after it form one assistant message.
    let mut assistant: Option<(String, Vec<Value>)> = None;
    let flush = |assistant: &mut Option<(String, Vec<Value>)>, out: &mut Vec<Value>| {
        if let Some((text, calls)) = assistant.take() {
            let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
    };
    for item in &request.items {
        match item {
            ConversationItem::Assistant { text } => {
                let (buf, calls) = assistant.get_or_insert_with(Default::default);
                if !calls.is_empty() {
                    flush(&mut assistant, &mut out);
                    assistant = Some((text.clone(), Vec::new()));
                } else {
                    buf.push_str(text);
                }
            }
            ConversationItem::ToolCall(call) => {
                let (_, calls) = assistant.get_or_insert_with(Default::default);
                calls.push(json!({"id": call.call_id, "type": "function", "function": {
                    "name": call.name, "arguments": call.arguments,
                }}));
            }
            // Opaque reasoning of other wires means nothing to these servers.
            ConversationItem::Reasoning(_) => {}
            ConversationItem::Refusal { text } => {
                flush(&mut assistant, &mut out);
                out.push(json!({"role": "assistant", "content": Value::Null, "refusal": text}));
            }
            ConversationItem::User { text } => {
                flush(&mut assistant, &mut out);
                out.push(json!({"role": "user", "content": text}));
            }
            // A tool message takes text only here: its images stay out (the text names them).
            ConversationItem::ToolResult {
                call_id, output, ..
            } => {
                flush(&mut assistant, &mut out);
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
        }
    }
    flush(&mut assistant, &mut out);
    out
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageBody>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

/// A delta's `content`: text, or an array of typed parts.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts(Vec<Value>),
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

struct PendingCall {
    id: String,
    id_from_server: bool,
    name: String,
    arguments: String,
    done: bool,
}

/// Parser for the Chat Completions chunk stream.
pub struct ChatParser {
    call_prefix: String,
    calls: Vec<PendingCall>,
    /// Wire `index` to position in `calls` of the call currently using it.
    slots: HashMap<usize, usize>,
    finish: Option<String>,
    usage: Option<Usage>,
    /// The opening members the fast path skipped in the last chunk it read.
    skipped_opening: Vec<u8>,
    /// Content part types already warned about in this response.
    warned: BTreeSet<String>,
}

impl Default for ChatParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ChatParser {
    /// A parser whose synthesized call ids start with a fresh random prefix.
    pub fn new() -> Self {
        Self {
            call_prefix: format!("call_{:08x}", fastrand::u32(..)),
            calls: Vec::new(),
            slots: HashMap::new(),
            finish: None,
            usage: None,
            skipped_opening: Vec::new(),
            warned: BTreeSet::new(),
        }
    }

    /// The parts of an array `content`: text and reasoning out, other types warned about.
    fn parts(&mut self, parts: Vec<Value>, out: &mut Vec<StreamEvent>) {
        for part in parts {
            match part.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => self.part_text(&part, "text", DeltaKind::Text, out),
                "thinking" => match part.get("thinking") {
                    Some(Value::Array(inner)) => {
                        for piece in inner {
                            match piece.get("type").and_then(Value::as_str).unwrap_or("") {
                                "text" => {
                                    self.part_text(piece, "text", DeltaKind::Reasoning, out);
                                }
                                other => self.skipped(&format!("thinking/{other}"), out),
                            }
                        }
                    }
                    Some(_) | None => {
                        self.part_text(&part, "thinking", DeltaKind::Reasoning, out);
                    }
                },
                "reasoning" => {
                    let field = if part.get("reasoning").is_some() {
                        "reasoning"
                    } else {
                        "text"
                    };
                    self.part_text(&part, field, DeltaKind::Reasoning, out);
                }
                other => self.skipped(other, out),
            }
        }
    }

    /// Pushes `part[field]` as `kind`; a part whose field is not a string is skipped.
    fn part_text(
        &mut self,
        part: &Value,
        field: &str,
        kind: DeltaKind,
        out: &mut Vec<StreamEvent>,
    ) {
        match part.get(field) {
            Some(Value::String(text)) if !text.is_empty() => {
                push_delta(out, kind, Cow::Borrowed(text));
            }
            Some(Value::String(_) | Value::Null) | None => {}
            Some(_) => {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                self.skipped(&format!("{kind} (its `{field}` is not text)"), out);
            }
        }
    }

    /// Warns, once per `kind` and response, that a content part was skipped.
    fn skipped(&mut self, kind: &str, out: &mut Vec<StreamEvent>) {
        let kind = if kind.is_empty() { "(untyped)" } else { kind };
        // Checked before inserting: a stream of skipped parts allocates nothing per delta.
        if !self.warned.contains(kind) {
            self.warned.insert(kind.to_owned());
            out.push(StreamEvent::Warning {
                message: format!(
                    "{} sent a content part of type {kind:?} that this wire does not read; it was skipped",
                    KIND.as_str()
                ),
            });
        }
    }

    fn fragment(&mut self, delta: CallDelta<'_>, out: &mut Vec<StreamEvent>) {
        let id = delta.id.filter(|id| !id.is_empty());
        let (name, arguments) = match delta.function {
            Some(f) => (f.name.filter(|n| !n.is_empty()), f.arguments),
            None => (None, None),
        };
        let current = match delta.index {
            Some(wire) => self.slots.get(&wire).copied(),
            None => self.calls.len().checked_sub(1),
        };
        let continues = current.filter(|&pos| {
            let call = &self.calls[pos];
            let new_id = id
                .as_ref()
                .is_some_and(|id| call.id_from_server && *id != call.id);
            let new_name = id.is_none() && name.is_some() && !call.name.is_empty();
            !(new_id || new_name || call.done)
        });
        let pos = match continues {
            Some(pos) => {
                let call = &mut self.calls[pos];
                if let (Some(id), false) = (&id, call.id_from_server) {
                    call.id.clone_from(id);
                    call.id_from_server = true;
                }
                if let (Some(name), true) = (&name, call.name.is_empty()) {
                    call.name.clone_from(name);
                }
                pos
            }
            None => {
                let pos = self.calls.len();
                let id_from_server = id.is_some();
                let id = id.unwrap_or_else(|| format!("{}_{pos}", self.call_prefix));
                let name = name.unwrap_or_default();
                out.push(StreamEvent::ToolCallStart {
                    index: pos,
                    call_id: id.clone(),
                    name: name.clone(),
                });
                self.calls.push(PendingCall {
                    id,
                    id_from_server,
                    name,
                    arguments: String::new(),
                    done: false,
                });
                if let Some(wire) = delta.index {
                    self.slots.insert(wire, pos);
                }
                pos
            }
        };
        if let Some(args) = arguments.filter(|a| !a.is_empty()) {
            self.calls[pos].arguments.push_str(&args);
            push_delta(out, DeltaKind::Arguments(pos), args);
        }
    }

    fn finish_calls(&mut self, out: &mut Vec<StreamEvent>) {
        for (index, call) in self.calls.iter_mut().enumerate().filter(|(_, c)| !c.done) {
            call.done = true;
            out.push(StreamEvent::ToolCallDone {
                index,
                call: ToolCall {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: if call.arguments.is_empty() {
                        "{}".to_owned()
                    } else {
                        call.arguments.clone()
                    },
                    thought_signature: None,
                    provider_id: false,
                },
            });
        }
    }

    fn complete(&mut self, out: &mut Vec<StreamEvent>) {
        self.finish_calls(out);
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage { usage });
        }
        let stop_reason = match self.finish.take().as_deref() {
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            // Some servers say "stop" after tool calls.
            Some("stop") | None if !self.calls.is_empty() => StopReason::ToolUse,
            Some("stop") | None => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::ContentFilter,
            Some(other) => StopReason::Other(other.to_owned()),
        };
        out.push(StreamEvent::Completed { stop_reason });
    }

    fn handle(&mut self, chunk: Chunk<'_>, out: &mut Vec<StreamEvent>) {
        if let Some(error) = chunk.error {
            let kind = error.kind.or_else(|| {
                error
                    .code
                    .as_ref()
                    .and_then(|c| c.as_str().map(str::to_owned))
            });
            let numeric = error.code.as_ref().and_then(Value::as_u64);
            let retryable = numeric.is_some_and(|c| c == 429 || c >= 500)
                || kind.as_deref().is_some_and(|k| {
                    matches!(
                        k,
                        "server_error" | "rate_limit_exceeded" | "overloaded" | "timeout"
                    )
                });
            let message = error.message.unwrap_or_default();
            out.push(StreamEvent::Error {
                message: match kind {
                    Some(kind) => format!("{kind}: {message}"),
                    None => message,
                },
                retryable,
                retry_after_ms: None,
            });
            return;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens,
                cached_input_tokens: usage
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                output_tokens: usage.completion_tokens,
                reasoning_tokens: usage
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens)
                    .unwrap_or(0),
            });
        }
        for choice in chunk.choices.unwrap_or_default().into_iter().take(1) {
            if let Some(delta) = choice.delta {
                for text in [delta.reasoning_content, delta.reasoning]
                    .into_iter()
                    .flatten()
                {
                    if !text.is_empty() {
                        push_delta(out, DeltaKind::Reasoning, text);
                    }
                }
                match delta.content {
                    Some(Content::Text(text)) if !text.is_empty() => {
                        push_delta(out, DeltaKind::Text, text);
                    }
                    Some(Content::Parts(parts)) => self.parts(parts, out),
                    Some(Content::Text(_)) | None => {}
                }
                if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
                    push_delta(out, DeltaKind::Refusal, text);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.fragment(call, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
                self.finish_calls(out);
            }
        }
    }
}

impl ChatParser {
    /// Full decoding of one chunk (the reference for the fast path).
    pub(crate) fn slow_event(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        match serde_json::from_str::<Chunk<'_>>(data) {
            Ok(chunk) => self.handle(chunk, out),
            Err(err) => out.push(malformed_event(KIND.as_str(), &err)),
        }
    }
}

impl WireParser for ChatParser {
    fn on_event(&mut self, event: SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if event.data.trim_ascii() == b"[DONE]" {
            self.complete(out);
            return;
        }
        if crate::fast_path::openai_chat(event.data, &mut self.skipped_opening, out) {
            return;
        }
        let text = event.text();
        // Also trims Unicode whitespace, which the byte check above leaves.
        if text.trim() == "[DONE]" {
            self.complete(out);
            return;
        }
        self.slow_event(&text, out);
    }

    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) {
        // Tolerated: servers that end the stream after the finish chunk without `[DONE]`.
        if self.finish.is_some() {
            self.complete(out);
        } else {
            out.push(truncated_error());
        }
    }
}

//! Anthropic Messages API (`POST {base}/v1/messages`, `x-api-key`), streamed.
//!
//! Prompt caching uses three of the four allowed breakpoints: one on the system prefix and two
//! rolling ones on the last two user turns, so each request reads the prefix the previous one
//! wrote. Thinking blocks (and their signatures) are echoed back unchanged.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind};
use crate::http::HttpClient;
use crate::models::capabilities;
use crate::sse::{DeltaKind, SseEvent, WireParser, malformed_event, push_delta, truncated_error};
use crate::{
    ChatProvider, ChatRequest, ConversationItem, EventStream, ProviderError, ReasoningEffort,
    ReasoningItem, StopReason, StreamEvent, ToolCall, ToolChoice, ToolDefinition, Usage,
    wire_tools,
};

const KIND: ProviderKind = ProviderKind::Anthropic;

/// Value of the `anthropic-version` header.
pub const API_VERSION: &str = "2023-06-01";

/// Value of the `anthropic-beta` header.
pub const BETA: &str = "prompt-caching-2024-07-31";

/// The Anthropic Messages wire.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    http: HttpClient,
}

impl AnthropicProvider {
    /// A provider for `config`.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            http: HttpClient::new(KIND, config)?,
        })
    }
}

#[async_trait::async_trait]
impl ChatProvider for AnthropicProvider {
    fn name(&self) -> &'static str {
        KIND.as_str()
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError> {
        let key = self.http.api_key(KIND)?;
        let url = self.http.config.endpoint("/v1/messages")?;
        let mut headers = vec![
            ("anthropic-version", API_VERSION.to_owned()),
            ("anthropic-beta", BETA.to_owned()),
        ];
        if let Some(key) = key {
            headers.push(("x-api-key", key.to_owned()));
        }
        let body = request_body(request)?;
        self.http
            .post_sse(&url, &headers, body, MessagesParser::default())
            .await
    }
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Low => 2_048,
        ReasoningEffort::Medium => 8_192,
        ReasoningEffort::High => 24_576,
    }
}

/// The JSON body this wire sends for `request`.
pub fn request_body(request: &ChatRequest) -> Result<String, ProviderError> {
    let caps = capabilities(&request.model);
    let max_tokens = request.max_output_tokens.unwrap_or(caps.max_output_tokens);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(max_tokens));

    let mut system = Vec::new();
    if !request.system.is_empty() {
        system.push(json!({"type": "text", "text": request.system, "cache_control": ephemeral()}));
    }
    if let Some(schema) = &request.output_schema {
        // Kept after the cached block so the cached prefix does not change with the schema.
        system.push(json!({"type": "text", "text": format!(
            "Answer with one JSON value, and nothing else, that satisfies this JSON Schema ({}):\n{}",
            schema.name, schema.schema
        )}));
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages(&request.items)));

    let forced = matches!(
        request.tool_choice,
        ToolChoice::Required | ToolChoice::Tool { .. }
    );
    if !request.tools.is_empty() {
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool { name } => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    // The API refuses thinking together with a forced tool choice; the forced choice wins.
    if let Some(effort) = request
        .reasoning_effort
        .filter(|_| caps.supports_reasoning && !forced)
    {
        // The budget must stay below max_tokens and at or above the API minimum of 1024, with
        // room left for the visible answer.
        let budget = thinking_budget(effort).min(max_tokens.saturating_sub(1_024));
        if budget >= 1_024 {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
    }
    body.insert("stream".into(), json!(true));
    wire_tools::body_with_tools(KIND, request, tools, &body)
}

/// The body's `tools` (encoded once per set).
fn tools(tools: &[ToolDefinition]) -> Value {
    tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect()
}

fn messages(items: &[ConversationItem]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match out.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        Some(_) | None => out.push((role, vec![block])),
    };
    for item in items {
        match item {
            ConversationItem::User { text } => push("user", json!({"type": "text", "text": text})),
            ConversationItem::ToolResult {
                call_id,
                output,
                is_error,
                images,
                ..
            } => {
                let content = if images.is_empty() {
                    json!(output)
                } else {
                    let mut blocks = vec![json!({"type": "text", "text": output})];
                    blocks.extend(images.iter().map(|image| {
                        json!({"type": "image", "source": {
                            "type": "base64", "media_type": image.mime_type, "data": image.data,
                        }})
                    }));
                    Value::Array(blocks)
                };
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push("user", block);
            }
            // After a refusal the turn that drew it must not be sent again (Anthropic's
            // guidance: reset the context), so the refused output is left out.
            ConversationItem::Refusal { .. } => {}
            ConversationItem::Assistant { text } => {
                // The API rejects empty text blocks.
                if !text.is_empty() {
                    push("assistant", json!({"type": "text", "text": text}));
                }
            }
            ConversationItem::Reasoning(reasoning) => {
                if reasoning.provider != KIND.as_str() {
                    continue;
                }
                if let Some(data) = &reasoning.redacted_data {
                    push(
                        "assistant",
                        json!({"type": "redacted_thinking", "data": data}),
                    );
                } else if let Some(signature) = &reasoning.signature {
                    push(
                        "assistant",
                        json!({"type": "thinking", "thinking": reasoning.text, "signature": signature}),
                    );
                }
            }
            ConversationItem::ToolCall(call) => {
                let input = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                push(
                    "assistant",
                    json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": input}),
                );
            }
        }
    }
    // Two rolling breakpoints: the last two user turns.
    let mut marked = 0;
    for (role, blocks) in out.iter_mut().rev() {
        if marked == 2 {
            break;
        }
        if *role == "user"
            && let Some(last) = blocks.last_mut()
        {
            last["cache_control"] = ephemeral();
            marked += 1;
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    content_block: Option<Block>,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    usage: Option<UsageBody>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_details: Option<StopDetails>,
}

/// Why a refused message stopped (`stop_details` beside `stop_reason: refusal`).
#[derive(Deserialize)]
struct StopDetails {
    #[serde(default)]
    explanation: Option<String>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

enum OpenBlock {
    Text,
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted(String),
    Tool {
        index: usize,
        id: String,
        name: String,
        args: String,
    },
}

/// Parser for the Messages event stream.
#[derive(Default)]
pub struct MessagesParser {
    blocks: HashMap<usize, OpenBlock>,
    next_call: usize,
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    stop_reason: Option<String>,
}

/// `error.type`s after which retrying may succeed.
const RETRYABLE_ERRORS: &[&str] = &[
    "overloaded_error",
    "api_error",
    "rate_limit_error",
    "timeout_error",
];

impl MessagesParser {
    fn update_usage(&mut self, usage: UsageBody) {
        if let Some(v) = usage.input_tokens {
            self.input = v;
        }
        if let Some(v) = usage.output_tokens {
            self.output = v;
        }
        if let Some(v) = usage.cache_creation_input_tokens {
            self.cache_creation = v;
        }
        if let Some(v) = usage.cache_read_input_tokens {
            self.cache_read = v;
        }
    }

    fn usage(&self) -> Usage {
        Usage {
            // Anthropic counts cached input separately; ours includes it.
            input_tokens: self.input + self.cache_creation + self.cache_read,
            cached_input_tokens: self.cache_read,
            output_tokens: self.output,
            reasoning_tokens: 0,
        }
    }

    fn block_start(&mut self, index: usize, block: Block, out: &mut Vec<StreamEvent>) {
        let open = match block.kind.as_str() {
            "tool_use" | "server_tool_use" => {
                let call = self.next_call;
                self.next_call += 1;
                let id = block.id.unwrap_or_default();
                let name = block.name.unwrap_or_default();
                out.push(StreamEvent::ToolCallStart {
                    index: call,
                    call_id: id.clone(),
                    name: name.clone(),
                });
                OpenBlock::Tool {
                    index: call,
                    id,
                    name,
                    args: String::new(),
                }
            }
            "thinking" => {
                let text = block.thinking.unwrap_or_default();
                if !text.is_empty() {
                    push_delta(out, DeltaKind::Reasoning, Cow::Borrowed(&text));
                }
                OpenBlock::Thinking {
                    text,
                    signature: block.signature.filter(|s| !s.is_empty()),
                }
            }
            "redacted_thinking" => OpenBlock::Redacted(block.data.unwrap_or_default()),
            _ => OpenBlock::Text,
        };
        self.blocks.insert(index, open);
    }

    fn block_delta(&mut self, index: usize, delta: Delta<'_>, out: &mut Vec<StreamEvent>) {
        let block = self.blocks.get_mut(&index);
        match (delta.kind.as_deref(), block) {
            (Some("text_delta"), _) => {
                if let Some(text) = delta.text {
                    push_delta(out, DeltaKind::Text, text);
                }
            }
            (Some("input_json_delta"), Some(OpenBlock::Tool { index, args, .. })) => {
                if let Some(part) = delta.partial_json.filter(|p| !p.is_empty()) {
                    args.push_str(&part);
                    push_delta(out, DeltaKind::Arguments(*index), part);
                }
            }
            (Some("thinking_delta"), Some(OpenBlock::Thinking { text, .. })) => {
                if let Some(part) = delta.thinking {
                    text.push_str(&part);
                    push_delta(out, DeltaKind::Reasoning, part);
                }
            }
            (Some("signature_delta"), Some(OpenBlock::Thinking { signature, .. })) => {
                if let Some(part) = delta.signature {
                    signature.get_or_insert_with(String::new).push_str(&part);
                }
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: usize, out: &mut Vec<StreamEvent>) {
        match self.blocks.remove(&index) {
            Some(OpenBlock::Tool {
                index,
                id,
                name,
                args,
            }) => out.push(StreamEvent::ToolCallDone {
                index,
                call: ToolCall {
                    call_id: id,
                    name,
                    // A tool without parameters streams no JSON at all.
                    arguments: if args.is_empty() {
                        "{}".to_owned()
                    } else {
                        args
                    },
                    thought_signature: None,
                    provider_id: false,
                },
            }),
            Some(OpenBlock::Thinking { text, signature }) => out.push(StreamEvent::ReasoningDone {
                item: ReasoningItem {
                    provider: KIND.as_str().to_owned(),
                    text,
                    signature,
                    ..ReasoningItem::default()
                },
            }),
            Some(OpenBlock::Redacted(data)) => out.push(StreamEvent::ReasoningDone {
                item: ReasoningItem {
                    provider: KIND.as_str().to_owned(),
                    redacted_data: Some(data),
                    ..ReasoningItem::default()
                },
            }),
            Some(OpenBlock::Text) | None => {}
        }
    }

    fn handle(&mut self, ev: Event<'_>, out: &mut Vec<StreamEvent>) {
        match ev.kind.as_ref() {
            "message_start" => {
                if let Some(usage) = ev.message.and_then(|m| m.usage) {
                    self.update_usage(usage);
                }
            }
            "content_block_start" => {
                if let Some(block) = ev.content_block {
                    self.block_start(ev.index.unwrap_or(usize::MAX), block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = ev.delta {
                    self.block_delta(ev.index.unwrap_or(usize::MAX), delta, out);
                }
            }
            "content_block_stop" => self.block_stop(ev.index.unwrap_or(usize::MAX), out),
            "message_delta" => {
                if let Some(delta) = ev.delta {
                    // The classifier's explanation is the refusal the user sees.
                    let explanation = delta.stop_details.and_then(|d| d.explanation);
                    if let Some(text) = explanation.filter(|t| !t.is_empty()) {
                        push_delta(out, DeltaKind::Refusal, Cow::Owned(text));
                    }
                    if let Some(reason) = delta.stop_reason {
                        self.stop_reason = Some(reason);
                    }
                }
                if let Some(usage) = ev.usage {
                    self.update_usage(usage);
                }
            }
            "message_stop" => {
                out.push(StreamEvent::Usage {
                    usage: self.usage(),
                });
                let stop_reason = match self.stop_reason.take().as_deref() {
                    Some("end_turn" | "stop_sequence") | None => StopReason::EndTurn,
                    Some("tool_use") => StopReason::ToolUse,
                    Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
                    Some("refusal") => StopReason::Refusal,
                    Some(other) => StopReason::Other(other.to_owned()),
                };
                out.push(StreamEvent::Completed { stop_reason });
            }
            "error" => {
                let error = ev.error;
                let kind = error
                    .as_ref()
                    .and_then(|e| e.kind.clone())
                    .unwrap_or_else(|| "error".to_owned());
                let message = error.and_then(|e| e.message).unwrap_or_default();
                out.push(StreamEvent::Error {
                    retryable: RETRYABLE_ERRORS.contains(&kind.as_str()),
                    message: format!("{kind}: {message}"),
                    retry_after_ms: None,
                });
            }
            // `ping` and future event types carry nothing we need.
            _ => {}
        }
    }
}

impl MessagesParser {
    /// Full decoding of one event (the reference for the fast path).
    pub(crate) fn slow_event(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        match serde_json::from_str::<Event<'_>>(data) {
            Ok(ev) => self.handle(ev, out),
            Err(err) => out.push(malformed_event(KIND.as_str(), &err)),
        }
    }
}

impl WireParser for MessagesParser {
    fn on_event(&mut self, event: SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        match crate::fast_path::anthropic(event.data) {
            Some(text) => push_delta(out, DeltaKind::Text, text),
            None => self.slow_event(&event.text(), out),
        }
    }

    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) {
        out.push(truncated_error());
    }
}

//! OpenAI Responses API (`POST {base}/responses`, Bearer auth), streamed.
//!
//! Stateless use: `store: false` with `include: ["reasoning.encrypted_content"]`, so reasoning
//! items come back with their encrypted content and are echoed verbatim (the exact JSON received)
//! on the next request.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind};
use crate::http::HttpClient;
use crate::models::capabilities;
use crate::retry::retry_hint_from_message;
use crate::sse::{DeltaKind, SseEvent, WireParser, malformed_event, push_delta, truncated_error};
use crate::{
    ChatProvider, ChatRequest, ConversationItem, EventStream, ProviderError, ReasoningEffort,
    ReasoningItem, StopReason, StreamEvent, ToolCall, ToolChoice, ToolDefinition, Usage,
    wire_tools,
};

const KIND: ProviderKind = ProviderKind::OpenAi;

/// The OpenAI Responses wire.
#[derive(Debug, Clone)]
pub struct OpenAiResponsesProvider {
    http: HttpClient,
}

impl OpenAiResponsesProvider {
    /// A provider for `config`.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            http: HttpClient::new(KIND, config)?,
        })
    }
}

#[async_trait::async_trait]
impl ChatProvider for OpenAiResponsesProvider {
    fn name(&self) -> &'static str {
        KIND.as_str()
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError> {
        let key = self.http.api_key(KIND)?;
        let url = self.http.config.endpoint("/responses")?;
        let mut headers = Vec::new();
        if let Some(key) = key {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        let body = request_body(request)?;
        self.http
            .post_sse(&url, &headers, body, ResponsesParser::default())
            .await
    }
}

fn raw(value: &Value) -> Result<Box<RawValue>, ProviderError> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| ProviderError::Config(format!("request encoding: {e}")))
}

/// The JSON body this wire sends for `request`.
pub fn request_body(request: &ChatRequest) -> Result<String, ProviderError> {
    #[derive(Serialize)]
    struct Body<'a> {
        #[serde(flatten)]
        fields: Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<&'a RawValue>,
        input: Vec<Box<RawValue>>,
    }
    let input = input_items(request)?;
    let tools = wire_tools::encoded(KIND, &request.tools, tools)?;
    serde_json::to_string(&Body {
        fields: body_fields(request),
        tools: tools.as_deref(),
        input,
    })
    .map_err(|e| ProviderError::Config(format!("request encoding: {e}")))
}

/// The conversation as this wire's `input` items (reasoning of another provider left out; our
/// own sent back verbatim where it was kept).
fn input_items(request: &ChatRequest) -> Result<Vec<Box<RawValue>>, ProviderError> {
    let mut input = Vec::with_capacity(request.items.len());
    for item in &request.items {
        match item {
            ConversationItem::User { text } => input.push(raw(&json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }))?),
            ConversationItem::Assistant { text } => input.push(raw(&json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }))?),
            ConversationItem::Refusal { text } => input.push(raw(&json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": text}],
            }))?),
            ConversationItem::Reasoning(reasoning) => {
                if reasoning.provider != KIND.as_str() {
                    continue;
                }
                let verbatim = reasoning
                    .raw
                    .as_ref()
                    .and_then(|text| RawValue::from_string(text.clone()).ok());
                match verbatim {
                    Some(item) => input.push(item),
                    None => input.push(raw(&rebuilt_reasoning(reasoning))?),
                }
            }
            ConversationItem::ToolCall(call) => input.push(raw(&json!({
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            }))?),
            ConversationItem::ToolResult {
                call_id,
                output,
                images,
                ..
            } => {
                let output = if images.is_empty() {
                    json!(output)
                } else {
                    let mut parts = vec![json!({"type": "input_text", "text": output})];
                    parts.extend(images.iter().map(|image| {
                        json!({
                            "type": "input_image",
                            "image_url": format!("data:{};base64,{}", image.mime_type, image.data),
                        })
                    }));
                    Value::Array(parts)
                };
                input.push(raw(&json!({
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": output,
                }))?);
            }
        }
    }
    Ok(input)
}

/// Every member of the body but `input` and `tools`: the model, instructions, the tool choice,
/// streaming, reasoning, limits, output schema and cache key.
fn body_fields(request: &ChatRequest) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("model".into(), json!(request.model));
    if !request.system.is_empty() {
        fields.insert("instructions".into(), json!(request.system));
    }
    if !request.tools.is_empty() {
        fields.insert("tool_choice".into(), tool_choice(&request.tool_choice));
        fields.insert("parallel_tool_calls".into(), json!(true));
    }
    fields.insert("stream".into(), json!(true));
    fields.insert("store".into(), json!(false));
    let reasoning =
        capabilities(&request.model).supports_reasoning || request.reasoning_effort.is_some();
    if reasoning {
        let mut params = Map::new();
        if let Some(effort) = request.reasoning_effort {
            params.insert("effort".into(), json!(effort_name(effort)));
        }
        params.insert("summary".into(), json!("auto"));
        fields.insert("reasoning".into(), Value::Object(params));
        fields.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(max) = request.max_output_tokens {
        fields.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(schema) = &request.output_schema {
        fields.insert(
            "text".into(),
            json!({"format": {
                "type": "json_schema",
                "name": schema.name,
                "schema": schema.schema,
                "strict": true,
            }}),
        );
    }
    if let Some(key) = &request.cache_key {
        fields.insert("prompt_cache_key".into(), json!(key));
    }
    fields
}

/// The body's `tools` (encoded once per set).
fn tools(tools: &[ToolDefinition]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": false,
            })
        })
        .collect()
}

fn rebuilt_reasoning(item: &ReasoningItem) -> Value {
    let mut value = json!({
        "type": "reasoning",
        "summary": if item.text.is_empty() {
            json!([])
        } else {
            json!([{"type": "summary_text", "text": item.text}])
        },
    });
    if let Some(id) = &item.id {
        value["id"] = json!(id);
    }
    if let Some(enc) = &item.encrypted_content {
        value["encrypted_content"] = json!(enc);
    }
    value
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
    }
}

pub(crate) fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    output_index: Option<usize>,
    #[serde(default)]
    summary_index: Option<usize>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    response: Option<ResponseBody>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct OutputItem {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    summary: Vec<TextPart>,
    #[serde(default)]
    content: Option<Vec<TextPart>>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

#[derive(Deserialize)]
struct TextPart {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize, Default)]
struct ResponseBody {
    #[serde(default)]
    usage: Option<UsageBody>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

impl From<UsageBody> for Usage {
    fn from(u: UsageBody) -> Self {
        Usage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.input_tokens_details.map_or(0, |d| d.cached_tokens),
            output_tokens: u.output_tokens,
            reasoning_tokens: u.output_tokens_details.map_or(0, |d| d.reasoning_tokens),
        }
    }
}

#[derive(Default)]
struct PendingCall {
    index: usize,
    arguments: String,
}

/// Parser for the Responses event stream.
#[derive(Default)]
pub struct ResponsesParser {
    /// Calls by `output_index`.
    calls: HashMap<usize, PendingCall>,
    next_call: usize,
}

impl ResponsesParser {
    fn call_slot(&mut self, output_index: usize) -> &mut PendingCall {
        let next = &mut self.next_call;
        self.calls.entry(output_index).or_insert_with(|| {
            let index = *next;
            *next += 1;
            PendingCall {
                index,
                arguments: String::new(),
            }
        })
    }

    fn item_added(
        &mut self,
        ev: &Event<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), serde_json::Error> {
        let Some(item) = ev.item else { return Ok(()) };
        let item: OutputItem = serde_json::from_str(item.get())?;
        if item.kind == "function_call" {
            let index = self.call_slot(ev.output_index.unwrap_or(usize::MAX)).index;
            out.push(StreamEvent::ToolCallStart {
                index,
                call_id: item.call_id.unwrap_or_default(),
                name: item.name.unwrap_or_default(),
            });
        }
        Ok(())
    }

    fn item_done(
        &mut self,
        ev: &Event<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), serde_json::Error> {
        let Some(raw_item) = ev.item else {
            return Ok(());
        };
        let item: OutputItem = serde_json::from_str(raw_item.get())?;
        match item.kind.as_str() {
            "function_call" => {
                let slot = self.call_slot(ev.output_index.unwrap_or(usize::MAX));
                let streamed = std::mem::take(&mut slot.arguments);
                let index = slot.index;
                out.push(StreamEvent::ToolCallDone {
                    index,
                    call: ToolCall {
                        call_id: item.call_id.unwrap_or_default(),
                        name: item.name.unwrap_or_default(),
                        arguments: item.arguments.unwrap_or(streamed),
                        thought_signature: None,
                        provider_id: false,
                    },
                });
            }
            "reasoning" => {
                let parts = match item.content {
                    Some(content) if !content.is_empty() => content,
                    Some(_) | None => item.summary,
                };
                let text: Vec<String> = parts.into_iter().map(|p| p.text).collect();
                out.push(StreamEvent::ReasoningDone {
                    item: ReasoningItem {
                        provider: KIND.as_str().to_owned(),
                        id: item.id,
                        text: text.join("\n\n"),
                        encrypted_content: item.encrypted_content,
                        raw: Some(raw_item.get().to_owned()),
                        ..ReasoningItem::default()
                    },
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn handle(
        &mut self,
        ev: Event<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), serde_json::Error> {
        match ev.kind.as_ref() {
            "response.output_text.delta" => {
                if let Some(delta) = ev.delta {
                    push_delta(out, DeltaKind::Text, delta);
                }
            }
            "response.refusal.delta" => {
                if let Some(delta) = ev.delta {
                    push_delta(out, DeltaKind::Refusal, delta);
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(delta) = ev.delta {
                    push_delta(out, DeltaKind::Reasoning, delta);
                }
            }
            // Summary parts read as paragraphs, as the reasoning item's own text joins them.
            "response.reasoning_summary_part.added" if ev.summary_index.unwrap_or(0) > 0 => {
                push_delta(out, DeltaKind::Reasoning, Cow::Borrowed("\n\n"));
            }
            "response.output_item.added" => self.item_added(&ev, out)?,
            "response.output_item.done" => self.item_done(&ev, out)?,
            "response.function_call_arguments.delta" => {
                if let Some(delta) = ev.delta {
                    let slot = self.call_slot(ev.output_index.unwrap_or(usize::MAX));
                    slot.arguments.push_str(&delta);
                    push_delta(out, DeltaKind::Arguments(slot.index), delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(args) = ev.arguments {
                    self.call_slot(ev.output_index.unwrap_or(usize::MAX))
                        .arguments = args;
                }
            }
            "response.completed" | "response.incomplete" => {
                let body = ev.response.unwrap_or_default();
                if let Some(usage) = body.usage {
                    out.push(StreamEvent::Usage {
                        usage: usage.into(),
                    });
                }
                let stop_reason = match body.incomplete_details.and_then(|d| d.reason) {
                    Some(reason) => match reason.as_str() {
                        "max_output_tokens" => StopReason::MaxTokens,
                        "content_filter" => StopReason::ContentFilter,
                        _ => StopReason::Other(reason),
                    },
                    None if ev.kind == "response.incomplete" => {
                        StopReason::Other("incomplete".to_owned())
                    }
                    None if self.next_call > 0 => StopReason::ToolUse,
                    None => StopReason::EndTurn,
                };
                out.push(StreamEvent::Completed { stop_reason });
            }
            "response.failed" => {
                let error = ev.response.and_then(|r| r.error);
                out.push(error_event(error.as_ref(), None, None));
            }
            "error" => {
                let code = ev.code.as_ref().and_then(Value::as_str);
                out.push(error_event(ev.error.as_ref(), code, ev.message.as_deref()));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Codes after which the same request cannot succeed.
const FATAL_CODES: &[&str] = &[
    "context_length_exceeded",
    "insufficient_quota",
    "invalid_prompt",
    "invalid_request_error",
    "invalid_api_key",
    "model_not_found",
    "usage_not_included",
    "authentication_error",
    "permission_error",
];

fn error_event(
    error: Option<&ErrorBody>,
    code: Option<&str>,
    message: Option<&str>,
) -> StreamEvent {
    let code = code
        .or_else(|| error.and_then(|e| e.code.as_ref().and_then(Value::as_str)))
        .or_else(|| error.and_then(|e| e.kind.as_deref()));
    let message = message
        .or_else(|| error.and_then(|e| e.message.as_deref()))
        .unwrap_or("response failed");
    let retryable = !code.is_some_and(|c| FATAL_CODES.contains(&c));
    StreamEvent::Error {
        message: match code {
            Some(code) => format!("{code}: {message}"),
            None => message.to_owned(),
        },
        retryable,
        retry_after_ms: if retryable {
            retry_hint_from_message(message)
        } else {
            None
        },
    }
}

impl ResponsesParser {
    /// Full decoding of one event (the reference for the fast path).
    pub(crate) fn slow_event(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        let parsed = serde_json::from_str::<Event<'_>>(data).and_then(|ev| self.handle(ev, out));
        if let Err(err) = parsed {
            out.push(malformed_event(KIND.as_str(), &err));
        }
    }
}

impl WireParser for ResponsesParser {
    fn on_event(&mut self, event: SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        match crate::fast_path::openai_responses(event.data) {
            Some((text, kind)) => push_delta(out, kind, text),
            None => self.slow_event(&event.text(), out),
        }
    }

    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) {
        out.push(truncated_error());
    }
}

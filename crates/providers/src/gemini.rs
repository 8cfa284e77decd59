//! Google Gemini API (`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`,
//! `x-goog-api-key`), streamed.
//!
//! Gemini has no terminal event: a stream is complete when it ends after a chunk carrying a
//! `finishReason`, and usage comes from the last chunk's `usageMetadata`. Gemini 2.5 function
//! calls carry no ids, so ids are synthesized; Gemini 3 names each call (`functionCall.id`),
//! and that id is echoed on the call and on its `functionResponse`, a synthesized one never.
//! `thoughtSignature`s are echoed on the part they came with.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind};
use crate::fast_path::{UsageMetadata, UsageTemplate};
use crate::http::HttpClient;
use crate::models::capabilities;
use crate::sse::{DeltaKind, SseEvent, WireParser, malformed_event, push_delta, truncated_error};
use crate::{
    ChatProvider, ChatRequest, ConversationItem, EventStream, ProviderError, ReasoningEffort,
    ReasoningItem, StopReason, StreamEvent, ToolCall, ToolChoice, ToolDefinition, Usage,
    wire_tools,
};

const KIND: ProviderKind = ProviderKind::Gemini;

/// The Gemini wire.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    http: HttpClient,
}

impl GeminiProvider {
    /// A provider for `config`.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            http: HttpClient::new(KIND, config)?,
        })
    }
}

/// The model name as it goes into the URL path (a `models/` prefix is dropped).
fn model_path(model: &str) -> Result<&str, ProviderError> {
    let name = model.trim().trim_start_matches("models/");
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if valid {
        Ok(name)
    } else {
        Err(ProviderError::Config(format!(
            "invalid Gemini model name {model:?}"
        )))
    }
}

#[async_trait::async_trait]
impl ChatProvider for GeminiProvider {
    fn name(&self) -> &'static str {
        KIND.as_str()
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError> {
        let key = self.http.api_key(KIND)?;
        let model = model_path(&request.model)?;
        let url = self.http.config.endpoint(&format!(
            "/v1beta/models/{model}:streamGenerateContent?alt=sse"
        ))?;
        let mut headers = Vec::new();
        if let Some(key) = key {
            headers.push(("x-goog-api-key", key.to_owned()));
        }
        let body = request_body(request)?;
        self.http
            .post_sse(&url, &headers, body, GeminiParser::new())
            .await
    }
}

fn thinking_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Low => 1_024,
        ReasoningEffort::Medium => 8_192,
        ReasoningEffort::High => 24_576,
    }
}

/// The JSON body this wire sends for `request`.
pub fn request_body(request: &ChatRequest) -> Result<String, ProviderError> {
    let mut body = Map::new();
    if !request.system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": request.system}]}),
        );
    }
    body.insert("contents".into(), Value::Array(contents(&request.items)));
    if !request.tools.is_empty() {
        let config = match &request.tool_choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Tool { name } => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": config}),
        );
    }
    let mut generation = Map::new();
    if let Some(max) = request.max_output_tokens {
        generation.insert("maxOutputTokens".into(), json!(max));
    }
    if capabilities(&request.model).supports_reasoning {
        let mut thinking = Map::new();
        thinking.insert("includeThoughts".into(), json!(true));
        if let Some(effort) = request.reasoning_effort {
            thinking.insert("thinkingBudget".into(), json!(thinking_budget(effort)));
        }
        generation.insert("thinkingConfig".into(), Value::Object(thinking));
    }
    if let Some(schema) = &request.output_schema {
        generation.insert("responseMimeType".into(), json!("application/json"));
        generation.insert("responseJsonSchema".into(), schema.schema.clone());
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    wire_tools::body_with_tools(KIND, request, tools, &body)
}

/// The body's `tools`: one entry declaring every function (encoded once per set).
fn tools(tools: &[ToolDefinition]) -> Value {
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    json!([{"functionDeclarations": declarations}])
}

fn contents(items: &[ConversationItem]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    // A signature that arrived on a plain text part waits for the next model part.
    let mut pending_signature: Option<&str> = None;
    // The ids Gemini gave its calls, echoed on their responses.
    let mut provider_ids = std::collections::HashSet::new();
    let mut push = |role: &'static str, part: Value| match out.last_mut() {
        Some((last, parts)) if *last == role => parts.push(part),
        Some(_) | None => out.push((role, vec![part])),
    };
    for item in items {
        match item {
            ConversationItem::User { text } => push("user", json!({"text": text})),
            ConversationItem::ToolResult {
                call_id,
                name,
                output,
                is_error,
                images,
            } => {
                let response = if *is_error {
                    json!({"error": output})
                } else {
                    json!({"output": output})
                };
                let mut function = json!({"name": name, "response": response});
                if !images.is_empty() {
                    function["parts"] = images
                        .iter()
                        .map(|image| {
                            json!({"inlineData": {"mimeType": image.mime_type, "data": image.data}})
                        })
                        .collect();
                }
                if provider_ids.contains(call_id.as_str()) {
                    function["id"] = json!(call_id);
                }
                push("user", json!({ "functionResponse": function }));
            }
            // Gemini has no refusal part: the model's words go back as its text.
            ConversationItem::Refusal { text } => push("model", json!({ "text": text })),
            ConversationItem::Assistant { text } => {
                let mut part = json!({"text": text});
                if let Some(sig) = pending_signature.take() {
                    part["thoughtSignature"] = json!(sig);
                }
                push("model", part);
            }
            ConversationItem::Reasoning(reasoning) => {
                if reasoning.provider != KIND.as_str() {
                    continue;
                }
                match (&reasoning.signature, reasoning.text.is_empty()) {
                    (Some(sig), false) => push(
                        "model",
                        json!({"text": reasoning.text, "thought": true, "thoughtSignature": sig}),
                    ),
                    (Some(sig), true) => pending_signature = Some(sig),
                    (None, _) => {}
                }
            }
            ConversationItem::ToolCall(call) => {
                let args = serde_json::from_str::<Value>(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                let mut function = json!({"name": call.name, "args": args});
                if call.provider_id {
                    function["id"] = json!(call.call_id);
                    provider_ids.insert(call.call_id.as_str());
                }
                let mut part = json!({ "functionCall": function });
                if let Some(sig) = call
                    .thought_signature
                    .as_deref()
                    .or(pending_signature.take())
                {
                    part["thoughtSignature"] = json!(sig);
                }
                push("model", part);
            }
        }
    }
    out.into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Vec<Candidate<'a>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    parts: Vec<Part<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default, borrow)]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

/// Parser for the `streamGenerateContent` SSE stream.
pub struct GeminiParser {
    call_prefix: String,
    next_call: usize,
    thought_text: String,
    thought_signature: Option<String>,
    usage: Option<Usage>,
    /// The `usageMetadata` object the fast path last read `usage` from.
    usage_template: UsageTemplate,
    finish: Option<StopReason>,
}

impl Default for GeminiParser {
    fn default() -> Self {
        Self::new()
    }
}

impl GeminiParser {
    /// A parser whose synthesized call ids start with a fresh random prefix.
    pub fn new() -> Self {
        Self {
            call_prefix: format!("gemini_{:08x}", fastrand::u32(..)),
            next_call: 0,
            thought_text: String::new(),
            thought_signature: None,
            usage: None,
            usage_template: UsageTemplate::default(),
            finish: None,
        }
    }

    fn part(&mut self, part: Part<'_>, out: &mut Vec<StreamEvent>) {
        if let Some(call) = part.function_call {
            let index = self.next_call;
            self.next_call += 1;
            let given = call.id.filter(|id| !id.is_empty());
            let provider_id = given.is_some();
            let call_id = given.unwrap_or_else(|| format!("{}_{index}", self.call_prefix));
            let arguments = call
                .args
                .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned());
            out.push(StreamEvent::ToolCallStart {
                index,
                call_id: call_id.clone(),
                name: call.name.clone(),
            });
            push_delta(out, DeltaKind::Arguments(index), Cow::Borrowed(&arguments));
            out.push(StreamEvent::ToolCallDone {
                index,
                call: ToolCall {
                    call_id,
                    name: call.name,
                    arguments,
                    thought_signature: part.thought_signature,
                    provider_id,
                },
            });
            return;
        }
        if part.thought {
            if let Some(text) = part.text {
                self.thought_text.push_str(&text);
                push_delta(out, DeltaKind::Reasoning, text);
            }
            if part.thought_signature.is_some() {
                self.thought_signature = part.thought_signature;
            }
            return;
        }
        if let Some(text) = part.text.filter(|t| !t.is_empty()) {
            push_delta(out, DeltaKind::Text, text);
        }
        if let Some(signature) = part.thought_signature {
            out.push(StreamEvent::ReasoningDone {
                item: ReasoningItem {
                    provider: KIND.as_str().to_owned(),
                    signature: Some(signature),
                    ..ReasoningItem::default()
                },
            });
        }
    }

    fn handle(&mut self, chunk: Chunk<'_>, out: &mut Vec<StreamEvent>) {
        if let Some(error) = chunk.error {
            let status = error.status.unwrap_or_else(|| "ERROR".to_owned());
            let retryable = error.code.is_some_and(|c| c == 429 || c >= 500)
                || matches!(
                    status.as_str(),
                    "UNAVAILABLE" | "RESOURCE_EXHAUSTED" | "INTERNAL" | "DEADLINE_EXCEEDED"
                );
            out.push(StreamEvent::Error {
                message: format!("{status}: {}", error.message.unwrap_or_default()),
                retryable,
                retry_after_ms: None,
            });
            return;
        }
        if let Some(usage) = chunk.usage_metadata {
            self.set_usage(usage);
        }
        if chunk.prompt_feedback.and_then(|f| f.block_reason).is_some() {
            self.finish = Some(StopReason::ContentFilter);
        }
        for candidate in chunk.candidates.into_iter().take(1) {
            if let Some(content) = candidate.content {
                for part in content.parts {
                    self.part(part, out);
                }
            }
            if let Some(reason) = candidate.finish_reason {
                self.finish = Some(match reason.as_str() {
                    "STOP" if self.next_call > 0 => StopReason::ToolUse,
                    "STOP" => StopReason::EndTurn,
                    "MAX_TOKENS" => StopReason::MaxTokens,
                    "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                    | "IMAGE_SAFETY" => StopReason::ContentFilter,
                    _ => StopReason::Other(reason),
                });
            }
        }
    }
}

impl GeminiParser {
    /// Full decoding of one chunk (the reference for the fast path).
    pub(crate) fn slow_event(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        self.usage_template.forget();
        match serde_json::from_str::<Chunk<'_>>(data) {
            Ok(chunk) => self.handle(chunk, out),
            Err(err) => out.push(malformed_event(KIND.as_str(), &err)),
        }
    }

    /// The fast path for a plain text chunk; `false` (nothing pushed) for any other shape.
    pub(crate) fn fast_event(&mut self, data: &[u8], out: &mut Vec<StreamEvent>) -> bool {
        let Some(chunk) = crate::fast_path::gemini(data, &mut self.usage_template) else {
            return false;
        };
        if let Some(usage) = chunk.usage {
            self.set_usage(usage);
        }
        if !chunk.text.is_empty() {
            push_delta(out, DeltaKind::Text, chunk.text);
        }
        true
    }

    fn set_usage(&mut self, usage: UsageMetadata) {
        self.usage = Some(Usage {
            input_tokens: usage.prompt_token_count,
            cached_input_tokens: usage.cached_content_token_count,
            output_tokens: usage.candidates_token_count + usage.thoughts_token_count,
            reasoning_tokens: usage.thoughts_token_count,
        });
    }
}

impl WireParser for GeminiParser {
    fn on_event(&mut self, event: SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if !self.fast_event(event.data, out) {
            self.slow_event(&event.text(), out);
        }
    }

    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) {
        let Some(stop_reason) = self.finish.take() else {
            out.push(truncated_error());
            return;
        };
        if !self.thought_text.is_empty() || self.thought_signature.is_some() {
            out.push(StreamEvent::ReasoningDone {
                item: ReasoningItem {
                    provider: KIND.as_str().to_owned(),
                    text: std::mem::take(&mut self.thought_text),
                    signature: self.thought_signature.take(),
                    ..ReasoningItem::default()
                },
            });
        }
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage { usage });
        }
        out.push(StreamEvent::Completed { stop_reason });
    }
}

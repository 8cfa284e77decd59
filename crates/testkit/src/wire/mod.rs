//! The four wire formats: rendering a turn as each API's SSE events (or its non-streaming JSON),
//! its error bodies and error events, and reading back what a request echoes.
//!
//! Every wire module exposes the same five functions (`render_stream`, `render_json`,
//! `error_event`, `http_error_body`, `inspect`) so the server treats wires uniformly; the
//! dispatch lives here.

mod anthropic;
mod chat;
mod gemini;
mod responses;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scenario::{ErrorKind, ResponsesErrorShape, Turn};

/// The wire formats the fake server speaks, one per real API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// OpenAI Responses: `POST /v1/responses`.
    OpenAiResponses,
    /// OpenAI Chat Completions (and compatibles): `POST /v1/chat/completions`.
    OpenAiChat,
    /// Anthropic Messages: `POST /v1/messages`.
    Anthropic,
    /// Gemini: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`.
    Gemini,
}

impl Wire {
    /// Every wire, for tests that cover all of them.
    pub const ALL: [Wire; 4] = [
        Wire::OpenAiResponses,
        Wire::OpenAiChat,
        Wire::Anthropic,
        Wire::Gemini,
    ];
}

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Wire::OpenAiResponses => "openai-responses",
            Wire::OpenAiChat => "openai-chat",
            Wire::Anthropic => "anthropic",
            Wire::Gemini => "gemini",
        };
        f.write_str(name)
    }
}

/// A tool call as the server issued it (ids and the exact argument text the client saw).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IssuedCall {
    /// The call id (`call_…`, `toolu_…`); Gemini sends none, so its calls match by name + args.
    pub id: String,
    /// The Responses output item id (`fc_…`).
    pub item_id: String,
    pub name: String,
    /// Compact JSON text of the arguments.
    pub arguments: String,
}

/// Reasoning as the server issued it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IssuedReasoning {
    /// The Responses output item id (`rs_…`).
    pub item_id: String,
    pub text: String,
    /// The opaque token; only sent when the wire and the request ask for it.
    pub signature: String,
}

/// Everything one rendering needs beyond the turn.
pub(crate) struct RenderCtx<'a> {
    pub turn: &'a Turn,
    pub model: &'a str,
    pub response_id: &'a str,
    pub message_id: &'a str,
    pub calls: &'a [IssuedCall],
    pub reasoning: Option<&'a IssuedReasoning>,
    /// What the request asked for (encrypted reasoning, usage chunk).
    pub facts: &'a RequestFacts,
    pub created: u64,
}

/// What a request offers and echoes, read the same way for every wire.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RequestFacts {
    pub model: Option<String>,
    pub stream: bool,
    pub tool_names: Vec<String>,
    /// Responses: `include` has `reasoning.encrypted_content`.
    pub wants_encrypted_reasoning: bool,
    /// Chat: `stream_options.include_usage`.
    pub wants_usage_chunk: bool,
    pub tool_results: Vec<ToolResultRef>,
    pub echoed_calls: Vec<EchoedCall>,
    pub echoed_reasoning: Vec<EchoedReasoning>,
    /// The credential the request carried (bearer token, `x-api-key`, `x-goog-api-key`).
    pub credential: Option<String>,
    /// The `host` header: the origin the client used.
    pub host: Option<String>,
    /// Path and query, as sent.
    pub target: String,
    /// The text of every user message, in order (what picks a scenario's `scripts`).
    pub user_texts: Vec<String>,
}

/// A tool result in a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolResultRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

/// A previously issued tool call echoed back in the history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EchoedCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
    /// Gemini: the `thoughtSignature` on this very part.
    pub attached_signature: Option<String>,
}

/// Echoed reasoning: the opaque token and, where the wire echoes it, the text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EchoedReasoning {
    pub signature: String,
    pub text: Option<String>,
    pub item_id: Option<String>,
}

/// One framed SSE event.
pub(crate) type SseEvent = Vec<u8>;

/// Renders the clean turn as the wire's SSE events, terminal event included.
pub(crate) fn render_stream(wire: Wire, ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    match wire {
        Wire::OpenAiResponses => responses::render_stream(ctx),
        Wire::OpenAiChat => chat::render_stream(ctx),
        Wire::Anthropic => anthropic::render_stream(ctx),
        Wire::Gemini => gemini::render_stream(ctx),
    }
}

/// Renders the clean turn as the wire's non-streaming JSON response.
pub(crate) fn render_json(wire: Wire, ctx: &RenderCtx<'_>) -> Value {
    match wire {
        Wire::OpenAiResponses => responses::render_json(ctx),
        Wire::OpenAiChat => chat::render_json(ctx),
        Wire::Anthropic => anthropic::render_json(ctx),
        Wire::Gemini => gemini::render_json(ctx),
    }
}

/// The wire's mid-stream error event (terminal).
pub(crate) fn error_event(
    wire: Wire,
    ctx: &RenderCtx<'_>,
    kind: ErrorKind,
    message: &str,
    shape: ResponsesErrorShape,
) -> SseEvent {
    match wire {
        Wire::OpenAiResponses => responses::error_event(ctx, kind, message, shape),
        Wire::OpenAiChat => chat::error_event(kind, message),
        Wire::Anthropic => anthropic::error_event(kind, message),
        Wire::Gemini => gemini::error_event(kind, message),
    }
}

/// The wire's JSON error body for an HTTP error status.
pub(crate) fn http_error_body(wire: Wire, status: u16, message: &str) -> Value {
    let kind = kind_for_status(status);
    match wire {
        Wire::OpenAiResponses | Wire::OpenAiChat => chat::http_error_body(kind, message),
        Wire::Anthropic => anthropic::http_error_body(status, message),
        Wire::Gemini => gemini::http_error_body(status, message),
    }
}

/// Reads what a request offers and echoes.
pub(crate) fn inspect(wire: Wire, body: &Value) -> RequestFacts {
    match wire {
        Wire::OpenAiResponses => responses::inspect(body),
        Wire::OpenAiChat => chat::inspect(body),
        Wire::Anthropic => anthropic::inspect(body),
        Wire::Gemini => gemini::inspect(body),
    }
}

fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::RateLimit,
        503 | 529 => ErrorKind::Overloaded,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::InvalidRequest,
    }
}

/// Frames one SSE event with LF line ends (`event:` line optional).
pub(crate) fn sse(event: Option<&str>, data: &Value) -> SseEvent {
    let mut out = String::new();
    if let Some(name) = event {
        out.push_str("event: ");
        out.push_str(name);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
    out.into_bytes()
}

/// Splits `text` into pieces of at most `chars` characters (never inside a character).
pub(crate) fn split_chars(text: &str, chars: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (index, _) in text.char_indices() {
        if count == chars.max(1) {
            pieces.push(&text[start..index]);
            start = index;
            count = 0;
        }
        count += 1;
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// Parses echoed argument text; text that is not JSON is compared as a string.
pub(crate) fn parse_arguments(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The texts of a message's `content`: the string itself, or each part's `text`.
pub(crate) fn content_texts(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_field(p, "text")).collect(),
        _ => Vec::new(),
    }
}

/// Whether `message` has role `user`.
pub(crate) fn is_user(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("user")
}

pub(crate) fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

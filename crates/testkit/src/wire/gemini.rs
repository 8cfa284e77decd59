//! Gemini `streamGenerateContent?alt=sse`: `data:` lines framed with CRLF, each a
//! `GenerateContentResponse` chunk; thought parts, text parts, whole `functionCall` parts (several
//! in one chunk for parallel calls) with the `thoughtSignature` on the first call, and the finish
//! reason plus full `usageMetadata` on the last chunk.

use serde_json::{Value, json};

use super::{
    EchoedCall, EchoedReasoning, RenderCtx, RequestFacts, SseEvent, ToolResultRef, array,
    content_texts, is_user, split_chars, str_field,
};
use crate::scenario::{ErrorKind, StopKind};

fn frame(data: &Value) -> SseEvent {
    format!("data: {data}\r\n\r\n").into_bytes()
}

fn usage(ctx: &RenderCtx<'_>, last: bool) -> Value {
    let u = ctx.turn.usage;
    if !last {
        return json!({ "promptTokenCount": u.input, "totalTokenCount": u.input });
    }
    let mut usage = json!({
        "promptTokenCount": u.input,
        "candidatesTokenCount": u.output - u.reasoning,
        "totalTokenCount": u.input + u.output,
    });
    if let Some(object) = usage.as_object_mut() {
        if u.cached > 0 {
            object.insert("cachedContentTokenCount".into(), json!(u.cached));
        }
        if u.reasoning > 0 {
            object.insert("thoughtsTokenCount".into(), json!(u.reasoning));
        }
    }
    usage
}

fn finish_reason(ctx: &RenderCtx<'_>) -> &'static str {
    match ctx.turn.stop {
        StopKind::MaxTokens => "MAX_TOKENS",
        StopKind::Natural => "STOP",
    }
}

fn response(ctx: &RenderCtx<'_>, parts: Vec<Value>, last: bool) -> Value {
    let mut candidate = json!({ "content": { "parts": parts, "role": "model" }, "index": 0 });
    if last && let Some(object) = candidate.as_object_mut() {
        object.insert("finishReason".into(), json!(finish_reason(ctx)));
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage(ctx, last),
        "modelVersion": ctx.model,
        "responseId": ctx.response_id,
    })
}

/// The parts of the turn, grouped into the chunks they stream in.
fn chunks(ctx: &RenderCtx<'_>) -> Vec<Vec<Value>> {
    let chars = ctx.turn.delivery.delta_chars;
    let mut chunks = Vec::new();
    if let Some(reasoning) = ctx.reasoning {
        for piece in split_chars(&reasoning.text, chars) {
            chunks.push(vec![json!({ "text": piece, "thought": true })]);
        }
    }
    if let Some(text) = &ctx.turn.text {
        for piece in split_chars(text, chars) {
            chunks.push(vec![json!({ "text": piece })]);
        }
    }
    if !ctx.calls.is_empty() {
        let parts = ctx
            .calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let args: Value =
                    serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                let mut part = json!({ "functionCall": { "name": call.name, "args": args } });
                if index == 0
                    && let (Some(reasoning), Some(object)) = (ctx.reasoning, part.as_object_mut())
                {
                    object.insert("thoughtSignature".into(), json!(reasoning.signature));
                }
                part
            })
            .collect();
        chunks.push(parts);
    } else if let Some(reasoning) = ctx.reasoning {
        // Without calls the API delivers the signature on a trailing (often empty) text part.
        chunks.push(vec![
            json!({ "text": "", "thoughtSignature": reasoning.signature }),
        ]);
    }
    if chunks.is_empty() {
        chunks.push(vec![json!({ "text": "" })]);
    }
    chunks
}

pub(super) fn render_stream(ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let chunks = chunks(ctx);
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, parts)| frame(&response(ctx, parts, index == last)))
        .collect()
}

pub(super) fn render_json(ctx: &RenderCtx<'_>) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    for chunk in chunks(ctx) {
        for part in chunk {
            // Non-streaming responses carry whole parts, not fragments.
            let merged = match (parts.last_mut(), part.get("text").and_then(Value::as_str)) {
                (Some(prev), Some(text))
                    if prev.get("thought") == part.get("thought")
                        && prev.get("thoughtSignature").is_none()
                        && part.get("thoughtSignature").is_none()
                        && prev.get("text").is_some() =>
                {
                    let joined = format!(
                        "{}{text}",
                        prev.get("text").and_then(Value::as_str).unwrap_or("")
                    );
                    if let Some(object) = prev.as_object_mut() {
                        object.insert("text".into(), json!(joined));
                    }
                    true
                }
                _ => false,
            };
            if !merged {
                parts.push(part);
            }
        }
    }
    response(ctx, parts, true)
}

fn status_of(kind: ErrorKind) -> (u16, &'static str) {
    match kind {
        ErrorKind::Overloaded => (503, "UNAVAILABLE"),
        ErrorKind::RateLimit => (429, "RESOURCE_EXHAUSTED"),
        ErrorKind::Server => (500, "INTERNAL"),
        ErrorKind::InvalidRequest => (400, "INVALID_ARGUMENT"),
    }
}

pub(super) fn error_event(kind: ErrorKind, message: &str) -> SseEvent {
    let (code, status) = status_of(kind);
    frame(&json!({ "error": { "code": code, "message": message, "status": status } }))
}

pub(super) fn http_error_body(status: u16, message: &str) -> Value {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    };
    json!({ "error": { "code": status, "message": message, "status": name } })
}

/// The model and streaming mode come from the path; the server fills them in.
pub(super) fn inspect(body: &Value) -> RequestFacts {
    let mut facts = RequestFacts::default();
    for tool in array(body, "tools") {
        for decl in array(tool, "functionDeclarations") {
            facts.tool_names.extend(str_field(decl, "name"));
        }
    }
    for content in array(body, "contents") {
        if is_user(content) {
            facts.user_texts.extend(content_texts(content.get("parts")));
        }
        for part in array(content, "parts") {
            let signature = str_field(part, "thoughtSignature");
            if let Some(call) = part.get("functionCall") {
                facts.echoed_calls.push(EchoedCall {
                    id: str_field(call, "id"),
                    name: str_field(call, "name").unwrap_or_default(),
                    arguments: call.get("args").cloned().unwrap_or_else(|| json!({})),
                    attached_signature: signature.clone(),
                });
            }
            if let Some(result) = part.get("functionResponse") {
                facts.tool_results.push(ToolResultRef {
                    id: str_field(result, "id"),
                    name: str_field(result, "name"),
                });
            }
            if let Some(signature) = signature {
                facts.echoed_reasoning.push(EchoedReasoning {
                    signature,
                    text: None,
                    item_id: None,
                });
            }
        }
    }
    facts
}

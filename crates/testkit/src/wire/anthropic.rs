//! Anthropic Messages: `message_start`, `ping`, content blocks (thinking with a signature delta,
//! text, tool_use with `input_json_delta`), `message_delta` with the stop reason, `message_stop`;
//! `error` events and bodies typed by `error.type`.

use serde_json::{Value, json};

use super::{
    EchoedCall, EchoedReasoning, RenderCtx, RequestFacts, SseEvent, ToolResultRef, array,
    content_texts, is_user, split_chars, sse, str_field,
};
use crate::scenario::{ErrorKind, StopKind};

fn event(name: &str, mut data: Value) -> SseEvent {
    if let Some(object) = data.as_object_mut() {
        object.insert("type".into(), json!(name));
    }
    sse(Some(name), &data)
}

fn stop_reason(ctx: &RenderCtx<'_>) -> &'static str {
    match ctx.turn.stop {
        StopKind::MaxTokens => "max_tokens",
        StopKind::Natural if ctx.calls.is_empty() => "end_turn",
        StopKind::Natural => "tool_use",
    }
}

/// Anthropic reports uncached input separately from cache reads.
fn usage(ctx: &RenderCtx<'_>, output: u64) -> Value {
    let u = ctx.turn.usage;
    json!({
        "input_tokens": u.input - u.cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached,
        "output_tokens": output,
    })
}

fn message(ctx: &RenderCtx<'_>, content: Vec<Value>, stop: Option<&str>, output: u64) -> Value {
    json!({
        "id": ctx.message_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage(ctx, output),
    })
}

pub(super) fn render_stream(ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let chars = ctx.turn.delivery.delta_chars;
    let mut events = vec![
        event(
            "message_start",
            json!({ "message": message(ctx, Vec::new(), None, 1) }),
        ),
        event("ping", json!({})),
    ];
    let mut index = 0;
    let mut block = |events: &mut Vec<SseEvent>, start: Value, deltas: Vec<Value>| {
        events.push(event(
            "content_block_start",
            json!({ "index": index, "content_block": start }),
        ));
        for delta in deltas {
            events.push(event(
                "content_block_delta",
                json!({ "index": index, "delta": delta }),
            ));
        }
        events.push(event("content_block_stop", json!({ "index": index })));
        index += 1;
    };
    if let Some(reasoning) = ctx.reasoning {
        let mut deltas: Vec<Value> = split_chars(&reasoning.text, chars)
            .into_iter()
            .map(|piece| json!({ "type": "thinking_delta", "thinking": piece }))
            .collect();
        deltas.push(json!({ "type": "signature_delta", "signature": reasoning.signature }));
        block(
            &mut events,
            json!({ "type": "thinking", "thinking": "", "signature": "" }),
            deltas,
        );
    }
    if let Some(text) = &ctx.turn.text {
        let deltas = split_chars(text, chars)
            .into_iter()
            .map(|piece| json!({ "type": "text_delta", "text": piece }))
            .collect();
        block(&mut events, json!({ "type": "text", "text": "" }), deltas);
    }
    for call in ctx.calls {
        let mut deltas = vec![json!({ "type": "input_json_delta", "partial_json": "" })];
        deltas.extend(
            split_chars(&call.arguments, chars)
                .into_iter()
                .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece })),
        );
        let start = json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": {} });
        block(&mut events, start, deltas);
    }
    events.push(event(
        "message_delta",
        json!({
            "delta": { "stop_reason": stop_reason(ctx), "stop_sequence": null },
            "usage": usage(ctx, ctx.turn.usage.output),
        }),
    ));
    events.push(event("message_stop", json!({})));
    events
}

pub(super) fn render_json(ctx: &RenderCtx<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(reasoning) = ctx.reasoning {
        content.push(json!({ "type": "thinking", "thinking": reasoning.text,
            "signature": reasoning.signature }));
    }
    if let Some(text) = &ctx.turn.text {
        content.push(json!({ "type": "text", "text": text }));
    }
    for call in ctx.calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        content
            .push(json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input }));
    }
    message(ctx, content, Some(stop_reason(ctx)), ctx.turn.usage.output)
}

fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Server => "api_error",
        ErrorKind::InvalidRequest => "invalid_request_error",
    }
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": kind, "message": message },
        "request_id": "req_fake" })
}

pub(super) fn error_event(kind: ErrorKind, message: &str) -> SseEvent {
    sse(Some("error"), &error_body(error_type(kind), message))
}

pub(super) fn http_error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    };
    error_body(kind, message)
}

pub(super) fn inspect(body: &Value) -> RequestFacts {
    let mut facts = RequestFacts {
        model: str_field(body, "model"),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        ..RequestFacts::default()
    };
    for tool in array(body, "tools") {
        facts.tool_names.extend(str_field(tool, "name"));
    }
    for message in array(body, "messages") {
        if is_user(message) {
            facts
                .user_texts
                .extend(content_texts(message.get("content")));
        }
        for block in array(message, "content") {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => facts.tool_results.push(ToolResultRef {
                    id: str_field(block, "tool_use_id"),
                    name: None,
                }),
                Some("tool_use") => facts.echoed_calls.push(EchoedCall {
                    id: str_field(block, "id"),
                    name: str_field(block, "name").unwrap_or_default(),
                    arguments: block.get("input").cloned().unwrap_or(Value::Null),
                    attached_signature: None,
                }),
                Some("thinking") => facts.echoed_reasoning.push(EchoedReasoning {
                    signature: str_field(block, "signature").unwrap_or_default(),
                    text: str_field(block, "thinking"),
                    item_id: None,
                }),
                _ => {}
            }
        }
    }
    facts
}

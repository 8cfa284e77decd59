//! OpenAI Chat Completions: `chat.completion.chunk` data lines, tool-call fragments by index,
//! `reasoning_content` deltas (the vLLM / DeepSeek convention), an optional usage chunk with
//! empty `choices`, and `data: [DONE]`. Also the OpenAI error body shared with Responses.

use serde_json::{Value, json};

use super::{
    EchoedCall, RenderCtx, RequestFacts, SseEvent, ToolResultRef, array, content_texts, is_user,
    parse_arguments, split_chars, sse, str_field,
};
use crate::scenario::{ErrorKind, StopKind};

fn chunk(ctx: &RenderCtx<'_>, delta: Value, finish: Option<&str>) -> SseEvent {
    let mut data = json!({
        "id": ctx.response_id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": null,
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
    });
    if ctx.facts.wants_usage_chunk
        && let Some(object) = data.as_object_mut()
    {
        object.insert("usage".into(), Value::Null);
    }
    sse(None, &data)
}

fn usage(ctx: &RenderCtx<'_>) -> Value {
    let u = ctx.turn.usage;
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": { "cached_tokens": u.cached },
        "completion_tokens_details": { "reasoning_tokens": u.reasoning },
    })
}

fn finish_reason(ctx: &RenderCtx<'_>) -> &'static str {
    match ctx.turn.stop {
        StopKind::MaxTokens => "length",
        StopKind::Natural if ctx.calls.is_empty() => "stop",
        StopKind::Natural => "tool_calls",
    }
}

pub(super) fn render_stream(ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let chars = ctx.turn.delivery.delta_chars;
    let mut events = vec![chunk(
        ctx,
        json!({ "role": "assistant", "content": "", "refusal": null }),
        None,
    )];
    if let Some(reasoning) = ctx.reasoning {
        for delta in split_chars(&reasoning.text, chars) {
            events.push(chunk(ctx, json!({ "reasoning_content": delta }), None));
        }
    }
    if let Some(text) = &ctx.turn.text {
        for delta in split_chars(text, chars) {
            events.push(chunk(ctx, json!({ "content": delta }), None));
        }
    }
    for (index, call) in ctx.calls.iter().enumerate() {
        let start = json!({ "tool_calls": [{ "index": index, "id": call.id, "type": "function",
            "function": { "name": call.name, "arguments": "" } }] });
        events.push(chunk(ctx, start, None));
        for delta in split_chars(&call.arguments, chars) {
            let piece =
                json!({ "tool_calls": [{ "index": index, "function": { "arguments": delta } }] });
            events.push(chunk(ctx, piece, None));
        }
    }
    events.push(chunk(ctx, json!({}), Some(finish_reason(ctx))));
    if ctx.facts.wants_usage_chunk {
        events.push(sse(
            None,
            &json!({
                "id": ctx.response_id,
                "object": "chat.completion.chunk",
                "created": ctx.created,
                "model": ctx.model,
                "system_fingerprint": null,
                "choices": [],
                "usage": usage(ctx),
            }),
        ));
    }
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

pub(super) fn render_json(ctx: &RenderCtx<'_>) -> Value {
    let tool_calls: Vec<Value> = ctx
        .calls
        .iter()
        .map(|call| {
            json!({ "id": call.id, "type": "function",
                "function": { "name": call.name, "arguments": call.arguments } })
        })
        .collect();
    let mut message = json!({ "role": "assistant", "content": ctx.turn.text, "refusal": null });
    if let Some(object) = message.as_object_mut() {
        if !tool_calls.is_empty() {
            object.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        if let Some(reasoning) = ctx.reasoning {
            object.insert("reasoning_content".into(), json!(reasoning.text));
        }
    }
    json!({
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{ "index": 0, "message": message, "logprobs": null,
            "finish_reason": finish_reason(ctx) }],
        "usage": usage(ctx),
    })
}

fn error_type(kind: ErrorKind) -> (&'static str, &'static str) {
    match kind {
        ErrorKind::Overloaded => ("server_error", "server_is_overloaded"),
        ErrorKind::RateLimit => ("requests", "rate_limit_exceeded"),
        ErrorKind::Server => ("server_error", "server_error"),
        ErrorKind::InvalidRequest => ("invalid_request_error", "invalid_request_error"),
    }
}

pub(super) fn http_error_body(kind: ErrorKind, message: &str) -> Value {
    let (kind, code) = error_type(kind);
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
}

pub(super) fn error_event(kind: ErrorKind, message: &str) -> SseEvent {
    sse(None, &http_error_body(kind, message))
}

pub(super) fn inspect(body: &Value) -> RequestFacts {
    let mut facts = RequestFacts {
        model: str_field(body, "model"),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        wants_usage_chunk: body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ..RequestFacts::default()
    };
    for tool in array(body, "tools") {
        facts.tool_names.extend(
            tool.pointer("/function/name")
                .and_then(Value::as_str)
                .map(str::to_owned),
        );
    }
    for message in array(body, "messages") {
        if is_user(message) {
            facts
                .user_texts
                .extend(content_texts(message.get("content")));
        }
        match message.get("role").and_then(Value::as_str) {
            Some("tool") => facts.tool_results.push(ToolResultRef {
                id: str_field(message, "tool_call_id"),
                name: str_field(message, "name"),
            }),
            Some("assistant") => {
                for call in array(message, "tool_calls") {
                    facts.echoed_calls.push(EchoedCall {
                        id: str_field(call, "id"),
                        name: call
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        arguments: parse_arguments(
                            call.pointer("/function/arguments")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        ),
                        attached_signature: None,
                    });
                }
            }
            _ => {}
        }
    }
    facts
}

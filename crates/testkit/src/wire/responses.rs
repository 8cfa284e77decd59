//! OpenAI Responses API: `response.*` events with `sequence_number`, output items for reasoning
//! (summary + `encrypted_content` when the request includes it), messages and function calls.

use serde_json::{Value, json};

use super::{
    EchoedCall, EchoedReasoning, RenderCtx, RequestFacts, SseEvent, ToolResultRef, array,
    content_texts, is_user, parse_arguments, split_chars, sse, str_field,
};
use crate::scenario::{ErrorKind, ResponsesErrorShape, StopKind};

/// Numbers events as the API does and frames them with their type as the SSE event name.
struct Emitter {
    events: Vec<SseEvent>,
    sequence: u64,
}

impl Emitter {
    fn emit(&mut self, mut data: Value) {
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(object) = data.as_object_mut() {
            object.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        self.events.push(sse(Some(&kind), &data));
    }
}

fn response_object(ctx: &RenderCtx<'_>, status: &str, output: Vec<Value>, usage: Value) -> Value {
    let incomplete = if status == "incomplete" {
        json!({ "reason": "max_output_tokens" })
    } else {
        Value::Null
    };
    json!({
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": true,
        "store": false,
        "usage": usage,
    })
}

fn usage(ctx: &RenderCtx<'_>) -> Value {
    let u = ctx.turn.usage;
    json!({
        "input_tokens": u.input,
        "input_tokens_details": { "cached_tokens": u.cached },
        "output_tokens": u.output,
        "output_tokens_details": { "reasoning_tokens": u.reasoning },
        "total_tokens": u.input + u.output,
    })
}

fn reasoning_item(ctx: &RenderCtx<'_>, done: bool) -> Option<Value> {
    let reasoning = ctx.reasoning?;
    let summary = if done {
        json!([{ "type": "summary_text", "text": reasoning.text }])
    } else {
        json!([])
    };
    let mut item = json!({ "id": reasoning.item_id, "type": "reasoning", "summary": summary });
    if done
        && ctx.facts.wants_encrypted_reasoning
        && let Some(object) = item.as_object_mut()
    {
        object.insert("encrypted_content".into(), json!(reasoning.signature));
    }
    Some(item)
}

fn message_item(ctx: &RenderCtx<'_>, text: &str, done: bool) -> Value {
    let content = if done {
        json!([{ "type": "output_text", "annotations": [], "text": text }])
    } else {
        json!([])
    };
    json!({
        "id": ctx.message_id,
        "type": "message",
        "status": if done { "completed" } else { "in_progress" },
        "role": "assistant",
        "content": content,
    })
}

fn call_item(call: &super::IssuedCall, done: bool) -> Value {
    let mut item = json!({
        "id": call.item_id,
        "type": "function_call",
        "status": if done { "completed" } else { "in_progress" },
        "arguments": if done { call.arguments.as_str() } else { "" },
        "call_id": call.id,
        "name": call.name,
    });
    if let Some((namespace, name)) = namespaced(&call.name) {
        item["namespace"] = json!(namespace);
        item["name"] = json!(name);
    }
    item
}

/// A tool of a namespace is named `namespace.name` (as [`collect_tool_names`] offers it) and
/// called with the two as separate fields.
fn namespaced(name: &str) -> Option<(&str, &str)> {
    name.split_once('.')
}

fn final_status(ctx: &RenderCtx<'_>) -> &'static str {
    match ctx.turn.stop {
        StopKind::Natural => "completed",
        StopKind::MaxTokens => "incomplete",
    }
}

fn output_items(ctx: &RenderCtx<'_>) -> Vec<Value> {
    let mut output = Vec::new();
    output.extend(reasoning_item(ctx, true));
    if let Some(text) = &ctx.turn.text {
        output.push(message_item(ctx, text, true));
    }
    output.extend(ctx.calls.iter().map(|call| call_item(call, true)));
    output
}

pub(super) fn render_stream(ctx: &RenderCtx<'_>) -> Vec<SseEvent> {
    let chars = ctx.turn.delivery.delta_chars;
    let mut out = Emitter {
        events: Vec::new(),
        sequence: 0,
    };
    let created = response_object(ctx, "in_progress", Vec::new(), Value::Null);
    out.emit(json!({ "type": "response.created", "response": created }));
    out.emit(json!({ "type": "response.in_progress", "response": created }));
    let mut index = 0;
    if let (Some(reasoning), Some(added)) = (ctx.reasoning, reasoning_item(ctx, false)) {
        let id = &reasoning.item_id;
        out.emit(
            json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
        );
        let part = |text: &str| json!({ "type": "summary_text", "text": text });
        out.emit(
            json!({ "type": "response.reasoning_summary_part.added", "item_id": id,
            "output_index": index, "summary_index": 0, "part": part("") }),
        );
        for delta in split_chars(&reasoning.text, chars) {
            out.emit(
                json!({ "type": "response.reasoning_summary_text.delta", "item_id": id,
                "output_index": index, "summary_index": 0, "delta": delta }),
            );
        }
        out.emit(
            json!({ "type": "response.reasoning_summary_text.done", "item_id": id,
            "output_index": index, "summary_index": 0, "text": reasoning.text }),
        );
        out.emit(
            json!({ "type": "response.reasoning_summary_part.done", "item_id": id,
            "output_index": index, "summary_index": 0, "part": part(&reasoning.text) }),
        );
        out.emit(
            json!({ "type": "response.output_item.done", "output_index": index,
            "item": reasoning_item(ctx, true) }),
        );
        index += 1;
    }
    if let Some(text) = &ctx.turn.text {
        let id = ctx.message_id;
        let part = |text: &str| json!({ "type": "output_text", "annotations": [], "text": text });
        out.emit(
            json!({ "type": "response.output_item.added", "output_index": index,
            "item": message_item(ctx, text, false) }),
        );
        out.emit(
            json!({ "type": "response.content_part.added", "item_id": id,
            "output_index": index, "content_index": 0, "part": part("") }),
        );
        for delta in split_chars(text, chars) {
            out.emit(json!({ "type": "response.output_text.delta", "item_id": id,
                "output_index": index, "content_index": 0, "delta": delta, "logprobs": [] }));
        }
        out.emit(json!({ "type": "response.output_text.done", "item_id": id,
            "output_index": index, "content_index": 0, "text": text, "logprobs": [] }));
        out.emit(json!({ "type": "response.content_part.done", "item_id": id,
            "output_index": index, "content_index": 0, "part": part(text) }));
        out.emit(
            json!({ "type": "response.output_item.done", "output_index": index,
            "item": message_item(ctx, text, true) }),
        );
        index += 1;
    }
    for call in ctx.calls {
        let id = &call.item_id;
        out.emit(
            json!({ "type": "response.output_item.added", "output_index": index,
            "item": call_item(call, false) }),
        );
        for delta in split_chars(&call.arguments, chars) {
            out.emit(
                json!({ "type": "response.function_call_arguments.delta", "item_id": id,
                "output_index": index, "delta": delta }),
            );
        }
        out.emit(
            json!({ "type": "response.function_call_arguments.done", "item_id": id,
            "output_index": index, "name": call_item(call, true)["name"],
            "arguments": call.arguments }),
        );
        out.emit(
            json!({ "type": "response.output_item.done", "output_index": index,
            "item": call_item(call, true) }),
        );
        index += 1;
    }
    let status = final_status(ctx);
    let terminal = format!("response.{status}");
    let response = response_object(ctx, status, output_items(ctx), usage(ctx));
    out.emit(json!({ "type": terminal, "response": response }));
    out.events
}

pub(super) fn render_json(ctx: &RenderCtx<'_>) -> Value {
    response_object(ctx, final_status(ctx), output_items(ctx), usage(ctx))
}

fn code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Overloaded => "server_is_overloaded",
        ErrorKind::RateLimit => "rate_limit_exceeded",
        ErrorKind::Server => "server_error",
        ErrorKind::InvalidRequest => "invalid_request_error",
    }
}

pub(super) fn error_event(
    ctx: &RenderCtx<'_>,
    kind: ErrorKind,
    message: &str,
    shape: ResponsesErrorShape,
) -> SseEvent {
    let code = code(kind);
    // The sequence number continues past the events already sent; exactness does not matter to
    // clients, monotonicity does, so a large number is safe.
    let sequence = 10_000;
    match shape {
        ResponsesErrorShape::Failed => {
            let mut response = response_object(ctx, "failed", Vec::new(), Value::Null);
            if let Some(object) = response.as_object_mut() {
                object.insert("error".into(), json!({ "code": code, "message": message }));
            }
            sse(
                Some("response.failed"),
                &json!({ "type": "response.failed", "sequence_number": sequence, "response": response }),
            )
        }
        ResponsesErrorShape::Flat => sse(
            Some("error"),
            &json!({ "type": "error", "sequence_number": sequence, "code": code,
                "message": message, "param": null }),
        ),
        ResponsesErrorShape::Nested => sse(
            Some("error"),
            &json!({ "type": "error", "sequence_number": sequence,
                "error": { "type": code, "code": code, "message": message, "param": null } }),
        ),
    }
}

pub(super) fn inspect(body: &Value) -> RequestFacts {
    let mut facts = RequestFacts {
        model: str_field(body, "model"),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        wants_encrypted_reasoning: array(body, "include")
            .iter()
            .any(|v| v.as_str() == Some("reasoning.encrypted_content")),
        ..RequestFacts::default()
    };
    collect_tool_names(array(body, "tools"), &mut facts.tool_names);
    if let Some(text) = body.get("input").and_then(Value::as_str) {
        facts.user_texts.push(text.to_owned());
    }
    let input = array(body, "input");
    for item in input {
        if is_user(item) {
            facts.user_texts.extend(content_texts(item.get("content")));
        }
        match item.get("type").and_then(Value::as_str) {
            // Newer Codex models receive their tools as an input item instead of `tools`.
            Some("additional_tools") => {
                collect_tool_names(array(item, "tools"), &mut facts.tool_names)
            }
            Some(
                "function_call_output" | "custom_tool_call_output" | "local_shell_call_output",
            ) => {
                facts.tool_results.push(ToolResultRef {
                    id: str_field(item, "call_id"),
                    name: None,
                });
            }
            Some("function_call") => facts.echoed_calls.push(EchoedCall {
                id: str_field(item, "call_id"),
                name: match (str_field(item, "namespace"), str_field(item, "name")) {
                    (Some(namespace), Some(name)) => format!("{namespace}.{name}"),
                    (None, name) => name.unwrap_or_default(),
                    (Some(_), None) => String::new(),
                },
                arguments: parse_arguments(
                    item.get("arguments").and_then(Value::as_str).unwrap_or(""),
                ),
                attached_signature: None,
            }),
            Some("reasoning") => {
                if let Some(signature) = str_field(item, "encrypted_content") {
                    let text = array(item, "summary")
                        .iter()
                        .filter_map(|part| str_field(part, "text"))
                        .collect::<Vec<_>>()
                        .join("");
                    facts.echoed_reasoning.push(EchoedReasoning {
                        signature,
                        text: Some(text),
                        item_id: str_field(item, "id"),
                    });
                }
            }
            _ => {}
        }
    }
    facts
}

/// Function tools carry `name`; built-in tools (local_shell, web_search) only a `type`;
/// namespaces group further tools, which are offered as `namespace.name`.
fn collect_tool_names(tools: &[Value], names: &mut Vec<String>) {
    for tool in tools {
        let nested = array(tool, "tools");
        if nested.is_empty() {
            names.extend(str_field(tool, "name").or_else(|| str_field(tool, "type")));
            continue;
        }
        let namespace = str_field(tool, "name").unwrap_or_default();
        let mut inner = Vec::new();
        collect_tool_names(nested, &mut inner);
        names.extend(inner.into_iter().map(|name| format!("{namespace}.{name}")));
    }
}

//! Each wire's event sequence is well formed and folds back into exactly the scripted turn.

use intendant_testkit::{
    FakeModelServer, Reasoning, Scenario, StopKind, ToolCallSpec, Turn, Usage, Wire,
};
use serde_json::{Value, json};

use super::support::{Event, parse_sse, post, request_for, stream, user_message};

/// A turn folded back from events, in wire-neutral terms.
#[derive(Debug, Default, PartialEq)]
pub struct Folded {
    pub text: String,
    pub reasoning: String,
    pub signature: Option<String>,
    /// (id, name, arguments JSON)
    pub calls: Vec<(Option<String>, String, Value)>,
    /// (input, cached, output, reasoning)
    pub usage: (u64, u64, u64, u64),
    pub stop: String,
}

fn u(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// Folds Responses events, checking sequence numbers and item bookkeeping.
pub fn fold_responses(events: &[Event]) -> Folded {
    let mut out = Folded::default();
    let mut args: Vec<String> = Vec::new();
    let mut open_items: Vec<String> = Vec::new();
    let mut last_sequence = None;
    for (index, event) in events.iter().enumerate() {
        let data = event.json();
        let kind = data["type"].as_str().unwrap().to_owned();
        assert_eq!(
            event.name.as_deref(),
            Some(kind.as_str()),
            "event name matches type"
        );
        let sequence = data["sequence_number"].as_u64().expect("sequence_number");
        assert!(
            last_sequence.is_none_or(|last| sequence > last),
            "sequence numbers increase"
        );
        last_sequence = Some(sequence);
        if index == 0 {
            assert_eq!(kind, "response.created");
        }
        match kind.as_str() {
            "response.output_item.added" => {
                open_items.push(data["item"]["id"].as_str().unwrap().to_owned());
                if data["item"]["type"] == "function_call" {
                    args.push(String::new());
                }
            }
            "response.output_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta" => {
                let item = data["item_id"].as_str().unwrap();
                assert!(
                    open_items.iter().any(|id| id == item),
                    "delta for an added item"
                );
                let delta = data["delta"].as_str().unwrap();
                match kind.as_str() {
                    "response.output_text.delta" => out.text.push_str(delta),
                    "response.reasoning_summary_text.delta" => out.reasoning.push_str(delta),
                    _ => args.last_mut().unwrap().push_str(delta),
                }
            }
            "response.output_item.done" => {
                let item = &data["item"];
                match item["type"].as_str().unwrap() {
                    "function_call" => {
                        let streamed = &args[out.calls.len()];
                        assert_eq!(
                            item["arguments"].as_str().unwrap(),
                            streamed,
                            "deltas add up to arguments"
                        );
                        out.calls.push((
                            item["call_id"].as_str().map(str::to_owned),
                            item["name"].as_str().unwrap().to_owned(),
                            serde_json::from_str(streamed).unwrap(),
                        ));
                    }
                    "reasoning" => {
                        out.signature = item["encrypted_content"].as_str().map(str::to_owned)
                    }
                    _ => {}
                }
            }
            "response.completed" | "response.incomplete" => {
                assert_eq!(index, events.len() - 1, "terminal event is last");
                let usage = &data["response"]["usage"];
                out.usage = (
                    u(usage, "/input_tokens"),
                    u(usage, "/input_tokens_details/cached_tokens"),
                    u(usage, "/output_tokens"),
                    u(usage, "/output_tokens_details/reasoning_tokens"),
                );
                out.stop = data["response"]["status"].as_str().unwrap().to_owned();
            }
            _ => {}
        }
    }
    out
}

/// Folds Chat Completions chunks, assembling tool calls by index.
pub fn fold_chat(events: &[Event]) -> Folded {
    let mut out = Folded::default();
    let mut calls: Vec<(Option<String>, String, String)> = Vec::new();
    assert_eq!(
        events.last().unwrap().data,
        "[DONE]",
        "[DONE] ends the stream"
    );
    for event in &events[..events.len() - 1] {
        let data = event.json();
        assert_eq!(data["object"], "chat.completion.chunk");
        if let Some(usage) = data.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(data["choices"], json!([]), "usage chunk has empty choices");
            out.usage = (
                u(usage, "/prompt_tokens"),
                u(usage, "/prompt_tokens_details/cached_tokens"),
                u(usage, "/completion_tokens"),
                u(usage, "/completion_tokens_details/reasoning_tokens"),
            );
            continue;
        }
        let choice = &data["choices"][0];
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            out.text.push_str(text);
        }
        if let Some(text) = delta["reasoning_content"].as_str() {
            out.reasoning.push_str(text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                calls.push((
                    call["id"].as_str().map(str::to_owned),
                    String::new(),
                    String::new(),
                ));
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                calls[index].1.push_str(name);
            }
            if let Some(piece) = call.pointer("/function/arguments").and_then(Value::as_str) {
                calls[index].2.push_str(piece);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            out.stop = reason.to_owned();
        }
    }
    out.calls = calls
        .into_iter()
        .map(|(id, name, args)| (id, name, serde_json::from_str(&args).unwrap()))
        .collect();
    out
}

/// Folds Anthropic events, checking block bookkeeping.
pub fn fold_anthropic(events: &[Event]) -> Folded {
    let mut out = Folded::default();
    assert_eq!(
        events.first().unwrap().name.as_deref(),
        Some("message_start")
    );
    assert_eq!(events.last().unwrap().name.as_deref(), Some("message_stop"));
    let mut blocks: Vec<(String, Value, String)> = Vec::new();
    let mut open: Option<u64> = None;
    for event in events {
        let data = event.json();
        assert_eq!(
            event.name.as_deref(),
            data["type"].as_str(),
            "event name matches type"
        );
        match data["type"].as_str().unwrap() {
            "message_start" => {
                let usage = &data["message"]["usage"];
                out.usage.0 = u(usage, "/input_tokens") + u(usage, "/cache_read_input_tokens");
                out.usage.1 = u(usage, "/cache_read_input_tokens");
            }
            "content_block_start" => {
                assert!(open.is_none(), "blocks do not overlap");
                let index = data["index"].as_u64().unwrap();
                assert_eq!(index as usize, blocks.len(), "block indexes count up");
                open = Some(index);
                let block = data["content_block"].clone();
                blocks.push((
                    block["type"].as_str().unwrap().to_owned(),
                    block,
                    String::new(),
                ));
            }
            "content_block_delta" => {
                assert_eq!(open, data["index"].as_u64(), "delta for the open block");
                let delta = &data["delta"];
                let block = blocks.last_mut().unwrap();
                match delta["type"].as_str().unwrap() {
                    "text_delta" => out.text.push_str(delta["text"].as_str().unwrap()),
                    "thinking_delta" => out.reasoning.push_str(delta["thinking"].as_str().unwrap()),
                    "signature_delta" => {
                        out.signature = delta["signature"].as_str().map(str::to_owned)
                    }
                    "input_json_delta" => block.2.push_str(delta["partial_json"].as_str().unwrap()),
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(open.take(), data["index"].as_u64());
                let (kind, start, json) = blocks.last().unwrap();
                if kind == "tool_use" {
                    out.calls.push((
                        start["id"].as_str().map(str::to_owned),
                        start["name"].as_str().unwrap().to_owned(),
                        serde_json::from_str(json).unwrap(),
                    ));
                }
            }
            "message_delta" => {
                out.stop = data["delta"]["stop_reason"].as_str().unwrap().to_owned();
                out.usage.2 = u(&data["usage"], "/output_tokens");
            }
            "ping" | "message_stop" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    out
}

/// Folds Gemini chunks; usage and finish reason come from the last chunk.
pub fn fold_gemini(events: &[Event]) -> Folded {
    let mut out = Folded::default();
    for (index, event) in events.iter().enumerate() {
        assert!(event.name.is_none(), "Gemini sends data-only events");
        let data = event.json();
        let candidate = &data["candidates"][0];
        for part in candidate["content"]["parts"].as_array().unwrap() {
            if let Some(signature) = part["thoughtSignature"].as_str() {
                out.signature = Some(signature.to_owned());
            }
            if let Some(call) = part.get("functionCall") {
                out.calls.push((
                    None,
                    call["name"].as_str().unwrap().to_owned(),
                    call["args"].clone(),
                ));
            } else if part["thought"] == true {
                out.reasoning.push_str(part["text"].as_str().unwrap());
            } else if let Some(text) = part["text"].as_str() {
                out.text.push_str(text);
            }
        }
        if index == events.len() - 1 {
            let usage = &data["usageMetadata"];
            out.usage = (
                u(usage, "/promptTokenCount"),
                u(usage, "/cachedContentTokenCount"),
                u(usage, "/candidatesTokenCount") + u(usage, "/thoughtsTokenCount"),
                u(usage, "/thoughtsTokenCount"),
            );
            out.stop = candidate["finishReason"].as_str().unwrap().to_owned();
        } else {
            assert!(
                candidate.get("finishReason").is_none(),
                "only the last chunk finishes"
            );
        }
    }
    out
}

pub fn fold(wire: Wire, events: &[Event]) -> Folded {
    match wire {
        Wire::OpenAiResponses => fold_responses(events),
        Wire::OpenAiChat => fold_chat(events),
        Wire::Anthropic => fold_anthropic(events),
        Wire::Gemini => fold_gemini(events),
    }
}

fn rich_turn() -> Turn {
    Turn {
        text: Some("Grüße, 世界 🌍! \"quoted\" \\ back".into()),
        reasoning: Some(Reasoning {
            text: "Think: ünïcödé 🤔".into(),
            signature: None,
        }),
        tool_calls: vec![
            ToolCallSpec::new(
                "shell",
                json!({ "command": ["echo", "a \"b\" ✓"], "n": -1.5e3 }),
            ),
            ToolCallSpec::new(
                "shell",
                json!({ "command": ["ls"], "nested": { "k": [1, 2, null] } }),
            ),
        ],
        usage: Usage {
            input: 1200,
            cached: 1000,
            output: 90,
            reasoning: 30,
        },
        ..Turn::default()
    }
}

fn expected_stop(wire: Wire, calls: bool) -> &'static str {
    match (wire, calls) {
        (Wire::OpenAiResponses, _) => "completed",
        (Wire::OpenAiChat, true) => "tool_calls",
        (Wire::OpenAiChat, false) => "stop",
        (Wire::Anthropic, true) => "tool_use",
        (Wire::Anthropic, false) => "end_turn",
        (Wire::Gemini, _) => "STOP",
    }
}

#[tokio::test]
async fn every_wire_streams_text_reasoning_parallel_calls_and_usage() {
    for wire in Wire::ALL {
        for delta_chars in [1, 5, 100] {
            let mut turn = rich_turn();
            turn.delivery.delta_chars = delta_chars;
            let server = FakeModelServer::start(Scenario::new(vec![turn.clone()]))
                .await
                .unwrap();
            let events = stream(&server, wire, vec![user_message(wire, "go")]).await;
            let folded = fold(wire, &events);
            assert_eq!(folded.text, turn.text.clone().unwrap(), "{wire}");
            assert_eq!(folded.calls.len(), 2, "{wire}: parallel calls");
            for (got, want) in folded.calls.iter().zip(&turn.tool_calls) {
                assert_eq!(got.1, want.name, "{wire}");
                assert_eq!(
                    got.2, want.arguments,
                    "{wire}: arguments survive delta splitting"
                );
            }
            match wire {
                Wire::Gemini => {}
                Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => {
                    let ids: Vec<_> = folded.calls.iter().map(|c| c.0.clone().unwrap()).collect();
                    assert_ne!(ids[0], ids[1], "{wire}: distinct call ids");
                }
            }
            assert_eq!(folded.reasoning, "Think: ünïcödé 🤔", "{wire}");
            match wire {
                Wire::OpenAiChat => assert_eq!(folded.signature, None),
                Wire::OpenAiResponses | Wire::Anthropic | Wire::Gemini => {
                    assert!(
                        folded.signature.as_ref().is_some_and(|s| s.len() > 40),
                        "{wire}: signature"
                    )
                }
            }
            let reasoning_reported = if wire == Wire::Anthropic { 0 } else { 30 };
            assert_eq!(
                folded.usage,
                (1200, 1000, 90, reasoning_reported),
                "{wire}: usage"
            );
            assert_eq!(folded.stop, expected_stop(wire, true), "{wire}");
            assert_eq!(server.invariant_violations(), Vec::<String>::new());
        }
    }
}

#[tokio::test]
async fn plain_text_turn_and_max_tokens_stop() {
    for wire in Wire::ALL {
        let long = Turn {
            stop: StopKind::MaxTokens,
            ..Turn::text("cut short")
        };
        let server = FakeModelServer::start(Scenario::new(vec![Turn::text("hello"), long]))
            .await
            .unwrap();
        let folded = fold(
            wire,
            &stream(&server, wire, vec![user_message(wire, "a")]).await,
        );
        assert_eq!(
            (folded.text.as_str(), folded.stop.as_str()),
            ("hello", expected_stop(wire, false))
        );
        assert!(
            folded.calls.is_empty() && folded.signature.is_none(),
            "{wire}"
        );
        let folded = fold(
            wire,
            &stream(&server, wire, vec![user_message(wire, "b")]).await,
        );
        let want = match wire {
            Wire::OpenAiResponses => "incomplete",
            Wire::OpenAiChat => "length",
            Wire::Anthropic => "max_tokens",
            Wire::Gemini => "MAX_TOKENS",
        };
        assert_eq!(folded.stop, want, "{wire}");
    }
}

#[tokio::test]
async fn gemini_uses_crlf_framing_and_puts_the_signature_on_the_first_call() {
    let server = FakeModelServer::start(Scenario::new(vec![rich_turn()]))
        .await
        .unwrap();
    let (path, body) = request_for(Wire::Gemini, vec![user_message(Wire::Gemini, "go")]);
    let reply = post(&server, &path, &body).await;
    assert!(reply.body.contains("\r\n\r\n"));
    assert!(!reply.body.replace("\r\n", "").contains('\n'), "no bare LF");
    let events = parse_sse(&reply.body);
    let call_chunk = events
        .iter()
        .map(Event::json)
        .find(|d| d.to_string().contains("functionCall"))
        .unwrap();
    let parts = call_chunk["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(parts.len(), 2, "parallel calls arrive in one chunk");
    assert!(
        parts[0].get("thoughtSignature").is_some() && parts[1].get("thoughtSignature").is_none()
    );
}

#[tokio::test]
async fn responses_omits_encrypted_reasoning_unless_included() {
    let server = FakeModelServer::start(Scenario::new(vec![rich_turn()]))
        .await
        .unwrap();
    let (path, mut body) = request_for(Wire::OpenAiResponses, vec![]);
    body.as_object_mut().unwrap().remove("include");
    let reply = post(&server, &path, &body).await;
    let folded = fold_responses(&parse_sse(&reply.body));
    assert_eq!(folded.signature, None);
    assert_eq!(folded.reasoning, "Think: ünïcödé 🤔");
}

#[tokio::test]
async fn non_streaming_requests_get_the_whole_turn_as_json() {
    for wire in Wire::ALL {
        let server = FakeModelServer::start(Scenario::new(vec![rich_turn()]))
            .await
            .unwrap();
        let (mut path, mut body) = request_for(wire, vec![user_message(wire, "go")]);
        body.as_object_mut()
            .unwrap()
            .insert("stream".into(), json!(false));
        if wire == Wire::Gemini {
            path = "/v1beta/models/gemini-test:generateContent".into();
        }
        let reply = post(&server, &path, &body).await;
        assert_eq!(reply.status, 200);
        assert!(
            reply.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let value: Value = serde_json::from_str(&reply.body).unwrap();
        let text = value.to_string();
        assert!(text.contains("Grüße, 世界 🌍!"), "{wire}: {text}");
        assert!(
            text.contains("nested"),
            "{wire}: tool call arguments present"
        );
    }
}

#[tokio::test]
async fn model_listing_answers_in_each_shape() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("x")]))
        .await
        .unwrap();
    let client = intendant_netguard::http::client().unwrap();
    let base = format!("http://{}", server.addr());
    let openai = get_json(client.get(format!("{base}/v1/models"))).await;
    assert_eq!(openai["data"][0]["id"], "fake-model");
    let anthropic = get_json(
        client
            .get(format!("{base}/v1/models"))
            .header("anthropic-version", "2023-06-01"),
    )
    .await;
    assert_eq!(anthropic["data"][0]["type"], "model");
    let gemini = get_json(client.get(format!("{base}/v1beta/models"))).await;
    assert_eq!(gemini["models"][0]["name"], "models/fake-model");
    let missing = client.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(server.turns_consumed(), 0, "listings consume no turn");
}

async fn get_json(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

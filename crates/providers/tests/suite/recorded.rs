//! The replay suite's recorded streams (`intendant_testkit::stream_fixture`) decoded by each
//! wire's parser alone, at the event level: refusals, content parts, cut calls, Gemini 3 ids.
//! The same streams run through the real binary in the CLI's replay suite.

use intendant_providers::anthropic::MessagesParser;
use intendant_providers::gemini::{GeminiParser, request_body};
use intendant_providers::openai_chat::ChatParser;
use intendant_providers::openai_responses::ResponsesParser;
use intendant_providers::sse::{WireParser, WireStreamDecoder};
use intendant_providers::{
    ChatRequest, ChatResponse, ConversationItem, ResponseAccumulator, StopReason, StreamEvent,
    ToolCall,
};
use intendant_testkit::stream_fixture;
use serde_json::json;

/// Decodes a recorded stream in 7-byte pieces (cuts inside events and characters).
fn decode<P: WireParser>(parser: P, wire: &str, case: &str) -> Vec<StreamEvent> {
    let bytes = std::fs::read(stream_fixture(wire, case)).unwrap();
    let mut decoder = WireStreamDecoder::new(parser);
    let mut events = Vec::new();
    for piece in bytes.chunks(7) {
        decoder.feed(piece, &mut events);
    }
    decoder.finish(&mut events);
    events
}

fn fold(events: &[StreamEvent]) -> ChatResponse {
    let mut acc = ResponseAccumulator::new("test");
    for event in events {
        acc.push(event);
    }
    acc.finish().unwrap()
}

#[test]
fn chat_refusal_is_refusal_text_and_a_refusal_stop() {
    let response = fold(&decode(ChatParser::new(), "openai_chat", "refusal.sse"));
    assert_eq!(response.refusal, "I'm sorry, but I can't help with that.");
    assert_eq!(response.text, "");
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
    assert!(response.refused());
}

#[test]
fn responses_refusal_is_refusal_text_and_a_refusal_stop() {
    let response = fold(&decode(
        ResponsesParser::default(),
        "openai_responses",
        "refusal.sse",
    ));
    assert_eq!(response.refusal, "I'm sorry, but I can't assist with that.");
    assert_eq!(response.text, "");
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
}

#[test]
fn anthropic_refusal_keeps_the_partial_text_apart_from_the_explanation() {
    let response = fold(&decode(
        MessagesParser::default(),
        "anthropic",
        "refusal.sse",
    ));
    assert_eq!(response.text, "Here is how the exploit chain works:");
    assert_eq!(
        response.refusal,
        "This request was declined because it could enable cyber harm."
    );
    assert_eq!(response.stop_reason, Some(StopReason::Refusal));
}

#[test]
fn magistral_parts_are_reasoning_and_text_without_warnings() {
    let events = decode(
        ChatParser::new(),
        "openai_chat",
        "magistral_thinking_parts.sse",
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::Warning { .. }))
    );
    let response = fold(&events);
    assert_eq!(
        response.reasoning_text,
        "Okay, the userwants a one-word greeting. Hello is the simplest."
    );
    assert_eq!(response.text, "Hello!");
}

#[test]
fn an_unknown_part_is_one_warning_and_the_text_goes_on() {
    let response = fold(&decode(
        ChatParser::new(),
        "openai_chat",
        "mistral_reference_part.sse",
    ));
    assert_eq!(response.text, "The release is dated 2 December.");
    assert_eq!(response.warnings.len(), 1, "{:?}", response.warnings);
    assert!(response.warnings[0].contains("\"reference\""));
}

#[test]
fn calls_cut_by_the_output_cap_are_set_apart_on_every_streaming_wire() {
    for (events, name) in [
        (
            decode(ChatParser::new(), "openai_chat", "length_cut_tool_call.sse"),
            "edit_file",
        ),
        (
            decode(
                ResponsesParser::default(),
                "openai_responses",
                "incomplete_cut_call.sse",
            ),
            "edit_file",
        ),
        (
            decode(
                MessagesParser::default(),
                "anthropic",
                "max_tokens_cut_tool_use.sse",
            ),
            "edit_file",
        ),
    ] {
        let response = fold(&events);
        assert!(response.truncated());
        assert!(response.tool_calls.is_empty(), "{:?}", response.tool_calls);
        assert_eq!(response.cut_calls.len(), 1);
        assert_eq!(response.cut_calls[0].name, name);
    }
}

fn call_events(index: usize, id: &str, arguments: &str, streamed: bool) -> Vec<StreamEvent> {
    let call = ToolCall {
        call_id: id.into(),
        name: "exec_command".into(),
        arguments: arguments.into(),
        ..ToolCall::default()
    };
    let mut events = Vec::new();
    if streamed {
        events.push(StreamEvent::ToolCallStart {
            index,
            call_id: id.into(),
            name: "exec_command".into(),
        });
    }
    events.push(StreamEvent::ToolCallDone { index, call });
    events
}

#[test]
fn only_calls_the_cap_interrupted_are_cut() {
    let truncated = |events: Vec<StreamEvent>| {
        let mut all = events;
        all.push(StreamEvent::Completed {
            stop_reason: StopReason::MaxTokens,
        });
        fold(&all)
    };
    // Complete calls before the cut run; a streamed call closed with nothing in it was cut.
    let mut events = call_events(0, "a", r#"{"command":"ls"}"#, true);
    events.extend(call_events(1, "b", "{}", true));
    let response = truncated(events);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].call_id, "a");
    assert_eq!(response.cut_calls[0].call_id, "b");
    // A call that arrived whole (Gemini) was not interrupted, even with empty arguments.
    let response = truncated(call_events(0, "g", "{}", false));
    assert_eq!(response.tool_calls.len(), 1);
    assert!(response.cut_calls.is_empty());
    // Nor is one whose start and whole arguments came in one piece, as the Gemini parser
    // streams a call.
    let mut events = call_events(0, "w", "{}", true);
    events.insert(
        1,
        StreamEvent::ToolCallArgumentsDelta {
            index: 0,
            delta: "{}".into(),
        },
    );
    let response = truncated(events);
    assert_eq!(response.tool_calls.len(), 1);
    assert!(response.cut_calls.is_empty());
    // Text after a streamed call: the call was finished before the cut.
    let mut events = call_events(0, "c", "{}", true);
    events.push(StreamEvent::TextDelta { text: "and".into() });
    assert_eq!(truncated(events).tool_calls.len(), 1);
    // Without truncation nothing is cut, whatever the arguments.
    let mut events = call_events(0, "d", r#"{"command":"#, true);
    events.push(StreamEvent::Completed {
        stop_reason: StopReason::ToolUse,
    });
    let response = fold(&events);
    assert_eq!(response.tool_calls.len(), 1);
    assert!(response.cut_calls.is_empty());
}

#[test]
fn gemini3_ids_are_kept_and_echoed_on_calls_and_responses() {
    let response = fold(&decode(
        GeminiParser::new(),
        "gemini",
        "gemini3_function_call_ids.sse",
    ));
    let ids: Vec<(&str, bool)> = response
        .tool_calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.provider_id))
        .collect();
    assert_eq!(ids, [("u7f3qk2p", true), ("c9m1xw4e", true)]);
    let mut items: Vec<ConversationItem> = response
        .tool_calls
        .iter()
        .cloned()
        .map(ConversationItem::ToolCall)
        .collect();
    for call in &response.tool_calls {
        items.push(ConversationItem::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: "ok".into(),
            is_error: false,
            images: Vec::new(),
        });
    }
    let body = request_body(&ChatRequest {
        model: "gemini-3-pro-preview".into(),
        items,
        ..ChatRequest::default()
    })
    .unwrap();
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let parts = &body["contents"];
    assert_eq!(parts[0]["parts"][0]["functionCall"]["id"], "u7f3qk2p");
    assert_eq!(parts[0]["parts"][1]["functionCall"]["id"], "c9m1xw4e");
    assert_eq!(
        parts[1]["parts"],
        json!([
            {"functionResponse": {"name": "exec_command", "response": {"output": "ok"}, "id": "u7f3qk2p"}},
            {"functionResponse": {"name": "inspect_path", "response": {"output": "ok"}, "id": "c9m1xw4e"}},
        ])
    );
}

#[test]
fn safety_stops_are_content_filter_stops() {
    let response = fold(&decode(
        GeminiParser::new(),
        "gemini",
        "prohibited_content.sse",
    ));
    assert_eq!(response.stop_reason, Some(StopReason::ContentFilter));
}

#[test]
fn server_errors_refusing_tool_definitions_are_recognised() {
    let http = |status: u16, message: &str| intendant_providers::ProviderError::Http {
        provider: "openai-chat",
        status,
        message: message.into(),
        retry_after_ms: None,
    };
    let ollama =
        std::fs::read_to_string(stream_fixture("openai_chat", "ollama_tools_rejected.json"))
            .unwrap();
    for refused in [
        http(400, &ollama),
        http(
            500,
            r#"{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}"#,
        ),
        http(
            400,
            r#"{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}"#,
        ),
        http(
            400,
            "Function calling is not enabled for models/gemma-3-27b-it",
        ),
    ] {
        assert!(refused.rejects_tools(), "{refused}");
        assert!(!refused.is_retryable(), "retrying cannot help: {refused}");
    }
    for other in [
        http(400, "context_length_exceeded: too many tokens"),
        http(401, "invalid api key for tools"),
        http(429, "tool use is rate limited: not supported right now"),
    ] {
        assert!(!other.rejects_tools(), "{other}");
        assert_eq!(
            other.is_retryable(),
            matches!(
                &other,
                intendant_providers::ProviderError::Http { status: 429, .. }
            )
        );
    }
}

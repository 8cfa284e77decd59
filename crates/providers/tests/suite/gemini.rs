//! Gemini wire: golden fixtures (CRLF framed), request shape, thought signatures echoed.

use intendant_providers::gemini::request_body;
use intendant_providers::{
    ChatRequest, ConversationItem, OutputSchema, ProviderError, ProviderKind, ReasoningEffort,
    StopReason, StreamEvent, ToolChoice, ToolDefinition, Usage, build_provider,
};
use serde_json::json;

use super::support::{
    Canned, GREETING_USAGE, ScriptServer, TEST_KEY, assert_greeting, config, echo_request, fixture,
    fold, run, simple_request,
};

const KIND: ProviderKind = ProviderKind::Gemini;

async fn serve(name: &str) -> (ScriptServer, Vec<StreamEvent>) {
    let server = ScriptServer::start(vec![Canned::sse_chunked(&fixture("gemini", name), 31)]).await;
    let (cfg, _) = config(&server, "");
    let events = run(KIND, cfg, &simple_request("models/gemini-2.5-flash"))
        .await
        .unwrap();
    (server, events)
}

#[tokio::test]
async fn text_stream_url_auth_and_usage_from_the_last_chunk() {
    let bytes = fixture("gemini", "text.sse");
    assert!(
        bytes.windows(4).any(|w| w == b"\r\n\r\n"),
        "fixture is CRLF framed"
    );
    let (server, events) = serve("text.sse").await;
    let resp = fold(&events).unwrap();
    assert_greeting(&resp, GREETING_USAGE);
    let usage_events = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Usage { .. }))
        .count();
    assert_eq!(usage_events, 1, "usage reported once, from the last chunk");
    let req = &server.requests()[0];
    assert_eq!(
        req.request_line,
        "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.1"
    );
    assert_eq!(req.header("x-goog-api-key"), Some(TEST_KEY));
    assert!(!req.request_line.contains("key="));
    let body = req.json();
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [{"text": "Say hello."}]}])
    );
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"includeThoughts": true})
    );
}

#[tokio::test]
async fn thoughts_parallel_calls_synthesized_ids_and_signature_echo() {
    let (_, events) = serve("tools_thinking.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(
        resp.reasoning_text,
        "**Planning the calls**\n\nI will list the directory and read main.rs."
    );
    assert_eq!(
        resp.usage,
        Some(Usage {
            input_tokens: 812,
            cached_input_tokens: 512,
            output_tokens: 40 + 118,
            reasoning_tokens: 118
        })
    );
    let calls = &resp.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "exec_command");
    assert_eq!(calls[0].arguments, "{\"command\":\"ls -la\"}");
    assert_eq!(calls[1].arguments, "{\"path\":\"src/main.rs\"}");
    assert!(calls[0].call_id.starts_with("gemini_") && calls[0].call_id != calls[1].call_id);
    let sig = "CiQB0e2Kb7sWb1dtOaG1kxq0MrH9vJf/FtsbC8lPYkKk7H4q0Y4KZQHR7YpvThought==";
    assert_eq!(calls[0].thought_signature.as_deref(), Some(sig));
    assert_eq!(calls[1].thought_signature, None);

    let mut items = vec![ConversationItem::User {
        text: "List files.".into(),
    }];
    items.extend(
        resp.reasoning
            .iter()
            .cloned()
            .map(ConversationItem::Reasoning),
    );
    items.extend(calls.iter().cloned().map(ConversationItem::ToolCall));
    for (call, out) in calls.iter().zip(["a\nb", "missing"]) {
        items.push(ConversationItem::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: out.into(),
            is_error: out == "missing",
            images: Vec::new(),
        });
    }
    let request = ChatRequest {
        model: "gemini-2.5-pro".into(),
        items,
        tools: vec![ToolDefinition {
            name: "exec_command".into(),
            description: "Run".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        reasoning_effort: Some(ReasoningEffort::Low),
        max_output_tokens: Some(2048),
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "List files."}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "exec_command", "args": {"command": "ls -la"}}, "thoughtSignature": sig},
                {"functionCall": {"name": "inspect_path", "args": {"path": "src/main.rs"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "exec_command", "response": {"output": "a\nb"}}},
                {"functionResponse": {"name": "inspect_path", "response": {"error": "missing"}}}]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations": [{"name": "exec_command", "description": "Run", "parameters": {"type": "object"}}]}])
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 2048, "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 1024}})
    );
}

#[tokio::test]
async fn signature_on_a_text_part_rides_on_the_next_model_part() {
    let (_, events) = serve("max_tokens_text_signature.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(resp.text, "Short answer");
    assert_eq!(
        resp.reasoning[0].signature.as_deref(),
        Some("Ct0BAdHtim8sig")
    );
    let request = echo_request("gemini-2.5-flash", resp);
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [{"text": "Short answer", "thoughtSignature": "Ct0BAdHtim8sig"}]})
    );
}

#[tokio::test]
async fn safety_stop_and_stream_error_object() {
    let (_, events) = serve("safety.sse").await;
    assert_eq!(
        fold(&events).unwrap().stop_reason,
        Some(StopReason::ContentFilter)
    );

    let (_, events) = serve("error_unavailable.sse").await;
    match events.last().unwrap() {
        StreamEvent::Error {
            message, retryable, ..
        } => {
            assert!(
                *retryable && message.starts_with("UNAVAILABLE:"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tool_choice_and_schema_shapes() {
    let request = ChatRequest {
        model: "gemini-2.0-flash".into(),
        tools: vec![ToolDefinition {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        tool_choice: ToolChoice::Tool { name: "f".into() },
        output_schema: Some(OutputSchema {
            name: "o".into(),
            schema: json!({"type": "object"}),
        }),
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}})
    );
    assert_eq!(
        body["generationConfig"],
        json!({"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}})
    );
}

#[tokio::test]
async fn bad_model_name_is_refused_before_sending() {
    let server = ScriptServer::start(vec![Canned::status(500, "")]).await;
    let (cfg, _) = config(&server, "");
    let provider = build_provider(KIND, cfg).unwrap();
    let err = provider
        .chat_stream(&simple_request("../evil?x=1"))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::Config(_)));
    assert!(server.requests().is_empty());
}

//! Anthropic Messages wire: golden fixtures, request shape, cache breakpoints, thinking echo.

use intendant_providers::anthropic::request_body;
use intendant_providers::{
    ChatRequest, ConversationItem, OutputSchema, ProviderKind, ReasoningEffort, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolDefinition, Usage,
};
use serde_json::json;

use super::support::{
    Canned, ScriptServer, TEST_KEY, assert_greeting, config, echo_request, fixture, fold, run,
    simple_request,
};

const KIND: ProviderKind = ProviderKind::Anthropic;

async fn serve(name: &str) -> (ScriptServer, Vec<StreamEvent>) {
    let server =
        ScriptServer::start(vec![Canned::sse_chunked(&fixture("anthropic", name), 29)]).await;
    let (cfg, _) = config(&server, "");
    let events = run(KIND, cfg, &simple_request("claude-sonnet-4-5"))
        .await
        .unwrap();
    (server, events)
}

fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "exec_command".into(),
        description: "Run a shell command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }]
}

fn final_error(events: &[StreamEvent]) -> (String, bool) {
    match events.last().unwrap() {
        StreamEvent::Error {
            message, retryable, ..
        } => (message.clone(), *retryable),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn text_stream_headers_and_cache_usage() {
    let (server, events) = serve("text.sse").await;
    let resp = fold(&events).unwrap();
    assert_greeting(
        &resp,
        Usage {
            input_tokens: 12 + 1994,
            cached_input_tokens: 1994,
            output_tokens: 18,
            reasoning_tokens: 0,
        },
    );
    let req = &server.requests()[0];
    assert_eq!(req.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(req.header("x-api-key"), Some(TEST_KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        req.header("anthropic-beta"),
        Some("prompt-caching-2024-07-31")
    );
    assert_eq!(req.header("authorization"), None);
    let body = req.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(
        body["max_tokens"],
        json!(64_000),
        "from the capability table"
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
    );
}

#[tokio::test]
async fn thinking_and_parallel_tools_then_echo_back() {
    let (_, events) = serve("tools_thinking.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.text, "I'll check.");
    assert_eq!(
        resp.reasoning_text,
        "I need to look at the files first; two calls at once."
    );
    assert_eq!(resp.usage.unwrap().input_tokens, 472 + 2048);
    assert_eq!(resp.usage.unwrap().output_tokens, 89);
    let sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+Xa/Qx8sdUD/sig==";
    assert_eq!(resp.reasoning[0].signature.as_deref(), Some(sig));
    assert_eq!(
        resp.tool_calls,
        vec![
            ToolCall {
                call_id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "exec_command".into(),
                arguments: "{\"command\": \"ls -la\"}".into(),
                thought_signature: None,
                provider_id: false
            },
            ToolCall {
                call_id: "toolu_01A09q90qw90lq917835lq9".into(),
                name: "inspect_path".into(),
                arguments: "{\"path\": \"src/main.rs\"}".into(),
                thought_signature: None,
                provider_id: false
            },
        ]
    );

    let mut items = vec![ConversationItem::User {
        text: "List files.".into(),
    }];
    items.push(ConversationItem::Reasoning(resp.reasoning[0].clone()));
    items.push(ConversationItem::Assistant {
        text: resp.text.clone(),
    });
    items.extend(
        resp.tool_calls
            .iter()
            .cloned()
            .map(ConversationItem::ToolCall),
    );
    items.push(ConversationItem::ToolResult {
        call_id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
        name: "exec_command".into(),
        output: "a\nb".into(),
        is_error: false,
        images: Vec::new(),
    });
    items.push(ConversationItem::ToolResult {
        call_id: "toolu_01A09q90qw90lq917835lq9".into(),
        name: "inspect_path".into(),
        output: "no such file".into(),
        is_error: true,
        images: Vec::new(),
    });
    let request = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        system: "sys".into(),
        items,
        tools: tools().into(),
        reasoning_effort: Some(ReasoningEffort::Medium),
        max_output_tokens: Some(16_000),
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    let text = body.to_string();
    assert!(text.contains(sig));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "List files.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I need to look at the files first; two calls at once.", "signature": sig},
                {"type": "text", "text": "I'll check."},
                {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "exec_command", "input": {"command": "ls -la"}},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "inspect_path", "input": {"path": "src/main.rs"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "content": "a\nb"},
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "no such file",
                 "is_error": true, "cache_control": {"type": "ephemeral"}}]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"name": "exec_command", "description": "Run a shell command", "input_schema": tools()[0].parameters}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "auto"}));
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 8192})
    );
    assert_eq!(body["max_tokens"], json!(16_000));
}

#[test]
fn three_breakpoints_at_most_on_a_long_conversation() {
    let mut items = Vec::new();
    for i in 0..6 {
        items.push(ConversationItem::User {
            text: format!("u{i}"),
        });
        items.push(ConversationItem::Assistant {
            text: format!("a{i}"),
        });
    }
    items.push(ConversationItem::User {
        text: "last".into(),
    });
    let request = ChatRequest {
        model: "claude-opus-4-5".into(),
        system: "sys".into(),
        items,
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    let text = body.to_string();
    assert_eq!(text.matches("cache_control").count(), 3);
    let messages = body["messages"].as_array().unwrap();
    let n = messages.len();
    assert!(messages[n - 1]["content"][0].get("cache_control").is_some());
    assert!(messages[n - 3]["content"][0].get("cache_control").is_some());
    assert!(messages[n - 5]["content"][0].get("cache_control").is_none());
}

#[test]
fn forced_tool_disables_thinking_and_schema_goes_after_the_cached_system() {
    let request = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        system: "sys".into(),
        items: vec![ConversationItem::User { text: "x".into() }],
        tools: tools().into(),
        tool_choice: ToolChoice::Tool {
            name: "exec_command".into(),
        },
        reasoning_effort: Some(ReasoningEffort::High),
        output_schema: Some(OutputSchema {
            name: "answer".into(),
            schema: json!({"type": "object"}),
        }),
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "exec_command"})
    );
    assert!(body.get("thinking").is_none());
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(
        body["system"][1]["text"]
            .as_str()
            .unwrap()
            .contains("{\"type\":\"object\"}")
    );
}

#[tokio::test]
async fn redacted_thinking_is_kept_and_echoed() {
    let (_, events) = serve("redacted_max_tokens.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    let data = resp.reasoning[0].redacted_data.clone().unwrap();
    assert!(data.starts_with("EmwKAhgB"));
    let request = echo_request("claude-sonnet-4-5", resp);
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"type": "redacted_thinking", "data": data})
    );
}

#[tokio::test]
async fn error_events_after_200_are_classified_by_type() {
    let (_, events) = serve("error_overloaded.sse").await;
    let (message, retryable) = final_error(&events);
    assert!(
        retryable && message == "overloaded_error: Overloaded",
        "{message}"
    );

    let (_, events) = serve("error_invalid.sse").await;
    let (message, retryable) = final_error(&events);
    assert!(
        !retryable && message.starts_with("invalid_request_error"),
        "{message}"
    );
}

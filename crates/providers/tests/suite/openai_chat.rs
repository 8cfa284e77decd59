//! Chat Completions wire: golden fixtures including server quirks, request shape.

use intendant_providers::openai_chat::request_body;
use intendant_providers::{
    ChatRequest, ConversationItem, OutputSchema, ProviderKind, ReasoningEffort, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolDefinition,
};
use serde_json::json;

use super::support::{
    Canned, GREETING_USAGE, ScriptServer, TEST_KEY, assert_greeting, config, fixture, fold, run,
    simple_request,
};

const KIND: ProviderKind = ProviderKind::OpenAiChat;

async fn serve(name: &str) -> (ScriptServer, Vec<StreamEvent>) {
    let server =
        ScriptServer::start(vec![Canned::sse_chunked(&fixture("openai_chat", name), 23)]).await;
    let (cfg, _) = config(&server, "/v1");
    let events = run(KIND, cfg, &simple_request("qwen3:8b")).await.unwrap();
    (server, events)
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: name.into(),
        arguments: args.into(),
        thought_signature: None,
        provider_id: false,
    }
}

#[tokio::test]
async fn text_stream_with_usage_chunk_and_done() {
    let (server, events) = serve("text.sse").await;
    let resp = fold(&events).unwrap();
    assert_greeting(&resp, GREETING_USAGE);
    let req = &server.requests()[0];
    assert_eq!(req.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    let body = req.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}])
    );
}

#[tokio::test]
async fn parallel_tool_call_fragments_assembled_by_index() {
    let (_, events) = serve("tools_parallel.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(
        resp.tool_calls,
        vec![
            call(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "exec_command",
                "{\"command\":\"ls -la\"}"
            ),
            call(
                "call_ABC9pD3xa9XTPNJ32zg2hcB",
                "inspect_path",
                "{\"path\":\"src/main.rs\"}"
            ),
        ]
    );
    assert_eq!(resp.usage.unwrap().cached_input_tokens, 64);
}

#[tokio::test]
async fn quirk_whole_calls_in_one_chunk_with_stop() {
    let (_, events) = serve("quirk_whole_calls.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(
        resp.tool_calls,
        vec![
            call("call_x0tpl6ak", "exec_command", "{\"command\":\"ls -la\"}"),
            call(
                "call_h7zs1rcw",
                "inspect_path",
                "{\"path\":\"src/main.rs\"}"
            ),
        ]
    );
    assert_eq!(resp.usage.unwrap().input_tokens, 201);
}

#[tokio::test]
async fn quirk_repeated_index_zero_without_ids() {
    let (_, events) = serve("quirk_index0_no_ids.sse").await;
    let resp = fold(&events).unwrap();
    let calls = &resp.tool_calls;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].name, "exec_command");
    assert_eq!(calls[0].arguments, "{\"command\":\"ls -la\"}");
    assert_eq!(calls[1].name, "inspect_path");
    assert_eq!(calls[1].arguments, "{\"path\":\"src/main.rs\"}");
    assert!(calls[0].call_id.starts_with("call_"));
    assert_ne!(calls[0].call_id, calls[1].call_id);
    assert_eq!(
        resp.usage.unwrap().input_tokens,
        99,
        "usage chunk with null choices"
    );
}

#[tokio::test]
async fn reasoning_content_and_length_stop() {
    let (_, events) = serve("reasoning_length.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(
        resp.reasoning_text,
        "Let me think about it. Ollama-style too."
    );
    assert_eq!(resp.text, "42");
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(resp.usage.unwrap().reasoning_tokens, 60);
}

#[tokio::test]
async fn error_chunk_after_200() {
    let (_, events) = serve("error_server.sse").await;
    match events.last().unwrap() {
        StreamEvent::Error {
            message, retryable, ..
        } => assert!(
            *retryable && message.starts_with("server_error:"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn stream_ending_after_finish_without_done_is_tolerated() {
    let text = String::from_utf8(fixture("openai_chat", "text.sse")).unwrap();
    let cut = text.find("data: [DONE]").unwrap();
    let server = ScriptServer::start(vec![Canned::sse_chunked(&text.as_bytes()[..cut], 64)]).await;
    let (cfg, _) = config(&server, "/v1");
    let events = run(KIND, cfg, &simple_request("m")).await.unwrap();
    assert_eq!(
        fold(&events).unwrap().stop_reason,
        Some(StopReason::EndTurn)
    );
}

#[test]
fn request_shape_with_history_tools_and_options() {
    let request = ChatRequest {
        model: "llama3.1".into(),
        system: "sys".into(),
        items: vec![
            ConversationItem::User { text: "go".into() },
            ConversationItem::Reasoning(Default::default()),
            ConversationItem::Assistant {
                text: "Checking.".into(),
            },
            ConversationItem::ToolCall(call("c1", "exec_command", "{\"command\":\"ls\"}")),
            ConversationItem::ToolCall(call("c2", "exec_command", "{\"command\":\"pwd\"}")),
            ConversationItem::ToolResult {
                call_id: "c1".into(),
                name: "exec_command".into(),
                output: "a".into(),
                is_error: false,
                images: Vec::new(),
            },
            ConversationItem::ToolResult {
                call_id: "c2".into(),
                name: "exec_command".into(),
                output: "/".into(),
                is_error: false,
                images: Vec::new(),
            },
            ConversationItem::ToolCall(call("c3", "exec_command", "{}")),
        ],
        tools: vec![ToolDefinition {
            name: "exec_command".into(),
            description: "Run".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(512),
        reasoning_effort: Some(ReasoningEffort::Low),
        output_schema: Some(OutputSchema {
            name: "o".into(),
            schema: json!({"type": "object"}),
        }),
        cache_key: None,
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "exec_command", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "exec_command", "arguments": "{\"command\":\"pwd\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a"},
            {"role": "tool", "tool_call_id": "c2", "content": "/"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "exec_command", "description": "Run", "parameters": {"type": "object"}}}])
    );
    assert_eq!(body["tool_choice"], json!("required"));
    assert_eq!(body["max_tokens"], json!(512));
    assert_eq!(body["reasoning_effort"], json!("low"));
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}, "strict": true}})
    );
}

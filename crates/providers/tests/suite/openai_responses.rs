//! OpenAI Responses wire: golden fixtures, request shape, reasoning echo-back.

use intendant_providers::openai_responses::request_body;
use intendant_providers::{
    ChatRequest, ConversationItem, OutputSchema, ProviderKind, ReasoningEffort, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolDefinition,
};
use serde_json::json;

use super::support::{
    Canned, GREETING_USAGE, ScriptServer, TEST_KEY, assert_greeting, config, fixture, fold, run,
    simple_request,
};

const KIND: ProviderKind = ProviderKind::OpenAi;

async fn serve(name: &str) -> (ScriptServer, Vec<StreamEvent>) {
    let server = ScriptServer::start(vec![Canned::sse_chunked(
        &fixture("openai_responses", name),
        37,
    )])
    .await;
    let (cfg, _) = config(&server, "/v1");
    let events = run(KIND, cfg, &simple_request("gpt-5")).await.unwrap();
    (server, events)
}

fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "exec_command".into(),
        description: "Run a shell command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    }]
}

#[tokio::test]
async fn text_stream_with_cached_usage_and_request_basics() {
    let (server, events) = serve("text.sse").await;
    let resp = fold(&events).unwrap();
    assert_greeting(&resp, GREETING_USAGE);
    let req = &server.requests()[0];
    assert_eq!(req.request_line, "POST /v1/responses HTTP/1.1");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    assert_eq!(req.header("accept"), Some("text/event-stream"));
    let body = req.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["store"], json!(false));
    assert_eq!(body["instructions"], json!("You are terse."));
    assert_eq!(
        body["input"],
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}])
    );
}

#[tokio::test]
async fn parallel_tool_calls_and_reasoning_then_echo_back() {
    let (_, events) = serve("tools_reasoning.sse").await;
    let starts: Vec<(usize, String)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStart { index, call_id, .. } => Some((*index, call_id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [(0, "call_Ab12".to_owned()), (1, "call_Cd34".to_owned())]
    );
    let resp = fold(&events).unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(
        resp.tool_calls,
        vec![
            ToolCall {
                call_id: "call_Ab12".into(),
                name: "exec_command".into(),
                arguments: "{\"command\":\"ls -la\"}".into(),
                thought_signature: None,
                provider_id: false
            },
            ToolCall {
                call_id: "call_Cd34".into(),
                name: "inspect_path".into(),
                arguments: "{\"path\":\"src/main.rs\"}".into(),
                thought_signature: None,
                provider_id: false
            },
        ]
    );
    assert_eq!(
        resp.reasoning_text,
        "**Checking files**\n\nI should list the directory first."
    );
    assert_eq!(resp.usage.unwrap().reasoning_tokens, 256);
    assert_eq!(resp.usage.unwrap().cached_input_tokens, 4096);
    let reasoning = &resp.reasoning[0];
    assert_eq!(reasoning.provider, "openai");
    assert_eq!(
        reasoning.encrypted_content.as_deref(),
        Some("gAAAAABotcHR1v8Zk3Q2xY_enc+/=Zm9vYmFyYmF6")
    );
    let raw = reasoning.raw.clone().unwrap();

    // Next turn: the reasoning item goes back byte-for-byte, then the calls and their results.
    let mut items = vec![ConversationItem::User {
        text: "List files.".into(),
    }];
    items.push(ConversationItem::Reasoning(reasoning.clone()));
    for call in &resp.tool_calls {
        items.push(ConversationItem::ToolCall(call.clone()));
    }
    for (call, out) in resp.tool_calls.iter().zip(["a\nb", "fn main() {}"]) {
        items.push(ConversationItem::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: out.into(),
            is_error: false,
            images: Vec::new(),
        });
    }
    let request = ChatRequest {
        model: "gpt-5".into(),
        system: "sys".into(),
        items,
        tools: tools().into(),
        tool_choice: ToolChoice::Auto,
        reasoning_effort: Some(ReasoningEffort::High),
        max_output_tokens: Some(4096),
        cache_key: Some("session-123".into()),
        ..ChatRequest::default()
    };
    let text = request_body(&request).unwrap();
    assert!(
        text.contains(&raw),
        "reasoning item not echoed verbatim: {text}"
    );
    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body["input"][2],
        json!({"type": "function_call", "call_id": "call_Ab12", "name": "exec_command", "arguments": "{\"command\":\"ls -la\"}"})
    );
    assert_eq!(
        body["input"][4],
        json!({"type": "function_call_output", "call_id": "call_Ab12", "output": "a\nb"})
    );
    assert_eq!(
        body["input"][5],
        json!({"type": "function_call_output", "call_id": "call_Cd34", "output": "fn main() {}"})
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "exec_command", "description": "Run a shell command",
                "parameters": tools()[0].parameters, "strict": false}])
    );
    assert_eq!(body["tool_choice"], json!("auto"));
    assert_eq!(body["parallel_tool_calls"], json!(true));
    assert_eq!(body["store"], json!(false));
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["prompt_cache_key"], json!("session-123"));
    assert_eq!(body["max_output_tokens"], json!(4096));
}

#[test]
fn output_schema_and_tool_choice_shapes() {
    let request = ChatRequest {
        model: "gpt-4.1".into(),
        tools: tools().into(),
        tool_choice: ToolChoice::Tool {
            name: "exec_command".into(),
        },
        output_schema: Some(OutputSchema {
            name: "answer".into(),
            schema: json!({"type": "object"}),
        }),
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "exec_command"})
    );
    assert_eq!(
        body["text"],
        json!({"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}})
    );
    assert!(
        body.get("include").is_none(),
        "no reasoning include for a non-reasoning model"
    );
    assert!(body.get("prompt_cache_key").is_none());
    assert!(body.get("instructions").is_none());
}

#[test]
fn reasoning_from_other_wires_is_not_sent() {
    let request = ChatRequest {
        model: "gpt-5".into(),
        items: vec![ConversationItem::Reasoning(
            intendant_providers::ReasoningItem {
                provider: "anthropic".into(),
                text: "thinking".into(),
                signature: Some("sig".into()),
                ..Default::default()
            },
        )],
        ..ChatRequest::default()
    };
    let body: serde_json::Value = serde_json::from_str(&request_body(&request).unwrap()).unwrap();
    assert_eq!(body["input"], json!([]));
}

fn final_error(events: &[StreamEvent]) -> (String, bool, Option<u64>) {
    match events.last().unwrap() {
        StreamEvent::Error {
            message,
            retryable,
            retry_after_ms,
        } => (message.clone(), *retryable, *retry_after_ms),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn failed_and_error_events_are_classified() {
    let (_, events) = serve("failed.sse").await;
    let (message, retryable, _) = final_error(&events);
    assert!(
        retryable && message.starts_with("server_error:"),
        "{message}"
    );

    let (_, events) = serve("failed_context.sse").await;
    let (message, retryable, _) = final_error(&events);
    assert!(
        !retryable && message.starts_with("context_length_exceeded:"),
        "{message}"
    );

    let (_, events) = serve("error_top.sse").await;
    let (message, retryable, after) = final_error(&events);
    assert!(
        retryable && message.starts_with("rate_limit_exceeded:"),
        "{message}"
    );
    assert_eq!(after, Some(1500), "hint parsed from 'try again in 1.5s'");

    let (_, events) = serve("error_nested.sse").await;
    let (message, retryable, _) = final_error(&events);
    assert!(
        !retryable && message.contains("invalid_prompt"),
        "{message}"
    );
}

#[tokio::test]
async fn incomplete_is_a_completion_with_max_tokens() {
    let (_, events) = serve("incomplete.sse").await;
    let resp = fold(&events).unwrap();
    assert_eq!(resp.text, "Partial answer");
    assert_eq!(resp.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(resp.usage.unwrap().reasoning_tokens, 12);
}

#[test]
fn summary_parts_are_separated_like_the_item_text() {
    use intendant_providers::openai_responses::ResponsesParser;
    use intendant_providers::sse::WireStreamDecoder;
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "One."}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "delta": "Two."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": "e",
            "summary": [{"type": "summary_text", "text": "One."}, {"type": "summary_text", "text": "Two."}]}}),
        json!({"type": "response.completed", "response": {"usage": null}}),
    ];
    let bytes: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let mut decoder = WireStreamDecoder::new(ResponsesParser::default());
    let mut out = Vec::new();
    decoder.feed(bytes.as_bytes(), &mut out);
    let resp = fold(&out).unwrap();
    assert_eq!(resp.reasoning_text, "One.\n\nTwo.");
    assert_eq!(resp.reasoning[0].text, resp.reasoning_text);
}

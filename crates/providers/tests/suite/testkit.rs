//! Every wire against the project's fake model server (`intendant-testkit`): full tool-call
//! round trips whose echoes the server checks byte for byte, and its injected faults.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use intendant_providers::{
    ChatRequest, ChatResponse, ConversationItem, ProviderConfig, ProviderKind, RetryNotice,
    RetryPolicy, StopReason, StreamEvent, ToolDefinition, build_provider,
};
use intendant_testkit::{
    Delivery, ErrorKind, FakeModelServer, Fault, Reasoning, Scenario, TcpChunking, ToolCallSpec,
    Turn, Usage, Wire,
};
use serde_json::json;

use super::support::{TEST_KEY, fold};

const PAIRS: [(ProviderKind, Wire, &str); 4] = [
    (ProviderKind::OpenAi, Wire::OpenAiResponses, "gpt-5"),
    (
        ProviderKind::Anthropic,
        Wire::Anthropic,
        "claude-sonnet-4-5",
    ),
    (ProviderKind::Gemini, Wire::Gemini, "gemini-2.5-flash"),
    (ProviderKind::OpenAiChat, Wire::OpenAiChat, "qwen3:8b"),
];

type Notices = Arc<Mutex<Vec<RetryNotice>>>;

fn config(server: &FakeModelServer, wire: Wire) -> (ProviderConfig, Notices) {
    let notices: Notices = Arc::default();
    let sink = notices.clone();
    let mut config = ProviderConfig::new(server.base_url(wire), Some(TEST_KEY.to_owned()));
    config.retry = RetryPolicy::with_base_delay(Duration::from_millis(10)).observed(Arc::new(
        move |n: &RetryNotice| sink.lock().unwrap().push(n.clone()),
    ));
    config.idle_timeout = Duration::from_millis(500);
    config.max_event_bytes = 256 * 1024;
    (config, notices)
}

fn tools() -> Vec<ToolDefinition> {
    ["exec_command", "inspect_path"]
        .into_iter()
        .map(|name| ToolDefinition {
            name: name.into(),
            description: format!("{name} tool"),
            parameters: json!({"type": "object"}),
        })
        .collect()
}

fn request(model: &str, items: Vec<ConversationItem>) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        system: "You are a test.".into(),
        items,
        tools: tools().into(),
        cache_key: Some("session-1".into()),
        ..ChatRequest::default()
    }
}

async fn turn(kind: ProviderKind, config: ProviderConfig, req: &ChatRequest) -> Vec<StreamEvent> {
    use futures::StreamExt;
    let provider = build_provider(kind, config).unwrap();
    provider.chat_stream(req).await.unwrap().collect().await
}

/// The next request's items after `response`: reasoning, text, calls, then one result per call.
fn continue_with(
    mut items: Vec<ConversationItem>,
    response: &ChatResponse,
) -> Vec<ConversationItem> {
    items.extend(
        response
            .reasoning
            .iter()
            .cloned()
            .map(ConversationItem::Reasoning),
    );
    if !response.text.is_empty() {
        items.push(ConversationItem::Assistant {
            text: response.text.clone(),
        });
    }
    items.extend(
        response
            .tool_calls
            .iter()
            .cloned()
            .map(ConversationItem::ToolCall),
    );
    for call in &response.tool_calls {
        items.push(ConversationItem::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: format!("result of {}", call.name),
            is_error: false,
            images: Vec::new(),
        });
    }
    items
}

#[tokio::test]
async fn parallel_calls_with_reasoning_round_trip_cleanly_on_every_wire() {
    for (kind, wire, model) in PAIRS {
        let first = Turn {
            text: Some("Looking — ünïcödé ✓".into()),
            // Chat Completions has no reasoning echo, so its turn carries none.
            reasoning: (wire != Wire::OpenAiChat).then(|| Reasoning {
                text: "Two calls at once.".into(),
                signature: None,
            }),
            tool_calls: vec![
                ToolCallSpec::new("exec_command", json!({"command": "ls -la", "n": [1, 2.5]})),
                ToolCallSpec::new("inspect_path", json!({"path": "src/ü.rs"})),
            ],
            usage: Usage {
                input: 5000,
                cached: 4096,
                output: 300,
                reasoning: 200,
            },
            delivery: Delivery {
                delta_chars: 1,
                tcp: TcpChunking::Awkward,
                ..Delivery::default()
            },
            ..Turn::default()
        };
        let mut second = Turn::text("All done.");
        second.expect = Some(intendant_testkit::Expect {
            tool_results_for_previous: true,
            tools: vec!["exec_command".into(), "inspect_path".into()],
            body_contains: vec![],
        });
        let server = FakeModelServer::start(Scenario::new(vec![first, second]))
            .await
            .unwrap();
        let (cfg, _) = config(&server, wire);

        let items = vec![ConversationItem::User {
            text: "Inspect the project.".into(),
        }];
        let events = turn(kind, cfg.clone(), &request(model, items.clone())).await;
        let response = fold(&events).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(response.stop_reason, Some(StopReason::ToolUse), "{kind}");
        assert_eq!(response.text, "Looking — ünïcödé ✓", "{kind}");
        let names: Vec<&str> = response
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["exec_command", "inspect_path"], "{kind}");
        let args: serde_json::Value =
            serde_json::from_str(&response.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"command": "ls -la", "n": [1, 2.5]}), "{kind}");
        let usage = response.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.cached_input_tokens),
            (5000, 4096),
            "{kind}"
        );
        if wire != Wire::OpenAiChat {
            assert!(
                !response.reasoning_text.is_empty(),
                "{kind}: no reasoning text"
            );
        }

        let events = turn(kind, cfg, &request(model, continue_with(items, &response))).await;
        let response = fold(&events).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(response.text, "All done.", "{kind}");
        assert_eq!(response.stop_reason, Some(StopReason::EndTurn), "{kind}");
        assert_eq!(server.turns_consumed(), 2, "{kind}");
        assert_eq!(
            server.invariant_violations(),
            Vec::<String>::new(),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn http_faults_are_retried_then_served() {
    for (kind, wire, model) in PAIRS {
        let mut clean = Turn::text("recovered");
        clean.faults = vec![
            Fault::HttpStatus {
                status: 429,
                retry_after: None,
                times: 1,
            },
            Fault::HttpStatus {
                status: 503,
                retry_after: None,
                times: 1,
            },
        ];
        let server = FakeModelServer::start(Scenario::new(vec![clean]))
            .await
            .unwrap();
        let (cfg, notices) = config(&server, wire);
        let items = vec![ConversationItem::User { text: "hi".into() }];
        let events = turn(kind, cfg, &request(model, items)).await;
        assert_eq!(fold(&events).unwrap().text, "recovered", "{kind}");
        assert_eq!(notices.lock().unwrap().len(), 2, "{kind}");
        assert_eq!(server.requests().len(), 3, "{kind}");
    }
}

#[tokio::test]
async fn stream_faults_end_in_classified_errors() {
    for (kind, wire, model) in PAIRS {
        let mut clean = Turn::text("never reached");
        clean.faults = vec![
            Fault::ErrorEvent {
                kind: ErrorKind::Overloaded,
                message: format!("overloaded, key {TEST_KEY}"),
                shape: Default::default(),
                times: 1,
            },
            Fault::ErrorEvent {
                kind: ErrorKind::InvalidRequest,
                message: "bad request".into(),
                shape: Default::default(),
                times: 1,
            },
            Fault::Cut {
                after_events: 2,
                times: 1,
            },
            Fault::EndEarly {
                after_events: 2,
                times: 1,
            },
            Fault::EndlessLine {
                after_events: 1,
                times: 1,
            },
            Fault::Stall {
                after_events: 1,
                times: 1,
            },
        ];
        let server = FakeModelServer::start(Scenario::new(vec![clean]))
            .await
            .unwrap();
        let (cfg, _) = config(&server, wire);
        let req = request(model, vec![ConversationItem::User { text: "hi".into() }]);
        let mut outcomes = Vec::new();
        for _ in 0..6 {
            let events = turn(kind, cfg.clone(), &req).await;
            match events.last() {
                Some(StreamEvent::Error {
                    message, retryable, ..
                }) => {
                    assert!(!message.contains(TEST_KEY), "{kind}: key leaked: {message}");
                    outcomes.push(*retryable);
                }
                other => panic!("{kind}: expected an error, got {other:?}"),
            }
        }
        assert_eq!(outcomes, [true, false, true, true, false, true], "{kind}");
    }
}

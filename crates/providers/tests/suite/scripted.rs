//! The scripted model behind `--provider mock`: a scenario played in process.

use futures::StreamExt;
use intendant_providers::scenario::{
    OnExhausted, Reasoning, Scenario, StopKind, ToolCallSpec, Turn,
};
use intendant_providers::scripted::ScriptedProvider;
use intendant_providers::{
    ChatProvider, ChatRequest, ProviderError, StopReason, StreamEvent, ToolDefinition,
    collect_response,
};
use serde_json::json;

fn request() -> ChatRequest {
    ChatRequest {
        model: "fake-model".into(),
        tools: vec![ToolDefinition {
            name: "exec_command".into(),
            description: "run".into(),
            parameters: json!({ "type": "object" }),
        }]
        .into(),
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn turns_play_in_order_as_normalized_events() {
    let mut first = Turn::tool_calls(vec![
        ToolCallSpec::new("exec_command", json!({ "command": "ls" })),
        ToolCallSpec::new("exec_command", json!({ "command": "pwd" })),
    ]);
    first.reasoning = Some(Reasoning {
        text: "Let me look.".into(),
        signature: Some("sig".into()),
    });
    first.text = Some("Looking around the tree.".into());
    first.delivery.delta_chars = 5;
    let mut second = Turn::text("cut short");
    second.stop = StopKind::MaxTokens;
    let provider = ScriptedProvider::new(Scenario::new(vec![first, second])).unwrap();
    assert_eq!(provider.name(), "mock");
    assert_eq!(provider.model(), "fake-model");

    let events: Vec<StreamEvent> = provider
        .chat_stream(&request())
        .await
        .unwrap()
        .collect()
        .await;
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
        .count();
    assert_eq!(deltas, 5, "24 characters in deltas of 5");
    let response = collect_response("t", futures::stream::iter(events).boxed())
        .await
        .unwrap();
    assert_eq!(response.text, "Looking around the tree.");
    assert_eq!(response.reasoning_text, "Let me look.");
    assert_eq!(response.reasoning[0].signature.as_deref(), Some("sig"));
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[1].arguments, r#"{"command":"pwd"}"#);
    assert_ne!(
        response.tool_calls[0].call_id,
        response.tool_calls[1].call_id
    );
    assert_eq!(response.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(response.usage.unwrap().input_tokens, 10);

    let stream = provider.chat_stream(&request()).await.unwrap();
    let response = collect_response("t", stream).await.unwrap();
    assert_eq!(response.text, "cut short");
    assert_eq!(response.stop_reason, Some(StopReason::MaxTokens));
    // Then the default exhaustion policy: a plain "done".
    let stream = provider.chat_stream(&request()).await.unwrap();
    assert_eq!(collect_response("t", stream).await.unwrap().text, "done");
}

#[tokio::test]
async fn side_requests_consume_no_turn_and_exhaustion_can_be_an_error() {
    let mut scenario = Scenario::new(vec![Turn::text("the turn")]);
    scenario.side_requests.when_no_tools = true;
    scenario.on_exhausted = OnExhausted::Error;
    let provider = ScriptedProvider::new(scenario).unwrap();
    let side = provider.chat_stream(&ChatRequest::default()).await.unwrap();
    assert_eq!(collect_response("t", side).await.unwrap().text, "ok");
    let main = provider.chat_stream(&request()).await.unwrap();
    assert_eq!(collect_response("t", main).await.unwrap().text, "the turn");
    let Err(err) = provider.chat_stream(&request()).await else {
        panic!("an exhausted script answers");
    };
    assert!(
        matches!(
            err,
            ProviderError::Stream {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("exhausted"), "{err}");
}

#[test]
fn a_scenario_with_faults_is_refused_naming_the_fake_server() {
    let scenario = Scenario::from_json(
        &json!({ "turns": [ { "text": "hi" },
            { "text": "x", "faults": [ { "type": "http_status", "status": 500 } ] } ] })
        .to_string(),
    )
    .unwrap();
    let err = ScriptedProvider::new(scenario).unwrap_err().to_string();
    assert!(
        err.contains("turn 1") && err.contains("intendant-fake-model"),
        "{err}"
    );
}

#[test]
fn the_quickstart_scenario_plays() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/quickstart.scenario.json");
    let provider = ScriptedProvider::new(Scenario::load(&path).unwrap()).unwrap();
    assert_eq!(provider.model(), "fake-model");
}

/// The text of the one turn a fresh provider plays for a session whose task is `task`.
async fn first_text(scenario: &Scenario, task: &str) -> String {
    let provider = ScriptedProvider::new(scenario.clone()).unwrap();
    let request = ChatRequest {
        items: vec![
            intendant_providers::ConversationItem::User {
                text: "Working directory: /p".into(),
            },
            intendant_providers::ConversationItem::User { text: task.into() },
        ],
        ..request()
    };
    let stream = provider.chat_stream(&request).await.unwrap();
    collect_response("t", stream).await.unwrap().text
}

#[tokio::test]
async fn a_session_plays_the_script_its_task_names() {
    let scenario = Scenario::from_json(
        &json!({
            "turns": [{"text": "parent"}],
            "scripts": [
                {"when_task_contains": "edit a.txt", "turns": [{"text": "child a"}]},
                {"when_task_contains": "edit b.txt", "turns": [{"text": "child b"}]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    assert_eq!(first_text(&scenario, "split the work").await, "parent");
    assert_eq!(first_text(&scenario, "please edit a.txt").await, "child a");
    assert_eq!(first_text(&scenario, "please edit b.txt").await, "child b");
    // A script plays only its own turns, then follows on_exhausted.
    let provider = ScriptedProvider::new(scenario.clone()).unwrap();
    let request = ChatRequest {
        items: vec![intendant_providers::ConversationItem::User {
            text: "edit a.txt".into(),
        }],
        ..request()
    };
    for want in ["child a", "done"] {
        let stream = provider.chat_stream(&request).await.unwrap();
        assert_eq!(collect_response("t", stream).await.unwrap().text, want);
    }
    let bad = Scenario::from_json(
        &json!({"scripts": [{"when_task_contains": "", "turns": [{"text": "x"}]}]}).to_string(),
    );
    assert!(
        bad.is_err_and(|e| e.to_string().contains("when_task_contains is empty")),
        "an empty key would match every session"
    );
}

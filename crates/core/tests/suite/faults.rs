//! Provider faults through the loop: an overloaded API retried, a stream cut mid-response
//! restarted, and one cut too often ending the session `failed`.

use intendant_core::agent_loop::STREAM_RESTARTS;
use intendant_core::outcome::SessionError;
use intendant_protocol::events::{AppEvent, EndStatus};
use intendant_providers::ProviderError;
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, Run, World, done_turn, exec_turn};

fn tool_call_count(run: &Run) -> usize {
    run.pick(|e| matches!(e, AppEvent::ToolCall { .. }).then_some(()))
        .len()
}

#[tokio::test]
async fn an_overloaded_529_is_retried_and_the_session_completes() {
    let mut first = exec_turn("echo ok");
    first["faults"] = json!([{ "type": "http_status", "status": 529, "times": 1 }]);
    let world = World::new(Wire::Anthropic, json!([first, done_turn("ok")])).await;
    let run = world.run("task", Options::default()).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    let retried: Vec<(u32, Option<u16>)> = run
        .retries
        .iter()
        .map(|n| {
            let status = if let ProviderError::Http { status, .. } = &n.error {
                Some(*status)
            } else {
                None
            };
            (n.retry, status)
        })
        .collect();
    assert_eq!(retried, [(1, Some(529))]);
    assert_eq!(
        world.server.requests().len(),
        3,
        "one 529, then two clean turns"
    );
    // The retry is invisible to the loop: one response per turn, no error.
    assert_eq!(tool_call_count(&run), 2);
    assert!(
        run.pick(|e| matches!(e, AppEvent::Error { .. }).then_some(()))
            .is_empty()
    );
}

#[tokio::test]
async fn a_stream_cut_mid_response_is_restarted() {
    let mut first = exec_turn("echo ok");
    first["faults"] = json!([{ "type": "cut", "after_events": 2, "times": 2 }]);
    let world = World::new(Wire::OpenAiResponses, json!([first, done_turn("ok")])).await;
    let run = world.run("task", Options::default()).await;
    let outcome = run.outcome();
    assert_eq!((outcome.status, outcome.turns), (EndStatus::Completed, 2));
    assert_eq!(
        world.turn_requests().len(),
        4,
        "two cut attempts, then two clean turns"
    );
    // The cut attempts produced no response: each turn has exactly one.
    let responses = run.pick(|e| {
        if let AppEvent::ModelResponse { turn, .. } = e {
            Some(*turn)
        } else {
            None
        }
    });
    assert_eq!(responses, [1, 2]);
    assert_eq!(tool_call_count(&run), 2);
}

#[tokio::test]
async fn a_stream_cut_more_often_than_the_restarts_fails_the_session() {
    let mut first = exec_turn("echo ok");
    first["faults"] = json!([{ "type": "cut", "after_events": 2, "times": STREAM_RESTARTS + 1 }]);
    let world = World::new(Wire::OpenAiChat, json!([first, done_turn("ok")])).await;
    let run = world.run("task", Options::default()).await;
    let Err(SessionError::Provider(message)) = &run.outcome else {
        panic!("expected a provider failure: {:?}", run.outcome);
    };
    assert_eq!(world.turn_requests().len(), STREAM_RESTARTS as usize + 1);
    assert_eq!(tool_call_count(&run), 0, "no command ran");
    let n = run.events.len();
    assert!(
        matches!(&run.events[n - 2], AppEvent::Error { message: m } if m == message),
        "{:#?}",
        run.events
    );
    assert!(
        matches!(&run.events[n - 1], AppEvent::SessionEnded { status: EndStatus::Failed, reason, .. }
            if reason == message),
        "{:#?}",
        run.events
    );
}

//! OpenAI Responses streams: a refusal, `response.incomplete` cutting a call, reasoning with a
//! call, `response.failed`.

use intendant_testkit::Wire;
use serde_json::json;

use super::super::harness::done_turn;
use super::{Replayed, assert_refused, assert_restarted, assert_truncated_call, recovered, replay};

const WIRE: Wire = Wire::OpenAiResponses;

#[test]
fn responses_refusal_is_shown_and_recorded_as_a_refusal() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "refusal.sse")]));
    assert_refused(&run, "I'm sorry, but I can't assist with that.");
}

#[test]
fn responses_incomplete_cutting_a_call_never_runs_it_and_tells_the_model() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "incomplete_cut_call.sse"), done_turn("ok")]),
    );
    assert_truncated_call(&run, "edit_file", "CHANGELOG.md");
    assert!(
        run.of("truncated")[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("output token limit")
    );
}

#[test]
fn responses_reasoning_and_call_run_and_are_echoed() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "reasoning_tool_call.sse"), done_turn("ok")]),
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert!(run.outputs("exec_command")[0].contains("responses-call"));
    assert!(
        run.of("model_response")[0]["reasoning"]
            .as_str()
            .unwrap_or_default()
            .contains("list the project root")
    );
    let next = run.request(1);
    assert!(next.contains("gAAAAABo4dT1kQm3Vx8rZp2LwN5tY7bH0cJ4sF6gD9aE1uK3iO5pR8qW2eT4yU6iO8pA0sD2fG4hJ6kL8zX0cV2bN4mQ1wE3rT5yU7iO9pA=="), "{next}");
    assert!(
        next.contains(r#""call_id":"call_Qm4nZ8xW2vB6tR1yL5pK9sDh""#),
        "{next}"
    );
}

#[test]
fn responses_failed_server_error_restarts_the_stream() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "failed_server_error.sse"), recovered()]),
    );
    assert_restarted(&run);
}

#[test]
fn responses_context_length_error_fails_at_once_and_says_why() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "error_context_length.sse"), recovered()]),
    );
    assert_eq!(run.requests(), 1, "not retried: {}", run.dump());
    assert_eq!(run.status(), "failed");
    assert_eq!(run.out.status.code(), Some(1));
    let errors = run.of("error");
    assert!(
        errors.iter().any(|e| e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("context_length_exceeded: Your input exceeds the context window")),
        "{}",
        run.dump()
    );
}

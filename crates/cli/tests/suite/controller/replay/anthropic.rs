//! Anthropic Messages streams: `stop_reason: refusal` with `stop_details`, `max_tokens` inside
//! a `tool_use` block, thinking with a call, `overloaded_error` mid-stream.

use intendant_testkit::Wire;
use serde_json::json;

use super::super::harness::done_turn;
use super::{Replayed, assert_refused, assert_restarted, assert_truncated_call, recovered, replay};

const WIRE: Wire = Wire::Anthropic;

#[test]
fn anthropic_refusal_shows_the_classifiers_explanation() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "refusal.sse")]));
    assert_refused(
        &run,
        "This request was declined because it could enable cyber harm.",
    );
    // The refused turn's beginning is shown, but kept out of what the model is sent again.
    assert_eq!(
        run.of("model_response")[0]["text"],
        "Here is how the exploit chain works:"
    );
    assert!(!run.record("conversation.jsonl").contains("exploit chain"));
}

#[test]
fn anthropic_max_tokens_inside_a_tool_use_never_runs_it() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "max_tokens_cut_tool_use.sse"), done_turn("ok")]),
    );
    assert_truncated_call(&run, "edit_file", "README.md");
    // The cut call is not in the conversation: no tool_use/tool_result pair for it.
    assert!(!run.request(1).contains("toolu_01Ab7Cd3Ef9Gh2Jk5Lm8Np4Q"));
}

#[test]
fn anthropic_thinking_and_call_run_and_are_echoed() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "thinking_tool_use.sse"), done_turn("ok")]),
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert!(run.outputs("exec_command")[0].contains("anthropic-call"));
    let next = run.request(1);
    assert!(
        next.contains(r#""tool_use_id":"toolu_01Wq5Er8Ty2Ui6Op9As3Df7G""#),
        "{next}"
    );
    assert!(next.contains("EpcCCkYIBxgCKkBq3mVv0xZ2wR8tY5uI7oP1aS3dF6gH9jK2lZ4xC7vB0nM3qW5eR8tY1uI4oP6aS9dF2gH5jK8lZ1xC4vB7nM0qEgzh3bZ2f9vQ4kR7wXzGgy0mN6pL3sD8fJ1hK4jIjB9vC2xZ5bN8mQ1wE4rT7yU0iO3pA6sD9fG2hJ5kL8zX1cV4bN7mQ0wE3rT6yU9iO2pKhAE"), "{next}");
}

#[test]
fn anthropic_overloaded_mid_stream_restarts_the_stream() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "overloaded_midstream.sse"), recovered()]),
    );
    assert_restarted(&run);
}

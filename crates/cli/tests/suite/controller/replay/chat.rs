//! Chat Completions streams: OpenAI (refusal, a call cut by `finish_reason: length`, parallel
//! calls), Mistral (content as typed parts, an unknown part), DeepSeek (`reasoning_content`),
//! OpenRouter (an error mid-stream).

use intendant_testkit::Wire;
use serde_json::json;

use super::super::harness::done_turn;
use super::{Replayed, assert_refused, assert_restarted, assert_truncated_call, recovered, replay};

const WIRE: Wire = Wire::OpenAiChat;

#[test]
fn chat_refusal_is_shown_and_recorded_as_a_refusal() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "refusal.sse")]));
    assert_refused(&run, "I'm sorry, but I can't help with that.");
    let conversation = run.record("conversation.jsonl");
    assert!(
        conversation
            .contains(r#""type":"refusal","text":"I'm sorry, but I can't help with that.""#),
        "{conversation}"
    );
}

#[test]
fn chat_tool_call_cut_by_length_is_never_run_and_the_model_is_told() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "length_cut_tool_call.sse"), done_turn("ok")]),
    );
    assert_truncated_call(&run, "edit_file", "notes.md");
}

#[test]
fn chat_parallel_tool_calls_run_and_their_ids_are_echoed() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "tool_calls_parallel.sse"), done_turn("ok")]),
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert!(
        run.outputs("exec_command")[0].contains("replay-one"),
        "{}",
        run.dump()
    );
    assert_eq!(run.outputs("inspect_path").len(), 1);
    let next = run.request(1);
    for id in [
        "call_aZ3mQw9Rt1YpLs6vXk2NbCdE",
        "call_Hn7gTf4Vb2XcQw8ZpL5kMsRj",
    ] {
        assert!(
            next.contains(&format!(r#""tool_call_id":"{id}""#)),
            "{next}"
        );
    }
}

#[test]
fn chat_magistral_content_parts_are_read_as_thinking_and_text() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "magistral_thinking_parts.sse")]));
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert_eq!(run.done_message(), "Hello!");
    let response = run.of("model_response")[0];
    assert_eq!(
        response["reasoning"],
        "Okay, the userwants a one-word greeting. Hello is the simplest."
    );
    assert!(run.of("warning").is_empty(), "{}", run.dump());
}

#[test]
fn chat_unknown_content_part_is_skipped_with_a_warning() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "mistral_reference_part.sse")]));
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert_eq!(run.done_message(), "The release is dated 2 December.");
    let warnings = run.of("warning");
    assert_eq!(warnings.len(), 1, "{}", run.dump());
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"reference\"") && message.contains("skipped"),
        "{message}"
    );
}

#[test]
fn chat_deepseek_reasoning_content_is_reasoning() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "deepseek_reasoning.sse")]));
    assert_eq!(run.done_message(), "2 + 2 = 4.");
    assert_eq!(
        run.of("model_response")[0]["reasoning"],
        "The user asks for the answer to 2+2. It is 4."
    );
    assert_eq!(run.of("usage")[0]["reasoning_tokens"], 22);
}

#[test]
fn chat_openrouter_error_mid_stream_restarts_the_stream() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "openrouter_error_midstream.sse"), recovered()]),
    );
    assert_restarted(&run);
}

//! A multi-turn task with parallel tool calls that edits files in a temp git repo, once per
//! wire.

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{Ctl, assert_success, calls, events_of, outputs_of, read};

fn multi_turn_parallel_edits(wire: Wire) {
    let ctl = Ctl::new(
        wire,
        json!([
            calls(&[
                ("edit_file", json!({"file_path": "greeting.txt", "operation": "write", "content": "hello\n"})),
                ("exec_command", json!({"command": "printf 'one\\n' > notes.txt && echo wrote"})),
            ]),
            {
                "text": "Now refining.",
                "tool_calls": [
                    { "name": "edit_file", "arguments": {"file_path": "greeting.txt", "operation": "replace", "match_content": "hello", "content": "hello, world"} },
                    { "name": "edit_file", "arguments": {"file_path": "notes.txt", "operation": "append", "content": "two\n"} },
                    { "name": "exec_command", "arguments": {"command": "git status --short"} }
                ],
                "expect": { "tool_results_for_previous": true }
            },
            {
                "tool_calls": [{ "name": "signal_done", "arguments": {"message": "greeting and notes written"} }],
                "expect": { "tool_results_for_previous": true }
            }
        ]),
    );
    let (out, events) = ctl.run_json("write the greeting and notes", &[]);
    assert_success(&out);
    assert_eq!(read(&ctl.project().join("greeting.txt")), "hello, world\n");
    assert_eq!(read(&ctl.project().join("notes.txt")), "one\ntwo\n");

    assert_eq!(ctl.server.turns_consumed(), 3);
    assert!(
        ctl.server.invariant_violations().is_empty(),
        "{:?}",
        ctl.server.invariant_violations()
    );
    assert_eq!(events_of(&events, "turn_started").len(), 3);
    assert_eq!(events_of(&events, "tool_call").len(), 6);
    // Both parallel calls of turn 1 ran in one runtime batch.
    let batches = events_of(&events, "tool_batch");
    assert_eq!(
        batches[0]["input"]["commands"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(
        batches
            .iter()
            .all(|b| !b.to_string().contains("runtime_protocol_token"))
    );
    let status = outputs_of(&events, "exec_command").join("\n");
    assert!(
        status.contains("greeting.txt") && status.contains("notes.txt"),
        "{status}"
    );
    // The last result of each batch carries the budget line.
    let results = events_of(&events, "agent_output");
    let text = |i: usize| results[i]["output"].as_str().unwrap().to_owned();
    assert!(!text(0).contains("[budget: ") && text(1).contains("[budget: "));
    assert!(text(4).contains("[budget: ") && text(5).contains("[budget: "));
    let done = events_of(&events, "done");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["message"], "greeting and notes written");
    let ended = events_of(&events, "session_ended");
    assert_eq!(ended[0]["status"], "completed");
}

#[test]
fn multi_turn_parallel_edits_openai_responses() {
    multi_turn_parallel_edits(Wire::OpenAiResponses);
}

#[test]
fn multi_turn_parallel_edits_openai_chat() {
    multi_turn_parallel_edits(Wire::OpenAiChat);
}

#[test]
fn multi_turn_parallel_edits_anthropic() {
    multi_turn_parallel_edits(Wire::Anthropic);
}

#[test]
fn multi_turn_parallel_edits_gemini() {
    multi_turn_parallel_edits(Wire::Gemini);
}

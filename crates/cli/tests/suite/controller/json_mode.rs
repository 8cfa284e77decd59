//! The `--json` frontend: clean JSONL on stdout, follow-ups over stdin, and `ask_human` with
//! and without a human.

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{
    Ctl, JsonSession, assert_success, body_text, calls, done_turn, events_of, outputs_of,
};

#[test]
fn stdout_is_one_typed_json_object_per_line() {
    let ctl = Ctl::new(
        Wire::OpenAiChat,
        json!([
            { "text": "Let me check.", "tool_calls": [{ "name": "inspect_path", "arguments": { "path": "." } }] },
            { "text": "All fine." }
        ]),
    );
    let (out, events) = ctl.run_json("check the project", &[]);
    assert_success(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for wanted in [
        "session_started",
        "turn_started",
        "model_response_delta",
        "model_response",
        "tool_call",
        "agent_output",
        "usage",
        "round_complete",
        "done",
        "session_ended",
    ] {
        assert!(types.contains(&wanted), "missing {wanted} in {types:?}");
    }
    assert_eq!(types.last(), Some(&"session_ended"));
    let deltas: String = events_of(&events, "model_response_delta")
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Let me check.All fine.");
    // A response without tool calls ends the round.
    assert_eq!(events_of(&events, "done")[0]["message"], "All fine.");
    assert_eq!(events_of(&events, "round_complete")[0]["reason"], "done");
}

#[test]
fn a_follow_up_over_stdin_starts_another_round_in_the_same_conversation() {
    let ctl = Ctl::new(
        Wire::Anthropic,
        json!([
            { "text": "First answer." },
            { "tool_calls": [{ "name": "exec_command", "arguments": { "command": "echo second > second.txt" } }],
              "expect": { "body_contains": ["now write the second file", "First answer."] } },
            done_turn("second round done"),
            { "text": "Third answer.", "expect": { "body_contains": ["and a third round", "second round done"] } }
        ]),
    );
    let mut run = JsonSession::spawn(ctl.command(&["--json", "first question"]));
    run.wait_for("round_complete");
    // Plain text is a follow-up; so is the explicit control message.
    run.send_line("now write the second file");
    let second = run.wait_for("round_complete");
    assert_eq!(second["round"], 2);
    run.send(&json!({ "action": "follow_up", "text": "and a third round" }));
    let third = run.wait_for("round_complete");
    assert_eq!(third["round"], 3);
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(
        ctl.server.invariant_violations().is_empty(),
        "{:?}",
        ctl.server.invariant_violations()
    );
    assert_eq!(
        std::fs::read_to_string(ctl.project().join("second.txt")).unwrap(),
        "second\n"
    );
    assert_eq!(events_of(&events, "done").len(), 3);
    assert_eq!(events_of(&events, "session_ended").len(), 1);
    assert_eq!(ctl.server.turns_consumed(), 4);
}

#[test]
fn a_stdin_line_past_the_bound_is_dropped_with_an_error_and_the_next_one_taken() {
    // A line of 1 MiB (before, held whole however long, and sent to the model as a follow-up:
    // 300 MB without a newline took the run to 2 GB), then a follow-up that fits.
    let ctl = Ctl::new(
        Wire::Anthropic,
        json!([
            { "text": "First answer." },
            { "text": "Second answer.", "expect": { "body_contains": ["a follow-up that fits"] } }
        ]),
    );
    let mut run = JsonSession::spawn(ctl.command(&["--json", "first question"]));
    run.wait_for("round_complete");
    // A line sent, and the error event saying it was dropped.
    let mut dropped = |line: &str, said: &str| {
        run.send_line(line);
        let error = run.wait_for("error");
        assert!(error["message"].as_str().unwrap().contains(said), "{error}");
    };
    dropped(
        &"y".repeat(1 << 20),
        "a stdin line over 262144 bytes was dropped",
    );
    // Within the line's bound but over what a session takes (as a daemon's is held to).
    dropped(
        &"z".repeat(intendant_protocol::socket::MAX_TASK_BYTES + 1),
        "a session takes: put the rest in a file of the project and name the file: it was dropped",
    );
    run.send_line("a follow-up that fits");
    let second = run.wait_for("round_complete");
    assert_eq!(second["round"], 2);
    let (status, _) = run.finish();
    assert!(status.success());
    let bodies: String = ctl.turn_requests().iter().map(body_text).collect();
    assert!(
        !bodies.contains(&"y".repeat(1000)) && !bodies.contains(&"z".repeat(1000)),
        "neither long line reached the model"
    );
    assert_eq!(ctl.server.turns_consumed(), 2);
}

#[test]
fn ask_human_question_card_consumes_the_batch() {
    let ctl = Ctl::new(
        Wire::Gemini,
        json!([
            calls(&[
                ("ask_human", json!({ "question": "Which colour?" })),
                ("exec_command", json!({ "command": "echo should-not-run > ran.txt" })),
            ]),
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
              "expect": { "body_contains": ["teal"] } }
        ]),
    );
    let mut run = JsonSession::spawn(ctl.command(&["--json", "pick a colour"]));
    let question = run.wait_for("human_question");
    assert_eq!(question["question"], "Which colour?");
    run.send_line(&json!({ "action": "input", "text": "teal" }).to_string());
    run.wait_for("human_answer");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(outputs_of(&events, "ask_human")[0].contains("teal"));
    assert!(outputs_of(&events, "exec_command")[0].contains("not executed"));
    assert!(!ctl.project().join("ran.txt").exists());
    let bodies: String = ctl.turn_requests().iter().map(body_text).collect();
    assert!(!bodies.contains("human_response_token"));
}

#[test]
fn headless_ask_human_gets_the_recovery_answer() {
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("ask_human", json!({ "question": "Which colour?" }))]),
            done_turn("assumed")
        ]),
    );
    let (out, events) = ctl.run_json("pick a colour", &[]);
    assert_success(&out);
    let answer = &outputs_of(&events, "ask_human")[0];
    assert!(answer.contains("explicit, stated assumptions"), "{answer}");
    assert!(events_of(&events, "human_question").is_empty());
}

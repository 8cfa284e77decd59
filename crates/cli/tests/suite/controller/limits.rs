//! Stopping rules and caller-handled tools: the token budget, the turn cap, `manage_context`,
//! and the in-process mock provider.

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{Ctl, assert_success, body_text, calls, done_turn, events_of, run_with_limit};

fn exec_turns(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| {
            calls(&[(
                "exec_command",
                json!({ "command": format!("echo turn{i}") }),
            )])
        })
        .collect()
}

#[test]
fn an_exhausted_budget_stops_the_run_with_a_warning() {
    // Each fake turn reports 10 input + 5 output tokens: 15, 30, ...
    let ctl = Ctl::new(Wire::OpenAiResponses, json!(exec_turns(5)));
    let (out, events) = ctl.run_json("loop", &["--max-tokens", "40"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ctl.server.turns_consumed(),
        3,
        "stops after the turn that spent the budget"
    );
    let warnings = events_of(&events, "budget_warning");
    assert!(!warnings.is_empty());
    assert_eq!(warnings.last().unwrap()["budget_tokens"], 40);
    assert_eq!(
        events_of(&events, "session_ended")[0]["status"],
        "budget_exhausted"
    );
    assert_eq!(
        events_of(&events, "round_complete")[0]["reason"],
        "budget_exhausted"
    );
}

#[test]
fn the_turn_cap_stops_the_run() {
    let ctl = Ctl::new(Wire::Anthropic, json!(exec_turns(5)));
    let (out, events) = ctl.run_json("loop", &["--max-turns", "2"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(ctl.server.turns_consumed(), 2);
    assert_eq!(events_of(&events, "session_ended")[0]["status"], "turn_cap");
}

#[test]
fn manage_context_drop_turns_removes_old_turns() {
    let mut turns = exec_turns(3);
    turns.push(calls(&[(
        "manage_context",
        json!({ "action": "drop_turns", "count": 2 }),
    )]));
    turns.push(json!({
        "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
        "expect": { "tool_results_for_previous": true }
    }));
    let ctl = Ctl::new(Wire::OpenAiChat, json!(turns));
    let (out, events) = ctl.run_json("loop", &[]);
    assert_success(&out);
    assert!(
        ctl.server.invariant_violations().is_empty(),
        "{:?}",
        ctl.server.invariant_violations()
    );
    let edits = events_of(&events, "context_management");
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0]["action"], "drop_turns");
    let last = body_text(ctl.turn_requests().last().unwrap());
    assert!(
        !last.contains("echo turn0") && !last.contains("echo turn1"),
        "{last}"
    );
    assert!(
        last.contains("echo turn2") && last.contains("dropped"),
        "{last}"
    );
}

#[test]
fn the_mock_provider_needs_no_key() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let scenario = ctl.root.path().join("scenario.json");
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": [
            calls(&[("edit_file", json!({ "file_path": "mock.txt", "operation": "write", "content": "m" }))]),
            done_turn("mocked")
        ]})
        .to_string(),
    )
    .unwrap();
    let mut cmd = ctl.bare_command();
    cmd.args(["--json", "--provider", "mock", "--scenario"])
        .arg(&scenario)
        .args(["--no-sandbox", "--autonomy", "full", "try it"]);
    let out = run_with_limit(cmd);
    assert_success(&out);
    assert_eq!(
        std::fs::read_to_string(ctl.project().join("mock.txt")).unwrap(),
        "m"
    );
    let events = super::harness::parse_events(&out.stdout);
    assert_eq!(events_of(&events, "session_started")[0]["provider"], "mock");
    assert_eq!(events_of(&events, "done")[0]["message"], "mocked");

    let mut bad = ctl.bare_command();
    bad.args(["--provider", "mock", "task"]);
    let out = run_with_limit(bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--scenario"));
}

#[test]
fn the_terminal_frontend_streams_text_and_reports_usage() {
    let ctl = Ctl::new(
        Wire::Gemini,
        json!([
            { "text": "Checking the tree.", "tool_calls": [{ "name": "exec_command", "arguments": { "command": "echo listed" } }] },
            { "text": "All good." }
        ]),
    );
    let out = run_with_limit({
        let mut cmd = ctl.command(&[]);
        cmd.arg("check");
        cmd
    });
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "Checking the tree.\nAll good.\n");
    assert!(
        stderr.contains("▸ exec_command command=\"echo listed\""),
        "{stderr}"
    );
    assert!(stderr.contains("↳ exec_command:"), "{stderr}");
    assert!(
        stderr.contains("completed: tokens in 20 (cached 0), out 10"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("thinking"),
        "no spinner without a terminal: {stderr}"
    );
}

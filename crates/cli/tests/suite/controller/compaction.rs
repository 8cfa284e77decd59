//! Auto-compaction triggered by a small context window (`INTENDANT_CONTEXT_WINDOW`).

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{Ctl, assert_success, body_text, calls, events_of};

#[test]
fn a_full_context_window_is_compacted_before_the_next_turn() {
    let exec = |n: u32, input: u64| {
        let mut turn = calls(&[(
            "exec_command",
            json!({ "command": format!("echo step{n}") }),
        )]);
        turn["usage"] = json!({ "input": input, "output": 10 });
        turn
    };
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            exec(1, 100),
            exec(2, 200),
            exec(3, 950),
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
              "expect": { "body_contains": ["Context compacted"] } }
        ]),
    );
    let mut cmd = ctl.command(&["--json", "three steps"]);
    cmd.env("INTENDANT_CONTEXT_WINDOW", "1000");
    let out = super::harness::run_with_limit(cmd);
    assert_success(&out);
    assert!(
        ctl.server.invariant_violations().is_empty(),
        "{:?}",
        ctl.server.invariant_violations()
    );
    let events = super::harness::parse_events(&out.stdout);
    let compactions = events_of(&events, "context_management");
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    assert_eq!(compactions[0]["action"], "auto_compact");
    let bodies: Vec<String> = ctl.turn_requests().iter().map(body_text).collect();
    assert!(!bodies[2].contains("Context compacted"));
    assert!(bodies[3].contains("Context compacted"));
    // The oldest turn is gone, the context prefix and the latest turn stay.
    assert!(!bodies[3].contains("step1") && bodies[3].contains("step3"));
    assert!(bodies[3].contains("Working directory"));
}

//! Context management: auto-compaction when the window is nearly full, and the model's own
//! `manage_context` edits.

use intendant_protocol::events::{AppEvent, ContextAction, EndStatus};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, Run, World, body_text, calls, exec_turn};

fn context_actions(run: &Run) -> Vec<ContextAction> {
    run.pick(|e| {
        if let AppEvent::ContextManagement { action, .. } = e {
            Some(*action)
        } else {
            None
        }
    })
}

#[tokio::test]
async fn a_full_context_window_is_compacted_before_the_next_turn() {
    let exec = |n: u32, input: u64| {
        let mut turn = exec_turn(&format!("echo step{n}"));
        turn["usage"] = json!({ "input": input, "output": 10 });
        turn
    };
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            exec(1, 100),
            exec(2, 200),
            exec(3, 950),
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
              "expect": { "body_contains": ["Context compacted"] } }
        ]),
    )
    .await;
    let options = Options {
        context_window: 1000,
        ..Options::default()
    };
    let run = world.run("three steps", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(context_actions(&run), [ContextAction::AutoCompact]);
    // The compaction happens between turn 3's response and turn 4's request.
    let at = run
        .events
        .iter()
        .position(|e| matches!(e, AppEvent::ContextManagement { .. }))
        .unwrap();
    assert!(matches!(
        run.events[at + 1],
        AppEvent::TurnStarted { turn: 4 }
    ));
    let bodies: Vec<String> = world.turn_requests().iter().map(body_text).collect();
    assert!(!bodies[2].contains("Context compacted"));
    assert!(bodies[3].contains("Context compacted"));
    // The oldest turn is gone; the context prefix and the latest turn stay.
    assert!(!bodies[3].contains("step1") && bodies[3].contains("step3"));
    assert!(bodies[3].contains("Working directory"));
}

#[tokio::test]
async fn manage_context_drop_turns_is_applied_and_reported() {
    let world = World::new(
        Wire::Gemini,
        json!([
            calls(&[("workflow_checkpoint", json!({ "name": "plan", "data": { "next": "turn3" } }))]),
            exec_turn("echo turn1"),
            exec_turn("echo turn2"),
            calls(&[("manage_context", json!({ "action": "drop_turns", "count": 2 }))]),
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
              "expect": { "tool_results_for_previous": true } }
        ]),
    )
    .await;
    let run = world.run("loop", Options::default()).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(context_actions(&run), [ContextAction::DropTurns]);
    let last = body_text(world.turn_requests().last().unwrap());
    assert!(
        !last.contains("turn3") && !last.contains("echo turn1"),
        "{last}"
    );
    assert!(last.contains("echo turn2"), "{last}");
    // The dropped turn saved a checkpoint: the marker names it.
    assert!(
        last.contains("Your workflow checkpoints") && last.contains(r#"\"plan\""#),
        "{last}"
    );
}

#[tokio::test]
async fn manage_context_summarize_keeps_the_checkpoint_names_it_cut() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("workflow_checkpoint", json!({ "name": "state", "data": { "remaining": "zebra-b" } }))]),
            exec_turn("echo step1"),
            calls(&[("manage_context", json!({ "action": "summarize", "summary": "did a" }))]),
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }],
              "expect": { "body_contains": ["did a", "Your workflow checkpoints", "\\\"state\\\""] } }
        ]),
    )
    .await;
    let run = world.run("summarize", Options::default()).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(context_actions(&run), [ContextAction::Summarize]);
    let last = body_text(world.turn_requests().last().unwrap());
    assert!(
        !last.contains("echo step1") && !last.contains("zebra-b"),
        "{last}"
    );
}

#[tokio::test]
async fn a_workflow_checkpoint_outlives_compaction_by_name_and_reads_back_whole() {
    let exec = |n: u32, input: u64| {
        let mut turn = exec_turn(&format!("echo step{n}"));
        turn["usage"] = json!({ "input": input, "output": 10 });
        turn
    };
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("workflow_checkpoint", json!({ "name": "plan", "data": { "done": ["a"], "next": "b" } }))]),
            calls(&[("workflow_checkpoint", json!({ "name": "notes", "data": "{not json" }))]),
            exec(2, 200),
            exec(3, 950),
            { "tool_calls": [{ "name": "workflow_checkpoint", "arguments": { "name": "plan" } }],
              "expect": { "body_contains": ["Context compacted", "Your workflow checkpoints", "\\\"plan\\\""] } },
            { "tool_calls": [{ "name": "signal_done", "arguments": { "message": "ok" } }] }
        ]),
    )
    .await;
    let options = Options {
        context_window: 1000,
        ..Options::default()
    };
    let run = world.run("long work", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(context_actions(&run), [ContextAction::AutoCompact]);
    let outputs = run.outputs();
    assert!(
        outputs[0].starts_with("checkpoint \"plan\" saved"),
        "{outputs:?}"
    );
    assert!(
        outputs[1].contains("data of \"notes\" is not JSON"),
        "{outputs:?}"
    );
    assert!(
        outputs[4].starts_with(r#"{"done":["a"],"next":"b"}"#),
        "{outputs:?}"
    );
    let bodies: Vec<String> = world.turn_requests().iter().map(body_text).collect();
    assert!(bodies[3].contains("next"));
    assert!(
        !bodies[4].contains("next"),
        "the save itself was compacted away"
    );
}

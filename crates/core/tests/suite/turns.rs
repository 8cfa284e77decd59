//! Plain turns: a text-only answer, and a tool call run by the real runtime.

use intendant_protocol::events::{AppEvent, EndStatus, RoundEnd};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, World, body_text, done_turn, exec_turn, text_turn};

#[tokio::test]
async fn a_text_only_answer_completes_the_session_in_one_turn() {
    let world = World::new(Wire::OpenAiResponses, json!([text_turn("Hello there.")])).await;
    let run = world.run("say hello", Options::default()).await;
    let outcome = run.outcome();
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.turns),
        (EndStatus::Completed, "Hello there.", 1)
    );
    let events = &run.events;
    assert!(
        matches!(&events[0], AppEvent::SessionStarted { task, model, resumed: false, .. }
            if task == "say hello" && model == "fake-model"),
        "{events:#?}"
    );
    assert!(matches!(events[1], AppEvent::TurnStarted { turn: 1 }));
    let responses = run.pick(|e| {
        if let AppEvent::ModelResponse {
            turn,
            text,
            tool_calls,
            ..
        } = e
        {
            Some((*turn, text.clone(), tool_calls.len()))
        } else {
            None
        }
    });
    assert_eq!(responses, [(1, "Hello there.".to_owned(), 0)]);
    let tail = &events[events.len() - 3..];
    assert!(
        matches!(&tail[0], AppEvent::Done { message } if message == "Hello there."),
        "{tail:#?}"
    );
    assert!(
        matches!(
            tail[1],
            AppEvent::RoundComplete {
                round: 1,
                turns: 1,
                reason: RoundEnd::Done,
                ..
            }
        ),
        "{tail:#?}"
    );
    assert!(
        matches!(&tail[2], AppEvent::SessionEnded { status: EndStatus::Completed, session_id, .. }
            if run.log_dir.ends_with(session_id)),
        "{tail:#?}"
    );
    // No tool was called, so no batch ran.
    assert!(
        run.pick(|e| matches!(e, AppEvent::ToolBatch { .. }).then_some(()))
            .is_empty()
    );
    let model_txt = run.log_dir.join("turns").join("turn_001_model.txt");
    assert_eq!(std::fs::read_to_string(model_txt).unwrap(), "Hello there.");
}

#[tokio::test]
async fn a_shell_command_runs_in_the_runtime_and_its_output_goes_back_to_the_model() {
    let world = World::new(
        Wire::Anthropic,
        json!([
            exec_turn("echo core-says-hi > out.txt && cat out.txt"),
            done_turn("wrote it")
        ]),
    )
    .await;
    let run = world.run("write a file", Options::default()).await;
    let outcome = run.outcome();
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.turns),
        (EndStatus::Completed, "wrote it", 2)
    );
    assert_eq!(
        std::fs::read_to_string(world.project.path().join("out.txt")).unwrap(),
        "core-says-hi\n"
    );
    let calls = run.pick(|e| {
        if let AppEvent::ToolCall {
            name, arguments, ..
        } = e
        {
            Some((name.clone(), arguments.clone()))
        } else {
            None
        }
    });
    assert_eq!(
        calls,
        [
            (
                "exec_command".to_owned(),
                json!({ "command": "echo core-says-hi > out.txt && cat out.txt" })
            ),
            ("signal_done".to_owned(), json!({ "message": "wrote it" })),
        ]
    );
    // One batch, in turn 1, whose input is the shell command.
    let batches = run.pick(|e| {
        if let AppEvent::ToolBatch { turn, input } = e {
            Some((*turn, input["commands"][0]["function"].clone()))
        } else {
            None
        }
    });
    assert_eq!(batches, [(1, json!("execAsAgent"))]);
    let results = run.pick(|e| {
        if let AppEvent::ToolBatchResult { turn, .. } = e {
            Some(*turn)
        } else {
            None
        }
    });
    assert_eq!(results, [1]);
    let outputs = run.outputs();
    assert!(outputs[0].contains("core-says-hi"), "{outputs:?}");
    // The last result of a batch carries the budget line.
    assert!(
        outputs[1].starts_with("done signal received\n\n[budget: "),
        "{outputs:?}"
    );
    // The result reached the model in the next request.
    let requests = world.turn_requests();
    assert_eq!(requests.len(), 2);
    assert!(body_text(&requests[1]).contains("core-says-hi"));
    // The log writer wrote the batch's files from the events.
    let turns = run.log_dir.join("turns");
    assert!(turns.join("turn_001_batch_input.json").is_file());
    assert!(turns.join("turn_001_batch_result.json").is_file());
    assert!(matches!(
        run.events.last(),
        Some(AppEvent::SessionEnded {
            status: EndStatus::Completed,
            ..
        })
    ));
}

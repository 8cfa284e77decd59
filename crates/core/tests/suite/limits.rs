//! Stopping rules: the turn cap and the token budget end the round and the session.

use intendant_protocol::events::{AppEvent, EndStatus, RoundEnd};
use intendant_testkit::Wire;
use serde_json::{Value, json};

use super::support::{Options, World, exec_turn};

fn exec_turns(n: usize) -> Value {
    json!(
        (0..n)
            .map(|i| exec_turn(&format!("echo turn{i}")))
            .collect::<Vec<_>>()
    )
}

/// The `(reason, turns)` of every `round_complete` and the status of `session_ended`.
fn ending(events: &[AppEvent]) -> (Vec<(RoundEnd, u32)>, Vec<EndStatus>) {
    let rounds = events
        .iter()
        .filter_map(|e| {
            if let AppEvent::RoundComplete { reason, turns, .. } = e {
                Some((*reason, *turns))
            } else {
                None
            }
        })
        .collect();
    let ends = events
        .iter()
        .filter_map(|e| {
            if let AppEvent::SessionEnded { status, .. } = e {
                Some(*status)
            } else {
                None
            }
        })
        .collect();
    (rounds, ends)
}

#[tokio::test]
async fn the_turn_cap_ends_the_session() {
    let world = World::new(Wire::OpenAiChat, exec_turns(5)).await;
    let options = Options {
        max_turns: 2,
        ..Options::default()
    };
    let run = world.run("loop", options).await;
    let outcome = run.outcome();
    assert_eq!((outcome.status, outcome.turns), (EndStatus::TurnCap, 2));
    assert!(outcome.reason.contains("2-turn"), "{}", outcome.reason);
    assert_eq!(world.server.turns_consumed(), 2);
    assert_eq!(
        ending(&run.events),
        (vec![(RoundEnd::TurnCap, 2)], vec![EndStatus::TurnCap])
    );
    // Both turns' commands ran before the cap.
    assert_eq!(run.outputs().len(), 2);
}

#[tokio::test]
async fn an_exhausted_budget_warns_and_ends_the_session() {
    // Each fake turn reports 10 input + 5 output tokens: 15, 30, 45 > 40.
    let world = World::new(Wire::OpenAiResponses, exec_turns(5)).await;
    let options = Options {
        budget_tokens: Some(40),
        ..Options::default()
    };
    let run = world.run("loop", options).await;
    let outcome = run.outcome();
    assert_eq!(
        (outcome.status, outcome.turns),
        (EndStatus::BudgetExhausted, 3)
    );
    assert_eq!(world.server.turns_consumed(), 3);
    let warnings = run.pick(|e| {
        if let AppEvent::BudgetWarning {
            used_tokens,
            budget_tokens,
            ..
        } = e
        {
            Some((*used_tokens, *budget_tokens))
        } else {
            None
        }
    });
    // 30 of 40 is under the warning fraction; the turn that exhausts it warns.
    assert_eq!(warnings, [(45, 40)]);
    assert_eq!(
        ending(&run.events),
        (
            vec![(RoundEnd::BudgetExhausted, 3)],
            vec![EndStatus::BudgetExhausted]
        )
    );
    // The third response's call is answered without running, so the conversation stays valid.
    let outputs = run.outputs();
    assert_eq!(
        outputs.last().map(String::as_str),
        Some("not run: the token budget is exhausted")
    );
}

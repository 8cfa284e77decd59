//! Approvals with nobody to answer: an `ask` is denied, the command never runs, and the task
//! stops `denied`.

use intendant_core::approval::DENIED_OUTPUT;
use intendant_core::autonomy::AutonomyLevel;
use intendant_protocol::events::{ActionCategory, AppEvent, EndStatus, RoundEnd, Verdict};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, World, exec_turn, text_turn};

#[tokio::test]
async fn a_headless_session_denies_an_ask_and_stops() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([exec_turn("echo ran > marker.txt"), text_turn("unreachable")]),
    )
    .await;
    let options = Options {
        autonomy: AutonomyLevel::Medium,
        ..Options::default()
    };
    let run = world.run("make a marker", options).await;
    let outcome = run.outcome();
    assert_eq!(outcome.status, EndStatus::Denied);
    assert!(
        outcome.reason.contains("no interactive human"),
        "{}",
        outcome.reason
    );
    assert!(!world.project.path().join("marker.txt").exists());
    assert_eq!(
        world.server.turns_consumed(),
        1,
        "the model is not asked again"
    );

    let asked = run.pick(|e| {
        if let AppEvent::ApprovalRequired {
            id,
            category,
            command_preview,
            ..
        } = e
        {
            Some((*id, *category, command_preview.clone()))
        } else {
            None
        }
    });
    assert_eq!(asked.len(), 1, "{:#?}", run.events);
    let (id, category, preview) = asked[0].clone();
    assert_eq!(
        (category, preview.as_str()),
        (ActionCategory::CommandExec, "$ echo ran > marker.txt")
    );
    let resolved = run.pick(|e| {
        if let AppEvent::ApprovalResolved { id, verdict } = e {
            Some((*id, *verdict))
        } else {
            None
        }
    });
    assert_eq!(resolved, [(id, Verdict::Deny)]);
    assert_eq!(run.outputs(), [DENIED_OUTPUT]);
    // No batch ran at all.
    assert!(
        run.pick(|e| matches!(e, AppEvent::ToolBatch { .. }).then_some(()))
            .is_empty()
    );
    let rounds = run.pick(|e| {
        if let AppEvent::RoundComplete { reason, .. } = e {
            Some(*reason)
        } else {
            None
        }
    });
    assert_eq!(rounds, [RoundEnd::Denied]);
    assert!(matches!(
        run.events.last(),
        Some(AppEvent::SessionEnded {
            status: EndStatus::Denied,
            ..
        })
    ));
}

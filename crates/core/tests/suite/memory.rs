//! The memory tools in a real session: a proposal goes on without waiting and is stored only
//! once a human approves it, at every autonomy level (`full` included); with nobody to answer it
//! is refused, and one left unanswered is dropped at the session's end. Search pulls what is
//! stored; nothing is put into the conversation unasked.

use intendant_core::autonomy::AutonomyLevel;
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, EndStatus, Verdict};
use intendant_store::memory::{Scope, ScopeFilter, Source};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, Run, World, body_text, calls, done_turn};

fn memory_approvals(run: &Run) -> Vec<u64> {
    run.pick(|e| match e {
        AppEvent::ApprovalRequired {
            id,
            category: ActionCategory::Memory,
            ..
        } => Some(*id),
        _ => None,
    })
}

fn verdicts(run: &Run) -> Vec<(u64, Verdict)> {
    run.pick(|e| match e {
        AppEvent::ApprovalResolved { id, verdict } => Some((*id, *verdict)),
        _ => None,
    })
}

#[tokio::test]
async fn a_proposal_approved_by_a_human_at_full_autonomy_becomes_a_memory_of_the_session() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[(
                "memory_propose",
                json!({"text": "builds use cargo nextest"})
            )]),
            done_turn("proposed")
        ]),
    )
    .await;
    let options = Options {
        autonomy: AutonomyLevel::Full,
        memory: true,
        // The human: approves the memory, and ends the session once it is answered.
        driver: Some(Box::new(|event, bus| match event {
            AppEvent::ApprovalRequired {
                id,
                category: ActionCategory::Memory,
                ..
            } => bus.send_intent(ControlMsg::Approve { id: *id }),
            AppEvent::ApprovalResolved { .. } => bus.close_intents(),
            _ => {}
        })),
        ..Options::default()
    };
    let run = world.run("remember how to build", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    let asked = memory_approvals(&run);
    assert_eq!(asked.len(), 1, "{:#?}", run.events);
    assert_eq!(verdicts(&run), [(asked[0], Verdict::Approve)]);
    let output = &run.outputs()[0];
    assert!(output.contains("\"proposed\":true"), "{output}");
    let memories = world.memories();
    let mut kept = Vec::new();
    for _ in 0..300 {
        kept = memories.list(&ScopeFilter::All, 10).unwrap();
        if !kept.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].text, "builds use cargo nextest");
    let root = std::fs::canonicalize(world.project.path()).unwrap();
    assert_eq!(kept[0].scope, Scope::project(&root));
    let session = run
        .log_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(kept[0].source, Source::Session(session));
}

#[tokio::test]
async fn an_unanswered_proposal_is_never_stored_and_the_session_is_not_held_up() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[(
                "memory_propose",
                json!({"text": "nobody answers this", "scope": "user"})
            )]),
            done_turn("went on")
        ]),
    )
    .await;
    let options = Options {
        autonomy: AutonomyLevel::Full,
        memory: true,
        // A human who never answers, and ends the session after its round.
        driver: Some(Box::new(|event, bus| {
            if matches!(event, AppEvent::RoundComplete { .. }) {
                bus.close_intents();
            }
        })),
        ..Options::default()
    };
    let run = world.run("propose and go on", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(
        world.server.turns_consumed(),
        2,
        "the model went on at once"
    );
    let asked = memory_approvals(&run);
    assert_eq!(asked.len(), 1);
    assert_eq!(verdicts(&run), [(asked[0], Verdict::Deny)]);
    let warned = run.pick(|e| match e {
        AppEvent::Warning { message } if message.contains("nothing was stored") => Some(()),
        _ => None,
    });
    assert_eq!(warned.len(), 1);
    // Both come before the session's last event.
    assert!(matches!(
        run.events.last(),
        Some(AppEvent::SessionEnded { .. })
    ));
    assert_eq!(world.memories().count(&ScopeFilter::All).unwrap(), 0);
}

#[tokio::test]
async fn a_headless_session_at_full_autonomy_cannot_store_a_memory() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("memory_propose", json!({"text": "headless fact"}))]),
            done_turn("done")
        ]),
    )
    .await;
    let options = Options {
        autonomy: AutonomyLevel::Full,
        memory: true,
        ..Options::default()
    };
    let run = world.run("propose headless", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    let output = &run.outputs()[0];
    assert!(output.contains("no human can answer approvals"), "{output}");
    assert!(memory_approvals(&run).is_empty());
    assert_eq!(world.memories().count(&ScopeFilter::All).unwrap(), 0);
}

#[tokio::test]
async fn search_pulls_stored_memories_and_nothing_is_injected_unasked() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("memory_search", json!({"query": "release"}))]),
            calls(&[("memory_search", json!({"query": "release AND ("}))]),
            done_turn("found")
        ]),
    )
    .await;
    let root = std::fs::canonicalize(world.project.path()).unwrap();
    let memories = world.memories();
    let kept = memories
        .add(
            &Scope::project(&root),
            "release with the zebra-quokka checklist",
            &Source::Human,
        )
        .unwrap();
    memories
        .add(
            &Scope::Project("/elsewhere".into()),
            "release elsewhere",
            &Source::Human,
        )
        .unwrap();
    let options = Options {
        memory: true,
        ..Options::default()
    };
    let run = world.run("how do we release?", options).await;
    assert_eq!(run.outcome().status, EndStatus::Completed);
    let outputs = run.outputs();
    assert!(outputs[0].contains("zebra-quokka"), "{}", outputs[0]);
    assert!(
        outputs[0].contains(&format!("\"id\":{}", kept.id)),
        "{}",
        outputs[0]
    );
    assert!(!outputs[0].contains("elsewhere"), "{}", outputs[0]);
    assert!(outputs[1].contains("plain terms"), "{}", outputs[1]);
    // The first request knew nothing of the memory: it came only as the search's answer.
    let requests = world.turn_requests();
    assert!(!body_text(&requests[0]).contains("zebra-quokka"));
    assert!(body_text(&requests[1]).contains("zebra-quokka"));
    let offered = body_text(&requests[0]);
    for tool in ["memory_search", "memory_read", "memory_propose"] {
        assert!(offered.contains(tool), "{tool} is offered");
    }
}

//! Interrupt and stop through `SessionCancel`, at each place a turn waits: the model stream, a
//! running batch (its command's process must be gone), a pending approval. An interrupt ends
//! the round `interrupted` and the session takes a follow-up; a stop ends the session
//! `interrupted`, in its log too.

use std::path::Path;
use std::time::Duration;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::cancel::SessionCancel;
use intendant_core::session_log::read_events;
use intendant_protocol::events::{AppEvent, ControlMsg, EndStatus, RoundEnd};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Driver, Options, Run, World, exec_turn, text_turn};

/// The reasons of every `round_complete`, in order.
fn rounds(run: &Run) -> Vec<RoundEnd> {
    run.pick(|e| match e {
        AppEvent::RoundComplete { reason, .. } => Some(*reason),
        _ => None,
    })
}

/// A driver that calls `trigger` once, at the first event `when` matches; after an interrupted
/// round it sends the follow-up `next`, and it closes the intents lane after a finished one.
fn driver(
    when: impl Fn(&AppEvent) -> bool + Send + 'static,
    trigger: impl FnOnce() + Send + 'static,
    next: &str,
) -> Driver {
    let mut trigger = Some(trigger);
    let next = next.to_owned();
    Box::new(move |event, bus| {
        if when(event)
            && let Some(trigger) = trigger.take()
        {
            trigger();
        }
        match event {
            AppEvent::RoundComplete {
                reason: RoundEnd::Interrupted,
                ..
            } => bus.send_intent(ControlMsg::FollowUp { text: next.clone() }),
            AppEvent::RoundComplete { .. } => bus.close_intents(),
            _ => {}
        }
    })
}

/// The status `session_ended` has in the session's own log.
fn logged_end(dir: &Path) -> String {
    let events = read_events(dir).unwrap();
    let end = events
        .records
        .iter()
        .rev()
        .find(|r| r.event == "session_ended")
        .expect("the log has session_ended");
    end.data["status"].as_str().unwrap_or_default().to_owned()
}

/// Whether process `pid` still runs (zombies do not count), waiting up to ten seconds for it to
/// go.
fn still_running(pid: i32) -> bool {
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rfind(')')
                .is_some_and(|i| !s[i + 1..].trim_start().starts_with('Z'))
        })
    };
    for _ in 0..1000 {
        if !alive() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[tokio::test]
async fn an_interrupt_while_streaming_ends_the_round_and_a_follow_up_runs() {
    // The first reply stalls after a few deltas; the retry of it (the follow-up) gets it whole.
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            {
                "text": "a long answer that never finishes",
                "delivery": { "delta_chars": 2 },
                "faults": [ { "type": "stall", "after_events": 8 } ]
            },
            text_turn("the follow-up answer")
        ]),
    )
    .await;
    let cancel = SessionCancel::new();
    let handle = cancel.clone();
    let options = Options {
        driver: Some(driver(
            |e| matches!(e, AppEvent::ModelResponseDelta { .. }),
            move || assert!(handle.interrupt(), "a turn was running"),
            "go on",
        )),
        cancel,
        ..Options::default()
    };
    let run = world.run("answer at length", options).await;
    assert_eq!(rounds(&run), [RoundEnd::Interrupted, RoundEnd::Done]);
    assert_eq!(run.outcome().status, EndStatus::Completed);
    assert_eq!(logged_end(&run.log_dir), "completed");
}

#[tokio::test]
async fn an_interrupt_kills_the_running_batch_and_a_follow_up_runs() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            exec_turn("echo $$ > sleeper.pid; exec sleep 1000"),
            text_turn("after the interrupt")
        ]),
    )
    .await;
    let cancel = SessionCancel::new();
    let handle = cancel.clone();
    let pid_file = world.project.path().join("sleeper.pid");
    let watched = pid_file.clone();
    let options = Options {
        driver: Some(driver(
            |e| matches!(e, AppEvent::ToolBatch { .. }),
            move || {
                // Interrupts once the command runs, from a thread of its own.
                std::thread::spawn(move || {
                    while std::fs::read_to_string(&watched).map_or(true, |s| s.trim().is_empty()) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    assert!(handle.interrupt());
                });
            },
            "carry on",
        )),
        cancel,
        ..Options::default()
    };
    let run = world.run("sleep a while", options).await;
    assert_eq!(rounds(&run), [RoundEnd::Interrupted, RoundEnd::Done]);
    let outputs = run.outputs().join("\n");
    assert!(outputs.contains("the turn was interrupted"), "{outputs}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!still_running(pid), "the interrupted command still runs");
    assert_eq!(run.outcome().status, EndStatus::Completed);
    // The follow-up went to the model with an answer for the interrupted call.
    assert_eq!(world.server.turns_consumed(), 2);
}

#[tokio::test]
async fn a_stop_while_an_approval_waits_ends_the_session_interrupted() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([exec_turn("echo ran > marker.txt"), text_turn("unreachable")]),
    )
    .await;
    let cancel = SessionCancel::new();
    let handle = cancel.clone();
    let options = Options {
        autonomy: AutonomyLevel::Medium,
        driver: Some(driver(
            |e| matches!(e, AppEvent::ApprovalRequired { .. }),
            move || handle.stop(),
            "unused",
        )),
        cancel,
        ..Options::default()
    };
    let run = world.run("make a marker", options).await;
    assert_eq!(rounds(&run), [RoundEnd::Interrupted]);
    let resolved = run.pick(|e| match e {
        AppEvent::ApprovalResolved { verdict, .. } => Some(verdict.name()),
        _ => None,
    });
    assert_eq!(resolved, ["deny"], "the pending approval is resolved");
    assert!(!world.project.path().join("marker.txt").exists());
    let outcome = run.outcome();
    assert_eq!(outcome.status, EndStatus::Interrupted);
    assert_eq!(outcome.reason, "the session was stopped");
    assert_eq!(logged_end(&run.log_dir), "interrupted");
    assert_eq!(world.server.turns_consumed(), 1);
}

#[tokio::test]
async fn a_stop_while_waiting_for_a_follow_up_ends_the_session_interrupted() {
    let world = World::new(Wire::OpenAiResponses, json!([text_turn("first answer")])).await;
    let cancel = SessionCancel::new();
    let handle = cancel.clone();
    let options = Options {
        driver: Some(Box::new(move |event, _bus| {
            if matches!(event, AppEvent::RoundComplete { .. }) {
                assert!(!handle.interrupt(), "no turn runs between rounds");
                handle.stop();
            }
        })),
        cancel,
        ..Options::default()
    };
    let run = world.run("say something", options).await;
    assert_eq!(rounds(&run), [RoundEnd::Done]);
    assert_eq!(run.outcome().status, EndStatus::Interrupted);
    assert_eq!(logged_end(&run.log_dir), "interrupted");
}

//! `--resume ID` and `--continue` through the built binary: the fake model must receive the
//! earlier turns, the session must go on in the same directory, and cut logs must resume.

use intendant_core::session_log::{read_conversation, read_events, read_meta};
use intendant_protocol::events::{EndStatus, RecordedStatus};
use serde_json::{Value, json};

use super::controller::harness::{assert_success, events_of, parse_events};
use super::sessions::{Env, exec_turn, tear_last_lines, text_turn, tool_outputs};

/// Every text the model was sent in `body` (an OpenAI Responses request), in order.
fn input_texts(body: &Value) -> Vec<String> {
    let mut texts = Vec::new();
    for item in body["input"].as_array().into_iter().flatten() {
        match &item["content"] {
            Value::String(s) => texts.push(s.clone()),
            Value::Array(parts) => texts.extend(
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str().map(str::to_owned)),
            ),
            _ => {}
        }
    }
    texts
}

fn contains(texts: &[String], needle: &str) -> bool {
    texts.iter().any(|t| t.contains(needle))
}

#[test]
fn resume_continues_the_conversation_in_the_same_session() {
    // One model for both runs, so it can check the echoed calls of the first.
    let env = Env::new(json!([
        exec_turn("echo the-secret-number-is-42"),
        text_turn("I have noted the number."),
        text_turn("The number was 42.")
    ]));
    let out = env.run_headless("remember the number", &["--autonomy", "full"]);
    assert_success(&out);
    let first = env.only_session();
    let dir = env.session_dir(&first.id);
    let items_before = read_conversation(&dir).unwrap().records.len();

    let out = env.run_headless("what was the number?", &["--resume", &first.id]);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    let started = events_of(&events, "session_started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["resumed"], true);
    assert_eq!(started[0]["session_id"], first.id.as_str());

    // The model received the earlier turns, then the follow-up.
    let bodies = env.turn_bodies();
    assert_eq!(bodies.len(), 3);
    let texts = input_texts(&bodies[2]);
    assert!(contains(&texts, "remember the number"), "{texts:?}");
    assert!(contains(&texts, "I have noted the number."), "{texts:?}");
    assert!(contains(&texts, "what was the number?"), "{texts:?}");
    let outputs = tool_outputs(&bodies[2]);
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("the-secret-number-is-42")),
        "{outputs:?}"
    );
    assert!(
        env.server.invariant_violations().is_empty(),
        "{:?}",
        env.server.invariant_violations()
    );

    // Same directory, one more resume, the log goes on.
    let meta = env.only_session();
    assert_eq!(meta.id, first.id);
    assert_eq!(meta.resumes, 1);
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
    // Turn files go on numbering after the first run's turns instead of overwriting them.
    assert_eq!(meta.turns, 3);
    let turns = dir.join("turns");
    assert!(turns.join("turn_001_batch_input.json").is_file());
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_002_model.txt")).unwrap(),
        "I have noted the number."
    );
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_003_model.txt")).unwrap(),
        "The number was 42."
    );
    let conversation = read_conversation(&dir).unwrap();
    assert!(conversation.records.len() >= items_before + 2);
    let starts: Vec<bool> = read_events(&dir)
        .unwrap()
        .records
        .iter()
        .filter(|r| r.event == "session_started")
        .map(|r| r.data["resumed"] == true)
        .collect();
    assert_eq!(starts, [false, true]);
    let show = env
        .command(&["sessions", "show", &first.id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains(&format!("resumed session {}: ", first.id)),
        "{shown}"
    );
}

#[test]
fn continue_picks_the_latest_session_of_this_project() {
    let env = Env::new(json!([
        text_turn("First answer."),
        text_turn("Second answer.")
    ]));
    let out = env.run_headless("first task", &[]);
    assert!(out.status.success());
    let first = env.only_session();

    let out = env.run_headless("and now?", &["--continue"]);
    assert_success(&out);
    assert_eq!(env.only_session().id, first.id);
    let texts = input_texts(&env.turn_bodies()[1]);
    assert!(
        contains(&texts, "first task") && contains(&texts, "First answer."),
        "{texts:?}"
    );

    // Another project has no session to continue.
    let other = tempfile::tempdir().unwrap();
    let out = env
        .command(&[
            "--json",
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--continue",
            "x",
        ])
        .current_dir(other.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no earlier session"));
}

#[test]
fn resume_after_kill_9_mid_turn() {
    let env = Env::new(json!([
        exec_turn("echo never-approved"),
        text_turn("Understood, moving on.")
    ]));
    let (id, dir, _) = env.kill_9_awaiting_approval();

    let out = env.run_headless("carry on", &["--resume", &id]);
    assert_success(&out);
    let body = &env.turn_bodies()[1];
    // The call that never ran is answered, so the provider accepts the history.
    let outputs = tool_outputs(body);
    assert!(
        outputs.iter().any(|o| o.contains("interrupted")),
        "{outputs:?}"
    );
    assert!(contains(&input_texts(body), "carry on"));
    assert!(
        env.server.invariant_violations().is_empty(),
        "{:?}",
        env.server.invariant_violations()
    );
    assert_eq!(
        read_meta(&dir).unwrap().status,
        RecordedStatus::Ended(EndStatus::Completed)
    );
}

#[test]
fn resume_after_a_torn_last_line() {
    let env = Env::new(json!([
        text_turn("First answer."),
        text_turn("Second answer.")
    ]));
    assert!(env.run_headless("first task", &[]).status.success());
    let id = env.only_session().id;
    let dir = env.session_dir(&id);
    tear_last_lines(&dir);

    let out = env.run_headless("go on", &["--resume", &id]);
    assert_success(&out);
    let texts = input_texts(&env.turn_bodies()[1]);
    assert!(
        contains(&texts, "First answer.") && contains(&texts, "go on"),
        "{texts:?}"
    );
    assert!(!contains(&texts, "half a mess"), "{texts:?}");
    // The torn bytes were cut before appending, so both files are whole again.
    let events = read_events(&dir).unwrap();
    assert!(events.torn_tail.is_none());
    let conversation = read_conversation(&dir).unwrap();
    assert!(conversation.torn_tail.is_none());
}

#[test]
fn resuming_an_unknown_session_is_a_clear_error() {
    let env = Env::new(json!([text_turn("unreachable")]));
    let out = env.run_headless("x", &["--resume", "20990101T000000Z-abcdef"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no session 20990101T000000Z-abcdef"), "{err}");
    assert_eq!(env.server.turns_consumed(), 0);
}

#[test]
fn the_terminal_shows_a_resumed_marker() {
    let env = Env::new(json!([
        text_turn("First answer."),
        text_turn("Second answer.")
    ]));
    assert!(env.run_headless("first task", &[]).status.success());
    let id = env.only_session().id;
    let out = env
        .model_command("more", &["--resume", &id])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("resumed session {id}")), "{err}");
}

#[test]
fn a_resumed_session_is_told_the_names_of_its_workflow_checkpoints() {
    let env = Env::new(json!([
        { "tool_calls": [{ "name": "workflow_checkpoint",
                           "arguments": { "name": "plan", "data": { "next": "step 2" } } }] },
        text_turn("Saved."),
        { "tool_calls": [{ "name": "workflow_checkpoint", "arguments": { "name": "plan" } }] },
        text_turn("Continuing with step 2.")
    ]));
    let out = env.run_headless("a long job", &["--autonomy", "full"]);
    assert_success(&out);
    let first = env.only_session();
    let out = env.run_headless("go on", &["--resume", &first.id]);
    assert_success(&out);
    let bodies = env.turn_bodies();
    let texts = input_texts(&bodies[2]);
    assert!(
        contains(&texts, "Your workflow checkpoints") && contains(&texts, "\"plan\""),
        "{texts:?}"
    );
    let outputs = tool_outputs(&bodies[3]);
    assert!(
        outputs.iter().any(|o| o.contains(r#"{"next":"step 2"}"#)),
        "{outputs:?}"
    );
    // The first run (no checkpoint yet) was told nothing.
    assert!(!contains(&input_texts(&bodies[0]), "workflow checkpoints"));
}

//! Approvals end to end through `--json` stdin: each verb, headless denial, remembered
//! approvals, `[approval]` rules, and the question card with a mixed batch.

use intendant_protocol::events::{EndStatus, RecordedStatus};
use serde_json::{Value, json};

use super::controller::harness::{assert_success, events_of, parse_events};
use super::sessions::{Env, exec_turn, text_turn, tool_outputs};

/// Runs one exec turn at the default autonomy, answers its approval with `verb`, and returns
/// the environment, the exit success and the events.
fn answer_with(verb: &str) -> (Env, bool, Vec<Value>) {
    let env = Env::new(json!([
        exec_turn("echo ran > marker.txt"),
        text_turn("Finished.")
    ]));
    let mut session = env.start_json("make a marker", &[]);
    let request = session.wait_for("approval_required");
    assert_eq!(request["category"], "command_exec");
    assert_eq!(request["command_preview"], "$ echo ran > marker.txt");
    assert!(
        request["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    session.send(&json!({ "action": verb, "id": request["id"] }));
    session.wait_for("approval_resolved");
    let (status, events) = session.finish();
    (env, status.success(), events)
}

fn resolved_verdicts(events: &[Value]) -> Vec<String> {
    events_of(events, "approval_resolved")
        .iter()
        .map(|e| e["verdict"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn ended_status(events: &[Value]) -> String {
    let ended = events_of(events, "session_ended");
    assert_eq!(ended.len(), 1, "{events:#?}");
    ended[0]["status"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn approve_runs_the_command() {
    let (env, ok, events) = answer_with("approve");
    assert!(ok, "{events:#?}");
    assert_eq!(resolved_verdicts(&events), ["approve"]);
    assert_eq!(ended_status(&events), "completed");
    assert!(env.project.path().join("marker.txt").exists());
    assert_eq!(
        env.only_session().status,
        RecordedStatus::Ended(EndStatus::Completed)
    );
}

#[test]
fn skip_does_not_run_the_command_and_tells_the_model() {
    let (env, ok, events) = answer_with("skip");
    assert!(ok, "{events:#?}");
    assert_eq!(resolved_verdicts(&events), ["skip"]);
    assert_eq!(ended_status(&events), "completed");
    assert!(!env.project.path().join("marker.txt").exists());
    let bodies = env.turn_bodies();
    assert_eq!(bodies.len(), 2);
    let outputs = tool_outputs(&bodies[1]);
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("skipped by the user: not run")),
        "{outputs:?}"
    );
}

#[test]
fn deny_does_not_run_the_command_and_stops_the_task() {
    let (env, ok, events) = answer_with("deny");
    assert!(!ok, "a denied task must not exit 0");
    assert_eq!(resolved_verdicts(&events), ["deny"]);
    assert_eq!(ended_status(&events), "denied");
    assert!(!env.project.path().join("marker.txt").exists());
    // The model is not asked again after a denial.
    assert_eq!(env.server.turns_consumed(), 1);
    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Denied));
    assert!(meta.reason.unwrap_or_default().contains("user denied"));
}

#[test]
fn approve_all_raises_the_session_to_full() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "echo one > one.txt" } },
            { "name": "exec_command", "arguments": { "command": "mkdir sub && rm -rf sub && echo two > two.txt" } }
        ] },
        exec_turn("echo three > three.txt"),
        text_turn("Finished.")
    ]));
    let mut session = env.start_json("three files", &[]);
    let request = session.wait_for("approval_required");
    session.send(&json!({ "action": "approve_all", "id": request["id"] }));
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    // One question for the whole session, destructive command included.
    assert_eq!(events_of(&events, "approval_required").len(), 1);
    assert_eq!(resolved_verdicts(&events), ["approve"]);
    for f in ["one.txt", "two.txt", "three.txt"] {
        assert!(env.project.path().join(f).exists(), "{f}");
    }
}

#[test]
fn headless_denies_and_never_auto_approves() {
    let env = Env::new(json!([
        exec_turn("echo ran > marker.txt"),
        text_turn("unreachable")
    ]));
    let out = env.run_headless("make a marker", &[]);
    assert!(!out.status.success());
    let events = parse_events(&out.stdout);
    assert_eq!(resolved_verdicts(&events), ["deny"]);
    assert_eq!(ended_status(&events), "denied");
    assert!(!env.project.path().join("marker.txt").exists());
    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Denied));
    let reason = meta.reason.unwrap_or_default();
    assert!(reason.contains("no interactive human"), "{reason}");
}

#[test]
fn the_terminal_frontend_without_a_terminal_is_headless_and_denies() {
    let env = Env::new(json!([
        exec_turn("echo ran > marker.txt"),
        text_turn("unreachable")
    ]));
    let out = env
        .task_command("make a marker", &[])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!env.project.path().join("marker.txt").exists());
    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Denied));
    let dir = env.session_dir(&meta.id);
    let verdicts: Vec<String> = intendant_core::session_log::read_events(&dir)
        .unwrap()
        .records
        .iter()
        .filter(|r| r.event == "approval_resolved")
        .map(|r| r.data["verdict"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(verdicts, ["deny"]);
}

#[test]
fn an_approval_is_remembered_for_an_identical_command() {
    let env = Env::new(json!([
        exec_turn("echo x >> log.txt"),
        exec_turn("echo x >> log.txt"),
        exec_turn("echo y >> log.txt"),
        text_turn("Finished.")
    ]));
    let mut session = env.start_json("log twice", &[]);
    let first = session.wait_for("approval_required");
    assert_eq!(first["command_preview"], "$ echo x >> log.txt");
    session.send(&json!({ "action": "approve", "id": first["id"] }));
    // The identical second command is not asked about; the different third one is.
    let second = session.wait_for("approval_required");
    assert_eq!(second["command_preview"], "$ echo y >> log.txt");
    session.send(&json!({ "action": "approve", "id": second["id"] }));
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    assert_eq!(events_of(&events, "approval_required").len(), 2);
    let log = std::fs::read_to_string(env.project.path().join("log.txt")).unwrap();
    assert_eq!(log, "x\nx\ny\n");
}

#[test]
fn intents_for_other_ids_and_follow_ups_do_not_answer_an_approval() {
    let env = Env::new(json!([
        exec_turn("echo ran > marker.txt"),
        text_turn("Finished.")
    ]));
    let mut session = env.start_json("make a marker", &[]);
    let request = session.wait_for("approval_required");
    let id = request["id"].as_u64().unwrap();
    session.send(&json!({ "action": "deny", "id": id + 1000 }));
    session.send(&json!({ "action": "approve", "id": id }));
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    assert_eq!(resolved_verdicts(&events), ["approve"]);
    assert!(env.project.path().join("marker.txt").exists());
}

#[test]
fn deny_rules_hold_at_full_autonomy() {
    let env = Env::new(json!([
        exec_turn("curl http://127.0.0.1:9/x"),
        text_turn("unreachable")
    ]));
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[approval]\nnetwork = \"deny\"\n",
    )
    .unwrap();
    let out = env.run_headless("fetch", &["--autonomy", "full"]);
    assert!(!out.status.success());
    let events = parse_events(&out.stdout);
    assert!(events_of(&events, "approval_required").is_empty());
    assert_eq!(ended_status(&events), "denied");
    let meta = env.only_session();
    assert!(meta.reason.unwrap_or_default().contains("denies network"));
}

#[test]
fn full_autonomy_runs_without_asking_even_headless() {
    let env = Env::new(json!([
        exec_turn("echo ran > marker.txt"),
        text_turn("Finished.")
    ]));
    let out = env.run_headless("make a marker", &["--autonomy", "full"]);
    assert_success(&out);
    assert!(events_of(&parse_events(&out.stdout), "approval_required").is_empty());
    assert!(env.project.path().join("marker.txt").exists());
}

#[test]
fn bad_autonomy_and_bad_rules_are_clear_errors() {
    let env = Env::new(json!([text_turn("unreachable")]));
    let out = env.run_headless("x", &["--autonomy", "reckless"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reckless") && err.contains("low") && err.contains("full"),
        "{err}"
    );

    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[approval]\nshell = \"ask\"\n",
    )
    .unwrap();
    let out = env.run_headless("x", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shell") && err.contains("command_exec"),
        "{err}"
    );
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[approval]\nnetwork = \"sometimes\"\n",
    )
    .unwrap();
    let out = env.run_headless("x", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sometimes") && err.contains("deny"), "{err}");
    assert_eq!(env.server.turns_consumed(), 0);
    // Configuration errors are found before a session directory is created.
    let sessions = intendant_core::session_log::list_sessions(&env.intendant_home()).unwrap();
    assert!(sessions.is_empty(), "{sessions:?}");
}

#[test]
fn a_question_card_consumes_a_mixed_batch() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "ask_human", "arguments": { "question": "Which colour?" } },
            { "name": "exec_command", "arguments": { "command": "echo hi > mixed.txt" } }
        ] },
        text_turn("Blue it is.")
    ]));
    // Default autonomy: the displaced command is never run, so it is never asked about either.
    let mut session = env.start_json("pick a colour", &[]);
    let question = session.wait_for("human_question");
    assert_eq!(question["question"], "Which colour?");
    session.send(&json!({ "action": "input", "text": "blue" }));
    let answer = session.wait_for("human_answer");
    assert_eq!(answer["text"], "blue");
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    assert!(
        events_of(&events, "approval_required").is_empty(),
        "{events:#?}"
    );
    // The other command of the batch was not run; the model is asked to reissue it.
    assert!(!env.project.path().join("mixed.txt").exists());
    let bodies = env.turn_bodies();
    assert_eq!(bodies.len(), 2);
    let outputs = tool_outputs(&bodies[1]);
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(outputs[0].contains("blue"), "{outputs:?}");
    assert!(
        outputs[1].to_lowercase().contains("not executed")
            || outputs[1].to_lowercase().contains("not run"),
        "{outputs:?}"
    );
    assert!(
        outputs[1].to_lowercase().contains("reissue")
            || outputs[1].to_lowercase().contains("re-issue"),
        "{outputs:?}"
    );
}

#[test]
fn approving_a_display_command_grants_the_user_display_to_later_spawns() {
    let env = Env::new(json!([
        { "tool_calls": [{ "name": "inspect_path", "arguments": { "path": "." } }] },
        { "tool_calls": [{ "name": "capture_screen", "arguments": { "display": 0 } }] },
        text_turn("Finished.")
    ]));
    // A runtime reporting whether it was given the display grant.
    let runtime = env.home.path().join("fake-runtime.sh");
    std::fs::write(
        &runtime,
        r#"#!/bin/sh
input=$(cat)
tok=$(printf '%s' "$input" | sed -n 's/.*"runtime_protocol_token":"\([0-9a-f]*\)".*/\1/p')
nonce=$(printf '%s' "$input" | sed -n 's/.*"nonce":\([0-9]*\).*/\1/p')
echo "{\"type\":\"result\",\"nonce\":$nonce,\"data\":\"grant=${INTENDANT_USER_DISPLAY_GRANTED:-unset}\",\"runtime_protocol_token\":\"$tok\"}"
"#,
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = env.task_command("look at the screen", &["--json"]);
    cmd.env("INTENDANT_RUNTIME", &runtime);
    let mut session = super::controller::harness::JsonSession::spawn(cmd);
    let request = session.wait_for("approval_required");
    assert_eq!(request["category"], "display_control");
    session.send(&json!({ "action": "approve", "id": request["id"] }));
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    let outputs: Vec<&str> = events_of(&events, "agent_output")
        .iter()
        .map(|e| e["output"].as_str().unwrap_or_default())
        .collect();
    assert!(outputs[0].starts_with("grant=unset"), "{outputs:?}");
    assert!(outputs[1].starts_with("grant=1"), "{outputs:?}");
}

#[test]
fn approvals_show_the_whole_command_the_edit_content_and_escaped_bidi() {
    let long = format!("echo {} >/dev/null; rm -rf ./TAIL-DANGER", "a".repeat(360));
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": long } },
            { "name": "edit_file", "arguments": {
                "file_path": "notes.txt", "operation": "append",
                "content": "line one\nshow \u{202e}this\u{200b}\n" } }
        ] },
        text_turn("Finished.")
    ]));
    let mut session = env.start_json("long and edit", &[]);
    let exec = session.wait_for("approval_required");
    assert_eq!(exec["command_preview"], format!("$ {long}"));
    assert!(exec.get("detail").is_none(), "{exec}");
    session.send(&json!({ "action": "skip", "id": exec["id"] }));
    let edit = session.wait_for("approval_required");
    assert_eq!(edit["command_preview"], "edit notes.txt (append)");
    assert_eq!(
        edit["detail"],
        "append 25 bytes:\n+ line one\n+ show \\u{202e}this\\u{200b}\n+ "
    );
    session.send(&json!({ "action": "skip", "id": edit["id"] }));
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    // The session log records the same whole preview and detail.
    let meta = env.only_session();
    let records = intendant_core::session_log::read_events(&env.session_dir(&meta.id))
        .unwrap()
        .records;
    let logged: Vec<&serde_json::Map<String, Value>> = records
        .iter()
        .filter(|r| r.event == "approval_required")
        .map(|r| &r.data)
        .collect();
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[0]["command_preview"], exec["command_preview"]);
    assert_eq!(logged[1]["detail"], edit["detail"]);
    let show = env
        .command(&["sessions", "show", &meta.id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("TAIL-DANGER"), "{shown}");
    assert!(shown.contains("show \\u{202e}this"), "{shown}");
}

//! Session files, `intendant sessions`, and crash safety, through the built binary. Also the
//! harness the approval and resume tests share: an isolated home and project and the fake model
//! server (the `--json` session driver is [`JsonSession`] of `controller::harness`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use intendant_core::session_log::{
    CONVERSATION_FILE, EVENTS_FILE, SessionMeta, list_sessions, read_conversation, read_events,
    read_meta,
};
use intendant_protocol::events::{EndStatus, RecordedStatus};
use intendant_providers::ConversationItem;
use intendant_testkit::{FakeModelServer, Wire};
use serde_json::{Value, json};

pub use super::controller::harness::JsonSession;
use super::controller::harness::{assert_success, events_of, run_fed, start_fake_model};

/// The provider key every test run is given (it must never reach a log).
pub const TEST_API_KEY: &str = "sk-test-not-a-real-key-5f3a9c";

/// How long a test waits for one event before it fails (a hang is a bug, not slowness).
const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// An isolated home, project and fake model for one test.
pub struct Env {
    pub home: tempfile::TempDir,
    pub project: tempfile::TempDir,
    pub server: FakeModelServer,
    // Runs the server's tasks; declared last so it is dropped after the server.
    _rt: tokio::runtime::Runtime,
}

impl Env {
    /// A fresh environment whose model answers with `turns` (JSON array of scenario turns).
    pub fn new(turns: Value) -> Env {
        let (rt, server) = start_fake_model(turns);
        Env {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
            server,
            _rt: rt,
        }
    }

    /// `$INTENDANT_HOME` of this environment.
    pub fn intendant_home(&self) -> PathBuf {
        self.home.path().join("intendant-home")
    }

    /// `intendant ARGS` in the project, with only this environment's variables.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_intendant"));
        cmd.args(args)
            .current_dir(self.project.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("INTENDANT_HOME", self.intendant_home())
            .env("OPENAI_API_KEY", TEST_API_KEY)
            .env(
                "OPENAI_BASE_URL",
                self.server.base_url(Wire::OpenAiResponses),
            )
            .env("RUST_BACKTRACE", "0");
        cmd
    }

    /// `intendant EXTRA TASK` on this environment's fake model, sandbox off.
    pub fn task_command(&self, task: &str, extra: &[&str]) -> Command {
        self.model_command(task, &[&["--no-sandbox"], extra].concat())
    }

    /// `intendant EXTRA TASK` on this environment's fake model, the sandbox as a session gets
    /// it by default (on, unless `EXTRA` says otherwise).
    pub fn model_command(&self, task: &str, extra: &[&str]) -> Command {
        let mut args = vec!["--provider", "openai", "--model", "fake-model"];
        args.extend_from_slice(extra);
        args.push(task);
        self.command(&args)
    }

    /// Runs a task with `--json` and stdin closed (headless); returns the process output.
    pub fn run_headless(&self, task: &str, extra: &[&str]) -> Output {
        self.task_command(task, &[&["--json"], extra].concat())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Starts a task with `--json` and stdin open for intents.
    pub fn start_json(&self, task: &str, extra: &[&str]) -> JsonSession {
        JsonSession::spawn(self.task_command(task, &[&["--json"], extra].concat()))
    }

    /// The only recorded session of this environment.
    pub fn only_session(&self) -> SessionMeta {
        let sessions = list_sessions(&self.intendant_home()).unwrap();
        assert_eq!(sessions.len(), 1, "{sessions:?}");
        sessions.into_iter().next().unwrap()
    }

    /// The directory of session `id`.
    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.intendant_home().join("logs").join(id)
    }

    /// The JSON bodies of the requests that consumed scripted turns.
    pub fn turn_bodies(&self) -> Vec<Value> {
        self.server
            .turn_requests()
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    /// Starts `wait for me` at the default autonomy, where the scripted command waits for
    /// approval (a point squarely mid-turn), waits until the log has caught up to that request,
    /// then kills the process with SIGKILL. Returns the session id, its directory and the events
    /// read before the kill.
    pub fn kill_9_awaiting_approval(&self) -> (String, PathBuf, Vec<Value>) {
        let mut session = self.start_json("wait for me", &[]);
        session.wait_for("approval_required");
        let id = self.only_session().id;
        let dir = self.session_dir(&id);
        // The log writer runs beside the frontend; wait until it has caught up to the request.
        wait_until(|| {
            read_events(&dir)
                .unwrap()
                .records
                .iter()
                .any(|r| r.event == "approval_required")
        });
        let events = session.kill_9();
        (id, dir, events)
    }
}

/// Polls `cond` until it holds; fails after [`EVENT_TIMEOUT`].
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "condition not reached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts no file under `dir` contains `needle`.
pub fn assert_no_file_contains(dir: &Path, needle: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_no_file_contains(&path, needle);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(needle),
                "{} contains the secret",
                path.display()
            );
        }
    }
}

/// A model turn calling `exec_command` with `command`.
pub fn exec_turn(command: &str) -> Value {
    json!({ "tool_calls": [ { "name": "exec_command", "arguments": { "command": command } } ] })
}

/// Takes the writer's lock of a session's `session.jsonl` at `events` (an exclusive `flock`, as
/// a run or a resume writing it holds it) until the returned file is dropped.
pub fn hold_writers_lock(events: &std::path::Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(events)
        .unwrap();
    // SAFETY: flock(2) on a descriptor this test owns touches no memory.
    let locked = unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0, "{}", std::io::Error::last_os_error());
    held
}

/// A model turn that only says `text`.
pub fn text_turn(text: &str) -> Value {
    json!({ "text": text })
}

/// Every tool result text the model was sent in `body` (an OpenAI Responses request).
pub fn tool_outputs(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .map(|i| i["output"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts every line of the session's JSON Lines files parses, and returns the items.
pub fn assert_session_readable(dir: &Path) -> (Vec<String>, Vec<ConversationItem>) {
    let events = read_events(dir).unwrap();
    let conversation = read_conversation(dir).unwrap();
    let names = events.records.into_iter().map(|r| r.event).collect();
    (names, conversation.records)
}

#[test]
fn session_files_are_present_and_parseable_after_a_run() {
    let mut first = exec_turn("echo hello-from-the-runtime");
    first["reasoning"] = json!({ "text": "I should greet first." });
    first["text"] = json!("Greeting now.");
    let env = Env::new(json!([first, text_turn("All done.")]));
    let out = env.run_headless("say hello", &["--autonomy", "full"]);
    assert_success(&out);

    let meta = env.only_session();
    let dir = env.session_dir(&meta.id);
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
    assert_eq!(meta.task, "say hello");
    assert_eq!(meta.provider, "openai");
    assert_eq!(meta.model, "fake-model");
    assert_eq!(meta.turns, 2);
    // Two turns of the scenario's default usage (10 in, 5 out).
    assert_eq!(meta.usage.input_tokens, 20);
    assert_eq!(meta.usage.output_tokens, 10);
    assert_eq!(
        std::fs::canonicalize(&meta.project_root).unwrap(),
        std::fs::canonicalize(env.project.path()).unwrap()
    );

    let (names, items) = assert_session_readable(&dir);
    for expected in [
        "session_started",
        "turn_started",
        "model_response",
        "tool_call",
        "tool_batch",
        "tool_batch_result",
        "agent_output",
        "usage",
        "session_ended",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    assert_eq!(names.first().map(String::as_str), Some("session_started"));
    assert_eq!(names.last().map(String::as_str), Some("session_ended"));
    assert!(
        items
            .iter()
            .any(|i| matches!(i, ConversationItem::User { text } if text.contains("say hello")))
    );
    assert!(items.iter().any(|i| matches!(
        i,
        ConversationItem::ToolResult { output, .. } if output.contains("hello-from-the-runtime")
    )));
    assert!(
        items
            .iter()
            .any(|i| matches!(i, ConversationItem::Assistant { text } if text == "All done."))
    );
    // Per-turn files: model text, reasoning, and the runtime input and output of the batch.
    let turn_file = |name: &str| {
        std::fs::read_to_string(dir.join("turns").join(name))
            .unwrap_or_else(|e| panic!("turns/{name}: {e}"))
    };
    assert_eq!(turn_file("turn_001_model.txt"), "Greeting now.");
    assert_eq!(turn_file("turn_001_reasoning.txt"), "I should greet first.");
    let input: Value = serde_json::from_str(&turn_file("turn_001_batch_input.json")).unwrap();
    assert_eq!(
        input["commands"][0]["command"],
        "echo hello-from-the-runtime"
    );
    let result = turn_file("turn_001_batch_result.json");
    assert!(result.contains("hello-from-the-runtime"), "{result}");
    for text in [turn_file("turn_001_batch_input.json"), result] {
        assert!(!text.contains("runtime_protocol_token"), "{text}");
        assert!(!text.contains("human_response_token"), "{text}");
    }
    assert_eq!(turn_file("turn_002_model.txt"), "All done.");

    // No file of the session holds the provider key.
    assert_no_file_contains(&dir, TEST_API_KEY);

    // The listing and the transcript.
    let list = env.command(&["sessions"]).output().unwrap();
    assert!(list.status.success());
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains(&meta.id) && text.contains("completed") && text.contains("say hello"),
        "{text}"
    );
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["ID", "AGE", "STATUS", "TASK", "TOKENS", "COST"]);
    let list = env.command(&["sessions", "--json"]).output().unwrap();
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["id"], meta.id.as_str());
    assert_eq!(rows[0]["status"], "completed");
    assert_eq!(rows[0]["total_tokens"], 30);

    let show = env
        .command(&["sessions", "show", &meta.id])
        .output()
        .unwrap();
    assert!(show.status.success());
    let text = String::from_utf8_lossy(&show.stdout);
    for needle in [
        "say hello",
        "exec_command",
        "hello-from-the-runtime",
        "All done.",
        &format!("session {} completed: tokens in ", meta.id),
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let show = env
        .command(&["sessions", "show", &meta.id[..12], "--json"])
        .output()
        .unwrap();
    assert_success(&show);
    let v: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["meta"]["id"], meta.id.as_str());
    assert_eq!(v["events"].as_array().unwrap().len(), names.len());
    assert!(v["torn_tail"].is_null());
}

#[test]
fn a_task_given_as_dash_is_read_from_stdin_and_refused_where_stdin_is_wanted() {
    let env = Env::new(json!([text_turn("read it")]));
    let task = "fix the parser\n\nthe spec says:\n  1. keep newlines\n";
    let out = run_fed(
        env.task_command("-", &["--autonomy", "full"]),
        task.as_bytes(),
    );
    assert_success(&out);
    assert_eq!(env.only_session().task, task.trim_end());
    let sent = env.turn_bodies()[0].to_string();
    assert!(
        sent.contains("1. keep newlines"),
        "the model got it: {sent}"
    );

    // `--json` reads stdin for control messages: `-` is refused there, and so is nothing.
    let out = env.run_headless("-", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--json keeps for control messages"),
        "{out:?}"
    );
    let out = env
        .task_command("-", &[])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stdin held no task: nothing was run"),
        "{out:?}"
    );
    assert_eq!(env.turn_bodies().len(), 1, "nothing else reached the model");
}

#[test]
fn sessions_reports_unknown_ids_and_empty_homes() {
    let env = Env::new(json!([]));
    let out = env.command(&["sessions"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no sessions yet"));
    let out = env.command(&["sessions", "--json"]).output().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!([])
    );
    let out = env
        .command(&["sessions", "show", "20990101T000000Z-abcdef"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no session 20990101T000000Z-abcdef"), "{err}");
    let out = env
        .command(&["sessions", "show", "../../etc"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid session id"));
}

#[test]
fn kill_9_mid_turn_leaves_readable_files() {
    let env = Env::new(json!([
        exec_turn("echo never-approved"),
        text_turn("unreachable")
    ]));
    let (_, dir, events) = env.kill_9_awaiting_approval();
    assert!(events_of(&events, "session_ended").is_empty());

    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Running);
    let (names, items) = assert_session_readable(&dir);
    assert!(names.iter().any(|n| n == "tool_call"), "{names:?}");
    assert!(
        items
            .iter()
            .any(|i| matches!(i, ConversationItem::ToolCall(_)))
    );
    assert!(
        !items
            .iter()
            .any(|i| matches!(i, ConversationItem::ToolResult { .. }))
    );

    let list = env.command(&["sessions", "--json"]).output().unwrap();
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["status"], "interrupted");
    assert_eq!(rows[0]["recorded_status"], "running");
    let show = env
        .command(&["sessions", "show", &meta.id])
        .output()
        .unwrap();
    assert!(show.status.success());
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("status   interrupted"), "{shown}");
    // Why, as the daemon lists it (it said nothing).
    assert!(
        shown.contains("reason   left unfinished: the process running it (pid "),
        "{shown}"
    );
}

#[test]
fn kill_9_while_events_stream_leaves_readable_files() {
    // Many quick turns keep the writer busy; wherever the kill lands, the files must read back.
    let turns: Vec<Value> = (0..200)
        .map(|i| exec_turn(&format!("echo turn-{i}")))
        .collect();
    let env = Env::new(Value::Array(turns));
    let mut session = env.start_json("busy", &["--autonomy", "full"]);
    for _ in 0..5 {
        session.wait_for("tool_batch_result");
    }
    session.kill_9();
    let meta = env.only_session();
    let dir = env.session_dir(&meta.id);
    let (names, items) = assert_session_readable(&dir);
    assert!(
        names.iter().filter(|n| *n == "turn_started").count() >= 5,
        "{names:?}"
    );
    assert!(items.len() >= 10);
    let show = env
        .command(&["sessions", "show", &meta.id, "--json"])
        .output()
        .unwrap();
    assert_success(&show);
}

/// Appends a torn line (a record cut mid-write) to both JSON Lines files of `dir`.
pub fn tear_last_lines(dir: &Path) {
    for (file, torn) in [
        (
            EVENTS_FILE,
            "{\"ts\":\"2026-11-30T10:00:00.000Z\",\"event\":\"tool_ca",
        ),
        (
            CONVERSATION_FILE,
            "{\"type\":\"user\",\"text\":\"half a mess",
        ),
    ] {
        let path = dir.join(file);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(torn.as_bytes()).unwrap();
    }
}

#[test]
fn a_torn_last_line_is_skipped_and_reported() {
    let env = Env::new(json!([text_turn("Nothing to do.")]));
    let out = env.run_headless("look around", &[]);
    assert_success(&out);
    let meta = env.only_session();
    let dir = env.session_dir(&meta.id);
    let (names_before, items_before) = assert_session_readable(&dir);
    tear_last_lines(&dir);

    let events = read_events(&dir).unwrap();
    assert_eq!(events.records.len(), names_before.len());
    assert!(events.torn_tail.is_some());
    let conversation = read_conversation(&dir).unwrap();
    assert_eq!(conversation.records, items_before);
    assert!(conversation.torn_tail.is_some());
    assert_eq!(
        read_meta(&dir).unwrap().status,
        RecordedStatus::Ended(EndStatus::Completed)
    );

    let show = env
        .command(&["sessions", "show", &meta.id])
        .output()
        .unwrap();
    assert!(show.status.success());
    assert!(String::from_utf8_lossy(&show.stdout).contains("torn line"));
    let show = env
        .command(&["sessions", "show", &meta.id, "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["events"].as_array().unwrap().len(), names_before.len());
    assert_eq!(v["torn_tail"]["line"], names_before.len() + 1);
}

/// Lines in the middle of a record that do not read (damaged) are passed over and named by
/// `sessions show`, which shows the rest (it refused the whole record, naming the first); an
/// event a newer build wrote is shown by its name.
#[test]
fn a_record_whose_middle_lines_do_not_read_is_shown_without_them_named() {
    let env = Env::new(json!([text_turn("Nothing to do.")]));
    let out = env.run_headless("look around", &[]);
    assert_success(&out);
    let meta = env.only_session();
    let dir = env.session_dir(&meta.id);
    let (names, _) = assert_session_readable(&dir);
    let events = dir.join("session.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let damaged = "not a record at all";
    let newer = r#"{"ts":"2026-12-07T00:00:00.000Z","event":"from_a_newer_build","x":1}"#;
    lines.insert(
        1,
        "{\"ts\": \"2026-12-07T00:00:00.000Z\", \"event\": \"turn_sta\x1b[2J",
    );
    lines.insert(3, damaged);
    lines.insert(4, newer);
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    assert!(read_events(&dir).is_err(), "a strict read still refuses it");

    let show = env
        .command(&["sessions", "show", &meta.id])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    assert!(stdout.contains("Nothing to do."), "{stdout}");
    assert!(
        stdout.contains("(line 2 of the log, ")
            && stdout.contains("(line 4 of the log, 19 bytes, "),
        "{stdout}"
    );
    assert!(stdout.contains("[from_a_newer_build]"), "{stdout}");
    assert!(
        !stdout.contains('\x1b'),
        "the damaged line's bytes are not printed raw"
    );
    let show = env
        .command(&["sessions", "show", &meta.id, "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["events"].as_array().unwrap().len(), names.len() + 1);
    let skipped: Vec<&Value> = v["skipped_lines"].as_array().unwrap().iter().collect();
    assert_eq!(skipped.len(), 2);
    assert_eq!(
        (skipped[0]["line"].as_u64(), skipped[1]["line"].as_u64()),
        (Some(2), Some(4))
    );
    assert_eq!(skipped[1]["bytes"], damaged.len());
}

/// A task is shown escaped by `sessions` and `sessions show`, as everything else of a session
/// is: one a model wrote for a sub-agent, or someone else started, cannot act on the terminal.
#[test]
fn a_task_is_shown_escaped_by_the_listing_and_the_transcript() {
    let env = Env::new(json!([text_turn("Done.")]));
    let task = "t\u{1b}]0;TITLE\u{7}\u{202e}x";
    let out = env
        .task_command(task, &["--autonomy", "high"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = env.only_session();
    for args in [vec!["sessions"], vec!["sessions", "show", meta.id.as_str()]] {
        let out = env.command(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("t\\u{1b}]0;TITLE\\u{7}\\u{202e}x"),
            "{args:?}: {text:?}"
        );
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\u{202e}']),
            "{args:?}: {text:?}"
        );
    }
}

//! The pinned real codex (`codex app-server`) as the worker of `intendant --agent codex --json`
//! against the fake model server on loopback: the model makes one shell call that needs
//! approval; approved through `--json` stdin, the file appears, the session ends normally and
//! `session.jsonl` records the approval; denied, no file; resumed (with `--agent codex` or
//! without), codex continues the same thread, so the model sees the earlier turns.
//!
//! A missing CLI fails when `CI` is set and is skipped with a note otherwise (as the agents
//! crate's real-CLI tests). Proxies point at a closed loopback port and analytics and plugins are
//! off, so nothing leaves the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use intendant_testkit::{FakeModelServer, Scenario, Wire, clis};
use serde_json::{Value, json};

use super::controller::harness::{JsonSession, assert_success, events_of, run_with_limit};

/// One shell call (`touch approved.txt`), then a final text.
pub(super) fn shell_call_scenario() -> Value {
    json!({"model": "fake-model", "turns": [
        {"text": "Creating the file.",
         "tool_calls": [{"name": "exec_command",
                         "arguments": {"cmd": "touch approved.txt"}}],
         "usage": {"input": 300, "output": 20}},
        {"text": "Created approved.txt.", "usage": {"input": 320, "output": 5}},
        {"text": "Still here."},
        {"text": "Still the same thread."}
    ]})
}

/// A state root, a project configured for the real codex on the fake model, and the server.
struct World {
    root: tempfile::TempDir,
    server: FakeModelServer,
    _rt: tokio::runtime::Runtime,
}

impl World {
    fn new(codex: &Path, scenario: Value) -> World {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = rt
            .block_on(FakeModelServer::start(
                Scenario::from_json(&scenario.to_string()).unwrap(),
            ))
            .unwrap();
        let root = tempfile::tempdir().unwrap();
        for dir in ["project", "home", "ihome", "codex-home"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let world = World {
            root,
            server,
            _rt: rt,
        };
        world.configure(codex);
        world
    }

    fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    /// `[agent.codex]` for the fake model, trusted.
    fn configure(&self, codex: &Path) {
        std::fs::write(
            self.project().join("intendant.toml"),
            self.worker(codex).config,
        )
        .unwrap();
        assert_success(&run_with_limit(self.command(&["trust"])));
    }

    /// codex on this world's fake model, its state in `codex-home`.
    fn worker(&self, codex: &Path) -> clis::RealWorker {
        clis::codex_worker(
            codex,
            &self.server.base_url(Wire::OpenAiResponses),
            &self.root.path().join("codex-home"),
        )
    }

    /// The binary with a scrubbed environment: a private HOME, CODEX_HOME and state root,
    /// closed proxies, the fake provider's key.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_intendant"));
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.root.path().join("home"))
            .env("LANG", "C.UTF-8")
            .env("INTENDANT_HOME", self.root.path().join("ihome"))
            .env("CODEX_HOME", self.root.path().join("codex-home"))
            .env(clis::CODEX_KEY_VAR, clis::CODEX_WORKER_KEY)
            .env("RUST_BACKTRACE", "0")
            .envs(clis::offline_env())
            .current_dir(self.project());
        cmd
    }

    /// `intendant --json --agent codex TASK` (plus `extra`), its approval answered with
    /// `verdict`, stdin closed once the round completed; the events.
    fn run(&self, task: &str, extra: &[&str], verdict: Option<&str>) -> Vec<Value> {
        let mut args = vec!["--agent", "codex"];
        args.extend(extra);
        args.push(task);
        self.run_args(&args, verdict)
    }

    /// `intendant --json ARGS`, answered and finished as [`World::run`] does.
    fn run_args(&self, args: &[&str], verdict: Option<&str>) -> Vec<Value> {
        let args = [&["--json", "--no-sandbox"], args].concat();
        let mut session = JsonSession::spawn(self.command(&args));
        if let Some(verdict) = verdict {
            let request = session.wait_for("approval_required");
            assert!(
                request["command_preview"]
                    .as_str()
                    .is_some_and(|p| p.contains("touch approved.txt")),
                "{request}"
            );
            session.send(&json!({ "action": verdict, "id": request["id"] }));
            session.wait_for("approval_resolved");
        }
        let (_, events) = session.finish();
        events
    }

    /// The session's `session.jsonl`.
    fn session_log(&self, events: &[Value]) -> String {
        let id = the_one(events, "session_started")["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        std::fs::read_to_string(
            self.root
                .path()
                .join("ihome")
                .join(intendant_core::session_log::LOGS_DIR)
                .join(id)
                .join("session.jsonl"),
        )
        .unwrap()
    }
}

fn the_one<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    let found = events_of(events, kind);
    assert_eq!(found.len(), 1, "one {kind}: {events:#?}");
    found[0]
}

#[test]
fn codex_worker_asks_through_json_and_resumes_its_thread() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    let world = World::new(&codex, shell_call_scenario());
    let events = world.run("Create approved.txt", &[], Some("approve"));
    let ended = the_one(&events, "session_ended");
    assert_eq!(ended["status"], "completed", "{events:#?}");
    assert!(world.project().join("approved.txt").exists(), "{events:#?}");
    let log = world.session_log(&events);
    assert!(log.contains("\"approval_required\""), "{log}");
    assert!(log.contains("\"verdict\":\"approve\""), "{log}");
    assert!(log.contains("\"status\":\"completed\""), "{log}");
    let first = world.server.turn_requests();
    assert_eq!(first.len(), 2, "the call, then its result");
    assert_eq!(
        first[0].header("authorization"),
        Some(format!("Bearer {}", clis::CODEX_WORKER_KEY).as_str())
    );
    // Usage the worker reported reaches our usage events.
    assert!(!events_of(&events, "usage").is_empty(), "{events:#?}");

    // Resumed: codex continues the recorded thread, so the model sees the first round.
    let id = the_one(&events, "session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resumed = world.run("And now?", &["--resume", &id], None);
    assert_eq!(
        the_one(&resumed, "session_ended")["status"],
        "completed",
        "{resumed:#?}"
    );
    let requests = world.server.turn_requests();
    let body = requests.last().unwrap().body.to_string();
    assert!(
        body.contains("Created approved.txt.") && body.contains("touch approved.txt"),
        "the resumed request carries the first conversation: {body}"
    );

    // Resumed again without `--agent`: still codex (the session recorded it), still the thread.
    let again = world.run_args(&["--resume", &id, "Once more?"], None);
    let started = the_one(&again, "session_started");
    assert_eq!(started["provider"], "codex", "{again:#?}");
    assert_eq!(the_one(&again, "session_ended")["status"], "completed");
    let requests = world.server.turn_requests();
    let body = requests.last().unwrap().body.to_string();
    assert!(
        body.contains("Still here.") && body.contains("touch approved.txt"),
        "the second resume carries both earlier rounds: {body}"
    );
}

#[test]
fn codex_worker_denied_through_json_leaves_no_file() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    let world = World::new(&codex, shell_call_scenario());
    let events = world.run("Create approved.txt", &[], Some("deny"));
    assert_eq!(the_one(&events, "session_ended")["status"], "denied");
    assert!(!world.project().join("approved.txt").exists());
    assert!(world.session_log(&events).contains("\"verdict\":\"deny\""));
}

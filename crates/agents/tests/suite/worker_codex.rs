//! The codex app-server worker against a fake app-server (`fixtures/fake_app_server.py`)
//! replaying scripted turns: approvals answered from the session's gate, a crash mid-turn, a
//! malformed line, an unknown server request, a wedged turn, follow-ups and resume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use intendant_agents::HostEnv;
use intendant_agents::worker::AgentWorkers;
use intendant_core::agent_loop::{LoopError, SessionOutcome};
use intendant_core::approval::{ApprovalAnswer, ApprovalGate, ApprovalPolicy};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::bus::EventBus;
use intendant_core::intents::IntentInbox;
use intendant_core::session::{SessionStart, WorkerContext, WorkerFactory, run_session};
use intendant_core::session_log::{SessionLog, SessionMeta};
use intendant_protocol::events::{AppEvent, ControlMsg, EndStatus};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::support::{KEY_VALUE, fixtures};

/// One fake app-server in its own directory, with a state root for session logs.
struct FakeServer {
    dir: TempDir,
    exe: PathBuf,
    record: PathBuf,
}

impl FakeServer {
    fn new(scenario: Value) -> FakeServer {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        for sub in ["bin", "home", "project", "state"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let record = dir.path().join("record.jsonl");
        let mut scenario = scenario;
        scenario["record"] = json!(record.display().to_string());
        let scenario_path = dir.path().join("scenario.json");
        std::fs::write(&scenario_path, scenario.to_string()).unwrap();
        let exe = intendant_testkit::clis::write_fake_launcher(
            &bin,
            "codex",
            &fixtures().join("fake_app_server.py"),
            &scenario_path,
        )
        .unwrap();
        FakeServer { dir, exe, record }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Every message the fake received (after its first line, the invocation).
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn received_method(&self, method: &str) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|m| m["method"] == method)
            .collect()
    }

    /// Our answers to the fake's server requests (ids from 101).
    fn answers(&self) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|m| m.get("method").is_none() && m["id"].as_u64().is_some_and(|id| id > 100))
            .collect()
    }
}

/// How a test session runs.
struct Options {
    level: AutonomyLevel,
    interactive: bool,
    answers: Vec<ApprovalAnswer>,
    follow_ups: Vec<&'static str>,
    table: toml::Table,
    resume: Option<SessionLog>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            level: AutonomyLevel::Medium,
            interactive: true,
            answers: Vec::new(),
            follow_ups: Vec::new(),
            table: toml::Table::new(),
            resume: None,
        }
    }
}

struct Ran {
    events: Vec<AppEvent>,
    result: Result<SessionOutcome, LoopError>,
    log: SessionLog,
}

impl Ran {
    fn status(&self) -> EndStatus {
        self.events
            .iter()
            .find_map(|e| match e {
                AppEvent::SessionEnded { status, .. } => Some(*status),
                _ => None,
            })
            .expect("session_ended")
    }

    fn errors(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Error { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    fn warnings(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Warning { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    fn names(&self) -> Vec<&'static str> {
        self.events.iter().map(AppEvent::name).collect()
    }
}

async fn run(fake: &FakeServer, opts: Options) -> Ran {
    let mut table = opts.table.clone();
    table.insert(
        "path".into(),
        toml::Value::String(fake.exe.display().to_string()),
    );
    let tables = BTreeMap::from([("codex".to_owned(), table)]);
    let host = HostEnv::from_pairs([
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", fake.path("home").to_str().unwrap()),
        ("LANG", "C.UTF-8"),
        ("CODEX_API_KEY", KEY_VALUE),
        ("AWS_SECRET_ACCESS_KEY", "aws-should-never-pass"),
    ]);
    let project = fake.path("project");
    let (log, resumed_from) = match opts.resume {
        Some(log) => {
            let id = log.id().to_owned();
            (log, Some(id))
        }
        None => (
            SessionLog::create(
                &fake.path("state"),
                SessionMeta::new(&project, "task", "gpt-test", "codex"),
            )
            .unwrap(),
            None,
        ),
    };
    let gate = ApprovalGate::new(
        ApprovalPolicy::new(opts.level, &BTreeMap::new()).unwrap(),
        opts.interactive,
    );
    let ctx = WorkerContext {
        session_id: log.id().to_owned(),
        project_root: project.clone(),
        model: Some("gpt-test".into()),
        approval_gate: gate,
        session_log: log.clone(),
        resumed_from: resumed_from.clone(),
        cancel: intendant_core::cancel::SessionCancel::new(),
    };
    let backend = AgentWorkers::new(tables, host).build("codex", ctx).unwrap();
    let bus = EventBus::new();
    let inbox = IntentInbox::new(&bus);
    let mut lane = bus.subscribe_session_log();
    let writer = log.spawn_event_writer(bus.subscribe_session_log());
    let answerer = bus.clone();
    let mut answers = opts.answers.into_iter();
    let mut follow_ups = opts.follow_ups.into_iter();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = lane.recv().await {
            match &event {
                AppEvent::ApprovalRequired { id, .. } => {
                    if let Some(a) = answers.next() {
                        answerer.send_intent(a.into_control(*id));
                    }
                }
                AppEvent::RoundComplete { .. } => match follow_ups.next() {
                    Some(text) => answerer.send_intent(ControlMsg::FollowUp { text: text.into() }),
                    // No more input: the session ends.
                    None => answerer.close_intents(),
                },
                _ => {}
            }
            let end = matches!(event, AppEvent::SessionEnded { .. });
            seen.push(event);
            if end {
                break;
            }
        }
        seen
    });
    let start = SessionStart {
        session_id: log.id().to_owned(),
        task: "make the file".into(),
        provider: "codex".into(),
        model: "gpt-test".into(),
        project_root: project,
        resumed: resumed_from.is_some(),
    };
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_session(start, backend, bus, inbox),
    )
    .await
    .expect("the session ends");
    let events = watcher.await.unwrap();
    writer.await.unwrap();
    Ran {
        events,
        result,
        log,
    }
}

fn command_item(id: &str, command: &str) -> Value {
    json!({"type": "commandExecution", "id": id, "command": command, "cwd": "/p",
           "commandActions": [], "status": "inProgress"})
}

fn approval_turn() -> Value {
    json!([
        {"notify": "item/started", "params": {"threadId": "$THREAD", "turnId": "$TURN",
            "item": command_item("call-1", "touch made.txt")}},
        {"request": "item/commandExecution/requestApproval", "params": {"threadId": "$THREAD",
            "turnId": "$TURN", "itemId": "call-1", "startedAtMs": 1, "command": "touch made.txt",
            "cwd": "/p", "reason": "needs to write"},
         "on": {
            "accept": [
                {"notify": "item/completed", "params": {"item": {"type": "commandExecution",
                    "id": "call-1", "command": "touch made.txt", "cwd": "/p", "commandActions": [],
                    "status": "completed", "exitCode": 0, "aggregatedOutput": "ok"}}},
                {"notify": "item/agentMessage/delta", "params": {"itemId": "m1", "delta": "Made "}},
                {"notify": "item/agentMessage/delta", "params": {"itemId": "m1", "delta": "it."}},
                {"notify": "item/completed", "params": {"item": {"type": "agentMessage",
                    "id": "m1", "text": "Made it."}}},
                {"notify": "thread/tokenUsage/updated", "params": {"threadId": "$THREAD",
                    "turnId": "$TURN", "tokenUsage": {"last": {"inputTokens": 100,
                    "cachedInputTokens": 20, "outputTokens": 7, "reasoningOutputTokens": 2,
                    "totalTokens": 107}, "total": {"inputTokens": 100, "cachedInputTokens": 20,
                    "outputTokens": 7, "reasoningOutputTokens": 2, "totalTokens": 107}}}},
                {"complete": "completed"}
            ],
            "decline": [
                {"notify": "item/completed", "params": {"item": {"type": "agentMessage",
                    "id": "m2", "text": "Skipped it."}}},
                {"complete": "completed"}
            ],
            "cancel": [{"complete": "interrupted"}]
         }}
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_command_runs_and_the_turn_maps_onto_our_events() {
    let fake = FakeServer::new(json!({"turns": [approval_turn()]}));
    let ran = run(
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Approve],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(ran.result.is_ok());
    let names = ran.names();
    for name in [
        "turn_started",
        "tool_call",
        "approval_required",
        "approval_resolved",
        "agent_output",
        "model_response",
        "usage",
        "round_complete",
        "done",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let preview = ran.events.iter().find_map(|e| match e {
        AppEvent::ApprovalRequired {
            command_preview,
            detail,
            ..
        } => Some((command_preview.clone(), detail.clone())),
        _ => None,
    });
    assert_eq!(
        preview,
        Some((
            "$ touch made.txt".to_owned(),
            Some("in /p\ncodex says: needs to write".to_owned())
        ))
    );
    assert!(ran.events.iter().any(|e| matches!(
        e,
        AppEvent::Usage {
            input_tokens: 100,
            cached_input_tokens: 20,
            output_tokens: 7,
            ..
        }
    )));
    assert!(ran.events.iter().any(|e| matches!(e,
        AppEvent::Done { message } if message == "Made it.")));
    // What codex got: the handshake, a thread with our autonomy's settings, our decision.
    let received = fake.received();
    assert_eq!(received[1]["method"], "initialize");
    assert!(
        received[1].get("jsonrpc").is_none(),
        "codex speaks JSON-RPC without `jsonrpc`"
    );
    assert_eq!(received[2]["method"], "initialized");
    let start = &fake.received_method("thread/start")[0]["params"];
    assert_eq!(start["approvalPolicy"], "untrusted");
    assert_eq!(start["sandbox"], "workspace-write");
    assert_eq!(start["model"], "gpt-test");
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "accept"}));
    assert_eq!(ran.log.meta().agent_thread.as_deref(), Some("thr-fake-1"));
    // The worker's environment: minimal, with its key, never the caller's other secrets.
    let env = &received[0]["env"];
    assert!(env.as_array().unwrap().contains(&json!("CODEX_API_KEY")));
    assert!(
        !env.as_array()
            .unwrap()
            .contains(&json!("AWS_SECRET_ACCESS_KEY"))
    );
    assert_eq!(received[0]["argv"][0], "app-server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_declines_and_deny_cancels_the_turn() {
    let fake = FakeServer::new(json!({"turns": [approval_turn()]}));
    let ran = run(
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Skip],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "decline"}));

    let fake = FakeServer::new(json!({"turns": [approval_turn()]}));
    let ran = run(
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Deny],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Denied, "{:?}", ran.events);
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "cancel"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_session_denies_without_asking_a_human() {
    let fake = FakeServer::new(json!({"turns": [approval_turn()]}));
    let ran = run(
        &fake,
        Options {
            interactive: false,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Denied);
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "cancel"}));
}

/// A turn that starts a file change of `/p/a.txt` and asks to apply it.
fn file_change_turn() -> Value {
    let change = json!({"type": "fileChange", "id": "fc-1", "status": "inProgress",
        "changes": [{"path": "/p/a.txt", "kind": {"type": "add"}, "diff": "+hi"}]});
    json!([
        {"notify": "item/started", "params": {"item": change}},
        {"request": "item/fileChange/requestApproval", "params": {"threadId": "$THREAD",
            "turnId": "$TURN", "itemId": "fc-1", "startedAtMs": 1}},
        {"complete": "completed"}
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_autonomy_runs_read_only_and_declines_file_changes_unasked() {
    let fake = FakeServer::new(json!({"turns": [file_change_turn()]}));
    let ran = run(
        &fake,
        Options {
            level: AutonomyLevel::Low,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    assert!(!ran.names().contains(&"approval_required"));
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "decline"}));
    assert_eq!(
        fake.received_method("thread/start")[0]["params"]["sandbox"],
        "read-only"
    );
    assert!(
        ran.warnings()
            .iter()
            .any(|w| w.contains("never lets a worker write"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_change_is_asked_with_its_paths_and_diff() {
    let fake = FakeServer::new(json!({"turns": [file_change_turn()]}));
    let ran = run(
        &fake,
        Options {
            answers: vec![ApprovalAnswer::ApproveAll],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    assert!(ran.events.iter().any(|e| matches!(e,
        AppEvent::ApprovalRequired { command_preview, detail: Some(d), category, .. }
            if command_preview == "edit /p/a.txt (add)" && d == "+hi"
            && category.name() == "file_write")));
    assert_eq!(
        fake.answers()[0]["result"],
        json!({"decision": "acceptForSession"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_turn_is_an_error_with_its_last_stderr_lines() {
    let fake = FakeServer::new(json!({"turns": [[
        {"notify": "item/started", "params": {"item": command_item("c1", "make")}},
        {"stderr": format!("panic: the provider key {KEY_VALUE} was refused")},
        {"stderr": "fatal: giving up"},
        {"exit": 3}
    ]]}));
    let ran = run(&fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    let errors = ran.errors().join("\n");
    assert!(errors.contains("codex exited with status 3"), "{errors}");
    assert!(errors.contains("fatal: giving up"), "{errors}");
    assert!(!errors.contains(KEY_VALUE), "the key leaked: {errors}");
    assert!(errors.contains("[REDACTED]"), "{errors}");
    // The session log records it.
    let log = std::fs::read_to_string(ran.log.dir().join("session.jsonl")).unwrap();
    assert!(log.contains("fatal: giving up"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_line_ends_the_session_with_a_clear_error() {
    let fake = FakeServer::new(json!({"turns": [[
        {"raw": "this is not json"},
        {"complete": "completed"}
    ]]}));
    let ran = run(&fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    let errors = ran.errors().join("\n");
    assert!(errors.contains("is not a JSON object"), "{errors}");
    assert!(!errors.contains("this is not json"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_server_request_gets_an_error_answer_and_the_turn_goes_on() {
    let fake = FakeServer::new(json!({"turns": [[
        {"request": "item/tool/requestUserInput", "params": {"questions": []},
         "on": {"error": [
            {"notify": "item/completed", "params": {"item": {"type": "agentMessage",
                "id": "m", "text": "fine"}}},
            {"complete": "completed"}]}}
    ]]}));
    let ran = run(&fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    let answer = &fake.answers()[0];
    assert_eq!(answer["error"]["code"], -32601);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("item/tool/requestUserInput")
    );
    assert!(
        ran.warnings()
            .iter()
            .any(|w| w.contains("item/tool/requestUserInput"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_turn_warns_and_still_ends_when_the_protocol_says_so() {
    let fake = FakeServer::new(json!({"turns": [[
        {"sleep": 3},
        {"notify": "item/completed", "params": {"item": {"type": "agentMessage",
            "id": "m", "text": "slow but done"}}},
        {"complete": "completed"}
    ]]}));
    let mut table = toml::Table::new();
    table.insert("wedge_after_secs".into(), toml::Value::Integer(1));
    let ran = run(
        &fake,
        Options {
            table,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    assert!(
        ran.warnings()
            .iter()
            .any(|w| w.contains("has sent nothing")),
        "{:?}",
        ran.events
    );
    assert!(ran.events.iter().any(|e| matches!(e,
        AppEvent::Done { message } if message == "slow but done")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_fails_the_session() {
    let fake = FakeServer::new(json!({"turns": [[
        {"notify": "error", "params": {"error": {"message": "HTTP 500"}, "willRetry": false,
            "threadId": "$THREAD", "turnId": "$TURN"}},
        {"complete": "failed", "error": "HTTP 500"}
    ]]}));
    let ran = run(&fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    assert!(ran.errors().iter().any(|e| e.contains("HTTP 500")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_are_turns_of_the_same_thread_and_resume_continues_it() {
    let reply = |text: &str| {
        json!([{"notify": "item/completed", "params": {"item": {"type": "agentMessage",
            "id": "m", "text": text}}}, {"complete": "completed"}])
    };
    let fake =
        FakeServer::new(json!({"thread_id": "thr-kept", "turns": [reply("one"), reply("two")]}));
    let ran = run(
        &fake,
        Options {
            follow_ups: vec!["and then?"],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    let turns = fake.received_method("turn/start");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1]["params"]["threadId"], "thr-kept");
    assert_eq!(turns[1]["params"]["input"][0]["text"], "and then?");
    assert_eq!(ran.log.meta().agent_thread.as_deref(), Some("thr-kept"));

    // A new app-server, resuming the recorded session: thread/resume with the recorded id.
    let again = FakeServer::new(json!({"thread_id": "thr-other", "turns": [reply("back")]}));
    let resumed = run(
        &again,
        Options {
            resume: Some(ran.log.clone()),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(resumed.status(), EndStatus::Completed);
    assert!(again.received_method("thread/start").is_empty());
    assert_eq!(
        again.received_method("thread/resume")[0]["params"]["threadId"],
        "thr-kept"
    );
}

#[test]
fn an_unknown_worker_name_is_a_clear_error() {
    let factory = AgentWorkers::new(BTreeMap::new(), HostEnv::default());
    let dir = tempfile::tempdir().unwrap();
    let log =
        SessionLog::create(dir.path(), SessionMeta::new(Path::new("/p"), "t", "m", "p")).unwrap();
    let ctx = WorkerContext {
        session_id: log.id().to_owned(),
        project_root: dir.path().to_owned(),
        model: None,
        approval_gate: ApprovalGate::new(
            ApprovalPolicy::new(AutonomyLevel::Medium, &BTreeMap::new()).unwrap(),
            true,
        ),
        session_log: log,
        resumed_from: None,
        cancel: intendant_core::cancel::SessionCancel::new(),
    };
    let err = factory.build("nope", ctx).err().unwrap();
    assert!(
        err.contains("unknown agent `nope`") && err.contains("codex"),
        "{err}"
    );
}

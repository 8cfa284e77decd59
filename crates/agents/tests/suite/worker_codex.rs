//! The codex app-server worker against a fake app-server (`fixtures/fake_app_server.py`)
//! replaying scripted turns: approvals answered from the session's gate, a crash mid-turn, a
//! malformed line, an unknown server request, a wedged turn, follow-ups and resume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use intendant_agents::HostEnv;
use intendant_agents::worker::AgentWorkers;
use intendant_core::approval::{ApprovalAnswer, ApprovalGate, ApprovalPolicy};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::session::{WorkerContext, WorkerFactory};
use intendant_core::session_log::{SessionLog, SessionMeta};
use intendant_protocol::events::{AppEvent, EndStatus, RoundEnd, Verdict};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::support::{KEY_VALUE, fixtures};
use super::worker_session::{
    Options, Ran, assert_interrupted_then_followed_up, assert_no_process_left, records, run_with,
};

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
        records(&self.record)
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
    let opts = Options {
        model: "gpt-test",
        ..opts
    };
    run_with("codex", tables, host, fake.dir.path(), opts).await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_lowered_while_the_session_runs_reaches_codex_at_its_next_turn() {
    let reply = |text: &str| {
        json!([{"notify": "item/completed", "params": {"item": {"type": "agentMessage",
            "id": "m", "text": text}}}, {"complete": "completed"}])
    };
    let fake = FakeServer::new(json!({"thread_id": "thr", "turns": [reply("one"), reply("two")]}));
    let ran = run(
        &fake,
        Options {
            level: AutonomyLevel::High,
            follow_ups: vec!["and then?"],
            relevel_after_round: Some(AutonomyLevel::Low),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed);
    let start = &fake.received_method("thread/start")[0]["params"];
    assert_eq!(start["approvalPolicy"], "on-request");
    let turns = fake.received_method("turn/start");
    assert_eq!(turns.len(), 2);
    // The first turn runs at the thread's level; the second gets the lowered one.
    assert!(
        turns[0]["params"].get("approvalPolicy").is_none(),
        "{turns:#?}"
    );
    assert_eq!(
        turns[1]["params"]["approvalPolicy"], "untrusted",
        "{turns:#?}"
    );
    assert_eq!(
        turns[1]["params"]["sandboxPolicy"],
        json!({"type": "readOnly"})
    );
}

#[test]
fn an_unknown_worker_name_is_a_clear_error() {
    let factory = AgentWorkers::new(HostEnv::default());
    let dir = tempfile::tempdir().unwrap();
    let log =
        SessionLog::create(dir.path(), SessionMeta::new(Path::new("/p"), "t", "m", "p")).unwrap();
    let ctx = WorkerContext {
        session_id: log.id().to_owned(),
        project_root: dir.path().to_owned(),
        model: None,
        command: Vec::new(),
        approval_gate: ApprovalGate::new(
            ApprovalPolicy::new(AutonomyLevel::Medium, &BTreeMap::new()).unwrap(),
            true,
        ),
        session_log: log,
        resumed_from: None,
        cancel: intendant_core::cancel::SessionCancel::new(),
        agent_config: BTreeMap::new(),
        checkpoints: None,
        placement: None,
        guard: None,
    };
    let err = factory.build("nope", ctx).err().unwrap();
    assert!(
        err.contains("unknown agent `nope`") && err.contains("codex"),
        "{err}"
    );
}

/// A turn that starts a command and then waits for our `turn/interrupt`.
fn interruptible_turn(spawn: bool) -> Value {
    let mut turn = vec![
        json!({"notify": "item/started", "params": {"threadId": "$THREAD",
        "turnId": "$TURN", "item": command_item("call-1", "make")}}),
    ];
    if spawn {
        turn.push(json!({"spawn": "exec sleep 600"}));
    }
    turn.push(json!({"await_interrupt": true}));
    Value::Array(turn)
}

fn reply(text: &str) -> Value {
    json!([{"notify": "item/completed", "params": {"item": {"type": "agentMessage",
        "id": "m", "text": text}}}, {"complete": "completed"}])
}

/// An interrupted round, then a follow-up turn of the same thread.
fn interrupted_then_followed_up(ran: &Ran, fake: &FakeServer) {
    assert_interrupted_then_followed_up(ran);
    let interrupts = fake.received_method("turn/interrupt");
    assert_eq!(interrupts.len(), 1);
    assert_eq!(
        interrupts[0]["params"],
        json!({"threadId": "thr-fake-1", "turnId": "turn-1"})
    );
    let turns = fake.received_method("turn/start");
    assert_eq!(turns[1]["params"]["input"][0]["text"], "go on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_turn_ends_the_round_and_a_follow_up_runs() {
    let fake =
        FakeServer::new(json!({"turns": [interruptible_turn(false), reply("Second answer.")]}));
    let ran = run(
        &fake,
        Options {
            interrupt_on: Some("tool_call"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    interrupted_then_followed_up(&ran, &fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_answers_a_pending_approval_cancel() {
    let asking = json!([
        {"request": "item/commandExecution/requestApproval", "params": {"threadId": "$THREAD",
            "turnId": "$TURN", "itemId": "call-1", "startedAtMs": 1, "command": "touch made.txt",
            "cwd": "/p"},
         "on": {"cancel": [{"await_interrupt": true}]}}
    ]);
    let fake = FakeServer::new(json!({"turns": [asking, reply("Second answer.")]}));
    let ran = run(
        &fake,
        Options {
            interrupt_on: Some("approval_required"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    interrupted_then_followed_up(&ran, &fake);
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    assert_eq!(fake.answers()[0]["result"], json!({"decision": "cancel"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_codex_resolves_itself_leaves_the_approval_queue() {
    let withdrawn = json!([
        {"request": "item/commandExecution/requestApproval", "wait": false, "params": {
            "threadId": "$THREAD", "turnId": "$TURN", "itemId": "call-1", "startedAtMs": 1,
            "command": "touch made.txt", "cwd": "/p"}},
        {"wait_file": "../go"},
        {"notify": "serverRequest/resolved", "params": {"threadId": "$THREAD", "requestId": 101}},
        {"notify": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m",
            "text": "Never mind."}}},
        {"complete": "completed"}
    ]);
    let fake = FakeServer::new(json!({"turns": [withdrawn]}));
    let ran = run(
        &fake,
        Options {
            signal_on: Some("approval_required"),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert_eq!(ran.verdicts(), [Verdict::Skip]);
    assert_eq!(ran.done(), ["Never mind."]);
    assert!(fake.answers().is_empty(), "{:?}", fake.answers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_mid_turn_interrupts_ends_the_session_and_leaves_no_process() {
    let fake = FakeServer::new(json!({"turns": [interruptible_turn(true)]}));
    let ran = run(
        &fake,
        Options {
            stop_on: Some("tool_call"),
            follow_ups: vec!["never sent"],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Interrupted, "{:?}", ran.events);
    assert_eq!(ran.rounds(), [RoundEnd::Interrupted]);
    assert_eq!(fake.received_method("turn/interrupt").len(), 1);
    assert_eq!(fake.received_method("turn/start").len(), 1);
    assert!(ran.logged().contains("\"status\":\"interrupted\""));
    assert_no_process_left(&fake.received()).await;
}

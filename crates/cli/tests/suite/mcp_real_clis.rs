//! Real MCP clients: the pinned `claude -p` (with `--mcp-config`) and `codex exec` (with an
//! `mcp_servers` entry) each start `intendant mcp`, and a fake-model script makes them call its
//! `run_task`. The nested Intendant session runs on the same fake model (its own script, picked
//! by its task), writes its file, and its final text comes back to the outer CLI, whose final
//! answer follows. Each test checks the file, that answer, and the session's log.
//!
//! Missing CLIs fail when `CI` is set and are skipped with a note otherwise. Proxy variables point
//! at a closed loopback port and telemetry is off, so nothing leaves the machine.

use std::process::{Output, Stdio};
use std::time::Duration;

use intendant_testkit::{FakeModelServer, Scenario, Wire, clis};
use serde_json::{Value, json};

use super::controller::harness::DUMMY_KEY;
use super::mcp_daemon::{DaemonGuard, McpWorld};
use super::sessions::{exec_turn, text_turn};

/// A hung CLI fails the test well inside two minutes.
const CLI_TIMEOUT: Duration = Duration::from_secs(110);
/// In the nested session's task only: what tells its conversation from the outer one.
const NESTED_TASK: &str = "NESTED-TASK: write nested.txt saying nested";
const NESTED_FINAL: &str = "Nested session wrote nested.txt.";
const OUTER_FINAL: &str = "Intendant did it: nested.txt is written.";
const OUTER_PROMPT: &str = "Hand the file job to Intendant and tell me how it went.";

/// The outer CLI calls `tool` (its name for our `run_task`) once and then answers, after the
/// tool result carrying the nested session's final text; the nested session (full autonomy, so
/// its write needs no approval) writes its file and says it did.
fn scenario(world: &McpWorld, tool: &str) -> Scenario {
    let run_task = json!({
        "task": NESTED_TASK,
        "project_dir": world.project(),
        "autonomy": "full",
        "provider": "openai",
        "model": "fake-model",
        "wait_s": 45,
    });
    let scenario = json!({
        "model": "fake-model",
        "side_requests": {"when_no_tools": true, "reply": "Fake title"},
        "turns": [
            {"tool_calls": [{"name": tool, "arguments": run_task}],
             "expect": {"tools": [tool]}},
            {"text": OUTER_FINAL,
             "expect": {"tool_results_for_previous": true, "body_contains": [NESTED_FINAL]}},
        ],
        "scripts": [{
            "when_task_contains": "NESTED-TASK",
            "turns": [exec_turn("echo nested > nested.txt"), text_turn(NESTED_FINAL)],
        }],
    });
    Scenario::from_json(&scenario.to_string()).unwrap()
}

/// The environment `intendant mcp` gets from the client's server entry.
fn server_env(world: &McpWorld, model: &FakeModelServer) -> Value {
    json!({
        "INTENDANT_HOME": world.home(),
        "OPENAI_API_KEY": DUMMY_KEY,
        "OPENAI_BASE_URL": model.base_url(Wire::OpenAiResponses),
    })
}

/// A client process with nothing inherited but PATH, a HOME of its own, and every route off
/// the machine closed.
fn client_command(program: &std::path::Path, world: &McpWorld) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", world.root.path().join("home"))
        .envs(clis::offline_env())
        .current_dir(world.project())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// A world whose fake model scripts the outer CLI calling `tool` (its name for our
/// `run_task`), and the guard that shuts its daemon down.
async fn outer_world(tool: &str) -> (McpWorld, FakeModelServer, DaemonGuard) {
    let world = McpWorld::new();
    let model = FakeModelServer::start(scenario(&world, tool))
        .await
        .unwrap();
    let daemon = world.daemon_guard(&model);
    (world, model, daemon)
}

/// Runs the CLI to its end; its output and a report of it and of the fake model's checks.
async fn run(mut cmd: tokio::process::Command, model: &FakeModelServer) -> (Output, String) {
    let child = cmd.spawn().unwrap();
    let output = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .expect("the CLI finishes in time")
        .unwrap();
    let report = format!(
        "{}\nfake model: {:?}",
        describe(&output),
        model.invariant_violations()
    );
    (output, report)
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The nested session's work and records: the file, both scripts played with nothing broken,
/// and the session's log holding its command and its final text.
fn assert_nested_session(world: &McpWorld, model: &FakeModelServer, report: &str) {
    assert_eq!(
        model.invariant_violations(),
        Vec::<String>::new(),
        "{report}"
    );
    assert_eq!(model.turns_consumed(), 2, "{report}");
    assert_eq!(model.script_turns_consumed(0), 2, "{report}");
    assert_eq!(
        std::fs::read_to_string(world.project().join("nested.txt")).unwrap(),
        "nested\n"
    );
    let listed = world
        .command(&["sessions", "--json"], model)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let sessions = listed.as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["task"], NESTED_TASK);
    let id = sessions[0]["id"].as_str().unwrap();
    let shown = world
        .command(&["sessions", "show", id, "--json"], model)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", describe(&shown));
    let log = String::from_utf8_lossy(&shown.stdout);
    for needle in ["echo nested > nested.txt", NESTED_FINAL] {
        assert!(log.contains(needle), "{needle} not in the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_runs_a_task_through_intendant_mcp() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let tool = "mcp__intendant__run_task";
    let (world, model, _daemon) = outer_world(tool).await;
    let config = json!({"mcpServers": {"intendant": {
        "type": "stdio",
        "command": env!("CARGO_BIN_EXE_intendant"),
        "args": ["mcp"],
        "env": server_env(&world, &model),
    }}});
    let mut cmd = client_command(&claude, &world);
    cmd.env("ANTHROPIC_BASE_URL", model.base_url(Wire::Anthropic))
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-claude")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("DISABLE_AUTOUPDATER", "1")
        // MCP tools offered directly, not behind Claude's deferred tool search.
        .env("ENABLE_TOOL_SEARCH", "false")
        .args(["-p", "--output-format", "json", "--strict-mcp-config"])
        .arg("--mcp-config")
        .arg(config.to_string())
        .args(["--allowedTools", tool, "--", OUTER_PROMPT]);
    let (output, report) = run(cmd, &model).await;
    assert!(output.status.success(), "{report}");
    let result: Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {report}"));
    assert_eq!(result["is_error"], false, "{report}");
    assert_eq!(result["result"], OUTER_FINAL, "{report}");
    assert_nested_session(&world, &model, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_a_task_through_intendant_mcp() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    // Codex offers an MCP server's tools as a namespace, `mcp__SERVER`.
    let tool = "mcp__intendant.run_task";
    let (world, model, _daemon) = outer_world(tool).await;
    let codex_home = world.root.path().join("codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let env = server_env(&world, &model);
    let env: Vec<String> = env
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let server = format!(
        "mcp_servers.intendant={{command={},args=[\"mcp\"],env={{{}}},\
         tool_timeout_sec=100,default_tools_approval_mode=\"approve\"}}",
        json!(env!("CARGO_BIN_EXE_intendant")),
        env.join(",")
    );
    let mut args = clis::codex_exec_args(&model.base_url(Wire::OpenAiResponses), OUTER_PROMPT);
    let prompt = args.pop().unwrap();
    args.extend(["-c".to_owned(), server, prompt]);
    let mut cmd = client_command(&codex, &world);
    cmd.env("CODEX_HOME", &codex_home)
        .env(clis::CODEX_KEY_VAR, "sk-fake-codex")
        .args(args);
    let (output, report) = run(cmd, &model).await;
    assert!(output.status.success(), "{report}");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let called = events.iter().any(|e| {
        e["type"] == "item.completed"
            && e["item"]["type"] == "mcp_tool_call"
            && e["item"]["server"] == "intendant"
    });
    assert!(called, "codex called the MCP tool: {report}");
    let answer = events
        .iter()
        .rev()
        .find(|e| e["item"]["type"] == "agent_message")
        .map(|e| e["item"]["text"].clone());
    assert_eq!(answer, Some(json!(OUTER_FINAL)), "{report}");
    assert_nested_session(&world, &model, &report);
}

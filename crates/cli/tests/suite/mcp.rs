//! The real `intendant mcp` binary, driven by an `rmcp` client over its stdio, connected through
//! the real control socket to a scripted host served in this process: every tool, the error
//! paths, the approval round trip, garbage on stdin, and no credential in a result.

use std::path::PathBuf;
use std::sync::Arc;

use intendant_core::host::SessionHost;
use intendant_core::host::double::HostDouble;
use intendant_protocol::events::AppEvent;
use intendant_server::socket::{ControlSocket, DaemonLock};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::json;

#[path = "../../../server/tests/suite/mcp_client.rs"]
pub mod mcp_client;

use mcp_client::{call, failed, ok};

/// A key the `intendant mcp` process holds (secluded at its start, as every credential).
const KEY: &str = "sk-mcp-test-5f3c9a7e1b2d4c6a";

struct World {
    root: tempfile::TempDir,
    host: Arc<HostDouble>,
}

impl World {
    /// A state root whose control socket is served by the scripted host.
    async fn served() -> World {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("project")).unwrap();
        let world = World {
            root,
            host: HostDouble::scripted(),
        };
        let lock = DaemonLock::acquire(&world.home()).unwrap();
        // An owner who lets the model answer approvals and raise autonomy (the default, off,
        // is `security_daemon` and the server's `mcp_policy` tests).
        std::fs::write(
            world.home().join("intendant.toml"),
            "[mcp]\nallow_model_approvals = true\nmax_autonomy = \"full\"\n",
        )
        .unwrap();
        let socket = ControlSocket::bind(&lock).unwrap();
        let host: Arc<dyn SessionHost> = world.host.clone();
        tokio::spawn(async move {
            let _lock = lock;
            socket.serve(host, std::future::pending()).await;
        });
        world
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("ihome")
    }

    fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_intendant"));
        cmd.arg("mcp")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path())
            .env("INTENDANT_HOME", self.home())
            .env("OPENAI_API_KEY", KEY)
            .current_dir(self.project());
        cmd
    }

    async fn client(&self) -> RunningService<RoleClient, ()> {
        ().serve(TokioChildProcess::new(self.command()).unwrap())
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_through_the_binary_and_the_socket() {
    let world = World::served().await;
    let client = world.client().await;
    let peer = client.peer();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 15);

    // The round trip: a task that needs approval, the queue, the verdict, the session done.
    let started = ok(call(
        peer,
        "run_task",
        json!({"task": "this needs approval", "project_dir": ".", "wait_s": 10}),
    )
    .await);
    assert_eq!(started["wait"], "needs_human");
    let session = started["session_id"].as_str().unwrap().to_owned();
    let listed = ok(call(peer, "list_approvals", json!({})).await);
    let approval = listed["approvals"][0]["id"].as_u64().unwrap();
    assert_eq!(listed["approvals"][0]["command_preview"], "$ touch out.txt");
    ok(call(
        peer,
        "resolve_approval",
        json!({"session_id": session, "approval_id": approval, "decision": "approve"}),
    )
    .await);
    let done = loop {
        let got = ok(call(peer, "get_session", json!({"session_id": session})).await);
        if got["status"] == "idle" {
            break got;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(done["final_text"], "approved and done: wrote out.txt");
    assert!(
        world.host.calls()[0].ends_with(&format!(
            " in {}",
            world.project().canonicalize().unwrap().display()
        )),
        "{:?}",
        world.host.calls()
    );
    let (code, _) = failed(
        call(
            peer,
            "resolve_approval",
            json!({"session_id": session, "approval_id": approval, "decision": "approve"}),
        )
        .await,
    );
    assert_eq!(code, "already_answered");

    let followed = ok(call(
        peer,
        "send_message",
        json!({"session_id": session, "text": "again", "wait_s": 10}),
    )
    .await);
    assert_eq!(followed["final_text"], "follow-up done: again");
    let asked = ok(call(
        peer,
        "run_task",
        json!({"task": "ask me", "project_dir": world.project(), "wait_s": 10}),
    )
    .await);
    assert_eq!(asked["wait"], "needs_human");
    ok(call(
        peer,
        "answer_question",
        json!({"session_id": "s3", "text": "out.txt"}),
    )
    .await);
    ok(call(peer, "interrupt", json!({"session_id": session})).await);
    ok(call(
        peer,
        "set_autonomy",
        json!({"session_id": session, "level": "high"}),
    )
    .await);
    ok(call(peer, "set_autonomy", json!({"level": "low"})).await);
    ok(call(peer, "stop", json!({"session_id": session})).await);
    let all = ok(call(peer, "list_sessions", json!({})).await);
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2);
    let calls = world.host.calls();
    for expected in [
        format!("interrupt {session}"),
        format!("set_autonomy Some(\"{session}\") high"),
        "set_autonomy None low".to_owned(),
        format!("stop {session}"),
        "send s3 {\"action\":\"input\",\"text\":\"out.txt\"}".to_owned(),
    ] {
        assert!(calls.contains(&expected), "{expected} not in {calls:?}");
    }
    let transcript = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "intendant://session/{session}"
        )))
        .await
        .unwrap();
    assert!(
        format!("{transcript:?}").contains("approval #2 needed"),
        "{transcript:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_from_the_binary() {
    let world = World::served().await;
    let client = world.client().await;
    let peer = client.peer();
    let err = peer
        .call_tool(CallToolRequestParams::new("rm_rf"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown tool \"rm_rf\""), "{err}");
    for (tool, args, want) in [
        ("run_task", json!({"project_dir": "."}), "invalid_arguments"),
        (
            "run_task",
            json!({"task": "t", "project_dir": "nowhere"}),
            "invalid_request",
        ),
        (
            "get_session",
            json!({"session_id": "nope"}),
            "unknown_session",
        ),
        ("stop", json!({"session_id": "nope"}), "unknown_session"),
        (
            "delegate",
            json!({"agent": "nobody", "prompt": "p", "schema": {"type": "object"}}),
            "runtime_unsupported_capability",
        ),
        (
            "delegate",
            json!({"agent": "codex", "prompt": "p", "schema": {"type": "object"},
                   "project_dir": "/no/such/dir"}),
            "invalid_request",
        ),
        (
            "resolve_approval",
            json!({"session_id": "nope", "approval_id": 9, "decision": "deny"}),
            "unknown_session",
        ),
    ] {
        let (code, message) = failed(call(peer, tool, args).await);
        assert_eq!(code, want, "{tool}: {message}");
    }
    ok(call(peer, "run_task", json!({"task": "t", "project_dir": "."})).await);
    let (code, _) = failed(
        call(
            peer,
            "resolve_approval",
            json!({"session_id": "s1", "approval_id": 9, "decision": "deny"}),
        )
        .await,
    );
    assert_eq!(code, "unknown_approval");

    // The key the server holds never reaches a result, whatever a session printed.
    world.host.publish(
        "s1",
        AppEvent::Error {
            message: format!("env says {KEY}"),
        },
    );
    let result = call(peer, "get_session", json!({"session_id": "s1"})).await;
    let text = serde_json::to_string(&result).unwrap();
    assert!(!text.contains(KEY), "{text}");
    assert!(text.contains("env says [redacted]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_survives_garbage_on_stdin() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let world = World::served().await;
    let mut child = world
        .command()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in [
        "garbage",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\u{0}\u{1b}[31m not json",
        "{\"jsonrpc\":",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sessions","arguments":{}}}"#,
    ] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("intendant mcp hung up");
        let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
        if reply["id"] == 2 {
            assert_eq!(
                reply["result"]["structuredContent"],
                json!({"sessions": [], "omitted": 0})
            );
            break;
        }
    }
    drop(stdin);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_daemon_runs_an_in_process_supervisor() {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_intendant"));
    cmd.args(["mcp", "--no-daemon"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root.path())
        .env("INTENDANT_HOME", root.path().join("ihome"))
        .current_dir(&project);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let peer = client.peer();
    assert_eq!(
        ok(call(peer, "list_sessions", json!({})).await)["sessions"],
        json!([])
    );
    let (code, message) = failed(call(peer, "get_session", json!({"session_id": "nope"})).await);
    assert_eq!(code, "unknown_session", "{message}");
    let (code, _) = failed(
        call(
            peer,
            "run_task",
            json!({"task": "t", "project_dir": "gone"}),
        )
        .await,
    );
    assert_eq!(code, "invalid_request");
    // No daemon was started for the state root.
    assert!(!root.path().join("ihome/daemon.sock").exists());
}

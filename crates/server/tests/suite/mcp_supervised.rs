//! MCP's tools on the real session supervisor, with sessions of the mock provider: what a
//! model driving sessions over MCP is answered when the session's own rounds decide it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::host::SessionHost;
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_daemon::control_plane::{self, McpPolicy};
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::daemon::{Backend, SessionStatus, Settings, StartRequest};
use intendant_server::mcp::redact::Redactor;
use rmcp::ServiceExt;
use serde_json::json;

use super::mcp_client::{call, ok};
use super::mcp_tools::serve_mcp;

/// `send_message` waiting on a session whose round works waits for the round that takes the
/// message, and answers with what that round said: it returned at the end of the round going
/// on when it was sent, with that round's answer, as if the session had answered the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_during_a_round_is_answered_by_the_round_that_takes_it() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let scenario = project.path().join("rounds.scenario.json");
    let done = |message: &str| json!({"text": message, "tool_calls": [{"name": "signal_done", "arguments": {"message": message}}]});
    std::fs::write(
        &scenario,
        json!({"model": "fake-model", "turns": [
            {"text": "Waiting.", "tool_calls": [{"name": "exec_command", "arguments":
                {"command": "while [ ! -e go ]; do sleep 0.05; done"}}]},
            done("the first task is done"),
            done("the message is answered")
        ]})
        .to_string(),
    )
    .unwrap();
    let env = AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(intendant_testkit::built_binary(
            intendant_core::runner::RUNTIME_BIN,
            intendant_core::runner::RUNTIME_PATH_ENV,
        )),
        config_dir: None,
        store: SharedStore::new(home.path()),
        process_env: BTreeMap::new(),
    };
    control_plane::save(
        home.path(),
        &Settings {
            default_autonomy: AutonomyLevel::Full,
            default_backend: Backend::Native,
            max_running: 2,
            max_autonomy: AutonomyLevel::Full,
        },
    )
    .unwrap();
    let supervisor = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
    let started = supervisor
        .start(StartRequest {
            task: "wait for go".into(),
            project: project.path().display().to_string(),
            provider: Some("mock".into()),
            scenario: Some(scenario.display().to_string()),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    let id = started.id;
    // Its round works: its command waits.
    let mut ran = false;
    for _ in 0..400 {
        let pids = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("cmdline"))
                .is_ok_and(|c| c.contains("while [ ! -e go ]"))
        });
        if pids {
            ran = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ran, "the command never ran");
    assert_eq!(
        supervisor.session(&id).await.unwrap().status,
        SessionStatus::Running
    );

    let client_io = serve_mcp(
        Arc::new(supervisor.clone()),
        Some(project.path().to_path_buf()),
        Redactor::new([]),
        McpPolicy::default(),
    );
    let client = ().serve(client_io).await.unwrap();
    let peer = client.peer().clone();
    let session = id.clone();
    let sent = tokio::spawn(async move {
        ok(call(
            &peer,
            "send_message",
            json!({"session_id": session, "text": "and one more thing", "wait_s": 30}),
        )
        .await)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!sent.is_finished(), "it waits while the round works");
    std::fs::write(project.path().join("go"), "").unwrap();
    let answered = sent.await.unwrap();
    assert_eq!(answered["wait"], "round_complete", "{answered}");
    assert_eq!(
        answered["final_text"], "the message is answered",
        "{answered}"
    );
    client.cancel().await.unwrap();
    supervisor.stop(&id).await.unwrap();
}

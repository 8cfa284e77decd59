//! The agenda over MCP on the real session supervisor and database, through a real `rmcp`
//! client: `schedule` puts the request on the agenda and in the approval queue exactly as `ctl
//! schedule` does, and no tool of the server approves it, even where the owner lets a model
//! answer approvals; the agenda is a resource whose subscribers hear of each agenda event.

use std::collections::BTreeMap;
use std::sync::Arc;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::host::SessionHost;
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_daemon::control_plane::{self, McpPolicy};
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::agenda::{AgendaOp, AgendaState};
use intendant_protocol::daemon::{Backend, SessionIntent, Settings};
use intendant_protocol::events::{ActionCategory, ControlMsg};
use intendant_server::mcp::redact::Redactor;
use rmcp::ServiceExt;
use serde_json::json;

use super::mcp_client::{Recorder, call, failed, ok};
use super::mcp_tools::serve_mcp;

/// A daemon's supervisor on a fresh state root (default `medium`, nothing runs).
fn supervisor(home: &std::path::Path) -> Supervisor {
    let env = AssemblyEnv {
        home: home.to_path_buf(),
        runtime_path: None,
        config_dir: None,
        store: SharedStore::new(home),
        process_env: BTreeMap::new(),
    };
    control_plane::save(
        home,
        &Settings {
            default_autonomy: AutonomyLevel::Medium,
            default_backend: Backend::Native,
            max_running: 2,
            max_autonomy: AutonomyLevel::Full,
        },
    )
    .unwrap();
    Supervisor::new(env, None, SupervisorOptions::default()).unwrap()
}

/// A due reminder reaches an MCP client that subscribed to `intendant://agenda`, and reading
/// the resource lists the entry.
#[tokio::test]
async fn an_mcp_client_subscribed_to_the_agenda_hears_a_due_reminder() {
    use rmcp::model::{ReadResourceRequestParams, ResourceContents, SubscribeRequestParams};
    let home = tempfile::tempdir().unwrap();
    let supervisor = supervisor(home.path());
    let client_io = serve_mcp(
        Arc::new(supervisor.clone()),
        Some(home.path().to_path_buf()),
        Redactor::new([]),
        McpPolicy::default(),
    );
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let client = Recorder {
        updates: tx,
        answer: None,
    }
    .serve(client_io)
    .await
    .unwrap();
    let listed = client.list_all_resources().await.unwrap();
    assert!(
        listed.iter().any(|r| r.uri == "intendant://agenda"),
        "{listed:?}"
    );
    #[allow(deprecated)] // the session model this server speaks (up to 2025-11-25)
    client
        .subscribe(SubscribeRequestParams::new("intendant://agenda"))
        .await
        .unwrap();
    ok(call(
        client.peer(),
        "agenda",
        json!({"action": "add", "text": "renew the cert", "remind_at": "+1m"}),
    )
    .await);
    // A minute later, as the daemon's timer sees it.
    let later = intendant_protocol::utc::UtcTime::now().unix_seconds() + 61;
    supervisor.agenda_tick(later).await;
    let uri = tokio::time::timeout(std::time::Duration::from_secs(10), updates.recv())
        .await
        .expect("no update for the due reminder")
        .unwrap();
    assert_eq!(uri, "intendant://agenda");
    let read = client
        .read_resource(ReadResourceRequestParams::new("intendant://agenda"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("{read:?}")
    };
    let entries: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(entries[0]["text"], "renew the cert", "{entries}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn security_mcp_a_scheduled_session_waits_for_its_owner() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let supervisor = supervisor(home.path());
    // The owner lets the model answer approvals, up to `high`: still not a schedule.
    let policy = McpPolicy {
        max_autonomy: AutonomyLevel::High,
        allow_model_approvals: true,
        projects: Vec::new(),
    };
    let client_io = serve_mcp(
        Arc::new(supervisor.clone()),
        Some(project.path().to_path_buf()),
        Redactor::new([]),
        policy,
    );
    let client = ().serve(client_io).await.unwrap();
    let peer = client.peer();

    let answer = ok(call(
        peer,
        "schedule",
        json!({"at": "+1h", "task": "nightly dependency review", "project_dir": project.path(),
               "model": "fake-model", "provider": "mock"}),
    )
    .await);
    let entry = &answer["entries"][0];
    assert_eq!(entry["state"], "pending", "{answer}");
    assert_eq!(entry["kind"], "schedule");
    let real = std::fs::canonicalize(project.path()).unwrap();
    assert_eq!(entry["request"]["project"], real.to_str().unwrap());
    assert_eq!(
        entry["request"]["autonomy"], "medium",
        "the default in force now is stored in the request"
    );
    assert_eq!(entry["request"]["model"], "fake-model");
    assert!(entry["digest"].as_str().unwrap().len() == 64, "{entry}");
    assert!(answer["note"].as_str().unwrap().contains("not approved"));
    let id = entry["id"].as_u64().unwrap();

    // In the approval queue as `ctl schedule` leaves it: category schedule, under `agenda`.
    let queue = supervisor.approvals().await.unwrap();
    assert_eq!(queue.len(), 1, "{queue:?}");
    assert_eq!(
        (queue[0].session_id.as_str(), queue[0].category, queue[0].id),
        ("agenda", ActionCategory::Schedule, id)
    );
    let listed = ok(call(peer, "list_approvals", json!({"session_id": "agenda"})).await);
    assert_eq!(listed["approvals"][0]["id"], id, "{listed}");

    // No tool of the server approves it.
    for decision in ["approve", "approve_all"] {
        let (code, message) = failed(
            call(
                peer,
                "resolve_approval",
                json!({"session_id": "agenda", "approval_id": id, "decision": decision}),
            )
            .await,
        );
        assert_eq!(code, "forbidden", "{message}");
    }
    let (code, _) = failed(call(peer, "agenda", json!({"action": "approve", "id": id})).await);
    assert_eq!(code, "invalid_arguments");

    // Bad input: each refused, nothing added.
    let refusals = [
        (
            json!({"at": "2020-01-01T00:00:00Z", "task": "t", "project_dir": project.path()}),
            "invalid_request",
            "in the past",
        ),
        (
            json!({"at": "2030-01-01T09:00:00 Mars/Olympus_Mons", "task": "t",
                   "project_dir": project.path()}),
            "invalid_request",
            "unknown timezone",
        ),
        (
            json!({"at": "+1h", "task": "t", "project_dir": project.path(), "autonomy": "full"}),
            "forbidden",
            "max_autonomy",
        ),
        (
            json!({"at": "+1h", "task": "t", "project_dir": elsewhere.path()}),
            "forbidden",
            "",
        ),
        (
            json!({"at": "+1h", "task": " ", "project_dir": project.path()}),
            "invalid_arguments",
            "empty",
        ),
        (
            json!({"at": "+1h", "task": "t", "project_dir": project.path(), "wait_s": 5}),
            "invalid_arguments",
            "",
        ),
    ];
    for (args, want, says) in refusals {
        let (code, message) = failed(call(peer, "schedule", args.clone()).await);
        assert_eq!(code, want, "{args}: {message}");
        assert!(message.contains(says), "{args}: {message}");
    }
    let entries = supervisor.agenda(AgendaOp::List).await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].state, AgendaState::Pending, "still its owner's");

    // Its owner approves it (the socket's or the dashboard's answer).
    supervisor
        .send(SessionIntent {
            session_id: "agenda".into(),
            msg: ControlMsg::Approve { id },
        })
        .await
        .unwrap();
    let entries = supervisor.agenda(AgendaOp::List).await.unwrap();
    assert_eq!(entries[0].state, AgendaState::Approved);
    client.cancel().await.unwrap();
}

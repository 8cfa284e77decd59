//! What a model driving MCP may do, as its owner set it (`[mcp]`,
//! `intendant_daemon::control_plane::McpPolicy`): the tools that answer approvals or change
//! autonomy exist only where allowed, no level above `[mcp] max_autonomy`, and only the projects
//! a human gave the server. Over the in-test host double, through a real `rmcp` client.

use intendant_daemon::control_plane::McpPolicy;
use intendant_protocol::autonomy::AutonomyLevel;
use rmcp::ClientHandler;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use super::mcp_client::{failed, ok};
use super::mcp_tools::{Fixture, call, connect, connect_under, permissive, project};

async fn tool_names<H: ClientHandler>(f: &Fixture<H>) -> Vec<String> {
    let tools = f.client.list_all_tools().await.unwrap();
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// Hole 2: by default the model driving MCP cannot answer approvals or change autonomy: the
/// tools do not exist (listed or called); they exist only where the owner allowed them.
#[tokio::test]
async fn security_mcp_model_approval_tools_exist_only_where_the_owner_allowed_them() {
    let f = connect_under((), McpPolicy::default()).await;
    let names = tool_names(&f).await;
    for absent in ["resolve_approval", "set_autonomy"] {
        assert!(!names.contains(&absent.to_owned()), "{names:?}");
        let refused = f
            .client
            .call_tool(
                CallToolRequestParams::new(absent)
                    .with_arguments(json!({"session_id": "s1", "approval_id": 1, "decision": "approve", "level": "full"}).as_object().unwrap().clone()),
            )
            .await;
        assert!(refused.is_err(), "{absent}: {refused:?}");
    }
    assert!(names.contains(&"list_approvals".to_owned()), "{names:?}");
    assert!(f.host.calls().is_empty(), "{:?}", f.host.calls());

    let names = tool_names(&connect_under((), permissive()).await).await;
    assert!(names.contains(&"resolve_approval".to_owned()), "{names:?}");
    assert!(names.contains(&"set_autonomy".to_owned()), "{names:?}");
}

/// `run_task` and `set_autonomy` never give more than `[mcp] max_autonomy`: above it is
/// refused before the host hears of it, and a start that names no level gets the daemon's
/// default lowered to the ceiling.
#[tokio::test]
async fn security_mcp_autonomy_never_exceeds_the_mcp_ceiling() {
    let policy = McpPolicy {
        allow_model_approvals: true,
        ..McpPolicy::default()
    };
    let f = connect_under((), policy).await;
    let (code, message) = failed(
        call(
            &f,
            "run_task",
            json!({"task": "t", "project_dir": project(&f), "autonomy": "full"}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    assert!(
        message.contains("[mcp] max_autonomy = \"high\""),
        "{message}"
    );
    for args in [
        json!({"level": "full"}),
        json!({"level": "full", "session_id": "s1"}),
    ] {
        let (code, message) = failed(call(&f, "set_autonomy", args).await);
        assert_eq!(code, "forbidden", "{message}");
    }
    // Approving every later command is what `full` does.
    let (code, message) = failed(
        call(
            &f,
            "resolve_approval",
            json!({"session_id": "s1", "approval_id": 1, "decision": "approve_all"}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    assert!(f.host.calls().is_empty(), "{:?}", f.host.calls());
    // The double's default is medium: within the ceiling, kept.
    let started = ok(call(
        &f,
        "run_task",
        json!({"task": "t", "project_dir": project(&f)}),
    )
    .await);
    assert_eq!(started["session"]["autonomy"], "medium");
    ok(call(&f, "set_autonomy", json!({"level": "high"})).await);

    // A daemon whose default is above the MCP ceiling: MCP starts get the ceiling.
    let low = connect_under(
        (),
        McpPolicy {
            max_autonomy: AutonomyLevel::Low,
            ..McpPolicy::default()
        },
    )
    .await;
    let started = ok(call(
        &low,
        "run_task",
        json!({"task": "t", "project_dir": project(&low)}),
    )
    .await);
    assert_eq!(started["session"]["autonomy"], "low");
}

/// A project the model names counts only where a human gave it to the server: its working
/// directory (or inside it) and `[mcp] projects`; the same holds for `delegate`.
#[tokio::test]
async fn security_mcp_projects_are_only_the_servers_own_or_listed_ones() {
    let elsewhere = tempfile::tempdir().unwrap();
    let f = connect().await;
    let (code, message) = failed(
        call(
            &f,
            "run_task",
            json!({"task": "t", "project_dir": elsewhere.path()}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    assert!(message.contains("[mcp] projects"), "{message}");
    let (code, _) = failed(
        call(
            &f,
            "delegate",
            json!({"agent": "codex", "prompt": "p", "schema": {"type": "object"}, "project_dir": elsewhere.path()}),
        )
        .await,
    );
    assert_eq!(code, "forbidden");
    assert!(f.host.calls().is_empty(), "{:?}", f.host.calls());
    std::fs::create_dir(f.project.path().join("sub")).unwrap();
    ok(call(&f, "run_task", json!({"task": "t", "project_dir": "sub"})).await);

    let listed = connect_under(
        (),
        McpPolicy {
            projects: vec![elsewhere.path().to_path_buf()],
            ..permissive()
        },
    )
    .await;
    ok(call(
        &listed,
        "run_task",
        json!({"task": "t", "project_dir": elsewhere.path()}),
    )
    .await);
}

/// `resume_session` is held as `run_task` is: the level it ran at comes back no higher than
/// `[mcp] max_autonomy` (a level asked above it is refused), and only in a project the server
/// was given (a session elsewhere is refused before the host is asked to start anything).
#[tokio::test]
async fn security_mcp_a_resume_is_held_to_the_ceiling_and_the_servers_projects() {
    use intendant_core::host::SessionHost;
    use intendant_protocol::daemon::SessionStatus;
    let f = connect_under((), McpPolicy::default()).await;
    let started = ok(call(
        &f,
        "run_task",
        json!({"task": "t", "project_dir": project(&f)}),
    )
    .await);
    let mut recorded = f
        .host
        .session(started["session_id"].as_str().unwrap())
        .await
        .unwrap();
    recorded.id = "ran-at-full".into();
    recorded.autonomy = AutonomyLevel::Full;
    recorded.status = SessionStatus::Interrupted;
    f.host.insert(recorded.clone());
    let elsewhere = tempfile::tempdir().unwrap();
    let mut foreign = recorded.clone();
    foreign.id = "elsewhere".into();
    foreign.project = elsewhere.path().display().to_string();
    f.host.insert(foreign);

    let (code, message) = failed(
        call(
            &f,
            "resume_session",
            json!({"session_id": "ran-at-full", "autonomy": "full"}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    let (code, message) =
        failed(call(&f, "resume_session", json!({"session_id": "elsewhere"})).await);
    assert_eq!(code, "forbidden", "{message}");
    assert!(message.contains("[mcp] projects"), "{message}");
    assert_eq!(
        f.host.started().len(),
        1,
        "only the first run_task reached the host"
    );

    ok(call(
        &f,
        "resume_session",
        json!({"session_id": "ran-at-full", "text": "go on"}),
    )
    .await);
    let resumed = f.host.started().pop().unwrap();
    assert_eq!(resumed.resume.as_deref(), Some("ran-at-full"));
    assert_eq!(
        resumed.autonomy,
        Some(AutonomyLevel::High),
        "held to the ceiling"
    );
    assert_eq!(resumed.task, "go on");
}

/// A scheduled session is approved by its owner only: even where the owner lets a model answer
/// approvals, `resolve_approval` on the agenda is refused before the host hears of it.
#[tokio::test]
async fn security_mcp_a_model_cannot_approve_a_scheduled_session() {
    let f = connect_under((), permissive()).await;
    for decision in ["approve", "deny"] {
        let (code, message) = failed(
            call(
                &f,
                "resolve_approval",
                json!({"session_id": "agenda", "approval_id": 1, "decision": decision}),
            )
            .await,
        );
        assert_eq!(code, "forbidden", "{message}");
        assert!(message.contains("only by its owner"), "{message}");
    }
    assert!(f.host.calls().is_empty(), "{:?}", f.host.calls());
    // Listed under `agenda`, like any session's approvals.
    ok(call(&f, "list_approvals", json!({"session_id": "agenda"})).await);
}

/// The agenda over MCP: times read as `ctl` reads them and sent as UTC, bad input refused
/// before the host hears of it, and no way to approve a schedule.
#[tokio::test]
async fn the_agenda_tool_lists_adds_and_snoozes_and_refuses_bad_times() {
    use intendant_protocol::agenda::AgendaOp;
    let f = connect_under((), McpPolicy::default()).await;
    assert!(tool_names(&f).await.contains(&"agenda".to_owned()));
    ok(call(&f, "agenda", json!({"action": "list"})).await);
    ok(call(
        &f,
        "agenda",
        json!({"action": "add", "text": "renew the cert", "remind_at": "+1h"}),
    )
    .await);
    ok(call(
        &f,
        "agenda",
        json!({"action": "snooze", "id": 1, "until": "2030-01-01T10:00:00+02:00"}),
    )
    .await);
    let (code, message) = failed(
        call(
            &f,
            "agenda",
            json!({"action": "add", "text": "x", "remind_at": "2030-01-01T10:00:00 Mars/Olympus_Mons"}),
        )
        .await,
    );
    assert_eq!(code, "invalid_request", "{message}");
    assert!(message.contains("unknown timezone"), "{message}");
    let (code, message) = failed(call(&f, "agenda", json!({"action": "done"})).await);
    assert_eq!(code, "invalid_request", "{message}");
    let (code, _) = failed(call(&f, "agenda", json!({"action": "approve", "id": 1})).await);
    assert_eq!(code, "invalid_arguments");
    let ops = f.host.agenda_ops();
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert!(matches!(&ops[1], AgendaOp::Add { remind_at: Some(t), .. } if t.ends_with('Z')));
    assert_eq!(
        ops[2],
        AgendaOp::Snooze {
            id: 1,
            until: "2030-01-01T08:00:00.000Z".into()
        }
    );
}

/// A proposed memory is a human's decision: even where the owner lets a model answer
/// approvals, `resolve_approval` on a `memory` approval is refused and nothing is sent.
#[tokio::test]
async fn security_mcp_a_model_cannot_approve_a_proposed_memory() {
    let f = connect_under((), permissive()).await;
    let started = ok(call(
        &f,
        "run_task",
        json!({"task": "t", "project_dir": project(&f)}),
    )
    .await);
    let session = started["session"]["id"].as_str().unwrap().to_owned();
    f.host.ask_approval_of(
        &session,
        9,
        intendant_protocol::events::ActionCategory::Memory,
    );
    for decision in ["approve", "approve_all", "deny"] {
        let (code, message) = failed(
            call(
                &f,
                "resolve_approval",
                json!({"session_id": session, "approval_id": 9, "decision": decision}),
            )
            .await,
        );
        assert_eq!(code, "forbidden", "{message}");
        assert!(message.contains("only by a human"), "{message}");
        // A proposal whose session ended waits under the pseudo-session `memory`: listed or
        // not, no decision of a model reaches it.
        let (code, message) = failed(
            call(
                &f,
                "resolve_approval",
                json!({"session_id": "memory", "approval_id": 1, "decision": decision}),
            )
            .await,
        );
        assert_eq!(code, "forbidden", "{message}");
    }
    assert!(
        !f.host.calls().iter().any(|c| c.starts_with("send")),
        "{:?}",
        f.host.calls()
    );
    // Another approval of the same session is still the model's to answer (the owner allowed it).
    f.host.ask_approval(&session, 10);
    ok(call(
        &f,
        "resolve_approval",
        json!({"session_id": session, "approval_id": 10, "decision": "deny"}),
    )
    .await);
}

/// Allowing a host for good writes the project's allow list and keeps the file trusted: a
/// human's decision. Without `[mcp] allow_model_approvals` the model has no tool to answer with
/// at all; with it, `resolve_approval`'s `allow_host` is refused and nothing is sent, while the
/// same network approval may still be answered for the session.
#[tokio::test]
async fn security_mcp_a_model_cannot_allow_a_host_for_good() {
    let closed = connect_under((), McpPolicy::default()).await;
    let refused = closed
        .client
        .call_tool(
            CallToolRequestParams::new("resolve_approval").with_arguments(
                json!({"session_id": "s1", "approval_id": 9, "decision": "allow_host"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(closed.host.calls().is_empty(), "{:?}", closed.host.calls());

    let f = connect_under((), permissive()).await;
    let started = ok(call(
        &f,
        "run_task",
        json!({"task": "t", "project_dir": project(&f)}),
    )
    .await);
    let session = started["session"]["id"].as_str().unwrap().to_owned();
    f.host.ask_approval_of(
        &session,
        9,
        intendant_protocol::events::ActionCategory::Network,
    );
    let (code, message) = failed(
        call(
            &f,
            "resolve_approval",
            json!({"session_id": session, "approval_id": 9, "decision": "allow_host"}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    assert!(message.contains("a human's decision"), "{message}");
    assert!(
        !f.host.calls().iter().any(|c| c.starts_with("send")),
        "{:?}",
        f.host.calls()
    );
    ok(call(
        &f,
        "resolve_approval",
        json!({"session_id": session, "approval_id": 9, "decision": "approve_all"}),
    )
    .await);
}

//! The dashboard's router in front of the real session supervisor: a session of the scripted
//! model asks to write a file; the queue, the answer (and a second answer), the file, the
//! snapshot of its events and the SSE resumption all go through HTTP.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::host::SessionHost;
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_daemon::control_plane;
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::daemon::{Backend, Settings};
use intendant_server::web::{self, access::Access, token};
use serde_json::{Value, json};
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:4100";
/// How many times a test polls before giving up (a bound, never reached by a healthy run).
const POLLS: usize = 400;
const POLL: Duration = Duration::from_millis(50);

/// The built `intendant-runtime` beside this test binary's directory.
fn runtime_bin() -> PathBuf {
    intendant_testkit::built_binary(
        intendant_core::runner::RUNTIME_BIN,
        intendant_core::runner::RUNTIME_PATH_ENV,
    )
}

async fn call(
    app: &axum::Router,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, HOST)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn an_approval_answered_through_the_dashboard_writes_its_file_once() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let scenario = project.path().join("write.scenario.json");
    std::fs::write(
        &scenario,
        json!({"model": "fake-model", "turns": [
            {"text": "Writing a.txt.", "tool_calls": [{"name": "edit_file", "arguments":
                {"file_path": "a.txt", "operation": "write", "content": "<script>x</script>\n"}}]},
            {"text": "Done.", "tool_calls": [{"name": "signal_done", "arguments": {"message": "wrote a.txt"}}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let env = AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(home.path()),
        process_env: BTreeMap::new(),
    };
    let settings = Settings {
        default_autonomy: AutonomyLevel::Medium,
        default_backend: Backend::Native,
        max_running: 2,
        max_autonomy: AutonomyLevel::Full,
    };
    control_plane::save(home.path(), &settings).unwrap();
    let supervisor = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
    let access = Arc::new(Access::new(home.path().to_path_buf(), HOST.parse().unwrap()).unwrap());
    let token = token::load(home.path()).unwrap().unwrap();
    let app = web::router(Arc::new(supervisor.clone()), access);

    let (status, started) = call(
        &app,
        &token,
        Method::POST,
        "/api/intents",
        Some(json!({
            "intent": "start", "task": "write a.txt", "project": project.path(), "provider": "mock",
            "scenario": scenario,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_str().unwrap().to_string();

    let mut approvals = Value::Null;
    for _ in 0..POLLS {
        approvals = call(&app, &token, Method::GET, "/api/approvals", None)
            .await
            .1;
        if approvals.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(approvals[0]["session_id"], id.as_str(), "{approvals}");
    let approval = approvals[0]["id"].as_u64().unwrap();
    assert_eq!(approvals[0]["category"], "file_write");
    assert!(
        !project.path().join("a.txt").exists(),
        "nothing is written before the answer"
    );

    let answer =
        json!({"intent": "session", "session_id": id, "action": "approve", "id": approval});
    let (status, body) = call(
        &app,
        &token,
        Method::POST,
        "/api/intents",
        Some(answer.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&app, &token, Method::POST, "/api/intents", Some(answer)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "already_answered");
    let (status, _) = call(
        &app,
        &token,
        Method::POST,
        "/api/intents",
        Some(json!({"intent": "stop", "session_id": "no-such-session"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    for _ in 0..POLLS {
        let s = call(
            &app,
            &token,
            Method::GET,
            &format!("/api/sessions/{id}"),
            None,
        )
        .await
        .1;
        if s["status"] == "idle" {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        std::fs::read_to_string(project.path().join("a.txt")).unwrap(),
        "<script>x</script>\n"
    );

    let (status, page) = call(
        &app,
        &token,
        Method::GET,
        &format!("/api/sessions/{id}/events?after=0"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let events = page["events"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, once: {seqs:?}"
    );
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap())
        .collect();
    for wanted in [
        "session_started",
        "approval_required",
        "approval_resolved",
        "round_complete",
    ] {
        assert!(types.contains(&wanted), "{wanted} in {types:?}");
    }

    // Resuming after the approval's event replays exactly what followed it.
    let at = types
        .iter()
        .position(|t| *t == "approval_required")
        .unwrap();
    let request = Request::builder()
        .uri(format!("/api/events?session={id}"))
        .header(header::HOST, HOST)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header("last-event-id", seqs[at].to_string())
        .body(Body::empty())
        .unwrap();
    let mut body = app.clone().oneshot(request).await.unwrap().into_body();
    let mut text = String::new();
    let want: Vec<String> = seqs[at + 1..]
        .iter()
        .map(|s| format!("id: {s}\n"))
        .collect();
    while !text.contains(want.last().unwrap().as_str()) {
        let frame = body.frame().await.unwrap().unwrap();
        if let Some(data) = frame.data_ref() {
            text.push_str(std::str::from_utf8(data).unwrap());
        }
    }
    let ids: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("id: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(ids, want, "no gap and no duplicate after Last-Event-ID");
    supervisor.shutdown().await.unwrap();
    supervisor.closed().await;
}

/// The dashboard's agenda on the real supervisor: add, list, schedule, a schedule in the
/// approval queue approved through the same intent as any approval, bad times refused.
#[tokio::test]
async fn the_agenda_through_the_dashboard() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(home.path()),
        process_env: BTreeMap::new(),
    };
    let settings = Settings {
        default_autonomy: AutonomyLevel::Medium,
        default_backend: Backend::Native,
        max_running: 2,
        max_autonomy: AutonomyLevel::Full,
    };
    control_plane::save(home.path(), &settings).unwrap();
    let supervisor = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
    let access = Arc::new(Access::new(home.path().to_path_buf(), HOST.parse().unwrap()).unwrap());
    let token = token::load(home.path()).unwrap().unwrap();
    let app = web::router(Arc::new(supervisor), access);
    let post = |body: Value| call(&app, &token, Method::POST, "/api/intents", Some(body));

    let (status, body) = call(&app, &token, Method::GET, "/api/agenda", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    let (status, body) = post(
        json!({"intent": "agenda", "action": "add", "text": "renew the cert",
        "remind_at": "2099-01-01T10:00:00.000Z"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["state"], "open");
    let (status, body) = post(json!({"intent": "agenda", "action": "add", "text": "x",
        "remind_at": "2020-01-01T10:00:00Z"}))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("in the past"),
        "{body}"
    );

    let (status, body) = post(json!({"intent": "agenda", "action": "schedule",
        "at": "2099-01-01T10:00:00Z",
        "request": {"task": "nightly review", "project": project.path()}}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body[0]["id"].as_u64().unwrap();
    let (_, approvals) = call(&app, &token, Method::GET, "/api/approvals", None).await;
    assert_eq!(approvals[0]["session_id"], "agenda", "{approvals}");
    assert_eq!(approvals[0]["category"], "schedule");
    let (status, body) =
        post(json!({"intent": "session", "session_id": "agenda", "action": "approve", "id": id}))
            .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, entries) = call(&app, &token, Method::GET, "/api/agenda", None).await;
    assert_eq!(entries[1]["state"], "approved", "{entries}");
    let (status, _) = post(json!({"intent": "agenda", "action": "done", "id": 1})).await;
    assert_eq!(status, StatusCode::OK);
}

/// One raw request to `app`: `headers` as given (no login unless they carry one).
async fn raw(
    app: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// One hostile request: method, path, headers, body and the status it must get.
type Attack = (
    Method,
    &'static str,
    Vec<(&'static str, String)>,
    Option<Value>,
    StatusCode,
);

/// A daemon's supervisor on a fresh state root, behind the dashboard's router.
fn daemon_app(home: &std::path::Path) -> (Supervisor, axum::Router, String) {
    let env = AssemblyEnv {
        home: home.to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(home),
        process_env: BTreeMap::new(),
    };
    let settings = Settings {
        default_autonomy: AutonomyLevel::Medium,
        default_backend: Backend::Native,
        max_running: 2,
        max_autonomy: AutonomyLevel::Full,
    };
    control_plane::save(home, &settings).unwrap();
    let supervisor = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
    let access = Arc::new(Access::new(home.to_path_buf(), HOST.parse().unwrap()).unwrap());
    let token = token::load(home).unwrap().unwrap();
    let app = web::router(Arc::new(supervisor.clone()), access);
    (supervisor, app, token)
}

/// The dashboard's Memory page on the real supervisor and database: a human lists, searches,
/// adds, edits and removes memories; bad input is one clear 400 that stores nothing.
#[tokio::test]
async fn the_memories_through_the_dashboard() {
    let home = tempfile::tempdir().unwrap();
    let (_supervisor, app, token) = daemon_app(home.path());
    let post = |body: Value| call(&app, &token, Method::POST, "/api/intents", Some(body));

    let (status, body) = call(&app, &token, Method::GET, "/api/memories", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"memories": []})));
    let (status, body) = post(json!({"intent": "memory", "action": "add", "scope": "user",
        "text": "the user prefers tabs"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["memories"][0]["id"].as_u64().unwrap();
    assert_eq!(body["memories"][0]["source"], "human");
    let (status, body) = post(json!({"intent": "memory", "action": "add",
        "scope": "project:/src/app", "text": "releases are cut on Thursdays"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (_, found) = call(&app, &token, Method::GET, "/api/memories?q=tabs", None).await;
    assert_eq!(found["memories"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["memories"][0]["id"], id);
    assert!(found["memories"][0]["rank"].is_number());
    let (_, only) = call(
        &app,
        &token,
        Method::GET,
        "/api/memories?scope=project:/src/app",
        None,
    )
    .await;
    assert_eq!(
        only["memories"][0]["text"], "releases are cut on Thursdays",
        "{only}"
    );
    assert_eq!(only["memories"].as_array().unwrap().len(), 1);
    let (_, plain) = call(
        &app,
        &token,
        Method::GET,
        "/api/memories?q=tabs%20AND%20(",
        None,
    )
    .await;
    assert!(
        plain["note"].as_str().unwrap().contains("plain terms"),
        "{plain}"
    );
    let (status, one) = call(
        &app,
        &token,
        Method::GET,
        &format!("/api/memories/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["memories"][0]["text"], "the user prefers tabs");

    let (status, body) = post(json!({"intent": "memory", "action": "edit", "id": id,
        "text": "the user prefers spaces"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["memories"][0]["text"], "the user prefers spaces");

    let refusals = [
        (
            json!({"intent": "memory", "action": "add", "scope": "all", "text": "x"}),
            "scope",
        ),
        (
            json!({"intent": "memory", "action": "add", "scope": "user", "text": "  "}),
            "needs some text",
        ),
        (
            json!({"intent": "memory", "action": "add", "scope": "user", "text": "x".repeat(16 * 1024 + 1)}),
            "at most 16384",
        ),
        (
            json!({"intent": "memory", "action": "edit", "id": 999, "text": "x"}),
            "no memory 999",
        ),
        (
            json!({"intent": "memory", "action": "remove", "id": 999}),
            "no memory 999",
        ),
        (
            json!({"intent": "memory", "action": "approve", "id": 1}),
            "not an intent",
        ),
    ];
    for (intent, says) in refusals {
        let (status, body) = post(intent.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{intent}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{intent}: {body}"
        );
    }
    for bad in [
        "/api/memories?limit=0",
        "/api/memories?scope=everyone",
        "/api/memories/x",
    ] {
        let (status, body) = call(&app, &token, Method::GET, bad, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (_, all) = call(&app, &token, Method::GET, "/api/memories", None).await;
    assert_eq!(
        all["memories"].as_array().unwrap().len(),
        2,
        "nothing refused was stored"
    );

    let (status, body) = post(json!({"intent": "memory", "action": "remove", "id": id})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call(
        &app,
        &token,
        Method::GET,
        &format!("/api/memories/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A hostile web page against the Memory page's endpoints: without the token nothing is read
/// or written; with the browser's cookie but from another origin (or no Origin on a write, or
/// a rebinding Host) each request is a 403 and the database is unchanged.
#[tokio::test]
async fn a_hostile_page_neither_reads_nor_changes_the_memories() {
    let home = tempfile::tempdir().unwrap();
    let (_supervisor, app, token) = daemon_app(home.path());
    let (status, _) = call(
        &app,
        &token,
        Method::POST,
        "/api/intents",
        Some(
            json!({"intent": "memory", "action": "add", "scope": "user", "text": "a secret fact"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let cookie = (
        "cookie",
        format!("intendant_session={}", token::session_cookie_value(&token)),
    );
    let host = ("host", HOST.to_owned());
    let json_type = ("content-type", "application/json".to_owned());
    let add = json!({"intent": "memory", "action": "add", "scope": "user", "text": "planted"});
    let remove = json!({"intent": "memory", "action": "remove", "id": 1});
    let cases: Vec<Attack> = vec![
        // No login at all.
        (
            Method::GET,
            "/api/memories",
            vec![host.clone()],
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            Method::POST,
            "/api/intents",
            vec![host.clone(), json_type.clone()],
            Some(add.clone()),
            StatusCode::UNAUTHORIZED,
        ),
        // A wrong token.
        (
            Method::GET,
            "/api/memories/1",
            vec![host.clone(), ("authorization", "Bearer 00".to_owned())],
            None,
            StatusCode::UNAUTHORIZED,
        ),
        // The logged-in browser's cookie, but the request comes from another site.
        (
            Method::POST,
            "/api/intents",
            vec![
                host.clone(),
                cookie.clone(),
                json_type.clone(),
                ("origin", "http://attacker.example".to_owned()),
            ],
            Some(remove.clone()),
            StatusCode::FORBIDDEN,
        ),
        (
            Method::POST,
            "/api/intents",
            vec![host.clone(), cookie.clone(), json_type.clone()],
            Some(add.clone()),
            StatusCode::FORBIDDEN,
        ),
        (
            Method::GET,
            "/api/memories",
            vec![
                host.clone(),
                cookie.clone(),
                ("sec-fetch-site", "cross-site".to_owned()),
            ],
            None,
            StatusCode::FORBIDDEN,
        ),
        // DNS rebinding: the attacker's name resolving to loopback, even with the token.
        (
            Method::GET,
            "/api/memories",
            vec![
                ("host", "attacker.example:4100".to_owned()),
                ("authorization", format!("Bearer {token}")),
            ],
            None,
            StatusCode::FORBIDDEN,
        ),
    ];
    for (method, path, headers, body, want) in cases {
        let what = format!("{method} {path} {headers:?}");
        let (status, answer) = raw(&app, method, path, &headers, body).await;
        assert_eq!(status, want, "{what}: {answer}");
        assert!(
            !answer.to_string().contains("a secret fact"),
            "{what} read a memory: {answer}"
        );
    }
    let (_, all) = call(&app, &token, Method::GET, "/api/memories", None).await;
    assert_eq!(all["memories"].as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all["memories"][0]["text"], "a secret fact");
    // The page's own request, with our Origin, goes through.
    let (status, body) = raw(
        &app,
        Method::POST,
        "/api/intents",
        &[
            host,
            cookie,
            json_type,
            ("origin", format!("http://{HOST}")),
        ],
        Some(remove),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A session's `memory_propose` waits in the dashboard's approval queue as category `memory`
/// beside the session's other approvals; approved there, it is stored with the session as its
/// source and the Memory page lists it.
#[tokio::test]
async fn a_proposed_memory_is_approved_from_the_dashboards_queue() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let scenario = project.path().join("propose.scenario.json");
    std::fs::write(
        &scenario,
        json!({"model": "fake-model", "turns": [
            {"text": "Noting it, then writing.", "tool_calls": [
                {"name": "memory_propose", "arguments": {"text": "tests run with nextest"}},
                {"name": "edit_file", "arguments":
                    {"file_path": "a.txt", "operation": "write", "content": "a\n"}}]},
            {"text": "Done.", "tool_calls": [{"name": "signal_done", "arguments": {"message": "done"}}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let (supervisor, app, token) = daemon_app(home.path());
    let post = |body: Value| call(&app, &token, Method::POST, "/api/intents", Some(body));
    let (status, started) = post(json!({"intent": "start", "task": "note and write",
        "project": project.path(), "provider": "mock", "scenario": scenario}))
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let mut approvals = Value::Null;
    for _ in 0..POLLS {
        approvals = call(&app, &token, Method::GET, "/api/approvals", None)
            .await
            .1;
        if approvals.as_array().is_some_and(|a| a.len() == 2) {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let list = approvals.as_array().unwrap();
    let memory = list
        .iter()
        .find(|a| a["category"] == "memory")
        .unwrap_or_else(|| panic!("no memory approval: {approvals}"));
    assert_eq!(memory["session_id"], id.as_str());
    assert!(
        memory["command_preview"]
            .as_str()
            .unwrap()
            .contains("tests run with nextest"),
        "{memory}"
    );
    let (status, body) = post(json!({"intent": "session", "session_id": id,
        "action": "approve", "id": memory["id"]}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut stored = Value::Null;
    for _ in 0..POLLS {
        stored = call(&app, &token, Method::GET, "/api/memories?q=nextest", None)
            .await
            .1;
        if stored["memories"].as_array().is_some_and(|m| !m.is_empty()) {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        stored["memories"][0]["source"],
        format!("session:{id}").as_str(),
        "{stored}"
    );
    let scope = format!(
        "project:{}",
        project.path().canonicalize().unwrap().display()
    );
    assert_eq!(stored["memories"][0]["scope"], scope.as_str());
    let edit = list.iter().find(|a| a["category"] == "file_write").unwrap();
    let (status, _) = post(json!({"intent": "session", "session_id": id,
        "action": "deny", "id": edit["id"]}))
    .await;
    assert_eq!(status, StatusCode::OK);
    supervisor.shutdown().await.unwrap();
    supervisor.closed().await;
}

/// A proposal still unanswered when the daemon stops is kept: the next daemon on the state
/// root lists it under the pseudo-session `memory` (once: not beside its session's own while
/// that runs), a human approves it there and it is stored once, with its session as source.
#[tokio::test]
async fn a_pending_proposal_survives_a_daemon_restart() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let scenario = project.path().join("propose.scenario.json");
    std::fs::write(
        &scenario,
        json!({"model": "fake-model", "turns": [
            {"text": "Noting two, then writing.", "tool_calls": [
                {"name": "memory_propose", "arguments": {"text": "deploys need a change ticket"}},
                {"name": "memory_propose", "arguments": {"text": "dropped later", "scope": "user"}},
                {"name": "edit_file", "arguments":
                    {"file_path": "a.txt", "operation": "write", "content": "a\n"}}]},
            {"text": "Done.", "tool_calls": [{"name": "signal_done", "arguments": {"message": "done"}}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let (first, app, token) = daemon_app(home.path());
    let post = |body: Value| call(&app, &token, Method::POST, "/api/intents", Some(body));
    let (status, started) = post(json!({"intent": "start", "task": "note and write",
        "project": project.path(), "provider": "mock", "scenario": scenario}))
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let mut approvals = Value::Null;
    for _ in 0..POLLS {
        approvals = call(&app, &token, Method::GET, "/api/approvals", None)
            .await
            .1;
        if approvals.as_array().is_some_and(|a| a.len() == 3) {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let memories: Vec<&Value> = approvals
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["category"] == "memory")
        .collect();
    assert_eq!(memories.len(), 2, "{approvals}");
    assert!(
        memories.iter().all(|a| a["session_id"] == id.as_str()),
        "while the session runs its proposals are its own approvals: {approvals}"
    );
    first.shutdown().await.unwrap();
    first.closed().await;
    drop(app);

    let (second, app, token) = daemon_app(home.path());
    let mut stream = second.subscribe(None, None).await.unwrap();
    let post = |body: Value| call(&app, &token, Method::POST, "/api/intents", Some(body));
    let (_, approvals) = call(&app, &token, Method::GET, "/api/approvals", None).await;
    let waiting: Vec<&Value> = approvals
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["session_id"] == "memory")
        .collect();
    assert_eq!(waiting.len(), 2, "{approvals}");
    assert!(waiting.iter().all(|a| a["category"] == "memory"));
    let kept = waiting
        .iter()
        .find(|a| {
            a["command_preview"]
                .as_str()
                .unwrap()
                .contains("change ticket")
        })
        .unwrap();
    let dropped = waiting
        .iter()
        .find(|a| a["command_preview"].as_str().unwrap().contains("dropped"))
        .unwrap();
    assert!(
        kept["detail"].as_str().unwrap().contains(id.as_str()),
        "{kept}"
    );
    let approve = json!({"intent": "session", "session_id": "memory", "action": "approve",
        "id": kept["id"]});
    let (status, body) = post(approve.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = post(approve).await;
    assert_eq!(status, StatusCode::CONFLICT, "answered once: {body}");
    let (status, body) = post(json!({"intent": "session", "session_id": "memory",
        "action": "deny", "id": dropped["id"]}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = post(json!({"intent": "session", "session_id": "memory",
        "action": "follow_up", "text": "x"}))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = post(json!({"intent": "session", "session_id": "memory",
        "action": "approve", "id": 999}))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, stored) = call(&app, &token, Method::GET, "/api/memories", None).await;
    let stored = stored["memories"].as_array().unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["text"], "deploys need a change ticket");
    assert_eq!(stored[0]["source"], format!("session:{id}").as_str());
    let (_, approvals) = call(&app, &token, Method::GET, "/api/approvals", None).await;
    assert_eq!(approvals, json!([]), "nothing waits any more");
    // Each answer was told to the queue's followers (an open dashboard reads the queue again).
    let mut told = Vec::new();
    while told.len() < 2 {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an answer is told")
            .unwrap();
        if let intendant_protocol::daemon::StreamItem::Event(env) = item
            && let intendant_protocol::events::AppEvent::ApprovalResolved { id, verdict } =
                &env.event
        {
            assert_eq!(env.session_id, "memory");
            told.push((json!(id), json!(verdict)));
        }
    }
    assert_eq!(
        told,
        [
            (kept["id"].clone(), json!("approve")),
            (dropped["id"].clone(), json!("deny"))
        ]
    );
    second.shutdown().await.unwrap();
    second.closed().await;
}

/// A session a one-shot run recorded and ended before the daemon started published none of
/// its events (its record holds no `seq`): `/events` has nothing of it, and the dashboard reads
/// its record itself through `/record`, a page at a time, a line longer than a page passed
/// over and counted; MCP's transcript of it is read from the record too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_sessions_record_is_read_a_page_at_a_time_when_none_of_it_was_published() {
    use intendant_core::session_log::{SessionLog, SessionMeta};
    use intendant_protocol::events::{AppEvent, EndStatus};
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let meta = SessionMeta::new(project.path(), "one-shot", "fake-model", "openai");
    let log = SessionLog::create(home.path(), meta).unwrap();
    let id = log.id().to_owned();
    let too_long = "x".repeat(web::api::EVENTS_PAGE_BYTES + 10);
    for event in [
        AppEvent::TurnStarted { turn: 1 },
        AppEvent::Warning { message: too_long },
        AppEvent::Done {
            message: "finished".into(),
        },
        AppEvent::SessionEnded {
            session_id: id.clone(),
            status: EndStatus::Completed,
            reason: "ok".into(),
        },
    ] {
        log.record_event(&event).unwrap();
    }
    drop(log);
    let (supervisor, app, token) = daemon_app(home.path());
    let get = |path: String| {
        let (app, token) = (&app, &token);
        async move { call(app, token, Method::GET, &path, None).await }
    };

    let (status, page) = get(format!("/api/sessions/{id}/events?after=0")).await;
    assert_eq!((status, &page["events"]), (StatusCode::OK, &json!([])));
    let (mut from, mut pages, mut passed_over) = (0, 0, 0);
    let mut types = Vec::new();
    loop {
        let (status, page) = get(format!("/api/sessions/{id}/record?from={from}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        for record in page["records"].as_array().unwrap() {
            assert!(record["seq"].is_null(), "{record}");
            types.push(record["event"]["type"].as_str().unwrap().to_owned());
        }
        passed_over += page["passed_over"].as_u64().unwrap();
        from = page["next"].as_u64().unwrap();
        if !page["more"].as_bool().unwrap() {
            break;
        }
        assert!(pages < 10, "the pages never end");
    }
    assert_eq!(types, ["turn_started", "done", "session_ended"]);
    assert_eq!(passed_over, 1, "the line longer than a page");
    assert!(
        pages >= 3,
        "{pages} pages: the long line takes pages of its own"
    );
    let log_len = std::fs::metadata(supervisor.log_dir(&id).await.unwrap().join("session.jsonl"))
        .unwrap()
        .len();
    assert_eq!(from, log_len, "the last page ends at the record's end");

    // MCP's transcript of it reads the same record: its entries, unnumbered.
    let transcript = intendant_server::mcp::resources::transcript_text(&supervisor, &id)
        .await
        .unwrap();
    assert!(
        transcript.contains("- turn_started\n")
            && transcript.contains("- done: finished\n")
            && transcript.contains("- session ended"),
        "{transcript}"
    );

    let (status, body) = get("/api/sessions/no-such-session/record".into()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = get(format!("/api/sessions/{id}/record?from=-1")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    supervisor.shutdown().await.unwrap();
    supervisor.closed().await;
}

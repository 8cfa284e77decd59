//! The dashboard's router against the host double: login and its cookie, Host and Origin
//! checks, every endpoint and the host call it makes, the error statuses, SSE resumption.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use intendant_core::host::SessionHost;
use intendant_core::host::double::{self as host_double, HostDouble};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{SessionIntent, SessionStatus, StartRequest};
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_server::web::access::Access;
use intendant_server::web::{self, MAX_BODY_BYTES, token};
use serde_json::{Value, json};
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:4000";
const ORIGIN: &str = "http://127.0.0.1:4000";

struct Harness {
    host: Arc<HostDouble>,
    app: Router,
    home: tempfile::TempDir,
    token: String,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

impl Harness {
    fn new() -> Harness {
        let home = tempfile::tempdir().unwrap();
        let host = HostDouble::new();
        let access =
            Arc::new(Access::new(home.path().to_path_buf(), HOST.parse().unwrap()).unwrap());
        let token = token::load(home.path()).unwrap().unwrap();
        let app = web::router(host.clone(), access);
        Harness {
            host,
            app,
            home,
            token,
        }
    }

    fn request(method: Method, path: &str) -> axum::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, HOST)
    }

    fn bearer(&self, method: Method, path: &str) -> axum::http::request::Builder {
        Harness::request(method, path)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
    }

    fn cookie(&self, method: Method, path: &str) -> axum::http::request::Builder {
        Harness::request(method, path).header(
            header::COOKIE,
            format!(
                "other=1; intendant_session={}",
                token::session_cookie_value(&self.token)
            ),
        )
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    /// Starts a session through the host (ids are `s1`, `s2`, ...; each publishes one event).
    async fn add_session(&self, task: &str) -> String {
        let request = StartRequest {
            task: task.into(),
            project: "/p".into(),
            ..StartRequest::default()
        };
        self.host.start(request).await.unwrap().id
    }

    async fn status(&self, id: &str) -> SessionStatus {
        self.host.session(id).await.unwrap().status
    }

    /// `GET path` with no token and no cookie.
    async fn get_without_login(&self, path: &str) -> Answer {
        self.send(
            Harness::request(Method::GET, path)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.bearer(Method::GET, path).body(Body::empty()).unwrap())
            .await
    }

    async fn intent(&self, body: Value) -> Answer {
        self.send(
            self.bearer(Method::POST, "/api/intents")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
    }
}

#[tokio::test]
async fn without_a_login_the_api_is_401_and_pages_show_the_login_form() {
    let h = Harness::new();
    let api = h.get_without_login("/api/sessions").await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.json()["error"], "unauthorized");
    let record = h.get_without_login("/api/sessions/t/record?from=0").await;
    assert_eq!(record.status, StatusCode::UNAUTHORIZED);
    let page = h.get_without_login("/").await;
    assert_eq!(page.status, StatusCode::UNAUTHORIZED);
    assert!(
        page.body
            .contains("<form method=\"post\" action=\"/login\""),
        "{}",
        page.body
    );
    let wrong = h
        .send(
            Harness::request(Method::GET, "/api/sessions")
                .header(header::AUTHORIZATION, "Bearer 0000")
                .header(header::COOKIE, "intendant_session=0000")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    // The token itself is not a cookie: only the value a login sets is.
    let token_as_cookie = h
        .send(
            Harness::request(Method::GET, "/api/sessions")
                .header(header::COOKIE, format!("intendant_session={}", h.token))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(token_as_cookie.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_login_url_sets_a_strict_httponly_cookie_and_leaves_the_address_bar() {
    let h = Harness::new();
    let login = h
        .send(
            Harness::request(Method::GET, &format!("/login?token={}", h.token))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    assert_eq!(login.headers[header::LOCATION], "/");
    assert_eq!(login.headers[header::REFERRER_POLICY], "no-referrer");
    let cookie = login.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(&h.token),
        "the cookie is not the token: {cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let page = h
        .send(
            Harness::request(Method::GET, "/")
                .header(header::COOKIE, pair)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("/assets/app.js"));

    let wrong = h.get_without_login("/login?token=nope").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    assert!(wrong.body.contains("not the current one"));

    // The login form posts the token from the same origin.
    let form = h
        .send(
            Harness::request(Method::POST, "/login")
                .header(header::ORIGIN, ORIGIN)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("token={}", h.token)))
                .unwrap(),
        )
        .await;
    assert_eq!(form.status, StatusCode::SEE_OTHER);
    assert!(form.headers.contains_key(header::SET_COOKIE));
}

#[tokio::test]
async fn a_rotated_token_logs_every_browser_out() {
    let h = Harness::new();
    let before = h
        .send(
            h.cookie(Method::GET, "/api/sessions")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(before.status, StatusCode::OK);
    let fresh = token::rotate(h.home.path()).unwrap();
    for request in [
        h.cookie(Method::GET, "/api/sessions"),
        h.bearer(Method::GET, "/api/sessions"),
    ] {
        let after = h.send(request.body(Body::empty()).unwrap()).await;
        assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    }
    let with_new = h
        .send(
            Harness::request(Method::GET, "/api/sessions")
                .header(header::AUTHORIZATION, format!("Bearer {fresh}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(with_new.status, StatusCode::OK);
}

/// `builder` with its Host header replaced by `host`.
fn at_host(mut builder: axum::http::request::Builder, host: &str) -> axum::http::request::Builder {
    builder
        .headers_mut()
        .unwrap()
        .insert(header::HOST, host.parse().unwrap());
    builder
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_403_even_with_the_token() {
    let h = Harness::new();
    h.add_session("t").await;
    let cases = [
        // DNS rebinding: the attacker's name resolving to 127.0.0.1.
        at_host(
            h.bearer(Method::GET, "/api/sessions"),
            "attacker.example:4000",
        ),
        at_host(h.bearer(Method::GET, "/api/sessions"), "127.0.0.1:9999"),
        at_host(h.bearer(Method::GET, "/api/sessions"), ""),
        // Two Host headers: which one a proxy believes is anyone's guess.
        h.bearer(Method::GET, "/api/sessions")
            .header(header::HOST, "attacker.example:4000"),
        h.cookie(Method::POST, "/api/intents")
            .header(header::ORIGIN, "http://attacker.example"),
        h.cookie(Method::GET, "/api/sessions")
            .header(header::ORIGIN, "http://127.0.0.1:9999"),
        h.cookie(Method::GET, "/api/sessions")
            .header("sec-fetch-site", "cross-site"),
        // A cookie-carrying post without an Origin is not from our page.
        h.cookie(Method::POST, "/api/intents"),
        // The login form too: no other site logs a browser in.
        Harness::request(Method::POST, "/login").header(header::ORIGIN, "http://attacker.example"),
        // A session's record itself, no more than its events.
        at_host(
            h.bearer(Method::GET, "/api/sessions/t/record"),
            "attacker.example:4000",
        ),
        h.cookie(Method::GET, "/api/sessions/t/record")
            .header("sec-fetch-site", "cross-site"),
    ];
    for request in cases {
        let request = request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"intent":"stop","session_id":"s1"}"#))
            .unwrap();
        let what = format!("{} {:?}", request.method(), request.headers());
        let answer = h.send(request).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{what}");
        assert_eq!(answer.json()["error"], "forbidden");
        assert!(
            !answer
                .headers
                .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        );
    }
    assert_eq!(
        h.status("s1").await,
        SessionStatus::Running,
        "nothing reached the host"
    );
    // No CORS: a preflight from another origin is refused and allows nothing.
    let preflight = h
        .send(
            Harness::request(Method::OPTIONS, "/api/intents")
                .header(header::ORIGIN, "http://attacker.example")
                .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(preflight.status, StatusCode::FORBIDDEN);
    assert!(
        !preflight
            .headers
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
    );
    // Our own page's post passes.
    let ours = h
        .send(
            h.cookie(Method::POST, "/api/intents")
                .header(header::ORIGIN, ORIGIN)
                .body(Body::from(r#"{"intent":"stop","session_id":"s1"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!(ours.status, StatusCode::OK, "{}", ours.body);
    assert_eq!(h.status("s1").await, SessionStatus::Interrupted);
}

#[tokio::test]
async fn a_listing_longer_than_one_reply_is_refused_whole_and_read_a_page_at_a_time() {
    // 300 sessions: more than one reply carries (a page of 256). A reply of every session a
    // daemon ever ran grew with its history, for any client that asked.
    let h = Harness::new();
    for n in 0..300 {
        h.add_session(&format!("task {n}")).await;
    }
    for whole in ["/api/sessions", "/api/sessions?last=true"] {
        let refused = h.get(whole).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{whole}");
        let message = refused.json()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("a page at a time"), "{message}");
    }
    let larger = h.get("/api/sessions?limit=257").await;
    assert_eq!(larger.status, StatusCode::BAD_REQUEST);
    assert!(larger.body.contains("at most 256"), "{}", larger.body);
    let first = h.get("/api/sessions?limit=256").await.json();
    let first = first.as_array().unwrap();
    assert_eq!(first.len(), 256);
    // What is left fits one reply, asked for with no limit.
    let rest = h
        .get(&format!(
            "/api/sessions?after={}",
            first[255]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.body);
    assert_eq!(rest.json().as_array().unwrap().len(), 44);
}

#[tokio::test]
async fn sessions_named_by_id_are_their_rows_in_the_order_asked() {
    let h = Harness::new();
    h.add_session("first").await;
    h.add_session(&"long ".repeat(2_000)).await;
    h.add_session("third").await;
    let got = h.get("/api/sessions?ids=s3,nope,s2,s1,agenda").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let rows = got.json();
    let ids: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["s3", "s2", "s1"],
        "an id that names no session is left out"
    );
    // As a listing carries them: the long task cut.
    let task = rows[1]["task"].as_str().unwrap();
    assert!(task.len() < 5_000 && task.ends_with('…'), "{}", task.len());
    assert_eq!(
        h.get("/api/sessions?ids=").await.json(),
        serde_json::json!([])
    );
    let mixed = h.get("/api/sessions?ids=s1&limit=2").await;
    assert_eq!(mixed.status, StatusCode::BAD_REQUEST);
    assert!(mixed.body.contains("takes no"), "{}", mixed.body);
    let many: Vec<String> = (0..257).map(|n| format!("s{n}")).collect();
    let refused = h
        .get(&format!("/api/sessions?ids={}", many.join(",")))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.body.contains("at most 256"), "{}", refused.body);
}

#[tokio::test]
async fn the_snapshot_endpoints_answer_from_the_host() {
    let h = Harness::new();
    h.add_session("first task").await;
    h.add_session("second task").await;
    h.host.ask_approval("s2", 7);
    let sessions = h.get("/api/sessions").await;
    assert_eq!(sessions.status, StatusCode::OK);
    assert_eq!(sessions.headers[header::CONTENT_TYPE], "application/json");
    let ids: Vec<String> = sessions
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["s1", "s2"]);
    // A page: at most `limit`, after `after`; a bad one is refused.
    let first = h.get("/api/sessions?limit=1").await.json();
    assert_eq!(first.as_array().unwrap().len(), 1);
    assert_eq!(first[0]["id"], "s1");
    let after = h.get("/api/sessions?after=s1&limit=5").await.json();
    assert_eq!(after.as_array().unwrap().len(), 1);
    assert_eq!(after[0]["id"], "s2");
    let none = h.get("/api/sessions?after=s2").await.json();
    assert_eq!(none, serde_json::json!([]));
    let bad = h.get("/api/sessions?limit=lots").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let one = h.get("/api/sessions/s2").await;
    assert_eq!(one.json()["task"], "second task");
    let missing = h.get("/api/sessions/nope").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"], "unknown_session");
    let approvals = h.get("/api/approvals").await.json();
    assert_eq!(approvals[0]["id"], 7);
    assert_eq!(approvals[0]["command_preview"], "rm -rf build7");
    let settings = h.get("/api/settings").await.json();
    assert_eq!(settings["default_autonomy"], "medium");
    let events = h.get("/api/sessions/s2/events?after=0").await.json();
    let seqs: Vec<u64> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3], "only s2's events, in order");
    assert_eq!(events["more"], false);
    let later = h.get("/api/sessions/s2/events?after=2").await.json();
    assert_eq!(later["events"].as_array().unwrap().len(), 1);
    let bad = h.get("/api/sessions/s2/events?after=minus").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        h.get("/api/sessions/nope/events").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(h.get("/api/nothing").await.status, StatusCode::NOT_FOUND);
}

/// A command's output of `kib` KiB.
fn big_output(kib: usize) -> AppEvent {
    AppEvent::AgentOutput {
        call_id: "c".into(),
        name: "exec".into(),
        output: "z".repeat(kib << 10),
    }
}

/// A page holds at most `EVENTS_PAGE_BYTES` of events (a first event larger than that alone), so
/// a history of large events costs the daemon a page at a time, not up to 2,000 of them.
#[tokio::test]
async fn a_history_of_large_events_comes_in_pages_bounded_in_bytes() {
    let h = Harness::new();
    h.add_session("t").await;
    // Seqs 2-4 of 1.5 MiB each, 5 of 6 MiB, 6 small.
    for _ in 0..3 {
        h.host.publish("s1", big_output(1536));
    }
    h.host.publish("s1", big_output(6144));
    h.host.publish("s1", AppEvent::TurnStarted { turn: 1 });
    let mut pages = Vec::new();
    let mut after = 0;
    loop {
        let page = h
            .get(&format!("/api/sessions/s1/events?after={after}"))
            .await
            .json();
        let seqs: Vec<u64> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        after = *seqs.last().unwrap();
        pages.push(seqs);
        if page["more"] == false {
            break;
        }
    }
    assert_eq!(pages, [vec![1, 2, 3], vec![4], vec![5], vec![6]]);
}

#[tokio::test]
async fn a_long_history_comes_in_pages() {
    let h = Harness::new();
    h.add_session("t").await;
    for turn in 0..web::api::EVENTS_PAGE_LIMIT as u32 + 10 {
        h.host.publish("s1", AppEvent::TurnStarted { turn });
    }
    let first = h.get("/api/sessions/s1/events?after=0").await.json();
    let events = first["events"].as_array().unwrap();
    assert_eq!(events.len(), web::api::EVENTS_PAGE_LIMIT);
    assert_eq!(first["more"], true);
    let last = events.last().unwrap()["seq"].as_u64().unwrap();
    let rest = h
        .get(&format!("/api/sessions/s1/events?after={last}"))
        .await
        .json();
    assert_eq!(rest["events"].as_array().unwrap().len(), 11);
    assert_eq!(rest["more"], false);
}

#[tokio::test]
async fn each_intent_is_its_host_call() {
    let h = Harness::new();
    h.add_session("t").await;
    h.host.ask_approval("s1", 1);
    for (body, want) in [
        (
            json!({"intent": "session", "session_id": "s1", "action": "approve", "id": 1}),
            StatusCode::OK,
        ),
        (
            json!({"intent": "session", "session_id": "s1", "action": "follow_up", "text": "more"}),
            StatusCode::OK,
        ),
        (
            json!({"intent": "interrupt", "session_id": "s1"}),
            StatusCode::OK,
        ),
        (
            json!({"intent": "stop", "session_id": "s1"}),
            StatusCode::OK,
        ),
        (
            json!({"intent": "autonomy", "session_id": "s1", "level": "high"}),
            StatusCode::OK,
        ),
        (
            json!({"intent": "autonomy", "level": "low"}),
            StatusCode::OK,
        ),
    ] {
        let answer = h.intent(body.clone()).await;
        assert_eq!(answer.status, want, "{body}: {}", answer.body);
        assert_eq!(answer.json()["ok"], true);
        // What a session is sent is answered with where it went.
        let placed = answer.json()["sent"].as_str().map(str::to_owned);
        assert_eq!(
            placed.is_some(),
            body["intent"] == "session",
            "{body}: {}",
            answer.body
        );
    }
    let started = h
        .intent(json!({"intent": "start", "task": "build it", "project": "/p"}))
        .await;
    assert_eq!(started.status, StatusCode::OK, "{}", started.body);
    assert_eq!(started.json()["task"], "build it");
    assert_eq!(h.host.started().last().unwrap().network, None);
    // The new-task form's network reaches the host as asked (which holds it within the
    // project's settings).
    let closed = h
        .intent(json!({"intent": "start", "task": "offline", "project": "/p", "network": "none"}))
        .await;
    assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
    assert_eq!(
        h.host.started().last().unwrap().network,
        Some(intendant_protocol::network::NetworkMode::None)
    );
    let settings = h
        .intent(json!({"intent": "settings", "default_autonomy": "full"}))
        .await;
    assert_eq!(settings.json()["default_autonomy"], "full");
    assert_eq!(
        h.host.intents(),
        [
            SessionIntent {
                session_id: "s1".into(),
                msg: ControlMsg::Approve { id: 1 }
            },
            SessionIntent {
                session_id: "s1".into(),
                msg: ControlMsg::FollowUp {
                    text: "more".into()
                }
            },
        ]
    );
    assert_eq!(h.host.interrupts(), ["s1"]);
    let s1 = h.host.session("s1").await.unwrap();
    assert_eq!(s1.status, SessionStatus::Interrupted);
    assert_eq!(s1.autonomy, AutonomyLevel::High);
    assert_eq!(h.host.sessions().await.unwrap()[1].task, "build it");
}

#[tokio::test]
async fn a_rewind_intent_is_previewed_then_done_and_answered_with_its_report() {
    let h = Harness::new();
    h.add_session("t").await;
    h.host.set_status("s1", SessionStatus::Idle);
    let seen = h
        .intent(json!({"intent": "rewind", "session_id": "s1", "to_turn": 2, "preview": true}))
        .await;
    assert_eq!(seen.status, StatusCode::OK, "{}", seen.body);
    let report = seen.json();
    assert_eq!(report["preview"], true);
    assert_eq!(report["changes"][0]["path"], "a.txt");
    let done = h
        .intent(json!({"intent": "rewind", "session_id": "s1", "to_turn": 2, "scope": "code"}))
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(done.json()["preview"], false);
    let asked = h.host.rewinds();
    assert_eq!(asked.len(), 2);
    assert!(asked[0].preview && !asked[1].preview);

    for (body, want, code) in [
        (
            json!({"intent": "rewind", "session_id": "nope", "to_turn": 1}),
            StatusCode::NOT_FOUND,
            "unknown_session",
        ),
        (
            json!({"intent": "rewind", "session_id": "s1"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"intent": "rewind", "session_id": "s1", "to_turn": 1, "scope": "files"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ] {
        let answer = h.intent(body.clone()).await;
        assert_eq!(answer.status, want, "{body}: {}", answer.body);
        assert_eq!(answer.json()["error"], code, "{body}");
    }
    h.host.set_status("s1", SessionStatus::Running);
    let busy = h
        .intent(json!({"intent": "rewind", "session_id": "s1", "to_turn": 1}))
        .await;
    assert_eq!(busy.status, StatusCode::BAD_REQUEST);
    assert!(
        busy.json()["message"]
            .as_str()
            .unwrap()
            .contains("running a turn")
    );
}

#[tokio::test]
async fn refused_intents_say_why_with_their_status() {
    let h = Harness::new();
    h.add_session("t").await;
    h.host.ask_approval("s1", 1);
    assert_eq!(
        h.intent(json!({"intent": "session", "session_id": "s1", "action": "deny", "id": 1}))
            .await
            .status,
        StatusCode::OK
    );
    let cases = [
        (
            json!({"intent": "session", "session_id": "s1", "action": "approve", "id": 1}),
            StatusCode::CONFLICT,
            "already_answered",
            "already answered",
        ),
        (
            json!({"intent": "session", "session_id": "s1", "action": "approve", "id": 99}),
            StatusCode::NOT_FOUND,
            "unknown_approval",
            "99",
        ),
        (
            json!({"intent": "stop", "session_id": "ghost"}),
            StatusCode::NOT_FOUND,
            "unknown_session",
            "ghost",
        ),
        (
            json!({"intent": "nuke"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "nuke",
        ),
        (
            json!({"intent": "session", "session_id": "s1", "action": "approve"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "id",
        ),
        (
            json!({"intent": "autonomy", "level": "reckless"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "reckless",
        ),
        (
            json!({"session_id": "s1"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "intent",
        ),
        (
            json!({"intent": "start", "task": "", "project": "/p"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "empty task",
        ),
        (
            json!({"intent": "start", "task": "t", "project": "/p", "network": "wide-open"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            "wide-open",
        ),
        (
            json!({"intent": "settings", "max_running": 0}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "at least 1",
        ),
    ];
    for (body, status, code, names) in cases {
        let answer = h.intent(body.clone()).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.body);
        let error = answer.json();
        assert_eq!(error["error"], code, "{body}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(names),
            "{body}: {error}"
        );
    }
    let not_json = h
        .send(
            h.bearer(Method::POST, "/api/intents")
                .body(Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    assert!(
        not_json.json()["message"]
            .as_str()
            .unwrap()
            .contains("not an intent")
    );
    let huge = h
        .send(
            h.bearer(Method::POST, "/api/intents")
                .body(Body::from(format!(
                    r#"{{"intent":"session","session_id":"s1","action":"follow_up","text":"{}"}}"#,
                    "x".repeat(MAX_BODY_BYTES)
                )))
                .unwrap(),
        )
        .await;
    assert_eq!(huge.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(huge.json()["error"], "payload_too_large");
    assert_eq!(h.host.intents().len(), 1, "{:?}", h.host.intents());
    // The longest follow-up `ctl` takes from stdin, the page takes too.
    let longest = "x".repeat(intendant_protocol::socket::MAX_TASK_BYTES);
    let taken = h
        .intent(json!({"intent": "session", "session_id": "s1", "action": "follow_up", "text": longest}))
        .await;
    assert!(taken.status.is_success(), "{}", taken.status);
    assert_eq!(h.host.intents().len(), 2);
}

/// Reads SSE messages from `body` until `n` have ids or one is `lagged`; returns (id, event,
/// data) of each.
async fn read_sse(body: &mut Body, n: usize) -> Vec<(Option<u64>, String, String)> {
    let mut text = String::new();
    let mut out = Vec::new();
    while out
        .iter()
        .filter(|(id, _, _): &&(Option<u64>, String, String)| id.is_some())
        .count()
        < n
        && !out.iter().any(|(_, e, _)| e == "lagged")
    {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.unwrap();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        text.push_str(std::str::from_utf8(data).unwrap());
        while let Some(end) = text.find("\n\n") {
            let message: String = text.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (None, "message".to_string(), String::new());
            for line in message.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse().unwrap());
                } else if let Some(v) = line.strip_prefix("event: ") {
                    event = v.into();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            if id.is_some() || event != "message" {
                out.push((id, event, data));
            }
        }
    }
    out
}

#[tokio::test]
async fn sse_resumes_after_last_event_id_with_no_gap_and_no_duplicate() {
    let h = Harness::new();
    h.add_session("t").await;
    for turn in 1..=3 {
        h.host.publish("s1", AppEvent::TurnStarted { turn });
    }
    let response = h
        .app
        .clone()
        .oneshot(
            h.cookie(Method::GET, "/api/events")
                .header("last-event-id", "2")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut body = response.into_body();
    let replayed = read_sse(&mut body, 2).await;
    let ids: Vec<u64> = replayed.iter().map(|m| m.0.unwrap()).collect();
    assert_eq!(ids, [3, 4]);
    let envelope: Value = serde_json::from_str(&replayed[0].2).unwrap();
    assert_eq!(envelope["seq"], 3);
    assert_eq!(envelope["event"]["type"], "turn_started");
    // Live events follow the replay.
    h.host.publish("s1", AppEvent::TurnStarted { turn: 4 });
    let live = read_sse(&mut body, 1).await;
    assert_eq!(live[0].0, Some(5));

    // `?after=` for a first connection, one session only; Last-Event-ID wins over it.
    h.add_session("u").await;
    let response = h
        .app
        .clone()
        .oneshot(
            h.cookie(Method::GET, "/api/events?session=s1&after=0")
                .header("last-event-id", "4")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = response.into_body();
    h.host.publish("s2", AppEvent::TurnStarted { turn: 1 });
    h.host.publish("s1", AppEvent::TurnStarted { turn: 5 });
    let ids: Vec<u64> = read_sse(&mut body, 2)
        .await
        .iter()
        .map(|m| m.0.unwrap())
        .collect();
    assert_eq!(ids, [5, 8], "s1 only, after 4");

    let bad = h
        .send(
            h.cookie(Method::GET, "/api/events")
                .header("last-event-id", "yesterday")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// `GET /api/events` with the cookie: its body, nothing read of it yet.
async fn unread_event_stream(h: &Harness) -> Body {
    h.app
        .clone()
        .oneshot(
            h.cookie(Method::GET, "/api/events")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap()
        .into_body()
}

/// Reads `body` to its end: the events `ids` in order, then `lagged` at `next_seq`, then the end.
async fn assert_lags(body: &mut Body, ids: &[u64], next_seq: u64) {
    let messages = read_sse(body, usize::MAX).await;
    let got: Vec<u64> = messages.iter().filter_map(|m| m.0).collect();
    assert_eq!(got, ids);
    let last = messages.last().unwrap();
    assert_eq!(last.1, "lagged");
    assert_eq!(last.2, format!("{{\"next_seq\":{next_seq}}}"));
    assert!(body.frame().await.is_none(), "the stream ends after lagged");
}

#[tokio::test]
async fn a_lagging_subscriber_is_told_and_the_stream_ends() {
    let h = Harness::new();
    h.add_session("t").await;
    let mut body = unread_event_stream(&h).await;
    // Nobody reads the stream while more than the host's queue holds is published (before its
    // reader takes any: the host itself ends the stream).
    let queue = host_double::SUBSCRIBER_CAPACITY as u32;
    for turn in 1..=queue + 5 {
        h.host.publish("s1", AppEvent::TurnStarted { turn });
    }
    let want: Vec<u64> = (2..2 + u64::from(queue)).collect();
    assert_lags(&mut body, &want, 2 + u64::from(queue)).await;
}

/// A stream's events wait for its client in a queue of `[daemon] client_buffer_kib` (1 MiB by
/// default): the event that finds no room makes the stream lag, however few events it holds.
#[tokio::test]
async fn a_stream_whose_unread_events_pass_its_buffer_lags() {
    let h = Harness::new();
    h.add_session("t").await;
    let mut body = unread_event_stream(&h).await;
    for _ in 0..4 {
        h.host.publish("s1", big_output(400));
    }
    // What fits in a megabyte, in order.
    assert_lags(&mut body, &[2, 3], 4).await;
}

#[tokio::test]
async fn model_and_command_output_is_never_markup() {
    let h = Harness::new();
    h.add_session("t").await;
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    h.host.publish(
        "s1",
        AppEvent::AgentOutput {
            call_id: "c".into(),
            name: "exec_command".into(),
            output: hostile.into(),
        },
    );
    let events = h.get("/api/sessions/s1/events?after=0").await;
    assert_eq!(events.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(events.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let csp = events.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(events.json()["events"][1]["event"]["output"], hostile);
    // The page has no inline script, and its script never parses data as HTML.
    let page = h.get("/").await.body;
    assert!(!page.contains("<script>"), "{page}");
    let script = h.get("/assets/app.js").await;
    assert_eq!(
        script.headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.body.contains(sink), "app.js uses {sink}");
    }
}

#[tokio::test]
async fn the_first_load_fits_the_budget() {
    let h = Harness::new();
    let mut total = 0;
    for path in ["/", "/assets/app.js", "/assets/app.css"] {
        let answer = h.get(path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        total += answer.body.len();
    }
    assert!(total < 200 * 1024, "{total} bytes on first load");
    // The login page's stylesheet is reachable without a login; the app itself is not.
    let css = h.get_without_login("/assets/app.css").await;
    assert_eq!(css.status, StatusCode::OK);
}

#[tokio::test]
async fn a_remote_bind_needs_the_explicit_flag_and_still_the_token() {
    let home = tempfile::tempdir().unwrap();
    let host = HostDouble::new();
    let config = web::WebConfig {
        addr: "0.0.0.0:0".parse().unwrap(),
        allow_remote: false,
    };
    let err = web::WebServer::bind(&config, host.clone(), home.path().to_path_buf())
        .await
        .unwrap_err();
    assert!(matches!(err, web::WebError::RemoteRefused { .. }), "{err}");
    assert!(err.to_string().contains("--web-allow-remote"), "{err}");
    let server = web::WebServer::bind(
        &web::WebConfig {
            allow_remote: true,
            ..config
        },
        host,
        home.path().to_path_buf(),
    )
    .await
    .unwrap();
    let url = server.login_url().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/login?token="),
        "{url}"
    );
    // Served for real: over TCP the token is still required.
    let port = server.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let raw = |request: String| raw_http(port, request);
    let anonymous = raw(format!(
        "GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    ))
    .await;
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    let token = url.rsplit_once("token=").unwrap().1;
    let with_token = raw(format!(
        "GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ))
    .await;
    assert!(with_token.starts_with("HTTP/1.1 200"), "{with_token}");
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn routes_added_to_the_server_pass_the_same_guard() {
    let home = tempfile::tempdir().unwrap();
    let config = web::WebConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
    };
    let server = web::WebServer::bind(&config, HostDouble::new(), home.path().to_path_buf())
        .await
        .unwrap()
        .with_routes(Router::new().route("/extra", axum::routing::get(|| async { "extra" })));
    let port = server.local_addr().unwrap().port();
    let token = token::load(home.path()).unwrap().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let raw = |headers: String| {
        raw_http(
            port,
            format!("GET /extra HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"),
        )
    };
    let anonymous = raw(format!("Host: 127.0.0.1:{port}\r\n")).await;
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    let rebound = raw(format!(
        "Host: rebind.example:{port}\r\nAuthorization: Bearer {token}\r\n"
    ))
    .await;
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    let allowed = raw(format!(
        "Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    ))
    .await;
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    assert!(allowed.ends_with("extra"), "{allowed}");
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

/// `request` written as is to 127.0.0.1:`port`; the whole answer, once the server closes.
async fn raw_http(port: u16, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer
}

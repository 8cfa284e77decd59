//! MCP over streamable HTTP at `/mcp` of the dashboard's real listener: an `rmcp` HTTP client
//! with the token lists the tools and runs the approval round trip against the scripted host;
//! without the token it is a 401, from another origin a 403, and the browser's cookie works
//! like the bearer token. A shutdown ends open MCP streams.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::double::HostDouble;
use intendant_daemon::control_plane::{ClientLimits, McpPolicy};
use intendant_protocol::events::AppEvent;
use intendant_server::mcp;
use intendant_server::web::{self, WebConfig, WebServer, token};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::mcp_client::{call, failed, ok};

/// Longest a shutdown may take before the test fails (never reached by a healthy run).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(30);

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

struct Served {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    host: Arc<HostDouble>,
    addr: SocketAddr,
    token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    running: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start() -> Served {
        Served::start_with(ClientLimits::default()).await
    }

    async fn start_with(limits: ClientLimits) -> Served {
        let home = tempfile::tempdir().unwrap();
        let host = HostDouble::scripted();
        let config = WebConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
        };
        let server = WebServer::bind(&config, host.clone(), home.path().to_path_buf())
            .await
            .unwrap()
            .with_limits(limits);
        let addr = server.local_addr().unwrap();
        let token = token::load(home.path()).unwrap().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let project = tempfile::tempdir().unwrap();
        // An owner who lets the model answer approvals (the tools' default-off side is
        // `mcp_policy::security_mcp_model_approval_tools_exist_only_where_the_owner_allowed_them`).
        let policy = McpPolicy {
            projects: vec![project.path().to_path_buf()],
            allow_model_approvals: true,
            ..McpPolicy::default()
        };
        let (mcp, sessions) = mcp::http::routes_with(host.clone(), server.access(), policy, limits);
        let running = tokio::spawn(server.with_routes(mcp).run(async move {
            let _ = stopped.await;
            sessions.end();
        }));
        Served {
            home,
            project,
            host,
            addr,
            token,
            stop: Some(stop),
            running,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A raw `POST /mcp` of `body` with `headers`; the status and what was read of the answer.
    async fn post(&self, headers: &[(&str, String)], body: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).await.unwrap();
        // Up to the end (errors close the connection) or to the initialize result (a stream
        // of events, which stays open).
        let mut buf = vec![0; 4096];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("\"serverInfo\"") {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&got).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status: {text}"));
        (status, text)
    }

    /// Stops the dashboard and waits for it to end.
    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(SHUTDOWN_BOUND, self.running)
            .await
            .expect("the dashboard ends although an MCP stream is open")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_with_the_token_runs_the_tools() {
    let served = Served::start().await;
    let transport = StreamableHttpClientTransport::with_client(
        intendant_netguard::http::client().unwrap(),
        StreamableHttpClientTransportConfig::with_uri(served.url()).auth_header(&served.token),
    );
    let client = ().serve(transport).await.unwrap();
    let peer = client.peer();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 15);

    let started = ok(call(
        peer,
        "run_task",
        json!({"task": "this needs approval", "project_dir": served.project.path(), "wait_s": 10}),
    )
    .await);
    assert_eq!(started["wait"], "needs_human");
    let session = started["session_id"].as_str().unwrap().to_owned();
    let listed = ok(call(peer, "list_approvals", json!({})).await);
    assert_eq!(listed["approvals"][0]["command_preview"], "$ touch out.txt");
    ok(call(
        peer,
        "resolve_approval",
        json!({"session_id": session, "approval_id": listed["approvals"][0]["id"],
               "decision": "approve"}),
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

    // No working directory over HTTP: a relative project directory is refused, clearly.
    let (code, message) =
        failed(call(peer, "run_task", json!({"task": "t", "project_dir": "."})).await);
    assert_eq!(code, "invalid_request");
    assert!(message.contains("absolute"), "{message}");

    // The web token never reaches a result, whatever a session printed.
    served.host.publish(
        &session,
        AppEvent::Error {
            message: format!("saw {}", served.token),
        },
    );
    let got = call(peer, "get_session", json!({"session_id": session})).await;
    let text = serde_json::to_string(&got).unwrap();
    assert!(!text.contains(&served.token), "{text}");
    assert!(text.contains("saw [redacted]"), "{text}");

    // The client's open stream does not hold the shutdown up.
    served.shut_down().await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_needs_the_token_and_our_origin() {
    let served = Served::start().await;
    let bearer = ("Authorization", format!("Bearer {}", served.token));
    let (status, head) = served.post(&[], INITIALIZE).await;
    assert_eq!(status, 401, "{head}");
    assert!(
        head.contains("application/json"),
        "a JSON 401, not the login page: {head}"
    );
    let (status, head) = served
        .post(
            &[("Authorization", "Bearer not-the-token".into())],
            INITIALIZE,
        )
        .await;
    assert_eq!(status, 401, "{head}");
    let (status, head) = served
        .post(
            &[bearer.clone(), ("Origin", "http://evil.example".into())],
            INITIALIZE,
        )
        .await;
    assert_eq!(status, 403, "{head}");
    let (status, head) = served.post(&[bearer], INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("\"serverInfo\""), "{head}");

    // A logged-in browser's cookie, with our own Origin, is the same token.
    let cookie = (
        "Cookie",
        format!(
            "intendant_session={}",
            token::session_cookie_value(&served.token)
        ),
    );
    let (status, head) = served.post(std::slice::from_ref(&cookie), INITIALIZE).await;
    assert_eq!(status, 403, "a cookie POST without its Origin: {head}");
    let origin = ("Origin", format!("http://{}", served.addr));
    let (status, head) = served.post(&[cookie, origin], INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    assert!(served.home.path().join(token::TOKEN_FILE).exists());
    served.shut_down().await;
}

impl Served {
    /// A raw request of `head` lines (no body) on a connection left open; what was read up to
    /// the end of the response's head.
    async fn open(&self, head: &str) -> (tokio::net::TcpStream, String) {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let request = format!(
            "{head}\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.addr, self.token
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0; 1024];
        while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        (stream, String::from_utf8_lossy(&got).into_owned())
    }

    /// A live event stream, asked for again until one is given; `why_not` if none is within
    /// [`EXPIRY_BOUND`] (the last answer's head is added to it).
    async fn event_stream_within_bound(&self, why_not: &str) -> tokio::net::TcpStream {
        let deadline = tokio::time::Instant::now() + EXPIRY_BOUND;
        loop {
            let (stream, head) = self.open("GET /api/events HTTP/1.1").await;
            if head.starts_with("HTTP/1.1 200") {
                return stream;
            }
            assert!(tokio::time::Instant::now() < deadline, "{why_not}: {head}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Longest a limit test waits for an idle session to expire (never reached by a healthy run).
const EXPIRY_BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_mcp_http_sessions_are_capped_per_token_and_expire_when_idle() {
    let served = Served::start().await;
    let bearer = ("Authorization", format!("Bearer {}", served.token));
    let cap = ClientLimits::default().mcp_sessions;
    let mut opened = 0;
    let mut busy = 0;
    for _ in 0..2000 {
        let (status, text) = served.post(std::slice::from_ref(&bearer), INITIALIZE).await;
        match status {
            200 => opened += 1,
            503 => {
                assert!(
                    text.contains("busy") && text.contains("mcp_sessions"),
                    "{text}"
                );
                busy += 1;
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!((opened, busy), (cap, 2000 - cap));
    served.shut_down().await;

    // Idle sessions end by themselves and make room.
    let served = Served::start_with(ClientLimits {
        mcp_sessions: 2,
        mcp_idle: Duration::from_millis(500),
        ..ClientLimits::default()
    })
    .await;
    for _ in 0..2 {
        assert_eq!(
            served
                .post(std::slice::from_ref(&bearer_of(&served)), INITIALIZE)
                .await
                .0,
            200
        );
    }
    assert_eq!(served.post(&[bearer_of(&served)], INITIALIZE).await.0, 503);
    let deadline = tokio::time::Instant::now() + EXPIRY_BOUND;
    while served.post(&[bearer_of(&served)], INITIALIZE).await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle MCP sessions never expire"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served.shut_down().await;
}

/// The owner cuts a token off with `ctl web-token --rotate`: the MCP sessions its clients had
/// open no longer keep the new token's clients out (they waited for the old ones to expire,
/// ten minutes by default, answered `busy`), and the old token opens none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_mcp_http_sessions_of_a_rotated_token_make_room_for_the_new_one() {
    let mut served = Served::start_with(ClientLimits {
        mcp_sessions: 2,
        ..ClientLimits::default()
    })
    .await;
    for _ in 0..2 {
        assert_eq!(served.post(&[bearer_of(&served)], INITIALIZE).await.0, 200);
    }
    assert_eq!(served.post(&[bearer_of(&served)], INITIALIZE).await.0, 503);
    let old = bearer_of(&served);
    token::rotate(served.home.path()).unwrap();
    served.token = token::load(served.home.path()).unwrap().unwrap();
    assert_eq!(served.post(&[old], INITIALIZE).await.0, 401);
    for _ in 0..2 {
        let (status, text) = served.post(&[bearer_of(&served)], INITIALIZE).await;
        assert_eq!(status, 200, "{text}");
    }
    assert_eq!(served.post(&[bearer_of(&served)], INITIALIZE).await.0, 503);
    served.shut_down().await;
}

fn bearer_of(served: &Served) -> (&'static str, String) {
    ("Authorization", format!("Bearer {}", served.token))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_live_streams_are_capped() {
    let served = Served::start_with(ClientLimits {
        max_web_streams: 2,
        ..ClientLimits::default()
    })
    .await;
    let mut streams = Vec::new();
    for _ in 0..2 {
        let (stream, head) = served.open("GET /api/events HTTP/1.1").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        streams.push(stream);
    }
    let (_, head) = served.open("GET /api/events HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    // A stream that ends gives its place back.
    drop(streams.pop());
    streams.push(
        served
            .event_stream_within_bound("a closed stream keeps its place")
            .await,
    );
    drop(streams);
    served.shut_down().await;
}

/// Whether the server closed `stream` within `within` (anything it sent first is read and
/// dropped); false when it is still open then.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A `GET path` with the token on `stream`, kept alive; the whole response (head and body).
async fn exchange(served: &Served, stream: &mut tokio::net::TcpStream, path: &str) -> String {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        served.addr, served.token
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no content-length: {head}"));
            if body.len() >= length {
                return text;
            }
        }
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Three connections doing nothing, in the order they connected: one silent, one that sent
/// half a request head, and one idle after a response.
async fn doing_nothing(served: &Served) -> [tokio::net::TcpStream; 3] {
    let silent = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let mut half = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    half.write_all(b"GET /api/approvals HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut kept = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let answer = exchange(served, &mut kept, "/api/approvals").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    [silent, half, kept]
}

/// Every connection place held by connections doing nothing (silent, half a request head,
/// idle after a response): a newcomer takes the oldest one's place and is served, the oldest
/// is closed; only connections answering requests (live streams) leave a newcomer `busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_connections_doing_nothing_never_lock_out_a_client() {
    let served = Served::start_with(ClientLimits {
        max_web_connections: 3,
        // Far past the test's bounds: what closes them below is the newcomers.
        handshake_timeout: Duration::from_secs(600),
        ..ClientLimits::default()
    })
    .await;
    let [mut silent, mut half, mut kept] = doing_nothing(&served).await;
    // The three hold every place (taken at accept, in the order they connected: `kept` was
    // answered, so the two before it were accepted too).

    // Each newcomer stays open (idle after its answer, the newest), so the next one needs a
    // place too.
    let mut newcomers = Vec::new();
    for (n, oldest) in [&mut silent, &mut half, &mut kept].into_iter().enumerate() {
        let mut newcomer = tokio::net::TcpStream::connect(served.addr).await.unwrap();
        let answer = exchange(&served, &mut newcomer, "/api/approvals").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "newcomer {n}: {answer}");
        // Clients that honour it are told how long an idle connection is kept.
        assert!(answer.contains("keep-alive: timeout=600\r\n"), "{answer}");
        assert!(
            closed_within(oldest, EXPIRY_BOUND).await,
            "the oldest connection doing nothing ({n}) kept its place"
        );
        newcomers.push(newcomer);
    }
    drop(newcomers);

    // Three live streams answering: a fourth connection is `busy`.
    let mut streams = Vec::new();
    for _ in 0..3 {
        let (stream, head) = served.open("GET /api/events HTTP/1.1").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        streams.push(stream);
    }
    let mut refused = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let mut answer = String::new();
    refused.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_web_connections"), "{answer}");
    drop(streams);
    served.shut_down().await;
}

/// Requests without the token never hold a place against a newcomer: with every place taken
/// by a login form sent a byte at a time (the dashboard reads it before it can know the
/// token; 130 of them kept the owner out before), each newcomer with the token is answered and
/// the oldest form closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_login_forms_sent_slowly_never_lock_out_a_client() {
    let served = Served::start_with(ClientLimits {
        max_web_connections: 3,
        // Far past the test's bounds: what closes them below is the newcomers.
        handshake_timeout: Duration::from_secs(600),
        ..ClientLimits::default()
    })
    .await;
    let mut trickling = Vec::new();
    for _ in 0..3 {
        let mut form = tokio::net::TcpStream::connect(served.addr).await.unwrap();
        let head = format!(
            "POST /login HTTP/1.1\r\nHost: {}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 200000\r\n\r\nt",
            served.addr
        );
        form.write_all(head.as_bytes()).await.unwrap();
        trickling.push(form);
    }
    // Each form is in its handler by now, waiting for the rest of its body.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut newcomers = Vec::new();
    for (n, oldest) in trickling.iter_mut().enumerate() {
        let mut newcomer = tokio::net::TcpStream::connect(served.addr).await.unwrap();
        let answer = exchange(&served, &mut newcomer, "/api/approvals").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "newcomer {n}: {answer}");
        assert!(
            closed_within(oldest, EXPIRY_BOUND).await,
            "the oldest login form ({n}) kept its place"
        );
        newcomers.push(newcomer);
    }
    drop(newcomers);
    served.shut_down().await;
}

/// A request head longer than the dashboard buffers is a 431 and the connection is closed; one
/// just under it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_a_request_head_is_bounded() {
    let served = Served::start().await;
    let padding = |len: usize| format!("X-Padding: {}\r\n", "a".repeat(len));
    let mut fits = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let head = format!(
        "GET /api/approvals HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n{}\
         Connection: close\r\n\r\n",
        served.addr,
        served.token,
        padding(web::MAX_HEAD_BYTES / 2)
    );
    fits.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    fits.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let mut long = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let head = format!(
        "GET /api/approvals HTTP/1.1\r\nHost: {}\r\n{}",
        served.addr,
        padding(web::MAX_HEAD_BYTES * 2)
    );
    // The server may close before it has read all of it.
    let _ = long.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = long.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    served.shut_down().await;
}

/// A connection that sends no request head within `handshake_timeout_secs`, or only half of
/// one, or idles that long after a response, is closed; a live stream open longer is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_a_late_request_head_closes_the_connection() {
    let timeout = Duration::from_millis(500);
    let served = Served::start_with(ClientLimits {
        handshake_timeout: timeout,
        ..ClientLimits::default()
    })
    .await;
    let (mut stream, head) = served.open("GET /api/events HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let [mut silent, mut half, mut kept] = doing_nothing(&served).await;
    for (what, conn) in [
        ("silent", &mut silent),
        ("half a head", &mut half),
        ("idle", &mut kept),
    ] {
        assert!(
            closed_within(conn, EXPIRY_BOUND).await,
            "a connection {what} past the timeout stays open"
        );
    }
    // The stream outlived the timeout by far and is open still.
    assert!(
        !closed_within(&mut stream, timeout * 3).await,
        "a live stream was closed"
    );
    drop(stream);
    served.shut_down().await;
}

/// A client that stops reading its live stream (a frozen tab, a script that never reads) while
/// far more than the sockets hold is published is closed once a write has waited
/// `handshake_timeout_secs`, and its stream's place goes to the next dashboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_web_a_client_that_stops_reading_gives_its_stream_back() {
    let served = Served::start_with(ClientLimits {
        max_web_streams: 1,
        handshake_timeout: Duration::from_millis(500),
        ..ClientLimits::default()
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut frozen = socket.connect(served.addr).await.unwrap();
    let request = format!(
        "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        served.addr, served.token
    );
    frozen.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0; 12];
    frozen.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let (_, refused) = served.open("GET /api/events HTTP/1.1").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    // 32 MiB: far more than both sockets' buffers hold.
    let big = "z".repeat(1024 * 1024);
    for n in 0..32 {
        served.host.publish(
            "s1",
            AppEvent::AgentOutput {
                call_id: format!("c{n}"),
                name: "exec".into(),
                output: big.clone(),
            },
        );
    }
    served
        .event_stream_within_bound("a client that reads nothing keeps its stream")
        .await;
    drop(frozen);
    served.shut_down().await;
}

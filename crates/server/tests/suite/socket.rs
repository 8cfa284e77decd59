//! The control socket against an in-memory host: requests, streams, bad lines, hung-up and
//! lagging clients, shutdown.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_core::host::double::HostDouble;
use intendant_daemon::control_plane::ClientLimits;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    HostErrorCode, SessionIntent, SessionStatus, SessionsPage, SettingsChange, StartRequest,
    StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_server::socket::{ControlSocket, DaemonLock, RemoteHost, socket_path};
use intendant_server::web::{WebConfig, WebLoad, WebServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Daemon {
    home: tempfile::TempDir,
    host: Arc<HostDouble>,
    served: JoinHandle<()>,
    _stop: oneshot::Sender<()>,
}

async fn daemon() -> Daemon {
    daemon_with(ClientLimits::default()).await
}

async fn daemon_with(limits: ClientLimits) -> Daemon {
    let home = tempfile::tempdir().unwrap();
    daemon_in(home, HostDouble::new(), limits, None).await
}

/// The socket of the state root `home` serving `host`, with the dashboard `web` beside it.
async fn daemon_in(
    home: tempfile::TempDir,
    host: Arc<HostDouble>,
    limits: ClientLimits,
    web: Option<WebLoad>,
) -> Daemon {
    let lock = DaemonLock::acquire(home.path()).unwrap();
    let mut socket = ControlSocket::bind(&lock).unwrap().with_limits(limits);
    if let Some(web) = web {
        socket = socket.with_web(web);
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn({
        let host: Arc<dyn SessionHost> = host.clone();
        async move {
            let _lock = lock;
            socket
                .serve(host, async {
                    let _ = stopped.await;
                })
                .await;
        }
    });
    Daemon {
        home,
        host,
        served,
        _stop: stop,
    }
}

impl Daemon {
    async fn client(&self) -> RemoteHost {
        RemoteHost::connect(self.home.path(), "test").await.unwrap()
    }

    async fn raw(&self) -> Raw {
        Raw::connect(self.home.path(), true).await
    }
}

/// A client speaking the lines by hand.
struct Raw {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Raw {
    async fn connect(home: &Path, hello: bool) -> Raw {
        let (read, write) = UnixStream::connect(socket_path(home))
            .await
            .unwrap()
            .into_split();
        let mut raw = Raw {
            lines: BufReader::new(read).lines(),
            write,
        };
        let server = raw.recv().await;
        assert_eq!(server["hello"], 1, "{server}");
        assert_eq!(server["pid"], std::process::id());
        if hello {
            raw.send(r#"{"hello":1,"client":"raw"}"#).await;
        }
        raw
    }

    async fn send(&mut self, line: &str) {
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = self.lines.next_line().await.unwrap().expect("a line");
        serde_json::from_str(&line).unwrap()
    }

    async fn closed(&mut self) -> bool {
        self.lines.next_line().await.unwrap().is_none()
    }
}

/// The ids of `sessions`, in their order.
fn ids_of(sessions: Vec<intendant_protocol::daemon::SessionSummary>) -> Vec<String> {
    sessions.into_iter().map(|s| s.id).collect()
}

fn task(text: &str) -> StartRequest {
    StartRequest {
        task: text.into(),
        project: "/p".into(),
        ..StartRequest::default()
    }
}

#[tokio::test]
async fn requests_reach_the_host_and_refusals_keep_their_code() {
    let d = daemon().await;
    let c = d.client().await;
    assert_eq!(c.server().pid, std::process::id());
    assert_eq!(c.home(), d.home.path());
    let s = c.start(task("build it")).await.unwrap();
    assert_eq!((s.id.as_str(), s.task.as_str()), ("s1", "build it"));
    assert_eq!(c.sessions().await.unwrap(), vec![s.clone()]);
    assert_eq!(c.session("s1").await.unwrap(), s);
    assert_eq!(
        c.session("nope").await.unwrap_err().code,
        HostErrorCode::UnknownSession
    );
    assert_eq!(
        c.start(task("")).await.unwrap_err().code,
        HostErrorCode::InvalidRequest
    );
    assert_eq!(
        c.interrupt("nope").await.unwrap_err().code,
        HostErrorCode::UnknownSession
    );
    c.set_autonomy(None, AutonomyLevel::High).await.unwrap();
    assert_eq!(
        c.settings().await.unwrap().default_autonomy,
        AutonomyLevel::High
    );
    c.set_autonomy(Some("s1"), AutonomyLevel::Low)
        .await
        .unwrap();
    assert_eq!(c.session("s1").await.unwrap().autonomy, AutonomyLevel::Low);
    let bad = SettingsChange {
        max_running: Some(0),
        ..SettingsChange::default()
    };
    assert_eq!(
        c.update_settings(bad).await.unwrap_err().code,
        HostErrorCode::InvalidRequest
    );
    assert_eq!(
        c.log_dir("s1").await.unwrap(),
        Path::new("/logs/s1").to_path_buf()
    );
    c.stop("s1").await.unwrap();
    assert!(c.session("s1").await.unwrap().status.is_finished());
    // Pages of one status, and their counts, as the host gives them; no fleet count from a
    // daemon in no fleet.
    c.start(task("still going")).await.unwrap();
    let interrupted = SessionsPage {
        status: Some(SessionStatus::Interrupted),
        ..SessionsPage::ALL
    };
    let listed = ids_of(c.sessions_page(&interrupted).await.unwrap());
    assert_eq!(listed, ["s1"]);
    assert_eq!(c.sessions_count(&interrupted).await.unwrap(), 1);
    assert_eq!(c.sessions_count(&SessionsPage::ALL).await.unwrap(), 2);
    assert_eq!(
        c.fleet_sessions_count(&SessionsPage::ALL).await.unwrap(),
        None
    );
}

/// The sessions of one status, more than a page of them, read over the socket a page at a time:
/// each in order, once, and only they handed out by the host.
#[tokio::test]
async fn the_sessions_of_one_status_are_read_a_page_of_them_at_a_time() {
    let d = daemon().await;
    let c = d.client().await;
    let mut failed = Vec::new();
    for n in 0..900 {
        let id = d.host.start(task(&format!("task {n}"))).await.unwrap().id;
        if n % 3 == 0 {
            d.host.set_status(&id, SessionStatus::Failed);
            failed.push(id);
        } else {
            d.host.set_status(&id, SessionStatus::Done);
        }
    }
    assert!(failed.len() > SessionsPage::SIZE as usize);
    let of_failed = SessionsPage {
        status: Some(SessionStatus::Failed),
        ..SessionsPage::ALL
    };
    let read_before = d.host.listed();
    let listed = ids_of(c.sessions_in(&of_failed).await.unwrap());
    assert_eq!(listed, failed);
    assert_eq!(
        d.host.listed() - read_before,
        failed.len(),
        "only they were read"
    );
    assert_eq!(
        c.sessions_count(&of_failed).await.unwrap(),
        failed.len() as u64
    );
    // Asked whole in one reply, a listing longer than a page is refused, never cut.
    let whole = c.sessions_page(&of_failed).await.unwrap_err();
    assert_eq!(whole.code, HostErrorCode::InvalidRequest, "{whole:?}");
}

#[tokio::test]
async fn a_stream_replays_then_follows_in_order() {
    let d = daemon().await;
    let c = d.client().await;
    c.start(task("one")).await.unwrap();
    c.start(task("two")).await.unwrap();
    d.host.publish("s1", AppEvent::TurnStarted { turn: 2 });
    let mut all = c.subscribe(None, Some(0)).await.unwrap();
    let mut two = c.subscribe(Some("s2"), Some(0)).await.unwrap();
    let mut live = c.subscribe(None, None).await.unwrap();
    assert_eq!(all.history_end(), 3);
    assert_eq!(two.history_end(), 2);
    assert_eq!(live.history_end(), 0);
    d.host.publish("s2", AppEvent::TurnStarted { turn: 2 });
    let seqs = |items: Vec<StreamItem>| -> Vec<(u64, String)> {
        items
            .into_iter()
            .map(|i| match i {
                StreamItem::Event(e) => (e.seq, e.session_id.clone()),
                StreamItem::Lagged { next_seq } => panic!("lagged at {next_seq}"),
            })
            .collect()
    };
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(all.next().await.unwrap());
    }
    assert_eq!(
        seqs(got),
        [(1, "s1"), (2, "s2"), (3, "s1"), (4, "s2")].map(|(n, s)| (n, s.to_string()))
    );
    let got = vec![two.next().await.unwrap(), two.next().await.unwrap()];
    assert_eq!(seqs(got), [(2, "s2".to_string()), (4, "s2".to_string())]);
    assert_eq!(
        seqs(vec![live.next().await.unwrap()]),
        [(4, "s2".to_string())]
    );
    assert_eq!(
        c.subscribe(Some("nope"), None).await.unwrap_err().code,
        HostErrorCode::UnknownSession
    );
}

#[tokio::test]
async fn bad_lines_get_errors_and_the_connection_stays_usable() {
    let d = daemon().await;
    let mut raw = d.raw().await;
    raw.send("this is not json").await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], "invalid_request", "{reply}");
    raw.send(&"x".repeat(intendant_protocol::socket::MAX_REQUEST_LINE + 10))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["error"]["code"], "invalid_request");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than"),
        "{reply}"
    );
    // One that starts with its id is answered under it: a client waiting for that reply
    // gets one.
    let long = format!(
        r#"{{"id":77,"op":"send","session_id":"s","msg":{{"action":"follow_up","text":"{}"}}}}"#,
        "x".repeat(intendant_protocol::socket::MAX_REQUEST_LINE)
    );
    raw.send(&long).await;
    let reply = raw.recv().await;
    assert_eq!(
        (reply["id"].clone(), reply["error"]["code"].clone()),
        (json!(77), json!("invalid_request")),
        "{reply}"
    );
    raw.send(r#"{"id":5,"op":"launch"}"#).await;
    let reply = raw.recv().await;
    assert_eq!(
        (reply["id"].clone(), reply["error"]["code"].clone()),
        (json!(5), json!("invalid_request"))
    );
    raw.send(r#"{"id":6,"op":"session","session_id":"nope"}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["error"]["code"], "unknown_session", "{reply}");
    raw.send(r#"{"id":7,"op":"unsubscribe","stream":7}"#).await;
    assert_eq!(raw.recv().await["error"]["code"], "invalid_request");
    raw.send(r#"{"id":8,"op":"sessions"}"#).await;
    assert_eq!(raw.recv().await, json!({"id": 8, "ok": []}));

    raw.send(r#"{"id":9,"op":"subscribe"}"#).await;
    assert_eq!(
        raw.recv().await,
        json!({"id": 9, "ok": {"stream": 9, "history_end": 0}})
    );
    raw.send(r#"{"id":9,"op":"subscribe"}"#).await;
    assert_eq!(raw.recv().await["error"]["code"], "invalid_request");
    raw.send(r#"{"id":10,"op":"unsubscribe","stream":9}"#).await;
    assert_eq!(raw.recv().await, json!({"id": 10, "ok": null}));
    assert_eq!(
        raw.recv().await,
        json!({"stream": 9, "end": "unsubscribed"})
    );
}

#[tokio::test]
async fn a_client_without_the_hello_is_refused() {
    let d = daemon().await;
    let mut raw = Raw::connect(d.home.path(), false).await;
    raw.send(r#"{"id":1,"op":"sessions"}"#).await;
    let reply = raw.recv().await;
    assert_eq!(reply["error"]["code"], "invalid_request");
    assert!(raw.closed().await);
    let mut raw = Raw::connect(d.home.path(), false).await;
    raw.send(r#"{"hello":99}"#).await;
    let reply = raw.recv().await;
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("version"),
        "{reply}"
    );
    assert!(raw.closed().await);
}

#[tokio::test]
async fn a_client_that_hangs_up_loses_no_approval() {
    let d = daemon().await;
    let a = d.client().await;
    a.start(task("t")).await.unwrap();
    let mut events = a.subscribe(Some("s1"), None).await.unwrap();
    d.host.ask_approval("s1", 7);
    match events.next().await.unwrap() {
        StreamItem::Event(e) => {
            assert!(matches!(e.event, AppEvent::ApprovalRequired { id: 7, .. }))
        }
        StreamItem::Lagged { .. } => panic!("lagged"),
    }
    drop(events);
    drop(a);
    let b = d.client().await;
    let pending = b.approvals().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!((pending[0].id, pending[0].session_id.as_str()), (7, "s1"));
    let approve = SessionIntent {
        session_id: "s1".into(),
        msg: ControlMsg::Approve { id: 7 },
    };
    b.send(approve.clone()).await.unwrap();
    assert_eq!(d.host.intents(), vec![approve.clone()]);
    assert_eq!(
        b.send(approve).await.unwrap_err().code,
        HostErrorCode::AlreadyAnswered
    );
}

/// A client that sent a burst of subscribes (each replaying the history) and hung up before
/// they were read: none of them is served. Served, a hundred such clients each asking for 64
/// streams of a 54 MB history kept the daemon busy on both cores for 35 s after they were gone,
/// 640 MiB larger, listed as connected.
#[tokio::test]
async fn a_client_that_hung_up_is_not_served_what_it_sent_before() {
    use std::io::Write;
    let d = daemon().await;
    for i in 0..50 {
        d.host.publish(
            "s1",
            AppEvent::Warning {
                message: format!("event {i}"),
            },
        );
    }
    let mut burst = String::from("{\"hello\":1,\"client\":\"gone\"}\n");
    for id in 0..64 {
        burst.push_str(&format!(
            "{{\"id\":{id},\"op\":\"subscribe\",\"after\":0}}\n"
        ));
    }
    // Written and closed at once, before the server (on this test's thread) read a line.
    let mut gone = std::os::unix::net::UnixStream::connect(socket_path(d.home.path())).unwrap();
    gone.write_all(burst.as_bytes()).unwrap();
    drop(gone);
    let client = d.client().await;
    for _ in 0..200 {
        if client.load().await.unwrap().clients == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        client.load().await.unwrap().clients,
        1,
        "the gone client is still served"
    );
    assert!(
        d.host.subscriptions() <= 1,
        "{} subscriptions",
        d.host.subscriptions()
    );
    // A live client's subscribes are served as ever.
    let mut raw = d.raw().await;
    raw.send(r#"{"id":1,"op":"subscribe","after":0}"#).await;
    assert_eq!(raw.recv().await["id"], 1);
}

#[tokio::test]
async fn a_client_that_stops_reading_lags_and_blocks_nobody() {
    let d = daemon().await;
    let other = d.client().await;
    other.start(task("t")).await.unwrap();
    d.host.ask_approval("s1", 1);
    let first_seq = 3;
    let mut slow = d.raw().await;
    slow.send(r#"{"id":1,"op":"subscribe"}"#).await;
    assert_eq!(slow.recv().await["ok"]["stream"], 1);
    // The slow client reads nothing more while far more than its queue and the socket's
    // buffers hold is published.
    let big = "y".repeat(4096);
    for n in 0..4000 {
        d.host.publish(
            "s1",
            AppEvent::AgentOutput {
                call_id: format!("c{n}"),
                name: "exec".into(),
                output: big.clone(),
            },
        );
        if n % 500 == 0 {
            // Other clients are served meanwhile.
            assert_eq!(other.sessions().await.unwrap().len(), 1);
            tokio::task::yield_now().await;
        }
    }
    // Its intents still land, unread replies or not.
    slow.send(r#"{"id":2,"op":"send","intent":{"session_id":"s1","action":"approve","id":1}}"#)
        .await;
    while d.host.intents().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(other.approvals().await.unwrap().is_empty());

    let mut expect = first_seq;
    let next_seq = loop {
        let line = slow.recv().await;
        if line.get("id").is_some() {
            assert!(line.get("ok").is_some(), "{line}");
            continue;
        }
        let item = &line["item"];
        match item["kind"].as_str().unwrap() {
            "event" => {
                assert_eq!(item["seq"], expect, "gapless until the lag");
                expect += 1;
            }
            "lagged" => break item["next_seq"].as_u64().unwrap(),
            other => panic!("{other}"),
        }
    };
    assert_eq!(
        next_seq, expect,
        "lagged names the first seq it did not deliver"
    );
    assert!(next_seq < 4000, "it did lag");
    loop {
        let line = slow.recv().await;
        if line.get("stream").is_some() {
            assert_eq!(line, json!({"stream": 1, "end": "lagged"}));
            break;
        }
    }
    // Re-reading from where it lagged picks up exactly there.
    let mut again = other.subscribe(None, Some(next_seq - 1)).await.unwrap();
    match again.next().await.unwrap() {
        StreamItem::Event(e) => assert_eq!(e.seq, next_seq),
        StreamItem::Lagged { .. } => panic!("lagged"),
    }
}

#[tokio::test]
async fn shutdown_stops_the_host_then_the_server() {
    let d = daemon().await;
    let c = d.client().await;
    let mut events = c.subscribe(None, Some(0)).await.unwrap();
    c.shutdown().await.unwrap();
    assert!(d.host.is_shut_down());
    d.served.await.unwrap();
    assert!(!socket_path(d.home.path()).exists(), "socket removed");
    assert_eq!(events.next().await, None, "streams end at shutdown");
    let err = RemoteHost::connect(d.home.path(), "t").await.err().unwrap();
    assert_eq!(err.code, HostErrorCode::Unavailable);
}

#[tokio::test]
async fn no_daemon_is_unavailable() {
    let home = tempfile::tempdir().unwrap();
    let err = RemoteHost::connect(home.path(), "t").await.err().unwrap();
    assert_eq!(err.code, HostErrorCode::Unavailable);
    assert!(err.message.contains("no daemon"), "{}", err.message);
    // A crashed daemon's socket file: nobody listens.
    drop(std::os::unix::net::UnixListener::bind(socket_path(home.path())).unwrap());
    let err = RemoteHost::connect(home.path(), "t").await.err().unwrap();
    assert_eq!(err.code, HostErrorCode::Unavailable);
}

/// A session cannot drive the daemon: with this process a session host (a child subreaper, as
/// the daemon makes itself), a process it started (what a session's command is where no cgroup
/// could be made) gets one `forbidden` line instead of the hello, even though it speaks the
/// protocol; the refusal is logged; a client that is not a descendant (this process) is served.
#[tokio::test]
async fn security_socket_a_descendant_of_the_daemon_is_refused_and_logged() {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let home = tempfile::tempdir().unwrap();
    let host = HostDouble::new();
    let lock = DaemonLock::acquire(home.path()).unwrap();
    let (log_tx, mut logged) = tokio::sync::mpsc::unbounded_channel::<String>();
    let socket = ControlSocket::bind(&lock).unwrap().with_refusal_log(
        intendant_daemon::log::DaemonLog::new(move |line| {
            let _ = log_tx.send(line.to_owned());
        }),
    );
    let served = tokio::spawn({
        let host: Arc<dyn SessionHost> = host.clone();
        async move {
            let _lock = lock;
            socket.serve(host, std::future::pending()).await;
        }
    });
    let probe = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b'{"hello":1,"client":"probe"}\n{"id":1,"op":"set_autonomy","level":"full"}\n')
got = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
print(got.decode())
"#;
    let out = tokio::process::Command::new("/usr/bin/python3")
        .args(["-c", probe])
        .arg(socket_path(home.path()))
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value = serde_json::from_str(said.trim()).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(line["id"], Value::Null, "{said}");
    assert_eq!(line["error"]["code"], "forbidden", "{said}");
    let message = line["error"]["message"].as_str().unwrap();
    assert!(message.contains("belongs to a session"), "{message}");
    let log = logged.recv().await.unwrap();
    assert!(log.starts_with("control socket: refused: pid"), "{log}");
    let before = host.settings().await.unwrap().default_autonomy;
    assert_ne!(
        before,
        AutonomyLevel::Full,
        "the probe's set_autonomy never arrived"
    );
    // This process is no session's: served as before.
    let client = RemoteHost::connect(home.path(), "test").await.unwrap();
    client.sessions().await.unwrap();
    served.abort();
}

/// Longest a limit test waits for the daemon to act (never reached by a healthy run).
const LIMIT_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn security_socket_a_silent_connection_is_dropped_after_the_handshake_timeout() {
    let d = daemon_with(ClientLimits {
        handshake_timeout: Duration::from_millis(200),
        ..ClientLimits::default()
    })
    .await;
    let mut silent = Raw::connect(d.home.path(), false).await;
    let told = tokio::time::timeout(LIMIT_WAIT, silent.recv())
        .await
        .expect("a silent connection is dropped");
    assert_eq!(told["error"]["code"], "invalid_request", "{told}");
    let message = told["error"]["message"].as_str().unwrap();
    assert!(message.contains("handshake_timeout_secs"), "{message}");
    assert!(silent.closed().await);
    // A client that says its hello in time is served past the timeout.
    let c = d.client().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(c.sessions().await.unwrap().is_empty());
}

#[tokio::test]
async fn security_socket_clients_past_max_clients_get_busy_and_silent_ones_make_room() {
    let d = daemon_with(ClientLimits {
        max_clients: 3,
        ..ClientLimits::default()
    })
    .await;
    let a = d.client().await;
    let b = d.raw().await;
    let c = d.raw().await;
    let refused = RemoteHost::connect(d.home.path(), "fourth")
        .await
        .err()
        .unwrap();
    assert_eq!(refused.code, HostErrorCode::Busy);
    assert!(
        refused.message.contains("max_clients"),
        "{}",
        refused.message
    );
    let load = a.load().await.unwrap();
    assert_eq!((load.clients, load.max_clients), (3, 3));
    // No dashboard beside it: nothing said about one.
    assert_eq!(
        (load.web_connections, load.max_web_connections),
        (None, None)
    );
    assert!(load.rss_bytes.unwrap() > 0);
    // Three clients' connections at least, within the limit in force.
    let (open, max) = (load.descriptors.unwrap(), load.max_descriptors.unwrap());
    assert!((3..=max).contains(&open), "{open} of {max}");
    // One leaves: the next is admitted.
    drop(c);
    let deadline = tokio::time::Instant::now() + LIMIT_WAIT;
    let _again = loop {
        match RemoteHost::connect(d.home.path(), "again").await {
            Ok(c) => break c,
            Err(e) => assert_eq!(e.code, HostErrorCode::Busy),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a freed slot is never reused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(b);
    let deadline = tokio::time::Instant::now() + LIMIT_WAIT;
    while a.load().await.unwrap().clients > 2 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Connections that never say hello cannot lock a client out: the oldest of them is
    // evicted (told `busy`) to make room for a newcomer.
    let mut silent = Raw::connect(d.home.path(), false).await;
    let newcomer = RemoteHost::connect(d.home.path(), "newcomer")
        .await
        .unwrap();
    assert!(newcomer.sessions().await.unwrap().is_empty());
    let evicted = silent.recv().await;
    assert_eq!(evicted["error"]["code"], "busy", "{evicted}");
    assert!(silent.closed().await);
    assert_eq!(a.load().await.unwrap().clients, 3);
}

#[tokio::test]
async fn security_socket_streams_per_connection_are_capped() {
    let d = daemon_with(ClientLimits {
        max_streams_per_client: 2,
        ..ClientLimits::default()
    })
    .await;
    let mut raw = d.raw().await;
    for id in 1..=3 {
        raw.send(&format!(r#"{{"id":{id},"op":"subscribe"}}"#))
            .await;
    }
    assert_eq!(raw.recv().await["ok"]["stream"], 1);
    assert_eq!(raw.recv().await["ok"]["stream"], 2);
    let refused = raw.recv().await;
    assert_eq!(
        (refused["id"].as_u64(), &refused["error"]["code"]),
        (Some(3), &json!("busy"))
    );
    // Closing one makes room for another.
    raw.send(r#"{"id":4,"op":"unsubscribe","stream":1}"#).await;
    raw.send(r#"{"id":5,"op":"subscribe"}"#).await;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &Value| l["id"] == 5) {
        seen.push(raw.recv().await);
    }
    let opened = seen.iter().find(|l| l["id"] == 5).unwrap();
    assert_eq!(opened["ok"]["stream"], 5, "{opened}");
}

#[tokio::test]
async fn an_mcp_servers_connection_is_served_by_the_model_host() {
    let home = tempfile::tempdir().unwrap();
    let human = HostDouble::new();
    let model = HostDouble::new();
    let lock = DaemonLock::acquire(home.path()).unwrap();
    let socket = ControlSocket::bind(&lock)
        .unwrap()
        .with_model_host(model.clone());
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn({
        let host: Arc<dyn SessionHost> = human.clone();
        async move {
            let _lock = lock;
            socket
                .serve(host, async {
                    let _ = stopped.await;
                })
                .await;
        }
    });
    let mcp = RemoteHost::connect(home.path(), "intendant-mcp 0.1.0")
        .await
        .unwrap();
    let ctl = RemoteHost::connect(home.path(), "intendant-ctl")
        .await
        .unwrap();
    let _ = mcp.stop("from-the-model").await;
    let _ = ctl.stop("from-a-human").await;
    assert_eq!(
        model.calls().iter().filter(|c| c.contains("stop")).count(),
        1,
        "{:?}",
        model.calls()
    );
    assert!(
        model.calls().iter().any(|c| c.contains("from-the-model")),
        "{:?}",
        model.calls()
    );
    assert!(
        human.calls().iter().any(|c| c.contains("from-a-human")),
        "{:?}",
        human.calls()
    );
    assert!(
        !human.calls().iter().any(|c| c.contains("from-the-model")),
        "{:?}",
        human.calls()
    );
}

/// `load` counts the connections of the dashboard served beside the socket, as they come and go.
#[tokio::test]
async fn load_counts_the_dashboards_connections() {
    let home = tempfile::tempdir().unwrap();
    let host = HostDouble::new();
    let config = WebConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
    };
    let limits = ClientLimits {
        max_web_connections: 5,
        ..ClientLimits::default()
    };
    let web = WebServer::bind(&config, host.clone(), home.path().to_path_buf())
        .await
        .unwrap()
        .with_limits(limits);
    let addr = web.local_addr().unwrap();
    let load = web.load();
    let (_stop_web, web_stopped) = oneshot::channel::<()>();
    tokio::spawn(web.run(async {
        let _ = web_stopped.await;
    }));
    let d = daemon_in(home, host, limits, Some(load)).await;
    let client = d.client().await;
    let web_connections = || async { client.load().await.unwrap().web_connections };
    assert_eq!(client.load().await.unwrap().max_web_connections, Some(5));
    assert_eq!(web_connections().await, Some(0));
    let open: Vec<_> =
        futures::future::join_all((0..2).map(|_| tokio::net::TcpStream::connect(addr))).await;
    let deadline = tokio::time::Instant::now() + LIMIT_WAIT;
    while web_connections().await != Some(2) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "two connections never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(open);
    while web_connections().await != Some(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "closed connections still counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A daemon's line longer than the client reads (a reply or event past every bound the daemon
/// keeps) ends the connection saying so: skipped, the call would wait forever.
#[tokio::test]
async fn a_line_too_long_for_the_client_fails_its_calls_saying_so() {
    let home = tempfile::tempdir().unwrap();
    let listener = tokio::net::UnixListener::bind(socket_path(home.path())).unwrap();
    let daemon = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let hello = json!({"hello": 1, "server": "intendant test", "pid": 1, "home": "/h"});
        write
            .write_all(format!("{hello}\n").as_bytes())
            .await
            .unwrap();
        let mut lines = BufReader::new(read).lines();
        let _client_hello = lines.next_line().await.unwrap();
        let request: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        // 65 MiB of one reply, written as the client reads.
        let head = format!(r#"{{"id":{},"ok":[""#, request["id"]);
        write.write_all(head.as_bytes()).await.unwrap();
        let chunk = "x".repeat(1 << 20);
        for _ in 0..65 {
            if write.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = write.write_all(b"\"]}\n").await;
        // The connection stays open: only the client's own check ends the wait.
        let _ = lines.next_line().await;
    });
    let client = RemoteHost::connect(home.path(), "t").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(60), client.sessions())
        .await
        .expect("the call ends")
        .unwrap_err();
    assert_eq!(err.code, HostErrorCode::Unavailable, "{}", err.message);
    assert!(err.message.contains("more than 64 MiB"), "{}", err.message);
    // Later calls fail at once, for the same reason.
    let again = client.approvals().await.unwrap_err();
    assert!(
        again.message.contains("more than 64 MiB"),
        "{}",
        again.message
    );
    daemon.abort();
}

/// A connection whose place is given to a newer one between the daemon's hello and the
/// client's (a crowd of clients at `max_clients`) is told `busy` after the hello, and closed:
/// the client says `busy` too, whether its own hello or its first request met the closed
/// socket. It said the connection was lost ("Broken pipe", "Connection reset"), which `ctl`
/// reads as no daemon running (exit 3, "start one with `intendant serve`").
#[tokio::test]
async fn a_connection_told_busy_after_the_hello_fails_busy_whenever_the_client_writes() {
    let home = tempfile::tempdir().unwrap();
    let listener = tokio::net::UnixListener::bind(socket_path(home.path())).unwrap();
    let hello = json!({"hello": 1, "server": "intendant test", "pid": 1, "home": "/h"});
    let busy =
        json!({"id": null, "error": {"code": "busy", "message": "busy: 1 clients are connected"}});
    let refusal = format!("{hello}\n{busy}\n");
    // Closed before the client's hello could be written, before it could be read, and after
    // it was read (before the first request).
    for wait_for_hello in [None, Some(false), Some(true)] {
        for _ in 0..10 {
            let refusal = refusal.clone();
            let accepted = listener.accept();
            let client = RemoteHost::connect(home.path(), "t");
            let ((mut stream, _), client) = tokio::join!(
                async {
                    let (mut stream, addr) = accepted.await.unwrap();
                    stream.write_all(refusal.as_bytes()).await.unwrap();
                    (stream, addr)
                },
                async move {
                    // Each order of the two sides' writes and the close.
                    match wait_for_hello {
                        None => tokio::time::sleep(Duration::from_millis(0)).await,
                        Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                    client.await
                }
            );
            if wait_for_hello == Some(true) {
                let mut hello = [0; 64];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut hello).await;
            }
            drop(stream);
            let err = match client {
                Err(e) => e,
                Ok(host) => host.settings().await.unwrap_err(),
            };
            assert_eq!(err.code, HostErrorCode::Busy, "{wait_for_hello:?}: {err:?}");
            assert!(err.message.starts_with("busy: "), "{}", err.message);
        }
    }
}

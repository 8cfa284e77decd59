//! One host, any door: control given at one fleet member for a session another owns reaches the
//! owner once and is acknowledged, the approvals list shows the fleet's queue, and a session is
//! followed from another member with the owner's `seq`s, none left out. A real `nats-server` on
//! loopback, daemons on state roots of their own, the fake model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use serde_json::{Value, json};

use super::daemon::{World, signal, stderr, wait_until};
use super::fleet::{Nats, find, fleet_sessions, fleet_settings, serve_in};
use super::sessions::{exec_turn, text_turn};

/// Two members, alpha and beta, each with its own fake model.
fn two_members(nats: &Nats, alpha_turns: Value, beta_turns: Value) -> (World, World) {
    let mut alpha = World::new(alpha_turns);
    let mut beta = World::new(beta_turns);
    for (world, name) in [(&mut alpha, "alpha"), (&mut beta, "beta")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    (alpha, beta)
}

/// The lines `ctl --json attach` printed, as envelopes.
fn envelopes(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(envelopes: &[Value]) -> Vec<String> {
    envelopes
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_approval_a_follow_up_and_a_stop_given_at_another_member_reach_the_owner_once() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let (alpha, mut beta) = two_members(
        &nats,
        json!([]),
        json!([
            exec_turn("echo one > one.txt"),
            text_turn("first done"),
            exec_turn("sleep 120"),
        ]),
    );
    let id = beta.start("write one", &[]);
    beta.wait_status(&id, "waiting_for_human");
    wait_until("alpha lists beta's session", || {
        find(&fleet_sessions(&alpha), &id).is_some()
    });
    // Followed live from alpha from its start: what beta's log holds, in beta's order.
    let follower = alpha
        .command(&["ctl", "--json", "attach", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The fleet's queue: alpha lists beta's pending approval.
    let mut pending = Vec::new();
    wait_until("alpha lists beta's approval", || {
        pending = alpha.approvals_of(&id);
        !pending.is_empty()
    });
    assert_eq!(pending.len(), 1, "{pending:#?}");
    let approval = pending[0]["id"].to_string();

    // Answered at alpha: acknowledged there, applied at beta once.
    alpha.ctl_ok(&["approve", &id, &approval]);
    beta.wait_status(&id, "idle");
    assert_eq!(
        std::fs::read_to_string(beta.project().join("one.txt")).unwrap(),
        "one\n"
    );
    let again = alpha.ctl(&["approve", &id, &approval]);
    assert!(!again.status.success(), "{again:?}");
    assert!(stderr(&again).contains("already"), "{}", stderr(&again));
    assert!(alpha.approvals_of(&id).is_empty());

    // A follow-up given at alpha runs beta's next turn with it.
    alpha.ctl_ok(&["send", &id, "carry on please"]);
    wait_until("beta's model is asked with the follow-up", || {
        beta.turn_bodies().len() == 3
    });
    assert!(
        beta.turn_bodies()[2]
            .to_string()
            .contains("carry on please")
    );
    // Its command waits for an approval (medium autonomy): a stop ends it there.
    beta.wait_status(&id, "waiting_for_human");

    // A stop given at alpha ends it at beta.
    alpha.ctl_ok(&["stop", &id]);
    beta.wait_status(&id, "interrupted");

    let followed = follower.wait_with_output().unwrap();
    let followed = envelopes(&followed.stdout);
    let owned = beta.replay(&id);
    let lifecycle = |all: &[Value]| -> Vec<Value> {
        all.iter()
            .filter(|e| e["event"]["type"] != "model_response_delta")
            .cloned()
            .collect()
    };
    assert_eq!(
        lifecycle(&followed),
        lifecycle(&owned),
        "alpha followed beta's record exactly"
    );
    let seqs: Vec<u64> = followed
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let said = kinds(&followed);
    let resolved: Vec<&Value> = followed
        .iter()
        .filter(|e| {
            e["event"]["type"] == "approval_resolved" && e["event"]["id"] == pending[0]["id"]
        })
        .collect();
    assert_eq!(resolved.len(), 1, "answered once: {followed:#?}");
    assert_eq!(resolved[0]["event"]["verdict"], "approve");
    assert_eq!(said.last().map(String::as_str), Some("session_ended"));

    // And replayed from alpha once it ended.
    assert_eq!(lifecycle(&alpha.replay(&id)), lifecycle(&owned));

    // The owner gone: control given for its session is refused, saying why.
    let mut killed = beta.daemon.take().unwrap();
    signal(killed.id(), libc::SIGKILL);
    let _ = killed.wait();
    let out = alpha.ctl(&["send", &id, "anyone there?"]);
    assert!(!out.status.success(), "{out:?}");
    let said = stderr(&out);
    assert!(said.contains("member beta"), "{said}");
    let mut alpha = alpha;
    assert_eq!(alpha.stop_daemon(), 0);
}

/// Logs in to the dashboard at `url`; the cookie header's value.
pub(super) fn login(url: &super::web::LoginUrl) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", url.port)).unwrap();
    let request = format!(
        "GET /login?token={} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        url.token, url.port
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let cookie = raw
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {raw}"));
    cookie.split(';').next().unwrap().to_owned()
}

/// Opens the dashboard's live stream at `path` and reads it on a thread: each SSE `data` line
/// of an event, parsed, as it comes.
pub(super) fn sse(port: u16, path: &str, cookie: &str) -> std::sync::mpsc::Receiver<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            // Chunk sizes and comments are not `data:` lines; an event's JSON is on one line.
            if let Some(data) = line.strip_prefix("data: ")
                && let Ok(envelope) = serde_json::from_str::<Value>(data)
                && envelope.get("seq").is_some()
                && tx.send(envelope).is_err()
            {
                break;
            }
        }
    });
    rx
}

/// `GET path` on the dashboard, its JSON body.
pub(super) fn get_json(port: u16, path: &str, cookie: &str) -> Value {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{raw}");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        super::web::dechunk(body)
    } else {
        body.to_owned()
    };
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn a_dashboard_on_one_member_lists_and_follows_a_session_on_another_with_the_owners_seqs() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let mut alpha = World::new(json!([]));
    let mut beta = World::new(json!([
        text_turn("first answer, streamed in pieces"),
        exec_turn("echo two > two.txt"),
        text_turn("second done"),
        text_turn("third done"),
    ]));
    fleet_settings(&alpha, "name = \"alpha\"\nheartbeat_sec = 1\n");
    let daemon = alpha.command(&["serve", "--fleet", &nats.url(), "--web"]);
    let mut daemon = daemon;
    daemon.stderr(Stdio::null());
    let url = super::web::spawn_web(&mut alpha, daemon);
    fleet_settings(&beta, "name = \"beta\"\nheartbeat_sec = 1\n");
    serve_in(&mut beta, &nats.url());
    let cookie = login(&url);

    let id = beta.start("stream some", &[]);
    beta.wait_status(&id, "idle");
    wait_until("alpha lists beta's session", || {
        find(&fleet_sessions(&alpha), &id).is_some()
    });
    // The list page on alpha: beta's session, under its member, as `ctl sessions` has it.
    let listed = get_json(url.port, "/api/sessions", &cookie);
    let listed = listed.as_array().unwrap();
    let row = find(listed, &id).unwrap_or_else(|| panic!("{listed:#?}"));
    assert_eq!(row["member"], "beta", "{row}");
    assert_eq!(row["status"], "idle", "{row}");
    assert!(row.get("member_lost").is_none(), "{row}");
    assert_eq!(
        row["task"],
        find(&fleet_sessions(&alpha), &id).unwrap()["task"]
    );
    // The session page on alpha: its summary, its record so far, then its live stream.
    let summary = get_json(url.port, &format!("/api/sessions/{id}"), &cookie);
    assert_eq!(summary["status"], "idle", "{summary}");
    let page = get_json(url.port, &format!("/api/sessions/{id}/events"), &cookie);
    let recorded = page["events"].as_array().unwrap().clone();
    assert!(
        recorded
            .iter()
            .any(|e| e["event"]["type"] == "round_complete"),
        "{page}"
    );
    let last = recorded.last().unwrap()["seq"].as_u64().unwrap();
    let live = sse(
        url.port,
        &format!("/api/events?session={id}&after={last}"),
        &cookie,
    );

    // Beta's session goes on (driven at beta, its owner): alpha's page sees every event.
    beta.ctl_ok(&["send", &id, "write two"]);
    beta.wait_status(&id, "waiting_for_human");
    let pending = beta.approvals_of(&id);
    beta.ctl_ok(&["approve", &id, &pending[0]["id"].to_string()]);
    beta.wait_status(&id, "idle");
    beta.ctl_ok(&["send", &id, "and three"]);
    wait_until("the third round ends", || {
        beta.turn_bodies().len() == 4 && beta.session(&id)["status"] == "idle"
    });
    beta.ctl_ok(&["stop", &id]);
    beta.wait_status(&id, "interrupted");

    let mut followed = recorded.clone();
    loop {
        let envelope = live
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the live stream goes on to the session's end");
        let ended = envelope["event"]["type"] == "session_ended";
        followed.push(envelope);
        if ended {
            break;
        }
    }
    let owned = beta.replay(&id);
    // `ctl attach` leaves out the intents (control commands) and the deltas; the page has them.
    let intent =
        |e: &Value| e["event"]["type"] == "control_command" || e["event"].get("action").is_some();
    let seqs = |all: &[Value]| -> Vec<u64> {
        all.iter()
            .filter(|e| e["event"]["type"] != "model_response_delta" && !intent(e))
            .map(|e| e["seq"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(seqs(&followed), seqs(&owned), "every event, in order, once");
    assert_eq!(
        followed.iter().filter(|e| intent(e)).count(),
        3,
        "two follow-ups and an approval: {followed:#?}"
    );
    let all: Vec<u64> = followed
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    let text = serde_json::to_string(&followed).unwrap();
    for said in ["first answer", "second done", "third done"] {
        assert!(text.contains(said), "{said}: {text}");
    }

    // MCP on alpha (over HTTP, as a client of the daemon's web door) lists beta's session under
    // beta and reads its transcript from its owner.
    mcp_lists_and_reads(&url, &id);

    // Beta killed: alpha's list keeps its session, marked as a lost member's, once its
    // heartbeat is gone.
    let mut killed = beta.daemon.take().unwrap();
    signal(killed.id(), libc::SIGKILL);
    let _ = killed.wait();
    wait_until("alpha's dashboard lists beta lost", || {
        let listed = get_json(url.port, "/api/sessions", &cookie);
        find(listed.as_array().unwrap(), &id).is_some_and(|s| s["member_lost"] == true)
    });
    let listed = get_json(url.port, "/api/sessions", &cookie);
    let row = find(listed.as_array().unwrap(), &id).unwrap().clone();
    assert_eq!(row["member"], "beta", "{row}");
    assert_eq!(row["status"], "interrupted", "{row}");
    assert_eq!(alpha.stop_daemon(), 0);
}

/// MCP's `list_sessions` and resources at a member list another member's session `id`, with
/// its member, and its transcript resource has what that session's model said.
fn mcp_lists_and_reads(url: &super::web::LoginUrl, id: &str) {
    use super::mcp::mcp_client::{call, ok};
    use rmcp::ServiceExt;
    use rmcp::model::ReadResourceRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let transport = StreamableHttpClientTransport::with_client(
            intendant_netguard::http::client().unwrap(),
            StreamableHttpClientTransportConfig::with_uri(format!(
                "http://127.0.0.1:{}/mcp",
                url.port
            ))
            .auth_header(url.token.clone()),
        );
        let client = ().serve(transport).await.unwrap();
        let listed = ok(call(client.peer(), "list_sessions", json!({})).await);
        let row = find(listed["sessions"].as_array().unwrap(), id)
            .unwrap_or_else(|| panic!("{listed:#}"))
            .clone();
        assert_eq!(row["member"], "beta", "{row}");
        let resources = client.list_all_resources().await.unwrap();
        let uri = resources
            .iter()
            .map(|r| r.uri.clone())
            .find(|uri| uri.ends_with(id))
            .unwrap_or_else(|| panic!("no transcript resource of {id}: {resources:#?}"));
        let read = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap();
        let text = serde_json::to_string(&read).unwrap();
        assert!(text.contains("third done"), "{text}");
        client.cancel().await.unwrap();
    });
}

//! `intendant mcp` end to end with real sessions: an `rmcp` client over the binary's stdio, the
//! daemon it starts in the background (or its in-process supervisor with `--no-daemon`), and
//! the session talking to the fake model on 127.0.0.1. Waits poll with a bounded deadline;
//! nothing asserts on time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use intendant_testkit::{FakeModelServer, Scenario, Wire};
use rmcp::ServiceExt;
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use super::controller::harness::{DUMMY_KEY, intendant_bin};
use super::mcp::mcp_client::{Recorder, call, ok};
use super::sessions::{exec_turn, text_turn};

/// Longest any wait of these tests lasts before it fails (never reached by a healthy run).
const WAIT: Duration = Duration::from_secs(60);

/// A state root and a project for one test.
pub struct McpWorld {
    pub root: tempfile::TempDir,
}

impl McpWorld {
    /// A state root whose owner lets the model answer approvals and start sessions at any
    /// level in the project (and in `untrusted`), over stdio and HTTP: these tests drive every
    /// tool. The default, off, is attacked by `security_daemon` and the server's `mcp_policy`.
    pub fn new() -> McpWorld {
        let root = tempfile::tempdir().unwrap();
        for dir in ["project", "home", "ihome"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let projects = ["project", "untrusted"].map(|p| format!("{:?}", root.path().join(p)));
        std::fs::write(
            root.path().join("ihome").join("intendant.toml"),
            format!(
                "[mcp]\nallow_model_approvals = true\nmax_autonomy = \"full\"\nprojects = [{}]\n",
                projects.join(", ")
            ),
        )
        .unwrap();
        McpWorld { root }
    }

    pub fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("ihome")
    }

    /// `intendant ARGS` in the project, with a scrubbed environment whose OpenAI endpoint is
    /// `model`.
    pub fn command(&self, args: &[&str], model: &FakeModelServer) -> std::process::Command {
        let mut cmd = std::process::Command::new(intendant_bin());
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path().join("home"))
            .env("INTENDANT_HOME", self.home())
            .env("OPENAI_API_KEY", DUMMY_KEY)
            .env("OPENAI_BASE_URL", model.base_url(Wire::OpenAiResponses))
            .env("RUST_BACKTRACE", "0")
            .current_dir(self.project());
        cmd
    }
}

/// Shuts down the daemon `intendant mcp` started for a state root, when the test ends.
pub struct DaemonGuard {
    shutdown: std::process::Command,
}

impl McpWorld {
    /// Shuts down this state root's daemon (if one runs) when dropped.
    pub fn daemon_guard(&self, model: &FakeModelServer) -> DaemonGuard {
        DaemonGuard {
            shutdown: self.command(&["ctl", "shutdown"], model),
        }
    }
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let _ = self
            .shutdown
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

async fn fake_model(turns: Value) -> FakeModelServer {
    let scenario = Scenario::from_json(&json!({"model": "fake-model", "turns": turns}).to_string())
        .expect("valid scenario");
    FakeModelServer::start(scenario).await.unwrap()
}

/// `get_session` until the session is done with its round (idle or ended).
async fn until_done(peer: &Peer<RoleClient>, session: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = ok(call(peer, "get_session", json!({"session_id": session})).await);
        if got["status"] == "idle" || got["finished"] == true {
            return got;
        }
        assert!(Instant::now() < deadline, "never done: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The round trip of the issue on real sessions: a task whose shell call needs approval, the
/// approval listed and approved over MCP, the session followed until done, its file written and
/// its final text the model's; a client subscribed to the session's transcript is notified of
/// its updates while it runs, and the transcript read after the end has the final text.
async fn approval_round_trip(no_daemon: bool) {
    let model = fake_model(json!([
        exec_turn("echo made > made.txt"),
        text_turn("Wrote made.txt for you.")
    ]))
    .await;
    let world = McpWorld::new();
    let args: &[&str] = if no_daemon {
        &["mcp", "--no-daemon"]
    } else {
        &["mcp"]
    };
    let _daemon = world.daemon_guard(&model);
    let cmd = tokio::process::Command::from(world.command(args, &model));
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let recorder = Recorder {
        updates: tx,
        answer: None,
    };
    let client = recorder
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    let peer = client.peer();

    let started = ok(call(
        peer,
        "run_task",
        json!({"task": "make the file", "project_dir": ".", "provider": "openai",
               "model": "fake-model", "wait_s": 50}),
    )
    .await);
    assert_eq!(started["wait"], "needs_human", "{started}");
    let session = started["session_id"].as_str().unwrap().to_owned();
    assert!(!world.project().join("made.txt").exists(), "it waits");
    let uri = format!("intendant://session/{session}");
    #[allow(deprecated)] // the session model this server speaks (up to 2025-11-25)
    peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone()))
        .await
        .unwrap();

    let listed = ok(call(peer, "list_approvals", json!({"session_id": session})).await);
    let approvals = listed["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{listed}");
    assert_eq!(approvals[0]["session_id"], session.as_str());
    assert_eq!(approvals[0]["command_preview"], "$ echo made > made.txt");
    ok(call(
        peer,
        "resolve_approval",
        json!({"session_id": session, "approval_id": approvals[0]["id"], "decision": "approve"}),
    )
    .await);
    // The approval resumed the session: its events reach the subscriber as updates.
    let updated = tokio::time::timeout(WAIT, updates.recv()).await;
    assert_eq!(updated.unwrap().as_deref(), Some(uri.as_str()));

    let done = until_done(peer, &session).await;
    assert_eq!(done["final_text"], "Wrote made.txt for you.", "{done}");
    let transcript = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let transcript = format!("{transcript:?}");
    assert!(
        transcript.contains("final: Wrote made.txt for you."),
        "{transcript}"
    );
    assert_eq!(
        std::fs::read_to_string(world.project().join("made.txt")).unwrap(),
        "made\n"
    );
    let kinds: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"]["type"].as_str())
        .collect();
    for kind in [
        "session_started",
        "approval_required",
        "approval_resolved",
        "tool_batch_result",
        "round_complete",
    ] {
        assert!(kinds.contains(&kind), "{kind} not in {kinds:?}");
    }
    assert!(
        ok(call(peer, "list_approvals", json!({})).await)["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The model saw the command's success, and both of its turns were played.
    assert_eq!(model.turns_consumed(), 2);
    client.cancel().await.unwrap();
    assert_eq!(
        world.home().join("daemon.sock").exists(),
        !no_daemon,
        "a daemon serves the state root only without --no-daemon"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_round_trip_through_the_daemon_it_starts() {
    approval_round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_round_trip_in_process_with_no_daemon() {
    approval_round_trip(true).await;
}

/// `intendant serve --web` serves MCP at `/mcp` of its dashboard: an `rmcp` HTTP client with
/// the printed token runs a task on a real session and reads its final text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_web_serves_mcp_over_http_with_its_token() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use std::io::BufRead;

    let model = fake_model(json!([text_turn("Hello over HTTP.")])).await;
    let world = McpWorld::new();
    let daemon = world.daemon_guard(&model);
    let mut child = world
        .command(&["serve", "--web"], &model)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        line
    })
    .await
    .unwrap();
    let (base, token) = line
        .trim()
        .split_once("/login?token=")
        .unwrap_or_else(|| panic!("not a login URL: {line:?}"));
    let transport = StreamableHttpClientTransport::with_client(
        intendant_netguard::http::client().unwrap(),
        StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")).auth_header(token),
    );
    let client = ().serve(transport).await.unwrap();
    let peer = client.peer();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 15);
    let done = ok(call(
        peer,
        "run_task",
        json!({"task": "say hello", "project_dir": world.project(), "provider": "openai",
               "model": "fake-model", "wait_s": 50}),
    )
    .await);
    assert_eq!(done["wait"], "round_complete", "{done}");
    assert_eq!(done["final_text"], "Hello over HTTP.", "{done}");
    // `ctl status` counts the dashboard's connections (a silent one held here, at least).
    let held = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    let status = |args: &[&str]| {
        let out = world.command(args, &model).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let load: serde_json::Value =
            serde_json::from_str(status(&["ctl", "--json", "status"]).trim()).unwrap();
        assert_eq!(load["max_web_connections"], 128, "the default: {load}");
        if load["web_connections"].as_u64().unwrap() >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never counted: {load}"
        );
    }
    let text = status(&["ctl", "status"]);
    assert!(
        text.contains("dashboard connections (at most 128)")
            || text.contains(" 1 dashboard connection (at most 128)"),
        "{text}"
    );
    drop(held);
    drop(client);
    drop(daemon);
    assert!(child.wait().unwrap().success());
}

/// Bad input on real sessions: a project whose security-relevant settings nobody trusted is
/// refused before any session exists, and the key the server holds never reaches a result,
/// not even when the model says it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_projects_are_refused_and_keys_never_reach_a_result() {
    use super::mcp::mcp_client::failed;
    let model = fake_model(json!([
        exec_turn("echo \"key=$OPENAI_API_KEY\""),
        text_turn(&format!("Your key is {DUMMY_KEY}."))
    ]))
    .await;
    let world = McpWorld::new();
    let untrusted = world.root.path().join("untrusted");
    std::fs::create_dir_all(&untrusted).unwrap();
    std::fs::write(
        untrusted.join("intendant.toml"),
        "[sandbox]\nenabled = false\n",
    )
    .unwrap();
    let cmd = tokio::process::Command::from(world.command(&["mcp", "--no-daemon"], &model));
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let peer = client.peer();

    let (code, message) = failed(
        call(
            peer,
            "run_task",
            json!({"task": "t", "project_dir": untrusted, "provider": "openai"}),
        )
        .await,
    );
    assert_eq!(code, "invalid_request", "{message}");
    assert!(message.contains("intendant trust"), "{message}");
    assert_eq!(
        ok(call(peer, "list_sessions", json!({})).await)["sessions"],
        json!([])
    );

    let started = ok(call(
        peer,
        "run_task",
        json!({"task": "show the key", "project_dir": ".", "provider": "openai",
               "model": "fake-model", "autonomy": "full", "wait_s": 50}),
    )
    .await);
    let session = started["session_id"].as_str().unwrap().to_owned();
    let done = until_done(peer, &session).await;
    let text = done.to_string();
    assert!(!text.contains(DUMMY_KEY), "{text}");
    assert_eq!(done["final_text"], "Your key is [redacted].", "{done}");
    // The command ran in the scrubbed environment: the key was not there to print.
    let printed: Vec<Value> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["type"] == "tool_batch_result")
        .map(|e| {
            let data = e["event"]["output"]["results"][0]["data"].as_str().unwrap();
            serde_json::from_str(data).unwrap()
        })
        .collect();
    assert_eq!(printed.len(), 1, "{text}");
    assert_eq!(printed[0]["stdout"], "key=\n", "{text}");
    let transcript = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "intendant://session/{session}"
        )))
        .await
        .unwrap();
    let transcript = format!("{transcript:?}");
    assert!(transcript.contains("[redacted]"), "{transcript}");
    assert!(!transcript.contains(DUMMY_KEY), "{transcript}");
}

/// `resume_session` continues an ended session over MCP: in its own project, with the same
/// conversation, at the level it ran at, waiting for the resumed run's round (not a round of
/// its runs before); a session whose project this server may not use is refused, and nothing
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_session_continues_an_ended_session_in_its_own_project() {
    use super::mcp::mcp_client::failed;
    let model = fake_model(json!([
        text_turn("First."),
        text_turn("Elsewhere."),
        exec_turn("echo again > again.txt"),
        text_turn("Went on.")
    ]))
    .await;
    let world = McpWorld::new();
    let _daemon = world.daemon_guard(&model);
    let cmd = tokio::process::Command::from(world.command(&["mcp"], &model));
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let peer = client.peer();
    let started = ok(call(
        peer,
        "run_task",
        json!({"task": "begin", "project_dir": ".", "provider": "openai",
               "model": "fake-model", "autonomy": "high", "wait_s": 50}),
    )
    .await);
    assert_eq!(started["final_text"], "First.", "{started}");
    let session = started["session_id"].as_str().unwrap().to_owned();
    ok(call(peer, "stop", json!({"session_id": session})).await);
    until_done(peer, &session).await;

    // A session of a project this server was not given: refused before anything runs.
    let other = world.root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let out = world
        .command(
            &[
                "ctl",
                "start",
                "--provider",
                "openai",
                "--model",
                "fake-model",
                "--project",
                other.to_str().unwrap(),
                "elsewhere",
            ],
            &model,
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let foreign = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    until_done(peer, &foreign).await;
    ok(call(peer, "stop", json!({"session_id": foreign})).await);
    let (code, message) = failed(
        call(
            peer,
            "resume_session",
            json!({"session_id": foreign, "wait_s": 5}),
        )
        .await,
    );
    assert_eq!(code, "forbidden", "{message}");
    assert_eq!(model.turns_consumed(), 2);

    let resumed = ok(call(
        peer,
        "resume_session",
        json!({"session_id": session, "text": "go on", "wait_s": 50}),
    )
    .await);
    assert_eq!(resumed["wait"], "round_complete", "{resumed}");
    assert_eq!(resumed["final_text"], "Went on.", "{resumed}");
    assert_eq!(resumed["session"]["autonomy"], "high", "{resumed}");
    assert_eq!(
        std::fs::read_to_string(world.project().join("again.txt")).unwrap(),
        "again\n"
    );
    client.cancel().await.unwrap();
}

//! Intendant as an MCP client, through the binary against the fake model: the reference
//! servers (`@modelcontextprotocol/server-everything` and `server-filesystem`, installed pinned
//! by `scripts/install-clis.sh`) run inside the session's walls, their tools called with a
//! human's approval or denied; and a scripted server of our own (`scripted_server.py`) for the
//! faults: a crash and the restart, a hang at start, a 100 MiB answer, an invalid schema, a
//! changed tool list, and the deferred loading of many tools.

use std::path::{Path, PathBuf};
use std::process::Command;

use intendant_testkit::Wire;
use intendant_testkit::clis;
use serde_json::{Value, json};

use super::controller::harness::{
    Ctl, DUMMY_KEY, JsonSession, assert_success, body_text, calls, done_turn, events_of,
    outputs_of, parse_events, run_with_limit, wire_env,
};

/// The scripted server, as its source.
const SCRIPTED: &str = include_str!("mcp_servers/scripted_server.py");

/// The entry script of the installed reference server `package` (`server-everything`), or
/// `None` after the note (failing under `CI`).
fn reference_server(package: &str) -> Option<PathBuf> {
    let path = clis::cache_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    clis::require_installed(
        &format!("@modelcontextprotocol/{package}"),
        path.exists().then_some(path),
    )
}

/// A Node for the reference servers: the pinned Node 24, else the machine's.
fn node() -> PathBuf {
    clis::node24().unwrap_or_else(|| PathBuf::from("node"))
}

/// Writes the user's `mcp_servers.toml` of this world.
fn configure(ctl: &Ctl, toml: &str) {
    let dir = ctl.home().join(".config/intendant");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mcp_servers.toml"), toml).unwrap();
}

/// Writes the scripted server into the world and returns its path.
fn scripted(ctl: &Ctl) -> PathBuf {
    let path = ctl.root.path().join("scripted_server.py");
    std::fs::write(&path, SCRIPTED).unwrap();
    path
}

/// `intendant --json` against the fake at `autonomy`, the sandbox on or off, for `task`.
fn session(ctl: &Ctl, autonomy: &str, sandbox: bool, task: &str) -> Command {
    session_against(ctl, &ctl.server, autonomy, sandbox, task)
}

/// [`session`] against `server`, a fake started after the world (its scenario names the
/// world's paths).
fn session_against(
    ctl: &Ctl,
    server: &intendant_testkit::FakeModelServer,
    autonomy: &str,
    sandbox: bool,
    task: &str,
) -> Command {
    let (provider, key_env, url_env) = wire_env(ctl.wire);
    let mut cmd = ctl.bare_command();
    cmd.env(key_env, DUMMY_KEY)
        .env(url_env, server.base_url(ctl.wire))
        .args(["--provider", provider, "--model", "fake-model", "--json"])
        .args(["--autonomy", autonomy])
        .arg(if sandbox { "--sandbox" } else { "--no-sandbox" })
        .arg(task);
    cmd
}

/// Runs `session` headless (stdin closed) and returns the events.
fn run(ctl: &Ctl, autonomy: &str, sandbox: bool) -> Vec<Value> {
    let out = run_with_limit(session(ctl, autonomy, sandbox, "use the tools"));
    let events = parse_events(&out.stdout);
    assert!(
        !events_of(&events, "session_ended").is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    events
}

fn server_events(events: &[Value], state: &str) -> Vec<String> {
    events_of(events, "mcp_server")
        .into_iter()
        .filter(|e| e["state"] == state)
        .map(|e| {
            format!(
                "{}: {}",
                e["server"].as_str().unwrap_or_default(),
                e["detail"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn ended(events: &[Value]) -> String {
    events_of(events, "session_ended")[0]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_real_servers_tool_runs_once_a_human_approves_and_another_is_denied() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[(
                "mcp__everything_echo",
                json!({"message": "hello from the model"})
            )]),
            calls(&[("mcp__everything_get-env", json!({}))]),
            done_turn("never reached")
        ]),
    );
    configure(
        &ctl,
        &format!(
            "[mcp_servers.everything]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
            node().display().to_string(),
            everything.display().to_string()
        ),
    );
    // At `low` even a read-only tool asks.
    let mut json = JsonSession::spawn(session(&ctl, "low", true, "echo something"));
    let first = json.wait_for("approval_required");
    assert_eq!(first["category"], "mcp");
    assert_eq!(
        first["command_preview"],
        "mcp__everything_echo {\"message\":\"hello from the model\"}"
    );
    json.send(&json!({"action": "approve", "id": first["id"]}));
    let second = json.wait_for("approval_required");
    assert!(
        second["command_preview"]
            .as_str()
            .unwrap_or_default()
            .starts_with("mcp__everything_get-env"),
        "{second}"
    );
    json.send(&json!({"action": "deny", "id": second["id"]}));
    let (_, events) = json.finish();
    let ready = server_events(&events, "ready");
    assert!(
        ready.iter().any(|r| r.starts_with("everything: ")),
        "{events:#?}"
    );
    let echoed = outputs_of(&events, "mcp__everything_echo");
    assert_eq!(echoed.len(), 1, "{events:#?}");
    assert!(echoed[0].contains("hello from the model"), "{}", echoed[0]);
    let env = outputs_of(&events, "mcp__everything_get-env");
    assert!(env[0].starts_with("denied"), "{env:?}");
    assert_eq!(ended(&events), "denied");
    // The model saw the server's tools with their descriptions and schemas.
    let request = body_text(&ctl.turn_requests()[0]);
    assert!(request.contains("\"mcp__everything_echo\""), "{request}");
    assert!(
        request.contains("Echoes back the input string"),
        "{request}"
    );
}

#[test]
fn a_servers_environment_holds_no_provider_key_only_what_its_entry_names() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp__everything_get-env", json!({}))]),
            done_turn("ok")
        ]),
    );
    configure(
        &ctl,
        &format!(
            "[mcp_servers.everything]\ncommand = {:?}\nargs = [{:?}]\n\
             env = {{ SET_BY_ENTRY = \"set-value\" }}\nenv_vars = [\"NAMED_VAR\"]\n",
            node().display().to_string(),
            everything.display().to_string()
        ),
    );
    let mut cmd = session(&ctl, "full", true, "print the env");
    cmd.env("NAMED_VAR", "named-value")
        .env("UNNAMED_SECRET_TOKEN", "ghp-unnamed")
        .env("ANTHROPIC_API_KEY", "sk-ant-other-key");
    let out = run_with_limit(cmd);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    let env = outputs_of(&events, "mcp__everything_get-env");
    assert_eq!(env.len(), 1, "{events:#?}");
    let env = &env[0];
    for leaked in [DUMMY_KEY, "sk-ant-other-key", "ghp-unnamed", "INTENDANT_"] {
        assert!(!env.contains(leaked), "{leaked} reached the server: {env}");
    }
    assert!(
        env.contains("set-value") && env.contains("named-value"),
        "{env}"
    );
}

#[test]
fn a_sandboxed_filesystem_server_cannot_write_outside_its_roots_or_read_the_state_root() {
    let Some(filesystem) = reference_server("server-filesystem") else {
        return;
    };
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let outside = ctl.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let token = ctl.intendant_home().join("web-token");
    std::fs::write(&token, "the-daemons-web-token").unwrap();
    let project = ctl.project();
    let (rt, server) = super::controller::harness::start_fake_model(json!([
        calls(&[
            (
                "mcp__files_write_file",
                json!({"path": outside.join("planted.txt"), "content": "x"})
            ),
            (
                "mcp__files_write_file",
                json!({"path": project.join("made.txt"), "content": "made"})
            ),
            ("mcp__files_read_text_file", json!({"path": token})),
        ]),
        done_turn("ok")
    ]));
    // The server itself would allow all three directories: only the walls stop it.
    let dirs = [&project, &outside, &ctl.intendant_home()]
        .map(|d| format!("{:?}", d.display().to_string()))
        .join(", ");
    configure(
        &ctl,
        &format!(
            "[mcp_servers.files]\ncommand = {:?}\nargs = [{:?}, {dirs}]\n",
            node().display().to_string(),
            filesystem.display().to_string()
        ),
    );
    let out = run_with_limit(session_against(&ctl, &server, "full", true, "write files"));
    drop(rt);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    let writes = outputs_of(&events, "mcp__files_write_file");
    assert_eq!(writes.len(), 2, "{events:#?}");
    assert!(
        !outside.join("planted.txt").exists(),
        "the server wrote outside its roots"
    );
    // The server itself allows the directory: the walls refuse (the read-only mount, or Landlock).
    assert!(
        writes[0].contains("EROFS") || writes[0].contains("EACCES"),
        "{}",
        writes[0]
    );
    assert_eq!(
        std::fs::read_to_string(project.join("made.txt")).unwrap(),
        "made",
        "{}",
        writes[1]
    );
    let read = outputs_of(&events, "mcp__files_read_text_file");
    assert!(
        !read[0].contains("the-daemons-web-token"),
        "the state root was read: {}",
        read[0]
    );
}

/// The scripted server as `name`, with `env` for its behaviour.
fn scripted_entry(ctl: &Ctl, name: &str, env: &str, extra: &str) -> String {
    format!(
        "[mcp_servers.{name}]\ncommand = \"python3\"\nargs = [{:?}]\nenv = {{ {env} }}\n{extra}\n",
        scripted(ctl).display().to_string()
    )
}

#[test]
fn a_crashed_server_is_reported_and_restarted_and_its_tools_work_again() {
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp__s_crash", json!({}))]),
            calls(&[("exec_command", json!({"command": "sleep 3"}))]),
            calls(&[("mcp__s_echo", json!({"text": "back again"}))]),
            done_turn("ok")
        ]),
    );
    let starts = ctl.root.path().join("starts.log");
    configure(
        &ctl,
        &scripted_entry(
            &ctl,
            "s",
            &format!("MCP_STARTS = {:?}", starts.display().to_string()),
            "",
        ),
    );
    let events = run(&ctl, "full", false);
    assert_eq!(ended(&events), "completed", "{events:#?}");
    let exited = server_events(&events, "exited");
    assert_eq!(exited.len(), 1, "{events:#?}");
    assert!(exited[0].contains("status 3"), "{}", exited[0]);
    assert_eq!(server_events(&events, "restarting").len(), 1);
    assert_eq!(server_events(&events, "ready").len(), 2, "{events:#?}");
    let crash = outputs_of(&events, "mcp__s_crash");
    assert!(crash[0].starts_with("Error"), "{}", crash[0]);
    let echo = outputs_of(&events, "mcp__s_echo");
    assert!(echo[0].contains("echo: back again"), "{}", echo[0]);
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 2);
}

#[test]
fn faults_of_a_server_are_events_and_tool_errors_never_a_failed_session() {
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp__good_flood", json!({}))]),
            calls(&[("mcp__good_sleep", json!({}))]),
            calls(&[("mcp__good_change", json!({}))]),
            calls(&[("mcp__good_added", json!({"text": "new"}))]),
            done_turn("ok")
        ]),
    );
    let toml = [
        scripted_entry(
            &ctl,
            "good",
            "MCP_BAD_SCHEMA = \"1\"",
            "tool_timeout_sec = 3",
        ),
        scripted_entry(
            &ctl,
            "hangs",
            "MCP_HANG_START = \"1\"",
            "startup_timeout_sec = 1",
        ),
    ]
    .join("\n");
    configure(&ctl, &toml);
    let events = run(&ctl, "full", false);
    assert_eq!(ended(&events), "completed", "{events:#?}");
    let failed = server_events(&events, "failed");
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("hangs: ") && f.contains("startup_timeout_sec")),
        "{failed:?}"
    );
    let skipped = server_events(&events, "tool_skipped");
    assert!(
        skipped.iter().any(|s| s.contains("\"broken\"")),
        "{skipped:?}"
    );
    let flood = outputs_of(&events, "mcp__good_flood");
    assert!(
        flood[0].starts_with("Error") && flood[0].len() < 4096,
        "{}",
        &flood[0][..flood[0].len().min(300)]
    );
    let sleep = outputs_of(&events, "mcp__good_sleep");
    assert!(
        sleep[0].contains("did not answer within 3 s"),
        "{}",
        sleep[0]
    );
    assert_eq!(
        server_events(&events, "tools_changed").len(),
        1,
        "{events:#?}"
    );
    let added = outputs_of(&events, "mcp__good_added");
    assert!(added[0].contains("added: new"), "{added:?}");
    // No request ever carried the broken tool.
    for request in ctl.turn_requests() {
        assert!(!body_text(&request).contains("mcp__good_broken"));
    }
}

#[test]
fn many_tools_are_found_through_the_search_and_the_first_request_stays_small() {
    // Today's first request, without servers.
    let plain = Ctl::new(Wire::OpenAiResponses, json!([done_turn("ok")]));
    run(&plain, "full", false);
    let baseline = body_text(&plain.turn_requests()[0]).len();

    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp_tool_search", json!({"query": "numbered tool 7"}))]),
            calls(&[("mcp__b_tool_7", json!({"text": "found"}))]),
            done_turn("ok")
        ]),
    );
    let toml = ["a", "b", "c"]
        .map(|name| scripted_entry(&ctl, name, "MCP_TOOLS = \"14\"", ""))
        .join("\n");
    configure(&ctl, &toml);
    let events = run(&ctl, "full", false);
    assert_eq!(ended(&events), "completed", "{events:#?}");
    let requests = ctl.turn_requests();
    let first = body_text(&requests[0]);
    assert!(first.contains("\"mcp_tool_search\""), "{first}");
    assert!(
        !first.contains("mcp__b_tool_7"),
        "a deferred definition was sent"
    );
    let size = first.len();
    assert!(
        size as f64 <= baseline as f64 * 1.25,
        "the first request grew from {baseline} to {size} bytes with 60 deferred tools"
    );
    let found = outputs_of(&events, "mcp_tool_search");
    assert!(found[0].contains("mcp__b_tool_7"), "{}", found[0]);
    let second = body_text(&requests[1]);
    assert!(
        second.contains("\"mcp__b_tool_7\""),
        "the found tool is offered from then on"
    );
    let called = outputs_of(&events, "mcp__b_tool_7");
    assert!(called[0].contains("tool_7: found"), "{called:?}");
}

#[test]
fn mcp_servers_list_and_check_say_what_a_session_would_use() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let toml = [
        scripted_entry(&ctl, "good", "MCP_TOOLS = \"1\"", ""),
        scripted_entry(&ctl, "off", "", "enabled = false"),
        "[mcp_servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\nstartup_timeout_sec = 2\n"
            .to_owned(),
    ]
    .join("\n");
    configure(&ctl, &toml);
    let mut list = ctl.bare_command();
    list.args(["mcp-servers", "list"]);
    let out = run_with_limit(list);
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("good (user, enabled): stdio: python3"),
        "{stdout}"
    );
    assert!(stdout.contains("off (user, disabled)"), "{stdout}");
    assert!(
        stdout.contains("remote (user, enabled): http: http://127.0.0.1:9/mcp"),
        "{stdout}"
    );
    let mut check = ctl.bare_command();
    check.args(["mcp-servers", "check"]);
    let out = run_with_limit(check);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the unreachable server fails the check"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("good (user): ready, 7 tools"), "{stdout}");
    assert!(
        stdout.contains("mcp__good_tool_0: Numbered tool 0"),
        "{stdout}"
    );
    assert!(stdout.contains("remote (user): failed"), "{stdout}");
    assert!(!stdout.contains("off (user)"), "{stdout}");

    configure(
        &ctl,
        "[mcp_servers.bad]\ncommand = \"x\"\nurl = \"http://x\"\n",
    );
    let mut list = ctl.bare_command();
    list.args(["mcp-servers", "list"]);
    let out = run_with_limit(list);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
}

#[test]
fn a_projects_servers_count_only_once_trusted_and_a_bad_entry_refuses_the_session() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([done_turn("ok")]));
    let project: &Path = &ctl.project();
    std::fs::write(
        project.join("intendant.toml"),
        scripted_entry(&ctl, "proj", "", ""),
    )
    .unwrap();
    let out = run_with_limit(session(&ctl, "full", false, "task"));
    assert_eq!(
        out.status.code(),
        Some(2),
        "headless refuses an untrusted server"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[mcp_servers.proj] command = \"python3\""),
        "{stderr}"
    );
    assert!(stderr.contains("intendant trust"), "{stderr}");

    std::fs::write(
        project.join("intendant.toml"),
        "[mcp_servers.proj]\ncommand = \"x\"\nbogus = 1\n",
    )
    .unwrap();
    let out = run_with_limit(session(&ctl, "full", false, "task"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

/// The reference server in its streamable HTTP mode, on a free loopback port; killed on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    fn start(everything: &Path) -> HttpServer {
        use std::io::{BufRead, BufReader};
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(node())
            .arg(everything)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // It says so on stderr once it listens.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            assert!(!line.contains("Failed to start"), "{line}");
            if line.contains("listening on port") {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_remote_server_over_streamable_http_answers_its_tools() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    let server = HttpServer::start(&everything);
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp__remote_echo", json!({"message": "over http"}))]),
            done_turn("done")
        ]),
    );
    configure(
        &ctl,
        &format!(
            "[mcp_servers.remote]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            server.port
        ),
    );
    let events = run(&ctl, "full", true);
    let ready = server_events(&events, "ready");
    assert!(
        ready.iter().any(|r| r.starts_with("remote: ")),
        "{events:#?}"
    );
    let echoed = outputs_of(&events, "mcp__remote_echo");
    assert_eq!(echoed.len(), 1, "{events:#?}");
    assert!(echoed[0].contains("over http"), "{}", echoed[0]);
    assert_eq!(ended(&events), "completed");
    let request = body_text(&ctl.turn_requests()[0]);
    assert!(request.contains("\"mcp__remote_echo\""), "{request}");
}

#[test]
fn a_remote_server_over_https_is_trusted_through_ssl_cert_file_and_refused_without_it() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    let server = HttpServer::start(&everything);
    let front = intendant_testkit::tls::Front::start(server.port).unwrap();
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    configure(
        &ctl,
        &format!(
            "[mcp_servers.remote]\nurl = \"https://localhost:{}/mcp\"\nstartup_timeout_sec = 10\n",
            front.port()
        ),
    );
    let check = |authority: Option<&Path>| {
        let mut check = ctl.bare_command();
        check
            .args(["mcp-servers", "check"])
            .env_remove("SSL_CERT_FILE");
        if let Some(authority) = authority {
            check.env("SSL_CERT_FILE", authority);
        }
        let out = run_with_limit(check);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), stdout)
    };

    // Over TLS, trusting the test's authority as a company's root would be trusted.
    let (code, stdout) = check(Some(&intendant_testkit::tls::authority()));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("remote (user): ready"), "{stdout}");
    assert!(stdout.contains("mcp__remote_echo"), "{stdout}");

    // The same server without it: its certificate is refused, and the check says why.
    let (code, stdout) = check(None);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("remote (user): failed"), "{stdout}");
    assert!(
        stdout.contains("invalid peer certificate: UnknownIssuer"),
        "{stdout}"
    );

    // A file named that holds no certificate is an error naming it, not a silent fallback.
    let empty = ctl.root.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let (code, stdout) = check(Some(&empty));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("SSL_CERT_FILE names"), "{stdout}");
}

/// The pinned PyPI reference server `mcp-server-git`, or `None` after the note (failing under
/// `CI`).
fn git_server() -> Option<PathBuf> {
    let path = clis::cache_dir().join("py/bin/mcp-server-git");
    clis::require_installed("mcp-server-git (PyPI)", path.exists().then_some(path))
}

/// A repository at `dir` with one commit and `new.txt` left untracked.
fn repository(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.name", "Test"]);
    git(&["config", "user.email", "test@example.invalid"]);
    std::fs::write(dir.join("README"), "first\n").unwrap();
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "first"]);
    std::fs::write(dir.join("new.txt"), "new\n").unwrap();
}

fn commits(dir: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["log", "--format=%s"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_pypi_git_server_commits_in_the_project_and_cannot_commit_outside_it() {
    let Some(git_server) = git_server() else {
        return;
    };
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let project = ctl.project();
    repository(&project);
    let outside = ctl.root.path().join("outside");
    repository(&outside);
    let path = |p: &Path| p.display().to_string();
    let (rt, server) = super::controller::harness::start_fake_model(json!([
        calls(&[("mcp__git_git_status", json!({"repo_path": path(&project)}))]),
        calls(&[
            (
                "mcp__git_git_add",
                json!({"repo_path": path(&project), "files": ["new.txt"]})
            ),
            (
                "mcp__git_git_commit",
                json!({"repo_path": path(&project), "message": "from the model"})
            ),
            (
                "mcp__git_git_add",
                json!({"repo_path": path(&outside), "files": ["new.txt"]})
            ),
            (
                "mcp__git_git_commit",
                json!({"repo_path": path(&outside), "message": "planted"})
            ),
        ]),
        done_turn("ok")
    ]));
    configure(
        &ctl,
        &format!("[mcp_servers.git]\ncommand = {:?}\n", path(&git_server)),
    );
    let out = run_with_limit(session_against(
        &ctl,
        &server,
        "full",
        true,
        "commit the new file",
    ));
    drop(rt);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    assert!(
        server_events(&events, "ready")
            .iter()
            .any(|r| r.starts_with("git: ")),
        "{events:#?}"
    );
    let status = outputs_of(&events, "mcp__git_git_status");
    assert!(status[0].contains("new.txt"), "{}", status[0]);
    assert_eq!(commits(&project), "from the model\nfirst\n");
    // The server would commit anywhere it is pointed: the walls keep the outside repository.
    let outside_commits = outputs_of(&events, "mcp__git_git_commit");
    assert_eq!(outside_commits.len(), 2, "{events:#?}");
    assert_eq!(commits(&outside), "first\n", "{}", outside_commits[1]);
}

/// What the model's second request says of the image tool's result, on `wire`.
fn image_result(wire: Wire, body: &Value) -> Value {
    let find = |items: &Value, pick: &dyn Fn(&Value) -> Option<Value>| {
        items
            .as_array()
            .into_iter()
            .flatten()
            .find_map(pick)
            .unwrap_or(Value::Null)
    };
    match wire {
        Wire::OpenAiResponses => find(&body["input"], &|item| {
            (item["type"] == "function_call_output").then(|| item["output"].clone())
        }),
        Wire::Anthropic => find(&body["messages"], &|message| {
            message["content"]
                .as_array()?
                .iter()
                .find(|block| block["type"] == "tool_result")
                .map(|block| block["content"].clone())
        }),
        Wire::Gemini => find(&body["contents"], &|content| {
            content["parts"]
                .as_array()?
                .iter()
                .find_map(|part| part.get("functionResponse").cloned())
        }),
        Wire::OpenAiChat => find(&body["messages"], &|message| {
            (message["role"] == "tool").then(|| message["content"].clone())
        }),
    }
}

#[test]
fn an_image_a_server_returns_reaches_the_model_where_the_wire_takes_images() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    for wire in [
        Wire::OpenAiResponses,
        Wire::Anthropic,
        Wire::Gemini,
        Wire::OpenAiChat,
    ] {
        let ctl = Ctl::new(
            wire,
            json!([
                calls(&[("mcp__everything_get-tiny-image", json!({}))]),
                done_turn("seen")
            ]),
        );
        configure(
            &ctl,
            &format!(
                "[mcp_servers.everything]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
                node().display().to_string(),
                everything.display().to_string()
            ),
        );
        let events = run(&ctl, "full", true);
        assert_eq!(ended(&events), "completed", "{wire:?}: {events:#?}");
        let output = &outputs_of(&events, "mcp__everything_get-tiny-image")[0];
        let requests = ctl.turn_requests();
        let result = image_result(wire, &requests[1].body);
        let png = |data: &Value| data.as_str().is_some_and(|d| d.starts_with("iVBORw0KGgo"));
        match wire {
            Wire::OpenAiResponses => {
                assert_eq!(result[0]["type"], "input_text", "{result}");
                let url = result[1]["image_url"].as_str().unwrap_or_default();
                assert!(
                    url.starts_with("data:image/png;base64,iVBORw0KGgo"),
                    "{result}"
                );
            }
            Wire::Anthropic => {
                assert_eq!(result[1]["type"], "image", "{result}");
                assert_eq!(result[1]["source"]["media_type"], "image/png");
                assert!(png(&result[1]["source"]["data"]), "{result}");
            }
            Wire::Gemini => {
                let inline = &result["parts"][0]["inlineData"];
                assert_eq!(inline["mimeType"], "image/png", "{result}");
                assert!(png(&inline["data"]), "{result}");
            }
            Wire::OpenAiChat => {
                // Text only in a tool message here: the text names the image.
                let text = result.as_str().unwrap_or_default();
                assert!(text.contains("[image result: image/png"), "{result}");
                assert!(!text.contains("iVBORw0KGgo"), "{result}");
            }
        }
        // The event shows the text, never the image's bytes.
        assert!(output.contains("image/png"), "{output}");
        assert!(!output.contains("iVBORw0KGgo"), "{output}");
    }
}

#[test]
fn a_daemon_session_uses_its_servers_and_ends_them_with_it() {
    let mut world = super::daemon::World::new(json!([
        calls(&[("mcp__s_echo", json!({"text": "from the daemon"}))]),
        done_turn("ok")
    ]));
    let script = world.user_home().join("scripted_server.py");
    std::fs::create_dir_all(world.user_home().join(".config/intendant")).unwrap();
    std::fs::write(&script, SCRIPTED).unwrap();
    std::fs::write(
        world.user_home().join(".config/intendant/mcp_servers.toml"),
        format!(
            "[mcp_servers.s]\ncommand = \"python3\"\nargs = [{:?}]\ncwd = {:?}\n",
            script.display().to_string(),
            world.project().display().to_string()
        ),
    )
    .unwrap();
    world.serve();
    let id = world.start("echo through the server", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let bodies = world.turn_bodies();
    let outputs = super::sessions::tool_outputs(&bodies[1]);
    assert!(
        outputs.iter().any(|o| o.contains("from the daemon")),
        "{outputs:?}"
    );
    assert!(
        !world.processes_in_project().is_empty(),
        "the server runs while its session does"
    );
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    super::daemon::wait_until("the session's server is gone", || {
        world.processes_in_project().is_empty()
    });
    assert_eq!(world.stop_daemon(), 0);
}

/// A waiting daemon session's stdio server is let go after its `idle_exit_sec` without a call
/// (its process ends, its tools are still offered) and the follow-up's call starts it again:
/// before, a waiting session held each of its servers until it ended (about 100 MiB for the two
/// reference servers, `server-everything` and `mcp-server-git`, per session).
#[test]
fn a_waiting_sessions_server_is_let_go_and_the_next_call_starts_it_again() {
    let mut world = super::daemon::World::new(json!([
        calls(&[("mcp__s_echo", json!({"text": "first"}))]),
        done_turn("ok"),
        calls(&[("mcp__s_echo", json!({"text": "second"}))]),
        done_turn("again")
    ]));
    let script = world.user_home().join("scripted_server.py");
    std::fs::create_dir_all(world.user_home().join(".config/intendant")).unwrap();
    std::fs::write(&script, SCRIPTED).unwrap();
    // In the project: the sandboxed server writes nowhere else.
    let starts = world.project().join("starts.log");
    std::fs::write(
        world.user_home().join(".config/intendant/mcp_servers.toml"),
        format!(
            "[mcp_servers.s]\ncommand = \"python3\"\nargs = [{:?}]\ncwd = {:?}\n\
             env = {{ MCP_STARTS = {:?} }}\nidle_exit_sec = 1\n",
            script.display().to_string(),
            world.project().display().to_string(),
            starts.display().to_string(),
        ),
    )
    .unwrap();
    world.serve();
    let id = world.start("echo twice", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    super::daemon::wait_until("the waiting session's server is let go", || {
        world.processes_in_project().is_empty()
    });
    let log = world.session_log(&id);
    super::daemon::wait_until("the let-go is recorded", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\"state\":\"let_go\""))
    });
    world.ctl_ok(&["send", &id, "once more"]);
    super::daemon::wait_until("the follow-up's round ends", || {
        world.session(&id)["final_text"] == "again"
    });
    let bodies = world.turn_bodies();
    assert!(
        bodies[2].to_string().contains("mcp__s_echo"),
        "the tools of the server let go were still offered"
    );
    let outputs = super::sessions::tool_outputs(&bodies[3]);
    assert!(
        outputs.iter().any(|o| o.contains("echo: second")),
        "{outputs:?}"
    );
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 2);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

/// A loopback relay to `port` that keeps every byte a client sent, for reading the headers a
/// request carried.
fn recording_relay(port: u16) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut upstream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let (mut back_from, mut back_to) =
                (upstream.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut back_from, &mut back_to));
            let kept = std::sync::Arc::clone(&kept);
            std::thread::spawn(move || {
                let mut buf = [0_u8; 16 * 1024];
                while let Ok(n @ 1..) = client.read(&mut buf) {
                    kept.lock().unwrap().extend_from_slice(&buf[..n]);
                    if upstream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (relay_port, seen)
}

#[test]
fn an_http_server_gets_the_bearer_token_and_headers_and_the_token_shows_nowhere() {
    let Some(everything) = reference_server("server-everything") else {
        return;
    };
    let server = HttpServer::start(&everything);
    let (relay, seen) = recording_relay(server.port);
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[("mcp__remote_echo", json!({"message": "with a token"}))]),
            done_turn("done")
        ]),
    );
    let token = "remote-token-5f0e2a9c41";
    configure(
        &ctl,
        &format!(
            "[mcp_servers.remote]\nurl = \"http://127.0.0.1:{relay}/mcp\"\n\
             bearer_token_env_var = \"REMOTE_MCP_TOKEN\"\n\
             http_headers = {{ \"X-Team\" = \"platform\" }}\n"
        ),
    );
    let mut cmd = session(&ctl, "full", true, "use the remote server");
    cmd.env("REMOTE_MCP_TOKEN", token);
    let out = run_with_limit(cmd);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    let echoed = outputs_of(&events, "mcp__remote_echo");
    assert!(echoed[0].contains("with a token"), "{events:#?}");
    let sent = String::from_utf8_lossy(&seen.lock().unwrap()).to_ascii_lowercase();
    assert!(
        sent.contains(&format!("authorization: bearer {token}")),
        "{sent}"
    );
    assert!(sent.contains("x-team: platform"), "{sent}");
    // Not in the events, the stderr or the session's records.
    assert!(!String::from_utf8_lossy(&out.stdout).contains(token));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(token));
    let logs = ctl.intendant_home().join("logs");
    for entry in walk(&logs) {
        let text = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(token),
            "{}",
            entry.display()
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

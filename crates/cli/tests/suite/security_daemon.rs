//! A session cannot drive the daemon, and every start is held to the terminal's rules: the
//! built `intendant serve --web`, attacked from inside one of its own sessions whose sandbox is
//! OFF (so the daemon's own wall is all that stands: the state root, its socket and the web
//! token are in plain reach), through every surface (`intendant ctl`, a raw client on
//! `daemon.sock`, the dashboard's API and MCP over HTTP with the token); the same requests from
//! the test process, a human's, work. Waits poll with a bounded deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};

use super::controller::harness::intendant_bin;
use super::daemon::{World, code, stderr, wait_until};
use super::security_controller::{as_nobody_in, running_as_root};
use super::sessions::{exec_turn, text_turn};
use super::web::{dechunk, spawn_web};

/// What the session's command runs: every way to drive the daemon it can find, each outcome
/// recorded as JSON (`sys.argv`: state root, intendant binary, dashboard port).
const ATTACK: &str = r#"
import json, socket, subprocess, sys, http.client
home, intendant, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
env = {"INTENDANT_HOME": home, "PATH": "/usr/bin:/bin"}
for name, args in [("ctl_autonomy", ["autonomy", "full"]), ("ctl_approvals", ["approvals"]),
                   ("ctl_sessions", ["sessions"]), ("ctl_approve", ["approve", "S", "1"]),
                   ("ctl_agenda_approve", ["agenda", "approve", "1"]),
                   ("ctl_approve_schedule", ["approve", "agenda", "1"]),
                   ("ctl_reload", ["reload"])]:
    p = subprocess.run([intendant, "ctl"] + args, env=env, capture_output=True, text=True,
                       timeout=30)
    out[name] = [p.returncode, p.stdout + p.stderr]
p = subprocess.run([intendant, "sessions", "prune", "--older-than", "0s"], env=env,
                   capture_output=True, text=True, timeout=30)
out["sessions_prune"] = [p.returncode, p.stdout + p.stderr]
hello = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",' \
        '"capabilities":{},"clientInfo":{"name":"attack","version":"1"}}}\n'
p = subprocess.run([intendant, "mcp"], env=env, input=hello, capture_output=True, text=True,
                   timeout=30)
out["mcp_stdio"] = [p.returncode, p.stdout + p.stderr]
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(home + "/daemon.sock")
s.sendall(b'{"hello":1,"client":"attack"}\n{"id":1,"op":"set_autonomy","level":"full"}\n'
          b'{"id":2,"op":"subscribe","after":0}\n')
got = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
except Exception as e:
    got += ("<" + type(e).__name__ + ">").encode()
out["socket"] = got.decode(errors="replace")
token = open(home + "/web-token").read().strip()
auth = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "Host": "127.0.0.1:%d" % port}
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "attack", "version": "1"}}}
for name, method, path, body in [
        ("web_sessions", "GET", "/api/sessions", None),
        ("web_autonomy", "POST", "/api/intents", {"intent": "autonomy", "level": "full"}),
        ("web_approve_schedule", "POST", "/api/intents",
         {"intent": "session", "session_id": "agenda", "action": "approve", "id": 1}),
        ("web_memories", "GET", "/api/memories", None),
        ("web_memory_add", "POST", "/api/intents",
         {"intent": "memory", "action": "add", "scope": "user", "text": "planted by a session"}),
        ("mcp", "POST", "/mcp", init)]:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request(method, path, None if body is None else json.dumps(body), headers=auth)
        r = c.getresponse()
        out[name] = [r.status, r.read().decode(errors="replace")]
    except Exception as e:
        out[name] = [0, type(e).__name__ + ": " + str(e)]
print(json.dumps(out))
"#;

/// `path` opened for appending (a daemon's stderr).
fn append(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// A daemon serving the dashboard, its stderr kept.
struct Served {
    world: World,
    port: u16,
    token: String,
    log: PathBuf,
}

impl Served {
    /// `intendant serve --web` for `world`, after `settings` (the state root's
    /// `intendant.toml`) and a project whose sandbox is off (trusted by the test, a human).
    fn start(world: World, settings: &str) -> Served {
        Served::start_as(world, settings, false)
    }

    /// [`Served::start`]; with `unprivileged` (when the test runs as root), the daemon runs as
    /// `nobody` on copies of the binaries in `../bin` of the project: no cgroup can be made, so
    /// the daemon knows its sessions' processes only as its descendants.
    fn start_as(mut world: World, settings: &str, unprivileged: bool) -> Served {
        std::fs::create_dir_all(world.home()).unwrap();
        std::fs::write(world.home().join("intendant.toml"), settings).unwrap();
        std::fs::write(
            world.project().join("intendant.toml"),
            "[sandbox]\nenabled = false\n",
        )
        .unwrap();
        let trusted = world.command(&["trust"]).output().unwrap();
        assert!(trusted.status.success(), "{}", stderr(&trusted));
        let log = world.project().with_file_name("daemon.err");
        let mut serve = world.command(&["serve", "--web"]);
        serve.current_dir(world.home());
        let mut serve = if unprivileged {
            let root = world.project().parent().unwrap().to_path_buf();
            as_nobody_in(&root, &serve)
        } else {
            serve
        };
        serve.stdin(Stdio::null()).stderr(append(&log));
        let url = spawn_web(&mut world, serve);
        Served {
            world,
            port: url.port,
            token: url.token,
            log,
        }
    }

    /// One HTTP request with the token, from this process: status and body.
    fn http(&self, method: &str, path: &str, body: &Value) -> (u16, String) {
        let (status, _, body) = self.exchange(method, path, "", &body.to_string());
        (status, body)
    }

    /// One HTTP/1.1 request with the token and `headers` (each ending in CRLF): status, head
    /// and (de-chunked) body.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> (u16, String, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\
             {headers}Content-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            self.port,
            self.token,
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let (head, rest) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
        let status = head[9..12].parse().unwrap();
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(rest)
        } else {
            rest.to_owned()
        };
        (status, head.to_owned(), body)
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

fn default_autonomy(world: &World) -> String {
    world.ctl_ok(&["autonomy"]).trim().to_owned()
}

#[test]
fn security_daemon_a_session_cannot_drive_the_daemon_through_any_surface() {
    attack_from_a_session(false);
}

/// As an ordinary user no cgroup can be made: the daemon knows its sessions' processes as its
/// descendants (it is their child subreaper), on the socket and on the dashboard.
#[test]
fn security_daemon_a_session_cannot_drive_the_daemon_as_an_ordinary_user_without_cgroups() {
    if !running_as_root() {
        // Already an ordinary user: the test above is this one.
        return;
    }
    attack_from_a_session(true);
}

fn attack_from_a_session(unprivileged: bool) {
    // The state root is `../ihome` of the project (see `World`); the port is known once the
    // daemon listens, so the command reads it from a file.
    let intendant = if unprivileged {
        "\"$(cd .. && pwd)/bin/intendant\"".to_owned()
    } else {
        intendant_bin().display().to_string()
    };
    let command = format!(
        "/usr/bin/python3 attack.py \"$(cd .. && pwd)/ihome\" {intendant} \"$(cat port.txt)\" \
         > attack.out 2>&1"
    );
    let world = World::new(json!([exec_turn(&command), text_turn("tried")]));
    assert!(world.home().ends_with("ihome") && world.home().parent() == world.project().parent());
    std::fs::write(world.project().join("attack.py"), ATTACK).unwrap();
    // An ended session's records, which the attack tries to prune.
    let victim = world.record_ended("ended before the attack");
    let served = Served::start_as(world, "", unprivileged);
    let world = &served.world;
    std::fs::write(world.project().join("port.txt"), served.port.to_string()).unwrap();
    let before = default_autonomy(world);
    // The owner raised the default in the file but has not reloaded it: the attack's `ctl
    // reload` must not put it in force.
    std::fs::write(
        world.home().join("intendant.toml"),
        "[daemon]\ndefault_autonomy = \"high\"\n",
    )
    .unwrap();
    assert_ne!(before, "high");
    // A session scheduled by the owner, waiting for the owner's approval: the attack tries to
    // approve it.
    let scheduled = world.ctl_ok(&["schedule", "--at", "+1h", "scheduled by the owner"]);
    assert!(scheduled.contains("scheduled 1 for"), "{scheduled}");
    // The human chose `full` for this session, so its command runs unasked.
    let id = world.start("probe the daemon", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let text = std::fs::read_to_string(world.project().join("attack.out")).unwrap();
    let out: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("the attack printed no report ({e}):\n{text}"));

    for verb in [
        "ctl_autonomy",
        "ctl_approvals",
        "ctl_sessions",
        "ctl_approve",
        "ctl_agenda_approve",
        "ctl_approve_schedule",
        "ctl_reload",
        "sessions_prune",
    ] {
        let (status, said) = (&out[verb][0], out[verb][1].as_str().unwrap());
        assert_eq!(status, 1, "{verb}: {said}");
        assert!(
            said.contains("refused") && said.contains("session"),
            "{verb}: {said}"
        );
    }
    // The prune asked the daemon (which holds the state root), and the daemon refused it.
    let said = out["sessions_prune"][1].as_str().unwrap();
    assert!(said.contains("the daemon serving"), "{said}");
    // `intendant mcp` on stdio is a client of the socket too: it never serves.
    let (status, said) = (&out["mcp_stdio"][0], out["mcp_stdio"][1].as_str().unwrap());
    assert_ne!(status, 0, "{said}");
    assert!(
        said.contains("refused") && !said.contains("\"result\""),
        "{said}"
    );
    let socket = out["socket"].as_str().unwrap();
    assert!(socket.contains("\"forbidden\""), "{socket}");
    assert!(
        !socket.contains("\"hello\""),
        "no hello for a session: {socket}"
    );
    assert!(
        !socket.contains("\"stream\""),
        "no event reached it: {socket}"
    );
    for surface in [
        "web_sessions",
        "web_autonomy",
        "web_approve_schedule",
        "web_memories",
        "web_memory_add",
        "mcp",
    ] {
        let (status, said) = (&out[surface][0], out[surface][1].as_str().unwrap());
        assert_eq!(status, 403, "{surface}: {said}");
        assert!(said.contains("refused"), "{surface}: {said}");
    }
    assert_eq!(default_autonomy(world), before, "nothing was raised");
    assert!(
        victim.join("session_meta.json").exists(),
        "nothing was pruned"
    );
    let agenda = world.ctl_ok(&["agenda", "list"]);
    assert!(
        agenda.contains("pending"),
        "the schedule still waits: {agenda}"
    );
    let log = served.daemon_log();
    assert!(log.contains("control socket: refused"), "{log}");
    assert!(log.contains("dashboard: refused"), "{log}");
    if unprivileged {
        // No cgroup: both walls found the process among the daemon's descendants.
        assert!(log.contains("started by a session of this daemon"), "{log}");
        assert!(log.contains("dashboard: refused: pid"), "{log}");
    }

    // The same requests from the test process, a human's, work.
    world.ctl_ok(&["reload"]);
    assert_eq!(default_autonomy(world), "high", "the owner's reload");
    assert_eq!(served.http("GET", "/api/sessions", &Value::Null).0, 200);
    let (status, memories) = served.http("GET", "/api/memories", &Value::Null);
    assert_eq!(status, 200, "{memories}");
    assert!(
        !memories.contains("planted"),
        "nothing was stored: {memories}"
    );
    let (status, body) = served.http(
        "POST",
        "/api/intents",
        &json!({"intent": "autonomy", "level": "high"}),
    );
    assert_eq!(status, 200, "{body}");
    world.ctl_ok(&["autonomy", "low"]);
    assert!(world.ctl_ok(&["sessions"]).contains(&id));
    world.ctl_ok(&["agenda", "approve", "1"]);
    assert!(world.ctl_ok(&["agenda", "list"]).contains("approved"));
}

#[test]
fn security_daemon_autonomy_above_the_ceiling_is_refused_from_socket_dashboard_and_mcp() {
    let world = World::new(json!([text_turn("hi")]));
    let project = world.project().display().to_string();
    let served = Served::start(
        world,
        &format!("[daemon]\nmax_autonomy = \"high\"\n[mcp]\nprojects = [{project:?}]\n"),
    );
    let world = &served.world;
    let status = world.ctl_ok(&["status"]);
    assert!(
        status.contains("default autonomy medium (at most high)"),
        "{status}"
    );
    let refused = world.ctl(&["autonomy", "full"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("[daemon] max_autonomy = \"high\""),
        "{}",
        stderr(&refused)
    );
    let refused = world.try_start("task", &["--autonomy", "full"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(world.ctl_ok(&["--json", "sessions"]).trim().is_empty());
    for intent in [
        json!({"intent": "autonomy", "level": "full"}),
        json!({"intent": "settings", "default_autonomy": "full"}),
        json!({"intent": "start", "task": "t", "project": project, "autonomy": "full"}),
    ] {
        let (status, body) = served.http("POST", "/api/intents", &intent);
        assert_eq!(status, 403, "{intent}: {body}");
        assert!(body.contains("max_autonomy"), "{body}");
    }
    // Up to the ceiling, the human's requests work; a session's level too.
    world.ctl_ok(&["autonomy", "high"]);
    let id = world.start("t", &["--autonomy", "high"]);
    let refused = world.ctl(&["autonomy", "full", "--session", &id]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    // Approving every later command is what `full` does.
    let refused = world.ctl(&["approve-all", &id, "1"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("max_autonomy"),
        "{}",
        stderr(&refused)
    );
    let settings = std::fs::read_to_string(world.home().join("intendant.toml")).unwrap();
    assert!(settings.contains("max_autonomy = \"high\""), "{settings}");
    assert!(!settings.contains("\"full\""), "{settings}");

    // MCP over HTTP: no tool answers approvals or sets autonomy, and no start above the
    // ceiling (`[mcp] max_autonomy` defaults to high; the daemon's is high too).
    let mcp = McpOverHttp::open(&served);
    let tools = mcp.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"run_task"), "{names:?}");
    for absent in ["resolve_approval", "set_autonomy"] {
        assert!(!names.contains(&absent), "{names:?}");
    }
    let run = mcp.request(
        "tools/call",
        json!({"name": "run_task", "arguments": {"task": "t", "project_dir": project,
               "autonomy": "full", "provider": "openai", "model": "fake-model"}}),
    );
    assert_eq!(run["result"]["isError"], true, "{run}");
    assert_eq!(
        run["result"]["structuredContent"]["error"]["code"], "forbidden",
        "{run}"
    );
}

#[test]
fn security_daemon_an_acp_command_line_counts_only_from_trusted_configuration() {
    let world = World::new(json!([]));
    let served = Served::start(world, "");
    let world = &served.world;
    let pwned = world.project().join("pwned");
    let command = ["sh", "-c", &format!("touch {}", pwned.display())];
    let refused = world.ctl(&[&["start", "--agent", "acp", "task", "--"][..], &command].concat());
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("trusted configuration"),
        "{}",
        stderr(&refused)
    );
    let (status, body) = served.http(
        "POST",
        "/api/intents",
        &json!({"intent": "start", "task": "t", "project": world.project(),
                "backend": {"kind": "agent", "name": "acp", "command": command}}),
    );
    assert_eq!(status, 403, "{body}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!pwned.exists(), "the request's command line never ran");
    assert!(world.ctl_ok(&["--json", "sessions"]).trim().is_empty());

    // Once the project's trusted intendant.toml names that command line, it counts.
    let quoted: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    std::fs::write(
        world.project().join("intendant.toml"),
        format!(
            "[sandbox]\nenabled = false\n[agent.acp.helper]\ncommand = [{}]\n",
            quoted.join(", ")
        ),
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    let id = world.ctl_ok(&[&["start", "--agent", "acp", "task", "--"][..], &command].concat());
    let session = world.session(id.trim());
    assert_eq!(session["backend"]["name"], "helper", "{session}");
    wait_until("the configured agent ran", || pwned.exists());
}

/// A JSON-RPC client of `/mcp` over plain HTTP (answers as JSON or as one SSE event).
struct McpOverHttp<'a> {
    served: &'a Served,
    session: String,
}

impl<'a> McpOverHttp<'a> {
    fn open(served: &'a Served) -> McpOverHttp<'a> {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}});
        let (status, head, _) = raw_mcp(served, None, &init);
        assert_eq!(status, 200, "{head}");
        let session = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no session id: {head}"));
        let ready = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        raw_mcp(served, Some(&session), &ready);
        McpOverHttp { served, session }
    }

    fn request(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let (status, head, body) = raw_mcp(self.served, Some(&self.session), &body);
        assert_eq!(status, 200, "{head}\n{body}");
        let json = body
            .lines()
            .find_map(|l| {
                l.strip_prefix("data:")
                    .map(str::trim)
                    .filter(|d| d.starts_with('{'))
            })
            .unwrap_or(body.trim());
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"))
    }
}

/// One POST to `/mcp` in MCP session `session`: status, head and body.
fn raw_mcp(served: &Served, session: Option<&str>, body: &Value) -> (u16, String, String) {
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    served.exchange("POST", "/mcp", &session, &body.to_string())
}

/// What a session's command tries to rewind another session with (`sys.argv`: state root,
/// intendant binary, dashboard port, the victim's id): `ctl rewind`, the socket's `rewind` op,
/// the dashboard's `rewind` intent and MCP's `rewind` tool over HTTP, each outcome as JSON.
const REWIND_ATTACK: &str = r#"
import json, socket, subprocess, sys, http.client
home, intendant, port, victim = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
out = {}
env = {"INTENDANT_HOME": home, "PATH": "/usr/bin:/bin"}
p = subprocess.run([intendant, "ctl", "rewind", victim, "--to", "1", "--force"], env=env,
                   capture_output=True, text=True, timeout=30)
out["ctl_rewind"] = [p.returncode, p.stdout + p.stderr]
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(home + "/daemon.sock")
s.sendall(('{"hello":1,"client":"attack"}\n{"id":1,"op":"rewind","request":{"session_id":"%s",'
           '"to_turn":1,"force":true}}\n' % victim).encode())
got = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
except Exception as e:
    got += ("<" + type(e).__name__ + ">").encode()
out["socket"] = got.decode(errors="replace")
token = open(home + "/web-token").read().strip()
auth = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "Host": "127.0.0.1:%d" % port}
call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "rewind", "arguments": {"session_id": victim, "to_turn": 1, "force": True}}}
for name, body, path in [
        ("web_rewind", {"intent": "rewind", "session_id": victim, "to_turn": 1, "force": True},
         "/api/intents"),
        ("mcp_rewind", call, "/mcp")]:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", path, json.dumps(body), headers=auth)
        r = c.getresponse()
        out[name] = [r.status, r.read().decode(errors="replace")]
    except Exception as e:
        out[name] = [0, type(e).__name__ + ": " + str(e)]
print(json.dumps(out))
"#;

/// A session's command tries every surface to rewind another session of the daemon (one
/// waiting for a follow-up, which a human could rewind): each is refused before the request is
/// read, the victim's file and checkpoints are untouched, and the same rewind from the test
/// process (a human's) works.
#[test]
fn security_daemon_a_session_cannot_rewind_a_session_through_any_surface() {
    let intendant = intendant_bin().display().to_string();
    let command = format!(
        "/usr/bin/python3 rewind_attack.py \"$(cd .. && pwd)/ihome\" {intendant} \
         \"$(cat port.txt)\" \"$(cat victim.txt)\" > attack.out 2>&1"
    );
    let world = World::new(json!([
        exec_turn("printf 'made by the victim\\n' > victim.txt.out"),
        text_turn("made it"),
        exec_turn(&command),
        text_turn("tried"),
    ]));
    std::fs::write(world.project().join("rewind_attack.py"), REWIND_ATTACK).unwrap();
    let served = Served::start(world, "");
    let world = &served.world;
    std::fs::write(world.project().join("port.txt"), served.port.to_string()).unwrap();
    let victim = world.start("make a file", &["--autonomy", "full"]);
    world.wait_status(&victim, "idle");
    let made = world.project().join("victim.txt.out");
    assert!(made.exists());
    std::fs::write(world.project().join("victim.txt"), &victim).unwrap();
    let attacker = world.start("rewind the other one", &["--autonomy", "full"]);
    world.wait_status(&attacker, "idle");
    let text = std::fs::read_to_string(world.project().join("attack.out")).unwrap();
    let out: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("the attack printed no report ({e}):\n{text}"));

    let (status, said) = (
        &out["ctl_rewind"][0],
        out["ctl_rewind"][1].as_str().unwrap(),
    );
    assert_eq!(status, 1, "{said}");
    assert!(
        said.contains("refused") && said.contains("session"),
        "{said}"
    );
    let socket = out["socket"].as_str().unwrap();
    assert!(socket.contains("\"forbidden\""), "{socket}");
    assert!(!socket.contains("\"hello\""), "{socket}");
    assert!(
        !socket.contains("\"summary\""),
        "no report reached it: {socket}"
    );
    for surface in ["web_rewind", "mcp_rewind"] {
        let (status, said) = (&out[surface][0], out[surface][1].as_str().unwrap());
        assert_eq!(status, 403, "{surface}: {said}");
        assert!(said.contains("refused"), "{surface}: {said}");
    }
    assert!(made.exists(), "the victim's file is still there");
    let checkpoints = std::fs::read_dir(world.home().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let record = checkpoints
        .join("sessions")
        .join(&victim)
        .join("record.jsonl");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(!text.contains("\"rewind\""), "no rewind recorded: {text}");

    // The same rewind asked by a human (this process) goes through.
    let (status, body) = served.http(
        "POST",
        "/api/intents",
        &json!({"intent": "rewind", "session_id": victim, "to_turn": 1, "preview": true}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("victim.txt.out"), "{body}");
    // The attacker's own files (its script, its report) changed the project since the victim's
    // last checkpoint: a human forces past them.
    world.ctl_ok(&["rewind", &victim, "--to", "1", "--force"]);
    assert!(!made.exists(), "rewound");
}

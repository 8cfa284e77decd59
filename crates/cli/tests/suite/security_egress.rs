//! The egress proxy of a `proxy` session through the built binary, offline: the hosts a command
//! may reach are the test's own, on a network namespace the test makes (a veth pair,
//! `10.200.X.2`), opened with `allow_addresses` and named with `hosts`; the test's own
//! 127.0.0.1 listener must stay out of reach. Real `curl`, `git clone`, `pip download` (a package
//! index) and `npm pack` (a registry) go through the proxy.
//! Needs root (the veth pair); skipped with a message otherwise, except under `CI=true`.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::controller::harness::{
    JsonSession, assert_success, events_of, outputs_of, parse_events,
};
use super::sessions::{Env, exec_turn, text_turn, tool_outputs};

/// The port the test host's HTTP server listens on.
const HOST_PORT: u16 = 8080;
/// The file the test host serves.
const GREETING: &str = "from the test host";

static NEXT_HOST: AtomicU32 = AtomicU32::new(0);

/// A host of the test's own: a network namespace holding `addr`, reached from the host's
/// namespace over a veth pair, with a static HTTP server (a file and a dumb-HTTP git repository).
/// Everything is removed when it drops.
struct TestHost {
    ns: String,
    veth: String,
    server: Option<Child>,
    /// Third octet of `10.200.X.0/24`.
    net: u32,
    /// Holds `net` for this host while it lives ([`claim_net`]).
    _net: std::fs::File,
    _dir: tempfile::TempDir,
}

/// A third octet no other live test host uses, with the lock that holds it: an exclusive
/// `flock` on `/tmp/intendant-egress-net-X` (the kernel lets go when the test process ends,
/// however it ends). Each test runs in a process of its own, several at once, and two hosts
/// on one subnet would route one's connections into the other's namespace.
fn claim_net(start: u32) -> (u32, std::fs::File) {
    use std::os::fd::AsRawFd;
    for offset in 0..250 {
        let net = (start + offset) % 250 + 1;
        let file = std::fs::File::create(format!("/tmp/intendant-egress-net-{net}")).unwrap();
        // SAFETY: flock(2) on a descriptor this test owns touches no memory.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return (net, file);
        }
    }
    panic!("every test host subnet 10.200.1-250.0/24 is taken");
}

impl TestHost {
    /// The test host, or `None` (said on stderr) where this machine cannot make one; under
    /// `CI=true` that is a failure.
    fn start() -> Option<TestHost> {
        let skip = |why: String| {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and the egress test cannot run: {why}");
            }
            // The test harness shows a test's stderr; the skip must be visible, not silent.
            let _ = writeln!(
                std::io::stderr(),
                "skipping the egress test through the binary: {why}"
            );
            None
        };
        // SAFETY: geteuid reads the process's credentials and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return skip("a veth pair needs root".into());
        }
        let n = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
        let (net, claimed) = claim_net(std::process::id() * 3 + n);
        let host = TestHost {
            ns: format!("intd-egress-{}-{n}", std::process::id()),
            veth: format!("ieg{}h{n}", std::process::id() % 100_000),
            server: None,
            net,
            _net: claimed,
            _dir: tempfile::tempdir().unwrap(),
        };
        let peer = format!("ieg{}p{n}", std::process::id() % 100_000);
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), host.ns.clone()],
            vec![
                "link".into(),
                "add".into(),
                host.veth.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                peer.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                peer.clone(),
                "netns".into(),
                host.ns.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("10.200.{net}.1/24"),
                "dev".into(),
                host.veth.clone(),
            ],
            vec!["link".into(), "set".into(), host.veth.clone(), "up".into()],
            vec![
                "-n".into(),
                host.ns.clone(),
                "addr".into(),
                "add".into(),
                format!("10.200.{net}.2/24"),
                "dev".into(),
                peer.clone(),
            ],
            vec![
                "-n".into(),
                host.ns.clone(),
                "link".into(),
                "set".into(),
                peer,
                "up".into(),
            ],
            vec![
                "-n".into(),
                host.ns.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in steps {
            let out = Command::new("ip").args(&step).output();
            match out {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    return skip(format!(
                        "ip {}: {}",
                        step.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                Err(e) => return skip(format!("cannot run ip: {e}")),
            }
        }
        let mut host = host;
        host.serve();
        Some(host)
    }

    /// Fills the served directory and starts the server inside the namespace.
    fn serve(&mut self) {
        let dir = self._dir.path();
        std::fs::write(dir.join("hello.txt"), GREETING).unwrap();
        let src = dir.join("src");
        let git = |args: &[&str], cwd: &Path| {
            let out = Command::new("git")
                .args(args)
                .current_dir(cwd)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        std::fs::create_dir(&src).unwrap();
        git(&["init", "-q", "-b", "main"], &src);
        std::fs::write(src.join("README"), "cloned through the proxy\n").unwrap();
        git(&["add", "README"], &src);
        git(&["commit", "-q", "-m", "first"], &src);
        git(&["clone", "-q", "--bare", "src", "repo.git"], dir);
        git(&["update-server-info"], &dir.join("repo.git"));
        packages(dir);
        let server = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-m", "http.server"])
            .arg(HOST_PORT.to_string())
            .args(["--bind", &self.addr(), "--directory"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.server = Some(server);
        for _ in 0..100 {
            if std::net::TcpStream::connect((self.addr().as_str(), HOST_PORT)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the test host's server did not start");
    }

    fn addr(&self) -> String {
        format!("10.200.{}.2", self.net)
    }

    /// `intendant.toml` opening this host under the names `pkg.test` (allowed) and
    /// `other.test` (in neither list), with every command run without asking.
    fn config(&self) -> String {
        format!(
            "[approval]\ncommand_exec = \"auto\"\n\n[sandbox.network]\nmode = \"proxy\"\nallow = [\"pkg.test\"]\nallow_addresses = [\"{addr}/32\"]\nhosts = {{ \"pkg.test\" = \"{addr}\", \"other.test\" = \"{addr}\" }}\n",
            addr = self.addr()
        )
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

/// A package index for `pip` (`/simple/tinypkg/`, one wheel) and a registry for `npm`
/// (`/npm/tinypkg`, its metadata naming `/tarballs/tinypkg-1.0.0.tgz` on `pkg.test`) in `dir`.
fn packages(dir: &Path) {
    let wheel = r#"
import base64, hashlib, sys, zipfile
name = "tinypkg-1.0-py3-none-any.whl"
files = {
    "tinypkg/__init__.py": "VALUE = 1\n",
    "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
    "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(sys.argv[1] + "/" + name, "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text)}")
    record.append("tinypkg-1.0.dist-info/RECORD,,")
    z.writestr("tinypkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
open(sys.argv[1] + "/index.html", "w").write(f'<html><body><a href="{name}">{name}</a></body></html>\n')
"#;
    let simple = dir.join("simple").join("tinypkg");
    std::fs::create_dir_all(&simple).unwrap();
    let out = Command::new("python3")
        .args(["-c", wheel])
        .arg(&simple)
        .output()
        .unwrap();
    assert!(out.status.success(), "the wheel: {out:?}");
    let src = dir.join("npm-src").join("package");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("package.json"),
        r#"{"name":"tinypkg","version":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::create_dir(dir.join("tarballs")).unwrap();
    let out = Command::new("tar")
        .args([
            "czf",
            "tarballs/tinypkg-1.0.0.tgz",
            "-C",
            "npm-src",
            "package",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "the tarball: {out:?}");
    std::fs::create_dir(dir.join("npm")).unwrap();
    let metadata = json!({
        "name": "tinypkg",
        "dist-tags": { "latest": "1.0.0" },
        "versions": { "1.0.0": { "name": "tinypkg", "version": "1.0.0", "dist": {
            "tarball": format!("http://pkg.test:{HOST_PORT}/tarballs/tinypkg-1.0.0.tgz")
        } } }
    });
    std::fs::write(dir.join("npm").join("tinypkg"), metadata.to_string()).unwrap();
}

/// `pip download` of the test index's package from `host`, into `into`.
fn pip_download(host: &str, into: &str) -> String {
    format!(
        "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 0 --trusted-host {host} --index-url http://{host}:{HOST_PORT}/simple/ -d {into} tinypkg"
    )
}

/// `npm pack` of the test registry's package from `host`, into the working directory.
fn npm_pack(host: &str) -> String {
    format!(
        "npm pack tinypkg --registry http://{host}:{HOST_PORT}/npm/ --cache ./npm-cache --no-update-notifier --no-audit --no-fund"
    )
}

/// A state root outside every sandbox write root (`/tmp`, where `Env` lives, is one).
fn state_root() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Writes the project's `intendant.toml` and trusts it (its settings relax the policy).
fn trust_config(env: &Env, home: &Path, config: &str) {
    std::fs::write(env.project.path().join("intendant.toml"), config).unwrap();
    let out = env
        .command(&["trust"])
        .env("INTENDANT_HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
}

fn args(task: &str) -> Vec<&str> {
    vec![
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--sandbox",
        "--json",
        "--autonomy",
        "medium",
        task,
    ]
}

fn headless(env: &Env, home: &Path) -> Output {
    env.command(&args("use the network"))
        .env("INTENDANT_HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `browse` in a `proxy` session goes through the session's proxy, its only way out (it ignores
/// the ambient proxy variables): the allowed test host is fetched and recorded, while the
/// test's own loopback listener is refused by `browse`'s own guard and never reached.
#[test]
fn security_egress_browse_goes_through_the_sessions_proxy() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let own = listener.local_addr().unwrap().port();
    let browse = |url: String| json!({ "tool_calls": [ { "name": "browse_url", "arguments": { "url": url } } ] });
    let env = Env::new(json!([
        browse(format!("http://pkg.test:{HOST_PORT}/hello.txt")),
        browse(format!("http://127.0.0.1:{own}/")),
        text_turn("done")
    ]));
    let home = state_root();
    let config = host.config().replace(
        "command_exec = \"auto\"\n",
        "command_exec = \"auto\"\nnetwork = \"auto\"\n",
    );
    trust_config(&env, home.path(), &config);
    let out = headless(&env, home.path());
    assert_success(&out);
    let bodies = env.turn_bodies();
    let first = tool_outputs(&bodies[1]).join("\n");
    assert!(
        first.contains(GREETING),
        "browse through the proxy: {first}"
    );
    let second = tool_outputs(&bodies[2]).pop().unwrap_or_default();
    assert!(
        second.contains("refusing loopback address 127.0.0.1"),
        "refused before any connection: {second}"
    );
    assert!(
        listener.accept().is_err(),
        "nothing reached the test's own listener"
    );
    let events = parse_events(&out.stdout);
    let egress = events_of(&events, "egress");
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "pkg.test" && e["verdict"] == "allowed"),
        "{egress:?}"
    );
}

#[test]
fn security_egress_a_command_reaches_an_allowed_host_only_through_the_proxy() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let own = listener.local_addr().unwrap().port();
    let env = Env::new(json!([
        exec_turn(&format!(
            "curl -sS http://pkg.test:{HOST_PORT}/hello.txt; echo; curl -sS -p http://pkg.test:{HOST_PORT}/hello.txt; echo; env | grep -i _proxy= | sort"
        )),
        exec_turn(&format!(
            "curl -sS --noproxy '' http://127.0.0.1:{own}/; curl -sS --noproxy '' http://localhost:{own}/; curl -sS -m 3 http://127.0.0.1:{own}/ || echo direct-refused; curl -sS -m 3 --noproxy '*' http://{}:{HOST_PORT}/hello.txt || echo no-route",
            host.addr()
        )),
        exec_turn(&format!(
            "git clone -q http://pkg.test:{HOST_PORT}/repo.git clone && cat clone/README"
        )),
        exec_turn(&format!("curl -sS http://other.test:{HOST_PORT}/hello.txt")),
        text_turn("done")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let out = headless(&env, home.path());
    assert_success(&out);
    let bodies = env.turn_bodies();
    let first = tool_outputs(&bodies[1]).join("\n");
    assert_eq!(
        first.matches(GREETING).count(),
        2,
        "plain and CONNECT through the proxy: {first}"
    );
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        assert!(
            first.contains(&format!("{name}=http://127.0.0.1:")),
            "{name}: {first}"
        );
    }
    assert!(
        first.contains("NO_PROXY=localhost,127.0.0.1,::1"),
        "{first}"
    );
    let second = tool_outputs(&bodies[2]).join("\n");
    assert!(
        second.contains("refused 127.0.0.1:") && second.contains("loopback"),
        "the proxy refuses the host's loopback: {second}"
    );
    assert!(
        second.contains("refused localhost:") && second.contains("local host name"),
        "and a local name without looking it up: {second}"
    );
    assert!(
        second.contains("direct-refused"),
        "the session's own loopback has nothing: {second}"
    );
    assert!(
        second.contains("no-route"),
        "no route but the proxy: {second}"
    );
    assert!(
        listener.accept().is_err(),
        "nothing reached the test's own listener"
    );
    let third = tool_outputs(&bodies[3]).join("\n");
    assert!(
        third.contains("cloned through the proxy"),
        "git clone: {third}"
    );
    let fourth = tool_outputs(&bodies[4]).join("\n");
    assert!(
        fourth.contains("refused other.test:8080") && fourth.contains("no human can answer"),
        "an unlisted host, headless: {fourth}"
    );
    let events = parse_events(&out.stdout);
    let egress = events_of(&events, "egress");
    assert!(
        egress.iter().any(|e| e["host"] == "pkg.test"
            && e["verdict"] == "allowed"
            && e["bytes_down"].as_u64() > Some(0)),
        "{egress:#?}"
    );
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "other.test" && e["verdict"] == "refused")
    );
    assert!(
        egress
            .iter()
            .any(|e| e["host"] == "127.0.0.1" && e["verdict"] == "refused")
    );
    // On the record: `sessions show` lists the hosts, and the proxy's socket is gone.
    let id = intendant_core::session_log::list_sessions(home.path())
        .unwrap()
        .remove(0)
        .id;
    let show = env
        .command(&["sessions", "show", &id])
        .env("INTENDANT_HOME", home.path())
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("network  pkg.test:8080 allowed"), "{show}");
    assert!(show.contains("other.test:8080 refused"), "{show}");
    assert!(
        !home
            .path()
            .join("logs")
            .join(&id)
            .join("egress.fd")
            .exists()
    );
}

/// Asks for the next connection to `other.test` on `session`'s output and answers it `verb`.
fn answer_other_host(session: &mut JsonSession, verb: &str) {
    answer_other_host_asked_by(session, verb, "curl -sS http://other.test");
}

/// As [`answer_other_host`], for a command starting `asker`.
fn answer_other_host_asked_by(session: &mut JsonSession, verb: &str, asker: &str) {
    let request: Value = session.wait_for("approval_required");
    assert_eq!(request["category"], "network");
    assert_eq!(request["command_preview"], "connect to other.test:8080");
    assert!(
        request["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("asked by: $ {asker}"))),
        "{request}"
    );
    session.send(&json!({ "action": verb, "id": request["id"] }));
}

/// A session asking about `other.test` (in neither list) twice, at `medium`.
fn asking_session(env: &Env, home: &Path) -> JsonSession {
    JsonSession::spawn({
        let mut cmd = env.command(&args("ask me"));
        cmd.env("INTENDANT_HOME", home);
        cmd
    })
}

#[test]
fn security_egress_an_unlisted_host_is_asked_and_a_skip_is_a_403() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let env = Env::new(json!([
        exec_turn(&format!("curl -sS http://other.test:{HOST_PORT}/hello.txt")),
        exec_turn(&format!("curl -sS http://other.test:{HOST_PORT}/hello.txt")),
        text_turn("done")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let mut session = asking_session(&env, home.path());
    answer_other_host(&mut session, "skip");
    answer_other_host(&mut session, "approve");
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    let bodies = env.turn_bodies();
    let first = tool_outputs(&bodies[1]).join("\n");
    assert!(
        first.contains("refused other.test:8080: skipped by the user")
            && first.contains("[sandbox.network] allow"),
        "{first}"
    );
    let second = tool_outputs(&bodies[2]).join("\n");
    assert!(
        second.contains(GREETING),
        "approved for this connection: {second}"
    );
    let verdicts: Vec<&str> = events_of(&events, "egress")
        .iter()
        .map(|e| e["verdict"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["refused", "allowed"]);
}

/// `allow_host` (the host for good): the connection goes through, the session's next one to
/// the host is not asked, and the host lands in the project's `[sandbox.network] allow` with
/// the file still trusted, so a new headless session reaches it without asking anyone.
#[test]
fn security_egress_a_host_allowed_for_good_is_reached_in_this_and_the_next_session() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let curl = format!("curl -sS http://other.test:{HOST_PORT}/hello.txt");
    let env = Env::new(json!([
        exec_turn(&curl),
        exec_turn(&curl),
        text_turn("done"),
        exec_turn(&curl),
        text_turn("done again")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let mut session = asking_session(&env, home.path());
    answer_other_host(&mut session, "allow_host");
    let (status, events) = session.finish();
    assert!(status.success(), "{events:#?}");
    assert_eq!(
        events_of(&events, "approval_required").len(),
        1,
        "the session's second connection is not asked: {events:#?}"
    );
    let config = std::fs::read_to_string(env.project.path().join("intendant.toml")).unwrap();
    assert!(
        config.lines().any(|l| l.starts_with("allow =")
            && l.contains("\"pkg.test\"")
            && l.contains("\"other.test\"")),
        "{config}"
    );
    // A new session, headless: the file is still trusted, and the host is allowed unasked.
    let out = headless(&env, home.path());
    assert_success(&out);
    let bodies = env.turn_bodies();
    for (turn, body) in [(1, &bodies[1]), (2, &bodies[2]), (4, &bodies[4])] {
        let output = tool_outputs(body).join("\n");
        assert!(output.contains(GREETING), "turn {turn}: {output}");
    }
    let next = parse_events(&out.stdout);
    assert!(
        events_of(&next, "approval_required").is_empty(),
        "{next:#?}"
    );
    let egress = events_of(&next, "egress");
    assert!(
        egress.iter().any(|e| e["host"] == "other.test"
            && e["verdict"] == "allowed"
            && e["rule"].as_str().is_some_and(|r| r.contains("allow"))),
        "{egress:#?}"
    );
}

/// `deny` answers the connection with a 403 the command prints, then ends the turn as any
/// denial does: the model is not asked again and the session ends `denied`.
#[test]
fn security_egress_a_denied_connection_is_a_403_and_ends_the_turn() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let env = Env::new(json!([
        exec_turn(&format!(
            "curl -sS http://other.test:{HOST_PORT}/hello.txt; echo after-the-403"
        )),
        exec_turn("echo never > never.txt"),
        text_turn("done")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let mut session = asking_session(&env, home.path());
    answer_other_host(&mut session, "deny");
    let (status, events) = session.finish();
    assert!(!status.success(), "a denied task must not exit 0");
    let ended = events_of(&events, "session_ended");
    assert_eq!(ended.len(), 1, "{events:#?}");
    assert_eq!(ended[0]["status"], "denied", "{events:#?}");
    assert!(
        ended[0]
            .to_string()
            .contains("denied the connection to other.test:8080"),
        "{}",
        ended[0]
    );
    let outputs = outputs_of(&events, "exec_command").join("\n");
    assert!(
        outputs.contains("refused other.test:8080: denied by the user")
            && outputs.contains("after-the-403"),
        "the command saw the 403 and finished: {outputs}"
    );
    assert_eq!(
        env.server.turns_consumed(),
        1,
        "the model is not asked again"
    );
    assert!(!env.project.path().join("never.txt").exists());
}

/// A real `git clone` from a host in neither list is asked (showing `git` as the asker), and
/// once denied git sees the proxy's 403, clones nothing, and the session ends `denied`; the
/// same clone from the allowed host works in the same session.
#[test]
fn security_egress_a_git_clone_from_an_unlisted_host_is_asked_and_denied() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let env = Env::new(json!([
        exec_turn(&format!(
            "git clone -q http://pkg.test:{HOST_PORT}/repo.git ok && cat ok/README"
        )),
        exec_turn(&format!(
            "git clone -q http://other.test:{HOST_PORT}/repo.git no || echo clone-refused; ls no 2>/dev/null | wc -l"
        )),
        exec_turn("echo never > never.txt"),
        text_turn("done")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let mut session = asking_session(&env, home.path());
    answer_other_host_asked_by(&mut session, "deny", "git clone -q http://other.test");
    let (status, events) = session.finish();
    assert!(!status.success(), "a denied task must not exit 0");
    let outputs = outputs_of(&events, "exec_command").join("\n");
    assert!(
        outputs.contains("cloned through the proxy"),
        "the allowed clone: {outputs}"
    );
    assert!(
        outputs.contains("403") && outputs.contains("clone-refused"),
        "git saw the 403: {outputs}"
    );
    let ended = events_of(&events, "session_ended");
    assert_eq!(ended[0]["status"], "denied", "{events:#?}");
    assert!(!env.project.path().join("no").exists(), "nothing cloned");
    assert!(!env.project.path().join("never.txt").exists());
}

/// Real package managers through the proxy: `pip download` from a package index and `npm pack`
/// from a registry on the allowed test host both get their package; from a host in neither
/// list each is asked, `pip`'s connection skipped and `npm`'s denied, and each sees the 403
/// (the denial then ends the turn).
#[test]
fn security_egress_pip_and_npm_get_packages_from_an_allowed_host_only() {
    let Some(host) = TestHost::start() else {
        return;
    };
    let env = Env::new(json!([
        exec_turn(&format!(
            "{} && ls dl; {} && ls *.tgz",
            pip_download("pkg.test", "dl"),
            npm_pack("pkg.test")
        )),
        exec_turn(&format!(
            "{} || echo pip-refused; ls dl2 2>/dev/null | wc -l",
            pip_download("other.test", "dl2")
        )),
        exec_turn(&format!("{} || echo npm-refused", npm_pack("other.test"))),
        text_turn("done")
    ]));
    let home = state_root();
    trust_config(&env, home.path(), &host.config());
    let mut session = asking_session(&env, home.path());
    answer_other_host_asked_by(&mut session, "skip", "python3 -m pip download");
    answer_other_host_asked_by(&mut session, "deny", "npm pack tinypkg");
    let (status, events) = session.finish();
    assert!(!status.success(), "a denied task must not exit 0");
    let bodies = env.turn_bodies();
    let first = tool_outputs(&bodies[1]).join("\n");
    assert!(
        first.contains("tinypkg-1.0-py3-none-any.whl") && first.contains("tinypkg-1.0.0.tgz"),
        "pip and npm through the proxy: {first}"
    );
    let second = tool_outputs(&bodies[2]).join("\n");
    assert!(
        second.contains("No matching distribution found for tinypkg")
            && second.contains("pip-refused\\n0\\n"),
        "pip saw the refusal and got nothing: {second}"
    );
    let outputs = outputs_of(&events, "exec_command").join("\n");
    assert!(
        outputs.contains("npm-refused") && outputs.contains("403"),
        "npm saw the 403: {outputs}"
    );
    let ended = events_of(&events, "session_ended");
    assert_eq!(ended[0]["status"], "denied", "{events:#?}");
    let egress = events_of(&events, "egress");
    for (host, verdict) in [("pkg.test", "allowed"), ("other.test", "refused")] {
        assert!(
            egress
                .iter()
                .any(|e| e["host"] == host && e["verdict"] == verdict),
            "{host} {verdict}: {egress:#?}"
        );
    }
    assert!(
        !env.project.path().join("dl2").exists()
            || std::fs::read_dir(env.project.path().join("dl2"))
                .unwrap()
                .next()
                .is_none()
    );
}

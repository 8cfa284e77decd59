//! A session's own network (`intendant-runtime --hold-network` and the join each runtime
//! makes): a server a command starts in one batch is reachable from the next, `wait_for_port`
//! works, and no listener of the host (the test's own, on 127.0.0.1) is reachable. As root
//! and as `nobody` (through a user namespace).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use intendant_protocol::network::{HOLD_NETWORK_ARG, HolderReport, SESSION_NETNS_ENV};
use serde_json::{Value, json};

use super::support::{
    BIN, Batch, as_nobody, eventually, nobody, process_gone, running_as_root, tempdir,
};

/// A running holder; killed on drop.
struct Holder {
    child: Child,
    report: HolderReport,
}

impl Holder {
    fn start(program: Command) -> Holder {
        let mut program = program;
        let mut child = program
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let report = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        Holder { child, report }
    }

    /// The value of `INTENDANT_SESSION_NETNS` for its runtimes.
    fn target(&self) -> String {
        match &self.report {
            HolderReport::Ready {
                pid,
                user_ns,
                net_ns,
                ..
            } => format!("{pid}:{user_ns}:{net_ns}"),
            HolderReport::Unavailable { reason } => panic!("no namespace: {reason}"),
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A project directory, its log dir, and the test's own host listener.
struct World {
    _dir: tempfile::TempDir,
    project: PathBuf,
    logs: PathBuf,
    host: TcpListener,
}

impl World {
    fn new() -> World {
        let dir = tempdir();
        let project = dir.path().join("project");
        let logs = project.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let host = TcpListener::bind("127.0.0.1:0").unwrap();
        host.set_nonblocking(true).unwrap();
        World {
            _dir: dir,
            project,
            logs,
            host,
        }
    }

    fn give_to_nobody(&self) {
        let (uid, gid) = nobody();
        for dir in [self._dir.path(), &self.project, &self.logs] {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
        }
    }

    fn batch(&self, commands: Value, target: &str, stage: Option<&Path>) -> Batch {
        let batch = Batch::new(&json!({ "commands": commands }), &self.logs)
            .env("INTENDANT_SANDBOX_WRITE_PATHS", &self.project)
            .env(SESSION_NETNS_ENV, target)
            .dir(&self.project);
        match stage {
            Some(stage) => batch.by_nobody(stage),
            None => batch,
        }
    }

    /// Whether anything connected to the host listener.
    fn host_was_reached(&self) -> bool {
        self.host.accept().is_ok()
    }
}

/// A port free on the host now (the namespace has its own ports; any number works there).
fn some_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `python3 -c` that connects to 127.0.0.1:`port` and prints what it got.
fn connect(port: u16) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket,sys\ntry:\n s=socket.create_connection((\"127.0.0.1\",{port}),timeout=3); s.sendall(b\"ping\\n\"); print(\"reached\", s.recv(64).decode().strip())\nexcept OSError as e:\n print(\"refused\", e)'"
    )
}

/// A line server on 127.0.0.1:`port` answering `pong` to each connection, in the background.
fn serve(port: u16) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\",{port})); s.listen(8)\nwhile True:\n c,_=s.accept(); c.recv(64); c.sendall(b\"pong\\n\"); c.close()' </dev/null >/dev/null 2>&1"
    )
}

fn output(run: &super::support::Run, i: usize) -> String {
    run.value(i)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Two batches of one session: the first starts a server (`wait_for_port`), the second reaches
/// it, and neither reaches the host's listener.
fn a_session_keeps_its_own_loopback(world: &World, holder: &Holder, stage: Option<&Path>) {
    let inner = some_port();
    let host_port = world.host.local_addr().unwrap().port();
    let target = holder.target();
    let first = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": serve(inner), "wait_for_port": inner, "timeout_ms": 10000},
                {"function": "execAsAgent", "nonce": 2, "command": connect(host_port)},
            ]),
            &target,
            stage,
        )
        .run();
    assert!(first.status.success(), "{}", first.stderr);
    assert_eq!(first.value(0)["running"], true, "{}", first.value(0));
    assert!(
        output(&first, 1).starts_with("refused"),
        "{}",
        output(&first, 1)
    );
    let second = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": connect(inner)},
                {"function": "execAsAgent", "nonce": 2, "command": connect(host_port)},
                {"function": "execAsAgent", "nonce": 3, "command": "cat /proc/net/dev | grep -c : ; ip -o link 2>/dev/null | grep -v ' lo:' | wc -l"},
            ]),
            &target,
            stage,
        )
        .run();
    assert!(second.status.success(), "{}", second.stderr);
    assert_eq!(
        output(&second, 0).trim(),
        "reached pong",
        "{}",
        second.value(0)
    );
    assert!(
        output(&second, 1).starts_with("refused"),
        "{}",
        output(&second, 1)
    );
    // Only `lo` lives in the namespace.
    assert_eq!(output(&second, 2).trim(), "1\n0", "{}", second.value(2));
    // The host's own loopback does not see the session's server.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", inner)).is_err(),
        "the session's server is not on the host"
    );
    assert!(
        !world.host_was_reached(),
        "a command reached the host listener"
    );
}

#[test]
fn security_network_as_root_a_session_keeps_its_own_loopback_and_never_reaches_the_host() {
    if !running_as_root() {
        super::security_sandbox::note("needs root; the nobody variant covers ordinary users");
        return;
    }
    let world = World::new();
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG);
    let holder = Holder::start(cmd);
    assert!(
        matches!(holder.report, HolderReport::Ready { user_ns: 0, .. }),
        "{:?}",
        holder.report
    );
    a_session_keeps_its_own_loopback(&world, &holder, None);
}

#[test]
fn security_network_as_an_ordinary_user_a_session_keeps_its_own_loopback() {
    let world = World::new();
    // The batches' copy of the binary is replaced for each batch; the holder runs its own.
    let stage = tempdir();
    let holder_stage = tempdir();
    let (program, stage) = if running_as_root() {
        world.give_to_nobody();
        use std::os::unix::fs::PermissionsExt;
        let dir = holder_stage.path();
        let bin = dir.join("intendant-runtime");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(BIN, &bin).unwrap();
        (as_nobody(&bin), Some(stage.path()))
    } else {
        (Command::new(BIN), None)
    };
    let mut program = program;
    program.arg(HOLD_NETWORK_ARG);
    let holder = Holder::start(program);
    match &holder.report {
        HolderReport::Ready { user_ns, .. } => assert_ne!(*user_ns, 0, "made in a user namespace"),
        HolderReport::Unavailable { reason } => {
            super::security_sandbox::note(&format!(
                "this kernel refuses user namespaces to an ordinary user: {reason}"
            ));
            return;
        }
    }
    a_session_keeps_its_own_loopback(&world, &holder, stage);
}

#[test]
fn a_runtime_whose_holder_is_gone_refuses_to_run() {
    let world = World::new();
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG);
    let mut holder = Holder::start(cmd);
    let target = holder.target();
    let pid = holder.child.id();
    drop(holder.child.stdin.take());
    assert!(
        eventually(std::time::Duration::from_secs(5), || process_gone(pid)),
        "the holder ends when its stdin closes"
    );
    let marker = world.project.join("ran");
    let run = world
        .batch(
            json!([{"function": "execAsAgent", "nonce": 1, "command": format!("touch {}", marker.display())}]),
            &target,
            None,
        )
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot join the session's network namespace"),
        "{}",
        run.stderr
    );
    assert!(!marker.exists(), "nothing ran");
    // A pid that is alive but is not the holder (this test) is refused by its inode.
    let forged = format!("{}:0:1", std::process::id());
    let run = world
        .batch(
            json!([{"function": "execAsAgent", "nonce": 1, "command": "true"}]),
            &forged,
            None,
        )
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(run.stderr.contains("not the session's"), "{}", run.stderr);
    // Garbage in the variable is refused too.
    let run = world
        .batch(
            json!([{"function": "execAsAgent", "nonce": 1, "command": "true"}]),
            "host",
            None,
        )
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(run.stderr.contains("PID:USER_NS:NET_NS"), "{}", run.stderr);
}

#[test]
fn a_holder_told_namespaces_are_missing_says_why_and_exits() {
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG)
        .env("INTENDANT_SANDBOX_SIMULATE_NO_NETNS", "1");
    let mut holder = Holder::start(cmd);
    assert_eq!(
        holder.report,
        HolderReport::Unavailable {
            reason: "network namespaces are unavailable (simulated)".into()
        }
    );
    assert_eq!(holder.child.wait().unwrap().code(), Some(3));
    let bad = Command::new(BIN)
        .args([HOLD_NETWORK_ARG, "--wide-open"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("usage"));
}

/// A relay that cannot be handed to the controller's proxy (its handoff socket is not there)
/// leaves the namespace without a way out, never the host's network: the holder still holds the
/// namespace, reports no relay port and says why.
#[test]
fn a_relay_the_proxy_cannot_be_handed_leaves_the_namespace_closed() {
    if !running_as_root() {
        super::security_sandbox::note("needs root (the namespace is made directly)");
        return;
    }
    let dir = tempdir();
    let missing = dir.path().join("egress.fd");
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG).arg("--relay").arg(&missing);
    let holder = Holder::start(cmd);
    match &holder.report {
        HolderReport::Ready {
            net_ns,
            relay_port,
            relay_error,
            ..
        } => {
            assert_ne!(*net_ns, 0);
            assert_eq!(*relay_port, None);
            let why = relay_error.as_deref().unwrap_or_default();
            assert!(
                why.contains("handoff socket") && why.contains("egress.fd"),
                "{why}"
            );
        }
        HolderReport::Unavailable { reason } => panic!("the namespace was made: {reason}"),
    }
}

/// What a command would try against the holder, which runs outside the sandbox for the
/// session's life: signal it (its namespace would go, and a later batch would then refuse to
/// run), write its memory, read its environment. Each is refused and the holder lives on.
#[test]
fn security_network_a_command_can_neither_signal_nor_write_into_the_holder() {
    if !running_as_root() {
        super::security_sandbox::note(
            "needs root; the holder of an ordinary user is covered by Landlock's signal scoping as in security_kernel",
        );
        return;
    }
    let world = World::new();
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG);
    let mut holder = Holder::start(cmd);
    let pid = holder.child.id();
    let target = holder.target();
    let run = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": format!("kill -9 {pid} 2>&1 && echo killed || echo refused")},
                {"function": "execAsAgent", "nonce": 2, "command": format!("(printf x > /proc/{pid}/mem) 2>/dev/null && echo wrote || echo refused")},
                {"function": "execAsAgent", "nonce": 3, "command": format!("(cat /proc/{pid}/environ > /dev/null) 2>/dev/null && echo read || echo refused")},
            ]),
            &target,
            None,
        )
        .run();
    assert!(run.status.success(), "{}", run.stderr);
    for i in 0..3 {
        assert!(
            output(&run, i).trim_end().ends_with("refused"),
            "attack {i}: {}",
            run.value(i)
        );
    }
    assert!(
        holder.child.try_wait().unwrap().is_none(),
        "the holder survives every attack"
    );
}

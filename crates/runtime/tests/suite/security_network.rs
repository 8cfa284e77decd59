//! A session's own network (`intendant-runtime --hold-network`, the namespace then held by
//! descriptor as the controller holds it, and the join each runtime makes through the
//! descriptors it inherits): a server a command starts in one batch is reachable from the next,
//! `wait_for_port` works, no listener of the host (the test's own, on 127.0.0.1) is reachable
//! and no command inherits a namespace's descriptor. As root and as `nobody` (through a user
//! namespace).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
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

    /// Opens the namespace the holder reported, as the controller does while the holder is
    /// its unreaped child.
    fn hold(&self) -> Held {
        let HolderReport::Ready {
            pid,
            user_ns,
            net_ns,
            ..
        } = &self.report
        else {
            panic!("no namespace: {:?}", self.report)
        };
        let open = |kind: &str, inode: u64| {
            let file = std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).unwrap();
            assert_eq!(file.metadata().unwrap().ino(), inode, "{kind}");
            (OwnedFd::from(file), inode)
        };
        Held {
            user: (*user_ns != 0).then(|| open("user", *user_ns)),
            net: open("net", *net_ns),
        }
    }

    /// Lets the holder go, as the controller does once it holds the namespace.
    fn end(mut self) {
        let pid = self.child.id();
        drop(self.child.stdin.take());
        assert!(
            eventually(std::time::Duration::from_secs(5), || process_gone(pid)),
            "the holder ends when its stdin closes"
        );
    }
}

/// A session's namespace held by descriptor, as the controller holds it.
struct Held {
    user: Option<(OwnedFd, u64)>,
    net: (OwnedFd, u64),
}

impl Held {
    /// The value of `INTENDANT_SESSION_NETNS` for a runtime that inherits [`Held::fds`].
    fn target(&self) -> String {
        let net = format!("net={}@{}", self.net.0.as_raw_fd(), self.net.1);
        match &self.user {
            Some((fd, inode)) => format!("user={}@{inode},{net}", fd.as_raw_fd()),
            None => net,
        }
    }

    fn fds(&self) -> Vec<RawFd> {
        let mut fds: Vec<RawFd> = self.user.iter().map(|(fd, _)| fd.as_raw_fd()).collect();
        fds.push(self.net.0.as_raw_fd());
        fds
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

    /// A batch of the session `held`.
    fn batch(&self, commands: Value, held: &Held, stage: Option<&Path>) -> Batch {
        self.batch_with(commands, &held.target(), held.fds(), stage)
    }

    /// A batch told `target` and inheriting `fds`, whatever they are.
    fn batch_with(
        &self,
        commands: Value,
        target: &str,
        fds: Vec<RawFd>,
        stage: Option<&Path>,
    ) -> Batch {
        let batch = Batch::new(&json!({ "commands": commands }), &self.logs)
            .env("INTENDANT_SANDBOX_WRITE_PATHS", &self.project)
            .env(SESSION_NETNS_ENV, target)
            .dir(&self.project);
        match stage {
            Some(stage) => batch.by_nobody(stage),
            None => batch,
        }
        .inherit(fds)
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

/// The namespace descriptors a command's shell has open (`net:[...]`, `user:[...]`).
const NAMESPACE_DESCRIPTORS: &str = "for f in /proc/$$/fd/*; do readlink \"$f\"; done | grep -cE '^(net|user|mnt|pid|ipc|uts|cgroup|time):\\[' ; true";

/// Two batches of one session whose namespace is held by descriptor alone (its holder gone):
/// the first starts a server (`wait_for_port`), the second reaches it, neither reaches the
/// host's listener, and no command holds a namespace's descriptor.
fn a_session_keeps_its_own_loopback(world: &World, holder: Holder, stage: Option<&Path>) {
    let inner = some_port();
    let host_port = world.host.local_addr().unwrap().port();
    let held = holder.hold();
    holder.end();
    let first = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": serve(inner), "wait_for_port": inner, "timeout_ms": 10000},
                {"function": "execAsAgent", "nonce": 2, "command": connect(host_port)},
                {"function": "execAsAgent", "nonce": 3, "command": NAMESPACE_DESCRIPTORS},
            ]),
            &held,
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
    assert_eq!(
        output(&first, 2).trim(),
        "0",
        "a command inherits no namespace: {}",
        first.value(2)
    );
    let second = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": connect(inner)},
                {"function": "execAsAgent", "nonce": 2, "command": connect(host_port)},
                {"function": "execAsAgent", "nonce": 3, "command": "cat /proc/net/dev | grep -c : ; ip -o link 2>/dev/null | grep -v ' lo:' | wc -l"},
            ]),
            &held,
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
    a_session_keeps_its_own_loopback(&world, holder, None);
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
    a_session_keeps_its_own_loopback(&world, holder, stage);
}

/// A runtime joins only through a descriptor it inherited that is the namespace of the inode
/// it was told: anything else (a number not open, another namespace, a file that is no
/// namespace, the old `PID:USER_NS:NET_NS` form, garbage) and it refuses to run (exit 3).
#[test]
fn a_runtime_given_anything_but_its_sessions_namespace_refuses_to_run() {
    let world = World::new();
    let mut cmd = Command::new(BIN);
    cmd.arg(HOLD_NETWORK_ARG);
    let holder = Holder::start(cmd);
    let held = holder.hold();
    holder.end();
    let session_net = held.net.1;
    let host_net = std::fs::File::open("/proc/self/ns/net").unwrap();
    let file = std::fs::File::open(BIN).unwrap();
    let file_inode = file.metadata().unwrap().ino();
    let marker = world.project.join("ran");
    let touch = json!([{"function": "execAsAgent", "nonce": 1, "command": format!("touch {}", marker.display())}]);
    let cases: Vec<(String, Vec<RawFd>, &str)> = vec![
        // Told a descriptor it was not given.
        (
            format!("net=900@{session_net}"),
            Vec::new(),
            "descriptor 900 (the net namespace) is not open",
        ),
        // The host's namespace, told as the session's.
        (
            format!("net={}@{session_net}", host_net.as_raw_fd()),
            vec![host_net.as_raw_fd()],
            "not the session's net namespace",
        ),
        // A file that is no namespace, told by its own inode.
        (
            format!("net={}@{file_inode}", file.as_raw_fd()),
            vec![file.as_raw_fd()],
            "setns(descriptor",
        ),
        // What a runtime was told before the namespace was held by descriptor.
        (
            format!("{}:0:{session_net}", std::process::id()),
            Vec::new(),
            "net=FD@INODE",
        ),
        ("host".to_owned(), Vec::new(), "net=FD@INODE"),
    ];
    for (target, fds, said) in cases {
        let run = world.batch_with(touch.clone(), &target, fds, None).run();
        assert_eq!(run.code(), 3, "{target}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("cannot join the session's network namespace")
                && run.stderr.contains(said),
            "{target}: {}",
            run.stderr
        );
        assert!(!marker.exists(), "{target}: nothing ran");
    }
    // The session's own, for contrast, runs.
    let run = world.batch(touch, &held, None).run();
    assert!(run.status.success(), "{}", run.stderr);
    assert!(marker.exists());
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

/// What a command would try against a holder, which runs outside the sandbox until its
/// controller holds the namespace (another session's may be starting): signal it, write its
/// memory, read its environment. Each is refused and the holder lives on.
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
    let held = holder.hold();
    let run = world
        .batch(
            json!([
                {"function": "execAsAgent", "nonce": 1, "command": format!("kill -9 {pid} 2>&1 && echo killed || echo refused")},
                {"function": "execAsAgent", "nonce": 2, "command": format!("(printf x > /proc/{pid}/mem) 2>/dev/null && echo wrote || echo refused")},
                {"function": "execAsAgent", "nonce": 3, "command": format!("(cat /proc/{pid}/environ > /dev/null) 2>/dev/null && echo read || echo refused")},
            ]),
            &held,
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

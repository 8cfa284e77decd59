//! Attacks through the kernel's other doors, through the built binary: a command signals or
//! connects to an abstract UNIX socket of a process outside its session, plants a setuid or
//! setgid file or a file capability, or uses a capability root needs for no build. Root is the
//! main case (CI is root); the signal and socket attacks also run as `nobody`, whom DAC lets
//! signal its own processes and connect to any abstract socket.

use super::security_sandbox::{Arena, as_root, assert_refused, note, sh, shell_batch};
use super::support::{Run, display_number, nobody, running_as_root, tempdir, xvfb_present};
use intendant_protocol::runtime::{
    SANDBOX_DEGRADED_WARNING, SANDBOX_OOM_WARNING, SANDBOX_PRIORITY_WARNING, SANDBOX_SCOPE_WARNING,
    SESSION_NICE, SESSION_OOM_SCORE_ADJ,
};
use serde_json::json;
use std::fs;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::process::{Child, Command};

/// Capabilities the sandbox drops (numbers of `linux/capability.h`): at least these.
const DROPPED: &[(u32, &str)] = &[
    (9, "CAP_LINUX_IMMUTABLE"),
    (12, "CAP_NET_ADMIN"),
    (13, "CAP_NET_RAW"),
    (16, "CAP_SYS_MODULE"),
    (17, "CAP_SYS_RAWIO"),
    (19, "CAP_SYS_PTRACE"),
    (21, "CAP_SYS_ADMIN"),
    (22, "CAP_SYS_BOOT"),
    (23, "CAP_SYS_NICE"),
    (24, "CAP_SYS_RESOURCE"),
    (25, "CAP_SYS_TIME"),
    (27, "CAP_MKNOD"),
    (31, "CAP_SETFCAP"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
];

/// Capabilities root keeps for package tools: CHOWN, DAC_OVERRIDE, FOWNER, SETGID, SETUID.
const KEPT: &[u32] = &[0, 1, 3, 6, 7];

/// The capability sets of a `/proc/<pid>/status` text, by name (`CapEff` ...).
fn capability_sets(status: &str) -> Vec<(String, u64)> {
    status
        .lines()
        .filter(|l| l.starts_with("Cap"))
        .map(|l| {
            let (name, hex) = l.split_once(':').unwrap();
            (
                name.to_owned(),
                u64::from_str_radix(hex.trim(), 16).unwrap(),
            )
        })
        .collect()
}

fn stdout(run: &Run, i: usize) -> String {
    run.value(i)["stdout"].as_str().unwrap().to_owned()
}

/// Every result line `name=...` the probe printed, as (name, outcome).
fn outcomes(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, o)| (n.to_owned(), o.to_owned()))
        .collect()
}

/// Each attack in `python3`, printing `name=ok` or `name=<errno>`; raw x86_64 call numbers
/// where Python has no wrapper (`creat`, `fchmodat2`, `openat2`).
const SET_ID_PROBE: &str = r#"
import ctypes, os, shutil, stat, struct, sys
d = sys.argv[1]
p = lambda n: os.path.join(d, n)
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(f"{name}=ok")
    except OSError as e:
        print(f"{name}={e.errno}")
def raw(nr, *args):
    def call():
        if libc.syscall(nr, *args) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return call
attempt("open_setuid", lambda: os.close(os.open(p("open_setuid"), os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open_setgid", lambda: os.close(os.open(p("open_setgid"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o2755)))
attempt("tmpfile_setuid", lambda: os.close(os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o4755)))
attempt("mknod_setuid", lambda: os.mknod(p("mknod_setuid"), stat.S_IFREG | 0o4755))
attempt("mknod_setgid", lambda: os.mknod(p("mknod_setgid"), 0o2755))
attempt("creat_setuid", raw(85, p("creat_setuid").encode(), 0o4755))
open(p("plain"), "w").close()
attempt("fchmodat2_setuid", raw(452, -100, p("plain").encode(), 0o4755, 0))
how = struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0)
attempt("openat2_setuid", raw(437, -100, p("openat2_setuid").encode(), how, len(how)))
shutil.copy("/bin/true", p("capped"))
# A valid VFS_CAP_REVISION_2 blob: cap_setuid permitted and effective.
blob = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)
attempt("setxattr_capability", lambda: os.setxattr(p("capped"), "security.capability", blob))
attempt("control_open", lambda: os.close(os.open(p("control_open"), os.O_CREAT | os.O_WRONLY, 0o755)))
"#;

#[cfg(target_arch = "x86_64")]
#[test]
fn a_root_command_makes_no_setuid_setgid_or_capability_file() {
    if !as_root("a_root_command_makes_no_setuid_setgid_or_capability_file") {
        return;
    }
    let a = Arena::new();
    let probe = a.inside.join("probe.py");
    fs::write(&probe, SET_ID_PROBE).unwrap();
    let i = sh(&a.inside);
    let mut attacks = Vec::new();
    for (tool, attack) in [
        (
            "setcap",
            format!("cp /bin/true {i}/setcap && setcap cap_setuid+ep {i}/setcap"),
        ),
        (
            "setfattr",
            format!(
                "cp /bin/true {i}/setfattr && setfattr -n security.capability -v 0x0100000280000000000000000000000000000000 {i}/setfattr"
            ),
        ),
    ] {
        let present = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        match present {
            true => attacks.push(attack),
            false => note(&format!("{tool} is not installed: its attack is not run")),
        }
    }
    let control = format!(
        "python3 {} {i} && cp /bin/true {i}/tool && chmod 0755 {i}/tool && chown nobody {i}/tool && {i}/tool",
        sh(&probe)
    );
    let run = a.run(shell_batch(&attacks, &control));
    let control = assert_refused(&run, &attacks);
    let results = outcomes(control["stdout"].as_str().unwrap());
    let eperm = libc::EPERM.to_string();
    let enosys = libc::ENOSYS.to_string();
    let expected = [
        ("open_setuid", &eperm),
        ("open_setgid", &eperm),
        ("tmpfile_setuid", &eperm),
        ("mknod_setuid", &eperm),
        ("mknod_setgid", &eperm),
        ("creat_setuid", &eperm),
        ("fchmodat2_setuid", &eperm),
        // Its mode sits in memory the filter cannot read: the call is answered as missing,
        // and the C library and programs fall back to openat.
        ("openat2_setuid", &enosys),
        // No CAP_SETFCAP.
        ("setxattr_capability", &eperm),
        ("control_open", &"ok".to_owned()),
    ];
    for (name, want) in expected {
        let got = results.iter().find(|(n, _)| n == name);
        assert_eq!(
            got.map(|(_, o)| o),
            Some(want),
            "{name}: {results:?} {control}"
        );
    }
    use std::os::unix::fs::MetadataExt;
    for entry in fs::read_dir(&a.inside).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "{:?} is setuid or setgid", entry.path());
        let path = std::ffi::CString::new(entry.path().to_str().unwrap()).unwrap();
        let name = std::ffi::CString::new("security.capability").unwrap();
        // SAFETY: both strings are NUL-terminated; a NULL buffer of size 0 only asks the size.
        let size = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
        assert_eq!(size, -1, "{:?} carries file capabilities", entry.path());
    }
    let owner = fs::metadata(a.inside.join("tool")).unwrap().uid();
    assert_eq!(owner, nobody().0, "root keeps CAP_CHOWN");
}

#[test]
fn root_keeps_what_package_tools_need_and_loses_the_rest() {
    if !as_root("root_keeps_what_package_tools_need_and_loses_the_rest") {
        return;
    }
    let a = Arena::new();
    let run = a.run(json!([
        {"function": "execAsAgent", "nonce": 1, "command": "cat /proc/self/status"},
        // A packet socket would read loopback traffic (the dashboard's token): no CAP_NET_RAW.
        {"function": "execAsAgent", "nonce": 2, "command": "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'"},
        // Package tools drop to their own users: CAP_SETUID and CAP_SETGID stay.
        {"function": "execAsAgent", "nonce": 3, "command": "setpriv --reuid=nobody --regid=nogroup --clear-groups id -u"},
    ]));
    assert!(run.status.success(), "{}", run.stderr);
    let sets = capability_sets(&stdout(&run, 0));
    assert_eq!(sets.len(), 5, "{sets:?}");
    for (set, mask) in &sets {
        for (cap, name) in DROPPED {
            assert_eq!(mask & (1 << cap), 0, "{name} left in {set}: {mask:#x}");
        }
    }
    let effective = sets.iter().find(|(n, _)| n == "CapEff").unwrap().1;
    for cap in KEPT {
        assert_ne!(
            effective & (1 << cap),
            0,
            "capability {cap} lost: {effective:#x}"
        );
    }
    assert_ne!(run.value(1)["exit_code"], 0, "{}", run.value(1));
    assert_eq!(
        stdout(&run, 2).trim(),
        nobody().0.to_string(),
        "{}",
        run.value(2)
    );
}

/// A process and an abstract socket outside the session, which every command tries to reach.
struct Outside {
    victim: Child,
    listener: UnixListener,
    name: String,
}

impl Outside {
    /// `sleep` as the test's user, or as `nobody` when `as_nobody`.
    fn new(tag: &str, as_nobody: bool) -> Outside {
        let victim = if as_nobody {
            let (uid, gid) = nobody();
            Command::new("setpriv")
                .args([format!("--reuid={uid}"), format!("--regid={gid}")])
                .args(["--clear-groups", "sleep", "60"])
                .spawn()
                .unwrap()
        } else {
            Command::new("sleep").arg("60").spawn().unwrap()
        };
        let name = format!("intendant-test-{}-{tag}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        Outside {
            victim,
            listener,
            name,
        }
    }

    /// The attacks: signals to the victim, a connect to the socket.
    fn attacks(&self) -> Vec<String> {
        let pid = self.victim.id();
        vec![
            format!("kill -TERM {pid}"),
            format!("kill -KILL {pid}"),
            format!("kill -0 {pid}"),
            connect(&self.name),
        ]
    }

    /// The victim lives and nobody connected.
    fn assert_unreached(&mut self) {
        assert!(self.victim.try_wait().unwrap().is_none(), "the victim died");
        let accepted = self.listener.accept();
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a command connected: {accepted:?}"
        );
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
    }
}

/// A command connecting to the abstract socket `name`; exits non-zero when refused.
fn connect(name: &str) -> String {
    format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect(b'\\0{name}')\""
    )
}

/// What a command may still do with its own processes: signal its child, and listen on and
/// connect to an abstract socket of its own.
fn own_processes_control(tag: &str) -> String {
    let own = format!("intendant-test-{}-{tag}-own", std::process::id());
    format!(
        "sleep 30 & p=$!; kill -TERM $p; wait $p; test $? -eq 143 && python3 -c \"import socket; l = socket.socket(socket.AF_UNIX); l.bind(b'\\0{own}'); l.listen(); c = socket.socket(socket.AF_UNIX); c.connect(b'\\0{own}')\""
    )
}

#[test]
fn signals_and_abstract_sockets_outside_the_session_are_refused() {
    let mut outside = Outside::new("root", false);
    let a = Arena::new();
    let attacks = outside.attacks();
    let run = a.run(shell_batch(&attacks, &own_processes_control("root")));
    assert_refused(&run, &attacks);
    for n in 0..3 {
        let r = run.value(n);
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("Operation not permitted"),
            "a plain EPERM: {r}"
        );
    }
    outside.assert_unreached();
}

#[test]
fn as_an_ordinary_user_signals_and_sockets_outside_are_refused_and_the_bounding_set_is_lowered() {
    if !running_as_root() {
        note(
            "as_an_ordinary_user...: the tests already run as an ordinary user; the root-named test covers it",
        );
        return;
    }
    // The victim is nobody's own process: DAC alone would let nobody signal it.
    let mut outside = Outside::new("nobody", true);
    let a = Arena::new();
    let (uid, _) = nobody();
    a.hand_to_nobody();
    let stage = tempdir();
    let attacks = outside.attacks();
    let mut commands = shell_batch(&attacks, &own_processes_control("nobody"));
    commands.as_array_mut().unwrap().push(
        json!({"function": "execAsAgent", "nonce": 1000, "command": "cat /proc/self/status"}),
    );
    let run = a.batch(commands).by_nobody(stage.path()).run();
    assert_refused(&run, &attacks);
    outside.assert_unreached();
    let status = stdout(&run, attacks.len() + 1);
    assert!(status.contains(&format!("Uid:\t{uid}")), "{status}");
    if run.stderr.contains(SANDBOX_DEGRADED_WARNING) {
        note(&format!(
            "no user namespace here, so no bounding set to lower: {}",
            run.stderr
        ));
        return;
    }
    for (set, mask) in capability_sets(&status) {
        for (cap, name) in DROPPED {
            assert_eq!(mask & (1 << cap), 0, "{name} left in {set}: {mask:#x}");
        }
    }
}

#[test]
fn a_later_batch_cannot_signal_what_an_earlier_batch_left_running() {
    // Each runtime is a Landlock domain of its own, a sibling of the one before: a background
    // server of an earlier batch can be neither signalled nor reached by an abstract socket
    // from a later one (it still dies with the session, see `containment`).
    let a = Arena::new();
    let start = "setsid sleep 60 > /dev/null 2>&1 < /dev/null & echo $!";
    let first = a.run(json!([{"function": "execAsAgent", "nonce": 1, "command": start}]));
    assert!(first.status.success(), "{}", first.stderr);
    let pid: i32 = stdout(&first, 0).trim().parse().unwrap();
    let second = a.run(json!([
        {"function": "execAsAgent", "nonce": 1, "command": format!("kill -TERM {pid}")},
    ]));
    let refused = second.value(0);
    // SAFETY: kill(2) with signal 0 only checks; then the test's own cleanup.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    // SAFETY: kill(2) takes integers only and touches no memory of ours.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_ne!(refused["exit_code"], 0, "{refused}");
    assert!(alive, "the earlier batch's process was killed");
}

#[test]
fn a_kernel_without_scoping_is_said_once_and_refused_under_require_full() {
    let outside = Outside::new("unscoped", false);
    let a = Arena::new();
    let probe = format!("kill -0 {}", outside.victim.id());
    let batch = |require_full: bool| {
        let b = a
            .batch(json!([{"function": "execAsAgent", "nonce": 1, "command": probe}]))
            .env("INTENDANT_SANDBOX_SIMULATE_NO_SCOPES", "1");
        match require_full {
            true => b.env("INTENDANT_SANDBOX_REQUIRE_FULL", "1"),
            false => b,
        }
        .run()
    };
    let run = batch(false);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        run.stderr.matches(SANDBOX_SCOPE_WARNING).count(),
        1,
        "{}",
        run.stderr
    );
    for says in ["signal", "abstract", "require_full = true"] {
        assert!(run.stderr.contains(says), "{says}: {}", run.stderr);
    }
    // The warning is honest: without scoping the outside process is reachable.
    assert_eq!(run.value(0)["exit_code"], 0, "{}", run.value(0));
    let run = batch(true);
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing may run: {}", run.stdout);
    assert!(
        run.stderr.contains("require_full = false"),
        "{}",
        run.stderr
    );
    // With the kernel's scoping nothing is said.
    let run = a.run(json!([{"function": "execAsAgent", "nonce": 1, "command": "true"}]));
    assert!(
        !run.stderr.contains(SANDBOX_SCOPE_WARNING),
        "{}",
        run.stderr
    );
}

#[test]
fn a_granted_user_display_keeps_abstract_sockets_reachable_and_signals_scoped() {
    // X clients reach the user's display through its abstract socket and do not fall back to
    // the path socket when refused, so a human's grant of the display leaves that scope out.
    let mut outside = Outside::new("display", false);
    let a = Arena::new();
    let run = a
        .batch(json!([
            {"function": "execAsAgent", "nonce": 1, "command": connect(&outside.name)},
            {"function": "execAsAgent", "nonce": 2, "command": format!("kill -0 {}", outside.victim.id())},
        ]))
        .env("INTENDANT_USER_DISPLAY_GRANTED", "1")
        .run();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.value(0)["exit_code"], 0, "{}", run.value(0));
    assert_ne!(run.value(1)["exit_code"], 0, "{}", run.value(1));
    assert!(outside.listener.accept().is_ok(), "the connect arrived");
    assert!(outside.victim.try_wait().unwrap().is_none());
}

#[test]
fn a_virtual_display_the_runtime_starts_is_reached_through_its_abstract_socket() {
    // The runtime's own Xvfb is inside its domain: X clients, which try the abstract socket
    // first and give up when refused, still reach it.
    if !xvfb_present() {
        return;
    }
    let a = Arena::new();
    let n = display_number(9);
    // Xvfb makes its lock file and socket in /tmp.
    let roots = std::env::join_paths([a.inside.as_path(), std::path::Path::new("/tmp")]).unwrap();
    let handshake = "python3 -c \"import os, socket; s = socket.socket(socket.AF_UNIX); \
        s.connect(b'\\0/tmp/.X11-unix/X' + os.environ['DISPLAY'].lstrip(':').encode()); \
        s.sendall(b'l\\0\\x0b\\0\\0\\0\\0\\0\\0\\0\\0\\0'); print('accepted', s.recv(1)[0])\"";
    let run = a
        .batch(json!([
            {"function": "execAsAgent", "nonce": 1, "display": n, "command": handshake},
        ]))
        .env("INTENDANT_SANDBOX_WRITE_PATHS", roots)
        .run();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(stdout(&run, 0), "accepted 1\n", "{}", run.value(0));
}

/// Prints each command's `oom_score_adj`, then tries to lower it below the controller's and to
/// take a realtime priority.
fn oom_and_priority_probe() -> serde_json::Value {
    json!([
        {"function": "execAsAgent", "nonce": 1, "command": "cat /proc/self/oom_score_adj"},
        // Below the controller's 0: the out-of-memory killer would take the controller first.
        {"function": "execAsAgent", "nonce": 2, "command": "echo -1000 > /proc/self/oom_score_adj"},
        // A busy loop at a realtime priority would starve the controller of the CPU.
        {"function": "execAsAgent", "nonce": 3, "command": "chrt -f 10 true"},
        {"function": "execAsAgent", "nonce": 4, "command": "sh -c 'sleep 0; cat /proc/self/oom_score_adj'"},
        // Its nice value (the 19th field), and in what it starts.
        {"function": "execAsAgent", "nonce": 5, "command": "cut -d' ' -f19 /proc/self/stat; sh -c 'sleep 0; cut -d\\  -f19 /proc/self/stat'"},
        // Back at the controller's priority, its busy loops would slow it as much as themselves.
        {"function": "execAsAgent", "nonce": 6, "command": "renice -n 0 -p $$"},
    ])
}

/// Asserts what [`oom_and_priority_probe`] must find: every command marked at
/// `SESSION_OOM_SCORE_ADJ` and niced to `SESSION_NICE`, the lowering and the priorities refused,
/// no warning.
fn assert_first_to_go(run: &Run, who: &str) {
    assert!(run.status.success(), "{who}: {}", run.stderr);
    let marked = SESSION_OOM_SCORE_ADJ.to_string();
    assert_eq!(stdout(run, 0).trim(), marked, "{who}: {}", run.value(0));
    assert_ne!(run.value(1)["exit_code"], 0, "{who}: {}", run.value(1));
    assert_ne!(run.value(2)["exit_code"], 0, "{who}: {}", run.value(2));
    assert_eq!(
        stdout(run, 3).trim(),
        marked,
        "{who}: what a command starts inherits it: {}",
        run.value(3)
    );
    let niced = format!("{SESSION_NICE}\n{SESSION_NICE}");
    assert_eq!(stdout(run, 4).trim(), niced, "{who}: {}", run.value(4));
    assert_ne!(run.value(5)["exit_code"], 0, "{who}: {}", run.value(5));
    assert!(
        !run.stderr.contains(SANDBOX_OOM_WARNING) && !run.stderr.contains(SANDBOX_PRIORITY_WARNING),
        "{who}: {}",
        run.stderr
    );
}

#[test]
fn a_sessions_processes_are_the_oom_killers_first_choice_and_cannot_take_the_controllers_place() {
    let a = Arena::new();
    assert_first_to_go(&a.run(oom_and_priority_probe()), "the test's user");
    // A runtime its parent marked higher, or niced further, keeps that: it only raises them.
    let run = a
        .batch(json!([{"function": "execAsAgent", "nonce": 1, "command": "cat /proc/self/oom_score_adj; cut -d' ' -f19 /proc/self/stat"}]))
        .under(&["sh", "-c", "echo 900 > /proc/self/oom_score_adj && exec nice -n 15 \"$0\""])
        .run();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(stdout(&run, 0).trim(), "900\n15", "{}", run.value(0));
    if !running_as_root() {
        return;
    }
    // An ordinary user raises its own mark as well; its `/proc/self` files are root's once the
    // runtime is not dumpable, so the mark is set before.
    a.hand_to_nobody();
    let stage = tempdir();
    let run = a
        .batch(oom_and_priority_probe())
        .by_nobody(stage.path())
        .run();
    assert_first_to_go(&run, "nobody");
}

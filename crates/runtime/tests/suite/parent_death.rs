//! The runtime dies with its parent and takes what it started along: a controller that is
//! killed mid-batch leaves neither `intendant-runtime` nor its commands running.

use super::support::{BIN, eventually, process_gone, tempdir};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// SIGKILLs the process groups (and processes) it holds when dropped, so a failing test leaves
/// no `sleep 1000` behind.
#[derive(Default)]
struct Reaper(Vec<libc::pid_t>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: plain syscalls; stray ESRCH is fine.
            unsafe {
                libc::killpg(*pid, libc::SIGKILL);
                libc::kill(*pid, libc::SIGKILL);
            }
        }
    }
}

/// The pids of the processes in process group `pgid` that are not zombies.
fn live_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
        })
        .collect()
}

/// The children of `parent` that are not zombies.
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| !process_gone(*p))
        .collect()
}

/// Starts an `sh` that runs the runtime in the background on `input` and prints its pid; returns
/// the shell and the runtime's pid.
fn runtime_under_intermediate(input: &Path, log_dir: &Path) -> (Child, u32) {
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" <"$1" >/dev/null 2>&1 & echo $!; wait"#)
        .arg(BIN)
        .arg(input)
        .env("INTENDANT_LOG_DIR", log_dir)
        .env_remove("INTENDANT_SANDBOX_WRITE_PATHS")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(sh.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (sh, line.trim().parse().unwrap())
}

#[test]
fn killing_the_parent_kills_the_runtime_and_its_command_group() {
    let dir = tempdir();
    let input = dir.path().join("input.json");
    // `; true` keeps bash as the group leader, so `sleep` is a grandchild in the same group.
    let batch = json!({"commands": [
        {"function": "execAsAgent", "nonce": 1, "command": "sleep 1000; true", "timeout_ms": 600_000u64}
    ]});
    std::fs::write(&input, serde_json::to_vec(&batch).unwrap()).unwrap();
    let (mut sh, runtime) = runtime_under_intermediate(&input, dir.path());
    let mut reaper = Reaper(vec![runtime as libc::pid_t]);

    let mut command = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            command = children_of(runtime).first().copied();
            command.is_some_and(|pgid| live_members(pgid).len() >= 2)
        }),
        "the runtime never started its command"
    );
    let pgid = command.unwrap();
    reaper.0.push(pgid as libc::pid_t);

    sh.kill().unwrap();
    sh.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || process_gone(runtime)),
        "the runtime outlived its parent"
    );
    assert!(
        eventually(Duration::from_secs(10), || live_members(pgid).is_empty()),
        "the command's process group outlived the runtime: {:?}",
        live_members(pgid)
    );
}

#[test]
fn sigterm_to_the_runtime_kills_its_command_group_too() {
    let dir = tempdir();
    let mut runtime = Command::new(BIN)
        .env("INTENDANT_LOG_DIR", dir.path())
        .env_remove("INTENDANT_SANDBOX_WRITE_PATHS")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let batch = json!({"commands": [
        {"function": "execAsAgent", "nonce": 1, "command": "sleep 1000; true", "timeout_ms": 600_000u64}
    ]});
    let mut stdin = runtime.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, &serde_json::to_vec(&batch).unwrap()).unwrap();
    drop(stdin);
    let mut command = None;
    assert!(eventually(Duration::from_secs(10), || {
        command = children_of(runtime.id()).first().copied();
        command.is_some_and(|pgid| live_members(pgid).len() >= 2)
    }));
    let pgid = command.unwrap();
    let _reaper = Reaper(vec![pgid as libc::pid_t]);
    // SAFETY: plain syscall on our own unreaped child.
    unsafe { libc::kill(runtime.id() as libc::pid_t, libc::SIGTERM) };
    // It ends by the signal, never by reporting the command its own teardown killed.
    let status = runtime.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM),
        "{status:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || live_members(pgid).is_empty()),
        "the command's process group outlived the runtime: {:?}",
        live_members(pgid)
    );
}

/// The pid a file the program under test wrote holds, once it is there.
fn pid_in(path: &Path) -> u32 {
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        }),
        "{} was never written",
        path.display()
    );
    pid.unwrap_or_default()
}

/// A program that leaves processes every way a worker's tools might: one in a session of its
/// own, one orphaned at once, and itself and its last child deaf to `SIGTERM`.
const LEAVES_PROCESSES: &str = r#"trap '' TERM
setsid sleep 1001 & echo $! > "$DIR/escaped"
sh -c 'sleep 1002 & echo $! > "$DIR/orphan"'
echo $$ > "$DIR/leader"
exec sleep 1003"#;

/// Starts `sh` as the controller of `mode` (`--guard` or `--sandboxed-stdio`) around `sh -c
/// LEAVES_PROCESSES`, stdin from `stdin`, and returns the shell and the runtime's pid.
fn guard_under_intermediate(
    mode: &str,
    dir: &Path,
    stdin: &Path,
    env: &[(&str, String)],
) -> (Child, u32) {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(r#""$0" "$1" $$ -- sh -c "$2" <"$3" >/dev/null 2>&1 & echo $!; wait"#)
        .arg(BIN)
        .arg(mode)
        .arg(LEAVES_PROCESSES)
        .arg(stdin)
        .env("DIR", dir)
        .stdout(Stdio::piped());
    for (k, v) in env {
        sh.env(k, v);
    }
    let mut sh = sh.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(sh.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (sh, line.trim().parse().unwrap())
}

/// Kills the controller `sh` and asserts that the guard `runtime` and every process the program
/// left in `dir`'s files end.
fn controller_killed_ends_all(mut sh: Child, runtime: u32, dir: &Path) {
    let pids: Vec<u32> = ["leader", "escaped", "orphan"]
        .iter()
        .map(|name| pid_in(&dir.join(name)))
        .collect();
    let _reaper = Reaper(
        pids.iter()
            .map(|p| *p as libc::pid_t)
            .chain([runtime as libc::pid_t])
            .collect(),
    );
    assert!(pids.iter().all(|p| !process_gone(*p)));
    // The orphan was adopted by the guard, a subreaper, not by init.
    assert!(
        children_of(runtime).contains(&pids[2]),
        "the orphan is not the guard's: {:?}",
        children_of(runtime)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !process_gone(pids[0]),
        "the program ended with its controller alive"
    );
    sh.kill().unwrap();
    sh.wait().unwrap();
    for (pid, what) in pids
        .iter()
        .zip(["the program", "its setsid child", "its orphan"])
    {
        assert!(
            eventually(Duration::from_secs(15), || process_gone(*pid)),
            "{what} ({pid}) outlived the controller"
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || process_gone(runtime)),
        "the guard outlived the controller"
    );
}

#[test]
fn a_guarded_program_and_all_it_started_end_when_the_controller_dies() {
    let dir = tempdir();
    let (sh, runtime) =
        guard_under_intermediate("--guard", dir.path(), Path::new("/dev/null"), &[]);
    controller_killed_ends_all(sh, runtime, dir.path());
}

#[test]
fn a_sandboxed_program_and_all_it_started_end_when_the_controller_dies() {
    let dir = tempdir();
    let start = dir.path().join("start");
    std::fs::write(&start, b"start\n").unwrap();
    let keep = [
        (
            "INTENDANT_SANDBOX_WRITE_PATHS",
            dir.path().display().to_string(),
        ),
        ("INTENDANT_SANDBOXED_KEEP", "DIR".to_owned()),
    ];
    let (sh, runtime) = guard_under_intermediate("--sandboxed-stdio", dir.path(), &start, &keep);
    controller_killed_ends_all(sh, runtime, dir.path());
}

/// `intendant-runtime --guard PID -- sh -c script` with this test as the controller, its stdio
/// piped, in a process group of its own.
fn guarded(controller: u32, script: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--guard", &controller.to_string(), "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

#[test]
fn a_guarded_program_has_the_guards_stdio_and_the_guard_ends_as_it_did() {
    let own = std::process::id();
    let mut child = guarded(
        own,
        r#"read l; echo "got:$l"; echo diagnostics >&2; exit 7"#,
    )
    .spawn()
    .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got:hello\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "diagnostics\n");

    let out = guarded(own, "kill -USR1 $$").output().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGUSR1),
        "{out:?}"
    );

    // Stdout ends when the program's ends, not the guard's copy: a reader sees EOF while the
    // guard waits on.
    let mut child = guarded(own, "exec 1>&-; sleep 1").spawn().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut rest).unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the guard ended before its program"
    );
    assert!(child.wait().unwrap().success());

    let mut missing = Command::new(BIN);
    missing.args([
        "--guard",
        &own.to_string(),
        "--",
        "no-such-program-anywhere",
    ]);
    let out = missing.output().unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-program-anywhere"));
}

#[test]
fn a_guard_given_a_controller_that_is_not_its_parent_runs_nothing() {
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let mut other = Command::new("sleep").arg("30").spawn().unwrap();
    let out = guarded(other.id(), &format!("touch {}", marker.display()))
        .output()
        .unwrap();
    other.kill().unwrap();
    other.wait().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("controller exited"),
        "{out:?}"
    );
    assert!(!marker.exists());
    let out = Command::new(BIN)
        .args(["--guard", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn a_guard_outlasts_signals_its_program_gets_and_ends_with_it() {
    let mut child = guarded(
        std::process::id(),
        "trap 'exit 5' TERM; while :; do sleep 0.05; done",
    )
    .spawn()
    .unwrap();
    let guard = child.id() as libc::pid_t;
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain syscall on our own unreaped child.
    unsafe { libc::kill(guard, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a TERM to the guard alone ended it"
    );
    // As the controller stops a worker: its whole group.
    // SAFETY: plain syscall on the group our unreaped child leads.
    unsafe { libc::killpg(guard, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "{status:?}");
}

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

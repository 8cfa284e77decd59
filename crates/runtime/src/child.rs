//! Child supervision shared by `exec`, `pty` and `display`: the environment and shell a child
//! gets, waiting with a deadline, and stopping a child with its process group.
//!
//! Every child the runtime starts leads its own process group (or session), so stopping it
//! means signalling the group: a command's background jobs go with it. Waiting uses a pidfd on
//! Linux, so a finished child is noticed at once and a deadline costs no polling.

use intendant_protocol::runtime::EXIT_SPAWN_FAILED;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::envguard;

/// [`envguard::command_env`], computed once: the runtime never changes its own environment, and
/// the scrub is far more expensive than a spawn's other bookkeeping.
pub fn child_env() -> &'static [(OsString, OsString)] {
    static ENV: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();
    ENV.get_or_init(envguard::command_env)
}

/// `bash` resolved against the child's own `PATH`, once per process.
///
/// An absolute program lets std spawn with `posix_spawn` (vfork speed); a bare name under a
/// replaced environment would make it fork and probe every `PATH` entry with `execve`. When no
/// `bash` is found the bare name is returned, so spawning fails with the usual error.
pub fn shell_program(env: &[(OsString, OsString)]) -> PathBuf {
    static RESOLVED: OnceLock<Option<PathBuf>> = OnceLock::new();
    RESOLVED
        .get_or_init(|| {
            let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v)?;
            std::env::split_paths(path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join("bash"))
                .find(|candidate| is_executable(candidate))
        })
        .clone()
        .unwrap_or_else(|| PathBuf::from("bash"))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `now + timeout`, saturating: a `timeout_ms` near `u64::MAX` means "no practical limit"
/// instead of an overflow.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

/// A shell's view of an exit status: the code, or `128 + signal`.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(EXIT_SPAWN_FAILED)
}

/// Waits for `child` until `deadline`; `Ok(None)` when it is still running then.
pub fn wait_deadline(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    let pidfd = pidfd_open(child.id());
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(None);
        }
        match &pidfd {
            Some(fd) => poll_readable(fd, remaining)?,
            None => std::thread::sleep(remaining.min(Duration::from_millis(5))),
        }
    }
}

/// SIGKILLs the child's whole process group (its pid is the group id) and reaps the child.
pub fn kill_group(child: &mut Child) {
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain syscall; the group id is our unreaped child's pid, so it cannot have
        // been recycled for someone else's group.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Asks `child` to exit with `signal`, gives it `grace`, then kills its process group.
///
/// The polite signal goes to the child alone, which knows how to pass it on (an interactive
/// bash forwards `SIGHUP` to its jobs; Xvfb removes its lock and socket on `SIGTERM`).
pub fn stop(child: &mut Child, signal: libc::c_int, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain syscall on a pid we spawned and have not reaped.
        unsafe { libc::kill(pid, signal) };
    }
    if let Ok(Some(_)) = wait_deadline(child, Instant::now() + grace) {
        return;
    }
    kill_group(child);
}

/// Makes the kernel send `signal` to the child when the runtime dies, so a killed runtime
/// leaves no Xvfb or PTY shell behind.
#[cfg(target_os = "linux")]
pub fn terminate_with_runtime(cmd: &mut Command, signal: libc::c_int) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::other("runtime exited during spawn"));
            }
            Ok(())
        });
    }
}

/// Other Unix systems have no parent-death signal; the runtime's own teardown (drop) remains.
#[cfg(not(target_os = "linux"))]
pub fn terminate_with_runtime(cmd: &mut Command, signal: libc::c_int) {
    let _ = (cmd, signal);
}

/// Other Unix systems have no pidfd: [`wait_deadline`] falls back to short sleeps.
#[cfg(not(target_os = "linux"))]
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let _ = pid;
    None
}

#[cfg(target_os = "linux")]
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn poll_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

//! Child supervision shared by `exec`, `pty` and `display`: the environment and shell a child
//! gets, waiting with a deadline, and stopping a child with its process group.
//!
//! Every child the runtime starts leads its own process group (or session), so stopping it
//! means signalling the group: a command's background jobs go with it. Waiting uses a pidfd on
//! Linux, so a finished child is noticed at once and a deadline costs no polling.
//!
//! The runtime dies with its parent ([`bind_to_parent`]): the parent-death signal is `SIGTERM`,
//! handled by a thread of its own, which kills every process group and session the runtime
//! started ([`spawn_group`], [`spawn_session`]) and then lets `SIGTERM` end the runtime (unless
//! the batch, its command killed, finishes first). It is
//! not `SIGKILL` because a killed runtime could not take its commands along: a parent-death
//! signal of their own would still miss their background jobs.

use intendant_protocol::runtime::EXIT_SPAWN_FAILED;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, OnceLock, PoisonError};
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
/// `bash` is found the bare name is returned: std then fails with the usual error, and
/// [`crate::spawn`] refuses it.
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

/// A child process the runtime waits for and kills: a `std::process::Child`, or the shell of
/// [`crate::spawn`].
pub trait Reap {
    /// Its pid.
    fn id(&self) -> u32;
    /// Its status if it has exited (reaping it), else `None`.
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>>;
    /// Waits for it to exit and reaps it.
    fn wait(&mut self) -> io::Result<ExitStatus>;
    /// `SIGKILL`s it unless it is already reaped.
    fn kill(&mut self) -> io::Result<()>;
}

impl Reap for Child {
    fn id(&self) -> u32 {
        Child::id(self)
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        Child::try_wait(self)
    }
    fn wait(&mut self) -> io::Result<ExitStatus> {
        Child::wait(self)
    }
    fn kill(&mut self) -> io::Result<()> {
        Child::kill(self)
    }
}

/// Waits for `child` until `deadline`; `Ok(None)` when it is still running then.
pub fn wait_deadline(child: &mut impl Reap, deadline: Instant) -> io::Result<Option<ExitStatus>> {
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
pub fn kill_group(child: &mut impl Reap) {
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
pub fn stop(child: &mut impl Reap, signal: libc::c_int, grace: Duration) {
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

/// What the runtime started and must stop when it is told to die.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Started {
    /// A process group (its leader's pid).
    Group(libc::pid_t),
    /// A session (its leader's pid): a PTY shell, whose jobs live in groups of their own.
    Session(libc::pid_t),
}

/// Every group and session started so far. Entries are never removed while the runtime lives:
/// a group outlives its reaped leader as long as a background job holds it, and killing an
/// emptied group is a harmless `ESRCH`. Pruned of emptied entries as new ones come in.
static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

/// Set once the runtime has been told to die, before it kills what it started.
static TERMINATING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the runtime is being torn down by `SIGTERM` or its parent's death: from then on a
/// command's result is the runtime's own kill, not the command's outcome, and is not reported
/// (the controller accounts for the unreported commands).
pub fn terminating() -> bool {
    TERMINATING.load(std::sync::atomic::Ordering::SeqCst)
}

/// Spawns `cmd` (set up with `process_group(0)`) and registers its process group, to be
/// killed should the runtime be told to die.
pub fn spawn_group(cmd: &mut Command) -> io::Result<Child> {
    spawn_tracked(cmd, Started::Group)
}

/// Spawns `cmd` (which calls `setsid`) and registers its session, to be killed with every
/// process in it should the runtime be told to die.
pub fn spawn_session(cmd: &mut Command) -> io::Result<Child> {
    spawn_tracked(cmd, Started::Session)
}

/// Registry entries beyond which emptied groups are pruned (then again at each doubling).
const PRUNE_FROM: usize = 64;

/// Runs `spawn`, which starts the leader of a new process group, and registers the group, as
/// [`spawn_group`] does for a `Command`.
pub fn track_group<C: Reap>(spawn: impl FnOnce() -> io::Result<C>) -> io::Result<C> {
    track(spawn, Started::Group)
}

fn spawn_tracked(cmd: &mut Command, kind: fn(libc::pid_t) -> Started) -> io::Result<Child> {
    track(|| cmd.spawn(), kind)
}

fn track<C: Reap>(
    spawn: impl FnOnce() -> io::Result<C>,
    kind: fn(libc::pid_t) -> Started,
) -> io::Result<C> {
    // Held across the spawn: a death signal that comes meanwhile waits for the entry.
    let mut started = STARTED.lock().unwrap_or_else(PoisonError::into_inner);
    if started.len() >= PRUNE_FROM && started.len().is_power_of_two() {
        started.retain(|s| match s {
            // SAFETY: signal 0 only checks that the group still has a member.
            Started::Group(pgid) => (unsafe { libc::killpg(*pgid, 0) }) == 0,
            Started::Session(_) => true,
        });
    }
    let child = spawn()?;
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        started.push(kind(pid));
    }
    Ok(child)
}

/// Kills every group and session registered so far and returns the registry still locked, so
/// nothing new can be spawned until the runtime has ended.
fn kill_started() -> std::sync::MutexGuard<'static, Vec<Started>> {
    let started = STARTED.lock().unwrap_or_else(PoisonError::into_inner);
    for s in started.iter() {
        match *s {
            // SAFETY: plain syscall; see STARTED for why a stale group id is harmless.
            Started::Group(pgid) => unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            },
            Started::Session(sid) => kill_session(sid),
        }
    }
    started
}

/// SIGKILLs every process whose session id is `sid` (a PTY shell made itself session leader).
pub fn kill_session(sid: libc::pid_t) {
    for process in processes() {
        if process.session == sid {
            // SAFETY: plain syscall; the pid was just seen in the shell's session.
            unsafe { libc::kill(process.pid, libc::SIGKILL) };
        }
    }
}

/// One process as its `/proc/PID/stat` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEntry {
    /// Its pid.
    pub pid: libc::pid_t,
    /// Its state letter (`Z`: a zombie, which only its parent's wait removes).
    pub state: u8,
    /// Its parent's pid.
    pub parent: libc::pid_t,
    /// Its process group.
    pub group: libc::pid_t,
    /// Its session.
    pub session: libc::pid_t,
}

/// Every process `/proc` lists now; one gone while it was read is passed over.
pub fn processes() -> Vec<ProcessEntry> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // After the parenthesised command name: state, ppid, pgrp, session, ...
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let state = *fields.next()?.as_bytes().first()?;
            let mut number = || fields.next()?.parse::<libc::pid_t>().ok();
            Some(ProcessEntry {
                pid,
                state,
                parent: number()?,
                group: number()?,
                session: number()?,
            })
        })
        .collect()
}

/// The signal the kernel sends the runtime when its parent dies.
pub const PARENT_DEATH_SIGNAL: libc::c_int = libc::SIGTERM;

/// Write end of the pipe the signal handler wakes the `parent-watch` thread through.
#[cfg(target_os = "linux")]
static DEATH_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Makes the runtime die with its parent, taking everything it started along.
///
/// Call first thing in `main`. [`PARENT_DEATH_SIGNAL`] gets a handler that only wakes a thread
/// of its own (a handler, not a blocked mask, because children inherit the mask but not the
/// handler), which kills the registered groups and sessions and then ends the runtime by that
/// signal. The same holds for a `SIGTERM` from anyone else. Fails when the parent is already
/// gone. The kernel signals the death of the parent *thread* that spawned the runtime, so a
/// controller spawns it from a thread that lives as long as the batch.
#[cfg(target_os = "linux")]
pub fn bind_to_parent() -> io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut fds = [-1; 2];
    // SAFETY: a two-int out-array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these fds; nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || wait_for_death(read_end))?;
    // The handler writes to it for the rest of the process's life.
    DEATH_PIPE.store(
        std::os::fd::IntoRawFd::into_raw_fd(write_end),
        Ordering::Relaxed,
    );
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (one write).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_death_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(PARENT_DEATH_SIGNAL, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    // SAFETY: PR_SET_PDEATHSIG takes one integer argument and touches no memory of ours.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            PARENT_DEATH_SIGNAL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // The parent may have died before prctl took effect: then no signal will ever come.
    // SAFETY: as above.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::other("the parent process exited during startup"));
    }
    Ok(())
}

/// Other Unix systems have no parent-death signal: the controller's own kill remains.
#[cfg(not(target_os = "linux"))]
pub fn bind_to_parent() -> io::Result<()> {
    Ok(())
}

#[cfg(target_os = "linux")]
extern "C" fn on_death_signal(_sig: libc::c_int) {
    // First, in the handler itself: whoever sent the signal may be killing the commands too
    // (the controller stops the whole tree), and a command that dies of that must not be
    // reported as if it had ended. An atomic store is async-signal-safe.
    TERMINATING.store(true, std::sync::atomic::Ordering::SeqCst);
    let fd = DEATH_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    let byte = 1u8;
    // SAFETY: write(2) is async-signal-safe; one byte from a live local.
    let _ = unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
}

/// The `parent-watch` thread: waits for the signal, kills what the runtime started, then
/// raises the signal again with its default action so the runtime ends by it.
#[cfg(target_os = "linux")]
fn wait_for_death(read_end: OwnedFd) {
    let mut byte = 0u8;
    loop {
        // SAFETY: a one-byte read into a live local from an fd we own.
        let n = unsafe { libc::read(read_end.as_raw_fd(), (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
    // Held until the end: the batch may go on meanwhile, but it cannot start another command.
    let _no_more_spawns = kill_started();
    // SAFETY: resetting a disposition touches no memory of ours; raise then ends the process
    // with the default action of the signal (it is not blocked).
    unsafe {
        libc::signal(PARENT_DEATH_SIGNAL, libc::SIG_DFL);
        libc::raise(PARENT_DEATH_SIGNAL);
        libc::_exit(128 + PARENT_DEATH_SIGNAL);
    }
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
pub(crate) fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let _ = pid;
    None
}

#[cfg(target_os = "linux")]
pub(crate) fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn poll_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
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

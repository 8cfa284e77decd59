//! The one child supervisor of the controller: runs a program in its own process group with
//! bounded output, a deadline and cancellation, and reports how it ended.
//!
//! The runtime runner and the delegation to external CLIs both use it, so a child is always
//! stopped the same way: TERM to its whole process tree (its own group and every descendant's
//! group, found before the leader can die and orphan them), then KILL after a bounded grace
//! period. The leader is always reaped and both pipes are read to the end (with a bound) before
//! [`Running::finish`] returns, so nothing the child started outlives the call; dropping a
//! [`Running`] before it finished KILLs the tree.
//!
//! # Layout
//! - [`ChildSpec`], [`Limits`]: what to run and its bounds; [`spawn`] starts it (the one spawn
//!   point, so containment hooks in one place; each child is marked to go before the controller
//!   when memory runs out) and [`Running::finish`] supervises it to the end.
//!   A bare program name is looked up in the child's own `PATH` first (`program_path`), so the
//!   spawn is a `posix_spawn`, never a fork of the whole controller.
//! - [`spawn_interactive`]: the same child for a long-lived conversation (an external agent
//!   worker, a git helper; [`spawn_lasting_interactive`] for a program inside a session's
//!   walls: [`crate::sandboxed`]): stdin stays open and
//!   stdout is handed to the caller as [`Pipes`]; stderr, the stop and the reaping are
//!   supervised as above. [`spawn_interactive_entered`]: one that takes on an [`Entry`] (its
//!   session's cgroups and nice value) before its `exec` (an agent CLI worker).
//! - [`CancelToken`]: the handle a caller keeps to stop a child; [`Ending::Cancelled`] reports it.
//! - [`ChildReport`]: the ending, both captured streams with their truncation, the stderr tail.
//! - `kill`: finding and signalling the process tree.
//! - [`lasting`]: threads that live as long as the process, each with a descriptor table of its
//!   own, to start a child bound to its parent thread (the runtime) from: [`spawn_lasting`],
//!   [`spawn_lasting_interactive`].
//! - `leader`: a child's leader as its spawn holds it: tokio's handle, or for a child started on a
//!   lasting thread a pidfd (tokio's handle comes only from its own spawn).

use std::ffi::OsString;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use intendant_protocol::runtime::SESSION_OOM_SCORE_ADJ;
use leader::{Leader, PidfdChild};

/// Size of one read from a child's pipe.
const READ_CHUNK: usize = 64 * 1024;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ChildSpec {
    /// The executable.
    pub program: PathBuf,
    /// Arguments after the executable.
    pub args: Vec<OsString>,
    /// The complete environment (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Bytes written to stdin, which is then closed.
    pub stdin: Vec<u8>,
    /// Descriptors the child inherits (every other closes at its `exec`), named to it by a
    /// variable.
    pub passed: Option<Passed>,
}

/// Descriptors a child inherits, and the variable that tells it their numbers there.
///
/// The design decision to know: the child gets the descriptors without any other thread's
/// spawn seeing them. From a lasting thread with a table of its own the copies there are made
/// inheritable (the spawn stays a `posix_spawn`: how a session's runtimes and the programs in
/// its walls start); anywhere else (a kernel without such tables, a spawn on the calling
/// thread) they stay close-on-exec in the process's shared table and only the child clears the
/// flag, between its fork and its `exec` (the standard library then forks instead of
/// `posix_spawn`).
#[derive(Clone)]
pub struct Passed {
    /// The descriptors, in the order `announce` gets their numbers.
    pub files: Vec<Arc<OwnedFd>>,
    /// The variable and its value, made from the descriptors' numbers in the child.
    pub announce: Announce,
}

/// Makes a variable and its value from the numbers of [`Passed::files`] in the child.
pub type Announce = Arc<dyn Fn(&[RawFd]) -> (OsString, OsString) + Send + Sync>;

impl std::fmt::Debug for Passed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passed")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Has `cmd` start its child with `fds` (numbers in the spawning thread's table, where they are
/// close-on-exec and stay open until the spawn returned) and the variable `announce` makes of
/// them.
fn pass(
    cmd: &mut std::process::Command,
    announce: &Announce,
    fds: &[RawFd],
    own_table: bool,
) -> std::io::Result<()> {
    let (name, value) = announce(fds);
    cmd.env(name, value);
    if own_table {
        // This thread's own table, which no other thread spawns from.
        return inheritable(fds);
    }
    let fds = fds.to_vec();
    // SAFETY: the closure runs in the child between fork and exec, allocates nothing and only
    // calls fcntl, which is async-signal-safe, on descriptors the child inherited.
    unsafe {
        cmd.pre_exec(move || inheritable(&fds));
    }
    Ok(())
}

/// Clears close-on-exec on `fds`.
fn inheritable(fds: &[RawFd]) -> std::io::Result<()> {
    for fd in fds {
        // SAFETY: F_SETFD changes a descriptor's flags and touches no memory.
        if unsafe { libc::fcntl(*fd, libc::F_SETFD, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What happens to stdout beyond [`Limits::max_stdout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Keep reading and count the dropped bytes; the child runs on.
    Drain,
    /// Stop the child: the run ends as [`Ending::OutputTooLarge`].
    Stop,
}

/// Bounds of one run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most stdout bytes kept.
    pub max_stdout: usize,
    /// What stdout beyond `max_stdout` does.
    pub stdout_overflow: Overflow,
    /// Most stderr bytes kept from its start (the rest is drained and counted).
    pub max_stderr: usize,
    /// Bytes of the end of stderr kept for [`ChildReport::stderr_tail`], whatever the cap.
    pub stderr_tail: usize,
    /// Wall-clock deadline; `None` waits as long as the child runs.
    pub deadline: Option<Duration>,
    /// Time between TERM and KILL, and how long the pipes are still read after a stop.
    pub grace: Duration,
    /// How long the pipes are still read after the leader exited by itself (a descendant may
    /// hold them open); then the group is KILLed.
    pub drain: Duration,
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The leader exited by itself with this code (`None`: it was killed by a signal).
    Exited(Option<i32>),
    /// The deadline passed and the tree was stopped.
    TimedOut,
    /// The caller cancelled and the tree was stopped.
    Cancelled,
    /// stdout exceeded its limit under [`Overflow::Stop`] and the tree was stopped.
    OutputTooLarge,
}

/// One captured stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes of the stream, at most the limit.
    pub bytes: Vec<u8>,
    /// Bytes beyond the limit that were read and dropped.
    pub dropped: u64,
    /// Whether the pipe reached end of file (not cut off by a stop or the drain bound).
    pub complete: bool,
}

impl Captured {
    /// Whether bytes were lost to the limit.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }
}

/// The finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildReport {
    /// How it ended.
    pub ending: Ending,
    /// stdout.
    pub stdout: Captured,
    /// stderr.
    pub stderr: Captured,
    /// The last [`Limits::stderr_tail`] bytes of stderr (lossy UTF-8), past the cap too.
    pub stderr_tail: String,
}

/// The handle that stops a child: clones share one state, and cancelling is permanent.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    state: Arc<CancelState>,
}

#[derive(Debug, Default)]
struct CancelState {
    cancelled: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every run (present and future) watching this token.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::SeqCst);
        self.state.notify.notify_waiters();
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the token is cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.state.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a cancel in between is not missed.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// One pipe's reader state, shared so bytes read so far survive a reader that is given up on.
#[derive(Debug, Default)]
struct Sink {
    capture: Mutex<SinkData>,
    overflow: AtomicBool,
    notify: Notify,
}

#[derive(Debug, Default)]
struct SinkData {
    captured: Captured,
    /// The stream's last bytes; trimmed lazily to at most twice the tail length.
    tail: Vec<u8>,
}

impl Sink {
    fn lock(&self) -> MutexGuard<'_, SinkData> {
        self.capture.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, Clone, Copy)]
struct ReadBounds {
    keep: usize,
    tail: usize,
    stop_on_overflow: bool,
}

/// Reads `reader` to the end, keeping at most `keep` bytes (and the last `tail` bytes) and
/// counting the rest; under `stop_on_overflow` the first byte beyond `keep` ends the read.
async fn read_bounded<R: AsyncRead + Unpin>(mut reader: R, sink: Arc<Sink>, bounds: ReadBounds) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) => {
                sink.lock().captured.complete = true;
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let mut data = sink.lock();
        let room = bounds.keep.saturating_sub(data.captured.bytes.len());
        let keep = n.min(room);
        data.captured.bytes.extend_from_slice(&buf[..keep]);
        data.captured.dropped += (n - keep) as u64;
        if bounds.tail > 0 {
            data.tail.extend_from_slice(&buf[..n]);
            if data.tail.len() > 2 * bounds.tail {
                let excess = data.tail.len() - bounds.tail;
                data.tail.drain(..excess);
            }
        }
        if n > room && bounds.stop_on_overflow {
            drop(data);
            sink.overflow.store(true, Ordering::SeqCst);
            sink.notify.notify_one();
            return;
        }
    }
}

/// A reader task for one pipe (none when the pipe is absent) and the sink it fills.
fn start_reader<R: AsyncRead + Unpin + Send + 'static>(
    pipe: Option<R>,
    bounds: ReadBounds,
) -> (Arc<Sink>, Option<JoinHandle<()>>) {
    let sink = Arc::new(Sink::default());
    let task = pipe.map(|pipe| tokio::spawn(read_bounded(pipe, sink.clone(), bounds)));
    (sink, task)
}

/// A spawned child under supervision; [`Running::finish`] sees it to the end.
#[derive(Debug)]
pub struct Running {
    child: Leader,
    /// The child's process group (its own pid), when known.
    pgid: Option<i32>,
    limits: Limits,
    stdout: (Arc<Sink>, Option<JoinHandle<()>>),
    stderr: (Arc<Sink>, Option<JoinHandle<()>>),
    writer: Option<JoinHandle<()>>,
    /// Whether the tree still needs killing if this is dropped.
    armed: bool,
}

/// Starts `spec` in a process group of its own, its stdin fed and both pipes read under `limits`.
/// `Err` only when it cannot be spawned. Needs a tokio runtime.
pub fn spawn(spec: ChildSpec, limits: Limits) -> std::io::Result<Running> {
    start(spec, limits, None, false).map(|(running, _)| running)
}

/// The pipes of an interactive child: its stdin (open until dropped) and its stdout, read by
/// the caller (bounded by the caller's framing).
#[derive(Debug)]
pub struct Pipes {
    /// The child's stdin; dropping it closes the pipe.
    pub stdin: pipe::Sender,
    /// The child's stdout.
    pub stdout: pipe::Receiver,
}

/// Starts `spec` like [`spawn`] for a conversation: `spec.stdin` is ignored and the pipes are
/// returned to the caller instead; stderr is read under `limits` (its tail kept for the report).
/// [`Running::finish`] still stops the tree, reaps the leader and drains stderr; it ends when the
/// child exits or `cancel` resolves (the deadline applies too, when set).
pub fn spawn_interactive(spec: ChildSpec, limits: Limits) -> std::io::Result<(Running, Pipes)> {
    interactive(start(spec, limits, None, true)?)
}

/// What a child takes on itself between its fork and its `exec`, so that the program, its first
/// thread and whatever it starts before reading anything are inside from the start: the cgroups
/// it writes itself into, then the nice value it lowers itself to.
///
/// The design decision to know: a runtime is placed from the parent after a `posix_spawn`
/// ([`spawn_lasting`]), which suffices because it reads its batch before it runs anything, and
/// keeps the hot path free of a fork of the controller. A program the controller does not write
/// (an agent CLI worker) may start threads and children before it reads a line, so it enters
/// here instead, at the cost of one fork of the controller per start.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// Open `cgroup.procs` files (close-on-exec); the child writes `0`, itself, into each. A
    /// refused write fails the spawn.
    pub groups: Vec<Arc<std::fs::File>>,
    /// The nice value the child lowers itself to (never raises it); best effort, as the
    /// runtime's own (a filter forbidding the call leaves the controller's).
    pub nice: Option<i32>,
}

/// [`spawn_interactive`] for a program that enters `entry` before its `exec` (an agent CLI
/// worker in its session's groups).
pub fn spawn_interactive_entered(
    spec: ChildSpec,
    limits: Limits,
    entry: &Entry,
) -> std::io::Result<(Running, Pipes)> {
    interactive(start(spec, limits, Some(entry), true)?)
}

/// The running child and the pipes an interactive start opened.
fn interactive((running, pipes): (Running, Option<Pipes>)) -> std::io::Result<(Running, Pipes)> {
    let pipes = pipes.ok_or_else(|| std::io::Error::other("the child's pipes were not opened"))?;
    Ok((running, pipes))
}

/// Has `cmd`'s child enter `entry` between its fork and its `exec`.
fn enter(cmd: &mut std::process::Command, entry: &Entry) {
    let groups: Vec<RawFd> = entry.groups.iter().map(AsRawFd::as_raw_fd).collect();
    let nice = entry.nice;
    let hook = move || {
        for fd in &groups {
            // SAFETY: writes one byte of a static buffer to a descriptor the child inherited.
            if unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) } != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(nice) = nice
            && rustix::process::getpriority_process(None).is_ok_and(|now| now < nice)
        {
            let _ = rustix::process::setpriority_process(None, nice);
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and allocates nothing: it writes
    // a constant to descriptors the child inherited (the caller's `entry` keeps them open until
    // the spawn returned) and reads and sets its own priority, all plain system calls, which are
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// `program` as the child will find it: a bare name (`git`) is looked up here in the `PATH` of
/// the child's environment `env`, the first executable regular file in an absolute directory.
/// Given a bare name and an environment with a `PATH`, the standard library forks the whole
/// controller (its page tables copied, then copy-on-write faults in the parent) to look the name
/// up in the child, where a path lets it spawn by `posix_spawn` (a vfork). The name is left as
/// it is (the child looks it up, as before) when nothing is found or the `PATH` has a relative
/// or empty entry, which names a directory relative to the child's working directory.
fn program_path(program: &Path, env: &[(OsString, OsString)]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let bare = !program.as_os_str().as_bytes().contains(&b'/') && !program.as_os_str().is_empty();
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v);
    let (true, Some(path)) = (bare, path) else {
        return program.to_path_buf();
    };
    let dirs: Vec<&Path> = path
        .as_bytes()
        .split(|b| *b == b':')
        .map(|d| Path::new(std::ffi::OsStr::from_bytes(d)))
        .collect();
    if dirs.iter().any(|d| !d.is_absolute()) {
        return program.to_path_buf();
    }
    dirs.iter()
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| program.to_path_buf())
}

/// `spec` started below `runtime` as its guard, `RUNTIME --guard PID -- PROGRAM ARGS` (PID:
/// this controller's), which ends the program and everything it started if the controller dies:
/// how a program we do not write and that outlives a call (an agent CLI worker, a delegated
/// CLI) is started. A program given or found as a path is checked here, so one that cannot be
/// run fails the spawn with the system's reason as a direct start would, rather than with the
/// guard's exit (a bare name not found here is left to the guard's own lookup in the same
/// `PATH`, from the same directory).
pub fn guarded(spec: ChildSpec, runtime: &Path) -> std::io::Result<ChildSpec> {
    use std::os::unix::fs::PermissionsExt;
    if !runtime.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "its guard, the runtime {}, is missing (install intendant-runtime beside intendant)",
                runtime.display()
            ),
        ));
    }
    let program = program_path(&spec.program, &spec.env);
    if program.components().count() > 1 {
        let meta = std::fs::metadata(spec.cwd.join(&program))?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EACCES));
        }
    }
    let mut args: Vec<OsString> = vec![
        intendant_protocol::runtime::GUARD_ARG.into(),
        std::process::id().to_string().into(),
        "--".into(),
        program.into_os_string(),
    ];
    args.extend(spec.args);
    Ok(ChildSpec {
        program: runtime.to_path_buf(),
        args,
        ..spec
    })
}

/// A spawn's error `e`, naming the working directory `cwd` when that is what is missing: the
/// system says only "No such file or directory", which reads as the program missing (a project
/// removed while its session waited, say).
fn spawn_error(cwd: &Path, e: std::io::Error) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::NotFound && !cwd.is_dir() {
        return std::io::Error::new(
            e.kind(),
            format!(
                "its working directory {} does not exist ({e})",
                cwd.display()
            ),
        );
    }
    e
}

/// The command that starts `spec`: exactly its environment, in its directory, in a process group
/// of its own; its stdio is the caller's to set.
fn command(spec: &ChildSpec) -> std::process::Command {
    let mut cmd = std::process::Command::new(program_path(&spec.program, &spec.env));
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .process_group(0);
    cmd
}

/// Raises child `pid`'s `oom_score_adj` to [`SESSION_OOM_SCORE_ADJ`] (never lowers it), right
/// after its start and before it is sent anything, so what it and its own children hold goes
/// before the controller when memory runs out: an agent CLI's tools, a hook, git. Best effort: a
/// child gone already, or one that made itself undumpable at once (its `/proc` files are then
/// root's), keeps the mark it inherited. A runtime marks itself (`intendant-runtime` raises its
/// own before anything runs, and so every command and sandboxed program).
fn mark_for_oom_kill(pid: u32) {
    let path = format!("/proc/{pid}/oom_score_adj");
    let below = std::fs::read_to_string(&path)
        .ok()
        .and_then(|now| now.trim().parse::<i32>().ok())
        .is_some_and(|now| now < SESSION_OOM_SCORE_ADJ);
    if below {
        let _ = std::fs::write(&path, SESSION_OOM_SCORE_ADJ.to_string());
    }
}

fn start(
    spec: ChildSpec,
    limits: Limits,
    entry: Option<&Entry>,
    interactive: bool,
) -> std::io::Result<(Running, Option<Pipes>)> {
    let mut cmd = command(&spec);
    if let Some(passed) = &spec.passed {
        let fds: Vec<RawFd> = passed.files.iter().map(|fd| fd.as_raw_fd()).collect();
        pass(&mut cmd, &passed.announce, &fds, false)?;
    }
    if let Some(entry) = entry {
        enter(&mut cmd, entry);
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = own::spawned(|| cmd.spawn(), tokio::process::Child::id)
        .map_err(|e| spawn_error(&spec.cwd, e))?;
    let pid = child.id();
    let pgid = pid.and_then(|id| i32::try_from(id).ok());
    if let Some(pid) = pid {
        mark_for_oom_kill(pid);
    }
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let leader = Leader::Tokio(child);
    if interactive {
        let pipes = match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Some(Pipes {
                stdin: pipe::Sender::from_owned_fd(stdin.into_owned_fd()?)?,
                stdout: pipe::Receiver::from_owned_fd(stdout.into_owned_fd()?)?,
            }),
            (_, _) => None,
        };
        let streams = Streams::<pipe::Sender, pipe::Receiver, _> {
            stdin: None,
            input: Vec::new(),
            stdout: None,
            stderr,
        };
        return Ok((Running::supervise(leader, pgid, limits, streams), pipes));
    }
    let streams = Streams {
        stdin,
        input: spec.stdin,
        stdout,
        stderr,
    };
    Ok((Running::supervise(leader, pgid, limits, streams), None))
}

/// How a child started on a lasting thread is placed there: `files` lent to the thread and
/// `place`, given their copies and the child's pid (a session's containment:
/// `Placement::lent`).
pub struct LentPlacement {
    /// Descriptors `place` needs, lent to the spawning thread.
    pub files: Vec<lasting::Lent>,
    /// Places child `pid` through the copies of `files`, in their order.
    pub place: fn(Vec<OwnedFd>, u32) -> std::io::Result<()>,
}

/// [`spawn`] for a child that binds itself to the thread that started it (the runtime):
/// started on a lasting thread, which copies none of the controller's descriptors into it but
/// its pipes and [`ChildSpec::passed`] ([`lasting`]), and placed there by `placement` before
/// it gets any input.
pub async fn spawn_lasting(
    spec: ChildSpec,
    limits: Limits,
    placement: Option<LentPlacement>,
) -> std::io::Result<Running> {
    start_lasting(spec, limits, placement, false)
        .await
        .map(|(running, _)| running)
}

/// [`spawn_interactive`] from a lasting thread, placed as [`spawn_lasting`] places its child: a
/// program inside a session's walls ([`crate::sandboxed`]), which so copies none of the
/// controller's descriptors but its pipes, its cgroup files and the session's namespace.
pub async fn spawn_lasting_interactive(
    spec: ChildSpec,
    limits: Limits,
    placement: Option<LentPlacement>,
) -> std::io::Result<(Running, Pipes)> {
    let (running, pipes) = start_lasting(spec, limits, placement, true).await?;
    let pipes = pipes.ok_or_else(|| std::io::Error::other("the child's pipes were not opened"))?;
    Ok((running, pipes))
}

async fn start_lasting(
    spec: ChildSpec,
    limits: Limits,
    placement: Option<LentPlacement>,
    interactive: bool,
) -> std::io::Result<(Running, Option<Pipes>)> {
    let (stdin_read, stdin_write) = std::io::pipe()?;
    let (stdout_read, stdout_write) = std::io::pipe()?;
    let (stderr_read, stderr_write) = std::io::pipe()?;
    let mut lent: Vec<lasting::Lent> = vec![
        Arc::new(OwnedFd::from(stdin_read)),
        Arc::new(OwnedFd::from(stdout_write)),
        Arc::new(OwnedFd::from(stderr_write)),
    ];
    // The job gets the passed descriptors lent, and of `Passed` only what names them: it runs,
    // and is dropped, on a thread whose table is its own, where closing one of the process's
    // descriptors would close whatever that number is there (a caller that left mid-spawn
    // leaves the job the last reference).
    let passed_count = spec.passed.as_ref().map_or(0, |passed| passed.files.len());
    let announce = spec
        .passed
        .as_ref()
        .map(|passed| Arc::clone(&passed.announce));
    if let Some(passed) = &spec.passed {
        lent.extend(
            passed
                .files
                .iter()
                .map(|fd| Arc::clone(fd) as lasting::Lent),
        );
    }
    let place = match placement {
        Some(placement) => {
            lent.extend(placement.files);
            Some(placement.place)
        }
        None => None,
    };
    let mut cmd = command(&spec);
    let started = lasting::lend(lent, move |fds| {
        let mut fds = fds.into_iter();
        let (Some(stdin), Some(stdout), Some(stderr)) = (fds.next(), fds.next(), fds.next()) else {
            return Err(std::io::Error::other("the child's pipes were not lent"));
        };
        cmd.stdin(Stdio::from(stdin))
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        let inherited: Vec<OwnedFd> = fds.by_ref().take(passed_count).collect();
        if let Some(announce) = &announce {
            let numbers: Vec<RawFd> = inherited.iter().map(AsRawFd::as_raw_fd).collect();
            pass(&mut cmd, announce, &numbers, lasting::table_is_own())?;
        }
        let started = lasting::Started::new(own::spawned(|| cmd.spawn(), |c| Some(c.id()))?.id());
        // The child's ends of the pipes close here with `cmd`, its inherited copies with
        // `inherited`; the caller's with its loan.
        drop(cmd);
        drop(inherited);
        if let Some(place) = place
            && let Err(e) = place(fds.collect(), started.pid())
        {
            if let Ok(pgid) = i32::try_from(started.pid()) {
                kill::signal_group(pgid, kill::Signal::Kill);
            }
            return Err(e);
        }
        Ok(started)
    })
    .await
    .map_err(|e| spawn_error(&spec.cwd, e))?;
    let leader = Leader::Pidfd(PidfdChild::adopt(started.pid())?);
    let pgid = i32::try_from(started.into_pid()).ok();
    let stdin = pipe::Sender::from_owned_fd(stdin_write.into())?;
    let stdout = pipe::Receiver::from_owned_fd(stdout_read.into())?;
    let stderr = Some(pipe::Receiver::from_owned_fd(stderr_read.into())?);
    if interactive {
        let streams = Streams::<pipe::Sender, pipe::Receiver, _> {
            stdin: None,
            input: Vec::new(),
            stdout: None,
            stderr,
        };
        let pipes = Pipes { stdin, stdout };
        return Ok((
            Running::supervise(leader, pgid, limits, streams),
            Some(pipes),
        ));
    }
    let streams = Streams {
        stdin: Some(stdin),
        input: spec.stdin,
        stdout: Some(stdout),
        stderr,
    };
    Ok((Running::supervise(leader, pgid, limits, streams), None))
}

/// A supervised child's pipes from this side, and the input for its stdin.
struct Streams<W, O, E> {
    stdin: Option<W>,
    input: Vec<u8>,
    stdout: Option<O>,
    stderr: Option<E>,
}

/// [`spawn`] then [`Running::finish`].
pub async fn run(
    spec: ChildSpec,
    limits: Limits,
    cancel: impl Future<Output = ()>,
) -> std::io::Result<ChildReport> {
    spawn(spec, limits)?.finish(cancel).await
}

impl Running {
    /// Supervises `leader` (of group `pgid`): stdin fed from its own task, stdout and stderr
    /// read under `limits`.
    fn supervise<W, O, E>(
        leader: Leader,
        pgid: Option<i32>,
        limits: Limits,
        streams: Streams<W, O, E>,
    ) -> Running
    where
        W: AsyncWrite + Unpin + Send + 'static,
        O: AsyncRead + Unpin + Send + 'static,
        E: AsyncRead + Unpin + Send + 'static,
    {
        let stderr = start_reader(
            streams.stderr,
            ReadBounds {
                keep: limits.max_stderr,
                tail: limits.stderr_tail,
                stop_on_overflow: false,
            },
        );
        let input = streams.input;
        let writer = streams.stdin.map(|mut stdin| {
            // Written from its own task so a child that never reads its input (more than a
            // pipe buffer holds) cannot hold the run past its deadline; a broken pipe is the
            // child's business, its exit status tells the story.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            })
        });
        let stdout = start_reader(
            streams.stdout,
            ReadBounds {
                keep: limits.max_stdout,
                tail: 0,
                stop_on_overflow: limits.stdout_overflow == Overflow::Stop,
            },
        );
        Running {
            child: leader,
            pgid,
            limits,
            stdout,
            stderr,
            writer,
            armed: true,
        }
    }

    /// The child's pid (also its process group id), while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the child exits by itself, the deadline passes, `cancel` resolves or stdout
    /// overflows under [`Overflow::Stop`]; stops the tree in the last three cases; then drains
    /// the pipes (bounded) and KILLs whatever is left in the child's group.
    pub async fn finish(
        mut self,
        cancel: impl Future<Output = ()>,
    ) -> std::io::Result<ChildReport> {
        let overflow = self.stdout.0.clone();
        let overflowed = overflow.notify.notified();
        let deadline = async {
            match self.limits.deadline {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        let ending = tokio::select! {
            status = self.child.wait() => Ending::Exited(status?.code()),
            () = deadline => Ending::TimedOut,
            () = cancel => Ending::Cancelled,
            () = overflowed => Ending::OutputTooLarge,
        };
        let drain = match ending {
            Ending::Exited(_) => self.limits.drain,
            Ending::TimedOut | Ending::Cancelled | Ending::OutputTooLarge => {
                self.terminate().await?;
                self.limits.grace
            }
        };
        // The leader is gone: input still unwritten will never be read, and a descendant
        // holding the pipe must not keep the writer alive.
        if let Some(writer) = self.writer.take() {
            writer.abort();
        }
        self.drain(drain).await;
        // Whatever the leader left running in its group ends with the run. The group id cannot
        // be reused while any member lives, so this reaches only those.
        self.signal_group(kill::Signal::Kill);
        self.armed = false;
        let ending = if overflow.overflow.load(Ordering::SeqCst) {
            Ending::OutputTooLarge
        } else {
            ending
        };
        let stdout = std::mem::take(&mut self.stdout.0.lock().captured);
        let (stderr, tail) = {
            let mut data = self.stderr.0.lock();
            let start = data.tail.len().saturating_sub(self.limits.stderr_tail);
            let tail = String::from_utf8_lossy(&data.tail[start..]).into_owned();
            (std::mem::take(&mut data.captured), tail)
        };
        Ok(ChildReport {
            ending,
            stdout,
            stderr,
            stderr_tail: tail,
        })
    }

    /// TERM to the whole tree, KILL after the grace period if the leader is still there, and
    /// KILL for members that ignored TERM while the leader obeyed it.
    async fn terminate(&mut self) -> std::io::Result<()> {
        let Some(root) = self.pgid else {
            self.child.start_kill()?;
            self.child.wait().await?;
            return Ok(());
        };
        // Found while the leader lives: once it dies its descendants are orphaned.
        let mut tree = kill::Tree::of(root);
        tree.signal(kill::Signal::Term);
        if tokio::time::timeout(self.limits.grace, self.child.wait())
            .await
            .is_err()
        {
            tree.extend(kill::Tree::of(root));
            tree.signal(kill::Signal::Kill);
            self.child.start_kill()?;
            self.child.wait().await?;
        }
        tree.signal(kill::Signal::Kill);
        Ok(())
    }

    /// Waits up to `limit` for both readers; then KILLs the group (a descendant holding the
    /// pipes) and waits one grace period more before taking what was read.
    async fn drain(&mut self, limit: Duration) {
        let mut tasks: Vec<JoinHandle<()>> = [self.stdout.1.take(), self.stderr.1.take()]
            .into_iter()
            .flatten()
            .collect();
        let joined = tokio::time::timeout(limit, join_all(&mut tasks)).await;
        if joined.is_ok() {
            return;
        }
        self.signal_group(kill::Signal::Kill);
        let _ = tokio::time::timeout(self.limits.grace, join_all(&mut tasks)).await;
        for task in tasks {
            task.abort();
        }
    }

    fn signal_group(&self, signal: kill::Signal) {
        if let Some(pgid) = self.pgid {
            kill::signal_group(pgid, signal);
        }
    }
}

async fn join_all(tasks: &mut [JoinHandle<()>]) {
    for task in tasks.iter_mut() {
        if !task.is_finished() {
            let _ = task.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed
            && let Some(root) = self.pgid
        {
            kill::Tree::of(root).signal(kill::Signal::Kill);
        }
    }
}

pub(crate) mod kill;
pub use kill::parent_from_stat;
pub mod lasting;
mod leader;
pub mod own;
#[cfg(test)]
pub(crate) mod tests;

//! The guard of one long-lived program: `--guard PID -- PROGRAM [ARG...]` for a program the
//! controller runs outside the walls (an agent CLI worker), and `--sandboxed-stdio` inside them
//! (an MCP server, a hook). Either way the program and everything it starts end when the
//! controller dies, as a batch's commands do.
//!
//! The design decisions to know:
//! - A parent-death signal (how a batch's runtime dies with the controller:
//!   [`crate::child::bind_to_parent`]) reaches one process, names the parent *thread*, and needs a
//!   handler to take the children along; the program is not ours to give one, and its tools are
//!   its children. So the guard stays between the controller and the program: it watches the
//!   controller *process* through a pidfd (of the pid it is given, so a controller gone before
//!   the guard looked is not mistaken for the reaper that adopted the guard), it is a child
//!   subreaper (whatever the program starts and leaves stays below it), and once the controller
//!   is gone it sends `SIGTERM` to every descendant, waits [`GRACE`], then `SIGKILL`s every one
//!   left until none is.
//! - Otherwise it is transparent: the program inherits its stdin, stdout, stderr, process group,
//!   cgroups, priority and (for a worker) environment, and the guard drops its own copies of the
//!   pipes, so the controller sees the program's ends of them; the guard exits as the program did
//!   (its code, or raising its signal). It survives `SIGTERM`, `SIGINT` and `SIGHUP` (a handler
//!   that does nothing; the program's defaults are restored at its `exec`): the controller stops
//!   the program by signalling its process group, which the two share, and the guard ends with
//!   the program.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

pub use intendant_protocol::runtime::GUARD_ARG;

use crate::child::{ProcessEntry, pidfd_open, processes};

/// How long the program and what it started get after `SIGTERM` once the controller is gone.
pub const GRACE: Duration = Duration::from_secs(3);

/// Without a pidfd (Linux before 5.3): how often the guard looks whether its parent changed.
const PARENT_POLL: Duration = Duration::from_millis(250);

/// Rounds of `SIGKILL` after the grace (a process forking as fast as it is killed).
const KILL_ROUNDS: usize = 200;

/// The arguments of [`GUARD_ARG`]: the controller's pid, then `--`, the program and its
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardArgs {
    /// The controller, whose end ends the program.
    pub parent: libc::pid_t,
    /// The program (a path, or a name looked up in the `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl GuardArgs {
    /// Parses the arguments after [`GUARD_ARG`]. Anything else is an error.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<GuardArgs, String> {
        let usage = format!("usage: {GUARD_ARG} PID -- PROGRAM [ARG...]");
        let mut args = args.into_iter();
        let parent = args
            .next()
            .and_then(|pid| pid.to_str()?.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 1)
            .ok_or_else(|| format!("no controller pid given; {usage}"))?;
        match args.next() {
            Some(sep) if sep == "--" => {}
            Some(other) => return Err(format!("unexpected argument {other:?}; {usage}")),
            None => return Err(format!("no program given; {usage}")),
        }
        let program = args
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("no program given; {usage}"))?;
        Ok(GuardArgs {
            parent,
            program,
            args: args.collect(),
        })
    }

    /// The program's command: the guard's environment, stdio and working directory.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        cmd
    }
}

/// How the guarded program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// The controller died first; the program and its descendants were ended.
    ControllerGone,
}

/// Why the guard could not run the program.
#[derive(Debug)]
pub enum GuardError {
    /// The controller had already gone: nothing was started.
    ControllerGone,
    /// The guard could not set itself up (nothing was started).
    Setup(std::io::Error),
    /// The program could not be executed.
    Exec(std::io::Error),
}

impl std::fmt::Display for GuardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuardError::ControllerGone => {
                f.write_str("the controller exited before the program started")
            }
            GuardError::Setup(e) => write!(f, "cannot set up the guard: {e}"),
            GuardError::Exec(e) => write!(f, "{e}"),
        }
    }
}

/// Starts `program` below this process and sees it to its end, or ends it and everything it
/// started once process `parent` (the controller) is gone. Call it from a process with one
/// thread, the program's stdio as its own.
pub fn run(parent: libc::pid_t, program: &mut Command) -> Result<Ended, GuardError> {
    let watch = Watch::new(parent).map_err(GuardError::Setup)?;
    if watch.parent_gone() {
        return Err(GuardError::ControllerGone);
    }
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(GuardError::Setup(std::io::Error::last_os_error()));
    }
    let child = program.spawn().map_err(GuardError::Exec)?;
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| GuardError::Setup(std::io::Error::other("a pid out of range")))?;
    // The handle only waits; every child is reaped here, the program among them.
    drop(child);
    let_go_of_stdio();
    loop {
        if let Some(status) = reap(Some(pid)) {
            return Ok(ended(status));
        }
        if watch.wait() {
            end_descendants();
            return Ok(Ended::ControllerGone);
        }
    }
}

/// Ends this process by `signal` (its default action), as the program was; returns only if that
/// signal does not end a process.
pub fn raise(signal: i32) {
    // SAFETY: resetting a disposition and unblocking it touch no memory of ours but the local
    // set; raise then acts on this process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
}

/// Write end of the pipe `SIGCHLD` wakes the guard's loop through.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_child(_sig: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    let byte = 1u8;
    // SAFETY: write(2) is async-signal-safe; one byte from a live local to a non-blocking pipe
    // (a full pipe already holds a wake-up).
    let _ = unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
}

extern "C" fn ignore(_sig: libc::c_int) {}

/// What the guard's loop waits on: a child's end (`SIGCHLD` through a pipe) and the
/// controller's (its pidfd, else a change of parent seen every [`PARENT_POLL`]).
struct Watch {
    parent: libc::pid_t,
    pidfd: Option<OwnedFd>,
    wake: OwnedFd,
}

impl Watch {
    fn new(parent: libc::pid_t) -> std::io::Result<Watch> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned both descriptors to us; nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The write end lives as long as the process: the handler may run at any time.
        WAKE_FD.store(
            std::os::fd::IntoRawFd::into_raw_fd(write),
            Ordering::Relaxed,
        );
        handle(libc::SIGCHLD, on_child as *const () as libc::sighandler_t)?;
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            handle(signal, ignore as *const () as libc::sighandler_t)?;
        }
        let pidfd = u32::try_from(parent).ok().and_then(pidfd_open);
        Ok(Watch {
            parent,
            pidfd,
            wake: read,
        })
    }

    /// Whether this process's parent is no longer the controller: it died, and a reaper adopted
    /// the guard.
    fn parent_gone(&self) -> bool {
        // SAFETY: getppid has no preconditions.
        (unsafe { libc::getppid() }) != self.parent
    }

    /// Waits for a child's end or the controller's; `true` once the controller is gone.
    fn wait(&self) -> bool {
        let mut fds = vec![libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(pidfd) = &self.pidfd {
            fds.push(libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let timeout = if self.pidfd.is_some() {
            -1
        } else {
            PARENT_POLL.as_millis() as libc::c_int
        };
        // SAFETY: `fds` is a live array of that many pollfds for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        let mut drain = [0u8; 64];
        // SAFETY: reads into a live local buffer of its length from a non-blocking pipe we own.
        while unsafe {
            libc::read(
                self.wake.as_raw_fd(),
                drain.as_mut_ptr().cast(),
                drain.len(),
            )
        } > 0
        {}
        fds.get(1).is_some_and(|pidfd| pidfd.revents != 0) || self.parent_gone()
    }
}

/// Gives `signal` the handler `handler` (with `SA_RESTART`).
fn handle(signal: libc::c_int, handler: libc::sighandler_t) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handlers are async-signal-safe (one write, or
    // nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Points stdin, stdout and stderr at `/dev/null` (else closes them), so the program alone
/// holds the controller's pipes: their ends are its.
fn let_go_of_stdio() {
    // SAFETY: opens a constant path; the descriptor is ours.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    for fd in 0..=2 {
        // SAFETY: dup2 and close act on this process's own descriptor table.
        unsafe {
            if null < 0 || libc::dup2(null, fd) < 0 {
                libc::close(fd);
            }
        }
    }
    if null > 2 {
        // SAFETY: closes the descriptor opened above, which nothing else uses.
        unsafe { libc::close(null) };
    }
}

/// Reaps every child that has ended (orphans the guard adopted among them); the status of
/// `program`'s end when it was one of them.
fn reap(program: Option<libc::pid_t>) -> Option<libc::c_int> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return None;
        }
        if Some(pid) == program {
            return Some(status);
        }
    }
}

fn ended(status: libc::c_int) -> Ended {
    if libc::WIFSIGNALED(status) {
        Ended::Signalled(libc::WTERMSIG(status))
    } else {
        Ended::Exited(libc::WEXITSTATUS(status))
    }
}

/// Every live descendant of process `root` in `table` (zombies left out: they are gone, and
/// wait only for their parent).
pub fn descendants(table: &[ProcessEntry], root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for process in table.iter().filter(|p| p.parent == parent) {
            parents.push(process.pid);
            if process.state != b'Z' {
                found.push(process.pid);
            }
        }
    }
    found
}

/// Ends every descendant of the guard: `SIGTERM`, up to [`GRACE`] to go, then `SIGKILL` until
/// none is left.
fn end_descendants() {
    let own = std::process::id() as libc::pid_t;
    let signal_all = |signal: libc::c_int| {
        let left = descendants(&processes(), own);
        for &pid in &left {
            // SAFETY: plain syscall on a pid just seen below this process.
            unsafe { libc::kill(pid, signal) };
        }
        left.len()
    };
    signal_all(libc::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        reap(None);
        if descendants(&processes(), own).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..KILL_ROUNDS {
        reap(None);
        if signal_all(libc::SIGKILL) == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_need_the_controller_the_separator_and_a_program() {
        assert_eq!(
            GuardArgs::parse(os(&["42", "--", "codex", "app-server"])),
            Ok(GuardArgs {
                parent: 42,
                program: "codex".into(),
                args: os(&["app-server"]),
            })
        );
        for bad in [
            &[][..],
            &["--", "codex"][..],
            &["1", "--", "codex"][..],
            &["x", "--", "codex"][..],
            &["42", "codex"][..],
            &["42", "--"][..],
            &["42", "--", ""][..],
        ] {
            assert!(GuardArgs::parse(os(bad)).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn descendants_are_found_through_every_generation_without_zombies() {
        let entry = |pid, state, parent| ProcessEntry {
            pid,
            state,
            parent,
            group: pid,
            session: pid,
        };
        let table = [
            entry(10, b'S', 1),
            entry(11, b'S', 10),
            entry(12, b'R', 11),
            entry(13, b'Z', 10),
            entry(14, b'S', 99),
            entry(15, b'S', 12),
        ];
        let mut found = descendants(&table, 10);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 15]);
        assert!(descendants(&table, 14).is_empty());
    }
}

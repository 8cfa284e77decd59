//! A child's leader process as the spawn that started it holds it: tokio's handle, or a pidfd
//! for a child started on a lasting thread ([`super::lasting`]), which tokio's `Command` cannot
//! start (its handle comes only from its own spawn). Waiting on a pidfd is its becoming
//! readable, then `waitid(P_PIDFD)`; a kill is `pidfd_send_signal`, which cannot reach a process
//! that reused the pid.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;

/// A child's leader, as the spawn that started it holds it.
#[derive(Debug)]
pub(super) enum Leader {
    /// Started by tokio on the calling thread.
    Tokio(tokio::process::Child),
    /// Started on a lasting thread.
    Pidfd(PidfdChild),
}

impl Leader {
    pub(super) fn id(&self) -> Option<u32> {
        match self {
            Leader::Tokio(child) => child.id(),
            Leader::Pidfd(child) => child.id(),
        }
    }

    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Leader::Tokio(child) => child.wait().await,
            Leader::Pidfd(child) => child.wait().await,
        }
    }

    pub(super) fn start_kill(&mut self) -> io::Result<()> {
        match self {
            Leader::Tokio(child) => child.start_kill(),
            Leader::Pidfd(child) => child.start_kill(),
        }
    }
}

/// A child of this process, held by its pidfd until reaped; dropping it unreaped kills and
/// reaps it (in a task when a tokio runtime is at hand).
#[derive(Debug)]
pub(super) struct PidfdChild {
    pid: u32,
    /// `None` once moved into the reaping task of a drop.
    fd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl PidfdChild {
    /// Takes charge of child `pid`, which no one else waits for (so it cannot have been reaped
    /// and its pid reused before the pidfd is opened). Needs a tokio runtime with I/O.
    pub(super) fn adopt(pid: u32) -> io::Result<PidfdChild> {
        let fd = pidfd_open(pid)?;
        // SAFETY: the pidfd is ours alone (just opened) and stays open while registered: it is
        // closed only with the `AsyncFd`, which deregisters it first.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)? };
        Ok(PidfdChild {
            pid,
            fd: Some(fd),
            status: None,
        })
    }

    /// The pid, until the child is reaped.
    pub(super) fn id(&self) -> Option<u32> {
        self.status.is_none().then_some(self.pid)
    }

    /// Waits for the child to exit and reaps it; its status again once reaped.
    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let fd = self
            .fd
            .as_ref()
            .ok_or_else(|| io::Error::other("the child's pidfd is gone"))?;
        loop {
            let mut ready = fd.readable().await?;
            if let Some(status) = reap(fd.get_ref().as_raw_fd(), false)? {
                self.status = Some(status);
                return Ok(status);
            }
            ready.clear_ready();
        }
    }

    /// Sends `SIGKILL`, unless the child was reaped already.
    pub(super) fn start_kill(&mut self) -> io::Result<()> {
        match (&self.fd, self.status) {
            (Some(fd), None) => send_signal(fd.get_ref().as_raw_fd(), libc::SIGKILL),
            (_, _) => Ok(()),
        }
    }
}

impl Drop for PidfdChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let Some(fd) = self.fd.take() else {
            return;
        };
        let raw = fd.get_ref().as_raw_fd();
        let _ = send_signal(raw, libc::SIGKILL);
        if !matches!(reap(raw, false), Ok(None)) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    while let Ok(mut ready) = fd.readable().await {
                        if !matches!(reap(fd.get_ref().as_raw_fd(), false), Ok(None)) {
                            return;
                        }
                        ready.clear_ready();
                    }
                });
            }
            // Killed: it ends at once, unless stuck in the kernel.
            Err(_) => {
                let _ = reap(raw, true);
            }
        }
    }
}

/// The pidfd of process `pid`.
#[cfg(target_os = "linux")]
pub(super) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    owned(fd)
}

/// A copy, in the calling thread's descriptor table, of descriptor `fd` of the process
/// `pidfd` refers to (close-on-exec).
#[cfg(target_os = "linux")]
pub(super) fn pidfd_getfd(pidfd: RawFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes two descriptor numbers and flags and returns a new descriptor
    // or -1; it reads no memory of ours.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) };
    owned(copy)
}

#[cfg(target_os = "linux")]
fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(rc).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(target_os = "linux")]
fn send_signal(pidfd: RawFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with a null siginfo sends `signal` as kill(2) would.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        // Exited, not yet reaped: nothing left to signal.
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// Reaps the child `pidfd` refers to: its status, or `None` while it runs (never under
/// `block`).
#[cfg(target_os = "linux")]
fn reap(pidfd: RawFd, block: bool) -> io::Result<Option<ExitStatus>> {
    let flags = libc::WEXITED | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: an all-zero siginfo_t is valid; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t into `info`, which outlives the call.
        let rc = unsafe { libc::waitid(libc::P_PIDFD, pidfd as libc::id_t, &mut info, flags) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid filled `info` for a child event (or left it zero under WNOHANG).
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => status | 0x80,
            _ => status,
        };
        return Ok(Some(ExitStatus::from_raw(raw)));
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn pidfd_open(_pid: u32) -> io::Result<OwnedFd> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn pidfd_getfd(_pidfd: RawFd, _fd: RawFd) -> io::Result<OwnedFd> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
fn send_signal(_pidfd: RawFd, _signal: libc::c_int) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
fn reap(_pidfd: RawFd, _block: bool) -> io::Result<Option<ExitStatus>> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

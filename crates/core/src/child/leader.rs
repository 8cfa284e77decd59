//! A child's leader process as the spawn that started it holds it: tokio's handle, or a pidfd
//! for a child started on a lasting thread ([`super::lasting`]), which tokio's `Command` cannot
//! start (its handle comes only from its own spawn). Waiting on a pidfd is its becoming
//! readable, then `waitid(P_PIDFD)`; a kill is `pidfd_send_signal`, which cannot reach a process
//! that reused the pid.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
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
            if let Some(status) = reap(fd.get_ref().as_fd(), false)? {
                self.status = Some(status);
                return Ok(status);
            }
            ready.clear_ready();
        }
    }

    /// Sends `SIGKILL`, unless the child was reaped already.
    pub(super) fn start_kill(&mut self) -> io::Result<()> {
        match (&self.fd, self.status) {
            (Some(fd), None) => kill(fd.get_ref().as_fd()),
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
        let _ = kill(fd.get_ref().as_fd());
        if !matches!(reap(fd.get_ref().as_fd(), false), Ok(None)) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    while let Ok(mut ready) = fd.readable().await {
                        if !matches!(reap(fd.get_ref().as_fd(), false), Ok(None)) {
                            return;
                        }
                        ready.clear_ready();
                    }
                });
            }
            // Killed: it ends at once, unless stuck in the kernel.
            Err(_) => {
                let _ = reap(fd.get_ref().as_fd(), true);
            }
        }
    }
}

/// The pidfd of process `pid`.
#[cfg(target_os = "linux")]
pub(super) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::other("pid out of range"))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// A copy, in the calling thread's descriptor table, of descriptor `fd` of the process
/// `pidfd` refers to (close-on-exec).
#[cfg(target_os = "linux")]
pub(super) fn pidfd_getfd(pidfd: impl AsFd, fd: RawFd) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_getfd(
        pidfd,
        fd,
        rustix::process::PidfdGetfdFlags::empty(),
    )?)
}

/// Sends `SIGKILL` to the process `pidfd` refers to; one that exited (not yet reaped) has
/// nothing left to signal.
#[cfg(target_os = "linux")]
fn kill(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reaps the child `pidfd` refers to: its status, or `None` while it runs (never under
/// `block`).
#[cfg(target_os = "linux")]
fn reap(pidfd: BorrowedFd<'_>, block: bool) -> io::Result<Option<ExitStatus>> {
    use rustix::process::{WaitId, WaitIdOptions};
    let options = if block {
        WaitIdOptions::EXITED
    } else {
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG
    };
    loop {
        match rustix::process::waitid(WaitId::PidFd(pidfd), options) {
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
            Ok(None) => return Ok(None),
            Ok(Some(status)) => {
                // As wait(2) encodes it: the code in the second byte, or the signal (with
                // 0x80 for a core dump).
                let raw = match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) => (code & 0xff) << 8,
                    (None, Some(signal)) if status.dumped() => signal | 0x80,
                    (None, Some(signal)) => signal,
                    (None, None) => 0,
                };
                return Ok(Some(ExitStatus::from_raw(raw)));
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn pidfd_open(_pid: u32) -> io::Result<OwnedFd> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn pidfd_getfd(_pidfd: impl AsFd, _fd: RawFd) -> io::Result<OwnedFd> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
fn kill(_pidfd: BorrowedFd<'_>) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

#[cfg(not(target_os = "linux"))]
fn reap(_pidfd: BorrowedFd<'_>, _block: bool) -> io::Result<Option<ExitStatus>> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no pidfd here"))
}

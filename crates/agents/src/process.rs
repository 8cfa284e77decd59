//! Runs one CLI child in its own process group with bounded output, a deadline and cancellation.
//!
//! On timeout, cancellation or an output overflow the whole group gets TERM, then KILL after a
//! bounded grace period; the leader is always awaited and the output readers drained (bounded)
//! before [`run`] returns, so no child outlives the request. A guard kills the group if the
//! future is dropped midway.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// Size of one read from a child's pipe.
const READ_CHUNK: usize = 16 * 1024;

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The executable.
    pub program: PathBuf,
    /// Arguments after the executable.
    pub args: Vec<OsString>,
    /// The complete environment (nothing else is inherited).
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Bytes written to stdin, which is then closed.
    pub stdin: Vec<u8>,
}

/// Bounds of one run.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLimits {
    /// Most stdout bytes accepted; one more is an overflow.
    pub max_stdout: usize,
    /// Most stderr bytes kept (the rest is drained and dropped).
    pub max_stderr: usize,
    /// Wall-clock deadline.
    pub timeout: Duration,
    /// Time between TERM and KILL, and the bound on draining output after exit.
    pub grace: Duration,
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The leader exited by itself (`None`: killed by a signal).
    Exited(Option<i32>),
    /// The deadline passed.
    TimedOut,
    /// The caller cancelled.
    Cancelled,
    /// stdout exceeded its limit.
    OutputTooLarge,
}

/// The finished run.
#[derive(Debug, Clone)]
pub struct Finished {
    /// How it ended.
    pub ended: Ended,
    /// stdout, at most `max_stdout` bytes.
    pub stdout: Vec<u8>,
    /// The first `max_stderr` bytes of stderr.
    pub stderr_head: Vec<u8>,
}

/// Kills the group on drop unless disarmed (the future was dropped before the leader was reaped).
struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid only sends a signal to that process group; it touches
    // no memory of ours. The group is the child's own (process_group(0) at spawn).
    unsafe {
        libc::kill(-pgid, signal);
    }
}

#[derive(Default)]
struct Sink {
    data: Mutex<Vec<u8>>,
    overflow: AtomicBool,
    notify: Notify,
}

async fn read_bounded<R: AsyncRead + Unpin>(
    mut reader: R,
    sink: Arc<Sink>,
    limit: usize,
    stop_on_overflow: bool,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut data = sink.data.lock().unwrap_or_else(PoisonError::into_inner);
        let room = limit.saturating_sub(data.len());
        data.extend_from_slice(&buf[..n.min(room)]);
        if n > room && stop_on_overflow {
            sink.overflow.store(true, Ordering::SeqCst);
            sink.notify.notify_one();
            return;
        }
    }
}

/// Runs `spec` to completion or until a bound trips; `Err` only when it cannot be spawned.
pub async fn run(
    spec: ProcessSpec,
    limits: ProcessLimits,
    cancel: impl Future<Output = ()>,
) -> std::io::Result<Finished> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut guard = GroupGuard { pgid };

    if let Some(mut stdin) = child.stdin.take() {
        let input = spec.stdin;
        tokio::spawn(async move {
            // A child that exits without reading its input makes this fail; that is its business.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let out = Arc::new(Sink::default());
    let err = Arc::new(Sink::default());
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(read_bounded(
            stdout,
            out.clone(),
            limits.max_stdout,
            true,
        )));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(read_bounded(
            stderr,
            err.clone(),
            limits.max_stderr,
            false,
        )));
    }

    let overflowed = out.notify.notified();
    let ended = tokio::select! {
        status = child.wait() => Ended::Exited(status?.code()),
        () = tokio::time::sleep(limits.timeout) => Ended::TimedOut,
        () = cancel => Ended::Cancelled,
        () = overflowed => Ended::OutputTooLarge,
    };
    match ended {
        Ended::Exited(_) => {}
        Ended::TimedOut | Ended::Cancelled | Ended::OutputTooLarge => {
            terminate(&mut child, pgid, limits.grace).await?;
        }
    }
    drain(readers, pgid, limits.grace).await;
    // Whatever the leader left running in its group (a helper it forgot) ends with the request.
    // The group id cannot be reused while any member lives, so this reaches only those.
    if let Some(pgid) = pgid {
        signal_group(pgid, libc::SIGKILL);
    }
    guard.disarm();
    let ended = if out.overflow.load(Ordering::SeqCst) {
        Ended::OutputTooLarge
    } else {
        ended
    };
    let take = |sink: &Sink| {
        std::mem::take(&mut *sink.data.lock().unwrap_or_else(PoisonError::into_inner))
    };
    Ok(Finished {
        ended,
        stdout: take(&out),
        stderr_head: take(&err),
    })
}

async fn terminate(child: &mut Child, pgid: Option<i32>, grace: Duration) -> std::io::Result<()> {
    match pgid {
        Some(pgid) => signal_group(pgid, libc::SIGTERM),
        None => child.start_kill()?,
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        match pgid {
            Some(pgid) => signal_group(pgid, libc::SIGKILL),
            None => child.start_kill()?,
        }
        child.wait().await?;
    }
    if let Some(pgid) = pgid {
        // Members that ignored TERM while the leader obeyed it must not outlive the request.
        signal_group(pgid, libc::SIGKILL);
    }
    Ok(())
}

/// Waits for the readers; grandchildren still holding the pipes get KILLed after `grace`.
async fn drain(readers: Vec<tokio::task::JoinHandle<()>>, pgid: Option<i32>, grace: Duration) {
    let all = futures_join(readers);
    tokio::pin!(all);
    if tokio::time::timeout(grace, &mut all).await.is_ok() {
        return;
    }
    if let Some(pgid) = pgid {
        signal_group(pgid, libc::SIGKILL);
    }
    let _ = tokio::time::timeout(grace, &mut all).await;
}

async fn futures_join(readers: Vec<tokio::task::JoinHandle<()>>) {
    for reader in readers {
        let _ = reader.await;
    }
}

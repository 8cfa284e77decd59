//! `execAsAgent`: `bash -c <command>` in its own process group.
//!
//! The child's stdout and stderr *are* the log artifacts (created new, unpredictable names), so
//! the runtime copies no output and its memory stays flat however much a command prints; the
//! result's tails are read afterwards through the handles that created the files. stdin is
//! `/dev/null`. Waiting, the deadline and the group kill are [`crate::child`]'s.

use intendant_protocol::runtime::{
    EXIT_PORT_TIMEOUT, EXIT_SPAWN_FAILED, EXIT_TIMEOUT, ExecResult, LOG_TAIL_BYTES,
};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::artifact;
use crate::child::{Reap, deadline_after, exit_code, kill_group, wait_deadline};
use crate::spawn::{self, Shell};

/// Interval between connection attempts while waiting for `wait_for_port`.
const PORT_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Timeout of one connection attempt to the awaited port.
const PORT_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// What to run.
#[derive(Debug, Clone)]
pub struct ExecSpec<'a> {
    /// Nonce of the command (names the log artifacts).
    pub nonce: u64,
    /// The shell command, `$NONCE[id]` already substituted.
    pub command: &'a str,
    /// `DISPLAY` for the child; `None` removes `DISPLAY` from its environment.
    pub display: Option<String>,
    /// Kill the process group after this long.
    pub timeout: Duration,
    /// Return as soon as `127.0.0.1:<port>` accepts a connection, leaving the process running.
    pub wait_for_port: Option<u16>,
}

/// A failure that prevents running the command at all (the batch aborts).
#[derive(Debug, Error)]
pub enum ExecError {
    /// A log artifact could not be created.
    #[error("could not create the {stream} log in {dir}: {source}")]
    Artifact {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The log dir.
        dir: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The two log files of one command, created new.
#[derive(Debug)]
pub struct LogPair {
    out: File,
    out_path: PathBuf,
    err: File,
    err_path: PathBuf,
}

impl LogPair {
    /// Creates `<nonce>_<random>_stdout.log` and `_stderr.log` in `log_dir`.
    pub fn create(log_dir: &Path, nonce: u64) -> Result<LogPair, ExecError> {
        let artifact_err = |stream: &'static str| {
            move |source| ExecError::Artifact {
                stream,
                dir: log_dir.display().to_string(),
                source,
            }
        };
        let prefix = nonce.to_string();
        let (out, out_path) = artifact::create_unique(log_dir, &prefix, "stdout.log")
            .map_err(artifact_err("stdout"))?;
        let (err, err_path) = match artifact::create_unique(log_dir, &prefix, "stderr.log") {
            Ok(pair) => pair,
            Err(e) => {
                let _ = std::fs::remove_file(&out_path);
                return Err(artifact_err("stderr")(e));
            }
        };
        Ok(LogPair {
            out,
            out_path,
            err,
            err_path,
        })
    }

    /// Whether both names still lead to the files held (nothing removed or replaced them).
    fn in_place(&self) -> bool {
        same_file(&self.out, &self.out_path) && same_file(&self.err, &self.err_path)
    }

    /// Removes files that were never used, but only where the names still lead to them.
    fn discard(self) {
        for (file, path) in [(&self.out, &self.out_path), (&self.err, &self.err_path)] {
            if same_file(file, path) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// How many pairs the creator thread may have made and not yet handed over (it holds at most
/// one more while blocked on the channel). A few are enough to absorb a slow create; more would
/// only leave more files to remove when a batch aborts.
const LOOKAHEAD: usize = 3;

/// A pair that takes longer than this to create means a slow disk: the rest of the batch's
/// pairs are then made ahead on a thread. A pair costs ~10-30 us on a calm disk or tmpfs, up to
/// ~1.5 ms on a busy one; spawning `bash` costs ~1.1 ms, and handing pairs over from a thread
/// costs about as much as 50 us of creating in line (measured with `runtime_spawn`).
const SLOW_PAIR: Duration = Duration::from_micros(50);

/// Log files for the batch's `execAsAgent`s, created when each command starts or, once the
/// disk shows itself slow, ahead on a thread of their own.
///
/// Creating a file on a busy disk can cost as much as spawning `bash` (journal-less ext4, for
/// one, scans past every inode freed in the last minutes). When a pair created in line takes
/// longer than [`SLOW_PAIR`], a creator thread is fed the batch's remaining `execAsAgent`
/// nonces and keeps up to [`LOOKAHEAD`] pairs ready, so creation overlaps the spawns on another
/// core. On a fast disk no thread is started: handing pairs between threads would cost more
/// than creating them. A pair made ahead is used only by the nonce it was made for and only if
/// its names still lead to it when that command starts (checked at hand-over, however far ahead
/// it was made); otherwise, or when the creator failed, the command creates its own pair and
/// meets any error itself. [`LogPrefetch::finish`] stops the thread, waits for it and removes
/// every unused pair.
#[derive(Debug)]
pub struct LogPrefetch {
    /// The batch's `execAsAgent` nonces not yet run, in order, while no creator runs.
    upcoming: VecDeque<u64>,
    creator: Option<Creator>,
    /// [`SLOW_PAIR`], except in tests.
    slow_pair: Duration,
}

impl Default for LogPrefetch {
    fn default() -> Self {
        LogPrefetch {
            upcoming: VecDeque::new(),
            creator: None,
            slow_pair: SLOW_PAIR,
        }
    }
}

/// The running creator thread and the nonces whose pairs it has not handed over yet.
#[derive(Debug)]
struct Creator {
    pending: VecDeque<u64>,
    rx: Receiver<(u64, Option<LogPair>)>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl LogPrefetch {
    /// Takes note of the batch's `execAsAgent` nonces (in the order the commands will run),
    /// after finishing any previous batch.
    pub fn start(&mut self, nonces: Vec<u64>) {
        self.finish();
        self.upcoming = VecDeque::from(nonces);
    }

    /// The pair for `nonce`: the one created ahead when valid, else a new one.
    fn take(&mut self, log_dir: &Path, nonce: u64) -> Result<LogPair, ExecError> {
        if let Some(c) = self.creator.as_mut().filter(|c| c.pending.contains(&nonce)) {
            // Pairs arrive in `pending` order; ones for skipped nonces are of no use now.
            while c.pending.pop_front().is_some() {
                let Ok((made_for, pair)) = c.rx.recv() else {
                    break;
                };
                if made_for != nonce {
                    if let Some(skipped) = pair {
                        skipped.discard();
                    }
                    continue;
                }
                match pair {
                    Some(p) if p.in_place() => return Ok(p),
                    Some(replaced) => replaced.discard(),
                    None => {}
                }
                break;
            }
        }
        if let Some(at) = self.upcoming.iter().position(|n| *n == nonce) {
            self.upcoming.drain(..=at);
        }
        let started = Instant::now();
        let pair = LogPair::create(log_dir, nonce)?;
        if started.elapsed() >= self.slow_pair
            && self.creator.is_none()
            && !self.upcoming.is_empty()
        {
            let rest = std::mem::take(&mut self.upcoming);
            self.creator = Creator::spawn(log_dir, rest);
        }
        Ok(pair)
    }

    /// Stops the creator thread, waits for it, and removes every pair it made that was not used.
    pub fn finish(&mut self) {
        self.upcoming.clear();
        let Some(c) = self.creator.take() else {
            return;
        };
        c.stop.store(true, Ordering::Relaxed);
        // Draining unblocks a creator waiting on the full channel; the loop ends when it exits.
        for (_, pair) in c.rx.iter() {
            if let Some(unused) = pair {
                unused.discard();
            }
        }
        let _ = c.thread.join();
    }
}

impl Creator {
    /// Starts creating the pairs of `nonces` in order; `None` when no thread can be started
    /// (every command then creates its own pair).
    fn spawn(log_dir: &Path, nonces: VecDeque<u64>) -> Option<Creator> {
        let (tx, rx) = mpsc::sync_channel(LOOKAHEAD);
        let stop = Arc::new(AtomicBool::new(false));
        let dir = log_dir.to_path_buf();
        let stop_flag = Arc::clone(&stop);
        let order: Vec<u64> = nonces.iter().copied().collect();
        let thread = std::thread::Builder::new()
            .name("log-creator".into())
            .spawn(move || create_ahead(&dir, order, &tx, &stop_flag))
            .ok()?;
        Some(Creator {
            pending: nonces,
            rx,
            stop,
            thread,
        })
    }
}

impl Drop for LogPrefetch {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The creator thread: one pair per nonce, in order, until told to stop. A failed creation is
/// handed over as `None` so that command retries and reports the error itself.
fn create_ahead(
    dir: &Path,
    nonces: Vec<u64>,
    tx: &SyncSender<(u64, Option<LogPair>)>,
    stop: &AtomicBool,
) {
    for nonce in nonces {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let pair = LogPair::create(dir, nonce).ok();
        if let Err(mpsc::SendError((_, Some(unsent)))) = tx.send((nonce, pair)) {
            unsent.discard();
            return;
        }
    }
}

/// Runs `spec` with logs in `log_dir`. Spawn and wait failures are results (exit code -1).
pub fn run(
    spec: &ExecSpec<'_>,
    log_dir: &Path,
    logs: &mut LogPrefetch,
) -> Result<ExecResult, ExecError> {
    let LogPair {
        out,
        out_path,
        err,
        err_path,
        ..
    } = logs.take(log_dir, spec.nonce)?;
    let mut outcome = match spawn::spawn_shell(
        spec.command,
        spec.display.as_deref(),
        out.as_fd(),
        err.as_fd(),
    ) {
        Ok(shell) => supervise(shell, spec),
        Err(e) => Outcome::failed(None, format!("could not spawn bash: {e}")),
    };

    let (stdout, stderr) = match (
        artifact::read_tail(&out, LOG_TAIL_BYTES),
        artifact::read_tail(&err, LOG_TAIL_BYTES),
    ) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            outcome.note(format!("could not read the output logs: {e}"));
            let empty = artifact::Tail {
                text: String::new(),
                truncated: false,
                len: 0,
            };
            (empty.clone(), empty)
        }
    };
    Ok(ExecResult {
        exit_code: outcome.exit_code,
        pid: outcome.pid,
        stdout: stdout.text,
        stderr: stderr.text,
        stdout_truncated: stdout.truncated,
        stderr_truncated: stderr.truncated,
        stdout_log: Some(out_path.display().to_string()),
        stderr_log: Some(err_path.display().to_string()),
        running: outcome.running,
        error: outcome.error,
    })
}

/// How a spawned (or unspawnable) command ended.
#[derive(Debug)]
struct Outcome {
    exit_code: i32,
    pid: Option<u32>,
    running: bool,
    error: Option<String>,
}

impl Outcome {
    fn failed(pid: Option<u32>, error: String) -> Self {
        Outcome {
            exit_code: EXIT_SPAWN_FAILED,
            pid,
            running: false,
            error: Some(error),
        }
    }

    fn note(&mut self, msg: String) {
        self.error = Some(match self.error.take() {
            Some(prev) => format!("{prev}; {msg}"),
            None => msg,
        });
    }
}

fn supervise(mut child: Shell, spec: &ExecSpec<'_>) -> Outcome {
    let pid = child.id();
    let deadline = deadline_after(spec.timeout);
    let waited = match spec.wait_for_port {
        None => wait_deadline(&mut child, deadline),
        Some(port) => return wait_port(child, port, deadline, spec.timeout),
    };
    match waited {
        Ok(Some(status)) => Outcome {
            exit_code: exit_code(status),
            pid: Some(pid),
            running: false,
            error: None,
        },
        Ok(None) => {
            kill_group(&mut child);
            Outcome {
                exit_code: EXIT_TIMEOUT,
                pid: Some(pid),
                running: false,
                error: Some(format!(
                    "timed out after {} ms; process group killed",
                    spec.timeout.as_millis()
                )),
            }
        }
        Err(e) => {
            kill_group(&mut child);
            Outcome::failed(Some(pid), format!("could not wait for the command: {e}"))
        }
    }
}

fn wait_port(mut child: Shell, port: u16, deadline: Instant, timeout: Duration) -> Outcome {
    let pid = child.id();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // The shell may exit early on purpose (`server &`), so its exit alone ends nothing.
    let mut exited: Option<ExitStatus> = None;
    loop {
        if TcpStream::connect_timeout(&addr, PORT_CONNECT_TIMEOUT).is_ok() {
            if exited.is_none() {
                exited = child.try_wait().ok().flatten();
            }
            return Outcome {
                exit_code: exited.map_or(0, exit_code),
                pid: Some(pid),
                running: exited.is_none(),
                error: None,
            };
        }
        if exited.is_none() {
            exited = child.try_wait().ok().flatten();
        }
        if Instant::now() >= deadline {
            kill_group(&mut child);
            return Outcome {
                exit_code: EXIT_PORT_TIMEOUT,
                pid: Some(pid),
                running: false,
                error: Some(format!(
                    "nothing listened on 127.0.0.1:{port} within {} ms; process group killed",
                    timeout.as_millis()
                )),
            };
        }
        std::thread::sleep(
            PORT_POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())),
        );
    }
}

#[cfg(test)]
mod tests;

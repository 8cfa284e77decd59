//! A worker CLI as a long-lived child of core's one supervisor (`intendant_core::child`): its
//! stdin and stdout carry protocol lines, its stderr is drained and its tail kept, and stopping it
//! closes stdin first, then TERM to the whole tree, then KILL after the grace period.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use intendant_core::child::{self, CancelToken, ChildReport, ChildSpec, Ending, Limits, Overflow};
use intendant_core::containment::Placement;
use serde_json::Value;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

use super::WorkerError;
use super::framing::{self, FrameError, FrameReader};
use crate::error::redact_literals;

/// Lines queued for the worker's stdin before a writer waits.
const OUTGOING_CAPACITY: usize = 64;
/// Protocol messages read ahead of the session loop.
pub const INCOMING_CAPACITY: usize = 256;
/// Bytes of the end of stderr kept for an error report.
const STDERR_TAIL_BYTES: usize = 4096;
/// Most stderr lines shown in an error.
const STDERR_TAIL_LINES: usize = 8;

/// What to run.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Values that must never appear in an error (keys admitted into the environment).
    pub secrets: Vec<String>,
    /// Longest protocol line accepted.
    pub max_line: usize,
    /// Time between closing stdin and TERM, and between TERM and KILL.
    pub grace: Duration,
}

/// The running worker: the handle that stops it and reports how it ended.
pub struct WorkerProcess {
    name: String,
    stop: CancelToken,
    close_stdin: CancelToken,
    report: Option<oneshot::Receiver<std::io::Result<ChildReport>>>,
    ended: Option<ChildReport>,
    grace: Duration,
    secrets: Vec<String>,
}

/// Sends protocol lines to the worker's stdin (clones share one pipe).
#[derive(Debug, Clone)]
pub struct LineSender {
    tx: mpsc::Sender<Value>,
}

impl LineSender {
    /// Queues one line; [`WorkerError::Closed`] once stdin is gone.
    pub async fn send(&self, value: Value) -> Result<(), WorkerError> {
        self.tx.send(value).await.map_err(|_| WorkerError::Closed)
    }
}

impl WorkerProcess {
    /// Starts `cmd` (named `name` in errors), in the session's cgroups of `placement` and at the
    /// session's nice value from before its `exec` (`Placement::entry`; without a placement, at
    /// that nice value still), below `guard` (`WorkerContext::guard`, `child::guarded`); returns
    /// the handle, the reader of its stdout and the sender to its stdin.
    pub fn spawn(
        name: &str,
        cmd: WorkerCommand,
        placement: Option<&Placement>,
        guard: Option<&Path>,
    ) -> Result<(WorkerProcess, FrameReader<pipe::Receiver>, LineSender), WorkerError> {
        let spec = ChildSpec {
            program: cmd.program.clone(),
            args: cmd.args,
            env: cmd.env,
            cwd: cmd.cwd,
            stdin: Vec::new(),
            passed: None,
        };
        let limits = Limits {
            max_stdout: 0,
            stdout_overflow: Overflow::Drain,
            max_stderr: 0,
            stderr_tail: STDERR_TAIL_BYTES,
            deadline: None,
            grace: cmd.grace,
            drain: cmd.grace,
        };
        let entry = placement.map_or_else(|| Placement::default().entry(), Placement::entry);
        let guarded = match guard {
            Some(runtime) => child::guarded(spec, runtime),
            None => Ok(spec),
        };
        let (running, pipes) = guarded
            .and_then(|spec| child::spawn_interactive_entered(spec, limits, &entry))
            .map_err(|e| {
                WorkerError::Spawn(format!(
                    "cannot start {name} ({}): {e}",
                    cmd.program.display()
                ))
            })?;
        let stop = CancelToken::new();
        let close_stdin = CancelToken::new();
        let (report_tx, report_rx) = oneshot::channel();
        let watched = stop.clone();
        tokio::spawn(async move {
            let report = running.finish(watched.cancelled()).await;
            let _ = report_tx.send(report);
        });
        let (tx, mut rx) = mpsc::channel::<Value>(OUTGOING_CAPACITY);
        let mut stdin = pipes.stdin;
        let closing = close_stdin.clone();
        tokio::spawn(async move {
            loop {
                let value = tokio::select! {
                    value = rx.recv() => value,
                    () = closing.cancelled() => None,
                };
                let Some(value) = value else { break };
                if framing::write_line(&mut stdin, &value).await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes the pipe: a well-behaved worker exits on it.
        });
        let process = WorkerProcess {
            name: name.to_owned(),
            stop,
            close_stdin,
            report: Some(report_rx),
            ended: None,
            grace: cmd.grace,
            secrets: cmd.secrets,
        };
        Ok((
            process,
            FrameReader::new(pipes.stdout, cmd.max_line),
            LineSender { tx },
        ))
    }

    /// The worker's name as errors show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Time between closing its stdin and TERM, and between TERM and KILL.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Waits until the worker ended by itself (its stdout closed) and reports how, within one
    /// grace period; then it is stopped.
    pub async fn exited(&mut self) -> ChildReport {
        if let Some(report) = &self.ended {
            return report.clone();
        }
        let Some(mut rx) = self.report.take() else {
            return lost_report();
        };
        let report = match tokio::time::timeout(self.grace, &mut rx).await {
            Ok(r) => r,
            Err(_) => {
                self.stop.cancel();
                rx.await
            }
        };
        let report = report.ok().and_then(Result::ok).unwrap_or_else(lost_report);
        self.ended = Some(report.clone());
        report
    }

    /// The error of a worker found gone while it was needed: how it ended, with its last
    /// stderr lines.
    pub async fn exit_error(&mut self) -> WorkerError {
        let report = self.exited().await;
        WorkerError::Exited(self.describe_exit(&report))
    }

    /// Ends the worker: closes its stdin, waits one grace period for it to exit, then stops the
    /// tree (TERM, KILL after the grace period). Returns how it ended (again, once it has).
    pub async fn stop(&mut self) -> ChildReport {
        self.close_stdin.cancel();
        self.exited().await
    }

    /// One sentence saying how the worker ended and its last stderr lines (secrets redacted).
    pub fn describe_exit(&self, report: &ChildReport) -> String {
        let how = match report.ending {
            Ending::Exited(Some(code)) => format!("{} exited with status {code}", self.name),
            Ending::Exited(None) => format!("{} was killed by a signal", self.name),
            Ending::TimedOut | Ending::Cancelled | Ending::OutputTooLarge => {
                format!("{} was stopped", self.name)
            }
        };
        let tail = last_lines(&redact_literals(&report.stderr_tail, &self.secrets));
        if tail.is_empty() {
            format!("{how} (no stderr output)")
        } else {
            format!("{how}; its last stderr lines:\n{tail}")
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // A session that ends (or is dropped) never leaves its worker running.
        self.close_stdin.cancel();
        self.stop.cancel();
    }
}

fn lost_report() -> ChildReport {
    ChildReport {
        ending: Ending::Cancelled,
        stdout: Default::default(),
        stderr: Default::default(),
        stderr_tail: String::new(),
    }
}

/// The last [`STDERR_TAIL_LINES`] non-blank lines of `text`.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines[start..].join("\n")
}

/// Reads `reader` on its own task into a bounded channel: each object, or the one error that
/// ends the stream; the channel closes at end of file.
pub fn spawn_reader(
    mut reader: FrameReader<pipe::Receiver>,
) -> mpsc::Receiver<Result<Value, FrameError>> {
    let (tx, rx) = mpsc::channel(INCOMING_CAPACITY);
    tokio::spawn(async move {
        loop {
            match reader.next().await {
                Ok(Some(v)) => {
                    if tx.send(Ok(v)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let text: String = (1..=20).map(|i| format!("l{i}\n\n")).collect();
        assert_eq!(last_lines(&text), "l13\nl14\nl15\nl16\nl17\nl18\nl19\nl20");
    }
}

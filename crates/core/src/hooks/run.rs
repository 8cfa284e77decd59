//! Running one hook: the [`HookLauncher`] boundary that starts the process, its one real
//! implementation [`SessionLauncher`] (inside the session's walls through [`crate::sandboxed`],
//! or outside them for a trusted `sandbox = false`), and [`interpret`], which turns how it ended
//! into its answer or a failure.

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use intendant_protocol::hooks::{HookEvent, HookOutput, HookVerdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::child::{CancelToken, Captured, ChildReport, Ending, Limits, Overflow, Pipes};
use crate::sandboxed::{self, Confinement, SandboxedCommand, Walls};
use intendant_protocol::text::clip;

/// Most bytes a hook may print on stdout; more stops it (a failed run).
pub const MAX_HOOK_STDOUT: usize = 64 * 1024;
/// Bytes of a hook's stderr kept (a reason on exit status 2, the tail on a failure).
const MAX_HOOK_STDERR: usize = 16 * 1024;
/// Bytes of a reason or a failure's stderr shown in events and to the model.
pub const MAX_REASON_BYTES: usize = 2 * 1024;
/// Time between TERM and KILL of a hook that overran, and how long its pipes are still read.
const HOOK_GRACE: Duration = Duration::from_secs(1);

/// One hook process to run.
#[derive(Debug, Clone)]
pub struct HookProcess {
    /// The argv, its program resolved against the project where it is a relative path.
    pub argv: Vec<String>,
    /// Working directory: the project root.
    pub cwd: PathBuf,
    /// The [`intendant_protocol::hooks::HookInput`], encoded.
    pub stdin: Vec<u8>,
    /// Whether it must run inside the session's sandbox.
    pub sandboxed: bool,
    /// How long it may run.
    pub timeout: Duration,
}

impl HookProcess {
    /// The bounds every hook runs under: its timeout, stdout capped (more stops it), stderr
    /// capped (drained past the cap).
    pub fn limits(&self) -> Limits {
        Limits {
            max_stdout: MAX_HOOK_STDOUT,
            stdout_overflow: Overflow::Stop,
            max_stderr: MAX_HOOK_STDERR,
            stderr_tail: MAX_REASON_BYTES,
            deadline: Some(self.timeout),
            grace: HOOK_GRACE,
            drain: HOOK_GRACE,
        }
    }
}

/// Starts hook processes for one session and sees each to its end (stopping its whole tree on
/// its deadline, on too much output, or when `cancel` resolves).
pub trait HookLauncher: Send + Sync {
    /// Whether this launcher can run a hook inside the session's sandbox.
    fn can_sandbox(&self) -> bool;

    /// Runs `process` to its end; `Err` when it cannot be started.
    fn launch(
        &self,
        process: HookProcess,
        cancel: CancelToken,
    ) -> BoxFuture<'static, std::io::Result<ChildReport>>;
}

/// Runs each hook like a command of the session: `intendant-runtime --sandboxed-stdio` applies
/// the session's walls (its commands' write set, the hidden reads, its network) and becomes the
/// hook, placed in the session's cgroups, with the commands' scrubbed environment; a trusted
/// `sandbox = false` gets the scrub and the cgroup without the sandbox. stdout is read here,
/// bounded: past [`MAX_HOOK_STDOUT`] the hook's tree is stopped.
#[derive(Debug, Clone)]
pub struct SessionLauncher {
    walls: Walls,
}

impl SessionLauncher {
    /// A launcher for the session whose walls are `walls`.
    pub fn new(walls: Walls) -> SessionLauncher {
        SessionLauncher { walls }
    }
}

impl HookLauncher for SessionLauncher {
    fn can_sandbox(&self) -> bool {
        true
    }

    fn launch(
        &self,
        process: HookProcess,
        cancel: CancelToken,
    ) -> BoxFuture<'static, std::io::Result<ChildReport>> {
        let walls = self.walls.clone();
        Box::pin(async move {
            let limits = process.limits();
            let mut argv = process.argv.into_iter();
            let command = SandboxedCommand {
                program: argv.next().unwrap_or_default().into(),
                args: argv.map(Into::into).collect(),
                cwd: process.cwd,
                vars: Vec::new(),
                confinement: if process.sandboxed {
                    Confinement::CommandWrites
                } else {
                    Confinement::Unsandboxed
                },
            };
            let (running, pipes) = sandboxed::spawn(&walls, &command, limits)
                .await
                .map_err(std::io::Error::other)?;
            supervise(running, pipes, process.stdin, cancel).await
        })
    }
}

/// Feeds `input` to a started hook, reads its stdout (at most [`MAX_HOOK_STDOUT`] bytes; one
/// more stops it), and sees it to its end (its deadline, or `cancel`).
async fn supervise(
    running: crate::child::Running,
    pipes: Pipes,
    input: Vec<u8>,
    cancel: CancelToken,
) -> std::io::Result<ChildReport> {
    let Pipes { mut stdin, stdout } = pipes;
    // Its own task, so a hook that never reads its input cannot hold the run past its deadline.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    });
    let overflow = CancelToken::new();
    let stop = {
        let (cancel, overflow) = (cancel.clone(), overflow.clone());
        async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = overflow.cancelled() => {}
            }
        }
    };
    let limit = u64::try_from(MAX_HOOK_STDOUT).unwrap_or(u64::MAX) + 1;
    let mut reader = Box::pin(async move {
        let mut bytes = Vec::new();
        let read = stdout.take(limit).read_to_end(&mut bytes).await;
        (bytes, read.is_ok())
    });
    let finish = running.finish(stop);
    tokio::pin!(finish);
    let mut read: Option<(Vec<u8>, bool)> = None;
    let mut report = loop {
        tokio::select! {
            got = &mut reader, if read.is_none() => {
                if got.0.len() > MAX_HOOK_STDOUT {
                    overflow.cancel();
                }
                read = Some(got);
            }
            report = &mut finish => break report?,
        }
    };
    if read.is_none() {
        // The hook ended; what a descendant still holds open is not waited for long.
        read = tokio::time::timeout(HOOK_GRACE, &mut reader).await.ok();
    }
    writer.abort();
    let (mut bytes, complete) = read.unwrap_or_default();
    let over = bytes.len() > MAX_HOOK_STDOUT;
    bytes.truncate(MAX_HOOK_STDOUT);
    if over && !cancel.is_cancelled() {
        report.ending = Ending::OutputTooLarge;
    }
    report.stdout = Captured {
        bytes,
        dropped: u64::from(over),
        complete: complete && !over,
    };
    Ok(report)
}

/// Runs a hook as a plain child of the test process (no sandbox, no runtime): the engine's
/// tests drive real scripts through it.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct PlainLauncher {
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

#[cfg(test)]
impl PlainLauncher {
    pub(crate) fn new(env: Vec<(std::ffi::OsString, std::ffi::OsString)>) -> PlainLauncher {
        PlainLauncher { env }
    }
}

#[cfg(test)]
impl HookLauncher for PlainLauncher {
    fn can_sandbox(&self) -> bool {
        false
    }

    fn launch(
        &self,
        process: HookProcess,
        cancel: CancelToken,
    ) -> BoxFuture<'static, std::io::Result<ChildReport>> {
        let env = self.env.clone();
        Box::pin(async move {
            let limits = process.limits();
            let mut argv = process.argv.into_iter();
            let spec = crate::child::ChildSpec {
                program: PathBuf::from(argv.next().unwrap_or_default()),
                args: argv.map(Into::into).collect(),
                env,
                cwd: process.cwd,
                stdin: process.stdin,
                passed: None,
            };
            crate::child::spawn(spec, limits)?
                .finish(cancel.cancelled())
                .await
        })
    }
}

/// A hook's answer as `event` counts it, or what went wrong. Exit status 0: stdout is the
/// answer (nothing at all: no decision); 2: a deny whose reason is stderr (for the events that
/// take a deny); anything else, a timeout, too much output, output that is not one
/// [`HookOutput`] or a decision the event does not take: a failure.
pub fn interpret(
    event: HookEvent,
    report: std::io::Result<ChildReport>,
    timeout: Duration,
) -> Result<HookOutput, String> {
    let report = match report {
        Ok(report) => report,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("cannot be started: {e} (is the command missing?)"));
        }
        Err(e) => return Err(format!("cannot be started: {e}")),
    };
    let stderr = || clip(report.stderr_tail.trim(), MAX_REASON_BYTES);
    match report.ending {
        Ending::TimedOut => Err(format!(
            "timed out after {}s and was stopped",
            timeout.as_secs()
        )),
        Ending::OutputTooLarge => Err(format!(
            "printed more than {} KiB on stdout and was stopped",
            MAX_HOOK_STDOUT / 1024
        )),
        Ending::Cancelled => Err("stopped: the turn was interrupted".to_owned()),
        Ending::Exited(Some(0)) => parse_answer(event, &report.stdout.bytes),
        Ending::Exited(Some(2)) if event.decisions().contains(&HookVerdict::Deny) => {
            let reason = stderr();
            Ok(HookOutput {
                decision: Some(HookVerdict::Deny),
                reason: Some(if reason.is_empty() {
                    "the hook exited with status 2".to_owned()
                } else {
                    reason
                }),
                additional_context: None,
            })
        }
        // The runtime's own status for a program it cannot execute (`--sandboxed-stdio`).
        Ending::Exited(Some(127)) => Err(with_stderr(
            "cannot be started (status 127: the command is missing or not executable)".to_owned(),
            &stderr(),
        )),
        Ending::Exited(Some(code)) => {
            Err(with_stderr(format!("exited with status {code}"), &stderr()))
        }
        Ending::Exited(None) => Err(with_stderr("was killed by a signal".to_owned(), &stderr())),
    }
}

fn with_stderr(what: String, stderr: &str) -> String {
    if stderr.is_empty() {
        what
    } else {
        format!("{what}: {stderr}")
    }
}

/// Reads stdout as the answer of a hook of `event`.
fn parse_answer(event: HookEvent, stdout: &[u8]) -> Result<HookOutput, String> {
    let text = std::str::from_utf8(stdout)
        .map_err(|_| "printed invalid output: stdout is not UTF-8".to_owned())?;
    if text.trim().is_empty() {
        return Ok(HookOutput::default());
    }
    let answer = HookOutput::parse(text.trim()).map_err(|e| {
        format!(
            "printed invalid output ({e}): expected one JSON object such as \
             {{\"decision\": \"{}\", \"reason\": \"...\"}}; it began {:?}",
            event.decisions()[0],
            clip(text.trim(), 80)
        )
    })?;
    match answer.decision {
        Some(decision) if !event.decisions().contains(&decision) => Err(format!(
            "printed the decision \"{decision}\", which {event} does not take (it takes {})",
            event
                .decisions()
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some(_) | None => Ok(answer),
    }
}

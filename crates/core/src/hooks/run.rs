//! Running one hook: the [`HookLauncher`] boundary that starts the process (inside the session's
//! walls, or outside them for a trusted `sandbox = false`), and [`interpret`], which turns how it
//! ended into its answer or a failure.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use intendant_protocol::hooks::{HookEvent, HookOutput, HookVerdict};

use crate::child::{self, CancelToken, ChildReport, ChildSpec, Ending, Limits, Overflow};
use crate::containment::Placement;
use crate::conversation::clip;

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

/// Runs a hook as a plain child of the controller: own process group, the policy-filtered
/// environment (no provider key), placed in the session's cgroups, bounded by
/// [`HookProcess::limits`]. It has no sandbox: it runs only the hooks that opted out of it
/// (`sandbox = false`, trusted) or those of a session whose sandbox is off.
#[derive(Debug, Clone)]
pub struct PlainLauncher {
    env: Vec<(OsString, OsString)>,
    placement: Option<Placement>,
}

impl PlainLauncher {
    /// A launcher giving each hook `env` (already filtered) and placing it with `placement`.
    pub fn new(env: Vec<(OsString, OsString)>, placement: Option<Placement>) -> PlainLauncher {
        PlainLauncher { env, placement }
    }
}

impl HookLauncher for PlainLauncher {
    fn can_sandbox(&self) -> bool {
        false
    }

    fn launch(
        &self,
        process: HookProcess,
        cancel: CancelToken,
    ) -> BoxFuture<'static, std::io::Result<ChildReport>> {
        let limits = process.limits();
        let placement = self.placement.clone();
        let env = self.env.clone();
        Box::pin(async move {
            if process.sandboxed {
                return Err(std::io::Error::other(
                    "this hook must run inside the sandbox and this launcher has none",
                ));
            }
            let mut argv = process.argv.into_iter();
            let program = argv.next().unwrap_or_default();
            let spec = ChildSpec {
                program: PathBuf::from(program),
                args: argv.map(OsString::from).collect(),
                env,
                cwd: process.cwd,
                stdin: process.stdin,
            };
            let running = child::spawn_placed(spec, limits, |pid| match &placement {
                Some(p) => p.place(pid),
                None => Ok(()),
            })?;
            running.finish(cancel.cancelled()).await
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

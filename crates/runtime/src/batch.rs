//! The sequential dispatcher: one command at a time, one envelope line per command.
//!
//! A failure of `execAsAgent` or `captureScreen`, or an unknown function, aborts the batch: that
//! command's envelope carries `"Error: <message>"` and nothing is printed for the commands after
//! it. Every other function's failure is reported the same way and the batch goes on. Each line
//! is flushed as soon as its command finishes, so a controller that gives up early still has
//! every finished result.

use intendant_protocol::runtime::{
    AgentInput, Command, DEFAULT_EXEC_TIMEOUT_MS, ERROR_PREFIX, Function, ResultEnvelope,
};
use serde::Serialize;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::display::Displays;
use crate::exec::{self, ExecSpec, LogPrefetch};
use crate::nonce::ProcessTable;
use crate::pty::{DEFAULT_SHELL_ID, PtySessions};
use crate::{ask_human, browse, edit, inspect, screen};

/// How a batch ended.
#[derive(Debug)]
pub enum BatchOutcome {
    /// Every command ran (some may have reported errors that do not abort).
    Completed,
    /// The command with this nonce failed in a way that aborts the batch.
    Aborted {
        /// The aborting command's nonce.
        nonce: u64,
    },
    /// stdout could not be written (the reader went away); the batch stopped there.
    OutputClosed(io::Error),
    /// The runtime was told to die mid-batch: the command running then and the rest of the
    /// batch are not reported.
    Terminated,
}

/// The result of one command: the envelope's `data` and whether the batch must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The stringified result, or `"Error: <message>"`.
    pub data: String,
    /// Whether this failure aborts the batch.
    pub abort: bool,
}

impl Step {
    fn error(message: impl std::fmt::Display, abort: bool) -> Step {
        Step {
            data: format!("{ERROR_PREFIX}{message}"),
            abort,
        }
    }
}

/// A function's outcome: its serialized result object, or the message of its failure.
type Outcome = Result<String, String>;

/// Serializes a function's result, or renders its error.
fn outcome<T: Serialize, E: std::fmt::Display>(r: Result<T, E>) -> Outcome {
    match r {
        Ok(v) => {
            serde_json::to_string(&v).map_err(|e| format!("could not serialize the result: {e}"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The state of one runtime process: log dir, process table, displays and PTY sessions.
#[derive(Debug)]
pub struct Runtime {
    log_dir: PathBuf,
    human_response_token: Option<String>,
    processes: ProcessTable,
    logs: LogPrefetch,
    ptys: PtySessions,
    // Declared last so it is dropped last: PTY shells may be X clients of a virtual display.
    displays: Displays,
}

impl Runtime {
    /// A runtime writing artifacts to `log_dir`; `human_response_token` gates `askHuman` answers.
    pub fn new(log_dir: &Path, human_response_token: Option<String>) -> Self {
        Runtime {
            log_dir: log_dir.to_path_buf(),
            human_response_token,
            processes: ProcessTable::default(),
            logs: LogPrefetch::default(),
            ptys: PtySessions::new(log_dir),
            displays: Displays::new(log_dir),
        }
    }

    /// Runs one command; `diag` receives human-facing notes (the askHuman echo).
    pub fn run_command(&mut self, cmd: &Command, diag: &mut dyn Write) -> Step {
        let Some(function) = Function::from_wire_name(&cmd.function) else {
            return Step::error(format!("unknown function `{}`", cmd.function), true);
        };
        let result = match function {
            Function::ExecAsAgent => self.exec(cmd),
            Function::CaptureScreen => self.capture(cmd),
            Function::InspectPath => outcome(inspect::run(cmd)),
            Function::EditFile => outcome(edit::run(cmd, false)),
            Function::WriteFile => outcome(edit::run(cmd, true)),
            Function::Browse => match cmd.url.as_deref() {
                Some(url) => browse::helper::fetch(url),
                None => Err("missing `url`".into()),
            },
            Function::AskHuman => outcome(ask_human::ask(
                &self.log_dir,
                cmd.question.as_deref(),
                self.human_response_token.as_deref(),
                diag,
            )),
            Function::ExecPty => self.pty(cmd),
        };
        match result {
            Ok(data) => Step { data, abort: false },
            Err(message) => Step::error(message, function.failure_aborts_batch()),
        }
    }

    fn exec(&mut self, cmd: &Command) -> Outcome {
        let raw = cmd.command.as_deref().ok_or("missing `command`")?;
        let command = self.processes.substitute(raw).map_err(|e| e.to_string())?;
        let display = cmd
            .display
            .map(|n| self.displays.prepare(n))
            .transpose()
            .map_err(|e| e.to_string())?;
        let spec = ExecSpec {
            nonce: cmd.nonce,
            command: &command,
            display,
            timeout: Duration::from_millis(cmd.timeout_ms.unwrap_or(DEFAULT_EXEC_TIMEOUT_MS)),
            wait_for_port: cmd.wait_for_port,
        };
        let result = exec::run(&spec, &self.log_dir, &mut self.logs).map_err(|e| e.to_string())?;
        if let Some(pid) = result.pid {
            self.processes.record(cmd.nonce, pid);
        }
        outcome(Ok::<_, String>(result))
    }

    fn capture(&mut self, cmd: &Command) -> Outcome {
        let number = cmd.display.ok_or("missing `display`")?;
        let display = self.displays.prepare(number).map_err(|e| e.to_string())?;
        outcome(screen::capture(&self.log_dir, cmd.nonce, &display))
    }

    fn pty(&mut self, cmd: &Command) -> Outcome {
        let raw = cmd.command.as_deref().ok_or("missing `command`")?;
        let command = self.processes.substitute(raw).map_err(|e| e.to_string())?;
        let shell_id = cmd.shell_id.as_deref().unwrap_or(DEFAULT_SHELL_ID);
        outcome(self.ptys.run(cmd.nonce, shell_id, &command))
    }
}

/// Runs every command of `input` in order, writing one flushed envelope line per command to
/// `out`, until the batch completes, aborts, or `out` fails.
///
/// The log files of the batch's `execAsAgent` commands are created as each starts or, on a slow
/// disk, ahead on a background thread (see [`LogPrefetch`]); the thread is stopped, and its
/// unused files removed, before this returns.
pub fn run_batch(
    input: &AgentInput,
    runtime: &mut Runtime,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> BatchOutcome {
    let exec_nonces: Vec<u64> = input
        .commands
        .iter()
        .filter(|c| Function::from_wire_name(&c.function) == Some(Function::ExecAsAgent))
        .map(|c| c.nonce)
        .collect();
    // A lone command has no later command to create files ahead for.
    if exec_nonces.len() > 1 {
        runtime.logs.start(exec_nonces);
    }
    let outcome = run_each(input, runtime, out, diag);
    runtime.logs.finish();
    outcome
}

fn run_each(
    input: &AgentInput,
    runtime: &mut Runtime,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> BatchOutcome {
    for cmd in &input.commands {
        let step = runtime.run_command(cmd, diag);
        if crate::child::terminating() {
            return BatchOutcome::Terminated;
        }
        let envelope =
            ResultEnvelope::new(cmd.nonce, step.data, input.runtime_protocol_token.clone());
        if let Err(e) = write_line(out, &envelope) {
            return BatchOutcome::OutputClosed(e);
        }
        if step.abort {
            return BatchOutcome::Aborted { nonce: cmd.nonce };
        }
    }
    BatchOutcome::Completed
}

fn write_line(out: &mut dyn Write, envelope: &ResultEnvelope) -> io::Result<()> {
    let mut line = serde_json::to_vec(envelope).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

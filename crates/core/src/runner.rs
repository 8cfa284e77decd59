//! [`RuntimeRunner`]: spawns `intendant-runtime` once per batch and reads back only what the
//! runtime itself said.
//!
//! The design decision to know: stdout of the runtime is untrusted. A model-driven command may
//! find a way to write to it, so every spawn gets a fresh random `runtime_protocol_token`, only
//! envelopes carrying it are accepted (and the token is stripped before anything else sees
//! them), and every other line is discarded and counted. The runtime runs under the one child
//! supervisor ([`crate::child`]): both pipes read to the end with a fixed cap so a flood can
//! neither exhaust memory nor deadlock the child, and a timeout or a cancel stops its whole
//! process tree.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use intendant_protocol::runtime::{AgentInput, Command, Function, ResultEnvelope};
use thiserror::Error;

use crate::child::{self, CancelToken, ChildSpec, Ending, Limits, Overflow};
use crate::containment::{LimitHits, Placement, machine_kill_note, machine_oom_kills};
use crate::outcome::SessionError;
use crate::runtime_env::{LOG_DIR_ENV, USER_DISPLAY_GRANTED_ENV, wall_vars};
use intendant_protocol::runtime::SANDBOX_WARNINGS;

/// Name of the runtime executable.
pub const RUNTIME_BIN: &str = "intendant-runtime";
/// Variable overriding where the runtime executable is.
pub const RUNTIME_PATH_ENV: &str = "INTENDANT_RUNTIME";
/// Bytes of each runtime output stream kept; the rest is drained and counted.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024 * 1024;
/// Default hard timeout of one batch (disabled for a batch containing `askHuman`).
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(120);
/// TERM-to-KILL grace of a stopped runtime, and how long its pipes are still read after the
/// stop for lines already flushed (five times as long after it exited by itself).
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Bytes of runtime stderr kept for the result summary.
const STDERR_SUMMARY_BYTES: usize = 4096;

/// Why a batch could not be run at all.
#[derive(Debug, Error)]
pub enum RunnerError {
    /// The runtime executable is missing.
    #[error(
        "cannot find {RUNTIME_BIN}: looked for {next_to_exe} (next to this program) and \
         {RUNTIME_PATH_ENV}={override_value}; build the workspace (`cargo build`) or set \
         {RUNTIME_PATH_ENV} to its path"
    )]
    NotFound {
        /// The path next to the controller's own executable.
        next_to_exe: String,
        /// The override, or `(unset)`.
        override_value: String,
    },
    /// Spawning or talking to the runtime failed.
    #[error("runtime {path}: {message}")]
    Io {
        /// The runtime executable.
        path: String,
        /// What failed.
        message: String,
    },
    /// The sandbox write set cannot be passed.
    #[error("{0}")]
    Sandbox(String),
    /// The OS has no usable randomness for the per-spawn secrets.
    #[error("cannot generate a protocol token: {0}")]
    Entropy(String),
    /// This program's own path, beside which the runtime is looked for, cannot be read.
    #[error("cannot find this program: {0}")]
    OwnPath(String),
}

impl From<RunnerError> for SessionError {
    fn from(e: RunnerError) -> SessionError {
        SessionError::Runner(Box::new(e))
    }
}

/// Everything fixed for the life of a session.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The runtime executable.
    pub runtime_path: PathBuf,
    /// Working directory of the runtime (the project root).
    pub cwd: PathBuf,
    /// `INTENDANT_LOG_DIR`: the session's artifacts directory (never its records).
    pub log_dir: PathBuf,
    /// Sandbox write set; `None` runs without the sandbox.
    pub sandbox_write_paths: Option<Vec<PathBuf>>,
    /// What commands must not read; passed only with the sandbox (its mount namespace applies
    /// them).
    pub sandbox_read_masks: Vec<crate::runtime_env::ReadMask>,
    /// `[sandbox] require_full`: with the sandbox on, the runtime refuses to run without its
    /// second layer.
    pub sandbox_require_full: bool,
    /// Whether commands may use the user's own display.
    pub user_display_granted: bool,
    /// The inherited environment, already filtered by the policy.
    pub env: Vec<(OsString, OsString)>,
    /// Hard timeout per batch.
    pub batch_timeout: Duration,
    /// Bytes kept per output stream.
    pub output_cap: usize,
    /// The session's cgroups each runtime is placed in; `None` places it nowhere.
    pub placement: Option<crate::containment::Placement>,
    /// The project's repository as resolved at the session's start: its pointers are put back
    /// after every batch ([`crate::git::GitRepo::restore`]).
    pub git: Option<crate::git::GitRepo>,
    /// The session's network namespace each runtime joins; `None`: the host's network.
    pub netns: Option<crate::network::SessionNetns>,
}

/// Everything one spawn produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutput {
    /// Authenticated results by nonce (first one wins on duplicates).
    pub results: BTreeMap<u64, String>,
    /// Stdout lines discarded: no or wrong token, not an envelope, or incomplete.
    pub discarded_lines: u64,
    /// Stdout bytes beyond the cap (drained, not kept).
    pub stdout_dropped_bytes: u64,
    /// Stderr bytes beyond the cap.
    pub stderr_dropped_bytes: u64,
    /// Tail of stderr (lossy UTF-8).
    pub stderr_tail: String,
    /// Whether the hard timeout killed the runtime.
    pub timed_out: bool,
    /// Whether the batch's [`CancelToken`] stopped the runtime (the turn was interrupted or the
    /// session stopped).
    pub cancelled: bool,
    /// Exit code of the runtime, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The runtime's warnings that the sandbox ran without part of it (each line starting with
    /// one of [`SANDBOX_WARNINGS`]: no second layer, no signal and socket scoping), one line
    /// apiece, when it gave any.
    pub sandbox_warning: Option<String>,
    /// The repository pointers a command changed and the batch's end put back (or could not).
    pub git_warnings: Vec<String>,
    /// The session's bounds its processes ran into since the last batch's end (a refused
    /// fork, a process killed for memory), one note per bound, each naming it: told the model
    /// with the batch's results and the human as a warning.
    pub limit_notes: Vec<String>,
}

impl BatchOutput {
    /// The honest note for a truncated stream, if any bytes were dropped.
    pub fn truncation_note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.stdout_dropped_bytes > 0 {
            parts.push(format!(
                "runtime stdout exceeded {} MiB; {} bytes were discarded (results after the cap are lost)",
                OUTPUT_CAP_BYTES / (1024 * 1024),
                self.stdout_dropped_bytes
            ));
        }
        if self.stderr_dropped_bytes > 0 {
            parts.push(format!(
                "runtime stderr exceeded {} MiB; {} bytes were discarded",
                OUTPUT_CAP_BYTES / (1024 * 1024),
                self.stderr_dropped_bytes
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// A JSON summary for the session log and frontends (no tokens).
    pub fn summary(&self) -> serde_json::Value {
        let mut summary = serde_json::json!({
            "results": self.results.iter().map(|(n, d)| serde_json::json!({"nonce": n, "data": d})).collect::<Vec<_>>(),
            "discarded_lines": self.discarded_lines,
            "stdout_dropped_bytes": self.stdout_dropped_bytes,
            "stderr_dropped_bytes": self.stderr_dropped_bytes,
            "stderr_tail": self.stderr_tail,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "exit_code": self.exit_code,
        });
        if let (Some(warning), Some(map)) = (&self.sandbox_warning, summary.as_object_mut()) {
            map.insert("sandbox_warning".into(), warning.clone().into());
        }
        if let (false, Some(map)) = (self.git_warnings.is_empty(), summary.as_object_mut()) {
            map.insert("git_warnings".into(), self.git_warnings.clone().into());
        }
        if let (false, Some(map)) = (self.limit_notes.is_empty(), summary.as_object_mut()) {
            map.insert("limit_notes".into(), self.limit_notes.clone().into());
        }
        summary
    }
}

/// The runtime this program runs: [`locate_runtime`] from `$INTENDANT_RUNTIME` and this
/// program's own path.
pub fn own_runtime() -> Result<PathBuf, RunnerError> {
    let own_exe = std::env::current_exe().map_err(|e| RunnerError::OwnPath(e.to_string()))?;
    locate_runtime(std::env::var_os(RUNTIME_PATH_ENV), &own_exe)
}

/// Finds the runtime: `INTENDANT_RUNTIME` when set, else next to `own_exe`.
pub fn locate_runtime(
    override_value: Option<OsString>,
    own_exe: &Path,
) -> Result<PathBuf, RunnerError> {
    let next_to_exe = own_exe
        .parent()
        .map(|dir| dir.join(RUNTIME_BIN))
        .unwrap_or_else(|| PathBuf::from(RUNTIME_BIN));
    let override_path = override_value.filter(|v| !v.is_empty()).map(PathBuf::from);
    let candidate = override_path.clone().unwrap_or_else(|| next_to_exe.clone());
    if candidate.is_file() {
        return Ok(candidate);
    }
    Err(RunnerError::NotFound {
        next_to_exe: next_to_exe.display().to_string(),
        override_value: override_path
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(unset)".to_owned()),
    })
}

/// A fresh random secret, 32 hex characters.
pub fn new_secret() -> Result<String, RunnerError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| RunnerError::Entropy(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether a batch contains `askHuman` (which disables the hard timeout).
pub fn has_ask_human(commands: &[Command]) -> bool {
    commands.iter().any(|c| c.is(Function::AskHuman))
}

/// Spawns the runtime, one process per batch.
#[derive(Debug, Clone)]
pub struct RuntimeRunner {
    config: RunnerConfig,
    /// The session's limit counters as the last batch's end read them (shared by clones: one
    /// session's groups).
    seen: Arc<Mutex<Seen>>,
}

/// What the last look at the kernel's counters found.
#[derive(Debug, Default)]
struct Seen {
    /// The session's groups'.
    hits: LimitHits,
    /// The machine's out-of-memory kills, read at the start and whenever a batch had a command
    /// `Killed`.
    machine_oom_kills: Option<u64>,
}

impl RuntimeRunner {
    /// A runner with `config`.
    pub fn new(config: RunnerConfig) -> RuntimeRunner {
        let seen = Seen {
            hits: config
                .placement
                .as_ref()
                .map(Placement::limit_hits)
                .unwrap_or_default(),
            machine_oom_kills: machine_oom_kills(),
        };
        RuntimeRunner {
            config,
            seen: Arc::new(Mutex::new(seen)),
        }
    }

    /// What the session's processes ran into since the last batch's end (a refused fork, a
    /// process killed for memory), one note per bound: read from its groups' counters, as
    /// the kernel tells a command only `Resource temporarily unavailable` or `Killed`. A
    /// command of `output` `Killed` (exit 137) with no group of the session's out of memory is
    /// set against the machine's out-of-memory kills since the last look.
    fn limit_notes(&self, output: &BatchOutput) -> Vec<String> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut notes = Vec::new();
        let mut group_kills = false;
        if let Some(placement) = &self.config.placement {
            let now = placement.limit_hits();
            group_kills = now.oom_kills > seen.hits.oom_kills;
            notes = placement.limit_notes(&seen.hits, &now);
            seen.hits = now;
        }
        let killed = output
            .results
            .values()
            .any(|data| data.contains("\"exit_code\":137") || data.contains("Killed"));
        if killed
            && !group_kills
            && let (Some(before), Some(now)) = (seen.machine_oom_kills, machine_oom_kills())
        {
            if now > before {
                notes.push(machine_kill_note(now - before));
            }
            seen.machine_oom_kills = Some(now);
        }
        notes
    }

    /// The configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// Sets whether later spawns get `INTENDANT_USER_DISPLAY_GRANTED` (the approval gate's
    /// grant is the single source of truth; the loop copies it here before each batch).
    pub fn set_user_display_granted(&mut self, granted: bool) {
        self.config.user_display_granted = granted;
    }

    /// Runs `commands` in one runtime process. `human_response_token`, when given, is the
    /// secret an `askHuman` answer file must carry. Once `cancel` is cancelled (the turn's token
    /// of [`SessionCancel`](crate::cancel::SessionCancel)) the runtime is stopped with its whole
    /// process tree, TERM then KILL (the groups its commands made too), and the batch returns
    /// what was read so far, [`BatchOutput::cancelled`] set; cancelled already, it starts none.
    pub async fn run_batch(
        &self,
        commands: Vec<Command>,
        human_response_token: Option<String>,
        cancel: &CancelToken,
    ) -> Result<BatchOutput, RunnerError> {
        // A batch whose turn is cancelled already (a stop that came with its approval, say)
        // starts no runtime: none of it runs.
        if cancel.is_cancelled() {
            return Ok(BatchOutput {
                cancelled: true,
                ..BatchOutput::default()
            });
        }
        let token = new_secret()?;
        let deadline = (!has_ask_human(&commands)).then_some(self.config.batch_timeout);
        let input = AgentInput {
            commands,
            runtime_protocol_token: Some(token.clone()),
            human_response_token,
        };
        let payload = serde_json::to_vec(&input)
            .map_err(|e| self.io_error(format!("cannot encode input: {e}")))?;
        let running = self.spawn_runtime(payload, deadline).await?;
        let report = running
            .finish(cancel.cancelled())
            .await
            .map_err(|e| self.io_error(format!("cannot wait: {e}")))?;
        // An unterminated last line is whole only when the pipe ended by itself and nothing
        // was cut off at the cap.
        let exited = match report.ending {
            Ending::Exited(code) => Some(code),
            Ending::TimedOut | Ending::Cancelled | Ending::OutputTooLarge => None,
        };
        let last_line_whole =
            report.stdout.complete && exited.is_some() && !report.stdout.truncated();
        let mut output = parse_stdout(&report.stdout.bytes, &token, last_line_whole);
        output.stdout_dropped_bytes = report.stdout.dropped;
        output.stderr_dropped_bytes = report.stderr.dropped;
        output.stderr_tail = report.stderr_tail;
        output.sandbox_warning = sandbox_warning(&report.stderr.bytes);
        output.timed_out = report.ending == Ending::TimedOut;
        output.cancelled = report.ending == Ending::Cancelled;
        output.exit_code = exited.flatten();
        if let Some(git) = &self.config.git {
            output.git_warnings = git.restore();
        }
        output.limit_notes = self.limit_notes(&output);
        Ok(output)
    }

    /// The one place the runtime is started: its environment rebuilt from the policy-filtered
    /// one, in the project root, under the batch's bounds.
    ///
    /// The design decision to know: the spawn and the placement run on a lasting thread
    /// ([`child::lasting`]), not on the async worker that asked. `posix_spawn` is a vfork: the
    /// calling thread sleeps until the child has exec'd, which on a busy machine is the child's
    /// wait for a CPU (about 3.5 ms a turn on the 2-core benchmark VM), and writing
    /// `cgroup.procs` takes the kernel's cgroup locks and an RCU grace period. On a worker
    /// thread (a 2-core machine has two) that stalled every other session's events and model
    /// streams meanwhile. Not tokio's blocking pool either: the runtime dies with the thread
    /// that started it, and the pool ends a thread idle for 10 s. A lasting thread's descriptor
    /// table is its own, so the spawn copies none of the daemon's (a dozen a session) into the
    /// runtime.
    async fn spawn_runtime(
        &self,
        payload: Vec<u8>,
        deadline: Option<Duration>,
    ) -> Result<child::Running, RunnerError> {
        let cfg = &self.config;
        let mut env = cfg.env.clone();
        env.push((LOG_DIR_ENV.into(), cfg.log_dir.clone().into_os_string()));
        env.extend(
            wall_vars(
                cfg.sandbox_write_paths.as_deref(),
                &cfg.sandbox_read_masks,
                cfg.sandbox_require_full,
            )
            .map_err(RunnerError::Sandbox)?,
        );
        if cfg.user_display_granted {
            env.push((USER_DISPLAY_GRANTED_ENV.into(), "1".into()));
        }
        let spec = ChildSpec {
            program: cfg.runtime_path.clone(),
            args: Vec::new(),
            env,
            cwd: cfg.cwd.clone(),
            stdin: payload,
            passed: cfg
                .netns
                .as_ref()
                .map(crate::network::SessionNetns::passed)
                .transpose()
                .map_err(RunnerError::Sandbox)?,
        };
        let limits = Limits {
            max_stdout: cfg.output_cap,
            stdout_overflow: Overflow::Drain,
            max_stderr: cfg.output_cap,
            stderr_tail: STDERR_SUMMARY_BYTES,
            deadline,
            grace: STOP_GRACE,
            drain: STOP_GRACE * 5,
        };
        child::spawn_lasting(
            spec,
            limits,
            cfg.placement
                .as_ref()
                .map(crate::containment::Placement::lent),
        )
        .await
        .map_err(|e| self.io_error(format!("cannot start: {e}")))
    }

    fn io_error(&self, message: String) -> RunnerError {
        RunnerError::Io {
            path: self.config.runtime_path.display().to_string(),
            message,
        }
    }
}

/// Splits stdout into lines and keeps the authenticated envelopes. A trailing line without a
/// newline is kept only when the pipe ended normally (the runtime exited by itself).
fn parse_stdout(bytes: &[u8], token: &str, accept_unterminated: bool) -> BatchOutput {
    let mut out = BatchOutput::default();
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // split yields one trailing element after the last newline (empty when terminated).
    let last = lines.pop().unwrap_or_default();
    if !last.is_empty() {
        if accept_unterminated {
            lines.push(last);
        } else {
            out.discarded_lines += 1;
        }
    }
    for line in lines {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<ResultEnvelope>(line) {
            Ok(env)
                if env.kind == ResultEnvelope::KIND
                    && env.runtime_protocol_token.as_deref() == Some(token) =>
            {
                out.results.entry(env.nonce).or_insert(env.data);
            }
            Ok(_) | Err(_) => out.discarded_lines += 1,
        }
    }
    out
}

/// The runtime's sandbox warning lines in its stderr, if any (together bounded like the tail).
fn sandbox_warning(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| SANDBOX_WARNINGS.iter().any(|w| l.starts_with(w)))
        .collect();
    (!lines.is_empty()).then(|| {
        lines
            .join("\n")
            .chars()
            .take(STDERR_SUMMARY_BYTES)
            .collect()
    })
}

#[cfg(test)]
mod tests;

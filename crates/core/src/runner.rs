//! [`RuntimeRunner`]: spawns `intendant-runtime` once per batch and reads back only what the
//! runtime itself said.
//!
//! The design decision to know: stdout of the runtime is untrusted. A model-driven command may
//! find a way to write to it, so every spawn gets a fresh random `runtime_protocol_token`, only
//! envelopes carrying it are accepted (and the token is stripped before anything else sees
//! them), and every other line is discarded and counted. Both pipes are read to the end with a
//! fixed cap so a flood can neither exhaust memory nor deadlock the child.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use intendant_protocol::runtime::{AgentInput, Command, Function, ResultEnvelope};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::runtime_env::{LOG_DIR_ENV, SANDBOX_WRITE_PATHS_ENV, USER_DISPLAY_GRANTED_ENV};

/// Name of the runtime executable.
pub const RUNTIME_BIN: &str = "intendant-runtime";
/// Variable overriding where the runtime executable is.
pub const RUNTIME_PATH_ENV: &str = "INTENDANT_RUNTIME";
/// Bytes of each runtime output stream kept; the rest is drained and counted.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024 * 1024;
/// Default hard timeout of one batch (disabled for a batch containing `askHuman`).
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the pipes are still read after a timeout kill, for lines already flushed.
const SALVAGE_GRACE: Duration = Duration::from_secs(2);
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
}

/// Everything fixed for the life of a session.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The runtime executable.
    pub runtime_path: PathBuf,
    /// Working directory of the runtime (the project root).
    pub cwd: PathBuf,
    /// `INTENDANT_LOG_DIR` (the session log directory).
    pub log_dir: PathBuf,
    /// Sandbox write set; `None` runs without the sandbox.
    pub sandbox_write_paths: Option<Vec<PathBuf>>,
    /// Whether commands may use the user's own display.
    pub user_display_granted: bool,
    /// The inherited environment, already filtered by the policy.
    pub env: Vec<(OsString, OsString)>,
    /// Hard timeout per batch.
    pub batch_timeout: Duration,
    /// Bytes kept per output stream.
    pub output_cap: usize,
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
    /// Exit code of the runtime, when it exited by itself.
    pub exit_code: Option<i32>,
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
        serde_json::json!({
            "results": self.results.iter().map(|(n, d)| serde_json::json!({"nonce": n, "data": d})).collect::<Vec<_>>(),
            "discarded_lines": self.discarded_lines,
            "stdout_dropped_bytes": self.stdout_dropped_bytes,
            "stderr_dropped_bytes": self.stderr_dropped_bytes,
            "stderr_tail": self.stderr_tail,
            "timed_out": self.timed_out,
            "exit_code": self.exit_code,
        })
    }
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
}

impl RuntimeRunner {
    /// A runner with `config`.
    pub fn new(config: RunnerConfig) -> RuntimeRunner {
        RuntimeRunner { config }
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
    /// secret an `askHuman` answer file must carry.
    pub async fn run_batch(
        &self,
        commands: Vec<Command>,
        human_response_token: Option<String>,
    ) -> Result<BatchOutput, RunnerError> {
        let cfg = &self.config;
        let io_err = |message: String| RunnerError::Io {
            path: cfg.runtime_path.display().to_string(),
            message,
        };
        let token = new_secret()?;
        let timeout = (!has_ask_human(&commands)).then_some(cfg.batch_timeout);
        let input = AgentInput {
            commands,
            runtime_protocol_token: Some(token.clone()),
            human_response_token,
        };
        let payload =
            serde_json::to_vec(&input).map_err(|e| io_err(format!("cannot encode input: {e}")))?;

        let mut cmd = tokio::process::Command::new(&cfg.runtime_path);
        cmd.env_clear()
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .env(LOG_DIR_ENV, &cfg.log_dir)
            .current_dir(&cfg.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(paths) = &cfg.sandbox_write_paths {
            let list = crate::runtime_env::join_path_list(paths).map_err(RunnerError::Sandbox)?;
            cmd.env(SANDBOX_WRITE_PATHS_ENV, list);
        }
        if cfg.user_display_granted {
            cmd.env(USER_DISPLAY_GRANTED_ENV, "1");
        }
        #[cfg(unix)]
        cmd.process_group(0);

        let mut child = cmd
            .spawn()
            .map_err(|e| io_err(format!("cannot start: {e}")))?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io_err("pipes were not set up".to_owned()));
        };
        let cap = cfg.output_cap;
        let (out_shared, out_task) = spawn_reader(stdout, cap);
        let (err_shared, err_task) = spawn_reader(stderr, cap);
        // Written from its own task so a runtime that never reads its input (a payload larger
        // than the pipe buffer) cannot hold the batch past its timeout; the kill closes the
        // pipe and ends the write. A runtime that dies early closes stdin too; its exit status
        // and stderr tell the story, so a broken pipe here is not reported on its own.
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });

        let mut timed_out = false;
        let status = match timeout {
            Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
                Ok(status) => Some(status),
                Err(_) => {
                    timed_out = true;
                    kill_group(&mut child).await;
                    None
                }
            },
            None => Some(child.wait().await),
        };
        // The runtime is gone: anything still unwritten will never be read (a descendant
        // holding the pipe must not keep the writer alive).
        writer.abort();
        let exit_code = match status {
            Some(Ok(s)) => s.code(),
            Some(Err(e)) => return Err(io_err(format!("cannot wait: {e}"))),
            None => None,
        };
        // After a kill, a descendant may still hold the pipes open: read what is already there,
        // then give up rather than wait on it.
        let grace = if timed_out {
            SALVAGE_GRACE
        } else {
            SALVAGE_GRACE * 5
        };
        let stdout = collect(out_shared, out_task, grace).await;
        let stderr = collect(err_shared, err_task, grace).await;
        // An unterminated last line is whole only when the pipe ended by itself and nothing
        // was cut off at the cap.
        let last_line_whole = stdout.complete && !timed_out && stdout.dropped == 0;
        let mut output = parse_stdout(&stdout.bytes, &token, last_line_whole);
        output.stdout_dropped_bytes = stdout.dropped;
        output.stderr_dropped_bytes = stderr.dropped;
        output.stderr_tail = tail_lossy(&stderr.bytes, STDERR_SUMMARY_BYTES);
        output.timed_out = timed_out;
        output.exit_code = exit_code;
        Ok(output)
    }
}

#[cfg(unix)]
async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        kill::kill_tree(pid);
    }
    let _ = child.kill().await;
}

#[cfg(not(unix))]
async fn kill_group(child: &mut tokio::process::Child) {
    let _ = child.kill().await;
}

/// Bytes read from one pipe.
#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    dropped: u64,
    /// Whether the pipe reached end of file.
    complete: bool,
}

/// Shared between the reader task and a timed-out join, so bytes read so far survive.
type SharedCapture = std::sync::Arc<std::sync::Mutex<Captured>>;

fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    reader: R,
    cap: usize,
) -> (SharedCapture, tokio::task::JoinHandle<()>) {
    let shared = SharedCapture::default();
    let handle = tokio::spawn(read_capped(reader, cap, shared.clone()));
    (shared, handle)
}

/// Reads `reader` to the end, keeping at most `cap` bytes and counting the rest.
async fn read_capped<R: AsyncRead + Unpin>(mut reader: R, cap: usize, shared: SharedCapture) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => {
                lock(&shared).complete = true;
                return;
            }
            Ok(n) => {
                let mut c = lock(&shared);
                let keep = n.min(cap.saturating_sub(c.bytes.len()));
                c.bytes.extend_from_slice(&buf[..keep]);
                c.dropped += (n - keep) as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn lock(shared: &SharedCapture) -> std::sync::MutexGuard<'_, Captured> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits up to `limit` for the reader to finish, then takes whatever it has read.
async fn collect(
    shared: SharedCapture,
    mut handle: tokio::task::JoinHandle<()>,
    limit: Duration,
) -> Captured {
    if tokio::time::timeout(limit, &mut handle).await.is_err() {
        handle.abort();
    }
    std::mem::take(&mut *lock(&shared))
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

fn tail_lossy(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

#[cfg(unix)]
mod kill;
#[cfg(test)]
mod tests;

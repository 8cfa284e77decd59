//! Shared helpers for the benchmark binaries under `src/bin/`.
//!
//! Every benchmark measures the thing and its baseline in the same run and reports the ratio,
//! so results compare across machines. Run one with
//! `cargo run --profile profiling -p intendant-bench --bin <name>`.

pub mod daemon;
pub mod report;
pub mod runtime_cost;

use std::path::PathBuf;

/// Variable that sets how many rounds a slow benchmark (a whole session or more per round)
/// takes the median of within one run; `bench/run.sh` sets it to 1, as its own runs give the
/// median and spread.
pub const SLOW_ROUNDS_ENV: &str = "INTENDANT_BENCH_SLOW_ROUNDS";

/// The rounds of a slow benchmark: `$INTENDANT_BENCH_SLOW_ROUNDS` when it is a positive
/// number, else `default`.
pub fn slow_rounds(default: usize) -> usize {
    std::env::var(SLOW_ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// Variable that, when set, makes [`work_dir`] leave its directory behind; `bench/run.sh` sets
/// it, points `TMPDIR` into its own work directory and removes everything once at the end.
pub const KEEP_FILES_ENV: &str = "INTENDANT_BENCH_KEEP_FILES";

/// A fresh temporary directory for one benchmark's files, removed when dropped unless
/// `$INTENDANT_BENCH_KEEP_FILES` is set.
///
/// The design decision to know: on this project's VMs (ext4 without a journal) every inode
/// freed makes file creation skip it for one to six minutes (`recently_deleted`), so a
/// benchmark that deletes its thousands of files at exit slows every file creation of the
/// next one, whose figures then measure the cleanup instead of the code.
pub fn work_dir() -> std::io::Result<tempfile::TempDir> {
    let mut dir = tempfile::tempdir()?;
    if std::env::var_os(KEEP_FILES_ENV).is_some() {
        dir.disable_cleanup(true);
    }
    Ok(dir)
}

/// The async runtime a benchmark drives a daemon from: two workers, so its client's reads and
/// writes never wait for one another on a busy machine.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// One plain `bash -c true`: the spawn the runtime benchmarks compare a runtime's command
/// with. A failed one is an error.
pub fn bash_true() -> std::io::Result<()> {
    use std::process::{Command, Stdio};
    let status = Command::new("bash")
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "bash -c true failed: {status}"
        )))
    }
}

/// Runs one batch (`input`, an `AgentInput`) through `runtime` with its log dir in `log_dir`,
/// sandboxed as the controller starts it (both layers required, the log dir and `/tmp` as write
/// roots) when `sandboxed`; its wall time from spawn to exit and its stdout. A runtime that exits
/// non-zero is an error.
pub fn run_batch(
    runtime: &std::path::Path,
    input: &[u8],
    log_dir: &std::path::Path,
    sandboxed: bool,
) -> std::io::Result<(std::time::Duration, Vec<u8>)> {
    run_batch_with(runtime, input, log_dir, sandboxed, &[])
}

/// [`run_batch`] with `env` added to the runtime's environment (a session's namespace to join).
pub fn run_batch_with(
    runtime: &std::path::Path,
    input: &[u8],
    log_dir: &std::path::Path,
    sandboxed: bool,
    env: &[(&str, &str)],
) -> std::io::Result<(std::time::Duration, Vec<u8>)> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(runtime);
    cmd.env("INTENDANT_LOG_DIR", log_dir)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if sandboxed {
        // `log_dir` plays the session's artifacts directory, its parent the state root.
        let roots = [log_dir.to_path_buf(), PathBuf::from("/tmp")];
        let state_root = log_dir.parent().unwrap_or(log_dir);
        let write_paths = std::env::join_paths(&roots).map_err(std::io::Error::other)?;
        cmd.env("INTENDANT_SANDBOX_WRITE_PATHS", write_paths)
            .env(
                "INTENDANT_SANDBOX_READ_MASKS",
                read_masks(state_root, log_dir, &roots)?,
            )
            .env("INTENDANT_SANDBOX_REQUIRE_FULL", "1");
    }
    let start = std::time::Instant::now();
    let mut child = cmd.spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?
        .write_all(input)?;
    let out = child.wait_with_output()?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} failed: {}",
            runtime.display(),
            out.status
        )));
    }
    Ok((elapsed, out.stdout))
}

/// The value of `INTENDANT_SANDBOX_READ_MASKS` the controller would pass for a session in
/// `project` with the state root `state_root` (`core::runtime_env::read_masks`), so a benchmark
/// starts the runtime with the hiding a session pays for.
pub fn read_masks(
    state_root: &std::path::Path,
    project: &std::path::Path,
    write_paths: &[PathBuf],
) -> std::io::Result<std::ffi::OsString> {
    use intendant_core::runtime_env::{ReadRequest, ReadScope};
    let config_dir = intendant_core::dotenv::config_dir();
    let scope = ReadScope::from_env(state_root, config_dir.as_deref());
    let (masks, _) = intendant_core::runtime_env::read_masks(
        &scope,
        &ReadRequest {
            project_root: project,
            write_paths,
            env_files: &[],
            deny_read: &[],
            allow_read: &[],
        },
    );
    intendant_protocol::runtime::encode_read_masks(&masks).map_err(std::io::Error::other)
}

/// The workspace binary `name` next to the running benchmark (both live in `target/<profile>/`),
/// or an error saying how to build it.
pub fn sibling_binary(name: &str) -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .ok_or_else(|| std::io::Error::other("benchmark binary has no directory"))?
        .join(name);
    if !path.is_file() {
        return Err(std::io::Error::other(format!(
            "{} not found; build it first: cargo build --profile profiling --bin {name}",
            path.display()
        )));
    }
    Ok(path)
}

/// The built `intendant` and `intendant-fake-model` beside this benchmark, once
/// `intendant-runtime` is found there too: what a benchmark of scripted sessions runs.
pub fn scripted_binaries() -> std::io::Result<(PathBuf, PathBuf)> {
    let intendant = sibling_binary("intendant")?;
    sibling_binary("intendant-runtime")?;
    Ok((intendant, sibling_binary("intendant-fake-model")?))
}

/// Starts the built `intendant-fake-model` (`fake`) serving the scenario file `scenario` on a
/// free port of 127.0.0.1; returns it and its port.
pub fn start_fake_model(
    fake: &std::path::Path,
    scenario: &std::path::Path,
) -> std::io::Result<(std::process::Child, u16)> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(fake)
        .arg("--scenario")
        .arg(scenario)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("intendant-fake-model has no stdout"))?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let port = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other(format!("intendant-fake-model said {line:?}")))?;
    Ok((child, port))
}

/// A `/proc/PID/status` figure in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> std::io::Result<u64> {
    proc_kib(pid, "status", key)
}

/// A `/proc/PID/smaps_rollup` figure in KiB (`Pss`, `Private_Dirty`).
pub fn smaps_kib(pid: u32, key: &str) -> std::io::Result<u64> {
    proc_kib(pid, "smaps_rollup", key)
}

/// The figure `key` of `/proc/PID/FILE`, a `KEY: N kB` line, in KiB.
fn proc_kib(pid: u32, file: &str, key: &str) -> std::io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no {key} in /proc/{pid}/{file}")))
}

/// The pids of process `pid`'s children now, from every `/proc/*/stat` (a child of any of its
/// threads).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = i32::try_from(pid).ok();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .is_ok_and(|stat| intendant_core::child::parent_from_stat(&stat) == parent)
        })
        .collect()
}

/// Sends `signal` to `child` and reaps it.
pub fn end_child(child: &mut std::process::Child, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid touches no memory.
        unsafe {
            libc::kill(pid, signal);
        }
    }
    let _ = child.wait();
}

/// Writes a fake-model scenario of per-session `scripts` (each `when_task_contains` its marker)
/// to `dir/scenario.json`, answering a request past a script's end per `on_exhausted`
/// (`"done"` or `"error"`); returns its path.
pub fn write_scripts_scenario(
    dir: &std::path::Path,
    scripts: Vec<serde_json::Value>,
    on_exhausted: &str,
) -> std::io::Result<PathBuf> {
    let path = dir.join("scenario.json");
    let scenario = serde_json::json!({
        "model": "fake-model",
        "on_exhausted": on_exhausted,
        "turns": [],
        "scripts": scripts,
    });
    std::fs::write(&path, serde_json::to_vec(&scenario)?)?;
    Ok(path)
}

//! `runtime_spawn`: 200 `execAsAgent` `true` commands through one `intendant-runtime` invocation
//! against 200 plain `bash -c true` spawns, in the same run. Goal: ratio under 1.15.
//!
//! The runtime runs sandboxed, as the controller starts it by default: Landlock plus the second
//! layer (mount namespace and seccomp filter), with the log dir and `/tmp` as write roots, so
//! the layers' once-per-process setup is part of what is measured.
//!
//! Each side is measured `ROUNDS` times, alternating, and the fastest round of each is compared,
//! so a noisy neighbour on a shared machine inflates neither side alone.
//!
//! Every round writes its log files into a fresh directory and nothing is deleted until all
//! rounds are done: on a disk mounted with online `discard` (this project's VMs), mass deletes
//! slow every later inode creation for tens of seconds, so clearing the log dir between rounds
//! made the benchmark measure its own cleanup rather than the runtime.

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const COMMANDS: usize = 200;
const ROUNDS: usize = 15;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let log_dir = intendant_bench::work_dir()?;
    let commands: Vec<serde_json::Value> = (0..COMMANDS)
        .map(|i| serde_json::json!({"function":"execAsAgent","nonce":i,"command":"true"}))
        .collect();
    let input = serde_json::to_vec(&serde_json::json!({ "commands": commands }))?;

    let mut best_plain = Duration::MAX;
    let mut best_runtime = Duration::MAX;
    let mut best_creates = Duration::MAX;
    // The same batch with the log dir in memory separates the runtime's own cost from the
    // disk's cost of creating the log files.
    let shm = Path::new("/dev/shm");
    let mem_dir = if shm.is_dir() {
        Some(tempfile::tempdir_in(shm)?)
    } else {
        None
    };
    let mut best_mem = Duration::MAX;
    for round in 0..ROUNDS {
        best_plain = best_plain.min(plain_spawns()?);
        let disk_dir = fresh_dir(log_dir.path(), &format!("runtime_{round}"))?;
        best_runtime = best_runtime.min(through_runtime(&runtime, &input, &disk_dir)?);
        let creates_dir = fresh_dir(log_dir.path(), &format!("creates_{round}"))?;
        best_creates = best_creates.min(log_file_creates(&creates_dir)?);
        if let Some(dir) = &mem_dir {
            let mem_round = fresh_dir(dir.path(), &format!("runtime_{round}"))?;
            best_mem = best_mem.min(through_runtime(&runtime, &input, &mem_round)?);
        }
    }
    let ratio = best_runtime.as_secs_f64() / best_plain.as_secs_f64();
    println!("runtime_spawn: {COMMANDS} x `true`, best of {ROUNDS} rounds");
    println!("  plain bash -c true spawns : {:>8.1} ms", ms(best_plain));
    println!("  through intendant-runtime : {:>8.1} ms", ms(best_runtime));
    println!("  ratio                     : {ratio:.3}x (goal < 1.15x)");
    println!(
        "  of which the filesystem's cost of the {} mandated log files (create-new, same dir): {:.1} ms",
        2 * COMMANDS,
        ms(best_creates)
    );
    intendant_bench::report::record(&Figure {
        row: "runtime_batch",
        measured: "200 execAsAgent `true` in one sandboxed batch (both layers)",
        value: ms(best_runtime),
        baseline: "200 `bash -c true` spawned by a minimal Rust program",
        baseline_value: ms(best_plain),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.15),
        limit: None,
    })?;
    if mem_dir.is_some() {
        println!(
            "  with the log dir on tmpfs  : {:>8.1} ms, ratio {:.3}x",
            ms(best_mem),
            best_mem.as_secs_f64() / best_plain.as_secs_f64()
        );
    }
    Ok(())
}

fn fresh_dir(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Creating the two log files per command the protocol requires, alone.
fn log_file_creates(dir: &Path) -> Result<Duration> {
    use std::os::unix::fs::OpenOptionsExt;
    let paths: Vec<PathBuf> = (0..2 * COMMANDS)
        .map(|i| dir.join(format!("bench_{i}.log")))
        .collect();
    let start = Instant::now();
    for p in &paths {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)?;
    }
    Ok(start.elapsed())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn plain_spawns() -> Result<Duration> {
    let start = Instant::now();
    for _ in 0..COMMANDS {
        intendant_bench::bash_true()?;
    }
    Ok(start.elapsed())
}

fn through_runtime(runtime: &Path, input: &[u8], log_dir: &Path) -> Result<Duration> {
    let (elapsed, stdout) = intendant_bench::run_batch(runtime, input, log_dir, true)?;
    let lines = stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    if lines != COMMANDS {
        bail!("expected {COMMANDS} result lines, got {lines}");
    }
    Ok(elapsed)
}

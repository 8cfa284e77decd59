//! `runtime_rss`: peak RSS of `intendant-runtime` while a command writes 1 GiB to stdout, beside
//! the peak RSS of a trivial batch in the same run (goal: flat, under 16 MiB), and the wall time
//! of that batch beside `sh -c 'head -c 1G /dev/zero > file'` (goal: under 1.3x). The runtime
//! streams the output into its log file and keeps only a tail, so both sides write 1 GiB to the
//! same disk.
//!
//! The peak is the kernel's own high-water mark: `VmHWM` from `/proc/<pid>/status`, polled while
//! the runtime runs (it only grows) and cross-checked with `ru_maxrss` from `wait4`, which also
//! covers the runtime's reaped children (bash, head), so the larger of the two is reported.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use intendant_bench::report::{self, Better, Figure};

const BIG: &str = "head -c 1G /dev/zero";
const GOAL_KIB: u64 = 16 * 1024;
/// Alternating rounds of the timed pair; the fastest of each side is compared.
const TIME_ROUNDS: usize = 3;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let log_dir = intendant_bench::work_dir()?;
    let (baseline, _) = peak_kib(&runtime, "true", log_dir.path())?;
    let mut big = 0;
    let mut best_runtime = Duration::MAX;
    let mut best_shell = Duration::MAX;
    for _ in 0..TIME_ROUNDS {
        let (kib, wall) = peak_kib(&runtime, BIG, log_dir.path())?;
        big = big.max(kib);
        best_runtime = best_runtime.min(wall);
        best_shell = best_shell.min(shell_to_file(log_dir.path())?);
    }
    println!("runtime_rss: peak RSS of intendant-runtime");
    println!("  trivial batch (`true`)          : {:>8} KiB", baseline);
    println!("  1 GiB to stdout (`{BIG}`) : {:>8} KiB", big);
    println!(
        "  growth {:+} KiB; goal < {GOAL_KIB} KiB: {}",
        i128::from(big) - i128::from(baseline),
        if big < GOAL_KIB { "met" } else { "MISSED" }
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "  wall time, best of {TIME_ROUNDS}: runtime {:.0} ms, `sh -c '{BIG} > file'` {:.0} ms, ratio {:.3}x (goal < 1.3x)",
        ms(best_runtime),
        ms(best_shell),
        best_runtime.as_secs_f64() / best_shell.as_secs_f64()
    );
    report::record(&Figure {
        row: "runtime_output_time",
        measured: "1 GiB to stdout by one command through the runtime: wall time",
        value: ms(best_runtime),
        baseline: "`sh -c 'head -c 1G /dev/zero > file'`",
        baseline_value: ms(best_shell),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.3),
        limit: None,
    })?;
    report::record(&Figure {
        row: "runtime_output_rss",
        measured: "1 GiB to stdout by one command: runtime peak RSS",
        value: big as f64,
        baseline: "peak RSS of a one-command `true` batch",
        baseline_value: baseline as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: None,
        limit: Some(GOAL_KIB as f64),
    })?;
    Ok(())
}

/// The same 1 GiB written by a shell straight into a file in `dir`.
fn shell_to_file(dir: &Path) -> Result<Duration> {
    let out = dir.join("shell_baseline.out");
    let start = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{BIG} > \"$1\""))
        .arg("sh")
        .arg(&out)
        .status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        bail!("the shell baseline failed: {status}");
    }
    std::fs::remove_file(&out)?;
    Ok(elapsed)
}

/// Peak RSS (KiB) and wall time of a one-command batch.
fn peak_kib(runtime: &Path, command: &str, log_dir: &Path) -> Result<(u64, Duration)> {
    let input = serde_json::to_vec(&serde_json::json!({"commands":[
        {"function":"execAsAgent","nonce":1,"command":command}
    ]}))?;
    let start = Instant::now();
    let mut child = Command::new(runtime)
        .env("INTENDANT_LOG_DIR", log_dir)
        .env_remove("INTENDANT_SANDBOX_WRITE_PATHS")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {}", runtime.display()))?;
    child.stdin.take().context("stdin")?.write_all(&input)?;
    let pid = libc::pid_t::try_from(child.id())?;
    let status_path = format!("/proc/{pid}/status");
    let mut polled = 0;
    let (status, rusage, wall) = loop {
        if let Ok(s) = std::fs::read_to_string(&status_path) {
            polled = polled.max(vm_hwm_kib(&s).unwrap_or(0));
        }
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-buffer.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own child's pid, valid out-pointers; WNOHANG never blocks.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut rusage) };
        if rc == pid {
            break (status, rusage, start.elapsed());
        }
        if rc < 0 {
            bail!("wait4: {}", std::io::Error::last_os_error());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("runtime did not exit 0 (wait status {status})");
    }
    for entry in std::fs::read_dir(log_dir)? {
        std::fs::remove_file(entry?.path())?;
    }
    let maxrss = u64::try_from(rusage.ru_maxrss).unwrap_or(0);
    Ok((polled.max(maxrss), wall))
}

fn vm_hwm_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

//! `pty_roundtrip`: 200 `execPty` `true` in one persistent shell of one `intendant-runtime` run,
//! beside `bash` fed the same 200 lines on a pipe, in the same run. Goal: under 1.5x.
//!
//! The runtime's side includes opening the PTY, starting its shell and, per command, writing
//! it with its markers and reading until the end marker; the baseline is a shell reading the
//! commands from a pipe with nothing to wait for. The two alternate for `ROUNDS` rounds and the
//! fastest of each is compared.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};

const COMMANDS: usize = 200;
const ROUNDS: usize = 7;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let log_dir = intendant_bench::work_dir()?;
    let commands: Vec<serde_json::Value> = (0..COMMANDS)
        .map(|i| serde_json::json!({"function":"execPty","nonce":i,"command":"true"}))
        .collect();
    let input = serde_json::to_vec(&serde_json::json!({ "commands": commands }))?;
    let script = "true\n".repeat(COMMANDS);
    let mut best_pty = Duration::MAX;
    let mut best_pipe = Duration::MAX;
    for _ in 0..ROUNDS {
        best_pty = best_pty.min(through_pty(&runtime, &input, log_dir.path())?);
        best_pipe = best_pipe.min(bash_on_a_pipe(&script)?);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let ratio = best_pty.as_secs_f64() / best_pipe.as_secs_f64();
    println!("pty_roundtrip: {COMMANDS} x `true`, best of {ROUNDS}");
    println!("  execPty in one runtime run : {:>8.1} ms", ms(best_pty));
    println!("  bash fed them on a pipe    : {:>8.1} ms", ms(best_pipe));
    println!("  ratio {ratio:.2}x (goal < 1.5x)");
    intendant_bench::report::record(&Figure {
        row: "pty_roundtrip",
        measured: "200 execPty `true` in one persistent shell",
        value: ms(best_pty),
        baseline: "`bash` fed the same 200 lines on a pipe",
        baseline_value: ms(best_pipe),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.5),
        limit: None,
    })?;
    Ok(())
}

fn bash_on_a_pipe(script: &str) -> Result<Duration> {
    let start = Instant::now();
    let mut child = Command::new("bash")
        .args(["--norc", "--noprofile"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(script.as_bytes())?;
    let status = child.wait()?;
    let elapsed = start.elapsed();
    if !status.success() {
        bail!("bash failed: {status}");
    }
    Ok(elapsed)
}

fn through_pty(runtime: &Path, input: &[u8], log_dir: &Path) -> Result<Duration> {
    let (elapsed, stdout) = intendant_bench::run_batch(runtime, input, log_dir, false)?;
    let text = String::from_utf8_lossy(&stdout);
    let results = text.lines().filter(|l| !l.trim().is_empty()).count();
    if results != COMMANDS {
        bail!("expected {COMMANDS} result lines, got {results}");
    }
    if let Some(failed) = text.lines().find(|l| l.contains("Error:")) {
        bail!("an execPty command failed: {failed}");
    }
    Ok(elapsed)
}

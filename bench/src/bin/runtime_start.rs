//! `runtime_start`: one empty batch through `intendant-runtime`, started as the controller starts
//! it (sandboxed, both layers), beside spawning `true`, in the same run. Reported, no goal: it is
//! the fixed cost every batch pays once.
//!
//! The two sides alternate for `ROUNDS` rounds and the median of each is compared.
//!
//! With `INTENDANT_BENCH_BASELINE_RUNTIME` naming an earlier build of `intendant-runtime` (for
//! example the last release's), that build takes every round too, started exactly the same way,
//! and a second row compares the two: what a change to the sandbox costs each batch, measured
//! side by side rather than against a number from another day.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use intendant_bench::report::{Better, Figure};

const ROUNDS: usize = 101;

/// Names an earlier `intendant-runtime` to measure beside this one.
const BASELINE_RUNTIME_ENV: &str = "INTENDANT_BENCH_BASELINE_RUNTIME";

/// The most this build's empty batch may cost against the earlier build's.
const BASELINE_GOAL: f64 = 1.2;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    // The work directory plays the state root, hidden from the batch but for its artifacts.
    let state_root = intendant_bench::work_dir()?;
    let log_dir = state_root.path().join("artifacts");
    std::fs::create_dir(&log_dir)?;
    let earlier = std::env::var_os(BASELINE_RUNTIME_ENV).map(std::path::PathBuf::from);
    let mut ours = Vec::with_capacity(ROUNDS);
    let mut plain = Vec::with_capacity(ROUNDS);
    let mut before = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        ours.push(empty_batch(&runtime, &log_dir)?);
        plain.push(spawn_true()?);
        if let Some(earlier) = &earlier {
            before.push(empty_batch(earlier, &log_dir)?);
        }
    }
    let ours = median(&mut ours);
    let plain = median(&mut plain);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("runtime_start: one empty batch vs `true`, median of {ROUNDS}");
    println!("  intendant-runtime, empty batch : {:>7.3} ms", ms(ours));
    println!("  `true`                         : {:>7.3} ms", ms(plain));
    println!("  ratio {:.2}x", ours.as_secs_f64() / plain.as_secs_f64());
    intendant_bench::report::record(&Figure {
        row: "runtime_start",
        measured: "one empty batch through the sandboxed runtime",
        value: ms(ours),
        baseline: "spawning `true`",
        baseline_value: ms(plain),
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    if let Some(earlier) = &earlier {
        let before = median(&mut before);
        println!(
            "  {} (earlier build): {:>7.3} ms, ratio {:.2}x",
            earlier.display(),
            ms(before),
            ours.as_secs_f64() / before.as_secs_f64()
        );
        intendant_bench::report::record(&Figure {
            row: "runtime_start_vs_earlier",
            measured: "one empty batch through the sandboxed runtime",
            value: ms(ours),
            baseline: "the same through an earlier build ($INTENDANT_BENCH_BASELINE_RUNTIME)",
            baseline_value: ms(before),
            unit: "ms",
            better: Better::Lower,
            goal: Some(BASELINE_GOAL),
            limit: None,
        })?;
    }
    Ok(())
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn spawn_true() -> Result<Duration> {
    let start = Instant::now();
    let status = Command::new("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        bail!("true failed: {status}");
    }
    Ok(elapsed)
}

fn empty_batch(runtime: &Path, log_dir: &Path) -> Result<Duration> {
    let (elapsed, _) = intendant_bench::run_batch(runtime, br#"{"commands":[]}"#, log_dir, true)?;
    Ok(elapsed)
}

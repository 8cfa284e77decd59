//! `runtime_invocation`: the whole cost of one `intendant-runtime` process, start to exit, as a
//! session turn pays it: `N` separate invocations, each a batch of one `execAsAgent` `true`,
//! against `N` plain `bash -c true` spawns, in the same run. Reported, no goal: it is the fixed
//! cost every agent turn pays (the daemon benchmark's 1000 turns are 1000 runtimes).
//!
//! The runtime is started as the controller starts it (`core::runner`): sandboxed with both
//! layers required, in a project root that is a git repository, with the controller's default
//! write set (project root, `/tmp`, the artifacts dir, `~/.cargo`, `~/.rustup`, `~/.cache`),
//! so the guards' walk of those roots and the mounts over them are part of what is measured.
//!
//! CPU is the children's user + system time (`getrusage(RUSAGE_CHILDREN)`) over each side's
//! `N` runs; wall is the side's elapsed time. The sides alternate in `ROUNDS` rounds of `N`
//! and the fastest round of each is compared. `runtime_invocation [N]` (default 200).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_protocol::runtime::{
    LOG_DIR_ENV, SANDBOX_READ_MASKS_ENV, SANDBOX_REQUIRE_FULL_ENV, SANDBOX_WRITE_PATHS_ENV,
};

const DEFAULT_INVOCATIONS: usize = 200;
const ROUNDS: usize = 3;

/// One side's round: wall time and the children's CPU time, both over all invocations.
#[derive(Debug, Clone, Copy)]
struct Cost {
    wall: Duration,
    cpu: Duration,
}

impl Cost {
    const WORST: Cost = Cost {
        wall: Duration::MAX,
        cpu: Duration::MAX,
    };

    fn best(self, other: Cost) -> Cost {
        Cost {
            wall: self.wall.min(other.wall),
            cpu: self.cpu.min(other.cpu),
        }
    }
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let n = match std::env::args().nth(1) {
        Some(a) => a
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("invocations must be a positive number, got {a:?}"))?,
        None => DEFAULT_INVOCATIONS,
    };
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let work = intendant_bench::work_dir()?;
    let project = work.path().join("project");
    std::fs::create_dir(&project)?;
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .context("git init")?;
    if !git.success() {
        bail!("git init failed: {git}");
    }
    let artifacts = work.path().join("artifacts");
    std::fs::create_dir(&artifacts)?;
    let input = br#"{"commands":[{"function":"execAsAgent","nonce":1,"command":"true"}]}"#;

    let mut ours = Cost::WORST;
    let mut plain = Cost::WORST;
    for round in 0..ROUNDS {
        plain = plain.best(measure(n, plain_spawn)?);
        let round_dir = artifacts.join(format!("round_{round}"));
        std::fs::create_dir(&round_dir)?;
        let mut i = 0usize;
        ours = ours.best(measure(n, || {
            i += 1;
            let log_dir = round_dir.join(i.to_string());
            std::fs::create_dir(&log_dir)?;
            invocation(&runtime, input, &project, &log_dir)
        })?);
    }
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / n as f64;
    println!("runtime_invocation: {n} runtimes of one `true` each, best of {ROUNDS} rounds");
    println!(
        "  intendant-runtime, per invocation : {:>7.3} ms wall, {:>7.3} ms CPU",
        per(ours.wall),
        per(ours.cpu)
    );
    println!(
        "  bash -c true, per spawn           : {:>7.3} ms wall, {:>7.3} ms CPU",
        per(plain.wall),
        per(plain.cpu)
    );
    println!(
        "  ratio: wall {:.2}x, CPU {:.2}x",
        ours.wall.as_secs_f64() / plain.wall.as_secs_f64(),
        ours.cpu.as_secs_f64() / plain.cpu.as_secs_f64()
    );
    for (row, measured, value, baseline) in [
        (
            "runtime_invocation_cpu",
            "CPU of one sandboxed runtime (one `true`, both layers, controller's write set)",
            per(ours.cpu),
            per(plain.cpu),
        ),
        (
            "runtime_invocation_wall",
            "wall of one sandboxed runtime (one `true`, both layers, controller's write set)",
            per(ours.wall),
            per(plain.wall),
        ),
    ] {
        intendant_bench::report::record(&Figure {
            row,
            measured,
            value,
            baseline: "one `bash -c true` spawn",
            baseline_value: baseline,
            unit: "ms",
            better: Better::Lower,
            goal: None,
            limit: None,
        })?;
    }
    Ok(())
}

/// Runs `one` `n` times; the wall time and the CPU time of the children reaped meanwhile.
fn measure(n: usize, mut one: impl FnMut() -> Result<()>) -> Result<Cost> {
    let cpu_before = children_cpu();
    let start = Instant::now();
    for _ in 0..n {
        one()?;
    }
    let wall = start.elapsed();
    Ok(Cost {
        wall,
        cpu: children_cpu().saturating_sub(cpu_before),
    })
}

/// User + system time of every reaped child of this process so far.
fn children_cpu() -> Duration {
    // SAFETY: an all-zero `rusage` is valid, and getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable `rusage`.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn plain_spawn() -> Result<()> {
    Ok(intendant_bench::bash_true()?)
}

/// The controller's default write set (`core::runtime_env::WriteRoots`) for `project`.
fn write_paths(project: &Path, log_dir: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |name: &str, sub: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(sub)))
    };
    let mut paths = vec![project.to_path_buf(), PathBuf::from("/tmp")];
    if let Some(tmp) = std::env::var_os("TMPDIR").filter(|v| !v.is_empty()) {
        paths.push(tmp.into());
    }
    paths.push(log_dir.to_path_buf());
    paths.extend(var("CARGO_HOME", ".cargo"));
    paths.extend(var("RUSTUP_HOME", ".rustup"));
    paths.extend(var("XDG_CACHE_HOME", ".cache"));
    paths
}

fn invocation(runtime: &Path, input: &[u8], project: &Path, log_dir: &Path) -> Result<()> {
    use std::io::Write;
    let roots = write_paths(project, log_dir);
    let paths = std::env::join_paths(&roots)?;
    // The round's directory plays the state root: hidden but for this invocation's artifacts.
    let state_root = log_dir.parent().unwrap_or(log_dir);
    let masks = intendant_bench::read_masks(state_root, project, &roots)?;
    let mut child = Command::new(runtime)
        .current_dir(project)
        .env(LOG_DIR_ENV, log_dir)
        .env(SANDBOX_WRITE_PATHS_ENV, paths)
        .env(SANDBOX_READ_MASKS_ENV, masks)
        .env(SANDBOX_REQUIRE_FULL_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    child.stdin.take().context("no stdin")?.write_all(input)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{} failed: {}", runtime.display(), out.status);
    }
    if out.stdout.iter().filter(|b| **b == b'\n').count() != 1 {
        bail!(
            "expected one result line, got {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(())
}

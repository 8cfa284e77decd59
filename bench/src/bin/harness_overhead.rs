//! `harness_overhead`: a scripted 30-turn session (each turn one `exec_command` running `true`)
//! against the fake model server, run by `intendant --json` and, in the same run, by
//! `codex exec --json` (the pinned CLI from `scripts/install-clis.sh`). Reports wall time per
//! turn and peak RSS of each, and their ratios. Goal: intendant under half of codex on both.
//!
//! The fake answers instantly, so the wall time is the harness itself: request building,
//! streaming, tool dispatch (intendant spawns its runtime per batch) and bookkeeping. Peak RSS
//! is `ru_maxrss` from `wait4`: the largest process of the tree (controller, runtime children;
//! for codex its native binary, run directly rather than through the node wrapper).
//!
//! Build first: `cargo build --release -p intendant-cli -p intendant-runtime -p intendant-testkit
//! -p intendant-bench`, then `target/release/harness_overhead`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_testkit::clis;
use serde_json::{Value, json};

const TURNS: usize = 30;
const RUNS: usize = 3;
const GOAL_RATIO: f64 = 0.5;

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    max_rss_kib: u64,
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let intendant = intendant_bench::sibling_binary("intendant")?;
    intendant_bench::sibling_binary("intendant-runtime")?;
    let fake = intendant_bench::sibling_binary("intendant-fake-model")?;
    let work = tempfile::tempdir()?;

    let ours = median(RUNS, || run_intendant(&intendant, &fake, work.path()))?;
    println!(
        "harness_overhead: {TURNS}-turn scripted session, one `true` per turn, median of {RUNS}"
    );
    report("intendant --json", ours);

    let Some(codex) = codex_binary() else {
        println!(
            "  codex: not installed (run `bash scripts/install-clis.sh`); measured intendant alone"
        );
        return Ok(());
    };
    let theirs = median(RUNS, || run_codex(&codex, &fake, work.path()))?;
    report("codex exec --json", theirs);
    let time_ratio = ours.wall.as_secs_f64() / theirs.wall.as_secs_f64();
    let rss_ratio = ours.max_rss_kib as f64 / theirs.max_rss_kib as f64;
    let verdict = |r: f64| if r < GOAL_RATIO { "met" } else { "MISSED" };
    println!(
        "  per-turn overhead ratio intendant/codex: {time_ratio:.2} (goal < {GOAL_RATIO}: {})",
        verdict(time_ratio)
    );
    println!(
        "  peak RSS ratio intendant/codex        : {rss_ratio:.2} (goal < {GOAL_RATIO}: {})",
        verdict(rss_ratio)
    );
    Ok(())
}

#[allow(clippy::print_stdout)]
fn report(name: &str, s: Sample) {
    println!(
        "  {name:<18}: {:>8.1} ms total, {:>6.2} ms/turn, peak RSS {:>7} KiB",
        s.wall.as_secs_f64() * 1000.0,
        s.wall.as_secs_f64() * 1000.0 / TURNS as f64,
        s.max_rss_kib
    );
}

/// Median wall time and median peak RSS of `runs` runs.
fn median(runs: usize, mut f: impl FnMut() -> Result<Sample>) -> Result<Sample> {
    let mut samples = (0..runs).map(|_| f()).collect::<Result<Vec<_>>>()?;
    samples.sort_by_key(|s| s.wall);
    let wall = samples[runs / 2].wall;
    samples.sort_by_key(|s| s.max_rss_kib);
    Ok(Sample {
        wall,
        max_rss_kib: samples[runs / 2].max_rss_kib,
    })
}

/// The scenario: `TURNS` turns of one shell call each, then a final text turn.
fn scenario(dir: &Path, name: &str, call: &str, args: Value) -> Result<PathBuf> {
    let mut turns: Vec<Value> = (0..TURNS)
        .map(|_| json!({ "tool_calls": [{ "name": call, "arguments": args }] }))
        .collect();
    turns.push(json!({ "text": "done" }));
    let path = dir.join(name);
    std::fs::write(
        &path,
        serde_json::to_vec(&json!({ "model": "fake-model", "turns": turns }))?,
    )?;
    Ok(path)
}

/// A fake model server serving `scenario`; returns it and its port.
fn start_fake(fake: &Path, scenario: &Path) -> Result<(Child, u16)> {
    let mut child = Command::new(fake)
        .arg("--scenario")
        .arg(scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting intendant-fake-model")?;
    let stdout = child.stdout.take().context("fake stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let port: Value = serde_json::from_str(&line).with_context(|| format!("fake said {line:?}"))?;
    let port = port["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .context("fake port")?;
    Ok((child, port))
}

fn run_intendant(bin: &Path, fake: &Path, work: &Path) -> Result<Sample> {
    let scenario = scenario(
        work,
        "intendant.json",
        "exec_command",
        json!({ "command": "true" }),
    )?;
    let (mut server, port) = start_fake(fake, &scenario)?;
    let project = tempfile::tempdir()?;
    let home = tempfile::tempdir()?;
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("INTENDANT_HOME", home.path().join("intendant"))
        .env("OPENAI_API_KEY", "sk-bench")
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .current_dir(project.path())
        .args([
            "--json",
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--autonomy",
            "full",
        ])
        .arg("run true thirty times");
    let sample = measure(cmd, |out| {
        count_lines(out, |e| {
            e["type"] == "agent_output" && e["name"] == "exec_command"
        })
    });
    let _ = server.kill();
    let _ = server.wait();
    sample
}

fn run_codex(bin: &Path, fake: &Path, work: &Path) -> Result<Sample> {
    let scenario = scenario(work, "codex.json", "exec_command", json!({ "cmd": "true" }))?;
    let (mut server, port) = start_fake(fake, &scenario)?;
    let project = tempfile::tempdir()?;
    let home = tempfile::tempdir()?;
    let codex_home = home.path().join("codex");
    std::fs::create_dir_all(&codex_home)?;
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", &codex_home)
        .env(clis::CODEX_KEY_VAR, "sk-bench")
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(project.path())
        .args(clis::codex_exec_args(
            &format!("http://127.0.0.1:{port}/v1"),
            "run true thirty times",
        ));
    let sample = measure(cmd, |out| {
        count_lines(out, |e| {
            e["type"] == "item.completed" && e["item"]["type"] == "command_execution"
        })
    });
    let _ = server.kill();
    let _ = server.wait();
    sample
}

/// Runs `cmd` to completion; wall time and `ru_maxrss` of its process tree. `ran` counts the
/// commands executed in the JSONL stdout: a run that skipped turns is not a measurement.
fn measure(mut cmd: Command, ran: impl Fn(&str) -> usize) -> Result<Sample> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let start = Instant::now();
    let mut child = cmd.spawn().context("spawning the harness")?;
    let mut stdout = child.stdout.take().context("harness stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-buffer.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child's pid and valid out-pointers; blocks until it exits.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut rusage) };
    let wall = start.elapsed();
    if rc != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("the harness did not exit 0 (wait status {status})");
    }
    let text = reader
        .join()
        .map_err(|_| anyhow::anyhow!("stdout reader panicked"))?;
    let executed = ran(&text);
    if executed != TURNS {
        bail!("the harness ran {executed} commands, not {TURNS}");
    }
    Ok(Sample {
        wall,
        max_rss_kib: u64::try_from(rusage.ru_maxrss).unwrap_or(0),
    })
}

/// JSONL lines of `text` matching `pred`.
fn count_lines(text: &str, pred: impl Fn(&Value) -> bool) -> usize {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| pred(v))
        .count()
}

/// Codex's native binary inside the pinned npm package, if installed.
fn codex_binary() -> Option<PathBuf> {
    let cache = clis::cache_dir();
    let native = cache
        .join("node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex");
    if native.is_file() {
        return Some(native);
    }
    let wrapper = cache.join("node_modules/.bin/codex");
    wrapper.is_file().then_some(wrapper)
}

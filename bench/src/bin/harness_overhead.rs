//! `harness_overhead`: a scripted 30-turn session (each turn one `exec_command` running `true i`)
//! against the fake model server, run by `intendant --json` and, in the same run, by
//! its peers, the pinned CLIs from `scripts/install-clis.sh` against the same fake: `codex exec
//! --json`, `claude -p --output-format stream-json` and `kimi -p --output-format stream-json`.
//! Reports wall time per turn and peak RSS of each. Goals: intendant under 0.15x the fastest
//! peer's time per turn, and under 0.1x the smallest peer's peak RSS. A peer that is not
//! installed is reported as such.
//!
//! The fake answers instantly, so the wall time is the harness itself: request building,
//! streaming, tool dispatch (intendant spawns its runtime per batch) and bookkeeping. Peak RSS
//! is `ru_maxrss` from `wait4`: the largest process of the tree (controller, runtime children;
//! for codex its native binary, run directly rather than through the node wrapper).
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/harness_overhead`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_testkit::clis;
use serde_json::{Value, json};

const TURNS: usize = 30;
const RUNS: usize = 3;
/// Goal: intendant's time per turn against the fastest peer's.
const TURN_GOAL: f64 = 0.15;
/// Goal: intendant's peak tree RSS against the smallest peer's.
const RSS_GOAL: f64 = 0.1;

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    max_rss_kib: u64,
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;

    let runs = intendant_bench::slow_rounds(RUNS);
    let ours = median(runs, || run_intendant(&intendant, &fake, work.path()))?;
    println!(
        "harness_overhead: {TURNS}-turn scripted session, one `true i` per turn, median of {runs}"
    );
    report("intendant --json", ours);

    let mut measured: Vec<(&str, Sample)> = Vec::new();
    for peer in PEERS {
        let Some(bin) = (peer.find)() else {
            println!(
                "  {}: not installed (run `bash scripts/install-clis.sh`)",
                peer.label
            );
            intendant_bench::report::unavailable(
                &format!("harness_turn_{}", peer.key),
                &format!("30-turn session through {}", peer.label),
                "not installed (scripts/install-clis.sh)",
            )?;
            continue;
        };
        let theirs = match median(runs, || run_peer(&peer, &bin, &fake, work.path())) {
            Ok(theirs) => theirs,
            Err(e) => {
                // A peer that cannot finish the scripted session gets a row saying so; the
                // others are still measured.
                let why = format!("failed: {}", e.to_string().lines().next().unwrap_or(""));
                println!("  {}: {why}", peer.label);
                intendant_bench::report::unavailable(
                    &format!("harness_turn_{}", peer.key),
                    &format!("30-turn session through {}", peer.label),
                    &why,
                )?;
                continue;
            }
        };
        report(peer.label, theirs);
        intendant_bench::report::record(&Figure {
            row: &format!("harness_turn_{}", peer.key),
            measured: "`intendant --json`: wall time per turn",
            value: per_turn_ms(ours),
            baseline: &format!("`{}` against the same fake", peer.label),
            baseline_value: per_turn_ms(theirs),
            unit: "ms/turn",
            better: Better::Lower,
            goal: None,
            limit: None,
        })?;
        measured.push((peer.label, theirs));
    }
    let fastest = measured.iter().min_by_key(|(_, s)| s.wall);
    let smallest = measured.iter().min_by_key(|(_, s)| s.max_rss_kib);
    let (Some((fast_name, fast)), Some((small_name, small))) = (fastest, smallest) else {
        println!("  no peer installed: measured intendant alone");
        return Ok(());
    };
    let time_ratio = ours.wall.as_secs_f64() / fast.wall.as_secs_f64();
    let rss_ratio = ours.max_rss_kib as f64 / small.max_rss_kib as f64;
    let verdict = |r: f64, goal: f64| if r < goal { "met" } else { "MISSED" };
    println!(
        "  per-turn ratio against the fastest peer ({fast_name}): {time_ratio:.3} (goal < {TURN_GOAL}: {})",
        verdict(time_ratio, TURN_GOAL)
    );
    println!(
        "  peak RSS ratio against the smallest peer ({small_name}): {rss_ratio:.3} (goal < {RSS_GOAL}: {})",
        verdict(rss_ratio, RSS_GOAL)
    );
    intendant_bench::report::record(&Figure {
        row: "harness_turn",
        measured: "`intendant --json`, 30 turns of one shell call: wall time per turn",
        value: per_turn_ms(ours),
        baseline: &format!("the fastest peer ({fast_name})"),
        baseline_value: per_turn_ms(*fast),
        unit: "ms/turn",
        better: Better::Lower,
        goal: Some(TURN_GOAL),
        limit: None,
    })?;
    intendant_bench::report::record(&Figure {
        row: "harness_rss",
        measured: "`intendant --json`, 30 turns: peak RSS of the process tree",
        value: ours.max_rss_kib as f64,
        baseline: &format!("the smallest peer ({small_name})"),
        baseline_value: small.max_rss_kib as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: Some(RSS_GOAL),
        limit: None,
    })?;
    Ok(())
}

fn per_turn_ms(s: Sample) -> f64 {
    s.wall.as_secs_f64() * 1000.0 / TURNS as f64
}

#[allow(clippy::print_stdout)]
fn report(name: &str, s: Sample) {
    println!(
        "  {name:<38}: {:>8.1} ms total, {:>6.2} ms/turn, peak RSS {:>7} KiB",
        s.wall.as_secs_f64() * 1000.0,
        per_turn_ms(s),
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

/// The scenario: `TURNS` turns of one shell call each, then a final text turn. Turn `i` runs
/// `true i`: the same call over and over trips kimi's repeat breaker (it ends the turn after
/// 12 identical calls), and every harness gets the same script.
fn scenario(dir: &Path, name: &str, call: &str, args: fn(&str) -> Value) -> Result<PathBuf> {
    let mut turns: Vec<Value> = (0..TURNS)
        .map(|i| json!({ "tool_calls": [{ "name": call, "arguments": args(&format!("true {i}")) }] }))
        .collect();
    turns.push(json!({ "text": "done" }));
    let path = dir.join(name);
    std::fs::write(
        &path,
        serde_json::to_vec(&json!({ "model": "fake-model", "turns": turns }))?,
    )?;
    Ok(path)
}

fn run_intendant(bin: &Path, fake: &Path, work: &Path) -> Result<Sample> {
    let scenario = scenario(
        work,
        "intendant.json",
        "exec_command",
        |command| json!({ "command": command }),
    )?;
    let (mut server, port) = intendant_bench::start_fake_model(fake, &scenario)?;
    let project = intendant_bench::work_dir()?;
    let home = intendant_bench::work_dir()?;
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

/// A peer harness run the same way against the same fake.
struct Peer {
    /// Row key suffix.
    key: &'static str,
    /// How it is run, for the report.
    label: &'static str,
    /// Its binary, if installed.
    find: fn() -> Option<PathBuf>,
    /// The shell tool call the scripted model makes: tool name, and arguments for a command.
    call: (&'static str, fn(&str) -> Value),
    /// Adds the peer's arguments and environment for a fake at `base` (loopback URL, no path).
    configure: fn(&mut Command, &str, &Path),
    /// Whether a JSONL stdout line reports one executed command.
    ran: fn(&Value) -> bool,
}

const PEERS: [Peer; 3] = [
    Peer {
        key: "codex",
        label: "codex exec --json",
        find: codex_binary,
        call: ("exec_command", |command| json!({ "cmd": command })),
        configure: |cmd, base, home| {
            let codex_home = home.join("codex");
            let _ = std::fs::create_dir_all(&codex_home);
            cmd.env("CODEX_HOME", codex_home)
                .env(clis::CODEX_KEY_VAR, "sk-bench")
                .args(clis::codex_exec_args(
                    &format!("{base}/v1"),
                    "run true thirty times",
                ));
        },
        ran: |e| e["type"] == "item.completed" && e["item"]["type"] == "command_execution",
    },
    Peer {
        key: "claude",
        label: "claude -p --output-format stream-json",
        find: || clis::installed("claude"),
        call: (
            "Bash",
            |command| json!({ "command": command, "description": "run true" }),
        ),
        configure: |cmd, base, _| {
            cmd.env("ANTHROPIC_BASE_URL", base)
                .env("ANTHROPIC_API_KEY", "sk-ant-bench")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("CLAUDE_CODE_MAX_RETRIES", "0")
                .env("IS_SANDBOX", "1")
                .args([
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--model",
                    "fake-model",
                    "--dangerously-skip-permissions",
                    "run true thirty times",
                ]);
        },
        ran: |e| {
            e["type"] == "user"
                && e["message"]["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        },
    },
    Peer {
        key: "kimi",
        label: "kimi -p --output-format stream-json",
        find: || clis::installed("kimi").filter(|_| clis::node24().is_some()),
        call: ("Bash", |command| json!({ "command": command })),
        configure: |cmd, base, home| {
            // Kimi's launcher needs Node >= 22.19 first on PATH.
            let node_dir = clis::node24()
                .and_then(|n| n.parent().map(Path::to_path_buf))
                .unwrap_or_default();
            let path = std::env::join_paths(std::iter::once(node_dir).chain(
                std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
            ))
            .unwrap_or_default();
            cmd.env("PATH", path)
                .env("KIMI_CODE_HOME", home.join("kimi"))
                .env("KIMI_MODEL_NAME", "fake-model")
                .env("KIMI_MODEL_API_KEY", "sk-kimi-bench")
                .env("KIMI_MODEL_PROVIDER_TYPE", "anthropic")
                .env("KIMI_MODEL_BASE_URL", base)
                .env("KIMI_CODE_NO_AUTO_UPDATE", "1")
                .env("KIMI_DISABLE_TELEMETRY", "1")
                .args([
                    "-p",
                    "run true thirty times",
                    "--output-format",
                    "stream-json",
                ]);
        },
        ran: |e| e["role"] == "tool",
    },
];

fn run_peer(peer: &Peer, bin: &Path, fake: &Path, work: &Path) -> Result<Sample> {
    let (name, args) = peer.call;
    let scenario = scenario(work, &format!("{}.json", peer.key), name, args)?;
    let (mut server, port) = intendant_bench::start_fake_model(fake, &scenario)?;
    let project = intendant_bench::work_dir()?;
    let home = intendant_bench::work_dir()?;
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .current_dir(project.path());
    for (k, v) in clis::offline_env() {
        cmd.env(k, v);
    }
    (peer.configure)(&mut cmd, &format!("http://127.0.0.1:{port}"), home.path());
    let sample = measure(cmd, |out| count_lines(out, peer.ran));
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

//! `idle_workers`: what an agent CLI worker holds while its session waits for a follow-up, and
//! what letting it go costs (`[agent.NAME] idle_exit_secs`). For each pinned CLI installed
//! (`scripts/install-clis.sh`: codex, claude-code, kimi), three sessions on one `intendant serve`
//! each run one round against the fake model (which answers `done` to everything) and wait,
//! idle. Measured in the same run: the memory the daemon's descendants hold (their PSS: the
//! workers and what they started) once every worker was let go, against the same while every
//! worker is kept, with the sessions' memory as listed beside it (their cgroups' charge less
//! the page cache counted inactive, which keeps what the workers read until the kernel
//! reclaims it); and the wall time of a
//! follow-up's round (sent to the first session, to its round's end) once its worker was let
//! go (started again on its conversation first), against the same with the worker kept. No goal
//! is set on either: the first is what letting go saves, the second what it costs.
//!
//! A CLI that is not installed, or a machine whose cgroups count no session's memory, gets a
//! row saying so.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/idle_workers`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{command, connect};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    Backend, SessionIntent, SessionStatus, SessionSummary, StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_server::socket::RemoteHost;
use intendant_testkit::clis::{self, RealWorker};

/// Sessions per CLI.
const SESSIONS: usize = 3;
/// `idle_exit_secs` of the run: long enough for every session's first round to end, and the
/// follow-up with the worker kept to come, before the first worker is let go.
const IDLE_EXIT_SECS: u64 = 12;
/// Longest any step may take.
const STEP_WAIT: Duration = Duration::from_secs(120);

/// One CLI as the benchmark runs it.
struct Cli {
    /// Its `--agent` name.
    agent: &'static str,
    /// Its worker on the fake model at `port`, its state under `dir`; `None`: not installed.
    worker: fn(port: u16, dir: &Path) -> Option<RealWorker>,
}

const CLIS: &[Cli] = &[
    Cli {
        agent: "codex",
        worker: |port, dir| {
            let codex = clis::installed("codex")?;
            let home = dir.join("codex-home");
            std::fs::create_dir_all(&home).ok()?;
            Some(clis::codex_worker(
                &codex,
                &format!("http://127.0.0.1:{port}/v1"),
                &home,
            ))
        },
    },
    Cli {
        agent: "claude-code",
        worker: |port, _| {
            let claude = clis::installed("claude")?;
            Some(clis::claude_worker(
                &claude,
                &format!("http://127.0.0.1:{port}"),
            ))
        },
    },
    Cli {
        agent: "kimi",
        worker: |port, dir| {
            let kimi = clis::installed("kimi")?;
            clis::node24()?;
            clis::kimi_worker(
                &kimi,
                &format!("http://127.0.0.1:{port}"),
                &dir.join("kimi-home"),
            )
        },
    },
];

/// What one CLI's run measured.
struct Measured {
    /// The daemon's descendants' PSS with every worker kept, and once every one was let go
    /// (KiB).
    pss_kib: (u64, u64),
    /// The sessions' memory as listed then (KiB), and their processes and threads.
    charged_kib: (u64, u64),
    processes: (u64, u64),
    /// A follow-up's round with the worker kept, and after it was let go.
    follow_up: (Duration, Duration),
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let scenario = work.path().join("scenario.json");
    std::fs::write(
        &scenario,
        serde_json::to_vec(&serde_json::json!({
            "model": "fake-model", "turns": [], "on_exhausted": "done",
        }))?,
    )?;
    println!(
        "idle_workers: {SESSIONS} waiting sessions per CLI, `idle_exit_secs = {IDLE_EXIT_SECS}`"
    );
    for cli in CLIS {
        let dir = work.path().join(cli.agent);
        std::fs::create_dir_all(&dir)?;
        let (mut server, port) = intendant_bench::start_fake_model(&fake, &scenario)?;
        let measured = match (cli.worker)(port, &dir) {
            None => Err(anyhow::anyhow!("not installed (scripts/install-clis.sh)")),
            Some(worker) => run(&intendant, port, &dir, cli.agent, &worker),
        };
        intendant_bench::end_child(&mut server, libc::SIGKILL);
        match measured {
            Ok(m) => report(cli.agent, &m)?,
            Err(e) => {
                let why = e.to_string();
                println!("  {}: {why}", cli.agent);
                for (row, measured) in rows(cli.agent) {
                    intendant_bench::report::unavailable(&row, &measured, &why)?;
                }
            }
        }
    }
    Ok(())
}

/// The rows of `agent`, with what each measures.
fn rows(agent: &str) -> [(String, String); 2] {
    [
        (
            format!("idle_workers_memory_{agent}"),
            format!("{SESSIONS} waiting {agent} sessions' processes' PSS, their workers let go"),
        ),
        (
            format!("idle_workers_follow_up_{agent}"),
            format!("a follow-up's round to a {agent} session whose worker was let go"),
        ),
    ]
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn report(agent: &str, m: &Measured) -> Result<()> {
    let [(memory_row, memory_measured), (follow_row, follow_measured)] = rows(agent);
    let (kept, gone) = m.pss_kib;
    let (kept_ms, again_ms) = (
        m.follow_up.0.as_secs_f64() * 1000.0,
        m.follow_up.1.as_secs_f64() * 1000.0,
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "  {agent}: the workers' PSS {:.1} MiB kept ({} processes and threads), {:.1} MiB let go \
         ({}): {:.3}x; their memory as listed {:.1} MiB, then {:.1} MiB; a follow-up's \
         round {kept_ms:.0} ms kept, {again_ms:.0} ms let go: {:.2}x",
        mib(kept),
        m.processes.0,
        mib(gone),
        m.processes.1,
        gone as f64 / kept.max(1) as f64,
        mib(m.charged_kib.0),
        mib(m.charged_kib.1),
        again_ms / kept_ms.max(0.001),
    );
    intendant_bench::report::record(&Figure {
        row: &memory_row,
        measured: &memory_measured,
        value: gone as f64,
        baseline: "the same with every worker kept",
        baseline_value: kept as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    intendant_bench::report::record(&Figure {
        row: &follow_row,
        measured: &follow_measured,
        value: again_ms,
        baseline: "the same with its worker kept",
        baseline_value: kept_ms,
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    Ok(())
}

/// One CLI's run: its project configured and trusted, a daemon with the worker's environment,
/// the sessions, the measures; the daemon ended whatever happened.
fn run(bin: &Path, port: u16, dir: &Path, agent: &str, worker: &RealWorker) -> Result<Measured> {
    let project = dir.join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        project.join("intendant.toml"),
        format!("{}idle_exit_secs = {IDLE_EXIT_SECS}\n", worker.config),
    )?;
    let trusted = command(bin, dir, port)
        .arg("trust")
        .arg(&project)
        .status()?;
    if !trusted.success() {
        bail!("intendant trust {} failed: {trusted}", project.display());
    }
    let mut daemon = command(bin, dir, port)
        .current_dir(dir)
        .arg("serve")
        .envs(worker.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .envs(clis::offline_env())
        .spawn()
        .context("starting intendant serve")?;
    let rt = intendant_bench::runtime()?;
    let measured = rt.block_on(measure(&dir.join("state"), &project, agent, daemon.id()));
    intendant_bench::end_child(&mut daemon, libc::SIGTERM);
    measured
}

async fn measure(home: &Path, project: &Path, agent: &str, daemon: u32) -> Result<Measured> {
    let host = connect(home, "idle_workers", STEP_WAIT).await?;
    let mut ids = Vec::new();
    for n in 0..SESSIONS {
        let request = StartRequest {
            task: format!("say done [{n}]"),
            project: project.display().to_string(),
            autonomy: Some(AutonomyLevel::Full),
            backend: Some(Backend::Agent {
                name: agent.to_owned(),
                command: Vec::new(),
            }),
            ..StartRequest::default()
        };
        ids.push(host.start(request).await?.id);
    }
    let listed = until(&host, &ids, "every session waits with its worker", |s| {
        s.status == SessionStatus::Idle && processes(s) > 0
    })
    .await?;
    let kept = (descendants_pss(daemon), totals(&listed)?);
    let follow_kept = follow_up(&host, &ids[0]).await?;
    let listed = until(&host, &ids, "every worker is let go", |s| {
        s.status == SessionStatus::Idle && processes(s) == 0
    })
    .await?;
    let gone = (descendants_pss(daemon), totals(&listed)?);
    let follow_again = follow_up(&host, &ids[0]).await?;
    for id in &ids {
        host.stop(id).await?;
    }
    Ok(Measured {
        pss_kib: (kept.0, gone.0),
        charged_kib: (kept.1.0, gone.1.0),
        processes: (kept.1.1, gone.1.1),
        follow_up: (follow_kept, follow_again),
    })
}

/// The PSS of every descendant of process `pid` now, in KiB (one that ended meanwhile counts
/// 0).
fn descendants_pss(pid: u32) -> u64 {
    let mut total = 0;
    let mut next = intendant_bench::children_of(pid);
    while let Some(child) = next.pop() {
        total += intendant_bench::smaps_kib(child, "Pss").unwrap_or(0);
        next.extend(intendant_bench::children_of(child));
    }
    total
}

/// The processes and threads session `s`'s groups count (0 where none is counted).
fn processes(s: &SessionSummary) -> u64 {
    s.usage.as_ref().map_or(0, |u| u.processes)
}

/// The sessions' memory together (KiB) and their processes and threads; an error where no
/// group counts their memory.
fn totals(sessions: &[SessionSummary]) -> Result<(u64, u64)> {
    let mut memory = 0;
    for s in sessions {
        let Some(bytes) = s.usage.as_ref().and_then(|u| u.memory_bytes) else {
            bail!(
                "no cgroup counts a session's memory here (cgroup v2 with the memory controller, or v1's)"
            );
        };
        memory += bytes / 1024;
    }
    Ok((memory, sessions.iter().map(processes).sum()))
}

/// The sessions `ids` once every one satisfies `done`, polled every 50 ms; an error naming
/// `what` past [`STEP_WAIT`].
async fn until(
    host: &RemoteHost,
    ids: &[String],
    what: &str,
    done: impl Fn(&SessionSummary) -> bool,
) -> Result<Vec<SessionSummary>> {
    let deadline = Instant::now() + STEP_WAIT;
    loop {
        let listed: Vec<SessionSummary> = host
            .sessions()
            .await?
            .into_iter()
            .filter(|s| ids.contains(&s.id))
            .collect();
        if listed.len() == ids.len() && listed.iter().all(&done) {
            return Ok(listed);
        }
        if let Some(failed) = listed.iter().find(|s| s.status.is_finished()) {
            bail!(
                "session {} ended {:?} while waiting until {what}",
                failed.id,
                failed.status
            );
        }
        if Instant::now() > deadline {
            bail!("not within {STEP_WAIT:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The wall time from sending session `id` a follow-up to its round's end.
async fn follow_up(host: &RemoteHost, id: &str) -> Result<Duration> {
    let mut events = host.subscribe(Some(id), None).await?;
    let start = Instant::now();
    host.send(SessionIntent {
        session_id: id.to_owned(),
        msg: ControlMsg::FollowUp {
            text: "once more".to_owned(),
        },
    })
    .await?;
    let ended = tokio::time::timeout(STEP_WAIT, async {
        while let Some(item) = events.next().await {
            if let StreamItem::Event(env) = item
                && matches!(env.event, AppEvent::RoundComplete { .. })
            {
                return Ok(start.elapsed());
            }
        }
        bail!("the daemon ended the stream")
    })
    .await;
    ended.with_context(|| format!("the follow-up's round of {id} did not end"))?
}

//! `busy_sessions`: what a session's busy commands cost the daemon's answers. One session's
//! command leaves 8 busy loops per core running (as a build or a hostile command would);
//! meanwhile a client asks the daemon for its load (the request `ctl status` makes) 200 times,
//! one at a time, and then runs eleven one-turn sessions (one `true` each), start to idle, one
//! after another (a median of three, 10-35 ms each, moved by a factor of two from one run to the
//! next at stop 69). The baseline is the same on the same daemon before the loops start. Figures:
//! - `busy_status`: the load request's median round trip beside the loops, over the idle one
//!   (goal: at most 3x; every session weighs as one process in the scheduler against the daemon,
//!   [`docs/daemon.md`], "The sessions together"), and under a millisecond itself: the idle
//!   round trip is near a tenth of a millisecond, where the scheduler's placement of the
//!   daemon's thread alone moves the ratio between 0.6x and 3.7x (stops 70-77), so the bound on
//!   the answer a client waits for judges it too;
//! - `busy_turn`: a one-turn session's median time from its start to its round's end (taken
//!   from the daemon's event stream) beside them, over the idle one (goal: at most 3x).
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/busy_sessions`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{command, connect};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::EventStream;
use intendant_core::host::SessionHost;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{SessionStatus, StartRequest, StreamItem};
use intendant_protocol::events::AppEvent;
use intendant_server::socket::RemoteHost;
use serde_json::json;

/// Busy loops per core in the busy session.
const LOOPS_PER_CORE: usize = 8;
/// Load requests per phase.
const REQUESTS: usize = 200;
/// One-turn sessions per phase.
const TURNS: usize = 11;
/// Goal on both ratios.
const GOAL: f64 = 3.0;
/// Goal on the load request's round trip beside the loops itself, in milliseconds.
const STATUS_LIMIT_MS: f64 = 1.0;
/// Longest the daemon may take to answer after it was started, and a session to go idle.
const WAIT: Duration = Duration::from_secs(60);

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let cores = std::thread::available_parallelism()?.get();
    let loops = LOOPS_PER_CORE * cores;
    let project = work.path().join("project");
    std::fs::create_dir_all(&project)?;
    let spin = format!(
        "for i in $(seq {loops}); do (while [ ! -e stop ]; do :; done) >/dev/null 2>&1 & done; \
         echo spinning"
    );
    let turn = |text: &str, command: &str| {
        json!([
            { "tool_calls": [{ "name": "exec_command", "arguments": { "command": command } }] },
            { "text": text, "tool_calls": [{ "name": "signal_done", "arguments": { "message": text } }] },
        ])
    };
    let mut scripts =
        vec![json!({ "when_task_contains": "spin", "turns": turn("spinning", &spin) })];
    for phase in ["idle", "busy"] {
        for n in 0..TURNS {
            scripts.push(json!({
                "when_task_contains": turn_task(phase, n),
                "turns": turn("turned", "true"),
            }));
        }
    }
    let scenario = intendant_bench::write_scripts_scenario(work.path(), scripts, "done")?;
    let (mut server, port) = intendant_bench::start_fake_model(&fake, &scenario)?;
    let root = work.path().join("root");
    let mut daemon = command(&intendant, &root, port)
        .arg("serve")
        .current_dir(work.path())
        .spawn()
        .context("starting intendant serve")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(drive(&root.join("state"), &project));
    // The loops end on their own once they see the file, whatever happened above.
    std::fs::write(project.join("stop"), "")?;
    intendant_bench::end_child(&mut daemon, libc::SIGTERM);
    intendant_bench::end_child(&mut server, libc::SIGKILL);
    let (idle, busy) = result?;
    let figures = [
        Figure {
            row: "busy_status",
            measured: &format!(
                "the load request (`ctl status`) beside a session's {loops} busy loops, median of {REQUESTS}"
            ),
            value: busy.status_ms,
            baseline: "the same with no loop running",
            baseline_value: idle.status_ms,
            unit: "ms",
            better: Better::Lower,
            goal: Some(GOAL),
            limit: Some(STATUS_LIMIT_MS),
        },
        Figure {
            row: "busy_turn",
            measured: &format!(
                "a one-turn session, start to idle, beside the {loops} loops, median of {TURNS}"
            ),
            value: busy.turn_ms,
            baseline: "the same with no loop running",
            baseline_value: idle.turn_ms,
            unit: "ms",
            better: Better::Lower,
            goal: Some(GOAL),
            limit: None,
        },
    ];
    for figure in &figures {
        intendant_bench::report::record(figure)?;
        let limit = figure
            .limit
            .map(|limit| format!(", and under {limit} {}", figure.unit))
            .unwrap_or_default();
        println!(
            "{}: {:.2} {} against {:.2} ({:.2}x, goal <= {GOAL}x{limit})",
            figure.row,
            figure.value,
            figure.unit,
            figure.baseline_value,
            figure.value / figure.baseline_value
        );
    }
    Ok(())
}

/// The task of phase `phase`'s one-turn session `n`, which its script is chosen by (no task
/// the prefix of another's: `#1.` is not in `#10.`).
fn turn_task(phase: &str, n: usize) -> String {
    format!("turn {phase} #{n}.")
}

/// What one phase measured: medians, in milliseconds.
struct Phase {
    status_ms: f64,
    turn_ms: f64,
}

/// Measures the idle phase, starts the busy session, then measures the busy one.
async fn drive(home: &Path, project: &Path) -> Result<(Phase, Phase)> {
    let host = connect(home, "busy_sessions", WAIT).await?;
    let idle = phase(&host, project, "idle").await?;
    let spinning = start(&host, project, "spin").await?;
    wait_idle(&host, &spinning).await?;
    let busy = phase(&host, project, "busy").await?;
    Ok((idle, busy))
}

async fn phase(host: &Arc<RemoteHost>, project: &Path, name: &str) -> Result<Phase> {
    let mut status = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let asked = Instant::now();
        host.load().await?;
        status.push(asked.elapsed());
    }
    // Each session's end of round is taken from the daemon's stream as it is published (a poll
    // of the listing every 5 ms added up to 5 ms to a figure of 10).
    let mut events = host.subscribe(None, None).await?;
    let mut turns = Vec::with_capacity(TURNS);
    for n in 0..TURNS {
        let started = Instant::now();
        let id = start(host, project, &turn_task(name, n)).await?;
        round_ended(host, &mut events, &id).await?;
        turns.push(started.elapsed());
    }
    Ok(Phase {
        status_ms: median_ms(&mut status),
        turn_ms: median_ms(&mut turns),
    })
}

/// Reads `events` until session `id` has ended its round (it then waits, idle, for a
/// follow-up); after a lag, reads again from where it lagged, as a client does.
async fn round_ended(host: &Arc<RemoteHost>, events: &mut EventStream, id: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let item = tokio::time::timeout_at(deadline, events.next())
            .await
            .with_context(|| format!("session {id} did not end its round in {WAIT:?}"))?
            .context("the daemon ended the stream")?;
        let envelope = match item {
            StreamItem::Event(envelope) => envelope,
            StreamItem::Lagged { next_seq } => {
                *events = host.subscribe(None, Some(next_seq - 1)).await?;
                continue;
            }
        };
        if envelope.session_id != id {
            continue;
        }
        match &envelope.event {
            AppEvent::RoundComplete { .. } => return Ok(()),
            AppEvent::SessionEnded { status, reason, .. } => {
                bail!("session {id} ended {status}: {reason}")
            }
            _ => {}
        }
    }
}

async fn start(host: &Arc<RemoteHost>, project: &Path, task: &str) -> Result<String> {
    let request = StartRequest {
        task: task.to_owned(),
        project: project.display().to_string(),
        autonomy: Some(AutonomyLevel::Full),
        provider: Some("openai".into()),
        model: Some("fake-model".into()),
        ..StartRequest::default()
    };
    Ok(host.start(request).await?.id)
}

/// Polls every 5 ms until session `id` has ended its round (the busy session, whose loops
/// outlive it).
async fn wait_idle(host: &Arc<RemoteHost>, id: &str) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = host.session(id).await?.status;
        match status {
            SessionStatus::Idle | SessionStatus::Done => return Ok(()),
            s if s.is_finished() => bail!("session {id} ended {s:?}"),
            _ if Instant::now() > deadline => bail!("session {id} still {status:?} after {WAIT:?}"),
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

//! `fleet_events`: the latency of a session's events from its owner's bus to a follower on
//! another fleet member (`docs/fleet.md`, "One host, any door"), with 20 sessions streaming at
//! once. A `nats-server -js` on loopback, two daemons on state roots of their own (`owner` runs
//! the sessions, `follower` follows each of them through its control socket, as `ctl attach` and
//! the dashboard do), one fake model streaming each turn's text in small timed deltas. Beside
//! it, in the same run, the baseline: the same events read by a client of the owner's own
//! control socket. Latency is the envelope's `ts` (stamped at the owner's bus) to its arrival at
//! the client, in milliseconds (both on this machine's clock). Also checks that the follower got
//! every event of each session the owner's client got, in the same order.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/fleet_events`. Without
//! `nats-server` its rows say unavailable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{command, connect, nats_server_for, start_nats};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{StartRequest, StreamItem};
use intendant_protocol::events::AppEvent;
use intendant_protocol::utc::UtcTime;
use intendant_server::socket::RemoteHost;
use serde_json::json;

/// Sessions streaming at once.
const SESSIONS: usize = 20;
/// Streamed turns per session (each with one `true`), before its last one.
const TURNS: usize = 4;
/// Goal: p99 from the owner's bus to the follower, in ms.
const P99_GOAL_MS: f64 = 50.0;
/// Longest a daemon may take to answer, and the run to end.
const WAIT: Duration = Duration::from_secs(120);

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let Some(nats) = nats_server_for(
        "fleet_events",
        &["fleet_events_p50", "fleet_events_p99"],
        "owner's bus to a follower on another member",
    )?
    else {
        return Ok(());
    };
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let scenario = scenario(work.path())?;
    let (mut model, model_port) = intendant_bench::start_fake_model(&fake, &scenario)?;
    let (mut server, url) = start_nats(&nats, &work.path().join("nats"), WAIT)?;
    let mut daemons = Vec::new();
    let mut homes = Vec::new();
    for name in ["owner", "follower"] {
        let root = work.path().join(name);
        let home = root.join("state");
        std::fs::create_dir_all(&home)?;
        std::fs::write(
            home.join("intendant.toml"),
            format!("[fleet]\nname = \"{name}\"\nheartbeat_sec = 1\n"),
        )?;
        daemons.push(
            command(&intendant, &root, model_port)
                .current_dir(&root)
                .args(["serve", "--fleet", &url])
                .spawn()
                .context("starting intendant serve")?,
        );
        homes.push(home);
    }
    let rt = intendant_bench::runtime()?;
    let result = rt.block_on(drive(&homes[0], &homes[1], work.path()));
    for daemon in &mut daemons {
        intendant_bench::end_child(daemon, libc::SIGTERM);
    }
    intendant_bench::end_child(&mut server, libc::SIGKILL);
    intendant_bench::end_child(&mut model, libc::SIGKILL);
    let Measured {
        mut follower,
        mut local,
        events,
    } = result?;

    let (f50, f99) = (
        percentile(&mut follower, 50.0),
        percentile(&mut follower, 99.0),
    );
    let (l50, l99) = (percentile(&mut local, 50.0), percentile(&mut local, 99.0));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "fleet_events: {SESSIONS} sessions streaming on one member, followed from another; {events} events each side, every one the owner's client got, in order (load average {load})"
    );
    println!("  owner's bus to a follower on another member: p50 {f50:.0} ms, p99 {f99:.0} ms");
    println!("  owner's bus to a client of the owner itself : p50 {l50:.0} ms, p99 {l99:.0} ms");
    println!(
        "  p99 goal < {P99_GOAL_MS} ms: {}",
        if f99 < P99_GOAL_MS { "met" } else { "MISSED" }
    );
    for (row, p, value, baseline, limit) in [
        ("fleet_events_p50", 50, f50, l50, None),
        ("fleet_events_p99", 99, f99, l99, Some(P99_GOAL_MS)),
    ] {
        let measured = format!(
            "owner's bus to a follower on another member, {SESSIONS} sessions streaming, p{p}"
        );
        let base = format!("the same events at a client of the owner's own socket, p{p}");
        intendant_bench::report::record(&Figure {
            row,
            measured: &measured,
            value,
            baseline: &base,
            baseline_value: baseline,
            unit: "ms",
            better: Better::Lower,
            goal: None,
            limit,
        })?;
    }
    Ok(())
}

/// One script per session: a paused first turn (the followers subscribe meanwhile), then
/// streamed turns each with one `true`, then a last text.
fn scenario(dir: &Path) -> Result<PathBuf> {
    let text =
        "Streaming a paragraph of model text in small timed pieces, as a model does, ".repeat(3);
    let turn = |t: usize, first_delay: u64| {
        json!({
            "text": format!("Turn {t}. {text}"),
            "tool_calls": [{ "name": "exec_command", "arguments": { "command": "true" } }],
            "delivery": { "delta_chars": 8, "chunk_delay_ms": 20, "first_chunk_delay_ms": first_delay },
        })
    };
    let scripts: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let mut turns: Vec<_> = (0..TURNS)
                .map(|t| turn(t, if t == 0 { 4000 } else { 0 }))
                .collect();
            turns.push(json!({ "text": "done" }));
            json!({ "when_task_contains": format!("[fleet-s{n:02}]"), "turns": turns })
        })
        .collect();
    Ok(intendant_bench::write_scripts_scenario(
        dir, scripts, "error",
    )?)
}

struct Measured {
    /// Each live event's latency at the follower, ms.
    follower: Vec<f64>,
    /// The same at a client of the owner's socket, ms.
    local: Vec<f64>,
    /// Events each side read live.
    events: usize,
}

async fn drive(owner_home: &Path, follower_home: &Path, work: &Path) -> Result<Measured> {
    let owner = connect(owner_home, "fleet_events", WAIT).await?;
    let follower = connect(follower_home, "fleet_events", WAIT).await?;
    let mut ids = Vec::new();
    for n in 0..SESSIONS {
        let project = work.join(format!("project-{n:02}"));
        std::fs::create_dir_all(&project)?;
        let request = StartRequest {
            task: format!("stream [fleet-s{n:02}]"),
            project: project.display().to_string(),
            autonomy: Some(AutonomyLevel::Full),
            provider: Some("openai".into()),
            model: Some("fake-model".into()),
            ..StartRequest::default()
        };
        ids.push(owner.start(request).await?.id);
    }
    // The follower finds each session on the owner once the owner published its list.
    let started = Instant::now();
    loop {
        let listed = follower.fleet_sessions().await?;
        let known: Vec<&str> = listed
            .members
            .iter()
            .flat_map(|m| m.sessions.iter().map(|s| s.id.as_str()))
            .collect();
        if ids.iter().all(|id| known.contains(&id.as_str())) {
            break;
        }
        if started.elapsed() > WAIT {
            bail!("the follower never listed the owner's sessions");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut tasks = Vec::new();
    for id in &ids {
        for (host, side) in [(&follower, "follower"), (&owner, "local")] {
            let host = Arc::clone(host);
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                read(host.as_ref(), &id).await.map(|r| (side, id, r))
            }));
        }
    }
    let mut seen: HashMap<(String, &str), Vec<u64>> = HashMap::new();
    let mut measured = Measured {
        follower: Vec::new(),
        local: Vec::new(),
        events: 0,
    };
    for task in tasks {
        let (side, id, (seqs, latencies)) = tokio::time::timeout(WAIT, task)
            .await
            .context("a session never ended its round")???;
        match side {
            "follower" => measured.follower.extend(latencies),
            _ => {
                measured.events += latencies.len();
                measured.local.extend(latencies);
            }
        }
        seen.insert((id, side), seqs);
    }
    for id in &ids {
        if seen.get(&(id.clone(), "follower")) != seen.get(&(id.clone(), "local")) {
            bail!("the follower's events of {id} are not the owner's");
        }
    }
    Ok(measured)
}

/// Follows session `id` on `host` from its start until its round ends: every `seq`, and each
/// live event's latency from its `ts`.
async fn read(host: &RemoteHost, id: &str) -> Result<(Vec<u64>, Vec<f64>)> {
    let mut stream = host.subscribe(Some(id), Some(0)).await?;
    let history = stream.history_end();
    let mut seqs = Vec::new();
    let mut latencies = Vec::new();
    loop {
        let item = stream.next().await.context("the stream ended")?;
        let StreamItem::Event(envelope) = item else {
            bail!("a subscriber of {id} fell behind");
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as f64;
        if envelope.seq > history
            && let Some(ts) = UtcTime::parse_rfc3339(&envelope.ts)
        {
            let at = ts.unix_seconds() as f64 * 1000.0 + f64::from(ts.millis);
            latencies.push((now - at).max(0.0));
        }
        seqs.push(envelope.seq);
        match envelope.event {
            AppEvent::RoundComplete { .. } => return Ok((seqs, latencies)),
            AppEvent::SessionEnded { .. } => bail!("session {id} ended early"),
            _ => {}
        }
    }
}

/// The `p`th percentile of `values` (nearest rank).
fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

//! `fleet_many`: many sessions of several turns placed over three fleet members against the same
//! sessions started on one daemon alone (`docs/fleet.md`, issue 33's benchmark scaled down to
//! this machine: `INTENDANT_BENCH_FLEET_SESSIONS`, default 30, of 10 turns). Wall time from the
//! first start to every session's round ended; every session must have taken all its turns and
//! said its last text, and (after the timing) its owner's record of it must hold the same events,
//! kind for kind, as its twin's on the daemon alone, or the run fails. Each side's end
//! is seen in each daemon's own list (the members' each, not the fleet-wide one, which lags a
//! heartbeat). A `nats-server -js` on loopback, four daemons (three
//! members and one alone), one fake model, a bare repository with one commit.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/fleet_many`. Without
//! `nats-server` its row says unavailable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{bare_remote, command, connect, nats_server_for, start_nats};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{SessionSummary, StartRequest};
use intendant_protocol::fleet::FleetStartRequest;
use serde_json::json;

/// Turns per session: shell turns of one `true`, then a last text.
const TURNS: usize = 10;
/// Longest a daemon may take to answer, and a run to end.
const WAIT: Duration = Duration::from_secs(900);
/// Goal: the fleet's wall time at most this times the single daemon's.
const GOAL: f64 = 1.2;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let sessions: usize = std::env::var("INTENDANT_BENCH_FLEET_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let Some(nats) = nats_server_for(
        "fleet_many",
        &["fleet_many"],
        "sessions over three fleet members",
    )?
    else {
        return Ok(());
    };
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let scripts: Vec<_> = (0..sessions)
        .flat_map(|n| {
            ["solo", "fleet"].map(|kind| {
                let mut turns: Vec<_> = (1..TURNS)
                    .map(|_| json!({ "tool_calls": [{ "name": "exec_command", "arguments": { "command": "true" } }] }))
                    .collect();
                turns.push(json!({ "text": "done" }));
                json!({ "when_task_contains": format!("[{kind}-{n:03}]"), "turns": turns })
            })
        })
        .collect();
    let scenario = intendant_bench::write_scripts_scenario(work.path(), scripts, "error")?;
    let (mut model, model_port) = intendant_bench::start_fake_model(&fake, &scenario)?;
    let (mut server, url) = start_nats(&nats, &work.path().join("nats"), WAIT)?;
    let repo = bare_remote(work.path())?;
    let mut daemons = Vec::new();
    let mut homes = Vec::new();
    for name in ["solo", "alpha", "beta", "gamma"] {
        let root = work.path().join(name);
        let home = root.join("state");
        std::fs::create_dir_all(&home)?;
        let mut serve = command(&intendant, &root, model_port);
        serve.current_dir(&root).arg("serve");
        if name != "solo" {
            std::fs::write(
                home.join("intendant.toml"),
                format!("[fleet]\nname = \"{name}\"\nheartbeat_sec = 1\n"),
            )?;
            serve.args(["--fleet", &url]);
        }
        daemons.push(serve.spawn().context("starting intendant serve")?);
        homes.push(home);
    }
    let rt = intendant_bench::runtime()?;
    let result = rt.block_on(drive(&homes, &repo, work.path(), sessions));
    for daemon in &mut daemons {
        intendant_bench::end_child(daemon, libc::SIGTERM);
    }
    intendant_bench::end_child(&mut server, libc::SIGKILL);
    intendant_bench::end_child(&mut model, libc::SIGKILL);
    let (solo, fleet, spread) = result?;
    let ratio = fleet / solo;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "fleet_many: {sessions} sessions of {TURNS} turns, every one complete (load average {load})"
    );
    println!("  one daemon alone          : {solo:.0} ms");
    println!("  placed over three members : {fleet:.0} ms ({spread})");
    println!(
        "  ratio {ratio:.2}x, goal <= {GOAL}x: {}",
        if ratio <= GOAL { "met" } else { "MISSED" }
    );
    intendant_bench::report::record(&Figure {
        row: "fleet_many",
        measured: "sessions of 10 turns placed over three fleet members, until all ended their round",
        value: fleet,
        baseline: "the same sessions started on one daemon alone",
        baseline_value: solo,
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    Ok(())
}

fn request(task: String, project: String) -> StartRequest {
    StartRequest {
        task,
        project,
        provider: Some("openai".to_owned()),
        model: Some("fake-model".to_owned()),
        autonomy: Some(AutonomyLevel::Full),
        ..StartRequest::default()
    }
}

/// Whether each of `sessions` with `prefix` in its task ended its round complete; an error
/// naming one that ended otherwise.
fn complete(listed: &[SessionSummary], prefix: &str, sessions: usize) -> Result<bool> {
    let mine: Vec<_> = listed.iter().filter(|s| s.task.contains(prefix)).collect();
    for s in &mine {
        if s.status.is_finished() {
            bail!("session {} ({}) ended {:?}", s.id, s.task, s.status);
        }
    }
    let done = mine
        .iter()
        .filter(|s| {
            s.status == intendant_protocol::daemon::SessionStatus::Idle
                && s.final_text.as_deref() == Some("done")
        })
        .count();
    Ok(done == sessions)
}

/// Wall times (ms) of the single daemon and of the fleet, and how the fleet spread them.
#[allow(clippy::print_stderr)] // the times, said before the long check that follows them
async fn drive(
    homes: &[PathBuf],
    repo: &Path,
    work: &Path,
    sessions: usize,
) -> Result<(f64, f64, String)> {
    let solo = connect(&homes[0], "bench-fleet-many", WAIT).await?;
    let alpha = connect(&homes[1], "bench-fleet-many", WAIT).await?;
    let mut members = BTreeMap::from([("alpha".to_owned(), Arc::clone(&alpha))]);
    for (home, name) in homes[2..].iter().zip(["beta", "gamma"]) {
        members.insert(
            name.to_owned(),
            connect(home, "bench-fleet-many", WAIT).await?,
        );
    }
    let project = work.join("solo-project");
    intendant_fleet::git::clone(&repo.display().to_string(), Some("main"), &project)
        .map_err(anyhow::Error::msg)?;

    let started = Instant::now();
    for n in 0..sessions {
        solo.start(request(
            format!("[solo-{n:03}] work"),
            project.display().to_string(),
        ))
        .await?;
    }
    while !complete(&solo.sessions().await?, "[solo-", sessions)? {
        if started.elapsed() > WAIT {
            bail!("the single daemon's sessions never all ended their round");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let solo_ms = started.elapsed().as_secs_f64() * 1000.0;

    let started = Instant::now();
    for n in 0..sessions {
        alpha
            .fleet_start(FleetStartRequest {
                id: String::new(),
                by: String::new(),
                start: request(format!("[fleet-{n:03}] work"), String::new()),
                repo: repo.display().to_string(),
                git_ref: Some("main".to_owned()),
                on: None,
                label: None,
            })
            .await?;
    }
    // Each member's own list, as the daemon alone's is read: neither side waits for a
    // heartbeat's publication, and the harness costs the members what it costs the daemon.
    let (spread, listed) = loop {
        let mut listed = Vec::new();
        for (name, host) in &members {
            listed.push((name.clone(), host.sessions().await?));
        }
        let all: Vec<SessionSummary> = listed.iter().flat_map(|(_, s)| s.clone()).collect();
        if complete(&all, "[fleet-", sessions)? {
            let spread = listed
                .iter()
                .map(|(name, sessions)| {
                    let n = sessions
                        .iter()
                        .filter(|s| s.task.contains("[fleet-"))
                        .count();
                    format!("{name} {n}")
                })
                .collect::<Vec<_>>()
                .join(", ");
            break (spread, listed);
        }
        if started.elapsed() > WAIT {
            bail!("the fleet's sessions never all ended their round");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let fleet_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Said now: the check below takes a while, and a failure of it must not hide the times.
    eprintln!("fleet_many: alone {solo_ms:.0} ms, over three members {fleet_ms:.0} ms ({spread})");

    // Every event accounted for: each session's record on its owner holds its twin's events on
    // the daemon alone, kind for kind.
    let solo_listed = solo.sessions().await?;
    for n in 0..sessions {
        let twin = |prefix: &str| format!("[{prefix}-{n:03}]");
        let solo_id = solo_listed
            .iter()
            .find(|s| s.task.contains(&twin("solo")))
            .map(|s| s.id.clone())
            .context("a session of the daemon alone is not listed")?;
        let (owner, fleet_id) = listed
            .iter()
            .find_map(|(name, sessions)| {
                sessions
                    .iter()
                    .find(|s| s.task.contains(&twin("fleet")))
                    .map(|s| (name.clone(), s.id.clone()))
            })
            .context("a session of the fleet is not listed")?;
        let owner = homes
            .iter()
            .find(|home| home.parent().is_some_and(|root| root.ends_with(&owner)))
            .with_context(|| format!("no member {owner}"))?;
        let (alone, placed) = (
            event_kinds(&homes[0], &solo_id).await?,
            event_kinds(owner, &fleet_id).await?,
        );
        if alone != placed {
            bail!(
                "session {fleet_id}'s events are not its twin {solo_id}'s: {placed:?} against {alone:?}"
            );
        }
    }
    Ok((solo_ms, fleet_ms, spread))
}

/// How many events of each kind session `id`'s record beneath the state root `home` holds up
/// to its round's end (the lifecycle events: deltas are not recorded), once it holds that end.
async fn event_kinds(home: &Path, id: &str) -> Result<BTreeMap<String, usize>> {
    let dir = intendant_core::session_log::logs_dir(home).join(id);
    let started = Instant::now();
    loop {
        let read = intendant_core::session_log::read_events(&dir)?;
        let mut kinds = BTreeMap::new();
        for record in read.records {
            let end = record.event == "round_complete";
            *kinds.entry(record.event).or_insert(0) += 1;
            if end {
                return Ok(kinds);
            }
        }
        // The record is written behind the bus: its end follows shortly.
        if started.elapsed() > WAIT {
            bail!("session {id}'s record never reached its round's end");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

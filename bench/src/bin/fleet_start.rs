//! `fleet_start`: how long a session placed on the fleet (`ctl start --fleet`) takes to exist
//! on the member that takes it, against a local `ctl start` of the same task on the same daemon,
//! with its parts: queueing (until the server acknowledged the request), the clone of the
//! repository (timed apart, the same `git clone` the member runs), the start (a local start's
//! median), and what is left: the member's wake-up (the placement's signal) and its pull of the
//! request. A `nats-server -js` on loopback, one daemon joined to it, the fake model, a bare
//! repository with one commit.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/fleet_start`. Without
//! `nats-server` its row says unavailable.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{bare_remote, command, connect, nats_server_for, start_nats};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_protocol::daemon::StartRequest;
use intendant_protocol::fleet::FleetStartRequest;
use serde_json::json;

/// Starts of each kind.
const ROUNDS: usize = 10;
/// Longest a daemon may take to answer, and a placed session to appear.
const WAIT: Duration = Duration::from_secs(120);

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let Some(nats) = nats_server_for("fleet_start", &["fleet_start"], "a placed session's start")?
    else {
        return Ok(());
    };
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let scripts: Vec<_> = (0..ROUNDS)
        .flat_map(|n| ["local", "fleet"].map(|kind| {
            json!({ "when_task_contains": format!("[{kind}-{n:02}]"), "turns": [{ "text": "done" }] })
        }))
        .collect();
    let scenario = intendant_bench::write_scripts_scenario(work.path(), scripts, "error")?;
    let (mut model, model_port) = intendant_bench::start_fake_model(&fake, &scenario)?;
    let (mut server, url) = start_nats(&nats, &work.path().join("nats"), WAIT)?;
    let repo = bare_remote(work.path())?;
    let root = work.path().join("alpha");
    let home = root.join("state");
    std::fs::create_dir_all(&home)?;
    std::fs::write(
        home.join("intendant.toml"),
        "[fleet]\nname = \"alpha\"\nheartbeat_sec = 1\n",
    )?;
    let mut daemon = command(&intendant, &root, model_port)
        .current_dir(&root)
        .args(["serve", "--fleet", &url])
        .spawn()
        .context("starting intendant serve")?;
    let rt = intendant_bench::runtime()?;
    let result = rt.block_on(drive(&home, &repo, work.path()));
    intendant_bench::end_child(&mut daemon, libc::SIGTERM);
    intendant_bench::end_child(&mut server, libc::SIGKILL);
    intendant_bench::end_child(&mut model, libc::SIGKILL);
    let mut m = result?;
    let local = median(&mut m.local);
    let fleet = median(&mut m.fleet);
    let queue = median(&mut m.queue);
    let clone = median(&mut m.clone);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    println!("fleet_start: medians of {ROUNDS} starts each (load average {load})");
    println!("  local ctl start (the session exists)     : {local:.1} ms");
    println!("  ctl start --fleet until it exists        : {fleet:.1} ms");
    println!("    queued (server acknowledged)           : {queue:.1} ms");
    println!("    clone (git clone of the same remote)   : {clone:.1} ms");
    println!("    start (a local start, above)           : {local:.1} ms");
    println!(
        "    the rest: the member's wake-up and take: {:.1} ms",
        (fleet - queue - clone - local).max(0.0)
    );
    intendant_bench::report::record(&Figure {
        row: "fleet_start",
        measured: "ctl start --fleet until the session exists on the member (queue, placement, clone, start)",
        value: fleet,
        baseline: "a local ctl start of the same task on the same daemon",
        baseline_value: local,
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    Ok(())
}

#[derive(Default)]
struct Measured {
    local: Vec<f64>,
    fleet: Vec<f64>,
    queue: Vec<f64>,
    clone: Vec<f64>,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn drive(home: &Path, repo: &Path, work: &Path) -> Result<Measured> {
    let host = connect(home, "bench-fleet-start", WAIT).await?;
    let project = work.join("local-clone");
    intendant_fleet::git::clone(&repo.display().to_string(), Some("main"), &project)
        .map_err(anyhow::Error::msg)?;
    let request = |task: String, project: String| StartRequest {
        task,
        project,
        provider: Some("openai".to_owned()),
        model: Some("fake-model".to_owned()),
        ..StartRequest::default()
    };
    let mut m = Measured::default();
    for n in 0..ROUNDS {
        let started = Instant::now();
        host.start(request(
            format!("[local-{n:02}] say done"),
            project.display().to_string(),
        ))
        .await?;
        m.local.push(ms(started));

        let dir = work.join(format!("clone-{n}"));
        let started = Instant::now();
        intendant_fleet::git::clone(&repo.display().to_string(), Some("main"), &dir)
            .map_err(anyhow::Error::msg)?;
        m.clone.push(ms(started));

        let task = format!("[fleet-{n:02}] say done");
        let started = Instant::now();
        host.fleet_start(FleetStartRequest {
            id: String::new(),
            by: String::new(),
            start: request(task.clone(), String::new()),
            repo: repo.display().to_string(),
            git_ref: Some("main".to_owned()),
            on: Some("alpha".to_owned()),
            label: None,
        })
        .await?;
        m.queue.push(ms(started));
        loop {
            if host.sessions().await?.iter().any(|s| s.task == task) {
                break;
            }
            if started.elapsed() > WAIT {
                bail!("the placed session never started");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        m.fleet.push(ms(started));
    }
    Ok(m)
}

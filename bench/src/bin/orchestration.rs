//! `orchestration`: wall time of a parent session with 4 sub-agents in their own git worktrees,
//! each running 5 turns of one shell call (`true`), against one session doing the same 20 turns,
//! in the same run, on the daemon's supervisor in process with the scripted model. Reported as
//! a ratio (below 1 means the children's parallelism paid for their sessions and worktrees).
//!
//! Both sides run the built `intendant-runtime` sandboxed, one spawn per turn, as the daemon does.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::host::SessionHost;
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::daemon::{Backend, SessionStatus, Settings, StartRequest};
use serde_json::{Value, json};

const CHILDREN: usize = 4;
const TURNS: usize = 5;
const ROUNDS: usize = 5;

fn call(name: &str, arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": name, "arguments": arguments }] })
}

fn shell_turns(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| call("exec_command", json!({ "command": "true" })))
        .collect()
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let rt = intendant_bench::runtime()?;
    let rounds = intendant_bench::slow_rounds(ROUNDS);
    let mut parents = Vec::new();
    let mut singles = Vec::new();
    for _ in 0..rounds {
        parents.push(rt.block_on(orchestrated(&runtime))?);
        singles.push(rt.block_on(single(&runtime))?);
    }
    parents.sort();
    singles.sort();
    let (parent, one) = (parents[rounds / 2], singles[rounds / 2]);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "orchestration: {CHILDREN} worktree children x {TURNS} turns vs one session x {} turns, median of {rounds}",
        CHILDREN * TURNS
    );
    println!("  parent with {CHILDREN} children : {:>8.1} ms", ms(parent));
    println!("  one session             : {:>8.1} ms", ms(one));
    println!("  ratio {:.3}x", parent.as_secs_f64() / one.as_secs_f64());
    intendant_bench::report::record(&Figure {
        row: "orchestration",
        measured: "a parent with 4 worktree children of 5 shell turns each",
        value: ms(parent),
        baseline: "one session doing the 20 turns",
        baseline_value: ms(one),
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: None,
    })?;
    Ok(())
}

/// A git project, a state root and a supervisor whose scripted model plays `turns` for the top
/// session and `scripts` for children.
struct World {
    project: tempfile::TempDir,
    _home: tempfile::TempDir,
    scenario: std::path::PathBuf,
    host: Supervisor,
}

fn world(runtime: &Path, turns: Vec<Value>, scripts: Vec<Value>) -> Result<World> {
    let project = intendant_bench::work_dir()?;
    let git = |args: &str| -> Result<()> {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "git -c user.name=bench -c user.email=bench@example.invalid {args}"
            ))
            .current_dir(project.path())
            .status()?;
        if !status.success() {
            bail!("git {args} failed");
        }
        Ok(())
    };
    git("init -q -b main")?;
    std::fs::write(project.path().join("README"), "bench\n")?;
    git("add README")?;
    git("commit -qm base")?;
    let home = intendant_bench::work_dir()?;
    let scenario = home.path().join("scenario.json");
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": turns, "scripts": scripts }).to_string(),
    )?;
    let env = AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(runtime.to_path_buf()),
        config_dir: None,
        process_env: BTreeMap::from([(
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_default(),
        )]),
        store: SharedStore::new(home.path()),
    };
    let settings = Settings {
        default_autonomy: AutonomyLevel::Full,
        default_backend: Backend::Native,
        max_running: 16,
        max_autonomy: AutonomyLevel::Full,
    };
    intendant_daemon::control_plane::save(home.path(), &settings)
        .map_err(|e| anyhow::anyhow!("settings: {e}"))?;
    let host = Supervisor::new(env, None, SupervisorOptions::default())
        .map_err(|e| anyhow::anyhow!("supervisor: {e}"))?;
    Ok(World {
        project,
        _home: home,
        scenario,
        host,
    })
}

/// Starts the top session and waits for its first round to end; its wall time.
async fn run(world: &World, task: &str) -> Result<Duration> {
    let start = Instant::now();
    let top = world
        .host
        .start(StartRequest {
            task: task.into(),
            project: world.project.path().display().to_string(),
            autonomy: Some(AutonomyLevel::Full),
            provider: Some("mock".into()),
            scenario: Some(world.scenario.display().to_string()),
            ..StartRequest::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("start: {e}"))?;
    loop {
        let status = world
            .host
            .session(&top.id)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .status;
        match status {
            SessionStatus::Idle => break,
            s if s.is_finished() => bail!("the session ended {}", s.name()),
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
    let elapsed = start.elapsed();
    let _ = world.host.shutdown().await;
    world.host.closed().await;
    Ok(elapsed)
}

async fn orchestrated(runtime: &Path) -> Result<Duration> {
    let spawns: Vec<Value> = (0..CHILDREN)
        .map(|i| {
            json!({ "name": "spawn_sub_agent", "arguments": {
                "task": format!("bench child {i}"), "isolation": "worktree"
            }})
        })
        .collect();
    let parent = vec![
        json!({ "tool_calls": spawns }),
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
        call("signal_done", json!({ "message": "all children reported" })),
    ];
    let scripts = (0..CHILDREN)
        .map(|i| {
            let mut turns = shell_turns(TURNS);
            turns.push(call("submit_result", json!({ "summary": "ran" })));
            json!({ "when_task_contains": format!("bench child {i}"), "turns": turns })
        })
        .collect();
    let world = world(runtime, parent, scripts)?;
    let elapsed = run(&world, "orchestrate the bench").await?;
    let children = world
        .host
        .sessions()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_iter()
        .filter(|s| s.parent.is_some())
        .collect::<Vec<_>>();
    if children.len() != CHILDREN || children.iter().any(|c| c.result.is_none()) {
        bail!("not every child reported: {children:#?}");
    }
    Ok(elapsed)
}

async fn single(runtime: &Path) -> Result<Duration> {
    let mut turns = shell_turns(CHILDREN * TURNS);
    turns.push(call("signal_done", json!({ "message": "ran them all" })));
    let world = world(runtime, turns, Vec::new()).context("world")?;
    run(&world, "run the turns alone").await
}

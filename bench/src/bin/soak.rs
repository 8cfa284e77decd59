//! `soak`: one daemon under a long, mixed load, bounded in time. Five hundred sessions
//! (`INTENDANT_SOAK_SESSIONS`), twenty shell turns each (`INTENDANT_SOAK_TURNS`) against one
//! fake model, with the daemon's default settings; each session plays one of six parts, drawn
//! from a fixed seed (`INTENDANT_SOAK_SEED`):
//!
//! - `plain`: runs its turns at `full` and says it is done;
//! - `approvals`: runs at `low`, so every command waits for a human, answered in turn from the
//!   control socket, the dashboard's API (`POST /api/intents`) and MCP over HTTP
//!   (`resolve_approval`, which the state root's `[mcp] allow_model_approvals` opens);
//! - `interrupt`: interrupted once mid-way, then continued by a follow-up;
//! - `stop`: stopped once mid-way, then resumed (`start` with `resume`);
//! - `follow_up`: says it is done half-way, and a follow-up asks for the rest;
//! - `aside`: told something more by a follow-up while its round works, which its loop takes
//!   when the round ends (a second round, which the fake answers `done`).
//!
//! When about half the sessions are done, the daemon is killed with SIGKILL and started again;
//! every session it left unfinished is resumed (one with a follow-up it had not taken at the
//! kill too, held for a slot or waiting in its loop: the resume sends it). Then a second wave of half as many sessions runs
//! on the restarted daemon. Afterwards it checks that every session is accounted for (its model
//! said the final `done`; its log ends with `session_ended`, or, done before the kill, with its
//! last round, listed interrupted), every `session.jsonl` is whole JSON lines (one torn line
//! allowed where the kill cut a write) with each run's turns numbered without a gap (the log's
//! lines carry no seq of their own), every follow-up taken (by a round that began after it
//! reached the session, or in the task of the resume after the kill), and no process of the
//! run is left. Memory: the restarted
//! daemon's RSS fresh, once the first wave's sessions are all stopped, and once the second's
//! are; the goal is the second within 10% of the first. The first figure is not the goal's
//! baseline: the first wave fills the daemon's bounded caches (the event ring of 4,096
//! envelopes, which a fresh daemon has empty), so only a second wave shows what a load leaves.
//! It exits non-zero on the first failed check and records the figures for `bench/run.sh`.
//!
//! `INTENDANT_SOAK_DEADLINE_S` (default 1800) bounds the whole run.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/soak`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    PruneRequest, SessionIntent, SessionStatus, StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_server::socket::RemoteHost;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

/// Goal: the daemon's RSS once a second wave has come and gone, over its figure after the
/// first (the first fills the bounded caches, the event ring of `RING_CAPACITY` envelopes
/// above all; what a second wave adds is what a load leaves behind).
const RSS_GOAL: f64 = 1.10;
/// Longest the daemon may take to answer after it was started.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How often the driver looks at the daemon's sessions and approvals.
const POLL: Duration = Duration::from_millis(250);
/// The model's last words in every script; a session is done when its model said them.
const DONE: &str = "done";
/// The model's words half-way through a `follow_up` session's script.
const HALF: &str = "half done";

/// What a session plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Plain,
    Approvals,
    Interrupt,
    Stop,
    FollowUp,
    Aside,
}

/// Where an approval is answered from.
#[derive(Debug, Clone, Copy)]
enum Surface {
    Socket,
    Dashboard,
    Mcp,
}

/// The soak's counts.
#[derive(Debug, Clone, Copy)]
struct Load {
    sessions: usize,
    turns: usize,
    seed: u64,
    deadline: Duration,
}

impl Load {
    fn from_env() -> Result<Load> {
        let count = |name: &str, default: u64, min: u64| -> Result<u64> {
            match std::env::var(name) {
                Ok(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= min)
                    .with_context(|| format!("{name}={v} is not a number >= {min}")),
                Err(_) => Ok(default),
            }
        };
        Ok(Load {
            sessions: usize::try_from(count("INTENDANT_SOAK_SESSIONS", 500, 5)?)?,
            turns: usize::try_from(count("INTENDANT_SOAK_TURNS", 20, 4)?)?,
            seed: count("INTENDANT_SOAK_SEED", 0x5eed, 0)?,
            deadline: Duration::from_secs(count("INTENDANT_SOAK_DEADLINE_S", 1800, 10)?),
        })
    }

    /// The task of session `n`, which names its script.
    fn task(n: usize) -> String {
        format!("run true many times [soak-s{n:04}]")
    }
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn part(&mut self) -> Part {
        match self.next() % 20 {
            0..=6 => Part::Plain,
            7..=9 => Part::Approvals,
            10..=12 => Part::Interrupt,
            13..=15 => Part::Stop,
            16..=17 => Part::FollowUp,
            _ => Part::Aside,
        }
    }
}

/// One session as the driver follows it.
#[derive(Debug)]
struct Tracked {
    n: usize,
    part: Part,
    id: String,
    /// Shell batches seen on the stream (counted again from a resume after the kill).
    batches: usize,
    /// The part's one intervention (interrupt, stop, follow-up) was made.
    intervened: bool,
    /// The model said its last words.
    done: bool,
    /// The session was resumed after the kill.
    resumed: bool,
    /// How many times its log held the model's last words at the kill (a resumed run says
    /// them once more).
    dones_before: usize,
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let load = Load::from_env()?;
    let (intendant, fake) = intendant_bench::scripted_binaries()?;
    let work = intendant_bench::work_dir()?;
    let root = work.path().to_path_buf();
    let home = root.join("state");
    std::fs::create_dir_all(&home)?;
    // A human gave MCP this project and let a model answer approvals (the soak's MCP client
    // plays that model); the daemon's other settings are its defaults.
    let project = root.join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        home.join("intendant.toml"),
        format!(
            "[mcp]\nallow_model_approvals = true\nmax_autonomy = \"full\"\nprojects = [{:?}]\n",
            project.display().to_string()
        ),
    )?;
    let mut draw = Draw(load.seed.max(1));
    // The first wave, then a second of half as many on the same daemon.
    let parts: Vec<Part> = (0..load.sessions + load.sessions / 2)
        .map(|_| draw.part())
        .collect();
    let scenario = scenario(&root, load, &parts)?;
    let (mut server, port) = intendant_bench::start_fake_model(&fake, &scenario)?;
    let rt = intendant_bench::runtime()?;
    let result = rt.block_on(soak(load, &intendant, &root, &project, port, &parts));
    intendant_bench::end_child(&mut server, libc::SIGKILL);
    let figures = result?;
    let left = leftover_processes(&root)?;
    if !left.is_empty() {
        bail!("processes of the run are left: {left:?}");
    }

    let (fresh, first, second) = (
        figures.rss_fresh,
        figures.rss_after_first,
        figures.rss_after_second,
    );
    let ratio = second.total_kib as f64 / first.total_kib as f64;
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "soak: {} sessions x {} turns, seed {:#x}, one kill -9 and restart, then {} more, {:.0} s",
        load.sessions,
        load.turns,
        load.seed,
        load.sessions / 2,
        figures.wall.as_secs_f64()
    );
    for (part, count) in &figures.parts {
        println!("  {part:<32}: {count}");
    }
    println!(
        "  {:<32}: {} (socket {}, dashboard {}, MCP {})",
        "approvals answered",
        figures.approvals.iter().sum::<usize>(),
        figures.approvals[0],
        figures.approvals[1],
        figures.approvals[2]
    );
    println!(
        "  {:<32}: {} unfinished, all resumed to completion",
        "at the kill", figures.resumed
    );
    println!(
        "  {:<32}: {} (held by the daemon or waiting in a loop at the kill, each in a resume's task)",
        "follow-ups the kill left untaken", figures.carried
    );
    println!("  every log whole, turns gapless, every session accounted for, no process left");
    println!("  {:<32}: {fresh}", "restarted daemon RSS, fresh");
    println!("  {:<32}: {first}", "  first wave stopped");
    println!("  {:<32}: {second}", "  second wave stopped");
    println!(
        "  {:<32}: {ratio:.3}x (goal <= {RSS_GOAL}: {}); anonymous {:.3}x",
        "second wave over the first",
        verdict(ratio <= RSS_GOAL),
        second.anon_kib as f64 / first.anon_kib as f64
    );
    println!(
        "  {:<32}: {:.3}x (reported: the first wave filled the bounded caches)",
        "second wave over fresh",
        second.total_kib as f64 / fresh.total_kib as f64
    );
    println!(
        "  {:<32}: {} (the {} sessions of both waves pruned, none listed; {:.3}x the second \
         wave's)",
        "after pruning them all",
        figures.rss_after_prune,
        figures.pruned,
        figures.rss_after_prune.total_kib as f64 / second.total_kib as f64
    );
    let measured = format!(
        "{} sessions x {} turns, mixed, one kill -9: the daemon's RSS once a second wave of {} is stopped",
        load.sessions,
        load.turns,
        load.sessions / 2
    );
    intendant_bench::report::record(&Figure {
        row: "soak_rss",
        measured: &measured,
        value: second.total_kib as f64,
        baseline: "its RSS once the first wave was stopped",
        baseline_value: first.total_kib as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: Some(RSS_GOAL),
        limit: None,
    })?;
    if ratio > RSS_GOAL {
        bail!("the daemon's RSS grew with the second wave: {ratio:.3}x the first's figure");
    }
    Ok(())
}

/// One script per session: its turns of one shell call, with the words its part needs.
fn scenario(dir: &Path, load: Load, parts: &[Part]) -> Result<PathBuf> {
    let scripts: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(n, part)| {
            // A write asks at `low`; `true` (read-only) never asks.
            // Each write its own file: an approved command is not asked again.
            let mut turns: Vec<Value> = (0..load.turns)
                .map(|t| {
                    let command = match part {
                        Part::Approvals => format!("touch soak-{n:04}-{t:02}.txt"),
                        Part::Plain
                        | Part::Interrupt
                        | Part::Stop
                        | Part::FollowUp
                        | Part::Aside => "true".to_owned(),
                    };
                    json!({
                        "tool_calls": [{ "name": "exec_command", "arguments": { "command": command } }]
                    })
                })
                .collect();
            if *part == Part::FollowUp {
                turns.insert(load.turns / 2, json!({ "text": HALF }));
            }
            turns.push(json!({ "text": DONE }));
            json!({ "when_task_contains": format!("[soak-s{n:04}]"), "turns": turns })
        })
        .collect();
    // A turn the fake answered just before the kill is lost with the daemon; asked again after
    // the resume, the script's end answers `done`, as a model would.
    Ok(intendant_bench::write_scripts_scenario(
        dir, scripts, "done",
    )?)
}

/// What the run measured.
struct Figures {
    wall: Duration,
    parts: BTreeMap<&'static str, usize>,
    approvals: [usize; 3],
    resumed: usize,
    /// Follow-ups left untaken at the kill that a resume's task carried.
    carried: usize,
    /// The restarted daemon right after it answered.
    rss_fresh: Rss,
    /// Once the first wave's sessions are all stopped.
    rss_after_first: Rss,
    /// Once the second wave's are.
    rss_after_second: Rss,
    /// Sessions a prune then removed, every one of both waves.
    pruned: usize,
    /// Once that prune's memory was given back.
    rss_after_prune: Rss,
}

/// A running `intendant serve` and its doors.
struct Daemon {
    child: Child,
    host: Arc<RemoteHost>,
    web: String,
    token: String,
    http: reqwest::Client,
    /// Taken (and closed) by `shut`.
    mcp: Option<RunningService<RoleClient, ()>>,
}

impl Daemon {
    async fn start(bin: &Path, root: &Path, port: u16) -> Result<Daemon> {
        let home = root.join("state");
        let web_port = free_port()?;
        // The allocators' settings are passed on by `command`, so a run can see what they hold
        // of its RSS.
        let child = intendant_bench::daemon::command(bin, root, port)
            .current_dir(root.join("project"))
            .args(["serve", "--web", &format!("127.0.0.1:{web_port}")])
            .stderr(Stdio::from(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(root.join("daemon.log"))?,
            ))
            .spawn()
            .context("starting intendant serve")?;
        let started = Instant::now();
        let host = loop {
            match RemoteHost::connect(&home, "soak").await {
                Ok(host) => break Arc::new(host),
                Err(e) if started.elapsed() > READY_WAIT => bail!("the daemon never answered: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let token = loop {
            match std::fs::read_to_string(home.join("web-token")) {
                Ok(t) if !t.trim().is_empty() => break t.trim().to_owned(),
                _ if started.elapsed() > READY_WAIT => bail!("the dashboard never wrote its token"),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let web = format!("http://127.0.0.1:{web_port}");
        let http = intendant_netguard::http::client_builder()?
            .no_proxy()
            .build()?;
        // The dashboard answers once its listener is up.
        loop {
            let answered = http
                .get(format!("{web}/api/settings"))
                .bearer_auth(&token)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if answered {
                break;
            }
            if started.elapsed() > READY_WAIT {
                bail!("the dashboard never answered");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let transport = StreamableHttpClientTransport::with_client(
            intendant_netguard::http::client()?,
            StreamableHttpClientTransportConfig::with_uri(format!("{web}/mcp")).auth_header(&token),
        );
        let mcp = ().serve(transport).await.context("MCP initialize")?;
        Ok(Daemon {
            child,
            host,
            web,
            token,
            http,
            mcp: Some(mcp),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Answers approval `id` of `session` with `approve` from `surface`.
    async fn approve(&self, surface: Surface, session: &str, id: u64) -> Result<()> {
        match surface {
            Surface::Socket => self
                .host
                .send(SessionIntent {
                    session_id: session.to_owned(),
                    msg: ControlMsg::Approve { id },
                })
                .await
                .map(drop)
                .map_err(|e| anyhow::anyhow!("socket approve: {e}")),
            Surface::Dashboard => {
                let response = self
                    .http
                    .post(format!("{}/api/intents", self.web))
                    .bearer_auth(&self.token)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(
                        json!({
                            "intent": "session", "session_id": session, "action": "approve", "id": id
                        })
                        .to_string(),
                    )
                    .send()
                    .await?;
                let status = response.status();
                if !status.is_success() {
                    bail!("dashboard approve: {status}: {}", response.text().await?);
                }
                Ok(())
            }
            Surface::Mcp => {
                let arguments = json!({
                    "session_id": session, "approval_id": id, "decision": "approve"
                });
                let mcp = self.mcp.as_ref().context("the MCP client was closed")?;
                let result = mcp
                    .peer()
                    .call_tool(
                        CallToolRequestParams::new("resolve_approval")
                            .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
                    )
                    .await?;
                if result.is_error == Some(true) {
                    bail!("MCP resolve_approval: {:?}", result.structured_content);
                }
                Ok(())
            }
        }
    }

    fn kill(mut self) {
        intendant_bench::end_child(&mut self.child, libc::SIGKILL);
    }

    async fn shut(mut self) -> Result<()> {
        if let Some(mcp) = self.mcp.take() {
            let _ = mcp.cancel().await;
        }
        intendant_bench::end_child(&mut self.child, libc::SIGTERM);
        Ok(())
    }
}

impl Drop for Daemon {
    /// A run that fails leaves no daemon behind (after `kill` or `shut` this reaps nothing).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            intendant_bench::end_child(&mut self.child, libc::SIGKILL);
        }
    }
}

async fn soak(
    load: Load,
    bin: &Path,
    root: &Path,
    project: &Path,
    port: u16,
    parts: &[Part],
) -> Result<Figures> {
    let started = Instant::now();
    let deadline = started + load.deadline;
    let daemon = Daemon::start(bin, root, port).await?;
    let mut sessions = start_wave(&daemon, project, parts, 0..load.sessions).await?;
    let mut approvals = [0usize; 3];
    let half = load.sessions / 2;
    drive(&daemon, &mut sessions, &mut approvals, deadline, |s| {
        s.iter().filter(|t| t.done).count() >= half
    })
    .await?;

    // The kill, mid-load. What counts afterwards is what the logs hold: the stream runs a
    // few events ahead of each session's log writer, so a session whose last words a client
    // saw may have lost them with the daemon; it is resumed like any unfinished one.
    daemon.kill();
    let daemon = Daemon::start(bin, root, port).await?;
    for tracked in &mut sessions {
        let records = log_records(&daemon.host.log_dir(&tracked.id).await?)?;
        tracked.done = ended_its_round(&records);
        tracked.dones_before = said_done(&model_said(&records));
    }
    // Sessions not done when the daemon was killed: resumed, so their logs must end; a done
    // one's log ends with its last round (the kill was its end, listed interrupted).
    let killed_live: BTreeSet<String> = sessions
        .iter()
        .filter(|t| !t.done)
        .map(|t| t.id.clone())
        .collect();
    let rss_fresh = Rss::of(daemon.pid())?;
    // Every session was live at the kill (a done one idle, waiting for a follow-up): each is
    // listed interrupted, and each one not done is resumed.
    let listed = daemon.host.sessions().await?;
    for tracked in &sessions {
        let summary = listed
            .iter()
            .find(|s| s.id == tracked.id)
            .with_context(|| format!("session {} is not listed after the restart", tracked.id))?;
        if summary.status != SessionStatus::Interrupted {
            bail!(
                "session {} is listed {} after the restart, not interrupted",
                tracked.id,
                summary.status.name()
            );
        }
    }
    for tracked in sessions.iter_mut().filter(|t| !t.done) {
        daemon
            .host
            .start(StartRequest {
                task: "continue where you stopped".into(),
                project: project.display().to_string(),
                resume: Some(tracked.id.clone()),
                ..StartRequest::default()
            })
            .await
            .with_context(|| format!("resuming after the restart: session {}", tracked.id))?;
        tracked.resumed = true;
        // An interrupt or a stop is not repeated after the kill (the kill was one); a
        // `follow_up` session still gets its follow-up when it says it is half done.
        tracked.intervened |= matches!(tracked.part, Part::Interrupt | Part::Stop);
        // An aside not yet sent waits for batches of the resumed run: sent while the resume
        // waits for a slot, it would reach the session before its run's start, where the log
        // check takes a follow-up the resume's task lacks for one the kill left and it lost.
        tracked.batches = 0;
    }
    let resumed = sessions.iter().filter(|t| t.resumed).count();
    drive(&daemon, &mut sessions, &mut approvals, deadline, |s| {
        s.iter().all(|t| t.done)
    })
    .await?;
    let rss_after_first = stop_all(&daemon, deadline).await?;

    // The second wave, on the same daemon: what it adds to the first's figure is what a load
    // leaves behind, beyond the bounded caches the first filled.
    let mut second = start_wave(&daemon, project, parts, load.sessions..parts.len()).await?;
    drive(&daemon, &mut second, &mut approvals, deadline, |s| {
        s.iter().all(|t| t.done)
    })
    .await?;
    let rss_after_second = stop_all(&daemon, deadline).await?;

    // Every log checked while they are all there; then a prune of every ended session, as an
    // owner of a long-lived daemon would: it removes them all and the daemon lists none.
    let carried = check_logs(&root.join("state"), &killed_live)?;
    let report = daemon
        .host
        .prune(PruneRequest {
            older_than_secs: 0,
            dry_run: false,
        })
        .await
        .context("pruning every ended session")?;
    let all = sessions.len() + second.len();
    if report.removed.len() != all || !report.kept.is_empty() {
        bail!(
            "the prune removed {} of the {all} ended sessions, kept {:?}",
            report.removed.len(),
            report.kept
        );
    }
    let listed = daemon.host.session_counts().await?.total;
    if listed != 0 {
        bail!("{listed} sessions are still listed after every one was pruned");
    }
    tokio::time::sleep(intendant_daemon::memory::RELEASE_DELAY * 3).await;
    let rss_after_prune = Rss::of(daemon.pid())?;
    daemon.shut().await?;

    let mut counts = BTreeMap::new();
    for tracked in sessions.iter().chain(&second) {
        let name = match tracked.part {
            Part::Plain => "plain",
            Part::Approvals => "approvals at low",
            Part::Interrupt => "interrupted, then followed up",
            Part::Stop => "stopped, then resumed",
            Part::FollowUp => "done half-way, then followed up",
            Part::Aside => "told more during its round",
        };
        *counts.entry(name).or_insert(0) += 1;
    }
    Ok(Figures {
        wall: started.elapsed(),
        parts: counts,
        approvals,
        resumed,
        carried,
        rss_fresh,
        rss_after_first,
        rss_after_second,
        pruned: all,
        rss_after_prune,
    })
}

/// Starts the sessions numbered `range`, each at the level its part needs.
async fn start_wave(
    daemon: &Daemon,
    project: &Path,
    parts: &[Part],
    range: std::ops::Range<usize>,
) -> Result<Vec<Tracked>> {
    let mut sessions = Vec::with_capacity(range.len());
    for n in range {
        let part = parts[n];
        let request = StartRequest {
            task: Load::task(n),
            project: project.display().to_string(),
            autonomy: Some(if part == Part::Approvals {
                AutonomyLevel::Low
            } else {
                AutonomyLevel::Full
            }),
            provider: Some("openai".into()),
            model: Some("fake-model".into()),
            ..StartRequest::default()
        };
        let summary = daemon.host.start(request).await?;
        sessions.push(Tracked {
            n,
            part,
            id: summary.id,
            batches: 0,
            intervened: false,
            done: false,
            resumed: false,
            dones_before: 0,
        });
    }
    Ok(sessions)
}

/// Stops every live session once each waits for a follow-up (a round still going takes what
/// was sent during the one before: an `aside`), waits until none is live, and returns the
/// daemon's RSS then.
async fn stop_all(daemon: &Daemon, deadline: Instant) -> Result<Rss> {
    loop {
        let working: Vec<String> = daemon
            .host
            .sessions()
            .await?
            .into_iter()
            .filter(|s| !s.status.is_finished() && s.status != SessionStatus::Idle)
            .map(|s| s.id)
            .collect();
        if working.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("sessions still at work once every one was done: {working:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    for summary in daemon.host.sessions().await? {
        if !summary.status.is_finished() {
            daemon
                .host
                .stop(&summary.id)
                .await
                .with_context(|| format!("stopping: session {}", summary.id))?;
        }
    }
    loop {
        let live = daemon
            .host
            .sessions()
            .await?
            .iter()
            .filter(|s| !s.status.is_finished())
            .count();
        if live == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{live} sessions still live after every one was stopped");
        }
        tokio::time::sleep(POLL).await;
    }
    // The daemon gives what ended sessions freed back to the system once their ends settle
    // (`intendant_daemon::memory`): the figure is taken after that.
    tokio::time::sleep(intendant_daemon::memory::RELEASE_DELAY * 3).await;
    Rss::of(daemon.pid())
}

/// The daemon's resident memory: all of it, and its anonymous part (the heap, stacks: what a
/// leak would grow; the rest is the binary's pages as they were touched).
#[derive(Debug, Clone, Copy)]
struct Rss {
    total_kib: u64,
    anon_kib: u64,
}

impl Rss {
    fn of(pid: u32) -> Result<Rss> {
        Ok(Rss {
            total_kib: intendant_bench::status_kib(pid, "VmRSS")?,
            anon_kib: intendant_bench::status_kib(pid, "RssAnon")?,
        })
    }
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} KiB ({} anonymous)", self.total_kib, self.anon_kib)
    }
}

/// Plays every session's part until `enough` holds: follows the stream for batches and the
/// model's words, answers approvals, makes each part's one intervention.
async fn drive(
    daemon: &Daemon,
    sessions: &mut [Tracked],
    approvals: &mut [usize; 3],
    deadline: Instant,
    enough: impl Fn(&[Tracked]) -> bool,
) -> Result<()> {
    let index: BTreeMap<String, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.clone(), i))
        .collect();
    // What the model said before this stream began is in the logs (read after subscribing, so
    // nothing falls between the two).
    let mut events = daemon.host.subscribe(None, None).await?;
    for tracked in sessions.iter_mut().filter(|t| !t.done) {
        let said = model_said(&log_records(&daemon.host.log_dir(&tracked.id).await?)?);
        tracked.done = said_done(&said) > tracked.dones_before;
        if !tracked.done && said.iter().any(|w| w == HALF) {
            half_way(daemon, tracked).await?;
        }
    }
    let mut answered = BTreeSet::new();
    let mut next_poll = Instant::now();
    while !enough(sessions) {
        if Instant::now() > deadline {
            let left: Vec<_> = sessions
                .iter()
                .filter(|t| !t.done)
                .map(|t| format!("{} ({:?}, {} batches seen)", t.id, t.part, t.batches))
                .collect();
            bail!(
                "the deadline passed with {} sessions unfinished: {left:?}",
                left.len()
            );
        }
        let item = tokio::time::timeout(POLL, events.next()).await;
        match item {
            Ok(Some(StreamItem::Event(envelope))) => {
                let Some(&i) = index.get(&envelope.session_id) else {
                    continue;
                };
                let tracked = &mut sessions[i];
                match &envelope.event {
                    AppEvent::ToolBatchResult { .. } => tracked.batches += 1,
                    AppEvent::ModelResponse { text, .. } if text.trim() == DONE => {
                        tracked.done = true;
                    }
                    AppEvent::ModelResponse { text, .. } if text.trim() == HALF => {
                        half_way(daemon, tracked).await?;
                    }
                    _ => {}
                }
            }
            Ok(Some(StreamItem::Lagged { next_seq })) => {
                events = daemon.host.subscribe(None, Some(next_seq - 1)).await?;
            }
            Ok(None) => bail!("the daemon ended its stream"),
            Err(_) => {}
        }
        if Instant::now() < next_poll {
            continue;
        }
        next_poll = Instant::now() + POLL;
        for pending in daemon.host.approvals().await? {
            if !answered.insert(pending.id) {
                continue;
            }
            let Some(&i) = index.get(&pending.session_id) else {
                bail!("an approval of an unknown session: {pending:?}");
            };
            let k = (sessions[i].n + usize::try_from(pending.id)?) % 3;
            let surface = [Surface::Socket, Surface::Dashboard, Surface::Mcp][k];
            daemon
                .approve(surface, &pending.session_id, pending.id)
                .await
                .with_context(|| {
                    format!("answering an approval: session {}", pending.session_id)
                })?;
            approvals[k] += 1;
        }
        intervene(daemon, sessions).await?;
    }
    Ok(())
}

/// Each `interrupt`, `stop` and `aside` session's one intervention, once it has run a few
/// turns.
async fn intervene(daemon: &Daemon, sessions: &mut [Tracked]) -> Result<()> {
    let ready = |t: &Tracked| !t.intervened && !t.done && t.batches >= 3;
    let due: Vec<usize> = (0..sessions.len())
        .filter(|&i| {
            ready(&sessions[i])
                && matches!(sessions[i].part, Part::Interrupt | Part::Stop | Part::Aside)
        })
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let listed = daemon.host.sessions().await?;
    for i in due {
        let tracked = &mut sessions[i];
        tracked.intervened = true;
        match tracked.part {
            Part::Interrupt => {
                // A session that ended its round meanwhile has no turn to interrupt: the
                // follow-up below still continues it.
                if let Err(e) = daemon.host.interrupt(&tracked.id).await
                    && daemon.host.session(&tracked.id).await?.status != SessionStatus::Idle
                {
                    return Err(anyhow::anyhow!("interrupting: session {}: {e}", tracked.id));
                }
                wait_status(daemon, &tracked.id, |s| s == SessionStatus::Idle).await?;
                daemon
                    .host
                    .send(SessionIntent {
                        session_id: tracked.id.clone(),
                        msg: ControlMsg::FollowUp {
                            text: "go on".into(),
                        },
                    })
                    .await
                    .with_context(|| {
                        format!("the follow-up after the interrupt: session {}", tracked.id)
                    })?;
            }
            Part::Stop => {
                daemon
                    .host
                    .stop(&tracked.id)
                    .await
                    .with_context(|| format!("stopping mid-way: session {}", tracked.id))?;
                wait_status(daemon, &tracked.id, SessionStatus::is_finished).await?;
                let project = listed
                    .iter()
                    .find(|s| s.id == tracked.id)
                    .map(|s| s.project.clone())
                    .with_context(|| format!("session {} is not listed", tracked.id))?;
                daemon
                    .host
                    .start(StartRequest {
                        task: "continue".into(),
                        project,
                        resume: Some(tracked.id.clone()),
                        ..StartRequest::default()
                    })
                    .await
                    .with_context(|| format!("resuming after the stop: session {}", tracked.id))?;
            }
            Part::Aside => {
                daemon
                    .host
                    .send(SessionIntent {
                        session_id: tracked.id.clone(),
                        msg: ControlMsg::FollowUp {
                            text: format!("an aside for session {}", tracked.n),
                        },
                    })
                    .await
                    .with_context(|| format!("the aside: session {}", tracked.id))?;
            }
            Part::Plain | Part::Approvals | Part::FollowUp => {}
        }
    }
    Ok(())
}

/// Waits (bounded) until session `id` is listed in a status `wanted` accepts.
async fn wait_status(
    daemon: &Daemon,
    id: &str,
    wanted: impl Fn(SessionStatus) -> bool,
) -> Result<()> {
    let until = Instant::now() + READY_WAIT;
    loop {
        let status = daemon.host.session(id).await?.status;
        if wanted(status) {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("session {id} stayed {}", status.name());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `follow_up` session said it is half done: ask once for the rest.
async fn half_way(daemon: &Daemon, tracked: &mut Tracked) -> Result<()> {
    if tracked.intervened {
        return Ok(());
    }
    tracked.intervened = true;
    daemon
        .host
        .send(SessionIntent {
            session_id: tracked.id.clone(),
            msg: ControlMsg::FollowUp {
                text: "now do the rest".into(),
            },
        })
        .await
        .map(drop)
        .with_context(|| format!("the half-way follow-up: session {}", tracked.id))
}

/// The whole records of the session log in `dir` (none before it is made).
fn log_records(dir: &Path) -> Result<Vec<Value>> {
    let text = match std::fs::read_to_string(dir.join("session.jsonl")) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect())
}

/// The model's words (trimmed), in order, in a session log's `records`.
fn model_said(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter(|v| v["event"] == "model_response")
        .filter_map(|v| v["text"].as_str().map(|t| t.trim().to_owned()))
        .collect()
}

/// How many times the model said its last words in `said`.
fn said_done(said: &[String]) -> usize {
    said.iter().filter(|w| *w == DONE).count()
}

/// Whether a session log's `records` hold its model's last words and then its round's end,
/// with no round begun after it and no follow-up it has not taken: done before the kill. A
/// kill between the two (the `done` logged, `round_complete` not yet) leaves it unfinished,
/// resumed like any other (the fake answers `done` again); so does a follow-up not yet taken
/// at the kill (an interrupted session's `go on` held for a slot, an `aside` sent during the
/// round), which the resume sends.
fn ended_its_round(records: &[Value]) -> bool {
    let mut said = false;
    let mut ended = false;
    let mut untaken = Untaken::default();
    for record in records {
        let _ = untaken.read(record);
        match record["event"].as_str() {
            Some("model_response") => {
                said = record["text"].as_str().map(str::trim) == Some(DONE);
                ended = false;
            }
            Some("round_complete") => ended = said,
            Some("turn_started") => ended = false,
            _ => {}
        }
    }
    ended && untaken.texts.is_empty()
}

/// The follow-ups a session's log shows it has not taken yet, read forward, as the soak checks
/// them: one reaches the session's loop in its `control_command` (those the daemon held,
/// `follow_up_held`, joined into one) and is taken by a round that begins after it (a turn or
/// a round's end after a round's end); a run's start (a resume after the kill) must carry every
/// one left in its task.
#[derive(Debug, Default)]
struct Untaken {
    /// Not taken yet, in order; `true`: the daemon holds it.
    texts: Vec<(bool, String)>,
    between_rounds: bool,
    /// How many a run's start carried in its task.
    carried: usize,
}

impl Untaken {
    /// Reads one record; at a run's start, a follow-up left untaken that its task lacks.
    fn read(&mut self, record: &Value) -> Option<String> {
        let event = record["event"].as_str().unwrap_or_default();
        let text = || record["text"].as_str().unwrap_or_default().to_owned();
        match event {
            "follow_up_held" => self.texts.push((true, text())),
            "control_command" if record["action"] == "follow_up" => {
                self.texts.retain(|(held, _)| !held);
                self.texts.push((false, text()));
            }
            "turn_started" | "round_complete" => {
                if self.between_rounds {
                    self.texts.retain(|(held, _)| *held);
                }
                self.between_rounds = event == "round_complete";
            }
            "session_started" => {
                let task = record["task"].as_str().unwrap_or_default();
                let lost = self
                    .texts
                    .iter()
                    .find(|(_, text)| !task.contains(text.as_str()))
                    .map(|(_, text)| text.clone());
                if lost.is_none() {
                    self.carried += self.texts.len();
                }
                self.texts.clear();
                self.between_rounds = false;
                return lost;
            }
            _ => {}
        }
        None
    }
}

/// Every session log: whole JSON lines (one torn line allowed in a log the kill may have cut),
/// ending (or, for a session done before the kill, ending with its last round),
/// each run's turns numbered 1, 2, 3..., each follow-up taken, the model's last words, and
/// an end.
fn check_logs(home: &Path, killed_live: &BTreeSet<String>) -> Result<usize> {
    let mut carried = 0;
    for entry in std::fs::read_dir(home.join("logs"))? {
        let dir = entry?.path();
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = dir.join("session.jsonl");
        let text = std::fs::read_to_string(&path)?;
        let mut torn = 0;
        let mut turn = 0;
        let mut done = false;
        let mut last = String::new();
        let mut untaken = Untaken::default();
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                torn += 1;
                continue;
            };
            let event = record["event"].as_str().unwrap_or_default();
            if let Some(lost) = untaken.read(&record) {
                bail!(
                    "{}: the follow-up {lost:?}, never taken, was not sent",
                    path.display()
                );
            }
            // Each run (the first and every resume) numbers its turns from 1; the session-wide
            // number adds the turns recorded before it (`SessionLog::session_turn`).
            if event == "session_started" {
                turn = 0;
            }
            if event == "turn_started" {
                let n = record["turn"].as_u64().unwrap_or(0);
                if n != turn + 1 {
                    bail!("{}: turn {n} after turn {turn}", path.display());
                }
                turn = n;
            }
            if event == "model_response" && record["text"].as_str().map(str::trim) == Some(DONE) {
                done = true;
            }
            last = event.to_owned();
        }
        let resumed = killed_live.contains(&id);
        if torn > usize::from(resumed) {
            bail!("{}: {torn} lines are not JSON", path.display());
        }
        carried += untaken.carried;
        if !untaken.texts.is_empty() {
            bail!(
                "{}: follow-ups never taken: {:?}",
                path.display(),
                untaken.texts
            );
        }
        let ended = last == "session_ended" || (!resumed && last == "round_complete");
        if !done || !ended {
            bail!(
                "{}: not accounted for (the model's last words seen: {done}, last event {last})",
                path.display()
            );
        }
    }
    Ok(carried)
}

/// Processes whose command line names the run's directory, or that run a binary of this build.
fn leftover_processes(root: &Path) -> Result<Vec<String>> {
    let root_text = root.display().to_string();
    let exe_dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let me = std::process::id();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        let ours = exe.parent() == Some(exe_dir.as_path()) && cwd.starts_with(root);
        if cmdline.contains(&root_text) || ours {
            left.push(format!("{pid}: {}", cmdline.trim()));
        }
    }
    Ok(left)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

//! `intendant ctl VERB`: drives the daemon of this state root (`intendant serve`) over its
//! control socket, through the same `SessionHost` the daemon's own frontends use
//! (`intendant_server::socket::RemoteHost`).
//!
//! Human-readable by default; `--json` prints one JSON object per line. Exit status: 0 done;
//! 1 the daemon refused (unknown session or approval, already answered, ...) or the attached
//! session failed; 2 usage; 3 no daemon runs for this state root (or it went away).
//!
//! `ctl attach` re-emits the session's events onto a local `EventBus` and runs the terminal
//! frontend on it, forwarding the intents it emits (approval answers, question answers,
//! follow-ups) to the daemon: the same renderer as a one-shot run, none of its own.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::bus::EventBus;
use intendant_core::host::{EventStream, SessionHost};
use intendant_core::rewind::describe;
use intendant_core::session_log::{Logged, RECORD_READ_BYTES, each_record, intendant_home};
use intendant_protocol::daemon::{
    Envelope, HostError, HostErrorCode, PendingApproval, RecordRead, Sent, SessionIntent,
    SessionStatus, SessionSummary, SessionUsage, SessionsPage, Settings, SettingsChange,
    StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg, EndStatus};
use intendant_protocol::utc::{UtcTime, age_seconds, human_age};
use intendant_server::socket::RemoteHost;
use serde::Serialize;
use serde_json::json;

use crate::terminal::lineage::{id_cell, nested};
use crate::terminal::narrator::epoch_millis;
use crate::terminal::units::{one_line, plural};
use crate::wiring::RewindFlags;

mod agenda;

/// Exit status: the daemon refused, or the attached session failed.
const EXIT_REFUSED: u8 = 1;
/// Exit status: no daemon runs for this state root.
const EXIT_NO_DAEMON: u8 = 3;

/// Arguments of `intendant ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// Print JSON, one object per line, instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, clap::Subcommand)]
enum Verb {
    /// The daemon: pid, state root, settings, session and approval counts.
    Status,
    /// Every session the daemon knows (in a fleet, every member's), oldest first.
    Sessions {
        /// Only the newest N (at most 256, one page of the listing).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(SessionsPage::SIZE)))]
        last: Option<u32>,
        /// Only sessions in this status: queued, running, waiting_for_human, idle, done,
        /// failed or interrupted (read of the daemon a page of them at a time).
        #[arg(long, value_name = "STATUS", value_parser = parse_status)]
        status: Option<SessionStatus>,
    },
    /// Every pending approval, oldest first: its id, session and command.
    Approvals,
    /// Start a session; prints its id.
    Start(StartArgs),
    /// Follow a session's events (from its start, or after --since) and answer its approvals
    /// and questions at the terminal; end of input there detaches
    ///
    /// With --json, end of input detaches too. Without a terminal on stdin (a script's
    /// `< /dev/null`) it follows until the session ends.
    Attach {
        /// Session id, or `agenda`: the agenda's events (reminders due, schedules started,
        /// missed or failed).
        id: String,
        /// Only events after this seq.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
    },
    /// Send a follow-up instruction.
    Send {
        /// Session id.
        id: String,
        /// The instruction (`-`: read it from stdin).
        text: String,
    },
    /// Approve one pending command.
    Approve(ApprovalArgs),
    /// Deny one pending command (the task stops).
    Deny(ApprovalArgs),
    /// Skip one pending command (the model is told it did not run).
    Skip(ApprovalArgs),
    /// Approve this command and everything after it in the session.
    ApproveAll(ApprovalArgs),
    /// Answer a network approval for good: its host for the rest of the session and in the
    /// project's `[sandbox.network] allow` (the file kept trusted only if it was).
    AllowHost(ApprovalArgs),
    /// Answer the session's pending question.
    Answer {
        /// Session id.
        id: String,
        /// The answer (`-`: read it from stdin).
        text: String,
    },
    /// End the session's current turn (the running batch is killed); it waits for a follow-up.
    Interrupt {
        /// Session id.
        id: String,
    },
    /// End the session (the running batch is killed); it stays resumable.
    Stop {
        /// Session id.
        id: String,
    },
    /// Show or set the autonomy level of new sessions, or of one session with --session.
    Autonomy {
        /// The new level: low, medium, high or full.
        level: Option<AutonomyLevel>,
        /// One session instead of the default.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Read `[daemon]` of the state root's intendant.toml again and put it in force: the
    /// default autonomy and backend, max_running and max_autonomy (a session above a lowered
    /// max_autonomy is lowered to it); a file with anything wrong changes nothing.
    Reload,
    /// Rewind a session that runs no turn: its files and conversation back to before a turn
    /// (`--preview` first shows what would change), or undo its last rewind.
    Rewind {
        /// Session id.
        id: String,
        #[command(flatten)]
        flags: RewindFlags,
    },
    /// Where a placement (`start --fleet`) stands: pending, taken by a member, started there
    /// as a session, or failed with the reason.
    Placement {
        /// The placement's id (what `start --fleet` printed).
        id: String,
    },
    /// Print a session's log directory (its session.jsonl).
    Logs {
        /// Session id.
        id: String,
    },
    /// Stop every session, then the daemon.
    Shutdown,
    /// The daemon's agenda: parked work items with reminders, and scheduled sessions (list,
    /// add, done, snooze, approve, reject).
    Agenda {
        #[command(subcommand)]
        verb: agenda::AgendaVerb,
    },
    /// Schedule one session at a time (`--at`): the whole request is shown with its sha256 and
    /// waits for your approval (`ctl agenda approve`); approved, the daemon starts exactly it
    /// once at that time. Not run if the daemon was down then (it is listed `missed`).
    Schedule(agenda::ScheduleArgs),
    /// Print the web dashboard's login token (works without a running daemon).
    WebToken {
        /// Replace it first: the old token and every browser logged in with it stop working,
        /// also in a running dashboard.
        #[arg(long)]
        rotate: bool,
    },
}

#[derive(Debug, clap::Args)]
struct StartArgs {
    /// The task (`-`: read it from stdin); with `--resume`, what it should do now (none: go on).
    #[arg(required_unless_present = "resume", default_value = "")]
    task: String,
    /// Project directory (default: the current directory; with `--resume`, the project the
    /// session worked in).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Autonomy level (default: the daemon's).
    #[arg(long, value_name = "LEVEL")]
    autonomy: Option<AutonomyLevel>,
    /// Model provider.
    #[arg(long)]
    provider: Option<String>,
    /// Model name.
    #[arg(long)]
    model: Option<String>,
    /// Scenario file for `--provider mock`.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Run it with this external agent CLI as the worker (codex, claude-code, kimi, `acp --
    /// COMMAND ARGS...`, the NAME of an [agent.acp.NAME] entry) or `native` (default: the
    /// project's [agent] default_backend, else the daemon's default backend).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// The ACP agent's command line, for `--agent acp`.
    #[arg(last = true, value_name = "COMMAND")]
    agent_command: Vec<String>,
    /// Resume this earlier session (same conversation).
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// What network its commands get: none, proxy or host (default: the project's `[sandbox]
    /// network`, else proxy). Only as open as the project's settings: `host` needs a trusted
    /// `[sandbox] network = "host"`.
    #[arg(long, value_name = "MODE")]
    network: Option<intendant_core::network::NetworkMode>,
    /// Follow the session once started, as `ctl attach` does.
    #[arg(long, conflicts_with = "fleet")]
    attach: bool,
    /// Queue it for a fleet member with a free slot instead of starting it here (needs
    /// `--repo`; refused while the fleet's server cannot be reached).
    #[arg(long, requires = "repo", conflicts_with_all = ["project", "resume", "scenario"])]
    fleet: bool,
    /// With `--fleet`: only this member may take it.
    #[arg(
        long,
        value_name = "MEMBER",
        requires = "fleet",
        conflicts_with = "label"
    )]
    on: Option<String>,
    /// With `--fleet`: only a member with this label may take it.
    #[arg(long, value_name = "LABEL", requires = "fleet")]
    label: Option<String>,
    /// With `--fleet`: the project as a git repository every member can reach; the member
    /// works in its own clone and pushes `intendant/<session id>` back when the session ends.
    #[arg(long, value_name = "URL", requires = "fleet")]
    repo: Option<String>,
    /// With `--fleet`: the branch or tag to work from (default: the default branch).
    #[arg(long = "ref", value_name = "REF", requires = "fleet")]
    git_ref: Option<String>,
    /// With `--fleet`: wait until a member started it (prints the session's id and member) or
    /// it failed (prints why; exit status 1).
    #[arg(long, requires = "fleet")]
    wait: bool,
    /// With `--wait`: give up after this many seconds (exit status 1; it stays queued).
    #[arg(long, value_name = "SECS", requires = "wait", default_value_t = 120)]
    timeout: u64,
}

#[derive(Debug, clap::Args)]
struct ApprovalArgs {
    /// Session id.
    id: String,
    /// Approval id (from `approval_required`).
    approval: u64,
}

/// Why a verb did not succeed.
enum Failure {
    /// The daemon (or the client, for bad arguments) said no.
    Host(HostError),
    /// The attached session ended failed or interrupted.
    Session(EndStatus),
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        Failure::Host(e)
    }
}

/// Runs `intendant ctl`.
#[allow(clippy::print_stderr)]
pub fn run(args: CtlArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(run_async(args));
    // A stdin reader thread may still be blocked on a read; do not wait for it.
    rt.shutdown_background();
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Host(e)) => {
            eprintln!("intendant ctl: {}", e.message);
            ExitCode::from(match e.code {
                HostErrorCode::Unavailable => EXIT_NO_DAEMON,
                HostErrorCode::UnknownSession
                | HostErrorCode::UnknownApproval
                | HostErrorCode::AlreadyAnswered
                | HostErrorCode::SessionFinished
                | HostErrorCode::InvalidRequest
                | HostErrorCode::Forbidden
                | HostErrorCode::ShuttingDown
                | HostErrorCode::Busy
                | HostErrorCode::Internal => EXIT_REFUSED,
            })
        }
        Err(Failure::Session(status)) => {
            eprintln!("intendant ctl: the session ended {}", status.name());
            ExitCode::from(EXIT_REFUSED)
        }
    })
}

// Long because it is the one dispatch of every verb, each arm a line or two; splitting it
// would scatter the verbs.
#[allow(clippy::print_stderr)]
async fn run_async(mut args: CtlArgs) -> Result<(), Failure> {
    let home =
        intendant_home().map_err(|e| HostError::new(HostErrorCode::Unavailable, e.to_string()))?;
    let out = Out { json: args.json };
    // Before the daemon is asked anything: a text given as `-` is read whole first.
    read_stdin_text(&mut args.verb)?;
    if let Verb::WebToken { rotate } = args.verb {
        return web_token(&home, rotate, &out);
    }
    let host = RemoteHost::connect(&home, concat!("intendant-ctl ", env!("CARGO_PKG_VERSION")))
        .await
        .map_err(|e| match e.code {
            // No daemon to reach: say how to start one (a refusal says why on its own).
            HostErrorCode::Unavailable => HostError::new(
                e.code,
                format!("{} (start one with `intendant serve`)", e.message),
            ),
            _ => e,
        })?;
    match args.verb {
        Verb::Status => status(&host, &out).await,
        Verb::Sessions { last, status } => sessions(&host, last, status, &out).await,
        Verb::Approvals => {
            let approvals = host.approvals().await?;
            if out.json {
                approvals.iter().for_each(|a| out.object(a));
            } else {
                out.text(&approval_table(&approvals));
            }
            Ok(())
        }
        Verb::Start(start) if start.fleet => {
            let wait = start.wait.then(|| Duration::from_secs(start.timeout));
            let on = start.on.clone();
            let label = start.label.clone();
            let repo = start.repo.clone().unwrap_or_default();
            let git_ref = start.git_ref.clone();
            let mut request = start_request(start)?;
            // The member that takes it works in its own clone.
            request.project = String::new();
            let placed = host
                .fleet_start(intendant_protocol::fleet::FleetStartRequest {
                    id: String::new(),
                    by: String::new(),
                    start: request,
                    repo,
                    git_ref,
                    on,
                    label,
                })
                .await?;
            match wait {
                Some(limit) => wait_placed(&host, &out, &placed.id, limit).await,
                None => {
                    out.value(&placed, &placed.id);
                    if !out.json {
                        eprintln!(
                            "queued; where it runs: intendant ctl placement {}",
                            placed.id
                        );
                    }
                    Ok(())
                }
            }
        }
        Verb::Placement { id } => {
            let status = host.fleet_placement(&id).await?;
            out.value(&status, &placement_line(&status));
            Ok(())
        }
        Verb::Start(start) => {
            let follow = start.attach;
            let summary = host.start(start_request(start)?).await?;
            if follow {
                attach(&host, &summary.id, Some(0), out.json).await
            } else {
                out.value(&summary, &summary.id);
                if summary.status == SessionStatus::Queued && !out.json {
                    report_queued(&summary.id);
                }
                Ok(())
            }
        }
        Verb::Attach { id, since } => attach(&host, &id, Some(since.unwrap_or(0)), out.json).await,
        Verb::Send { id, text } => {
            setting_to_work(&host, &out, id, ControlMsg::FollowUp { text }).await
        }
        Verb::Answer { id, text } => intent(&host, &out, id, ControlMsg::Input { text }).await,
        Verb::Approve(a) => {
            setting_to_work(&host, &out, a.id, ControlMsg::Approve { id: a.approval }).await
        }
        Verb::Deny(a) => {
            setting_to_work(&host, &out, a.id, ControlMsg::Deny { id: a.approval }).await
        }
        Verb::Skip(a) => {
            setting_to_work(&host, &out, a.id, ControlMsg::Skip { id: a.approval }).await
        }
        Verb::ApproveAll(a) => {
            setting_to_work(&host, &out, a.id, ControlMsg::ApproveAll { id: a.approval }).await
        }
        Verb::AllowHost(a) => {
            setting_to_work(&host, &out, a.id, ControlMsg::AllowHost { id: a.approval }).await
        }
        Verb::Interrupt { id } => {
            host.interrupt(&id).await?;
            out.done(&format!("interrupted {id}"));
            Ok(())
        }
        Verb::Stop { id } => {
            host.stop(&id).await?;
            out.done(&format!("stopping {id}"));
            Ok(())
        }
        Verb::Autonomy { level, session } => autonomy(&host, &out, level, session).await,
        Verb::Reload => {
            let change = SettingsChange {
                reload: true,
                ..SettingsChange::default()
            };
            let settings = host.update_settings(change).await?;
            out.value(
                &settings,
                &format!("reloaded: {}", settings_line(&settings)),
            );
            Ok(())
        }
        Verb::Agenda { verb } => agenda::agenda(&host, &out, verb).await,
        Verb::Schedule(args) => agenda::schedule(&host, &out, args).await,
        Verb::Rewind { id, flags } => {
            let report = host.rewind(flags.request(&id)).await?;
            out.value(&report, describe(&report).trim_end());
            Ok(())
        }
        Verb::Logs { id } => {
            let dir = host.log_dir(&id).await?;
            out.value(&json!({ "path": dir }), &dir.display().to_string());
            Ok(())
        }
        Verb::Shutdown => {
            host.shutdown().await?;
            out.done("the daemon is shutting down");
            Ok(())
        }
        Verb::WebToken { rotate } => web_token(&home, rotate, &out),
    }
}

/// `ctl start --fleet --wait`: polls placement `id` until it started (its session and member
/// printed) or failed (its reason, exit status 1), at most `limit`.
async fn wait_placed(
    host: &RemoteHost,
    out: &Out,
    id: &str,
    limit: Duration,
) -> Result<(), Failure> {
    use intendant_protocol::fleet::PlacementState;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = host.fleet_placement(id).await?;
        match status.state {
            PlacementState::Started => {
                let session = status.session.clone().unwrap_or_default();
                let member = status.member.clone().unwrap_or_default();
                out.value(&status, &format!("{session} on {member}"));
                return Ok(());
            }
            PlacementState::Failed => {
                if out.json {
                    out.object(&status);
                }
                return Err(Failure::Host(HostError::new(
                    HostErrorCode::InvalidRequest,
                    format!("placement {id} {}", placement_line(&status)),
                )));
            }
            PlacementState::Pending | PlacementState::Taken => {}
        }
        if tokio::time::Instant::now() >= deadline {
            if out.json {
                out.object(&status);
            }
            return Err(Failure::Host(HostError::new(
                HostErrorCode::Busy,
                format!(
                    "placement {id} is still {} after {} s (it stays queued: `intendant ctl \
                     placement {id}`)",
                    status.state.name(),
                    limit.as_secs()
                ),
            )));
        }
        tokio::time::sleep(PLACEMENT_POLL).await;
    }
}

/// How often `--wait` asks where a placement stands.
const PLACEMENT_POLL: Duration = Duration::from_millis(250);

/// A placement's state as one line: `pending (queued by alpha)`, `taken by beta`, `started on
/// beta as ID`, `failed on beta: REASON`.
fn placement_line(status: &intendant_protocol::fleet::PlacementStatus) -> String {
    use intendant_protocol::fleet::PlacementState;
    let member = status.member.as_deref().unwrap_or("?");
    match status.state {
        PlacementState::Pending => format!("pending (queued by {})", status.by),
        PlacementState::Taken => format!("taken by {member} (preparing it)"),
        PlacementState::Started => format!(
            "started on {member} as {}",
            status.session.as_deref().unwrap_or("?")
        ),
        PlacementState::Failed => {
            let on = status.member.as_deref().map(|m| format!(" on {m}"));
            let reason = status.reason.as_deref().unwrap_or("no reason given");
            format!("failed{}: {reason}", on.unwrap_or_default())
        }
    }
}

/// `ctl web-token [--rotate]`: the token file in the state root, read or replaced.
fn web_token(home: &Path, rotate: bool, out: &Out) -> Result<(), Failure> {
    use intendant_server::web::token;
    let token = match rotate {
        true => token::rotate(home),
        false => token::load_or_create(home),
    }
    .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
    out.value(&json!({ "token": token }), &token);
    Ok(())
}

/// Stdout, as text or JSON lines. A closed stdout (`| head`) is the reader's choice: output
/// just stops.
struct Out {
    json: bool,
}

impl Out {
    fn text(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush());
    }

    fn object(&self, value: &impl Serialize) {
        if let Ok(line) = serde_json::to_string(value) {
            self.text(&format!("{line}\n"));
        }
    }

    /// `value` as JSON, or `text` as a line.
    fn value(&self, value: &impl Serialize, text: &str) {
        if self.json {
            self.object(value);
        } else {
            self.text(&format!("{text}\n"));
        }
    }

    /// A verb that returns nothing: `{"ok":true}`, or `text` as a line.
    fn done(&self, text: &str) {
        self.value(&json!({ "ok": true }), text);
    }
}

/// A session status as `ctl sessions --status` takes it.
fn parse_status(name: &str) -> Result<SessionStatus, String> {
    name.parse()
        .map_err(|e: intendant_protocol::closed_set::UnknownName| e.to_string())
}

/// `ctl sessions`: this daemon's sessions, or in a fleet every member's; with `last`, only the
/// newest that many (one page of them, however long the history); with `status`, only those
/// in it (the daemon gives only those).
async fn sessions(
    host: &RemoteHost,
    last: Option<u32>,
    status: Option<SessionStatus>,
    out: &Out,
) -> Result<(), Failure> {
    let filter = SessionsPage {
        status,
        ..SessionsPage::ALL
    };
    let newest = |n: u32| SessionsPage {
        status,
        ..SessionsPage::newest(n)
    };
    if host.load().await?.fleet.is_some() {
        let fleet = match last {
            Some(n) => host.fleet_page(&newest(n)).await?,
            None => host.fleet_sessions().await?.page(&filter),
        };
        if out.json {
            for member in &fleet.members {
                for session in &member.sessions {
                    let mut object = json!(session);
                    object["member"] = json!(member.member);
                    out.object(&object);
                }
            }
        } else {
            out.text(&fleet_session_table(&fleet));
        }
        return Ok(());
    }
    let sessions = match last {
        Some(n) => host.sessions_page(&newest(n)).await?,
        None => host.sessions_in(&filter).await?,
    };
    if out.json {
        sessions.iter().for_each(|s| out.object(s));
    } else {
        out.text(&session_table(&sessions));
    }
    Ok(())
}

async fn status(host: &RemoteHost, out: &Out) -> Result<(), Failure> {
    let settings = host.settings().await?;
    let approvals = host.approvals().await?;
    let load = host.load().await?;
    let hello = host.server();
    let work = host.session_counts().await?;
    // What a start leaves free ([`intendant_daemon::descriptors::reserve`]): past it a start
    // is refused.
    let kept_free = intendant_daemon::descriptors::reserve(settings.max_running);
    let started = hello.started_at.as_deref();
    let uptime = started.and_then(age_seconds);
    if out.json {
        let mut object = json!({
            "server": hello.server,
            "pid": hello.pid,
            "home": hello.home,
            "started_at": started,
            "uptime_secs": uptime,
            "settings": settings,
            "sessions": work.total,
            "active": work.active,
            "pending_approvals": approvals.len(),
            "clients": load.clients,
            "max_clients": load.max_clients,
            "rss_bytes": load.rss_bytes,
            "descriptors": load.descriptors,
            "max_descriptors": load.max_descriptors,
            "descriptors_kept_free": kept_free,
            "session_processes": load.session_processes,
            "max_session_processes": load.max_session_processes,
            "web_connections": load.web_connections,
            "max_web_connections": load.max_web_connections,
            "running": work.running,
            "run_elsewhere": work.run_elsewhere,
            "waiting_for_human": work.waiting_for_human,
            "idle": work.idle,
            "queued": work.queued,
            "done": work.done,
            "failed": work.failed,
            "interrupted": work.interrupted,
        });
        // Without a fleet the answer is what it always was: no `fleet` key at all.
        if let Some(fleet) = &load.fleet {
            object["fleet"] = json!(fleet);
        }
        out.object(&object);
    } else {
        let resources = resources_line(&load, kept_free);
        // An older daemon does not say when it started: the line ends at its state root.
        let since = match (started, uptime) {
            (Some(at), Some(up)) => format!(", up {} (since {at})", human_age(up)),
            _ => String::new(),
        };
        // Sessions one-shot runs beside the daemon run hold none of its slots: said apart.
        let elsewhere = match work.run_elsewhere {
            0 => String::new(),
            n => format!(" ({n} by other processes)"),
        };
        out.text(&format!(
            "{} (pid {}) serving {}{since}\n{} {}, {} active, {} {} pending\n\
             {} {} (at most {}), {resources}\n\
             {} running{elsewhere}, {} waiting for a human, {} idle, {} queued; {} done, {} \
             failed, {} interrupted\n{}\n",
            hello.server,
            hello.pid,
            hello.home,
            work.total,
            plural(work.total as usize, "session"),
            work.active,
            approvals.len(),
            plural(approvals.len(), "approval"),
            load.clients,
            plural(load.clients as usize, "client"),
            load.max_clients,
            work.running,
            work.waiting_for_human,
            work.idle,
            work.queued,
            work.done,
            work.failed,
            work.interrupted,
            settings_line(&settings),
        ));
        if let Some(fleet) = &load.fleet {
            out.text(&fleet_lines(fleet));
        }
    }
    Ok(())
}

/// The daemon's resources as `ctl status` words them: the dashboard's connections, its memory
/// and descriptors, and the processes in its sessions.
fn resources_line(load: &intendant_protocol::socket::Load, kept_free: u64) -> String {
    let memory = load.rss_bytes.map_or_else(
        || "memory unknown".to_owned(),
        |b| format!("{:.1} MiB resident", b as f64 / (1024.0 * 1024.0)),
    );
    let descriptors = match (load.descriptors, load.max_descriptors) {
        (Some(open), Some(max)) => format!(
            ", {open} {} open (at most {max}, {kept_free} kept free of new sessions)",
            plural(open as usize, "descriptor")
        ),
        (Some(open), None) => format!(", {open} {} open", plural(open as usize, "descriptor")),
        (None, _) => String::new(),
    };
    let processes = |now: u64| match now {
        1 => "1 process in sessions".to_owned(),
        _ => format!("{now} processes in sessions"),
    };
    let processes = match (load.session_processes, load.max_session_processes) {
        (Some(now), Some(max)) => format!(", {} (at most {max})", processes(now)),
        (Some(now), None) => format!(", {}", processes(now)),
        (None, _) => String::new(),
    };
    let web = match (load.web_connections, load.max_web_connections) {
        (Some(open), Some(max)) => format!(
            "{open} dashboard {} (at most {max}), ",
            plural(open as usize, "connection")
        ),
        _ => String::new(),
    };
    format!("{web}{memory}{descriptors}{processes}")
}

/// The settings in force as `ctl status` and `ctl reload` word them.
fn settings_line(settings: &Settings) -> String {
    format!(
        "default autonomy {} (at most {}), at most {} running",
        settings.default_autonomy.name(),
        settings.max_autonomy.name(),
        settings.max_running
    )
}

/// The fleet as `ctl status` words it: the server, then one line per member.
fn fleet_lines(fleet: &intendant_protocol::fleet::FleetView) -> String {
    let mut text = format!(
        "fleet at {}: {} member(s), this one {}\n",
        fleet.server,
        fleet.members.len(),
        fleet.member
    );
    if let Some(error) = &fleet.error {
        text.push_str(&format!("  members unknown: {error}\n"));
    }
    for m in &fleet.members {
        let labels = if m.labels.is_empty() {
            String::new()
        } else {
            format!(" [{}]", m.labels.join(", "))
        };
        text.push_str(&format!(
            "  {}{labels} on {} (pid {}): {} running of {}, {} idle, {} queued\n",
            m.name, m.host, m.pid, m.running, m.max_running, m.idle, m.queued
        ));
    }
    text
}

/// The fleet's sessions as `ctl sessions` words them: a heading per member, then its table.
fn fleet_session_table(fleet: &intendant_protocol::fleet::FleetSessions) -> String {
    let mut text = String::new();
    if let Some(error) = &fleet.error {
        text.push_str(&format!("other members' sessions unknown: {error}\n"));
    }
    for member in &fleet.members {
        let mut notes = Vec::new();
        if member.member == fleet.member {
            notes.push("this one".to_owned());
        }
        if member.lost {
            notes.push("lost: its unfinished sessions are listed interrupted".to_owned());
        }
        if member.omitted > 0 {
            notes.push(format!("{} older not listed", member.omitted));
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        };
        text.push_str(&format!("member {}{notes}:\n", member.member));
        text.push_str(&session_table(&member.sessions));
    }
    text
}

fn session_table(sessions: &[SessionSummary]) -> String {
    if sessions.is_empty() {
        return "no sessions\n".into();
    }
    let mut text = format!(
        "{:<28} {:<18} {:<8} {:>9} {:>6} {:>9} {:>8}  TASK\n",
        "ID", "STATUS", "AUTONOMY", "APPROVALS", "PROCS", "MEMORY", "CPU"
    );
    for (depth, s) in nested(sessions, |s| &s.id, |s| s.parent.as_deref()) {
        let task = one_line(&s.task, 50);
        let id = id_cell(&s.id, depth);
        let (procs, memory, cpu) = usage_cells(s.usage.as_ref());
        // Another process runs it (a one-shot run): named, for that is where it is answered.
        let status = match s.run_by {
            Some(pid) => format!("{} pid {pid}", s.status.name()),
            None => s.status.name().to_owned(),
        };
        text.push_str(&format!(
            "{id:<28} {status:<18} {:<8} {:>9} {procs:>6} {memory:>9} {cpu:>8}  {task}\n",
            s.autonomy.name(),
            s.pending_approvals
        ));
    }
    text
}

/// A live session's processes, memory and CPU time as `ctl sessions` shows them (`-` for what
/// its groups do not keep, or a session without them).
fn usage_cells(usage: Option<&SessionUsage>) -> (String, String, String) {
    let Some(usage) = usage else {
        return ("-".into(), "-".into(), "-".into());
    };
    let memory = usage.memory_bytes.map_or_else(
        || "-".into(),
        |b| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    );
    let cpu = usage
        .cpu_ms
        .map_or_else(|| "-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
    (usage.processes.to_string(), memory, cpu)
}

fn approval_table(approvals: &[PendingApproval]) -> String {
    if approvals.is_empty() {
        return "no approvals pending\n".into();
    }
    let mut text = format!("{:>8}  {:<28} COMMAND\n", "APPROVAL", "SESSION");
    for a in approvals {
        text.push_str(&format!(
            "{:>8}  {:<28} {}\n",
            a.id, a.session_id, a.command_preview
        ));
    }
    text
}

/// The text of a task, follow-up or answer given as `-`, read from stdin (at most
/// `MAX_TASK_BYTES`); not with `start --attach`, whose stdin carries the answers.
fn read_stdin_text(verb: &mut Verb) -> Result<(), HostError> {
    let (text, what) = match verb {
        Verb::Start(start) if start.attach && start.task == "-" => {
            return Err(HostError::new(
                HostErrorCode::InvalidRequest,
                "the task `-` reads stdin, which --attach keeps for answers and follow-ups: \
                 start it, then `intendant ctl attach ID`",
            ));
        }
        Verb::Start(start) => (&mut start.task, "the task"),
        Verb::Schedule(schedule) => (&mut schedule.start.task, "the task"),
        Verb::Send { text, .. } => (text, "the follow-up"),
        Verb::Answer { text, .. } => (text, "the answer"),
        _ => return Ok(()),
    };
    *text = crate::stdin_text::task_text(std::mem::take(text)).map_err(|e| {
        HostError::new(
            HostErrorCode::InvalidRequest,
            format!("{what} `-`: {e}: nothing was sent"),
        )
    })?;
    Ok(())
}

fn start_request(args: StartArgs) -> Result<StartRequest, HostError> {
    let absolute = |path: &Path, what: &str| -> Result<String, HostError> {
        std::path::absolute(path)
            .map(|p| p.display().to_string())
            .map_err(|e| {
                HostError::new(
                    HostErrorCode::InvalidRequest,
                    format!("{what} {}: {e}", path.display()),
                )
            })
    };
    let project = match (&args.project, &args.resume) {
        (Some(dir), _) => absolute(dir, "project")?,
        // A resume goes on in the project the session worked in.
        (None, Some(_)) => String::new(),
        (None, None) => absolute(Path::new("."), "current directory")?,
    };
    Ok(StartRequest {
        task: args.task,
        project,
        autonomy: args.autonomy,
        provider: args.provider,
        model: args.model,
        scenario: args
            .scenario
            .as_deref()
            .map(|f| absolute(f, "scenario"))
            .transpose()?,
        resume: args.resume,
        network: args.network,
        backend: crate::flags::agent_backend(args.agent.as_deref(), &args.agent_command)
            .map_err(|m| HostError::new(HostErrorCode::InvalidRequest, m))?,
        ..StartRequest::default()
    })
}

async fn intent(host: &RemoteHost, out: &Out, id: String, msg: ControlMsg) -> Result<(), Failure> {
    sent(host, out, id, msg).await.map(drop)
}

/// Sends `msg` to session `id` and says so; where it went.
async fn sent(host: &RemoteHost, out: &Out, id: String, msg: ControlMsg) -> Result<Sent, Failure> {
    let sent = host
        .send(SessionIntent {
            session_id: id,
            msg,
        })
        .await?;
    out.value(&json!({ "ok": true, "sent": sent }), "sent");
    Ok(sent)
}

/// [`intent`] for what sets a waiting session to work (a follow-up, an approval's answer): it
/// takes a slot again, or queues for one, and the terminal is told when it queued, or when a
/// follow-up waits for a round that works or waits for a human (the daemon says where it went).
async fn setting_to_work(
    host: &RemoteHost,
    out: &Out,
    id: String,
    msg: ControlMsg,
) -> Result<(), Failure> {
    let sent = sent(host, out, id.clone(), msg).await?;
    if out.json {
        return Ok(());
    }
    match sent {
        Sent::Queued => report_queued(&id),
        Sent::AfterAnswer => report_after_round(&id, "waits for a human to answer it"),
        Sent::AfterRound => report_after_round(&id, "is working"),
        Sent::AfterQueuedRound => {
            report_after_round(&id, "waits for a running slot for its round");
        }
        Sent::Now => {}
    }
    Ok(())
}

/// Why a follow-up shows no round yet: its session's round goes on (`why`).
#[allow(clippy::print_stderr)]
fn report_after_round(id: &str, why: &str) {
    eprintln!(
        "intendant ctl: session {id} {why}; the follow-up is its next round, once this one ends"
    );
}

async fn autonomy(
    host: &RemoteHost,
    out: &Out,
    level: Option<AutonomyLevel>,
    session: Option<String>,
) -> Result<(), Failure> {
    if let Some(level) = level {
        host.set_autonomy(session.as_deref(), level).await?;
    }
    let current = match &session {
        Some(id) => host.session(id).await?.autonomy,
        None => host.settings().await?.default_autonomy,
    };
    out.value(&json!({ "autonomy": current }), current.name());
    Ok(())
}

/// Follows session `id` until it ends (a resumed session: its last run), or stdin ends:
/// detach. Replayed and live events go onto a local bus that the terminal frontend renders;
/// what it emits goes to the daemon.
async fn attach(
    host: &RemoteHost,
    id: &str,
    after: Option<u64>,
    json: bool,
) -> Result<(), Failure> {
    let (finished, run_by) = attached_to(host, id, json).await?;
    let mut events = host.subscribe(Some(id), after).await?;
    // A finished session whose log lacks its end (a crashed writer) ends at its history.
    let history_end = finished.then(|| events.history_end());
    let bus = EventBus::new();
    let mut intents = bus.subscribe_intents();
    let (to_render, rendered) = tokio::sync::mpsc::unbounded_channel();
    let renderer = follower(&bus, json, rendered, run_by.is_none());
    // A session another process runs or ran is relayed from its log, and the daemon holds
    // only what its ring does of it (a long run's large events pass its 16 MiB); the runs a
    // one-shot process recorded before a resume through the daemon are in its log alone. So
    // an attach from the start whose history does not begin with the session's first start
    // shows its record whole instead, then what the stream brings past what the record held
    // (each relayed event says where its line ends, each of the daemon's its `seq`).
    let mut first = after == Some(0);
    let mut read_to = None;
    let mut last = after.unwrap_or(0);
    let mut any = false;
    let mut ended = None;
    // Watching a session another process runs, a terminal answers nothing: that process asks.
    let mut stdin_open = json || (run_by.is_none() && std::io::stdin().is_terminal());
    // The follow-ups this attach sent that its stream has not brought back yet: `--json`
    // prints the others' alone, as `intendant --json` echoes none of its own.
    let mut sent_here: Vec<String> = Vec::new();
    // Set while the last event is an end that may be the session's (see `EndSeen::Maybe`):
    // whether it is, is asked now and every second until another event comes.
    let mut maybe_ended = false;
    let mut recheck = tokio::time::interval(ENDED_RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if history_end.is_some_and(|end| last >= end) {
            break;
        }
        tokio::select! {
            item = events.next() => match item {
                Some(StreamItem::Event(envelope)) => {
                    if std::mem::take(&mut first) && !envelope.begins_session() {
                        read_to = record_first(host, id, &envelope, json, run_by, &to_render).await;
                    }
                    last = envelope.seq;
                    any = true;
                    match &envelope.event {
                        AppEvent::SessionEnded { status, .. } => ended = Some(*status),
                        // A resumed session's run: the end of the run before is not its end.
                        AppEvent::SessionStarted { .. } => ended = None,
                        _ => {}
                    }
                    if !read_to.is_some_and(|read| envelope.in_record(read)) {
                        pass_on(&envelope, json.then_some(&mut sent_here), &to_render);
                    }
                    match end_seen(&envelope, events.history_end(), finished) {
                        EndSeen::Yes => break,
                        EndSeen::Maybe => maybe_ended = true,
                        EndSeen::Run => maybe_ended = false,
                        EndSeen::No => {}
                    }
                }
                Some(StreamItem::Lagged { next_seq }) => {
                    events = resubscribe(host, id, next_seq).await?;
                }
                None => {
                    return Err(HostError::new(
                        HostErrorCode::Unavailable,
                        "the daemon closed the stream",
                    )
                    .into());
                }
            },
            _ = recheck.tick(), if maybe_ended => {
                if !matches!(host.session(id).await, Ok(s) if !s.status.is_finished()) {
                    break;
                }
            }
            msg = intents.recv(), if stdin_open => match msg {
                Some(msg) => send_from_here(host, id, msg, json.then_some(&mut sent_here)).await,
                // End of input: detach, the session goes on.
                None => {
                    stdin_open = false;
                    if renderer.is_some() {
                        break;
                    }
                }
            },
        }
    }
    if history_end.is_some() && !any {
        show_unpublished(host, id, json, &to_render).await;
    }
    drop(to_render);
    wind_up(renderer, ended, history_end.is_some()).await
}

/// Sends `msg`, read from this attach's input, to session `id`, saying why when it is refused;
/// a follow-up taken is remembered in `sent_here` when given (`--json`: not printed when it
/// comes back).
async fn send_from_here(
    host: &RemoteHost,
    id: &str,
    msg: ControlMsg,
    sent_here: Option<&mut Vec<String>>,
) {
    let own = match (&msg, sent_here) {
        (ControlMsg::FollowUp { text }, Some(sent_here)) => Some((text.clone(), sent_here)),
        _ => None,
    };
    let sent = host
        .send(SessionIntent {
            session_id: id.to_string(),
            msg,
        })
        .await;
    match (sent, own) {
        (Ok(_), Some((text, sent_here))) => sent_here.push(text),
        (Ok(_), None) => {}
        (Err(e), _) => report_intent_error(&e),
    }
}

/// Whether an attach's terminal is sent `event`: an intent (what a frontend sent) only when it
/// is a follow-up, which the conversation takes (the view leaves out those typed at it); an
/// answer shows as what it answered resolves.
fn for_the_terminal(event: &AppEvent) -> bool {
    match event {
        AppEvent::ControlCommand(msg) => matches!(msg, ControlMsg::FollowUp { .. }),
        _ => true,
    }
}

/// An attach's `envelope` printed (`--json`, given the follow-ups this attach sent and its
/// stream has not brought back: but an intent other than a follow-up sent elsewhere, as
/// `intendant --json` echoes none of its own) or sent to the renderer ([`for_the_terminal`]).
fn pass_on(
    envelope: &Envelope,
    json: Option<&mut Vec<String>>,
    to_render: &tokio::sync::mpsc::UnboundedSender<(AppEvent, Option<i64>)>,
) {
    match (&envelope.event, json) {
        (AppEvent::ControlCommand(ControlMsg::FollowUp { text }), Some(sent_here)) => {
            match sent_here.iter().position(|own| own == text) {
                Some(own) => drop(sent_here.remove(own)),
                None => Out { json: true }.object(envelope),
            }
        }
        (AppEvent::ControlCommand(_), Some(_)) => {}
        (_, Some(_)) => Out { json: true }.object(envelope),
        (event, None) if !for_the_terminal(event) => {}
        (event, None) => {
            // When it happened, as the daemon stamped it.
            let at = UtcTime::parse_rfc3339(&envelope.ts).map(epoch_millis);
            let _ = to_render.send((event.clone(), at));
        }
    }
}

/// An ended session none of whose events went through the daemon: its record is rendered
/// here; `--json` prints envelopes alone, so it is pointed at on stderr.
async fn show_unpublished(
    host: &RemoteHost,
    id: &str,
    json: bool,
    to_render: &tokio::sync::mpsc::UnboundedSender<(AppEvent, Option<i64>)>,
) {
    if json
        || render_record(host, id, to_render, Some(one_shot_note(id)))
            .await
            .is_none()
    {
        report_unpublished(id);
    }
}

/// What an attach from the start whose history begins with `head`, which does not begin the
/// session, does first: on a terminal or a pipe, shows the record (how far it read); with
/// `--json`, says where the record is when the history lacks the run's start.
async fn record_first(
    host: &RemoteHost,
    id: &str,
    head: &Envelope,
    json: bool,
    run_by: Option<u32>,
    to_render: &tokio::sync::mpsc::UnboundedSender<(AppEvent, Option<i64>)>,
) -> Option<RecordRead> {
    if !json {
        let note = run_by.is_none().then(|| record_note(id, head));
        return render_record(host, id, to_render, note).await;
    }
    if !matches!(head.event, AppEvent::SessionStarted { resumed: false, .. }) {
        report_end_only(id);
    }
    None
}

/// How often an attach asks whether an end that may be the session's is ([`EndSeen::Maybe`]).
const ENDED_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What an event says of the end of the session an attach follows.
enum EndSeen {
    /// Nothing of its end.
    No,
    /// A run's start: an end before it was an earlier run's.
    Run,
    /// The end of the run going on: one after the history, or the history's last of a session
    /// that had ended when the attach began.
    Yes,
    /// The history's last of a session that had not ended when the attach began: it ended
    /// since, or a resume of it has not started its run yet (queued for a slot). Only the
    /// session's status tells, and a fleet member's copy of another's may lag behind its
    /// events, so it is asked again until it says ended or another event comes.
    Maybe,
}

/// What `envelope` says of the end of a session whose stream replayed up to `history_end`
/// (`finished`: it had ended when the attach began). An end the history goes on past is an
/// earlier run's.
fn end_seen(envelope: &Envelope, history_end: u64, finished: bool) -> EndSeen {
    match envelope.event {
        AppEvent::SessionEnded { .. } => {}
        AppEvent::SessionStarted { .. } => return EndSeen::Run,
        _ => return EndSeen::No,
    }
    if envelope.seq > history_end || envelope.seq == history_end && finished {
        EndSeen::Yes
    } else if envelope.seq == history_end {
        EndSeen::Maybe
    } else {
        EndSeen::No
    }
}

/// What an attach needs of session `id` before it follows it: whether it has finished, and the
/// process that runs it when it is not the daemon; what holds it back is said on a terminal
/// (`agenda`, the pseudo-session of the agenda's events, never finishes).
async fn attached_to(
    host: &RemoteHost,
    id: &str,
    json: bool,
) -> Result<(bool, Option<u32>), Failure> {
    if id == intendant_protocol::agenda::AGENDA_SESSION {
        return Ok((false, None));
    }
    let summary = host.session(id).await?;
    if !json {
        if summary.status == SessionStatus::Queued {
            report_queued(id);
        }
        if let Some(pid) = summary.run_by {
            report_run_by(id, pid);
        }
    }
    Ok((summary.status.is_finished(), summary.run_by))
}

/// Why an attach to a session another process runs asks nothing of its human.
#[allow(clippy::print_stderr)]
fn report_run_by(id: &str, pid: u32) {
    eprintln!(
        "intendant ctl: session {id} is run by another process (pid {pid}), which asks its own \
         human: following it here, its approvals and questions are answered where it runs"
    );
}

/// What renders an attach: with `json`, nothing (stdin's lines go to `bus` as intents);
/// else the terminal frontend on `bus`, rendering `rendered`, asking its human (`answers`).
fn follower(
    bus: &EventBus,
    json: bool,
    rendered: tokio::sync::mpsc::UnboundedReceiver<(AppEvent, Option<i64>)>,
    answers: bool,
) -> Option<tokio::task::JoinHandle<()>> {
    if json {
        spawn_json_stdin(bus);
        return None;
    }
    Some(crate::terminal::start_timed(
        bus,
        Arc::new(AtomicBool::new(false)),
        rendered,
        answers,
    ))
}

/// Session `id`'s record itself sent to `to_render` (a session a one-shot run recorded, in
/// whole or in part: none of its events, or only those the daemon's ring still holds, or only
/// its runs since a resume, went through the daemon); how far it was read (the daemon relays
/// each record with where its line ends, see
/// [`intendant_protocol::daemon::Envelope::record_end`], and numbers its own). None when there
/// is no record to read here. `note`: said first, on stderr.
async fn render_record(
    host: &RemoteHost,
    id: &str,
    to_render: &tokio::sync::mpsc::UnboundedSender<(AppEvent, Option<i64>)>,
    note: Option<String>,
) -> Option<RecordRead> {
    let dir = host.log_dir(id).await.ok()?;
    // Read whole, a few MiB at a time (`sessions show` reads it whole too).
    let read = tokio::task::spawn_blocking(move || {
        let mut records = Vec::new();
        each_record(&dir, RECORD_READ_BYTES, |r| records.push(r)).map(|_| records)
    });
    let records = read.await.ok()?.ok()?;
    if records.is_empty() {
        return None;
    }
    if let Some(note) = note {
        report_from_record(&note);
    }
    let read = RecordRead {
        end: records.last().map_or(0, |logged| logged.end),
        seq: records.iter().filter_map(|logged| logged.record.seq).max(),
    };
    for Logged { record, .. } in records {
        if !for_the_terminal(&record.event) {
            continue;
        }
        let at = UtcTime::parse_rfc3339(&record.ts).map(epoch_millis);
        let _ = to_render.send((record.event, at));
    }
    Some(read)
}

/// Why an attach shows session `id`, which a one-shot run recorded, from its record.
fn one_shot_note(id: &str) -> String {
    format!("session {id} was recorded by a one-shot run, not the daemon: shown from its record")
}

/// Why an attach whose history begins with `head` shows session `id` from its record.
fn record_note(id: &str, head: &Envelope) -> String {
    if head.record_end.is_some() {
        one_shot_note(id)
    } else if matches!(head.event, AppEvent::SessionStarted { resumed: true, .. }) {
        format!(
            "session {id} was resumed through the daemon, its runs before recorded by a one-shot \
             run: shown from its record"
        )
    } else {
        format!("the daemon no longer holds the start of session {id}: shown from its record")
    }
}

/// Where an attach to such a session reads from.
#[allow(clippy::print_stderr)]
fn report_from_record(note: &str) {
    eprintln!("intendant ctl: {note}");
}

/// Why `--json attach` to session `id` begins where it does: the daemon's ring no longer
/// holds the start of a run another process recorded, which its record does.
#[allow(clippy::print_stderr)]
fn report_end_only(id: &str) {
    eprintln!(
        "intendant ctl: the daemon holds only the end of session {id}: `intendant sessions show \
         {id}` prints its record whole"
    );
}

/// Why an attach to an ended session shows nothing: none of its events went through the
/// daemon, and its record could not be read here (or `--json` was asked, which prints the
/// daemon's envelopes alone).
#[allow(clippy::print_stderr)]
fn report_unpublished(id: &str) {
    eprintln!(
        "intendant ctl: nothing of session {id} was published through the daemon (a one-shot run \
         recorded it): `intendant sessions show {id}` prints its record"
    );
}

/// The end of an attach: what was sent to `renderer` is rendered whole when the session
/// `ended`, or its history did (`history_ended`: it ended without its end logged); a detach
/// leaves at once. A session that ended `failed` is the attach's failure.
async fn wind_up(
    renderer: Option<tokio::task::JoinHandle<()>>,
    ended: Option<EndStatus>,
    history_ended: bool,
) -> Result<(), Failure> {
    if let Some(renderer) = renderer {
        if ended.is_some() || history_ended {
            let _ = renderer.await;
        } else {
            renderer.abort();
        }
    }
    match ended {
        Some(EndStatus::Failed) => Err(Failure::Session(EndStatus::Failed)),
        Some(_) | None => Ok(()),
    }
}

async fn resubscribe(host: &RemoteHost, id: &str, next_seq: u64) -> Result<EventStream, Failure> {
    Ok(host
        .subscribe(Some(id), Some(next_seq.saturating_sub(1)))
        .await?)
}

/// Why a session just started, sent a follow-up or attached to shows nothing yet: it waits for
/// a running slot.
#[allow(clippy::print_stderr)]
fn report_queued(id: &str) {
    eprintln!(
        "intendant ctl: session {id} is queued: as many sessions as `[daemon] max_running` allows \
         are working; it starts when one of them ends its round, waits for an approval or ends \
         (`intendant ctl status` shows the load)"
    );
}

#[allow(clippy::print_stderr)]
fn report_intent_error(e: &HostError) {
    eprintln!("intendant ctl: {}", e.message);
}

/// `--json` attach: stdin lines are intents (a `ControlMsg` object, else follow-up text), as
/// for `intendant --json`.
fn spawn_json_stdin(bus: &EventBus) {
    let reader_bus = bus.clone();
    // A plain thread: a blocked read must not keep the process alive.
    let spawned = std::thread::Builder::new()
        .name("ctl-stdin".to_owned())
        .spawn(move || {
            use crate::stdin_text::{Line, read_line};
            let mut stdin = std::io::stdin().lock();
            let mut line = Vec::new();
            let most = intendant_protocol::socket::MAX_REQUEST_LINE;
            loop {
                let notice = match read_line(&mut stdin, &mut line, most) {
                    Ok(Line::Eof) | Err(_) => break,
                    Ok(Line::TooLong) => Some(crate::json::too_long_line()),
                    Ok(Line::Complete) => {
                        match crate::json::parse_line(&String::from_utf8_lossy(&line)) {
                            Some((msg, notice)) => {
                                reader_bus.send_intent(msg);
                                notice
                            }
                            None => None,
                        }
                    }
                };
                if let Some(notice) = notice {
                    report_intent_error(&HostError::new(HostErrorCode::InvalidRequest, notice));
                }
            }
            reader_bus.close_intents();
        });
    if spawned.is_err() {
        bus.close_intents();
    }
}

#[cfg(test)]
mod tests {
    use intendant_protocol::autonomy::AutonomyLevel;
    use intendant_protocol::daemon::{Backend, SessionStatus, SessionSummary, SessionUsage};

    use super::session_table;

    fn session(id: &str, parent: Option<&str>) -> SessionSummary {
        SessionSummary {
            id: id.into(),
            parent: parent.map(str::to_owned),
            project: "/p".into(),
            task: format!("task {id}"),
            backend: Backend::Native,
            provider: "mock".into(),
            model: "m".into(),
            status: SessionStatus::Running,
            reason: None,
            autonomy: AutonomyLevel::Medium,
            created: String::new(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            skills: Vec::new(),
            final_text: None,
            result: None,
            worktree: None,
            usage: None,
            run_by: None,
            network: None,
        }
    }

    #[test]
    fn sub_agents_are_listed_under_their_parents() {
        let sessions = [
            session("a", None),
            session("b", None),
            session("a1", Some("a")),
            session("b1", Some("b")),
            session("a1x", Some("a1")),
            session("a2", Some("a")),
            session("orphan", Some("gone")),
        ];
        let table = session_table(&sessions);
        assert!(table.contains("\n└ a1 "), "{table}");
        assert!(table.contains("\n  └ a1x "), "{table}");
    }

    #[test]
    fn a_live_sessions_usage_is_shown_and_what_its_groups_do_not_keep_is_a_dash() {
        let mut busy = session("busy", None);
        busy.usage = Some(SessionUsage {
            processes: 12,
            memory_bytes: None,
            cpu_ms: Some(3250),
        });
        let table = session_table(&[busy, session("ended", None)]);
        let row = |id: &str| {
            table
                .lines()
                .find(|line| line.starts_with(id))
                .unwrap()
                .split_whitespace()
                .skip(4)
                .take(4)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(row("busy"), "12 - 3.2 s", "{table}");
        assert_eq!(row("ended"), "- - - task", "{table}");
        assert!(table.starts_with("ID "), "{table}");
        assert!(
            table
                .lines()
                .next()
                .unwrap()
                .contains("PROCS    MEMORY      CPU  TASK"),
            "{table}"
        );
    }

    /// An end is the session's when it comes after the history, or ends the history of a
    /// session that had ended; the history's last of one that had not may be (asked again);
    /// one the history goes on past is an earlier run's, and a start says a run goes on.
    #[test]
    fn which_end_ends_an_attach() {
        use super::{EndSeen, end_seen};
        use intendant_protocol::daemon::Envelope;
        use intendant_protocol::events::{AppEvent, EndStatus};
        let at = |seq, event| Envelope {
            seq,
            session_id: "s".into(),
            ts: "2026-12-07T00:00:00.000Z".into(),
            event,
            member: None,
            record_end: None,
        };
        let end = |seq| {
            at(
                seq,
                AppEvent::SessionEnded {
                    session_id: "s".into(),
                    status: EndStatus::Interrupted,
                    reason: "stopped".into(),
                },
            )
        };
        let seen = |envelope: &Envelope, finished| match end_seen(envelope, 10, finished) {
            EndSeen::No => "no",
            EndSeen::Run => "run",
            EndSeen::Yes => "yes",
            EndSeen::Maybe => "maybe",
        };
        assert_eq!(seen(&end(11), false), "yes", "live");
        assert_eq!(seen(&end(10), true), "yes", "the history's last, ended");
        assert_eq!(
            seen(&end(10), false),
            "maybe",
            "ended since, or a resume queued"
        );
        assert_eq!(seen(&end(9), true), "no", "an earlier run's");
        assert_eq!(seen(&end(9), false), "no", "an earlier run's");
        let started = at(
            12,
            AppEvent::SessionStarted {
                session_id: "s".into(),
                task: "t".into(),
                model: "m".into(),
                provider: "p".into(),
                project_root: "/p".into(),
                resumed: true,
            },
        );
        assert_eq!(seen(&started, false), "run");
        assert_eq!(
            seen(&at(12, AppEvent::TurnStarted { turn: 1 }), false),
            "no"
        );
    }
}

//! `intendant sessions [--json]` lists recorded sessions, newest first;
//! `intendant sessions show ID [--json]` prints one session's transcript;
//! `intendant sessions prune --older-than AGE [--dry-run] [--json]` removes the records of
//! sessions that ended longer ago (through the daemon when one serves the state root).

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use intendant_core::host::SessionHost as _;
use intendant_core::session_log::prune as session_prune;
use intendant_core::session_log::{
    EventRecord, SessionMeta, age_seconds, human_age, intendant_home, logs_dir,
    read_events_leniently, read_listing, read_meta, resolve_session_id,
};
use intendant_protocol::daemon::{
    DAEMON_SESSION, HostError, HostErrorCode, PruneReport, PruneRequest, StreamItem,
};
use intendant_protocol::text::clip;
use intendant_protocol::utc::UtcTime;
use intendant_server::socket::{DaemonLock, RemoteHost, StateRootError};
use serde_json::{Value, json};

use crate::terminal::lineage::{id_cell, nested};
use crate::terminal::narrator::{Limits, Narrator, epoch_millis};
use crate::terminal::render::ToolView;
use crate::terminal::style::{Palette, display, terminal_width};
use crate::terminal::units::{compact_count, human_bytes, one_line};
use intendant_core::preview::escape_invisible;
use intendant_protocol::events::{AppEvent, EgressVerdict, RecordedStatus};

/// Arguments of `intendant sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: Option<SessionsCommand>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum SessionsCommand {
    /// Print the transcript of one session.
    Show {
        /// Session id (or a unique prefix of one).
        id: String,
    },
    /// Remove the records (log directory and artifacts) of sessions that ended and were last
    /// written longer ago than --older-than; a session still running, one whose sub-agent
    /// stays, and one whose worktree is still there are kept. Through the daemon when one
    /// serves this state root.
    Prune {
        /// How long ago: N with a unit s, m, h, d or w (30d, 2w, 1d12h).
        #[arg(long, value_name = "AGE", value_parser = intendant_daemon::when::parse_span)]
        older_than: u64,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Characters of one tool output shown in a transcript before it is cut.
const OUTPUT_PREVIEW_CHARS: usize = 2000;
/// Lines of a log that do not read `sessions show` names (`--json` names them all).
const SKIPPED_SHOWN: usize = 5;
/// Characters of why such a line does not read shown.
const SKIPPED_MESSAGE_CHARS: usize = 200;
/// Last lines of a command's output shown in a transcript.
const TAIL_LINES: usize = 20;
/// Lines of an edit's diff shown in a transcript.
const DIFF_LINES: usize = 200;
/// Characters of a task shown in the listing.
const TASK_COLUMN_CHARS: usize = 40;

/// Runs `intendant sessions`.
pub fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    let text = match &args.command {
        None => list(&home, args.json)?,
        Some(SessionsCommand::Show { id }) => show(&home, id, args.json)?,
        Some(SessionsCommand::Prune {
            older_than,
            dry_run,
        }) => {
            let request = PruneRequest {
                older_than_secs: *older_than,
                dry_run: *dry_run,
            };
            prune_report(&prune(&home, request)?, args.json)?
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

fn summary_json(meta: &SessionMeta) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(meta)?;
    if let Value::Object(map) = &mut v {
        map.insert("status".into(), meta.effective_status().name().into());
        map.insert("recorded_status".into(), meta.status.name().into());
        map.insert("total_tokens".into(), meta.total_tokens().into());
        map.insert("age_seconds".into(), age_seconds(&meta.created).into());
    }
    Ok(v)
}

/// Why the session ended, as `sessions show` says: as recorded, or, for one whose writer left it
/// recorded `running`, how it was left ([`SessionMeta::left_behind`]).
fn shown_reason(meta: &SessionMeta, dir: &Path) -> Option<String> {
    if meta.status == RecordedStatus::Running && !meta.writer_alive() {
        Some(meta.left_behind(dir))
    } else {
        meta.reason.clone()
    }
}

fn list(home: &Path, as_json: bool) -> anyhow::Result<String> {
    let listing = read_listing(home)?;
    report_unreadable(&listing.unreadable_lines());
    let sessions = listing.sessions;
    if as_json {
        let rows = sessions
            .iter()
            .map(summary_json)
            .collect::<anyhow::Result<Vec<_>>>()?;
        return Ok(format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    if sessions.is_empty() {
        return Ok(format!("no sessions yet in {}\n", logs_dir(home).display()));
    }
    let mut out = format!(
        "{:<28}  {:>4}  {:<16}  {:<width$}  {:>8}  {:>8}\n",
        "ID",
        "AGE",
        "STATUS",
        "TASK",
        "TOKENS",
        "COST",
        width = TASK_COLUMN_CHARS
    );
    // Each sub-agent right under its parent, as `ctl sessions` lists them.
    for (depth, m) in nested(&sessions, |m| &m.id, |m| m.parent.as_deref()) {
        let age = age_seconds(&m.created).map_or_else(|| "?".to_owned(), human_age);
        let _ = writeln!(
            out,
            "{:<28}  {:>4}  {:<16}  {:<width$}  {:>8}  {:>8}",
            id_cell(&m.id, depth),
            age,
            m.effective_status(),
            one_line(&m.task, TASK_COLUMN_CHARS),
            compact_count(m.total_tokens()),
            format!("${:.4}", m.cost_usd),
            width = TASK_COLUMN_CHARS
        );
    }
    Ok(out)
}

/// What the listing left out and why, on stderr (the listing itself stays what it was).
#[allow(clippy::print_stderr)]
fn report_unreadable(lines: &[String]) {
    for line in lines {
        eprintln!("intendant sessions: {line}");
    }
}

/// Prunes `home`: by itself while it holds the state root's daemon lock (no daemon can start
/// meanwhile), else through the daemon that holds it, which keeps what it runs and drops what
/// goes from its listing.
fn prune(home: &Path, request: PruneRequest) -> anyhow::Result<PruneReport> {
    if !logs_dir(home).is_dir() {
        return Ok(PruneReport {
            dry_run: request.dry_run,
            ..PruneReport::default()
        });
    }
    match DaemonLock::acquire(home) {
        Ok(_lock) => {
            let keep = |meta: &SessionMeta| intendant_daemon::worktree::still_there(home, meta);
            let plan = session_prune::plan(home, &request, &keep)?;
            if request.dry_run {
                return Ok(plan);
            }
            let mut progress = PruneProgress::new();
            let report =
                session_prune::carry_out(home, plan, &request, &mut |_| progress.removed(1));
            progress.done();
            Ok(report)
        }
        Err(StateRootError::Held { pid, .. }) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let client = concat!("intendant-sessions ", env!("CARGO_PKG_VERSION"));
            let asked = rt.block_on(async {
                let host = RemoteHost::connect(home, client).await?;
                prune_through(&host, request).await
            });
            match asked {
                Ok(report) => Ok(report),
                // Held by no daemon: another prune, or a daemon on its way up or down.
                Err(e) if e.code == HostErrorCode::Unavailable => {
                    let holder = pid.map_or_else(String::new, |pid| format!(" (pid {pid})"));
                    anyhow::bail!(
                        "another process{holder} holds {} and no daemon answers there ({}): \
                         try again once it is done",
                        home.join(intendant_server::socket::LOCK_FILE).display(),
                        e.message
                    )
                }
                Err(e) => anyhow::bail!("the daemon serving {}: {}", home.display(), e.message),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// `request` carried out by the daemon `host`, saying how far it is while it goes from the
/// `sessions_pruned` events it publishes as it removes them (a dry run is only a plan).
async fn prune_through(host: &RemoteHost, request: PruneRequest) -> Result<PruneReport, HostError> {
    if request.dry_run {
        return host.prune(request).await;
    }
    let mut progress = PruneProgress::new();
    let mut told = if progress.shown() {
        Some(host.subscribe(Some(DAEMON_SESSION), None).await?)
    } else {
        None
    };
    let asked = host.prune(request);
    tokio::pin!(asked);
    let report = loop {
        let Some(events) = told.as_mut() else {
            break asked.await;
        };
        tokio::select! {
            report = &mut asked => break report,
            item = events.next() => match item {
                Some(StreamItem::Event(env)) => {
                    if let AppEvent::SessionsPruned { ids } = &env.event {
                        progress.removed(ids.len());
                    }
                }
                // Only how far it is was lost: the prune goes on.
                Some(StreamItem::Lagged { .. }) | None => told = None,
            },
        }
    };
    progress.done();
    report
}

/// How far a prune is, on stderr while it goes when stderr is a terminal (a prune of thousands
/// takes as long as the disk does, 46 s for 20,000): one line, written again at most once a
/// second, and wiped once it is done.
struct PruneProgress {
    /// Stderr is a terminal.
    shown: bool,
    removed: usize,
    /// When the line was last written.
    written: Option<std::time::Instant>,
}

impl PruneProgress {
    fn new() -> PruneProgress {
        PruneProgress {
            shown: std::io::stderr().is_terminal(),
            removed: 0,
            written: None,
        }
    }

    fn shown(&self) -> bool {
        self.shown
    }

    #[allow(clippy::print_stderr)]
    fn removed(&mut self, more: usize) {
        self.removed += more;
        if !self.shown
            || self
                .written
                .is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(1))
        {
            return;
        }
        eprint!("\rremoved {} session(s) so far...", self.removed);
        self.written = Some(std::time::Instant::now());
    }

    #[allow(clippy::print_stderr)]
    fn done(self) {
        if self.written.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

/// What a prune did, as text or JSON.
fn prune_report(report: &PruneReport, as_json: bool) -> anyhow::Result<String> {
    if as_json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(report)?));
    }
    let mut out = String::new();
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if report.removed.is_empty() {
        let _ = writeln!(out, "no session old enough to remove");
    } else {
        let _ = writeln!(
            out,
            "{verb} {} session(s), {}:",
            report.removed.len(),
            human_bytes(report.bytes)
        );
        for s in &report.removed {
            let age = age_seconds(&s.updated).map_or_else(|| "?".to_owned(), human_age);
            let _ = writeln!(
                out,
                "  {:<24}  last written {age} ago  {}",
                s.id,
                human_bytes(s.bytes)
            );
        }
    }
    if report.schedules > 0 {
        let _ = writeln!(
            out,
            "{verb} {} ended scheduled session(s) from the agenda",
            report.schedules
        );
    }
    if let Some(why) = &report.schedules_error {
        let _ = writeln!(out, "the agenda's ended schedules were left: {why}");
    }
    if !report.kept.is_empty() {
        let _ = writeln!(out, "kept {} old session(s):", report.kept.len());
        for k in &report.kept {
            let _ = writeln!(out, "  {:<24}  {}", k.id, k.why);
        }
    }
    Ok(out)
}

fn show(home: &Path, id: &str, as_json: bool) -> anyhow::Result<String> {
    let dir = resolve_session_id(home, id)?;
    let meta = read_meta(&dir)?;
    let events = read_events_leniently(&dir)?;
    let reason = shown_reason(&meta, &dir);
    if as_json {
        let mut summary = summary_json(&meta)?;
        if let (Value::Object(map), Some(reason)) = (&mut summary, &reason) {
            map.insert("reason".into(), reason.as_str().into());
        }
        let v = json!({
            "meta": summary,
            "dir": dir.display().to_string(),
            "events": events.records,
            "torn_tail": events.torn_tail,
            "skipped_lines": events.skipped,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut out = String::new();
    let _ = writeln!(out, "session  {}", meta.id);
    let _ = writeln!(out, "task     {}", meta.task);
    let _ = writeln!(out, "status   {}", meta.effective_status());
    if let Some(reason) = &reason {
        let _ = writeln!(out, "reason   {reason}");
    }
    let _ = writeln!(out, "model    {} ({})", meta.model, meta.provider);
    let _ = writeln!(out, "project  {}", meta.project_root.display());
    if let Some(parent) = &meta.parent {
        let role = meta
            .role
            .as_deref()
            .map(|role| format!(", role {role}"))
            .unwrap_or_default();
        let depth = meta.sub_agent_depth();
        let _ = writeln!(
            out,
            "parent   {parent} (a sub-agent at depth {depth}{role})"
        );
    }
    if let Some(w) = &meta.worktree {
        let outcome = w.outcome.as_deref().unwrap_or("not ended yet");
        let _ = writeln!(out, "worktree {}, branch {} ({outcome})", w.path, w.branch);
    }
    let _ = writeln!(out, "created  {}", meta.created);
    let _ = writeln!(
        out,
        "usage    {} turns, {} tokens in ({} cached), {} out, ${:.4}",
        meta.turns,
        meta.usage.input_tokens,
        meta.usage.cached_input_tokens,
        meta.usage.output_tokens,
        meta.cost_usd
    );
    let _ = writeln!(out, "log      {}", dir.display());
    // What the session was given and recorded (its task, a reason, a worktree's path) is
    // shown as the transcript is: escaped, so none of it acts on the terminal.
    let mut out = escape_invisible(&out);
    for (i, line) in hosts_reached(&events.records).iter().enumerate() {
        let label = if i == 0 { "network" } else { "" };
        let _ = writeln!(out, "{label:<8} {line}");
    }
    let mut transcript = Transcript::new(ToolView {
        palette: Palette::for_stream(std::io::stdout().is_terminal()),
        width: terminal_width(),
        verbose: display().verbose,
        tail_lines: TAIL_LINES,
        diff_lines: DIFF_LINES,
    });
    for record in &events.records {
        transcript.record(&mut out, record);
    }
    for skipped in events.skipped.iter().take(SKIPPED_SHOWN) {
        let _ = writeln!(
            out,
            "\n(line {} of the log, {} bytes, does not read and was passed over: {})",
            skipped.line,
            skipped.bytes,
            escape_invisible(&clip(&skipped.message, SKIPPED_MESSAGE_CHARS))
        );
    }
    if events.skipped.len() > SKIPPED_SHOWN {
        let _ = writeln!(
            out,
            "(and {} more lines that do not read: `--json` names them all)",
            events.skipped.len() - SKIPPED_SHOWN
        );
    }
    if let Some(torn) = &events.torn_tail {
        let _ = writeln!(
            out,
            "\n(the log ends in a torn line {} of {} bytes, skipped: the writer stopped mid-write)",
            torn.line, torn.bytes
        );
    }
    Ok(out)
}

/// Renders records in order, each event as the live terminal words it (see
/// [`Narrator`]), after the time it was recorded.
struct Transcript {
    narrator: Narrator,
}

impl Transcript {
    fn new(tools: ToolView) -> Transcript {
        Transcript {
            narrator: Narrator::new(
                tools,
                Limits {
                    reasoning_lines: None,
                    text_chars: Some(OUTPUT_PREVIEW_CHARS),
                },
            ),
        }
    }

    /// One record of the transcript: an event this build knows is rendered from its type; any
    /// other (a newer or older build's event) is shown raw under its name.
    fn record(&mut self, out: &mut String, record: &EventRecord) {
        let time = record.ts.get(11..19).unwrap_or(&record.ts);
        let at = UtcTime::parse_rfc3339(&record.ts).map(epoch_millis);
        let lines = match record.typed() {
            Ok(typed) => self.narrator.lines(&typed.event, at),
            Err(_) => vec![format!(
                "[{}] {}",
                record.event,
                Value::Object(record.data.clone())
            )],
        };
        for text in lines {
            let _ = writeln!(out, "{time}  {text}");
        }
    }
}

/// One line per host and verdict the session's egress proxy recorded, in the order first seen:
/// connections, bytes each way, and the last rule.
fn hosts_reached(records: &[EventRecord]) -> Vec<String> {
    struct Host {
        key: (String, u16, EgressVerdict),
        count: u64,
        up: u64,
        down: u64,
        rule: String,
    }
    let mut hosts: Vec<Host> = Vec::new();
    for record in records {
        let Ok(typed) = record.typed() else { continue };
        let AppEvent::Egress {
            host,
            port,
            verdict,
            rule,
            bytes_up,
            bytes_down,
            ..
        } = typed.event
        else {
            continue;
        };
        let key = (host, port, verdict);
        match hosts.iter_mut().find(|h| h.key == key) {
            Some(h) => {
                h.count += 1;
                h.up += bytes_up;
                h.down += bytes_down;
                h.rule = rule;
            }
            None => hosts.push(Host {
                key,
                count: 1,
                up: bytes_up,
                down: bytes_down,
                rule,
            }),
        }
    }
    hosts
        .into_iter()
        .map(|h| {
            let (host, port, verdict) = h.key;
            format!(
                "{}:{port} {verdict} ×{}, {} up, {} down ({})",
                escape_invisible(&host),
                h.count,
                human_bytes(h.up),
                human_bytes(h.down),
                escape_invisible(&h.rule)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_transcript() -> Transcript {
        Transcript::new(ToolView {
            palette: Palette::new(false),
            width: 100,
            verbose: false,
            tail_lines: TAIL_LINES,
            diff_lines: DIFF_LINES,
        })
    }

    fn record(event: &str, data: Value) -> EventRecord {
        let Value::Object(data) = data else {
            panic!("not an object")
        };
        EventRecord {
            ts: "2026-11-30T10:15:30.123Z".into(),
            seq: None,
            event: event.into(),
            data,
        }
    }

    #[test]
    fn the_hosts_a_session_reached_are_summed_per_host_and_verdict() {
        let egress = |host: &str, verdict: &str, up: u64, rule: &str| {
            record(
                "egress",
                json!({"host": host, "port": 443, "verdict": verdict, "rule": rule,
                       "bytes_up": up, "bytes_down": 2048, "duration_ms": 5}),
            )
        };
        let records = [
            egress("crates.io", "allowed", 100, "default"),
            record("turn_started", json!({"turn": 1})),
            egress("evil.example", "refused", 0, "denied by the user"),
            egress("crates.io", "allowed", 100, "default"),
        ];
        assert_eq!(
            hosts_reached(&records),
            [
                format!(
                    "crates.io:443 allowed ×2, {} up, {} down (default)",
                    human_bytes(200),
                    human_bytes(4096)
                ),
                format!(
                    "evil.example:443 refused ×1, {} up, {} down (denied by the user)",
                    human_bytes(0),
                    human_bytes(2048)
                ),
            ]
        );
        assert!(hosts_reached(&records[1..2]).is_empty());
    }

    #[test]
    fn transcript_lines() {
        let cases = [
            (
                record(
                    "session_started",
                    json!({"session_id": "s", "task": "t", "model": "m", "provider": "p",
                           "project_root": "/r", "resumed": true}),
                ),
                "10:15:30  resumed session s: t\n",
            ),
            (
                record(
                    "approval_required",
                    json!({"id": 3, "session_id": "s", "category": "network",
                           "command_preview": "$ curl x"}),
                ),
                "10:15:30  ? approval #3 [network]: $ curl x\n",
            ),
            (
                record("approval_resolved", json!({"id": 3, "verdict": "skip"})),
                "10:15:30    → skip\n",
            ),
            // Before any run began (each case is read alone): taken after the first round.
            (
                record(
                    "control_command",
                    json!({"action": "follow_up", "text": "more"}),
                ),
                "10:15:30  user (taken when this round ends): more\n",
            ),
            (
                record("control_command", json!({"action": "approve", "id": 3})),
                "",
            ),
            (record("tool_batch", json!({"turn": 1, "input": {}})), ""),
            (
                record("future_event", json!({"x": 1})),
                "10:15:30  [future_event] {\"x\":1}\n",
            ),
            // A known event recorded with other fields (another build's) is shown raw too.
            (
                record("turn_started", json!({"round": 2})),
                "10:15:30  [turn_started] {\"round\":2}\n",
            ),
            (
                record(
                    "round_complete",
                    json!({"round": 2, "turns": 5, "reason": "turn_cap", "input_tokens": 1,
                           "output_tokens": 1, "cost_usd": 0.0}),
                ),
                "10:15:30  ── round 2 turn_cap: 5 turns · tokens in 0 (cached 0), out 0 · $0.0000\n",
            ),
        ];
        for (rec, want) in cases {
            let mut out = String::new();
            plain_transcript().record(&mut out, &rec);
            assert_eq!(out, want, "{}", rec.event);
        }
    }

    #[test]
    fn long_outputs_are_cut_with_a_count() {
        let mut out = String::new();
        let long = "x".repeat(OUTPUT_PREVIEW_CHARS + 10);
        plain_transcript().record(
            &mut out,
            &record(
                "agent_output",
                json!({"call_id": "c1", "name": "exec_command", "output": long}),
            ),
        );
        assert!(out.ends_with("… (10 more characters)\n"), "{out}");
    }

    #[test]
    fn the_listing_puts_each_sub_agent_under_its_parent() {
        use intendant_core::session_log::SessionLog;
        let home = tempfile::tempdir().unwrap();
        let record = |task: &str, parent: Option<&str>| {
            let mut meta = SessionMeta::new(home.path(), task, "m", "mock");
            meta.parent = parent.map(str::to_owned);
            SessionLog::create(home.path(), meta)
                .unwrap()
                .id()
                .to_owned()
        };
        let top = record("the parent", None);
        let child = record("its child", Some(&top));
        record("another top", None);
        let out = list(home.path(), false).unwrap();
        let rows: Vec<&str> = out.lines().skip(1).collect();
        let at = |id: &str| rows.iter().position(|r| r.contains(id)).unwrap();
        assert_eq!(at(&child), at(&top) + 1, "{out}");
        assert!(rows[at(&child)].starts_with(&format!("└ {child}")), "{out}");
    }

    #[test]
    fn a_sub_agent_is_shown_with_its_parent_role_and_worktree() {
        use intendant_core::session_log::SessionLog;
        let home = tempfile::tempdir().unwrap();
        let mut meta = SessionMeta::new(home.path(), "review it", "m", "mock");
        meta.parent = Some("20261207T000000Z-parent".into());
        meta.role = Some("review".into());
        meta.depth = 2;
        meta.worktree = Some(intendant_protocol::daemon::WorktreeInfo {
            path: "/state/worktrees/p-0".into(),
            branch: "intendant/p-0/work".into(),
            outcome: Some("kept: uncommitted changes in /state/worktrees/p-0".into()),
        });
        let id = SessionLog::create(home.path(), meta)
            .unwrap()
            .id()
            .to_owned();
        let shown = show(home.path(), &id, false).unwrap();
        assert!(
            shown.contains(
                "\nparent   20261207T000000Z-parent (a sub-agent at depth 2, role review)\n"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("\nworktree /state/worktrees/p-0, branch intendant/p-0/work (kept: uncommitted changes in /state/worktrees/p-0)\n"),
            "{shown}"
        );
    }

    #[test]
    fn a_prune_says_the_agendas_schedules_it_took_or_why_it_left_them() {
        let report = PruneReport {
            dry_run: true,
            schedules: 3,
            ..PruneReport::default()
        };
        let text = prune_report(&report, false).unwrap();
        assert!(
            text.contains("no session old enough to remove")
                && text.contains("would remove 3 ended scheduled session(s) from the agenda"),
            "{text}"
        );
        let failed = PruneReport {
            schedules_error: Some("database disk image is malformed".into()),
            ..PruneReport::default()
        };
        let text = prune_report(&failed, false).unwrap();
        assert!(
            text.contains("the agenda's ended schedules were left: database disk image"),
            "{text}"
        );
        assert!(!text.contains("scheduled session(s) from"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&prune_report(&report, true).unwrap()).unwrap();
        assert_eq!(json["schedules"], 3);
    }
}

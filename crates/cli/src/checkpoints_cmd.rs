//! `intendant checkpoints ID` lists a session's checkpointed turns with the files each changed,
//! and `intendant checkpoints gc` collects the stores' garbage;
//! `intendant diff ID --turn N` (or `--from N --to M`) prints what they changed;
//! `intendant rewind ID --to N [--code|--conversation|--both] [--force] [--preview]` and
//! `intendant rewind ID --undo` put the project (and the conversation a resume continues) back,
//! through core's one entry point (`intendant_core::rewind`), as the daemon does for `ctl`.

use std::io::Write as _;

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use intendant_core::checkpoint::SessionCheckpoints;
use intendant_core::rewind::{
    collect_checkpoint_garbage, describe, project_checkpoint_config, rewind_recorded,
};
use intendant_core::session_log::{
    OfflineRecord, SessionMeta, intendant_home, read_meta, resolve_session_id,
};
use serde_json::json;

use crate::wiring::RewindFlags;

/// Arguments of `intendant checkpoints`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CheckpointsArgs {
    #[command(subcommand)]
    action: Option<CheckpointsAction>,
    /// Session id (or a unique prefix of one).
    #[arg(required = true)]
    id: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What `intendant checkpoints` does besides listing a session's.
#[derive(Debug, clap::Subcommand)]
enum CheckpointsAction {
    /// Remove the checkpoints of sessions past `[checkpoints] retention_days`, then every stored
    /// object no kept checkpoint names, in every project's store.
    Gc {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `intendant diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Session id (or a unique prefix of one).
    id: String,
    /// The turn whose changes to show (with neither this nor --from/--to: the whole session).
    #[arg(long, conflicts_with_all = ["from", "to_turn"])]
    turn: Option<u32>,
    /// From before this turn...
    #[arg(long, value_name = "N", requires = "to_turn")]
    from: Option<u32>,
    /// ...to after this one.
    #[arg(long = "to", value_name = "M", requires = "from")]
    to_turn: Option<u32>,
}

/// Arguments of `intendant rewind`.
#[derive(Debug, clap::Args)]
pub struct RewindArgs {
    /// Session id (or a unique prefix of one).
    id: String,
    #[command(flatten)]
    flags: RewindFlags,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One recorded session and its checkpoints.
struct Opened {
    meta: SessionMeta,
    checkpoints: SessionCheckpoints,
}

async fn open(id: &str) -> anyhow::Result<Opened> {
    let home = intendant_home()?;
    let dir = resolve_session_id(&home, id)?;
    let meta = read_meta(&dir)?;
    let config = project_checkpoint_config(&home, &meta.project_root);
    let checkpoints =
        SessionCheckpoints::existing(&home, &meta.project_root, &meta.id, &config).await?;
    Ok(Opened { meta, checkpoints })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn print(text: &str) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// Runs `intendant checkpoints`.
pub fn run_checkpoints(args: CheckpointsArgs) -> anyhow::Result<ExitCode> {
    if let Some(CheckpointsAction::Gc { json }) = args.action {
        return run_gc(json);
    }
    let id = args.id.context("give a session id, or `gc`")?;
    let text = runtime()?.block_on(async {
        let opened = open(&id).await?;
        list(&opened, args.json).await
    })?;
    print(&text)
}

/// Runs `intendant checkpoints gc`: fails (after collecting the other stores) when a store
/// could not be collected.
fn run_gc(as_json: bool) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    let reports = runtime()?.block_on(collect_checkpoint_garbage(&home))?;
    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    let text = if as_json {
        format!("{}\n", serde_json::to_string_pretty(&reports)?)
    } else {
        let mut out = String::new();
        for r in &reports {
            let project = r
                .project
                .as_ref()
                .map_or_else(|| "(project gone)".to_owned(), |p| p.display().to_string());
            out.push_str(&format!(
                "{project}: {} session(s) kept, {} removed{}, {} object(s) ({} KiB) freed\n",
                r.sessions_kept,
                r.sessions_removed.len(),
                if r.sessions_removed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", r.sessions_removed.join(", "))
                },
                r.objects_removed,
                r.bytes_freed / 1024,
            ));
            if !r.missing.is_empty() {
                out.push_str(&format!(
                    "  the store lacks {} object(s) its checkpoints name: those turns cannot be rewound\n",
                    r.missing.len()
                ));
            }
            if let Some(error) = &r.error {
                out.push_str(&format!("  not collected: {error}\n"));
            }
        }
        if reports.is_empty() {
            out.push_str("no checkpoint store\n");
        }
        out
    };
    print(&text)?;
    if failed > 0 {
        bail!("{failed} store(s) could not be collected (nothing was removed from them)");
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(opened: &Opened, as_json: bool) -> anyhow::Result<String> {
    let cp = &opened.checkpoints;
    let mut turns = Vec::new();
    for turn in cp.turns()? {
        let changes = cp.turn_changes(&turn).await?;
        turns.push((turn, changes));
    }
    let rewinds = cp
        .entries()?
        .into_iter()
        .filter(|e| matches!(e, intendant_core::checkpoint::Entry::Rewind { .. }))
        .collect::<Vec<_>>();
    if as_json {
        let value = json!({
            "session": opened.meta.id,
            "project_root": opened.meta.project_root,
            "turns": turns.iter().map(|(t, changes)| json!({
                "turn": t.turn,
                "complete": t.after.is_some(),
                "changes": changes,
                "left_out": t.after.as_ref().unwrap_or(&t.before).left_out,
            })).collect::<Vec<_>>(),
            "rewinds": rewinds,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut out = format!(
        "session {} in {}\n",
        opened.meta.id,
        opened.meta.project_root.display()
    );
    for (turn, changes) in &turns {
        let state = match (&turn.after, changes.len()) {
            (None, _) => " (its batch never finished its checkpoint)".to_owned(),
            (Some(_), 0) => ": no file changed".to_owned(),
            (Some(_), 1) => ": 1 file".to_owned(),
            (Some(_), n) => format!(": {n} files"),
        };
        out.push_str(&format!("turn {}{state}\n", turn.turn));
        for change in changes {
            out.push_str(&format!("  {} {}\n", change.kind.letter(), change.path));
        }
        for left in &turn.after.as_ref().unwrap_or(&turn.before).left_out {
            out.push_str(&format!("  not captured: {}\n", left.describe()));
        }
    }
    for rewind in &rewinds {
        if let intendant_core::checkpoint::Entry::Rewind {
            ts,
            to_turn,
            undoes,
            report,
            conversation_cut,
            ..
        } = rewind
        {
            let what = match (to_turn, undoes) {
                (Some(turn), _) => format!("rewound to before turn {turn}"),
                (None, _) => "undid a rewind".to_owned(),
            };
            let convo = conversation_cut.map_or(String::new(), |c| {
                format!(", conversation items {}..{} dropped", c.keep, c.until)
            });
            out.push_str(&format!(
                "{ts}: {what} ({} written, {} removed{convo})\n",
                report.written.len(),
                report.removed.len()
            ));
        }
    }
    Ok(out)
}

/// Runs `intendant diff`.
pub fn run_diff(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let range = match (args.turn, args.from, args.to_turn) {
        (Some(turn), _, _) => Some((turn, turn)),
        (None, Some(from), Some(to)) => Some((from, to)),
        (None, None, None) => None,
        _ => bail!("give --turn N, or --from N --to M, or neither for the whole session"),
    };
    if let Some((from, to)) = range.filter(|(from, to)| from > to) {
        bail!("--from {from} is after --to {to}");
    }
    let text = runtime()?.block_on(async {
        let opened = open(&args.id).await?;
        let checkpoints = &opened.checkpoints;
        anyhow::Ok(match range {
            Some((from, to)) => checkpoints.diff(from, to).await?,
            None => checkpoints.diff_all().await?,
        })
    })?;
    print(&text)
}

/// Runs `intendant rewind`.
pub fn run_rewind(args: RewindArgs) -> anyhow::Result<ExitCode> {
    let text = runtime()?.block_on(rewind(&args))?;
    print(&text)
}

async fn rewind(args: &RewindArgs) -> anyhow::Result<String> {
    let home = intendant_home()?;
    let dir = resolve_session_id(&home, &args.id)?;
    let meta = read_meta(&dir)?;
    if meta.effective_status() == intendant_protocol::events::RecordedStatus::Running {
        bail!(
            "session {} is running (pid {}): a rewind waits until its turn ends; a daemon session waiting for a follow-up is rewound with `intendant ctl rewind {}`, and a one-shot run once it has ended",
            meta.id,
            meta.pid
                .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
            meta.id
        );
    }
    let request = args.flags.request(&meta.id);
    // Held while it rewinds: no resume reopens the session meanwhile, and a run that took it
    // since the check above refuses the rewind before it changes anything.
    let mut record = if request.preview {
        None
    } else {
        Some(OfflineRecord::claim(&dir)?)
    };
    let rewound = rewind_recorded(&home, &dir, &request).await?;
    // The rewind stands whether or not the log takes the note; a failure is said.
    let logged = match (rewound.event.as_ref(), record.as_mut()) {
        (Some(event), Some(record)) => Some(record.record(event)),
        _ => None,
    };
    drop(record);
    let mut child_logs = String::new();
    for child in &rewound.children {
        let logged = child.event.as_ref().map(|event| {
            OfflineRecord::claim(&child.dir).and_then(|mut record| record.record(event))
        });
        if let Some(Err(e)) = logged {
            child_logs.push_str(&format!(
                "  warning: sub-agent {}'s log could not record its rewind: {e}\n",
                child.session_id
            ));
        }
    }
    if args.json {
        let mut value = serde_json::to_value(&rewound.report)?;
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "logged".into(),
                json!(logged.as_ref().is_none_or(Result::is_ok)),
            );
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut out = describe(&rewound.report);
    if let Some(Err(e)) = logged {
        out.push_str(&format!(
            "  warning: the rewind is done but the session log could not record it: {e}\n"
        ));
    }
    out.push_str(&child_logs);
    Ok(out)
}

//! The one way a recorded session is rewound, whichever surface asks: `intendant rewind` in
//! the terminal, and the daemon for `ctl rewind`, the dashboard and MCP's `rewind` tool. It
//! reads the session's records, opens its checkpoints, and previews, rewinds or undoes; the
//! caller decides whether the session may be rewound now (not while a turn of it runs) and
//! records the event it is handed in the session's log (the daemon on the session's stream,
//! numbered like every event; the terminal straight into `session.jsonl`).
//!
//! A conversation cut is recorded in the checkpoint store; a resume applies it
//! ([`crate::resume`]), and so does a daemon session waiting for a follow-up, before that
//! follow-up reaches the model.
//!
//! Module file: `children` (a rewind with `with_children`: the sub-agents' worktrees alongside).

use std::path::Path;

use intendant_protocol::checkpoints::{
    ChangeKind, FileChange, MAX_PREVIEW_DIFF, RewindReport, RewindRequest, RewindScope,
};
use intendant_protocol::events::{AppEvent, ContextAction};
use thiserror::Error;

use crate::checkpoint::{
    self, Change, CheckpointConfig, CheckpointError, LeftOut, RewindOutcome, SessionCheckpoints,
};
use crate::config::ProjectConfig;
use crate::session_log::{SessionLogError, SessionMeta, read_conversation, read_meta};

mod children;

pub use children::ChildRewound;
use intendant_protocol::daemon::Backend;

/// Why a rewind was refused or failed.
#[derive(Debug, Error)]
pub enum RewindError {
    /// The request names neither a turn nor an undo, or both, or turn 0.
    #[error("invalid rewind request: {0}")]
    Request(String),
    /// The session's records cannot be read.
    #[error(transparent)]
    Session(#[from] SessionLogError),
    /// The checkpoints refused (no such turn, nothing to undo, files changed outside the
    /// session) or failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

impl RewindError {
    /// Whether the request itself is at fault (a bad turn, nothing to undo, files changed
    /// outside the session, a session without checkpoints), not the machine.
    pub fn is_refusal(&self) -> bool {
        match self {
            RewindError::Request(_) => true,
            RewindError::Session(_) => false,
            RewindError::Checkpoint(e) => match e {
                CheckpointError::InvalidSessionId { .. }
                | CheckpointError::NoCheckpoints { .. }
                | CheckpointError::UnknownTurn { .. }
                | CheckpointError::ChangedOutside { .. }
                | CheckpointError::NothingToUndo { .. } => true,
                // A turn with no conversation position is refused as corrupt.
                CheckpointError::Corrupt { .. } => true,
                CheckpointError::Io { .. } | CheckpointError::Git { .. } => false,
            },
        }
    }
}

/// What a rewind did (or a preview found), and the event the session's log gets for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewound {
    /// The report every surface shows.
    pub report: RewindReport,
    /// `context_management` with action `rewind` (none for a preview).
    pub event: Option<AppEvent>,
    /// With `with_children`: each sub-agent rewound alongside, and the event its log gets.
    pub children: Vec<ChildRewound>,
}

/// Rewinds (or undoes, or previews) the session recorded in `dir` under the state root `home`,
/// as `request` says. The caller has made sure no turn of the session runs.
pub async fn rewind_recorded(
    home: &Path,
    dir: &Path,
    request: &RewindRequest,
) -> Result<Rewound, RewindError> {
    request.check().map_err(RewindError::Request)?;
    if !request.with_children {
        return rewind_one(home, dir, request).await;
    }
    let meta = read_meta(dir)?;
    let children = children::check_children(home, &meta, request).await?;
    let mut rewound = rewind_one(home, dir, request).await?;
    children::rewind_children(home, children, &mut rewound).await?;
    Ok(rewound)
}

/// [`rewind_recorded`] of the one session recorded in `dir`, its children left alone.
async fn rewind_one(
    home: &Path,
    dir: &Path,
    request: &RewindRequest,
) -> Result<Rewound, RewindError> {
    let meta = read_meta(dir)?;
    let Some(worker) = worker_of(&meta) else {
        return rewind_session(home, dir, &meta, request).await;
    };
    // A worker's conversation lives in its CLI, out of reach: only its files go back.
    let scope = match request.scope {
        RewindScope::Both | RewindScope::Code => RewindScope::Code,
        RewindScope::Conversation if request.undo => RewindScope::Code,
        RewindScope::Conversation => {
            return Err(RewindError::Request(format!(
                "session {} ran on {worker}, which keeps its own conversation: it cannot be cut \
                 back; rewind the files with --code",
                meta.id
            )));
        }
    };
    let request = RewindRequest {
        scope,
        ..request.clone()
    };
    let mut rewound = rewind_session(home, dir, &meta, &request).await?;
    let note = format!("; the conversation is {worker}'s own and stays as it is");
    rewound.report.summary.push_str(&note);
    if let Some(AppEvent::ContextManagement { detail, .. }) = &mut rewound.event {
        detail.push_str(&note);
    }
    Ok(rewound)
}

/// The worker CLI a recorded session ran on (`None`: Intendant's own loop).
fn worker_of(meta: &SessionMeta) -> Option<String> {
    match meta.recorded_backend()? {
        Backend::Native => None,
        Backend::Agent { name, .. } => Some(name),
    }
}

/// [`rewind_recorded`] of the session `meta` describes, as `request` says.
async fn rewind_session(
    home: &Path,
    dir: &Path,
    meta: &SessionMeta,
    request: &RewindRequest,
) -> Result<Rewound, RewindError> {
    let config = project_checkpoint_config(home, &meta.project_root);
    let checkpoints =
        SessionCheckpoints::existing(home, &meta.project_root, &meta.id, &config).await?;
    let items_now =
        || -> Result<u64, RewindError> { Ok(read_conversation(dir)?.records.len() as u64) };
    let scope = request.scope;
    if request.preview {
        let items = if scope.conversation() {
            items_now()?
        } else {
            0
        };
        let preview = checkpoints
            .preview(request.to_turn, scope.code(), scope.conversation(), items)
            .await?;
        let (diff, diff_truncated) = match preview.patch {
            Some(patch) => {
                let (cut, truncated) = bounded(patch, MAX_PREVIEW_DIFF);
                (Some(cut), truncated)
            }
            None => (None, false),
        };
        let mut report = RewindReport {
            session_id: meta.id.clone(),
            preview: true,
            to_turn: request.to_turn,
            checkpoint_turn: preview.checkpoint_turn,
            changes: file_changes(preview.changes),
            diff,
            diff_truncated,
            changed_outside: preview
                .changed_outside
                .into_iter()
                .map(|c| c.path)
                .collect(),
            not_restored: preview.not_restored.iter().map(LeftOut::describe).collect(),
            ignored: Vec::new(),
            conversation_cut: preview.conversation_cut,
            summary: String::new(),
            children: Vec::new(),
        };
        report.summary = summary(request, &report);
        return Ok(Rewound {
            report,
            event: None,
            children: Vec::new(),
        });
    }
    let outcome = match request.to_turn {
        Some(turn) if !request.undo => {
            let items = if scope.conversation() {
                items_now()?
            } else {
                0
            };
            checkpoints
                .rewind(checkpoint::RewindRequest {
                    turn,
                    code: scope.code(),
                    conversation: scope.conversation(),
                    force: request.force,
                    conversation_items_now: items,
                })
                .await?
        }
        Some(_) | None => checkpoints.undo(request.force).await?,
    };
    let report = done_report(&meta.id, request, outcome);
    let event = AppEvent::ContextManagement {
        action: ContextAction::Rewind,
        detail: report.summary.clone(),
    };
    Ok(Rewound {
        report,
        event: Some(event),
        children: Vec::new(),
    })
}

/// Collects the garbage of every checkpoint store under `home` now
/// ([`checkpoint::collect_garbage`]), each project's sessions kept as its
/// `[checkpoints] retention_days` says (a project that is gone, or an untrusted file that
/// shortens it: the default).
pub async fn collect_checkpoint_garbage(
    home: &Path,
) -> Result<Vec<checkpoint::GcReport>, CheckpointError> {
    checkpoint::collect_garbage(home, std::time::SystemTime::now(), |project| {
        project
            .map_or_else(CheckpointConfig::default, |p| {
                project_checkpoint_config(home, p)
            })
            .retention()
    })
    .await
}

/// The `[checkpoints]` of `project` as it counts for the state root `home`: a setting that
/// weakens the record ([`CheckpointConfig::weakenings`]: checkpoints off, a smaller size cap, a
/// shorter retention) only from an `intendant.toml` a human trusted, since a session can write
/// that file and must not thin out the history that undoes it; otherwise the default for that
/// setting. A file that does not parse: the defaults. (A session's own start refuses or asks
/// about an untrusted file instead: `trust::checked_project`.)
pub fn project_checkpoint_config(home: &Path, project: &Path) -> CheckpointConfig {
    let Ok((config, digest)) = ProjectConfig::load_digest(project) else {
        return CheckpointConfig::default();
    };
    let trusted = || digest.is_some_and(|d| crate::trust::TrustStore::new(home).is_trusted(&d));
    if config.checkpoints.weakenings().is_empty() || trusted() {
        return config.checkpoints;
    }
    config.checkpoints.without_weakenings()
}

fn done_report(session: &str, request: &RewindRequest, outcome: RewindOutcome) -> RewindReport {
    let RewindOutcome {
        report: restore,
        conversation_cut,
        ignored,
        entry: _,
    } = outcome;
    let mut changes: Vec<FileChange> = restore
        .written
        .iter()
        .map(|path| FileChange {
            path: path.clone(),
            kind: ChangeKind::Modified,
        })
        .chain(restore.modes_restored.iter().map(|path| FileChange {
            path: path.clone(),
            kind: ChangeKind::Modified,
        }))
        .chain(restore.removed.iter().map(|path| FileChange {
            path: path.clone(),
            kind: ChangeKind::Deleted,
        }))
        .collect();
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    let mut report = RewindReport {
        session_id: session.to_owned(),
        preview: false,
        to_turn: request.to_turn.filter(|_| !request.undo),
        checkpoint_turn: None,
        changes,
        diff: None,
        diff_truncated: false,
        changed_outside: Vec::new(),
        not_restored: restore.not_restored.iter().map(LeftOut::describe).collect(),
        ignored,
        conversation_cut,
        summary: String::new(),
        children: Vec::new(),
    };
    report.summary = summary(request, &report);
    report
}

fn file_changes(changes: Vec<Change>) -> Vec<FileChange> {
    changes
        .into_iter()
        .map(|c| FileChange {
            path: c.path,
            kind: c.kind,
        })
        .collect()
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
fn bounded(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// One sentence saying what the rewind did, or (a preview) would do.
fn summary(request: &RewindRequest, report: &RewindReport) -> String {
    let what = match (request.undo, request.to_turn) {
        (true, _) | (false, None) => "the last rewind".to_owned(),
        (false, Some(turn)) => format!("to before turn {turn}"),
    };
    let files = if report.preview {
        let n = report.changes.len();
        format!("{n} file{} would change", if n == 1 { "" } else { "s" })
    } else {
        let written = report
            .changes
            .iter()
            .filter(|c| c.kind != ChangeKind::Deleted)
            .count();
        format!(
            "{written} file{} restored, {} removed",
            if written == 1 { "" } else { "s" },
            report.changes.len() - written
        )
    };
    let files = match (request.scope, request.undo) {
        (RewindScope::Conversation, false) => "files left as they are".to_owned(),
        (RewindScope::Both | RewindScope::Code, _) | (RewindScope::Conversation, true) => files,
    };
    let convo = report.conversation_cut.map(|c| match (request.undo, report.preview) {
        (true, false) => format!(
            "conversation items {}..{} reach the model again",
            c.keep, c.until
        ),
        (true, true) => format!(
            "conversation items {}..{} would reach the model again",
            c.keep, c.until
        ),
        (false, false) => format!(
            "conversation items {}..{} no longer reach the model (the next follow-up or resume continues from there)",
            c.keep, c.until
        ),
        (false, true) => format!(
            "conversation items {}..{} would no longer reach the model",
            c.keep, c.until
        ),
    });
    let head = match (request.undo, report.preview) {
        (true, false) => "undid the last rewind".to_owned(),
        (true, true) => "undoing the last rewind".to_owned(),
        (false, false) => format!("rewound {what}"),
        (false, true) => format!("rewinding {what}"),
    };
    let mut text = match convo {
        Some(convo) => format!("{head}: {files}; {convo}"),
        None => format!("{head}: {files}"),
    };
    if report.preview && !report.changed_outside.is_empty() {
        text.push_str(&format!(
            "; refused unless forced: {} changed since the session's last checkpoint by something other than the session",
            report.changed_outside.join(", ")
        ));
    }
    text
}

/// The report as lines for a terminal: the summary, then each path.
pub fn describe(report: &RewindReport) -> String {
    let mut out = format!("{}\n", report.summary);
    for change in &report.changes {
        let verb = match (report.preview, change.kind) {
            (true, kind) => format!("{}", kind.letter()),
            (false, ChangeKind::Deleted) => "removed".to_owned(),
            (false, ChangeKind::Added | ChangeKind::Modified | ChangeKind::TypeChanged) => {
                "restored".to_owned()
            }
        };
        out.push_str(&format!("  {verb} {}\n", change.path));
    }
    for left in &report.not_restored {
        out.push_str(&format!("  not restored (never captured): {left}\n"));
    }
    if !report.ignored.is_empty() {
        out.push_str(&format!(
            "  ignored paths left as they are: {}\n",
            report.ignored.join(", ")
        ));
    }
    if let Some(diff) = &report.diff {
        out.push_str(diff);
        if report.diff_truncated {
            out.push_str(&format!("\n[diff cut at {MAX_PREVIEW_DIFF} bytes]\n"));
        }
    }
    for child in &report.children {
        out.push_str(&format!("sub-agent {}: ", child.session_id));
        out.push_str(&describe(child));
    }
    out
}

#[cfg(test)]
mod tests;

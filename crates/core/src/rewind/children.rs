//! A rewind with its sub-agents (`with_children`): every descendant that worked in a worktree
//! of its own has that worktree put back to how it was when the parent's turn began (an undo:
//! its own last rewind undone), files only. A child that shared the parent's directory is
//! covered by the parent's own rewind. Without `with_children` nothing here runs, and the
//! children's worktrees (under the state root, outside the parent's project) stay as they are.

use std::path::{Path, PathBuf};

use intendant_protocol::checkpoints::{RewindRequest, RewindScope};
use intendant_protocol::events::{AppEvent, RecordedStatus};

use super::{RewindError, Rewound, rewind_one};
use crate::checkpoint::{CheckpointError, Entry, SessionCheckpoints};
use crate::session_log::{LOGS_DIR, SessionMeta, list_sessions};

/// One descendant's part of a rewind: its log directory, and the event that log gets.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRewound {
    /// The sub-agent.
    pub session_id: String,
    /// Its log directory.
    pub dir: PathBuf,
    /// `context_management` with action `rewind` (none for a preview).
    pub event: Option<AppEvent>,
}

/// The descendants of `parent` with a worktree of their own (not `project`), children first.
fn descendants(home: &Path, parent: &str, project: &Path) -> Result<Vec<SessionMeta>, RewindError> {
    let all = list_sessions(home)?;
    let mut out: Vec<SessionMeta> = Vec::new();
    let mut frontier = vec![parent.to_owned()];
    while let Some(id) = frontier.pop() {
        for child in all
            .iter()
            .filter(|m| m.parent.as_deref() == Some(id.as_str()))
        {
            frontier.push(child.id.clone());
            if child.effective_status() == RecordedStatus::Running {
                return Err(RewindError::Request(format!(
                    "sub-agent {} of session {parent} is running: a rewind with its children \
                     waits until it ends",
                    child.id
                )));
            }
            if child.project_root != project {
                out.push(child.clone());
            }
        }
    }
    Ok(out)
}

/// When the parent's files go back to: the `before` of its first checkpointed turn at or
/// after `turn` (`None`: no such turn, which the parent's own rewind already refused).
fn parent_moment(
    checkpoints: &SessionCheckpoints,
    turn: u32,
) -> Result<Option<String>, CheckpointError> {
    Ok(checkpoints.entries()?.into_iter().find_map(|e| match e {
        Entry::Before { turn: t, ts, .. } if t >= turn => Some(ts),
        Entry::Before { .. } | Entry::After { .. } | Entry::Rewind { .. } => None,
    }))
}

/// The child's first turn that began at or after `moment` (`None`: it did nothing since).
fn child_turn(
    checkpoints: &SessionCheckpoints,
    moment: &str,
) -> Result<Option<u32>, CheckpointError> {
    Ok(checkpoints.entries()?.into_iter().find_map(|e| match e {
        Entry::Before { turn, ts, .. } if ts.as_str() >= moment => Some(turn),
        Entry::Before { .. } | Entry::After { .. } | Entry::Rewind { .. } => None,
    }))
}

/// What each descendant of the session `meta` describes is asked, as `request` (the parent's)
/// says: a rewind to the moment the parent's turn began, or the undo of its last rewind.
async fn child_requests(
    home: &Path,
    meta: &SessionMeta,
    request: &RewindRequest,
) -> Result<Vec<(PathBuf, RewindRequest)>, RewindError> {
    let moment = match request.to_turn.filter(|_| !request.undo) {
        Some(turn) => {
            let config = super::project_checkpoint_config(home, &meta.project_root);
            let parent =
                SessionCheckpoints::existing(home, &meta.project_root, &meta.id, &config).await?;
            parent_moment(&parent, turn)?
        }
        None => None,
    };
    let mut out = Vec::new();
    for child in descendants(home, &meta.id, &meta.project_root)? {
        // A worktree removed when its child ended (it was clean) holds nothing to put back.
        if !child.project_root.is_dir() {
            continue;
        }
        let base = RewindRequest {
            session_id: child.id.clone(),
            scope: RewindScope::Code,
            with_children: false,
            ..request.clone()
        };
        let config = super::project_checkpoint_config(home, &child.project_root);
        let opened =
            SessionCheckpoints::existing(home, &child.project_root, &child.id, &config).await;
        let checkpoints = match opened {
            Ok(c) => c,
            // A child that never changed a file has nothing to put back.
            Err(CheckpointError::NoCheckpoints { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let asked = match &moment {
            Some(moment) => match child_turn(&checkpoints, moment)? {
                Some(turn) => RewindRequest {
                    to_turn: Some(turn),
                    ..base
                },
                None => continue,
            },
            None if request.undo => base,
            None => continue,
        };
        out.push((home.join(LOGS_DIR).join(&child.id), asked));
    }
    Ok(out)
}

/// Rewinds (or previews, or undoes) the descendants of the session `meta` describes alongside
/// it, adding each one's report to `rewound`'s and its event to `events`. Unless forced, every
/// descendant's worktree is checked first, so a refusal (a file changed there by something
/// other than the child) comes before the parent or any child changed anything.
pub(super) async fn check_children(
    home: &Path,
    meta: &SessionMeta,
    request: &RewindRequest,
) -> Result<Vec<(PathBuf, RewindRequest)>, RewindError> {
    let asked = child_requests(home, meta, request).await?;
    if request.force || request.preview {
        return Ok(asked);
    }
    for (dir, child) in &asked {
        let preview = RewindRequest {
            preview: true,
            ..child.clone()
        };
        let seen = rewind_one(home, dir, &preview).await;
        match seen {
            Ok(seen) if !seen.report.changed_outside.is_empty() => {
                return Err(RewindError::Checkpoint(CheckpointError::ChangedOutside {
                    files: seen
                        .report
                        .changed_outside
                        .iter()
                        .map(|f| format!("{f} (in sub-agent {}'s worktree)", child.session_id))
                        .collect(),
                }));
            }
            Ok(_) | Err(RewindError::Checkpoint(CheckpointError::NothingToUndo { .. })) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(asked)
}

/// Runs the requests [`check_children`] made, after the parent's own rewind.
pub(super) async fn rewind_children(
    home: &Path,
    asked: Vec<(PathBuf, RewindRequest)>,
    rewound: &mut Rewound,
) -> Result<(), RewindError> {
    for (dir, child) in asked {
        let done = match rewind_one(home, &dir, &child).await {
            Ok(done) => done,
            // An undo with children undoes those that were rewound.
            Err(RewindError::Checkpoint(CheckpointError::NothingToUndo { .. })) => continue,
            Err(e) => return Err(e),
        };
        rewound.report.children.push(done.report);
        rewound.children.push(ChildRewound {
            session_id: child.session_id,
            dir,
            event: done.event,
        });
    }
    Ok(())
}

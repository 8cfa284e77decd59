//! One session's checkpoints: its index in the store, the record of every checkpoint it took,
//! and the operations on them (list, diff, rewind, undo).

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    Change, CheckpointConfig, CheckpointError, CheckpointStore, ConversationCut, LastTree,
    RestoreReport, Snapshot,
};
use crate::record_dir::RecordDir;
use crate::session_log::jsonl::{append_line, read_jsonl, repair_tail};

/// Directory of a store holding one directory per session.
pub(super) const SESSIONS_DIR: &str = "sessions";
/// A session's record of checkpoints.
pub(super) const RECORD_FILE: &str = "record.jsonl";
/// A session's index.
const INDEX_FILE: &str = "index";
/// The lock serialising the users of a session's index.
pub(super) const LOCK_FILE: &str = "lock";
/// The lock of a store: shared by its users, exclusive for a garbage collection.
pub(super) const GC_LOCK: &str = "gc.lock";

/// One line of a session's `record.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// The project before a batch of turn `turn` that can change files.
    Before {
        /// The session's turn (counted across follow-ups and resumes).
        turn: u32,
        /// When (RFC 3339 UTC).
        ts: String,
        /// The project then.
        snapshot: Snapshot,
        /// Items of `conversation.jsonl` written before the turn began, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conversation_items: Option<u64>,
    },
    /// The project after that batch.
    After {
        /// The turn.
        turn: u32,
        /// When.
        ts: String,
        /// The project then.
        snapshot: Snapshot,
    },
    /// A rewind (or the undo of one), itself checkpointed.
    Rewind {
        /// When.
        ts: String,
        /// The turn rewound to before (`None` for an undo).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_turn: Option<u32>,
        /// The record line of the rewind this one undoes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        undoes: Option<usize>,
        /// Whether files were restored.
        code: bool,
        /// The project just before the rewind.
        from: Snapshot,
        /// The project just after it.
        to: Snapshot,
        /// The conversation items it dropped, for a conversation rewind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conversation_cut: Option<ConversationCut>,
        /// What the restore wrote and removed.
        #[serde(default)]
        report: RestoreReport,
    },
}

impl Entry {
    /// The project as this entry left it.
    pub fn snapshot_after(&self) -> &Snapshot {
        match self {
            Entry::Before { snapshot, .. } | Entry::After { snapshot, .. } => snapshot,
            Entry::Rewind { to, .. } => to,
        }
    }
}

/// One turn as `checkpoints` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnCheckpoints {
    /// The turn.
    pub turn: u32,
    /// The project before its batch.
    pub before: Snapshot,
    /// The project after it (`None`: the batch never finished its checkpoint).
    pub after: Option<Snapshot>,
    /// Conversation items before the turn, when recorded.
    pub conversation_items: Option<u64>,
}

/// What `rewind` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewindRequest {
    /// The turn to rewind to before.
    pub turn: u32,
    /// Restore the files.
    pub code: bool,
    /// Truncate the conversation (recorded here; the session log applies it on the next run).
    pub conversation: bool,
    /// Rewind even when files changed outside the session since its last checkpoint.
    pub force: bool,
    /// Items in `conversation.jsonl` now (the end of the cut).
    pub conversation_items_now: u64,
}

/// What a rewind (or undo) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindOutcome {
    /// The record line of the rewind.
    pub entry: usize,
    /// The files restored and removed (empty for a conversation-only rewind).
    pub report: RestoreReport,
    /// The conversation items no longer sent to the model.
    pub conversation_cut: Option<ConversationCut>,
    /// Ignored paths, left as they are.
    pub ignored: Vec<String>,
}

/// What a rewind would do, as [`SessionCheckpoints::preview`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindPreview {
    /// The checkpointed turn whose "before" the files would go back to (`None`: an undo).
    pub checkpoint_turn: Option<u32>,
    /// The paths that would change, from the project now to the target.
    pub changes: Vec<Change>,
    /// The unified diff of that (`None` when files are not restored).
    pub patch: Option<String>,
    /// Files changed since the session's last checkpoint by something other than the session.
    pub changed_outside: Vec<Change>,
    /// Paths the target did not capture, which would be left as they are.
    pub not_restored: Vec<super::LeftOut>,
    /// The conversation items that would no longer reach the model (an undo's: again).
    pub conversation_cut: Option<ConversationCut>,
}

/// A session's checkpoints in its project's store.
#[derive(Debug)]
pub struct SessionCheckpoints {
    store: CheckpointStore,
    session: String,
    pub(super) dir: RecordDir,
    pub(super) index: PathBuf,
    pub(super) last: LastTree,
}

impl SessionCheckpoints {
    /// Opens (or starts) the checkpoints of session `session` in `project`'s store under
    /// `home`. A new session's index starts as a copy of the project's most recent one, so
    /// its first checkpoint rehashes only what changed since.
    pub async fn open(
        home: &Path,
        project: &Path,
        session: &str,
        config: &CheckpointConfig,
    ) -> Result<SessionCheckpoints, CheckpointError> {
        if session.is_empty()
            || !session
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(CheckpointError::InvalidSessionId {
                id: session.to_owned(),
            });
        }
        let store = CheckpointStore::open(home, project, config).await?;
        let sessions_path = store.dir.join(SESSIONS_DIR);
        let sessions = RecordDir::open(&store.dir)
            .and_then(|d| d.ensure_dir(SESSIONS_DIR))
            .map_err(|e| CheckpointError::io(&sessions_path, e))?;
        let fresh = !sessions.contains(session);
        let dir = sessions
            .ensure_dir(session)
            .map_err(|e| CheckpointError::io(&sessions_path.join(session), e))?;
        let index = dir.join(INDEX_FILE);
        if fresh && let Some(seed) = newest_index(&sessions_path, session) {
            // A failed copy only costs the first checkpoint a full hash.
            let _ = std::fs::copy(&seed, &index);
        }
        Ok(SessionCheckpoints {
            store,
            session: session.to_owned(),
            dir,
            index,
            last: LastTree::default(),
        })
    }

    /// Opens the checkpoints of a session that has some; an error naming the session when it
    /// has none.
    pub async fn existing(
        home: &Path,
        project: &Path,
        session: &str,
        config: &CheckpointConfig,
    ) -> Result<SessionCheckpoints, CheckpointError> {
        let none = || CheckpointError::NoCheckpoints {
            session: session.to_owned(),
        };
        // Nothing is made for a session that has no checkpoints.
        let project = std::fs::canonicalize(project).map_err(|_| none())?;
        let store = home
            .join(super::CHECKPOINTS_DIR)
            .join(super::project_key(&project));
        if std::fs::symlink_metadata(record_path(&store, session)).is_err() {
            return Err(none());
        }
        let opened = SessionCheckpoints::open(home, &project, session, config).await?;
        if opened.entries()?.is_empty() {
            return Err(none());
        }
        Ok(opened)
    }

    /// These checkpoints with every git they start in the session's groups `placement` (a
    /// running session's: what git reads of the project, which its commands wrote, is paid
    /// for within the session's bounds, not the controller's).
    pub fn placed(
        mut self,
        placement: Option<crate::containment::Placement>,
    ) -> SessionCheckpoints {
        self.store.git.placement = placement;
        self
    }

    /// The store.
    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    /// What went wrong in this session's checkpoints since last asked without failing them (a
    /// resident git process that died or hung, so a capture started git per command instead; a
    /// first checkpoint's pack that could not be written, so git stored its files one by one),
    /// each a line for the session to report as a warning.
    pub fn take_notices(&self) -> Vec<String> {
        self.last.resident.take_notices()
    }

    /// Ends the session's resident git processes until its next checkpoint that can use them:
    /// called when the session's round ends, so that an idle session holds no process.
    pub fn rest(&self) {
        self.last.resident.rest();
    }

    /// Checkpoints the project before turn `turn`'s batch.
    pub async fn before(
        &self,
        turn: u32,
        conversation_items: Option<u64>,
    ) -> Result<Snapshot, CheckpointError> {
        let _lock = self.lock().await?;
        let snapshot = self.capture().await?;
        self.append(&Entry::Before {
            turn,
            ts: now(),
            snapshot: snapshot.clone(),
            conversation_items,
        })?;
        Ok(snapshot)
    }

    /// Checkpoints the project after turn `turn`'s batch.
    pub async fn after(&self, turn: u32) -> Result<Snapshot, CheckpointError> {
        let _lock = self.lock().await?;
        let snapshot = self.capture().await?;
        self.append(&Entry::After {
            turn,
            ts: now(),
            snapshot: snapshot.clone(),
        })?;
        Ok(snapshot)
    }

    /// Every record line, in order (a torn last line skipped).
    pub fn entries(&self) -> Result<Vec<Entry>, CheckpointError> {
        let path = self.dir.join(RECORD_FILE);
        read_jsonl(&path)
            .map(|read| read.records)
            .map_err(|e| CheckpointError::Corrupt {
                path,
                message: e.to_string(),
            })
    }

    /// The checkpointed turns, in order.
    pub fn turns(&self) -> Result<Vec<TurnCheckpoints>, CheckpointError> {
        let mut turns: Vec<TurnCheckpoints> = Vec::new();
        for entry in self.entries()? {
            match entry {
                Entry::Before {
                    turn,
                    snapshot,
                    conversation_items,
                    ..
                } => turns.push(TurnCheckpoints {
                    turn,
                    before: snapshot,
                    after: None,
                    conversation_items,
                }),
                Entry::After { turn, snapshot, .. } => {
                    if let Some(last) = turns.last_mut().filter(|t| t.turn == turn) {
                        last.after = Some(snapshot);
                    }
                }
                Entry::Rewind { .. } => {}
            }
        }
        Ok(turns)
    }

    /// The files turn `turn`'s batch changed.
    pub async fn turn_changes(
        &self,
        turn: &TurnCheckpoints,
    ) -> Result<Vec<Change>, CheckpointError> {
        match &turn.after {
            Some(after) => self.store.changes(&turn.before, after).await,
            None => Ok(Vec::new()),
        }
    }

    /// The diff from before turn `from` to after turn `to`.
    pub async fn diff(&self, from: u32, to: u32) -> Result<String, CheckpointError> {
        let turns = self.turns()?;
        let start = self.find(&turns, from)?;
        let end = self.find(&turns, to)?;
        self.patch_span(start, end).await
    }

    /// The diff of the whole session: from before its first checkpointed turn to after its
    /// last.
    pub async fn diff_all(&self) -> Result<String, CheckpointError> {
        let turns = self.turns()?;
        let (Some(first), Some(last)) = (turns.first(), turns.last()) else {
            return Err(CheckpointError::NoCheckpoints {
                session: self.session.clone(),
            });
        };
        self.patch_span(first, last).await
    }

    /// The diff from before turn `start` to after turn `end` (or its start, if it has no end).
    async fn patch_span(
        &self,
        start: &TurnCheckpoints,
        end: &TurnCheckpoints,
    ) -> Result<String, CheckpointError> {
        let end = end.after.as_ref().unwrap_or(&end.before);
        self.store.patch(&start.before, end).await
    }

    fn find<'a>(
        &self,
        turns: &'a [TurnCheckpoints],
        turn: u32,
    ) -> Result<&'a TurnCheckpoints, CheckpointError> {
        turns
            .iter()
            .find(|t| t.turn == turn)
            .ok_or_else(|| self.unknown_turn(turns, turn))
    }

    fn unknown_turn(&self, turns: &[TurnCheckpoints], turn: u32) -> CheckpointError {
        let known = if turns.is_empty() {
            "it has no checkpointed turn".to_owned()
        } else {
            format!(
                "its checkpointed turns are {}",
                turns
                    .iter()
                    .map(|t| t.turn.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        CheckpointError::UnknownTurn {
            session: self.session.clone(),
            turn,
            known,
        }
    }

    /// The files that differ between the session's last checkpoint and the project now.
    pub async fn changed_outside(&self) -> Result<Vec<Change>, CheckpointError> {
        let _lock = self.lock().await?;
        let now = self.capture().await?;
        self.outside_since_last(&now).await
    }

    async fn outside_since_last(&self, now: &Snapshot) -> Result<Vec<Change>, CheckpointError> {
        let entries = self.entries()?;
        let Some(last) = entries.last() else {
            return Ok(Vec::new());
        };
        self.store.changes(last.snapshot_after(), now).await
    }

    /// Rewinds to before turn `request.turn`: the files (with `code`) as the first checkpoint
    /// at or after that turn found them, and the conversation cut (with `conversation`), which
    /// the caller records in the session. Refuses when files changed outside the session since
    /// its last checkpoint, unless `force`. Each git pass that can runs beside another: the
    /// diff to the target and the read of what it writes beside the capture before the restore
    /// ([`SessionCheckpoints::capture_and_plan`]), the listing of the ignored paths beside the
    /// capture after it.
    pub async fn rewind(&self, request: RewindRequest) -> Result<RewindOutcome, CheckpointError> {
        let _lock = self.lock().await?;
        let turns = self.turns()?;
        let target = self.rewind_target(&turns, request.turn)?;
        let conversation_cut = if request.conversation {
            Some(self.conversation_cut(&target, request.conversation_items_now)?)
        } else {
            None
        };
        let (from, planned) = self
            .capture_and_plan(request.code, &target.before.tree)
            .await?;
        if request.code && !request.force {
            let outside = self.outside_since_last(&from).await?;
            if !outside.is_empty() {
                return Err(CheckpointError::ChangedOutside {
                    files: outside.into_iter().map(|c| c.path).collect(),
                });
            }
        }
        let report = if request.code {
            let unconfirmed = self.last.unconfirmed();
            self.store
                .restore(&from, &target.before, unconfirmed, planned)
                .await?
        } else {
            RestoreReport::default()
        };
        self.finish_rewind(
            Some(request.turn),
            None,
            request.code,
            from,
            report,
            conversation_cut,
        )
        .await
    }

    /// Undoes the last rewind not undone yet: the files as they were just before it, and its
    /// conversation cut lifted (the caller records that in the session).
    pub async fn undo(&self, force: bool) -> Result<RewindOutcome, CheckpointError> {
        let _lock = self.lock().await?;
        let (line, target, code, cut) = self.last_rewind(&self.entries()?)?;
        let (from, planned) = self.capture_and_plan(code, &target.tree).await?;
        if code && !force {
            let outside = self.outside_since_last(&from).await?;
            if !outside.is_empty() {
                return Err(CheckpointError::ChangedOutside {
                    files: outside.into_iter().map(|c| c.path).collect(),
                });
            }
        }
        let report = if code {
            let unconfirmed = self.last.unconfirmed();
            self.store
                .restore(&from, &target, unconfirmed, planned)
                .await?
        } else {
            RestoreReport::default()
        };
        self.finish_rewind(None, Some(line), code, from, report, cut)
            .await
    }

    /// The checkpointed turn a rewind to before `turn` goes back to: the first at or after it
    /// (a turn that changed no files has none of its own).
    fn rewind_target(
        &self,
        turns: &[TurnCheckpoints],
        turn: u32,
    ) -> Result<TurnCheckpoints, CheckpointError> {
        turns
            .iter()
            .filter(|t| t.turn >= turn)
            .min_by_key(|t| t.turn)
            .cloned()
            .ok_or_else(|| self.unknown_turn(turns, turn))
    }

    /// The conversation items a rewind to before `target` drops, `items_now` being written.
    fn conversation_cut(
        &self,
        target: &TurnCheckpoints,
        items_now: u64,
    ) -> Result<ConversationCut, CheckpointError> {
        let keep = target.conversation_items.ok_or_else(|| CheckpointError::Corrupt {
            path: self.dir.join(RECORD_FILE),
            message: format!(
                "turn {} recorded no conversation position (a worker's turn, or one of an older build): rewind it with --code",
                target.turn
            ),
        })?;
        Ok(ConversationCut {
            keep,
            until: items_now.max(keep),
        })
    }

    /// The last rewind not undone yet: its record line, the project just before it, whether
    /// it restored files, and its conversation cut.
    fn last_rewind(
        &self,
        entries: &[Entry],
    ) -> Result<(usize, Snapshot, bool, Option<ConversationCut>), CheckpointError> {
        let undone: Vec<usize> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Rewind { undoes, .. } => *undoes,
                Entry::Before { .. } | Entry::After { .. } => None,
            })
            .collect();
        entries
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, e)| match e {
                Entry::Rewind {
                    undoes: None,
                    from,
                    code,
                    conversation_cut,
                    ..
                } if !undone.contains(&i) => Some((i, from.clone(), *code, *conversation_cut)),
                Entry::Rewind { .. } | Entry::Before { .. } | Entry::After { .. } => None,
            })
            .ok_or_else(|| CheckpointError::NothingToUndo {
                session: self.session.clone(),
            })
    }

    /// What [`SessionCheckpoints::rewind`] to before `turn` (or, with `None`,
    /// [`SessionCheckpoints::undo`]) would do now, changing nothing in the project: the paths
    /// that would change and the diff from the project now to what it restores (with `code`),
    /// the files changed outside the session that would refuse it, and the conversation cut
    /// (with `conversation`; an undo's is the cut it lifts).
    pub async fn preview(
        &self,
        turn: Option<u32>,
        code: bool,
        conversation: bool,
        conversation_items_now: u64,
    ) -> Result<RewindPreview, CheckpointError> {
        let _lock = self.lock().await?;
        let (checkpoint_turn, target, code, conversation_cut) = match turn {
            Some(turn) => {
                let target = self.rewind_target(&self.turns()?, turn)?;
                let cut = if conversation {
                    Some(self.conversation_cut(&target, conversation_items_now)?)
                } else {
                    None
                };
                (Some(target.turn), target.before, code, cut)
            }
            None => {
                let (_, target, code, cut) = self.last_rewind(&self.entries()?)?;
                (None, target, code, cut)
            }
        };
        if !code {
            return Ok(RewindPreview {
                checkpoint_turn,
                changes: Vec::new(),
                patch: None,
                changed_outside: Vec::new(),
                not_restored: Vec::new(),
                conversation_cut,
            });
        }
        let now = self.capture().await?;
        let changed_outside = self.outside_since_last(&now).await?;
        Ok(RewindPreview {
            checkpoint_turn,
            changes: self.store.changes(&now, &target).await?,
            patch: Some(self.store.patch(&now, &target).await?),
            changed_outside,
            not_restored: target.left_out,
            conversation_cut,
        })
    }

    async fn finish_rewind(
        &self,
        to_turn: Option<u32>,
        undoes: Option<usize>,
        code: bool,
        from: Snapshot,
        report: RestoreReport,
        conversation_cut: Option<ConversationCut>,
    ) -> Result<RewindOutcome, CheckpointError> {
        let (to, ignored) = if code {
            let touched: Vec<String> = (report.written.iter())
                .chain(&report.modes_restored)
                .cloned()
                .collect();
            // The listing of the ignored paths runs beside the capture, which may replace the
            // index meanwhile: git writes an index under `index.lock` and renames it over, so the
            // listing reads the old index or the new one, whole. The two differ only at the
            // paths the restore touched and removed (the capture takes just those), and
            // `ls-files -o` answers from the index only for paths it does not hold: so an answer
            // naming nothing at or around those paths is the same from either index, and any
            // other is asked again of the new one.
            let (first, ignored) = tokio::join!(
                self.store
                    .snapshot_restored(&self.index, &self.last, &touched, &report.removed),
                self.store.ignored(&self.index),
            );
            // A failed capture removes the index and captures from scratch: list again then.
            let again = match (&first, &ignored) {
                (Ok(_), Ok(listed)) => ignored_near(listed, &touched, &report.removed),
                _ => true,
            };
            let to = self.or_from_scratch(first).await?;
            let ignored = match again {
                true => self.store.ignored(&self.index).await,
                false => ignored,
            };
            (to, ignored)
        } else {
            (self.capture().await?, Ok(Vec::new()))
        };
        let entry = self.entries()?.len();
        self.append(&Entry::Rewind {
            ts: now(),
            to_turn,
            undoes,
            code,
            from,
            to,
            conversation_cut,
            report: report.clone(),
        })?;
        // Recorded first: the files are restored whether or not the listing failed.
        let ignored = ignored?;
        Ok(RewindOutcome {
            entry,
            report,
            conversation_cut,
            ignored,
        })
    }

    /// The conversation cuts in force: every conversation rewind not undone.
    pub fn conversation_cuts(&self) -> Result<Vec<ConversationCut>, CheckpointError> {
        Ok(cuts_of(&self.entries()?))
    }

    /// A snapshot through the session's index; a corrupt index (a disk error, a foreign
    /// write) is dropped and the capture made again from scratch.
    async fn capture(&self) -> Result<Snapshot, CheckpointError> {
        let first = self
            .store
            .snapshot_cached(&self.index, Some(&self.last))
            .await;
        self.or_from_scratch(first).await
    }

    /// [`SessionCheckpoints::capture`] before a restore to `target` (with `code`), and beside it
    /// the restore's plan from the session's last checkpoint to `target` (its diff and the
    /// contents it writes): the restore's own when the capture finds the project as that
    /// checkpoint left it (the usual case, as a rewind refuses over outside changes), which
    /// spares the restore that diff and that read after the capture (a restore makes its own
    /// when the project moved; `None` when the store failed).
    async fn capture_and_plan(
        &self,
        code: bool,
        target: &str,
    ) -> Result<(Snapshot, Option<super::RestorePlan>), CheckpointError> {
        let last = match self.entries()?.last() {
            Some(entry) if code => entry.snapshot_after().tree.clone(),
            _ => return Ok((self.capture().await?, None)),
        };
        let (from, planned) = tokio::join!(self.capture(), self.store.plan_restore(&last, target));
        Ok((from?, planned.ok()))
    }

    /// `first`, or, when git failed on the session's index, a capture from scratch.
    async fn or_from_scratch(
        &self,
        first: Result<Snapshot, CheckpointError>,
    ) -> Result<Snapshot, CheckpointError> {
        match first {
            Err(CheckpointError::Git { .. }) => {
                let _ = std::fs::remove_file(&self.index);
                self.store
                    .snapshot_cached(&self.index, Some(&self.last))
                    .await
            }
            other => other,
        }
    }

    /// Makes the session walk its project no more, as one too big for a stat table does.
    #[cfg(test)]
    pub(super) fn walk_no_more(&self) {
        self.last.stop_walking();
    }

    fn append(&self, entry: &Entry) -> Result<(), CheckpointError> {
        let path = self.dir.join(RECORD_FILE);
        let io = |e| CheckpointError::io(&path, e);
        let mut file = match self.dir.open_append(RECORD_FILE) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.dir.create_append(RECORD_FILE).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let corrupt = |e: crate::session_log::SessionLogError| CheckpointError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        };
        repair_tail(&file, &path).map_err(corrupt)?;
        append_line(&mut file, &path, entry).map_err(corrupt)
    }

    /// Takes the session's lock and the store's shared one (waiting for them: held for one
    /// checkpoint, so a garbage collection never runs in its middle); git's own `index.lock`
    /// found then was left by a process killed mid-checkpoint and is removed.
    async fn lock(&self) -> Result<Held, CheckpointError> {
        let session = lock(&self.dir, LOCK_FILE, true).await?;
        let store = RecordDir::open(&self.store.dir)
            .map_err(|e| CheckpointError::io(&self.store.dir, e))?;
        let store = lock(&store, GC_LOCK, false).await?;
        let stale = self.dir.join(&format!("{INDEX_FILE}.lock"));
        if let Err(e) = std::fs::remove_file(&stale)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(CheckpointError::io(&stale, e));
        }
        Ok(Held {
            _session: session,
            _store: store,
        })
    }
}

/// The locks a user of a session's checkpoints holds.
struct Held {
    _session: File,
    _store: File,
}

/// Takes the `flock` on `name` in `dir` (made when missing), exclusive or shared, if no one
/// else holds it; `None` when someone does.
pub(super) fn try_lock(
    dir: &RecordDir,
    name: &str,
    exclusive: bool,
) -> Result<Option<File>, CheckpointError> {
    let (file, path) = open_lock(dir, name)?;
    Ok(flock(&file, &path, exclusive, false)?.then_some(file))
}

/// Takes the `flock` on `name` in `dir` (made when missing), exclusive or shared, waiting while
/// another holds it. The wait is on the blocking pool, never on an async worker: the holder may
/// be in this process and need the workers to finish (a collection awaiting `git`, another
/// session's checkpoint), and with every worker waiting in `flock` it never would. A caller
/// that gives up drops the wait's descriptor with its own, and the lock goes with them.
pub(super) async fn lock(
    dir: &RecordDir,
    name: &str,
    exclusive: bool,
) -> Result<File, CheckpointError> {
    let (file, path) = open_lock(dir, name)?;
    if flock(&file, &path, exclusive, false)? {
        return Ok(file);
    }
    // A second descriptor of the same open file: the lock it takes is the open file's, so
    // `file` holds it once the wait is over.
    let waiter = file
        .try_clone()
        .map_err(|e| CheckpointError::io(&path, e))?;
    let waited_on = path.clone();
    tokio::task::spawn_blocking(move || flock(&waiter, &waited_on, exclusive, true))
        .await
        .map_err(|e| CheckpointError::io(&path, std::io::Error::other(e.to_string())))??;
    Ok(file)
}

/// `flock` on `file` (the lock file at `path`), exclusive or shared, waiting for it when `wait`;
/// whether it was taken (not taken only when not waiting and someone else holds it).
fn flock(file: &File, path: &Path, exclusive: bool, wait: bool) -> Result<bool, CheckpointError> {
    use rustix::fs::FlockOperation;
    let op = match (exclusive, wait) {
        (true, true) => FlockOperation::LockExclusive,
        (true, false) => FlockOperation::NonBlockingLockExclusive,
        (false, true) => FlockOperation::LockShared,
        (false, false) => FlockOperation::NonBlockingLockShared,
    };
    match rustix::fs::flock(file, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) if !wait => Ok(false),
        Err(e) => Err(CheckpointError::io(path, e.into())),
    }
}

/// The lock file `name` in `dir`, opened for appending (made when missing), and its path.
fn open_lock(dir: &RecordDir, name: &str) -> Result<(File, PathBuf), CheckpointError> {
    let path = dir.join(name);
    let file = match dir.open_append(name) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => dir
            .create_append(name)
            .or_else(|_| dir.open_append(name))
            .map_err(|e| CheckpointError::io(&path, e))?,
        Err(e) => return Err(CheckpointError::io(&path, e)),
    };
    Ok((file, path))
}

/// `record.jsonl` of session `session` in the store at `store`.
pub(super) fn record_path(store: &Path, session: &str) -> PathBuf {
    store.join(SESSIONS_DIR).join(session).join(RECORD_FILE)
}

/// The cuts in force in the record at `path` (none when it does not exist).
pub(super) fn cuts_in(path: &Path) -> Result<Vec<ConversationCut>, CheckpointError> {
    let entries = read_jsonl::<Entry>(path).map_err(|e| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(cuts_of(&entries.records))
}

/// Every conversation rewind of `entries` not undone.
fn cuts_of(entries: &[Entry]) -> Vec<ConversationCut> {
    let undone: Vec<usize> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Rewind { undoes, .. } => *undoes,
            Entry::Before { .. } | Entry::After { .. } => None,
        })
        .collect();
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Entry::Rewind {
                undoes: None,
                conversation_cut: Some(cut),
                ..
            } if !undone.contains(&i) => Some(*cut),
            Entry::Rewind { .. } | Entry::Before { .. } | Entry::After { .. } => None,
        })
        .collect()
}

/// Whether a listing of the ignored paths (`listed`, directories as `dir/`) names a path at or
/// around those a restore `touched` or `removed`: one of them, a directory above one, or a path
/// inside such a directory. Only there can the index before the capture after the restore and
/// the index after it give different answers (a path the index holds is not listed; a directory
/// holding none may be listed whole).
pub(super) fn ignored_near(listed: &[String], touched: &[String], removed: &[String]) -> bool {
    let mut near: HashSet<&str> = HashSet::new();
    for path in touched.iter().chain(removed) {
        let mut up = path.as_str();
        // The root never counts: it is never listed.
        while near.insert(up) {
            match up.rsplit_once('/') {
                Some((parent, _)) => up = parent,
                None => break,
            }
        }
    }
    listed.iter().any(|entry| {
        let mut up = entry.trim_end_matches('/');
        loop {
            if near.contains(up) {
                return true;
            }
            match up.rsplit_once('/') {
                Some((parent, _)) => up = parent,
                None => return false,
            }
        }
    })
}

/// The most recently written index of another session of the store.
fn newest_index(sessions: &Path, except: &str) -> Option<PathBuf> {
    std::fs::read_dir(sessions)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != except)
        .filter_map(|e| {
            let index = e.path().join(INDEX_FILE);
            let meta = std::fs::symlink_metadata(&index).ok()?;
            (meta.is_file()).then(|| (meta.modified().ok(), index))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, index)| index)
}

fn now() -> String {
    intendant_protocol::utc::UtcTime::now().rfc3339()
}

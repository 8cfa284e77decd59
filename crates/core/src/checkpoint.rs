//! Checkpoints: the project's working tree as it was before and after every batch that can
//! change files, so each turn's effect (shell commands included) can be listed, diffed and
//! rewound.
//!
//! The design decision to know: the store is a git object database of its own under the state
//! root (`$INTENDANT_HOME/checkpoints/<project key>/git`), run through the `git` binary with the
//! project as its work tree and one index per session ([`store_git`]), never the project's own
//! `.git`: its index, refs, stash and history are untouched, and a directory that is no
//! repository works the same. Objects are content-addressed, so a file unchanged across turns is
//! stored once, and the per-session index keeps git's stat cache warm, so a checkpoint rehashes
//! only what changed. A git tree keeps only a file's executable bit, so every permission bit of
//! the captured files and directories (setuid, setgid, sticky) goes in a blob of its own next to
//! the tree ([`modes`]). What git skips (ignored paths, every `.git`) is not captured; neither is a
//! file over `[checkpoints] max_file_mib` nor a nested repository: each checkpoint names those
//! ([`LeftOut`]). Restoring is not git's checkout: it writes by directory descriptor
//! ([`restore`]), never following a link out of the project.
//!
//! # Layout
//! - `checkpoints/<key>/project`: the project's path (for a human reading the store).
//! - `checkpoints/<key>/git/`: the object store (a bare repository with no refs), made in-process
//!   under `git.new-<random>` and renamed into place ([`store_git`]).
//! - `checkpoints/<key>/sessions/<id>/index`: the session's index; `lock` serialises its users;
//!   `record.jsonl`: one [`Entry`] per checkpoint, in order.
//! - `checkpoints/<key>/gc.lock`: held shared by every checkpoint, rewind and listing, and
//!   exclusively by a garbage collection ([`gc`]); `git/packed-refs`: one ref per tree and mode
//!   table a kept record names (`refs/intendant/keep/<id>`), written by the last collection.
//!
//! A process killed mid-checkpoint leaves git's `index.lock` behind (removed by the next holder
//! of `lock`), objects that nothing names (harmless), and at most a torn last record line
//! (skipped by the reader and cut before the next append): the store stays consistent.
//!
//! Module files: `store_git` (the hardened git of the store, and the blobs written in-process:
//! a mode table), `capture` (a snapshot: what
//! changed, by the session's in-process walk or git's listing, the index, the tree, and the
//! modes carried from the session's last capture so that only what changed is read again),
//! `bulk` (a big project's first checkpoint written into one pack by `git fast-import`, and the
//! store's object count), `stat_table` (the walk: every path's stat, so that a capture finding
//! nothing changed starts no `git`), `resident_git` (the session's git processes kept running across its captures, so
//! that a capture knowing which files changed starts no process), `resident_slot` (when a
//! session starts, reuses and gives up on them), `restore` (the
//! descriptor-based writer), `record` (the per-session record),
//! `recorder` (a running session's checkpoints around its turns, for the native loop and the
//! workers alike), `modes` (the permission bits a tree lacks), `gc` (retention and garbage
//! collection).

mod bulk;
mod capture;
mod gc;
mod modes;
mod record;
mod recorder;
mod resident_git;
mod resident_slot;
mod restore;
mod stat_table;
mod store_git;
mod taken;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use gc::{GcReport, collect_garbage};
pub use intendant_protocol::checkpoints::{ChangeKind, ConversationCut};
pub use record::{
    Entry, RewindOutcome, RewindPreview, RewindRequest, SessionCheckpoints, TurnCheckpoints,
};
pub use recorder::TurnRecorder;

use crate::record_dir::RecordDir;
use capture::LastTree;
use modes::{Kind, ModeTable};
use restore::{Content, ProjectDir};
use store_git::{EMPTY_TREE, STORE_OUTPUT, StoreGit};

/// Directory under `$INTENDANT_HOME` holding the checkpoint stores, one per project.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// Default of `[checkpoints] max_file_mib`: files larger than this are not captured.
pub const DEFAULT_MAX_FILE_MIB: u64 = 16;
/// Default of `[checkpoints] retention_days`: a session's checkpoints untouched this long are
/// removed by the next garbage collection.
pub const DEFAULT_RETENTION_DAYS: u32 = 30;

/// `[checkpoints]` in `intendant.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// `enabled`: whether sessions checkpoint the project (default true).
    pub enabled: Option<bool>,
    /// `max_file_mib`: files larger than this many MiB are left out (default
    /// [`DEFAULT_MAX_FILE_MIB`]).
    pub max_file_mib: Option<u64>,
    /// `retention_days`: a session's checkpoints whose last checkpoint or rewind is older than
    /// this many days go at the next garbage collection (default [`DEFAULT_RETENTION_DAYS`];
    /// 0 keeps them for ever).
    pub retention_days: Option<u32>,
}

impl CheckpointConfig {
    /// Whether sessions checkpoint the project.
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// The largest file captured, in bytes.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_mib
            .unwrap_or(DEFAULT_MAX_FILE_MIB)
            .saturating_mul(1024 * 1024)
    }

    /// Whether `retention_days` keeps checkpoints for less time than the default: a setting
    /// that can lose a user's undo history, so a project file needs a human's trust for it.
    pub fn shortens_retention(&self) -> bool {
        self.retention_days
            .is_some_and(|days| days != 0 && days < DEFAULT_RETENTION_DAYS)
    }

    /// Whether `max_file_mib` captures less than the default does.
    fn shrinks_capture(&self) -> bool {
        self.max_file_mib
            .is_some_and(|mib| mib < DEFAULT_MAX_FILE_MIB)
    }

    /// The settings that weaken the record of what sessions did, as a file spells them: turning
    /// checkpoints off, capturing fewer files than the default, keeping them for less time. A
    /// session's commands can write `intendant.toml`, so from a project file these count only
    /// once a human trusted it (`trust`); settings that keep more are not listed.
    pub fn weakenings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.enabled() {
            out.push("[checkpoints] enabled = false".to_owned());
        }
        if self.shrinks_capture() {
            out.push(format!(
                "[checkpoints] max_file_mib = {} (under the default {DEFAULT_MAX_FILE_MIB})",
                self.max_file_mib.unwrap_or_default()
            ));
        }
        if self.shortens_retention() {
            out.push(format!(
                "[checkpoints] retention_days = {} (shorter than the default {DEFAULT_RETENTION_DAYS})",
                self.retention_days.unwrap_or_default()
            ));
        }
        out
    }

    /// This configuration with every setting [`CheckpointConfig::weakenings`] lists set back to
    /// its default: what an untrusted file's `[checkpoints]` counts for.
    pub fn without_weakenings(&self) -> CheckpointConfig {
        CheckpointConfig {
            enabled: self.enabled.filter(|on| *on),
            max_file_mib: self.max_file_mib.filter(|_| !self.shrinks_capture()),
            retention_days: self.retention_days.filter(|_| !self.shortens_retention()),
        }
    }

    /// How long a session's checkpoints are kept after its last one (`None`: for ever).
    pub fn retention(&self) -> Option<std::time::Duration> {
        match self.retention_days.unwrap_or(DEFAULT_RETENTION_DAYS) {
            0 => None,
            days => Some(std::time::Duration::from_secs(u64::from(days) * 86_400)),
        }
    }
}

/// Where a session checkpoints its project: what the agent loop opens at the first batch
/// that can change files.
#[derive(Debug, Clone)]
pub struct CheckpointPlan {
    /// The state root (`$INTENDANT_HOME`).
    pub home: PathBuf,
    /// The project root.
    pub project: PathBuf,
    /// `[checkpoints]`.
    pub config: CheckpointConfig,
    /// The session's groups, which every git its checkpoints start enters, at the nice value
    /// of its commands (`None`: the controller's own groups).
    pub placement: Option<crate::containment::Placement>,
}

/// Why a checkpoint, a listing or a rewind failed.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// A file system operation failed.
    #[error("checkpoints: {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The store's git failed.
    #[error("checkpoints: `git {command}` failed: {message}")]
    Git {
        /// The subcommand.
        command: String,
        /// Its error.
        message: String,
    },
    /// A record line other than a torn last one is not a checkpoint.
    #[error("checkpoints: {path} is corrupt: {message}")]
    Corrupt {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A session id with characters a session id never has.
    #[error("invalid session id {id:?}: expected letters, digits, '-' and '_' only")]
    InvalidSessionId {
        /// The id given.
        id: String,
    },
    /// The session has no checkpoint.
    #[error("session {session} has no checkpoints (no batch of it could change files)")]
    NoCheckpoints {
        /// The session.
        session: String,
    },
    /// No turn of that number.
    #[error("session {session} has no turn {turn}; {known}")]
    UnknownTurn {
        /// The session.
        session: String,
        /// The turn asked for.
        turn: u32,
        /// What exists, in words.
        known: String,
    },
    /// Files changed since the session's last checkpoint by something else than the session.
    #[error(
        "refusing to rewind: {} changed since the session's last checkpoint by something other than the session (rewinding would lose that); rerun with --force to rewind anyway",
        files.join(", ")
    )]
    ChangedOutside {
        /// The files, project-relative.
        files: Vec<String>,
    },
    /// There is no rewind left to undo.
    #[error("session {session} has no rewind to undo")]
    NothingToUndo {
        /// The session.
        session: String,
    },
}

impl CheckpointError {
    fn io(path: &Path, source: io::Error) -> CheckpointError {
        CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A path a checkpoint did not capture, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum LeftOut {
    /// A file over `[checkpoints] max_file_mib`.
    TooLarge {
        /// Project-relative path.
        path: String,
        /// Its size.
        bytes: u64,
    },
    /// A repository nested in the project (its own `.git`): its files are its own.
    NestedRepository {
        /// Project-relative path of its directory.
        path: String,
    },
    /// A name that is not UTF-8.
    UnreadableName {
        /// The name, lossily decoded.
        path: String,
    },
    /// A directory whose path is longer than the system takes (`PATH_MAX`, 4096 bytes on
    /// Linux): nothing under it can be read by its path, git included.
    PathTooLong {
        /// Project-relative path of the directory, lossily decoded.
        path: String,
    },
}

impl LeftOut {
    /// The path left out.
    pub fn path(&self) -> &str {
        match self {
            LeftOut::TooLarge { path, .. }
            | LeftOut::NestedRepository { path }
            | LeftOut::UnreadableName { path }
            | LeftOut::PathTooLong { path } => path,
        }
    }

    /// The path and why, for a human.
    pub fn describe(&self) -> String {
        match self {
            LeftOut::TooLarge { path, bytes } => format!(
                "{path} ({} MiB, over [checkpoints] max_file_mib)",
                bytes / (1024 * 1024)
            ),
            LeftOut::NestedRepository { path } => format!("{path} (a nested repository)"),
            LeftOut::UnreadableName { path } => format!("{path} (a name that is not UTF-8)"),
            LeftOut::PathTooLong { path } => {
                // Thousands of bytes of path: its start and end say which.
                let chars: Vec<char> = path.chars().collect();
                let shown = if chars.len() > 120 {
                    let head: String = chars[..60].iter().collect();
                    let tail: String = chars[chars.len() - 40..].iter().collect();
                    format!("{head}...{tail}")
                } else {
                    path.clone()
                };
                format!(
                    "{shown} (a directory whose path, {} bytes, is longer than the system takes: \
                     nothing under it is captured or restored)",
                    path.len()
                )
            }
        }
    }
}

/// The project's tree at one moment: git's tree id and what it does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The tree object in the store.
    pub tree: String,
    /// What was not captured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// The blob in the store holding every permission bit of the tree's files and directories
    /// (`None`: a checkpoint of an older build, which kept only the executable bit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<String>,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Project-relative path.
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// Paths written (created or replaced).
    pub written: Vec<String>,
    /// Paths removed.
    pub removed: Vec<String>,
    /// Paths whose permission bits were set back (their content was already right).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modes_restored: Vec<String>,
    /// Paths the target did not capture, left as they are.
    pub not_restored: Vec<LeftOut>,
}

/// One project's checkpoint store.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    git: StoreGit,
    max_file_bytes: u64,
    /// What a session's in-process walk of the project skips and looks at ([`stat_table`]).
    walk: stat_table::WalkPlan,
}

impl CheckpointStore {
    /// The store of `project` under `home` (made when missing). `project` must exist.
    pub async fn open(
        home: &Path,
        project: &Path,
        config: &CheckpointConfig,
    ) -> Result<CheckpointStore, CheckpointError> {
        let project =
            std::fs::canonicalize(project).map_err(|e| CheckpointError::io(project, e))?;
        let root = home.join(CHECKPOINTS_DIR);
        let key = project_key(&project);
        let dir = root.join(&key);
        let store_dir = RecordDir::create_all(&root)
            .and_then(|r| r.ensure_dir(&key))
            .map_err(|e| CheckpointError::io(&dir, e))?;
        if !store_dir.contains("project") {
            store_dir
                .replace("project", format!("{}\n", project.display()).as_bytes())
                .map_err(|e| CheckpointError::io(&dir.join("project"), e))?;
        }
        let excludes_file = crate::git::GitRepo::discover(&project)
            .ok()
            .flatten()
            .map(|repo| repo.common_dir().join("info").join("exclude"))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("/dev/null"));
        let home_inside = std::fs::canonicalize(home)
            .ok()
            .and_then(|home| home.strip_prefix(&project).ok().map(Path::to_path_buf));
        let walk = stat_table::WalkPlan {
            root: project.clone(),
            skip: home_inside,
            outside: Some(excludes_file.clone())
                .filter(|p| p.as_path() != Path::new("/dev/null"))
                .into_iter()
                .collect(),
        };
        let git = StoreGit {
            git_dir: dir.join("git"),
            work_tree: project.clone(),
            excludes_file,
            placement: None,
        };
        let store = CheckpointStore {
            dir,
            git,
            max_file_bytes: config.max_file_bytes(),
            walk,
        };
        if !store.git.git_dir.join("objects").is_dir() {
            let exclude = state_root_exclude(home, &project)?;
            store.git.ensure(exclude.as_deref()).await?;
        }
        Ok(store)
    }

    /// The project this store checkpoints.
    pub fn project(&self) -> &Path {
        &self.git.work_tree
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The paths that differ from `from` to `to`: in content, in kind, or in any permission
    /// bit (a mode-only change is `Modified`).
    pub async fn changes(
        &self,
        from: &Snapshot,
        to: &Snapshot,
    ) -> Result<Vec<Change>, CheckpointError> {
        if from == to {
            return Ok(Vec::new());
        }
        let mut changes: Vec<Change> = self
            .raw_diff(&from.tree, &to.tree)
            .await?
            .into_iter()
            .map(|d| Change {
                path: d.path,
                kind: d.kind,
            })
            .collect();
        let mut seen: BTreeSet<String> = changes.iter().map(|c| c.path.clone()).collect();
        // A file over the cap is in neither tree: its size says whether it came, went or changed
        // (the same size with other bytes is not seen).
        let large = |snap: &Snapshot| -> std::collections::BTreeMap<String, u64> {
            snap.left_out
                .iter()
                .filter_map(|l| match l {
                    LeftOut::TooLarge { path, bytes } => Some((path.clone(), *bytes)),
                    LeftOut::NestedRepository { .. }
                    | LeftOut::UnreadableName { .. }
                    | LeftOut::PathTooLong { .. } => None,
                })
                .collect()
        };
        let (large_from, large_to) = (large(from), large(to));
        for (path, bytes) in &large_to {
            let kind = match large_from.get(path) {
                Some(old) if old == bytes => continue,
                Some(_) => ChangeKind::Modified,
                None => ChangeKind::Added,
            };
            if seen.insert(path.clone()) {
                changes.push(Change {
                    path: path.clone(),
                    kind,
                });
            }
        }
        for path in large_from.keys().filter(|p| !large_to.contains_key(*p)) {
            if seen.insert(path.clone()) {
                changes.push(Change {
                    path: path.clone(),
                    kind: ChangeKind::Deleted,
                });
            }
        }
        for change in self.mode_changes(from, to).await? {
            if !seen.contains(&change.path) {
                changes.push(Change {
                    path: change.path,
                    kind: ChangeKind::Modified,
                });
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }

    /// The unified diff from `from` to `to`, binary files summarised, then each permission
    /// change git's diff does not show (as `old mode`/`new mode` lines with every bit).
    pub async fn patch(&self, from: &Snapshot, to: &Snapshot) -> Result<String, CheckpointError> {
        let out = self
            .git
            .run(
                &[
                    "diff-tree",
                    "-r",
                    "-p",
                    "--no-renames",
                    "--no-color",
                    &from.tree,
                    &to.tree,
                ],
                None,
                Vec::new(),
            )
            .await?;
        let mut patch = String::from_utf8_lossy(&out).into_owned();
        for change in self.mode_changes(from, to).await? {
            // An executable bit flipped alone is in git's diff already.
            let plain = |m: u32| m == 0o644 || m == 0o755;
            if change.old_kind != change.new_kind && plain(change.old) && plain(change.new) {
                continue;
            }
            let kind = |k: Kind| if k == Kind::Dir { 0o040000 } else { 0o100000 };
            patch.push_str(&format!(
                "diff --intendant a/{path} b/{path}\nold mode {:06o}\nnew mode {:06o}\n",
                kind(change.old_kind) | change.old,
                kind(change.new_kind) | change.new,
                path = change.path,
            ));
        }
        Ok(patch)
    }

    /// The files and directories in both `from` and `to` whose permission bits differ (none
    /// when either snapshot has no mode table).
    async fn mode_changes(
        &self,
        from: &Snapshot,
        to: &Snapshot,
    ) -> Result<Vec<ModeChange>, CheckpointError> {
        let (Some(from_modes), Some(to_modes)) = (&from.modes, &to.modes) else {
            return Ok(Vec::new());
        };
        if from_modes == to_modes {
            // The same table gives every path both trees hold the same mode.
            return Ok(Vec::new());
        }
        let old_table = self.mode_table(from_modes).await?;
        let new_table = self.mode_table(to_modes).await?;
        let old_paths: std::collections::HashMap<String, Kind> =
            self.tree_entries(&from.tree).await?.into_iter().collect();
        let mut out = Vec::new();
        for (path, new_kind) in self.tree_entries(&to.tree).await? {
            let Some(old_kind) = old_paths.get(&path).copied() else {
                continue;
            };
            let old = old_table.mode_of(&path, old_kind);
            let new = new_table.mode_of(&path, new_kind);
            if old != new {
                out.push(ModeChange {
                    path,
                    old_kind,
                    new_kind,
                    old,
                    new,
                });
            }
        }
        Ok(out)
    }

    /// The mode table stored as blob `id`.
    async fn mode_table(&self, id: &str) -> Result<ModeTable, CheckpointError> {
        let bytes = self
            .read_blobs(std::iter::once(id))
            .await?
            .pop()
            .unwrap_or_default();
        ModeTable::decode(&bytes).map_err(|message| CheckpointError::Corrupt {
            path: self.git.git_dir.clone(),
            message: format!("mode table {id}: {message}"),
        })
    }

    /// Every file and directory of `tree` that has a mode of its own (links and nested
    /// repositories have none), with its kind.
    async fn tree_entries(&self, tree: &str) -> Result<Vec<(String, Kind)>, CheckpointError> {
        let out = self
            .git
            .run(&["ls-tree", "-r", "-t", "-z", tree], None, Vec::new())
            .await?;
        let mut entries = Vec::new();
        for line in out.split(|b| *b == 0).filter(|l| !l.is_empty()) {
            let line = std::str::from_utf8(line).map_err(|_| CheckpointError::Git {
                command: "ls-tree".to_owned(),
                message: "a path that is not UTF-8".to_owned(),
            })?;
            let (head, path) = line.split_once('\t').ok_or_else(|| CheckpointError::Git {
                command: "ls-tree".to_owned(),
                message: format!("unexpected line {line:?}"),
            })?;
            let mode = head.split(' ').next().unwrap_or_default();
            if let Some(kind) = Kind::of_git_mode(mode) {
                entries.push((path.to_owned(), kind));
            }
        }
        Ok(entries)
    }

    /// Sets back every permission bit `target`'s mode table records that differs in the
    /// project now, deepest first (a directory's own mode last, so it cannot lock out its
    /// files); links are never followed. Only the paths whose mode can differ are visited: those
    /// `written` (with their kind), the directories above them (a write makes missing ones), and
    /// the paths `current` holds with another mode; every path of the target when `current` has
    /// no mode table.
    async fn restore_modes(
        &self,
        project: &ProjectDir,
        current: &Snapshot,
        target: &Snapshot,
        written: Vec<(String, Kind)>,
        report: &mut RestoreReport,
    ) -> Result<(), CheckpointError> {
        let Some(id) = &target.modes else {
            return Ok(());
        };
        let table = self.mode_table(id).await?;
        let mut entries: Vec<(String, Kind)> = if current.modes.is_some() {
            let mut dirs = BTreeSet::new();
            for (path, _) in &written {
                let mut up = path.as_str();
                while let Some((parent, _)) = up.rsplit_once('/') {
                    if !dirs.insert(parent.to_owned()) {
                        break;
                    }
                    up = parent;
                }
            }
            let changed = self.mode_changes(current, target).await?;
            written
                .into_iter()
                .chain(dirs.into_iter().map(|dir| (dir, Kind::Dir)))
                .chain(changed.into_iter().map(|c| (c.path, c.new_kind)))
                .collect()
        } else {
            self.tree_entries(&target.tree).await?
        };
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        let written: BTreeSet<&str> = report.written.iter().map(String::as_str).collect();
        let mut restored = Vec::new();
        for (path, kind) in entries {
            let mode = table.mode_of(&path, kind);
            let set = project
                .set_mode(&path, mode)
                .map_err(|e| CheckpointError::io(&self.git.work_tree.join(&path), e))?;
            if set && !written.contains(path.as_str()) {
                restored.push(path);
            }
        }
        report.modes_restored.extend(restored);
        report.modes_restored.sort();
        Ok(())
    }

    async fn raw_diff(&self, from: &str, to: &str) -> Result<Vec<RawChange>, CheckpointError> {
        let out = self
            .git
            .run(
                &["diff-tree", "-r", "-z", "--no-renames", "--raw", from, to],
                None,
                Vec::new(),
            )
            .await?;
        parse_raw_diff(&out).map_err(|message| CheckpointError::Git {
            command: "diff-tree --raw".to_owned(),
            message,
        })
    }

    /// What a restore from the tree `from` to the tree `to` writes and removes: their diff and
    /// the contents of every path it writes, read from the store (no project file is touched).
    async fn plan_restore(&self, from: &str, to: &str) -> Result<RestorePlan, CheckpointError> {
        let changes = self.raw_diff(from, to).await?;
        let blobs = self
            .read_blobs(
                changes
                    .iter()
                    .filter_map(|c| c.new.as_ref())
                    .map(|n| n.id.as_str()),
            )
            .await?;
        Ok(RestorePlan {
            from: from.to_owned(),
            changes,
            blobs,
        })
    }

    /// Makes the project what `target` holds, from what `current` (a snapshot taken just now)
    /// holds: every captured path written or removed; a path neither captured (left out of
    /// `target`) is left as it is, as are ignored paths and nested repositories. `unconfirmed`:
    /// the files whose setuid or setgid bit `current`'s table left out (their mode is set too).
    /// `planned`: the plan from `current`'s tree to `target`'s when already made (one from
    /// another tree is made again).
    async fn restore(
        &self,
        current: &Snapshot,
        target: &Snapshot,
        unconfirmed: Vec<(String, Kind)>,
        planned: Option<RestorePlan>,
    ) -> Result<RestoreReport, CheckpointError> {
        let RestorePlan { changes, blobs, .. } = match planned {
            Some(plan) if plan.from == current.tree => plan,
            _ => self.plan_restore(&current.tree, &target.tree).await?,
        };
        let kept: BTreeSet<&str> = target.left_out.iter().map(LeftOut::path).collect();
        let mut report = RestoreReport {
            not_restored: target.left_out.clone(),
            ..RestoreReport::default()
        };
        let project = ProjectDir::open(&self.git.work_tree)
            .map_err(|e| CheckpointError::io(&self.git.work_tree, e))?;
        let in_target: BTreeSet<&str> = changes
            .iter()
            .filter(|c| c.new.is_some())
            .map(|c| c.path.as_str())
            .collect();
        // Too-large files the target did not have at all go; the target's own stay.
        let mut removals: Vec<String> = current
            .left_out
            .iter()
            .filter_map(|l| match l {
                LeftOut::TooLarge { path, .. } => Some(path.as_str()),
                LeftOut::NestedRepository { .. }
                | LeftOut::UnreadableName { .. }
                | LeftOut::PathTooLong { .. } => None,
            })
            .filter(|p| !kept.contains(p) && !in_target.contains(p))
            .map(str::to_owned)
            .collect();
        removals.extend(
            changes
                .iter()
                .filter(|c| matches!(c.kind, ChangeKind::Deleted | ChangeKind::TypeChanged))
                .map(|c| c.path.clone()),
        );
        // Deepest first, so a directory's files go before the directory is pruned.
        removals.sort_by(|a, b| b.cmp(a));
        for path in removals {
            project
                .remove(&path)
                .map_err(|e| CheckpointError::io(&self.git.work_tree.join(&path), e))?;
            report.removed.push(path);
        }
        let mut written = Vec::new();
        let mut writes = Vec::new();
        let targets = changes.into_iter().filter_map(|c| Some((c.path, c.new?)));
        for ((path, new), bytes) in targets.zip(blobs) {
            if let Some(kind) = Kind::of_git_mode(&new.mode) {
                written.push((path.clone(), kind));
            }
            let content = match new.mode.as_str() {
                "120000" => Content::Symlink(bytes),
                mode => Content::File {
                    bytes,
                    executable: mode == "100755",
                },
            };
            writes.push((path, content));
        }
        project
            .write_all(&writes)
            .map_err(|(path, e)| CheckpointError::io(&self.git.work_tree.join(path), e))?;
        report.written = writes.into_iter().map(|(path, _)| path).collect();
        written.extend(unconfirmed);
        self.restore_modes(&project, current, target, written, &mut report)
            .await?;
        Ok(report)
    }

    /// The contents of `ids`, in order: one `cat-file --batch` when they fit in half the output
    /// cap (the usual restore: one process, no size query), else read in batches that stay
    /// under it, their sizes asked first (the first try's output is then lost: at most that
    /// half cap read for nothing).
    async fn read_blobs<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<Vec<u8>>, CheckpointError> {
        self.read_blobs_within(ids.collect(), STORE_OUTPUT / 2)
            .await
    }

    /// [`CheckpointStore::read_blobs`] with `budget` bytes of output per `cat-file`.
    async fn read_blobs_within(
        &self,
        ids: Vec<&str>,
        budget: usize,
    ) -> Result<Vec<Vec<u8>>, CheckpointError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let once = self
            .git
            .run_within(&["cat-file", "--batch"], lines(&ids), budget)
            .await?;
        if let Some(bytes) = once {
            return parse_batch(&bytes, ids.len()).map_err(|message| CheckpointError::Git {
                command: "cat-file --batch".to_owned(),
                message,
            });
        }
        let check = self
            .git
            .run(
                &["cat-file", "--batch-check=%(objectsize)"],
                None,
                lines(&ids),
            )
            .await?;
        let sizes: Vec<usize> = String::from_utf8_lossy(&check)
            .lines()
            .map(|l| l.trim().parse::<usize>().unwrap_or(usize::MAX))
            .collect();
        if sizes.len() != ids.len() || sizes.contains(&usize::MAX) {
            return Err(CheckpointError::Git {
                command: "cat-file --batch-check".to_owned(),
                message: "the store is missing objects a checkpoint names".to_owned(),
            });
        }
        let mut out = Vec::with_capacity(ids.len());
        let mut start = 0;
        while start < ids.len() {
            let mut end = start;
            let mut total = 0usize;
            while end < ids.len() && (end == start || total + sizes[end] + 64 <= budget) {
                total += sizes[end] + 64;
                end += 1;
            }
            let bytes = self
                .git
                .run(&["cat-file", "--batch"], None, lines(&ids[start..end]))
                .await?;
            out.extend(parse_batch(&bytes, end - start).map_err(|message| {
                CheckpointError::Git {
                    command: "cat-file --batch".to_owned(),
                    message,
                }
            })?);
            start = end;
        }
        Ok(out)
    }

    /// The ignored paths of the project now (directories as `dir/`), which no checkpoint holds
    /// and no restore touches.
    pub async fn ignored(&self, index: &Path) -> Result<Vec<String>, CheckpointError> {
        let out = self
            .git
            .run(
                &[
                    "ls-files",
                    "-z",
                    "-o",
                    "-i",
                    "--exclude-standard",
                    "--directory",
                ],
                Some(index),
                Vec::new(),
            )
            .await?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }
}

/// The conversation cuts in force for session `session` of `project` (none when it has no
/// checkpoints), read without opening the store.
pub fn recorded_cuts(
    home: &Path,
    project: &Path,
    session: &str,
) -> Result<Vec<ConversationCut>, CheckpointError> {
    let Ok(project) = std::fs::canonicalize(project) else {
        return Ok(Vec::new());
    };
    let record = record::record_path(
        &home.join(CHECKPOINTS_DIR).join(project_key(&project)),
        session,
    );
    record::cuts_in(&record)
}

/// `items` (as `conversation.jsonl` holds them) without those `cuts` drop.
pub fn apply_cuts<T>(items: Vec<T>, cuts: &[ConversationCut]) -> Vec<T> {
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| {
            let i = *i as u64;
            !cuts.iter().any(|c| c.keep <= i && i < c.until)
        })
        .map(|(_, item)| item)
        .collect()
}

/// A blob a diff names on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BlobRef {
    mode: String,
    id: String,
}

/// A permission change of one path present on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModeChange {
    path: String,
    old_kind: Kind,
    new_kind: Kind,
    old: u32,
    new: u32,
}

/// One line of `diff-tree --raw`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawChange {
    path: String,
    kind: ChangeKind,
    /// What the path becomes (`None`: it goes).
    new: Option<BlobRef>,
}

/// A restore read ahead from the store: the diff from the tree `from` and the contents of each
/// path it writes, in order.
struct RestorePlan {
    from: String,
    changes: Vec<RawChange>,
    blobs: Vec<Vec<u8>>,
}

/// Reads `diff-tree -r -z --raw` output: `:OLDMODE NEWMODE OLDID NEWID STATUS\0PATH\0` each.
fn parse_raw_diff(out: &[u8]) -> Result<Vec<RawChange>, String> {
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut changes = Vec::new();
    while let Some(head) = fields.next() {
        let head = String::from_utf8_lossy(head);
        let path = fields
            .next()
            .ok_or_else(|| format!("a change without its path: {head}"))?;
        let path =
            String::from_utf8(path.to_vec()).map_err(|_| "a path that is not UTF-8".to_owned())?;
        let parts: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
        let [_, new_mode, _, new_id, status] = parts.as_slice() else {
            return Err(format!("unexpected diff line {head:?}"));
        };
        let (kind, new) = match status.chars().next() {
            Some('A') => (ChangeKind::Added, true),
            Some('M') => (ChangeKind::Modified, true),
            Some('T') => (ChangeKind::TypeChanged, true),
            Some('D') => (ChangeKind::Deleted, false),
            _ => return Err(format!("unexpected diff status {status:?} for {path}")),
        };
        // A nested repository recorded as a gitlink has no content here.
        if *new_mode == "160000" {
            continue;
        }
        changes.push(RawChange {
            path,
            kind,
            new: new.then(|| BlobRef {
                mode: (*new_mode).to_owned(),
                id: (*new_id).to_owned(),
            }),
        });
    }
    Ok(changes)
}

/// Reads `cat-file --batch` output: `ID TYPE SIZE\n<SIZE bytes>\n` per object.
fn parse_batch(mut out: &[u8], expected: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut blobs = Vec::with_capacity(expected);
    while blobs.len() < expected {
        let nl = out
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("a cut object header")?;
        let header = String::from_utf8_lossy(&out[..nl]).into_owned();
        if header.ends_with(" missing") {
            return Err("the store is missing objects a checkpoint names".to_owned());
        }
        let size: usize = header
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("unexpected object header {header:?}"))?;
        let body = out.get(nl + 1..nl + 1 + size).ok_or("a cut object body")?;
        blobs.push(body.to_vec());
        out = out.get(nl + 2 + size..).unwrap_or_default();
    }
    Ok(blobs)
}

fn lines(ids: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for id in ids {
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    out
}

/// The `info/exclude` line that keeps a state root inside the project out of its store (the
/// store would hold itself); `None` when the state root is elsewhere.
fn state_root_exclude(home: &Path, project: &Path) -> Result<Option<String>, CheckpointError> {
    let home = std::fs::canonicalize(home).map_err(|e| CheckpointError::io(home, e))?;
    Ok(home
        .strip_prefix(project)
        .ok()
        .map(|rel| format!("/{}/\n", rel.display())))
}

/// `<basename>-<first 16 hex digits of the SHA-256 of the path>`: one store per project
/// directory, recognisable by a human.
fn project_key(project: &Path) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        project.as_os_str().as_encoded_bytes(),
    );
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let base: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if base.is_empty() {
        hex
    } else {
        format!("{base}-{hex}")
    }
}

/// The empty tree, the snapshot of a project that holds nothing.
pub fn empty_snapshot() -> Snapshot {
    Snapshot {
        tree: EMPTY_TREE.to_owned(),
        left_out: Vec::new(),
        modes: None,
    }
}

#[cfg(test)]
mod tests;

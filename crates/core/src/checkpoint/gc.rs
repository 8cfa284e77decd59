//! Retention and garbage collection of the checkpoint stores: a session's checkpoints whose
//! last checkpoint or rewind is older than `[checkpoints] retention_days` go, then every object
//! of the store that no kept record names (through its trees and mode tables) is removed.
//!
//! The order makes a collection killed at any point leave every store consistent:
//! 1. `gc.lock` is taken exclusively, so no checkpoint, rewind or listing of the store runs
//!    meanwhile (each holds it shared); a session whose own `lock` is held is kept whatever its age.
//! 2. An expired session's directory is renamed to `sessions/.expired-<id>` (one atomic step: the
//!    session is there or gone) and then removed; a kill in between leaves a `.expired-` directory
//!    the next collection removes.
//! 3. Every tree and mode table a kept record names (and the store holds) becomes a ref in
//!    `git/packed-refs`, written under a temporary name and renamed over the old one.
//! 4. `git prune` removes the loose objects those refs do not reach, one file at a time: killed,
//!    it leaves only unreferenced objects, which the next collection removes. A store with packs
//!    (a big project's first checkpoint writes one) is then packed again by `git repack -a -d`
//!    when a session went or it holds several: the new pack holds only what the refs reach, and
//!    the old ones go once it is complete (killed before, both are there).
//!
//! A record that cannot be read stops the collection of its store before anything is pruned,
//! naming it: nothing a session may still need is ever removed on a guess.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::bulk::ObjectCount;
use super::record::{Entry, GC_LOCK, LOCK_FILE, RECORD_FILE, SESSIONS_DIR, lock, try_lock};
use super::store_git::{EMPTY_TREE, StoreGit};
use super::{CHECKPOINTS_DIR, CheckpointError};
use crate::record_dir::RecordDir;
use crate::session_log::jsonl::read_jsonl;

/// Prefix of a session directory being removed.
const EXPIRED_PREFIX: &str = ".expired-";
/// The namespace of the refs that keep objects.
const KEEP_REFS: &str = "refs/intendant/keep/";

/// What one store's collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// The store's directory.
    pub store: PathBuf,
    /// The project it checkpoints, as its `project` file names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<PathBuf>,
    /// Sessions whose checkpoints were removed (past their retention).
    pub sessions_removed: Vec<String>,
    /// Sessions kept.
    pub sessions_kept: usize,
    /// Objects removed (loose ones, and packed ones no kept record reaches).
    pub objects_removed: u64,
    /// Bytes those took on disk (as `git count-objects` counts them; a pack written again
    /// counts at its new size).
    pub bytes_freed: u64,
    /// Objects a kept record names that the store no longer holds (a damaged store: those
    /// checkpoints cannot be restored).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Why this store was not collected (nothing was removed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Collects every checkpoint store under `home`, as of `now`: `retention` gives how long the
/// sessions of a project (`None`: its directory is gone) are kept (`None`: for ever). One
/// store's failure is in its report; the others are still collected.
pub async fn collect_garbage(
    home: &Path,
    now: SystemTime,
    retention: impl Fn(Option<&Path>) -> Option<Duration>,
) -> Result<Vec<GcReport>, CheckpointError> {
    let root = home.join(CHECKPOINTS_DIR);
    let stores = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CheckpointError::io(&root, e)),
    };
    let mut dirs: Vec<PathBuf> = stores
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut reports = Vec::new();
    for dir in dirs {
        let project = std::fs::read_to_string(dir.join("project"))
            .ok()
            .map(|p| PathBuf::from(p.trim_end_matches('\n')))
            .filter(|p| p.is_dir());
        let keep = retention(project.as_deref());
        let mut report = GcReport {
            store: dir.clone(),
            project,
            ..GcReport::default()
        };
        if let Err(e) = collect_store(&dir, keep, now, &mut report).await {
            report.error = Some(e.to_string());
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Collects the store at `dir` (see the module's steps).
async fn collect_store(
    dir: &Path,
    retention: Option<Duration>,
    now: SystemTime,
    report: &mut GcReport,
) -> Result<(), CheckpointError> {
    let store = RecordDir::open(dir).map_err(|e| CheckpointError::io(dir, e))?;
    let _lock = lock(&store, GC_LOCK, true).await?;
    let mut roots = BTreeSet::new();
    if store.contains(SESSIONS_DIR) {
        let sessions = store
            .open_dir(SESSIONS_DIR)
            .map_err(|e| CheckpointError::io(&dir.join(SESSIONS_DIR), e))?;
        expire_sessions(&sessions, retention, now, report, &mut roots)?;
    }
    let git = StoreGit {
        git_dir: dir.join("git"),
        work_tree: dir.to_path_buf(),
        excludes_file: PathBuf::from("/dev/null"),
        placement: None,
    };
    if !git.git_dir.join("objects").is_dir() {
        return Ok(());
    }
    roots.remove(EMPTY_TREE);
    let roots: Vec<String> = roots.into_iter().collect();
    let held = present(&git, &roots).await?;
    report.missing = roots
        .iter()
        .zip(&held)
        .filter(|(_, held)| !**held)
        .map(|(id, _)| id.clone())
        .collect();
    let kept: Vec<&str> = roots
        .iter()
        .zip(&held)
        .filter(|(_, held)| **held)
        .map(|(id, _)| id.as_str())
        .collect();
    write_keep_refs(&git.git_dir, &kept)?;
    let before = ObjectCount::of(&git).await?;
    git.run(&["prune", "--expire=now"], None, Vec::new())
        .await?;
    // A first checkpoint's pack (see `bulk`): packed again with only what the refs reach, once
    // a session went or when there are several.
    if before.packs > 1 || (before.packs == 1 && !report.sessions_removed.is_empty()) {
        git.run(&["repack", "-a", "-d", "-q"], None, Vec::new())
            .await?;
    }
    let after = ObjectCount::of(&git).await?;
    report.objects_removed = before.objects().saturating_sub(after.objects());
    report.bytes_freed = before.bytes().saturating_sub(after.bytes());
    Ok(())
}

/// Removes the expired sessions of `sessions` (and what a killed collection left), and adds
/// every object the kept ones name to `roots`. Every kept record is read before anything is
/// removed, so one that cannot be read leaves the store as it was.
fn expire_sessions(
    sessions: &RecordDir,
    retention: Option<Duration>,
    now: SystemTime,
    report: &mut GcReport,
    roots: &mut BTreeSet<String>,
) -> Result<(), CheckpointError> {
    let path = sessions.path().to_path_buf();
    let mut names: Vec<String> = std::fs::read_dir(&path)
        .map_err(|e| CheckpointError::io(&path, e))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut leftovers = Vec::new();
    let mut expired = Vec::new();
    for name in names {
        let dir = path.join(&name);
        if name.starts_with(EXPIRED_PREFIX) {
            leftovers.push(dir);
            continue;
        }
        let record = dir.join(RECORD_FILE);
        let last = std::fs::symlink_metadata(&record)
            .or_else(|_| std::fs::symlink_metadata(&dir))
            .and_then(|m| m.modified())
            .map_err(|e| CheckpointError::io(&record, e))?;
        if retention.is_some_and(|keep| now.duration_since(last).is_ok_and(|age| age > keep)) {
            let session = sessions
                .open_dir(&name)
                .map_err(|e| CheckpointError::io(&dir, e))?;
            // A session in use (its lock held) is kept, however old its last checkpoint.
            if let Some(held) = try_lock(&session, LOCK_FILE, true)? {
                expired.push((name, held));
                continue;
            }
        }
        let entries = read_jsonl::<Entry>(&record).map_err(|e| CheckpointError::Corrupt {
            path: record.clone(),
            message: format!("{e}; nothing of this store was removed"),
        })?;
        for entry in &entries.records {
            let snapshots = match entry {
                Entry::Before { snapshot, .. } | Entry::After { snapshot, .. } => vec![snapshot],
                Entry::Rewind { from, to, .. } => vec![from, to],
            };
            for snapshot in snapshots {
                roots.insert(snapshot.tree.clone());
                roots.extend(snapshot.modes.clone());
            }
        }
        report.sessions_kept += 1;
    }
    for dir in leftovers {
        std::fs::remove_dir_all(&dir).map_err(|e| CheckpointError::io(&dir, e))?;
    }
    for (name, _held) in expired {
        let dir = path.join(&name);
        let gone = path.join(format!("{EXPIRED_PREFIX}{name}"));
        std::fs::rename(&dir, &gone).map_err(|e| CheckpointError::io(&dir, e))?;
        std::fs::remove_dir_all(&gone).map_err(|e| CheckpointError::io(&gone, e))?;
        report.sessions_removed.push(name);
    }
    Ok(())
}

/// Whether the store holds each of `ids`.
async fn present(git: &StoreGit, ids: &[String]) -> Result<Vec<bool>, CheckpointError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for id in ids {
        input.extend_from_slice(id.as_bytes());
        input.push(b'\n');
    }
    let out = git
        .run(&["cat-file", "--batch-check=%(objectname)"], None, input)
        .await?;
    let answers: Vec<bool> = String::from_utf8_lossy(&out)
        .lines()
        .map(|l| !l.ends_with(" missing"))
        .collect();
    if answers.len() != ids.len() {
        return Err(CheckpointError::Git {
            command: "cat-file --batch-check".to_owned(),
            message: format!("{} answers for {} objects", answers.len(), ids.len()),
        });
    }
    Ok(answers)
}

/// Makes `ids` the store's refs: `packed-refs` written under a temporary name and renamed over
/// the old one, so a kill leaves the old set or the new one.
fn write_keep_refs(git_dir: &Path, ids: &[&str]) -> Result<(), CheckpointError> {
    let mut text = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for id in ids {
        text.push_str(&format!("{id} {KEEP_REFS}{id}\n"));
    }
    let tmp = git_dir.join("packed-refs.intendant-tmp");
    let target = git_dir.join("packed-refs");
    std::fs::write(&tmp, text).map_err(|e| CheckpointError::io(&tmp, e))?;
    std::fs::rename(&tmp, &target).map_err(|e| CheckpointError::io(&target, e))
}

//! Taking a snapshot of the project through a session's index. The session first walks the
//! project in-process ([`StatTable`]) and compares it with its last walk: nothing moved, and the
//! last tree, mode table and left-out paths hold (no `git` runs); only files and links the index
//! holds changed or went, and the session's resident git ([`ResidentSlot`]) hashes those files
//! and makes the trees of the directories above them (no process started; the index is left
//! behind, and git's stat compare lists what it lacks at the next listed capture), or, for a
//! link or when a resident process failed, the index takes just those paths before git writes
//! the tree (two processes). Otherwise git lists what changed since the index last saw the
//! project (`ls-files -o` for new files and `diff-files` for every file whose stat differs from
//! the index's, side by side), the index takes that, git writes the tree, and the modes of what
//! changed are read ([`CarriedModes`]) while it does.
//!
//! The walk comes before anything git reads, so whatever git hashes is at least as new as the
//! table, and a change made after the walk is seen by the next one. Nothing else walks the whole
//! tree while a session's last capture is carried ([`LastTree`]): git does not print the paths
//! it found unchanged, a capture that finds nothing changed writes no index, and an unchanged
//! mode table is not stored again. The first capture of a process (or one after the index
//! changed under it, as a rewind from another process does) lists every path and reads every
//! mode. A session whose project holds more paths than a table does walks no more: git's listing
//! decides each of its captures, but for the one right after a rewind or undo, which takes the
//! paths the restore wrote, removed or re-moded as a walk's known change
//! ([`CheckpointStore::snapshot_restored`]).

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::modes::{CarriedModes, FileStamp, Listed, now_seconds};
use super::resident_slot::ResidentSlot;
use super::stat_table::{PathKind, StatTable};
use super::store_git::EMPTY_TREE;
use super::{CheckpointError, CheckpointStore, LeftOut, Snapshot};

impl CheckpointStore {
    /// Captures the project now, through `index` (kept between calls: git's stat cache makes
    /// the next capture rehash only what changed).
    pub async fn snapshot(&self, index: &Path) -> Result<Snapshot, CheckpointError> {
        self.snapshot_cached(index, None).await
    }

    /// [`CheckpointStore::snapshot`], carrying what this capture learnt in `last` to the next:
    /// while the index is as the last capture left it, only what git lists as changed is read.
    pub(super) async fn snapshot_cached(
        &self,
        index: &Path,
        last: Option<&LastTree>,
    ) -> Result<Snapshot, CheckpointError> {
        let started = now_seconds();
        let carried = last.and_then(|l| l.take(&IndexStamp::of(index)));
        // The project's stats, taken before git lists anything: what git hashes is then at
        // least as new as the table, so a change made after the walk is seen by the next one.
        let (carried, table) = self.walk_project(last, carried).await;
        let delta = match (&carried, &table) {
            (Some(carried), Some(now)) => carried.delta(now, self.max_file_bytes),
            _ => Delta::Unknown,
        };
        let too_long: Vec<LeftOut> = table.as_ref().map_or_else(Vec::new, |table| {
            table
                .too_long()
                .map(|dir| LeftOut::PathTooLong {
                    path: String::from_utf8_lossy(dir).into_owned(),
                })
                .collect()
        });
        let mut snapshot = match (delta, carried, last) {
            (Delta::Nothing, Some(carried), Some(last)) => carried.reused(table, last),
            (Delta::Tracked(paths), Some(carried), Some(last)) => {
                self.capture_known(index, last, carried, paths, table, started)
                    .await?
            }
            (_, carried, _) => {
                self.capture_listed(index, last, carried, table, started)
                    .await?
            }
        };
        // What git's listing cannot see either (it only warns): named by the walk, every time.
        if !too_long.is_empty() {
            snapshot.left_out.extend(too_long);
            snapshot.left_out.sort();
            snapshot.left_out.dedup();
        }
        Ok(snapshot)
    }

    /// The capture right after a restore that wrote or set the mode of `touched` and removed
    /// `removed` (paths of files and links), all from the project the session's last capture
    /// found: for a session that walks no more (a big tree, where a listing walks every
    /// directory and `lstat`s every file), the index takes just those paths and git writes the
    /// tree, as after a walk that found only them changed. Anything else is a capture as usual:
    /// a session that walks (its walk is cheap), no carried capture, or a restored ignore file
    /// (what it ignores now only a listing can say).
    pub(super) async fn snapshot_restored(
        &self,
        index: &Path,
        last: &LastTree,
        touched: &[String],
        removed: &[String],
    ) -> Result<Snapshot, CheckpointError> {
        if last.walks() || touched.iter().chain(removed).any(|p| listing_only(p)) {
            return self.snapshot_cached(index, Some(last)).await;
        }
        let Some(mut carried) = last.take(&IndexStamp::of(index)) else {
            return self.snapshot_cached(index, Some(last)).await;
        };
        let started = now_seconds();
        let root = &self.git.work_tree;
        // A removed path is in the index, or was a file over the cap (which the index never
        // held and, once a directory is made in its place, `update-index` refuses).
        let large: BTreeSet<&str> = carried.left_out.iter().map(LeftOut::path).collect();
        let mut paths: Vec<String> = removed
            .iter()
            .filter(|p| !large.contains(p.as_str()))
            .chain(touched.iter().filter(|p| captured_kind(root, p)))
            .cloned()
            .collect();
        paths.sort();
        paths.dedup();
        let gone: BTreeSet<&str> = touched.iter().chain(removed).map(String::as_str).collect();
        carried.left_out.retain(|l| !gone.contains(l.path()));
        self.capture_known(index, last, carried, paths, None, started)
            .await
    }

    /// A capture through git's listing of what changed since the index last saw the project
    /// (what [`CheckpointStore::capture_known`] cannot take: new paths, ignore files, the first
    /// capture of a process). With a stat `table`, the listing names every path the index
    /// holds too, so the next capture knows which paths are captured.
    async fn capture_listed(
        &self,
        index: &Path,
        last: Option<&LastTree>,
        carried: Option<Carried>,
        table: Option<StatTable>,
        started: i64,
    ) -> Result<Snapshot, CheckpointError> {
        let full = carried.is_none();
        let root = self.git.work_tree.clone();
        let again = carried
            .as_ref()
            .map(|c| c.modes.recheck_now(&root))
            .unwrap_or_default();
        // Both walk the tree, each its own way: the new files, and every file whose stat
        // differs from the index's (`ls-files -m` would compare the content of a file whose
        // ctime alone moved and call it unchanged: a `chmod` would escape it).
        let names = table.is_some();
        let nothing = full
            && table.as_ref().is_some_and(StatTable::is_empty)
            && std::fs::symlink_metadata(index).is_err();
        let (listed, dirty) = self.git_listing(index, full || names, nothing).await?;
        let store = self.clone();
        let listing = tokio::task::spawn_blocking(move || {
            let dirty = dirty_paths(&dirty).map(|path| (b'C', path));
            let listed = listed
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(tagged);
            store.sort_listing(dirty.chain(listed), full, names, started)
        })
        .await
        .map_err(|e| CheckpointError::Io {
            path: root.clone(),
            source: io::Error::other(format!("reading the listing: {e}")),
        })?;
        let unchanged = listing.update.is_empty() && listing.drop.is_empty();
        let read = ModeReads {
            root,
            again,
            gone: listing.gone,
            held: listing.held,
            started,
        };
        let (tree, modes) = match carried {
            // An index behind the last tree would list nothing for what it lacks.
            Some(Carried {
                tree,
                modes,
                index_behind: false,
                ..
            }) if unchanged => (tree, read.run(Some(modes), listing.changed).await?),
            carried => {
                if carried.is_none() {
                    self.prepack_first(&listing.update, last).await;
                }
                self.update_index(index, &listing.update, &listing.drop)
                    .await?;
                let modes = read.run(carried.map(|c| c.modes), listing.changed);
                let (tree, modes) = tokio::join!(self.write_tree(index, nothing), modes);
                (tree?, modes?)
            }
        };
        let mut modes = modes;
        let blob = self.stored_modes(&mut modes).await?;
        if let Some(last) = last {
            let stamp = IndexStamp::of(index);
            let tracked = table.is_some().then(|| {
                let mut tracked: HashSet<String> = listing.indexed.into_iter().collect();
                let root = &self.git.work_tree;
                for path in listing.update.split(|b| *b == 0).filter(|p| !p.is_empty()) {
                    let path = String::from_utf8_lossy(path).into_owned();
                    if captured_kind(root, &path) {
                        tracked.insert(path);
                    } else {
                        tracked.remove(&path);
                    }
                }
                for path in listing.drop.split(|b| *b == 0).filter(|p| !p.is_empty()) {
                    tracked.remove(String::from_utf8_lossy(path).as_ref());
                }
                tracked
            });
            last.put(Carried {
                stamp,
                tree: tree.clone(),
                modes,
                left_out: listing.left_out.clone(),
                table: table.map(StatTable::settled),
                tracked,
                index_behind: false,
            });
        }
        Ok(Snapshot {
            tree,
            left_out: listing.left_out,
            modes: Some(blob),
        })
    }

    /// A capture that knows from the session's walk what changed since its last one: only
    /// files and links the index holds, changed or gone (`paths`), and directories. For a
    /// session that walks (`table`), its resident git ([`ResidentSlot`]) hashes those files and
    /// makes the directories on their paths again, starting no process and leaving the index
    /// behind; else the index takes
    /// those paths and git writes the tree (two processes; git's listing when the index is
    /// behind). No git at all when `paths` is empty. The modes of those paths and of every
    /// directory are read.
    async fn capture_known(
        &self,
        index: &Path,
        last: &LastTree,
        carried: Carried,
        paths: Vec<String>,
        table: Option<StatTable>,
        started: i64,
    ) -> Result<Snapshot, CheckpointError> {
        let root = self.git.work_tree.clone();
        let again = carried.modes.recheck_now(&root);
        let mut changed = Vec::with_capacity(paths.len());
        for path in &paths {
            // Read before git hashes it, as a listed file's is (see `modes`).
            let stamp = std::fs::symlink_metadata(root.join(path))
                .ok()
                .filter(std::fs::Metadata::is_file)
                .map(|meta| FileStamp::of(&meta));
            changed.push((path.clone(), stamp));
        }
        // Only for a session that walks: the capture after a big tree's restore (no table) takes
        // the index's way, and the listed captures that follow it find the index level.
        let resident = if paths.is_empty() || table.is_none() {
            None
        } else {
            self.resident_tree(&last.resident, &carried.tree, &changed)
                .await
        };
        if resident.is_none() && !paths.is_empty() && carried.index_behind {
            // The index lacks what resident captures took: git's listing brings it level.
            return self
                .capture_listed(index, Some(last), Some(carried), table, started)
                .await;
        }
        let Carried {
            modes,
            left_out,
            tracked,
            tree: carried_tree,
            index_behind,
            ..
        } = carried;
        let read = ModeReads {
            root: root.clone(),
            again,
            gone: Vec::new(),
            held: Vec::new(),
            started,
        };
        let (tree, mut modes, index_behind) = match resident {
            _ if paths.is_empty() => (
                carried_tree,
                read.run(Some(modes), changed).await?,
                index_behind,
            ),
            Some(tree) => (tree, read.run(Some(modes), changed).await?, true),
            None => {
                let mut update = Vec::new();
                for path in &paths {
                    update.extend_from_slice(path.as_bytes());
                    update.push(0);
                }
                self.update_index(index, &update, &[]).await?;
                let modes = read.run(Some(modes), changed);
                let (tree, modes) = tokio::join!(self.write_tree(index, false), modes);
                (tree?, modes?, false)
            }
        };
        let blob = self.stored_modes(&mut modes).await?;
        let mut tracked = tracked.unwrap_or_default();
        for path in paths {
            if !captured_kind(&root, &path) {
                tracked.remove(&path);
            }
        }
        last.put(Carried {
            stamp: IndexStamp::of(index),
            tree: tree.clone(),
            modes,
            left_out: left_out.clone(),
            table: table.map(StatTable::settled),
            tracked: Some(tracked),
            index_behind,
        });
        Ok(Snapshot {
            tree,
            left_out,
            modes: Some(blob),
        })
    }

    /// The blob `modes`' table is stored as, stored now when it changed since it last was.
    async fn stored_modes(&self, modes: &mut CarriedModes) -> Result<String, CheckpointError> {
        if let Some(blob) = modes.blob() {
            return Ok(blob.to_owned());
        }
        let blob = self.store_modes(modes).await?;
        modes.stored(blob.clone());
        Ok(blob)
    }

    /// Walks the project in-process ([`StatTable`]) for a session that carries its captures
    /// (`last`), on a blocking thread: the table, and `carried` handed back (the walk compares
    /// with its table). No table when the session walks no more (its tree is too big, which
    /// this walk can find), or when the walk failed (a directory unreadable, an entry gone
    /// meanwhile: git's listing decides this time).
    async fn walk_project(
        &self,
        last: Option<&LastTree>,
        carried: Option<Carried>,
    ) -> (Option<Carried>, Option<StatTable>) {
        let Some(last) = last.filter(|l| l.walks()) else {
            return (carried, None);
        };
        let plan = self.walk.clone();
        let work = tokio::task::spawn_blocking(move || {
            let table = StatTable::take(&plan, carried.as_ref().and_then(|c| c.table.as_ref()));
            (carried, table)
        });
        match work.await {
            Ok((carried, Ok(Some(table)))) => (carried, Some(table)),
            Ok((carried, Ok(None))) => {
                last.stop_walking();
                (carried, None)
            }
            Ok((carried, Err(_))) => (carried, None),
            Err(_) => (None, None),
        }
    }

    /// Sorts what git listed, each path with its `ls-files -t` tag: what the index must update
    /// or drop, what is left out, the files git listed as changed or new (read now, before git
    /// hashes them), and, with `full`, every file the index holds unchanged, read now (the
    /// capture began at `started`).
    fn sort_listing<'a>(
        &self,
        listed: impl Iterator<Item = (u8, &'a [u8])>,
        full: bool,
        names: bool,
        started: i64,
    ) -> Listing {
        let mut listing = Listing::default();
        let mut left_out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut held = Vec::new();
        for (tag, raw) in listed {
            let Ok(path) = std::str::from_utf8(raw) else {
                left_out.insert(LeftOut::UnreadableName {
                    path: String::from_utf8_lossy(raw).into_owned(),
                });
                continue;
            };
            // `H`: in the index (listed with `-c` only); `C`: its stat differs from the index's
            // (changed, deleted, or only its mode or times); `?`: new.
            if tag == b'H' || tag == b'S' {
                held.push(path);
                continue;
            }
            if !seen.insert(path) {
                continue;
            }
            if let Some(dir) = path.strip_suffix('/') {
                left_out.insert(LeftOut::NestedRepository {
                    path: dir.to_owned(),
                });
                continue;
            }
            match std::fs::symlink_metadata(self.git.work_tree.join(path)) {
                Ok(meta) if meta.is_file() && meta.len() > self.max_file_bytes => {
                    left_out.insert(LeftOut::TooLarge {
                        path: path.to_owned(),
                        bytes: meta.len(),
                    });
                    // A file the index never held (`?`) has nothing to drop.
                    if tag != b'?' {
                        listing.drop.extend_from_slice(raw);
                        listing.drop.push(0);
                    }
                    listing.gone.push(path.to_owned());
                }
                found => {
                    let stamp = found
                        .ok()
                        .filter(std::fs::Metadata::is_file)
                        .map(|meta| FileStamp::of(&meta));
                    listing.changed.push((path.to_owned(), stamp));
                    listing.update.extend_from_slice(raw);
                    listing.update.push(0);
                }
            }
        }
        if names {
            listing.indexed = held.iter().map(|path| (*path).to_owned()).collect();
        }
        if full {
            // With `-c`, a changed file is listed as held too: it is read as changed.
            for path in held.into_iter().filter(|path| !seen.contains(path)) {
                let Ok(meta) = std::fs::symlink_metadata(self.git.work_tree.join(path)) else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let stamp = FileStamp::of(&meta);
                if stamp.special() && !stamp.changed_before(started - 1) {
                    // A setuid or setgid file changed just now: hashed again, so that its bit
                    // is kept with the content git stores (see `modes`).
                    listing.update.extend_from_slice(path.as_bytes());
                    listing.update.push(0);
                    listing.changed.push((path.to_owned(), Some(stamp)));
                } else {
                    listing.held.push((path.to_owned(), stamp));
                }
            }
        }
        listing.left_out = left_out.into_iter().collect();
        listing
    }

    /// Brings `index` up to date: adds, updates or removes the NUL-ended paths of `update`, drops
    /// those of `drop`.
    async fn update_index(
        &self,
        index: &Path,
        update: &[u8],
        drop: &[u8],
    ) -> Result<(), CheckpointError> {
        if !update.is_empty() {
            self.git
                .run(
                    &[
                        "update-index",
                        "--add",
                        "--remove",
                        "--replace",
                        "-z",
                        "--stdin",
                    ],
                    Some(index),
                    update.to_vec(),
                )
                .await?;
            self.correct_taken(index, update).await?;
        }
        if !drop.is_empty() {
            self.git
                .run(
                    &["update-index", "--force-remove", "-z", "--stdin"],
                    Some(index),
                    drop.to_vec(),
                )
                .await?;
        }
        Ok(())
    }

    /// Sets each regular file git just took of `update` into `index` to what the project holds
    /// at its path, read with no link followed ([`super::taken`]): git followed a link a
    /// command swapped in between its `lstat` and its `open`.
    async fn correct_taken(&self, index: &Path, update: &[u8]) -> Result<(), CheckpointError> {
        let root = self.git.work_tree.clone();
        let index_path = index.to_path_buf();
        let objects = self.git.git_dir.join("objects");
        let paths = update.to_vec();
        let max = self.max_file_bytes;
        let corrections = tokio::task::spawn_blocking(move || {
            super::taken::check(&root, &index_path, &objects, &paths, max)
        })
        .await
        .map_err(|e| CheckpointError::io(index, io::Error::other(e.to_string())))??;
        if corrections.is_empty() {
            return Ok(());
        }
        self.git
            .run(
                &["update-index", "-z", "--index-info"],
                Some(index),
                super::taken::index_info(&corrections),
            )
            .await
            .map(drop)
    }

    /// `ls-files` (every path the index holds too, with `names`) beside `diff-files`, as
    /// [`CheckpointStore::capture_listed`] reads them. With `nothing` (a walk that found no path
    /// at all, and no index yet: a new session's first capture of an empty directory) git would
    /// list nothing, so it does not start: the walk saw every path, ignored ones too, before git
    /// would have listed.
    async fn git_listing(
        &self,
        index: &Path,
        names: bool,
        nothing: bool,
    ) -> Result<(Vec<u8>, Vec<u8>), CheckpointError> {
        if nothing {
            return Ok((Vec::new(), Vec::new()));
        }
        let args = ls_files_args(names);
        let (listed, dirty) = tokio::join!(
            self.git.run(&args, Some(index), Vec::new()),
            self.diff_files(index),
        );
        Ok((listed?, dirty?))
    }

    /// Writes `index`'s tree; with `nothing` (see [`CheckpointStore::git_listing`]) the index is
    /// empty and the tree the empty tree, which git need not start to write.
    async fn write_tree(&self, index: &Path, nothing: bool) -> Result<String, CheckpointError> {
        if nothing {
            return Ok(EMPTY_TREE.to_owned());
        }
        let tree = self
            .git
            .run(&["write-tree"], Some(index), Vec::new())
            .await?;
        Ok(String::from_utf8_lossy(&tree).trim().to_owned())
    }

    /// `git diff-files -z` on `index`: every file whose stat differs from the index's. With no
    /// index yet (a session's first capture in a new store) nothing can differ from it, and git
    /// need not start to say so.
    async fn diff_files(&self, index: &Path) -> Result<Vec<u8>, CheckpointError> {
        if std::fs::symlink_metadata(index).is_err() {
            return Ok(Vec::new());
        }
        self.git
            .run(&["diff-files", "-z"], Some(index), Vec::new())
            .await
    }

    /// Stores `modes`' table; its blob.
    async fn store_modes(&self, modes: &CarriedModes) -> Result<String, CheckpointError> {
        self.git.write_blob(modes.table().encode()).await
    }
}

/// Whether a change to `path` only git's listing can sort: an ignore file (what it ignores
/// changes with it) or a `.git` (a nested repository).
fn listing_only(path: &str) -> bool {
    matches!(path.rsplit('/').next(), Some(".git" | ".gitignore"))
}

/// Whether `rel` under `root` is something the index holds after `update-index --add
/// --remove` took it: a file or a link (not a directory, and not gone).
fn captured_kind(root: &Path, rel: &str) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok_and(|meta| !meta.is_dir())
}

/// `ls-files` listing the files new since the index last saw the project, with `full` every
/// file it holds as well.
fn ls_files_args(full: bool) -> Vec<&'static str> {
    let mut args = vec!["ls-files", "-z", "-t"];
    if full {
        args.push("-c");
    }
    args.extend(["-o", "--exclude-standard"]);
    args
}

/// One `ls-files -t` entry: its tag and path.
fn tagged(entry: &[u8]) -> (u8, &[u8]) {
    match entry {
        [tag, b' ', raw @ ..] => (*tag, raw),
        _ => (b'?', entry),
    }
}

/// The paths of `diff-files -z` output (`:OLDMODE NEWMODE OLDID NEWID STATUS\0PATH\0` each).
fn dirty_paths(out: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    std::iter::from_fn(move || {
        loop {
            let head = fields.next()?;
            if head.starts_with(b":") {
                return fields.next();
            }
        }
    })
}

/// What a capture's modes are read from, besides what git listed.
struct ModeReads {
    root: PathBuf,
    /// The files read again whatever git lists, with their stamp before it did.
    again: Vec<Listed>,
    /// Files the tree will not hold although they exist.
    gone: Vec<String>,
    /// With nothing carried: every other file the tree holds, as read before git hashed.
    held: Vec<(String, FileStamp)>,
    /// When the capture began (seconds since the epoch).
    started: i64,
}

impl ModeReads {
    /// Reads the modes on a blocking thread: `carried` brought up to date with `files`, or,
    /// with nothing carried, every mode of `files` and of the held files. Called once git
    /// hashed `files`.
    async fn run(
        self,
        carried: Option<CarriedModes>,
        files: Vec<Listed>,
    ) -> Result<CarriedModes, CheckpointError> {
        let root = self.root.clone();
        let work = tokio::task::spawn_blocking(move || match carried {
            Some(mut modes) => {
                modes.update(&self.root, &files, &self.again, &self.gone, self.started);
                modes
            }
            None => CarriedModes::read_all(&self.root, &files, &self.held, self.started),
        });
        work.await.map_err(|e| CheckpointError::Io {
            path: root,
            source: io::Error::other(format!("reading modes: {e}")),
        })
    }
}

/// What a session's last capture left for its next, while the index is as it left it.
#[derive(Debug, Default)]
pub(super) struct LastTree {
    state: Mutex<Option<Carried>>,
    /// The session's resident git, once a capture needed it.
    pub(super) resident: ResidentSlot,
    /// Set once the project had more paths than a stat table holds: the session walks no more.
    no_walk: AtomicBool,
}

impl LastTree {
    /// The carried capture when `stamp` is the index it left (taken out either way: a capture
    /// that fails carries nothing to the next).
    fn take(&self, stamp: &IndexStamp) -> Option<Carried> {
        let carried = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        (&carried.stamp == stamp).then_some(carried)
    }

    /// The files whose setuid or setgid bit the last capture left out of its table (see
    /// [`CarriedModes::unconfirmed`]).
    pub(super) fn unconfirmed(&self) -> Vec<(String, super::modes::Kind)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|c| c.modes.unconfirmed())
            .unwrap_or_default()
    }

    /// Whether the session walks the project before each capture.
    fn walks(&self) -> bool {
        !self.no_walk.load(Ordering::Relaxed)
    }

    pub(super) fn stop_walking(&self) {
        self.no_walk.store(true, Ordering::Relaxed);
    }

    fn put(&self, carried: Carried) {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(carried);
    }
}

/// One capture's results as the next one starts from them.
#[derive(Debug)]
struct Carried {
    /// The index as the capture left it.
    stamp: IndexStamp,
    /// The tree it wrote.
    tree: String,
    /// The modes it read.
    modes: CarriedModes,
    /// What it left out.
    left_out: Vec<LeftOut>,
    /// The project's stats, walked just before git listed it (`None`: not walked).
    table: Option<StatTable>,
    /// Every path the index holds (kept beside a table only).
    tracked: Option<HashSet<String>>,
    /// Whether the tree holds changes the index was not given (a resident capture's): the
    /// index is then older than the tree, and only git's listing brings it level.
    index_behind: bool,
}

/// What a session's walk says changed since its last capture.
enum Delta {
    /// Nothing: the last capture holds.
    Nothing,
    /// Only these files and links the index holds (changed, of another kind, or gone; none
    /// when only directories or removed paths the index does not hold changed, which can
    /// change directory modes).
    Tracked(Vec<String>),
    /// Something only git's listing can sort (a new path, an ignore file, a left-out path).
    Unknown,
}

impl Carried {
    /// What changed since this capture, by `now`'s walk. A path the index does not hold is
    /// ignored, left out or new; only git can say which it is now, so any change to one (but a
    /// directory's, whose entries are compared one by one and whose mode is read at every
    /// capture, and a removal, which the tree cannot show) is [`Delta::Unknown`]; so is any change
    /// to an ignore file, a `.git`, a left-out path, a name that is not UTF-8, or a file grown
    /// over `max_file_bytes`.
    fn delta(&self, now: &StatTable, max_file_bytes: u64) -> Delta {
        let (Some(last), Some(tracked), Some(_)) = (&self.table, &self.tracked, self.modes.blob())
        else {
            return Delta::Unknown;
        };
        let Some(differences) = last.differences(now) else {
            return Delta::Unknown;
        };
        if differences.is_empty() {
            return Delta::Nothing;
        }
        let mut paths = Vec::new();
        for difference in differences {
            let Ok(path) = String::from_utf8(difference.path) else {
                return Delta::Unknown;
            };
            if listing_only(&path) || self.leaves_out(&path) {
                return Delta::Unknown;
            }
            if tracked.contains(&path) {
                match difference.new {
                    None | Some(PathKind::Link) => paths.push(path),
                    Some(PathKind::File) if difference.size <= max_file_bytes => paths.push(path),
                    Some(_) => return Delta::Unknown,
                }
                continue;
            }
            match (difference.old, difference.new) {
                (Some(PathKind::Dir), Some(PathKind::Dir)) | (Some(_), None) => {}
                _ => return Delta::Unknown,
            }
        }
        Delta::Tracked(paths)
    }

    /// Whether `path` is a path this capture left out, or inside one.
    fn leaves_out(&self, path: &str) -> bool {
        self.left_out.iter().any(|l| {
            let out = l.path();
            path == out
                || path
                    .strip_prefix(out)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// This capture's snapshot again, carried on with the table `now` to `last`.
    fn reused(mut self, now: Option<StatTable>, last: &LastTree) -> Snapshot {
        let snapshot = Snapshot {
            tree: self.tree.clone(),
            left_out: self.left_out.clone(),
            modes: self.modes.blob().map(str::to_owned),
        };
        self.table = now.map(StatTable::settled);
        last.put(self);
        snapshot
    }
}

/// What one `ls-files -t` found.
#[derive(Debug, Default)]
struct Listing {
    /// NUL-ended paths the index must add, update or remove.
    update: Vec<u8>,
    /// NUL-ended paths the index must drop (too large now).
    drop: Vec<u8>,
    /// What the tree will not hold.
    left_out: Vec<LeftOut>,
    /// The paths git listed as changed, new or deleted, with their stamp then.
    changed: Vec<Listed>,
    /// Files the tree will not hold although they exist (too large).
    gone: Vec<String>,
    /// Every other file the index holds, with its stamp as read (a full listing only).
    held: Vec<(String, FileStamp)>,
    /// Every path the index held before this capture (when asked for).
    indexed: Vec<String>,
}

/// What identifies one state of an index file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IndexStamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl IndexStamp {
    /// The stamp of the index at `path`; a missing one has a stamp of its own (all zeros: no
    /// file has inode 0), as a capture of an empty project leaves none.
    fn of(path: &Path) -> IndexStamp {
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(path) {
            Ok(meta) => IndexStamp {
                ino: meta.ino(),
                len: meta.len(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
            },
            Err(_) => IndexStamp {
                ino: 0,
                len: 0,
                mtime: (0, 0),
            },
        }
    }
}

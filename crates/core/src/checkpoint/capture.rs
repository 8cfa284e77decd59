//! Taking a snapshot of the project through a session's index: git lists what changed since the
//! index last saw the project (one `ls-files`, which walks the tree and compares every file's
//! stat with the index's), the index takes only that, git writes the tree, and the modes of what
//! changed are read ([`CarriedModes`]) while it does.
//!
//! Nothing else walks the whole tree while a session's last capture is carried ([`LastTree`]):
//! git does not print the paths it found unchanged, a capture that finds nothing changed reuses
//! the last tree without writing the index, and an unchanged mode table is not stored again. The
//! first capture of a process (or one after the index changed under it, as a rewind from another
//! process does) lists every path and reads every mode.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::modes::{CarriedModes, FileStamp, Listed, now_seconds};
use super::stat_table::StatTable;
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
        let carried = last.and_then(|l| l.take(IndexStamp::of(index).as_ref()));
        // The project's stats, taken before git lists anything: what git hashes is then at
        // least as new as the table, so a change made after the walk is seen by the next one.
        let (carried, table) = self.walk_project(last, carried).await;
        let carried = match (carried, last) {
            (Some(carried), Some(last)) if carried.unchanged_in(table.as_ref()) => {
                return Ok(carried.reused(table, last));
            }
            (carried, _) => carried,
        };
        let full = carried.is_none();
        let root = self.git.work_tree.clone();
        let again = carried
            .as_ref()
            .map(|c| c.modes.recheck_now(&root))
            .unwrap_or_default();
        // Both walk the tree, each its own way: the new files, and every file whose stat
        // differs from the index's (`ls-files -m` would compare the content of a file whose
        // ctime alone moved and call it unchanged: a `chmod` would escape it).
        let ls_files = ls_files_args(full);
        let (listed, dirty) = tokio::join!(
            self.git.run(&ls_files, Some(index), Vec::new()),
            self.git.run(&["diff-files", "-z"], Some(index), Vec::new()),
        );
        let (listed, dirty) = (listed?, dirty?);
        let store = self.clone();
        let listing = tokio::task::spawn_blocking(move || {
            let dirty = dirty_paths(&dirty).map(|path| (b'C', path));
            let listed = listed
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(tagged);
            store.sort_listing(dirty.chain(listed), full, started)
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
            Some(Carried { tree, modes, .. }) if unchanged => {
                (tree, read.run(Some(modes), listing.changed).await?)
            }
            carried => {
                self.update_index(index, &listing.update, &listing.drop)
                    .await?;
                let modes = read.run(carried.map(|c| c.modes), listing.changed);
                let (tree, modes) = tokio::join!(self.write_tree(index), modes);
                (tree?, modes?)
            }
        };
        let mut modes = modes;
        let blob = match modes.blob() {
            Some(blob) => blob.to_owned(),
            None => {
                let blob = self.store_modes(&modes).await?;
                modes.stored(blob.clone());
                blob
            }
        };
        if let (Some(last), Some(stamp)) = (last, IndexStamp::of(index)) {
            last.put(Carried {
                stamp,
                tree: tree.clone(),
                modes,
                left_out: listing.left_out.clone(),
                table: table.map(StatTable::settled),
            });
        }
        Ok(Snapshot {
            tree,
            left_out: listing.left_out,
            modes: Some(blob),
        })
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

    /// Writes `index`'s tree.
    async fn write_tree(&self, index: &Path) -> Result<String, CheckpointError> {
        let tree = self
            .git
            .run(&["write-tree"], Some(index), Vec::new())
            .await?;
        Ok(String::from_utf8_lossy(&tree).trim().to_owned())
    }

    /// Stores `modes`' table; its blob.
    async fn store_modes(&self, modes: &CarriedModes) -> Result<String, CheckpointError> {
        let id = self
            .git
            .run(
                &["hash-object", "-w", "--stdin"],
                None,
                modes.table().encode(),
            )
            .await?;
        Ok(String::from_utf8_lossy(&id).trim().to_owned())
    }
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
    /// Set once the project had more paths than a stat table holds: the session walks no more.
    no_walk: AtomicBool,
}

impl LastTree {
    /// The carried capture when `stamp` is the index it left (taken out either way: a capture
    /// that fails carries nothing to the next).
    fn take(&self, stamp: Option<&IndexStamp>) -> Option<Carried> {
        let carried = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        (Some(&carried.stamp) == stamp).then_some(carried)
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

    fn stop_walking(&self) {
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
}

impl Carried {
    /// Whether the project is as this capture found it, by `now`'s walk: then its tree, mode
    /// table (stored) and left-out paths are the project's still.
    fn unchanged_in(&self, now: Option<&StatTable>) -> bool {
        self.modes.blob().is_some()
            && matches!((&self.table, now), (Some(last), Some(now)) if last.unchanged(now))
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
}

/// What identifies one state of an index file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IndexStamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl IndexStamp {
    fn of(path: &Path) -> Option<IndexStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(IndexStamp {
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        })
    }
}

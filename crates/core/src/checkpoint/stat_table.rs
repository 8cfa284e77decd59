//! The project as a table of stats, taken by walking the tree in the controller's own process:
//! what lets a capture that finds nothing changed start no `git` at all (issue 29's per-turn
//! cost; most turns of a session change no file).
//!
//! A table holds every path under the project, ignored ones included (no ignore rule is read
//! here, so none can be misread), each with its device, inode, mode, size, mtime and ctime to the
//! nanosecond; every `.git` but the project's own is an entry that is not entered, the project's
//! own `.git` and a state root inside the project are skipped; and it holds the stat of the file
//! outside the tree that decides what git captures (the repository's `info/exclude`). Two tables
//! equal entry for entry mean the project did not change between the two walks, with one
//! exception handled here: file times come from a coarse clock (a tick of 1-10 ms), so a file
//! written again within the tick of its last change, to the same size, keeps its stat. Every
//! file or link whose mtime or ctime is within [`RACY_WINDOW`] of the walk's start (ten ticks of
//! the coarsest clock; times of whole seconds, from a file system that keeps no finer ones: in
//! the second of the walk or the one before) is therefore *racy*: the sha256 of its content (of
//! a link, its target) is kept with it, and a later table counts it unchanged only when that
//! digest is read again the same. A file older than that gets a later time at any later write,
//! as the clock it is stamped from has passed its times by the walk. A racy file over [`RACY_READ_MAX`] is
//! not read and never counts as unchanged. What this leaves is a file written three times (A, B,
//! A) in one tick of the clock, at the same size, while git hashed the B: a process writing
//! beside the capture it races, whose last content is then taken by its next change.
//!
//! A table of more than [`MAX_ENTRIES`] paths is not kept (the walk stops there) and its session
//! walks no more: big trees, typically with ignored build outputs, keep git's own listing, which
//! skips ignored directories.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Read as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::time::{Duration, SystemTime};

use super::modes::{FileStamp, now_seconds};

/// Most paths a table holds. Walking and comparing 20,000 entries costs about as much as the
/// `git` processes it saves, so a bigger tree keeps git's listing (which skips ignored
/// directories) instead.
pub(super) const MAX_ENTRIES: usize = 20_000;
/// A file or link whose mtime or ctime is this close to the walk's start, or later, is racy: file
/// times come from the kernel's coarse clock, which lags the wall clock by up to a tick (1-10
/// ms).
const RACY_WINDOW: Duration = Duration::from_millis(100);
/// A file or link whose times are whole seconds (a file system that keeps no finer ones) is racy
/// when they are in the second of the walk or the one before.
const RACY_SECONDS: i64 = 1;
/// Largest racy file read for its digest; a larger one never counts as unchanged.
const RACY_READ_MAX: u64 = 1024 * 1024;

/// Where a walk's racy files begin ([`RACY_WINDOW`], [`RACY_SECONDS`]), taken as it starts.
#[derive(Debug, Clone, Copy)]
struct RacyFrom {
    /// Fine times: the walk's start less the window, as (seconds, nanoseconds) since the epoch.
    fine: (i64, i64),
    /// Whole-second times: the second before the walk's.
    second: i64,
}

impl RacyFrom {
    fn now() -> RacyFrom {
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(RACY_WINDOW);
        RacyFrom {
            fine: (
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
                i64::from(since.subsec_nanos()),
            ),
            second: now_seconds() - RACY_SECONDS,
        }
    }

    /// Whether `stat`'s times make it racy.
    fn holds(&self, stat: &FileStamp) -> bool {
        if stat.whole_seconds() {
            stat.changed_since(self.second)
        } else {
            stat.changed_at_or_after(self.fine)
        }
    }
}

/// Whether `new` shows the path as `old` did: the same stat and, for a path `old` found racy,
/// the same content read again.
fn same(old: &Entry, new: &Entry) -> bool {
    new.stat == old.stat
        && match &old.proof {
            None => true,
            Some(Proof::Unread) => false,
            Some(proof) => new.proof.as_ref() == Some(proof),
        }
}

/// What a path is, as far as a capture cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PathKind {
    /// A regular file.
    File,
    /// A symbolic link.
    Link,
    /// A directory.
    Dir,
    /// Anything else (a FIFO, a socket, a device), which git does not capture.
    Other,
}

impl PathKind {
    fn of(stat: &FileStamp) -> PathKind {
        match stat.mode() & libc::S_IFMT {
            libc::S_IFREG => PathKind::File,
            libc::S_IFLNK => PathKind::Link,
            libc::S_IFDIR => PathKind::Dir,
            _ => PathKind::Other,
        }
    }
}

/// One path that differs between two tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Difference {
    /// Project-relative, as the kernel names it.
    pub(super) path: Vec<u8>,
    /// What it was (`None`: it came).
    pub(super) old: Option<PathKind>,
    /// What it is (`None`: it went).
    pub(super) new: Option<PathKind>,
    /// Its size now.
    pub(super) size: u64,
}

/// What a racy file or link was found holding.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Proof {
    /// The sha256 of its content (of a link: its target).
    Digest([u8; 32]),
    /// Not read (too large, or gone or replaced while read): never counts as unchanged.
    Unread,
}

#[derive(Debug, Clone)]
struct Entry {
    stat: FileStamp,
    /// A racy file's or link's content, or one proved because the last table had to.
    proof: Option<Proof>,
    /// Whether it is racy in this table (its proof is kept for the next comparison).
    racy: bool,
}

/// One walk of the project: every path's stat, project-relative (bytes, as the kernel gives
/// names), and the stat of the files outside the tree that decide what is captured.
#[derive(Debug, Clone, Default)]
pub(super) struct StatTable {
    entries: HashMap<Vec<u8>, Entry>,
    outside: Vec<(PathBuf, Option<FileStamp>)>,
    /// Directories whose path is longer than the system takes (`ENAMETOOLONG`): listed, not
    /// entered. Nothing can read what is under them by its path, git included, so no capture
    /// holds it; each capture names them ([`super::LeftOut::PathTooLong`]).
    too_long: Vec<Vec<u8>>,
}

/// What a walk is told to skip and to look at besides the tree.
#[derive(Debug, Clone)]
pub(super) struct WalkPlan {
    /// The project.
    pub(super) root: PathBuf,
    /// A project-relative path not walked (a state root inside the project).
    pub(super) skip: Option<PathBuf>,
    /// Files outside the tree whose stat is part of the table.
    pub(super) outside: Vec<PathBuf>,
}

impl StatTable {
    /// Walks the project as `plan` says; `None` when it holds more than [`MAX_ENTRIES`] paths.
    /// `last`: the table this one will be compared with (a file it proved is read again, racy
    /// or not, to be compared). An error when a directory cannot be read or an entry went
    /// while it was walked.
    pub(super) fn take(plan: &WalkPlan, last: Option<&StatTable>) -> io::Result<Option<StatTable>> {
        let racy_from = RacyFrom::now();
        let skip = plan.skip.as_ref().map(|s| s.as_os_str().as_bytes());
        let mut table = StatTable::default();
        let mut dirs: Vec<Vec<u8>> = vec![Vec::new()];
        while let Some(dir) = dirs.pop() {
            let abs = plan.root.join(OsStr::from_bytes(&dir));
            let entries = match std::fs::read_dir(&abs) {
                Err(e) if !dir.is_empty() && e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                    table.too_long.push(dir);
                    continue;
                }
                entries => entries?,
            };
            for entry in entries {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.as_bytes();
                if dir.is_empty() && name == b".git" {
                    continue;
                }
                let rel = if dir.is_empty() {
                    name.to_vec()
                } else {
                    [&dir[..], b"/", name].concat()
                };
                if skip == Some(&rel[..]) {
                    continue;
                }
                // `DirEntry::metadata` does not follow a link.
                let meta = entry.metadata()?;
                let stat = FileStamp::of(&meta);
                let kind = meta.file_type();
                let racy = (kind.is_file() || kind.is_symlink()) && racy_from.holds(&stat);
                let proved = last.is_some_and(|l| l.proved(&rel, &stat));
                let proof =
                    (racy || proved).then(|| prove(&abs.join(OsStr::from_bytes(name)), &meta));
                if kind.is_dir() && name != b".git" {
                    dirs.push(rel.clone());
                }
                table.entries.insert(rel, Entry { stat, proof, racy });
                if table.entries.len() > MAX_ENTRIES {
                    return Ok(None);
                }
            }
        }
        table.outside = plan
            .outside
            .iter()
            .map(|path| {
                let stat = std::fs::symlink_metadata(path)
                    .ok()
                    .map(|m| FileStamp::of(&m));
                (path.clone(), stat)
            })
            .collect();
        Ok(Some(table))
    }

    /// Whether this table held `rel` with `stat` and a proof of its content.
    fn proved(&self, rel: &[u8], stat: &FileStamp) -> bool {
        self.entries
            .get(rel)
            .is_some_and(|e| e.proof.is_some() && e.stat == *stat)
    }

    /// Whether `now` (taken with this table as its `last`) finds the project as this table did:
    /// the same paths with the same stats, every file this one found racy read again to the
    /// same content, the same files outside.
    #[cfg(test)]
    pub(super) fn unchanged(&self, now: &StatTable) -> bool {
        self.outside == now.outside
            && self.entries.len() == now.entries.len()
            && self
                .entries
                .iter()
                .all(|(rel, old)| now.entries.get(rel).is_some_and(|new| same(old, new)))
    }

    /// What differs from this table to `now` (taken with this one as its `last`): each path
    /// that came, went or changed (a racy file read to other content included), with its kind
    /// before and after; `None` when a file outside the tree changed.
    pub(super) fn differences(&self, now: &StatTable) -> Option<Vec<Difference>> {
        if self.outside != now.outside {
            return None;
        }
        let mut out = Vec::new();
        for (rel, new) in &now.entries {
            match self.entries.get(rel) {
                Some(old) if same(old, new) => {}
                old => out.push(Difference {
                    path: rel.clone(),
                    old: old.map(|o| PathKind::of(&o.stat)),
                    new: Some(PathKind::of(&new.stat)),
                    size: new.stat.size(),
                }),
            }
        }
        for (rel, old) in &self.entries {
            if !now.entries.contains_key(rel) {
                out.push(Difference {
                    path: rel.clone(),
                    old: Some(PathKind::of(&old.stat)),
                    new: None,
                    size: 0,
                });
            }
        }
        Some(out)
    }

    /// This table as the next comparison needs it: the proofs of what is no longer racy
    /// dropped (what was read only to be compared is not read again next time).
    pub(super) fn settled(mut self) -> StatTable {
        for entry in self.entries.values_mut().filter(|e| !e.racy) {
            entry.proof = None;
        }
        self
    }

    /// The directories the walk could not enter, their paths longer than the system takes.
    pub(super) fn too_long(&self) -> impl Iterator<Item = &[u8]> {
        self.too_long.iter().map(Vec::as_slice)
    }

    /// Whether the walk found no path at all.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many paths the table holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `rel` is held as racy, with its content read.
    #[cfg(test)]
    pub(super) fn racy_and_read(&self, rel: &str) -> bool {
        self.entries
            .get(rel.as_bytes())
            .is_some_and(|e| e.racy && matches!(e.proof, Some(Proof::Digest(_))))
    }

    /// Makes `rel`'s stat in this table that of `other` (a test's stand-in for a write within
    /// the same clock tick, which the kernel gives no way to force).
    #[cfg(test)]
    pub(super) fn copy_stat(&mut self, rel: &str, other: &StatTable) {
        let stat = other.entries[rel.as_bytes()].stat;
        if let Some(entry) = self.entries.get_mut(rel.as_bytes()) {
            entry.stat = stat;
        }
    }
}

/// What the racy file or link at `path` (lstat'd as `meta`) holds. A file is opened without
/// following a link and without blocking (a FIFO put in its place is not waited on), and read
/// only when it is still the regular file the walk saw.
fn prove(path: &Path, meta: &std::fs::Metadata) -> Proof {
    if meta.file_type().is_symlink() {
        return match std::fs::read_link(path) {
            Ok(target) => Proof::Digest(sha256(target.as_os_str().as_bytes())),
            Err(_) => Proof::Unread,
        };
    }
    if meta.len() > RACY_READ_MAX {
        return Proof::Unread;
    }
    let read = || -> io::Result<Option<Vec<u8>>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        let opened = file.metadata()?;
        if !opened.is_file() || opened.ino() != meta.ino() || opened.dev() != meta.dev() {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.take(RACY_READ_MAX + 1).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    };
    match read() {
        Ok(Some(bytes)) if bytes.len() as u64 <= RACY_READ_MAX => Proof::Digest(sha256(&bytes)),
        Ok(_) | Err(_) => Proof::Unread,
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(root: &Path) -> WalkPlan {
        WalkPlan {
            root: root.to_path_buf(),
            skip: Some(PathBuf::from("state")),
            outside: Vec::new(),
        }
    }

    fn take(plan: &WalkPlan, last: Option<&StatTable>) -> StatTable {
        StatTable::take(plan, last).unwrap().unwrap()
    }

    #[test]
    fn a_rewrite_of_the_same_size_in_the_same_tick_is_seen_by_its_content() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("a.txt"), "aaaa").unwrap();
        let plan = plan(root);
        let first = take(&plan, None);
        assert!(first.racy_and_read("a.txt"), "written just now: racy");
        // Unchanged: read again to the same content.
        let again = take(&plan, Some(&first));
        assert!(first.unchanged(&again));
        std::fs::write(root.join("a.txt"), "bbbb").unwrap();
        let mut now = take(&plan, Some(&first));
        assert!(now.racy_and_read("a.txt"));
        // What a write in the same clock tick leaves: the very same stat.
        now.copy_stat("a.txt", &first);
        assert!(!first.unchanged(&now), "the content differs");
    }

    #[test]
    fn a_file_is_racy_within_the_window_and_one_of_whole_seconds_in_the_second_before() {
        let walk = RacyFrom::now();
        let (secs, nanos) = walk.fine;
        let at = |ago_ms: i64| {
            let total = secs * 1_000_000_000
                + nanos
                + (RACY_WINDOW.as_millis() as i64 - ago_ms) * 1_000_000;
            (
                total.div_euclid(1_000_000_000),
                total.rem_euclid(1_000_000_000).max(1),
            )
        };
        // Fine times: racy from the window's start on.
        assert!(
            walk.holds(&FileStamp::with_times(at(0), at(500))),
            "written just now"
        );
        assert!(
            walk.holds(&FileStamp::with_times(at(500), at(90))),
            "changed 90 ms ago"
        );
        assert!(
            !walk.holds(&FileStamp::with_times(at(150), at(150))),
            "150 ms old"
        );
        // Whole seconds: racy in the second of the walk or the one before, however far back in
        // it the change came.
        let second = walk.second + RACY_SECONDS;
        assert!(walk.holds(&FileStamp::with_times((second, 0), (second - 5, 0))));
        assert!(walk.holds(&FileStamp::with_times((second - 1, 0), (second - 1, 0))));
        assert!(!walk.holds(&FileStamp::with_times((second - 2, 0), (second - 2, 0))));
        // One fine time is enough to take the stamp as fine.
        assert!(!walk.holds(&FileStamp::with_times((second - 1, 0), at(200))));
    }

    #[test]
    fn a_file_untouched_past_the_window_is_not_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("a.txt"), "aaaa").unwrap();
        let plan = plan(root);
        let first = take(&plan, None);
        assert!(first.racy_and_read("a.txt"));
        std::thread::sleep(RACY_WINDOW + Duration::from_millis(50));
        let later = take(&plan, Some(&first));
        assert!(first.unchanged(&later));
        assert!(!later.racy_and_read("a.txt"), "past the window: not racy");
    }

    #[test]
    fn an_old_file_is_not_read_and_a_chmod_a_retarget_or_a_file_turned_directory_is_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("old.txt"), "old").unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(root.join("old.txt"))
            .unwrap()
            .set_modified(past)
            .unwrap();
        std::os::unix::fs::symlink("old.txt", root.join("link")).unwrap();
        std::fs::write(root.join("plain"), "x").unwrap();
        std::fs::create_dir_all(root.join("state/deep")).unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::create_dir_all(root.join("sub/.git/objects")).unwrap();
        let plan = plan(root);
        let first = take(&plan, None);
        // old.txt, link, plain, sub, sub/.git: the state root and the project's .git are not
        // walked, a nested .git is not entered.
        assert_eq!(first.len(), 5);
        // The ctime of old.txt is now (set_modified moved it), so it is racy still; what is
        // not racy is not read.
        assert!(first.racy_and_read("link"));
        let same = take(&plan, Some(&first));
        assert!(first.unchanged(&same));
        // Changes inside what is skipped are not seen.
        std::fs::write(root.join("state/deep/record"), "x").unwrap();
        std::fs::write(root.join(".git/objects/x"), "x").unwrap();
        assert!(first.unchanged(&take(&plan, Some(&first))));

        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("plain"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        assert!(!first.unchanged(&take(&plan, Some(&first))), "a chmod");
        let base = take(&plan, None);
        std::fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink("plain", root.join("link")).unwrap();
        let mut now = take(&plan, Some(&base));
        now.copy_stat("link", &base);
        assert!(
            !base.unchanged(&now),
            "a link retargeted, even with its stat kept"
        );
        let base = take(&plan, None);
        std::fs::remove_file(root.join("plain")).unwrap();
        std::fs::create_dir(root.join("plain")).unwrap();
        assert!(
            !base.unchanged(&take(&plan, Some(&base))),
            "a file turned directory"
        );
    }

    /// What a process of the session can put in a racy file's place between the walk's `lstat`
    /// and its read: a FIFO (a read would wait for ever), a link out of the project, another
    /// file. None is read through.
    #[test]
    fn a_racy_file_swapped_for_a_fifo_a_link_or_another_file_is_not_read_through() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let outside = root.join("outside");
        std::fs::write(&outside, "secret").unwrap();
        std::fs::write(root.join("f"), "mine").unwrap();
        let walked = std::fs::symlink_metadata(root.join("f")).unwrap();
        // Held by a second name, so no file below can get its inode number back.
        std::fs::hard_link(root.join("f"), root.join("held")).unwrap();
        assert_eq!(
            prove(&root.join("f"), &walked),
            Proof::Digest(sha256(b"mine"))
        );
        std::fs::remove_file(root.join("f")).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            root.join("f"),
            rustix::fs::Mode::from(0o644),
        )
        .unwrap();
        assert_eq!(prove(&root.join("f"), &walked), Proof::Unread, "a FIFO");
        std::fs::remove_file(root.join("f")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("f")).unwrap();
        assert_eq!(prove(&root.join("f"), &walked), Proof::Unread, "a link");
        std::fs::remove_file(root.join("f")).unwrap();
        std::fs::write(root.join("f"), "other").unwrap();
        assert_eq!(
            prove(&root.join("f"), &walked),
            Proof::Unread,
            "another inode"
        );
    }

    #[test]
    fn a_tree_over_the_bound_gives_no_table() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..=MAX_ENTRIES {
            std::fs::write(tmp.path().join(i.to_string()), "").unwrap();
        }
        assert!(StatTable::take(&plan(tmp.path()), None).unwrap().is_none());
    }

    #[test]
    fn a_racy_file_too_large_to_read_never_counts_as_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("big"),
            vec![0u8; RACY_READ_MAX as usize + 1],
        )
        .unwrap();
        let plan = plan(tmp.path());
        let first = take(&plan, None);
        assert!(!first.unchanged(&take(&plan, Some(&first))));
    }
}

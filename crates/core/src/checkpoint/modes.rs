//! Every permission bit of the captured files and directories (setuid, setgid and sticky
//! included), which a git tree does not hold: a tree keeps only whether a file is executable.
//!
//! A checkpoint stores, next to its tree, one blob of the store holding a [`ModeTable`]: the most
//! common mode of plain files, of executable files (git's test: the owner's execute bit) and of
//! directories, then every path whose mode is not its kind's default. A project whose files all
//! share a umask holds three lines whatever its size, and a turn that changes no mode stores
//! nothing new (the blob is content-addressed like every other).
//!
//! A session carries its last table to its next capture ([`CarriedModes`]), which reads the mode
//! only of what git lists as changed or new (a `chmod` moves the file's ctime, which git's stat
//! compare sees), of the files read too recently for that compare (this git compares whole
//! seconds), and of every directory (git tracks none); the first capture of a process reads all.
//! A mode is read after git hashed the file, so a `chmod` made meanwhile is either read now or
//! seen next time (by the session's walk, which compares modes, or by git's stat compare).
//!
//! A setuid or setgid bit is kept only when the file did not change from the moment git listed it
//! (before git hashed it) until its mode was read, or, for a file not listed, since before the
//! capture began: content a command wrote in that window (a background process of the session) is
//! never restored with such a bit.
//!
//! Encoding, each line ended by NUL (a path may hold a newline): `intendant-modes 1`, then
//! `file OCTAL`, `exec OCTAL`, `dir OCTAL`, then `OCTAL PATH` per exception, sorted by path.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The permission bits a checkpoint keeps: `rwx` for all three, setuid, setgid and sticky.
pub(super) const PERMISSION_BITS: u32 = 0o7777;
/// setuid and setgid: what a file is only allowed to get back when it did not change meanwhile.
const SPECIAL_BITS: u32 = 0o6000;
/// The first line of an encoded table.
const MAGIC: &str = "intendant-modes 1";

/// What a path of a tree is, for its default mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// A file git records as 100644.
    File,
    /// A file git records as 100755.
    Exec,
    /// A directory.
    Dir,
}

impl Kind {
    /// The kind of a tree entry of git mode `mode` (`None`: a link or a nested repository,
    /// which have no mode of their own).
    pub(super) fn of_git_mode(mode: &str) -> Option<Kind> {
        match mode {
            "100644" => Some(Kind::File),
            "100755" => Some(Kind::Exec),
            "040000" => Some(Kind::Dir),
            _ => None,
        }
    }

    /// The kind of a regular file of permission bits `mode` (git's test: the owner's execute
    /// bit).
    fn of_mode(mode: u32) -> Kind {
        if mode & 0o100 != 0 {
            Kind::Exec
        } else {
            Kind::File
        }
    }
}

/// The modes of one checkpoint's files and directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModeTable {
    file: u32,
    exec: u32,
    dir: u32,
    except: BTreeMap<String, u32>,
}

/// What changes whenever a path's content or mode does (its ctime moves with both; `dev` and
/// `ino` with a path replaced by another file), but for a write within its last change's
/// clock tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl FileStamp {
    /// The stamp of `meta`.
    pub(super) fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }

    /// The whole mode (type and permission bits).
    pub(super) fn mode(&self) -> u32 {
        self.mode
    }

    /// The size in bytes.
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// Whether the path changed (content, mode or name) in second `second` (since the epoch)
    /// or later.
    pub(super) fn changed_since(&self, second: i64) -> bool {
        self.mtime.0.max(self.ctime.0) >= second
    }

    /// A stamp with these times (and nothing else), as (seconds, nanoseconds) since the epoch.
    #[cfg(test)]
    pub(super) fn with_times(mtime: (i64, i64), ctime: (i64, i64)) -> FileStamp {
        FileStamp {
            dev: 0,
            ino: 0,
            mode: 0o100644,
            size: 0,
            ctime,
            mtime,
        }
    }

    /// Whether the path's mtime or ctime is `time` ((seconds, nanoseconds) since the epoch) or
    /// later.
    pub(super) fn changed_at_or_after(&self, time: (i64, i64)) -> bool {
        self.mtime.max(self.ctime) >= time
    }

    /// Whether both times are whole seconds (a file system that keeps no finer ones; a finer
    /// time falls on a whole second once in a billion, and is then taken as coarse).
    pub(super) fn whole_seconds(&self) -> bool {
        self.mtime.1 == 0 && self.ctime.1 == 0
    }

    /// Whether the file's last change (of content or mode) is older than `second` (seconds
    /// since the epoch).
    pub(super) fn changed_before(&self, second: i64) -> bool {
        self.ctime.0 < second
    }

    /// Whether the owner may execute it (git's test for a 100755 file).
    pub(super) fn executable(&self) -> bool {
        self.mode & 0o100 != 0
    }

    /// Whether `other` is the same file (device and inode) and still a regular one, whatever
    /// its content or mode now.
    pub(super) fn same_file(&self, other: &FileStamp) -> bool {
        self.dev == other.dev && self.ino == other.ino && other.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// Whether the file has a setuid or setgid bit.
    pub(super) fn special(&self) -> bool {
        self.mode & SPECIAL_BITS != 0
    }

    /// The file's kind and permission bits.
    fn kind_and_mode(&self) -> (Kind, u32) {
        let mode = self.mode & PERMISSION_BITS;
        (Kind::of_mode(mode), mode)
    }
}

/// A file git listed as changed or new, to read the mode of: its stamp when it was listed
/// (`None`: not read then, or not a regular file).
pub(super) type Listed = (String, Option<FileStamp>);

/// The modes of a session's last capture, carried to its next one so that only what changed is
/// read again: the files git lists as changed or new (a `chmod` moves a file's ctime, which git's
/// stat compare sees), the files read too recently for that compare, and every directory (git
/// does not track directories). The kinds' defaults stay those of the first capture, so a
/// carried table can spell the same modes differently from a fresh one; every reader asks it
/// per path ([`ModeTable::mode_of`]), which gives the same answer.
#[derive(Debug, Clone)]
pub(super) struct CarriedModes {
    table: ModeTable,
    /// Every directory holding a captured file (one whose files all went stays until it does).
    dirs: BTreeSet<String>,
    /// Files whose last change was in the second they were read, or the one before, with their
    /// stamp then: git compares whole seconds of ctime, so a `chmod` in that same second would
    /// escape its compare. They are read again at the next capture.
    recheck: BTreeMap<String, FileStamp>,
    /// Files whose setuid or setgid bit the table leaves out (it could not be paired with the
    /// content git hashed), with their kind: the project holds a bit the table does not show,
    /// so a restore must visit them.
    unconfirmed: BTreeMap<String, Kind>,
    /// The blob the table is stored as (`None`: changed since it was last stored).
    blob: Option<String>,
}

/// One read of a file's mode.
struct Read {
    kind: Kind,
    mode: u32,
    stamp: FileStamp,
    /// Whether a setuid or setgid bit was left out.
    unconfirmed: bool,
}

impl CarriedModes {
    /// Reads the mode of every file of `files` (project-relative, under `root`) once git hashed
    /// them, takes that of every `held` file (unchanged in the index) from its stamp, and reads
    /// that of every directory holding one. `started`: when the capture began (seconds since the
    /// epoch); a held file with a setuid or setgid bit must have changed before it.
    pub(super) fn read_all(
        root: &Path,
        files: &[Listed],
        held: &[(String, FileStamp)],
        started: i64,
    ) -> CarriedModes {
        let mut found: Vec<(String, Kind, u32)> = Vec::with_capacity(files.len() + held.len());
        let mut recheck = BTreeMap::new();
        let mut unconfirmed = BTreeMap::new();
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for (rel, stamp) in held {
            let (kind, mut mode) = stamp.kind_and_mode();
            if stamp.special() && !stamp.changed_before(started - 1) {
                mode &= !SPECIAL_BITS;
                unconfirmed.insert(rel.clone(), kind);
            }
            if recent(stamp) {
                recheck.insert(rel.clone(), *stamp);
            }
            found.push((rel.clone(), kind, mode));
            add_parents(&mut dirs, rel);
        }
        for (rel, listed) in files {
            let Some(read) = read_file(root, rel, listed.as_ref(), started) else {
                continue;
            };
            if read.unconfirmed {
                unconfirmed.insert(rel.clone(), read.kind);
            }
            if recent(&read.stamp) {
                recheck.insert(rel.clone(), read.stamp);
            }
            found.push((rel.clone(), read.kind, read.mode));
            add_parents(&mut dirs, rel);
        }
        for dir in &dirs {
            if let Some(mode) = read_dir(root, dir) {
                found.push((dir.clone(), Kind::Dir, mode));
            }
        }
        CarriedModes {
            table: ModeTable::from_modes(found),
            dirs,
            recheck,
            unconfirmed,
            blob: None,
        }
    }

    /// The files to read again whatever git lists, with their stamp now: called before git
    /// lists the project, so a file unchanged from now until its mode is read keeps its setuid
    /// or setgid bit.
    pub(super) fn recheck_now(&self, root: &Path) -> Vec<Listed> {
        self.recheck
            .keys()
            .map(|rel| {
                let stamp = std::fs::symlink_metadata(root.join(rel))
                    .ok()
                    .filter(std::fs::Metadata::is_file)
                    .map(|meta| FileStamp::of(&meta));
                (rel.clone(), stamp)
            })
            .collect()
    }

    /// Brings the carried modes up to `root` now: reads `changed` (what git listed as changed,
    /// new or deleted), `again` (what [`CarriedModes::recheck_now`] gave), and every directory;
    /// forgets `gone` (files the tree no longer holds although they exist).
    pub(super) fn update(
        &mut self,
        root: &Path,
        changed: &[Listed],
        again: &[Listed],
        gone: &[String],
        started: i64,
    ) {
        let listed: BTreeSet<&str> = changed.iter().map(|(rel, _)| rel.as_str()).collect();
        let last = std::mem::take(&mut self.recheck);
        for rel in gone {
            self.forget(rel);
        }
        let again = again
            .iter()
            .filter(|(rel, _)| !listed.contains(rel.as_str()));
        let mut files = BTreeSet::new();
        for (rel, before) in changed.iter().chain(again) {
            let Some(read) = read_file(root, rel, before.as_ref(), started) else {
                self.forget(rel);
                continue;
            };
            if recent(&read.stamp) {
                self.recheck.insert(rel.clone(), read.stamp);
            }
            if !listed.contains(rel.as_str()) && last.get(rel) == Some(&read.stamp) {
                // Read again and unchanged since the last capture: the table is right.
                continue;
            }
            if read.unconfirmed {
                self.unconfirmed.insert(rel.clone(), read.kind);
            } else {
                self.unconfirmed.remove(rel);
            }
            self.set(rel, read.kind, read.mode);
            add_parents(&mut self.dirs, rel);
            files.insert(rel.as_str());
        }
        let mut gone = Vec::new();
        for dir in &self.dirs {
            match read_dir(root, dir) {
                Some(mode) => {
                    let default = self.table.dir;
                    set_except(&mut self.table.except, &mut self.blob, dir, mode, default);
                }
                None => gone.push(dir.clone()),
            }
        }
        for dir in gone {
            self.dirs.remove(&dir);
            // A file in the directory's place keeps the mode just read for it.
            if !files.contains(dir.as_str()) {
                self.forget(&dir);
            }
        }
    }

    /// The table.
    pub(super) fn table(&self) -> &ModeTable {
        &self.table
    }

    /// The files whose setuid or setgid bit the table leaves out, with their kind.
    pub(super) fn unconfirmed(&self) -> Vec<(String, Kind)> {
        self.unconfirmed
            .iter()
            .map(|(rel, kind)| (rel.clone(), *kind))
            .collect()
    }

    /// The blob the table is stored as, when it has not changed since it was.
    pub(super) fn blob(&self) -> Option<&str> {
        self.blob.as_deref()
    }

    /// Records that the table is stored as `blob`.
    pub(super) fn stored(&mut self, blob: String) {
        self.blob = Some(blob);
    }

    fn set(&mut self, rel: &str, kind: Kind, mode: u32) {
        let default = self.table.default_of(kind);
        set_except(&mut self.table.except, &mut self.blob, rel, mode, default);
    }

    fn forget(&mut self, rel: &str) {
        self.recheck.remove(rel);
        self.unconfirmed.remove(rel);
        if self.table.except.remove(rel).is_some() {
            self.blob = None;
        }
    }
}

/// Records `mode` for `rel` in `except` (an exception unless it is `default`), forgetting
/// `blob` when that changes the table.
fn set_except(
    except: &mut BTreeMap<String, u32>,
    blob: &mut Option<String>,
    rel: &str,
    mode: u32,
    default: u32,
) {
    let changed = if mode == default {
        except.remove(rel).is_some()
    } else {
        except.insert(rel.to_owned(), mode) != Some(mode)
    };
    if changed {
        *blob = None;
    }
}

/// The mode of the regular file at `rel` (`None`: gone, a link or anything else). A setuid or
/// setgid bit is kept only when the file did not change since `listed` (its stamp before git
/// hashed or listed it) or, not read then, since before the capture began at `started`:
/// otherwise the content git hashed may not be the content that had the bit.
fn read_file(root: &Path, rel: &str, listed: Option<&FileStamp>, started: i64) -> Option<Read> {
    let meta = std::fs::symlink_metadata(root.join(rel)).ok()?;
    if !meta.is_file() {
        return None;
    }
    let stamp = FileStamp::of(&meta);
    let mut mode = meta.mode() & PERMISSION_BITS;
    // One second of margin: a file's times come from a clock that can lag the wall clock.
    let unchanged = listed == Some(&stamp) || stamp.changed_before(started - 1);
    let unconfirmed = mode & SPECIAL_BITS != 0 && !unchanged;
    if unconfirmed {
        mode &= !SPECIAL_BITS;
    }
    let kind = Kind::of_mode(mode);
    Some(Read {
        kind,
        mode,
        stamp,
        unconfirmed,
    })
}

/// The mode of the directory at `rel` (`None`: gone, or not a directory).
fn read_dir(root: &Path, rel: &str) -> Option<u32> {
    std::fs::symlink_metadata(root.join(rel))
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|meta| meta.mode() & PERMISSION_BITS)
}

/// Whether a file last changed at `stamp` changed so recently that git's whole-second compare
/// could miss a `chmod` made now: its ctime in this second or the one before.
fn recent(stamp: &FileStamp) -> bool {
    now_seconds() <= stamp.ctime.0 + 1
}

/// Seconds since the epoch now.
pub(super) fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Adds every directory above `rel` to `dirs`.
fn add_parents(dirs: &mut BTreeSet<String>, rel: &str) {
    let mut up = rel;
    while let Some((parent, _)) = up.rsplit_once('/') {
        if dirs.contains(parent) {
            break;
        }
        dirs.insert(parent.to_owned());
        up = parent;
    }
}

impl ModeTable {
    /// The table of `(path, kind, mode)`: each kind's most common mode its default.
    fn from_modes(found: Vec<(String, Kind, u32)>) -> ModeTable {
        let mut counts: HashMap<(Kind, u32), usize> = HashMap::new();
        for (_, kind, mode) in &found {
            // A setuid or setgid file is always an exception, never a default.
            if *kind == Kind::Dir || mode & SPECIAL_BITS == 0 {
                *counts.entry((*kind, *mode)).or_default() += 1;
            }
        }
        let default = |kind: Kind, fallback: u32| {
            counts
                .iter()
                .filter(|((k, _), _)| *k == kind)
                // Ties go to the lower mode, so the table does not depend on hash order.
                .max_by(|((_, m1), c1), ((_, m2), c2)| c1.cmp(c2).then(m2.cmp(m1)))
                .map_or(fallback, |((_, mode), _)| *mode)
        };
        let (file, exec, dir) = (
            default(Kind::File, 0o644),
            default(Kind::Exec, 0o755),
            default(Kind::Dir, 0o755),
        );
        let mut table = ModeTable {
            file,
            exec,
            dir,
            except: BTreeMap::new(),
        };
        for (path, kind, mode) in found {
            if mode != table.default_of(kind) {
                table.except.insert(path, mode);
            }
        }
        table
    }

    fn default_of(&self, kind: Kind) -> u32 {
        match kind {
            Kind::File => self.file,
            Kind::Exec => self.exec,
            Kind::Dir => self.dir,
        }
    }

    /// The mode recorded for `path` of kind `kind`.
    pub(super) fn mode_of(&self, path: &str, kind: Kind) -> u32 {
        self.except
            .get(path)
            .copied()
            .unwrap_or_else(|| self.default_of(kind))
    }

    /// The table as stored.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut line = |text: &str| {
            out.extend_from_slice(text.as_bytes());
            out.push(0);
        };
        line(MAGIC);
        line(&format!("file {:o}", self.file));
        line(&format!("exec {:o}", self.exec));
        line(&format!("dir {:o}", self.dir));
        for (path, mode) in &self.except {
            line(&format!("{mode:o} {path}"));
        }
        out
    }

    /// Reads a stored table; what is wrong with it when it is not one.
    pub(super) fn decode(bytes: &[u8]) -> Result<ModeTable, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "a mode table that is not UTF-8")?;
        let mut lines = text.split('\0');
        if lines.next() != Some(MAGIC) {
            return Err("not a mode table".to_owned());
        }
        let mut default = |name: &str| -> Result<u32, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .and_then(parse_mode)
                .ok_or_else(|| format!("a mode table without its `{name}` default"))
        };
        let (file, exec, dir) = (default("file")?, default("exec")?, default("dir")?);
        if (file | exec) & SPECIAL_BITS != 0 {
            return Err("a mode table giving every file a setuid or setgid bit".to_owned());
        }
        let mut except = BTreeMap::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (mode, path) = line
                .split_once(' ')
                .and_then(|(m, p)| Some((parse_mode(m)?, p)))
                .ok_or_else(|| format!("unexpected mode table line {line:?}"))?;
            except.insert(path.to_owned(), mode);
        }
        Ok(ModeTable {
            file,
            exec,
            dir,
            except,
        })
    }
}

fn parse_mode(text: &str) -> Option<u32> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|m| *m & !PERMISSION_BITS == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_keeps_each_kinds_most_common_mode_and_every_exception_through_its_encoding() {
        let found = vec![
            ("a".to_owned(), Kind::File, 0o664),
            ("b".to_owned(), Kind::File, 0o664),
            ("secret".to_owned(), Kind::File, 0o600),
            ("bin/su\nx".to_owned(), Kind::Exec, 0o4755),
            ("bin/t".to_owned(), Kind::Exec, 0o775),
            ("bin/u".to_owned(), Kind::Exec, 0o775),
            ("bin".to_owned(), Kind::Dir, 0o1777),
        ];
        let table = ModeTable::from_modes(found);
        assert_eq!((table.file, table.exec, table.dir), (0o664, 0o775, 0o1777));
        assert_eq!(table.except.len(), 2);
        let back = ModeTable::decode(&table.encode()).unwrap();
        assert_eq!(back, table);
        assert_eq!(back.mode_of("bin/su\nx", Kind::Exec), 0o4755);
        assert_eq!(back.mode_of("a", Kind::File), 0o664);
        assert_eq!(back.mode_of("elsewhere", Kind::Dir), 0o1777);
    }

    fn chmod(root: &Path, rel: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn listed(root: &Path, rel: &str) -> Listed {
        let meta = std::fs::symlink_metadata(root.join(rel)).unwrap();
        (rel.to_owned(), Some(FileStamp::of(&meta)))
    }

    #[test]
    fn a_setuid_file_that_changed_after_git_listed_it_loses_the_bit() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for name in ["kept", "rewritten", "replaced"] {
            std::fs::write(root.join(name), "mine").unwrap();
            chmod(root, name, 0o4755);
        }
        let files: Vec<Listed> = ["kept", "rewritten", "replaced"]
            .into_iter()
            .map(|name| listed(root, name))
            .collect();
        // What a background process of the session does between the listing and the read (as
        // root here, so the kernel keeps the bit on the write).
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(root.join("rewritten"), "theirs").unwrap();
        std::fs::remove_file(root.join("replaced")).unwrap();
        std::fs::write(root.join("replaced"), "theirs").unwrap();
        chmod(root, "replaced", 0o4755);
        let carried = CarriedModes::read_all(root, &files, &[], now_seconds());
        let back = ModeTable::decode(&carried.table().encode()).unwrap();
        assert_eq!(back.mode_of("kept", Kind::Exec), 0o4755);
        assert_eq!(back.mode_of("rewritten", Kind::Exec), 0o755);
        assert_eq!(back.mode_of("replaced", Kind::Exec), 0o755);
        let unconfirmed: Vec<String> = carried.unconfirmed().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            unconfirmed,
            ["replaced", "rewritten"],
            "a restore visits them"
        );
        // A file git did not list keeps the bit only when it last changed before the capture.
        let unlisted = [("kept".to_owned(), None)];
        let now = CarriedModes::read_all(root, &unlisted, &[], now_seconds());
        assert_eq!(now.table().mode_of("kept", Kind::Exec), 0o755);
        let later = CarriedModes::read_all(root, &unlisted, &[], now_seconds() + 10);
        assert_eq!(later.table().mode_of("kept", Kind::Exec), 0o4755);
    }

    #[test]
    fn a_carried_table_reads_again_what_git_lists_what_was_too_recent_and_every_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("d")).unwrap();
        for name in ["a", "b", "d/c"] {
            std::fs::write(root.join(name), name).unwrap();
            chmod(root, name, 0o644);
        }
        chmod(root, "d", 0o755);
        let files: Vec<Listed> = ["a", "b", "d/c"]
            .into_iter()
            .map(|name| listed(root, name))
            .collect();
        let mut carried = CarriedModes::read_all(root, &files, &[], now_seconds());
        carried.stored("blob".to_owned());
        // Nothing changed: the table and its blob stay.
        let again = carried.recheck_now(root);
        carried.update(root, &[], &again, &[], now_seconds());
        assert_eq!(carried.blob(), Some("blob"));
        // In the same second as the read, where git's compare sees nothing; and a directory.
        chmod(root, "b", 0o600);
        chmod(root, "d", 0o700);
        let again = carried.recheck_now(root);
        carried.update(root, &[], &again, &[], now_seconds());
        assert_eq!(carried.table().mode_of("b", Kind::File), 0o600);
        assert_eq!(carried.table().mode_of("d", Kind::Dir), 0o700);
        assert_eq!(carried.blob(), None, "a changed table is stored again");
        // What git lists: a file gone and a new one in a new directory.
        std::fs::remove_file(root.join("a")).unwrap();
        std::fs::create_dir(root.join("e")).unwrap();
        chmod(root, "e", 0o750);
        std::fs::write(root.join("e/f"), "f").unwrap();
        chmod(root, "e/f", 0o640);
        let changed = [("a".to_owned(), None), listed(root, "e/f")];
        let again = carried.recheck_now(root);
        carried.update(root, &changed, &again, &[], now_seconds());
        assert_eq!(carried.table().mode_of("e/f", Kind::File), 0o640);
        assert_eq!(carried.table().mode_of("e", Kind::Dir), 0o750);
        assert!(!carried.table().except.contains_key("a"));
        // A directory that went takes its exception with it.
        std::fs::remove_file(root.join("e/f")).unwrap();
        std::fs::remove_dir(root.join("e")).unwrap();
        carried.update(root, &[("e/f".to_owned(), None)], &[], &[], now_seconds());
        assert!(!carried.table().except.contains_key("e"));
        assert!(!carried.table().except.contains_key("e/f"));
    }

    #[test]
    fn a_table_that_is_not_one_is_refused() {
        for bad in [
            &b"garbage"[..],
            b"intendant-modes 1\0file 644\0",
            b"intendant-modes 1\0file 644\0exec 4755\0dir 755\0",
            b"intendant-modes 1\0file 644\0exec 755\0dir 755\x00999 x\0",
            b"intendant-modes 1\0file 644\0exec 755\0dir 755\x0017777 x\0",
            b"intendant-modes 1\0file 644\0exec 755\0dir 755\0no-space\0",
        ] {
            assert!(ModeTable::decode(bad).is_err(), "{bad:?}");
        }
    }
}

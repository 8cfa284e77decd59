//! Every permission bit of the captured files and directories (setuid, setgid and sticky
//! included), which a git tree does not hold: a tree keeps only whether a file is executable.
//!
//! A checkpoint stores, next to its tree, one blob of the store holding a [`ModeTable`]: the most
//! common mode of plain files, of executable files (git's test: the owner's execute bit) and of
//! directories, then every path whose mode is not its kind's default. A project whose files all
//! share a umask holds three lines whatever its size, and a turn that changes no mode stores
//! nothing new (the blob is content-addressed like every other).
//!
//! A setuid or setgid bit is kept only when the file did not change from the moment its mode was
//! read until its tree was written ([`ModeTable::confirm_special`]): content a command wrote in
//! that window (a background process of the session) is never restored with such a bit.
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
}

/// The modes of one checkpoint's files and directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModeTable {
    file: u32,
    exec: u32,
    dir: u32,
    except: BTreeMap<String, u32>,
    /// The files with a setuid or setgid bit, with their identity when read (not stored).
    special: BTreeMap<String, FileStamp>,
}

/// What changes whenever a file's content or mode does.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    mode: u32,
    size: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

impl ModeTable {
    /// The modes under `root` of `files` (project-relative; a path that is gone, a link or
    /// anything but a regular file is skipped) and of every directory holding one of them.
    pub(super) fn capture<'a>(root: &Path, files: impl Iterator<Item = &'a str>) -> ModeTable {
        let mut found: Vec<(String, Kind, u32)> = Vec::new();
        let mut special = BTreeMap::new();
        let mut dirs: BTreeSet<&str> = BTreeSet::new();
        for rel in files {
            let Ok(meta) = std::fs::symlink_metadata(root.join(rel)) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let mode = meta.mode() & PERMISSION_BITS;
            let kind = if mode & 0o100 != 0 {
                Kind::Exec
            } else {
                Kind::File
            };
            if mode & SPECIAL_BITS != 0 {
                special.insert(rel.to_owned(), FileStamp::of(&meta));
            }
            found.push((rel.to_owned(), kind, mode));
            let mut up = rel;
            while let Some((parent, _)) = up.rsplit_once('/') {
                if !dirs.insert(parent) {
                    break;
                }
                up = parent;
            }
        }
        for dir in dirs {
            if let Ok(meta) = std::fs::symlink_metadata(root.join(dir))
                && meta.is_dir()
            {
                found.push((dir.to_owned(), Kind::Dir, meta.mode() & PERMISSION_BITS));
            }
        }
        let mut table = ModeTable::from_modes(found);
        table.special = special;
        table
    }

    /// Drops the setuid and setgid bits of every file that changed (content, mode or inode)
    /// since [`ModeTable::capture`] read it: called once the tree is written, so a file whose
    /// bits are kept held the same content from before its hash to after it.
    pub(super) fn confirm_special(&mut self, root: &Path) {
        for (rel, stamp) in std::mem::take(&mut self.special) {
            let same = std::fs::symlink_metadata(root.join(&rel))
                .is_ok_and(|meta| meta.is_file() && FileStamp::of(&meta) == stamp);
            if !same && let Some(mode) = self.except.get_mut(&rel) {
                *mode &= !SPECIAL_BITS;
            }
        }
    }

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
            special: BTreeMap::new(),
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
            special: BTreeMap::new(),
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

    #[test]
    fn a_setuid_file_that_changed_after_its_mode_was_read_loses_the_bit() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        for name in ["kept", "rewritten", "replaced"] {
            std::fs::write(tmp.path().join(name), "mine").unwrap();
            std::fs::set_permissions(
                tmp.path().join(name),
                std::fs::Permissions::from_mode(0o4755),
            )
            .unwrap();
        }
        let mut table =
            ModeTable::capture(tmp.path(), ["kept", "rewritten", "replaced"].into_iter());
        assert_eq!(table.mode_of("rewritten", Kind::Exec), 0o4755);
        // What a background process of the session does between the read and the hash (as
        // root here, so the kernel keeps the bit on the write).
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(tmp.path().join("rewritten"), "theirs").unwrap();
        std::fs::remove_file(tmp.path().join("replaced")).unwrap();
        std::fs::write(tmp.path().join("replaced"), "theirs").unwrap();
        table.confirm_special(tmp.path());
        let back = ModeTable::decode(&table.encode()).unwrap();
        assert_eq!(back.mode_of("kept", Kind::Exec), 0o4755);
        assert_eq!(back.mode_of("rewritten", Kind::Exec), 0o755);
        assert_eq!(back.mode_of("replaced", Kind::Exec), 0o755);
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

//! What git took into a session's index, checked against the project as the controller reads
//! it itself.
//!
//! The design decision to know: git hashes a file it is given by path (`update-index --add`,
//! `hash-object --stdin-paths`) by `lstat` and then `open`, which follows a link. A command's
//! background process that swaps a file for a link to a file it cannot read (the state root,
//! the user's keys) between the two, and back, had git store that file's bytes as the project's
//! (`intendant diff` showed them, a rewind wrote them into the project). So each regular file
//! git took is read again here, beneath the project with no link followed anywhere on its path
//! (`openat2`), and hashed as git hashes a blob: an entry whose blob is not what the project
//! holds at that path is set to the blob of what it does hold (written here), or removed when
//! no regular file is there now (the next capture takes what is). What git read through a link
//! is then in the store's objects, unreachable from every checkpoint, and gone at its next
//! collection.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::CheckpointError;
use super::store_git::{blob_id, write_loose_blob};

/// git's mode of a regular file, and of an executable one, in an index entry.
const REGULAR: u32 = 0o100644;
const EXECUTABLE: u32 = 0o100755;

/// One index entry as this check reads it: its mode and its object id (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) mode: u32,
    pub(super) id: String,
}

/// The entries of the index file `bytes` (versions 2 and 3, what the store's git writes) by
/// path; `None` for anything else (a version 4 index, a damaged one).
pub(super) fn read_index(bytes: &[u8]) -> Option<HashMap<Vec<u8>, Entry>> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(..4)? != b"DIRC" || !matches!(word(4)?, 2 | 3) {
        return None;
    }
    let count = word(8)?;
    let mut at = 12;
    let mut entries = HashMap::new();
    for _ in 0..count {
        let mode = word(at + 24)?;
        let id = crate::digest::hex(bytes.get(at + 40..at + 60)?);
        let flags = u16::from_be_bytes(bytes.get(at + 60..at + 62)?.try_into().ok()?);
        let name_at = at + 62 + if flags & 0x4000 != 0 { 2 } else { 0 };
        let name_len = bytes.get(name_at..)?.iter().position(|b| *b == 0)?;
        let path = bytes.get(name_at..name_at + name_len)?.to_vec();
        // Padded with one to eight NULs to a multiple of eight from the entry's start.
        at += (name_at - at + name_len + 8) & !7;
        entries.insert(path, Entry { mode, id });
    }
    Some(entries)
}

/// What an entry git took is set to: the blob of what the project holds (written), or nothing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Correction {
    /// Set the entry to this mode and blob.
    Set { mode: u32, id: String },
    /// Remove the entry: no regular file of at most the captured size is at the path now.
    Remove,
}

/// The corrections `paths` (NUL-ended, relative to the project `root`) need in the index
/// `index`: each one the index holds as a regular file whose blob is not the bytes the project
/// holds at that path, read with no link followed. Blobs of what is held are written under
/// `objects`. Files larger than `max_bytes` count as not there (git's listing leaves them out).
pub(super) fn check(
    root: &Path,
    index: &Path,
    objects: &Path,
    paths: &[u8],
    max_bytes: u64,
) -> Result<Vec<(Vec<u8>, Correction)>, CheckpointError> {
    let bytes = std::fs::read(index).map_err(|e| CheckpointError::io(index, e))?;
    let entries = read_index(&bytes).ok_or_else(|| {
        CheckpointError::io(
            index,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not an index of version 2 or 3",
            ),
        )
    })?;
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| CheckpointError::io(root, e.into()))?;
    let mut corrections = Vec::new();
    for path in paths.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let Some(entry) = entries.get(path) else {
            continue;
        };
        if !matches!(entry.mode, REGULAR | EXECUTABLE) {
            continue;
        }
        let correction = match held(&dir, path, max_bytes) {
            Some((mode, content)) => {
                if blob_id(&content) == entry.id && mode == entry.mode {
                    continue;
                }
                let id = write_loose_blob(objects, &content)?;
                Correction::Set { mode, id }
            }
            None => Correction::Remove,
        };
        corrections.push((path.to_vec(), correction));
    }
    Ok(corrections)
}

/// Whether each of `taken`'s blob ids, given by git to the regular file at its path beneath
/// `root`, is that of the bytes the project holds there (read with no link followed, at most
/// `max_bytes`): a capture that wrote no index ([`super::resident_git`]) is checked so.
pub(super) fn all_held(root: &Path, taken: &[(String, String)], max_bytes: u64) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(dir) = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    taken.iter().all(|(path, id)| {
        held(&dir, std::ffi::OsStr::new(path).as_bytes(), max_bytes)
            .is_some_and(|(_, content)| blob_id(&content) == *id)
    })
}

/// The mode (as git records it) and bytes of the regular file at `path` beneath `dir`, opened
/// with no link followed anywhere on the path and without waiting (a FIFO); `None` when there
/// is none of at most `max_bytes`.
fn held(dir: &OwnedFd, path: &[u8], max_bytes: u64) -> Option<(u32, Vec<u8>)> {
    regular(open_beneath(dir, path).ok()?, max_bytes)
}

/// Opens `path` beneath `dir` for reading with no link followed anywhere on it (`openat2` with
/// `RESOLVE_NO_SYMLINKS`; `ELOOP` when its last component is a link) and without waiting: what
/// git stores of a project's file is read so, never through a link a command planted.
pub(super) fn open_beneath(dir: &OwnedFd, path: &[u8]) -> rustix::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    rustix::fs::openat2(
        dir,
        std::ffi::OsStr::from_bytes(path),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// The mode (as git records it) and bytes of the opened `fd`, when it is a regular file of at
/// most `max_bytes`.
pub(super) fn regular(fd: OwnedFd, max_bytes: u64) -> Option<(u32, Vec<u8>)> {
    let file = std::fs::File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max_bytes {
        return None;
    }
    let mut content = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut content)
        .ok()?;
    if content.len() as u64 > max_bytes {
        return None;
    }
    let mode = if meta.permissions().mode() & 0o111 != 0 {
        EXECUTABLE
    } else {
        REGULAR
    };
    Some((mode, content))
}

/// `corrections` as `update-index -z --index-info` reads them (removals as mode 0).
pub(super) fn index_info(corrections: &[(Vec<u8>, Correction)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, correction) in corrections {
        match correction {
            Correction::Set { mode, id } => {
                out.extend_from_slice(format!("{mode:o} {id}\t").as_bytes())
            }
            Correction::Remove => {
                out.extend_from_slice(format!("0 {}\t", super::store_git::NULL_ID).as_bytes())
            }
        }
        out.extend_from_slice(path);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store of `dir`: a bare repository at `.store`.
    fn init(dir: &Path) {
        let status = std::process::Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(dir.join(".store"))
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn git(dir: &Path, index: &Path, args: &[&str], stdin: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut child = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_DIR", dir.join(".store"))
            .env("GIT_INDEX_FILE", index)
            .env("GIT_WORK_TREE", dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        out.stdout
    }

    /// The index git writes is read as `ls-files -s` lists it: modes, ids and paths, long and
    /// short names and an executable among them.
    #[test]
    fn an_index_is_read_as_git_lists_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let index = root.join("index");
        init(root);
        std::fs::create_dir(root.join("sub")).unwrap();
        let deep = format!("{}/{}", "d".repeat(200), "e".repeat(200));
        std::fs::create_dir_all(root.join(&deep)).unwrap();
        let long = format!("{deep}/file");
        for (name, text) in [("a", "one"), ("sub/b.txt", "two"), (long.as_str(), "three")] {
            std::fs::write(root.join(name), text).unwrap();
        }
        std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a", root.join("link")).unwrap();
        let paths = format!("a\0sub/b.txt\0{long}\0link\0");
        git(
            root,
            &index,
            &["update-index", "--add", "-z", "--stdin"],
            paths.as_bytes(),
        );
        let listed = git(root, &index, &["ls-files", "-s", "-z"], b"");
        let entries = read_index(&std::fs::read(&index).unwrap()).unwrap();
        assert_eq!(entries.len(), 4);
        for line in listed.split(|b| *b == 0).filter(|l| !l.is_empty()) {
            let line = String::from_utf8_lossy(line);
            let (head, path) = line.split_once('\t').unwrap();
            let mut head = head.split(' ');
            let mode = u32::from_str_radix(head.next().unwrap(), 8).unwrap();
            let id = head.next().unwrap().to_owned();
            assert_eq!(entries[path.as_bytes()], Entry { mode, id }, "{path}");
        }
        assert!(read_index(b"DIRC\0\0\0\x04\0\0\0\0").is_none(), "version 4");
        assert!(
            read_index(&std::fs::read(&index).unwrap()[..40]).is_none(),
            "cut short"
        );
    }

    /// git took the bytes of a file outside the project through a link swapped in for `a.txt`
    /// between its `lstat` and its `open`, and back: the entry is set to the blob of what the
    /// project holds; one that is a link now is removed; one git read right is left alone.
    #[test]
    fn an_entry_whose_blob_is_not_what_the_project_holds_is_set_right() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let index = root.join("index");
        init(root);
        let objects = root.join(".store/objects");
        std::fs::write(root.join("a.txt"), "SECRET-OF-THE-USER").unwrap();
        std::fs::write(root.join("b.txt"), "SECRET-TOO").unwrap();
        std::fs::write(root.join("c.txt"), "as read").unwrap();
        git(
            root,
            &index,
            &["update-index", "--add", "-z", "--stdin"],
            b"a.txt\0b.txt\0c.txt\0",
        );
        std::fs::write(root.join("a.txt"), "decoy").unwrap();
        std::fs::remove_file(root.join("b.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("b.txt")).unwrap();
        let fixes = check(root, &index, &objects, b"a.txt\0b.txt\0c.txt\0", 1 << 20).unwrap();
        assert_eq!(
            fixes,
            vec![
                (
                    b"a.txt".to_vec(),
                    Correction::Set {
                        mode: REGULAR,
                        id: blob_id(b"decoy")
                    }
                ),
                (b"b.txt".to_vec(), Correction::Remove),
            ]
        );
        git(
            root,
            &index,
            &["update-index", "-z", "--index-info"],
            &index_info(&fixes),
        );
        let tree = String::from_utf8(git(root, &index, &["write-tree"], b"")).unwrap();
        let listed = git(root, &index, &["ls-tree", "-r", tree.trim()], b"");
        let listed = String::from_utf8_lossy(&listed);
        assert!(
            listed.contains(&blob_id(b"decoy")) && !listed.contains("b.txt"),
            "{listed}"
        );
        let shown = git(root, &index, &["cat-file", "-p", &blob_id(b"decoy")], b"");
        assert_eq!(shown, b"decoy");
        assert!(
            check(root, &index, &objects, b"a.txt\0c.txt\0", 1 << 20)
                .unwrap()
                .is_empty()
        );
    }

    /// A capture through the resident helpers is taken only when each blob git gave is what the
    /// project holds at its path: one read through a link (or from another file put there and
    /// back) is refused, as is a path that is a link now.
    #[test]
    fn resident_blobs_count_only_when_they_are_what_the_project_holds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "decoy").unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("l")).unwrap();
        let taken = |path: &str, bytes: &[u8]| vec![(path.to_owned(), blob_id(bytes))];
        assert!(all_held(root, &taken("a.txt", b"decoy"), 1024));
        assert!(!all_held(root, &taken("a.txt", b"SECRET"), 1024));
        assert!(!all_held(root, &taken("l", b"decoy"), 1024));
        assert!(
            !all_held(root, &taken("a.txt", b"decoy"), 2),
            "past the size captured"
        );
    }
}

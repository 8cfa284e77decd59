//! [`remove_tree`]: removes a directory tree that a session's commands may have shaped (a
//! session's artifacts, a pointer a command replaced by a directory), however deep or wide.
//!
//! The design decision to know: the standard library's `remove_dir_all` recurses once per level
//! and holds a descriptor per level, so a chain of directories 30,000 deep, which any command
//! can make in its own artifacts directory in a few seconds, overflows the stack of the thread
//! that removes it (the daemon's, aborting it and every session it holds) or takes every
//! descriptor first. This one walks with a stack of its own on the heap, holds at most
//! [`OPEN_LEVELS`] directories open, works only through directory descriptors (no path longer
//! than a name, so no `ENAMETOOLONG`), never follows a link, and moves a directory deeper than
//! that up into the tree's top (under a fresh name), emptied by a later pass over the top.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};

/// Most directories of the tree held open at once.
const OPEN_LEVELS: usize = 32;

/// Removes `path`: a directory with everything under it, or anything else (a link is removed,
/// never followed). Absent is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(meta) if !meta.is_dir() => return std::fs::remove_file(path),
        Ok(_) => {}
    }
    let top = open_dir(rustix::fs::CWD, path)?;
    // A pass that moved a too-deep directory up may not have read it again (a directory read
    // while it changes may or may not show a new entry): pass again until one moved nothing.
    let mut fresh = 0;
    while empty(&top, &mut fresh)? {}
    drop(top);
    std::fs::remove_dir(path)
}

/// Opens directory `name` under `at` without following a link.
fn open_dir(at: impl AsFd, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// One directory being emptied: its reading, and its name in the directory above (none for
/// the top).
struct Level {
    dir: Dir,
    name: Option<CString>,
}

/// Removes everything under `top`; returns whether it moved a directory up into `top` (deeper
/// than [`OPEN_LEVELS`]), which is then left for another pass. `fresh` numbers the names moves
/// take, counting on from pass to pass (a name still taken is skipped).
fn empty(top: &OwnedFd, fresh: &mut u64) -> io::Result<bool> {
    let mut levels = vec![Level {
        dir: Dir::new(open_dir(top, ".")?)?,
        name: None,
    }];
    let mut moved = false;
    loop {
        let depth = levels.len();
        let Some(level) = levels.last_mut() else {
            break;
        };
        let Some(entry) = level.dir.read() else {
            let Some(done) = levels.pop() else { break };
            if let (Some(parent), Some(name)) = (levels.last(), done.name) {
                drop(done.dir);
                rustix::fs::unlinkat(parent.dir.fd()?, name.as_c_str(), AtFlags::REMOVEDIR)?;
            }
            continue;
        };
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let at = level.dir.fd()?;
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => {
                let stat = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)?;
                FileType::from_raw_mode(stat.st_mode) == FileType::Directory
            }
            _ => false,
        };
        if !is_dir {
            rustix::fs::unlinkat(at, name, AtFlags::empty())?;
            continue;
        }
        let name = name.to_owned();
        if depth < OPEN_LEVELS {
            let dir = Dir::new(open_dir(at, name.as_c_str())?)?;
            levels.push(Level {
                dir,
                name: Some(name),
            });
            continue;
        }
        // Too deep to hold open: up into the top under a name nothing there has.
        loop {
            let to = format!(".intendant-deep-{fresh}");
            *fresh += 1;
            match rustix::fs::renameat_with(at, name.as_c_str(), top, to, RenameFlags::NOREPLACE) {
                Ok(()) => break,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        moved = true;
    }
    Ok(moved)
}

/// A chain of `depth` directories named `d` under the directory `base`, made through
/// descriptors (its path is longer than any system call takes), with a file at its bottom: what
/// a command can leave wherever it may write.
#[cfg(test)]
pub(crate) fn chain(base: &Path, depth: usize) {
    let mut fd = open_dir(rustix::fs::CWD, base).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = open_dir(&fd, "d").unwrap();
    }
    let file = rustix::fs::openat(
        &fd,
        "bottom",
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    drop(file);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_deeper_than_the_stack_and_the_descriptors_allow_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        // On a thread with a small stack, as the daemon's workers have: the standard library's
        // recursion overflowed it (and aborted the process) well before this depth.
        let removed = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn({
                let tree = tree.clone();
                move || {
                    chain(&tree, 30_000);
                    remove_tree(&tree)
                }
            })
            .unwrap()
            .join()
            .unwrap();
        removed.unwrap();
        assert!(!tree.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_wide_tree_with_links_out_is_removed_and_what_the_links_name_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (tree, outside) = (dir.path().join("tree"), dir.path().join("outside"));
        std::fs::create_dir_all(outside.join("kept")).unwrap();
        std::fs::write(outside.join("file"), "kept").unwrap();
        for i in 0..300 {
            let sub = tree.join(format!("s{i}")).join("inner");
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join("f"), "x").unwrap();
            std::os::unix::fs::symlink(&outside, tree.join(format!("s{i}/out"))).unwrap();
        }
        // A name a move up could have taken, already there.
        std::fs::create_dir_all(tree.join(".intendant-deep-0/x")).unwrap();
        chain(&tree.join("s7"), 100);
        // Many directories below the depth held open: each is moved up, under names counted on
        // from pass to pass.
        let deep = (0..40).fold(tree.join("s9"), |p, i| p.join(format!("l{i}")));
        for i in 0..200 {
            std::fs::create_dir_all(deep.join(format!("w{i}/x"))).unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("file")).unwrap(),
            "kept"
        );
        assert!(outside.join("kept").is_dir());
    }

    #[test]
    fn a_file_a_link_and_nothing_are_removed_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let (file, link, target) = (
            dir.path().join("file"),
            dir.path().join("link"),
            dir.path().join("target"),
        );
        std::fs::write(&file, "x").unwrap();
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_tree(&file).unwrap();
        remove_tree(&link).unwrap();
        remove_tree(&dir.path().join("absent")).unwrap();
        assert!(!file.exists() && std::fs::symlink_metadata(&link).is_err());
        assert!(target.is_dir(), "a link is removed, never followed");
    }
}

//! Writing a checkpoint back into the project by directory descriptor, so a restore never
//! follows a link out of the project and never writes outside it.
//!
//! The project root is opened once; every path is then walked one plain component at a time
//! with `O_DIRECTORY | O_NOFOLLOW`. A component that is a link or a file where the checkpoint
//! has a directory is removed (the link itself, never what it points at) and a directory made in
//! its place. A file is written straight at its name when only that file can be touched: a
//! regular file with no other link is rewritten in place through a descriptor opened with
//! `O_NOFOLLOW` (checked to be that before a byte is written), and a missing one is made with
//! `O_EXCL`. Anything else (a link, a directory, a file with another link or one it may not
//! open) and every link are written under a fresh temporary name and renamed over the name,
//! which replaces whatever was there without following it (a directory in the way, which the
//! rename refuses, is removed first). On ext4 a rename over a file costs ten times a rewrite in
//! place: it starts the new file's writeback at once. Permission bits are set last, on the
//! inode opened with `O_PATH | O_NOFOLLOW` (a link is never changed, nor what it points at).
//!
//! A restore writes in path order, so the files of one directory come one after another: they
//! share the descriptor of the first walk to it (a removal forgets it, and a write that finds it
//! gone walks again), and the temporary names share one random part drawn when the restore
//! starts (a counter tells them apart; `O_EXCL` refuses a name that exists). Many files are
//! written on two threads, each a run of whole directories with its own kept descriptor and its
//! own temporary names; a directory both need is made by whichever comes first.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::record_dir::random_suffix;

/// Mode of the directories a restore creates (before the umask).
const DIR_MODE: u32 = 0o755;

/// From this many files on, a restore writes on two threads.
const PARALLEL_WRITES: usize = 64;

/// What one path becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Content {
    /// A regular file with these bytes; `executable` sets the mode to 0755 (else 0644).
    File {
        /// The bytes.
        bytes: Vec<u8>,
        /// Whether the executable bits are set.
        executable: bool,
    },
    /// A symbolic link to this target (written as is: it is never followed).
    Symlink(Vec<u8>),
}

/// The project root, open by descriptor.
pub(super) struct ProjectDir {
    fd: OwnedFd,
    path: PathBuf,
    /// The directory the last write went to, by its project-relative path: a restore writes in
    /// path order, so the files of one directory come together and share one walk to it.
    /// Forgotten whenever a directory is removed.
    last_parent: Mutex<Option<(String, Arc<OwnedFd>)>>,
    /// The random part of this restore's temporary names, drawn once.
    tmp_prefix: String,
    /// Temporary names made so far.
    tmp_count: AtomicU64,
}

impl ProjectDir {
    /// Opens the project root (a link there is refused).
    pub(super) fn open(path: &Path) -> io::Result<ProjectDir> {
        let fd = rustix::fs::open(path, dir_flags(), Mode::empty())
            .map_err(|e| with_path(path, e.into()))?;
        Ok(ProjectDir {
            fd,
            path: path.to_path_buf(),
            last_parent: Mutex::new(None),
            tmp_prefix: format!(".intendant-restore-{}", random_suffix()?),
            tmp_count: AtomicU64::new(0),
        })
    }

    /// Writes each `(rel, content)` as [`ProjectDir::write`] does, in order (a run of paths in
    /// path order); on two threads when there are many and two cores. The first failure, with
    /// its path.
    pub(super) fn write_all<'a>(
        &self,
        writes: &'a [(String, Content)],
    ) -> Result<(), (&'a str, io::Error)> {
        let write_run = |dir: &ProjectDir, run: &'a [(String, Content)]| {
            run.iter().try_for_each(|(rel, content)| {
                dir.write(rel, content).map_err(|e| (rel.as_str(), e))
            })
        };
        let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        let split =
            (two_cores && writes.len() >= PARALLEL_WRITES).then(|| split_at_directory(writes));
        let Some(split) = split.filter(|at| *at > 0 && *at < writes.len()) else {
            return write_run(self, writes);
        };
        let (first, second) = writes.split_at(split);
        let second_start = second[0].0.as_str();
        let other = self.sibling().map_err(|e| (second_start, e))?;
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| write_run(&other, second));
            let first = write_run(self, first);
            let second = writer.join().unwrap_or_else(|_| {
                Err((second_start, io::Error::other("the second writer panicked")))
            });
            first.and(second)
        })
    }

    /// Another handle on the same project root for a second writer: its own kept directory and
    /// its own temporary names.
    fn sibling(&self) -> io::Result<ProjectDir> {
        Ok(ProjectDir {
            fd: rustix::io::dup(&self.fd)?,
            path: self.path.clone(),
            last_parent: Mutex::new(None),
            tmp_prefix: format!("{}b", self.tmp_prefix),
            tmp_count: AtomicU64::new(0),
        })
    }

    /// Writes `content` at the project-relative `rel`, making its directories.
    pub(super) fn write(&self, rel: &str, content: &Content) -> io::Result<()> {
        let (parent, name, kept) = self.parent_for_write(rel)?;
        match self.write_in(&parent, name, rel, content) {
            // The kept directory went since the last write (removed, or a link put in its
            // place): walked to afresh, as any write's directory is.
            Err(e) if kept && e.kind() == io::ErrorKind::NotFound => {
                self.forget_parent();
                let (parent, name, _) = self.parent_for_write(rel)?;
                self.write_in(&parent, name, rel, content)
            }
            written => written,
        }
    }

    /// [`ProjectDir::write`] of `rel`, named `name` in its open directory `parent`.
    fn write_in(
        &self,
        parent: &OwnedFd,
        name: &str,
        rel: &str,
        content: &Content,
    ) -> io::Result<()> {
        if let Content::File { bytes, executable } = content
            && write_in_place(parent, name, bytes, file_mode(*executable))
                .map_err(|e| with_path(&self.path.join(rel), e))?
        {
            return Ok(());
        }
        self.write_replacing(parent, name, rel, content)
    }

    /// [`ProjectDir::write_in`] under a temporary name renamed over `name`.
    fn write_replacing(
        &self,
        parent: &OwnedFd,
        name: &str,
        rel: &str,
        content: &Content,
    ) -> io::Result<()> {
        // Unique within this restore; `O_EXCL` refuses a name something else made meanwhile.
        let tmp = format!(
            "{}-{}",
            self.tmp_prefix,
            self.tmp_count.fetch_add(1, Ordering::Relaxed)
        );
        match content {
            Content::File { bytes, executable } => {
                let mode = file_mode(*executable);
                let fd = rustix::fs::openat(
                    parent,
                    tmp.as_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(mode),
                )
                .map_err(|e| with_path(&self.path.join(rel), e.into()))?;
                let mut file = std::fs::File::from(fd);
                let written = file.write_all(bytes).and_then(|()| {
                    rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(mode))
                        .map_err(io::Error::from)
                });
                if let Err(e) = written {
                    let _ = rustix::fs::unlinkat(parent, tmp.as_str(), AtFlags::empty());
                    return Err(with_path(&self.path.join(rel), e));
                }
            }
            Content::Symlink(target) => {
                rustix::fs::symlinkat(target.as_slice(), parent, tmp.as_str())
                    .map_err(|e| with_path(&self.path.join(rel), e.into()))?;
            }
        }
        let mut renamed = rustix::fs::renameat(parent, tmp.as_str(), parent, name);
        // A directory in the way is the old state of this path (the checkpoint has a file).
        if matches!(
            renamed,
            Err(rustix::io::Errno::ISDIR | rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST)
        ) && is_dir_at(parent.as_fd(), name)
        {
            self.forget_parent();
            if let Err(e) = remove_tree(parent.as_fd(), name) {
                let _ = rustix::fs::unlinkat(parent, tmp.as_str(), AtFlags::empty());
                return Err(with_path(&self.path.join(rel), e));
            }
            renamed = rustix::fs::renameat(parent, tmp.as_str(), parent, name);
        }
        renamed.map_err(|e| {
            let _ = rustix::fs::unlinkat(parent, tmp.as_str(), AtFlags::empty());
            with_path(&self.path.join(rel), e.into())
        })
    }

    /// The open directory to write `rel` in (made as [`ProjectDir::parent_of`] makes it), its
    /// last component, and whether the directory is the last write's, kept open.
    fn parent_for_write<'a>(&self, rel: &'a str) -> io::Result<(Arc<OwnedFd>, &'a str, bool)> {
        let dir = rel.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut last = self
            .last_parent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((cached, fd)) = last.as_ref()
            && cached == dir
        {
            // `rel` is checked as a fresh walk would (no `..`, no empty component).
            let name = rel.rsplit('/').next().unwrap_or(rel);
            if plain(name) {
                return Ok((Arc::clone(fd), name, true));
            }
        }
        let (parent, name) = self.parent_of(rel, true)?;
        let parent = Arc::new(parent.ok_or_else(|| io::Error::other("no parent directory"))?);
        *last = Some((dir.to_owned(), Arc::clone(&parent)));
        Ok((parent, name, false))
    }

    /// Forgets the last write's directory (a directory is being removed).
    fn forget_parent(&self) {
        *self
            .last_parent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Sets the permission bits of the file or directory at `rel` to `mode` when they differ;
    /// whether it did. A link there, or on the way, is left as it is: the change goes to the
    /// inode opened without following links, through `/proc/self/fd`, never to a name that
    /// could be swapped for a link in between.
    pub(super) fn set_mode(&self, rel: &str, mode: u32) -> io::Result<bool> {
        let (parent, name) = self.parent_of(rel, false)?;
        let Some(parent) = parent else {
            return Ok(false);
        };
        let fd = match rustix::fs::openat(
            &parent,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(false),
            Err(e) => return Err(with_path(&self.path.join(rel), e.into())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| with_path(&self.path.join(rel), e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile | FileType::Directory => {}
            _ => return Ok(false),
        }
        if st.st_mode & 0o7777 == mode {
            return Ok(false);
        }
        let by_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
        rustix::fs::chmod(by_fd.as_str(), Mode::from_raw_mode(mode))
            .map_err(|e| with_path(&self.path.join(rel), e.into()))?;
        Ok(true)
    }

    /// Removes the file, link or directory at `rel` (a missing one is no error), then every
    /// directory above it that this left empty.
    pub(super) fn remove(&self, rel: &str) -> io::Result<()> {
        self.forget_parent();
        let (parent, name) = self.parent_of(rel, false)?;
        let Some(parent) = parent else {
            return Ok(());
        };
        match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                remove_tree(parent.as_fd(), name)
                    .map_err(|e| with_path(&self.path.join(rel), e))?;
            }
            Ok(_) => rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                .map_err(|e| with_path(&self.path.join(rel), e.into()))?,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(with_path(&self.path.join(rel), e.into())),
        }
        self.prune_empty_parents(rel);
        Ok(())
    }

    /// Removes the directories above `rel` that are now empty, deepest first (a directory still
    /// holding an ignored file stays).
    fn prune_empty_parents(&self, rel: &str) {
        let mut dir = rel;
        while let Some((up, _)) = dir.rsplit_once('/') {
            let Ok((Some(parent), name)) = self.parent_of(up, false) else {
                return;
            };
            if rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR).is_err() {
                return;
            }
            dir = up;
        }
    }

    /// The open directory holding `rel` and its last component. With `create`, missing
    /// directories are made and anything else in their place (a file, a link) removed; without,
    /// `None` when a directory on the way is missing or is not a directory.
    fn parent_of<'a>(&self, rel: &'a str, create: bool) -> io::Result<(Option<OwnedFd>, &'a str)> {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.iter().any(|p| !plain(p)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel:?} is not a plain relative path"),
            ));
        }
        let (name, dirs) = parts
            .split_last()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty path"))?;
        let mut dir = rustix::io::dup(&self.fd).map_err(io::Error::from)?;
        for part in dirs {
            match rustix::fs::openat(&dir, *part, dir_flags(), Mode::empty()) {
                Ok(next) => dir = next,
                // Missing, or a link or a file where the checkpoint has a directory (it goes,
                // unfollowed). Another writer of this restore may be making the same directory:
                // what it removed or made first is no error.
                Err(
                    rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP,
                ) if create => {
                    match rustix::fs::unlinkat(&dir, *part, AtFlags::empty()) {
                        Ok(()) | Err(rustix::io::Errno::NOENT | rustix::io::Errno::ISDIR) => {}
                        Err(e) => return Err(e.into()),
                    }
                    match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(DIR_MODE)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    dir = rustix::fs::openat(&dir, *part, dir_flags(), Mode::empty())?;
                }
                Err(
                    rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP,
                ) => return Ok((None, name)),
                Err(e) => return Err(with_path(&self.path.join(rel), e.into())),
            }
        }
        Ok((Some(dir), name))
    }
}

/// Where [`ProjectDir::write_all`] splits `writes` between two writers: at the first change of
/// directory from the middle on, so no directory is written by both.
pub(super) fn split_at_directory(writes: &[(String, Content)]) -> usize {
    let dir_of = |rel: &str| rel.rsplit_once('/').map_or("", |(dir, _)| dir).to_owned();
    let middle = writes.len() / 2;
    let dir = dir_of(&writes[middle - 1].0);
    (middle..writes.len())
        .find(|&i| dir_of(&writes[i].0) != dir)
        .unwrap_or(writes.len())
}

/// The permission bits of a restored file.
fn file_mode(executable: bool) -> u32 {
    if executable { 0o755 } else { 0o644 }
}

/// Writes `bytes` (with `mode`) straight at `name` in `dir` when only that file can be touched:
/// a regular file with no other link there, rewritten in place, or nothing there, made with
/// `O_EXCL`. Whether it did; `false` touched nothing (a link, a directory, a FIFO, a file with
/// another link, one it may not open for writing, or an entry made meanwhile are for the
/// rename). A write that fails once begun is an error.
fn write_in_place(dir: &OwnedFd, name: &str, bytes: &[u8], mode: u32) -> io::Result<bool> {
    // Never blocks on a FIFO, never makes a terminal the controlling one.
    let flags =
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let (fd, made) = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => {
            let st = rustix::fs::fstat(&fd)?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink != 1 {
                return Ok(false);
            }
            (fd, false)
        }
        Err(rustix::io::Errno::NOENT) => {
            let create = flags | OFlags::CREATE | OFlags::EXCL;
            match rustix::fs::openat(dir, name, create, Mode::from_raw_mode(mode)) {
                Ok(fd) => (fd, true),
                Err(_) => return Ok(false),
            }
        }
        Err(_) => return Ok(false),
    };
    let mut file = std::fs::File::from(fd);
    // Written before the old length is cut, so a file of the same size is never empty.
    let written = file
        .write_all(bytes)
        .and_then(|()| file.set_len(bytes.len() as u64))
        .and_then(|()| {
            rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(mode)).map_err(io::Error::from)
        });
    if let Err(e) = written {
        if made {
            let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        }
        return Err(e);
    }
    Ok(true)
}

/// Whether `name` in `dir` is a directory (not a link to one).
fn is_dir_at(dir: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
}

/// Removes the directory `name` in `dir` with everything in it, by descriptor (a link inside
/// is removed, never followed).
fn remove_tree(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    remove_tree_c(dir, &name)
}

fn remove_tree_c(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let fd = rustix::fs::openat(dir, name, dir_flags(), Mode::empty())?;
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd)? {
        let entry = entry?;
        let entry_name = entry.file_name();
        if entry_name == c"." || entry_name == c".." {
            continue;
        }
        entries.push(entry_name.to_owned());
    }
    for entry in entries {
        let st = rustix::fs::statat(&fd, entry.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            remove_tree_c(fd.as_fd(), &entry)?;
        } else {
            rustix::fs::unlinkat(&fd, entry.as_c_str(), AtFlags::empty())?;
        }
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

/// A path component git could have stored: not empty, `.` or `..`.
fn plain(part: &str) -> bool {
    !part.is_empty() && part != "." && part != ".." && !part.contains('\0')
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

//! The guard's walk: a path resolved one component at a time by descriptor.
//!
//! Every component is opened with `O_PATH | O_NOFOLLOW` relative to the directory descriptor
//! before it, after the path it resolves to so far has passed the rules. A symlink is never
//! followed by the kernel: its target is read from the link's own descriptor and walked the same
//! way. So the directory a structured function acts in is the very one that was checked, and a
//! command that swaps a component for a link after the check changes nothing: the walk holds the
//! descriptors, not the names.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{MAX_SYMLINKS, PathGuardError, check_blocked};

/// A path located by the walk.
#[derive(Debug)]
pub struct Located {
    /// Absolute and lexically normalized, links not followed.
    pub absolute: PathBuf,
    /// Every symlink resolved (the location a write reaches; a missing tail kept lexically).
    pub resolved: PathBuf,
    /// The directory holding the final object and its name there, when every directory on the
    /// way exists; otherwise why not (`NotFound`, `NotADirectory`).
    pub parent: Result<(OwnedFd, OsString), io::Error>,
    /// The final object itself (`O_PATH`, not followed), when it exists.
    pub object: Option<File>,
}

/// How the final component is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    /// A final symlink is followed (to edit its target).
    Follow,
    /// A final symlink is the object (to inspect the link), its target still checked.
    Inspect,
}

/// Walks the lexically absolute `absolute` (no `..`), creating missing directories when
/// `create_dirs`, and refuses it when where it leads is blocked; `raw` names the path in errors.
pub fn locate(
    absolute: &Path,
    raw: &str,
    last: Final,
    create_dirs: bool,
) -> Result<Located, PathGuardError> {
    walk_to(Walk::new(raw)?, absolute, last, create_dirs)
}

/// Where `absolute` leads, every link followed, without applying the rules.
#[cfg(test)]
pub fn resolve(absolute: &Path, raw: &str) -> Result<PathBuf, PathGuardError> {
    let mut walk = Walk::new(raw)?;
    walk.check = false;
    walk_to(walk, absolute, Final::Follow, false).map(|l| l.resolved)
}

fn walk_to(
    walk: Walk<'_>,
    absolute: &Path,
    last: Final,
    create_dirs: bool,
) -> Result<Located, PathGuardError> {
    let name = match absolute.file_name() {
        Some(name) => name.to_owned(),
        None => {
            // `/` itself: the root is the object.
            let object = walk
                .open_here(OsStr::new("."), OFlags::empty())
                .map_err(|e| resolve_err(Path::new("/"), e))?;
            return Ok(Located {
                absolute: absolute.to_path_buf(),
                resolved: PathBuf::from("/"),
                parent: Err(io::Error::other("the root has no parent")),
                object: Some(File::from(object)),
            });
        }
    };
    let parents = absolute.parent().map(names).unwrap_or_default();
    let mut located = walk.finish(parents, name, last, create_dirs)?;
    located.absolute = absolute.to_path_buf();
    Ok(located)
}

/// The components of `path` as names, in walk order (a root or prefix is dropped: the walk
/// starts at `/`).
fn names(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::Prefix(_) | Component::RootDir | Component::CurDir => None,
        })
        .collect()
}

/// Directories entered so far, root first: each descriptor and the path it was checked as.
struct Walk<'a> {
    stack: Vec<(OwnedFd, PathBuf)>,
    links: usize,
    raw: &'a str,
    /// Whether the final location must pass the rules (`false` only for plain resolution).
    check: bool,
}

/// What one component turned out to be.
enum Entry {
    Dir(OwnedFd),
    Link(PathBuf),
    Other(OwnedFd),
}

/// Where entering directories stopped early: why, and the resolved path up to there.
type Stopped = (io::Error, PathBuf);

impl<'a> Walk<'a> {
    fn new(raw: &'a str) -> Result<Self, PathGuardError> {
        let root = rustix::fs::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| resolve_err(Path::new("/"), e.into()))?;
        Ok(Walk {
            stack: vec![(root, PathBuf::from("/"))],
            links: 0,
            raw,
            check: true,
        })
    }

    /// The current directory (the root is never popped).
    fn here(&self) -> (&OwnedFd, &Path) {
        let (fd, path) = &self.stack[self.stack.len() - 1];
        (fd, path)
    }

    /// Refuses `path` when a rule blocks it (unless this walk only resolves).
    fn check(&self, path: &Path) -> Result<(), PathGuardError> {
        if self.check {
            check_blocked(path, &path.to_string_lossy())?;
        }
        Ok(())
    }

    /// A second walk standing where this one stands.
    fn fork(&self) -> Result<Walk<'a>, PathGuardError> {
        let stack = self
            .stack
            .iter()
            .map(|(fd, p)| Ok((fd.try_clone().map_err(|e| resolve_err(p, e))?, p.clone())))
            .collect::<Result<_, PathGuardError>>()?;
        Ok(Walk {
            stack,
            links: self.links,
            raw: self.raw,
            check: self.check,
        })
    }

    fn open_here(&self, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
        let (dir, _) = self.here();
        Ok(rustix::fs::openat(
            dir,
            name,
            flags | OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Opens `name` in the current directory without following it.
    fn entry(&self, name: &OsStr) -> io::Result<Entry> {
        let fd = self.open_here(name, OFlags::NOFOLLOW)?;
        let mode = rustix::fs::fstat(&fd)?.st_mode;
        Ok(match rustix::fs::FileType::from_raw_mode(mode) {
            rustix::fs::FileType::Directory => Entry::Dir(fd),
            rustix::fs::FileType::Symlink => {
                let target = rustix::fs::readlinkat(&fd, "", Vec::new())?;
                Entry::Link(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
            }
            _ => Entry::Other(fd),
        })
    }

    /// Counts a link and queues its target: an absolute one restarts at the root.
    fn follow(&mut self, target: &Path, pending: &mut Vec<OsString>) -> Result<(), PathGuardError> {
        self.links += 1;
        if self.links > MAX_SYMLINKS {
            return Err(PathGuardError::SymlinkLoop {
                path: self.raw.into(),
            });
        }
        if target.has_root() {
            self.stack.truncate(1);
        }
        pending.extend(names(target).into_iter().rev());
        Ok(())
    }

    /// Enters the directories `parents`, then locates `name` in the last one.
    fn finish(
        mut self,
        parents: Vec<OsString>,
        mut name: OsString,
        last: Final,
        create_dirs: bool,
    ) -> Result<Located, PathGuardError> {
        // Components still to enter, the next one on top.
        let mut pending: Vec<OsString> = parents.into_iter().rev().collect();
        loop {
            if name == "." || name == ".." {
                // Only a link's target ends so: the object is a directory of the walk.
                pending.push(std::mem::replace(&mut name, OsString::from(".")));
            }
            if let Err((why, mut resolved)) = self.enter_all(&mut pending, create_dirs)? {
                for rest in pending.iter().rev().chain(std::iter::once(&name)) {
                    if rest == ".." {
                        resolved.pop();
                    } else if rest != "." {
                        resolved.push(rest);
                    }
                }
                self.check(&resolved)?;
                return Ok(Located {
                    absolute: PathBuf::new(),
                    resolved,
                    parent: Err(why),
                    object: None,
                });
            }
            let resolved = self.here().1.join(&name);
            let entry = match self.entry(&name) {
                Ok(entry) => entry,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.check(&resolved)?;
                    return self.located(resolved, name, None);
                }
                Err(e) => return Err(resolve_err(&resolved, e)),
            };
            let target = match entry {
                Entry::Dir(fd) | Entry::Other(fd) => {
                    self.check(&resolved)?;
                    return self.located(resolved, name, Some(File::from(fd)));
                }
                Entry::Link(target) => target,
            };
            let (parents, target_name) = split(&target);
            if last == Final::Inspect {
                // The link is the object; where it leads must pass the rules too.
                self.check(&resolved)?;
                let object = self
                    .open_here(&name, OFlags::NOFOLLOW)
                    .map_err(|e| resolve_err(&resolved, e))?;
                let mut ahead = self.fork()?;
                ahead.follow(&target, &mut Vec::new())?;
                ahead.finish(parents, target_name, Final::Follow, false)?;
                return self.located(resolved, name, Some(File::from(object)));
            }
            self.follow(&target, &mut Vec::new())?;
            pending = parents.into_iter().rev().collect();
            name = target_name;
        }
    }

    fn located(
        &self,
        resolved: PathBuf,
        name: OsString,
        object: Option<File>,
    ) -> Result<Located, PathGuardError> {
        let (dir, path) = self.here();
        let dir = dir.try_clone().map_err(|e| resolve_err(path, e))?;
        Ok(Located {
            absolute: PathBuf::new(),
            resolved,
            parent: Ok((dir, name)),
            object,
        })
    }

    /// Enters every directory on `pending`. `Ok(Err(_))` when one is missing (or not a
    /// directory) and is not to be created; `pending` then still holds it.
    fn enter_all(
        &mut self,
        pending: &mut Vec<OsString>,
        create_dirs: bool,
    ) -> Result<Result<(), Stopped>, PathGuardError> {
        while let Some(name) = pending.pop() {
            if name == "." {
                continue;
            }
            if name == ".." {
                if self.stack.len() > 1 {
                    self.stack.pop();
                }
                continue;
            }
            let here = self.here().1.to_path_buf();
            let candidate = here.join(&name);
            let entry = match self.entry(&name) {
                Ok(entry) => entry,
                Err(e) if e.kind() == io::ErrorKind::NotFound && create_dirs => {
                    match rustix::fs::mkdirat(
                        self.here().0,
                        name.as_os_str(),
                        Mode::RWXU | Mode::RWXG | Mode::RWXO,
                    ) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(resolve_err(&candidate, e.into())),
                    }
                    // Whatever is there now is walked like anything else.
                    pending.push(name);
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    pending.push(name);
                    return Ok(Err((e, here)));
                }
                Err(e) => return Err(resolve_err(&candidate, e)),
            };
            match entry {
                Entry::Dir(fd) => self.stack.push((fd, candidate)),
                Entry::Link(target) => self.follow(&target, pending)?,
                Entry::Other(_) => {
                    pending.push(name);
                    return Ok(Err((io::Error::from_raw_os_error(libc::ENOTDIR), here)));
                }
            }
        }
        Ok(Ok(()))
    }
}

/// A link target as the directories to enter and the final name.
fn split(target: &Path) -> (Vec<OsString>, OsString) {
    let mut all = names(target);
    let name = all.pop().unwrap_or_else(|| OsString::from("."));
    (all, name)
}

fn resolve_err(path: &Path, source: io::Error) -> PathGuardError {
    PathGuardError::Resolve {
        path: path.to_string_lossy().into_owned(),
        source,
    }
}

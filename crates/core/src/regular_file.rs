//! [`read`]: a file a session's commands may have put where the controller reads (the project's
//! configuration and the allow list an approval writes into it, its instructions, a `.env`, a
//! skill, a git file), read without waiting on it and within a bound.
//!
//! The design decision to know: a command can leave anything at such a name, and swap it
//! between a look and a read: a FIFO, whose opening waits for a writer that never comes (the
//! session's start, and the daemon's thread doing it, stuck for good), a device, or a file of
//! any size. So the file is opened without blocking (`O_NONBLOCK`, which changes nothing for a
//! regular file), checked on the opened descriptor to be a regular file, and read no further
//! than the caller's bound and one byte.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The bytes of the regular file at `path` (a link followed only when `follow`), when it holds
/// at most `max`. Errors: the system's when it cannot be opened (`NotFound` when absent);
/// `InvalidInput` for anything but a regular file (a FIFO, a device, a directory, a link not to
/// be followed); `FileTooLarge` past `max`.
pub fn read(path: &Path, max: u64, follow: bool) -> io::Result<Vec<u8>> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if !follow && e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link",
            ));
        }
        Err(e) => return Err(e),
    };
    checked(file, max)
}

/// How a file beneath a root may be reached by [`read_beneath`].
#[derive(Clone, Copy)]
pub enum Reach<'a> {
    /// With no link anywhere on its path (`RESOLVE_NO_SYMLINKS`).
    Direct,
    /// Through links that stay beneath the root, to a file `unreadable` does not name by its
    /// real path: one a session's commands cannot read as the controller can (a place hidden
    /// from them, a `.env` they see scrubbed of its keys).
    Linked(&'a dyn Fn(&Path) -> bool),
}

/// The bytes of the regular file `relative` beneath the directory `root` (a project, which a
/// session's commands write), when it holds at most `max`, reached as `reach` allows. Links are
/// followed only while they stay beneath `root` (`openat2` with `RESOLVE_BENEATH`), and with
/// [`Reach::Linked`] only to a file the session's commands could read themselves: a link a
/// command made to the state root's files, the user's keys (`AGENTS.md -> .env`), another
/// project's trusted settings or a device is refused, never read for it by the controller,
/// while `CLAUDE.md -> AGENTS.md` is read. An absolute link (which `RESOLVE_BENEATH` refuses)
/// is resolved here and read when it leads into `root`, opened beneath it again (a swap
/// meanwhile is refused the same way). Errors as [`read`]'s, and `InvalidInput` for a path
/// that leads out of `root`, through a link with [`Reach::Direct`], or to a file commands
/// cannot read. Where the kernel has no `openat2` (before 5.6), no link is followed at the
/// path's end.
pub fn read_beneath(
    root: &Path,
    relative: &Path,
    max: u64,
    reach: Reach<'_>,
) -> io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let refused = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let links = match reach {
        Reach::Direct => ResolveFlags::NO_SYMLINKS,
        Reach::Linked(_) => ResolveFlags::empty(),
    };
    let open = |relative: &Path| {
        rustix::fs::openat2(
            &dir,
            relative,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | links,
        )
    };
    let outside = || refused(format!("it leads outside {}", root.display()));
    let opened = match open(relative) {
        Err(rustix::io::Errno::XDEV) if matches!(reach, Reach::Linked(_)) => {
            let real = std::fs::canonicalize(root.join(relative))?;
            let root = std::fs::canonicalize(root)?;
            match real.strip_prefix(&root) {
                Ok(inside) => open(inside),
                Err(_) => return Err(outside()),
            }
        }
        opened => opened,
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(rustix::io::Errno::XDEV) => return Err(outside()),
        Err(rustix::io::Errno::LOOP) => return Err(refused("it is a symbolic link".into())),
        Err(rustix::io::Errno::NOSYS) => return read(&root.join(relative), max, false),
        Err(e) => return Err(e.into()),
    };
    if let Reach::Linked(unreadable) = reach
        && let Some(real) = linked_to(&fd, root, relative)?
        && unreadable(&real)
    {
        return Err(refused(format!(
            "it leads to {}, which commands cannot read",
            real.display()
        )));
    }
    checked(std::fs::File::from(fd), max)
}

/// Where `fd`, opened as `relative` beneath `root`, really is when a link led there: the
/// kernel's name of the opened file (no rename can make it another), when it is not where
/// `relative` names it; `None` for a file reached without a link.
fn linked_to(fd: &impl AsRawFd, root: &Path, relative: &Path) -> io::Result<Option<PathBuf>> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok((real != std::fs::canonicalize(root)?.join(relative)).then_some(real))
}

/// The bytes of the opened `file`, when it is a regular file of at most `max` bytes.
fn checked(file: std::fs::File, max: u64) -> io::Result<Vec<u8>> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it is larger than {max} bytes"),
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_a_directory_and_a_link_not_to_follow_are_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "text").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        // On a thread: opening the FIFO waited for good before.
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = (fifo, dir.path().to_path_buf(), link.clone());
        std::thread::spawn(move || {
            let kinds = [
                read(&paths.0, 64, true),
                read(Path::new("/dev/zero"), 64, true),
                read(&paths.1, 64, true),
                read(&paths.2, 64, false),
            ]
            .map(|r| r.map_err(|e| e.kind()));
            let _ = tx.send(kinds);
        });
        let kinds = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a read waited");
        assert!(
            kinds.iter().all(|k| *k == Err(io::ErrorKind::InvalidInput)),
            "{kinds:?}"
        );
        assert_eq!(read(&link, 64, true).unwrap(), b"text");
        assert_eq!(read(&file, 4, false).unwrap(), b"text");
    }

    #[test]
    fn a_file_past_the_bound_is_refused_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, vec![b'x'; 4097]).unwrap();
        let err = read(&file, 4096, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(err.to_string().contains("larger than 4096 bytes"), "{err}");
        assert_eq!(read(&file, 4097, true).unwrap().len(), 4097);
        let err = read(&dir.path().join("absent"), 1, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    /// A link a command made in a project to a file it cannot read is refused; one that stays
    /// in the project is read; a FIFO is refused there too without waiting.
    #[test]
    fn beneath_a_root_links_are_followed_only_while_they_stay_in_it() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "the user's key").unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::write(root.join("AGENTS.md"), "the project's words").unwrap();
        std::os::unix::fs::symlink("AGENTS.md", root.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink(root.join("AGENTS.md"), root.join("absolute.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("out.md")).unwrap();
        std::fs::create_dir(root.join("roles")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("roles/away")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let read =
            |name: &str| read_beneath(root, Path::new(name), 1024, Reach::Linked(&|_| false));
        assert_eq!(read("CLAUDE.md").unwrap(), b"the project's words");
        assert_eq!(read("absolute.md").unwrap(), b"the project's words");
        std::os::unix::fs::symlink("/dev/zero", root.join("device")).unwrap();
        let up = format!(
            "../{}/secret",
            outside.path().file_name().unwrap().to_string_lossy()
        );
        for name in ["out.md", "roles/away/secret", &up, "fifo", "device"] {
            let e = read(name).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name}: {e}");
        }
        assert!(
            read("out.md")
                .unwrap_err()
                .to_string()
                .contains("leads outside")
        );
        // Without links, or to a file the predicate says commands cannot read, refused.
        let direct = read_beneath(root, Path::new("CLAUDE.md"), 1024, Reach::Direct);
        assert!(direct.unwrap_err().to_string().contains("symbolic link"));
        assert!(read_beneath(root, Path::new("AGENTS.md"), 1024, Reach::Direct).is_ok());
        let agents = root.canonicalize().unwrap().join("AGENTS.md");
        let hidden = |real: &Path| real == agents;
        let linked = read_beneath(root, Path::new("CLAUDE.md"), 1024, Reach::Linked(&hidden));
        assert!(
            linked
                .unwrap_err()
                .to_string()
                .contains("commands cannot read")
        );
    }
}

//! [`RecordDir`]: a directory the controller writes by descriptor, so that nothing a command
//! planted (a link, a file created first, a directory swapped for a link) is written through.
//!
//! The design decision to know: a directory is opened once (`O_DIRECTORY | O_NOFOLLOW`) and then
//! used only through its descriptor, one plain name at a time. Files are created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` (a name that already exists is an error, a link is never
//! followed), existing files are opened with `O_NOFOLLOW` and must be regular files, and a file
//! is replaced by writing a fresh temporary file and renaming it over the name (a rename replaces
//! a link, it never follows it). Readers of anything a command could have touched use
//! [`open_read_nofollow`].

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Mode of the directories the controller creates: records may hold anything a command printed.
const DIR_MODE: u32 = 0o700;
/// Mode of the files the controller creates.
const FILE_MODE: u32 = 0o600;

/// An open directory, used only by descriptor.
#[derive(Debug)]
pub struct RecordDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl RecordDir {
    /// Opens the directory `path`; a link at its last component is refused.
    pub fn open(path: &Path) -> io::Result<RecordDir> {
        let fd = rustix::fs::open(path, dir_flags(), Mode::empty())
            .map_err(|e| describe(path, e.into()))?;
        Ok(RecordDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates `path` and its missing parents (mode 0700), then opens it like [`RecordDir::open`].
    pub fn create_all(path: &Path) -> io::Result<RecordDir> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
        builder.create(path).map_err(|e| describe(path, e))?;
        RecordDir::open(path)
    }

    /// The path this directory was opened at (for messages and for handing to a child).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path()/name`, for messages.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates the subdirectory `name` (mode 0700); it must not exist yet.
    pub fn create_dir(&self, name: &str) -> io::Result<RecordDir> {
        let name = plain(name)?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(DIR_MODE))
            .map_err(|e| describe(&self.join(name), e.into()))?;
        self.open_dir(name)
    }

    /// Opens the subdirectory `name`, creating it (mode 0700) when missing.
    pub fn ensure_dir(&self, name: &str) -> io::Result<RecordDir> {
        let name = plain(name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(describe(&self.join(name), e.into())),
        }
        self.open_dir(name)
    }

    /// Opens the existing subdirectory `name`; a link is refused.
    pub fn open_dir(&self, name: &str) -> io::Result<RecordDir> {
        let name = plain(name)?;
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())
            .map_err(|e| describe(&self.join(name), e.into()))?;
        Ok(RecordDir {
            fd,
            path: self.join(name),
        })
    }

    /// Creates the file `name` for appending; it must not exist yet.
    pub fn create_append(&self, name: &str) -> io::Result<File> {
        self.open_file(
            name,
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
        )
    }

    /// Opens the existing regular file `name` for reading and appending; a link is refused.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        self.open_file(name, OFlags::RDWR | OFlags::APPEND)
    }

    /// Opens the existing regular file `name` for reading; a link is refused.
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        self.open_file(name, OFlags::RDONLY)
    }

    /// Replaces the file `name` with `bytes`: a new temporary file beside it, then a rename over
    /// the name, so a reader sees the old or the new content and a link at `name` is replaced,
    /// not followed.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(name, bytes, false)
    }

    /// Writes `bytes` to `name` when the name is new, in place: created `O_EXCL` and written
    /// with no temporary file and no rename. A name already taken (an earlier file, a planted
    /// link) is replaced as [`RecordDir::replace`] replaces it.
    ///
    /// Unlike `replace`, a reader may see the new file short while it is written, and a crash
    /// can leave it so; a write that fails removes it. For files whose content a record
    /// appended line by line also holds (a session's turn files), where the rename and the
    /// temporary name were most of the cost.
    pub fn write_new(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let name = plain(name)?;
        // No type check: `O_EXCL` made a new regular file.
        let fd = match self.openat(name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::EXIST) => return self.replace(name, bytes),
            Err(e) => return Err(describe(&self.join(name), e.into())),
        };
        let written = File::from(fd).write_all(bytes);
        written.map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            describe(&self.join(name), e)
        })
    }

    /// [`RecordDir::replace`] that also survives a power cut: the new file is flushed to disk
    /// before the rename, and the directory after it (for settings; per-event records skip
    /// the cost).
    pub fn replace_durable(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(name, bytes, true)
    }

    fn replace_with(&self, name: &str, bytes: &[u8], durable: bool) -> io::Result<()> {
        let name = plain(name)?;
        let tmp = format!(".{name}.{}.tmp", random_suffix()?);
        let mut file = self.open_file(
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::TRUNC,
        )?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.flush())
            .and_then(|()| if durable { file.sync_all() } else { Ok(()) });
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                .map_err(|e| describe(&self.join(name), e.into()))
        });
        let renamed = renamed.and_then(|()| {
            if durable {
                rustix::fs::fsync(&self.fd).map_err(io::Error::from)
            } else {
                Ok(())
            }
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        renamed
    }

    /// [`RecordDir::replace`] for a file rewritten many times (the session metadata): the same
    /// two inodes take turns, so a rewrite frees none. The new content is written into the
    /// spare `.NAME.spare` in place, which then swaps names with `name` in one step
    /// (`renameat2(RENAME_EXCHANGE)`); a reader still sees the old or the new content.
    ///
    /// The design decision to know: every freed inode makes the next file creations on a
    /// journal-less ext4 (this project's VMs) skip it for minutes (`recently_deleted`), so a
    /// replace per event made creating any file cost up to a millisecond of kernel time, in
    /// every process. Where the exchange is refused (a filesystem without it), this falls
    /// back to [`RecordDir::replace`].
    pub fn rewrite(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let name = plain(name)?;
        if !self.contains(name) {
            return self.replace(name, bytes);
        }
        let spare = format!(".{name}.spare");
        let file = self.open_file(&spare, OFlags::WRONLY | OFlags::CREATE)?;
        std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)
            .and_then(|()| file.set_len(bytes.len() as u64))
            .map_err(|e| describe(&self.join(&spare), e))?;
        match rustix::fs::renameat_with(
            &self.fd,
            spare.as_str(),
            &self.fd,
            name,
            rustix::fs::RenameFlags::EXCHANGE,
        ) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => self.replace(name, bytes),
            Err(e) => Err(describe(&self.join(name), e.into())),
        }
    }

    /// Removes the file (or link) `name`; a missing one is not an error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let name = plain(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(describe(&self.join(name), e.into())),
        }
    }

    /// Whether anything (a link too, not followed) is at `name`.
    pub fn contains(&self, name: &str) -> bool {
        plain(name)
            .is_ok_and(|name| rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok())
    }

    /// Whether `name` still names the very file `opened` identifies (a command may have
    /// renamed, deleted or replaced it since it was opened).
    pub fn still_names(&self, name: &str, opened: FileId) -> io::Result<bool> {
        let name = plain(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) => Ok(FileId::from_stat(&now) == opened),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(describe(&self.join(name), e.into())),
        }
    }

    fn open_file(&self, name: &str, flags: OFlags) -> io::Result<File> {
        let name = plain(name)?;
        let fd = self
            .openat(name, flags)
            .map_err(|e| describe(&self.join(name), e.into()))?;
        regular(fd, &self.join(name))
    }

    /// Opens the plain name `name` with `flags`, never following a link at it.
    fn openat(&self, name: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        // NONBLOCK: opening a planted FIFO must not hang the controller; no effect on files.
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE))
    }
}

/// Which file a descriptor is open on: its device and inode, taken once (a `stat`), so that
/// [`RecordDir::still_names`] compares a name with it without another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file `file` is open on.
    pub fn of(file: &File) -> io::Result<FileId> {
        Ok(FileId::from_stat(&rustix::fs::fstat(file.as_fd())?))
    }

    fn from_stat(stat: &rustix::fs::Stat) -> FileId {
        FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }
}

/// Opens `path` for reading without following a link at its last component; anything but a
/// regular file is refused.
pub fn open_read_nofollow(path: &Path) -> io::Result<File> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| describe(path, e.into()))?;
    regular(fd, path)
}

fn regular(fd: OwnedFd, path: &Path) -> io::Result<File> {
    let stat = rustix::fs::fstat(&fd).map_err(|e| describe(path, e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file; refusing to use it",
                path.display()
            ),
        ));
    }
    Ok(File::from(fd))
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// `name` when it is one plain path component.
fn plain(name: &str) -> io::Result<&str> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    if ok {
        Ok(name)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not a plain file name", OsStr::new(name)),
        ))
    }
}

/// A link where a record must be gets a message that says so (`ELOOP` alone reads as a loop).
fn describe(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        io::Error::new(
            e.kind(),
            format!(
                "{} is a symbolic link; refusing to follow it (something other than Intendant replaced it)",
                path.display()
            ),
        )
    } else {
        io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    }
}

/// Sixteen random hex digits, for a temporary name no other writer can guess.
pub(crate) fn random_suffix() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn dir() -> (tempfile::TempDir, RecordDir) {
        let t = tempfile::tempdir().unwrap();
        let d = RecordDir::open(t.path()).unwrap();
        (t, d)
    }

    #[test]
    fn created_files_must_be_new_and_links_are_never_followed() {
        let (t, d) = dir();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        symlink(&victim, t.path().join("link")).unwrap();
        let e = d.create_append("link").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        let e = d.open_append("link").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(d.open_read("link").is_err());
        assert!(open_read_nofollow(&t.path().join("link")).is_err());
        d.replace("link", b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(
            std::fs::read_to_string(t.path().join("link")).unwrap(),
            "new"
        );
        assert!(
            !std::fs::symlink_metadata(t.path().join("link"))
                .unwrap()
                .is_symlink()
        );
        let leftovers = std::fs::read_dir(t.path()).unwrap().count();
        assert_eq!(leftovers, 2, "no temporary file is left behind");
    }

    #[test]
    fn a_new_file_is_written_in_place_and_a_taken_name_is_replaced_not_followed() {
        let (t, d) = dir();
        d.write_new("turn", b"first").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("turn")).unwrap(),
            "first"
        );
        d.write_new("turn", b"second").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("turn")).unwrap(),
            "second"
        );
        let victim = t.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        symlink(&victim, t.path().join("planted")).unwrap();
        d.write_new("planted", b"mine").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(
            !std::fs::symlink_metadata(t.path().join("planted"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("planted")).unwrap(),
            "mine"
        );
        for bad in ["", "..", "a/b"] {
            assert!(d.write_new(bad, b"x").is_err(), "{bad:?}");
        }
        let names = std::fs::read_dir(t.path()).unwrap().count();
        assert_eq!(names, 3, "no temporary file is left behind");
    }

    #[test]
    fn a_rewritten_file_reuses_two_inodes_and_never_follows_a_planted_spare() {
        use std::os::unix::fs::MetadataExt;
        let (t, d) = dir();
        let path = t.path().join("meta.json");
        let mut inodes = std::collections::BTreeSet::new();
        for n in 0..6 {
            // Shorter and longer contents: the spare is cut to the new length.
            let text = "x".repeat(10 - n).to_string() + &n.to_string();
            d.rewrite("meta.json", text.as_bytes()).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
            inodes.insert(std::fs::metadata(&path).unwrap().ino());
        }
        assert_eq!(inodes.len(), 2, "the rewrites take turns on two inodes");
        let names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "only the file and its spare: {names:?}");

        let victim = t.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::fs::remove_file(t.path().join(".meta.json.spare")).unwrap();
        symlink(&victim, t.path().join(".meta.json.spare")).unwrap();
        let e = d.rewrite("meta.json", b"new").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "xxxxx5");
    }

    #[test]
    fn a_directory_swapped_for_a_link_redirects_nothing() {
        let (t, d) = dir();
        let sub = d.create_dir("sub").unwrap();
        assert!(d.create_dir("sub").is_err(), "create_dir wants a new name");
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::rename(t.path().join("sub"), t.path().join("moved")).unwrap();
        symlink(elsewhere.path(), t.path().join("sub")).unwrap();
        sub.replace("f", b"x").unwrap();
        assert!(t.path().join("moved/f").is_file());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        assert!(d.open_dir("sub").is_err());
        assert!(d.ensure_dir("sub").is_err());
        assert!(RecordDir::open(&t.path().join("sub")).is_err());
    }

    #[test]
    fn replacement_of_an_open_file_is_detected() {
        let (_t, d) = dir();
        let mut f = d.create_append("log").unwrap();
        let id = FileId::of(&f).unwrap();
        f.write_all(b"a\n").unwrap();
        assert!(d.still_names("log", id).unwrap());
        d.remove("log").unwrap();
        assert!(!d.still_names("log", id).unwrap());
        d.replace("log", b"forged\n").unwrap();
        assert!(!d.still_names("log", id).unwrap());
        let mut back = String::new();
        d.open_read("log")
            .unwrap()
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, "forged\n");
    }

    #[test]
    fn fifos_and_odd_names_are_refused() {
        let (t, d) = dir();
        let fifo = t.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(d.open_read("fifo").is_err());
        assert!(d.open_append("fifo").is_err());
        for bad in ["", ".", "..", "a/b"] {
            assert!(d.create_append(bad).is_err(), "{bad:?}");
        }
        assert!(d.contains("fifo") && !d.contains("none"));
    }
}

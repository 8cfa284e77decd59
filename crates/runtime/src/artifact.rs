//! Files the runtime creates in the log dir and next to edited files.
//!
//! Every file is created new (`O_CREAT | O_EXCL`), never through a symlink (`O_NOFOLLOW`), mode
//! 0600 unless told otherwise, and (for log artifacts) under a name with 64 random bits, so a
//! same-user process can neither pre-plant nor predict it. Reads of a log's tail go through the
//! handle that created it, so a later rename or symlink swap in the directory changes nothing.

use rustix::fs::{Mode, OFlags};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// How many fresh random names are tried before giving up on `AlreadyExists`.
const CREATE_ATTEMPTS: usize = 8;

/// A filesystem operation that failed on a path, shown as `<action> <path>: <OS error>`.
#[derive(Debug, Error)]
#[error("{action} {path}: {source}")]
pub struct PathIoError {
    /// What was being done, e.g. `renaming into place`.
    pub action: &'static str,
    /// On which path.
    pub path: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// A `map_err` adapter: the failure of `action` on `path`, converted to the caller's error.
pub fn path_io<E: From<PathIoError>>(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> E {
    let path = path.display().to_string();
    move |source| {
        E::from(PathIoError {
            action,
            path,
            source,
        })
    }
}

/// 16 lowercase hex digits from the OS random source.
pub fn random_hex() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("random source: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `path` as a new file with `mode`, failing if anything (a symlink included) is there.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `name` in the directory `dir` (a descriptor) as a new file with `mode`, failing if
/// anything (a symlink included) is there.
pub fn create_new_at(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    Ok(File::from(fd))
}

/// Creates `<dir>/<prefix>_<random hex>_<suffix>` new, mode 0600; returns the file and its path.
pub fn create_unique(dir: &Path, prefix: &str, suffix: &str) -> io::Result<(File, PathBuf)> {
    let mut last_err = io::Error::other("no attempt made");
    for _ in 0..CREATE_ATTEMPTS {
        let path = dir.join(format!("{prefix}_{}_{suffix}", random_hex()?));
        match create_new(&path, 0o600) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = e,
            Err(e) => return Err(e),
        }
    }
    Err(last_err)
}

/// The end of a file read through an open handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// At most `max` bytes from the end, lossy UTF-8, starting on a character boundary.
    pub text: String,
    /// Whether the file was longer than `max` bytes.
    pub truncated: bool,
    /// Total file length in bytes.
    pub len: u64,
}

/// Reads the last `max` bytes of `file` with positioned reads (the shared offset is untouched).
pub fn read_tail(file: &File, max: usize) -> io::Result<Tail> {
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max as u64);
    let mut buf = vec![0u8; usize::try_from(len - start).unwrap_or(max)];
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read_at(&mut buf[filled..], start + filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.truncate(filled);
    let bytes = if start > 0 {
        skip_partial_char(&buf)
    } else {
        &buf[..]
    };
    let (text, cut) = lossy_tail(bytes, max);
    Ok(Tail {
        text,
        truncated: start > 0 || cut,
        len,
    })
}

/// `bytes` as lossy UTF-8, keeping at most the last `max` bytes of *text*, cut on a character
/// boundary; `true` when something was cut. Each invalid byte becomes U+FFFD (3 bytes), so
/// binary output can convert to more text than it had bytes: the cap holds anyway.
pub fn lossy_tail(bytes: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= max {
        return (text.into_owned(), false);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    (text[start..].to_owned(), true)
}

/// Drops the continuation bytes of a character cut at the start of `bytes` (at most 3).
pub fn skip_partial_char(bytes: &[u8]) -> &[u8] {
    let cut = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[cut..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tail_is_bounded_and_char_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let (mut f, path) = create_unique(dir.path(), "1", "stdout.log").unwrap();
        assert!(
            path.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("1_")
        );
        f.write_all("é".repeat(10).as_bytes()).unwrap();
        let tail = read_tail(&f, 5).unwrap();
        assert_eq!(tail.text, "éé");
        assert!(tail.truncated);
        assert_eq!(tail.len, 20);
        let all = read_tail(&f, 100).unwrap();
        assert_eq!(all.text, "é".repeat(10));
        assert!(!all.truncated);
    }

    #[test]
    fn invalid_bytes_never_push_a_tail_past_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let (mut f, _) = create_unique(dir.path(), "1", "stdout.log").unwrap();
        // 8 bytes, all invalid: 24 bytes of U+FFFD.
        f.write_all(&[0xff; 8]).unwrap();
        let tail = read_tail(&f, 10).unwrap();
        assert_eq!(tail.text, "\u{FFFD}".repeat(3));
        assert!(tail.truncated, "the text is a tail of something longer");
        assert_eq!(lossy_tail(b"ok", 2), ("ok".to_owned(), false));
        assert_eq!(
            lossy_tail("aé\u{FFFD}".as_bytes(), 4),
            ("\u{FFFD}".to_owned(), true)
        );
    }

    #[test]
    fn create_new_refuses_existing_and_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "x").unwrap();
        assert!(create_new(&target, 0o600).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        assert!(create_new(&link, 0o600).is_err());
        assert!(!dir.path().join("nowhere").exists());
    }
}

//! `editFile` / `writeFile`: structured edits without a shell.
//!
//! Every edit builds the new content in a temporary file created new (random name) in the same
//! directory, fsyncs it and renames it over the target, so a crash leaves either the old or the
//! new file, never half of one. An existing file keeps its permission bits (and, when allowed,
//! its owner); a symlink is edited at its target, not replaced. Files are treated as bytes, so
//! non-UTF-8 content survives. Lines are `\n`-separated.
//!
//! The path is resolved once, by descriptor ([`pathguard::open_path`]): the old content is read
//! from, and the temporary file created and renamed in, the very directory that passed the path
//! guard, so a command that swaps a directory for a link meanwhile cannot redirect the write.

use intendant_protocol::runtime::{Command, EditOperation, EditResult};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

use crate::artifact::{self, PathIoError};
use crate::pathguard::{self, Final, PathGuardError};

/// Largest existing file `replace`, `insert_at` and `replace_lines` load into memory.
pub const MAX_EDIT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why an edit failed (the batch goes on).
#[derive(Debug, Error)]
pub enum EditError {
    /// A required field is absent.
    #[error("missing `{0}`")]
    Missing(&'static str),
    /// `operation` is not one of the five.
    #[error("unknown operation `{0}`; expected write, append, replace, insert_at or replace_lines")]
    UnknownOperation(String),
    /// `writeFile` was given another operation.
    #[error("writeFile only writes; use editFile for operation `{0}`")]
    WriteFileOperation(String),
    /// The path guard refused the path.
    #[error("path refused: {0}")]
    Path(#[from] PathGuardError),
    /// `replace` with an empty `match_content`.
    #[error("`match_content` must not be empty")]
    EmptyMatch,
    /// `replace` found nothing.
    #[error("`match_content` not found in {0}; nothing replaced")]
    NoMatch(String),
    /// A line number outside the file or a reversed range.
    #[error("{0}")]
    Lines(String),
    /// The file is too large to edit in memory.
    #[error("{path} is {size} bytes; in-place edits are limited to {MAX_EDIT_FILE_BYTES} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
    },
    /// A filesystem operation failed.
    #[error(transparent)]
    Io(#[from] PathIoError),
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> EditError {
    artifact::path_io(action, path)
}

/// Runs `editFile` (or, with `write_file_alias`, `writeFile`) for `cmd`.
pub fn run(cmd: &Command, write_file_alias: bool) -> Result<EditResult, EditError> {
    let raw_path = cmd
        .file_path
        .as_deref()
        .ok_or(EditError::Missing("file_path"))?;
    let op = match (write_file_alias, cmd.operation.as_deref()) {
        (true, None) => EditOperation::Write,
        (true, Some(op)) if op == EditOperation::Write.wire_name() => EditOperation::Write,
        (true, Some(op)) => return Err(EditError::WriteFileOperation(op.to_owned())),
        (false, None) => return Err(EditError::Missing("operation")),
        (false, Some(op)) => EditOperation::from_wire_name(op)
            .ok_or_else(|| EditError::UnknownOperation(op.to_owned()))?,
    };
    let content = cmd
        .content
        .as_deref()
        .ok_or(EditError::Missing("content"))?
        .as_bytes();
    let creates = matches!(op, EditOperation::Write | EditOperation::Append);
    let target = Target::open(raw_path, creates)?;
    let (bytes, replacements) = match op {
        EditOperation::Write => (target.write_atomic(|w| w.write_all(content))?, None),
        EditOperation::Append => {
            let existing = target.existing.as_ref();
            let size = target.write_atomic(|w| {
                if let Some((f, _)) = existing {
                    io::copy(&mut &*f, w)?;
                }
                w.write_all(content)
            })?;
            (size, None)
        }
        EditOperation::Replace => {
            let needle = cmd
                .match_content
                .as_deref()
                .ok_or(EditError::Missing("match_content"))?
                .as_bytes();
            if needle.is_empty() {
                return Err(EditError::EmptyMatch);
            }
            let (new, count) = replace_all(&target.load()?, needle, content);
            if count == 0 {
                return Err(EditError::NoMatch(target.path.display().to_string()));
            }
            (target.write_atomic(|w| w.write_all(&new))?, Some(count))
        }
        EditOperation::InsertAt => {
            let line = cmd.line_number.ok_or(EditError::Missing("line_number"))?;
            let new = insert_at(&target.load()?, line, content)?;
            (target.write_atomic(|w| w.write_all(&new))?, None)
        }
        EditOperation::ReplaceLines => {
            let first = cmd.line_number.ok_or(EditError::Missing("line_number"))?;
            let last = cmd.end_line.ok_or(EditError::Missing("end_line"))?;
            let new = replace_lines(&target.load()?, first, last, content)?;
            (target.write_atomic(|w| w.write_all(&new))?, None)
        }
    };
    Ok(EditResult {
        file_path: raw_path.to_owned(),
        operation: op.wire_name().to_owned(),
        bytes,
        replacements,
    })
}

/// The file an edit replaces, held by descriptor: its directory, its name there and, when it
/// exists, the old file opened for reading with its metadata.
struct Target {
    dir: OwnedFd,
    name: OsString,
    /// Where it is, for messages (a final symlink already followed).
    path: PathBuf,
    existing: Option<(File, Metadata)>,
}

impl Target {
    /// Checks and opens `raw`; `creates` makes missing parent directories (write, append).
    fn open(raw: &str, creates: bool) -> Result<Target, EditError> {
        let located = pathguard::open_path(raw, Final::Follow, creates)?;
        let path = located.resolved;
        let (dir, name) = located.parent.map_err(|e| io_err("opening", &path)(e))?;
        let existing = match located.object {
            None => None,
            Some(object) => {
                if object
                    .metadata()
                    .map_err(io_err("inspecting", &path))?
                    .is_dir()
                {
                    return Err(io_err("editing", &path)(io::Error::other("is a directory")));
                }
                // Reopened through the checked directory, never through a link: a name
                // swapped since the walk fails here instead of leading elsewhere.
                let file = rustix::fs::openat(
                    &dir,
                    name.as_os_str(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map(File::from)
                .map_err(|e| io_err("opening", &path)(e.into()))?;
                let meta = file.metadata().map_err(io_err("inspecting", &path))?;
                let (walked, reopened) = (object.metadata(), &meta);
                if !walked.is_ok_and(|w| w.dev() == reopened.dev() && w.ino() == reopened.ino()) {
                    return Err(io_err("opening", &path)(io::Error::other(
                        "it was replaced while being opened",
                    )));
                }
                if !meta.is_file() {
                    return Err(io_err("editing", &path)(io::Error::other(
                        "not a regular file",
                    )));
                }
                Some((file, meta))
            }
        };
        Ok(Target {
            dir,
            name,
            path,
            existing,
        })
    }

    /// Reads the existing file, bounded by [`MAX_EDIT_FILE_BYTES`].
    fn load(&self) -> Result<Vec<u8>, EditError> {
        let Some((file, meta)) = &self.existing else {
            return Err(io_err("opening", &self.path)(io::Error::from_raw_os_error(
                libc::ENOENT,
            )));
        };
        let mut buf = Vec::new();
        file.take(MAX_EDIT_FILE_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(io_err("reading", &self.path))?;
        if buf.len() as u64 > MAX_EDIT_FILE_BYTES {
            return Err(EditError::TooLarge {
                path: self.path.display().to_string(),
                size: meta.len().max(buf.len() as u64),
            });
        }
        Ok(buf)
    }

    /// Writes the new content through `fill` into a temporary sibling, then renames it over the
    /// target, both in the held directory. Returns the new size.
    fn write_atomic(
        &self,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<u64, EditError> {
        let path = &self.path;
        let mut attempt = 0;
        let (mut tmp, tmp_name) = loop {
            let tmp_name = format!(
                ".{}.{}.tmp",
                self.name.to_string_lossy(),
                artifact::random_hex().map_err(io_err("naming temp file for", path))?
            );
            match artifact::create_new_at(&self.dir, OsStr::new(&tmp_name), 0o666) {
                Ok(f) => break (f, tmp_name),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(io_err("creating temp file for", path)(e)),
            }
        };
        let tmp_path = path.with_file_name(&tmp_name);
        let result = (|| {
            fill(&mut tmp).map_err(io_err("writing", &tmp_path))?;
            if let Some((_, meta)) = &self.existing {
                let mode = meta.permissions().mode() & 0o7777;
                tmp.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(io_err("setting permissions of", &tmp_path))?;
                // Best effort: only root may give a file away; everyone else keeps their own.
                let _ = std::os::unix::fs::fchown(&tmp, Some(meta.uid()), Some(meta.gid()));
            }
            tmp.sync_all().map_err(io_err("syncing", &tmp_path))?;
            let size = tmp
                .metadata()
                .map_err(io_err("inspecting", &tmp_path))?
                .len();
            rustix::fs::renameat(
                &self.dir,
                tmp_name.as_str(),
                &self.dir,
                self.name.as_os_str(),
            )
            .map_err(|e| io_err("renaming into place", path)(e.into()))?;
            Ok(size)
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, tmp_name.as_str(), AtFlags::empty());
        } else if let Ok(d) = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            // Persist the rename itself; failure here loses durability, not correctness.
            let _ = rustix::fs::fsync(&d);
        }
        result
    }
}

/// Replaces every non-overlapping occurrence of `needle`; returns the new bytes and the count.
pub fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(haystack.len());
    let mut count = 0;
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
            count += 1;
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    (out, count)
}

/// A file as lines without terminators, and whether it ended with a newline.
fn split_lines(bytes: &[u8]) -> (Vec<&[u8]>, bool) {
    if bytes.is_empty() {
        return (Vec::new(), false);
    }
    let trailing = bytes.ends_with(b"\n");
    let body = if trailing {
        &bytes[..bytes.len() - 1]
    } else {
        bytes
    };
    (body.split(|b| *b == b'\n').collect(), trailing)
}

fn join_lines(lines: &[&[u8]], trailing: bool) -> Vec<u8> {
    let mut out = lines.join(&b'\n');
    if trailing && !lines.is_empty() {
        out.push(b'\n');
    }
    out
}

/// Inserts `content` as whole lines before 1-based `line` (`line` = count + 1 appends).
pub fn insert_at(bytes: &[u8], line: u64, content: &[u8]) -> Result<Vec<u8>, EditError> {
    let (mut lines, trailing) = split_lines(bytes);
    let count = lines.len() as u64;
    if line == 0 || line > count + 1 {
        return Err(EditError::Lines(format!(
            "line_number {line} is outside 1..={} for a file of {count} lines",
            count + 1
        )));
    }
    let (new, _) = split_lines(content);
    let at = usize::try_from(line - 1).unwrap_or(lines.len());
    lines.splice(at..at, new);
    // Inserting into an empty file yields terminated lines.
    Ok(join_lines(&lines, trailing || bytes.is_empty()))
}

/// Replaces 1-based lines `first..=last` with `content` (empty content deletes them).
pub fn replace_lines(
    bytes: &[u8],
    first: u64,
    last: u64,
    content: &[u8],
) -> Result<Vec<u8>, EditError> {
    let (mut lines, trailing) = split_lines(bytes);
    let count = lines.len() as u64;
    if last < first {
        return Err(EditError::Lines(format!(
            "end_line {last} is before line_number {first}"
        )));
    }
    if first == 0 || last > count {
        return Err(EditError::Lines(format!(
            "lines {first}..={last} are outside 1..={count} for a file of {count} lines"
        )));
    }
    let (new, _) = split_lines(content);
    let (from, to) = (
        usize::try_from(first - 1).unwrap_or(0),
        usize::try_from(last).unwrap_or(lines.len()),
    );
    lines.splice(from..to, new);
    Ok(join_lines(&lines, trailing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_counts() {
        assert_eq!(replace_all(b"aaa", b"aa", b"b"), (b"ba".to_vec(), 1));
        assert_eq!(replace_all(b"xyx", b"x", b""), (b"y".to_vec(), 2));
    }

    #[test]
    fn line_edits_keep_trailing_newline() {
        assert_eq!(insert_at(b"a\nb\n", 2, b"X").unwrap(), b"a\nX\nb\n");
        assert_eq!(insert_at(b"a\nb", 3, b"X\n").unwrap(), b"a\nb\nX");
        assert_eq!(insert_at(b"", 1, b"X").unwrap(), b"X\n");
        assert!(insert_at(b"a\n", 3, b"X").is_err());
        assert!(insert_at(b"a\n", 0, b"X").is_err());
        assert_eq!(
            replace_lines(b"a\nb\nc\n", 2, 3, b"Y\nZ").unwrap(),
            b"a\nY\nZ\n"
        );
        assert_eq!(replace_lines(b"a\nb\nc", 1, 1, b"Y").unwrap(), b"Y\nb\nc");
        assert_eq!(replace_lines(b"a\nb\nc\n", 2, 2, b"").unwrap(), b"a\nc\n");
        assert!(replace_lines(b"a\nb\n", 2, 1, b"").is_err());
        assert!(replace_lines(b"a\nb\n", 1, 3, b"").is_err());
    }
}

//! `editFile` / `writeFile`: structured edits without a shell.
//!
//! Every edit builds the new content in a temporary file created new (random name) in the same
//! directory, fsyncs it and renames it over the target, so a crash leaves either the old or the
//! new file, never half of one. An existing file keeps its permission bits (and, when allowed,
//! its owner); a symlink is edited at its target, not replaced. Files are treated as bytes, so
//! non-UTF-8 content survives. Lines are `\n`-separated.

use intendant_protocol::runtime::{Command, EditOperation, EditResult};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

use crate::artifact::{self, PathIoError};
use crate::pathguard::{self, PathGuardError};

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
    let path = target(pathguard::validate_path(raw_path)?)?;
    let (bytes, replacements) = match op {
        EditOperation::Write => (write_atomic(&path, |w| w.write_all(content))?, None),
        EditOperation::Append => {
            let existing = open_existing(&path)?;
            let size = write_atomic(&path, |w| {
                if let Some(mut f) = existing {
                    io::copy(&mut f, w)?;
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
            let (new, count) = replace_all(&load(&path)?, needle, content);
            if count == 0 {
                return Err(EditError::NoMatch(path.display().to_string()));
            }
            (write_atomic(&path, |w| w.write_all(&new))?, Some(count))
        }
        EditOperation::InsertAt => {
            let line = cmd.line_number.ok_or(EditError::Missing("line_number"))?;
            let new = insert_at(&load(&path)?, line, content)?;
            (write_atomic(&path, |w| w.write_all(&new))?, None)
        }
        EditOperation::ReplaceLines => {
            let first = cmd.line_number.ok_or(EditError::Missing("line_number"))?;
            let last = cmd.end_line.ok_or(EditError::Missing("end_line"))?;
            let new = replace_lines(&load(&path)?, first, last, content)?;
            (write_atomic(&path, |w| w.write_all(&new))?, None)
        }
    };
    Ok(EditResult {
        file_path: raw_path.to_owned(),
        operation: op.wire_name().to_owned(),
        bytes,
        replacements,
    })
}

/// The file to replace: an existing symlink's final target, else `path` itself.
fn target(path: PathBuf) -> Result<PathBuf, EditError> {
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(&path).map_err(io_err("resolving symlink", &path))
        }
        Ok(m) if m.is_dir() => Err(io_err("editing", &path)(io::Error::other("is a directory"))),
        Ok(_) => Ok(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(io_err("inspecting", &path)(e)),
    }
}

fn open_existing(path: &Path) -> Result<Option<File>, EditError> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("opening", path)(e)),
    }
}

/// Reads an existing file, bounded by [`MAX_EDIT_FILE_BYTES`].
fn load(path: &Path) -> Result<Vec<u8>, EditError> {
    let f = File::open(path).map_err(io_err("opening", path))?;
    let mut buf = Vec::new();
    f.take(MAX_EDIT_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io_err("reading", path))?;
    if buf.len() as u64 > MAX_EDIT_FILE_BYTES {
        let size = std::fs::metadata(path).map_or(buf.len() as u64, |m| m.len());
        return Err(EditError::TooLarge {
            path: path.display().to_string(),
            size,
        });
    }
    Ok(buf)
}

/// Writes the new content through `fill` into a temporary sibling, then renames it over `path`.
/// Returns the new size.
fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<u64, EditError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io_err("writing", path)(io::Error::other("no file name")))?;
    std::fs::create_dir_all(&dir).map_err(io_err("creating directory", &dir))?;
    let original = std::fs::metadata(path).ok();
    let mut attempt = 0;
    let (mut tmp, tmp_path) = loop {
        let tmp_path = dir.join(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            artifact::random_hex().map_err(io_err("naming temp file for", path))?
        ));
        match artifact::create_new(&tmp_path, 0o666) {
            Ok(f) => break (f, tmp_path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(io_err("creating temp file for", path)(e)),
        }
    };
    let result = (|| {
        fill(&mut tmp).map_err(io_err("writing", &tmp_path))?;
        if let Some(meta) = &original {
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
        std::fs::rename(&tmp_path, path).map_err(io_err("renaming into place", path))?;
        Ok(size)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp_path);
    } else if let Ok(d) = OpenOptions::new().read(true).open(&dir) {
        // Persist the rename itself; failure here loses durability, not correctness.
        let _ = d.sync_all();
    }
    result
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

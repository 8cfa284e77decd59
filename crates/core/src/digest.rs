//! What a project file was when it was read: its canonical path and the sha256 of the bytes
//! parsed. The config and `.env` readers record it; trust records are keyed by it.

use std::path::{Path, PathBuf};

/// A file as read: its canonical path and the sha256 of the bytes that were parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    /// Where the file is: its directory's canonical path and its own name (a link is named by
    /// where it is, not where it leads).
    pub path: PathBuf,
    /// Lowercase hex sha256 of the content.
    pub sha256: String,
}

impl FileDigest {
    /// The digest of `bytes` read from `path`, named by its directory's canonical path and its
    /// own name. A link is not resolved: trust given to a file is not borrowed by a link to
    /// it that a session's commands made in another project (or deeper in their own), whose
    /// settings would then apply where the human never looked.
    pub fn of(path: &Path, bytes: &[u8]) -> FileDigest {
        let located = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir).ok().map(|d| d.join(name)),
            _ => None,
        };
        FileDigest {
            path: located.unwrap_or_else(|| path.to_path_buf()),
            sha256: sha256_hex(bytes),
        }
    }
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// `bytes` in lowercase hex, two digits each.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

//! What a project file was when it was read: its canonical path and the sha256 of the bytes
//! parsed. The config and `.env` readers record it; trust records are keyed by it.

use std::path::{Path, PathBuf};

/// A file as read: its canonical path and the sha256 of the bytes that were parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    /// Canonical path.
    pub path: PathBuf,
    /// Lowercase hex sha256 of the content.
    pub sha256: String,
}

impl FileDigest {
    /// The digest of `bytes` read from `path` (canonicalized when possible).
    pub fn of(path: &Path, bytes: &[u8]) -> FileDigest {
        FileDigest {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
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

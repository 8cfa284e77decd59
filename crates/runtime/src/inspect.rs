//! `inspectPath`: what is at a path, without following a final symlink, read from the object
//! the path guard's walk opened.
//!
//! A missing path is a result (`exists: false`), not an error; a path the guard refuses or that
//! cannot be examined (permission denied, ...) is an error.

use intendant_protocol::runtime::{Command, InspectResult};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::time::UNIX_EPOCH;
use thiserror::Error;

use crate::pathguard::{self, Final, PathGuardError};

/// Why a path could not be inspected (the batch goes on).
#[derive(Debug, Error)]
pub enum InspectError {
    /// No `path` field.
    #[error("missing `path`")]
    MissingPath,
    /// The path guard refused the path.
    #[error("path refused: {0}")]
    Path(#[from] PathGuardError),
    /// `lstat` failed for a reason other than absence.
    #[error("cannot inspect {path}: {source}")]
    Stat {
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Runs `inspectPath` for `cmd`.
pub fn run(cmd: &Command) -> Result<InspectResult, InspectError> {
    let raw = cmd.path.as_deref().ok_or(InspectError::MissingPath)?;
    // The metadata is read from the object the walk opened (not following a final link), so
    // it is that of the checked path, whatever is swapped in afterwards.
    let located = pathguard::open_path(raw, Final::Inspect, false)?;
    let looked = match (located.object, located.parent) {
        (Some(object), _) => object.metadata(),
        (None, Ok(_)) => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        (None, Err(e)) => Err(e),
    };
    let meta = match looked {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(InspectResult {
                path: raw.to_owned(),
                exists: false,
                kind: None,
                size: None,
                modified: None,
                mode: None,
                uid: None,
                gid: None,
            });
        }
        Err(source) => {
            return Err(InspectError::Stat {
                path: raw.to_owned(),
                source,
            });
        }
    };
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    };
    let modified = meta
        .modified()
        .ok()
        .map(|t| match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        });
    Ok(InspectResult {
        path: raw.to_owned(),
        exists: true,
        kind: Some(kind.to_owned()),
        size: Some(meta.len()),
        modified,
        mode: Some(format!("{:o}", meta.mode() & 0o7777)),
        uid: Some(meta.uid()),
        gid: Some(meta.gid()),
    })
}

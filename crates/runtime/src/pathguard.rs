//! `validate_path()` for the structured tools (security issue). Interface fixed; body owned by
//! the security work.

use std::path::PathBuf;
use thiserror::Error;

/// Why a path was refused.
#[derive(Debug, Error)]
pub enum PathGuardError {
    /// The path is empty.
    #[error("empty path")]
    Empty,
}

/// Checks `raw` for `inspectPath` / `editFile`; returns the path to operate on.
pub fn validate_path(raw: &str) -> Result<PathBuf, PathGuardError> {
    if raw.is_empty() {
        return Err(PathGuardError::Empty);
    }
    Ok(PathBuf::from(raw))
}

//! `validate_path()` for the structured tools (`inspectPath`, `editFile`).
//!
//! It refuses `..` traversal and a fixed set of sensitive places: `/etc/shadow`, `/etc/gshadow`
//! (and their `-` backups), everything under `/proc`, `/sys` and `/dev`, and any path with a
//! `.ssh` or `.gnupg` component. The design decision to know: the check runs twice, on the
//! lexical absolute path *and* on the path with every symlink resolved, so a link to a blocked
//! place is blocked too. For a file that does not exist yet, resolution walks as far as the
//! filesystem goes and follows dangling links, so writing through a symlinked parent or a
//! dangling link into a blocked place is refused before the file is created.
//!
//! Resolution is a walk by descriptor ([`open_path`]), one component at a time with
//! `O_NOFOLLOW`, links read and walked by the runtime itself: the functions act on the
//! descriptors the walk checked, never on the name again, so swapping a directory or a file for
//! a link after the check cannot move a read or a write into a refused place.
//!
//! Names are compared ASCII-case-insensitively (a case-insensitive filesystem must not turn
//! `.SSH` into a bypass). Shell commands do not pass through here (`docs/security.md`); the write
//! sandbox bounds them.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

/// Symlinks followed before giving up, as the kernel's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Directory trees that are refused with everything beneath them.
const BLOCKED_TREES: &[&str] = &["/proc", "/sys", "/dev"];

/// Files that are refused (the password and group hash databases and their backups).
const BLOCKED_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];

/// Component names that are refused anywhere in a path.
const BLOCKED_COMPONENTS: &[&str] = &[".ssh", ".gnupg"];

/// Why a path was refused.
#[derive(Debug, Error)]
pub enum PathGuardError {
    /// The path is empty.
    #[error("empty path")]
    Empty,
    /// The path holds a NUL byte.
    #[error("path contains a NUL byte")]
    NulByte,
    /// The path has a `..` component.
    #[error("path traversal (`..`) is not allowed: {path}")]
    Traversal {
        /// The path as given.
        path: String,
    },
    /// The path, as given or once resolved, is a sensitive location.
    #[error("access to {path} is blocked: {reason}")]
    Blocked {
        /// The offending form (as given, absolute, or resolved).
        path: String,
        /// Which rule refused it.
        reason: &'static str,
    },
    /// Symlinks nest deeper than the kernel would follow.
    #[error("too many levels of symbolic links: {path}")]
    SymlinkLoop {
        /// The path as given.
        path: String,
    },
    /// The path could not be resolved (e.g. a component cannot be searched): refused.
    #[error("cannot resolve {path}: {source}")]
    Resolve {
        /// The component that failed.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A relative path was given and the working directory is unknown.
    #[error("cannot resolve a relative path without a working directory: {0}")]
    NoWorkingDir(std::io::Error),
}

mod walk;
pub use walk::{Final, Located};

/// Both forms of an accepted path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedPath {
    /// Absolute and lexically normalized, links not followed (what `inspectPath` stats).
    pub absolute: PathBuf,
    /// Every symlink resolved (the location a write would reach now).
    pub resolved: PathBuf,
}

/// Checks `raw` for `inspectPath` / `editFile`; returns the absolute path to operate on.
pub fn validate_path(raw: &str) -> Result<PathBuf, PathGuardError> {
    check_path(raw).map(|c| c.absolute)
}

/// [`validate_path`], also returning the resolved form.
pub fn check_path(raw: &str) -> Result<CheckedPath, PathGuardError> {
    let located = open_path(raw, Final::Follow, false)?;
    Ok(CheckedPath {
        absolute: located.absolute,
        resolved: located.resolved,
    })
}

/// Checks `raw` and walks it by descriptor (see [`walk`]): the returned directory and object
/// are the very ones that passed the rules, whatever is renamed or relinked afterwards.
/// `create_dirs` makes missing parent directories on the way (for a write).
pub fn open_path(raw: &str, last: Final, create_dirs: bool) -> Result<Located, PathGuardError> {
    if raw.is_empty() {
        return Err(PathGuardError::Empty);
    }
    if raw.contains('\0') {
        return Err(PathGuardError::NulByte);
    }
    let given = Path::new(raw);
    if given.components().any(|c| c == Component::ParentDir) {
        return Err(PathGuardError::Traversal { path: raw.into() });
    }
    check_blocked(given, raw)?;
    let absolute = if given.is_absolute() {
        lexical(given)
    } else {
        let cwd = std::env::current_dir().map_err(PathGuardError::NoWorkingDir)?;
        lexical(&cwd.join(given))
    };
    check_blocked(&absolute, &absolute.to_string_lossy())?;
    walk::locate(&absolute, raw, last, create_dirs)
}

/// Drops `.` components (the input has no `..`).
fn lexical(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

fn eq_name(a: &OsStr, b: &str) -> bool {
    a.to_str().is_some_and(|a| a.eq_ignore_ascii_case(b))
}

/// Whether `path` is `prefix` or beneath it, comparing names case-insensitively.
fn is_beneath(path: &Path, prefix: &str) -> bool {
    let mut comps = path.components();
    Path::new(prefix)
        .components()
        .all(|want| match (comps.next(), want) {
            (Some(Component::Normal(got)), Component::Normal(want)) => {
                want.to_str().is_some_and(|w| eq_name(got, w))
            }
            (Some(got), want) => got == want,
            (None, _) => false,
        })
}

/// The rule that blocks `path`, if any.
pub fn blocked_reason(path: &Path) -> Option<&'static str> {
    let secret_dir = path.components().any(|c| match c {
        Component::Normal(name) => BLOCKED_COMPONENTS.iter().any(|b| eq_name(name, b)),
        Component::Prefix(_) | Component::RootDir | Component::CurDir | Component::ParentDir => {
            false
        }
    });
    if secret_dir {
        return Some("`.ssh` and `.gnupg` directories hold credentials");
    }
    if BLOCKED_FILES.iter().any(|f| is_beneath(path, f)) {
        return Some("the shadow password databases are never exposed");
    }
    if BLOCKED_TREES.iter().any(|t| is_beneath(path, t)) {
        return Some("/proc, /sys and /dev are kernel interfaces, not files to edit or probe");
    }
    None
}

fn check_blocked(path: &Path, shown: &str) -> Result<(), PathGuardError> {
    match blocked_reason(path) {
        Some(reason) => Err(PathGuardError::Blocked {
            path: shown.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
use walk::resolve;

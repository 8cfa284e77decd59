//! The environment of a model-driven shell (security issue). Interface fixed; body owned by the
//! security work.

use std::ffi::OsString;

/// The environment `execAsAgent` and `execPty` give their shell, computed from this process's
/// own environment with provider keys and ambient credentials scrubbed.
pub fn command_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

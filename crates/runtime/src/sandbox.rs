//! The Landlock write sandbox (security issue). Interface fixed; body owned by the security work.

use thiserror::Error;

/// Environment variable listing the writable roots, `:`-separated; empty or unset: no sandbox.
pub const SANDBOX_WRITE_PATHS_ENV: &str = "INTENDANT_SANDBOX_WRITE_PATHS";

/// What was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxStatus {
    /// No sandbox was requested.
    NotRequested,
    /// Landlock is enforced with these writable roots.
    Enforced {
        /// Roots that existed and were granted write access.
        write_roots: Vec<std::path::PathBuf>,
    },
}

/// Why the sandbox could not be applied; the runtime refuses to run.
#[derive(Debug, Error)]
pub enum SandboxError {
    /// Placeholder until the security work lands.
    #[error(
        "sandbox requested but not implemented; opt out with --no-sandbox or `[sandbox] enabled = false`"
    )]
    Unavailable,
}

/// Applies the sandbox requested by [`SANDBOX_WRITE_PATHS_ENV`] to this process.
pub fn apply_from_env() -> Result<SandboxStatus, SandboxError> {
    match std::env::var_os(SANDBOX_WRITE_PATHS_ENV) {
        Some(v) if !v.is_empty() => Err(SandboxError::Unavailable),
        _ => Ok(SandboxStatus::NotRequested),
    }
}

//! `intendant sessions [show ID] [--json]` (owned by the session-log work).

use std::process::ExitCode;

/// Arguments of `intendant sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {}

/// Runs `intendant sessions`.
pub fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}

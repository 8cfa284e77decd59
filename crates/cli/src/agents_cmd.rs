//! `intendant agents ...` and `intendant delegate ...` (owned by the external-agents work).

use std::process::ExitCode;

/// Arguments of `intendant agents`.
#[derive(Debug, clap::Args)]
pub struct AgentsArgs {}

/// Arguments of `intendant delegate`.
#[derive(Debug, clap::Args)]
pub struct DelegateArgs {}

/// Runs `intendant agents`.
pub fn run_agents(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}

/// Runs `intendant delegate`.
pub fn run_delegate(args: DelegateArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}

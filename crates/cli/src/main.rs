//! `intendant`: argument parsing and the terminal / `--json` frontends; nothing else.
//!
//! Flags are parsed once into [`Cli`]; each subcommand lives in a module of its own and
//! returns the process exit code.

mod agents_cmd;
mod sessions_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Lets AI models do real work on this machine without being trusted with it.
#[derive(Debug, Parser)]
#[command(name = "intendant", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The task to run in the current project.
    task: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// External agent CLIs: list and validate readiness.
    Agents(agents_cmd::AgentsArgs),
    /// Delegate one bounded task to an external CLI (prompt on stdin, JSON on stdout).
    Delegate(agents_cmd::DelegateArgs),
    /// List and show recorded sessions.
    Sessions(sessions_cmd::SessionsArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Agents(args)) => agents_cmd::run_agents(args),
        Some(Command::Delegate(args)) => agents_cmd::run_delegate(args),
        Some(Command::Sessions(args)) => sessions_cmd::run(args),
        None => {
            let _ = cli.task;
            Ok(ExitCode::SUCCESS)
        }
    }
}

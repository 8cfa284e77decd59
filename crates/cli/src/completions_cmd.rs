//! `intendant completions SHELL`: the shell's completion script on stdout, generated from the
//! same argument definitions the binary parses (so it never drifts from them).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap_complete::Shell;

/// Arguments of `intendant completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    shell: Shell,
}

/// Writes the completion script of `command` for the chosen shell to stdout.
pub fn run(args: &CompletionsArgs, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "intendant", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

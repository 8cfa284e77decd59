//! `intendant`: argument parsing and the terminal / `--json` frontends; nothing else.
//! (Built by the controller work; `sessions`, `agents` and `delegate` subcommands arrive with
//! their issues as modules of their own.)

fn main() -> anyhow::Result<std::process::ExitCode> {
    Ok(std::process::ExitCode::SUCCESS)
}

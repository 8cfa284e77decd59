//! `intendant skills list|show NAME`: the skills a session started here would offer (see
//! `intendant_core::skills`), with the warnings their discovery raises.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use intendant_core::dotenv::config_dir;
use intendant_core::prompts::detect_project_root;
use intendant_core::skills::SkillSet;

/// Flags of `intendant skills`.
#[derive(Debug, Args)]
pub struct SkillsArgs {
    #[command(subcommand)]
    command: SkillsCommand,
}

#[derive(Debug, Subcommand)]
enum SkillsCommand {
    /// Every skill found (project, then user), its description, and the ones shadowed.
    List,
    /// One skill as `invoke_skill` gives it to the model: its instructions and its files.
    Show {
        /// The skill's name.
        name: String,
    },
}

/// Runs `intendant skills`: discovery warnings go to stderr, the listing to stdout; an unknown
/// name exits 1.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn run(args: SkillsArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let project_root = detect_project_root(&cwd);
    let set = SkillSet::discover(&project_root, config_dir().as_deref());
    for warning in set.warnings() {
        eprintln!("warning: {warning}");
    }
    match args.command {
        SkillsCommand::List => {
            if set.is_empty() {
                println!(
                    "no skills in {} (.intendant/skills/, .agents/skills/) or the user's \
                     config directory (skills/)",
                    project_root.display()
                );
            }
            for skill in set.skills() {
                println!(
                    "{} ({}): {}\n    {}",
                    skill.name,
                    skill.source.label(),
                    skill.description,
                    skill.dir.display()
                );
            }
            for skill in set.shadowed() {
                println!(
                    "{} ({}, shadowed by the project's): {}",
                    skill.name,
                    skill.source.label(),
                    skill.dir.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Show { name } => match set.invoke(&name) {
            Ok(text) => {
                println!("{text}");
                Ok(ExitCode::SUCCESS)
            }
            Err(message) => {
                eprintln!("{message}");
                Ok(ExitCode::from(1))
            }
        },
    }
}

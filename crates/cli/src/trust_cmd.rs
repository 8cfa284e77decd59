//! `intendant trust [PATH]`, and the check every run makes before honouring a project's
//! security-relevant settings (see `intendant_core::trust`): on a terminal it asks, headless it
//! refuses with an error naming the files, the settings and this command.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use intendant_core::dotenv::{Endpoints, EnvLookup, config_dir};
use intendant_core::prompts::detect_project_root;
use intendant_core::session_log::intendant_home;
use intendant_core::trust::{self, ProjectTrust, TrustStore, Untrusted, review_project};

/// Flags of `intendant trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The project (or a directory in it) whose current `intendant.toml` and `.env` files to
    /// trust; default: the current directory.
    pub path: Option<PathBuf>,
}

/// Loads the project's configuration and reviews its trust; `interactive` asks on the terminal
/// about each untrusted file, otherwise an untrusted file is an error.
pub fn checked_project(
    project_root: &Path,
    env: &EnvLookup,
    interactive: bool,
) -> Result<ProjectTrust, String> {
    let home = intendant_home().map_err(|e| e.to_string())?;
    let mut ask_terminal = ask;
    let ask: Option<&mut dyn FnMut(&Untrusted) -> bool> =
        interactive.then_some(&mut ask_terminal as &mut dyn FnMut(&Untrusted) -> bool);
    trust::checked_project(&home, project_root, env, ask)
}

/// Whether a person is at the terminal to answer the trust question.
pub fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on stderr about one file; `true` only for `y` / `yes`.
#[allow(clippy::print_stderr)]
pub fn ask(untrusted: &Untrusted) -> bool {
    let name = untrusted
        .file
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    eprintln!(
        "this project's {name} ({}) sets security-relevant settings:",
        untrusted.file.path.display()
    );
    for setting in &untrusted.settings {
        eprintln!("  {setting}");
    }
    eprint!("trust it? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// `intendant trust [PATH]`: records the current content of every project file that sets
/// security-relevant settings as trusted, and says what it trusted.
#[allow(clippy::print_stdout)]
pub fn run(args: TrustArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let dir = match args.path {
        Some(p) if p.is_absolute() => p,
        Some(p) => cwd.join(p),
        None => cwd,
    };
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("{}", dir.display()))?;
    let project_root = detect_project_root(&dir);
    let env = EnvLookup::load(&dir, config_dir().as_deref());
    let home = intendant_home()?;
    let store = TrustStore::new(&home);
    let review = review_project(&store, &project_root, &env, Endpoints::All)?;
    if review.relevant.is_empty() {
        println!(
            "nothing to trust: no security-relevant settings in {}",
            project_root.display()
        );
    }
    for (file, settings) in &review.relevant {
        store
            .trust(file)
            .with_context(|| format!("cannot record trust for {}", file.path.display()))?;
        println!(
            "trusted {} (sha256 {}): {}",
            file.path.display(),
            file.sha256,
            settings.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

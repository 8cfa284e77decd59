//! `intendant trust [PATH]`: trust the current content of a project's files that set
//! security-relevant settings (see `intendant_core::trust`). The check every run makes before
//! honouring them is [`crate::wiring::checked_project`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use intendant_core::dotenv::{Endpoints, EnvLookup, config_dir};
use intendant_core::prompts::detect_project_root;
use intendant_core::session_log::intendant_home;
use intendant_core::trust::{TrustStore, review_project};

/// Flags of `intendant trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The project (or a directory in it) whose current `intendant.toml` and `.env` files to
    /// trust; default: the current directory.
    pub path: Option<PathBuf>,
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

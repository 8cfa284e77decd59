//! How this binary joins the library crates together, the same way for every command: external
//! workers get this process's environment ([`agent_workers`]), a daemon's session supervisor is
//! built in one place ([`daemon_supervisor`]), and a project's security-relevant settings are
//! put to the person at the terminal, or refused headless ([`checked_project`], [`ask_trust`]);
//! `intendant rewind` and `intendant ctl rewind` take the same flags ([`RewindFlags`]).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use intendant_agents::worker::AgentWorkers;
use intendant_core::dotenv::EnvLookup;
use intendant_core::session::WorkerFactory;
use intendant_core::session::assemble::AssemblyEnv;
use intendant_core::session_log::intendant_home;
use intendant_core::trust::{self, ProjectTrust, Untrusted};
use intendant_daemon::log::DaemonLog;
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::checkpoints::{RewindRequest, RewindScope};
use intendant_protocol::daemon::HostError;

/// The worker factory of every session this process assembles: external agent CLIs get this
/// process's environment.
pub fn agent_workers() -> Arc<dyn WorkerFactory> {
    Arc::new(AgentWorkers::new(intendant_agents::HostEnv::current()))
}

/// The session supervisor of a daemon for the state root `home` (`serve`, `mcp --no-daemon`),
/// telling its operator through `log`; an invalid `[daemon]` table is an error naming the file.
pub fn daemon_supervisor(home: &Path, log: DaemonLog) -> Result<Supervisor, HostError> {
    Supervisor::new(
        AssemblyEnv::from_process(home.to_path_buf()),
        Some(agent_workers()),
        SupervisorOptions {
            log,
            ..SupervisorOptions::default()
        },
    )
}

/// Loads the project's configuration and reviews its trust; `interactive` asks on the terminal
/// about each untrusted file, otherwise an untrusted file is an error.
pub fn checked_project(
    project_root: &Path,
    env: &EnvLookup,
    interactive: bool,
) -> Result<ProjectTrust, String> {
    let home = intendant_home().map_err(|e| e.to_string())?;
    let mut ask_terminal = ask_trust;
    let ask: Option<&mut dyn FnMut(&Untrusted) -> bool> =
        interactive.then_some(&mut ask_terminal as &mut dyn FnMut(&Untrusted) -> bool);
    trust::checked_project(&home, project_root, env, ask)
}

/// Whether a person is at the terminal to answer the trust question.
pub fn can_ask_trust() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on stderr whether to trust one file; `true` only for `y` / `yes`.
#[allow(clippy::print_stderr)]
pub fn ask_trust(untrusted: &Untrusted) -> bool {
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

/// What to rewind, as `intendant rewind ID` and `intendant ctl rewind ID` are told.
#[derive(Debug, Clone, clap::Args)]
pub struct RewindFlags {
    /// Rewind to before this turn (as `intendant checkpoints` numbers it).
    #[arg(
        long = "to",
        value_name = "N",
        required_unless_present = "undo",
        conflicts_with = "undo"
    )]
    pub to: Option<u32>,
    /// Undo the last rewind (itself checkpointed).
    #[arg(long)]
    pub undo: bool,
    /// Restore only the project's files.
    #[arg(long, conflicts_with_all = ["conversation", "both"])]
    pub code: bool,
    /// Only cut the conversation back (the next follow-up or resume continues from there).
    #[arg(long, conflicts_with_all = ["code", "both"])]
    pub conversation: bool,
    /// Both files and conversation (the default).
    #[arg(long)]
    pub both: bool,
    /// Rewind even when files changed since the session's last checkpoint by something other
    /// than the session (they are lost).
    #[arg(long)]
    pub force: bool,
    /// Change nothing: show what would change (the files and the diff).
    #[arg(long)]
    pub preview: bool,
    /// Rewind the session's sub-agents' worktrees too, each to how it was when the turn began
    /// (with --undo: each one's last rewind); without it they are left as they are.
    #[arg(long)]
    pub with_children: bool,
}

impl RewindFlags {
    /// The request for session `session_id`.
    pub fn request(&self, session_id: &str) -> RewindRequest {
        let scope = match (self.code, self.conversation) {
            (true, _) => RewindScope::Code,
            (_, true) => RewindScope::Conversation,
            (false, false) => RewindScope::Both,
        };
        RewindRequest {
            session_id: session_id.to_owned(),
            to_turn: self.to.filter(|_| !self.undo),
            undo: self.undo,
            scope,
            force: self.force,
            preview: self.preview,
            with_children: self.with_children,
        }
    }
}

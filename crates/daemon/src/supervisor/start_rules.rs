//! The rules every start and autonomy change is held to, whichever surface asked (the control
//! socket and `intendant ctl`, the dashboard, MCP, a session spawning sub-agents): the same as
//! a human at the terminal.
//!
//! - No autonomy above the owner's ceiling, `[daemon] max_autonomy` ([`within_ceiling`]).
//! - An ACP agent's command line counts only from trusted configuration: a request naming one
//!   runs the `[agent.acp.NAME]` entry of the project's `intendant.toml` with exactly that
//!   command (which the session's trust check then requires a human to have trusted), never a
//!   command line from the request alone ([`acp_from_config`]).

use std::path::Path;

use intendant_core::config::ProjectConfig;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Backend, HostError, HostErrorCode, Settings, StartRequest};

/// The generic ACP agent's backend name, the one that takes a command line.
const ACP: &str = "acp";
use crate::control_plane;

/// Refuses `level` above the daemon's ceiling.
pub(super) fn within_ceiling(settings: &Settings, level: AutonomyLevel) -> Result<(), HostError> {
    control_plane::within_ceiling(level, settings.max_autonomy, "[daemon] max_autonomy")
        .map_err(|m| HostError::new(HostErrorCode::Forbidden, m))
}

/// A request carrying an ACP command line, turned into the name of the project's
/// `[agent.acp.NAME]` entry with exactly that command; refused when there is none. A resumed
/// session keeps the command its log recorded (the backend check of the assembly compares them).
pub(super) fn acp_from_config(request: &mut StartRequest, cwd: &Path) -> Result<(), HostError> {
    // A command line given to another backend is refused by the worker factory, naming it.
    let command = match &request.backend {
        Some(backend)
            if backend.name() == ACP
                && !backend.command().is_empty()
                && request.resume.is_none() =>
        {
            backend.command().to_vec()
        }
        Some(_) | None => return Ok(()),
    };
    let root = intendant_core::prompts::detect_project_root(cwd);
    let config = ProjectConfig::load(&root)
        .map_err(|e| HostError::new(HostErrorCode::InvalidRequest, e.to_string()))?;
    match config.acp_entry_running(&command) {
        Some(name) => {
            request.backend = Some(Backend::named(&name));
            Ok(())
        }
        None => Err(HostError::new(
            HostErrorCode::Forbidden,
            format!(
                "an ACP agent's command line counts only from trusted configuration, never from \
                 a request: add it to {}/intendant.toml as [agent.acp.NAME] command = {command:?}, \
                 trust the file (`intendant trust`), and start the session with that NAME",
                root.display()
            ),
        )),
    }
}

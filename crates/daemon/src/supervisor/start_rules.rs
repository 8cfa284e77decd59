//! The rules every start and autonomy change is held to, whichever surface asked (the control
//! socket and `intendant ctl`, the dashboard, MCP, a session spawning sub-agents): the same as
//! a human at the terminal.
//!
//! - No autonomy above the owner's ceiling, `[daemon] max_autonomy` ([`within_ceiling`]).
//! - An ACP agent's command line counts only from trusted configuration: a request naming one
//!   runs the `[agent.acp.NAME]` entry of the project's `intendant.toml` with exactly that
//!   command (which the session's trust check then requires a human to have trusted), never a
//!   command line from the request alone ([`acp_from_config`]).
//! - No start that would leave the daemon fewer descriptors free than its running sessions and
//!   its clients need ([`room_for_a_start`]).
//! - A network no more open than the owner's settings: a top session's request is held within
//!   the project's `[sandbox] network` by assembly, a sub-agent's within its parent's
//!   ([`network_choice`]).
//! - No task, follow-up or answer longer than `MAX_TASK_BYTES` ([`text_within_bound`]): more
//!   would crowd the conversation out (a context a hundred times over, compacted away), whoever
//!   sent it.

use std::path::Path;

use intendant_core::config::ProjectConfig;
use intendant_core::network::{NetworkChoice, NetworkMode};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Backend, HostError, HostErrorCode, Settings, StartRequest};

/// The generic ACP agent's backend name, the one that takes a command line.
const ACP: &str = "acp";
use crate::{control_plane, descriptors};

/// Refuses `text` (`what` names it: "the task") longer than a session takes.
pub(super) fn text_within_bound(text: &str, what: &str) -> Result<(), HostError> {
    match intendant_protocol::socket::over_task_bound(text, what) {
        Some(why) => Err(HostError::new(HostErrorCode::InvalidRequest, why)),
        None => Ok(()),
    }
}

/// Refuses `level` above the daemon's ceiling.
pub(super) fn within_ceiling(settings: &Settings, level: AutonomyLevel) -> Result<(), HostError> {
    control_plane::within_ceiling(level, settings.max_autonomy, "[daemon] max_autonomy")
        .map_err(|m| HostError::new(HostErrorCode::Forbidden, m))
}

/// Refuses a start while fewer descriptors are free than [`descriptors::reserve`] keeps for the
/// `max_running` sessions at work and for clients (`busy`: ending a session makes room).
pub(super) fn room_for_a_start(settings: &Settings) -> Result<(), HostError> {
    descriptors::room_for_a_start(settings.max_running)
        .map_err(|m| HostError::new(HostErrorCode::Busy, m))
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

/// Who chose a session's network: a top session's request is held within the project's
/// settings (by assembly); a sub-agent's mode is its parent's unless it asks for a narrower one,
/// never a wider one (a session cannot widen its own walls through a child).
pub(super) fn network_choice(
    asked: Option<NetworkMode>,
    parent: Option<NetworkMode>,
) -> Result<Option<NetworkChoice>, HostError> {
    match (asked, parent) {
        (asked, None) => Ok(asked.map(NetworkChoice::Requested)),
        (None, Some(parent)) => Ok(Some(NetworkChoice::Owner(parent))),
        (Some(asked), Some(parent)) if asked.within(parent) => {
            Ok(Some(NetworkChoice::Owner(asked)))
        }
        (Some(asked), Some(parent)) => Err(HostError::new(
            HostErrorCode::InvalidRequest,
            format!(
                "network \"{asked}\" was asked for a sub-agent of a session whose commands have \"{parent}\": a sub-agent may only narrow its parent's network"
            ),
        )),
    }
}

/// What a sub-agent resumed under its running parent asks for: the network it `ran` with
/// where the `parent`'s still gives it (so a resume keeps a narrowing), else nothing (the
/// parent's, [`network_choice`]).
pub(super) fn resumed_network(
    ran: Option<NetworkMode>,
    parent: Option<NetworkMode>,
) -> Option<NetworkMode> {
    ran.filter(|ran| parent.is_none_or(|parent| ran.within(parent)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_sub_agent_keeps_a_narrower_network_than_its_parents_never_a_wider_one() {
        use NetworkMode::{Host, None as Closed, Proxy};
        assert_eq!(resumed_network(Some(Closed), Some(Proxy)), Some(Closed));
        assert_eq!(resumed_network(Some(Proxy), Some(Proxy)), Some(Proxy));
        // The parent's was narrowed since: the parent's it is.
        assert_eq!(resumed_network(Some(Host), Some(Proxy)), None);
        assert_eq!(
            network_choice(resumed_network(Some(Host), Some(Proxy)), Some(Proxy)).unwrap(),
            Some(NetworkChoice::Owner(Proxy))
        );
        assert_eq!(resumed_network(None, Some(Closed)), None);
        assert_eq!(resumed_network(Some(Closed), None), Some(Closed));
    }

    #[test]
    fn a_sub_agent_gets_its_parents_network_or_a_narrower_one_never_a_wider_one() {
        use NetworkMode::{Host, None as Closed, Proxy};
        // A top session's request goes to assembly, held within the project's settings there.
        assert_eq!(
            network_choice(Some(Host), None).unwrap(),
            Some(NetworkChoice::Requested(Host))
        );
        assert_eq!(network_choice(None, None).unwrap(), None);
        // A sub-agent runs within its parent's mode, whatever the project file says.
        assert_eq!(
            network_choice(None, Some(Closed)).unwrap(),
            Some(NetworkChoice::Owner(Closed))
        );
        assert_eq!(
            network_choice(Some(Closed), Some(Host)).unwrap(),
            Some(NetworkChoice::Owner(Closed))
        );
        for (asked, parent) in [(Proxy, Closed), (Host, Proxy)] {
            let err = network_choice(Some(asked), Some(parent)).unwrap_err();
            assert_eq!(err.code, HostErrorCode::InvalidRequest);
            assert!(err.message.contains("may only narrow"), "{}", err.message);
        }
    }
}

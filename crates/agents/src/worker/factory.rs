//! `core::session::WorkerFactory` for the agents crate: session assembly asks for a worker by
//! name (`codex`, `claude-code`, `kimi`, `acp` for the command line's ACP agent, or the NAME of
//! an `[agent.acp.NAME]` entry) and gets a `SessionBackend`.

use intendant_core::session::{SessionBackend, WorkerContext, WorkerFactory};

use super::start::WorkerSetup;
use crate::config::{AcpAgentConfig, AgentConfig};
use crate::env::HostEnv;

/// Builds one worker backend.
type Build = fn(WorkerSetup, WorkerContext) -> Result<Box<dyn SessionBackend>, String>;

/// Every worker, by the name users select it with.
const WORKERS: &[(&str, Build)] = &[
    ("codex", super::codex::backend),
    ("claude-code", super::claude::backend),
    ("kimi", super::acp::kimi_backend),
];

/// The name of the ACP agent given on the command line (`--agent acp -- COMMAND ARGS...`).
pub const ACP: &str = "acp";

/// How that agent is asked for, for messages.
pub const ACP_USAGE: &str = "`--agent acp -- COMMAND ARGS...`";

/// The names `--agent` accepts.
pub fn worker_names() -> Vec<&'static str> {
    WORKERS.iter().map(|(name, _)| *name).collect()
}

/// The agents crate's worker factory: the caller's environment (each session brings its
/// project's `[agent.<name>]` tables and, for `acp`, its command line in its context).
#[derive(Debug, Clone)]
pub struct AgentWorkers {
    host: HostEnv,
}

impl AgentWorkers {
    /// A factory giving workers the environment `host`.
    pub fn new(host: HostEnv) -> AgentWorkers {
        AgentWorkers { host }
    }

    /// An ACP agent without a profile: the command line's (`acp`), or `[agent.acp.NAME]`.
    fn acp_worker(
        &self,
        name: &str,
        ctx: WorkerContext,
    ) -> Option<Result<Box<dyn SessionBackend>, String>> {
        let setup = WorkerSetup {
            config: AgentConfig::default(),
            host: self.host.clone(),
        };
        if name == ACP {
            if ctx.command.is_empty() {
                return Some(Err(format!(
                    "`--agent {ACP}` needs the agent's command line: {ACP_USAGE}"
                )));
            }
            let command = ctx.command.clone();
            return Some(super::acp::generic_backend(
                name,
                &command,
                &[],
                &setup,
                ctx,
            ));
        }
        let entries = ctx.agent_config.get(ACP);
        match AcpAgentConfig::from_table(name, entries) {
            Ok(Some(entry)) => {
                let setup = WorkerSetup {
                    config: AgentConfig {
                        idle_exit_secs: entry.idle_exit_secs,
                        handshake_timeout_secs: entry.handshake_timeout_secs,
                        ..setup.config
                    },
                    ..setup
                };
                Some(super::acp::generic_backend(
                    name,
                    &entry.command,
                    &entry.env,
                    &setup,
                    ctx,
                ))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }
}

impl WorkerFactory for AgentWorkers {
    fn build(&self, name: &str, ctx: WorkerContext) -> Result<Box<dyn SessionBackend>, String> {
        if name != ACP && !ctx.command.is_empty() {
            return Err(command_not_acp(Some(name)));
        }
        let Some((_, build)) = WORKERS.iter().find(|(n, _)| *n == name) else {
            return self.acp_worker(name, ctx).unwrap_or_else(|| {
                Err(format!(
                    "unknown agent `{name}`: expected one of {}, `acp -- COMMAND ARGS...` or \
                     the NAME of an [agent.acp.NAME] entry",
                    worker_names().join(", ")
                ))
            });
        };
        let config =
            AgentConfig::from_table(name, ctx.agent_config.get(name)).map_err(|e| e.to_string())?;
        build(
            WorkerSetup {
                config,
                host: self.host.clone(),
            },
            ctx,
        )
    }
}

/// The refusal of a command line given to a backend other than `acp` (`None`: none named).
pub fn command_not_acp(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("a command line is the ACP agent's, not {name}'s: {ACP_USAGE}"),
        None => format!("a command line is the ACP agent's: {ACP_USAGE}"),
    }
}

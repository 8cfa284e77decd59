//! `core::session::WorkerFactory` for the agents crate: session assembly asks for a worker by
//! name (`codex`, ...) and gets a `SessionBackend`.

use intendant_core::session::{SessionBackend, WorkerContext, WorkerFactory};

use crate::config::AgentConfig;
use crate::env::HostEnv;

/// What a worker needs besides the session: its `[agent.<name>]` settings and the caller's
/// environment (the worker's own is built from it by the profile's policy).
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    /// `[agent.<name>]`.
    pub config: AgentConfig,
    /// The caller's environment.
    pub host: HostEnv,
}

/// Builds one worker backend.
type Build = fn(WorkerSetup, WorkerContext) -> Result<Box<dyn SessionBackend>, String>;

/// Every worker, by the name users select it with.
const WORKERS: &[(&str, Build)] = &[("codex", super::codex::backend)];

/// The names `--agent` accepts.
pub fn worker_names() -> Vec<&'static str> {
    WORKERS.iter().map(|(name, _)| *name).collect()
}

/// The agents crate's worker factory: the `[agent.<name>]` tables of `intendant.toml` and the
/// caller's environment.
#[derive(Debug, Clone)]
pub struct AgentWorkers {
    tables: std::collections::BTreeMap<String, toml::Table>,
    host: HostEnv,
}

impl AgentWorkers {
    /// A factory reading `[agent.<name>]` from `tables` (`ProjectConfig::agent`).
    pub fn new(
        tables: std::collections::BTreeMap<String, toml::Table>,
        host: HostEnv,
    ) -> AgentWorkers {
        AgentWorkers { tables, host }
    }
}

impl WorkerFactory for AgentWorkers {
    fn build(&self, name: &str, ctx: WorkerContext) -> Result<Box<dyn SessionBackend>, String> {
        let Some((_, build)) = WORKERS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "unknown agent `{name}`: expected one of {}",
                worker_names().join(", ")
            ));
        };
        let config =
            AgentConfig::from_table(name, self.tables.get(name)).map_err(|e| e.to_string())?;
        build(
            WorkerSetup {
                config,
                host: self.host.clone(),
            },
            ctx,
        )
    }
}

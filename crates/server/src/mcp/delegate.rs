//! The `delegate` tool: `intendant delegate` (the bounded delegation contract of
//! `intendant_agents::delegate`) as one tool call, run in this process.

use std::path::Path;
use std::time::Duration;

use intendant_agents::{AgentConfig, CliError, DelegationRequest, ErrorCode, HostEnv};
use intendant_core::dotenv::{Endpoints, EnvLookup, config_dir};
use intendant_core::session_log::intendant_home;
use intendant_core::trust::{TrustStore, refusal, review_project};
use intendant_protocol::daemon::HostErrorCode;
use serde_json::{Map, Value};

use super::args::{self, DEFAULT_DELEGATE_S, MAX_DELEGATE_S};
use super::error::{ToolError, ToolResult};

/// Runs delegations for the `delegate` tool.
pub struct Delegator {
    host: HostEnv,
}

impl Default for Delegator {
    fn default() -> Self {
        Delegator::new()
    }
}

impl From<CliError> for ToolError {
    fn from(e: CliError) -> ToolError {
        let mut extra = Map::new();
        if let Some(command) = e.recovery_command {
            extra.insert("recovery_command".into(), Value::String(command));
        }
        if !e.details.is_empty() {
            extra.insert("details".into(), Value::Object(e.details));
        }
        ToolError {
            code: e.code.into(),
            message: e.message,
            extra,
        }
    }
}

impl Delegator {
    /// A delegator with this process's environment (credentials included: the contract admits
    /// only what each CLI needs into its child).
    pub fn new() -> Delegator {
        Delegator {
            host: HostEnv::current(),
        }
    }

    /// Runs one delegation configured by `project`'s intendant.toml (trusted settings only).
    pub async fn run(&self, a: args::Delegate, project: &Path) -> ToolResult {
        let config = agent_config(project, &a.agent)?;
        let mut req = DelegationRequest::new(&a.agent, a.prompt, a.schema);
        req.model = a.model;
        req.effort = a.effort;
        req.timeout = Duration::from_secs(
            a.timeout_s
                .unwrap_or(DEFAULT_DELEGATE_S)
                .clamp(1, MAX_DELEGATE_S),
        );
        if let Some(limit) = a.max_output_bytes {
            req.max_output_bytes = limit;
        }
        // Below the runtime, the CLI ends should this process (a daemon, `intendant mcp`) be
        // killed; without one installed it runs as it is.
        req.guard = intendant_core::runner::own_runtime().ok();
        let response =
            intendant_agents::delegate(&req, &config, &self.host, std::future::pending()).await?;
        serde_json::to_value(response).map_err(|e| {
            ToolError::new(
                HostErrorCode::Internal,
                format!("cannot encode the answer: {e}"),
            )
        })
    }
}

/// The `[agent.<name>]` settings of `project`, refused while its security settings are untrusted.
fn agent_config(project: &Path, agent: &str) -> Result<AgentConfig, ToolError> {
    let home = intendant_home()
        .map_err(|e| ToolError::new(HostErrorCode::Internal, format!("no state root: {e}")))?;
    let env = EnvLookup::load(project, config_dir().as_deref());
    let review = review_project(&TrustStore::new(&home), project, &env, Endpoints::InEffect)
        .map_err(|e| CliError::new(ErrorCode::CliPermissionDenied, e.to_string()))?;
    if !review.untrusted.is_empty() {
        return Err(CliError::new(
            ErrorCode::CliPermissionDenied,
            refusal(&review.untrusted, project),
        )
        .into());
    }
    AgentConfig::from_table(agent, review.config.agent.workers.get(agent))
        .map_err(|e| CliError::new(ErrorCode::CliPermissionDenied, e.to_string()).into())
}

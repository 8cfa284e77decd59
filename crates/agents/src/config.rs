//! `[agent.<name>]` of `intendant.toml`: one external CLI's settings; `[agent.acp.<name>]`: an
//! ACP agent run by its command line (any agent speaking the Agent Client Protocol).
//!
//! The controller's configuration keeps these tables as raw TOML (core does not know the
//! agents); this module reads one, refusing an unknown key so a typo never silently does
//! nothing.

use std::path::PathBuf;

use serde::Deserialize;
use thiserror::Error;

/// `[agent.<name>]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Explicit executable path (also spelled `command`); else PATH lookup.
    #[serde(alias = "command")]
    pub path: Option<PathBuf>,
    /// Default model.
    pub model: Option<String>,
    /// Auth classes accepted (e.g. `["api_key"]`); empty: all.
    #[serde(default)]
    pub allowed_auth: Vec<String>,
    /// CLI config overrides (codex `-c KEY=VALUE`).
    #[serde(default)]
    pub config: Vec<String>,
    /// Extra environment variable names admitted into the CLI's environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Reasoning effort of a worker session's turns.
    pub effort: Option<String>,
    /// The worker's own approval policy (codex: `untrusted`, `on-request`, `never`); it can only
    /// make the autonomy level's choice stricter.
    pub approval_policy: Option<String>,
    /// Extra arguments of a worker session's command line.
    #[serde(default)]
    pub args: Vec<String>,
    /// Seconds a worker's open turn may stay silent before a warning (default 180).
    pub wedge_after_secs: Option<u64>,
    /// Seconds the worker is kept while its session waits for a follow-up (default 300; 0:
    /// as long as the session); past them it is let go, and the next follow-up starts it again
    /// on its conversation.
    pub idle_exit_secs: Option<u64>,
    /// Seconds a worker may take to finish its handshake, at each start (default 60).
    pub handshake_timeout_secs: Option<u64>,
}

/// An `[agent.<name>]` table that is not a valid agent configuration.
#[derive(Debug, Error)]
#[error("[agent.{name}]: {message}")]
pub struct AgentConfigError {
    /// The agent's name (the table's key).
    pub name: String,
    /// What is wrong.
    pub message: String,
}

impl AgentConfig {
    /// Reads the `[agent.<name>]` table; no table is the default configuration.
    pub fn from_table(
        name: &str,
        table: Option<&toml::Table>,
    ) -> Result<AgentConfig, AgentConfigError> {
        let Some(table) = table else {
            return Ok(AgentConfig::default());
        };
        AgentConfig::deserialize(toml::Value::Table(table.clone())).map_err(|e| AgentConfigError {
            name: name.to_owned(),
            message: e.to_string().trim().to_owned(),
        })
    }
}

/// `[agent.acp.<name>]`: an ACP agent that has no profile of its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpAgentConfig {
    /// The executable and its arguments (`["gemini", "--experimental-acp"]`).
    pub command: Vec<String>,
    /// Extra environment variable names admitted into the agent's environment (its own login
    /// or key; nothing else of ours reaches it).
    #[serde(default)]
    pub env: Vec<String>,
    /// As `[agent.NAME] idle_exit_secs`.
    pub idle_exit_secs: Option<u64>,
    /// As `[agent.NAME] handshake_timeout_secs`.
    pub handshake_timeout_secs: Option<u64>,
}

impl AcpAgentConfig {
    /// The entry `name` of the `[agent.acp]` table (`agent_acp`), or `None` when there is none.
    pub fn from_table(
        name: &str,
        agent_acp: Option<&toml::Table>,
    ) -> Result<Option<AcpAgentConfig>, AgentConfigError> {
        let error = |message: String| AgentConfigError {
            name: format!("acp.{name}"),
            message,
        };
        let Some(entry) = agent_acp.and_then(|t| t.get(name)) else {
            return Ok(None);
        };
        let config = AcpAgentConfig::deserialize(entry.clone())
            .map_err(|e| error(e.to_string().trim().to_owned()))?;
        if config.command.first().is_none_or(|c| c.is_empty()) {
            return Err(error("`command` must name the executable".into()));
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_table_parses() {
        let t = table("model = \"gpt-5\"\nconfig = [\"a=1\"]\nallowed_auth = [\"api_key\"]\n");
        let c = AgentConfig::from_table("codex", Some(&t)).unwrap();
        assert_eq!(c.model.as_deref(), Some("gpt-5"));
        assert_eq!(c.config, ["a=1"]);
        assert_eq!(c.allowed_auth, ["api_key"]);
        assert_eq!(
            AgentConfig::from_table("codex", None).unwrap(),
            AgentConfig::default()
        );
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_the_table_and_key() {
        let t = table("modle = \"gpt-5\"\n");
        let e = AgentConfig::from_table("codex", Some(&t))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("[agent.codex]: "), "{e}");
        assert!(e.contains("modle"), "{e}");
        let t = table("model = 5\n");
        assert!(AgentConfig::from_table("codex", Some(&t)).is_err());
    }

    #[test]
    fn an_acp_entry_needs_a_command_and_refuses_unknown_keys() {
        let t = table(
            "[gemini]\ncommand = [\"gemini\", \"--experimental-acp\"]\nenv = [\"GEMINI_API_KEY\"]\n",
        );
        let c = AcpAgentConfig::from_table("gemini", Some(&t))
            .unwrap()
            .unwrap();
        assert_eq!(c.command, ["gemini", "--experimental-acp"]);
        assert_eq!(c.env, ["GEMINI_API_KEY"]);
        assert_eq!(AcpAgentConfig::from_table("other", Some(&t)).unwrap(), None);
        assert_eq!(AcpAgentConfig::from_table("gemini", None).unwrap(), None);
        let t = table("[x]\ncommand = []\n");
        let e = AcpAgentConfig::from_table("x", Some(&t))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("[agent.acp.x]: "), "{e}");
        let t = table("[x]\ncommand = [\"a\"]\ncomand = 1\n");
        assert!(AcpAgentConfig::from_table("x", Some(&t)).is_err());
    }
}

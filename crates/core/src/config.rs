//! `intendant.toml`: the project configuration, parsed once into plain structs.
//!
//! Every section is optional; an unknown key is an error so a typo never silently does nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

/// File name of the project configuration, looked up in the project root.
pub const CONFIG_FILE_NAME: &str = "intendant.toml";
/// Most bytes the controller reads of a file a session's commands may have put in the project
/// (its `intendant.toml`, its instructions, a `.env`): a larger one is refused whole.
pub const MAX_PROJECT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The whole `intendant.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// `[sandbox]`.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[approval]`: category name to `auto` / `ask` / `deny` (interpreted by the approval work).
    #[serde(default)]
    pub approval: BTreeMap<String, String>,
    /// `[agent]`: the default backend and the `[agent.<name>]` tables.
    #[serde(default)]
    pub agent: AgentSection,
    /// `[limits]`: bounds of everything one session runs.
    #[serde(default)]
    pub limits: crate::containment::LimitsConfig,
    /// `[subagents]`: how deep sub-agents may nest and how many of one session run at once.
    #[serde(default)]
    pub subagents: crate::subagents::SubAgentLimits,
    /// `[provider]`: how the model is spoken to.
    #[serde(default)]
    pub provider: ProviderSection,
    /// `[checkpoints]`: whether each batch is checkpointed and the largest file captured.
    #[serde(default)]
    pub checkpoints: crate::checkpoint::CheckpointConfig,
    /// `[hooks]`: the owner's commands bound to a session's events (each one a security
    /// setting).
    #[serde(default)]
    pub hooks: crate::hooks::HooksConfig,
    /// `[mcp_servers.NAME]`: MCP servers a native session uses (each one a security setting).
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, crate::mcp_client::McpServerEntry>,
}

/// `[provider]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// `tool_mode`: `native` (tool definitions in the request) or `text` (tools described in
    /// the prompt, JSON commands read from the answer); unset, the default of the wire and
    /// model family (`intendant_providers::default_tool_mode`).
    pub tool_mode: Option<intendant_providers::ToolMode>,
}

/// `[agent]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct AgentSection {
    /// `default_backend`: what runs a session that names none (`native`, or a worker name as
    /// `--agent` takes it); `--agent` and a start request's backend override it.
    pub default_backend: Option<String>,
    /// `[agent.<name>]`: per external CLI settings, kept as raw tables; `intendant-agents`
    /// reads each one (`AgentConfig::from_table`), refusing unknown keys.
    pub workers: BTreeMap<String, toml::Table>,
}

impl TryFrom<toml::Table> for AgentSection {
    type Error = String;

    fn try_from(table: toml::Table) -> Result<AgentSection, String> {
        let mut section = AgentSection::default();
        for (key, value) in table {
            match (key.as_str(), value) {
                ("default_backend", toml::Value::String(name)) => {
                    section.default_backend = Some(name);
                }
                ("default_backend", other) => {
                    return Err(format!(
                        "[agent] default_backend must be a string, not {}",
                        other.type_str()
                    ));
                }
                (_, toml::Value::Table(worker)) => {
                    section.workers.insert(key, worker);
                }
                (_, _) => {
                    return Err(format!(
                        "unknown key `{key}` in [agent]: expected `default_backend` or an \
                         [agent.NAME] table"
                    ));
                }
            }
        }
        Ok(section)
    }
}

/// `[sandbox]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Overrides the platform default when set.
    pub enabled: Option<bool>,
    /// Extra writable roots.
    #[serde(default)]
    pub extra_write_paths: Vec<PathBuf>,
    /// Refuse to run when the sandbox's second layer (mount namespace and syscall filter)
    /// cannot be set up, instead of running with Landlock alone and saying so.
    #[serde(default)]
    pub require_full: bool,
    /// Paths hidden from commands besides the default set (`~/` is the home directory, a
    /// relative path is the project's): only tightens.
    #[serde(default)]
    pub deny_read: Vec<PathBuf>,
    /// Paths of the default hidden set left readable (and a path beneath a hidden one shown
    /// again): relaxes, so it counts only once the file is trusted. The state root stays hidden
    /// whatever it says.
    #[serde(default)]
    pub allow_read: Vec<PathBuf>,
    /// What network commands get, and the egress proxy's policy (`[sandbox.network]`).
    #[serde(default)]
    pub network: NetworkSection,
}

/// `[sandbox] network`: a mode (`network = "proxy"`), or a table (`[sandbox.network]`) with
/// `mode` and the egress proxy's policy. `mode = "host"`, `allow`, `allow_addresses` and `hosts`
/// relax, so they count only once the file is trusted; `deny` and `default_allow = false` only
/// tighten.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub struct NetworkSection {
    /// What network commands get (unset: the default, `--network` overriding both).
    pub mode: Option<intendant_protocol::network::NetworkMode>,
    /// The egress proxy's policy.
    pub egress: crate::egress::EgressSettings,
}

impl TryFrom<toml::Value> for NetworkSection {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<NetworkSection, String> {
        let mode = |value: toml::Value| match value {
            toml::Value::String(name) => name
                .parse::<intendant_protocol::network::NetworkMode>()
                .map_err(|e| format!("[sandbox] network: {e}")),
            other => Err(format!(
                "[sandbox] network mode must be a string, not {}",
                other.type_str()
            )),
        };
        match value {
            toml::Value::Table(mut table) => {
                let mode = table.remove("mode").map(mode).transpose()?;
                let egress = toml::Value::Table(table)
                    .try_into::<crate::egress::EgressSettings>()
                    .map_err(|e| format!("[sandbox.network]: {}", e.message()))?;
                Ok(NetworkSection { mode, egress })
            }
            other => Ok(NetworkSection {
                mode: Some(mode(other)?),
                egress: crate::egress::EgressSettings::default(),
            }),
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid configuration.
    #[error("invalid {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        message: String,
    },
}

impl ProjectConfig {
    /// Loads `<project_root>/intendant.toml`; a missing file is the default configuration.
    pub fn load(project_root: &Path) -> Result<ProjectConfig, ConfigError> {
        Ok(ProjectConfig::load_digest(project_root)?.0)
    }

    /// [`ProjectConfig::load`], with the digest of the exact bytes parsed (`None` when the file
    /// is missing), for the trust check.
    pub fn load_digest(
        project_root: &Path,
    ) -> Result<(ProjectConfig, Option<crate::digest::FileDigest>), ConfigError> {
        let path = project_root.join(CONFIG_FILE_NAME);
        // A session's commands may have put anything there: never waited on, never read whole,
        // and never through a link (to another project's trusted file, to one the commands
        // cannot read, whose lines a parse error would quote).
        match crate::regular_file::read_beneath(
            project_root,
            Path::new(CONFIG_FILE_NAME),
            MAX_PROJECT_FILE_BYTES,
            crate::regular_file::Reach::Direct,
        ) {
            Ok(bytes) => {
                let text = std::str::from_utf8(&bytes).map_err(|e| ConfigError::Read {
                    path: path.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                })?;
                let config = ProjectConfig::parse(text).map_err(|message| ConfigError::Parse {
                    path: path.clone(),
                    message,
                })?;
                Ok((config, Some(crate::digest::FileDigest::of(&path, &bytes))))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok((ProjectConfig::default(), None))
            }
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// The settings that weaken the boundary or run something, as the file spells them: they
    /// count only once a human trusted the file (see `trust`). Settings that only tighten
    /// (`enabled = true`, `ask` and `deny` rules) or that are cosmetic (a model name) are not.
    pub fn security_settings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.sandbox.enabled == Some(false) {
            out.push("[sandbox] enabled = false".to_owned());
        }
        if !self.sandbox.extra_write_paths.is_empty() {
            out.push(format!(
                "[sandbox] extra_write_paths = {:?}",
                self.sandbox.extra_write_paths
            ));
        }
        let network = &self.sandbox.network;
        if network.mode == Some(intendant_protocol::network::NetworkMode::Host) {
            out.push("[sandbox] network = \"host\"".to_owned());
        }
        for (key, list) in [
            ("allow", &network.egress.allow),
            ("allow_addresses", &network.egress.allow_addresses),
        ] {
            if !list.is_empty() {
                out.push(format!("[sandbox.network] {key} = {list:?}"));
            }
        }
        if !network.egress.hosts.is_empty() {
            out.push(format!(
                "[sandbox.network] hosts = {:?}",
                network.egress.hosts
            ));
        }
        if !self.sandbox.allow_read.is_empty() {
            out.push(format!(
                "[sandbox] allow_read = {:?}",
                self.sandbox.allow_read
            ));
        }
        out.extend(self.checkpoints.weakenings());
        for (category, rule) in &self.approval {
            if rule == "auto" {
                out.push(format!("[approval] {category} = \"auto\""));
            }
        }
        // Each runs a program or sends a token: every entry, whatever it says.
        for (name, entry) in &self.mcp_servers {
            out.push(
                entry
                    .validate(name, crate::mcp_client::Source::Project)
                    .map_or_else(|e| e.to_string(), |s| s.setting()),
            );
        }
        // An executable, its config overrides and the variables admitted into its environment.
        // `[agent.acp.NAME]` entries are ACP agents run by their `command`.
        let acp = self
            .agent
            .workers
            .get("acp")
            .into_iter()
            .flat_map(|entries| {
                entries.iter().filter_map(|(name, entry)| {
                    entry.as_table().map(|t| (format!("acp.{name}"), t))
                })
            });
        let named = self
            .agent
            .workers
            .iter()
            .filter(|(name, _)| name.as_str() != "acp")
            .map(|(name, t)| (name.clone(), t));
        for (name, agent) in named.chain(acp) {
            for key in ["path", "command", "config", "env"] {
                let set = agent.get(key).filter(|v| match v {
                    toml::Value::Array(items) => !items.is_empty(),
                    _ => true,
                });
                if let Some(value) = set {
                    out.push(format!("[agent.{name}] {key} = {value}"));
                }
            }
        }
        out.extend(self.hooks.security_settings());
        out
    }

    /// The NAME of the `[agent.acp.NAME]` entry whose `command` is exactly `command`.
    pub fn acp_entry_running(&self, command: &[String]) -> Option<String> {
        let entries = self.agent.workers.get("acp")?;
        entries.iter().find_map(|(name, entry)| {
            let configured = entry.as_table()?.get("command")?.as_array()?;
            let same = configured.len() == command.len()
                && configured
                    .iter()
                    .zip(command)
                    .all(|(c, given)| c.as_str() == Some(given.as_str()));
            same.then(|| name.clone())
        })
    }

    /// Parses configuration text; the error names the problem and its place.
    pub fn parse(text: &str) -> Result<ProjectConfig, String> {
        let config: ProjectConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.hooks.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(ProjectConfig::parse("").unwrap(), ProjectConfig::default());
    }

    #[test]
    fn sections_parse() {
        let c = ProjectConfig::parse(
            "[sandbox]\nenabled = false\nextra_write_paths = [\"/opt/x\"]\n\
             [approval]\ncommand_exec = \"auto\"\n\
             [agent.codex]\nmodel = \"gpt-5\"\nconfig = [\"a=1\"]\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.enabled, Some(false));
        assert!(!c.sandbox.require_full, "off unless asked for");
        assert!(
            ProjectConfig::parse("[sandbox]\nrequire_full = true\n")
                .unwrap()
                .sandbox
                .require_full
        );
        assert_eq!(c.approval["command_exec"], "auto");
        assert_eq!(c.agent.workers["codex"]["model"].as_str(), Some("gpt-5"));
    }

    #[test]
    fn the_agent_section_holds_the_default_backend_beside_the_worker_tables() {
        let c = ProjectConfig::parse(
            "[agent]\ndefault_backend = \"codex\"\n[agent.codex]\nmodel = \"gpt-5\"\n",
        )
        .unwrap();
        assert_eq!(c.agent.default_backend.as_deref(), Some("codex"));
        assert_eq!(c.agent.workers.keys().collect::<Vec<_>>(), ["codex"]);
        // A misspelt key of `[agent]` is no worker table: an error, not silently ignored.
        let e = ProjectConfig::parse("[agent]\ndefault_backed = \"codex\"\n").unwrap_err();
        assert!(e.contains("unknown key `default_backed` in [agent]"), "{e}");
        let e = ProjectConfig::parse("[agent]\ndefault_backend = 1\n").unwrap_err();
        assert!(e.contains("default_backend must be a string"), "{e}");
    }

    #[test]
    fn limits_override_the_default_reply_caps() {
        let c = ProjectConfig::parse("[limits]\nmax_reply_bytes = 1024\n").unwrap();
        let limits = c.limits.reply_limits();
        assert_eq!(limits.max_reply_bytes, 1024);
        assert_eq!(
            limits.max_tool_call_bytes,
            intendant_providers::ReplyLimits::default().max_tool_call_bytes
        );
        assert!(ProjectConfig::parse("[limits]\nmax_reply = 1\n").is_err());
    }

    #[test]
    fn allow_read_needs_trust_and_deny_read_does_not() {
        let c = ProjectConfig::parse("[sandbox]\ndeny_read = [\"secrets\"]\n").unwrap();
        assert_eq!(c.sandbox.deny_read, [PathBuf::from("secrets")]);
        assert!(c.security_settings().is_empty(), "deny_read only tightens");
        let c = ProjectConfig::parse("[sandbox]\nallow_read = [\"~/.aws\"]\n").unwrap();
        assert_eq!(
            c.security_settings(),
            [r#"[sandbox] allow_read = ["~/.aws"]"#]
        );
    }

    #[test]
    fn the_network_is_a_mode_or_a_table_and_what_relaxes_needs_trust() {
        use intendant_protocol::network::NetworkMode;
        let c = ProjectConfig::parse("[sandbox]\nnetwork = \"none\"\n").unwrap();
        assert_eq!(c.sandbox.network.mode, Some(NetworkMode::None));
        assert!(c.security_settings().is_empty());
        let c = ProjectConfig::parse(
            "[sandbox.network]\nmode = \"proxy\"\ndeny = [\"x.example\"]\ndefault_allow = false\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.network.mode, Some(NetworkMode::Proxy));
        assert_eq!(c.sandbox.network.egress.deny, ["x.example"]);
        assert!(c.security_settings().is_empty(), "deny only tightens");
        let c = ProjectConfig::parse(
            "[sandbox.network]\nallow = [\"pkg.internal\"]\nallow_addresses = [\"10.20.0.0/16\"]\nhosts = { \"pkg.internal\" = \"10.20.0.5\" }\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.network.mode, None);
        assert_eq!(
            c.security_settings().len(),
            3,
            "{:?}",
            c.security_settings()
        );
        for (bad, want) in [
            ("[sandbox]\nnetwork = \"open\"\n", "proxy, none, host"),
            ("[sandbox]\nnetwork = 1\n", "must be a string"),
            ("[sandbox.network]\nallowed = []\n", "allowed"),
            ("[sandbox.network]\nmode = true\n", "must be a string"),
        ] {
            let e = ProjectConfig::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn the_tool_mode_is_native_or_text() {
        let c = ProjectConfig::parse("[provider]\ntool_mode = \"text\"\n").unwrap();
        assert_eq!(
            c.provider.tool_mode,
            Some(intendant_providers::ToolMode::Text)
        );
        assert_eq!(ProjectConfig::parse("").unwrap().provider.tool_mode, None);
        let e = ProjectConfig::parse("[provider]\ntool_mode = \"json\"\n").unwrap_err();
        assert!(e.contains("native") && e.contains("text"), "{e}");
        assert!(ProjectConfig::parse("[provider]\nmode = \"text\"\n").is_err());
    }

    #[test]
    fn the_checkpoints_section_has_a_documented_default_and_refuses_unknown_keys() {
        let empty = ProjectConfig::parse("").unwrap();
        assert!(empty.checkpoints.enabled());
        assert_eq!(
            empty.checkpoints.max_file_bytes(),
            crate::checkpoint::DEFAULT_MAX_FILE_MIB * 1024 * 1024
        );
        let set =
            ProjectConfig::parse("[checkpoints]\nenabled = false\nmax_file_mib = 2\n").unwrap();
        assert!(!set.checkpoints.enabled());
        assert_eq!(set.checkpoints.max_file_bytes(), 2 * 1024 * 1024);
        assert!(ProjectConfig::parse("[checkpoints]\nmax_file = 2\n").is_err());
        assert_eq!(
            empty.checkpoints.retention(),
            Some(std::time::Duration::from_secs(30 * 86_400))
        );
        let kept = ProjectConfig::parse("[checkpoints]\nretention_days = 0\n").unwrap();
        assert_eq!(kept.checkpoints.retention(), None);
        assert!(ProjectConfig::parse("[checkpoints]\nretention_days = -1\n").is_err());
        assert_eq!(
            set.security_settings(),
            [
                "[checkpoints] enabled = false",
                "[checkpoints] max_file_mib = 2 (under the default 16)"
            ],
            "turning checkpoints off or capturing less weakens the record"
        );
        assert_eq!(
            set.checkpoints.without_weakenings(),
            crate::checkpoint::CheckpointConfig::default()
        );
        // Keeping more needs no trust, and stays when untrusted.
        let more = ProjectConfig::parse(
            "[checkpoints]\nenabled = true\nmax_file_mib = 64\nretention_days = 0\n",
        )
        .unwrap();
        assert!(more.security_settings().is_empty());
        assert_eq!(more.checkpoints.without_weakenings(), more.checkpoints);
        let shorter = ProjectConfig::parse("[checkpoints]\nretention_days = 7\n").unwrap();
        assert_eq!(
            shorter.security_settings(),
            ["[checkpoints] retention_days = 7 (shorter than the default 30)"]
        );
        assert_eq!(
            shorter.checkpoints.without_weakenings().retention_days,
            None
        );
    }

    #[test]
    fn every_mcp_server_is_a_security_setting_and_unknown_keys_are_errors() {
        let c = ProjectConfig::parse(
            "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"fs\"]\n\
             [mcp_servers.remote]\nurl = \"https://mcp.example/mcp\"\n",
        )
        .unwrap();
        assert_eq!(
            c.security_settings(),
            [
                r#"[mcp_servers.files] command = "npx", args = ["-y", "fs"]"#,
                r#"[mcp_servers.remote] url = "https://mcp.example/mcp""#
            ]
        );
        let e =
            ProjectConfig::parse("[mcp_servers.files]\ncommand = \"x\"\ncommnd = 1\n").unwrap_err();
        assert!(e.contains("commnd"), "{e}");
    }

    #[test]
    fn unknown_key_is_an_error() {
        let e = ProjectConfig::parse("[sandbox]\nenable = true\n").unwrap_err();
        assert!(e.contains("enable"), "{e}");
    }

    #[test]
    fn only_loosening_settings_are_security_relevant() {
        let c = ProjectConfig::parse(
            "[sandbox]\nenabled = false\n[approval]\ncommand_exec = \"auto\"\n\
             file_write = \"deny\"\n[agent.codex]\nmodel = \"m\"\npath = \"/x/codex\"\n",
        )
        .unwrap();
        assert_eq!(
            c.security_settings(),
            [
                "[sandbox] enabled = false",
                "[approval] command_exec = \"auto\"",
                "[agent.codex] path = \"/x/codex\""
            ]
        );
        let tight = ProjectConfig::parse(
            "[sandbox]\nenabled = true\n[approval]\nnetwork = \"ask\"\n[agent.kimi]\nmodel = \"k\"\n",
        )
        .unwrap();
        assert!(tight.security_settings().is_empty());
    }

    #[test]
    fn only_the_hosts_network_needs_trust_and_unknown_modes_are_refused() {
        let host = ProjectConfig::parse("[sandbox]\nnetwork = \"host\"\n").unwrap();
        assert_eq!(host.security_settings(), ["[sandbox] network = \"host\""]);
        for tight in ["none", "proxy"] {
            let c = ProjectConfig::parse(&format!("[sandbox]\nnetwork = \"{tight}\"\n")).unwrap();
            assert!(c.security_settings().is_empty(), "{tight}");
        }
        let e = ProjectConfig::parse("[sandbox]\nnetwork = \"open\"\n").unwrap_err();
        assert!(e.contains("network") || e.contains("open"), "{e}");
    }

    #[test]
    fn an_acp_agent_command_is_security_relevant() {
        let c = ProjectConfig::parse(
            "[agent.acp.gemini]\ncommand = [\"gemini\", \"--experimental-acp\"]\nenv = []\n",
        )
        .unwrap();
        assert_eq!(
            c.security_settings(),
            ["[agent.acp.gemini] command = [\"gemini\", \"--experimental-acp\"]"]
        );
    }

    #[test]
    fn an_acp_command_line_is_found_only_exactly_as_configured() {
        let c = ProjectConfig::parse(
            "[agent.acp.gemini]\ncommand = [\"gemini\", \"--experimental-acp\"]\n",
        )
        .unwrap();
        let cmd = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            c.acp_entry_running(&cmd(&["gemini", "--experimental-acp"])),
            Some("gemini".to_owned())
        );
        for other in [&["gemini"][..], &["sh", "-c", "id"], &[]] {
            assert_eq!(c.acp_entry_running(&cmd(other)), None, "{other:?}");
        }
        assert_eq!(
            ProjectConfig::default().acp_entry_running(&cmd(&["gemini"])),
            None
        );
    }

    #[test]
    fn every_hook_is_a_security_setting_and_a_bad_one_an_error() {
        let c = ProjectConfig::parse(
            "[[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = [\"./guard.py\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.security_settings(),
            ["[[hooks.pre_tool_use]] command = [\"./guard.py\"], matcher = \"exec_command\""]
        );
        let e = ProjectConfig::parse("[[hooks.stop]]\ncommand = [\"x\"]\ntimeout_sec = 0\n")
            .unwrap_err();
        assert!(e.contains("timeout_sec = 0 is out of range"), "{e}");
        assert!(ProjectConfig::parse("[hooks]\npre_tool = []\n").is_err());
    }

    #[test]
    fn missing_file_is_default() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            ProjectConfig::load(dir.path()).unwrap(),
            ProjectConfig::default()
        );
    }
}

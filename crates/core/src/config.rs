//! `intendant.toml`: the project configuration, parsed once into plain structs.
//!
//! Every section is optional; an unknown key is an error so a typo never silently does nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

/// File name of the project configuration, looked up in the project root.
pub const CONFIG_FILE_NAME: &str = "intendant.toml";

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
    /// `[agent.<name>]`: per external CLI settings, kept as raw tables; `intendant-agents`
    /// reads each one (`AgentConfig::from_table`), refusing unknown keys.
    #[serde(default)]
    pub agent: BTreeMap<String, toml::Table>,
    /// `[limits]`: bounds of everything one session runs.
    #[serde(default)]
    pub limits: crate::containment::LimitsConfig,
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
        let path = project_root.join(CONFIG_FILE_NAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => ProjectConfig::parse(&text).map_err(|message| ConfigError::Parse {
                path: path.clone(),
                message,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ProjectConfig::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Parses configuration text; the error names the problem and its place.
    pub fn parse(text: &str) -> Result<ProjectConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
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
        assert_eq!(c.approval["command_exec"], "auto");
        assert_eq!(c.agent["codex"]["model"].as_str(), Some("gpt-5"));
    }

    #[test]
    fn unknown_key_is_an_error() {
        let e = ProjectConfig::parse("[sandbox]\nenable = true\n").unwrap_err();
        assert!(e.contains("enable"), "{e}");
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

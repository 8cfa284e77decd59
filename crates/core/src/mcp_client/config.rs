//! `[mcp_servers.NAME]`: the MCP servers a native session connects to, in the shape of Codex's
//! `config.toml` (a block copied from `~/.codex/config.toml` works unchanged), validated once
//! into [`McpServer`]s.
//!
//! Two places: the project's `intendant.toml` (a security setting: it runs a program or sends a
//! token, so it counts only once a human trusted the file, like every other one) and the user's
//! `~/.config/intendant/mcp_servers.toml` (outside every write root and hidden from commands).
//! A project entry replaces a user entry of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

/// The user's file of MCP servers, in the configuration directory (`~/.config/intendant`).
pub const USER_FILE: &str = "mcp_servers.toml";
/// How long a server may take to start and list its tools when it says nothing.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take when the server's entry says nothing.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a stdio server is kept without a call when its entry says nothing: then it is let
/// go, and the next call starts it again (`idle_exit_sec`; 0 keeps it for the session's life).
pub const DEFAULT_IDLE_EXIT: Duration = Duration::from_secs(300);
/// Longest server name: `mcp__<server>_<tool>` must fit the providers' 64-character tool names.
pub const MAX_NAME_CHARS: usize = 32;

/// One `[mcp_servers.NAME]` table as written. Unknown keys are errors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// stdio: the program to start.
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: variables set for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: names of the controller's variables passed through (a key only when named here).
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// stdio: its working directory (relative: the project's; default the project root).
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint.
    pub url: Option<String>,
    /// Streamable HTTP: the variable holding the bearer token.
    pub bearer_token_env_var: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default)]
    pub http_headers: BTreeMap<String, String>,
    /// Streamable HTTP: headers whose values come from the named variables.
    #[serde(default)]
    pub env_http_headers: BTreeMap<String, String>,
    /// Only these tools are offered (absent: all).
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// Seconds the server may take to start and list its tools.
    pub startup_timeout_sec: Option<f64>,
    /// Seconds one tool call may take.
    pub tool_timeout_sec: Option<f64>,
    /// `false`: configured but not started.
    pub enabled: Option<bool>,
    /// `false`: a stdio server runs without the sandbox and on the host's network (the
    /// environment scrub and the session's cgroup stay). Needs trust like every project entry.
    pub sandbox: Option<bool>,
    /// stdio: seconds without a call after which the server is let go (its process ended, its
    /// tools still offered; the next call starts it again); 0 keeps it.
    pub idle_exit_sec: Option<f64>,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A program started for the session, spoken to over its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it.
        env: BTreeMap<String, String>,
        /// Names of the controller's variables passed through.
        env_vars: Vec<String>,
        /// Its working directory, as written (resolved against the project root).
        cwd: Option<PathBuf>,
        /// Whether it runs inside the session's sandbox.
        sandbox: bool,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// The variable holding the bearer token.
        bearer_token_env_var: Option<String>,
        /// Fixed headers.
        headers: BTreeMap<String, String>,
        /// Headers from variables (header to variable name).
        env_headers: BTreeMap<String, String>,
    },
}

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The project's `intendant.toml`.
    Project,
    /// The user's `mcp_servers.toml`.
    User,
}

impl Source {
    /// How the source is named to the user.
    pub fn name(self) -> &'static str {
        match self {
            Source::Project => "project",
            Source::User => "user",
        }
    }
}

/// One validated server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    /// Its name (the `NAME` of `[mcp_servers.NAME]`).
    pub name: String,
    /// Where it was configured.
    pub source: Source,
    /// How it is reached.
    pub transport: Transport,
    /// Only these tools (absent: all).
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools.
    pub disabled_tools: Vec<String>,
    /// Start-up bound.
    pub startup_timeout: Duration,
    /// Bound of one call.
    pub tool_timeout: Duration,
    /// How long it is kept without a call before it is let go (`None`: for the session's life;
    /// always `None` for an HTTP server, which holds nothing here).
    pub idle_exit: Option<Duration>,
    /// Whether it is started.
    pub enabled: bool,
}

impl McpServer {
    /// Whether the tool `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        let enabled = self
            .enabled_tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == name));
        enabled && !self.disabled_tools.iter().any(|t| t == name)
    }

    /// The setting as the trust review lists it.
    pub fn setting(&self) -> String {
        match &self.transport {
            Transport::Stdio {
                command,
                args,
                sandbox,
                ..
            } => {
                let unsandboxed = if *sandbox { "" } else { ", sandbox = false" };
                format!(
                    "[mcp_servers.{}] command = {command:?}, args = {args:?}{unsandboxed}",
                    self.name
                )
            }
            Transport::Http { url, .. } => format!("[mcp_servers.{}] url = {url:?}", self.name),
        }
    }
}

/// Why an entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum McpConfigError {
    /// The entry is not usable.
    #[error("[mcp_servers.{name}] ({source_name}): {message}")]
    Invalid {
        /// The server's name.
        name: String,
        /// Where it was configured.
        source_name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The user's file cannot be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Whether `name` is a server name: letters, digits, `-` and `_`, at most [`MAX_NAME_CHARS`].
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether `name` is a plain variable name.
fn valid_var(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A timeout in seconds as written: positive and finite.
fn seconds(value: Option<f64>, default: Duration, key: &str) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(format!(
            "{key} = {s} is not a number of seconds between 0 and 86400"
        )),
    }
}

impl McpServerEntry {
    /// Validates the entry `name` from `source`.
    // One piece: the checks of one table, in the order a user reads the errors (name, the
    // transport's keys, the variables, the timeouts), each a single line.
    pub fn validate(&self, name: &str, source: Source) -> Result<McpServer, McpConfigError> {
        let invalid = |message: String| McpConfigError::Invalid {
            name: name.to_owned(),
            source_name: source.name(),
            message,
        };
        if !valid_name(name) {
            return Err(invalid(format!(
                "a server name is letters, digits, `-` and `_`, at most {MAX_NAME_CHARS} characters"
            )));
        }
        let stdio_only = [
            ("args", !self.args.is_empty()),
            ("env", !self.env.is_empty()),
            ("env_vars", !self.env_vars.is_empty()),
            ("cwd", self.cwd.is_some()),
            ("sandbox", self.sandbox.is_some()),
            ("idle_exit_sec", self.idle_exit_sec.is_some()),
        ];
        let http_only = [
            ("bearer_token_env_var", self.bearer_token_env_var.is_some()),
            ("http_headers", !self.http_headers.is_empty()),
            ("env_http_headers", !self.env_http_headers.is_empty()),
        ];
        let transport = match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "set either `command` (stdio) or `url` (streamable HTTP), not both".into(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "set `command` (a stdio server) or `url` (a streamable HTTP server)".into(),
                ));
            }
            (Some(command), None) => {
                if let Some((key, _)) = http_only.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!("`{key}` is for `url` servers only")));
                }
                if command.trim().is_empty() {
                    return Err(invalid("`command` is empty".into()));
                }
                let vars = self.env.keys().chain(&self.env_vars);
                if let Some(bad) = vars.clone().find(|v| !valid_var(v)) {
                    return Err(invalid(format!("{bad:?} is not a variable name")));
                }
                if let Some(bad) = vars
                    .clone()
                    .find(|v| intendant_protocol::env_policy::is_control(v))
                {
                    return Err(invalid(format!(
                        "{bad:?} is one of Intendant's own variables, which are never given to a server"
                    )));
                }
                Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    env_vars: self.env_vars.clone(),
                    cwd: self.cwd.clone(),
                    sandbox: self.sandbox.unwrap_or(true),
                }
            }
            (None, Some(url)) => {
                if let Some((key, _)) = stdio_only.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!("`{key}` is for `command` servers only")));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(format!("url {url:?} is not an http(s) URL")));
                }
                let named = self
                    .bearer_token_env_var
                    .iter()
                    .chain(self.env_http_headers.values());
                if let Some(bad) = named.clone().find(|v| !valid_var(v)) {
                    return Err(invalid(format!("{bad:?} is not a variable name")));
                }
                Transport::Http {
                    url: url.clone(),
                    bearer_token_env_var: self.bearer_token_env_var.clone(),
                    headers: self.http_headers.clone(),
                    env_headers: self.env_http_headers.clone(),
                }
            }
        };
        let idle_exit = match (&transport, self.idle_exit_sec) {
            (Transport::Http { .. }, _) => None,
            (Transport::Stdio { .. }, Some(0.0)) => None,
            (Transport::Stdio { .. }, given) => {
                Some(seconds(given, DEFAULT_IDLE_EXIT, "idle_exit_sec").map_err(invalid)?)
            }
        };
        Ok(McpServer {
            name: name.to_owned(),
            source,
            transport,
            enabled_tools: self.enabled_tools.clone(),
            disabled_tools: self.disabled_tools.clone(),
            startup_timeout: seconds(
                self.startup_timeout_sec,
                DEFAULT_STARTUP_TIMEOUT,
                "startup_timeout_sec",
            )
            .map_err(invalid)?,
            tool_timeout: seconds(
                self.tool_timeout_sec,
                DEFAULT_TOOL_TIMEOUT,
                "tool_timeout_sec",
            )
            .map_err(invalid)?,
            idle_exit,
            enabled: self.enabled.unwrap_or(true),
        })
    }
}

/// The user's file: `[mcp_servers.NAME]` tables and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerEntry>,
}

/// The entries of the user's file in `config_dir` (none when it is missing).
pub fn user_entries(
    config_dir: Option<&Path>,
) -> Result<BTreeMap<String, McpServerEntry>, McpConfigError> {
    let Some(path) = config_dir.map(|d| d.join(USER_FILE)) else {
        return Ok(BTreeMap::new());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => {
            return Err(McpConfigError::File {
                path,
                message: e.to_string(),
            });
        }
    };
    toml::from_str::<UserFile>(&text)
        .map(|f| f.mcp_servers)
        .map_err(|e| McpConfigError::File {
            path,
            message: e.to_string(),
        })
}

/// Every configured server, validated: the user's entries, then the project's (which replace a
/// user entry of the same name), in name order. The project's entries must already be trusted
/// (the session's trust check saw to that).
pub fn servers(
    project: &BTreeMap<String, McpServerEntry>,
    user: &BTreeMap<String, McpServerEntry>,
) -> Result<Vec<McpServer>, McpConfigError> {
    let mut all: BTreeMap<&str, McpServer> = BTreeMap::new();
    for (name, entry) in user {
        all.insert(name, entry.validate(name, Source::User)?);
    }
    for (name, entry) in project {
        all.insert(name, entry.validate(name, Source::Project)?);
    }
    Ok(all.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> Result<McpServer, String> {
        let entry: McpServerEntry = toml::from_str(text).map_err(|e| e.to_string())?;
        entry
            .validate("files", Source::Project)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_codex_stdio_block_validates() {
        let server = entry(
            r#"command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { LOG = "1" }
env_vars = ["GITHUB_TOKEN"]
startup_timeout_sec = 20
tool_timeout_sec = 60.5
enabled_tools = ["read_file"]
"#,
        )
        .unwrap();
        assert_eq!(server.startup_timeout, Duration::from_secs(20));
        assert_eq!(server.tool_timeout, Duration::from_secs_f64(60.5));
        assert_eq!(server.idle_exit, Some(DEFAULT_IDLE_EXIT));
        assert_eq!(
            entry("command = \"a\"\nidle_exit_sec = 0")
                .unwrap()
                .idle_exit,
            None,
            "0 keeps it"
        );
        assert_eq!(
            entry("command = \"a\"\nidle_exit_sec = 12")
                .unwrap()
                .idle_exit,
            Some(Duration::from_secs(12))
        );
        assert!(server.offers("read_file") && !server.offers("write_file"));
        assert!(matches!(
            server.transport,
            Transport::Stdio { sandbox: true, .. }
        ));
        assert_eq!(
            server.setting(),
            r#"[mcp_servers.files] command = "npx", args = ["-y", "@modelcontextprotocol/server-filesystem", "."]"#
        );
    }

    #[test]
    fn a_codex_http_block_validates() {
        let server = entry(
            r#"url = "http://127.0.0.1:7878/mcp"
bearer_token_env_var = "INTENDANT_WEB_TOKEN"
http_headers = { "X-Trace" = "1" }
disabled_tools = ["stop"]
"#,
        )
        .unwrap();
        assert!(!server.offers("stop") && server.offers("run_task"));
        assert!(matches!(server.transport, Transport::Http { .. }));
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        for (text, says) in [
            ("", "set `command`"),
            ("command = \"a\"\nurl = \"http://x\"", "not both"),
            (
                "command = \"a\"\nbearer_token_env_var = \"T\"",
                "for `url` servers only",
            ),
            (
                "url = \"http://x\"\nargs = [\"a\"]",
                "for `command` servers only",
            ),
            (
                "url = \"http://x\"\nsandbox = false",
                "for `command` servers only",
            ),
            ("url = \"file:///etc/passwd\"", "not an http(s) URL"),
            (
                "command = \"a\"\nenv = { \"A=B\" = \"1\" }",
                "not a variable name",
            ),
            (
                "command = \"a\"\nenv = { INTENDANT_SANDBOX_WRITE_PATHS = \"/\" }",
                "Intendant's own variables",
            ),
            (
                "command = \"a\"\nenv_vars = [\"intendant_log_dir\"]",
                "Intendant's own",
            ),
            (
                "command = \"a\"\nstartup_timeout_sec = 0",
                "startup_timeout_sec",
            ),
            ("command = \"a\"\ntool_timeout_sec = -1", "tool_timeout_sec"),
            ("command = \"a\"\nidle_exit_sec = -1", "idle_exit_sec"),
            ("command = \" \"", "`command` is empty"),
            ("command = \"a\"\nunknown_key = 1", "unknown field"),
        ] {
            let e = entry(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let ok: McpServerEntry = toml::from_str("command = \"a\"").unwrap();
        for name in ["", "a.b", "a b", &"x".repeat(MAX_NAME_CHARS + 1)] {
            assert!(ok.validate(name, Source::User).is_err(), "{name:?}");
        }
    }

    #[test]
    fn a_project_entry_replaces_the_users_and_the_user_file_refuses_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(USER_FILE),
            "[mcp_servers.files]\ncommand = \"user-files\"\n[mcp_servers.git]\ncommand = \"git-mcp\"\n",
        )
        .unwrap();
        let user = user_entries(Some(dir.path())).unwrap();
        let project: BTreeMap<String, McpServerEntry> =
            toml::from_str("[files]\ncommand = \"project-files\"\n").unwrap();
        let all = servers(&project, &user).unwrap();
        let names: Vec<(&str, Source)> = all.iter().map(|s| (s.name.as_str(), s.source)).collect();
        assert_eq!(names, [("files", Source::Project), ("git", Source::User)]);
        std::fs::write(dir.path().join(USER_FILE), "[sandbox]\nenabled = false\n").unwrap();
        let e = user_entries(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains(USER_FILE), "{e}");
        assert!(
            user_entries(Some(&dir.path().join("none")))
                .unwrap()
                .is_empty()
        );
    }
}

//! The control plane's persisted settings: the `[daemon]` table of the state root's
//! `intendant.toml` (`default_autonomy`, `default_backend`, `max_running`, and the owner's
//! ceiling `max_autonomy`), loaded when the daemon starts and rewritten whenever the supervisor
//! (their one writer) changes them; and the `[mcp]` table ([`McpPolicy`]), which only the owner
//! writes.
//!
//! The design decision to know: the file is never written in place. A new copy is written to a
//! temporary file in the same directory, flushed to disk, and renamed over the old one, so a
//! crash at any moment leaves the old file or the new one, never half of either. Other keys and
//! tables of the file (`[daemon] web`, `[daemon] max_autonomy`, `[mcp]`, ...) are kept: no
//! request can change a ceiling. Every autonomy a start or a change asks for passes
//! [`within_ceiling`].

use std::path::{Path, PathBuf};

use intendant_core::containment::SessionsBound;
use intendant_core::record_dir::RecordDir;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Backend, Settings, SettingsChange};
use thiserror::Error;

/// The state root's configuration file.
pub const SETTINGS_FILE: &str = "intendant.toml";
/// Its table of daemon settings.
const DAEMON_TABLE: &str = "daemon";
/// Its table of the MCP server's settings.
const MCP_TABLE: &str = "mcp";
/// Its table of the fleet membership (read by `intendant-fleet`, which checks its keys).
const FLEET_TABLE: &str = "fleet";

/// Why the settings could not be read or written.
#[derive(Debug, Error)]
pub enum SettingsError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a `[daemon]` value is not a valid setting.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file has a table or key nothing reads (a misspelling, or a table of a feature this
    /// version does not have).
    #[error("{path}: {message}")]
    Unknown {
        /// The file.
        path: PathBuf,
        /// Which table or key.
        message: String,
    },
}

/// The default cap on running sessions: a few per core (sessions mostly wait on models).
pub fn default_max_running() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    u32::try_from(cores.saturating_mul(4)).unwrap_or(u32::MAX)
}

/// The settings when the file says nothing: autonomy `medium` (at most `full`), the native
/// backend, a few running sessions per core.
pub fn default_settings() -> Settings {
    Settings {
        default_autonomy: AutonomyLevel::Medium,
        default_backend: Backend::Native,
        max_running: default_max_running(),
        max_autonomy: AutonomyLevel::Full,
    }
}

/// The tables the state root's file may have; any other is refused (a misspelled `[daemn]`
/// would otherwise be ignored without a word).
const KNOWN_TABLES: [&str; 3] = [DAEMON_TABLE, MCP_TABLE, FLEET_TABLE];
/// The keys `[daemon]` may have (`[mcp]`'s are [`McpPolicy`]'s fields).
const DAEMON_KEYS: [&str; 18] = [
    "default_autonomy",
    "default_backend",
    "max_running",
    "max_autonomy",
    "idle_timeout",
    "web",
    "max_clients",
    "max_streams_per_client",
    "client_buffer_kib",
    "handshake_timeout_secs",
    "mcp_sessions",
    "mcp_idle_secs",
    "max_web_connections",
    "max_web_streams",
    "session_retention_days",
    "sessions_pids_max",
    "sessions_memory_max_mib",
    "sessions_cpu_max_percent",
];

/// The daemon's limits on its local clients (`[daemon]` of the state root's file): whatever
/// clients do, they hold at most these, so the daemon keeps answering and its memory stays
/// bounded (`docs/daemon.md`, "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Control-socket connections past the hello at once (`max_clients`, default 256); one
    /// more is refused with `busy`.
    pub max_clients: usize,
    /// Open streams (subscriptions) per connection (`max_streams_per_client`, default 64).
    pub max_streams_per_client: usize,
    /// Bytes of unsent lines the daemon keeps for one connection (`client_buffer_kib`,
    /// default 1024 KiB); a stream that does not fit lags.
    pub client_buffer: usize,
    /// How long a new connection may take to send its hello (`handshake_timeout_secs`,
    /// default 10).
    pub handshake_timeout: std::time::Duration,
    /// MCP-over-HTTP sessions open at once for the dashboard's token (`mcp_sessions`, default
    /// 64); one more `initialize` is refused with `busy`.
    pub mcp_sessions: usize,
    /// An MCP-over-HTTP session with no request for this long is ended (`mcp_idle_secs`,
    /// default 600).
    pub mcp_idle: std::time::Duration,
    /// Dashboard (and `/mcp`) TCP connections at once (`max_web_connections`, default 128).
    pub max_web_connections: usize,
    /// Live event streams (`GET /api/events`) at once (`max_web_streams`, default 32).
    pub max_web_streams: usize,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            max_clients: 256,
            max_streams_per_client: 64,
            client_buffer: 1024 * 1024,
            handshake_timeout: std::time::Duration::from_secs(10),
            mcp_sessions: 64,
            mcp_idle: std::time::Duration::from_secs(600),
            max_web_connections: 128,
            max_web_streams: 32,
        }
    }
}

/// The client limits of the state root `home` (defaults for what the file does not set); like
/// [`load`], refuses a file with an unknown table or key.
pub fn client_limits(home: &Path) -> Result<ClientLimits, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    check_known(&path, &table)?;
    let mut limits = ClientLimits::default();
    let Some(daemon) = table.get(DAEMON_TABLE).and_then(toml::Value::as_table) else {
        return Ok(limits);
    };
    let count = |key: &str, max: u64| count_of(&path, daemon, key, max);
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    if let Some(n) = count("max_clients", 1 << 20)? {
        limits.max_clients = size(n);
    }
    if let Some(n) = count("max_streams_per_client", 1 << 16)? {
        limits.max_streams_per_client = size(n);
    }
    if let Some(n) = count("client_buffer_kib", 1 << 20)? {
        limits.client_buffer = size(n).saturating_mul(1024);
    }
    if let Some(n) = count("handshake_timeout_secs", 3600)? {
        limits.handshake_timeout = std::time::Duration::from_secs(n);
    }
    if let Some(n) = count("mcp_sessions", 1 << 16)? {
        limits.mcp_sessions = size(n);
    }
    if let Some(n) = count("mcp_idle_secs", 7 * 24 * 3600)? {
        limits.mcp_idle = std::time::Duration::from_secs(n);
    }
    if let Some(n) = count("max_web_connections", 1 << 20)? {
        limits.max_web_connections = size(n);
    }
    if let Some(n) = count("max_web_streams", 1 << 16)? {
        limits.max_web_streams = size(n);
    }
    Ok(limits)
}

/// `[daemon] KEY` of the file at `path` (its `[daemon]` table `daemon`): a whole number from 1 to
/// `max`, if set.
fn count_of(
    path: &Path,
    daemon: &toml::Table,
    key: &str,
    max: u64,
) -> Result<Option<u64>, SettingsError> {
    let Some(v) = daemon.get(key) else {
        return Ok(None);
    };
    v.as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| (1..=max).contains(n))
        .map(Some)
        .ok_or_else(|| SettingsError::Invalid {
            path: path.to_path_buf(),
            message: format!("[{DAEMON_TABLE}] {key} = {v} is not a whole number from 1 to {max}"),
        })
}

/// `[daemon] sessions_pids_max`, `sessions_memory_max_mib` and `sessions_cpu_max_percent` of
/// the state root `home`: the bounds of all the daemon's sessions together (`docs/daemon.md`,
/// "The sessions together").
pub fn sessions_bound(home: &Path) -> Result<SessionsBound, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    let Some(daemon) = table.get(DAEMON_TABLE).and_then(toml::Value::as_table) else {
        return Ok(SessionsBound::default());
    };
    Ok(SessionsBound {
        pids_max: count_of(&path, daemon, "sessions_pids_max", 1 << 32)?,
        memory_max_mib: count_of(&path, daemon, "sessions_memory_max_mib", 1 << 32)?,
        // At most a million percent: ten thousand CPUs' worth.
        cpu_max_percent: count_of(&path, daemon, "sessions_cpu_max_percent", 1_000_000)?
            .and_then(|n| u32::try_from(n).ok()),
    })
}

/// Refuses a table or `[daemon]` key of the state root's file that nothing reads, naming it
/// (`[mcp]`'s keys are checked where it is read, [`mcp_policy`], and by [`load`]).
fn check_known(path: &Path, table: &toml::Table) -> Result<(), SettingsError> {
    let unknown = |message: String| SettingsError::Unknown {
        path: path.to_path_buf(),
        message,
    };
    for (name, value) in table {
        if !KNOWN_TABLES.contains(&name.as_str()) {
            return Err(unknown(match value {
                toml::Value::Table(_) => format!(
                    "unknown table [{name}] (this file has [{DAEMON_TABLE}], [{MCP_TABLE}] and \
                     [{FLEET_TABLE}])"
                ),
                _ => format!(
                    "unknown key {name} outside any table (this file has [{DAEMON_TABLE}], \
                     [{MCP_TABLE}] and [{FLEET_TABLE}])"
                ),
            }));
        }
    }
    if let Some(daemon) = table.get(DAEMON_TABLE).and_then(toml::Value::as_table)
        && let Some(key) = daemon.keys().find(|k| !DAEMON_KEYS.contains(&k.as_str()))
    {
        return Err(unknown(format!(
            "unknown key [{DAEMON_TABLE}] {key} (known: {})",
            DAEMON_KEYS.join(", ")
        )));
    }
    if let Some(mcp) = table.get(MCP_TABLE) {
        mcp.clone()
            .try_into::<McpPolicy>()
            .map_err(|e: toml::de::Error| unknown(format!("[{MCP_TABLE}]: {}", e.message())))?;
    }
    Ok(())
}

/// `[mcp]` of the state root's `intendant.toml`: what a model driving Intendant over MCP may do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpPolicy {
    /// The most autonomy a session started or changed over MCP may have (default `high`); the
    /// daemon's `[daemon] max_autonomy` caps it too.
    pub max_autonomy: AutonomyLevel,
    /// Whether the MCP tools that answer approvals and change autonomy (`resolve_approval`,
    /// `set_autonomy`) exist: a model answering what was meant for a human. Off by default.
    pub allow_model_approvals: bool,
    /// Project directories `run_task` and `delegate` may use besides the MCP server's own
    /// working directory (absolute; a directory inside one counts too).
    pub projects: Vec<PathBuf>,
}

impl Default for McpPolicy {
    fn default() -> McpPolicy {
        McpPolicy {
            max_autonomy: AutonomyLevel::High,
            allow_model_approvals: false,
            projects: Vec::new(),
        }
    }
}

/// Refuses `level` above `ceiling` (named by its key, e.g. `[daemon] max_autonomy`): the one
/// check every start and autonomy change passes, whatever surface asked.
pub fn within_ceiling(
    level: AutonomyLevel,
    ceiling: AutonomyLevel,
    key: &str,
) -> Result<(), String> {
    if level <= ceiling {
        return Ok(());
    }
    Err(format!(
        "autonomy {level} is above the ceiling {key} = \"{ceiling}\" that the owner set in \
         $INTENDANT_HOME/{SETTINGS_FILE}"
    ))
}

/// `change` applied to `settings`; a bad value is an error for the user. (The supervisor, the
/// one writer, holds a new default autonomy to the ceiling first.)
pub fn apply(settings: &Settings, change: &SettingsChange) -> Result<Settings, String> {
    let mut next = settings.clone();
    if let Some(level) = change.default_autonomy {
        next.default_autonomy = level;
    }
    if let Some(backend) = &change.default_backend {
        if !backend.command().is_empty() {
            return Err(
                "the default backend is a name: give an ACP agent's command line an \
                 [agent.acp.NAME] entry and name that"
                    .to_owned(),
            );
        }
        next.default_backend = backend.clone();
    }
    if let Some(max) = change.max_running {
        if max == 0 {
            return Err("max_running must be at least 1".to_owned());
        }
        next.max_running = max;
    }
    Ok(next)
}

/// The state root's file read whole: what [`load_checked`] gives.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The `[daemon]` settings.
    pub settings: Settings,
    /// The limits on clients.
    pub limits: ClientLimits,
    /// `[daemon] idle_timeout`.
    pub idle_timeout: std::time::Duration,
    /// `[daemon] sessions_pids_max` and `sessions_memory_max_mib`.
    pub sessions: SessionsBound,
}

/// The state root's file read whole, as `serve` reads it at start and a reload again: the
/// `[daemon]` settings, client limits, idle timeout and the sessions' bounds, with `[mcp]`, the
/// retention and whether `max_running` fits the descriptor limit checked too; the first thing
/// wrong with it.
pub fn load_checked(home: &Path) -> Result<Checked, SettingsError> {
    let settings = load(home)?;
    crate::descriptors::max_running_fits(settings.max_running).map_err(|message| {
        let set = read_table(&home.join(SETTINGS_FILE))
            .ok()
            .and_then(|t| t.get(DAEMON_TABLE)?.get("max_running").cloned())
            .is_some();
        let default = if set {
            ""
        } else {
            " (max_running is the default: set a smaller one in the file)"
        };
        SettingsError::Invalid {
            path: home.join(SETTINGS_FILE),
            message: format!("[{DAEMON_TABLE}] {message}{default}"),
        }
    })?;
    mcp_policy(home)?;
    let idle_timeout = idle_timeout(home)?;
    session_retention(home)?;
    Ok(Checked {
        settings,
        limits: client_limits(home)?,
        idle_timeout,
        sessions: sessions_bound(home)?,
    })
}

/// The settings of the state root `home` (defaults for what the file does not set).
pub fn load(home: &Path) -> Result<Settings, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    check_known(&path, &table)?;
    let mut settings = default_settings();
    let Some(daemon) = table.get(DAEMON_TABLE) else {
        return Ok(settings);
    };
    let invalid = |message: String| SettingsError::Invalid {
        path: path.clone(),
        message,
    };
    let daemon = daemon
        .as_table()
        .ok_or_else(|| invalid(format!("[{DAEMON_TABLE}] must be a table")))?;
    if let Some(v) = daemon.get("default_autonomy") {
        settings.default_autonomy = v.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
            invalid(format!(
                "[daemon] default_autonomy = {v} is not low, medium, high or full"
            ))
        })?;
    }
    if let Some(v) = daemon.get("default_backend") {
        settings.default_backend = match v.as_str() {
            Some(name) if !name.trim().is_empty() => Backend::named(name),
            Some(_) | None => {
                return Err(invalid(format!(
                    "[daemon] default_backend = {v} is not \"native\" or an agent name"
                )));
            }
        };
    }
    if let Some(v) = daemon.get("max_running") {
        settings.max_running = v
            .as_integer()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| invalid(format!("[daemon] max_running = {v} is not a count >= 1")))?;
    }
    if let Some(v) = daemon.get("max_autonomy") {
        settings.max_autonomy = v.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
            invalid(format!(
                "[daemon] max_autonomy = {v} is not low, medium, high or full"
            ))
        })?;
    }
    if settings.default_autonomy > settings.max_autonomy {
        let default = if daemon.contains_key("default_autonomy") {
            ""
        } else {
            " (the default: set default_autonomy at or below max_autonomy)"
        };
        return Err(invalid(format!(
            "[daemon] default_autonomy = \"{}\"{default} is above [daemon] max_autonomy = \"{}\"",
            settings.default_autonomy, settings.max_autonomy
        )));
    }
    Ok(settings)
}

/// `[mcp]` of the state root `home` (defaults for what the file does not set).
pub fn mcp_policy(home: &Path) -> Result<McpPolicy, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    let Some(mcp) = table.get(MCP_TABLE) else {
        return Ok(McpPolicy::default());
    };
    let policy: McpPolicy =
        mcp.clone()
            .try_into()
            .map_err(|e: toml::de::Error| SettingsError::Invalid {
                path: path.clone(),
                message: format!("[{MCP_TABLE}]: {}", e.message()),
            })?;
    if let Some(relative) = policy.projects.iter().find(|p| !p.is_absolute()) {
        return Err(SettingsError::Invalid {
            path,
            message: format!(
                "[{MCP_TABLE}] projects: {} is not an absolute path",
                relative.display()
            ),
        });
    }
    Ok(policy)
}

/// How long a session may wait for a follow-up before it ends, by default: half an hour. It
/// ends `completed` (its last round's status) and can be resumed.
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// The longest `[daemon] idle_timeout` the file may set: a week.
const MAX_IDLE_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// `[daemon] idle_timeout` of the state root `home`, in seconds: how long a session waiting for
/// a follow-up (holding no running slot) lives before it ends cleanly; [`DEFAULT_IDLE_TIMEOUT`]
/// when unset.
pub fn idle_timeout(home: &Path) -> Result<std::time::Duration, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    let Some(v) = table.get(DAEMON_TABLE).and_then(|d| d.get("idle_timeout")) else {
        return Ok(DEFAULT_IDLE_TIMEOUT);
    };
    v.as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| (1..=MAX_IDLE_TIMEOUT_SECS).contains(n))
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| SettingsError::Invalid {
            path,
            message: format!(
                "[{DAEMON_TABLE}] idle_timeout = {v} is not a number of seconds from 1 to \
                 {MAX_IDLE_TIMEOUT_SECS}"
            ),
        })
}

/// The longest `[daemon] session_retention_days` the file may set: ten years.
const MAX_RETENTION_DAYS: u64 = 3650;

/// `[daemon] session_retention_days` of the state root `home`: how long after a session was
/// last written the daemon removes its records (at its start, then once a day); `None` when
/// unset or `0`, the default: every session is kept until a human prunes it.
pub fn session_retention(home: &Path) -> Result<Option<std::time::Duration>, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    let Some(v) = table
        .get(DAEMON_TABLE)
        .and_then(|d| d.get("session_retention_days"))
    else {
        return Ok(None);
    };
    let days = v
        .as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n <= MAX_RETENTION_DAYS)
        .ok_or_else(|| SettingsError::Invalid {
            path,
            message: format!(
                "[{DAEMON_TABLE}] session_retention_days = {v} is not a number of days from 0 \
                 (keep every session) to {MAX_RETENTION_DAYS}"
            ),
        })?;
    Ok((days > 0).then(|| std::time::Duration::from_secs(days * 86_400)))
}

/// `[daemon] web` of the state root `home` (the dashboard's address), if set.
pub fn web_address(home: &Path) -> Result<Option<String>, SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let table = read_table(&path)?;
    match table.get(DAEMON_TABLE).and_then(|d| d.get("web")) {
        None => Ok(None),
        Some(toml::Value::String(addr)) => Ok(Some(addr.clone())),
        Some(_) => Err(SettingsError::Invalid {
            path,
            message: "[daemon] web must be a string such as \"127.0.0.1:7878\"".into(),
        }),
    }
}

/// Writes `settings` into the `[daemon]` table of `home`'s file, atomically, keeping every
/// other key and table.
pub fn save(home: &Path, settings: &Settings) -> Result<(), SettingsError> {
    let path = home.join(SETTINGS_FILE);
    let mut table = read_table(&path)?;
    let daemon = table
        .entry(DAEMON_TABLE)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(daemon) = daemon.as_table_mut() else {
        return Err(SettingsError::Invalid {
            path,
            message: format!("[{DAEMON_TABLE}] must be a table"),
        });
    };
    daemon.insert(
        "default_autonomy".into(),
        settings.default_autonomy.to_string().into(),
    );
    daemon.insert(
        "default_backend".into(),
        settings.default_backend.name().into(),
    );
    daemon.insert("max_running".into(), i64::from(settings.max_running).into());
    let text = toml::to_string(&table).map_err(|e| SettingsError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let io = |source| SettingsError::Io {
        path: path.clone(),
        source,
    };
    RecordDir::create_all(home)
        .and_then(|dir| dir.replace_durable(SETTINGS_FILE, text.as_bytes()))
        .map_err(io)
}

fn read_table(path: &Path) -> Result<toml::Table, SettingsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(toml::Table::new()),
        Err(source) => {
            return Err(SettingsError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    text.parse()
        .map_err(|e: toml::de::Error| SettingsError::Invalid {
            path: path.to_path_buf(),
            message: e.message().to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of filler in the crash test's file: more than its writer may write.
    const FILLER: usize = 2 << 20;

    /// Set in a child copy of this test binary: it rewrites the settings in a loop until killed.
    const WRITER_ENV: &str = "INTENDANT_TEST_SETTINGS_WRITER";

    fn settings(max_running: u32) -> Settings {
        Settings {
            default_autonomy: AutonomyLevel::High,
            default_backend: Backend::named("codex"),
            max_running,
            max_autonomy: AutonomyLevel::Full,
        }
    }

    /// A ceiling under the default level names the default as the default, and what to set.
    #[test]
    fn a_ceiling_below_the_default_level_says_the_default_is_one() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nmax_autonomy = \"low\"\n",
        )
        .unwrap();
        let err = load(home.path()).unwrap_err().to_string();
        assert!(
            err.contains("default_autonomy = \"medium\" (the default: set default_autonomy at or below max_autonomy)"),
            "{err}"
        );
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nmax_autonomy = \"low\"\ndefault_autonomy = \"high\"\n",
        )
        .unwrap();
        let err = load(home.path()).unwrap_err().to_string();
        assert!(
            err.contains("default_autonomy = \"high\" is above"),
            "{err}"
        );
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nmax_autonomy = \"low\"\ndefault_autonomy = \"low\"\n",
        )
        .unwrap();
        assert!(load(home.path()).is_ok());
    }

    #[test]
    fn settings_round_trip_and_other_keys_are_kept() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(load(home.path()).unwrap(), default_settings());
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nweb = \"127.0.0.1:7878\"\n\n[mcp]\nallow_model_approvals = true\n",
        )
        .unwrap();
        save(home.path(), &settings(3)).unwrap();
        assert_eq!(load(home.path()).unwrap(), settings(3));
        let text = std::fs::read_to_string(home.path().join(SETTINGS_FILE)).unwrap();
        assert!(text.contains("web = \"127.0.0.1:7878\""), "{text}");
        assert!(text.contains("allow_model_approvals = true"), "{text}");
        assert!(
            apply(
                &settings(3),
                &SettingsChange {
                    max_running: Some(0),
                    ..SettingsChange::default()
                }
            )
            .is_err()
        );
        // The file holds a name: an ACP command line cannot be the default.
        let acp = Backend::Agent {
            name: "acp".into(),
            command: vec!["agent".into()],
        };
        let refused = apply(
            &settings(3),
            &SettingsChange {
                default_backend: Some(acp),
                ..SettingsChange::default()
            },
        )
        .unwrap_err();
        assert!(refused.contains("[agent.acp.NAME]"), "{refused}");
    }

    #[test]
    fn the_ceiling_is_read_checked_and_never_changed_by_a_save() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nmax_autonomy = \"medium\"\n[mcp]\nallow_model_approvals = true\n",
        )
        .unwrap();
        let loaded = load(home.path()).unwrap();
        assert_eq!(loaded.max_autonomy, AutonomyLevel::Medium);
        let lowered = apply(
            &loaded,
            &SettingsChange {
                default_autonomy: Some(AutonomyLevel::Low),
                ..SettingsChange::default()
            },
        )
        .unwrap();
        save(home.path(), &lowered).unwrap();
        let text = std::fs::read_to_string(home.path().join(SETTINGS_FILE)).unwrap();
        assert!(text.contains("max_autonomy = \"medium\""), "{text}");
        assert!(text.contains("allow_model_approvals = true"), "{text}");
        assert_eq!(
            load(home.path()).unwrap().max_autonomy,
            AutonomyLevel::Medium
        );
        // A file whose default is above its own ceiling is refused, naming both.
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nmax_autonomy = \"high\"\ndefault_autonomy = \"full\"\n",
        )
        .unwrap();
        let e = load(home.path()).unwrap_err().to_string();
        assert!(e.contains("above [daemon] max_autonomy"), "{e}");
        assert!(within_ceiling(AutonomyLevel::High, AutonomyLevel::High, "k").is_ok());
        let refused = within_ceiling(
            AutonomyLevel::Full,
            AutonomyLevel::Medium,
            "[daemon] max_autonomy",
        )
        .unwrap_err();
        assert!(
            refused.contains("[daemon] max_autonomy = \"medium\""),
            "{refused}"
        );
    }

    #[test]
    fn the_mcp_policy_defaults_to_high_and_no_model_approvals() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(mcp_policy(home.path()).unwrap(), McpPolicy::default());
        assert_eq!(McpPolicy::default().max_autonomy, AutonomyLevel::High);
        assert!(!McpPolicy::default().allow_model_approvals);
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[mcp]\nmax_autonomy = \"low\"\nallow_model_approvals = true\nprojects = [\"/srv/p\"]\n",
        )
        .unwrap();
        let policy = mcp_policy(home.path()).unwrap();
        assert_eq!(policy.max_autonomy, AutonomyLevel::Low);
        assert!(policy.allow_model_approvals);
        assert_eq!(policy.projects, [PathBuf::from("/srv/p")]);
        for (text, named) in [
            (
                "[mcp]\nallow_model_approval = true\n",
                "allow_model_approval",
            ),
            ("[mcp]\nmax_autonomy = \"wild\"\n", "[mcp]"),
            ("[mcp]\nprojects = [\"rel\"]\n", "not an absolute path"),
        ] {
            std::fs::write(home.path().join(SETTINGS_FILE), text).unwrap();
            let e = mcp_policy(home.path()).unwrap_err().to_string();
            assert!(e.contains(named), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_are_named() {
        let home = tempfile::tempdir().unwrap();
        for (text, key) in [
            ("[daemon]\nmax_running = 0\n", "max_running"),
            (
                "[daemon]\ndefault_autonomy = \"wild\"\n",
                "default_autonomy",
            ),
            ("[daemon]\ndefault_backend = 7\n", "default_backend"),
            ("daemon = 1\n", "[daemon]"),
            ("[daemon\n", SETTINGS_FILE),
        ] {
            std::fs::write(home.path().join(SETTINGS_FILE), text).unwrap();
            let e = load(home.path()).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn idle_timeout_defaults_and_refuses_what_is_not_seconds() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(idle_timeout(home.path()).unwrap(), DEFAULT_IDLE_TIMEOUT);
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nidle_timeout = 90\n",
        )
        .unwrap();
        assert_eq!(
            idle_timeout(home.path()).unwrap(),
            std::time::Duration::from_secs(90)
        );
        for bad in ["0", "-5", "\"30m\"", "1.5", "604801"] {
            std::fs::write(
                home.path().join(SETTINGS_FILE),
                format!("[daemon]\nidle_timeout = {bad}\n"),
            )
            .unwrap();
            let e = idle_timeout(home.path()).unwrap_err().to_string();
            assert!(
                e.contains("idle_timeout") && e.contains("seconds"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_sessions_bounds_default_to_none_and_refuse_what_is_not_a_count() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(
            load_checked(home.path()).unwrap().sessions,
            SessionsBound::default()
        );
        std::fs::write(
            home.path().join(SETTINGS_FILE),
            "[daemon]\nsessions_pids_max = 2000\nsessions_memory_max_mib = 8192\n\
             sessions_cpu_max_percent = 150\n",
        )
        .unwrap();
        assert_eq!(
            load_checked(home.path()).unwrap().sessions,
            SessionsBound {
                pids_max: Some(2000),
                memory_max_mib: Some(8192),
                cpu_max_percent: Some(150),
            }
        );
        for (key, bad) in [
            ("sessions_pids_max", "0"),
            ("sessions_pids_max", "\"half\""),
            ("sessions_memory_max_mib", "-1"),
            ("sessions_memory_max_mib", "1.5"),
            ("sessions_cpu_max_percent", "0"),
            ("sessions_cpu_max_percent", "2000000"),
        ] {
            std::fs::write(
                home.path().join(SETTINGS_FILE),
                format!("[daemon]\n{key} = {bad}\n"),
            )
            .unwrap();
            let e = load_checked(home.path()).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("whole number"), "{bad}: {e}");
        }
    }

    /// Not a test of its own: the child side of the crash test. It may write at most 1 MiB per
    /// file, so the kernel stops it inside the write of a larger settings file (SIGXFSZ).
    #[test]
    fn settings_writer_child() {
        let Some(home) = std::env::var_os(WRITER_ENV) else {
            return;
        };
        let limit = rustix::process::Rlimit {
            current: Some(1 << 20),
            maximum: Some(1 << 20),
        };
        rustix::process::setrlimit(rustix::process::Resource::Fsize, limit).unwrap();
        let _ = save(Path::new(&home), &settings(7));
        // Reached only if the write was not stopped.
        std::process::exit(0);
    }

    #[test]
    fn a_writer_killed_mid_write_leaves_the_old_file_whole() {
        let home = tempfile::tempdir().unwrap();
        // In a key the settings keep but do not read (the strict reader refuses unknown tables).
        let filler = format!("[daemon]\nweb = \"{}\"\n", "x".repeat(FILLER));
        std::fs::write(home.path().join(SETTINGS_FILE), filler).unwrap();
        save(home.path(), &settings(1)).unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "control_plane::tests::settings_writer_child"])
            .env(WRITER_ENV, home.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(!status.success(), "the child was stopped mid-write");
        let loaded = load(home.path()).unwrap();
        assert_eq!(loaded, settings(1), "the old settings, whole");
        let text = std::fs::read_to_string(home.path().join(SETTINGS_FILE)).unwrap();
        assert!(
            text.contains(&"x".repeat(FILLER)),
            "the rest of the file is whole"
        );
    }
}

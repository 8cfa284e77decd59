//! `[fleet]` of the state root's `intendant.toml`, and `intendant serve --fleet URL`.
//!
//! ```toml
//! [fleet]
//! url = "nats://fleet.internal:4222"   # or tls://; user:password@ in it, or `credentials`
//! name = "build-box-1"                 # default: this host and state root
//! credentials = "fleet.creds"        # beneath the state root, which commands cannot read
//! labels = ["gpu", "codex"]
//! heartbeat_sec = 5
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::FleetError;

/// How often a member reports when `[fleet] heartbeat_sec` says nothing.
pub const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(5);
/// The longest `heartbeat_sec`: a dead member must be seen gone within half a minute.
const HEARTBEAT_MAX_SECS: u64 = 10;
/// Longest member name or label.
const MAX_NAME: usize = 64;

/// `[fleet]` as written. Unknown keys are errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSettings {
    /// The NATS server: `nats://HOST:PORT` or `tls://HOST:PORT`, optionally with
    /// `user:password@`.
    pub url: Option<String>,
    /// This daemon's name in the fleet.
    pub name: Option<String>,
    /// A NATS credentials file (`.creds`: a user JWT and its nkey seed), beneath the state root
    /// (a relative path is taken from it): the state root is hidden from every command.
    pub credentials: Option<PathBuf>,
    /// What this daemon offers placement.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Seconds between reports (1 to 10, default 5).
    pub heartbeat_sec: Option<u64>,
}

impl FleetSettings {
    /// `[fleet]` of the state root's `intendant.toml` at `home` (`None` when the file or the
    /// table is absent).
    pub fn read(home: &Path) -> Result<Option<FleetSettings>, FleetError> {
        let path = home.join("intendant.toml");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FleetError::Config(format!("{}: {e}", path.display()))),
        };
        let mut table: toml::Table = toml::from_str(&text)
            .map_err(|e| FleetError::Config(format!("{}: {e}", path.display())))?;
        let Some(fleet) = table.remove("fleet") else {
            return Ok(None);
        };
        fleet
            .try_into()
            .map(Some)
            .map_err(|e| FleetError::Config(format!("{}: {e}", path.display())))
    }
}

/// A fleet membership, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// The server as given (with its credentials, if any: never shown).
    pub url: String,
    /// The server as shown: without user or password.
    pub server: String,
    /// This daemon's name.
    pub name: String,
    /// The credentials file, resolved beneath the state root.
    pub credentials: Option<PathBuf>,
    /// Its labels.
    pub labels: Vec<String>,
    /// Time between reports.
    pub heartbeat: Duration,
}

impl FleetConfig {
    /// The membership of the daemon of state root `home`: `--fleet URL` (`flag`) over
    /// `[fleet] url`; `None` when neither names a server (no fleet).
    pub fn resolve(
        settings: Option<FleetSettings>,
        flag: Option<&str>,
        home: &Path,
    ) -> Result<Option<FleetConfig>, FleetError> {
        let settings = settings.unwrap_or_default();
        let Some(url) = flag.map(str::to_owned).or(settings.url.clone()) else {
            if settings != FleetSettings::default() {
                return Err(FleetError::Config(
                    "no `url`: name the NATS server (`url = \"nats://HOST:4222\"`) or pass `--fleet URL`".into(),
                ));
            }
            return Ok(None);
        };
        let server = shown_server(&url)?;
        let name = match settings.name {
            Some(name) => checked_name("name", name)?,
            None => default_name(home),
        };
        let labels = settings
            .labels
            .into_iter()
            .map(|label| checked_name("labels", label))
            .collect::<Result<Vec<_>, _>>()?;
        let heartbeat = match settings.heartbeat_sec {
            None => HEARTBEAT_DEFAULT,
            Some(s @ 1..=HEARTBEAT_MAX_SECS) => Duration::from_secs(s),
            Some(s) => {
                return Err(FleetError::Config(format!(
                    "heartbeat_sec = {s} is out of range (1 to {HEARTBEAT_MAX_SECS})"
                )));
            }
        };
        let credentials = settings
            .credentials
            .map(|path| contained_credentials(home, &path))
            .transpose()?;
        Ok(Some(FleetConfig {
            url,
            server,
            name,
            credentials,
            labels,
            heartbeat,
        }))
    }
}

/// The credentials file `path` (relative to the state root `home`), refused unless it lies
/// beneath the state root: there no command of any session can read it (`docs/security.md`).
fn contained_credentials(home: &Path, path: &Path) -> Result<PathBuf, FleetError> {
    let joined = home.join(path);
    let refuse = |why: String| {
        FleetError::Config(format!(
            "credentials {}: {why}; keep the fleet's credentials beneath the state root {} (commands cannot read it there)",
            path.display(),
            home.display()
        ))
    };
    let file = std::fs::canonicalize(&joined).map_err(|e| refuse(e.to_string()))?;
    let root = std::fs::canonicalize(home).map_err(|e| refuse(e.to_string()))?;
    if !file.starts_with(&root) {
        return Err(refuse("it is outside the state root".into()));
    }
    if !file.is_file() {
        return Err(refuse("not a file".into()));
    }
    Ok(file)
}

/// `url` without its user and password, after checking it names a NATS server.
fn shown_server(url: &str) -> Result<String, FleetError> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| FleetError::Config(format!("url is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "nats" | "tls") {
        return Err(FleetError::Config(format!(
            "url must start with nats:// or tls://, not {}://",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(FleetError::Config("url names no host".into()));
    }
    // Neither fails on a URL with a host.
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    Ok(parsed.to_string().trim_end_matches('/').to_owned())
}

/// `value` if it is a usable name or label: letters, digits, `-` and `_`, at most 64.
fn checked_name(key: &str, value: String) -> Result<String, FleetError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(value)
    } else {
        Err(FleetError::Config(format!(
            "{key}: {value:?} must be 1 to {MAX_NAME} letters, digits, '-' or '_'"
        )))
    }
}

/// The name of the daemon of state root `home` when `[fleet] name` gives none: its host name
/// and a short digest of the state root's path, so two daemons of one host differ.
pub fn default_name(home: &Path) -> String {
    let host: String = host_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME - 9)
        .collect();
    let path = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let digest = ring::digest::digest(&ring::digest::SHA256, path.as_os_str().as_encoded_bytes());
    let short: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{host}-{short}")
}

/// This machine's host name ("host" when the system does not say).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml: &str, flag: Option<&str>) -> Result<Option<FleetConfig>, FleetError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("intendant.toml"), toml).unwrap();
        let settings = FleetSettings::read(dir.path())?;
        FleetConfig::resolve(settings, flag, dir.path())
    }

    #[test]
    fn no_fleet_table_and_no_flag_is_no_fleet() {
        assert_eq!(resolve("[daemon]\nmax_running = 2\n", None).unwrap(), None);
    }

    #[test]
    fn the_flag_overrides_the_url_and_credentials_are_never_shown() {
        let config = resolve(
            "[fleet]\nurl = \"nats://a:1\"\nlabels = [\"gpu\"]\nheartbeat_sec = 2\n",
            Some("nats://me:secret@127.0.0.1:4222"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.url, "nats://me:secret@127.0.0.1:4222");
        assert_eq!(config.server, "nats://127.0.0.1:4222");
        assert_eq!(config.labels, ["gpu"]);
        assert_eq!(config.heartbeat, Duration::from_secs(2));
        assert!(config.name.len() <= MAX_NAME && config.name.contains('-'));
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        for (toml, want) in [
            (
                "[fleet]\nurl = \"nats://a:1\"\nbogus = 1\n",
                "unknown field `bogus`",
            ),
            ("[fleet]\nurl = \"http://a:1\"\n", "nats:// or tls://"),
            ("[fleet]\nurl = \"not a url\"\n", "not a URL"),
            (
                "[fleet]\nurl = \"nats://a:1\"\nname = \"a b\"\n",
                "letters, digits",
            ),
            ("[fleet]\nurl = \"nats://a:1\"\nlabels = [\"\"]\n", "labels"),
            (
                "[fleet]\nurl = \"nats://a:1\"\nheartbeat_sec = 60\n",
                "out of range",
            ),
            ("[fleet]\nlabels = [\"gpu\"]\n", "no `url`"),
        ] {
            let e = resolve(toml, None).unwrap_err().to_string();
            assert!(e.contains(want), "{toml}: {e}");
        }
    }

    #[test]
    fn credentials_must_lie_beneath_the_state_root() {
        let home = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("fleet.creds"), "x").unwrap();
        std::fs::write(outside.path().join("fleet.creds"), "x").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("fleet.creds"),
            home.path().join("link.creds"),
        )
        .unwrap();
        let settings = |path: &Path| FleetSettings {
            url: Some("nats://a:1".into()),
            credentials: Some(path.to_path_buf()),
            ..FleetSettings::default()
        };
        let inside =
            FleetConfig::resolve(Some(settings(Path::new("fleet.creds"))), None, home.path())
                .unwrap()
                .unwrap();
        assert_eq!(
            inside.credentials,
            Some(std::fs::canonicalize(home.path().join("fleet.creds")).unwrap())
        );
        for path in [
            outside.path().join("fleet.creds"),
            PathBuf::from("link.creds"),
            PathBuf::from("../fleet.creds"),
            PathBuf::from("missing.creds"),
        ] {
            let e = FleetConfig::resolve(Some(settings(&path)), None, home.path())
                .unwrap_err()
                .to_string();
            assert!(e.contains("beneath the state root"), "{path:?}: {e}");
        }
    }

    #[test]
    fn two_state_roots_of_one_host_get_two_names() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_ne!(default_name(a.path()), default_name(b.path()));
        assert_eq!(default_name(a.path()), default_name(a.path()));
    }
}

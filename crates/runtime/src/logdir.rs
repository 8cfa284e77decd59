//! Where the runtime writes its artifacts: the log directory.
//!
//! `INTENDANT_LOG_DIR` when set (the controller's session log dir, created if missing), else a
//! timestamped `$INTENDANT_HOME/logs/<YYYYMMDD_HHMMSS>` (non-empty `INTENDANT_HOME`), else
//! `$HOME/.intendant/logs/<YYYYMMDD_HHMMSS>`. The timestamp is UTC. Directories the runtime
//! creates get mode 0700.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::time::SystemTime;

use intendant_protocol::utc::UtcTime;
use thiserror::Error;

pub use intendant_protocol::runtime::LOG_DIR_ENV;
/// Intendant's state root.
pub const HOME_ENV: &str = "INTENDANT_HOME";

/// Why no log directory is available.
#[derive(Debug, Error)]
pub enum LogDirError {
    /// Neither `INTENDANT_LOG_DIR`, `INTENDANT_HOME` nor `HOME` is set.
    #[error("no log directory: set INTENDANT_LOG_DIR, INTENDANT_HOME or HOME")]
    NoBase,
    /// The directory could not be created.
    #[error("could not create log directory {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The environment values resolution depends on (separate so tests need no process env).
#[derive(Debug, Clone, Default)]
pub struct LogDirEnv {
    /// `INTENDANT_LOG_DIR`.
    pub log_dir: Option<OsString>,
    /// `INTENDANT_HOME`.
    pub intendant_home: Option<OsString>,
    /// `HOME`.
    pub home: Option<OsString>,
}

impl LogDirEnv {
    /// Reads the three variables from this process's environment.
    pub fn from_process() -> Self {
        LogDirEnv {
            log_dir: std::env::var_os(LOG_DIR_ENV),
            intendant_home: std::env::var_os(HOME_ENV),
            home: std::env::var_os("HOME"),
        }
    }
}

/// Picks the log directory for `env` at time `now`, without touching the filesystem.
pub fn choose(env: &LogDirEnv, now: SystemTime) -> Result<PathBuf, LogDirError> {
    let non_empty = |v: &Option<OsString>| v.clone().filter(|s| !s.is_empty());
    if let Some(dir) = non_empty(&env.log_dir) {
        return Ok(PathBuf::from(dir));
    }
    let stamp = utc_stamp(now);
    if let Some(home) = non_empty(&env.intendant_home) {
        return Ok(PathBuf::from(home).join("logs").join(stamp));
    }
    if let Some(home) = non_empty(&env.home) {
        return Ok(PathBuf::from(home)
            .join(".intendant")
            .join("logs")
            .join(stamp));
    }
    Err(LogDirError::NoBase)
}

/// Resolves and creates the log directory from the process environment.
pub fn resolve() -> Result<PathBuf, LogDirError> {
    let path = choose(&LogDirEnv::from_process(), SystemTime::now())?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)
        .map_err(|source| LogDirError::Create {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// `YYYYMMDD_HHMMSS` in UTC.
pub fn utc_stamp(now: SystemTime) -> String {
    UtcTime::from_system(now).log_dir_stamp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn stamps_known_instants() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101_000000");
        // 2024-02-29T23:59:59Z, a leap day.
        let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199);
        assert_eq!(utc_stamp(t), "20240229_235959");
        // 2000-03-01T12:34:56Z.
        let t = UNIX_EPOCH + Duration::from_secs(951_914_096);
        assert_eq!(utc_stamp(t), "20000301_123456");
    }

    #[test]
    fn precedence() {
        let t = UNIX_EPOCH;
        let mut env = LogDirEnv {
            log_dir: Some("/x/log".into()),
            intendant_home: Some("/ih".into()),
            home: Some("/h".into()),
        };
        assert_eq!(choose(&env, t).unwrap(), PathBuf::from("/x/log"));
        env.log_dir = Some("".into());
        assert_eq!(
            choose(&env, t).unwrap(),
            PathBuf::from("/ih/logs/19700101_000000")
        );
        env.intendant_home = Some("".into());
        assert_eq!(
            choose(&env, t).unwrap(),
            PathBuf::from("/h/.intendant/logs/19700101_000000")
        );
        env.home = None;
        assert!(matches!(choose(&env, t), Err(LogDirError::NoBase)));
    }
}

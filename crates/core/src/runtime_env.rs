//! What the runtime child is given: its rebuilt environment, the sandbox write set and what
//! commands must not read (`reads`).
//!
//! Of the state root (`$INTENDANT_HOME`) the write set holds exactly one directory: the
//! session's own artifacts directory. The controller's records (every session's events,
//! conversation, metadata and turn files) are never in it, so one session's commands can
//! neither forge another session's record nor rewrite their own.
//!
//! The environment is cleared at the spawn boundary and rebuilt from the shared policy
//! (`intendant_protocol::env_policy`); control variables are added one by one afterwards, so a
//! stray `INTENDANT_*` in the user's shell never reaches a model-driven command.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::SandboxConfig;

pub use intendant_protocol::runtime::{
    LOG_DIR_ENV, SANDBOX_READ_MASKS_ENV, SANDBOX_REQUIRE_FULL_ENV, SANDBOX_WRITE_PATHS_ENV,
    USER_DISPLAY_GRANTED_ENV,
};

mod reads;
pub use reads::{
    HOME_SECRETS, ReadMask, ReadRequest, ReadScope, Unreadable, absolutize, config_path, read_masks,
};

/// The inherited part of the runtime's environment: the allowlist plus
/// `INTENDANT_ENV_PASSTHROUGH` names, provider keys always refused.
pub fn inherited_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
    let passthrough = vars
        .iter()
        .find(|(k, _)| k == intendant_protocol::env_policy::PASSTHROUGH_ENV)
        .and_then(|(_, v)| v.to_str())
        .map(intendant_protocol::env_policy::parse_passthrough)
        .unwrap_or_default();
    intendant_protocol::env_policy::filter_env(vars, &passthrough)
}

/// Whether the write sandbox is on: the command line (`--sandbox` / `--no-sandbox`), then
/// `[sandbox] enabled`, then the platform default (on for Linux and macOS).
pub fn sandbox_enabled(flag: Option<bool>, config: &SandboxConfig) -> bool {
    flag.or(config.enabled)
        .unwrap_or(cfg!(any(target_os = "linux", target_os = "macos")))
}

/// Directories a batch needs besides the project: found from the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteRoots {
    /// Project root (absent for a projectless run).
    pub project_root: Option<PathBuf>,
    /// The session's artifacts directory (the runtime's log dir): the only part of
    /// `$INTENDANT_HOME` that is writable.
    pub artifacts_dir: PathBuf,
    /// `$HOME`, for the toolchain-cache defaults.
    pub home: Option<PathBuf>,
    /// `$TMPDIR` when set.
    pub tmpdir: Option<PathBuf>,
    /// `$CARGO_HOME` when set.
    pub cargo_home: Option<PathBuf>,
    /// `$RUSTUP_HOME` when set.
    pub rustup_home: Option<PathBuf>,
    /// `$XDG_CACHE_HOME` when set.
    pub xdg_cache_home: Option<PathBuf>,
}

impl WriteRoots {
    /// Reads the toolchain and temp variables from the process environment.
    pub fn from_env(project_root: Option<PathBuf>, artifacts_dir: PathBuf) -> Self {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        WriteRoots {
            project_root,
            artifacts_dir,
            home: var("HOME"),
            tmpdir: var("TMPDIR"),
            cargo_home: var("CARGO_HOME"),
            rustup_home: var("RUSTUP_HOME"),
            xdg_cache_home: var("XDG_CACHE_HOME"),
        }
    }

    /// The default write set plus `extra`, without duplicates, in a stable order.
    pub fn write_paths(&self, extra: &[PathBuf]) -> Vec<PathBuf> {
        let home_child = |sub: &str| self.home.as_ref().map(|h| h.join(sub));
        let candidates = [
            self.project_root.clone(),
            Some(PathBuf::from("/tmp")),
            self.tmpdir.clone(),
            Some(self.artifacts_dir.clone()),
            self.cargo_home.clone().or_else(|| home_child(".cargo")),
            self.rustup_home.clone().or_else(|| home_child(".rustup")),
            self.xdg_cache_home.clone().or_else(|| home_child(".cache")),
        ];
        let mut out: Vec<PathBuf> = Vec::new();
        for path in candidates
            .into_iter()
            .flatten()
            .chain(extra.iter().cloned())
        {
            if !out.contains(&path) {
                out.push(path);
            }
        }
        out
    }
}

/// The first of `write_paths` that contains `protected` (compared after resolving links), if
/// any: a place the sandbox lets commands write although the controller's records live there.
pub fn write_root_covering(write_paths: &[PathBuf], protected: &Path) -> Option<PathBuf> {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let protected = resolve(protected);
    write_paths
        .iter()
        .find(|root| protected.starts_with(resolve(root)))
        .cloned()
}

/// The control variables that carry a session's walls to a runtime, whatever its mode (a
/// batch, or one program's wall: [`crate::sandboxed`]): the sandbox write set, what must not be
/// read and whether the second layer is required (with `write_paths` only: `None` runs without
/// the sandbox). The network namespace to join comes with its descriptors
/// ([`crate::network::SessionNetns::passed`]).
pub fn wall_vars(
    write_paths: Option<&[PathBuf]>,
    read_masks: &[ReadMask],
    require_full: bool,
) -> Result<Vec<(OsString, OsString)>, String> {
    let mut env = Vec::new();
    if let Some(paths) = write_paths {
        env.push((SANDBOX_WRITE_PATHS_ENV.into(), join_path_list(paths)?));
        if !read_masks.is_empty() {
            let masks = intendant_protocol::runtime::encode_read_masks(read_masks)?;
            env.push((SANDBOX_READ_MASKS_ENV.into(), masks));
        }
        if require_full {
            env.push((SANDBOX_REQUIRE_FULL_ENV.into(), "1".into()));
        }
    }
    Ok(env)
}

/// Joins paths into a platform path list; an error names a path that cannot be listed.
pub fn join_path_list(paths: &[PathBuf]) -> Result<OsString, String> {
    std::env::join_paths(paths).map_err(|e| format!("cannot pass sandbox write paths: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn keys_and_control_vars_never_inherit() {
        let env = inherited_env(os(&[
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("INTENDANT_LOG_DIR", "/evil"),
            ("MY_FLAG", "1"),
            ("OTHER", "x"),
            ("INTENDANT_ENV_PASSTHROUGH", "MY_FLAG,OPENAI_API_KEY"),
        ]));
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"PATH".to_owned()), "{names:?}");
        assert!(names.contains(&"MY_FLAG".to_owned()), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n == "OPENAI_API_KEY" || n == "OTHER" || n == "INTENDANT_LOG_DIR"),
            "{names:?}"
        );
    }

    #[test]
    fn sandbox_resolution_order() {
        let on = SandboxConfig {
            enabled: Some(true),
            ..SandboxConfig::default()
        };
        let off = SandboxConfig {
            enabled: Some(false),
            ..SandboxConfig::default()
        };
        assert!(!sandbox_enabled(Some(false), &on));
        assert!(sandbox_enabled(Some(true), &off));
        assert!(!sandbox_enabled(None, &off));
        assert!(sandbox_enabled(None, &on));
        assert_eq!(
            sandbox_enabled(None, &SandboxConfig::default()),
            cfg!(target_os = "linux") || cfg!(target_os = "macos")
        );
    }

    #[test]
    fn default_write_set() {
        let roots = WriteRoots {
            project_root: Some("/p".into()),
            artifacts_dir: "/h/artifacts/s1".into(),
            home: Some("/home/u".into()),
            tmpdir: Some("/tmp".into()),
            cargo_home: None,
            rustup_home: Some("/opt/rustup".into()),
            xdg_cache_home: None,
        };
        let paths = roots.write_paths(&["/extra".into()]);
        let expected: Vec<PathBuf> = [
            "/p",
            "/tmp",
            "/h/artifacts/s1",
            "/home/u/.cargo",
            "/opt/rustup",
            "/home/u/.cache",
            "/extra",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
        assert!(
            !paths.iter().any(|p| Path::new("/h/logs").starts_with(p)),
            "the records are never writable: {paths:?}"
        );
    }

    #[test]
    fn a_write_root_over_the_records_is_found() {
        let home = tempfile::tempdir().unwrap();
        let records = home.path().join("ih/logs");
        std::fs::create_dir_all(&records).unwrap();
        let project = home.path().join("project");
        assert_eq!(
            write_root_covering(
                &[project.clone(), home.path().join("ih/artifacts/s")],
                &records
            ),
            None
        );
        assert_eq!(
            write_root_covering(&[project, home.path().to_path_buf()], &records),
            Some(home.path().to_path_buf())
        );
    }
}

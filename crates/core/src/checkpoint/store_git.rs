//! The git the checkpoint store runs: the `git` binary on the store's own git directory and its
//! own index, with the project as the work tree, hardened like [`crate::git`] and more: no
//! system or global configuration at all (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`),
//! so no filter, driver, hook or fsmonitor can be named anywhere, and attributes read from the
//! empty tree (`GIT_ATTR_SOURCE`), so a project's `.gitattributes` can neither run a filter nor
//! convert line endings: what is stored is the file's exact bytes.
//!
//! The project's own `.git` is never read or written: git skips every `.git` while walking, and
//! the store's directories are passed explicitly.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{self, ChildSpec, Ending, Limits, Overflow};
use crate::git::FIXED_CONFIG;

use super::CheckpointError;

/// Longest one store command may take (a first checkpoint of a large tree hashes all of it).
const STORE_DEADLINE: Duration = Duration::from_secs(600);
/// Most output kept from one store command: path listings of large trees, blob batches.
pub(super) const STORE_OUTPUT: usize = 256 * 1024 * 1024;
/// git's empty tree, which every git knows without storing it.
pub(super) const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// One store's git: its git directory, the project and the index in use.
#[derive(Debug, Clone)]
pub(super) struct StoreGit {
    pub(super) git_dir: PathBuf,
    pub(super) work_tree: PathBuf,
    /// `core.excludesFile`: the project repository's `info/exclude`, else `/dev/null`.
    pub(super) excludes_file: PathBuf,
}

impl StoreGit {
    /// Runs `git ARGS` with `stdin`, on `index` (`None`: a command that reads no index); its
    /// stdout.
    pub(super) async fn run(
        &self,
        args: &[&str],
        index: Option<&Path>,
        stdin: Vec<u8>,
    ) -> Result<Vec<u8>, CheckpointError> {
        self.run_env(args, index, stdin, true).await
    }

    async fn run_env(
        &self,
        args: &[&str],
        index: Option<&Path>,
        stdin: Vec<u8>,
        with_dirs: bool,
    ) -> Result<Vec<u8>, CheckpointError> {
        let mut env = self.env(std::env::vars_os(), index);
        if !with_dirs {
            env.retain(|(k, _)| k != "GIT_DIR" && k != "GIT_WORK_TREE");
        }
        let spec = ChildSpec {
            program: PathBuf::from("git"),
            args: std::iter::once("--no-pager")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect(),
            env,
            cwd: self.work_tree.clone(),
            stdin,
        };
        let limits = Limits {
            max_stdout: STORE_OUTPUT,
            stdout_overflow: Overflow::Stop,
            max_stderr: 64 * 1024,
            stderr_tail: 4096,
            deadline: Some(STORE_DEADLINE),
            grace: Duration::from_secs(2),
            drain: Duration::from_secs(2),
        };
        let command = args.join(" ");
        let report = child::run(spec, limits, std::future::pending())
            .await
            .map_err(|e| CheckpointError::Git {
                command: command.clone(),
                message: format!("cannot run git: {e}"),
            })?;
        let failed = |message: String| CheckpointError::Git {
            command: command.clone(),
            message,
        };
        match report.ending {
            Ending::Exited(Some(0)) => Ok(report.stdout.bytes),
            Ending::Exited(code) => Err(failed(match report.stderr_tail.trim() {
                "" => format!("exit status {code:?}"),
                tail => tail.to_owned(),
            })),
            Ending::TimedOut => Err(failed(format!("no answer within {STORE_DEADLINE:?}"))),
            Ending::Cancelled | Ending::OutputTooLarge => Err(failed(format!(
                "stopped: more than {} MiB of output",
                STORE_OUTPUT / (1024 * 1024)
            ))),
        }
    }

    /// Makes the store's git directory (bare: the project is passed as the work tree per call).
    pub(super) async fn init(&self) -> Result<(), CheckpointError> {
        let dir = self.git_dir.to_string_lossy().into_owned();
        self.run_env(&["init", "--bare", "-q", &dir], None, Vec::new(), false)
            .await
            .map(|_| ())
    }

    /// git's environment: `vars` without any `GIT_*`, then the store's directories, no
    /// configuration file but the store's own, and the fixed overrides as numbered
    /// `GIT_CONFIG_KEY_n`/`VALUE_n`.
    pub(super) fn env(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
        index: Option<&Path>,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vars
            .filter(|(k, _)| !k.to_string_lossy().starts_with("GIT_"))
            .collect();
        let mut set = |k: &str, v: OsString| env.push((k.into(), v));
        set("GIT_DIR", self.git_dir.clone().into_os_string());
        set("GIT_WORK_TREE", self.work_tree.clone().into_os_string());
        if let Some(index) = index {
            set("GIT_INDEX_FILE", index.as_os_str().to_owned());
        }
        set("GIT_CONFIG_NOSYSTEM", "1".into());
        set("GIT_CONFIG_GLOBAL", "/dev/null".into());
        set("GIT_ATTR_SOURCE", EMPTY_TREE.into());
        set("GIT_TERMINAL_PROMPT", "0".into());
        set("GIT_NO_LAZY_FETCH", "1".into());
        let excludes = self.excludes_file.to_string_lossy().into_owned();
        let config: Vec<(&str, &str)> = FIXED_CONFIG
            .iter()
            .copied()
            .chain([
                ("core.excludesFile", excludes.as_str()),
                ("core.symlinks", "true"),
                ("core.fileMode", "true"),
                ("core.autocrlf", "false"),
                ("core.safecrlf", "false"),
                ("core.quotePath", "false"),
                ("core.bare", "false"),
                ("index.skipHash", "false"),
            ])
            .collect();
        set("GIT_CONFIG_COUNT", config.len().to_string().into());
        for (i, (k, v)) in config.into_iter().enumerate() {
            set(&format!("GIT_CONFIG_KEY_{i}"), k.into());
            set(&format!("GIT_CONFIG_VALUE_{i}"), v.into());
        }
        env
    }
}

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
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{self, ChildSpec, Limits, Overflow, Pipes, Running};
use crate::containment::{LimitHits, Placement};
use crate::git::{Invocation, InvocationError, hardened_env};

use super::CheckpointError;

/// Longest one store command may take (a first checkpoint of a large tree hashes all of it).
pub(super) const STORE_DEADLINE: Duration = Duration::from_secs(600);
/// Most output kept from one store command: path listings of large trees, blob batches.
pub(super) const STORE_OUTPUT: usize = 256 * 1024 * 1024;
/// The null object id, which `update-index --index-info` reads with mode 0 as a removal.
pub(super) const NULL_ID: &str = "0000000000000000000000000000000000000000";
/// git's empty tree, which every git knows without storing it.
pub(super) const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// One store's git: its git directory, the project and the index in use.
#[derive(Debug, Clone)]
pub(super) struct StoreGit {
    pub(super) git_dir: PathBuf,
    pub(super) work_tree: PathBuf,
    /// `core.excludesFile`: the project repository's `info/exclude`, else `/dev/null`.
    pub(super) excludes_file: PathBuf,
    /// The groups of the session whose checkpoints run this git, which every git it starts
    /// enters ([`Invocation::placement`]); `None` for the controller's own (a listing, a
    /// rewind, a collection the user asked for).
    pub(super) placement: Option<Placement>,
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
        let env = self.env(std::env::vars_os(), index);
        self.invoke(args, env, stdin).await
    }

    /// [`StoreGit::run`] with no index, `None` when git wrote more than `max_stdout` bytes (it
    /// is stopped there).
    pub(super) async fn run_within(
        &self,
        args: &[&str],
        stdin: Vec<u8>,
        max_stdout: usize,
    ) -> Result<Option<Vec<u8>>, CheckpointError> {
        let env = self.env(std::env::vars_os(), None);
        let before = self.placement.as_ref().map(Placement::limit_hits);
        match self.invocation(args, env, stdin, max_stdout).run().await {
            Ok(out) => Ok(Some(out)),
            Err(InvocationError::TooLarge(_)) => Ok(None),
            Err(e) => Err(self.failed(args, &e, before)),
        }
    }

    async fn invoke(
        &self,
        args: &[&str],
        env: Vec<(OsString, OsString)>,
        stdin: Vec<u8>,
    ) -> Result<Vec<u8>, CheckpointError> {
        let before = self.placement.as_ref().map(Placement::limit_hits);
        self.invocation(args, env, stdin, STORE_OUTPUT)
            .run()
            .await
            .map_err(|e| self.failed(args, &e, before))
    }

    /// The error of store command `args` that ended as `e`; for a session's (`before`: its
    /// limit hits when it started), with what the session's bounds did to its processes since
    /// (git killed for the session's memory bound, a fork of it refused).
    fn failed(
        &self,
        args: &[&str],
        e: &InvocationError,
        before: Option<LimitHits>,
    ) -> CheckpointError {
        let mut message = e.message();
        if let (Some(placement), Some(before)) = (&self.placement, before) {
            let notes = placement.limit_notes(&before, &placement.limit_hits());
            if !notes.is_empty() {
                message = format!("{message} ({})", notes.join("; "));
            }
        }
        CheckpointError::Git {
            command: args.join(" "),
            message,
        }
    }

    fn invocation<'a>(
        &'a self,
        args: &'a [&'a str],
        env: Vec<(OsString, OsString)>,
        stdin: Vec<u8>,
        max_stdout: usize,
    ) -> Invocation<'a> {
        Invocation {
            args,
            env,
            cwd: &self.work_tree,
            stdin,
            max_stdout,
            max_stderr: 64 * 1024,
            deadline: STORE_DEADLINE,
            placement: self.placement.as_ref().map(Placement::lent),
        }
    }

    /// Starts `git ARGS` for a conversation ([`child::spawn_interactive`]): its stdin and stdout
    /// are the caller's, with the store's environment plus `extra`, stopped past `deadline`; in
    /// the session's groups, at its commands' nice value, when it runs for one.
    pub(super) async fn spawn_interactive(
        &self,
        args: &[&str],
        extra: &[(&str, &str)],
        deadline: Option<Duration>,
    ) -> std::io::Result<(Running, Pipes)> {
        let mut env = self.env(std::env::vars_os(), None);
        env.extend(
            extra
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let spec = ChildSpec {
            program: "git".into(),
            args: std::iter::once("--no-pager")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect(),
            env,
            cwd: self.work_tree.clone(),
            stdin: Vec::new(),
            passed: None,
        };
        let limits = Limits {
            max_stdout: 0,
            stdout_overflow: Overflow::Drain,
            max_stderr: 64 * 1024,
            stderr_tail: 4096,
            deadline,
            grace: Duration::from_secs(2),
            drain: Duration::from_secs(2),
        };
        let Some(placement) = &self.placement else {
            return child::spawn_interactive(spec, limits);
        };
        let (running, pipes) =
            child::spawn_lasting_interactive(spec, limits, Some(placement.lent())).await?;
        if let Some(pid) = crate::git::pid(running.id()) {
            crate::git::lower_priority(pid);
        }
        Ok((running, pipes))
    }

    /// Makes the store's git directory when it has none, with `exclude` (lines of git's
    /// `info/exclude`) in it. A new one is made in-process: what a bare repository needs and
    /// git reads (`HEAD`, `config`, `objects/`, `refs/`), built under a temporary name and
    /// renamed into place, so a store is whole or absent, and two sessions opening a new
    /// project at once both end with the one that was renamed first. No `git init` runs (a
    /// process and about twenty files a new project paid for, sample hooks the store never
    /// runs among them). A git directory without `objects` (an older build's `git init`
    /// interrupted) is made whole by `git init`.
    pub(super) async fn ensure(&self, exclude: Option<&str>) -> Result<(), CheckpointError> {
        if self.git_dir.join("objects").is_dir() {
            return Ok(());
        }
        if std::fs::symlink_metadata(&self.git_dir).is_ok() {
            self.init().await?;
            return write_exclude(&self.git_dir, exclude);
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CheckpointError::Io { path, source }
        };
        let parent = self.git_dir.parent().unwrap_or(Path::new("."));
        let suffix = crate::record_dir::random_suffix().map_err(io(parent))?;
        let new = parent.join(format!("git.new-{suffix}"));
        let made = make_bare(&new, exclude).map_err(io(&new));
        let placed = made.and_then(|()| match std::fs::rename(&new, &self.git_dir) {
            Ok(()) => Ok(()),
            // Another opener placed its store first: that one is used.
            Err(_) if self.git_dir.join("objects").is_dir() => Ok(()),
            Err(e) => Err(io(&self.git_dir)(e)),
        });
        let _ = std::fs::remove_dir_all(&new);
        placed
    }

    /// Stores `bytes` as a blob and gives its id, in-process: the object `git hash-object -w`
    /// would write ([`write_loose_blob`]), with no process started for it (a capture whose
    /// modes changed stores their table; a new session's first capture of an empty project
    /// stores nothing else).
    pub(super) async fn write_blob(&self, bytes: Vec<u8>) -> Result<String, CheckpointError> {
        let objects = self.git_dir.join("objects");
        let path = objects.clone();
        tokio::task::spawn_blocking(move || write_loose_blob(&objects, &bytes))
            .await
            .map_err(|e| CheckpointError::io(&path, std::io::Error::other(e.to_string())))?
    }

    /// Makes the store's git directory with `git init` (bare: the project is passed as the
    /// work tree per call; SHA-1 whatever git's default, as [`write_loose_blob`] names objects).
    async fn init(&self) -> Result<(), CheckpointError> {
        let dir = self.git_dir.to_string_lossy().into_owned();
        let mut env = self.env(std::env::vars_os(), None);
        env.retain(|(k, _)| k != "GIT_DIR" && k != "GIT_WORK_TREE");
        let args = ["init", "--bare", "-q", "--object-format=sha1", &dir];
        self.invoke(&args, env, Vec::new()).await.map(|_| ())
    }

    /// git's environment: `vars` without any `GIT_*`, then the store's directories, no
    /// configuration file but the store's own, attributes from the empty tree, and the store's
    /// overrides after the fixed ones ([`hardened_env`]).
    pub(super) fn env(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
        index: Option<&Path>,
    ) -> Vec<(OsString, OsString)> {
        let excludes = self.excludes_file.to_string_lossy().into_owned();
        let config = [
            ("core.excludesFile", excludes.as_str()),
            ("core.symlinks", "true"),
            ("core.fileMode", "true"),
            ("core.autocrlf", "false"),
            ("core.safecrlf", "false"),
            ("core.quotePath", "false"),
            ("core.bare", "false"),
            // No checksum over the whole index, written or read: a capture of a big project
            // reads and writes its index several times (10 MB at 100,000 paths), and the index
            // is the store's own. A git older than 2.40 ignores the key; one that finds the
            // index unreadable makes the session capture from scratch.
            ("index.skipHash", "true"),
        ];
        let mut set = vec![
            ("GIT_DIR", self.git_dir.clone().into_os_string()),
            ("GIT_WORK_TREE", self.work_tree.clone().into_os_string()),
        ];
        if let Some(index) = index {
            set.push(("GIT_INDEX_FILE", index.as_os_str().to_owned()));
        }
        set.extend([
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
            ("GIT_ATTR_SOURCE", EMPTY_TREE.into()),
        ]);
        hardened_env(vars, set, &config)
    }
}

/// Writes at `dir` (which must not exist) a bare repository with no refs, as `git init --bare`
/// would without its template files, and `exclude` as its `info/exclude`.
fn make_bare(dir: &Path, exclude: Option<&str>) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
    for sub in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n")?;
    std::fs::write(
        dir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
    )?;
    write_exclude(dir, exclude).map_err(|e| match e {
        CheckpointError::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    })
}

/// The id git gives a blob of `bytes`: the SHA-1 of `blob <length>\0` and the bytes, in hex.
pub(super) fn blob_id(bytes: &[u8]) -> String {
    let mut sha1 = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    sha1.update(format!("blob {}\0", bytes.len()).as_bytes());
    sha1.update(bytes);
    crate::digest::hex(sha1.finish().as_ref())
}

/// Writes `bytes` under `objects` as git writes a loose blob, and gives its id: named by the
/// SHA-1 of `blob <length>\0` and the bytes, zlib-compressed at `objects/<2 hex>/<38 hex>`,
/// read-only. It is written to a `tmp_obj_` file in that directory and renamed into place, so
/// the object is whole or absent (what a killed write leaves is what `git prune` removes), and
/// not written again when it is already there. Not synced, as git leaves loose objects by
/// default (`core.fsync`). The store is SHA-1: made so in-process, or by `git init` with no
/// configuration but the store's own.
pub(super) fn write_loose_blob(objects: &Path, bytes: &[u8]) -> Result<String, CheckpointError> {
    let header = format!("blob {}\0", bytes.len());
    let id = blob_id(bytes);
    let (fan, rest) = id.split_at(2);
    let dir = objects.join(fan);
    let path = dir.join(rest);
    if std::fs::symlink_metadata(&path).is_ok() {
        return Ok(id);
    }
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(CheckpointError::io(&dir, e));
        }
        _ => {}
    }
    let suffix = crate::record_dir::random_suffix().map_err(|e| CheckpointError::io(&dir, e))?;
    let tmp = dir.join(format!("tmp_obj_{suffix}"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&tmp)
        .and_then(|file| {
            let mut zlib = flate2::write::ZlibEncoder::new(file, flate2::Compression::default());
            zlib.write_all(header.as_bytes())?;
            zlib.write_all(bytes)?;
            zlib.finish()
        })
        .and_then(|_file| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(CheckpointError::io(&path, e));
    }
    Ok(id)
}

/// Writes `exclude` as `dir`'s `info/exclude` (nothing when `None`).
fn write_exclude(dir: &Path, exclude: Option<&str>) -> Result<(), CheckpointError> {
    let Some(lines) = exclude else {
        return Ok(());
    };
    let info = dir.join("info");
    std::fs::create_dir_all(&info).map_err(|e| CheckpointError::io(&info, e))?;
    let path = info.join("exclude");
    std::fs::write(&path, lines).map_err(|e| CheckpointError::io(&path, e))
}

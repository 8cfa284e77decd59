//! The one way the controller runs git: against a repository it resolved itself at a session's
//! start, with nothing a sandboxed command could have planted able to run code.
//!
//! A command can write the project, so it can write what git reads to decide where the
//! repository is (the `.git` gitfile, `commondir`, a worktree's `gitdir`) and, through those,
//! which configuration and hooks run. [`GitRepo::discover`] resolves the repository in Rust,
//! before any command of the session ran, and records those pointer files as they were; every
//! later git call ([`GitRepo::run`]) first checks they are unchanged (a changed one is refused,
//! never followed) and then runs git:
//! - on an explicit `GIT_DIR`, `GIT_COMMON_DIR` and `GIT_WORK_TREE`, so no pointer file is read;
//! - with every `GIT_*` variable of the controller's environment removed;
//! - with command-line configuration (which wins over every file) turning off whatever config
//!   can make git run a program: hooks (`core.hooksPath=/dev/null`), `core.fsmonitor`, the
//!   pager, transports (`protocol.allow=never`, so no ssh, credential helper or askpass and no
//!   lazy fetch of a partial clone), submodule recursion, automatic gc/maintenance (which
//!   would also outlive the call), every filter, diff and merge driver the configuration
//!   defines (`filter.<name>.clean|smudge|process`, `diff.<name>.command|textconv`,
//!   `merge.<name>.driver`) and every hook configured by name (`hook.<name>.enabled=false`, git
//!   2.54+), listed first with `git config --list`, which runs nothing (a listing that fails,
//!   too large or unreadable, refuses the call rather than run git with those drivers on).
//!
//! [`GitRepo::restore`] puts recorded pointers back (and removes one that did not exist), for
//! the user's own git, which follows them: the session runs it after every batch and at its end.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::child::{self, ChildReport, ChildSpec, Ending, Limits, Overflow};

/// Longest a git command may take.
const GIT_DEADLINE: Duration = Duration::from_secs(120);
/// Most output kept from a git command.
const GIT_OUTPUT: usize = 1024 * 1024;
/// Longest pointer file recorded (git's own are one short line).
const POINTER_MAX: u64 = 4096;
/// Most linked worktrees whose absent `config.worktree` is recorded.
const MOST_WORKTREES: usize = 256;

/// Configuration given on every call: the command-line scope beats every file.
pub(crate) const FIXED_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
];

/// Per-driver keys whose value is a program, set empty (git then runs no driver); a hook
/// configured by name (`hook.<name>.command`, git 2.54+) is disabled instead.
const DRIVER_KEYS: &[(&str, &[&str])] = &[
    ("filter.", &["clean", "smudge", "process"]),
    ("diff.", &["command", "textconv"]),
    ("merge.", &["driver"]),
    ("hook.", &["command", "event"]),
];

/// A git command that could not run, failed, or was refused.
#[derive(Debug, Error)]
pub enum GitError {
    /// git could not be started (not installed?).
    #[error("cannot run git: {0}")]
    Spawn(#[source] std::io::Error),
    /// git ran and failed.
    #[error("`git {command}` failed: {stderr}")]
    Failed {
        /// The subcommand and its arguments.
        command: String,
        /// The end of its stderr (or how it ended).
        stderr: String,
    },
    /// A pointer file changed since the session started: git is not run.
    #[error(
        "refusing to run git: {path} changed since the session started (it {was}; now it {now}); Intendant never follows a repository pointer a command may have rewritten"
    )]
    PointerChanged {
        /// The pointer file.
        path: PathBuf,
        /// What it was.
        was: String,
        /// What it is now.
        now: String,
    },
    /// The repository is not what its pointers claim.
    #[error("{0}")]
    NotOwn(String),
    /// The configuration could not be listed, so the drivers it defines cannot be turned
    /// off: git is not run.
    #[error(
        "refusing to run git: its configuration could not be listed to turn off the programs it names ({0})"
    )]
    ConfigUnlisted(#[source] Box<GitError>),
}

/// One pointer file as recorded: its bytes, or `None` when it did not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pointer {
    path: PathBuf,
    content: Option<Vec<u8>>,
}

impl Pointer {
    fn record(path: PathBuf) -> Pointer {
        let content = read_pointer(&path);
        Pointer { path, content }
    }

    /// `git_dir`'s `config.worktree` recorded as absent, when it is: git reads it (with
    /// `extensions.worktreeConfig` set) as the repository's configuration, so one a command
    /// makes could name an fsmonitor or a hook the user's own git runs. One that exists is the
    /// sandbox's to keep read-only, and not recorded here (it may be larger than a pointer).
    fn absent_worktree_config(git_dir: &Path) -> Option<Pointer> {
        let path = git_dir.join("config.worktree");
        matches!(std::fs::symlink_metadata(&path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
            .then_some(Pointer {
                path,
                content: None,
            })
    }

    /// [`Pointer::absent_worktree_config`] of the repository's own git directory `common_dir`,
    /// of `git_dir` (a linked worktree's), and of every linked worktree's entry (the user's
    /// `git status` in any of them reads its own), at most [`MOST_WORKTREES`] of those.
    fn absent_worktree_configs(common_dir: &Path, git_dir: &Path) -> Vec<Pointer> {
        let mut dirs = vec![common_dir.to_path_buf()];
        if git_dir != common_dir {
            dirs.push(git_dir.to_path_buf());
        }
        if let Ok(entries) = std::fs::read_dir(common_dir.join("worktrees")) {
            dirs.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .filter(|d| d != git_dir)
                    .take(MOST_WORKTREES),
            );
        }
        dirs.iter()
            .filter_map(|d| Pointer::absent_worktree_config(d))
            .collect()
    }

    fn describe(content: &Option<Vec<u8>>) -> String {
        match content {
            None => "did not exist".to_owned(),
            Some(bytes) => format!(
                "read {:?}",
                String::from_utf8_lossy(bytes).trim_end().to_owned()
            ),
        }
    }
}

/// A pointer file's bytes, when it is a regular file of pointer size (a link, a directory, a
/// FIFO or anything larger counts as changed).
fn read_pointer(path: &Path) -> Option<Vec<u8>> {
    read_small(path, false).ok().flatten()
}

/// The bytes of the regular file at `path` when it holds at most [`POINTER_MAX`]; `None` for
/// anything else (a link unless `follow`, a FIFO, a larger file), never waited on nor read past
/// the bound ([`crate::regular_file`]).
fn read_small(path: &Path, follow: bool) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::ErrorKind;
    match crate::regular_file::read(path, POINTER_MAX, follow) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::FileTooLarge) => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`read_small`] (following a link) as text.
fn read_small_text(path: &Path) -> std::io::Result<Option<String>> {
    Ok(read_small(path, true)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// A repository as the controller resolved it at a session's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRepo {
    work_tree: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
    pointers: Vec<Pointer>,
    /// The work tree's `.git` when it was a directory: it must stay one (a gitfile in its place
    /// would redirect the user's git; the sandbox pins it, this catches it where none ran).
    dot_git_dir: Option<PathBuf>,
    /// What looked wrong at resolution (shown once as a warning).
    notes: Vec<String>,
}

impl GitRepo {
    /// Finds the repository holding `start` as git would (the nearest ancestor with a `.git`
    /// directory or gitfile), without running git, and records its pointers. `Ok(None)`: not
    /// in a repository. A gitfile whose target does not name it back is refused.
    pub fn discover(start: &Path) -> Result<Option<GitRepo>, GitError> {
        let Ok(start) = std::fs::canonicalize(start) else {
            return Ok(None);
        };
        for dir in start.ancestors() {
            let dot_git = dir.join(".git");
            let Ok(meta) = std::fs::metadata(&dot_git) else {
                continue;
            };
            if meta.is_dir() {
                if !looks_like_git_dir(&dot_git) {
                    continue;
                }
                let git_dir = canonical(&dot_git)?;
                let mut notes = Vec::new();
                let commondir = git_dir.join("commondir");
                if std::fs::symlink_metadata(&commondir).is_ok() {
                    notes.push(format!(
                        "{} exists, which git never makes in a repository's own .git directory: Intendant ignores it, but your own git follows it to another repository's configuration and hooks; remove it unless you made it",
                        commondir.display()
                    ));
                }
                let mut pointers = vec![Pointer::record(commondir)];
                pointers.extend(Pointer::absent_worktree_configs(&git_dir, &git_dir));
                return Ok(Some(GitRepo {
                    work_tree: dir.to_path_buf(),
                    common_dir: git_dir.clone(),
                    pointers,
                    dot_git_dir: Some(dot_git),
                    git_dir,
                    notes,
                }));
            }
            if meta.is_file() {
                return GitRepo::from_gitfile(dir, &dot_git).map(Some);
            }
        }
        Ok(None)
    }

    /// A work tree whose `.git` is a file: a linked worktree (its git dir names it back and
    /// has a `commondir`) or a `--separate-git-dir` checkout.
    fn from_gitfile(work_tree: &Path, dot_git: &Path) -> Result<GitRepo, GitError> {
        let not_own = |why: String| GitError::NotOwn(format!("{}: {why}", dot_git.display()));
        let text = read_small_text(dot_git)
            .map_err(|e| not_own(format!("cannot read the gitfile: {e}")))?
            .ok_or_else(|| not_own(format!("not a file of at most {POINTER_MAX} bytes")))?;
        let target = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("gitdir:"))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| not_own("not a `gitdir: PATH` file".to_owned()))?;
        let git_dir = canonical(&work_tree.join(target))?;
        if !looks_like_git_dir(&git_dir) {
            return Err(not_own(format!(
                "it points at {}, which is no git directory",
                git_dir.display()
            )));
        }
        let commondir = git_dir.join("commondir");
        let back = git_dir.join("gitdir");
        let mut pointers = vec![
            Pointer::record(dot_git.to_path_buf()),
            Pointer::record(commondir.clone()),
        ];
        let common_dir = match read_small_text(&commondir) {
            Ok(Some(c)) => {
                // A linked worktree: its entry names this gitfile back.
                let named = read_small_text(&back).ok().flatten().unwrap_or_default();
                let named = canonical(&git_dir.join(named.trim())).ok();
                if named.as_deref() != canonical(dot_git).ok().as_deref() {
                    return Err(not_own(format!(
                        "it points at {}, whose gitdir file does not name this worktree back",
                        git_dir.display()
                    )));
                }
                pointers.push(Pointer::record(back));
                canonical(&git_dir.join(c.trim()))?
            }
            Ok(None) => {
                return Err(not_own(format!(
                    "{} is not a file of at most {POINTER_MAX} bytes",
                    commondir.display()
                )));
            }
            Err(_) => git_dir.clone(),
        };
        pointers.extend(Pointer::absent_worktree_configs(&common_dir, &git_dir));
        Ok(GitRepo {
            work_tree: work_tree.to_path_buf(),
            git_dir,
            common_dir,
            pointers,
            dot_git_dir: None,
            notes: Vec::new(),
        })
    }

    /// The work tree (the project root).
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// The git directory of this work tree.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The repository's common git directory (objects, refs, shared configuration).
    pub fn common_dir(&self) -> &Path {
        &self.common_dir
    }

    /// What looked wrong when the repository was resolved, for the user.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether the `.git` directory recorded at the start is still a directory (not a link).
    fn dot_git_replaced(&self) -> Option<&Path> {
        self.dot_git_dir
            .as_deref()
            .filter(|d| !std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
    }

    /// Refuses when a recorded pointer changed.
    pub fn verify(&self) -> Result<(), GitError> {
        if let Some(dot_git) = self.dot_git_replaced() {
            return Err(GitError::PointerChanged {
                path: dot_git.to_path_buf(),
                was: "was the repository's directory".to_owned(),
                now: "is something else".to_owned(),
            });
        }
        for p in &self.pointers {
            let now = read_pointer(&p.path);
            if now != p.content {
                return Err(GitError::PointerChanged {
                    path: p.path.clone(),
                    was: Pointer::describe(&p.content),
                    now: Pointer::describe(&now),
                });
            }
        }
        Ok(())
    }

    /// Puts every changed pointer back as recorded (removing one that did not exist); one
    /// warning per pointer restored, or that could not be.
    pub fn restore(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(dot_git) = self.dot_git_replaced() {
            // Moved away, not rewritten: only the user knows where it went.
            warnings.push(format!(
                "{} is no longer the repository's directory (a command moved or replaced it) and cannot be restored: put the repository back before running git there",
                dot_git.display()
            ));
        }
        for p in &self.pointers {
            let now = read_pointer(&p.path);
            if now == p.content {
                continue;
            }
            let done = match &p.content {
                Some(bytes) => replace_file(&p.path, bytes),
                // A pointer that did not exist: whatever was put in its place (a file, a link,
                // a directory however deep) goes.
                None => crate::remove_tree::remove_tree(&p.path),
            };
            warnings.push(match done {
                Ok(()) => format!(
                    "{} was changed by a command (it {}; it {}): restored, so no git follows it",
                    p.path.display(),
                    Pointer::describe(&p.content),
                    Pointer::describe(&now)
                ),
                Err(e) => format!(
                    "{} was changed by a command (it {}; it {}) and cannot be restored: {e}; your own git in this project may now read another repository's configuration",
                    p.path.display(),
                    Pointer::describe(&p.content),
                    Pointer::describe(&now)
                ),
            });
        }
        warnings
    }

    /// Runs `git ARGS` hardened (see the module docs) in the work tree, after checking the
    /// pointers; its stdout.
    pub async fn run(&self, args: &[&str]) -> Result<String, GitError> {
        self.verify()?;
        // Fail closed: without the listing a configured filter or driver would run.
        let listing = self
            .run_unchecked(&["config", "--list", "-z", "--includes"], &[])
            .await
            .map_err(|e| GitError::ConfigUnlisted(Box::new(e)))?;
        let drivers = driver_overrides(&listing);
        self.run_unchecked(args, &drivers).await
    }

    async fn run_unchecked(
        &self,
        args: &[&str],
        extra: &[(String, String)],
    ) -> Result<String, GitError> {
        let invocation = Invocation {
            args,
            env: self.env(std::env::vars_os(), extra),
            cwd: &self.work_tree,
            stdin: Vec::new(),
            max_stdout: GIT_OUTPUT,
            max_stderr: GIT_OUTPUT,
            deadline: GIT_DEADLINE,
            placement: None,
        };
        match invocation.run().await {
            Ok(stdout) => Ok(String::from_utf8_lossy(&stdout).into_owned()),
            Err(InvocationError::Spawn(e)) => Err(GitError::Spawn(e)),
            Err(e) => Err(GitError::Failed {
                command: args.join(" "),
                stderr: e.message(),
            }),
        }
    }

    /// git's environment: `vars` without any `GIT_*` variable, then the resolved directories,
    /// no optional locks, and the configuration overrides ([`FIXED_CONFIG`], then `extra`), as
    /// [`hardened_env`] gives every git the controller runs.
    fn env(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
        extra: &[(String, String)],
    ) -> Vec<(OsString, OsString)> {
        let config: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        hardened_env(
            vars,
            [
                ("GIT_DIR", self.git_dir.clone().into_os_string()),
                ("GIT_COMMON_DIR", self.common_dir.clone().into_os_string()),
                ("GIT_WORK_TREE", self.work_tree.clone().into_os_string()),
                ("GIT_OPTIONAL_LOCKS", "0".into()),
            ],
            &config,
        )
    }
}

/// The environment of every git the controller runs (the project's, through [`GitRepo`], and
/// the checkpoint store's): `vars` without any `GIT_*` variable, then `set` (the directories
/// the caller resolved), no prompt and no lazy fetch, and the configuration overrides
/// ([`FIXED_CONFIG`], then `config`) as `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` (a key may hold
/// `=`, which `-c` cannot).
pub(crate) fn hardened_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
    set: impl IntoIterator<Item = (&'static str, OsString)>,
    config: &[(&str, &str)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vars
        .filter(|(k, _)| !k.to_string_lossy().starts_with("GIT_"))
        .collect();
    env.extend(set.into_iter().map(|(k, v)| (OsString::from(k), v)));
    env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
    env.push(("GIT_NO_LAZY_FETCH".into(), "1".into()));
    let config: Vec<(&str, &str)> = FIXED_CONFIG.iter().chain(config).copied().collect();
    env.push(("GIT_CONFIG_COUNT".into(), config.len().to_string().into()));
    for (i, (k, v)) in config.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}").into(), k.into()));
        env.push((format!("GIT_CONFIG_VALUE_{i}").into(), v.into()));
    }
    env
}

/// One run of the `git` binary with a [`hardened_env`], bounded in time and output: how the
/// project's git and the checkpoint store's both run it.
pub(crate) struct Invocation<'a> {
    /// The subcommand and its arguments (after `--no-pager`).
    pub(crate) args: &'a [&'a str],
    /// The whole environment, from [`hardened_env`].
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Where git runs.
    pub(crate) cwd: &'a Path,
    /// Its stdin.
    pub(crate) stdin: Vec<u8>,
    /// Most stdout kept; more stops git.
    pub(crate) max_stdout: usize,
    /// Most stderr read.
    pub(crate) max_stderr: usize,
    /// Longest it may take.
    pub(crate) deadline: Duration,
    /// The groups of the session git runs for (a checkpoint's: `Placement::lent`), which it
    /// is placed in, and given the sessions' nice value, as soon as it started; `None`: the
    /// controller's own.
    pub(crate) placement: Option<child::LentPlacement>,
}

/// Why an [`Invocation`] gave no output.
#[derive(Debug)]
pub(crate) enum InvocationError {
    /// git could not be started.
    Spawn(std::io::Error),
    /// git failed: the end of its stderr, or how it ended.
    Failed(String),
    /// git wrote more than `max_stdout` bytes and was stopped.
    TooLarge(usize),
}

impl InvocationError {
    /// Whether a git run that ended as `report` succeeded (exit 0); else why not, for one that
    /// had `deadline` and `max_stdout`.
    pub(crate) fn check(
        report: &ChildReport,
        deadline: Duration,
        max_stdout: usize,
    ) -> Result<(), InvocationError> {
        match report.ending {
            Ending::Exited(Some(0)) => Ok(()),
            Ending::Exited(code) => Err(InvocationError::Failed(match report.stderr_tail.trim() {
                "" => match code {
                    Some(code) => format!("exit status {code}"),
                    None => "killed by a signal".to_owned(),
                },
                tail => tail.to_owned(),
            })),
            Ending::TimedOut => Err(InvocationError::Failed(format!(
                "no answer within {deadline:?}"
            ))),
            Ending::OutputTooLarge => Err(InvocationError::TooLarge(max_stdout)),
            Ending::Cancelled => Err(InvocationError::Failed("cancelled".to_owned())),
        }
    }

    /// Why, in words (a spawn error aside).
    pub(crate) fn message(&self) -> String {
        match self {
            InvocationError::Spawn(e) => format!("cannot run git: {e}"),
            InvocationError::Failed(message) => message.clone(),
            InvocationError::TooLarge(max) => {
                format!("stopped: more than {} KiB of output", max / 1024)
            }
        }
    }
}

impl Invocation<'_> {
    /// Runs git; its stdout when it exits 0.
    pub(crate) async fn run(self) -> Result<Vec<u8>, InvocationError> {
        let spec = ChildSpec {
            program: PathBuf::from("git"),
            args: std::iter::once("--no-pager")
                .chain(self.args.iter().copied())
                .map(OsString::from)
                .collect(),
            env: self.env,
            cwd: self.cwd.to_path_buf(),
            stdin: self.stdin,
            passed: None,
        };
        let limits = Limits {
            max_stdout: self.max_stdout,
            stdout_overflow: Overflow::Stop,
            max_stderr: self.max_stderr,
            stderr_tail: 4096,
            deadline: Some(self.deadline),
            grace: Duration::from_secs(2),
            drain: Duration::from_secs(2),
        };
        let for_session = self.placement.is_some();
        let running = match self.placement {
            Some(placement) => child::spawn_lasting(spec, limits, Some(placement)).await,
            None => child::spawn(spec, limits),
        }
        .map_err(InvocationError::Spawn)?;
        let within = pid(running.id()).is_none_or(|pid| {
            if for_session {
                lower_priority(pid);
            }
            bound_memory(pid)
        });
        if !within {
            let _ = running.finish(std::future::ready(())).await;
            return Err(InvocationError::Failed(TOO_MUCH_MEMORY.to_owned()));
        }
        let watch = held_by_a_fifo(running.id());
        let report = running
            .finish(watch)
            .await
            .map_err(InvocationError::Spawn)?;
        // The FIFO's watch is the one thing that cancels it.
        if matches!(report.ending, Ending::Cancelled) {
            return Err(InvocationError::Failed(HELD_BY_A_FIFO.to_owned()));
        }
        InvocationError::check(&report, self.deadline, self.max_stdout)?;
        Ok(report.stdout.bytes)
    }
}

/// Most private memory (`RLIMIT_DATA`) a git for a session may allocate: git reads each file it
/// reads of the project (a `.gitignore`) into memory whole, so a command's sparse 3 GB
/// `.gitignore` made the controller's git hold 3 GB, in the controller's groups, not the
/// session's. Far above what git needs to list or check out a project (its index, a file's
/// patterns); a bigger allocation fails and git says so (`Out of memory, malloc failed`).
const GIT_DATA_MAX: u64 = 1 << 30;

/// Bounds git `pid`'s private memory to [`GIT_DATA_MAX`], right after its start (it starts in
/// a few milliseconds, the bound takes microseconds); whether git held no more than that when
/// bound. A git that ran before its bound took (its spawning thread preempted on a busy
/// machine) may have mapped a file's buffer already: that one is seen here, as every later
/// allocation past the bound fails. Best effort: a system that refuses leaves git as it was.
fn bound_memory(pid: rustix::process::Pid) -> bool {
    let bound = rustix::process::Rlimit {
        current: Some(GIT_DATA_MAX),
        maximum: Some(GIT_DATA_MAX),
    };
    let _ = rustix::process::prlimit(Some(pid), rustix::process::Resource::Data, bound);
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.as_raw_nonzero()))
        .unwrap_or_default();
    let data_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmData:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    data_kib.saturating_mul(1024) <= GIT_DATA_MAX
}

/// Why git was stopped when it held more memory than [`GIT_DATA_MAX`] as it was bound.
const TOO_MUCH_MEMORY: &str = "git held more than 1024 MiB of memory and was stopped (git reads \
     some files of the project whole, each `.gitignore` among them: one that large is a \
     command's doing)";

/// Gives a git run for a session, `pid`, the nice value of the session's commands
/// ([`SESSION_NICE`](intendant_protocol::runtime::SESSION_NICE)) when it is below it, as it is
/// placed in the session's groups. Best effort.
pub(crate) fn lower_priority(pid: rustix::process::Pid) {
    let nice = intendant_protocol::runtime::SESSION_NICE;
    if rustix::process::getpriority_process(Some(pid)).is_ok_and(|now| now < nice) {
        let _ = rustix::process::setpriority_process(Some(pid), nice);
    }
}

/// `pid` as the system's process id, when it is one.
pub(crate) fn pid(pid: Option<u32>) -> Option<rustix::process::Pid> {
    pid.and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
}

/// Why git was stopped when it waited to open a FIFO.
const HELD_BY_A_FIFO: &str = "git waited for a FIFO to be opened for writing (a FIFO where git \
     reads a file of the project, such as a `.gitignore` a command made one) and was stopped: \
     remove the FIFO";
/// How often, and how many times in a row, git is found waiting to open a FIFO before it is
/// stopped.
const FIFO_LOOK_EVERY: Duration = Duration::from_millis(500);
const FIFO_LOOKS: u32 = 4;

/// Resolves once git, `pid`, has sat in `open` of a FIFO waiting for a writer
/// ([`FIFO_LOOKS`] looks in a row): git opens the files it reads from the project (each
/// directory's `.gitignore`) without `O_NONBLOCK`, so a FIFO a command left there stalled every
/// git of the session (a checkpoint, a sub-agent's `git status`) until its deadline, ten
/// minutes. Never resolves for a git that never waits so, nor without a pid.
async fn held_by_a_fifo(pid: Option<u32>) {
    let Some(pid) = pid else {
        return std::future::pending().await;
    };
    let mut looks = 0;
    loop {
        tokio::time::sleep(FIFO_LOOK_EVERY).await;
        // The kernel's name for where a FIFO's `open` waits for the other end.
        let waiting = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
            .is_ok_and(|wchan| wchan.trim() == "wait_for_partner");
        looks = if waiting { looks + 1 } else { 0 };
        if looks >= FIFO_LOOKS {
            return;
        }
    }
}

/// The overrides emptying every driver program `listing` (`git config --list -z`) defines, and
/// making its filters optional (a required filter with no program would fail the checkout).
fn driver_overrides(listing: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for entry in listing.split('\0') {
        let key = entry.split_once('\n').map_or(entry, |(k, _)| k);
        for (prefix, suffixes) in DRIVER_KEYS {
            let Some(rest) = key.strip_prefix(prefix) else {
                continue;
            };
            let Some((name, last)) = rest.rsplit_once('.') else {
                continue;
            };
            let mut push = |k: String, v: &str| {
                if !out.iter().any(|(have, _)| *have == k) {
                    out.push((k, v.to_owned()));
                }
            };
            // Keys are case-insensitive but for the subsection (the driver's name).
            if suffixes.iter().any(|s| s.eq_ignore_ascii_case(last)) {
                match *prefix {
                    // A configured hook (git 2.54+) is turned off, not emptied.
                    "hook." => push(format!("hook.{name}.enabled"), "false"),
                    "filter." => {
                        push(format!("{prefix}{name}.{last}"), "");
                        push(format!("filter.{name}.required"), "false");
                    }
                    _ => push(format!("{prefix}{name}.{last}"), ""),
                }
            }
        }
    }
    out
}

/// Whether `dir` holds what git needs to call it a git directory.
fn looks_like_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && (dir.join("objects").is_dir() || dir.join("commondir").is_file())
}

fn canonical(p: &Path) -> Result<PathBuf, GitError> {
    std::fs::canonicalize(p)
        .map_err(|e| GitError::NotOwn(format!("cannot resolve {}: {e}", p.display())))
}

/// Writes `bytes` to `path` by renaming a new file over it (a link there is replaced, never
/// written through).
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".intendant-restore-{}", std::process::id()));
    let tmp = dir.join(name);
    let _ = std::fs::remove_file(&tmp);
    std::fs::write(&tmp, bytes)?;
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.is_dir()
    {
        crate::remove_tree::remove_tree(path)?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
#[path = "git/tests.rs"]
pub(crate) mod tests;

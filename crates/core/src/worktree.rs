//! Git worktrees for sub-agent sessions: a child that works in `worktree` isolation gets its own
//! checkout on a new branch from the parent's `HEAD`, under the state root, so siblings never
//! edit the same files and the parent merges their branches when they report back.
//!
//! [`prepare`] makes the worktree (or says why the project cannot have one, so the child runs
//! `shared` with a warning); [`Worktree::finish`] ends it: a clean worktree is removed and its
//! branch kept only when it has commits; a dirty one is kept and reported, never thrown away.
//!
//! git runs under the one child supervisor ([`crate::child`]) with a bounded output and a
//! deadline, with every `GIT_*` variable of the controller's environment removed, so a variable
//! cannot point it at another repository.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::child::{self, ChildSpec, Ending, Limits, Overflow};

/// Directory under the state root holding the worktrees, one per session id.
pub const WORKTREES_DIR: &str = "worktrees";
/// Prefix of the branches sub-agents work on: `intendant/<session id>`.
pub const BRANCH_PREFIX: &str = "intendant/";
/// Longest a git command may take.
const GIT_DEADLINE: Duration = Duration::from_secs(120);
/// Most output kept from a git command.
const GIT_OUTPUT: usize = 1024 * 1024;

/// A git command that could not run or failed.
#[derive(Debug, Error)]
pub enum WorktreeError {
    /// git could not be started (not installed?).
    #[error("cannot run git: {0}")]
    Spawn(#[source] std::io::Error),
    /// git ran and failed.
    #[error("`git {command}` failed: {stderr}")]
    Git {
        /// The subcommand and its arguments.
        command: String,
        /// The end of its stderr (or how it ended).
        stderr: String,
    },
    /// The state root's worktree directory could not be made.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What isolation a child gets.
#[derive(Debug)]
pub enum Prepared {
    /// Its own worktree.
    Worktree(Worktree),
    /// The parent's directory, shared; `reason` says why no worktree (shown as a warning).
    Shared {
        /// Why the child shares the parent's directory.
        reason: String,
    },
}

/// One child's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The checkout (the child's working directory and sandbox write root).
    pub path: PathBuf,
    /// The branch it works on.
    pub branch: String,
    /// The commit it started from (the parent's `HEAD`).
    pub base: String,
    /// The repository's common git directory (`.git` of the main checkout): commits made in the
    /// worktree write their objects there, so the child's sandbox must be able to write it.
    pub git_common_dir: PathBuf,
    /// The main checkout the worktree belongs to.
    pub repo: PathBuf,
}

/// How a worktree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The worktree was clean and is removed; its branch is kept when it has commits.
    Removed {
        /// The branch and its commit count beyond the base, when kept.
        kept_branch: Option<(String, u32)>,
    },
    /// The worktree has uncommitted changes: kept as it is, for the human or the parent.
    KeptDirty {
        /// The checkout.
        path: PathBuf,
        /// Its branch.
        branch: String,
    },
}

/// Makes a worktree for session `session_id` from the `HEAD` of the repository holding
/// `project`, on the new branch `intendant/<session_id>`, at `<state_root>/worktrees/<id>`.
/// A project that is not in a git repository (or whose repository has no commit yet) gets
/// [`Prepared::Shared`].
pub async fn prepare(
    project: &Path,
    state_root: &Path,
    session_id: &str,
) -> Result<Prepared, WorktreeError> {
    let repo = match git(project, &["rev-parse", "--show-toplevel"]).await {
        Ok(out) => PathBuf::from(out.trim()),
        Err(WorktreeError::Git { .. }) => {
            return Ok(Prepared::Shared {
                reason: format!(
                    "{} is not in a git repository: the child shares its directory",
                    project.display()
                ),
            });
        }
        Err(e) => return Err(e),
    };
    let base = match git(&repo, &["rev-parse", "--verify", "HEAD^{commit}"]).await {
        Ok(out) => out.trim().to_owned(),
        Err(WorktreeError::Git { .. }) => {
            return Ok(Prepared::Shared {
                reason: format!(
                    "the repository at {} has no commit yet: the child shares its directory",
                    repo.display()
                ),
            });
        }
        Err(e) => return Err(e),
    };
    let common = git(&repo, &["rev-parse", "--git-common-dir"]).await?;
    let git_common_dir = absolute(&repo, common.trim());
    let dir = state_root.join(WORKTREES_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| WorktreeError::Dir {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(session_id);
    let branch = format!("{BRANCH_PREFIX}{session_id}");
    let path_arg = path.to_string_lossy().into_owned();
    git(
        &repo,
        &[
            "worktree", "add", "--quiet", "-b", &branch, &path_arg, &base,
        ],
    )
    .await?;
    Ok(Prepared::Worktree(Worktree {
        path,
        branch,
        base,
        git_common_dir,
        repo,
    }))
}

impl Worktree {
    /// Ends the worktree: removed when clean (its branch deleted unless it has commits beyond
    /// the base), kept as it is when it has uncommitted changes.
    pub async fn finish(&self) -> Result<Finished, WorktreeError> {
        let status = git(&self.path, &["status", "--porcelain"]).await?;
        if !status.trim().is_empty() {
            return Ok(Finished::KeptDirty {
                path: self.path.clone(),
                branch: self.branch.clone(),
            });
        }
        let range = format!("{}..{}", self.base, self.branch);
        let count = git(&self.repo, &["rev-list", "--count", &range]).await?;
        let commits: u32 = count.trim().parse().unwrap_or(0);
        let path_arg = self.path.to_string_lossy().into_owned();
        git(&self.repo, &["worktree", "remove", &path_arg]).await?;
        if commits == 0 {
            git(&self.repo, &["branch", "-D", "--quiet", &self.branch]).await?;
            Ok(Finished::Removed { kept_branch: None })
        } else {
            Ok(Finished::Removed {
                kept_branch: Some((self.branch.clone(), commits)),
            })
        }
    }
}

fn absolute(base: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// git's environment: `vars` without any `GIT_*` variable (none may point git at another
/// repository or change what it writes), and never a credential prompt.
fn git_env(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    vars.filter(|(k, _)| !k.to_string_lossy().starts_with("GIT_"))
        .chain([("GIT_TERMINAL_PROMPT".into(), "0".into())])
        .collect()
}

/// Runs `git ARGS` in `cwd`; its stdout, or the failure with the end of its stderr.
async fn git(cwd: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let spec = ChildSpec {
        program: PathBuf::from("git"),
        args: args.iter().map(OsString::from).collect(),
        env: git_env(std::env::vars_os()),
        cwd: cwd.to_path_buf(),
        stdin: Vec::new(),
    };
    let limits = Limits {
        max_stdout: GIT_OUTPUT,
        stdout_overflow: Overflow::Stop,
        max_stderr: GIT_OUTPUT,
        stderr_tail: 4096,
        deadline: Some(GIT_DEADLINE),
        grace: Duration::from_secs(2),
        drain: Duration::from_secs(2),
    };
    let report = child::run(spec, limits, std::future::pending())
        .await
        .map_err(WorktreeError::Spawn)?;
    let command = args.join(" ");
    match report.ending {
        Ending::Exited(Some(0)) => Ok(String::from_utf8_lossy(&report.stdout.bytes).into_owned()),
        Ending::Exited(code) => Err(WorktreeError::Git {
            command,
            stderr: match report.stderr_tail.trim() {
                "" => format!("exit status {code:?}"),
                tail => tail.to_owned(),
            },
        }),
        Ending::TimedOut => Err(WorktreeError::Git {
            command,
            stderr: format!("no answer within {GIT_DEADLINE:?}"),
        }),
        Ending::Cancelled | Ending::OutputTooLarge => Err(WorktreeError::Git {
            command,
            stderr: "stopped (output too large)".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let status = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q -b main && echo one > a.txt && git add a.txt && git commit -q -m one",
        );
        dir
    }

    async fn worktree(project: &Path, state: &Path, id: &str) -> Worktree {
        match prepare(project, state, id).await.unwrap() {
            Prepared::Worktree(w) => w,
            Prepared::Shared { reason } => panic!("shared: {reason}"),
        }
    }

    #[tokio::test]
    async fn a_child_gets_its_own_branch_from_head() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        assert_eq!(w.path, state.path().join("worktrees/s1"));
        assert_eq!(w.branch, "intendant/s1");
        assert_eq!(
            std::fs::read_to_string(w.path.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(w.git_common_dir.ends_with(".git"), "{w:?}");
        // A sibling is a separate checkout: an edit in one does not show in the other.
        let sibling = worktree(project.path(), state.path(), "s2").await;
        std::fs::write(w.path.join("a.txt"), "changed\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(sibling.path.join("a.txt")).unwrap(),
            "one\n"
        );
    }

    #[tokio::test]
    async fn clean_without_commits_is_removed_with_its_branch() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        assert_eq!(
            w.finish().await.unwrap(),
            Finished::Removed { kept_branch: None }
        );
        assert!(!w.path.exists());
        let branches = git(project.path(), &["branch", "--list", "intendant/*"])
            .await
            .unwrap();
        assert!(branches.trim().is_empty(), "{branches}");
    }

    #[tokio::test]
    async fn clean_with_commits_keeps_the_branch_for_the_parent_to_merge() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        sh(
            &w.path,
            "echo two > b.txt && git add b.txt && git commit -q -m two",
        );
        assert_eq!(
            w.finish().await.unwrap(),
            Finished::Removed {
                kept_branch: Some(("intendant/s1".to_owned(), 1))
            }
        );
        assert!(!w.path.exists());
        sh(project.path(), "git merge -q --no-edit intendant/s1");
        assert_eq!(
            std::fs::read_to_string(project.path().join("b.txt")).unwrap(),
            "two\n"
        );
    }

    #[tokio::test]
    async fn dirty_is_kept_and_reported() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        std::fs::write(w.path.join("new.txt"), "unsaved").unwrap();
        assert_eq!(
            w.finish().await.unwrap(),
            Finished::KeptDirty {
                path: w.path.clone(),
                branch: w.branch.clone()
            }
        );
        assert_eq!(
            std::fs::read_to_string(w.path.join("new.txt")).unwrap(),
            "unsaved"
        );
    }

    #[tokio::test]
    async fn no_repository_or_no_commit_means_shared() {
        let plain = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        match prepare(plain.path(), state.path(), "s1").await.unwrap() {
            Prepared::Shared { reason } => assert!(reason.contains("not in a git"), "{reason}"),
            Prepared::Worktree(w) => panic!("a worktree outside any repository: {w:?}"),
        }
        let empty = tempfile::tempdir().unwrap();
        sh(empty.path(), "git init -q");
        match prepare(empty.path(), state.path(), "s2").await.unwrap() {
            Prepared::Shared { reason } => assert!(reason.contains("no commit"), "{reason}"),
            Prepared::Worktree(w) => panic!("a worktree without a commit: {w:?}"),
        }
        assert!(!state.path().join("worktrees").exists());
    }

    #[test]
    fn no_git_variable_reaches_git() {
        let env = git_env(
            [
                ("GIT_DIR", "/elsewhere/.git"),
                ("GIT_WORK_TREE", "/elsewhere"),
                ("PATH", "/usr/bin"),
            ]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .into_iter(),
        );
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["PATH", "GIT_TERMINAL_PROMPT"]);
    }
}

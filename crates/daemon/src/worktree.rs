//! Git worktrees for sub-agent sessions: a child that works in `worktree` isolation gets its own
//! checkout on a new branch from the parent's `HEAD`, under the state root, so siblings never
//! edit the same files and the parent merges their branches when they report back.
//!
//! [`prepare`] makes the worktree (or says why the project cannot have one, so the child runs
//! `shared` with a warning); [`Worktree::finish`] ends it: a clean worktree is removed and its
//! branch kept only when it has commits; a dirty one is kept and reported, never thrown away.
//!
//! Every git call goes through [`intendant_core::git::GitRepo`]: against the parent's repository as it
//! was resolved when the parent started, and for the worktree itself as it was made, so a
//! pointer a command rewrote is refused, never followed, and no hook, fsmonitor or filter runs.
//!
//! The branch is `intendant/<name>/work`, alone in its directory of `refs/heads`, so the child's
//! sandbox can be given that directory (where git writes the ref's lock and the ref) without
//! any other ref: [`Worktree::write_roots`].

use std::path::{Path, PathBuf};

use intendant_core::git::{GitError, GitRepo};
use intendant_core::session_log::{SessionLog, SessionMeta};
use intendant_protocol::daemon::WorktreeInfo;
use thiserror::Error;

/// Directory under the state root holding the worktrees, one per session id.
pub const WORKTREES_DIR: &str = "worktrees";
/// Prefix of the branches sub-agents work on: `intendant/<name>/work`.
pub const BRANCH_PREFIX: &str = "intendant/";
/// Last component of a sub-agent's branch (its own directory of refs holds only it).
pub const BRANCH_LEAF: &str = "work";

/// Why the records of session `meta` must stay whatever their age: it worked in a worktree of
/// the state root that is still there (kept dirty, or not yet merged and removed), which they
/// explain. `None` when it did not, or that worktree is gone.
pub fn still_there(state_root: &Path, meta: &SessionMeta) -> Option<String> {
    let dir = &meta.project_root;
    (dir.starts_with(state_root.join(WORKTREES_DIR)) && dir.exists())
        .then(|| format!("its worktree {} is still there", dir.display()))
}

/// A worktree that could not be made or ended.
#[derive(Debug, Error)]
pub enum WorktreeError {
    /// git failed or was refused.
    #[error(transparent)]
    Git(#[from] GitError),
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
    Worktree(Box<Worktree>),
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
    /// The parent's repository, as resolved when the parent started.
    pub repo: GitRepo,
    /// The worktree itself, as made.
    pub own: GitRepo,
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

/// Makes a worktree named `name` from the `HEAD` of `repo` (the parent's repository as
/// resolved at its start; `None`: not a repository), on the new branch
/// `intendant/<name>/work`, at `<state_root>/worktrees/<name>`. A parent outside any
/// repository, or in one without a commit yet, gets [`Prepared::Shared`].
pub async fn prepare(
    repo: Option<&GitRepo>,
    project: &Path,
    state_root: &Path,
    name: &str,
) -> Result<Prepared, WorktreeError> {
    let Some(repo) = repo else {
        return Ok(Prepared::Shared {
            reason: format!(
                "{} is not in a git repository: the child shares its directory",
                project.display()
            ),
        });
    };
    let base = match repo.run(&["rev-parse", "--verify", "HEAD^{commit}"]).await {
        Ok(out) => out.trim().to_owned(),
        Err(GitError::Failed { .. }) => {
            return Ok(Prepared::Shared {
                reason: format!(
                    "the repository at {} has no commit yet: the child shares its directory",
                    repo.work_tree().display()
                ),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let dir = state_root.join(WORKTREES_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| WorktreeError::Dir {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(name);
    let branch = format!("{BRANCH_PREFIX}{name}/{BRANCH_LEAF}");
    let path_arg = path.to_string_lossy().into_owned();
    repo.run(&[
        "worktree", "add", "--quiet", "-b", &branch, &path_arg, &base,
    ])
    .await?;
    let Some(own) = own_worktree(&path, repo) else {
        let _ = repo
            .run(&["worktree", "remove", "--force", &path_arg])
            .await;
        return Err(GitError::NotOwn(format!(
            "the worktree made at {} does not resolve to the repository at {}",
            path.display(),
            repo.work_tree().display()
        ))
        .into());
    };
    Ok(Prepared::Worktree(Box::new(Worktree {
        path,
        branch,
        base,
        repo: repo.clone(),
        own,
    })))
}

/// The worktree of a sub-agent being resumed: `info` as its record keeps it, `repo` its parent's
/// repository. Taken up again while it is still there (kept with uncommitted changes, or left by
/// a daemon that died); made again at its path under `state_root` when it was removed at its
/// end (clean), on its branch when that was kept for its commits, else on a new one from
/// `HEAD` as at its spawn. `None` when its path is not one of `state_root`'s worktrees. It must
/// be a worktree of `repo` at its path, on its own branch, else it is refused: its commands
/// could write its pointers. Its base is where its branch meets `repo`'s `HEAD`, so its end
/// never deletes a branch holding a commit `HEAD` lacks.
pub async fn reopen(
    info: &WorktreeInfo,
    repo: &GitRepo,
    state_root: &Path,
) -> Result<Option<Worktree>, WorktreeError> {
    let path = PathBuf::from(&info.path);
    let dir = state_root.join(WORKTREES_DIR);
    if path.parent() != Some(dir.as_path()) {
        return Ok(None);
    }
    let own_branch = path
        .file_name()
        .map(|name| format!("{BRANCH_PREFIX}{}/{BRANCH_LEAF}", name.to_string_lossy()));
    let refused = |why: &str| {
        WorktreeError::Git(GitError::NotOwn(format!(
            "{} {why}, not a worktree of the repository at {} on its own branch",
            path.display(),
            repo.work_tree().display()
        )))
    };
    if own_branch.as_deref() != Some(info.branch.as_str()) {
        return Err(refused(&format!("has branch {}", info.branch)));
    }
    if std::fs::symlink_metadata(&path).is_err() {
        made_again(&path, &info.branch, repo, &dir).await?;
    }
    let Some(own) = own_worktree(&path, repo) else {
        return Err(refused("resolves elsewhere"));
    };
    let base = repo
        .run(&["merge-base", "HEAD", &info.branch])
        .await?
        .trim()
        .to_owned();
    Ok(Some(Worktree {
        path,
        branch: info.branch.clone(),
        base,
        repo: repo.clone(),
        own,
    }))
}

/// The worktree of the sub-agent recorded as `meta`, for a resume run from the records alone (a
/// one-shot `intendant --resume`: no daemon holds its parent): [`reopen`] with its parent's
/// repository as it resolves now from the parent's recorded project, which the child could
/// never write. `None` for a session that had no worktree, or whose parent's record or
/// repository is gone.
pub async fn reopen_recorded(
    state_root: &Path,
    meta: &SessionMeta,
) -> Result<Option<Worktree>, WorktreeError> {
    let (Some(info), Some(parent)) = (&meta.worktree, &meta.parent) else {
        return Ok(None);
    };
    let Ok(parent) = intendant_core::resume::recorded(state_root, parent) else {
        return Ok(None);
    };
    let Some(repo) = GitRepo::discover(&parent.project_root)? else {
        return Ok(None);
    };
    reopen(info, &repo, state_root).await
}

/// The worktree at `path` as git resolves it, found without running git, when it is one of
/// `repo`'s and checked out at `path` itself; `None` else (a gitfile naming another
/// repository, or none).
fn own_worktree(path: &Path, repo: &GitRepo) -> Option<GitRepo> {
    let own = GitRepo::discover(path).ok().flatten()?;
    (own.common_dir() == repo.common_dir()
        && std::fs::canonicalize(path).is_ok_and(|p| p == own.work_tree()))
    .then_some(own)
}

/// Makes the worktree at `path` (in `dir`) again, on `branch` when the repository kept it, else
/// on a new `branch` from `HEAD`. What the repository still records of this worktree, its
/// directory removed by hand, is removed first, as `git worktree add` asks (this entry alone:
/// `git worktree prune` would take every other missing worktree's of the user's repository).
async fn made_again(
    path: &Path,
    branch: &str,
    repo: &GitRepo,
    dir: &Path,
) -> Result<(), WorktreeError> {
    std::fs::create_dir_all(dir).map_err(|source| WorktreeError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let path_arg = path.to_string_lossy().into_owned();
    // Refused when the repository records no worktree there: nothing to clear.
    let _ = repo
        .run(&["worktree", "remove", "--force", &path_arg])
        .await;
    let kept = repo
        .run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ])
        .await
        .is_ok();
    if kept {
        repo.run(&["worktree", "add", "--quiet", &path_arg, branch])
            .await?;
    } else {
        repo.run(&[
            "worktree", "add", "--quiet", "-b", branch, &path_arg, "HEAD",
        ])
        .await?;
    }
    Ok(())
}

impl Worktree {
    /// What the child's sandbox may write of the repository: the objects, its own git
    /// directory (index, `HEAD`, its reflog), the directory of its own branch and that
    /// branch's reflog directory. Not the other refs, `packed-refs` or other worktrees.
    pub fn write_roots(&self) -> Vec<PathBuf> {
        let common = self.repo.common_dir();
        let name = self
            .branch
            .strip_suffix(&format!("/{BRANCH_LEAF}"))
            .unwrap_or(&self.branch);
        vec![
            common.join("objects"),
            self.own.git_dir().to_path_buf(),
            common.join("refs/heads").join(name),
            common.join("logs/refs/heads").join(name),
        ]
    }

    /// What a listing and a record say of it before it ends.
    pub fn info(&self) -> WorktreeInfo {
        WorktreeInfo {
            path: self.path.display().to_string(),
            branch: self.branch.clone(),
            outcome: None,
        }
    }

    /// Ends the worktree ([`Worktree::finish`]) and says how, as a listing and a record show
    /// it: removed (and whether its branch was kept for its commits), or kept and why.
    pub async fn end(&self) -> String {
        match self.finish().await {
            Ok(Finished::Removed { kept_branch: None }) => "removed".to_owned(),
            Ok(Finished::Removed {
                kept_branch: Some((branch, commits)),
            }) => format!("removed; branch {branch} kept with {commits} commit(s)"),
            Ok(Finished::KeptDirty { path, .. }) => {
                format!("kept: uncommitted changes in {}", path.display())
            }
            Err(e) => format!("kept: {e}"),
        }
    }

    /// [`Worktree::end`], the outcome written to the session's record `log` too.
    pub async fn end_recorded(&self, log: &SessionLog) -> String {
        let outcome = self.end().await;
        let _ = log.update_meta(|m| {
            if let Some(info) = &mut m.worktree {
                info.outcome = Some(outcome.clone());
            }
        });
        outcome
    }

    /// Ends the worktree: removed when clean (its branch deleted unless it has commits beyond
    /// the base), kept as it is when it has uncommitted changes.
    pub async fn finish(&self) -> Result<Finished, WorktreeError> {
        let status = self.own.run(&["status", "--porcelain"]).await?;
        if !status.trim().is_empty() {
            return Ok(Finished::KeptDirty {
                path: self.path.clone(),
                branch: self.branch.clone(),
            });
        }
        let range = format!("{}..{}", self.base, self.branch);
        let count = self.repo.run(&["rev-list", "--count", &range]).await?;
        let commits: u32 = count.trim().parse().unwrap_or(0);
        let path_arg = self.path.to_string_lossy().into_owned();
        self.repo.run(&["worktree", "remove", &path_arg]).await?;
        if commits == 0 {
            self.repo
                .run(&["branch", "-D", "--quiet", &self.branch])
                .await?;
            Ok(Finished::Removed { kept_branch: None })
        } else {
            Ok(Finished::Removed {
                kept_branch: Some((self.branch.clone(), commits)),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `script` in `dir` under `sh`, with a git identity; panics if it fails.
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

    /// A repository on `main` with one commit.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q -b main && echo one > a.txt && git add a.txt && git commit -q -m one",
        );
        dir
    }

    async fn prepared(project: &Path, state: &Path, id: &str) -> Prepared {
        let repo = GitRepo::discover(project).unwrap();
        prepare(repo.as_ref(), project, state, id).await.unwrap()
    }

    async fn worktree(project: &Path, state: &Path, id: &str) -> Worktree {
        match prepared(project, state, id).await {
            Prepared::Worktree(w) => *w,
            Prepared::Shared { reason } => panic!("shared: {reason}"),
        }
    }

    #[tokio::test]
    async fn a_child_gets_its_own_branch_from_head() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        assert_eq!(w.path, state.path().join("worktrees/s1"));
        assert_eq!(w.branch, "intendant/s1/work");
        assert_eq!(
            std::fs::read_to_string(w.path.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(w.repo.common_dir().ends_with(".git"), "{w:?}");
        assert_eq!(w.own.common_dir(), w.repo.common_dir());
        // A sibling is a separate checkout: an edit in one does not show in the other.
        let sibling = worktree(project.path(), state.path(), "s2").await;
        std::fs::write(w.path.join("a.txt"), "changed\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(sibling.path.join("a.txt")).unwrap(),
            "one\n"
        );
    }

    #[tokio::test]
    async fn a_kept_worktree_is_taken_up_again_only_as_its_own_repositorys_on_its_own_branch() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        sh(
            &w.path,
            "echo two > b.txt && git add b.txt && git commit -q -m two",
        );
        let info = |branch: &str| WorktreeInfo {
            path: w.path.display().to_string(),
            branch: branch.to_owned(),
            outcome: Some("kept: uncommitted changes".into()),
        };
        let reopened = |info: WorktreeInfo| {
            let (repo, state) = (w.repo.clone(), state.path().to_path_buf());
            async move { reopen(&info, &repo, &state).await }
        };
        let again = reopened(info("intendant/s1/work")).await.unwrap().unwrap();
        assert_eq!(again.write_roots(), w.write_roots());
        // Its base is where its branch meets HEAD: its commit is counted, its branch kept.
        assert_eq!(again.base, w.base);
        // Another branch than its own, in its record or not, is refused.
        let other = reopened(info("main")).await.unwrap_err();
        assert!(other.to_string().contains("has branch main"), "{other}");
        // A gitfile its commands pointed at another repository's worktree is refused.
        let own_gitfile = std::fs::read_to_string(w.path.join(".git")).unwrap();
        let elsewhere = repo();
        let foreign = worktree(elsewhere.path(), state.path(), "s9").await;
        let gitfile = std::fs::read_to_string(foreign.path.join(".git")).unwrap();
        std::fs::write(w.path.join(".git"), gitfile).unwrap();
        let moved = reopened(info("intendant/s1/work")).await.unwrap_err();
        assert!(moved.to_string().contains("resolves elsewhere"), "{moved}");
        std::fs::write(w.path.join(".git"), own_gitfile).unwrap();

        // Removed (as a clean one is at its end): made again on its branch, its commit there.
        let path = w.path.to_string_lossy().into_owned();
        w.repo.run(&["worktree", "remove", &path]).await.unwrap();
        let made = reopened(info("intendant/s1/work")).await.unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(made.path.join("b.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(made.base, w.base);
        // Its branch deleted too (it had no commits): made again from HEAD.
        w.repo.run(&["worktree", "remove", &path]).await.unwrap();
        w.repo
            .run(&["branch", "-D", "--quiet", "intendant/s1/work"])
            .await
            .unwrap();
        let fresh = reopened(info("intendant/s1/work")).await.unwrap().unwrap();
        assert!(fresh.path.join("a.txt").exists() && !fresh.path.join("b.txt").exists());
        // Removed by hand, its administrative files left: they are cleared, then it is made
        // again; another worktree of the repository missing the same way keeps its own.
        let sibling = worktree(project.path(), state.path(), "s2").await;
        std::fs::remove_dir_all(&sibling.path).unwrap();
        std::fs::remove_dir_all(&w.path).unwrap();
        assert!(reopened(info("intendant/s1/work")).await.unwrap().is_some());
        let listed = w
            .repo
            .run(&["worktree", "list", "--porcelain"])
            .await
            .unwrap();
        assert!(
            listed.contains(&sibling.path.display().to_string()),
            "{listed}"
        );
        // A path that is not one of the state root's worktrees is never made.
        let mut outside = info("intendant/s1/work");
        outside.path = project.path().join("gone").display().to_string();
        assert!(reopened(outside).await.unwrap().is_none());
        assert!(!project.path().join("gone").exists());
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
        let branches = w
            .repo
            .run(&["branch", "--list", "intendant/*"])
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
                kept_branch: Some(("intendant/s1/work".to_owned(), 1))
            }
        );
        assert!(!w.path.exists());
        sh(project.path(), "git merge -q --no-edit intendant/s1/work");
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
        match prepared(plain.path(), state.path(), "s1").await {
            Prepared::Shared { reason } => assert!(reason.contains("not in a git"), "{reason}"),
            Prepared::Worktree(w) => panic!("a worktree outside any repository: {w:?}"),
        }
        let empty = tempfile::tempdir().unwrap();
        sh(empty.path(), "git init -q");
        match prepared(empty.path(), state.path(), "s2").await {
            Prepared::Shared { reason } => assert!(reason.contains("no commit"), "{reason}"),
            Prepared::Worktree(w) => panic!("a worktree without a commit: {w:?}"),
        }
        assert!(!state.path().join("worktrees").exists());
    }

    #[tokio::test]
    async fn the_write_roots_hold_no_other_ref() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        let common = w.repo.common_dir().to_path_buf();
        let roots = w.write_roots();
        assert_eq!(
            roots,
            [
                common.join("objects"),
                common.join("worktrees/s1"),
                common.join("refs/heads/intendant/s1"),
                common.join("logs/refs/heads/intendant/s1"),
            ]
        );
        // The branch is alone in its directory: the ref and its lock live there.
        let refs: Vec<_> = std::fs::read_dir(common.join("refs/heads/intendant/s1"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(refs, ["work"]);
        assert!(common.join("logs/refs/heads/intendant/s1/work").is_file());
    }

    #[tokio::test]
    async fn a_rewritten_gitfile_is_refused_and_the_worktree_kept() {
        let project = repo();
        let state = tempfile::tempdir().unwrap();
        let w = worktree(project.path(), state.path(), "s1").await;
        let evil = tempfile::tempdir().unwrap();
        sh(evil.path(), "git init -q");
        std::fs::write(
            w.path.join(".git"),
            format!("gitdir: {}\n", evil.path().join(".git").display()),
        )
        .unwrap();
        let err = w.finish().await.unwrap_err();
        assert!(
            err.to_string()
                .contains("changed since the session started"),
            "{err}"
        );
        assert!(w.path.exists(), "kept, never removed through the pointer");
    }
}

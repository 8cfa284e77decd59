use super::*;

/// Runs `script` in `dir` with a git identity; it must succeed.
pub(crate) fn sh(dir: &Path, script: &str) {
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
pub(crate) fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sh(
        dir.path(),
        "git init -q -b main && echo one > a.txt && git add a.txt && git commit -q -m one",
    );
    dir
}

/// A script at `dir/name` that touches `marker` when run, and its path.
fn trap(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\ntouch {}\ncat\n", marker.display()),
    )
    .unwrap();
    sh(dir, &format!("chmod +x {name}"));
    path
}

fn discover(p: &Path) -> GitRepo {
    GitRepo::discover(p).unwrap().expect("a repository")
}

#[test]
fn discovery_finds_the_nearest_repository_without_running_git() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    let repo = discover(&root.join("sub/deeper"));
    assert_eq!(repo.work_tree(), root);
    assert_eq!(repo.git_dir(), root.join(".git"));
    assert_eq!(repo.common_dir(), root.join(".git"));
    assert!(repo.notes().is_empty());
    let plain = tempfile::tempdir().unwrap();
    assert_eq!(GitRepo::discover(plain.path()).unwrap(), None);
}

#[tokio::test]
async fn hooks_fsmonitor_filters_and_the_pager_never_run() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    let traps = tempfile::tempdir().unwrap();
    let marker = traps.path().join("ran");
    let script = trap(traps.path(), "evil", &marker);
    let s = script.display();
    sh(
        &root,
        &format!(
            "git config core.fsmonitor {s} && git config core.hooksPath {t} && \
             git config filter.evil.clean {s} && git config filter.evil.smudge {s} && \
             git config filter.evil.required true && git config diff.evil.textconv {s} && \
             git config core.pager {s} && \
             cp {s} .git/hooks/post-checkout && cp {s} .git/hooks/reference-transaction && \
             echo '* filter=evil diff=evil' > .gitattributes && \
             git -c core.fsmonitor=false -c filter.evil.clean=cat -c filter.evil.smudge=cat \
               -c core.hooksPath=/dev/null add .gitattributes && \
             git -c core.fsmonitor=false -c filter.evil.clean=cat -c core.hooksPath=/dev/null \
               commit -qm attrs",
            t = traps.path().display()
        ),
    );
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    let repo = discover(&root);
    let status = repo.run(&["status", "--porcelain"]).await;
    let wt = traps.path().join("wt");
    let wt_arg = wt.display().to_string();
    let add = repo
        .run(&["worktree", "add", "--quiet", "-b", "x/y", &wt_arg, "HEAD"])
        .await;
    assert!(status.unwrap().contains("a.txt"));
    add.unwrap();
    assert!(wt.join("a.txt").is_file(), "checked out without the filter");
    assert!(!marker.exists(), "a configured program ran");
}

/// The attack on the listing: a configuration too large to list, so that a filter it names
/// would not be turned off. git is refused, and the filter never runs.
#[tokio::test]
async fn a_configuration_that_cannot_be_listed_refuses_git() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    let traps = tempfile::tempdir().unwrap();
    let marker = traps.path().join("ran");
    let script = trap(traps.path(), "evil", &marker);
    // Each entry lists as about 64 bytes: twice the most a listing may hold.
    let padding: String = std::iter::once("[pad]\n".to_owned())
        .chain((0..GIT_OUTPUT / 32).map(|i| format!("\tk{i:08} = {}\n", "x".repeat(48))))
        .collect();
    std::fs::write(traps.path().join("padding"), padding).unwrap();
    sh(
        &root,
        &format!(
            "git config include.path {p} && git config filter.evil.clean {s} && \
             git config filter.evil.required true && echo '* filter=evil' > .gitattributes",
            p = traps.path().join("padding").display(),
            s = script.display()
        ),
    );
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    let err = discover(&root).run(&["add", "a.txt"]).await.unwrap_err();
    assert!(matches!(err, GitError::ConfigUnlisted(_)), "{err}");
    assert!(!marker.exists(), "a configured program ran");
}

#[tokio::test]
async fn a_changed_pointer_is_refused_then_restored() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    let repo = discover(&root);
    let evil = tempfile::tempdir().unwrap();
    std::fs::write(
        root.join(".git/commondir"),
        evil.path().display().to_string(),
    )
    .unwrap();
    let err = repo.run(&["status", "--porcelain"]).await.unwrap_err();
    assert!(
        matches!(&err, GitError::PointerChanged { path, .. } if path.ends_with(".git/commondir")),
        "{err}"
    );
    assert!(err.to_string().contains("did not exist"), "{err}");
    let warnings = repo.restore();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("restored"), "{warnings:?}");
    assert!(!root.join(".git/commondir").exists());
    repo.run(&["status", "--porcelain"]).await.unwrap();
    assert!(repo.restore().is_empty());
}

/// In a repository with `extensions.worktreeConfig` set and no `config.worktree` yet (which the
/// sandbox cannot keep read-only: it does not exist), a command that writes one naming an
/// fsmonitor would have the user's own `git status` run it: it is removed after the batch, and
/// the controller's git refuses to run while it is there.
#[tokio::test]
async fn a_planted_config_worktree_is_refused_then_removed() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    sh(&root, "git config extensions.worktreeConfig true");
    let repo = discover(&root);
    let planted = root.join(".git/config.worktree");
    std::fs::write(&planted, "[core]\n\tfsmonitor = \"touch /tmp/never\"\n").unwrap();
    let err = repo.run(&["status", "--porcelain"]).await.unwrap_err();
    assert!(
        matches!(&err, GitError::PointerChanged { path, .. } if path.ends_with(".git/config.worktree")),
        "{err}"
    );
    let warnings = repo.restore();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(!planted.exists());
    repo.run(&["status", "--porcelain"]).await.unwrap();
    // The same in the entry of a worktree the user made, which their `git status` there reads.
    let place = tempfile::tempdir().unwrap();
    let wt = std::fs::canonicalize(place.path()).unwrap().join("wt");
    sh(&root, &format!("git worktree add -q -b w {}", wt.display()));
    let repo = discover(&root);
    let theirs = root.join(".git/worktrees/wt/config.worktree");
    std::fs::write(&theirs, "[core]\n\tfsmonitor = \"touch /tmp/never\"\n").unwrap();
    assert_eq!(repo.restore().len(), 1);
    assert!(!theirs.exists());
    // One the user keeps is left alone (the sandbox keeps it read-only for the session).
    std::fs::write(&planted, "[core]\n\tautocrlf = false\n").unwrap();
    let kept = discover(&root);
    assert!(kept.restore().is_empty());
    assert!(planted.exists());
}

/// A repository and a linked worktree of it, `wt` on branch `w` (canonical paths): the
/// temporary directories that hold them, the repository's root, the worktree.
fn linked_worktree() -> ((tempfile::TempDir, tempfile::TempDir), PathBuf, PathBuf) {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    let place = tempfile::tempdir().unwrap();
    let wt = std::fs::canonicalize(place.path()).unwrap().join("wt");
    sh(&root, &format!("git worktree add -q -b w {}", wt.display()));
    ((project, place), root, wt)
}

#[tokio::test]
async fn a_linked_worktree_records_its_gitfile_and_a_rewritten_one_is_put_back() {
    let (_dirs, root, wt) = linked_worktree();
    let repo = discover(&wt);
    assert_eq!(repo.work_tree(), wt);
    assert_eq!(repo.common_dir(), root.join(".git"));
    assert_eq!(repo.git_dir(), root.join(".git/worktrees/wt"));
    let original = std::fs::read(wt.join(".git")).unwrap();
    // The attack: the gitfile now points at a repository the command made.
    let evil = tempfile::tempdir().unwrap();
    sh(evil.path(), "git init -q");
    std::fs::remove_file(wt.join(".git")).unwrap();
    std::os::unix::fs::symlink(evil.path().join(".git"), wt.join(".git")).unwrap();
    assert!(matches!(
        repo.run(&["status"]).await,
        Err(GitError::PointerChanged { .. })
    ));
    assert_eq!(repo.restore().len(), 1);
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), original);
    repo.run(&["status", "--porcelain"]).await.unwrap();
}

#[test]
fn a_gitfile_into_a_foreign_worktree_entry_is_not_this_projects() {
    let (_dirs, root, _) = linked_worktree();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join(".git"),
        format!("gitdir: {}\n", root.join(".git/worktrees/wt").display()),
    )
    .unwrap();
    let err = GitRepo::discover(other.path()).unwrap_err();
    assert!(
        err.to_string().contains("does not name this worktree"),
        "{err}"
    );
    std::fs::write(other.path().join(".git"), "nonsense").unwrap();
    assert!(GitRepo::discover(other.path()).is_err());
}

#[test]
fn a_planted_commondir_in_a_git_directory_is_noted() {
    let project = repo();
    std::fs::write(project.path().join(".git/commondir"), "/elsewhere").unwrap();
    let repo = discover(project.path());
    assert_eq!(repo.notes().len(), 1, "{:?}", repo.notes());
    assert!(repo.notes()[0].contains("commondir"));
}

#[test]
fn no_git_variable_of_the_controller_reaches_git_and_overrides_are_numbered() {
    let project = repo();
    let repo = discover(project.path());
    let env = repo.env(
        [
            ("GIT_DIR", "/elsewhere/.git"),
            ("GIT_CONFIG_GLOBAL", "/elsewhere/config"),
            ("PATH", "/usr/bin"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .into_iter(),
        &[("filter.a=b.smudge".to_owned(), String::new())],
    );
    let get = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(
        get("GIT_DIR").unwrap(),
        repo.git_dir().display().to_string()
    );
    assert_eq!(get("GIT_CONFIG_GLOBAL"), None);
    assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
    let count: usize = get("GIT_CONFIG_COUNT").unwrap().parse().unwrap();
    assert_eq!(count, FIXED_CONFIG.len() + 1);
    assert_eq!(
        get(&format!("GIT_CONFIG_KEY_{}", count - 1)).as_deref(),
        Some("filter.a=b.smudge")
    );
}

#[test]
fn every_driver_program_is_overridden() {
    let listing = "filter.lfs.smudge\ngit-lfs smudge\0filter.lfs.process\ngit-lfs\0\
                   diff.pdf.textconv\npdftotext\0merge.ours.driver\ntrue\0core.bare\nfalse\0\
                   filter.x.y.clean\nrm\0hook.lint.command\nlint\0hook.lint.event\npre-commit\0";
    let got = driver_overrides(listing);
    for key in [
        "filter.lfs.smudge",
        "filter.lfs.process",
        "filter.lfs.required",
        "diff.pdf.textconv",
        "merge.ours.driver",
        "filter.x.y.clean",
        "hook.lint.enabled",
    ] {
        assert!(got.iter().any(|(k, _)| k == key), "{key}: {got:?}");
    }
    assert!(!got.iter().any(|(k, _)| k == "core.bare"));
    assert!(
        got.contains(&("hook.lint.enabled".to_owned(), "false".to_owned()))
            && !got.iter().any(|(k, _)| k == "hook.lint.command"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_git_directory_replaced_by_a_gitfile_is_refused_and_said() {
    let project = repo();
    let root = std::fs::canonicalize(project.path()).unwrap();
    let repo = discover(&root);
    std::fs::rename(root.join(".git"), root.join("moved.git")).unwrap();
    std::fs::write(root.join(".git"), "gitdir: /tmp/evil\n").unwrap();
    let err = repo.run(&["status"]).await.unwrap_err();
    assert!(
        err.to_string().contains("was the repository's directory"),
        "{err}"
    );
    let warnings = repo.restore();
    assert!(warnings[0].contains("cannot be restored"), "{warnings:?}");
}

#[test]
fn a_gitfile_a_command_replaced_by_a_directory_however_deep_is_put_back() {
    let (_dirs, _, wt) = linked_worktree();
    let repo = discover(&wt);
    let original = std::fs::read(wt.join(".git")).unwrap();
    // The gitfile, now a chain of directories deeper than the standard library's removal can
    // take on a worker's stack (it aborted the process).
    std::fs::remove_file(wt.join(".git")).unwrap();
    std::fs::create_dir(wt.join(".git")).unwrap();
    crate::remove_tree::chain(&wt.join(".git"), 30_000);
    let warnings = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || repo.restore())
        .unwrap()
        .join()
        .unwrap();
    // Whatever happened, nothing deep is left for the temporary directory's own removal.
    if std::fs::symlink_metadata(wt.join(".git")).is_ok_and(|m| m.is_dir()) {
        crate::remove_tree::remove_tree(&wt.join(".git")).unwrap();
    }
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("restored"), "{warnings:?}");
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), original);
}

#[test]
fn git_files_a_command_made_fifos_or_large_are_refused_without_waiting_or_reading_them() {
    let (_dirs, root, wt) = linked_worktree();
    let git_dir = root.join(".git/worktrees/wt");
    let fifo = |path: &Path| {
        let _ = std::fs::remove_file(path);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    };
    // Each on a thread of its own: opening a FIFO no one writes waited for good before, and
    // the discovery with it.
    let discover_within = |dir: PathBuf| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(GitRepo::discover(&dir).map_err(|e| e.to_string()));
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the discovery waited on a FIFO")
    };
    // The worktree's `commondir`, a FIFO: refused, not waited on (an `objects` there, so the
    // directory still looks like a git directory and the file is read).
    let commondir = git_dir.join("commondir");
    let kept = std::fs::read(&commondir).unwrap();
    std::fs::create_dir(git_dir.join("objects")).unwrap();
    fifo(&commondir);
    let err = discover_within(wt.clone()).unwrap_err();
    assert!(err.contains("commondir is not a file"), "{err}");
    std::fs::remove_file(&commondir).unwrap();
    std::fs::remove_dir(git_dir.join("objects")).unwrap();
    std::fs::write(&commondir, kept).unwrap();
    // The gitfile, a FIFO (no repository there), then past the bound (refused, not read whole).
    let gitfile = wt.join(".git");
    let kept = std::fs::read(&gitfile).unwrap();
    fifo(&gitfile);
    assert!(discover_within(wt.clone()).unwrap().is_none());
    std::fs::remove_file(&gitfile).unwrap();
    let mut big = kept.clone();
    big.extend(std::iter::repeat_n(b'\n', 64 * 1024));
    std::fs::write(&gitfile, &big).unwrap();
    let err = discover_within(wt.clone()).unwrap_err();
    assert!(err.contains("not a file of at most 4096 bytes"), "{err}");
    std::fs::write(&gitfile, kept).unwrap();
    assert!(
        discover_within(wt.clone())
            .unwrap()
            .is_some_and(|r| r.work_tree() == wt)
    );
}

/// A git that ran before its bound took (its spawning thread preempted on a busy machine) and
/// had mapped a huge file's buffer already is seen as it is bound, to be stopped; a git that
/// holds what git needs passes.
#[test]
fn a_process_that_holds_more_than_gits_bound_when_bound_is_seen() {
    use std::io::BufRead;
    let mapped = |bytes: u64| {
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import mmap, sys\nm = mmap.mmap(-1, {bytes}, flags=mmap.MAP_PRIVATE)\n\
                     print('mapped', flush=True)\nsys.stdin.read()"
                ),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "mapped");
        let within = bound_memory(pid(Some(child.id())).unwrap());
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        (within, limits)
    };
    let (within, limits) = mapped(2 << 30);
    assert!(!within, "2 GiB held when bound");
    let data = limits
        .lines()
        .find(|l| l.starts_with("Max data size"))
        .unwrap();
    assert!(data.contains(&GIT_DATA_MAX.to_string()), "{data}");
    assert!(mapped(1 << 20).0, "1 MiB held when bound");
}

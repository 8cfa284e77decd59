//! The daemon's own git for a placed session: cloning the request's repository into the state
//! root, and pushing the session's work back as `intendant/<id>` when it ends.
//!
//! Neither runs anything the repository or a session could have planted (`docs/fleet.md`,
//! `docs/security.md`): no system or global configuration, no `GIT_*` of the daemon, hooks and
//! fsmonitor off, no submodules. The clone is fresh, so its configuration is what `git clone`
//! wrote. The push never runs in the clone, whose `.git` a session's commands could have
//! changed: a bare repository of the daemon's own fetches the clone's `HEAD` (upload-pack reads
//! no program from a repository's configuration) and pushes it from there.

use std::path::Path;
use std::process::{Command, Stdio};

/// A git run with the daemon's hardening, `args` after the fixed configuration.
fn git(args: &[&str]) -> Command {
    let mut command = Command::new("git");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GIT_") {
            command.env_remove(name);
        }
    }
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "submodule.recurse=false",
            "-c",
            "core.pager=cat",
        ])
        .args(args)
        .stdin(Stdio::null());
    command
}

/// Runs `command`, or says what git said.
fn run(what: &str, mut command: Command) -> Result<(), String> {
    let out = command
        .output()
        .map_err(|e| format!("{what}: git cannot be run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said: String = said.trim().chars().take(500).collect();
    Err(format!("{what}: {said}"))
}

/// Clones `repo` at `git_ref` (a branch or tag; the default branch when `None`) into `dir`.
pub fn clone(repo: &str, git_ref: Option<&str>, dir: &Path) -> Result<(), String> {
    let dir_text = dir.to_string_lossy();
    let mut args = vec!["clone", "--no-recurse-submodules", "--single-branch"];
    if let Some(git_ref) = git_ref {
        args.extend(["--branch", git_ref]);
    }
    args.extend(["--", repo, &dir_text]);
    run(&format!("cloning {repo}"), git(&args))
}

/// Pushes the `HEAD` of the clone `dir` to `repo` as `refs/heads/<branch>`, through the bare
/// repository `scratch` (made here, removed after).
pub fn push_back(dir: &Path, repo: &str, branch: &str, scratch: &Path) -> Result<(), String> {
    let scratch_text = scratch.to_string_lossy().into_owned();
    let dir_text = dir.to_string_lossy().into_owned();
    let result = (|| {
        run(
            "preparing the push",
            git(&["init", "--quiet", "--bare", "--", &scratch_text]),
        )?;
        let git_dir = format!("--git-dir={scratch_text}");
        run(
            "reading the session's work",
            git(&[
                &git_dir,
                "fetch",
                "--quiet",
                "--no-tags",
                "--",
                &dir_text,
                "HEAD",
            ]),
        )?;
        let refspec = format!("FETCH_HEAD:refs/heads/{branch}");
        run(
            &format!("pushing {branch} to {repo}"),
            git(&[&git_dir, "push", "--quiet", "--", repo, &refspec]),
        )
    })();
    let _ = std::fs::remove_dir_all(scratch);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }

    #[test]
    fn a_clone_runs_no_planted_hook_and_its_head_is_pushed_back() {
        let root = tempfile::tempdir().unwrap();
        let origin = root.path().join("origin.git");
        let seed = root.path().join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        sh(root.path(), &["init", "--quiet", "--bare", "origin.git"]);
        sh(&seed, &["init", "--quiet", "-b", "main"]);
        sh(
            &seed,
            &["commit", "--quiet", "--allow-empty", "-m", "first"],
        );
        sh(
            &seed,
            &["push", "--quiet", origin.to_str().unwrap(), "main"],
        );

        let clone_dir = root.path().join("work");
        clone(origin.to_str().unwrap(), Some("main"), &clone_dir).unwrap();
        // A session commits, then plants a pre-push hook and an fsmonitor.
        sh(
            &clone_dir,
            &["commit", "--quiet", "--allow-empty", "-m", "work"],
        );
        let marker = root.path().join("ran");
        let hook = clone_dir.join(".git/hooks/pre-push");
        std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        sh(
            &clone_dir,
            &["config", "core.fsmonitor", hook.to_str().unwrap()],
        );

        let scratch = root.path().join("scratch.git");
        push_back(
            &clone_dir,
            origin.to_str().unwrap(),
            "intendant/s1",
            &scratch,
        )
        .unwrap();
        let log = Command::new("git")
            .args([
                "--git-dir",
                origin.to_str().unwrap(),
                "log",
                "--format=%s",
                "intendant/s1",
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&log.stdout), "work\nfirst\n");
        assert!(!marker.exists(), "no planted program ran");
        assert!(!scratch.exists());

        let e = clone(
            origin.to_str().unwrap(),
            Some("nope"),
            &root.path().join("x"),
        )
        .unwrap_err();
        assert!(e.contains("cloning"), "{e}");
    }
}

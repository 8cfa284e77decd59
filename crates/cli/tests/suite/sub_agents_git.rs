//! The git attacks of sub-agents, end to end through a one-shot run (`intendant --json`, the
//! scripted model, the built runtime with its sandbox): a child redirects its worktree's
//! gitfile to a repository whose `core.fsmonitor` is a script; a command plants
//! `.git/commondir` pointing at a copy of `.git` with a `post-checkout` hook before the next
//! `spawn_sub_agent`; a child moves or deletes branches that are not its own. The controller's
//! own git runs none of the planted programs, the pointers are put back, and only the child's
//! branch moves.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::controller::harness::events_of;
use super::sub_agents::{GIT, call, child_script, exec, git, run_json, run_json_at, world};

/// A script at `path` that touches `marker` when anything runs it.
fn trap_script(marker: &Path) -> String {
    format!("#!/bin/sh\\ntouch {}\\n", marker.display())
}

/// Every ref of the repository at `dir` but the sub-agents' own, with its commit.
fn other_refs(dir: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["for-each-ref", "--format=%(refname) %(objectname)"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("refs/heads/intendant/"))
        .map(str::to_owned)
        .collect()
}

/// The one sub-agent branch of the repository at `dir`.
fn sub_agent_branch(dir: &Path) -> String {
    let out = Command::new("git")
        .args([
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/intendant/",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn spawn_one(task: &str) -> Value {
    json!({ "tool_calls": [{ "name": "spawn_sub_agent", "arguments": {
        "task": task, "isolation": "worktree", "autonomy": "full",
    }}]})
}

/// A parent that spawns one child on `task` in a worktree, waits for it and ends.
pub(super) fn parent_of(task: &str) -> Value {
    json!([
        spawn_one(task),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "done" })),
    ])
}

#[test]
fn a_child_redirecting_its_gitfile_never_gets_the_controllers_git_to_run_its_fsmonitor() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("fsmonitor-ran");
    let evil = marker_dir.path().join("evil");
    let plant = format!(
        "git init -q {e} && printf '{script}' > {e}/fsmon && chmod +x {e}/fsmon && \
         git -C {e} config core.fsmonitor {e}/fsmon",
        e = evil.display(),
        script = trap_script(&marker),
    );
    let redirect = format!("echo 'gitdir: {}/.git' > .git", evil.display());
    let child = json!({
        "when_task_contains": "redirect",
        "turns": [
            exec(&plant),
            exec(&redirect),
            call("submit_result", json!({ "summary": "redirected" })),
        ]
    });
    let (env, scenario) = world(parent_of("redirect the gitfile"), json!([child]));
    let mut run = run_json(&env, &scenario, "one child");
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(
        !marker.exists(),
        "the controller's git ran the fsmonitor the child planted"
    );
    let sessions = intendant_core::session_log::list_sessions(&env.intendant_home()).unwrap();
    let child = sessions
        .iter()
        .find(|s| s.parent.is_some())
        .expect("the child");
    let log = std::fs::read_to_string(env.session_dir(&child.id).join("session.jsonl")).unwrap();
    // The gitfile is read-only in the child's sandbox (the controller's git would refuse a
    // changed one, and the batch's end would put it back: `git::tests`, `worktree::tests`).
    assert!(log.contains("Read-only file system"), "{log}");
    // The worktree was clean, hence removed: the controller's git read it through its own
    // gitfile, never the planted one.
    let worktrees = env.intendant_home().join("worktrees");
    assert!(
        !worktrees.exists() || worktrees.read_dir().unwrap().next().is_none(),
        "the clean worktree was removed"
    );
}

#[test]
fn a_planted_commondir_is_not_followed_by_the_next_spawn_and_is_put_back() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("hook-ran");
    let copy = marker_dir.path().join("evilgit");
    let plant = format!(
        "cp -r .git {c} && printf '{script}' > {c}/hooks/post-checkout && \
         chmod +x {c}/hooks/post-checkout && echo {c} > .git/commondir",
        c = copy.display(),
        script = trap_script(&marker),
    );
    let parent = json!([
        exec(&plant),
        spawn_one("write a.txt and commit it"),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "done" })),
    ]);
    let (env, scenario) = world(parent, json!([child_script("a.txt")]));
    let mut run = run_json(&env, &scenario, "plant then spawn");
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(!marker.exists(), "git worktree add ran the planted hook");
    assert!(
        !env.project.path().join(".git/commondir").exists(),
        "the planted pointer was removed"
    );
    let warnings: Vec<_> = events_of(&events, "warning")
        .into_iter()
        .filter(|w| {
            w["message"]
                .as_str()
                .unwrap_or_default()
                .contains("commondir")
        })
        .collect();
    assert_eq!(warnings.len(), 1, "{events:#?}");
    // The spawn worked, from the restored repository: the child's branch holds its commit.
    let branch = sub_agent_branch(env.project.path());
    assert!(branch.ends_with("/work"), "{branch:?}");
    git(env.project.path(), &format!("merge -q --no-edit {branch}"));
    assert_eq!(
        std::fs::read_to_string(env.project.path().join("a.txt")).unwrap(),
        "a.txt\n"
    );
}

#[test]
fn a_child_can_move_no_branch_but_its_own() {
    let child = json!({
        "when_task_contains": "hijack",
        "turns": [
            exec(&format!("{GIT} commit -q --allow-empty -m evil && git branch -f main HEAD")),
            exec("git update-ref refs/heads/main HEAD"),
            exec("git branch -D keep"),
            exec("git update-ref -d refs/heads/keep"),
            exec("git pack-refs --all"),
            exec(&format!("printf 'own\\n' > own.txt && git add own.txt && {GIT} commit -qm own")),
            call("submit_result", json!({ "summary": "tried" })),
        ]
    });
    let (env, scenario) = world(parent_of("hijack the parent's branches"), json!([child]));
    git(env.project.path(), "branch keep");
    let before = other_refs(env.project.path());
    let mut run = run_json(&env, &scenario, "one child");
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert_eq!(other_refs(env.project.path()), before);
    assert!(!env.project.path().join(".git/packed-refs").exists());
    // Its own branch got both its commits and is kept for the parent to merge.
    let branch = sub_agent_branch(env.project.path());
    let count = Command::new("git")
        .args(["rev-list", "--count", &format!("main..{branch}")])
        .current_dir(env.project.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(count.stdout).unwrap(), "2\n");
}

#[test]
fn a_pointer_planted_again_in_the_background_is_removed_once_the_session_ended() {
    // A background loop plants `.git/commondir` over and over: each batch's end removes it and
    // the loop puts it back, so only the session's end (its processes killed first, then the
    // pointers restored: `containment::tests`) is final. The human's pending answer holds the
    // session open until the loop has planted it again.
    let plant = "nohup sh -c 'while :; do echo /tmp/elsewhere > .git/commondir; sleep 0.01; done' \
                 >/dev/null 2>&1 &";
    let parent = json!([
        exec(plant),
        exec("true"),
        call("signal_done", json!({ "message": "done" })),
    ]);
    let (env, scenario) = world(parent, json!([]));
    let mut run = run_json_at(&env, &scenario, "low", "plant in the background");
    let first = run.wait_for("approval_required");
    run.send(&json!({ "action": "approve", "id": first["id"] }));
    let second = run.wait_for("approval_required");
    let pointer = env.project.path().join(".git/commondir");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pointer.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the loop never planted again"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    run.send(&json!({ "action": "approve", "id": second["id"] }));
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(
        events_of(&events, "warning").iter().any(|w| w["message"]
            .as_str()
            .unwrap_or_default()
            .contains("commondir")),
        "the second batch's end removed it: {events:#?}"
    );
    assert!(!pointer.exists(), "the last planting outlived the session");
}

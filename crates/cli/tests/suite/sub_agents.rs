//! Sub-agents of a one-shot run: `intendant --json` supervises its children in its own process,
//! each in a git worktree of the project; a child's approval reaches the run's `--json` stream
//! with the child's session id and is answered on the run's stdin; stopping the run stops the
//! children. The scripted model (`--provider mock`, one script per child task) with the built
//! runtime and its sandbox.

use std::path::Path;
use std::process::Command;

use intendant_core::session_log::list_sessions;
use intendant_protocol::events::{EndStatus, RecordedStatus};
use serde_json::{Value, json};

use super::controller::harness::{JsonSession, events_of};
use super::sessions::Env;
use intendant_testkit::procs::processes_with;

/// git with an identity, as the scripted commands run it.
pub(super) const GIT: &str = "git -c user.name=agent -c user.email=agent@example.invalid";

pub(super) fn call(name: &str, arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": name, "arguments": arguments }] })
}

pub(super) fn exec(command: &str) -> Value {
    call("exec_command", json!({ "command": command }))
}

pub(super) fn git(dir: &Path, args: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{GIT} {args}"))
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args}");
}

/// An environment whose project is a git repository with one commit, and whose scripted
/// model plays `parent` for the run's own session and `scripts` for its children.
pub(super) fn world(parent: Value, scripts: Value) -> (Env, std::path::PathBuf) {
    let env = Env::new(json!([]));
    git(env.project.path(), "init -q -b main");
    std::fs::write(env.project.path().join("README"), "base\n").unwrap();
    git(env.project.path(), "add README");
    git(env.project.path(), "commit -qm base");
    let scenario = env.home.path().join("scenario.json");
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": parent, "scripts": scripts }).to_string(),
    )
    .unwrap();
    (env, scenario)
}

pub(super) fn run_json(env: &Env, scenario: &Path, task: &str) -> JsonSession {
    run_json_at(env, scenario, "full", task)
}

/// `intendant --json TASK` on the scripted model of `scenario`, at `autonomy`.
pub(super) fn run_json_at(env: &Env, scenario: &Path, autonomy: &str, task: &str) -> JsonSession {
    mock_json(env, scenario, autonomy, &[task])
}

/// `intendant --json --resume ID TEXT` on the scripted model of `scenario`, at `full`.
fn resume_json(env: &Env, scenario: &Path, id: &str, text: &str) -> JsonSession {
    mock_json(env, scenario, "full", &["--resume", id, text])
}

/// `intendant --json ARGS` on the scripted model of `scenario`, at `autonomy`.
fn mock_json(env: &Env, scenario: &Path, autonomy: &str, args: &[&str]) -> JsonSession {
    let scenario = scenario.display().to_string();
    let mut all = vec![
        "--provider",
        "mock",
        "--scenario",
        &scenario,
        "--autonomy",
        autonomy,
        "--json",
    ];
    all.extend_from_slice(args);
    JsonSession::spawn(env.command(&all))
}

/// A child's script: write `file`, commit it on the child's branch, submit.
pub(super) fn child_script(file: &str) -> Value {
    json!({
        "when_task_contains": format!("write {file}"),
        "turns": [
            exec(&format!("printf '{file}\\n' > {file} && git add {file} && {GIT} commit -qm {file}")),
            call("submit_result", json!({
                "summary": format!("wrote {file}"),
                "fields": { "file": file }
            })),
        ]
    })
}

#[test]
fn a_one_shot_run_supervises_worktree_children_and_forwards_their_approvals() {
    let spawn = |file: &str, autonomy: &str| {
        json!({ "name": "spawn_sub_agent", "arguments": {
            "task": format!("write {file} and commit it"),
            "isolation": "worktree",
            "autonomy": autonomy,
        }})
    };
    let parent = json!([
        { "tool_calls": [spawn("a.txt", "medium"), spawn("b.txt", "full")] },
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        exec(&format!(
            "{GIT} merge -q --no-edit $(git for-each-ref --format='%(refname:short)' refs/heads/intendant/)"
        )),
        call("signal_done", json!({ "message": "merged both" })),
    ]);
    let (env, scenario) = world(
        parent,
        json!([child_script("a.txt"), child_script("b.txt")]),
    );
    let mut run = run_json(&env, &scenario, "split the work");
    let started = run.wait_for("session_started");
    let top = started["session_id"].as_str().unwrap().to_owned();

    // The medium child's command waits for the run's human, labelled with the child.
    let request = run.wait_for("approval_required");
    let child = request["session_id"].as_str().unwrap().to_owned();
    assert_ne!(child, top, "the approval is the child's: {request:#}");
    assert!(
        request["command_preview"]
            .as_str()
            .unwrap()
            .contains("a.txt"),
        "{request:#}"
    );
    run.send(&json!({ "action": "approve", "id": request["id"] }));
    let resolved = run.wait_for("approval_resolved");
    assert_eq!(resolved["id"], request["id"]);
    assert_eq!(resolved["verdict"], "approve");
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert_eq!(
        events_of(&events, "session_ended").len(),
        1,
        "only the run's own"
    );

    // Both branches were merged into the project.
    for file in ["a.txt", "b.txt"] {
        assert_eq!(
            std::fs::read_to_string(env.project.path().join(file)).unwrap_or_default(),
            format!("{file}\n"),
            "{file} not merged"
        );
    }
    // Three sessions, the children's logs naming the run's session; the parent's log holds
    // both results.
    let sessions = list_sessions(&env.intendant_home()).unwrap();
    assert_eq!(sessions.len(), 3, "{sessions:#?}");
    let children: Vec<_> = sessions.iter().filter(|s| s.id != top).collect();
    for c in &children {
        assert_eq!(c.parent.as_deref(), Some(top.as_str()), "{c:#?}");
        assert_eq!(
            c.status,
            RecordedStatus::Ended(EndStatus::Completed),
            "{c:#?}"
        );
    }
    assert!(children.iter().any(|c| c.id == child));
    let parent_log = std::fs::read_to_string(env.session_dir(&top).join("session.jsonl")).unwrap();
    assert!(parent_log.contains("wrote a.txt") && parent_log.contains("wrote b.txt"));
    // The worktrees were removed by the time the run exited.
    let worktrees = env.intendant_home().join("worktrees");
    assert!(
        !worktrees.exists() || worktrees.read_dir().unwrap().next().is_none(),
        "no worktree left under the state root"
    );
}

#[test]
fn sigterm_of_the_run_stops_its_children_and_leaves_no_process() {
    let marker = format!("1002.{}", std::process::id());
    let parent = json!([
        { "tool_calls": [
            { "name": "spawn_sub_agent", "arguments": { "task": "sleeper", "isolation": "worktree" } },
        ]},
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
    ]);
    let sleeper = json!({
        "when_task_contains": "sleeper",
        "turns": [exec(&format!("sleep {marker}"))]
    });
    let (env, scenario) = world(parent, json!([sleeper]));
    let mut run = run_json(&env, &scenario, "one sleeping child");
    let started = run.wait_for("session_started");
    let top = started["session_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while processes_with(&format!("sleep {marker}")).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the child never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    run.signal(libc::SIGTERM);
    let (status, events) = run.finish();
    assert_eq!(status.code(), Some(143), "{events:#?}");
    assert!(
        processes_with(&marker).is_empty(),
        "left behind: {:#?}",
        processes_with(&marker)
    );
    let sessions = list_sessions(&env.intendant_home()).unwrap();
    let child = sessions
        .iter()
        .find(|s| s.id != top)
        .expect("the child's session");
    assert_eq!(
        child.status,
        RecordedStatus::Ended(EndStatus::Interrupted),
        "{child:#?}"
    );
    let worktrees = env.intendant_home().join("worktrees");
    assert!(
        !worktrees.exists() || worktrees.read_dir().unwrap().next().is_none(),
        "the stopped child's clean worktree was removed"
    );
}

#[test]
fn a_worktree_child_sees_only_its_own_worktree_and_artifacts_in_the_state_root() {
    // The child's working directory is `$INTENDANT_HOME/worktrees/<id>`: `..` lists the
    // worktrees, `../..` the state root. It commits what it saw, and the parent merges it.
    let probe = format!(
        "{{ echo \"state=$(ls -A ../.. | tr '\\n' ,)\"; echo \"logs=$(ls ../../logs 2>&1)\"; \
         echo \"worktrees=$(ls -A .. | tr '\\n' ,)\"; echo \"own=$(basename \"$PWD\"),\"; }} > probe.txt \
         && git add probe.txt && {GIT} commit -qm probe"
    );
    let child = json!({
        "when_task_contains": "probe the state root",
        "turns": [
            exec(&probe),
            call("submit_result", json!({ "summary": "probed", "fields": {} })),
        ]
    });
    let parent = json!([
        call(
            "spawn_sub_agent",
            json!({
                "task": "probe the state root",
                "isolation": "worktree",
                "autonomy": "full",
            })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        exec(&format!(
            "{GIT} merge -q --no-edit $(git for-each-ref --format='%(refname:short)' refs/heads/intendant/)"
        )),
        call("signal_done", json!({ "message": "merged" })),
    ]);
    let (env, scenario) = world(parent, json!([child]));
    let run = run_json(&env, &scenario, "delegate the work");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    let seen = std::fs::read_to_string(env.project.path().join("probe.txt"))
        .unwrap_or_else(|e| panic!("the child's commit was not merged ({e}): {events:#?}"));
    let line = |name: &str| -> String {
        seen.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {seen}"))
            .to_owned()
    };
    assert_eq!(line("state"), "artifacts,worktrees,", "{seen}");
    assert!(line("logs").contains("No such file or directory"), "{seen}");
    assert_eq!(
        line("worktrees"),
        line("own"),
        "only its own worktree: {seen}"
    );
    // Outside the sandbox the records are all there.
    assert!(env.intendant_home().join("logs").is_dir());
}

/// A sub-agent resumed by a one-shot run (`intendant --resume CHILD`) runs as the sub-agent it
/// was: offered `submit_result`, so its resume ends with its result (as a top session it was
/// refused), and the children it starts are as deep as its first run's were.
#[test]
fn a_sub_agent_resumed_by_a_one_shot_run_submits_and_its_children_keep_their_depth() {
    let parent = json!([
        call(
            "spawn_sub_agent",
            json!({ "task": "review one part", "role": "review", "isolation": "shared" })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "reviewed" })),
    ]);
    let child = json!({
        "when_task_contains": "review one part",
        "turns": [
            call("spawn_sub_agent", json!({ "task": "look deeper", "isolation": "shared" })),
            call("wait_sub_agents", json!({ "timeout_s": 100 })),
            call("submit_result", json!({ "summary": "part reviewed" })),
        ]
    });
    let grandchild = json!({
        "when_task_contains": "look deeper",
        "turns": [call("submit_result", json!({ "summary": "looked" }))]
    });
    let (env, scenario) = world(parent, json!([child, grandchild]));
    let mut run = run_json(&env, &scenario, "review it");
    let top = run.wait_for("session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    let sessions = list_sessions(&env.intendant_home()).unwrap();
    assert_eq!(sessions.len(), 3, "{sessions:#?}");
    let child = sessions
        .iter()
        .find(|s| s.parent.as_deref() == Some(top.as_str()))
        .unwrap();
    assert_eq!((child.role.as_deref(), child.depth), (Some("review"), 1));
    let child = child.id.clone();

    let (status, events) = resume_json(&env, &scenario, &child, "go on").finish();
    assert!(status.success(), "{events:#?}");
    let log = std::fs::read_to_string(env.session_dir(&child).join("session.jsonl")).unwrap();
    assert!(!log.contains("submit_result is for sub-agents"), "{log}");
    assert_eq!(
        log.matches(r#""event":"done","message":"part reviewed""#)
            .count(),
        2,
        "both runs ended with the result: {log}"
    );
    let sessions = list_sessions(&env.intendant_home()).unwrap();
    let grandchildren: Vec<_> = sessions
        .iter()
        .filter(|s| s.parent.as_deref() == Some(child.as_str()))
        .collect();
    assert_eq!(grandchildren.len(), 2, "one a run: {sessions:#?}");
    for grandchild in grandchildren {
        assert_eq!(grandchild.depth, 2, "{grandchild:#?}");
    }
}

/// A worktree sub-agent resumed by a one-shot run from its parent's project, after its clean
/// worktree was removed at its end, goes on in its worktree made again on its branch, with the
/// parts of the repository its branch needs: its second commit lands on its branch beside the
/// first, never on the parent's `main` (it ran in the parent's project, where a commit went
/// straight onto `main`), and the worktree is removed again, its branch kept.
#[test]
fn a_worktree_sub_agent_resumed_by_a_one_shot_run_commits_on_its_branch_again() {
    let parent = super::sub_agents_git::parent_of("commit twice");
    let child = json!({
        "when_task_contains": "commit twice",
        "turns": [
            exec(&format!(
                "n=$(ls | wc -l) && echo $n > c$n.txt && git add -A && {GIT} commit -qm c$n"
            )),
            call("submit_result", json!({ "summary": "committed" })),
        ]
    });
    let (env, scenario) = world(parent, json!([child]));
    let (status, events) = run_json(&env, &scenario, "delegate a commit").finish();
    assert!(status.success(), "{events:#?}");
    let sessions = list_sessions(&env.intendant_home()).unwrap();
    let child = sessions.iter().find(|s| s.parent.is_some()).unwrap();
    let worktree = child.worktree.clone().expect("the child had a worktree");
    assert_eq!(
        worktree.outcome,
        Some(format!(
            "removed; branch {} kept with 1 commit(s)",
            worktree.branch
        ))
    );
    assert!(!Path::new(&worktree.path).exists());
    let child = child.id.clone();

    let (status, events) = resume_json(&env, &scenario, &child, "once more").finish();
    assert!(status.success(), "{events:#?}");
    let subjects = |rev: &str| {
        let out = Command::new("git")
            .args(["log", "--format=%s", rev])
            .current_dir(env.project.path())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        subjects("main"),
        "base\n",
        "the parent's branch never moved"
    );
    assert_eq!(subjects(&worktree.branch), "c2\nc1\nbase\n");
    assert!(!Path::new(&worktree.path).exists(), "removed again");
    let meta = intendant_core::resume::recorded(&env.intendant_home(), &child).unwrap();
    assert_eq!(
        meta.worktree.and_then(|w| w.outcome),
        Some(format!(
            "removed; branch {} kept with 2 commit(s)",
            worktree.branch
        ))
    );
}

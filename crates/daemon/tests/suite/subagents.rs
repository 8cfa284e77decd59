//! Sub-agents on the daemon's supervisor: a parent session spawns children in their own git
//! worktrees, waits for their submitted results and merges their branches, and a parent's
//! rewind takes a child's worktree along only when asked. Every session is the scripted model
//! (one scenario file, one script per task) with the built `intendant-runtime` and its sandbox.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use intendant_core::autonomy::AutonomyLevel;
use intendant_core::host::SessionHost;
use intendant_core::session::assemble::{AssemblyEnv, SharedStore};
use intendant_core::subagents::{SubAgentCall, SubAgentLimits, SubAgents};
use intendant_daemon::supervisor::{Supervisor, SupervisorOptions};
use intendant_protocol::checkpoints::RewindRequest;
use intendant_protocol::daemon::{Backend, SessionStatus, SessionSummary, Settings, StartRequest};
use serde_json::{Value, json};

use super::support::runtime_bin;
use intendant_testkit::procs::processes_with;

/// Longest a test waits for the sessions (never reached by a healthy run).
const LIMIT: Duration = Duration::from_secs(120);
/// git with an identity, as the scripted commands run it.
const GIT: &str = "git -c user.name=agent -c user.email=agent@example.invalid";

fn call(name: &str, arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": name, "arguments": arguments }] })
}

fn exec(command: &str) -> Value {
    call("exec_command", json!({ "command": command }))
}

/// A child's script: write `file`, commit it on its branch, submit.
fn child_script(file: &str) -> Value {
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

/// What the daemon's sessions are assembled with, on state root `home`.
fn env(home: &tempfile::TempDir) -> AssemblyEnv {
    AssemblyEnv {
        home: home.path().to_path_buf(),
        runtime_path: Some(runtime_bin()),
        config_dir: None,
        store: SharedStore::new(home.path()),
        process_env: BTreeMap::from([(
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_default(),
        )]),
    }
}

struct World {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
    scenario: std::path::PathBuf,
    host: Supervisor,
}

impl World {
    /// A git project with one commit, and a daemon whose sessions play `parent` (the top
    /// session's turns) and `scripts`.
    fn new(parent: Value, scripts: Value) -> World {
        World::with_slots(parent, scripts, 8)
    }

    /// [`World::new`] with `[daemon] max_running` at `max_running`.
    fn with_slots(parent: Value, scripts: Value, max_running: u32) -> World {
        let project = tempfile::tempdir().unwrap();
        git(project.path(), "init -q -b main");
        std::fs::write(project.path().join("README"), "base\n").unwrap();
        git(project.path(), "add README");
        git(project.path(), "commit -qm base");
        let home = tempfile::tempdir().unwrap();
        let scenario = home.path().join("scenario.json");
        std::fs::write(
            &scenario,
            json!({ "model": "fake-model", "turns": parent, "scripts": scripts }).to_string(),
        )
        .unwrap();
        let env = env(&home);
        let settings = Settings {
            default_autonomy: AutonomyLevel::Medium,
            default_backend: Backend::Native,
            max_running,
            max_autonomy: AutonomyLevel::Full,
        };
        intendant_daemon::control_plane::save(home.path(), &settings).unwrap();
        let host = Supervisor::new(env, None, SupervisorOptions::default()).unwrap();
        World {
            project,
            home,
            scenario,
            host,
        }
    }

    /// A second supervisor on the same state root (a daemon restarted).
    fn restart(&self) -> Supervisor {
        Supervisor::new(env(&self.home), None, SupervisorOptions::default()).unwrap()
    }

    async fn start(&self, task: &str) -> SessionSummary {
        self.start_at(task, AutonomyLevel::Full).await
    }

    /// Starts the top session with `task` at `autonomy`.
    async fn start_at(&self, task: &str, autonomy: AutonomyLevel) -> SessionSummary {
        self.host
            .start(StartRequest {
                task: task.into(),
                project: self.project.path().display().to_string(),
                autonomy: Some(autonomy),
                provider: Some("mock".into()),
                scenario: Some(self.scenario.display().to_string()),
                ..StartRequest::default()
            })
            .await
            .unwrap()
    }

    /// Polls until `done` holds for the listing, or fails the test with the listing.
    async fn until(
        &self,
        what: &str,
        done: impl Fn(&[SessionSummary]) -> bool,
    ) -> Vec<SessionSummary> {
        until_on(&self.host, what, done).await
    }

    /// Waits until a `sleep {marker}` a session's command started runs.
    async fn until_sleeping(&self, what: &str, marker: &str) {
        self.until(what, |_| {
            !processes_with(&format!("sleep {marker}")).is_empty()
        })
        .await;
    }

    /// Stops `top`'s only child and waits until it ended `interrupted` and `top` waits idle;
    /// the child's id.
    async fn stop_only_child(&self, top: &str) -> String {
        let sessions = self.host.sessions().await.unwrap();
        let child = children_of(&sessions, top)[0].id.clone();
        self.host.stop(&child).await.unwrap();
        self.until("the child ended and its parent waits idle", |all| {
            listed(all, &child).status == SessionStatus::Interrupted
                && listed(all, top).status == SessionStatus::Idle
        })
        .await;
        child
    }

    /// Session `top`'s sub-agent tools at `level`, as its loop answers them.
    fn tools_of(&self, top: &str, level: AutonomyLevel) -> SubAgents {
        SubAgents::new(
            std::sync::Arc::new(self.host.clone()),
            top.to_owned(),
            self.project.path().display().to_string(),
            intendant_core::autonomy::SharedLevel::new(level),
            0,
            SubAgentLimits::default(),
        )
    }
}

/// Polls `host`'s listing until `done` holds for it, or fails the test with the listing.
async fn until_on(
    host: &Supervisor,
    what: &str,
    done: impl Fn(&[SessionSummary]) -> bool,
) -> Vec<SessionSummary> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let sessions = host.sessions().await.unwrap();
        if done(&sessions) {
            return sessions;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: never happened; sessions: {sessions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Session `id` in the listing `all`.
fn listed<'a>(all: &'a [SessionSummary], id: &str) -> &'a SessionSummary {
    all.iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {all:#?}"))
}

/// Waits until no process's command line holds `marker`, or fails naming those that do.
async fn until_gone(marker: &str) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !processes_with(marker).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "left behind: {:#?}",
            processes_with(marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The subjects of `branch`'s commits in `project`, newest first.
fn subjects(project: &Path, branch: &str) -> Vec<String> {
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", branch])
        .current_dir(project)
        .output()
        .unwrap();
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn git(dir: &Path, args: &str) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{GIT} {args}"))
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args}");
}

async fn transcript(world: &World, id: &str) -> String {
    let dir = world.host.log_dir(id).await.unwrap();
    std::fs::read_to_string(dir.join("session.jsonl")).unwrap()
}

fn children_of<'a>(sessions: &'a [SessionSummary], parent: &str) -> Vec<&'a SessionSummary> {
    sessions
        .iter()
        .filter(|s| s.parent.as_deref() == Some(parent))
        .collect()
}

#[tokio::test]
async fn a_parent_spawns_two_worktree_children_waits_and_merges_their_branches() {
    let spawn = |file: &str| {
        json!({ "name": "spawn_sub_agent", "arguments": {
            "task": format!("write {file} and commit it"),
            "role": "implementation",
            "isolation": "worktree",
        }})
    };
    let parent = json!([
        { "tool_calls": [spawn("a.txt"), spawn("b.txt")] },
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        exec(&format!(
            "{GIT} merge -q --no-edit $(git for-each-ref --format='%(refname:short)' refs/heads/intendant/)"
        )),
        call("signal_done", json!({ "message": "merged both" })),
    ]);
    let world = World::new(
        parent,
        json!([child_script("a.txt"), child_script("b.txt")]),
    );
    let top = world.start("split the work").await;
    let sessions = world
        .until("the parent's round ended", |all| {
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;

    // Both children ran as sessions of their own, nested under the parent, and reported.
    let children = children_of(&sessions, &top.id);
    assert_eq!(children.len(), 2, "{sessions:#?}");
    for child in &children {
        assert_eq!(child.status, SessionStatus::Done, "{child:#?}");
        let result = child.result.as_ref().expect("a submitted result");
        let file = result.fields["file"].as_str().unwrap();
        assert_eq!(result.summary, format!("wrote {file}"));
        let worktree = child.worktree.as_ref().expect("a worktree");
        assert!(worktree.branch.starts_with("intendant/"), "{worktree:?}");
        // The child's log names its parent.
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(
                world
                    .host
                    .log_dir(&child.id)
                    .await
                    .unwrap()
                    .join(intendant_core::session_log::META_FILE),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(meta["parent"], top.id.as_str());
    }
    // The parent saw both results, then merged both branches into its own checkout.
    let parent_log = transcript(&world, &top.id).await;
    for file in ["a.txt", "b.txt"] {
        assert!(
            world.project.path().join(file).is_file(),
            "{file} was not merged: {parent_log}"
        );
        assert_eq!(
            std::fs::read_to_string(world.project.path().join(file)).unwrap(),
            format!("{file}\n")
        );
    }
    let transcript = std::fs::read_to_string(
        world
            .host
            .log_dir(&top.id)
            .await
            .unwrap()
            .join("session.jsonl"),
    )
    .unwrap();
    assert!(transcript.contains("wrote a.txt") && transcript.contains("wrote b.txt"));

    // Clean worktrees are removed; their branches stay, as they have commits.
    let sessions = world
        .until("both worktrees were ended", |all| {
            children_of(all, &top.id)
                .iter()
                .all(|c| c.worktree.as_ref().is_some_and(|w| w.outcome.is_some()))
        })
        .await;
    for child in children_of(&sessions, &top.id) {
        let worktree = child.worktree.as_ref().unwrap();
        assert_eq!(
            worktree.outcome.as_deref(),
            Some(format!("removed; branch {} kept with 1 commit(s)", worktree.branch).as_str())
        );
        assert!(!Path::new(&worktree.path).exists());
    }
    assert!(
        !world
            .home
            .path()
            .join("worktrees")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "no worktree left under the state root"
    );
    // A restarted daemon lists each child's worktree as it ended (it listed none: where a
    // child worked and which branch holds its commits were gone with the daemon).
    let restarted = world.restart().sessions().await.unwrap();
    let listed = |all: &[SessionSummary]| {
        let mut worktrees: Vec<_> = children_of(all, &top.id)
            .iter()
            .map(|c| (c.id.clone(), c.worktree.clone()))
            .collect();
        worktrees.sort_by(|a, b| a.0.cmp(&b.0));
        worktrees
    };
    assert_eq!(listed(&restarted), listed(&sessions));
}

#[tokio::test]
async fn limits_refuse_spawns_with_a_tool_error_the_model_reads() {
    // Depth 2 is the default maximum: the child's own spawn is refused; so is a child with more
    // autonomy than its parent.
    let parent = json!([
        call(
            "spawn_sub_agent",
            json!({ "task": "nested spawn", "isolation": "shared" })
        ),
        call(
            "spawn_sub_agent",
            json!({ "task": "greedy", "autonomy": "full", "isolation": "shared" })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "ok" })),
    ]);
    let nested = json!({
        "when_task_contains": "nested spawn",
        "turns": [
            call("spawn_sub_agent", json!({ "task": "grandchild", "isolation": "shared" })),
            call("submit_result", json!({ "summary": "spawned one" })),
        ]
    });
    let grandchild = json!({
        "when_task_contains": "grandchild",
        "turns": [
            call("spawn_sub_agent", json!({ "task": "too deep", "isolation": "shared" })),
            call("submit_result", json!({ "summary": "tried" })),
        ]
    });
    let world = World::new(parent, json!([nested, grandchild]));
    let top = world.start_at("limits", AutonomyLevel::High).await;
    let sessions = world
        .until("the parent's round ended", |all| {
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    let top_log = transcript(&world, &top.id).await;
    assert!(top_log.contains("higher than this session"), "{top_log}");
    let child = children_of(&sessions, &top.id);
    assert_eq!(
        child.len(),
        1,
        "only the nested spawn started: {sessions:#?}"
    );
    let grandchildren = children_of(&sessions, &child[0].id);
    assert_eq!(grandchildren.len(), 1);
    let deepest = transcript(&world, &grandchildren[0].id).await;
    assert!(
        deepest.contains("maximum sub-agent depth") || deepest.contains("max_depth"),
        "{deepest}"
    );
    assert!(children_of(&sessions, &grandchildren[0].id).is_empty());
}

#[tokio::test]
async fn a_childs_approval_waits_in_the_shared_queue_while_its_sibling_runs() {
    let parent = json!([
        { "tool_calls": [
            { "name": "spawn_sub_agent", "arguments": { "task": "careful: write a.txt", "isolation": "shared", "autonomy": "medium" } },
            { "name": "spawn_sub_agent", "arguments": { "task": "quick: report", "isolation": "shared" } },
        ]},
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "both reported" })),
    ]);
    let careful = json!({
        "when_task_contains": "careful",
        "turns": [
            exec("printf careful > a.txt"),
            call("submit_result", json!({ "summary": "wrote a.txt" })),
        ]
    });
    let quick = json!({
        "when_task_contains": "quick",
        "turns": [call("submit_result", json!({ "summary": "nothing to do" }))]
    });
    let world = World::new(parent, json!([careful, quick]));
    let top = world.start_at("two children", AutonomyLevel::Medium).await;
    // The careful child waits for a human; its sibling finishes meanwhile.
    let sessions = world
        .until("one child waits and the other reported", |all| {
            let children = children_of(all, &top.id);
            children.len() == 2
                && children
                    .iter()
                    .any(|c| c.status == SessionStatus::WaitingForHuman)
                && children.iter().any(|c| c.status == SessionStatus::Done)
        })
        .await;
    let waiting = children_of(&sessions, &top.id)
        .into_iter()
        .find(|c| c.status == SessionStatus::WaitingForHuman)
        .unwrap()
        .clone();
    assert!(waiting.task.contains("careful"));
    let queue = world.host.approvals().await.unwrap();
    assert_eq!(queue.len(), 1, "{queue:#?}");
    assert_eq!(queue[0].session_id, waiting.id, "labelled with the child");
    assert!(!world.project.path().join("a.txt").exists());
    world
        .host
        .send(intendant_protocol::daemon::SessionIntent {
            session_id: waiting.id.clone(),
            msg: intendant_protocol::events::ControlMsg::Approve { id: queue[0].id },
        })
        .await
        .unwrap();
    world
        .until("the parent's round ended", |all| {
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    assert_eq!(
        std::fs::read_to_string(world.project.path().join("a.txt")).unwrap(),
        "careful"
    );
}

#[tokio::test]
async fn stopping_the_parent_stops_its_children_and_leaves_no_process() {
    // A sleep whose duration no other test uses: its own command line is the marker.
    let marker = format!("1000.{}", std::process::id());
    let parent = json!([
        { "tool_calls": [
            { "name": "spawn_sub_agent", "arguments": { "task": "sleeper one", "isolation": "worktree" } },
            { "name": "spawn_sub_agent", "arguments": { "task": "sleeper two", "isolation": "worktree" } },
        ]},
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
    ]);
    let sleeper = |key: &str| {
        json!({
            "when_task_contains": key,
            "turns": [exec(&format!("sleep {marker}"))]
        })
    };
    let world = World::new(
        parent,
        json!([sleeper("sleeper one"), sleeper("sleeper two")]),
    );
    let top = world.start("sleep in two children").await;
    world
        .until("both children's commands run", |_| {
            processes_with(&format!("sleep {marker}")).len() >= 2
        })
        .await;
    world.host.stop(&top.id).await.unwrap();
    let sessions = world
        .until("the parent and both children ended", |all| {
            let children = children_of(all, &top.id);
            children.len() == 2
                && children.iter().all(|c| c.status.is_finished())
                && all.iter().any(|s| s.id == top.id && s.status.is_finished())
        })
        .await;
    for child in children_of(&sessions, &top.id) {
        assert_eq!(child.status, SessionStatus::Interrupted, "{child:#?}");
    }
    until_gone(&marker).await;
    // The stopped children's worktrees are clean (nothing was written): removed.
    world
        .until("both worktrees were ended", |all| {
            children_of(all, &top.id)
                .iter()
                .all(|c| c.worktree.as_ref().is_some_and(|w| w.outcome.is_some()))
        })
        .await;
}

/// A sub-agent asked for once its parent is being stopped, or has ended, does not start: the
/// stop ends the children its parent has, and one registered after it would follow no
/// cancellation of it (a parent stopped in the very batch that spawned four left three of them
/// running to their end). A resume of such a child is still the owner's to ask for.
#[tokio::test]
async fn a_sub_agent_of_a_stopped_parent_does_not_start() {
    let marker = format!("1001.{}", std::process::id());
    let world = World::new(json!([exec(&format!("sleep {marker}"))]), json!([]));
    let top = world.start("sleep a while").await;
    world
        .until_sleeping("the parent's command runs", &marker)
        .await;
    world.host.stop(&top.id).await.unwrap();
    let child = StartRequest {
        task: "late child".into(),
        project: world.project.path().display().to_string(),
        parent: Some(top.id.clone()),
        provider: Some("mock".into()),
        scenario: Some(world.scenario.display().to_string()),
        ..StartRequest::default()
    };
    let refused = world.host.start(child.clone()).await.unwrap_err();
    assert!(
        refused
            .message
            .contains("its parent, is stopping or has ended"),
        "{refused:?}"
    );
    world
        .until("the parent ended", |all| {
            all.iter().any(|s| s.id == top.id && s.status.is_finished())
        })
        .await;
    let refused = world.host.start(child).await.unwrap_err();
    assert!(refused.message.contains("its parent"), "{refused:?}");
    let sessions = world.host.sessions().await.unwrap();
    assert!(children_of(&sessions, &top.id).is_empty(), "{sessions:#?}");
    until_gone(&marker).await;
}

#[tokio::test]
async fn interrupting_the_parent_stops_its_children_and_the_parent_stays_open() {
    let marker = format!("1001.{}", std::process::id());
    let parent = json!([
        { "tool_calls": [
            { "name": "spawn_sub_agent", "arguments": { "task": "sleeper", "isolation": "shared" } },
        ]},
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
        call("signal_done", json!({ "message": "after the follow-up" })),
    ]);
    let sleeper = json!({
        "when_task_contains": "sleeper",
        "turns": [exec(&format!("sleep {marker}"))]
    });
    let world = World::new(parent, json!([sleeper]));
    let top = world.start("one sleeping child").await;
    world
        .until("the child's command runs", |all| {
            !processes_with(&format!("sleep {marker}")).is_empty()
                && all
                    .iter()
                    .any(|s| s.id == top.id && s.status == SessionStatus::Running)
        })
        .await;
    world.host.interrupt(&top.id).await.unwrap();
    let sessions = world
        .until("the child ended and the parent's round ended", |all| {
            let children = children_of(all, &top.id);
            children.len() == 1
                && children[0].status.is_finished()
                && all
                    .iter()
                    .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    assert_eq!(
        children_of(&sessions, &top.id)[0].status,
        SessionStatus::Interrupted
    );
    until_gone(&marker).await;
    // The parent stays open: a follow-up runs its next turn.
    world
        .host
        .send(intendant_protocol::daemon::SessionIntent {
            session_id: top.id.clone(),
            msg: intendant_protocol::events::ControlMsg::FollowUp {
                text: "go on".into(),
            },
        })
        .await
        .unwrap();
    let text = {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let text = transcript(&world, &top.id).await;
            if text.contains("after the follow-up") {
                break text;
            }
            assert!(tokio::time::Instant::now() < deadline, "{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(text.contains("after the follow-up"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_children_count_against_max_children_and_hold_no_slot() {
    let spawn = |n: u32| {
        json!({ "name": "spawn_sub_agent", "arguments": {
            "task": format!("idle child {n}"),
            "isolation": "shared",
        }})
    };
    // Four spawns a turn for four turns: 16 asked, at most max_children (4) alive at once.
    let turns: Vec<Value> = (0..4)
        .map(|t| json!({ "tool_calls": (0..4).map(|i| spawn(t * 4 + i)).collect::<Vec<_>>() }))
        .chain([call("signal_done", json!({ "message": "spawned" }))])
        .collect();
    // A child answers once and waits, idle, for a follow-up that never comes.
    let child = json!({ "when_task_contains": "idle child", "turns": [{ "text": "idling" }] });
    let other = json!({ "when_task_contains": "unrelated", "turns": [{ "text": "me too" }] });
    let world = World::new(json!(turns), json!([child, other]));
    let top = world.start("spawn many").await;
    let alive = |all: &[SessionSummary]| {
        children_of(all, &top.id)
            .iter()
            .filter(|c| !c.status.is_finished())
            .count()
    };
    let sessions = world
        .until("the parent's round ended", |all| {
            assert!(alive(all) <= 4, "more than max_children alive: {all:#?}");
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    assert_eq!(children_of(&sessions, &top.id).len(), 4, "{sessions:#?}");
    let top_log = transcript(&world, &top.id).await;
    assert!(top_log.contains("max_children"), "{top_log}");
    // The parent and its idle children hold no slot: an unrelated session runs at once.
    let unrelated = world.start("unrelated work").await;
    world
        .until("the unrelated session ran", |all| {
            all.iter()
                .any(|s| s.id == unrelated.id && s.status == SessionStatus::Idle)
        })
        .await;
    let load = world.host.load();
    assert_eq!((load.running, load.queued), (0, 0), "{load:?}");
    assert_eq!(load.idle, 6, "the parent, its four children and the other");
}

/// A parent waiting on its children gives them its running slot: with `max_running` 1, the two
/// children a parent spawns and waits for both run and report within its wait (held, they sat
/// queued behind their waiting parent until its wait timed out), and the parent goes on once it
/// has the slot again, its round's next batch run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waiting_on_its_children_gives_them_its_slot() {
    let spawn = |file: &str| {
        json!({ "name": "spawn_sub_agent", "arguments": {
            "task": format!("report {file}"),
            "isolation": "shared",
        }})
    };
    let parent = json!([
        { "tool_calls": [spawn("a"), spawn("b")] },
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        exec("echo went on > after-the-wait.txt"),
        call("signal_done", json!({ "message": "all reported" })),
    ]);
    let child = |name: &str| {
        json!({ "when_task_contains": format!("report {name}"), "turns": [
            call("submit_result", json!({ "summary": format!("child {name} reported") })),
        ]})
    };
    let world = World::with_slots(parent, json!([child("a"), child("b")]), 1);
    let started = std::time::Instant::now();
    let top = world.start("spawn two and wait").await;
    world
        .until("the parent's round ended", |all| {
            let load = world.host.load();
            assert!(
                load.running <= 1,
                "more than max_running hold a slot: {load:?}"
            );
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "the children waited for the parent's wait to time out"
    );
    let log = transcript(&world, &top.id).await;
    assert!(log.contains(r#"\"all_reported\":true"#), "{log}");
    assert!(
        log.contains("child a reported") && log.contains("child b reported"),
        "{log}"
    );
    assert!(world.project.path().join("after-the-wait.txt").exists());
}

/// What the record of sub-agent `id` says of its place: its parent, role and depth.
async fn recorded_place(host: &Supervisor, id: &str) -> (Option<String>, Option<String>, u32) {
    let dir = host.log_dir(id).await.unwrap();
    let meta = intendant_core::session_log::read_meta(&dir).unwrap();
    (meta.parent, meta.role, meta.depth)
}

/// A resume of `id` asking only for `task` (in its own project), on the world's scenario.
fn resume_of(world: &World, id: &str, task: &str) -> StartRequest {
    StartRequest {
        task: task.into(),
        resume: Some(id.to_owned()),
        scenario: Some(world.scenario.display().to_string()),
        ..StartRequest::default()
    }
}

/// A sub-agent resumed on its own (`ctl start --resume CHILD`) after its parent ended, on a
/// restarted daemon, is still a sub-agent: its parent's in the listing, offered
/// `submit_result` (which ends it with its result), and bounded at its depth (it ran as a
/// top session: no `submit_result`, and free to spawn below the maximum depth).
#[tokio::test]
async fn a_sub_agent_resumed_on_its_own_is_still_its_parents_at_its_depth_and_in_its_role() {
    let marker = format!("1002.{}", std::process::id());
    let parent = json!([
        call(
            "spawn_sub_agent",
            json!({ "task": "middle part", "isolation": "shared" })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
    ]);
    let middle = json!({
        "when_task_contains": "middle part",
        "turns": [
            call("spawn_sub_agent", json!({
                "task": "review deep", "role": "review", "isolation": "shared"
            })),
            call("wait_sub_agents", json!({ "timeout_s": 600 })),
        ]
    });
    // The grandchild's command waits until the test lets it go (its resume plays it again).
    let deep = json!({
        "when_task_contains": "review deep",
        "turns": [
            exec(&format!("test -e let-go || sleep {marker}")),
            call("spawn_sub_agent", json!({ "task": "deeper still", "isolation": "shared" })),
            call("submit_result", json!({ "summary": "reviewed" })),
        ]
    });
    let world = World::new(parent, json!([middle, deep]));
    let top = world.start("review through two levels").await;
    world
        .until_sleeping("the grandchild's command runs", &marker)
        .await;
    let sessions = world.host.sessions().await.unwrap();
    let middle = children_of(&sessions, &top.id)[0].id.clone();
    let deep = children_of(&sessions, &middle)[0].id.clone();
    assert_eq!(
        recorded_place(&world.host, &deep).await,
        (Some(middle.clone()), Some("review".to_owned()), 2)
    );
    assert_eq!(
        recorded_place(&world.host, &top.id).await,
        (None, None, 0),
        "a top session records no place"
    );
    world.host.stop(&top.id).await.unwrap();
    world
        .until("all three ended", |all| {
            all.iter().filter(|s| s.status.is_finished()).count() == 3
        })
        .await;
    world.host.shutdown().await.unwrap();
    world.host.closed().await;

    let restarted = world.restart();
    std::fs::write(world.project.path().join("let-go"), "").unwrap();
    let resumed = restarted
        .start(resume_of(&world, &deep, "go on"))
        .await
        .unwrap();
    assert_eq!(resumed.parent.as_deref(), Some(middle.as_str()));
    let all = until_on(&restarted, "the resumed grandchild's round ended", |all| {
        let deep = listed(all, &deep);
        deep.status.is_finished() || deep.status == SessionStatus::Idle
    })
    .await;
    let ended = listed(&all, &deep).clone();
    assert_eq!(ended.status, SessionStatus::Done, "{ended:#?}");
    assert_eq!(ended.parent.as_deref(), Some(middle.as_str()));
    assert_eq!(
        ended.result.as_ref().map(|r| r.summary.as_str()),
        Some("reviewed")
    );
    let dir = restarted.log_dir(&deep).await.unwrap();
    let log = std::fs::read_to_string(dir.join("session.jsonl")).unwrap();
    assert!(log.contains("maximum sub-agent depth"), "{log}");
    let all = restarted.sessions().await.unwrap();
    assert!(children_of(&all, &deep).is_empty(), "{all:#?}");
    assert_eq!(all.len(), 3, "{all:#?}");
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// A worktree sub-agent stopped with uncommitted changes (its worktree kept), resumed on its
/// own on a restarted daemon, works in its worktree as in its first run: it commits on its
/// branch (its sandbox could not write the repository's git directory, so the commit failed),
/// and its worktree, clean at its end, is removed with the branch kept.
#[tokio::test]
async fn a_worktree_sub_agent_resumed_in_its_kept_worktree_commits_on_its_branch() {
    let marker = format!("1004.{}", std::process::id());
    let gate = tempfile::tempdir().unwrap();
    let parent = json!([
        call(
            "spawn_sub_agent",
            json!({ "task": "commit later", "isolation": "worktree" })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 600 })),
    ]);
    let child = json!({
        "when_task_contains": "commit later",
        "turns": [
            exec(&format!(
                "echo x > later.txt && if [ -e {}/go ]; then git add later.txt && {GIT} commit -qm later; else sleep {marker}; fi",
                gate.path().display()
            )),
            call("submit_result", json!({ "summary": "committed" })),
        ]
    });
    let world = World::new(parent, json!([child]));
    let top = world.start("one worktree child").await;
    world
        .until_sleeping("the child's command runs", &marker)
        .await;
    world.host.stop(&top.id).await.unwrap();
    let sessions = world
        .until("the child's worktree was kept", |all| {
            children_of(all, &top.id).iter().any(|c| {
                c.worktree
                    .as_ref()
                    .is_some_and(|w| w.outcome.as_deref().is_some_and(|o| o.starts_with("kept")))
            })
        })
        .await;
    let child = children_of(&sessions, &top.id)[0].clone();
    let branch = child.worktree.as_ref().unwrap().branch.clone();
    world.host.shutdown().await.unwrap();
    world.host.closed().await;

    let restarted = world.restart();
    std::fs::write(gate.path().join("go"), "").unwrap();
    let resumed = restarted
        .start(resume_of(&world, &child.id, "go on"))
        .await
        .unwrap();
    assert_eq!(resumed.project, child.project);
    let all = until_on(
        &restarted,
        "the resumed child's worktree was ended",
        |all| {
            let child = listed(all, &child.id);
            child.status.is_finished()
                && child.worktree.as_ref().is_some_and(|w| w.outcome.is_some())
        },
    )
    .await;
    let ended = listed(&all, &child.id).clone();
    assert_eq!(ended.status, SessionStatus::Done, "{ended:#?}");
    assert_eq!(
        subjects(world.project.path(), &branch)
            .first()
            .map(String::as_str),
        Some("later")
    );
    assert_eq!(
        ended.worktree.unwrap().outcome.as_deref(),
        Some(format!("removed; branch {branch} kept with 1 commit(s)").as_str())
    );
    restarted.shutdown().await.unwrap();
    restarted.closed().await;
}

/// `message_sub_agent` to a child a stop ended resumes it through the daemon: under its parent
/// again, its conversation going on to its result (the daemon refused the follow-up: the child
/// had ended, and the parent could only start a new one).
#[tokio::test]
async fn a_message_to_a_stopped_child_resumes_it_under_its_parent() {
    let marker = format!("1005.{}", std::process::id());
    let gate = tempfile::tempdir().unwrap();
    let parent = json!([call(
        "spawn_sub_agent",
        json!({ "task": "finish later", "isolation": "shared" })
    )]);
    let child = json!({
        "when_task_contains": "finish later",
        "turns": [
            exec(&format!("test -e {}/go || sleep {marker}", gate.path().display())),
            call("submit_result", json!({ "summary": "finished" })),
        ]
    });
    let world = World::new(parent, json!([child]));
    let top = world
        .start_at("one child to resume", AutonomyLevel::High)
        .await;
    world
        .until_sleeping("the child's command runs", &marker)
        .await;
    let child = world.stop_only_child(&top.id).await;
    std::fs::write(gate.path().join("go"), "").unwrap();
    let (answer, _) = world
        .tools_of(&top.id, AutonomyLevel::High)
        .handle(
            SubAgentCall::Message {
                id: child.clone(),
                text: "go on".into(),
            },
            None,
        )
        .await;
    assert!(!answer.is_error, "{answer:?}");
    assert!(answer.output.contains(r#""resumed":true"#), "{answer:?}");
    let sessions = world
        .until("the resumed child submitted", |all| {
            all.iter()
                .any(|s| s.id == child && s.status == SessionStatus::Done)
        })
        .await;
    let resumed = listed(&sessions, &child);
    assert_eq!(resumed.parent.as_deref(), Some(top.id.as_str()));
    assert_eq!(
        resumed.result.as_ref().map(|r| r.summary.as_str()),
        Some("finished")
    );
}

/// A worktree sub-agent that ended clean (its worktree removed, its branch kept for its
/// commit), resumed by its parent's message, is given its worktree again on its branch: it
/// commits a second time there, and its branch holds both (the resume was refused: its
/// directory was gone).
#[tokio::test]
async fn a_worktree_sub_agent_resumed_after_its_worktree_was_removed_works_on_its_branch_again() {
    let parent = json!([call(
        "spawn_sub_agent",
        json!({ "task": "commit twice", "isolation": "worktree" })
    )]);
    let child = json!({
        "when_task_contains": "commit twice",
        "turns": [
            exec(&format!(
                "n=$(ls | wc -l) && echo $n > c$n.txt && git add -A && {GIT} commit -qm c$n"
            )),
            call("submit_result", json!({ "summary": "committed" })),
        ]
    });
    let world = World::new(parent, json!([child]));
    let top = world.start("one worktree child").await;
    let ended_with = |outcome: String| {
        let top = top.id.clone();
        move |all: &[SessionSummary]| {
            children_of(all, &top).iter().any(|c| {
                c.status == SessionStatus::Done
                    && c.worktree
                        .as_ref()
                        .is_some_and(|w| w.outcome.as_deref() == Some(outcome.as_str()))
            })
        }
    };
    let sessions = world
        .until("the child's worktree was removed, its branch kept", |all| {
            children_of(all, &top.id)
                .iter()
                .any(|c| c.worktree.as_ref().is_some_and(|w| w.outcome.is_some()))
        })
        .await;
    let child = children_of(&sessions, &top.id)[0].clone();
    let worktree = child.worktree.clone().unwrap();
    assert_eq!(
        worktree.outcome.as_deref(),
        Some(format!("removed; branch {} kept with 1 commit(s)", worktree.branch).as_str())
    );
    assert!(!Path::new(&worktree.path).exists());
    world
        .until("the parent waits idle", |all| {
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    let message = SubAgentCall::Message {
        id: child.id.clone(),
        text: "once more".into(),
    };
    let (answer, _) = world
        .tools_of(&top.id, AutonomyLevel::Full)
        .handle(message, None)
        .await;
    assert!(!answer.is_error, "{answer:?}");
    world
        .until(
            "the resumed child committed again and its worktree was removed again",
            ended_with(format!(
                "removed; branch {} kept with 2 commit(s)",
                worktree.branch
            )),
        )
        .await;
    let subjects = subjects(world.project.path(), &worktree.branch);
    assert_eq!(subjects[..2], ["c2", "c1"], "{subjects:?}");
}

/// A sub-agent resumed on its own while its parent still runs is that parent's child again:
/// held under the parent's level now (lowered since the child ran), and stopped with it.
#[tokio::test]
async fn a_sub_agent_resumed_while_its_parent_runs_is_held_under_it_and_stopped_with_it() {
    let marker = format!("1003.{}", std::process::id());
    let parent = json!([call(
        "spawn_sub_agent",
        json!({ "task": "sleeper four", "isolation": "shared" })
    )]);
    let sleeper = json!({
        "when_task_contains": "sleeper four",
        "turns": [exec(&format!("sleep {marker}"))]
    });
    let world = World::new(parent, json!([sleeper]));
    let top = world.start_at("one child", AutonomyLevel::High).await;
    world
        .until_sleeping("the child's command runs", &marker)
        .await;
    let child = world.stop_only_child(&top.id).await;
    world
        .host
        .set_autonomy(Some(&top.id), AutonomyLevel::Medium)
        .await
        .unwrap();

    let resumed = world
        .host
        .start(resume_of(&world, &child, "go on"))
        .await
        .unwrap();
    assert_eq!(resumed.parent.as_deref(), Some(top.id.as_str()));
    assert_eq!(
        resumed.autonomy,
        AutonomyLevel::Medium,
        "held under its parent's level, not its own recorded high"
    );
    world.host.stop(&top.id).await.unwrap();
    let sessions = world
        .until("the parent and the resumed child ended", |all| {
            all.iter().all(|s| s.status.is_finished())
        })
        .await;
    assert_eq!(listed(&sessions, &child).status, SessionStatus::Interrupted);
    until_gone(&marker).await;
}

#[tokio::test]
async fn a_sub_agent_is_told_its_parents_workflow_checkpoints_and_reads_them_read_only() {
    let parent = json!([
        call(
            "workflow_checkpoint",
            json!({ "name": "plan", "data": { "parts": ["a", "b"], "given": { "a": "child" } } })
        ),
        call(
            "spawn_sub_agent",
            json!({ "task": "follow the plan", "isolation": "shared" })
        ),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "ok" })),
    ]);
    let child = json!({
        "when_task_contains": "follow the plan",
        "turns": [
            call("workflow_checkpoint", json!({ "name": "plan", "parent": true })),
            call("workflow_checkpoint", json!({ "name": "plan", "parent": true, "data": { "parts": [] } })),
            call("workflow_checkpoint", json!({ "name": "nope", "parent": true })),
            call("workflow_checkpoint", json!({ "name": "mine", "data": { "done": "a" } })),
            call("submit_result", json!({ "summary": "read it" })),
        ]
    });
    let world = World::new(parent, json!([child]));
    let top = world.start("orchestrate").await;
    let sessions = world
        .until("the parent's round ended", |all| {
            all.iter()
                .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
        })
        .await;
    let children = children_of(&sessions, &top.id);
    assert_eq!(children.len(), 1, "{sessions:#?}");
    let dir = world.host.log_dir(&children[0].id).await.unwrap();
    let conversation = std::fs::read_to_string(dir.join("conversation.jsonl")).unwrap();
    // Told at its start, before its first turn: the names of its parent's checkpoints.
    let note = conversation
        .find("Your parent session's workflow checkpoints")
        .unwrap_or_else(|| panic!("no note of the parent's checkpoints: {conversation}"));
    assert!(
        conversation[note..].contains(r#"\"plan\""#),
        "{conversation}"
    );
    let first_call = conversation.find("workflow_checkpoint").unwrap();
    assert!(note < first_call, "the note comes first: {conversation}");
    // The document read back whole; writing the parent's, or reading a name it lacks, refused.
    assert!(
        conversation.contains(r#"{\"given\":{\"a\":\"child\"},\"parts\":[\"a\",\"b\"]}"#),
        "{conversation}"
    );
    assert!(
        conversation.contains("a parent's checkpoints are read-only"),
        "{conversation}"
    );
    assert!(
        conversation.contains(r#"your parent has no checkpoint \"nope\"; it has: plan"#),
        "{conversation}"
    );
    // The parent's document is as the parent left it; the child's own is its own.
    let store = intendant_store::Store::open(world.home.path()).unwrap();
    assert_eq!(
        intendant_store::workflow::read(&store, &top.id, "plan").unwrap(),
        r#"{"given":{"a":"child"},"parts":["a","b"]}"#
    );
    assert_eq!(
        intendant_store::workflow::names(&store, &children[0].id).unwrap(),
        ["mine"]
    );
    assert_eq!(
        intendant_store::workflow::names(&store, &top.id).unwrap(),
        ["plan"]
    );
}

/// Issue 29 through the daemon: a parent's rewind leaves its sub-agent's worktree as the child
/// left it unless asked; `with_children` puts the worktree back to how it was when the parent's
/// turn began, and an undo with children undoes both.
#[tokio::test]
async fn a_parents_rewind_leaves_its_childs_worktree_alone_unless_asked() {
    // The parent's turn 2 edits its own file and spawns the child, which then edits a tracked
    // and a new file in its worktree and leaves them uncommitted (so the worktree is kept).
    let parent = json!([
        exec("printf 'v1\\n' > p.txt"),
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "printf 'v2\\n' > p.txt" } },
            { "name": "spawn_sub_agent", "arguments": {
                "task": "edit w.txt", "role": "implementation", "isolation": "worktree",
            }},
        ]},
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "child done" })),
    ]);
    let child = json!({
        "when_task_contains": "edit w.txt",
        "turns": [
            exec("printf 'c1\\n' > w.txt && printf 'changed\\n' > README"),
            call("submit_result", json!({ "summary": "edited" })),
        ]
    });
    let world = World::new(parent, json!([child]));
    let top = world.start("a child in a worktree").await;
    let sessions = world
        .until(
            "the parent's round ended and the child's worktree was kept",
            |all| {
                all.iter()
                    .any(|s| s.id == top.id && s.status == SessionStatus::Idle)
                    && children_of(all, &top.id)
                        .iter()
                        .any(|c| c.worktree.as_ref().is_some_and(|w| w.outcome.is_some()))
            },
        )
        .await;
    let children = children_of(&sessions, &top.id);
    assert_eq!(children.len(), 1, "{sessions:#?}");
    let child = children[0].clone();
    assert_eq!(child.status, SessionStatus::Done, "{child:#?}");
    let worktree = child.worktree.as_ref().unwrap();
    assert!(
        worktree
            .outcome
            .as_deref()
            .is_some_and(|o| o.starts_with("kept: uncommitted changes")),
        "{worktree:?}"
    );
    let tree = Path::new(&worktree.path).to_path_buf();
    let read = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let project = world.project.path();
    let left = |what: &str| {
        assert_eq!(read(&tree, "w.txt").as_deref(), Some("c1\n"), "{what}");
        assert_eq!(
            read(&tree, "README").as_deref(),
            Some("changed\n"),
            "{what}"
        );
    };
    assert_eq!(read(project, "p.txt").as_deref(), Some("v2\n"));
    left("as the child left it");
    let with_children = |mut request: RewindRequest| {
        request.with_children = true;
        request
    };

    // A preview with children names the child's files and changes nothing.
    let preview = world
        .host
        .rewind(with_children(RewindRequest {
            preview: true,
            ..RewindRequest::to_turn(&top.id, 2)
        }))
        .await
        .unwrap();
    assert_eq!(preview.children.len(), 1, "{preview:#?}");
    assert_eq!(preview.children[0].session_id, child.id);
    let mut seen: Vec<&str> = preview.children[0]
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, ["README", "w.txt"], "{preview:#?}");
    assert_eq!(read(project, "p.txt").as_deref(), Some("v2\n"));
    left("after a preview");

    // Not asked: the parent's file goes back, the child's worktree stays.
    let alone = world
        .host
        .rewind(RewindRequest::to_turn(&top.id, 2))
        .await
        .unwrap();
    assert!(alone.children.is_empty(), "{alone:#?}");
    assert_eq!(read(project, "p.txt").as_deref(), Some("v1\n"));
    left("after the parent's rewind");
    world
        .host
        .rewind(RewindRequest::undo(&top.id))
        .await
        .unwrap();
    assert_eq!(read(project, "p.txt").as_deref(), Some("v2\n"));

    // Asked: both go back, the child's worktree to its parent's HEAD, and the child's log
    // records its rewind.
    let both = world
        .host
        .rewind(with_children(RewindRequest::to_turn(&top.id, 2)))
        .await
        .unwrap();
    assert_eq!(both.children.len(), 1, "{both:#?}");
    assert_eq!(both.children[0].session_id, child.id);
    assert_eq!(read(project, "p.txt").as_deref(), Some("v1\n"));
    assert_eq!(read(&tree, "w.txt"), None);
    assert_eq!(read(&tree, "README").as_deref(), Some("base\n"));
    let child_log = transcript(&world, &child.id).await;
    assert!(
        child_log.contains("context_management") && child_log.contains("rewind"),
        "{child_log}"
    );

    // The undo with children undoes both.
    world
        .host
        .rewind(with_children(RewindRequest::undo(&top.id)))
        .await
        .unwrap();
    assert_eq!(read(project, "p.txt").as_deref(), Some("v2\n"));
    left("after the undo with children");
}

//! Autonomy is read live, and a sub-agent never exceeds its parent's level now: a parent a human
//! lowered (`ctl autonomy low --session P`) spawns children at the lower level, lowering a
//! parent lowers its live children at once, raising it gives them back at most their own level,
//! and in a one-shot run (no daemon) approve-all on a child does not lift it above its parent.
//! Through the built daemon and `ctl` (the fake model on 127.0.0.1), and the built `intendant
//! --json` with the scripted model, each with the built runtime and its sandbox.

use serde_json::{Value, json};

use super::controller::harness::JsonSession;
use super::daemon::{World, code, stderr, wait_until};
use super::daemon_faults::scripted;
use super::sessions::{Env, exec_turn, text_turn};

fn call(name: &str, arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": name, "arguments": arguments }] })
}

/// A `spawn_sub_agent` turn in the project itself (no worktree: the project is no repository).
fn spawn_turn(task: &str, autonomy: Option<&str>) -> Value {
    let mut arguments = json!({ "task": task, "isolation": "shared" });
    if let Some(level) = autonomy {
        arguments["autonomy"] = json!(level);
    }
    call("spawn_sub_agent", arguments)
}

impl World {
    /// The only child of session `parent`, once it exists.
    fn child_of(&self, parent: &str) -> String {
        let mut found = None;
        wait_until(&format!("a child of {parent}"), || {
            found = self
                .ctl_ok(&["--json", "sessions"])
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|s| s["parent"] == parent)
                .and_then(|s| s["id"].as_str().map(str::to_owned));
            found.is_some()
        });
        found.unwrap_or_default()
    }

    /// The one approval session `id` waits for, once it asks; its command preview and id.
    fn asked(&self, id: &str) -> (String, String) {
        let mut pending = Vec::new();
        wait_until(&format!("{id} asks"), || {
            pending = self.approvals_of(id);
            !pending.is_empty()
        });
        assert_eq!(pending.len(), 1, "{pending:?}");
        let preview = pending[0]["command_preview"].as_str().unwrap().to_owned();
        (preview, pending[0]["id"].to_string())
    }

    fn autonomy_of(&self, id: &str) -> Value {
        self.session(id)["autonomy"].clone()
    }
}

#[test]
fn security_autonomy_a_parent_lowered_over_ctl_spawns_a_child_whose_command_waits() {
    let mut world = World::playing(scripted(&[
        (
            "parent",
            json!([
                // Destructive: asks even at high, so the human can lower the parent meanwhile.
                exec_turn("rm -rf scratch"),
                spawn_turn("[child] write child.txt", None),
                text_turn("Spawned."),
            ]),
        ),
        (
            "child",
            json!([
                exec_turn("echo child > child.txt"),
                call("submit_result", json!({"summary": "wrote it"})),
            ]),
        ),
    ]));
    world.serve();
    let parent = world.start("[parent] split the work", &["--autonomy", "high"]);
    let (preview, approval) = world.asked(&parent);
    assert_eq!(preview, "$ rm -rf scratch");

    // The human lowers the parent, then lets its command run.
    assert_eq!(
        world
            .ctl_ok(&["autonomy", "low", "--session", &parent])
            .trim(),
        "low"
    );
    world.ctl_ok(&["approve", &parent, &approval]);

    // The child is at the parent's level now, not the one it started with: its command asks.
    let child = world.child_of(&parent);
    let (preview, _) = world.asked(&child);
    assert_eq!(preview, "$ echo child > child.txt");
    assert!(
        !world.project().join("child.txt").exists(),
        "the child's command ran unasked"
    );
    assert_eq!(world.autonomy_of(&child), "low");
    assert_eq!(world.autonomy_of(&parent), "low");
    world.ctl_ok(&["stop", &parent]);
    world.wait_status(&child, "interrupted");
    assert!(!world.project().join("child.txt").exists());
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn security_autonomy_lowering_a_parent_lowers_its_live_child_and_raising_it_gives_back_no_more() {
    let mut world = World::playing(scripted(&[
        (
            "top",
            json!([
                spawn_turn("[kid] clean and write", None),
                call("wait_sub_agents", json!({ "timeout_s": 300 })),
                text_turn("Done."),
            ]),
        ),
        (
            "kid",
            json!([
                exec_turn("rm -rf scratch"),
                exec_turn("echo kid > kid.txt"),
                call("submit_result", json!({"summary": "wrote it"})),
            ]),
        ),
    ]));
    world.serve();
    let parent = world.start("[top] delegate", &["--autonomy", "high"]);
    let kid = world.child_of(&parent);
    // The kid runs at its parent's level and waits on its destructive command.
    let (preview, approval) = world.asked(&kid);
    assert_eq!(preview, "$ rm -rf scratch");
    assert_eq!(world.autonomy_of(&kid), "high");

    // Lowering the parent lowers the live kid at once.
    world.ctl_ok(&["autonomy", "low", "--session", &parent]);
    assert_eq!(world.autonomy_of(&kid), "low");
    // Nor can the kid itself be set above its parent.
    let refused = world.ctl(&["autonomy", "high", "--session", &kid]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("never above its parent"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(world.autonomy_of(&kid), "low");

    // Its next command, which `high` runs unasked, now waits for a human.
    world.ctl_ok(&["approve", &kid, &approval]);
    let (preview, _) = world.asked(&kid);
    assert_eq!(preview, "$ echo kid > kid.txt");
    assert!(!world.project().join("kid.txt").exists());

    // Raising the parent past the kid's own level gives the kid back its own, no more.
    world.ctl_ok(&["autonomy", "full", "--session", &parent]);
    assert_eq!(world.autonomy_of(&parent), "full");
    assert_eq!(world.autonomy_of(&kid), "high");

    // The kid's stream said each change, with its own level beside the one in force.
    world.ctl_ok(&["stop", &parent]);
    world.wait_status(&kid, "interrupted");
    let changes: Vec<Value> = world
        .replay(&kid)
        .into_iter()
        .filter(|e| e["event"]["type"] == "autonomy_changed")
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(
        changes,
        [
            json!({"type": "autonomy_changed", "level": "low", "own": "high"}),
            json!({"type": "autonomy_changed", "level": "high", "own": "high"}),
        ],
        "{changes:#?}"
    );
    // Its listing after the end keeps the last level in force.
    assert_eq!(world.autonomy_of(&kid), "high");
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn security_autonomy_a_one_shot_child_stays_at_its_parents_level_after_approve_all() {
    let env = Env::new(json!([]));
    let scenario = env.home.path().join("scenario.json");
    let parent = json!([
        spawn_turn("[kid] write twice", None),
        call("wait_sub_agents", json!({ "timeout_s": 100 })),
        call("signal_done", json!({ "message": "done" })),
    ]);
    let kid = json!({
        "when_task_contains": "[kid]",
        "turns": [
            exec_turn("echo one > one.txt"),
            exec_turn("echo two > two.txt"),
            call("submit_result", json!({"summary": "wrote both"})),
        ]
    });
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": parent, "scripts": [kid] }).to_string(),
    )
    .unwrap();
    let scenario = scenario.display().to_string();
    let mut run = JsonSession::spawn(env.command(&[
        "--provider",
        "mock",
        "--scenario",
        &scenario,
        "--autonomy",
        "medium",
        "--json",
        "delegate",
    ]));
    let top = run.wait_for("session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The human answers the kid's first command with approve-all.
    let first = run.wait_for("approval_required");
    assert_ne!(first["session_id"], top.as_str(), "{first:#}");
    assert_eq!(first["command_preview"], "$ echo one > one.txt");
    run.send(&json!({ "action": "approve_all", "id": first["id"] }));

    // The kid is still held at its parent's level: its next command asks again.
    let second = run.wait_for("approval_required");
    assert_eq!(second["session_id"], first["session_id"], "{second:#}");
    assert_eq!(second["command_preview"], "$ echo two > two.txt");
    assert!(env.project.path().join("one.txt").exists());
    assert!(
        !env.project.path().join("two.txt").exists(),
        "approve-all lifted the child above its parent"
    );
    run.send(&json!({ "action": "approve", "id": second["id"] }));
    run.wait_for("done");
    let (status, events) = run.finish();
    assert!(status.success(), "{events:#?}");
    assert!(env.project.path().join("two.txt").exists());
}

#[test]
fn security_autonomy_the_real_codex_lowered_between_turns_asks_at_its_next_turn() {
    let Some(codex) = intendant_testkit::clis::require("codex") else {
        return;
    };
    let mut world = World::playing(json!({"model": "fake-model", "turns": [
        {"text": "Ready."},
        {"text": "Creating the file.",
         "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "touch approved.txt"}}]},
        {"text": "Created approved.txt."},
        {"text": "Still here."}
    ]}));
    let codex_home = world.home().with_file_name("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let worker = intendant_testkit::clis::codex_worker(
        &codex,
        &world
            .server
            .base_url(intendant_testkit::Wire::OpenAiResponses),
        &codex_home,
    );
    std::fs::write(world.project().join("intendant.toml"), &worker.config).unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    let mut env: Vec<(&str, &str)> = worker
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.extend(intendant_testkit::clis::offline_env());
    world.serve_with(&env);

    // At `full` codex is told never to ask; its first turn only talks.
    let id = world
        .ctl_ok(&[
            "start",
            "--agent",
            "codex",
            "--autonomy",
            "full",
            "Say ready",
        ])
        .trim()
        .to_owned();
    world.wait_status(&id, "idle");
    // The human lowers it; its next turn's shell call must ask.
    world.ctl_ok(&["autonomy", "low", "--session", &id]);
    world.ctl_ok(&["send", &id, "Create approved.txt"]);
    let (preview, _) = world.asked(&id);
    assert!(preview.contains("touch approved.txt"), "{preview}");
    assert!(!world.project().join("approved.txt").exists());
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert!(!world.project().join("approved.txt").exists());
    assert_eq!(world.stop_daemon(), 0);
}

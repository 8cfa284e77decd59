//! Worker sessions in the daemon: `ctl start --agent NAME` runs the session on that worker (a
//! fake ACP worker, and the pinned real codex on the fake model), its approval is answered from
//! `ctl approve`, and a name no worker answers to is refused.

use std::process::Stdio;

use serde_json::json;

use super::{World, code, stderr, wait_until};
use crate::suite::worker_real::{CODEX_KEY, codex_table, shell_call_scenario};
use intendant_testkit::fake_clis::write_fake_worker;

impl World {
    /// Starts `intendant serve` with `env` added, and waits until it answers.
    fn serve_with(&mut self, env: &[(&str, &str)]) {
        let child = self
            .command(&["serve"])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        wait_until("the daemon answers", || {
            self.ctl(&["status"]).status.success()
        });
    }
}

#[test]
fn ctl_start_agent_runs_the_worker_and_ctl_approve_answers_it() {
    let mut world = World::new(json!([]));
    let exe = write_fake_worker(
        &world.root.path().join("bin"),
        "kimi",
        "kimi_approve.jsonl",
        &world.root.path().join("record.jsonl"),
    )
    .unwrap();
    std::fs::write(
        world.project().join("intendant.toml"),
        format!("[agent.kimi]\npath = \"{}\"\n", exe.display()),
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    // kimi's profile needs a model and key it can use (the fake never calls a model).
    world.serve_with(&[
        ("KIMI_MODEL_NAME", "fake-model"),
        ("KIMI_MODEL_API_KEY", "sk-fake-kimi-0123456789"),
    ]);

    let id = world
        .ctl_ok(&["start", "--agent", "kimi", "Create approved.txt"])
        .trim()
        .to_owned();
    let session = world.wait_status(&id, "waiting_for_human");
    assert_eq!(session["backend"], json!({"kind": "agent", "name": "kimi"}));
    let asked = world.approvals_of(&id);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["command_preview"], "$ touch approved.txt");
    world.ctl_ok(&["approve", &id, &asked[0]["id"].to_string()]);
    world.wait_status(&id, "idle");
    assert!(world.project().join("approved.txt").exists());
    // A follow-up is the worker's next prompt in the same conversation.
    world.ctl_ok(&["send", &id, "And now?"]);
    let log = world
        .home()
        .join(intendant_core::session_log::LOGS_DIR)
        .join(&id)
        .join("session.jsonl");
    wait_until("the second round is recorded", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Second answer."))
    });
    world.wait_status(&id, "idle");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\"verdict\":\"approve\""), "{logged}");
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn ctl_start_agent_with_no_such_worker_is_refused() {
    let mut world = World::new(json!([]));
    world.serve_with(&[]);
    let out = world.ctl(&["start", "--agent", "nope", "task"]);
    assert_ne!(code(&out), 0);
    assert!(
        stderr(&out).contains("unknown agent `nope`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// The pinned real codex once through the daemon: `ctl start --agent codex`, its shell call
/// answered from `ctl approve`, the file made, the round complete and recorded.
#[test]
fn the_real_codex_through_the_daemon_asks_ctl_approve() {
    let Some(codex) = intendant_testkit::clis::require("codex") else {
        return;
    };
    let mut world = World::playing(shell_call_scenario());
    std::fs::write(
        world.project().join("intendant.toml"),
        codex_table(&codex, &world.server),
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    let codex_home = world.root.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mut env = vec![
        ("CODEX_HOME", codex_home.to_str().unwrap()),
        ("FAKE_API_KEY", CODEX_KEY),
    ];
    env.extend(intendant_testkit::clis::offline_env());
    world.serve_with(&env);

    let id = world
        .ctl_ok(&["start", "--agent", "codex", "Create approved.txt"])
        .trim()
        .to_owned();
    world.wait_status(&id, "waiting_for_human");
    let asked = world.approvals_of(&id);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0]["command_preview"]
            .as_str()
            .is_some_and(|p| p.contains("touch approved.txt")),
        "{asked:?}"
    );
    world.ctl_ok(&["approve", &id, &asked[0]["id"].to_string()]);
    let idle = world.wait_status(&id, "idle");
    assert!(world.project().join("approved.txt").exists(), "{idle}");
    assert_eq!(idle["backend"], json!({"kind": "agent", "name": "codex"}));
    let log = std::fs::read_to_string(
        world
            .home()
            .join(intendant_core::session_log::LOGS_DIR)
            .join(&id)
            .join("session.jsonl"),
    )
    .unwrap();
    assert!(log.contains("\"verdict\":\"approve\""), "{log}");
    assert!(log.contains("\"round_complete\""), "{log}");
    assert!(log.contains("Created approved.txt."), "{log}");
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

//! `intendant sessions prune` and `[daemon] session_retention_days` through the built binaries:
//! the records of sessions that ended long ago go, by the command itself while no daemon serves
//! the state root and through the daemon while one does (it keeps what it runs and lists what
//! is left); the daemon applies the retention at its start.

use serde_json::{Value, json};

use super::{World, code, stderr, wait_until};
use crate::suite::sessions::text_turn;
use crate::suite::terminal_tty::on_a_tty;

/// Makes session `id`'s record say it was last written `days` ago.
fn written_days_ago(world: &World, id: &str, days: u64) {
    let path = world.session_dir(id).join("session_meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400);
    meta["updated"] = intendant_protocol::utc::UtcTime::from_system(then)
        .rfc3339()
        .into();
    std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

/// `intendant sessions prune ARGS --json`, which must succeed: its report.
fn prune(world: &World, args: &[&str]) -> Value {
    let out = world
        .command(&[&["sessions", "prune", "--json"], args].concat())
        .output()
        .unwrap();
    assert!(out.status.success(), "prune {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn removed(report: &Value) -> Vec<&str> {
    report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

fn listed(world: &World) -> Vec<String> {
    world.listed_ids(&[])
}

#[test]
fn sessions_prune_removes_old_records_through_the_daemon_and_by_itself_without_one() {
    let mut world = World::new(json!([
        text_turn("first"),
        text_turn("second"),
        text_turn("third")
    ]));
    world.serve();
    let old = world.start("ends and grows old", &[]);
    world.wait_status(&old, "idle");
    world.ctl_ok(&["stop", &old]);
    world.wait_status(&old, "interrupted");
    let idle = world.start("waits for a follow-up", &[]);
    world.wait_status(&idle, "idle");
    written_days_ago(&world, &old, 40);
    // Its record is old too, but the daemon runs it: kept, saying so.
    written_days_ago(&world, &idle, 40);

    let preview = prune(&world, &["--older-than", "30d", "--dry-run"]);
    assert_eq!(preview["dry_run"], true);
    assert_eq!(removed(&preview), [old.as_str()]);
    assert_eq!(listed(&world).len(), 2, "a dry run removes nothing");
    assert!(world.session_dir(&old).exists());

    let mut done = Value::Null;
    // The stopped session may still be writing its last record for a moment: until then it is
    // kept as running.
    wait_until("the stopped session is pruned", || {
        done = prune(&world, &["--older-than", "30d"]);
        !removed(&done).is_empty()
    });
    assert_eq!(done["dry_run"], false);
    assert_eq!(removed(&done), [old.as_str()]);
    assert!(done["bytes"].as_u64().unwrap() > 0);
    let kept = done["kept"].as_array().unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["id"], idle.as_str());
    assert_eq!(kept[0]["why"], "it is running");
    assert_eq!(listed(&world), [idle.as_str()]);
    assert!(!world.session_dir(&old).exists());
    assert!(!world.home().join("artifacts").join(&old).exists());
    let gone = world.ctl(&["attach", &old]);
    assert_ne!(code(&gone), 0);
    // The idle one goes on working after the prune.
    world.ctl_ok(&["send", &idle, "go on"]);
    world.wait_status(&idle, "idle");

    // On a terminal, through the daemon, it follows the daemon's progress while it asks.
    let out = on_a_tty(&world.command(&["sessions", "prune", "--older-than", "30d"]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no session old enough to remove"),
        "{out:?}"
    );

    // No daemon: the command prunes by itself (the idle session ended with the daemon), and on
    // a terminal says how far it is while it goes, the line wiped once it is done.
    assert_eq!(world.stop_daemon(), 0);
    written_days_ago(&world, &idle, 40);
    let out = on_a_tty(&world.command(&["sessions", "prune", "--older-than", "4w"]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (progress, report) = text
        .split_once("\rremoved 1 session(s) so far...\r\x1b[K")
        .unwrap_or_else(|| panic!("no progress line: {text:?}"));
    assert!(progress.is_empty(), "{text:?}");
    assert!(report.starts_with("removed 1 session(s), "), "{text:?}");
    assert!(report.contains(&idle), "{text:?}");
    assert!(!world.session_dir(&idle).exists());
    let out = world.command(&["sessions"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("no sessions yet"));

    // The state root's lock held by something that is no daemon (another prune): refused,
    // saying so, and nothing removed.
    let lock = std::fs::File::open(world.home().join("daemon.lock")).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&lock);
    // SAFETY: flock(2) on a descriptor this test owns, held until `lock` is dropped.
    let locked = unsafe { libc::flock(fd, libc::LOCK_EX) };
    assert_eq!(locked, 0);
    let out = world
        .command(&["sessions", "prune", "--older-than", "0s"])
        .output()
        .unwrap();
    drop(lock);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("holds") && stderr(&out).contains("no daemon answers there"),
        "{}",
        stderr(&out)
    );

    // A length without a unit is refused, naming the forms.
    let out = world
        .command(&["sessions", "prune", "--older-than", "30"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("a length of time is N with a unit"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_removes_sessions_past_session_retention_days_at_its_start() {
    let mut world = World::new(json!([text_turn("first"), text_turn("second")]));
    world.serve();
    let old = world.start("grows old", &[]);
    world.wait_status(&old, "idle");
    let young = world.start("stays young", &[]);
    world.wait_status(&young, "idle");
    assert_eq!(world.stop_daemon(), 0);
    written_days_ago(&world, &old, 40);
    written_days_ago(&world, &young, 10);
    world.home_config("[daemon]\nsession_retention_days = 30\n");
    world.serve();
    wait_until("the old session is pruned", || {
        !world.session_dir(&old).exists()
    });
    assert_eq!(listed(&world), [young.as_str()]);
    wait_until("the daemon says so", || {
        world
            .daemon_stderr()
            .contains("pruned 1 session(s) last written more than 30d ago")
    });
}

#[test]
fn security_a_tree_a_sessions_commands_made_deeper_than_a_stack_is_pruned_and_the_daemon_goes_on() {
    // A command may write anything in its session's artifacts directory: here a chain of
    // 30,000 directories (a few seconds' work). Removing it with the standard library's
    // recursion overflowed the daemon's worker stack and aborted the daemon, every session
    // it held with it.
    let mut world = World::new(json!([]));
    let dir = world.record_ended("left a deep tree behind");
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let artifacts = world.home().join("artifacts").join(&id);
    std::fs::create_dir_all(&artifacts).unwrap();
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg("import os, sys\nos.chdir(sys.argv[1])\nfor _ in range(30000):\n    os.mkdir('d')\n    os.chdir('d')")
        .arg(&artifacts)
        .status()
        .unwrap();
    assert!(made.success());
    written_days_ago(&world, &id, 40);
    world.serve();
    let done = prune(&world, &["--older-than", "30d"]);
    assert_eq!(removed(&done), [id.as_str()]);
    assert!(!artifacts.exists() && !dir.exists());
    assert!(listed(&world).is_empty());
    assert_eq!(world.stop_daemon(), 0);
}

//! The daemon's one shutdown path through the real socket: `ctl interrupt`, `ctl stop` and
//! `ctl shutdown` while the model's command is `sleep 1000`. Each must kill the batch (the
//! runtime and the sleep, found through `/proc`); an interrupt keeps the session open for a
//! follow-up, a stop and a shutdown end it `interrupted` in its `session.jsonl`.

use serde_json::json;

use super::daemon::{World, signal, wait_until};
use super::sessions::{exec_turn, text_turn, tool_outputs};
use super::signals::{SLEEPER, assert_nothing_left, logged_end, wait_for_the_batch};

/// A daemon whose one session is mid-batch with the sleep running; the session's id.
fn mid_batch(world: &mut World) -> String {
    world.serve();
    let id = world.start("sleep a long time", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    id
}

#[test]
fn interrupt_mid_batch_kills_the_batch_and_the_session_takes_a_follow_up() {
    let mut world = World::new(json!([
        exec_turn(SLEEPER),
        exec_turn("echo again > again.txt"),
        text_turn("Done again.")
    ]));
    let id = mid_batch(&mut world);
    world.ctl_ok(&["interrupt", &id]);
    world.wait_status(&id, "idle");
    assert_nothing_left(&world.project());
    assert_eq!(world.server.turns_consumed(), 1, "the model is not asked");

    // The session is still open: a follow-up runs a new turn, with a command of its own.
    world.ctl_ok(&["send", &id, "carry on"]);
    wait_until("the follow-up's command ran", || {
        world.project().join("again.txt").exists()
    });
    wait_until("the follow-up's turn ended", || {
        world.server.turns_consumed() == 3 && world.session(&id)["status"] == "idle"
    });
    let bodies = world.turn_bodies();
    let interrupted = tool_outputs(&bodies[1]).join("\n");
    assert!(
        interrupted.contains("the turn was interrupted"),
        "{interrupted}"
    );
    assert!(!interrupted.contains("woke"), "{interrupted}");
    assert!(bodies[1].to_string().contains("carry on"));

    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(logged_end(&world.session_dir(&id)), "interrupted");
    assert_nothing_left(&world.project());
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn stop_mid_batch_ends_the_session_interrupted_and_leaves_no_process() {
    let mut world = World::new(json!([exec_turn(SLEEPER), text_turn("unreachable")]));
    let id = mid_batch(&mut world);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_nothing_left(&world.project());
    assert_eq!(logged_end(&world.session_dir(&id)), "interrupted");
    assert_eq!(
        world.server.turns_consumed(),
        1,
        "the model is not asked again"
    );
    // A stopped session takes nothing more.
    let out = world.ctl(&["send", &id, "more"]);
    assert_eq!(
        super::daemon::code(&out),
        1,
        "{}",
        super::daemon::stderr(&out)
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// The daemon, mid-batch, is shut down by `shut_down`: it exits 0 once the session has ended
/// `interrupted` in its log, and nothing it started is left.
fn shut_down_mid_batch(shut_down: impl FnOnce(&mut World)) {
    let mut world = World::new(json!([exec_turn(SLEEPER), text_turn("unreachable")]));
    let id = mid_batch(&mut world);
    shut_down(&mut world);
    let mut daemon = world.daemon.take().unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
    assert_nothing_left(&world.project());
    assert_eq!(logged_end(&world.session_dir(&id)), "interrupted");
}

#[test]
fn ctl_shutdown_mid_batch_ends_every_session_interrupted_and_leaves_no_process() {
    shut_down_mid_batch(|world| {
        world.ctl_ok(&["shutdown"]);
    });
}

#[test]
fn sigterm_of_the_daemon_mid_batch_ends_every_session_interrupted_and_leaves_no_process() {
    shut_down_mid_batch(|world| {
        let pid = world.daemon.as_ref().unwrap().id();
        signal(pid, libc::SIGTERM);
    });
}

/// A closed terminal's hang-up stops the daemon as SIGTERM does (before, the signal's default
/// action killed it outright: its sessions' records had no end).
#[test]
fn sighup_of_the_daemon_mid_batch_ends_every_session_interrupted_and_leaves_no_process() {
    shut_down_mid_batch(|world| {
        let pid = world.daemon.as_ref().unwrap().id();
        signal(pid, libc::SIGHUP);
    });
}

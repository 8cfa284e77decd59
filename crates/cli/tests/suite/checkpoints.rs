//! `intendant checkpoints`, `diff` and `rewind` through the built binary, on a session whose
//! shell commands changed the project.

use std::process::Output;

use intendant_core::session_log::read_events;
use serde_json::json;

use super::controller::harness::assert_success;
use super::sessions::{Env, exec_turn, hold_writers_lock, text_turn};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read(env: &Env, name: &str) -> Option<String> {
    std::fs::read_to_string(env.project.path().join(name)).ok()
}

#[test]
fn a_sessions_turns_are_listed_diffed_rewound_and_the_rewind_undone() {
    let env = Env::new(json!([
        exec_turn("printf 'v1\\n' > a.txt"),
        exec_turn("printf 'v2\\n' > a.txt && rm keep.txt"),
        text_turn("done"),
        text_turn("resumed after the rewind"),
    ]));
    std::fs::write(env.project.path().join("keep.txt"), "kept\n").unwrap();
    assert_success(&env.run_headless("write twice", &["--autonomy", "full"]));
    let id = env.only_session().id;

    let listed = env.command(&["checkpoints", &id]).output().unwrap();
    assert_success(&listed);
    let text = stdout(&listed);
    assert!(text.contains("turn 1: 1 file\n  A a.txt\n"), "{text}");
    assert!(
        text.contains("turn 2: 2 files\n  M a.txt\n  D keep.txt\n"),
        "{text}"
    );

    let diff = env.command(&["diff", &id, "--turn", "2"]).output().unwrap();
    assert_success(&diff);
    let patch = stdout(&diff);
    assert!(
        patch.contains("-v1\n+v2\n") && patch.contains("-kept\n"),
        "{patch}"
    );
    let range = env
        .command(&["diff", &id, "--from", "1", "--to", "2"])
        .output()
        .unwrap();
    assert!(stdout(&range).contains("+v2\n"), "{}", stdout(&range));
    // No turn named: the whole session, from before its first turn to after its last.
    let whole = env.command(&["diff", &id]).output().unwrap();
    assert_success(&whole);
    assert_eq!(stdout(&whole), stdout(&range));
    assert!(
        stdout(&whole).contains("+v2\n") && !stdout(&whole).contains("v1"),
        "{}",
        stdout(&whole)
    );

    let rewound = env.command(&["rewind", &id, "--to", "2"]).output().unwrap();
    assert_success(&rewound);
    assert!(
        stdout(&rewound).contains("rewound to before turn 2"),
        "{}",
        stdout(&rewound)
    );
    assert_eq!(read(&env, "a.txt").as_deref(), Some("v1\n"));
    assert_eq!(read(&env, "keep.txt").as_deref(), Some("kept\n"));
    let events = read_events(&env.session_dir(&id)).unwrap().records;
    let last = events.last().unwrap();
    assert_eq!(last.event, "context_management");
    assert_eq!(last.data["action"], "rewind");

    // The resumed conversation stops before turn 2: its call never reaches the model again.
    assert_success(&env.run_headless("go on", &["--resume", &id]));
    let resumed = env.turn_bodies().last().unwrap().to_string();
    assert!(resumed.contains("printf 'v1"), "{resumed}");
    assert!(!resumed.contains("printf 'v2"), "{resumed}");

    // The user's own edit since the last checkpoint blocks the undo, named, until --force.
    std::fs::write(env.project.path().join("notes.txt"), "mine\n").unwrap();
    let refused = env.command(&["rewind", &id, "--undo"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("notes.txt") && stderr(&refused).contains("--force"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        read(&env, "a.txt").as_deref(),
        Some("v1\n"),
        "nothing restored"
    );
    let undone = env
        .command(&["rewind", &id, "--undo", "--force"])
        .output()
        .unwrap();
    assert_success(&undone);
    assert_eq!(read(&env, "a.txt").as_deref(), Some("v2\n"));
    assert_eq!(read(&env, "keep.txt"), None);
}

#[test]
fn unknown_sessions_and_turns_and_a_session_without_checkpoints_are_clear_errors() {
    let env = Env::new(json!([
        exec_turn("printf 'x\\n' > a.txt"),
        text_turn("done"),
        text_turn("only talk"),
    ]));
    let unknown = env
        .command(&["checkpoints", "20990101T000000Z-abcdef"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("no session"),
        "{}",
        stderr(&unknown)
    );

    assert_success(&env.run_headless("write", &["--autonomy", "full"]));
    let id = env.only_session().id;
    let bad_turn = env.command(&["rewind", &id, "--to", "9"]).output().unwrap();
    assert!(!bad_turn.status.success());
    assert!(
        stderr(&bad_turn).contains("no turn 9") && stderr(&bad_turn).contains("turns are 1"),
        "{}",
        stderr(&bad_turn)
    );
    let bad_diff = env
        .command(&["diff", &id, "--from", "2", "--to", "1"])
        .output()
        .unwrap();
    assert!(!bad_diff.status.success());
    assert!(
        stderr(&bad_diff).contains("after --to"),
        "{}",
        stderr(&bad_diff)
    );

    let talk = Env::new(json!([text_turn("only talk")]));
    assert_success(&talk.run_headless("talk", &[]));
    let talk_id = talk.only_session().id;
    let none = talk.command(&["checkpoints", &talk_id]).output().unwrap();
    assert!(!none.status.success());
    assert!(
        stderr(&none).contains("has no checkpoints"),
        "{}",
        stderr(&none)
    );
}

#[test]
fn a_mode_change_is_listed_and_rewound_and_gc_keeps_a_live_sessions_checkpoints() {
    let env = Env::new(json!([
        exec_turn("chmod 600 secret && printf 'x\\n' > a.txt"),
        text_turn("done"),
    ]));
    let secret = env.project.path().join("secret");
    std::fs::write(&secret, "s\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    assert_success(&env.run_headless("chmod", &["--autonomy", "full"]));
    let id = env.only_session().id;
    let listed = env.command(&["checkpoints", &id]).output().unwrap();
    assert_success(&listed);
    assert!(
        stdout(&listed).contains("  M secret\n"),
        "{}",
        stdout(&listed)
    );

    let gc = env
        .command(&["checkpoints", "gc", "--json"])
        .output()
        .unwrap();
    assert_success(&gc);
    let reports: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(reports.as_array().unwrap().len(), 1, "{reports}");
    assert_eq!(reports[0]["sessions_kept"], 1, "{reports}");
    assert_eq!(reports[0]["sessions_removed"], json!([]), "{reports}");
    assert!(reports[0].get("error").is_none(), "{reports}");

    let rewound = env
        .command(&["rewind", &id, "--to", "1", "--code"])
        .output()
        .unwrap();
    assert_success(&rewound);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&secret).unwrap().permissions());
    assert_eq!(mode & 0o7777, 0o640);
    assert_eq!(read(&env, "a.txt"), None);

    let none = env.command(&["checkpoints"]).output().unwrap();
    assert!(!none.status.success());
}

/// A rewind from the command line of a session whose record another writer holds (a resume of
/// it under way, here or in the daemon, since the rewind read its record) is refused before it
/// restores anything, and the record gets no note.
#[test]
fn a_rewind_of_a_session_another_writer_holds_is_refused_and_changes_nothing() {
    let env = Env::new(json!([
        exec_turn("printf 'v1\\n' > a.txt"),
        exec_turn("printf 'v2\\n' > a.txt"),
        text_turn("done"),
    ]));
    assert_success(&env.run_headless("write twice", &["--autonomy", "full"]));
    let id = env.only_session().id;
    let events = env.session_dir(&id).join("session.jsonl");
    let held = hold_writers_lock(&events);
    let before = std::fs::read(&events).unwrap();
    let refused = env.command(&["rewind", &id, "--to", "2"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("being resumed"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        read(&env, "a.txt").as_deref(),
        Some("v2\n"),
        "nothing restored"
    );
    assert_eq!(std::fs::read(&events).unwrap(), before, "no note");
    drop(held);
    let rewound = env.command(&["rewind", &id, "--to", "2"]).output().unwrap();
    assert_success(&rewound);
    assert_eq!(read(&env, "a.txt").as_deref(), Some("v1\n"));
}

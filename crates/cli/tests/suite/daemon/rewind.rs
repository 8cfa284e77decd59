//! `ctl rewind` on a daemon session: refused while a turn waits for a human, previewed without
//! a change, bad requests named, then the rewind, after which the session's next follow-up
//! continues from before the turn rewound to (the model never sees the cut turn again).

use intendant_core::session_log::read_events;
use serde_json::{Value, json};

use super::{World, code, stderr, wait_until};
use crate::suite::sessions::{exec_turn, text_turn};

fn read(world: &World, name: &str) -> Option<String> {
    std::fs::read_to_string(world.project().join(name)).ok()
}

#[test]
fn ctl_rewind_is_refused_mid_turn_previews_then_the_next_follow_up_continues_from_before_the_turn()
{
    let mut world = World::new(json!([
        exec_turn("printf 'v1\\n' > a.txt"),
        text_turn("wrote v1"),
        exec_turn("printf 'v2\\n' > a.txt"),
        text_turn("wrote v2"),
        text_turn("carried on from v1"),
    ]));
    world.serve();
    // At the default autonomy the first command waits for approval: a turn in progress.
    let id = world.start("write a file", &[]);
    world.wait_status(&id, "waiting_for_human");
    let refused = world.ctl(&["rewind", &id, "--to", "1"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("waiting for human") && stderr(&refused).contains("interrupt"),
        "{}",
        stderr(&refused)
    );
    let approval = world.approvals_of(&id)[0]["id"].to_string();
    world.ctl_ok(&["approve-all", &id, &approval]);
    world.wait_status(&id, "idle");
    assert_eq!(read(&world, "a.txt").as_deref(), Some("v1\n"));
    world.ctl_ok(&["send", &id, "now make it v2"]);
    wait_until("the second round", || {
        world.turn_bodies().len() == 4 && world.session(&id)["status"] == "idle"
    });
    assert_eq!(read(&world, "a.txt").as_deref(), Some("v2\n"));

    // Rounds: turns 1-2, then 3-4. The preview says what rewinding turn 3 changes, and
    // changes nothing.
    let preview = world.ctl_ok(&["rewind", &id, "--to", "3", "--preview"]);
    assert!(
        preview.contains("rewinding to before turn 3: 1 file would change"),
        "{preview}"
    );
    assert!(
        preview.contains("  M a.txt\n") && preview.contains("-v2\n+v1\n"),
        "{preview}"
    );
    let as_json: Value =
        serde_json::from_str(&world.ctl_ok(&["--json", "rewind", &id, "--to", "3", "--preview"]))
            .unwrap();
    assert_eq!(as_json["preview"], true);
    // Asked to take its sub-agents along (it has none), the preview is the same.
    let with_children: Value = serde_json::from_str(&world.ctl_ok(&[
        "--json",
        "rewind",
        &id,
        "--to",
        "3",
        "--preview",
        "--with-children",
    ]))
    .unwrap();
    assert_eq!(with_children["changes"], as_json["changes"]);
    assert!(with_children.get("children").is_none(), "{with_children}");
    assert_eq!(as_json["changes"][0]["path"], "a.txt");
    assert_eq!(as_json["changes"][0]["kind"], "modified");
    assert_eq!(read(&world, "a.txt").as_deref(), Some("v2\n"));

    let sid = id.as_str();
    for (args, says) in [
        (vec!["rewind", sid, "--to", "9"], "no turn 9"),
        (
            vec!["rewind", "no-such-session", "--to", "1"],
            "no session no-such-session",
        ),
        (vec!["rewind", sid, "--undo"], "no rewind to undo"),
    ] {
        let out = world.ctl(&args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }

    let done = world.ctl_ok(&["rewind", &id, "--to", "3"]);
    assert!(done.contains("rewound to before turn 3"), "{done}");
    assert_eq!(read(&world, "a.txt").as_deref(), Some("v1\n"));
    // Recorded in the session's log, numbered on the daemon's stream like every event.
    wait_until("the rewind logged", || {
        read_events(&world.session_dir(&id))
            .unwrap()
            .records
            .iter()
            .any(|r| {
                r.event == "context_management" && r.data["action"] == "rewind" && r.seq.is_some()
            })
    });

    // The session still waits for a follow-up; the model it asks next never sees turn 3.
    assert_eq!(world.session(&id)["status"], "idle");
    world.ctl_ok(&["send", &id, "go on"]);
    wait_until("the third round", || world.turn_bodies().len() == 5);
    let next = world.turn_bodies().last().unwrap().to_string();
    assert!(
        next.contains("printf 'v1") && next.contains("go on"),
        "{next}"
    );
    assert!(
        !next.contains("printf 'v2") && !next.contains("now make it v2"),
        "{next}"
    );
    world.wait_status(&id, "idle");
}

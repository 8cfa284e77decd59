//! `ctl rewind` on a daemon session: refused while a turn waits for a human, previewed without
//! a change, bad requests named, then the rewind, after which the session's next follow-up
//! continues from before the turn rewound to (the model never sees the cut turn again); and a
//! parent's rewind that takes its sub-agent's worktree along only with `--with-children`.

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

/// `git` in `dir` with an identity; must succeed.
fn git(dir: &std::path::Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// Issue 29 through `intendant serve` and `ctl rewind`: a parent's rewind leaves its
/// sub-agent's worktree as the child left it; `--with-children` previews, rewinds and undoes
/// the worktree alongside the parent's files.
#[test]
fn ctl_rewind_takes_a_sub_agents_worktree_along_only_with_children() {
    // The parent's turn 2 edits its own file and spawns the child, which edits a tracked and a
    // new file in its worktree and leaves them uncommitted (so the worktree is kept).
    let parent = json!([
        exec_turn("printf 'v1\\n' > p.txt"),
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "printf 'v2\\n' > p.txt" } },
            { "name": "spawn_sub_agent", "arguments": {
                "task": "edit w.txt", "role": "implementation", "isolation": "worktree",
            }},
        ]},
        { "tool_calls": [{ "name": "wait_sub_agents", "arguments": { "timeout_s": 50 } }] },
        text_turn("the child is done"),
    ]);
    let child = json!({
        "when_task_contains": "edit w.txt",
        "turns": [
            exec_turn("printf 'c1\\n' > w.txt && printf 'changed\\n' > README"),
            { "tool_calls": [{ "name": "submit_result", "arguments": { "summary": "edited" } }] },
        ]
    });
    let mut world = World::playing(json!({
        "model": "fake-model", "turns": parent, "scripts": [child],
    }));
    git(&world.project(), &["init", "-q", "-b", "main"]);
    std::fs::write(world.project().join("README"), "base\n").unwrap();
    git(&world.project(), &["add", "README"]);
    git(&world.project(), &["commit", "-qm", "base"]);
    world.serve();
    let id = world.start("a child in a worktree", &["--autonomy", "full"]);
    let mut child = Value::Null;
    wait_until(
        "the parent's round ended and the child's worktree was kept",
        || {
            let sessions: Vec<Value> = world
                .ctl_ok(&["--json", "sessions"])
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let parent_idle = sessions
                .iter()
                .any(|s| s["id"] == id && s["status"] == "idle");
            match sessions.into_iter().find(|s| s["parent"] == id) {
                Some(found) if parent_idle && found["worktree"]["outcome"].is_string() => {
                    child = found;
                    true
                }
                _ => false,
            }
        },
    );
    assert_eq!(child["status"], "done", "{child}");
    let outcome = child["worktree"]["outcome"].as_str().unwrap();
    assert!(
        outcome.starts_with("kept: uncommitted changes"),
        "{outcome}"
    );
    let child_id = child["id"].as_str().unwrap().to_owned();
    let tree = std::path::PathBuf::from(child["worktree"]["path"].as_str().unwrap());
    let in_tree = |name: &str| std::fs::read_to_string(tree.join(name)).ok();
    let left = |what: &str| {
        assert_eq!(in_tree("w.txt").as_deref(), Some("c1\n"), "{what}");
        assert_eq!(in_tree("README").as_deref(), Some("changed\n"), "{what}");
    };
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v2\n"));
    left("as the child left it");

    // Without --with-children the parent's file goes back and the worktree stays.
    let alone = world.ctl_ok(&["rewind", &id, "--to", "2"]);
    assert!(!alone.contains(&child_id), "{alone}");
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v1\n"));
    left("after the parent's rewind");
    world.ctl_ok(&["rewind", &id, "--undo"]);
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v2\n"));

    // The preview with children names the child's two files and changes nothing.
    let preview: Value = serde_json::from_str(&world.ctl_ok(&[
        "--json",
        "rewind",
        &id,
        "--to",
        "2",
        "--preview",
        "--with-children",
    ]))
    .unwrap();
    assert_eq!(preview["children"][0]["session_id"], child_id.as_str());
    let mut seen: Vec<&str> = preview["children"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, ["README", "w.txt"], "{preview}");
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v2\n"));
    left("after the preview");

    // With children both go back, the worktree to the parent's HEAD; the undo restores both.
    let both = world.ctl_ok(&["rewind", &id, "--to", "2", "--with-children"]);
    assert!(both.contains(&format!("sub-agent {child_id}")), "{both}");
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v1\n"));
    assert_eq!(in_tree("w.txt"), None);
    assert_eq!(in_tree("README").as_deref(), Some("base\n"));
    world.ctl_ok(&["rewind", &id, "--undo", "--with-children"]);
    assert_eq!(read(&world, "p.txt").as_deref(), Some("v2\n"));
    left("after the undo with children");
}

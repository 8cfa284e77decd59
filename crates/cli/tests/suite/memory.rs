//! `intendant memory` through the built binary (add, list, show, search, edit, rm, backup, and
//! each bad input a clear error that stores nothing), and a daemon session's `memory_propose`
//! waiting in the approval queue as category `memory` until `ctl approve` stores it.

use std::io::Write;
use std::process::{Output, Stdio};

use intendant_testkit::Wire;
use serde_json::{Value, json};

use super::controller::harness::{Ctl, calls, run_with_limit};
use super::daemon::{World, code, wait_until};
use super::sessions::text_turn;

fn memory(ctl: &Ctl, args: &[&str]) -> Output {
    let mut cmd = ctl.bare_command();
    cmd.arg("memory").args(args);
    run_with_limit(cmd)
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The error of a failed command, which stored nothing.
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn memory_commands_keep_a_humans_memories_and_refuse_bad_input() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let project = std::fs::canonicalize(ctl.project()).unwrap();
    assert_eq!(ok(&memory(&ctl, &["list"])), "no memories (all)\n");
    assert_eq!(
        ok(&memory(&ctl, &["add", "tests run with cargo nextest"])),
        format!("added memory 1 (project:{})\n", project.display())
    );
    ok(&memory(
        &ctl,
        &["add", "--scope", "user", "terse commit messages"],
    ));
    let mut cmd = ctl.bare_command();
    cmd.args(["memory", "add", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"first line\nsecond line")
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());

    let listed = json_lines(&ok(&memory(&ctl, &["list", "--json"])));
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|m| m["source"] == "human"));
    let user = json_lines(&ok(&memory(&ctl, &["list", "--scope", "user", "--json"])));
    assert_eq!(user.len(), 1);
    assert_eq!(user[0]["text"], "terse commit messages");
    let shown = ok(&memory(&ctl, &["show", "3"]));
    assert!(shown.contains("  first line\n  second line\n"), "{shown}");

    let found = json_lines(&ok(&memory(&ctl, &["search", "--json", "nextest"])));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["id"], 1);
    assert!(found[0]["rank"].is_number());
    let plain = memory(&ctl, &["search", "nextest ("]);
    assert!(ok(&plain).contains("#1 "));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("plain terms"));

    ok(&memory(&ctl, &["edit", "1", "tests run with make check"]));
    assert_eq!(
        ok(&memory(&ctl, &["search", "nextest"])),
        "no memory matches \"nextest\" (all)\n"
    );
    assert!(ok(&memory(&ctl, &["search", "make"])).contains("#1 "));
    ok(&memory(&ctl, &["rm", "2"]));

    // Bad input: each a clear error, nothing changed.
    let mut cmd = ctl.bare_command();
    cmd.args(["memory", "add", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The command stops reading past the limit; the rest of the write may find the pipe closed.
    let _ = stdin.write_all(&vec![b'x'; 10 * 1024 * 1024]);
    drop(stdin);
    let huge = child.wait_with_output().unwrap();
    assert!(refused(&huge).contains("at most 16384 bytes"), "{huge:?}");
    let long = "y".repeat(16 * 1024 + 1);
    assert!(refused(&memory(&ctl, &["add", &long])).contains("nothing was stored"));
    assert!(refused(&memory(&ctl, &["add", "  "])).contains("needs some text"));
    assert!(
        refused(&memory(&ctl, &["add", "--scope", "global", "x"]))
            .contains("not `user` or `project:<absolute path>`")
    );
    assert!(refused(&memory(&ctl, &["rm", "2"])).contains("there is no memory 2"));
    assert!(refused(&memory(&ctl, &["edit", "9", "x"])).contains("there is no memory 9"));
    assert!(refused(&memory(&ctl, &["show", "9"])).contains("there is no memory 9"));
    assert!(refused(&memory(&ctl, &["search", " "])).contains("the search query is empty"));
    assert_eq!(json_lines(&ok(&memory(&ctl, &["list", "--json"]))).len(), 2);

    let backup = ctl.root.path().join("backup.db");
    let out = ok(&memory(&ctl, &["backup", backup.to_str().unwrap()]));
    assert!(out.starts_with("backed up "), "{out}");
    assert!(refused(&memory(&ctl, &["backup", backup.to_str().unwrap()])).contains("File exists"));
    // The copy is a whole database: a state root holding only it finds the same memories.
    let other = ctl.root.path().join("restored");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(&backup, other.join("intendant.db")).unwrap();
    let mut cmd = ctl.bare_command();
    cmd.env("INTENDANT_HOME", &other)
        .args(["memory", "search", "--json", "make"]);
    assert_eq!(json_lines(&ok(&run_with_limit(cmd))).len(), 1);
}

#[test]
fn a_daemon_sessions_proposal_waits_as_a_memory_approval_until_ctl_approves_it() {
    let mut world = World::new(json!([
        calls(&[(
            "memory_propose",
            json!({"text": "the daemon remembers this", "scope": "user"})
        )]),
        text_turn("proposed, going on")
    ]));
    world.serve();
    let id = world.start("propose a memory", &["--autonomy", "full"]);
    // The session went on without waiting: its second turn ran.
    wait_until("both turns ran", || world.server.turns_consumed() == 2);
    let mut pending = Vec::new();
    wait_until("the proposal is queued", || {
        pending = world.approvals_of(&id);
        !pending.is_empty()
    });
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["category"], "memory");
    assert_eq!(
        pending[0]["command_preview"],
        "remember (user): the daemon remembers this"
    );
    let listed = |world: &World| -> Vec<Value> {
        let out = world
            .command(&["memory", "list", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        json_lines(&String::from_utf8(out.stdout).unwrap())
    };
    assert!(
        listed(&world).is_empty(),
        "nothing is stored before a human answers"
    );

    let approval = pending[0]["id"].to_string();
    world.ctl_ok(&["approve", &id, &approval]);
    let mut kept = Vec::new();
    wait_until("the memory is stored", || {
        kept = listed(&world);
        !kept.is_empty()
    });
    assert_eq!(kept[0]["text"], "the daemon remembers this");
    assert_eq!(kept[0]["scope"], "user");
    assert_eq!(kept[0]["source"], format!("session:{id}"));
    let again = world.ctl(&["approve", &id, &approval]);
    assert_eq!(
        code(&again),
        1,
        "an answered proposal cannot be answered again"
    );
    world.ctl_ok(&["stop", &id]);
    world.stop_daemon();
}

/// A proposal nobody answered before the daemon stopped waits for the next daemon: `ctl
/// approvals` lists it under `memory`, `ctl approve memory N` stores it once (never before).
#[test]
fn a_pending_proposal_waits_across_a_daemon_restart_until_ctl_approves_it() {
    let mut world = World::new(json!([
        calls(&[(
            "memory_propose",
            json!({"text": "kept over a restart", "scope": "user"})
        )]),
        text_turn("proposed, going on")
    ]));
    world.serve();
    let id = world.start("propose a memory", &["--autonomy", "full"]);
    wait_until("both turns ran", || world.server.turns_consumed() == 2);
    wait_until("the proposal is queued", || {
        !world.approvals_of(&id).is_empty()
    });
    world.stop_daemon();

    world.serve();
    let mut waiting = Vec::new();
    wait_until("the proposal waits under memory", || {
        waiting = world.approvals_of("memory");
        !waiting.is_empty()
    });
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["category"], "memory");
    assert_eq!(
        waiting[0]["command_preview"],
        "remember (user): kept over a restart"
    );
    let listed = |world: &World| -> Vec<Value> {
        let out = world
            .command(&["memory", "list", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        json_lines(&String::from_utf8(out.stdout).unwrap())
    };
    assert!(
        listed(&world).is_empty(),
        "nothing stored before a human answers"
    );
    let n = waiting[0]["id"].to_string();
    world.ctl_ok(&["approve", "memory", &n]);
    let kept = listed(&world);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["text"], "kept over a restart");
    assert_eq!(kept[0]["source"], format!("session:{id}"));
    assert_eq!(
        code(&world.ctl(&["approve", "memory", &n])),
        1,
        "answered once"
    );
    assert!(world.approvals_of("memory").is_empty());
    world.stop_daemon();
}

/// A corrupted `intendant.db` breaks no session: the run says the memory tools are off (with
/// what to do), a `workflow_checkpoint` is answered with the same clear error, the session
/// completes, and the file is left exactly as it was.
#[test]
fn a_corrupted_database_turns_the_memory_tools_off_and_the_session_completes() {
    let env = super::sessions::Env::new(json!([
        { "tool_calls": [{ "name": "workflow_checkpoint",
                           "arguments": { "name": "plan", "data": { "next": "b" } } }] },
        text_turn("Went on without the database.")
    ]));
    let home = env.intendant_home();
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("intendant.db");
    let garbage = vec![0x5a_u8; 8192];
    std::fs::write(&db, &garbage).unwrap();
    let out = env.run_headless("plan the work", &["--autonomy", "full"]);
    super::controller::harness::assert_success(&out);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("the memory tools are off for this session")
            && said.contains("corrupted")
            && said.contains("restore a backup"),
        "{said}"
    );
    let bodies = env.turn_bodies();
    let tools = bodies[0]["tools"].to_string();
    assert!(
        tools.contains("workflow_checkpoint") && !tools.contains("memory_search"),
        "{tools}"
    );
    let outputs = super::sessions::tool_outputs(&bodies[1]);
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("corrupted") && o.contains("was not saved")),
        "{outputs:?}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
}

//! Faults of the real daemon, through its socket: a client that hangs up while an approval is
//! pending, a session whose provider fails beside one that runs on, and `kill -9` of the daemon
//! mid-turn followed by a restart and `ctl start --resume`, which lists and resumes each session
//! as it was recorded (autonomy, backend, provider, model); a disk that fills under a session's
//! record, which stops that session saying why and lets it resume once space is freed; a
//! session whose metadata no longer reads, named at the daemon's start; a follow-up held for a
//! slot when the daemon stops, which a resume sends.

use intendant_core::session_log::{read_conversation, read_events};
use intendant_testkit::full_disk;
use serde_json::{Value, json};

use super::daemon::{Attached, World, stderr, wait_until};
use super::sessions::{exec_turn, text_turn};
use super::signals::{SLEEPER, assert_nothing_left, logged_end, processes_in, wait_for_the_batch};

/// A scenario whose sessions each play the script their task's `[key]` names.
pub(super) fn scripted(scripts: &[(&str, Value)]) -> Value {
    let scripts: Vec<Value> = scripts
        .iter()
        .map(|(key, turns)| json!({"when_task_contains": format!("[{key}]"), "turns": turns}))
        .collect();
    json!({"model": "fake-model", "turns": [], "scripts": scripts})
}

/// The user texts the model was sent in `world`'s last turn request (an OpenAI Responses
/// request).
fn last_user_texts(world: &World) -> String {
    let body = world.server.turn_requests().pop().unwrap().body;
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["role"] == "user")
        .map(|i| i["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why `world` lists session `id` as it does (empty when it says nothing).
fn reason(world: &World, id: &str) -> String {
    world.session(id)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Asserts `world` lists session `id` left unfinished with a follow-up it never took.
fn assert_left_with_a_follow_up(world: &World, id: &str) {
    let left = reason(world, id);
    assert!(
        left.starts_with("left unfinished: ")
            && left.ends_with("; a follow-up sent to it was never taken: a resume sends it"),
        "{left}"
    );
}

/// Resumes session `id` with `text` (and `extra` arguments) until it is idle: the same session,
/// answering `answer`, its model sent what it lacked (`lacked`) with `text` in its last request.
fn resumes_with(world: &World, id: &str, text: &str, extra: &[&str], lacked: &str, answer: &str) {
    let args: Vec<&str> = ["--resume", id]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    assert_eq!(world.start(text, &args), id, "the same session");
    world.wait_status(id, "idle");
    assert_eq!(
        world.session(id)["final_text"],
        answer,
        "{}",
        world.session(id)
    );
    let texts = last_user_texts(world);
    assert!(texts.contains(lacked) && texts.contains(text), "{texts}");
}

#[test]
fn a_client_that_hangs_up_while_an_approval_is_pending_loses_nothing() {
    let mut world = World::new(json!([
        exec_turn("echo kept > kept.txt"),
        text_turn("Done.")
    ]));
    world.serve();
    let id = world.start("keep it", &[]);
    let mut first = Attached::spawn(&world, &id);
    let asked = first.wait_for("approval_required");
    // The client dies with the question unanswered.
    drop(first);
    let pending = world.approvals_of(&id);
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["id"], asked["event"]["id"]);
    assert_eq!(world.session(&id)["status"], "waiting_for_human");
    // The next client answers it, and the command runs once.
    let mut second = Attached::spawn(&world, &id);
    second.send(&json!({"action": "approve", "id": asked["event"]["id"]}));
    second.wait_for("approval_resolved");
    world.wait_status(&id, "idle");
    assert_eq!(
        std::fs::read_to_string(world.project().join("kept.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn a_session_whose_provider_fails_ends_failed_and_the_other_runs_on() {
    let mut world = World::playing(scripted(&[
        (
            "steady",
            json!([
                exec_turn("echo steady > steady.txt"),
                text_turn("Steady done.")
            ]),
        ),
        // Every attempt is cut mid-stream: more cuts than the provider restarts.
        (
            "broken",
            json!([{"text": "never whole", "faults": [{"type": "cut", "after_events": 1, "times": 20}]}]),
        ),
    ]));
    world.serve();
    let steady = world.start("[steady] write", &[]);
    world.wait_status(&steady, "waiting_for_human");
    let broken = world.start("[broken] fail", &[]);
    world.wait_status(&broken, "failed");
    assert_eq!(logged_end(&world.session_dir(&broken)), "failed");

    // The steady session was not touched: its approval is still pending and it goes on.
    let pending = world.approvals_of(&steady);
    assert_eq!(pending.len(), 1, "{pending:?}");
    world.ctl_ok(&["approve", &steady, &pending[0]["id"].to_string()]);
    world.wait_status(&steady, "idle");
    assert!(world.project().join("steady.txt").exists());
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn kill_9_of_the_daemon_mid_turn_loses_no_record_and_the_session_resumes() {
    let mut world = World::playing(scripted(&[
        ("sleeper", json!([exec_turn(SLEEPER)])),
        (
            "asker",
            json!([
                exec_turn("echo asked > asked.txt"),
                text_turn("Resumed and done.")
            ]),
        ),
        (
            "quiet",
            json!([text_turn("Quiet first."), text_turn("Quiet again.")]),
        ),
    ]));
    world.serve();
    let quiet = world.start("[quiet] say little", &["--autonomy", "high"]);
    world.wait_status(&quiet, "idle");
    let sleeper = world.start("[sleeper] sleep", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    let asker = world.start("[asker] ask first", &[]);
    world.wait_status(&asker, "waiting_for_human");
    let recorded = |s: &Value| json!([s["autonomy"], s["backend"], s["provider"], s["model"]]);
    let before: Vec<Value> = [&quiet, &sleeper, &asker]
        .iter()
        .map(|id| recorded(&world.session(id)))
        .collect();
    assert_eq!(before[0][0], "high");
    assert_eq!(before[1][0], "full");
    assert_eq!(before[2][0], "medium");

    world.kill_daemon();
    // No handler ran, yet the batch died with the daemon (the runtime's parent-death signal).
    assert_nothing_left(&world.project());
    for id in [&sleeper, &asker] {
        let read = read_events(&world.session_dir(id)).unwrap();
        let kinds: Vec<&str> = read.records.iter().map(|r| r.event.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"session_started"), "{kinds:?}");
        assert!(!kinds.contains(&"session_ended"), "{kinds:?}");
    }

    world.serve();
    for id in [&quiet, &sleeper, &asker] {
        let listed = world.session(id);
        assert_eq!(listed["status"], "interrupted");
        let reason = listed["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("left unfinished: the process running it (pid ")
                && reason.contains("killed"),
            "{listed}"
        );
    }
    let after: Vec<Value> = [&quiet, &sleeper, &asker]
        .iter()
        .map(|id| recorded(&world.session(id)))
        .collect();
    assert_eq!(
        after, before,
        "listed as recorded after kill -9 and a restart"
    );
    // And with what it last answered, read back from its log after the start.
    wait_until("the quiet session's answer listed again", || {
        world.session(&quiet)["final_text"] == "Quiet first."
    });
    // A resume naming no autonomy, provider or model continues as recorded.
    let resumed = world.start("[quiet] go on", &["--resume", &quiet]);
    assert_eq!(resumed, quiet);
    world.wait_status(&quiet, "idle");
    assert_eq!(recorded(&world.session(&quiet)), before[0]);
    assert_eq!(world.session(&quiet)["final_text"], "Quiet again.");
    // The same conversation: the resumed request carries the first task and the new one.
    resumes_with(
        &world,
        &asker,
        "[asker] go on",
        &["--autonomy", "full"],
        "ask first",
        "Resumed and done.",
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// `kill -9` of the daemon takes along what runs code for its sessions beside their batches: an
/// agent CLI worker (below `intendant-runtime --guard`) and an MCP server (below the runtime of
/// `--sandboxed-stdio`), each with what it started, in a session of its own too. Before, both
/// ran on without a supervisor until the next daemon started (a worker mid-turn calling its
/// model and running its tools).
#[test]
fn kill_9_of_the_daemon_ends_its_workers_and_mcp_servers_with_all_they_started() {
    let mut world = World::new(json!([text_turn("Never sent: the server never answers.")]));
    world.trusted_config(
        r#"[agent.acp.lingering]
command = ["sh", "-c", "setsid sleep 1001 & sleep 1002"]

[mcp_servers.lingering]
command = "sh"
args = ["-c", "setsid sleep 1003 & sleep 1004"]
"#,
    );
    world.serve();
    world.ctl_ok(&["start", "--agent", "lingering", "work on"]);
    world.start("talk", &[]);
    let project = world.project();
    let sleeping = || {
        processes_in(&project)
            .iter()
            .filter(|(_, name)| name == "sleep")
            .count()
    };
    wait_until("the worker, the server and what they started run", || {
        sleeping() == 4
    });
    world.kill_daemon();
    assert_nothing_left(&project);
}

/// The state root's `logs/` on a small tmpfs the daemon alone sees, filled while a session waits
/// for an approval: the approval's answer cannot be recorded, so the session is stopped before
/// its command runs, and its end (and the daemon's stderr) says why; its records stay whole (no
/// torn line), the daemon goes on answering (a start meanwhile is refused with the system's
/// reason and leaves no directory), and once space is freed the session resumes and finishes.
#[test]
fn a_session_whose_record_meets_a_full_disk_is_stopped_saying_why_and_resumes_once_freed() {
    let mut world = World::playing(scripted(&[(
        "filler",
        json!([
            exec_turn("echo ran > ran.txt"),
            text_turn("Done once there was room.")
        ]),
    )]));
    let Some(pid) = world.serve_with_small_logs(1024 * 1024) else {
        full_disk::skipped();
        return;
    };
    let id = world.start("[filler] write", &[]);
    let mut attached = Attached::spawn(&world, &id);
    let asked = attached.wait_for("approval_required");
    let ballast = full_disk::fill(&full_disk::seen_by(pid, &world.home().join("logs")));

    attached.send(&json!({"action": "approve", "id": asked["event"]["id"]}));
    let ended = attached.wait_for("session_ended");
    assert_eq!(ended["event"]["status"], "interrupted", "{ended}");
    let reason = ended["event"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("could not be written") && reason.contains("No space left on device"),
        "{reason}"
    );
    world.wait_status(&id, "interrupted");
    let replayed = world.replay(&id);
    let last = replayed.last().unwrap();
    assert_eq!(last["event"]["type"], "session_ended", "{replayed:?}");
    assert_eq!(
        last["event"]["reason"], reason,
        "a later `ctl attach` shows why too"
    );
    assert!(
        !world.project().join("ran.txt").exists(),
        "nothing ran that its record could not show"
    );
    // The operator is told on the daemon's stderr; the daemon answers; the record reads whole.
    let said = world.daemon_stderr();
    assert!(
        said.contains(&format!("session {id}:")) && said.contains("No space left on device"),
        "{said}"
    );
    world.ctl_ok(&["status"]);
    let dir = full_disk::seen_by(pid, &world.session_dir(&id));
    let events = read_events(&dir).unwrap();
    assert_eq!(events.torn_tail, None);
    assert_eq!(
        events.records.first().map(|r| r.event.as_str()),
        Some("session_started")
    );
    assert_eq!(read_conversation(&dir).unwrap().torn_tail, None);
    // A start while the disk is full is refused with the system's reason, and leaves nothing.
    let refused = world.try_start("[filler] another", &[]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("No space left on device"),
        "{}",
        stderr(&refused)
    );
    let logs = full_disk::seen_by(pid, &world.home().join("logs"));
    let mut left: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [id.clone(), "ballast".to_owned()]);

    std::fs::remove_file(&ballast).unwrap();
    let resumed = world.start("[filler] go on", &["--resume", &id]);
    assert_eq!(resumed, id);
    world.wait_status(&id, "idle");
    assert_eq!(
        world.session(&id)["final_text"],
        "Done once there was room.",
        "{}",
        world.session(&id)
    );
    let events = read_events(&dir).unwrap();
    assert_eq!(events.torn_tail, None);
    let kinds: Vec<&str> = events.records.iter().map(|r| r.event.as_str()).collect();
    assert!(kinds.contains(&"done"), "{kinds:?}");
    assert_eq!(world.stop_daemon(), 0);
}

/// A session whose project directory is removed while it waits for a follow-up: the follow-up's
/// batch cannot start, and the session fails saying the directory is gone (not that the runtime
/// is missing, which is what the system's "No such file or directory" read as); the daemon goes
/// on answering.
#[test]
fn a_session_whose_project_is_removed_while_it_waits_fails_naming_the_directory() {
    let mut world = World::playing(scripted(&[(
        "gone",
        json!([
            exec_turn("echo one > one.txt"),
            text_turn("First done."),
            exec_turn("echo two > two.txt"),
            text_turn("Never reached.")
        ]),
    )]));
    world.serve();
    let id = world.start("[gone] write", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let project = world.project();
    std::fs::remove_dir_all(&project).unwrap();
    // `ctl` runs in the project, which is gone: from the state root instead.
    let ctl = |args: &[&str]| {
        world
            .command(&[&["ctl"], args].concat())
            .current_dir(world.home())
            .output()
            .unwrap()
    };
    let sent = ctl(&["send", &id, "again"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    let mut ended = Value::Null;
    wait_until("the session's end", || {
        // Attaching to a session that failed exits 1 after its replay.
        let replayed = String::from_utf8(ctl(&["--json", "attach", &id]).stdout).unwrap();
        ended = replayed
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["event"]["type"] == "session_ended")
            .unwrap_or_default();
        !ended.is_null()
    });
    assert_eq!(ended["event"]["status"], "failed", "{ended}");
    let reason = ended["event"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "its working directory {} does not exist",
            project.display()
        )),
        "{reason}"
    );
    assert!(ctl(&["status"]).status.success());
    assert_eq!(world.stop_daemon(), 0);
    // Where the harness looks for what is left.
    std::fs::create_dir(&project).unwrap();
}

/// `serve` whose state root has no room (a full tmpfs only it sees): one line naming the file
/// and the system's reason, exit 1 (it printed `Error: ...`, then the same reason again under
/// `Caused by:`).
#[test]
fn serve_with_no_room_in_its_state_root_says_why_in_one_line() {
    let world = World::new(json!([]));
    let home = world.home();
    std::fs::create_dir_all(&home).unwrap();
    let mut filled = full_disk::filled_first(&world.command(&["serve"]), &home);
    if full_disk::small_tmpfs_for(&mut filled, &home, 256 * 1024).is_none() {
        full_disk::skipped();
        return;
    }
    let out = filled.output().unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let lines: Vec<&str> = said.lines().filter(|l| !l.starts_with("left:")).collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(
        lines[0].starts_with("intendant: ")
            && lines[0].ends_with("daemon.lock: No space left on device (os error 28)"),
        "{said}"
    );
}

/// A session whose `session_meta.json` no longer reads (cut short here) is left out of the
/// daemon's listing, and `serve` says so at its start naming the file, as `intendant sessions`
/// does (both were silent: the session was gone from sight); its files are kept, and its log's
/// numbers still count, so the daemon numbers its next events past them.
#[test]
fn a_session_whose_metadata_does_not_read_is_named_at_the_start_and_numbered_past() {
    let mut world = World::new(json!([text_turn("Once."), text_turn("Twice.")]));
    world.serve();
    let damaged = world.start("to be damaged", &["--autonomy", "high"]);
    world.wait_status(&damaged, "idle");
    assert_eq!(world.stop_daemon(), 0);
    let dir = world.session_dir(&damaged);
    let last = read_events(&dir)
        .unwrap()
        .records
        .last()
        .unwrap()
        .seq
        .unwrap();
    let meta = dir.join("session_meta.json");
    let whole = std::fs::read(&meta).unwrap();
    std::fs::write(&meta, &whole[..whole.len() / 2]).unwrap();

    world.serve();
    let said = world.daemon_stderr();
    let named = format!(
        "intendant serve: not listed, its files kept: session log: invalid session metadata {}: ",
        meta.display()
    );
    assert!(said.contains(&named), "{said}");
    assert!(!world.listed_ids(&[]).contains(&damaged));
    let next = world.start("after", &["--autonomy", "high"]);
    world.wait_status(&next, "idle");
    let first = read_events(&world.session_dir(&next)).unwrap().records[0]
        .seq
        .unwrap();
    assert!(
        first > last,
        "numbered {first} after the damaged log's {last}"
    );
    let out = world.command(&["sessions"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&named.replace("intendant serve: ", "intendant sessions: ")),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("session.jsonl").is_file(), "its files are kept");
    assert_eq!(world.stop_daemon(), 0);
}

/// A session queued for a slot when the daemon is killed never ran: after the restart it is
/// listed so (it read "left unfinished", as one cut off mid-turn does), and a resume runs the
/// task it was started with, which its conversation lacked (the model was sent the resume's
/// text alone, the task lost).
#[test]
fn a_session_queued_when_the_daemon_dies_is_listed_never_ran_and_a_resume_runs_its_task() {
    let mut world = World::playing(scripted(&[
        ("holder", json!([exec_turn(SLEEPER)])),
        ("queued", json!([text_turn("Ran at last.")])),
    ]));
    world.home_config("[daemon]\nmax_running = 1\n");
    world.serve();
    let holder = world.start("[holder] hold the slot", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    let queued = world.start("[queued] the queued task", &["--autonomy", "high"]);
    assert_eq!(world.session(&queued)["status"], "queued");
    world.kill_daemon();
    assert_nothing_left(&world.project());

    world.serve();
    assert_eq!(world.session(&queued)["status"], "interrupted");
    let never_ran = reason(&world, &queued);
    assert!(
        never_ran.starts_with("never ran: the process that took it (pid ")
            && never_ran.ends_with("a resume runs its task"),
        "{never_ran}"
    );
    let left = reason(&world, &holder);
    assert!(left.starts_with("left unfinished: "), "{left}");
    resumes_with(
        &world,
        &queued,
        "[queued] go on",
        &[],
        "the queued task",
        "Ran at last.",
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A follow-up the daemon held for a session until a slot was free is recorded held, so a
/// daemon that stops meanwhile does not lose it: after `kill -9` the session is listed with it
/// (one left unfinished was listed as if nothing waited), and a resume sends it; after a
/// graceful stop too (the text went with the daemon either way, the model never sent it).
#[test]
fn a_follow_up_held_for_a_slot_when_the_daemon_stops_is_sent_by_a_resume() {
    let mut world = World::playing(scripted(&[
        ("holder", json!([exec_turn(SLEEPER)])),
        ("other holder", json!([exec_turn(SLEEPER)])),
        (
            "asker",
            json!([
                text_turn("First round."),
                text_turn("Took the held follow-up."),
                text_turn("Took the second.")
            ]),
        ),
    ]));
    world.home_config("[daemon]\nmax_running = 1\n");
    world.serve();
    let asker = world.start("[asker] the first task", &["--autonomy", "high"]);
    world.wait_status(&asker, "idle");
    let holder = world.start("[holder] hold the slot", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    world.ctl_ok(&["send", &asker, "the held follow-up"]);
    assert_eq!(world.session(&asker)["status"], "queued");
    world.kill_daemon();
    assert_nothing_left(&world.project());

    world.serve();
    assert_left_with_a_follow_up(&world, &asker);
    let left = reason(&world, &holder);
    assert!(
        left.starts_with("left unfinished: ") && !left.contains("follow-up"),
        "{left}"
    );
    resumes_with(
        &world,
        &asker,
        "go on",
        &[],
        "the held follow-up",
        "Took the held follow-up.",
    );

    // Held again, then the daemon stopped gracefully.
    world.start("[other holder] hold the slot", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    world.ctl_ok(&["send", &asker, "the second held follow-up"]);
    assert_eq!(world.session(&asker)["status"], "queued");
    assert_eq!(world.stop_daemon(), 0);
    world.serve();
    resumes_with(
        &world,
        &asker,
        "and on",
        &[],
        "the second held follow-up",
        "Took the second.",
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A resume queued for a slot when the daemon is killed keeps its words: they are recorded held,
/// as a follow-up waiting for a slot is, the session is listed with them, and the next resume
/// sends them (they went with the daemon, recorded nowhere).
#[test]
fn a_resume_queued_for_a_slot_when_the_daemon_dies_leaves_its_words_for_the_next() {
    let mut world = World::playing(scripted(&[
        ("holder", json!([exec_turn(SLEEPER)])),
        (
            "resumed",
            json!([
                text_turn("First round."),
                text_turn("Took the queued words."),
                text_turn("Took the words that waited."),
                text_turn("Nothing twice.")
            ]),
        ),
        ("other holder", json!([exec_turn(SLEEPER)])),
    ]));
    world.home_config("[daemon]\nmax_running = 1\n");
    world.serve();
    let resumed = world.start("[resumed] the first task", &["--autonomy", "high"]);
    world.wait_status(&resumed, "idle");
    world.ctl_ok(&["stop", &resumed]);
    world.wait_status(&resumed, "interrupted");
    world.start("[holder] hold the slot", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    let again = world.start("the queued resume's words", &["--resume", &resumed]);
    assert_eq!(again, resumed, "the same session");
    assert_eq!(world.session(&resumed)["status"], "queued");
    world.kill_daemon();
    assert_nothing_left(&world.project());

    world.serve();
    assert_left_with_a_follow_up(&world, &resumed);
    resumes_with(
        &world,
        &resumed,
        "go on",
        &[],
        "the queued resume's words",
        "Took the queued words.",
    );

    // Queued again, and run once a slot frees: its start takes the words, and the next resume
    // does not send them again.
    world.ctl_ok(&["stop", &resumed]);
    world.wait_status(&resumed, "interrupted");
    let holder = world.start("[other holder] hold the slot", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    world.start("the words that waited", &["--resume", &resumed]);
    assert_eq!(world.session(&resumed)["status"], "queued");
    world.ctl_ok(&["stop", &holder]);
    assert_eq!(
        world.wait_status(&resumed, "idle")["final_text"],
        "Took the words that waited."
    );
    world.ctl_ok(&["stop", &resumed]);
    world.wait_status(&resumed, "interrupted");
    resumes_with(&world, &resumed, "and on", &[], "and on", "Nothing twice.");
    let texts = last_user_texts(&world);
    assert_eq!(texts.matches("the words that waited").count(), 1, "{texts}");
    assert_eq!(world.stop_daemon(), 0);
}

/// A follow-up sent while the session's round works reaches its loop at once, which keeps it
/// for the round's end: a daemon killed before then took it along (the record said it was
/// sent). It is listed as never taken and a resume sends it, as one the daemon held; one the
/// next round took is not sent again.
#[test]
fn a_follow_up_sent_during_a_round_the_daemon_dies_in_is_sent_by_a_resume() {
    let mut world = World::playing(scripted(&[(
        "worker",
        json!([
            exec_turn(SLEEPER),
            text_turn("Took the follow-up."),
            text_turn("Took nothing twice.")
        ]),
    )]));
    world.serve();
    let worker = world.start("[worker] the first task", &["--autonomy", "full"]);
    wait_for_the_batch(&world.project());
    let sent = world.ctl(&["send", &worker, "the follow-up mid-round"]);
    assert_eq!(sent.status.code(), Some(0));
    let told = stderr(&sent);
    assert!(
        told.contains("is working; the follow-up is its next round, once this one ends"),
        "{told}"
    );
    assert_eq!(world.session(&worker)["status"], "running");
    world.kill_daemon();
    assert_nothing_left(&world.project());

    world.serve();
    assert_left_with_a_follow_up(&world, &worker);
    resumes_with(
        &world,
        &worker,
        "go on",
        &[],
        "the follow-up mid-round",
        "Took the follow-up.",
    );

    // Taken by that round: a second resume does not send it again.
    assert_eq!(world.stop_daemon(), 0);
    world.serve();
    let left = reason(&world, &worker);
    assert!(!left.contains("follow-up"), "{left}");
    resumes_with(
        &world,
        &worker,
        "and on",
        &[],
        "go on",
        "Took nothing twice.",
    );
    let body = world.server.turn_requests().pop().unwrap().body.to_string();
    assert_eq!(
        body.matches("the follow-up mid-round").count(),
        1,
        "sent once: {body}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

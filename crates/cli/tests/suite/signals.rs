//! SIGTERM and SIGINT of the one-shot `intendant`, mid-batch with `sleep 1000` running through
//! the fake model server: the process exits with 128 + the signal, `session.jsonl` ends with
//! `session_ended` status `interrupted`, and nothing of the test's session is left running
//! (every process whose working directory is the test's own project, found through `/proc`).
//! On a terminal, Ctrl-C interrupts the turn and the prompt takes a follow-up.

use std::path::Path;
use std::time::{Duration, Instant};

use intendant_core::session_log::read_events;
use intendant_protocol::events::{EndStatus, RecordedStatus};
use serde_json::json;

use super::sessions::{Env, exec_turn, text_turn, tool_outputs, wait_until};
use super::terminal_tty::{Tty, follow_up_prompt_after, on_a_tty_within};

/// How long the test waits for a stopped process to disappear before it counts as left behind.
const GONE_WAIT: Duration = Duration::from_secs(10);
/// The follow-up prompt at the start of a line.
const PROMPT_LINE: &str = "\r\n> ";
/// The command the model runs: a shell that records its pid and waits on a sleep.
pub(super) const SLEEPER: &str = "echo $$ > sleeper.pid; sleep 1000; echo woke";

/// Every live (not zombie) process whose working directory is `project`, as (pid, name).
pub(super) fn processes_in(project: &Path) -> Vec<(i32, String)> {
    let project = project.canonicalize().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).ok() != Some(project.clone()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if stat[close + 1..].trim_start().starts_with('Z') {
            continue;
        }
        found.push((pid, stat[open + 1..close].to_owned()));
    }
    found
}

/// Waits until the runtime and the sleep run in `project`.
pub(super) fn wait_for_the_batch(project: &Path) {
    wait_until(|| {
        let names: Vec<String> = processes_in(project).into_iter().map(|p| p.1).collect();
        names.iter().any(|n| n.starts_with("intendant-run")) && names.iter().any(|n| n == "sleep")
    });
}

/// Asserts nothing runs in `project` within [`GONE_WAIT`]; kills what is left either way.
pub(super) fn assert_nothing_left(project: &Path) {
    let deadline = Instant::now() + GONE_WAIT;
    while !processes_in(project).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = processes_in(project);
    for (pid, _) in &left {
        // SAFETY: kill(2) on one pid touches no memory.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    assert!(left.is_empty(), "left running after the signal: {left:?}");
}

/// The `status` of the last record of `session.jsonl`, which must be `session_ended` within
/// [`GONE_WAIT`]: a daemon lists a session as ended when it publishes `session_ended`, and its
/// log writer records that a moment later.
pub(super) fn logged_end(dir: &Path) -> String {
    let deadline = Instant::now() + GONE_WAIT;
    let mut events = read_events(dir).unwrap();
    while events
        .records
        .last()
        .is_none_or(|r| r.event != "session_ended")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        events = read_events(dir).unwrap();
    }
    let last = events.records.last().expect("the log has events");
    assert_eq!(last.event, "session_ended", "{:?}", events.records);
    last.data["status"].as_str().unwrap_or_default().to_owned()
}

/// `intendant --json` mid-batch gets `signo`: checks the exit status, the log and /proc.
fn signal_mid_batch(signo: i32, expected_exit: i32) {
    let env = Env::new(json!([exec_turn(SLEEPER), text_turn("unreachable")]));
    let mut session = env.start_json("sleep a long time", &["--autonomy", "full"]);
    session.wait_for("tool_batch");
    wait_for_the_batch(env.project.path());
    session.signal(signo);
    let (status, events) = session.finish();
    assert_eq!(status.code(), Some(expected_exit), "{status:?}");
    let last = events.last().expect("events");
    assert_eq!(
        (last["type"].as_str(), last["status"].as_str()),
        (Some("session_ended"), Some("interrupted")),
        "{last}"
    );
    let id = env.only_session().id;
    assert_eq!(logged_end(&env.session_dir(&id)), "interrupted");
    assert_eq!(
        env.only_session().status,
        RecordedStatus::Ended(EndStatus::Interrupted)
    );
    assert_nothing_left(env.project.path());
    assert_eq!(
        env.server.turns_consumed(),
        1,
        "the model is not asked again"
    );
}

#[test]
fn sigterm_of_json_mid_batch_ends_interrupted_and_leaves_nothing_running() {
    signal_mid_batch(libc::SIGTERM, 143);
}

#[test]
fn sigint_of_json_mid_batch_ends_interrupted_and_leaves_nothing_running() {
    signal_mid_batch(libc::SIGINT, 130);
}

/// A closed terminal's hang-up stops the run as SIGTERM does (before, its default action killed
/// the run outright, the record left without its end).
#[test]
fn sighup_of_json_mid_batch_ends_interrupted_and_leaves_nothing_running() {
    signal_mid_batch(libc::SIGHUP, 129);
}

#[test]
fn ctrl_c_on_a_terminal_interrupts_the_batch_and_a_follow_up_runs() {
    let env = Env::new(json!([
        exec_turn(SLEEPER),
        text_turn("After the interrupt.")
    ]));
    let cmd = env.task_command("sleep a long time", &["--autonomy", "full"]);
    // `exec`: the program is the terminal's foreground process itself, so no shell in between
    // dies of the Ctrl-C.
    let mut tty = Tty::spawn(on_a_tty_within(&cmd, "exec ", ""));
    wait_for_the_batch(env.project.path());
    let pid: i32 = std::fs::read_to_string(env.project.path().join("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let prompts = tty.seen.matches(PROMPT_LINE).count();
    // Ctrl-C: the terminal sends SIGINT to its foreground process group.
    tty.type_key('\x03');
    tty.wait_for("round 1 interrupted", 1);
    tty.wait_for(PROMPT_LINE, prompts + 1);
    // The interrupt stopped the command, not the session's end.
    let deadline = Instant::now() + GONE_WAIT;
    let runs = || {
        processes_in(env.project.path())
            .iter()
            .any(|(p, _)| *p == pid)
    };
    while runs() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!runs(), "the interrupted command still runs");
    tty.type_line("carry on");
    tty.wait_for(&follow_up_prompt_after("After the interrupt."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    let bodies = env.turn_bodies();
    assert_eq!(bodies.len(), 2);
    let outputs = tool_outputs(&bodies[1]).join("\n");
    assert!(outputs.contains("the turn was interrupted"), "{outputs}");
    assert!(!outputs.contains("woke"), "{outputs}");
    assert!(bodies[1].to_string().contains("carry on"));
    assert_eq!(
        env.only_session().status,
        RecordedStatus::Ended(EndStatus::Completed)
    );
    assert_nothing_left(env.project.path());
}

#[test]
fn a_killed_controller_takes_the_running_commands_along() {
    // No handler runs on SIGKILL: the runtime's parent-death signal kills the process groups it
    // started before it dies itself.
    let env = Env::new(json!([exec_turn(SLEEPER), text_turn("unreachable")]));
    let mut session = env.start_json("sleep a long time", &["--autonomy", "full"]);
    session.wait_for("tool_batch");
    wait_for_the_batch(env.project.path());
    session.kill_9();
    assert_nothing_left(env.project.path());
}

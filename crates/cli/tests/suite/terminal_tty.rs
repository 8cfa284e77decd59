//! The terminal frontend on a real terminal: `intendant` runs under `script` (util-linux), which
//! gives it a pseudo-terminal on stdin, stdout and stderr, so the approval prompt
//! `[y]es / [s]kip / [a]ll / [n]o`, typed answers and the `> ` follow-up prompt are exercised as
//! a person would use them. Without a terminal on stdin the same frontend runs one task and
//! never reads stdin.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use intendant_protocol::events::{EndStatus, RecordedStatus};
use serde_json::json;

use super::sessions::{Env, text_turn};

/// What `intendant sessions show ID` prints for session `id`.
fn transcript(env: &Env, id: &str) -> String {
    let show = env.command(&["sessions", "show", id]).output().unwrap();
    assert!(show.status.success(), "{show:?}");
    String::from_utf8_lossy(&show.stdout).into_owned()
}

/// Longest wait for one expected piece of output.
pub(super) const WAIT: Duration = Duration::from_secs(60);
/// The prompt the terminal frontend shows for an approval.
pub(super) const PROMPT: &str = "[y]es / [s]kip / [a]ll / [n]o";
/// The follow-up prompt right after a round's `done` line (the terminal turns `\n` into `\r\n`).
pub(super) fn follow_up_prompt_after(message: &str) -> String {
    format!("✓ done: {message}\r\n> ")
}

/// Quotes `arg` for `sh`.
fn sh_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// `cmd` run under `script -qec`, with the same environment and working directory.
pub(super) fn on_a_tty(cmd: &Command) -> Command {
    on_a_tty_within(cmd, "", "")
}

/// `cmd` on a terminal `cols` columns wide.
pub(super) fn on_a_tty_of_width(cmd: &Command, cols: u16) -> Command {
    on_a_tty_within(cmd, &format!("stty cols {cols} rows 50; exec "), "")
}

/// `cmd` run under `script -qec` between the shell texts `before` (ending in `exec ` or empty)
/// and `after` (redirections, or empty).
pub(super) fn on_a_tty_within(cmd: &Command, before: &str, after: &str) -> Command {
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| sh_quote(&a.to_string_lossy()))
        .collect();
    let mut wrapped = Command::new("script");
    wrapped
        .args([
            "-qec",
            &format!("{before}{}{after}", line.join(" ")),
            "/dev/null",
        ])
        .env_clear();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            wrapped.env(key, value);
        }
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// A process on a terminal whose output is collected as it arrives.
pub(super) struct Tty {
    child: Child,
    chunks: mpsc::Receiver<Vec<u8>>,
    pub(super) seen: String,
}

impl Tty {
    pub(super) fn spawn(mut cmd: Command) -> Tty {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("`script` (util-linux) is installed");
        let mut stdout = child.stdout.take().unwrap();
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Tty {
            child,
            chunks,
            seen: String::new(),
        }
    }

    /// Waits until `needle` has appeared `times` times in the output.
    pub(super) fn wait_for(&mut self, needle: &str, times: usize) {
        let deadline = Instant::now() + WAIT;
        while self.seen.matches(needle).count() < times {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("{needle:?} x{times} never appeared in:\n{}", self.seen),
            }
        }
    }

    /// Types one line.
    pub(super) fn type_line(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        // A terminal sends a carriage return for Enter.
        write!(stdin, "{text}\r").unwrap();
        stdin.flush().unwrap();
    }

    /// Presses one key, without Enter.
    pub(super) fn type_key(&mut self, key: char) {
        let stdin = self.child.stdin.as_mut().unwrap();
        write!(stdin, "{key}").unwrap();
        stdin.flush().unwrap();
    }

    /// Presses Ctrl-D: end of input for a terminal reader at the start of a line.
    pub(super) fn type_eof(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"\x04").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the exit (stdin still open, as a person at the terminal would leave it).
    pub(super) fn finish(mut self) -> (bool, String) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(chunk) = self.chunks.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push_str(&String::from_utf8_lossy(&chunk));
                }
                return (status.success(), self.seen);
            }
            assert!(Instant::now() < deadline, "no exit; output:\n{}", self.seen);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn the_terminal_prompt_takes_typed_approval_answers() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "echo one > one.txt" } },
            { "name": "exec_command", "arguments": { "command": "echo two > two.txt" } }
        ] },
        text_turn("Finished.")
    ]));
    let cmd = env.task_command("write two files", &[]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for(PROMPT, 1);
    assert!(
        tty.seen
            .contains("approve command_exec: $ echo one > one.txt")
    );
    // Anything else is asked again; `s` skips the first command, `y` approves the second.
    tty.type_line("maybe");
    tty.wait_for(
        "please answer y (yes), s (skip), a (approve all) or n (no)",
        1,
    );
    tty.type_line("s");
    tty.wait_for(PROMPT, 2);
    assert!(
        tty.seen
            .contains("approve command_exec: $ echo two > two.txt")
    );
    tty.type_line("y");
    tty.wait_for(&follow_up_prompt_after("Finished."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    assert!(
        output.contains("→ skip") && output.contains("→ approve"),
        "{output}"
    );
    assert!(output.contains("Finished."), "{output}");
    assert!(!env.project.path().join("one.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.project.path().join("two.txt")).unwrap(),
        "two\n"
    );
    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
}

#[test]
fn a_question_is_answered_by_a_typed_line() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "ask_human", "arguments": { "question": "Which colour?" } }
        ] },
        { "text": "Teal it is.", "expect": { "body_contains": ["teal"] } }
    ]));
    let cmd = env.task_command("pick a colour", &[]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for("? Which colour?", 1);
    tty.type_line("teal");
    tty.wait_for(&follow_up_prompt_after("Teal it is."), 1);
    tty.type_line("/exit");
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    assert!(output.contains("Teal it is."), "{output}");
    assert!(
        env.server.invariant_violations().is_empty(),
        "{:?}",
        env.server.invariant_violations()
    );
    assert_eq!(env.server.turns_consumed(), 2);
}

#[test]
fn a_typed_follow_up_continues_the_conversation_until_ctrl_d() {
    let env = Env::new(json!([
        text_turn("First answer."),
        { "text": "Second answer.",
          "expect": { "body_contains": ["say hello", "First answer.", "now say goodbye"] } },
        text_turn("never requested")
    ]));
    let cmd = env.task_command("say hello", &[]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for(&follow_up_prompt_after("First answer."), 1);
    // An empty line asks again and sends nothing.
    tty.type_line("");
    tty.wait_for("> \r\n> ", 1);
    tty.type_line("now say goodbye");
    tty.wait_for(&follow_up_prompt_after("Second answer."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    assert!(
        env.server.invariant_violations().is_empty(),
        "{:?}",
        env.server.invariant_violations()
    );
    assert_eq!(env.server.turns_consumed(), 2);
    // The second request carries the first round, then the follow-up, in order.
    let bodies = env.turn_bodies();
    let input = bodies[1]["input"].to_string();
    let at = |needle: &str| {
        input
            .find(needle)
            .unwrap_or_else(|| panic!("{needle}: {input}"))
    };
    assert!(at("say hello") < at("First answer.") && at("First answer.") < at("now say goodbye"));

    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
    assert_eq!(meta.turns, 2);
    assert!(
        output.contains(&format!("session {} completed", meta.id)),
        "{output}"
    );
    let text = transcript(&env, &meta.id);
    let mut from = 0;
    let ended = format!("session {} completed: tokens in ", meta.id);
    for needle in [
        "session started: say hello",
        "model: First answer.",
        "── round 1 done: 1 turn",
        "user: now say goodbye",
        "model: Second answer.",
        "── round 2 done: 2 turns",
        &ended,
    ] {
        let found = text[from..].find(needle);
        assert!(found.is_some(), "{needle} missing (in order) from:\n{text}");
        from += found.unwrap_or_default();
    }
}

#[test]
fn piped_stdin_runs_one_task_and_never_reads_it() {
    let env = Env::new(json!([
        text_turn("Only answer."),
        text_turn("never requested")
    ]));
    let mut child = env
        .task_command("say hello", &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A line that would be a follow-up, and a pipe left open: a reader would wait forever.
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin
        .write_all(b"now say goodbye\n")
        .and_then(|()| stdin.flush());
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running with stdin open");
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Only answer."), "{stdout}");
    assert!(!stderr.contains("> "), "{stderr}");
    assert_eq!(env.server.turns_consumed(), 1);
    let meta = env.only_session();
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
    let text = transcript(&env, &meta.id);
    assert!(!text.contains("user: "), "{text}");
}

#[test]
fn the_approval_card_shows_a_long_command_whole_and_escapes_bidi() {
    let long = format!(
        "echo {} >/dev/null; echo \u{202e}evil; rm -rf ./TAIL-DANGER",
        "a".repeat(360)
    );
    let env = Env::new(json!([
        { "tool_calls": [ { "name": "exec_command", "arguments": { "command": long } } ] },
        text_turn("Finished.")
    ]));
    let cmd = env.task_command("run a long command", &[]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for(PROMPT, 1);
    let chars = long.chars().count() + "$ ".len() + "\\u{202e}".len() - 1;
    assert!(
        tty.seen.contains(&format!(" ({chars} characters):")),
        "{}",
        tty.seen
    );
    // The card wraps the command onto indented lines; joined again it is the whole command.
    let joined = tty.seen.replace("\r\n  ", "");
    let escaped = long.replace('\u{202e}', "\\u{202e}");
    assert!(joined.contains(&format!("$ {escaped}")), "{}", tty.seen);
    assert!(
        !tty.seen.contains('\u{202e}'),
        "a raw bidi override reached the terminal"
    );
    tty.type_line("n");
    let (_, output) = tty.finish();
    assert!(output.contains("→ deny"), "{output}");
}

#[test]
fn an_untrusted_project_setting_is_asked_about_on_the_terminal() {
    let env = Env::new(json!([
        { "tool_calls": [ { "name": "exec_command", "arguments": { "command": "echo ran > marker.txt" } } ] },
        text_turn("Finished.")
    ]));
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[approval]\ncommand_exec = \"auto\"\n",
    )
    .unwrap();
    // `N` (or anything but yes) refuses: nothing runs, no model turn.
    let mut tty = Tty::spawn(on_a_tty(&env.task_command("make a marker", &[])));
    tty.wait_for("trust it? [y/N]", 1);
    assert!(
        tty.seen.contains("this project's intendant.toml")
            && tty.seen.contains("[approval] command_exec = \"auto\""),
        "{}",
        tty.seen
    );
    tty.type_line("n");
    let (ok, output) = tty.finish();
    assert!(!ok, "{output}");
    assert!(output.contains("intendant trust"), "{output}");
    assert_eq!(env.server.turns_consumed(), 0);
    // `y` trusts it: the rule applies (no approval prompt) and is not asked about again.
    let mut tty = Tty::spawn(on_a_tty(&env.task_command("make a marker", &[])));
    tty.wait_for("trust it? [y/N]", 1);
    tty.type_line("y");
    tty.wait_for(&follow_up_prompt_after("Finished."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    assert!(!output.contains(PROMPT), "{output}");
    assert!(env.project.path().join("marker.txt").exists());
    let headless = env.run_headless("again", &[]);
    assert!(
        !String::from_utf8_lossy(&headless.stderr).contains("untrusted"),
        "{headless:?}"
    );
}

//! The terminal frontend on a real terminal: `intendant` runs under `script` (util-linux), which
//! gives it a pseudo-terminal on stdin, stdout and stderr, so the approval prompt
//! `[y]es / [s]kip / [a]ll / [n]o` and typed answers are exercised as a person would use them.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::sessions::{Env, text_turn};

/// Longest wait for one expected piece of output.
const WAIT: Duration = Duration::from_secs(60);
/// The prompt the terminal frontend shows for an approval.
const PROMPT: &str = "[y]es / [s]kip / [a]ll / [n]o";

/// Quotes `arg` for `sh`.
fn sh_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// `cmd` run under `script -qec`, with the same environment and working directory.
fn on_a_tty(cmd: &Command) -> Command {
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| sh_quote(&a.to_string_lossy()))
        .collect();
    let mut wrapped = Command::new("script");
    wrapped
        .args(["-qec", &line.join(" "), "/dev/null"])
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
struct Tty {
    child: Child,
    chunks: mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Tty {
    fn spawn(mut cmd: Command) -> Tty {
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
    fn wait_for(&mut self, needle: &str, times: usize) {
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
    fn type_line(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        // A terminal sends a carriage return for Enter.
        write!(stdin, "{text}\r").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the exit (stdin still open, as a person at the terminal would leave it).
    fn finish(mut self) -> (bool, String) {
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
    let cmd = env.command(&[
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--no-sandbox",
        "write two files",
    ]);
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
    assert_eq!(meta.status, "completed");
}

#[test]
fn a_question_is_answered_by_a_typed_line() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "ask_human", "arguments": { "question": "Which colour?" } }
        ] },
        { "text": "Teal it is.", "expect": { "body_contains": ["teal"] } }
    ]));
    let cmd = env.command(&[
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--no-sandbox",
        "pick a colour",
    ]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for("? Which colour?", 1);
    tty.type_line("teal");
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

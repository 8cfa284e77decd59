//! What the terminal frontend shows, read off a screen: the output of `intendant` on a
//! pseudo-terminal (under `script`) is fed to a terminal emulator (`vt100`) and the rendered
//! screen is checked (text, colours, what was cleared). Piped output is checked for the
//! absence of every escape sequence. Also `sessions show`, `--verbose`, completions and help.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use super::sessions::{Env, text_turn};
use super::terminal_tty::{
    PROMPT, Tty, follow_up_prompt_after, on_a_tty, on_a_tty_of_width, on_a_tty_within,
};

/// Columns of the emulated screen (and of the terminal the program is told it has).
const COLS: u16 = 120;

/// The screen `output` leaves on a terminal `COLS` wide, tall enough that nothing scrolls off.
fn screen(output: &str) -> vt100::Screen {
    let mut parser = vt100::Parser::new(2000, COLS, 0);
    parser.process(output.as_bytes());
    parser.screen().clone()
}

/// The row of `screen` whose text contains `needle`.
fn row_with(screen: &vt100::Screen, needle: &str) -> (u16, String) {
    screen
        .rows(0, COLS)
        .enumerate()
        .find(|(_, text)| text.contains(needle))
        .map(|(i, text)| (u16::try_from(i).unwrap(), text))
        .unwrap_or_else(|| panic!("{needle:?} not on the screen:\n{}", screen.contents()))
}

/// Whether `text` holds an SGR (colour) escape sequence.
fn has_colour(text: &str) -> bool {
    text.match_indices("\x1b[").any(|(at, _)| {
        text[at + 2..]
            .chars()
            .find(|c| !c.is_ascii_digit() && *c != ';')
            == Some('m')
    })
}

/// Runs a session to its end on a terminal `COLS` wide, pressing Ctrl-D at the follow-up
/// prompt after `last_text`; returns the raw output.
fn run_on_a_tty(cmd: &Command, last_text: &str) -> String {
    let mut tty = Tty::spawn(on_a_tty_of_width(cmd, COLS));
    tty.wait_for(&follow_up_prompt_after(last_text), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    output
}

/// A turn that runs `command`.
fn shell_turn(command: &str) -> Value {
    json!({ "tool_calls": [ { "name": "exec_command", "arguments": { "command": command } } ] })
}

/// A turn that replaces `two` with `2` in a.txt.
fn edit_turn() -> Value {
    json!({ "tool_calls": [ { "name": "edit_file", "arguments": {
        "file_path": "a.txt", "operation": "replace", "match_content": "two", "content": "2" } } ] })
}

/// The model's streamed text and its reasoning, written by the live view itself, show every
/// control and direction-changing character escaped: a window title set, a screen cleared, a
/// line rewritten from its start reached the terminal as they came.
#[test]
fn the_models_streamed_text_and_reasoning_reach_the_terminal_escaped() {
    let hostile = "A\u{1b}]0;PWNED\u{7}\u{1b}[2J\rFAKE\u{202e}B\u{9b}2J";
    let env = Env::new(json!([
        { "text": format!("said {hostile}"), "reasoning": { "text": format!("thought {hostile}") },
          "tool_calls": [ { "name": "exec_command", "arguments": { "command": "true" } } ] },
        text_turn("Finished.")
    ]));
    let cmd = env.task_command("speak", &["--autonomy", "full"]);
    let output = run_on_a_tty(&cmd, "Finished.");
    for raw in ["\u{1b}]0;", "\u{1b}[2J", "\u{202e}", "\u{9b}", "\rFAKE"] {
        assert!(
            !output.contains(raw),
            "{raw:?} reached the terminal: {output:?}"
        );
    }
    let screen = screen(&output);
    row_with(
        &screen,
        "said A\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\\u{d}FAKE\\u{202e}B",
    );
    row_with(&screen, "thought A\\u{1b}]0;PWNED");
}

#[test]
fn a_shell_result_shows_its_exit_code_time_and_last_lines_not_json() {
    let env = Env::new(json!([
        shell_turn("seq 1 30; printf 'bidi \\342\\200\\256 esc \\033[31m\\n'; exit 3"),
        text_turn("Finished.")
    ]));
    let cmd = env.task_command("count", &["--autonomy", "full"]);
    let output = run_on_a_tty(&cmd, "Finished.");
    let screen = screen(&output);
    let text = screen.contents();
    let (row, head) = row_with(&screen, "↳ exec_command: exit 3 · ");
    assert!(head.contains("s · $ seq 1 30; printf"), "{head}");
    // The exit code is red.
    let at = u16::try_from(head.find("exit 3").unwrap()).unwrap() - 2;
    assert_eq!(
        screen.cell(row, at).unwrap().fgcolor(),
        vt100::Color::Idx(1),
        "{text}"
    );
    row_with(&screen, "  │ … 25 more lines, full log: ");
    assert!(output.contains("_stdout"), "the log is named: {output}");
    for last in ["  │ 29", "  │ 30", "  │ bidi \\u{202e} esc \\u{1b}[31m"] {
        row_with(&screen, last);
    }
    assert!(!text.contains("  │ 5\n"), "only the last lines: {text}");
    assert!(
        !output.contains('\u{202e}'),
        "a raw bidi override reached the terminal"
    );
    assert!(
        !text.contains("\"exit_code\""),
        "raw JSON on the screen: {text}"
    );
    // The round's summary, then the done line and the final status line.
    row_with(&screen, "── round 1 done: 2 turns · tokens in ");
    row_with(&screen, "✓ done: Finished.");
    let meta = env.only_session();
    row_with(
        &screen,
        &format!("session {} completed: tokens in", meta.id),
    );
}

#[test]
fn an_edit_is_shown_as_a_coloured_diff() {
    let env = Env::new(json!([edit_turn(), text_turn("Edited.")]));
    std::fs::write(env.project.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let cmd = env.task_command("edit", &["--autonomy", "full"]);
    let output = run_on_a_tty(&cmd, "Edited.");
    let screen = screen(&output);
    row_with(&screen, "▸ edit_file a.txt (replace)");
    row_with(&screen, "  --- a/a.txt");
    row_with(&screen, "  +++ b/a.txt");
    let (removed, _) = row_with(&screen, "  -two");
    let (added, _) = row_with(&screen, "  +2");
    assert!(removed < added);
    assert_eq!(
        screen.cell(removed, 2).unwrap().fgcolor(),
        vt100::Color::Idx(1)
    );
    assert_eq!(
        screen.cell(added, 2).unwrap().fgcolor(),
        vt100::Color::Idx(2)
    );
    row_with(
        &screen,
        "↳ edit_file: edited a.txt (replace, 1 replaced), now 12 B",
    );
    assert_eq!(
        std::fs::read_to_string(env.project.path().join("a.txt")).unwrap(),
        "one\n2\nthree\n"
    );
}

#[test]
fn the_card_of_a_400_character_command_shows_its_end_and_one_key_answers() {
    let long = format!(
        "echo {} >/dev/null; echo \u{202e}evil; rm -rf ./TAIL-DANGER-MARK",
        "a".repeat(350)
    );
    assert!(long.chars().count() >= 400, "{}", long.chars().count());
    let env = Env::new(json!([shell_turn(&long), text_turn("Finished.")]));
    let cmd = env.task_command("run a long command", &[]);
    let mut tty = Tty::spawn(on_a_tty_of_width(&cmd, COLS));
    tty.wait_for(PROMPT, 1);
    // `?` explains the answers; no Enter is needed.
    tty.type_key('?');
    tty.wait_for("one key answers", 1);
    // One key, no Enter: the card is answered.
    tty.type_key('n');
    tty.wait_for("→ deny", 1);
    let (ok, output) = tty.finish();
    assert!(!ok, "a denial stops the task: {output}");
    let screen = screen(&output);
    let chars = long.chars().count() + "$ ".len() + "\\u{202e}".len() - 1;
    // `rm -rf` makes it a deletion.
    row_with(
        &screen,
        &format!("? approve file_delete ({chars} characters):"),
    );
    // The end of the command, the part a cut would hide, is on the screen, after the start.
    let (first, _) = row_with(&screen, "  $ echo aaaa");
    let (last, last_text) = row_with(&screen, "rm -rf ./TAIL-DANGER-MARK");
    assert!(
        first < last && last_text.starts_with("  "),
        "{}",
        screen.contents()
    );
    row_with(&screen, "echo \\u{202e}evil");
    row_with(&screen, "asked because it removes files or empties one");
    assert!(
        !output.contains('\u{202e}'),
        "a raw bidi override reached the terminal"
    );
    assert!(!env.project.path().join("TAIL-DANGER-MARK").exists());
    // The closing line says why the session stopped, once.
    let meta = env.only_session();
    let (closing, _) = row_with(&screen, &format!("session {} denied: tokens in", meta.id));
    let (why, _) = row_with(&screen, "  why: denied `$ echo aaa");
    assert_eq!(why, closing + 1);
    assert!(
        !output.contains("intendant: stopped"),
        "said twice: {output}"
    );
}

#[test]
fn one_key_approves_without_enter() {
    let env = Env::new(json!([
        shell_turn("echo ran > marker.txt"),
        text_turn("Finished.")
    ]));
    let cmd = env.task_command("make a marker", &[]);
    let mut tty = Tty::spawn(on_a_tty(&cmd));
    tty.wait_for(PROMPT, 1);
    tty.type_key('y');
    tty.wait_for(&follow_up_prompt_after("Finished."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    assert!(output.contains("→ approve"), "{output}");
    assert!(env.project.path().join("marker.txt").exists());
}

#[test]
fn the_progress_line_shows_while_the_model_is_slow_and_is_gone_after() {
    let slow = json!({ "text": "Slow answer.", "delivery": { "first_chunk_delay_ms": 1500 } });
    let env = Env::new(json!([slow]));
    // A real terminal names itself; without TERM it counts as dumb, and gets no progress line.
    let mut cmd = env.task_command("be slow", &[]);
    cmd.env("TERM", "xterm-256color");
    let mut tty = Tty::spawn(on_a_tty_of_width(&cmd, COLS));
    tty.wait_for("waiting for the model · ", 1);
    tty.wait_for(&follow_up_prompt_after("Slow answer."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    let text = screen(&output).contents();
    assert!(text.contains("Slow answer."), "{text}");
    assert!(
        !text.contains("waiting for the model"),
        "the line stayed:\n{text}"
    );

    // With stdout not a terminal (redirected to a file), the line is never drawn.
    let env = Env::new(json!([
        { "text": "Slow answer.", "delivery": { "first_chunk_delay_ms": 500 } }
    ]));
    let out_file = env.home.path().join("stdout.txt");
    let mut cmd = env.task_command("be slow", &[]);
    cmd.env("TERM", "xterm-256color");
    let after = format!(" > '{}' < /dev/null", out_file.display());
    let mut wrapped = on_a_tty_within(&cmd, "", &after);
    let out = wrapped.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let tty_text = String::from_utf8_lossy(&out.stdout);
    assert!(!tty_text.contains("waiting for the model"), "{tty_text}");
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "Slow answer.\n"
    );
}

#[test]
fn the_progress_line_comes_back_while_a_response_pauses_after_its_text() {
    let env = Env::new(json!([]));
    let scenario = env.home.path().join("pause.json");
    let turns = json!({ "model": "fake-model", "turns": [
        { "text": "Editing.\n",
          "tool_calls": [ { "name": "exec_command", "arguments": { "command": "echo hi" } } ],
          "delivery": { "chunk_delay_ms": 1200 } },
        text_turn("Done.")
    ] });
    std::fs::write(&scenario, turns.to_string()).unwrap();
    let scenario = scenario.display().to_string();
    let mut cmd = env.command(&[
        "--provider",
        "mock",
        "--scenario",
        &scenario,
        "--no-sandbox",
        "--autonomy",
        "full",
        "go",
    ]);
    cmd.env("TERM", "xterm-256color");
    let mut tty = Tty::spawn(on_a_tty_of_width(&cmd, COLS));
    tty.wait_for("streaming the response · ", 1);
    tty.wait_for(&follow_up_prompt_after("Done."), 1);
    tty.type_eof();
    let (ok, output) = tty.finish();
    assert!(ok, "{output}");
    let text = screen(&output).contents();
    assert!(
        !text.contains("streaming the response"),
        "the line stayed:\n{text}"
    );
    assert!(text.contains("Editing.\n▸ exec_command"), "{text}");
}

#[test]
fn no_color_and_color_never_leave_a_terminal_uncoloured() {
    let turns = json!([shell_turn("exit 1"), edit_turn(), text_turn("Finished.")]);
    let coloured = {
        let env = Env::new(turns.clone());
        std::fs::write(env.project.path().join("a.txt"), "two\n").unwrap();
        run_on_a_tty(
            &env.task_command("go", &["--autonomy", "full"]),
            "Finished.",
        )
    };
    assert!(
        has_colour(&coloured),
        "a terminal is coloured by default: {coloured:?}"
    );
    for (var, flag) in [(Some("1"), None), (None, Some("never"))] {
        let env = Env::new(turns.clone());
        std::fs::write(env.project.path().join("a.txt"), "two\n").unwrap();
        let mut args = vec!["--autonomy", "full"];
        if let Some(flag) = flag {
            args.extend(["--color", flag]);
        }
        let mut cmd = env.task_command("go", &args);
        if let Some(v) = var {
            cmd.env("NO_COLOR", v);
        }
        let output = run_on_a_tty(&cmd, "Finished.");
        assert!(!has_colour(&output), "{var:?} {flag:?}: {output:?}");
        assert!(output.contains("↳ exec_command: exit 1"), "{output}");
        assert!(output.contains("-two"), "{output}");
    }
}

/// Runs a task with stdout and stderr piped and stdin closed.
fn piped(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = env.task_command("go", &[&["--autonomy", "full"], extra].concat());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn piped_env() -> Env {
    let env = Env::new(json!([
        { "text": "Working.", "reasoning": { "text": "Think.\nThink more.\nAnd more." },
          "tool_calls": [ { "name": "exec_command", "arguments": { "command": "echo out; exit 1" } } ] },
        edit_turn(),
        text_turn("Finished.")
    ]));
    std::fs::write(env.project.path().join("a.txt"), "two\n").unwrap();
    env
}

#[test]
fn piped_output_holds_no_escape_sequence_unless_forced() {
    let env = piped_env();
    let out = piped(&env, &[], &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !stream.contains(&0x1b),
            "{}",
            String::from_utf8_lossy(stream)
        );
    }
    assert!(stderr.contains("↳ exec_command: exit 1"), "{stderr}");
    assert!(stderr.contains("  │ out"), "{stderr}");
    assert!(
        stderr.contains("  -two") && stderr.contains("  +2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  ⋮ Think."),
        "reasoning is shown folded: {stderr}"
    );
    assert!(!stderr.contains("And more."), "{stderr}");
    assert!(!stderr.contains("waiting for the model"), "{stderr}");
    assert!(
        !stderr.contains("\"exit_code\""),
        "raw JSON without --verbose: {stderr}"
    );

    // The transcript renders the same way, and without colour into a pipe.
    let show = env
        .command(&["sessions", "show", &env.only_session().id])
        .output()
        .unwrap();
    assert!(show.status.success(), "{show:?}");
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(!show.stdout.contains(&0x1b), "{text}");
    assert!(text.contains("↳ exec_command: exit 1 · "), "{text}");
    assert!(text.contains("  -two") && text.contains("  +2"), "{text}");

    for (extra, vars, coloured) in [
        (&[][..], &[("CLICOLOR_FORCE", "1")][..], true),
        (&["--color", "always"][..], &[][..], true),
        (
            &["--color", "never"][..],
            &[("CLICOLOR_FORCE", "1")][..],
            false,
        ),
    ] {
        let env = piped_env();
        let out = piped(&env, extra, vars);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            has_colour(&stderr),
            coloured,
            "{extra:?} {vars:?}: {stderr:?}"
        );
        // Model text on stdout is never painted.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "Working.\nFinished.\n"
        );
    }
}

#[test]
fn verbose_adds_the_raw_results_and_the_whole_reasoning() {
    let env = piped_env();
    let out = piped(&env, &["--verbose"], &[]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("  raw: {\"exit_code\":1"), "{stderr}");
    assert!(stderr.contains("  ⋮ And more."), "{stderr}");
}

#[test]
fn completions_are_generated_and_help_groups_flags_by_topic() {
    let env = Env::new(json!([]));
    let out = env.command(&["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("_intendant()") && script.contains("--autonomy"),
        "{script}"
    );
    let out = env.command(&["completions", "zsh"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("#compdef intendant"));
    let bad = env.command(&["completions", "cmd.exe"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");

    let help = env.command(&["--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    // Each flag's line starts with it (after its short form), under a `Heading:` line.
    let heading_of = |flag: &str| {
        let mut heading = "";
        for line in text.lines() {
            if !line.starts_with(' ') && line.ends_with(':') {
                heading = line;
            } else if line.trim_start().starts_with('-')
                && line
                    .split_whitespace()
                    .any(|w| w.trim_end_matches(',') == flag)
            {
                return heading.to_owned();
            }
        }
        panic!("{flag} not in:\n{text}")
    };
    for (flag, heading) in [
        ("--provider", "Model:"),
        ("--model", "Model:"),
        ("--autonomy", "Safety:"),
        ("--no-sandbox", "Safety:"),
        ("--max-turns", "Limits:"),
        ("--resume", "Session:"),
        ("--json", "Output:"),
        ("--color", "Output:"),
        ("--verbose", "Output:"),
    ] {
        assert_eq!(heading_of(flag), heading, "{flag}:\n{text}");
    }
}

/// A turn replaying the recorded OpenAI Responses stream `case`.
fn replayed(case: &str) -> Value {
    json!({ "replay": { "file": intendant_testkit::stream_fixture("openai_responses", case) } })
}

#[test]
fn a_truncated_response_is_a_warning_line_naming_the_call_not_run() {
    let env = Env::new(json!([
        replayed("incomplete_cut_call.sse"),
        text_turn("Stopped.")
    ]));
    let cmd = env.task_command("write the changelog", &["--autonomy", "full"]);
    let output = run_on_a_tty(&cmd, "Stopped.");
    let screen = screen(&output);
    let (row, line) = row_with(
        &screen,
        "! truncated: the response reached the output token limit",
    );
    assert!(line.contains("`edit_file`"), "{line}");
    assert_eq!(screen.cell(row, 0).unwrap().fgcolor(), vt100::Color::Idx(3));
    assert!(!env.project.path().join("CHANGELOG.md").exists());
}

#[test]
fn a_refusal_is_a_line_of_its_own_and_the_session_ends_refused() {
    let env = Env::new(json!([replayed("refusal.sse")]));
    let cmd = env.task_command("do something bad", &["--autonomy", "full"]);
    let mut tty = Tty::spawn(on_a_tty_of_width(&cmd, COLS));
    tty.wait_for("✗ refused: I'm sorry, but I can't assist with that.", 1);
    tty.wait_for("\r\n> ", 1);
    tty.type_eof();
    let (_, output) = tty.finish();
    let screen = screen(&output);
    row_with(
        &screen,
        "✗ refused: I'm sorry, but I can't assist with that.",
    );
    let meta = env.only_session();
    row_with(&screen, &format!("session {} refused: tokens in", meta.id));
}

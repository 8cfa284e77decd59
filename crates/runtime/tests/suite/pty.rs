//! `execPty`: persistent state, markers, stripping, truncation, deadline, shell exit, cleanup.

use super::support::{eventually, files_matching, process_gone, run, tempdir};
use intendant_protocol::runtime::{LOG_TAIL_BYTES, PtyResult};
use intendant_runtime::pty::PtySessions;
use serde_json::json;
use std::time::Duration;

fn pty(nonce: u64, command: &str) -> serde_json::Value {
    json!({"function":"execPty","nonce":nonce,"command":command})
}

#[test]
fn cwd_and_variables_persist_across_commands_per_shell_id() {
    let dir = tempdir();
    let sub = dir.path().join("sub dir");
    std::fs::create_dir(&sub).unwrap();
    let r = run(
        json!([
            pty(1, &format!("cd '{}'", sub.display())),
            pty(2, "GREETING=hi; export LEVEL=3"),
            pty(3, "pwd; echo \"$GREETING $LEVEL\""),
            {"function":"execPty","nonce":4,"shell_id":"other","command":"echo \"[$GREETING]\"; pwd"},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let third: PtyResult = r.data(2);
    assert_eq!(third.output, format!("{}\nhi 3\n", sub.display()));
    assert_eq!(
        (third.shell_id.as_str(), third.exit_code),
        ("default", Some(0))
    );
    let other: PtyResult = r.data(3);
    assert_eq!(other.shell_id, "other");
    assert!(other.output.starts_with("[]\n"), "{}", other.output);
}

#[test]
fn status_multiline_and_syntax_errors_keep_the_session_in_step() {
    let dir = tempdir();
    let r = run(
        json!([
            pty(1, "false"),
            pty(2, "for i in 1 2; do\n  echo line $i\ndone"),
            pty(3, "echo 'unterminated"),
            pty(4, "echo still here"),
            pty(5, &format!("echo {}", "y".repeat(6000))),
        ]),
        dir.path(),
    );
    assert_eq!(r.data::<PtyResult>(0).exit_code, Some(1));
    assert_eq!(r.data::<PtyResult>(1).output, "line 1\nline 2\n");
    let bad: PtyResult = r.data(2);
    assert_ne!(bad.exit_code, Some(0));
    assert!(!bad.timed_out);
    assert_eq!(r.data::<PtyResult>(3).output, "still here\n");
    assert_eq!(
        r.data::<PtyResult>(4).output.len(),
        6001,
        "a line longer than the tty's 4 KiB"
    );
}

#[test]
fn ansi_sequences_and_carriage_returns_are_stripped() {
    let dir = tempdir();
    let r = run(
        json!([pty(
            1,
            r"printf '\033[1;31mred\033[0m\r\n\033]0;title\007ok\n'"
        )]),
        dir.path(),
    );
    assert_eq!(r.data::<PtyResult>(0).output, "red\nok\n");
}

#[test]
fn large_output_is_truncated_with_the_transcript_preserved() {
    let dir = tempdir();
    let r = run(
        json!([pty(7, "seq 1 200000"), pty(8, "echo small")]),
        dir.path(),
    );
    let big: PtyResult = r.data(0);
    assert!(big.truncated);
    assert!(big.output.len() <= LOG_TAIL_BYTES);
    assert!(big.output.ends_with("199999\n200000\n"));
    let log = big.transcript_log.expect("transcript kept");
    assert!(big.output.starts_with("[output truncated:"));
    assert!(big.output.lines().next().unwrap().contains(&log));
    let name = std::path::Path::new(&log)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        name.starts_with("7_") && name.ends_with("_pty.log"),
        "{name}"
    );
    let full = std::fs::read_to_string(&log).unwrap();
    assert_eq!(full.lines().count(), 200_000);
    let small: PtyResult = r.data(1);
    assert_eq!((small.output.as_str(), small.truncated), ("small\n", false));
    assert!(small.transcript_log.is_none());
    // Only the truncated command's transcript stays; staged command files are gone.
    assert_eq!(
        files_matching(dir.path(), |n| n.ends_with("_pty.log")),
        vec![std::path::PathBuf::from(&log)]
    );
    assert!(files_matching(dir.path(), |n| n.contains("pty_cmd")).is_empty());
}

#[test]
fn binary_output_stays_within_the_cap_in_exec_and_pty() {
    // 8,000 invalid bytes are under 10 KiB but become 24,000 bytes of U+FFFD: the returned
    // text is still capped and flagged as a tail.
    let dir = tempdir();
    let binary = "head -c 8000 /dev/zero | tr '\\0' '\\377'";
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":1,"command":binary},
            pty(2, binary),
        ]),
        dir.path(),
    );
    let exec: intendant_protocol::runtime::ExecResult = r.data(0);
    assert!(exec.stdout.len() <= LOG_TAIL_BYTES, "{}", exec.stdout.len());
    assert!(exec.stdout_truncated);
    assert!(exec.stdout.chars().all(|c| c == '\u{FFFD}'));
    let pty: PtyResult = r.data(1);
    assert!(pty.output.len() <= LOG_TAIL_BYTES, "{}", pty.output.len());
    assert!(pty.truncated);
    assert!(
        pty.output
            .starts_with("[output truncated: 8000 bytes in total")
    );
    let log = pty.transcript_log.expect("transcript kept");
    assert_eq!(std::fs::read(log).unwrap(), vec![0xff; 8000]);
}

#[test]
fn any_shell_id_string_works_and_the_batch_goes_on() {
    // A NUL in a shell_id used to panic the runtime (it named the reader thread).
    let dir = tempdir();
    let r = run(
        json!([
            {"function":"execPty","nonce":1,"command":"x=1","shell_id":"a\u{0}b"},
            {"function":"execPty","nonce":2,"command":"echo $x","shell_id":"a\u{0}b"},
            {"function":"execPty","nonce":3,"command":"echo ${x-unset}","shell_id":"ü ' \n"},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.data::<PtyResult>(1).output, "1\n");
    let other: PtyResult = r.data(2);
    assert_eq!(
        (other.output.as_str(), other.shell_id.as_str()),
        ("unset\n", "ü ' \n")
    );
}

#[test]
fn deadline_interrupts_the_command_and_the_shell_stays_usable() {
    let dir = tempdir();
    let mut sessions = PtySessions::new(dir.path());
    let slow = sessions
        .run_with_deadline(1, "d", "echo begun; sleep 30", Duration::from_millis(500))
        .unwrap();
    assert!(slow.timed_out);
    assert_eq!(slow.exit_code, None);
    assert_eq!(slow.output, "begun\n");
    let next = sessions
        .run_with_deadline(2, "d", "echo after", Duration::from_secs(10))
        .unwrap();
    assert_eq!((next.output.as_str(), next.timed_out), ("after\n", false));
}

#[test]
fn exiting_the_shell_is_reported_and_a_fresh_shell_follows() {
    let dir = tempdir();
    let r = run(
        json!([pty(1, "X=1; echo bye; exit 3"), pty(2, "echo \"[$X]\"")]),
        dir.path(),
    );
    let first: PtyResult = r.data(0);
    assert!(first.shell_exited);
    assert_eq!(first.exit_code, Some(3));
    assert_eq!(first.output, "bye\n");
    assert_eq!(r.data::<PtyResult>(1).output, "[]\n");
}

#[test]
fn pty_jobs_die_with_the_runtime_even_when_ignoring_sighup() {
    let dir = tempdir();
    let r = run(
        json!([pty(
            1,
            "sleep 600 & echo $!; (trap '' HUP; exec sleep 601) & echo $!"
        )]),
        dir.path(),
    );
    let out = r.data::<PtyResult>(0).output;
    let pids: Vec<u32> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{out}");
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(5), || process_gone(pid)),
            "pty job {pid} outlived the runtime"
        );
    }
}

#[test]
fn missing_command_is_an_error_and_the_batch_goes_on() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"execPty","nonce":1}, pty(2, "echo ok")]),
        dir.path(),
    );
    assert_eq!(r.error(0), "missing `command`");
    assert_eq!(r.data::<PtyResult>(1).output, "ok\n");
}

#[test]
fn echoed_command_lines_never_reach_the_output() {
    let dir = tempdir();
    // A command may turn terminal echo back on; the next command's line must still not show.
    let r = run(
        json!([pty(1, "stty echo"), pty(2, "echo only-this")]),
        dir.path(),
    );
    assert_eq!(r.data::<PtyResult>(1).output, "only-this\n");
}

#[test]
fn sessions_are_bounded_per_runtime_process() {
    let dir = tempdir();
    let max = intendant_runtime::pty::MAX_PTY_SESSIONS;
    let commands: Vec<_> = (0..=max)
        .map(|i| json!({"function":"execPty","nonce":i,"shell_id":format!("s{i}"),"command":"echo up"}))
        .collect();
    let r = run(json!(commands), dir.path());
    for i in 0..max {
        assert_eq!(r.data::<PtyResult>(i).output, "up\n");
    }
    assert!(r.error(max).contains("too many PTY sessions"));
    assert_eq!(r.code(), 0);
}

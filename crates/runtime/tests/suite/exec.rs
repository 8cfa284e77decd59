//! `execAsAgent`: output capture, log artifacts, exit codes, timeouts, ports, nonces, displays.

use super::support::{
    Batch, display_number, eventually, files_matching, process_gone, run, tempdir, xvfb_present,
};
use intendant_protocol::runtime::{ExecResult, LOG_TAIL_BYTES};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn is_artifact_name(name: &str, nonce: u64, stream: &str) -> bool {
    let Some(rest) = name.strip_prefix(&format!("{nonce}_")) else {
        return false;
    };
    let Some(hex) = rest.strip_suffix(&format!("_{stream}.log")) else {
        return false;
    };
    hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn captures_both_streams_into_private_unpredictable_logs() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"execAsAgent","nonce":4,"command":"echo out; echo err >&2; exit 3"}]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert_eq!(res.exit_code, 3);
    assert_eq!(
        (res.stdout.as_str(), res.stderr.as_str()),
        ("out\n", "err\n")
    );
    assert!(!res.stdout_truncated && !res.stderr_truncated && !res.running);
    assert!(res.pid.is_some() && res.error.is_none());
    for (path, stream, content) in [
        (res.stdout_log.unwrap(), "stdout", "out\n"),
        (res.stderr_log.unwrap(), "stderr", "err\n"),
    ] {
        let p = std::path::Path::new(&path);
        assert_eq!(p.parent().unwrap(), dir.path());
        assert!(
            is_artifact_name(p.file_name().unwrap().to_str().unwrap(), 4, stream),
            "{path}"
        );
        assert_eq!(std::fs::read_to_string(p).unwrap(), content);
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    // Two runs of the same nonce never reuse a name.
    let again: ExecResult = run(
        json!([{"function":"execAsAgent","nonce":4,"command":"true"}]),
        dir.path(),
    )
    .data(0);
    assert_eq!(
        files_matching(dir.path(), |n| n.ends_with("_stdout.log")).len(),
        2
    );
    assert!(again.stdout_log.is_some());
}

#[test]
fn two_hundred_thousand_lines_give_a_bounded_tail_and_the_full_log() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"seq 1 200000"}]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert_eq!(res.exit_code, 0);
    assert!(res.stdout_truncated);
    assert!(res.stdout.len() <= LOG_TAIL_BYTES);
    assert!(res.stdout.len() > LOG_TAIL_BYTES - 10);
    assert!(res.stdout.ends_with("199999\n200000\n"));
    let full = std::fs::read_to_string(res.stdout_log.unwrap()).unwrap();
    assert_eq!(full.lines().count(), 200_000);
    assert_eq!(full.lines().next(), Some("1"));
}

#[test]
fn tail_is_cut_on_a_character_boundary() {
    let dir = tempdir();
    // 3-byte characters: 10 KiB is not a multiple of 3, so a naive cut would split one.
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"for i in $(seq 5000); do printf '€'; done"}]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert!(res.stdout_truncated);
    assert!(!res.stdout.contains('\u{FFFD}'));
    assert!(res.stdout.chars().all(|c| c == '€'));
}

#[test]
fn timeout_reports_minus_3_and_kills_the_whole_group() {
    let dir = tempdir();
    let pidfile = dir.path().join("bg.pid");
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"timeout_ms":500,
            "command":format!("sleep 60 & echo $! > {}; echo started; wait", pidfile.display())}]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert_eq!(res.exit_code, -3);
    assert_eq!(res.stdout, "started\n");
    assert!(res.error.unwrap().contains("timed out after 500 ms"));
    let bg: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || process_gone(bg)),
        "background child survived"
    );
    assert_eq!(r.code(), 0, "a timeout is a result, not an abort");
}

#[test]
fn a_huge_timeout_means_no_practical_limit() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"echo ok","timeout_ms":u64::MAX}]),
        dir.path(),
    );
    assert_eq!(r.data::<ExecResult>(0).stdout, "ok\n");
}

#[test]
fn killed_by_signal_reports_128_plus_signal() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"kill -9 $$"}]),
        dir.path(),
    );
    assert_eq!(r.data::<ExecResult>(0).exit_code, 137);
}

#[test]
fn spawn_failure_reports_minus_1() {
    let dir = tempdir();
    let input = json!({"commands":[{"function":"execAsAgent","nonce":1,"command":"true"}]});
    let r = Batch::new(&input, dir.path())
        .env("PATH", "/nonexistent-bin")
        .run();
    let res: ExecResult = r.data(0);
    assert_eq!(res.exit_code, -1);
    assert_eq!(res.pid, None);
    assert!(res.error.unwrap().contains("could not spawn bash"));
    assert_eq!(r.code(), 0);
}

#[test]
fn stdin_is_dev_null_and_display_is_not_inherited() {
    let dir = tempdir();
    let input = json!({"commands":[{"function":"execAsAgent","nonce":1,
        "command":"cat; readlink /proc/self/fd/0; echo \"${DISPLAY-unset}\""}]});
    let r = Batch::new(&input, dir.path()).env("DISPLAY", ":5").run();
    assert_eq!(r.data::<ExecResult>(0).stdout, "/dev/null\nunset\n");
}

#[test]
fn nonce_refers_to_the_pid_of_an_earlier_command() {
    let dir = tempdir();
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":10,"command":"echo $$"},
            {"function":"execAsAgent","nonce":11,"command":"echo $NONCE[10]-$NONCE[10]"},
            {"function":"execPty","nonce":12,"command":"echo $NONCE[11]"},
            {"function":"execPty","nonce":13,"command":"echo $NONCE[99]"},
        ]),
        dir.path(),
    );
    let first: ExecResult = r.data(0);
    let pid = first.pid.unwrap();
    assert_eq!(first.stdout, format!("{pid}\n"));
    let second: ExecResult = r.data(1);
    assert_eq!(second.stdout, format!("{pid}-{pid}\n"));
    let pty: serde_json::Value = r.value(2);
    assert_eq!(pty["output"], format!("{}\n", second.pid.unwrap()));
    assert!(
        r.error(3).contains("$NONCE[99]"),
        "execPty: unknown id is an error, batch goes on"
    );
    assert_eq!(r.code(), 0);
}

#[test]
fn wait_for_port_returns_with_the_server_running_and_nonce_can_kill_it() {
    let dir = tempdir();
    let port = free_port();
    let server = format!(
        "sleep 0.2; exec python3 -c 'import socket,time; s=socket.socket(); \
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", {port})); \
         s.listen(); print(\"listening\", flush=True); time.sleep(60)'"
    );
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":1,"command":server,"wait_for_port":port,"timeout_ms":20000},
            {"function":"execAsAgent","nonce":2,"command":"kill $NONCE[1] && echo killed"},
        ]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert_eq!((res.exit_code, res.running), (0, true), "{res:?}");
    assert_eq!(r.data::<ExecResult>(1).stdout, "killed\n");
    let pid = res.pid.unwrap();
    assert!(eventually(Duration::from_secs(5), || process_gone(pid)));
}

#[test]
fn wait_for_port_reports_minus_2_when_nothing_listens() {
    let dir = tempdir();
    let port = free_port();
    let r = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"echo waiting; sleep 60",
            "wait_for_port":port,"timeout_ms":500}]),
        dir.path(),
    );
    let res: ExecResult = r.data(0);
    assert_eq!(res.exit_code, -2);
    assert!(!res.running);
    assert_eq!(res.stdout, "waiting\n");
    assert!(res.error.unwrap().contains(&format!("127.0.0.1:{port}")));
    assert!(process_gone(res.pid.unwrap()));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn user_display_needs_the_grant() {
    let dir = tempdir();
    let cmd = json!([{"function":"execAsAgent","nonce":1,"display":0,"command":"echo $DISPLAY"}]);
    let r = run(cmd.clone(), dir.path());
    assert_eq!(r.code(), 1);
    assert!(r.error(0).contains("INTENDANT_USER_DISPLAY_GRANTED"));
    let r = Batch::new(&json!({"commands": cmd}), dir.path())
        .env("INTENDANT_USER_DISPLAY_GRANTED", "1")
        .run();
    assert_eq!(r.data::<ExecResult>(0).stdout, ":0\n");
}

#[test]
fn virtual_display_is_started_once_and_stopped_at_exit() {
    if !xvfb_present() {
        return;
    }
    let dir = tempdir();
    let n = display_number(1);
    let check = format!("echo $DISPLAY; test -S /tmp/.X11-unix/X{n} && echo socket");
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":1,"display":n,"command":check},
            {"function":"execAsAgent","nonce":2,"display":n,"command":check},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    for i in 0..2 {
        assert_eq!(r.data::<ExecResult>(i).stdout, format!(":{n}\nsocket\n"));
    }
    let logs = files_matching(dir.path(), |name| name.starts_with(&format!("display{n}_")));
    assert_eq!(logs.len(), 1, "one Xvfb for both commands");
    assert!(!std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists());
}

#[test]
fn logs_created_ahead_for_a_command_that_never_runs_are_removed() {
    let dir = tempdir();
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":1,"command":"true"},
            {"function":"execAsAgent","nonce":2,"command":"kill $NONCE[50]"},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 1);
    assert!(files_matching(dir.path(), |n| n.starts_with("2_")).is_empty());
    assert_eq!(files_matching(dir.path(), |n| n.starts_with("1_")).len(), 2);
    // Consecutive commands each get their own fresh pair.
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":7,"command":"echo a"},
            {"function":"execAsAgent","nonce":8,"command":"echo b"},
        ]),
        dir.path(),
    );
    assert_eq!(r.data::<ExecResult>(1).stdout, "b\n");
    let logs = files_matching(dir.path(), |n| n.starts_with("8_"));
    assert_eq!(logs.len(), 2);
}

#[test]
fn a_command_swapping_log_files_for_symlinks_changes_nothing() {
    swapping_logs_created_ahead_changes_nothing(2);
}

#[test]
fn a_command_swapping_log_files_created_further_ahead_changes_nothing() {
    swapping_logs_created_ahead_changes_nothing(4);
}

/// Command 1 replaces its own stdout log, and the logs of command `target` if they were already
/// created ahead (the runtime does so only once creating files shows itself slow; the hand-over
/// checks are unit tests of `LogPrefetch`), with symlinks to a victim. Tails are read through
/// the creating handles and a replaced pre-created pair is never used, so the victim is neither
/// read nor written.
fn swapping_logs_created_ahead_changes_nothing(target: u64) {
    let dir = tempdir();
    let other = tempdir();
    let victim = other.path().join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    let swap = format!(
        r#"echo mine
f=$(readlink /proc/$$/fd/1); d=$(dirname "$f")
case "$f" in /*) ;; *) echo "stdout is not a log file: $f"; exit 1;; esac
rm "$f"; ln -s '{v}' "$f"
for g in "$d"/{t}_*_std*.log; do [ -e "$g" ] || continue; rm "$g"; ln -s '{v}' "$g"; echo "swapped $g"; done"#,
        v = victim.display(),
        t = target
    );
    let mut commands = vec![json!({"function":"execAsAgent","nonce":1,"command":swap})];
    for nonce in 2..=target {
        commands.push(json!({"function":"execAsAgent","nonce":nonce,
            "command":format!("echo out{nonce}; echo err{nonce} >&2")}));
    }
    let r = run(json!(commands), dir.path());
    assert_eq!(r.code(), 0);
    let first: ExecResult = r.data(0);
    assert!(first.stdout.starts_with("mine\n"), "{}", first.stdout);
    let swapped = first.stdout.matches("swapped").count();
    assert!(swapped == 0 || swapped == 2, "{}", first.stdout);
    assert!(!first.stdout.contains("untouched"));
    for i in 1..usize::try_from(target).unwrap() {
        let later: ExecResult = r.data(i);
        let n = i + 1;
        assert_eq!(
            (later.stdout.as_str(), later.stderr.as_str()),
            (format!("out{n}\n").as_str(), format!("err{n}\n").as_str())
        );
        for log in [later.stdout_log.unwrap(), later.stderr_log.unwrap()] {
            assert!(
                !first.stdout.contains(&log),
                "a swapped log was used: {log}"
            );
            assert!(!std::fs::symlink_metadata(&log).unwrap().is_symlink());
        }
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
}

#[test]
fn an_aborted_batch_leaves_no_unused_log_files() {
    // Many commands after the abort, so that a creator thread (on a slow disk) has made as many
    // pairs ahead as it may; other functions in between do not disturb the order.
    for abort_at in [1_u64, 3] {
        let dir = tempdir();
        let mut commands = Vec::new();
        for nonce in 1..=20_u64 {
            let command = if nonce == abort_at {
                "kill $NONCE[99]"
            } else {
                "true"
            };
            commands.push(json!({"function":"execAsAgent","nonce":nonce,"command":command}));
            if nonce % 4 == 0 {
                commands.push(json!({"function":"inspectPath","nonce":100 + nonce,"path":"/"}));
            }
        }
        let r = run(json!(commands), dir.path());
        assert_eq!(r.code(), 1, "an unknown $NONCE aborts");
        let ran = usize::try_from(abort_at - 1).unwrap();
        assert_eq!(r.envelopes.len(), ran + 1);
        let logs = files_matching(dir.path(), |n| n.ends_with(".log"));
        assert_eq!(
            logs.len(),
            2 * ran,
            "only the commands that ran keep logs: {logs:?}"
        );
        for nonce in 1..abort_at {
            assert_eq!(
                files_matching(dir.path(), |n| n.starts_with(&format!("{nonce}_"))).len(),
                2
            );
        }
    }
}

#[test]
fn virtual_displays_are_bounded_per_runtime_process() {
    if !xvfb_present() {
        return;
    }
    let dir = tempdir();
    let max = intendant_runtime::display::MAX_VIRTUAL_DISPLAYS;
    let commands: Vec<_> = (0..=max)
        .map(|i| {
            let n = display_number(4 + u32::try_from(i).unwrap());
            json!({"function":"execAsAgent","nonce":i,"display":n,"command":"echo $DISPLAY"})
        })
        .collect();
    let r = run(json!(commands), dir.path());
    assert_eq!(r.code(), 1, "the display past the limit aborts");
    assert_eq!(r.envelopes.len(), max + 1);
    assert!(r.error(max).contains("already runs"), "{}", r.error(max));
}

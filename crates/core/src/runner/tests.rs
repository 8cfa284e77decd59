//! Runner tests against small shell scripts standing in for the runtime, so the token check,
//! the caps and the timeout are exercised without depending on the real runtime's behaviour.

use std::os::unix::fs::PermissionsExt;

use super::*;
use intendant_protocol::runtime::{SANDBOX_DEGRADED_WARNING, SANDBOX_SCOPE_WARNING};

fn fake_runtime(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("fake-runtime.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A fake runtime whose one result is the value of the variable `name` (`unset` when unset).
fn runtime_echoing(dir: &Path, name: &str) -> PathBuf {
    fake_runtime(
        dir,
        &format!(
            r#"{READ_TOKEN}
echo "{{\"type\":\"result\",\"nonce\":1,\"data\":\"${{{name}:-unset}}\",\"runtime_protocol_token\":\"$tok\"}}""#
        ),
    )
}

/// Shell snippet: reads stdin into $input and the token into $tok.
const READ_TOKEN: &str = r#"input=$(cat); tok=$(printf '%s' "$input" | sed -n 's/.*"runtime_protocol_token":"\([0-9a-f]*\)".*/\1/p')"#;

fn runner(dir: &Path, script: PathBuf, timeout: Duration, cap: usize) -> RuntimeRunner {
    RuntimeRunner::new(RunnerConfig {
        runtime_path: script,
        cwd: dir.to_path_buf(),
        log_dir: dir.join("log"),
        sandbox_write_paths: None,
        sandbox_read_masks: Vec::new(),
        sandbox_require_full: false,
        user_display_granted: false,
        env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
        batch_timeout: timeout,
        output_cap: cap,
        placement: None,
        git: None,
        netns: None,
    })
}

fn exec(nonce: u64) -> Command {
    Command {
        function: "execAsAgent".into(),
        nonce,
        command: Some("true".into()),
        ..Command::default()
    }
}

#[test]
fn parse_keeps_only_authenticated_envelopes() {
    let text = concat!(
        r#"{"type":"result","nonce":1,"data":"good","runtime_protocol_token":"t"}"#,
        "\n",
        r#"{"type":"result","nonce":2,"data":"forged"}"#,
        "\n",
        r#"{"type":"result","nonce":3,"data":"forged","runtime_protocol_token":"x"}"#,
        "\nnot json\n\n",
        r#"{"type":"result","nonce":4,"data":"torn","runtime_protocol_token":"t""#
    );
    let out = parse_stdout(text.as_bytes(), "t", false);
    assert_eq!(out.results.len(), 1);
    assert_eq!(out.results[&1], "good");
    assert_eq!(out.discarded_lines, 4);
}

#[test]
fn locate_names_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("intendant");
    let err = locate_runtime(None, &exe).unwrap_err().to_string();
    assert!(
        err.contains(&dir.path().join(RUNTIME_BIN).display().to_string()),
        "{err}"
    );
    assert!(err.contains("INTENDANT_RUNTIME=(unset)"), "{err}");
    let err = locate_runtime(Some("/nope/rt".into()), &exe)
        .unwrap_err()
        .to_string();
    assert!(err.contains("INTENDANT_RUNTIME=/nope/rt"), "{err}");
    std::fs::write(dir.path().join(RUNTIME_BIN), "").unwrap();
    assert_eq!(
        locate_runtime(None, &exe).unwrap(),
        dir.path().join(RUNTIME_BIN)
    );
}

#[test]
fn secrets_are_fresh() {
    let a = new_secret().unwrap();
    assert_eq!(a.len(), 32);
    assert_ne!(a, new_secret().unwrap());
}

#[tokio::test]
async fn forged_lines_are_discarded_and_env_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_runtime(
        dir.path(),
        &format!(
            r#"{READ_TOKEN}
echo '{{"type":"result","nonce":1,"data":"FORGED"}}'
echo "{{\"type\":\"result\",\"nonce\":1,\"data\":\"env:$INTENDANT_LOG_DIR:${{OPENAI_API_KEY:-none}}\",\"runtime_protocol_token\":\"$tok\"}}""#
        ),
    );
    let out = runner(
        dir.path(),
        script,
        Duration::from_secs(30),
        OUTPUT_CAP_BYTES,
    )
    .run_batch(vec![exec(1)], None, &CancelToken::new())
    .await
    .unwrap();
    let log = dir.path().join("log");
    assert_eq!(out.results[&1], format!("env:{}:none", log.display()));
    assert_eq!(out.discarded_lines, 1);
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn timeout_kills_and_salvages_complete_lines() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_runtime(
        dir.path(),
        &format!(
            r#"{READ_TOKEN}
echo "{{\"type\":\"result\",\"nonce\":1,\"data\":\"first\",\"runtime_protocol_token\":\"$tok\"}}"
printf '{{"type":"result","nonce":2,"data":"torn'
exec sleep 60"#
        ),
    );
    let out = runner(
        dir.path(),
        script,
        Duration::from_millis(500),
        OUTPUT_CAP_BYTES,
    )
    .run_batch(vec![exec(1), exec(2)], None, &CancelToken::new())
    .await
    .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.results.len(), 1);
    assert_eq!(out.results[&1], "first");
    assert_eq!(out.discarded_lines, 1);
}

#[tokio::test]
async fn ask_human_batches_have_no_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_runtime(
        dir.path(),
        &format!(
            r#"{READ_TOKEN}
sleep 1
echo "{{\"type\":\"result\",\"nonce\":1,\"data\":\"answered\",\"runtime_protocol_token\":\"$tok\"}}""#
        ),
    );
    let ask = Command {
        function: "askHuman".into(),
        nonce: 1,
        question: Some("?".into()),
        ..Command::default()
    };
    let out = runner(
        dir.path(),
        script,
        Duration::from_millis(100),
        OUTPUT_CAP_BYTES,
    )
    .run_batch(vec![ask], Some("h".into()), &CancelToken::new())
    .await
    .unwrap();
    assert!(!out.timed_out);
    assert_eq!(out.results[&1], "answered");
}

#[tokio::test]
async fn floods_are_capped_and_drained() {
    let dir = tempfile::tempdir().unwrap();
    // 3 MiB on each stream against a 1 MiB cap: the child must not block on a full pipe.
    let script = fake_runtime(
        dir.path(),
        &format!(
            r#"{READ_TOKEN}
echo "{{\"type\":\"result\",\"nonce\":1,\"data\":\"before\",\"runtime_protocol_token\":\"$tok\"}}"
head -c 3145728 /dev/zero >&2
head -c 3145728 /dev/zero
echo
echo "{{\"type\":\"result\",\"nonce\":2,\"data\":\"after\",\"runtime_protocol_token\":\"$tok\"}}""#
        ),
    );
    let cap = 1024 * 1024;
    let out = runner(dir.path(), script, Duration::from_secs(30), cap)
        .run_batch(vec![exec(1), exec(2)], None, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.results.get(&1).map(String::as_str), Some("before"));
    assert!(!out.results.contains_key(&2));
    assert!(
        out.stdout_dropped_bytes > 2 * 1024 * 1024,
        "{}",
        out.stdout_dropped_bytes
    );
    assert_eq!(out.stderr_dropped_bytes, 3 * 1024 * 1024 - cap as u64);
    let note = out.truncation_note().unwrap();
    assert!(
        note.contains("stdout exceeded") && note.contains("stderr exceeded"),
        "{note}"
    );
}

#[tokio::test]
async fn a_runtime_that_never_reads_its_input_still_times_out() {
    let dir = tempfile::tempdir().unwrap();
    // The payload is far larger than a pipe buffer and the runtime never reads it: the write
    // must not hold the batch past its timeout.
    let script = fake_runtime(dir.path(), "exec sleep 60");
    let big = Command {
        command: Some("x".repeat(4 * 1024 * 1024)),
        ..exec(1)
    };
    let runner = runner(
        dir.path(),
        script,
        Duration::from_millis(300),
        OUTPUT_CAP_BYTES,
    );
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        runner.run_batch(vec![big], None, &CancelToken::new()),
    )
    .await
    .expect("the batch timeout bounds the input write")
    .unwrap();
    assert!(out.timed_out);
    assert!(out.results.is_empty());
}

#[tokio::test]
async fn the_display_grant_is_injected_only_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let script = runtime_echoing(dir.path(), "INTENDANT_USER_DISPLAY_GRANTED");
    let mut runner = runner(
        dir.path(),
        script,
        Duration::from_secs(30),
        OUTPUT_CAP_BYTES,
    );
    let out = runner
        .run_batch(vec![exec(1)], None, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(out.results[&1], "unset");
    runner.set_user_display_granted(true);
    let out = runner
        .run_batch(vec![exec(1)], None, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(out.results[&1], "1");
}

#[tokio::test]
async fn require_full_reaches_the_runtime_only_with_the_sandbox_on() {
    let dir = tempfile::tempdir().unwrap();
    let script = runtime_echoing(dir.path(), "INTENDANT_SANDBOX_REQUIRE_FULL");
    let base = runner(
        dir.path(),
        script,
        Duration::from_secs(30),
        OUTPUT_CAP_BYTES,
    );
    let with = |paths: Option<Vec<PathBuf>>, require_full: bool| {
        RuntimeRunner::new(RunnerConfig {
            sandbox_write_paths: paths,
            sandbox_require_full: require_full,
            ..base.config().clone()
        })
    };
    let sandboxed = Some(vec![dir.path().to_path_buf()]);
    for (runner, expected) in [
        (with(sandboxed.clone(), true), "1"),
        (with(sandboxed, false), "unset"),
        (with(None, true), "unset"),
    ] {
        let out = runner
            .run_batch(vec![exec(1)], None, &CancelToken::new())
            .await
            .unwrap();
        assert_eq!(out.results[&1], expected);
    }
}

#[tokio::test]
async fn read_masks_reach_the_runtime_only_with_the_sandbox_on() {
    let dir = tempfile::tempdir().unwrap();
    let script = runtime_echoing(dir.path(), "INTENDANT_SANDBOX_READ_MASKS");
    let base = runner(
        dir.path(),
        script,
        Duration::from_secs(30),
        OUTPUT_CAP_BYTES,
    );
    let masks = vec![
        crate::runtime_env::ReadMask::Hide("/state".into()),
        crate::runtime_env::ReadMask::ScrubEnv("/p/.env".into()),
    ];
    let with = |paths: Option<Vec<PathBuf>>| {
        RuntimeRunner::new(RunnerConfig {
            sandbox_write_paths: paths,
            sandbox_read_masks: masks.clone(),
            ..base.config().clone()
        })
    };
    for (runner, expected) in [
        (
            with(Some(vec![dir.path().to_path_buf()])),
            "h/state:e/p/.env",
        ),
        (with(None), "unset"),
    ] {
        let out = runner
            .run_batch(vec![exec(1)], None, &CancelToken::new())
            .await
            .unwrap();
        assert_eq!(out.results[&1], expected);
    }
}

#[tokio::test]
async fn sandbox_warnings_are_lifted_out_of_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let degraded = format!("{SANDBOX_DEGRADED_WARNING}: no user namespaces");
    let unscoped = format!("{SANDBOX_SCOPE_WARNING}: Landlock ABI 5");
    let script = fake_runtime(
        dir.path(),
        &format!(
            "cat >/dev/null; echo noise >&2; echo \"{degraded}\" >&2; echo more >&2; echo \"{unscoped}\" >&2"
        ),
    );
    let warning = format!("{degraded}\n{unscoped}");
    let runner = runner(
        dir.path(),
        script,
        Duration::from_secs(30),
        OUTPUT_CAP_BYTES,
    );
    let out = runner
        .run_batch(vec![exec(1)], None, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(out.sandbox_warning.as_deref(), Some(warning.as_str()));
    assert_eq!(out.summary()["sandbox_warning"], warning.as_str());
    let quiet = fake_runtime(dir.path(), "cat >/dev/null; echo noise >&2");
    let runner = self::runner(dir.path(), quiet, Duration::from_secs(30), OUTPUT_CAP_BYTES);
    let out = runner
        .run_batch(vec![exec(1)], None, &CancelToken::new())
        .await
        .unwrap();
    assert_eq!(out.sandbox_warning, None);
    assert!(out.summary().get("sandbox_warning").is_none());
}

#[tokio::test]
async fn a_line_cut_at_the_cap_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    // The genuine envelope is followed on the same line by more bytes than the cap leaves
    // room for: the kept prefix parses, but it is not the whole line.
    let script = fake_runtime(
        dir.path(),
        &format!(
            r#"{READ_TOKEN}
line="{{\"type\":\"result\",\"nonce\":1,\"data\":\"cut\",\"runtime_protocol_token\":\"$tok\"}}"
printf '%s' "$line"
head -c 4096 /dev/zero
echo"#
        ),
    );
    // Exactly the envelope fits under the cap.
    let cap = r#"{"type":"result","nonce":1,"data":"cut","runtime_protocol_token":""}"#.len() + 32;
    let out = runner(dir.path(), script, Duration::from_secs(30), cap)
        .run_batch(vec![exec(1)], None, &CancelToken::new())
        .await
        .unwrap();
    assert!(out.stdout_dropped_bytes > 0);
    assert!(out.results.is_empty(), "{:?}", out.results);
    assert_eq!(out.discarded_lines, 1);
}

#[tokio::test]
async fn a_cancelled_batch_stops_the_runtime_and_the_groups_its_commands_made() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    // The stand-in runtime starts a command in a session (and group) of its own, as the real
    // one does, and waits for it.
    let script = fake_runtime(
        dir.path(),
        &format!(
            "cat >/dev/null; echo $$ >> {f}; setsid sleep 1000 & echo $! >> {f}; wait",
            f = file.display()
        ),
    );
    let runner = runner(
        dir.path(),
        script,
        Duration::from_secs(600),
        OUTPUT_CAP_BYTES,
    );
    let cancel = CancelToken::new();
    let batch = {
        let cancel = cancel.clone();
        tokio::spawn(async move { runner.run_batch(vec![exec(1)], None, &cancel).await })
    };
    let pids = crate::child::tests::pids_in(&file, 2).await;
    cancel.cancel();
    let out = batch.await.unwrap().unwrap();
    assert!(out.cancelled, "{out:?}");
    assert!(!out.timed_out);
    for pid in pids {
        assert!(crate::child::tests::gone(pid), "{pid} outlived the cancel");
    }
}

#[tokio::test]
async fn a_batch_cancelled_before_it_starts_starts_no_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = fake_runtime(
        dir.path(),
        &format!("cat >/dev/null; touch {}", ran.display()),
    );
    let runner = runner(
        dir.path(),
        script,
        Duration::from_secs(600),
        OUTPUT_CAP_BYTES,
    );
    let cancel = CancelToken::new();
    cancel.cancel();
    let out = runner
        .run_batch(vec![exec(1)], None, &cancel)
        .await
        .unwrap();
    assert!(out.cancelled, "{out:?}");
    assert!(out.results.is_empty(), "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(!ran.exists(), "the runtime was started");
}

//! The envelope, the documented examples (`docs/runtime-protocol.md`), ordering, abort versus
//! continue, input limits, exit statuses and log-dir resolution.

use super::support::{Batch, run, tempdir};
use intendant_protocol::runtime::{
    EditResult, ExecResult, InspectResult, MAX_INPUT_BYTES, PtyResult,
};
use serde_json::json;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

#[test]
fn spec_example_exec_echo_hello_has_the_exact_envelope() {
    let dir = tempdir();
    let input = br#"{"commands":[{"function":"execAsAgent","nonce":1,"command":"echo hello"}]}"#;
    let r = Batch::raw(input.to_vec(), Some(dir.path())).run();
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 1);
    let line: serde_json::Value = serde_json::from_str(r.stdout.trim_end()).unwrap();
    let obj = line.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["data", "nonce", "type"]);
    assert_eq!(line["type"], "result");
    assert_eq!(line["nonce"], 1);
    assert!(line["data"].is_string(), "data is a stringified object");
    assert!(
        r.stdout
            .starts_with(r#"{"type":"result","nonce":1,"data":""#)
    );
    let res: ExecResult = r.data(0);
    assert_eq!((res.exit_code, res.stdout.as_str()), (0, "hello\n"));
}

#[test]
fn spec_example_inspect_etc_hosts() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"inspectPath","nonce":1,"path":"/etc/hosts"}]),
        dir.path(),
    );
    let res: InspectResult = r.data(0);
    assert!(res.exists);
    assert_eq!(res.kind.as_deref(), Some("file"));
    assert_eq!(
        res.size,
        Some(std::fs::metadata("/etc/hosts").unwrap().len())
    );
}

#[test]
fn spec_example_edit_file_write_tmp_test_txt() {
    let dir = tempdir();
    let input = br#"{"commands":[{"function":"editFile","nonce":1,"file_path":"/tmp/test.txt","operation":"write","content":"hello"}]}"#;
    let r = Batch::raw(input.to_vec(), Some(dir.path())).run();
    let res: EditResult = r.data(0);
    assert_eq!((res.operation.as_str(), res.bytes), ("write", 5));
    assert_eq!(std::fs::read_to_string("/tmp/test.txt").unwrap(), "hello");
}

#[test]
fn spec_example_pty_cd_then_pwd() {
    let dir = tempdir();
    let input = br#"{"commands":[{"function":"execPty","nonce":1,"command":"cd /tmp"},{"function":"execPty","nonce":2,"command":"pwd"}]}"#;
    let r = Batch::raw(input.to_vec(), Some(dir.path())).run();
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let second: PtyResult = r.data(1);
    assert_eq!(second.output, "/tmp\n");
}

#[test]
fn spec_example_browse_example_com_in_an_empty_network_namespace() {
    // The documented browse example, run where no packet can leave the machine (a fresh network
    // namespace without interfaces): the fetch fails, which is that command's `Error:`, and
    // the batch goes on. `unshare` is util-linux; root (CI) needs no user namespace.
    let dir = tempdir();
    let input = br#"{"commands":[{"function":"browse","nonce":1,"url":"https://example.com"},{"function":"execAsAgent","nonce":2,"command":"echo after"}]}"#;
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    let wrapper: &[&str] = if root {
        &["unshare", "--net"]
    } else {
        &["unshare", "--map-root-user", "--net"]
    };
    let r = Batch::raw(input.to_vec(), Some(dir.path()))
        .under(wrapper)
        .run();
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.envelopes.len(), 2, "{}", r.stdout);
    let err = r.error(0);
    assert!(err.contains("example.com"), "{err}");
    assert_eq!(r.data::<ExecResult>(1).stdout, "after\n");
}

#[test]
fn token_is_copied_into_every_envelope_and_never_leaks() {
    let dir = tempdir();
    let token = "tok-3f9a1c-secret";
    let input = json!({
        "commands": [
            {"function":"execAsAgent","nonce":1,"command":"true"},
            {"function":"inspectPath","nonce":2}
        ],
        "runtime_protocol_token": token,
    });
    let r = Batch::new(&input, dir.path()).run();
    assert_eq!(r.envelopes.len(), 2);
    for e in &r.envelopes {
        assert_eq!(e.runtime_protocol_token.as_deref(), Some(token));
    }
    assert!(!r.stderr.contains(token));
    let untokened = run(
        json!([{"function":"execAsAgent","nonce":1,"command":"true"}]),
        dir.path(),
    );
    assert!(!untokened.stdout.contains("runtime_protocol_token"));
}

#[test]
fn commands_run_in_order_one_at_a_time() {
    let dir = tempdir();
    let f = dir.path().join("order");
    let f = f.display();
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":5,"command":format!("sleep 0.3; echo a >> {f}")},
            {"function":"execAsAgent","nonce":3,"command":format!("echo b >> {f}")},
            {"function":"execPty","nonce":9,"command":format!("echo c >> {f}")},
            {"function":"execAsAgent","nonce":1,"command":format!("cat {f}")},
        ]),
        dir.path(),
    );
    let nonces: Vec<u64> = r.envelopes.iter().map(|e| e.nonce).collect();
    assert_eq!(nonces, [5, 3, 9, 1]);
    let last: ExecResult = r.data(3);
    assert_eq!(last.stdout, "a\nb\nc\n");
}

#[test]
fn unknown_function_aborts_the_batch() {
    let dir = tempdir();
    let r = run(
        json!([
            {"function":"execAsAgent","nonce":1,"command":"true"},
            {"function":"rmRf","nonce":2},
            {"function":"execAsAgent","nonce":3,"command":format!("touch {}/ran", dir.path().display())},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 1);
    assert_eq!(r.envelopes.len(), 2);
    assert_eq!(r.error(1), "unknown function `rmRf`");
    assert!(!dir.path().join("ran").exists());
    assert!(r.stderr.contains("command 2 failed; batch aborted"));
}

#[test]
fn exec_and_capture_failures_abort_but_other_failures_continue() {
    let dir = tempdir();
    let continuing = json!([
        {"function":"inspectPath","nonce":1},
        {"function":"editFile","nonce":2,"file_path":"/nonexistent-dir-x/f","operation":"replace","match_content":"a","content":"b"},
        {"function":"writeFile","nonce":3},
        {"function":"askHuman","nonce":4},
        {"function":"execPty","nonce":5},
        {"function":"browse","nonce":6},
        {"function":"execAsAgent","nonce":7,"command":"exit 9"},
        {"function":"execAsAgent","nonce":8,"command":"true"},
    ]);
    let r = run(continuing, dir.path());
    assert_eq!(r.code(), 0, "a batch that ran to the end exits 0");
    assert_eq!(r.envelopes.len(), 8);
    for i in 0..6 {
        r.error(i);
    }
    assert_eq!(
        r.data::<ExecResult>(6).exit_code,
        9,
        "a non-zero exit is a result"
    );

    for (aborting, message) in [
        (
            json!({"function":"execAsAgent","nonce":2}),
            "missing `command`",
        ),
        (
            json!({"function":"execAsAgent","nonce":2,"command":"kill $NONCE[77]"}),
            "$NONCE[77]",
        ),
        (
            json!({"function":"captureScreen","nonce":2}),
            "missing `display`",
        ),
        (
            json!({"function":"captureScreen","nonce":2,"display":0}),
            "not granted",
        ),
    ] {
        let r = run(
            json!([
                {"function":"execAsAgent","nonce":1,"command":"true"},
                aborting,
                {"function":"execAsAgent","nonce":3,"command":"true"},
            ]),
            dir.path(),
        );
        assert_eq!(r.code(), 1, "{message}");
        assert_eq!(r.envelopes.len(), 2, "{message}");
        assert!(r.error(1).contains(message), "{} vs {message}", r.error(1));
    }
}

#[test]
fn empty_batch_prints_nothing_and_exits_0() {
    let dir = tempdir();
    let r = run(json!([]), dir.path());
    assert_eq!((r.code(), r.stdout.as_str()), (0, ""));
}

#[test]
fn malformed_input_exits_2_with_a_bounded_preview() {
    let dir = tempdir();
    let mut bad = b"{\"commands\": [oops ".to_vec();
    bad.extend(std::iter::repeat_n(b'x', 10_000));
    let total = bad.len();
    let r = Batch::raw(bad, Some(dir.path())).run();
    assert_eq!(r.code(), 2);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("invalid input"));
    // The preview is 2,048 bytes of *escaped* text: the two quotes take a byte more each.
    assert!(
        r.stderr
            .contains(&format!("({} more bytes omitted)", total - (2048 - 2)))
    );
    assert!(r.stderr.len() < 2048 + 300);

    // serde quotes a wrongly typed string in full; the line stays bounded and single anyway.
    let mut huge = b"{\"commands\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'y', 1 << 20));
    huge.extend(b"\\nnext line\"}");
    let r = Batch::raw(huge, Some(dir.path())).run();
    assert_eq!(r.code(), 2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr.len());
    assert!(r.stderr.contains("invalid type: string"), "{}", r.stderr);
    assert!(r.stderr.len() < 2048 + 512 + 300, "{}", r.stderr.len());

    let r = Batch::raw(
        br#"{"commands":[{"function":"execAsAgent"}]}"#.to_vec(),
        Some(dir.path()),
    )
    .run();
    assert_eq!(r.code(), 2, "a command without nonce is malformed");
    assert!(!r.stderr.contains("omitted"));
}

#[test]
fn oversized_input_exits_2_having_run_nothing() {
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let mut child = Batch::raw(Vec::new(), Some(dir.path())).spawn();
    let mut stdin = child.stdin.take().unwrap();
    let prefix = format!(
        r#"{{"commands":[{{"function":"execAsAgent","nonce":1,"command":"touch {}"}}]}}"#,
        marker.display()
    );
    // Valid JSON padded with whitespace far past the limit: only the size can refuse it, and a
    // runtime that read (or buffered) everything would take all 16 MiB of excess. It must
    // stop at the limit, so the writer meets a closed pipe with most of the excess unsent.
    let excess = 16 << 20;
    let writer = std::thread::spawn(move || {
        stdin.write_all(prefix.as_bytes())?;
        let pad = vec![b' '; 1 << 20];
        let mut sent = prefix.len();
        while sent < MAX_INPUT_BYTES + excess {
            let n = (MAX_INPUT_BYTES + excess - sent).min(pad.len());
            stdin.write_all(&pad[..n])?;
            sent += n;
        }
        Ok::<usize, std::io::Error>(sent)
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    let written = writer.join().unwrap();
    assert_eq!(
        written.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::BrokenPipe),
        "the runtime consumed the whole oversized input"
    );
    assert_eq!(status.code(), Some(2));
    assert_eq!(out, "");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("exceeds 67108864 bytes"));
    assert!(!marker.exists());
}

#[test]
fn closed_stdout_stops_the_batch_without_a_panic() {
    let dir = tempdir();
    let marker = dir.path().join("second");
    let input = json!({"commands":[
        {"function":"execAsAgent","nonce":1,"command":"true"},
        {"function":"execAsAgent","nonce":2,"command":format!("touch {}", marker.display())},
    ]});
    let mut child = Batch::raw(Vec::new(), Some(dir.path())).spawn();
    drop(child.stdout.take());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&input).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(!stderr.contains("panicked"));
    assert!(stderr.contains("stdout closed"));
    assert!(!marker.exists(), "nothing runs after the output is gone");
}

fn stamped_dir(base: &std::path::Path) -> std::path::PathBuf {
    let entries: Vec<_> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let name = entries[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(name.len(), 15, "{name}");
    assert!(name.chars().enumerate().all(|(i, c)| if i == 8 {
        c == '_'
    } else {
        c.is_ascii_digit()
    }));
    entries[0].clone()
}

#[test]
fn log_dir_resolution_order() {
    let dir = tempdir();
    let cmd = br#"{"commands":[{"function":"execAsAgent","nonce":1,"command":"echo x"}]}"#.to_vec();

    let explicit = dir.path().join("a/b/session");
    let r = Batch::raw(cmd.clone(), Some(&explicit)).run();
    let res: ExecResult = r.data(0);
    assert!(
        res.stdout_log
            .unwrap()
            .starts_with(explicit.to_str().unwrap())
    );
    let mode = std::fs::metadata(&explicit).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    let home = dir.path().join("ihome");
    let r = Batch::raw(cmd.clone(), None)
        .env("INTENDANT_HOME", &home)
        .run();
    let stamped = stamped_dir(&home.join("logs"));
    assert!(
        r.data::<ExecResult>(0)
            .stdout_log
            .unwrap()
            .starts_with(stamped.to_str().unwrap())
    );

    let user = dir.path().join("user");
    let r = Batch::raw(cmd, None)
        .env("INTENDANT_HOME", "")
        .env("HOME", &user)
        .run();
    let stamped = stamped_dir(&user.join(".intendant/logs"));
    assert!(
        r.data::<ExecResult>(0)
            .stdout_log
            .unwrap()
            .starts_with(stamped.to_str().unwrap())
    );
}

#[test]
fn log_artifact_failure_aborts_and_unusable_log_dir_exits_3() {
    let dir = tempdir();
    let logs = dir.path().join("logs");
    // Removed until it is gone: on a loaded machine the runtime creates the next commands' log
    // files ahead, beside this command, and one created during the `rm` leaves it non-empty.
    let remove = format!(
        "for _ in $(seq 50); do rm -rf '{0}' 2>/dev/null; [ -e '{0}' ] || break; sleep 0.02; done",
        logs.display()
    );
    let r = Batch::new(
        &json!({"commands":[
            {"function":"execAsAgent","nonce":1,"command":remove},
            {"function":"execAsAgent","nonce":2,"command":"echo never"},
            {"function":"execAsAgent","nonce":3,"command":"echo never"},
        ]}),
        &logs,
    )
    .run();
    assert_eq!(r.code(), 1, "{}", r.stdout);
    assert_eq!(r.envelopes.len(), 2);
    assert!(
        r.error(1).contains("could not create the stdout log"),
        "{}",
        r.error(1)
    );

    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let r = Batch::new(&json!({"commands":[]}), &file.join("sub")).run();
    assert_eq!((r.code(), r.stdout.as_str()), (3, ""));
    assert!(
        r.stderr.contains("could not create log directory"),
        "{}",
        r.stderr
    );
}

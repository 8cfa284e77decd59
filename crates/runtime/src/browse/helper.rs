//! `browse` in a process of its own: the runtime runs `intendant-runtime-browse URL`, the
//! executable installed next to it, and passes on what it prints.
//!
//! The fetch needs an HTTP client, TLS and an HTML parser whose static tables (with pointers
//! the loader relocates at every start) were most of the runtime's image: carrying them cost
//! every batch about a millisecond of start-up, for a function few batches use. The helper
//! inherits the runtime's sandbox (Landlock, the mount namespace and the syscall filter hold
//! across `execve`) and runs the same policy code ([`super::browse`]), so nothing about the
//! boundary changes.
//!
//! The helper's protocol: exit 0 with the `BrowseResult` JSON on stdout, or exit 1 with the
//! error message on stdout. Anything else (a crash, a kill) is reported as such. Its stderr is
//! the runtime's.

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::child::{self, kill_group, wait_deadline};

/// The helper's file name, next to the runtime's executable.
pub const HELPER_NAME: &str = "intendant-runtime-browse";
/// How long the runtime waits: the fetch's own bound, plus the helper's start and exit.
const HELPER_DEADLINE: Duration = Duration::from_secs(super::TOTAL_TIMEOUT.as_secs() + 5);
/// Stdout read from the helper at most (a result is bounded by the 50 KiB body prefix).
const OUTPUT_CAP: u64 = 1024 * 1024;
/// The helper's exit status for "the fetch failed; the message is on stdout".
const EXIT_FETCH_FAILED: u8 = 1;

/// Fetches `url` through the helper: the result's JSON, or the error message.
pub fn fetch(url: &str) -> Result<String, String> {
    fetch_with(&helper_path()?, url, HELPER_DEADLINE)
}

fn fetch_with(helper: &Path, url: &str, deadline: Duration) -> Result<String, String> {
    let mut cmd = Command::new(helper);
    cmd.arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    child::terminate_with_runtime(&mut cmd, libc::SIGKILL);
    let mut running = child::spawn_group(&mut cmd)
        .map_err(|e| format!("could not start {}: {e}", helper.display()))?;
    let stdout = running.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(stdout) = stdout {
            let _ = stdout.take(OUTPUT_CAP).read_to_end(&mut out);
        }
        out
    });
    let status = match wait_deadline(&mut running, Instant::now() + deadline) {
        Ok(Some(status)) => status,
        Ok(None) => {
            kill_group(&mut running);
            let _ = reader.join();
            return Err(format!(
                "the fetch did not end within {} s; stopped",
                deadline.as_secs()
            ));
        }
        Err(e) => {
            kill_group(&mut running);
            let _ = reader.join();
            return Err(format!("could not wait for {}: {e}", helper.display()));
        }
    };
    let out = reader
        .join()
        .map_err(|_| "the reader of the fetch's output panicked".to_owned())?;
    let text = String::from_utf8_lossy(&out).trim_end().to_owned();
    match status.code() {
        Some(0) => Ok(text),
        Some(code) if code == i32::from(EXIT_FETCH_FAILED) && !text.is_empty() => Err(text),
        _ => Err(format!("{} ended with {status}", helper.display())),
    }
}

fn helper_path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable (for {HELPER_NAME}): {e}"))?;
    let helper = exe.with_file_name(HELPER_NAME);
    if helper.is_file() {
        Ok(helper)
    } else {
        Err(format!(
            "{} is missing: it is built and installed with the runtime (cargo build -p intendant-runtime)",
            helper.display()
        ))
    }
}

/// The helper's `main`: fetches the one URL argument and prints the outcome as above.
pub fn helper_main() -> ExitCode {
    let mut stdout = io::stdout();
    let mut args = std::env::args_os().skip(1);
    let url = match (args.next(), args.next()) {
        (Some(url), None) => url,
        _ => {
            let _ = writeln!(io::stderr(), "usage: {HELPER_NAME} URL");
            return ExitCode::from(2);
        }
    };
    let Some(url) = url.to_str() else {
        let _ = writeln!(stdout, "the URL is not valid UTF-8");
        return ExitCode::from(EXIT_FETCH_FAILED);
    };
    let printed = match super::browse(url) {
        Ok(result) => match serde_json::to_string(&result) {
            Ok(json) => writeln!(stdout, "{json}").map(|()| ExitCode::SUCCESS),
            Err(e) => writeln!(stdout, "could not serialize the result: {e}")
                .map(|()| ExitCode::from(EXIT_FETCH_FAILED)),
        },
        Err(e) => writeln!(stdout, "{e}").map(|()| ExitCode::from(EXIT_FETCH_FAILED)),
    };
    printed.unwrap_or(ExitCode::from(3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in helper: a shell script with `body`.
    fn fake(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join(HELPER_NAME);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn a_result_is_passed_on_and_a_failure_is_its_message() {
        let dir = tempfile::tempdir().unwrap();
        let ok = fake(dir.path(), r#"printf '{"url":"%s"}\n' "$1""#);
        assert_eq!(
            fetch_with(&ok, "https://example.com/", LONG).unwrap(),
            r#"{"url":"https://example.com/"}"#
        );
        let failed = fake(dir.path(), "echo 'DNS lookup for `x` failed: no'; exit 1");
        assert_eq!(
            fetch_with(&failed, "https://x/", LONG).unwrap_err(),
            "DNS lookup for `x` failed: no"
        );
    }

    #[test]
    fn a_crash_or_a_silent_failure_is_reported_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let killed = fake(dir.path(), "echo partial; kill -9 $$");
        let e = fetch_with(&killed, "https://x/", LONG).unwrap_err();
        assert!(e.contains("ended with") && e.contains("signal: 9"), "{e}");
        let silent = fake(dir.path(), "exit 1");
        let e = fetch_with(&silent, "https://x/", LONG).unwrap_err();
        assert!(e.contains("ended with") && e.contains('1'), "{e}");
    }

    #[test]
    fn a_helper_past_its_deadline_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let hung = fake(dir.path(), "exec sleep 30");
        let e = fetch_with(&hung, "https://x/", Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("did not end"), "{e}");
    }
}

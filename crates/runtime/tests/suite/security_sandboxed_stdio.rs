//! Attacks from a program run behind `intendant-runtime --sandboxed-stdio` (an MCP server, a
//! hook), through the built binary: it cannot write outside its roots, read the hidden state
//! root or see a provider key; nothing of it runs before the start line; its stdio is the
//! runtime's, the start line not among its input; the out-of-memory killer takes it before its
//! controller. Root in CI, as the sandbox tests are.

use std::fs;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use intendant_protocol::runtime::{SANDBOXED_KEEP_ENV, SANDBOXED_STDIO_ARG, SESSION_OOM_SCORE_ADJ};

use super::support::{BIN, eventually, tempdir};

const SECRET: &str = "the-web-token-of-the-daemon";
const KEY: &str = "sk-provider-key-of-the-controller";

/// A state root with a secret, a project and a scratch directory (the write roots), and a
/// directory outside every root.
struct Host {
    _dir: tempfile::TempDir,
    state: PathBuf,
    project: PathBuf,
    scratch: PathBuf,
    outside: PathBuf,
}

impl Host {
    fn new() -> Host {
        let dir = tempdir();
        let base = fs::canonicalize(dir.path()).unwrap();
        let host = Host {
            state: base.join("ih"),
            project: base.join("project"),
            scratch: base.join("ih/artifacts/s1/mcp-files"),
            outside: base.join("outside"),
            _dir: dir,
        };
        for d in [&host.project, &host.scratch, &host.outside] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(host.state.join("web-token"), SECRET).unwrap();
        host
    }

    /// The runtime in its stdio mode around `sh -c script`, with the walls in its environment
    /// and a key among its variables; stdin, stdout and stderr piped.
    fn command(&self, script: &str) -> Command {
        self.runtime(&["--", "sh", "-c", script])
    }

    /// The runtime in its stdio mode with `args` after the mode and the controller's pid (this
    /// test's), set up as [`Host::command`].
    fn runtime(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg(SANDBOXED_STDIO_ARG)
            .arg(std::process::id().to_string())
            .args(args)
            .current_dir(&self.project)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.project.join("home"))
            .env("OPENAI_API_KEY", KEY)
            .env("MY_SETTING", "given")
            .env(SANDBOXED_KEEP_ENV, "MY_SETTING")
            .env(
                "INTENDANT_SANDBOX_WRITE_PATHS",
                format!("{}:{}", self.project.display(), self.scratch.display()),
            )
            .env(
                "INTENDANT_SANDBOX_READ_MASKS",
                format!("h{}", self.state.display()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

/// Writes `input` to the child's stdin, closes it, and returns (exit code, stdout, stderr).
fn finish(mut child: Child, input: &[u8]) -> (i32, String, String) {
    let mut stdin = child.stdin.take().unwrap();
    // A runtime that refused to start reads nothing: a broken pipe is its answer.
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_program_stays_inside_its_walls_and_speaks_on_the_runtimes_stdio() {
    let host = Host::new();
    let script = format!(
        r#"read line; echo "got:$line"
echo x > {outside}/planted 2>/dev/null && echo wrote-outside || echo refused-outside
echo y > {project}/made && echo wrote-project
echo z > {scratch}/made && echo wrote-scratch
cat {state}/web-token 2>/dev/null; echo
echo "oom_score_adj=$(cat /proc/self/oom_score_adj)"
env; echo >&2 diagnostics"#,
        outside = host.outside.display(),
        project = host.project.display(),
        scratch = host.scratch.display(),
        state = host.state.display(),
    );
    let child = host.command(&script).spawn().unwrap();
    let (code, out, err) = finish(child, b"start\n{\"jsonrpc\":\"2.0\"}\n");
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("got:{\"jsonrpc\":\"2.0\"}"), "{out}");
    assert!(out.contains("refused-outside"), "{out}");
    assert!(!host.outside.join("planted").exists());
    assert!(
        out.contains("wrote-project") && out.contains("wrote-scratch"),
        "{out}"
    );
    assert!(
        !out.contains(SECRET),
        "the hidden state root was read: {out}"
    );
    assert!(
        !out.contains(KEY),
        "the provider key reached the program: {out}"
    );
    assert!(out.contains("MY_SETTING=given"), "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("INTENDANT_")),
        "a control variable reached the program: {out}"
    );
    assert!(err.contains("diagnostics"), "{err}");
    assert!(
        out.contains(&format!("oom_score_adj={SESSION_OOM_SCORE_ADJ}\n")),
        "the out-of-memory killer takes the program before its controller: {out}"
    );
}

#[test]
fn nothing_runs_before_the_start_line_or_without_it() {
    let host = Host::new();
    let marker = host.project.join("ran");
    let script = format!("touch {}; cat", marker.display());
    let mut child = host.command(&script).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "the program ran before the start line");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"start\nechoed\n").unwrap();
    assert!(eventually(Duration::from_secs(10), || marker.exists()));
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "echoed\n");
    assert!(child.wait().unwrap().success());
    fs::remove_file(&marker).unwrap();

    let child = host.command(&script).spawn().unwrap();
    let (code, _, _) = finish(child, b"");
    assert_eq!(code, 0, "a closed stdin ends the runtime quietly");
    assert!(!marker.exists());
    let child = host.command(&script).spawn().unwrap();
    let (code, _, err) = finish(child, b"{\"jsonrpc\":\"2.0\"}\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("start line"), "{err}");
    assert!(!marker.exists());
}

#[test]
fn a_sandbox_that_cannot_be_applied_refuses_to_run_the_program() {
    let host = Host::new();
    let marker = host.project.join("ran");
    let mut cmd = host.command(&format!("touch {}", marker.display()));
    cmd.env("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE", "1");
    let (code, _, err) = finish(cmd.spawn().unwrap(), b"start\n");
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("--no-sandbox"),
        "the refusal names the opt-out: {err}"
    );
    assert!(!marker.exists());
}

#[test]
fn bad_arguments_and_a_missing_program_are_errors() {
    let host = Host::new();
    for args in [&[][..], &["sh"][..], &["--"][..]] {
        let (code, _, err) = finish(host.runtime(args).spawn().unwrap(), b"start\n");
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("usage"), "{err}");
    }
    let mut missing = host.runtime(&["--", "no-such-program-anywhere"]);
    missing.env("PATH", "/nonexistent");
    let (code, _, err) = finish(missing.spawn().unwrap(), b"start\n");
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("no-such-program-anywhere"), "{err}");
}

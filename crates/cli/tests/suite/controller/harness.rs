//! Test harness: a temp git project, a private HOME and INTENDANT_HOME, the fake model server
//! for one wire, and the built `intendant` binary run against them with a scrubbed environment
//! (no real key, no real endpoint can leak in).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use intendant_testkit::{FakeModelServer, RecordedRequest, Scenario, Wire};
use serde_json::Value;

/// Longest a single run may take before the test fails (never reached by a healthy run).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A dummy key; the fake accepts anything.
pub const DUMMY_KEY: &str = "sk-test-dummy-key-0123456789";

/// The `intendant` binary, after checking the runtime was built next to it.
pub fn intendant_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_intendant"));
    let runtime = bin.with_file_name("intendant-runtime");
    assert!(
        runtime.is_file(),
        "{} is missing: build the workspace first (`cargo build -p intendant-runtime -p intendant-cli`)",
        runtime.display()
    );
    bin
}

/// The `--provider` value and key/endpoint variables of a wire.
pub fn wire_env(wire: Wire) -> (&'static str, &'static str, &'static str) {
    match wire {
        Wire::OpenAiResponses => ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        Wire::OpenAiChat => ("openai-chat", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        Wire::Anthropic => ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        Wire::Gemini => ("gemini", "GEMINI_API_KEY", "GEMINI_BASE_URL"),
    }
}

/// Starts the fake model server playing `turns` (a JSON array of scenario turns) on a runtime
/// of its own; keep the runtime alive as long as the server.
pub fn start_fake_model(turns: Value) -> (tokio::runtime::Runtime, FakeModelServer) {
    start_fake_scenario(serde_json::json!({ "model": "fake-model", "turns": turns }))
}

/// Starts the fake model server playing `scenario` (a whole scenario file's JSON) on a runtime
/// of its own; keep the runtime alive as long as the server.
pub fn start_fake_scenario(scenario: Value) -> (tokio::runtime::Runtime, FakeModelServer) {
    let scenario = Scenario::from_json(&scenario.to_string()).expect("valid scenario");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(FakeModelServer::start(scenario)).unwrap();
    (rt, server)
}

/// One test's world.
pub struct Ctl {
    pub root: tempfile::TempDir,
    pub server: FakeModelServer,
    pub wire: Wire,
    _rt: tokio::runtime::Runtime,
}

impl Ctl {
    /// A world whose fake model plays `turns` (a JSON array of scenario turns).
    pub fn new(wire: Wire, turns: Value) -> Ctl {
        let (rt, server) = start_fake_model(turns);
        let root = tempfile::tempdir().unwrap();
        for dir in ["project", "home", "ihome"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let git = Command::new("git")
            .args(["init", "-q", "."])
            .current_dir(root.path().join("project"))
            .status()
            .expect("git is installed");
        assert!(git.success());
        Ctl {
            root,
            server,
            wire,
            _rt: rt,
        }
    }

    pub fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    pub fn intendant_home(&self) -> PathBuf {
        self.root.path().join("ihome")
    }

    /// The binary with a scrubbed environment: PATH, HOME, INTENDANT_HOME only.
    pub fn bare_command(&self) -> Command {
        let mut cmd = Command::new(intendant_bin());
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("INTENDANT_HOME", self.intendant_home())
            .env("RUST_BACKTRACE", "0")
            .current_dir(self.project());
        cmd
    }

    /// [`Ctl::bare_command`] pointed at the fake over this world's wire, sandbox off, full
    /// autonomy (approvals are tested elsewhere), plus `args`.
    pub fn command(&self, args: &[&str]) -> Command {
        let (provider, key_env, url_env) = wire_env(self.wire);
        let sandbox = if args.contains(&"--sandbox") {
            "--sandbox"
        } else {
            "--no-sandbox"
        };
        let args: Vec<&str> = args.iter().copied().filter(|a| *a != "--sandbox").collect();
        let mut cmd = self.bare_command();
        cmd.env(key_env, DUMMY_KEY)
            .env(url_env, self.server.base_url(self.wire))
            .args([
                "--provider",
                provider,
                "--model",
                "fake-model",
                sandbox,
                "--autonomy",
                "full",
            ])
            .args(&args);
        cmd
    }

    /// Runs `--json TASK` with stdin closed; returns the output and the parsed events.
    pub fn run_json(&self, task: &str, args: &[&str]) -> (Output, Vec<Value>) {
        let mut cmd = self.command(&["--json"]);
        cmd.args(args).arg(task);
        let out = run_with_limit(cmd);
        let events = parse_events(&out.stdout);
        (out, events)
    }

    /// Every request that consumed a scripted turn (or a fault of one).
    pub fn turn_requests(&self) -> Vec<RecordedRequest> {
        self.server.turn_requests()
    }

    /// Writes an executable fake runtime script into the world and returns its path.
    pub fn fake_runtime(&self, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.root.path().join("fake-runtime.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

/// Shell snippet for fake runtimes: reads stdin, sets `$tok` to the protocol token.
pub const READ_TOKEN: &str = r#"input=$(cat); tok=$(printf '%s' "$input" | sed -n 's/.*"runtime_protocol_token":"\([0-9a-f]*\)".*/\1/p')"#;

/// Runs `cmd` to completion (stdin closed) within [`RUN_LIMIT`].
pub fn run_with_limit(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("intendant starts");
    wait_output(child)
}

/// Runs `cmd` to completion with `input` on its stdin (then closed) within [`RUN_LIMIT`]; a
/// refusal before the whole input is read (a closed pipe) is no failure here.
pub fn run_fed(mut cmd: Command, input: &[u8]) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("intendant starts");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    wait_output(child)
}

/// Waits for `child`'s output within [`RUN_LIMIT`], killing it on overrun.
pub fn wait_output(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("intendant did not finish within {RUN_LIMIT:?}");
        }
    }
}

/// Parses stdout as JSONL, failing on any line that is not a JSON object with a `type`.
pub fn parse_events(stdout: &[u8]) -> Vec<Value> {
    let text = String::from_utf8(stdout.to_vec()).expect("stdout is UTF-8");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("non-JSON stdout line {line:?}: {e}"));
            assert!(
                v.get("type").and_then(Value::as_str).is_some(),
                "line without type: {line}"
            );
            v
        })
        .collect()
}

/// Events of one type.
pub fn events_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The `output` of every `agent_output` event for tool `name`.
pub fn outputs_of(events: &[Value], name: &str) -> Vec<String> {
    events_of(events, "agent_output")
        .into_iter()
        .filter(|e| e["name"] == name)
        .map(|e| e["output"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Asserts the run exited 0, showing stderr otherwise.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr:\n{}\nstdout:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A tool-call turn.
pub fn calls(list: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = list
        .iter()
        .map(|(name, args)| serde_json::json!({ "name": name, "arguments": args }))
        .collect();
    serde_json::json!({ "tool_calls": calls })
}

/// A turn calling `signal_done`.
pub fn done_turn(message: &str) -> Value {
    calls(&[("signal_done", serde_json::json!({ "message": message }))])
}

/// A running `intendant --json` whose events are read one line at a time, stdin held open.
pub struct JsonSession {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every event read so far.
    pub events: Vec<Value>,
}

impl JsonSession {
    /// Starts `cmd` with piped stdin and a reader thread on stdout (stderr discarded).
    pub fn spawn(mut cmd: Command) -> JsonSession {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("intendant starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        JsonSession {
            stdin: child.stdin.take(),
            child,
            lines,
            events: Vec::new(),
        }
    }

    /// The next event; `None` at end of output.
    pub fn next_event(&mut self) -> Option<Value> {
        match self.lines.recv_timeout(RUN_LIMIT) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                self.events.push(v.clone());
                Some(v)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("no event within {RUN_LIMIT:?}; so far: {:#?}", self.events)
            }
        }
    }

    /// Reads events until one of type `kind`, which it returns.
    pub fn wait_for(&mut self, kind: &str) -> Value {
        while let Some(e) = self.next_event() {
            if e["type"] == kind {
                return e;
            }
        }
        panic!("output ended before a {kind} event: {:#?}", self.events)
    }

    /// Sends one JSON stdin line.
    pub fn send(&mut self, msg: &Value) {
        self.send_line(&msg.to_string());
    }

    /// Sends one stdin line as is.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (nobody is there any more).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Closes stdin, reads the remaining events and waits for the exit.
    pub fn finish(mut self) -> (ExitStatus, Vec<Value>) {
        self.close_stdin();
        while self.next_event().is_some() {}
        let status = self.child.wait().unwrap();
        (status, self.events)
    }

    /// Sends `signo` to the process.
    pub fn signal(&self, signo: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid touches no memory.
        assert_eq!(unsafe { libc::kill(pid, signo) }, 0);
    }

    /// SIGKILLs the process (no chance to clean up) and reaps it.
    pub fn kill_9(mut self) -> Vec<Value> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.events
    }
}

/// The text of a request body, for substring checks.
pub fn body_text(req: &RecordedRequest) -> String {
    req.body.to_string()
}

/// Reads a file to a string, empty when missing.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

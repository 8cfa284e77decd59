//! The daemon end to end: the built `intendant serve` driven through its real socket by the
//! built `intendant ctl` (and by hand-written lines), its sessions talking to the fake model on
//! 127.0.0.1. Waits poll with a bounded deadline; nothing asserts on time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use intendant_testkit::full_disk;
use serde_json::{Value, json};

use super::controller::harness::{DUMMY_KEY, intendant_bin, start_fake_scenario};
use super::sessions::{exec_turn, hold_writers_lock, text_turn};
use super::signals::processes_in;
use super::terminal_tty::{Tty, on_a_tty};

mod limits;
mod prune;
mod rewind;
mod systemd;
mod workers;

/// Longest any wait of these tests lasts before it fails (never reached by a healthy run).
const WAIT: Duration = Duration::from_secs(60);

/// A state root, a project, the fake model, and (while it runs) the daemon.
pub(super) struct World {
    root: tempfile::TempDir,
    pub(super) server: intendant_testkit::FakeModelServer,
    pub(super) daemon: Option<Child>,
    _rt: tokio::runtime::Runtime,
}

impl World {
    pub(super) fn new(turns: Value) -> World {
        World::playing(json!({ "model": "fake-model", "turns": turns }))
    }

    /// A world whose fake model plays a whole scenario (scripts per session and all).
    pub(super) fn playing(scenario: Value) -> World {
        World::playing_under(scenario, tempfile::tempdir().unwrap())
    }

    /// A world whose files are in memory (under `/dev/shm` where there is one): for a test
    /// that writes thousands of sessions, since a disk may take a millisecond a file.
    pub(super) fn in_memory(turns: Value) -> World {
        let shm = std::path::Path::new("/dev/shm");
        let root = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        World::playing_under(json!({ "model": "fake-model", "turns": turns }), root)
    }

    fn playing_under(scenario: Value, root: tempfile::TempDir) -> World {
        let (rt, server) = start_fake_scenario(scenario);
        for dir in ["project", "home"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        World {
            root,
            server,
            daemon: None,
            _rt: rt,
        }
    }

    pub(super) fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    pub(super) fn home(&self) -> PathBuf {
        self.root.path().join("ihome")
    }

    /// The `HOME` of the daemon and its sessions (the user's config directory is under it).
    pub(super) fn user_home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    pub(super) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(intendant_bin());
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.user_home())
            .env("INTENDANT_HOME", self.home())
            .env("OPENAI_API_KEY", DUMMY_KEY)
            .env(
                "OPENAI_BASE_URL",
                self.server
                    .base_url(intendant_testkit::Wire::OpenAiResponses),
            )
            .env("RUST_BACKTRACE", "0")
            .current_dir(self.project())
            .stdin(Stdio::null());
        cmd
    }

    /// Starts `intendant serve` and waits until it answers.
    pub(super) fn serve(&mut self) {
        self.serve_with(&[]);
    }

    /// [`World::serve`] with `env` added to the daemon's environment.
    pub(super) fn serve_with(&mut self, env: &[(&str, &str)]) {
        self.spawn_serve(env);
        wait_until("the daemon answers", || {
            self.ctl(&["status"]).status.success()
        });
    }

    /// Starts `intendant serve` with `env` added, and returns its pid at once.
    pub(super) fn spawn_serve(&mut self, env: &[(&str, &str)]) -> u32 {
        let mut serve = self.serve_command();
        serve.envs(env.iter().copied());
        self.spawn_daemon(serve)
    }

    /// [`World::serve`] with the state root's `logs/` on a `bytes`-sized tmpfs that only the
    /// daemon (and what it starts) sees, and its stderr kept ([`World::daemon_stderr`]); its
    /// pid, or `None` where this process may not mount one (see [`full_disk`]). The test
    /// reaches the tmpfs through [`full_disk::seen_by`].
    pub(super) fn serve_with_small_logs(&mut self, bytes: usize) -> Option<u32> {
        let logs = self.home().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        self.serve_arranged(|serve| full_disk::small_tmpfs_for(serve, &logs, bytes))
    }

    /// [`World::serve`] with `arrange` given the daemon's command first (a mount or a cgroup
    /// of the test's own); its pid, or `None` (nothing started) when `arrange` cannot.
    pub(super) fn serve_arranged(
        &mut self,
        arrange: impl FnOnce(&mut Command) -> Option<()>,
    ) -> Option<u32> {
        let mut serve = self.serve_command();
        arrange(&mut serve)?;
        let pid = self.spawn_daemon(serve);
        wait_until("the daemon answers", || {
            self.ctl(&["status"]).status.success()
        });
        Some(pid)
    }

    /// What the daemon last started said on its stderr.
    pub(super) fn daemon_stderr(&self) -> String {
        std::fs::read_to_string(self.root.path().join("serve.stderr")).unwrap_or_default()
    }

    fn serve_command(&self) -> Command {
        let mut serve = self.command(&["serve"]);
        // Not in the project, so what runs there is only what the sessions started.
        serve
            .current_dir(self.root.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.root.path().join("serve.stderr")).unwrap());
        serve
    }

    fn spawn_daemon(&mut self, mut serve: Command) -> u32 {
        let child = serve.spawn().unwrap();
        let pid = child.id();
        self.daemon = Some(child);
        pid
    }

    /// SIGKILLs the daemon and waits for it.
    pub(super) fn kill_daemon(&mut self) {
        let mut child = self.daemon.take().expect("a daemon runs");
        signal(child.id(), libc::SIGKILL);
        child.wait().unwrap();
    }

    /// Writes the project's `intendant.toml` and trusts it.
    pub(super) fn trusted_config(&self, toml: &str) {
        std::fs::write(self.project().join("intendant.toml"), toml).unwrap();
        let trusted = self.command(&["trust"]).output().unwrap();
        assert!(trusted.status.success(), "{trusted:?}");
    }

    /// Writes the state root's settings, `intendant.toml`.
    pub(super) fn home_config(&self, toml: &str) {
        std::fs::create_dir_all(self.home()).unwrap();
        std::fs::write(self.home().join("intendant.toml"), toml).unwrap();
    }

    /// SIGTERMs the daemon and waits for it; returns its exit code.
    pub(super) fn stop_daemon(&mut self) -> i32 {
        let mut child = self.daemon.take().expect("a daemon runs");
        signal(child.id(), libc::SIGTERM);
        child.wait().unwrap().code().unwrap_or(-1)
    }

    pub(super) fn ctl(&self, args: &[&str]) -> Output {
        self.command(&[&["ctl"], args].concat()).output().unwrap()
    }

    /// `ctl ARGS`, which must succeed; its stdout.
    pub(super) fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "ctl {args:?}: exit {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A one-shot `intendant ARGS` on the fake model at `high` beside the daemon (its stderr
    /// piped), running.
    pub(super) fn one_shot(&self, args: &[&str]) -> Child {
        let flags = [
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--autonomy",
            "high",
        ];
        self.one_shot_with(&[&flags, args].concat())
    }

    /// A one-shot `intendant ARGS` beside the daemon, with the flags given (its stderr piped),
    /// running.
    pub(super) fn one_shot_with(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The id of the session a one-shot run beside the daemon started, once the daemon lists
    /// it (the only session listed).
    pub(super) fn one_shot_listed(&self) -> String {
        let mut id = String::new();
        wait_until("the one-shot run listed", || {
            id = self.listed_ids(&[]).pop().unwrap_or_default();
            !id.is_empty()
        });
        id
    }

    /// `ctl attach ID` on a terminal, its stdin closed, its stdout piped.
    pub(super) fn attach_on_a_tty(&self, id: &str) -> Child {
        on_a_tty(&self.command(&["ctl", "attach", id]))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts a session on the fake model; its id.
    pub(super) fn start(&self, task: &str, extra: &[&str]) -> String {
        self.ctl_ok(&start_args(task, extra)).trim().to_owned()
    }

    /// Starts a session on the fake model at `autonomy`, lets its first round end and stops
    /// it (listed `interrupted`); its id.
    pub(super) fn stopped_after_a_round(&self, task: &str, autonomy: &str) -> String {
        let id = self.start(task, &["--autonomy", autonomy]);
        self.wait_status(&id, "idle");
        self.ctl_ok(&["stop", &id]);
        self.wait_status(&id, "interrupted");
        id
    }

    /// `ctl start` on the fake model with `extra` flags, refused or not.
    pub(super) fn try_start(&self, task: &str, extra: &[&str]) -> Output {
        self.ctl(&start_args(task, extra))
    }

    /// The ids `ctl --json sessions ARGS` lists, in its order.
    pub(super) fn listed_ids(&self, args: &[&str]) -> Vec<String> {
        self.ctl_ok(&[&["--json", "sessions"], args].concat())
            .lines()
            .map(|l| {
                let session: Value = serde_json::from_str(l).unwrap();
                session["id"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// Records an ended session of `task` under this world's state root, as a daemon before
    /// this one would have (its log ends with `session_ended`); its directory.
    pub(super) fn record_ended(&self, task: &str) -> PathBuf {
        use intendant_core::session_log::{SessionLog, SessionMeta};
        use intendant_protocol::events::{AppEvent, EndStatus};
        let meta = SessionMeta::new(&self.project(), task, "fake-model", "openai");
        let log = SessionLog::create(&self.home(), meta).unwrap();
        log.record_event(&AppEvent::SessionEnded {
            session_id: log.id().into(),
            status: EndStatus::Completed,
            reason: "done".into(),
        })
        .unwrap();
        log.dir().to_path_buf()
    }

    pub(super) fn session(&self, id: &str) -> Value {
        let sessions: Vec<Value> = self
            .ctl_ok(&["--json", "sessions"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        sessions
            .into_iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("no session {id}"))
    }

    pub(super) fn wait_status(&self, id: &str, status: &str) -> Value {
        self.wait_status_within(id, status, WAIT)
    }

    /// [`World::wait_status`] for a session whose work takes long on a busy machine.
    pub(super) fn wait_status_within(&self, id: &str, status: &str, within: Duration) -> Value {
        let mut last = Value::Null;
        wait_until_within(&format!("{id} {status}"), within, || {
            last = self.session(id);
            last["status"] == status
        });
        last
    }

    /// The pending approvals of session `id`.
    pub(super) fn approvals_of(&self, id: &str) -> Vec<Value> {
        self.ctl_ok(&["--json", "approvals"])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|a| a["session_id"] == id)
            .collect()
    }

    /// `ctl --json attach ID` of a session that has ended: every envelope.
    pub(super) fn replay(&self, id: &str) -> Vec<Value> {
        self.ctl_ok(&["--json", "attach", id])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every live process whose working directory is the project (the runtime and everything
    /// the session's commands started), from `/proc`.
    pub(super) fn processes_in_project(&self) -> Vec<(i32, String)> {
        processes_in(&self.project())
    }

    /// The bodies of the requests the fake model answered with a scripted turn, in order.
    pub(super) fn turn_bodies(&self) -> Vec<Value> {
        self.server
            .turn_requests()
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    /// The directory of session `id`'s records.
    pub(super) fn session_dir(&self, id: &str) -> PathBuf {
        self.home().join("logs").join(id)
    }

    /// Session `id`'s `session.jsonl`.
    pub(super) fn session_log(&self, id: &str) -> PathBuf {
        self.session_dir(id).join("session.jsonl")
    }

    /// For a test that failed: the daemon's stderr and each session's last events (kind and
    /// the start of each line), so a failure seen once on a busy machine can be explained.
    #[allow(clippy::print_stderr)]
    fn report_failure(&self) {
        const LAST: usize = 40;
        eprintln!("--- the daemon's stderr:\n{}", self.daemon_stderr());
        let Ok(dirs) = std::fs::read_dir(self.home().join("logs")) else {
            return;
        };
        for dir in dirs.flatten() {
            let log = std::fs::read_to_string(dir.path().join("session.jsonl")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- session {} (last {} of {} events):",
                dir.file_name().to_string_lossy(),
                LAST.min(lines.len()),
                lines.len()
            );
            for line in &lines[lines.len().saturating_sub(LAST)..] {
                let end = line.char_indices().nth(240).map_or(line.len(), |(i, _)| i);
                eprintln!("{}", &line[..end]);
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.report_failure();
        }
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for (pid, _) in self.processes_in_project() {
            signal(pid as u32, libc::SIGKILL);
        }
    }
}

/// `ctl`'s arguments to start `task` on the fake model with `extra` flags.
fn start_args<'a>(task: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [&START_ON_THE_FAKE_MODEL, extra, &[task]].concat()
}

/// `ctl start` on the fake model, before its flags and task.
const START_ON_THE_FAKE_MODEL: [&str; 5] =
    ["start", "--provider", "openai", "--model", "fake-model"];

pub(super) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on one pid touches no memory.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

pub(super) fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(what, WAIT, cond);
}

pub(super) fn wait_until_within(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub(super) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A running `ctl --json attach`: envelopes read one at a time, stdin open for intents.
pub(super) struct Attached {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Attached {
    pub(super) fn spawn(world: &World, id: &str) -> Attached {
        Attached::running(world, &["ctl", "--json", "attach", id])
    }

    /// `intendant ARGS`, an attach whose stdin and stdout are the test's.
    fn running(world: &World, args: &[&str]) -> Attached {
        let mut child = world
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Attached {
            child,
            stdin,
            lines,
        }
    }

    /// The next envelope whose event is of `kind`.
    pub(super) fn wait_for(&mut self, kind: &str) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no {kind} event"));
            let envelope: Value = serde_json::from_str(&line).unwrap();
            if envelope["event"]["type"] == kind {
                return envelope;
            }
        }
    }

    /// The next envelope, whatever its event.
    pub(super) fn wait_for_any(&mut self) -> Value {
        let line = self.lines.recv_timeout(WAIT).expect("no event");
        serde_json::from_str(&line).unwrap()
    }

    pub(super) fn send(&mut self, msg: &Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An attach to a session a one-shot run recorded (none of its events went through the daemon)
/// shows it from its record, saying so, instead of printing nothing; one whose record holds
/// nothing says where its record is.
#[test]
fn an_attach_to_a_session_a_one_shot_run_recorded_shows_its_record() {
    let mut world = World::new(json!([]));
    let dir = world.record_ended("recorded by a one-shot run");
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let empty = world.record_ended("recorded, then emptied");
    std::fs::write(empty.join("session.jsonl"), "").unwrap();
    let empty = empty.file_name().unwrap().to_string_lossy().into_owned();
    world.serve();
    let out = world.ctl(&["attach", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "session {id} was recorded by a one-shot run, not the daemon: shown from its record"
        )),
        "{}",
        stderr(&out)
    );
    // Its end, rendered as a live attach renders it.
    assert!(
        stderr(&out).contains(&format!("session {id} completed")),
        "{}",
        stderr(&out)
    );
    let out = world.ctl(&["attach", &empty]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("`intendant sessions show {empty}`"))
            && !stderr(&out).contains("  "),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    // `--json` prints the envelopes alone, as ever: none; stderr says where its record is.
    let json_out = world.ctl(&["--json", "attach", &id]);
    assert_eq!(code(&json_out), 0, "{}", stderr(&json_out));
    assert!(json_out.stdout.is_empty());
    assert!(
        stderr(&json_out).contains(&format!("`intendant sessions show {id}` prints its record")),
        "{}",
        stderr(&json_out)
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A one-shot `intendant --resume` of a session the daemon lists as ended: listed running while
/// that run goes on, then as it ended, without a restart of the daemon.
#[test]
fn a_one_shot_resume_beside_the_daemon_is_listed_running_then_as_it_ends() {
    let mut world = World::new(json!([exec_turn("while [ ! -e go ]; do sleep 0.05; done")]));
    let dir = world.record_ended("recorded by a one-shot run");
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    world.serve();
    world.wait_status(&id, "done");
    // Recorded long ago, and looked at since: nothing under `logs/` changes but what the
    // resume does.
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for recorded in [dir.join("session_meta.json"), world.home().join("logs")] {
        std::fs::File::open(recorded)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(2500));
    let resumed = world.one_shot(&["--resume", &id, "go on"]);
    world.wait_status(&id, "running");
    // Relayed from its start, the run going on; MCP's transcript reads the record, which also
    // holds the run before it (its end), as no daemon numbered it.
    Attached::spawn(&world, &id).wait_for("tool_batch");
    let transcript = mcp_transcript(&world, &id);
    assert!(
        transcript.contains("\n- session ended") && !transcript.contains("\n#"),
        "{transcript}"
    );
    std::fs::write(world.project().join("go"), "").unwrap();
    let out = resumed.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ended = world.wait_status(&id, "done");
    assert_eq!(ended["task"], "recorded by a one-shot run");
    // An attach on a terminal's renderer shows both runs from the record, each with its end.
    let out = world.ctl(&["attach", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = stderr(&out);
    let again = shown
        .find(&format!("resumed session {id}"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        shown[..again].contains(&format!("session {id} completed"))
            && shown[again..].contains(&format!("session {id} completed")),
        "{shown}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A resume goes on in the project its session worked in. `ctl start --resume` from another
/// directory runs it in its own (it sent the directory it was run from, and the session's
/// conversation went on against another project's files while its record named its own); a
/// resume naming another project (`--project`), and a one-shot `intendant --resume` run from
/// another project, are refused naming both, and change nothing. `ctl start --resume` needs no
/// text (it asked for a task, so `""` had to be typed).
#[test]
fn a_resume_goes_on_in_the_project_its_session_worked_in() {
    let mut world = World::new(json!([
        text_turn("First run."),
        exec_turn("pwd > where.txt"),
        text_turn("Second run."),
    ]));
    world.serve();
    let id = world.stopped_after_a_round("first", "high");
    let elsewhere = tempfile::tempdir().unwrap();
    let place = elsewhere.path().display().to_string();
    let worked_in = format!("session {id} worked in {}", world.project().display());

    let one_shot = world
        .command(&[
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--resume",
            &id,
            "go on",
        ])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(code(&one_shot), 2, "{}", stderr(&one_shot));
    assert!(
        stderr(&one_shot).contains(&worked_in),
        "{}",
        stderr(&one_shot)
    );
    let named = world.try_start("go on", &["--resume", &id, "--project", &place]);
    assert_ne!(code(&named), 0);
    assert!(stderr(&named).contains(&worked_in), "{}", stderr(&named));
    assert_eq!(world.server.turns_consumed(), 1, "neither ran a turn");

    // No text: it goes on with what it was doing.
    let from_elsewhere = world
        .command(&[&["ctl"][..], &START_ON_THE_FAKE_MODEL, &["--resume", &id]].concat())
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(code(&from_elsewhere), 0, "{}", stderr(&from_elsewhere));
    world.wait_status(&id, "idle");
    let written = std::fs::read_to_string(world.project().join("where.txt")).unwrap();
    assert_eq!(
        std::path::Path::new(written.trim()).canonicalize().unwrap(),
        world.project().canonicalize().unwrap()
    );
    assert!(!elsewhere.path().join("where.txt").exists());
    assert_eq!(world.stop_daemon(), 0);
}

/// `ctl attach` to a resumed session goes on past the end of its run before: from the start,
/// a run going on after a resume is followed (its approval answered) to its own end, and once
/// ended both runs are shown, each with its end (the attach stopped at the first end it met:
/// the run going on was never shown); `start --resume --attach` of a resume that queues for a
/// slot waits for its run.
#[test]
fn an_attach_follows_a_resumed_session_past_the_end_of_its_run_before() {
    let mut world = World::new(json!([
        text_turn("First run."),
        exec_turn("echo second > second.txt"),
        text_turn("Second run."),
        exec_turn("while [ ! -e go ]; do sleep 0.05; done"),
        text_turn("Held."),
        text_turn("Third run."),
    ]));
    world.home_config("[daemon]\nmax_running = 1\n");
    world.serve();
    let id = world.stopped_after_a_round("first", "high");
    let resumed = world.start("second", &["--resume", &id, "--autonomy", "medium"]);
    assert_eq!(resumed, id);
    world.wait_status(&id, "waiting_for_human");

    let mut attached = Attached::spawn(&world, &id);
    assert_eq!(
        attached.wait_for("session_ended")["event"]["status"],
        "interrupted"
    );
    assert_eq!(
        attached.wait_for("session_started")["event"]["resumed"],
        true
    );
    let asked = attached.wait_for("approval_required");
    attached.send(&json!({"action": "approve", "id": asked["event"]["id"]}));
    assert_eq!(attached.wait_for("done")["event"]["message"], "Second run.");
    world.wait_status(&id, "idle");
    world.ctl_ok(&["stop", &id]);
    attached.wait_for("session_ended");
    let status = attached.child.wait().unwrap();
    assert!(
        status.success(),
        "the attach ends with the session: {status}"
    );
    assert!(world.project().join("second.txt").exists());

    // Ended: both runs, on a terminal's renderer too.
    let out = world.ctl(&["attach", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = stderr(&out);
    let first = shown
        .find("First run.")
        .unwrap_or_else(|| panic!("{shown}"));
    let again = shown
        .find(&format!("resumed session {id}"))
        .unwrap_or_else(|| panic!("{shown}"));
    let second = shown
        .find("Second run.")
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(first < again && again < second, "{shown}");
    assert_eq!(
        shown.matches(&format!("session {id} interrupted")).count(),
        2,
        "{shown}"
    );

    // A resume queued behind a session holding the only slot: its history ends with the end
    // of the run before, and the attach waits for the run it starts.
    let holder = world.start("hold the slot", &["--autonomy", "full"]);
    world.wait_status(&holder, "running");
    let mut attached = Attached::running(
        &world,
        &[
            "ctl", "--json", "start", "--resume", &id, "--attach", "third",
        ],
    );
    world.wait_status(&id, "queued");
    std::fs::write(world.project().join("go"), "").unwrap();
    // Replayed from the start: each run's answer, the queued one's last.
    let answers: Vec<Value> = (0..3)
        .map(|_| attached.wait_for("done")["event"]["message"].clone())
        .collect();
    assert_eq!(answers, ["First run.", "Second run.", "Third run."]);
    world.wait_status(&id, "idle");
    world.ctl_ok(&["stop", &id]);
    attached.wait_for("session_ended");
    assert!(attached.child.wait().unwrap().success());
    assert_eq!(world.stop_daemon(), 0);
}

/// A session a one-shot run recorded, then resumed through the daemon: the daemon's history
/// of it begins with the resumed run's start, the run before being in its record alone (with no
/// `seq`). `ctl attach` (followed from while it waits, to its end) and MCP's transcript show
/// both runs from the record, each line once; they showed the daemon's run alone.
#[test]
fn a_one_shot_session_resumed_through_the_daemon_is_shown_with_its_run_before() {
    let mut world = World::new(json!([text_turn("Through the daemon.")]));
    let dir = world.record_ended("recorded by a one-shot run");
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    world.serve();
    world.start("go on", &["--resume", &id, "--autonomy", "high"]);
    world.wait_status(&id, "idle");
    let attach = world
        .command(&["ctl", "attach", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let transcript = mcp_transcript(&world, &id);
    assert!(
        transcript.contains("\n- session ended") && transcript.contains("\n#"),
        "the run before unnumbered, the daemon's numbered: {transcript}"
    );
    // The attach is under way (it read the record) before the session ends.
    wait_until("the attach to connect", || {
        let status: Value = serde_json::from_str(&world.ctl_ok(&["--json", "status"])).unwrap();
        status["clients"].as_u64() >= Some(2)
    });
    world.ctl_ok(&["stop", &id]);
    let out = attach.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = stderr(&out);
    assert!(
        shown.contains(&format!(
            "session {id} was resumed through the daemon, its runs before recorded by a one-shot \
             run: shown from its record"
        )),
        "{shown}"
    );
    let again = shown
        .find(&format!("resumed session {id}"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        shown[..again].contains(&format!("session {id} completed")),
        "{shown}"
    );
    assert_eq!(shown.matches("Through the daemon.").count(), 1, "{shown}");
    assert_eq!(
        shown.matches(&format!("resumed session {id}")).count(),
        1,
        "{shown}"
    );
    assert_eq!(
        shown.matches(&format!("session {id} interrupted")).count(),
        1,
        "{shown}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A daemon serving, and beside it a one-shot run (`wait for go`) whose command waits for a
/// file `go` in the project, then answers `all done`; the run, and its session's id once listed.
fn one_shot_waiting_for_go() -> (World, Child, String) {
    let mut world = World::new(json!([
        exec_turn("while [ ! -e go ]; do sleep 0.05; done"),
        text_turn("all done"),
    ]));
    world.serve();
    let run = world.one_shot(&["wait for go"]);
    let id = world.one_shot_listed();
    (world, run, id)
}

/// The text of MCP's transcript resource of session `id`, read through `intendant mcp` on stdio.
fn mcp_transcript(world: &World, id: &str) -> String {
    let mut mcp = world
        .command(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
            "params": {"uri": format!("intendant://session/{id}")}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    let read = BufReader::new(mcp.stdout.take().unwrap())
        .lines()
        .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap())
        .find(|reply| reply["id"] == 2)
        .unwrap();
    drop(stdin);
    let _ = mcp.kill();
    let _ = mcp.wait();
    read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{read}"))
        .to_owned()
}

/// A one-shot run whose start the daemon's ring no longer holds (its relayed replies passed the
/// ring's 16 MiB by 5) is still shown whole by `ctl attach` on a terminal, from its record, and
/// then followed to its end, nothing shown twice.
#[test]
fn an_attach_to_a_long_one_shot_run_shows_it_whole_from_its_record() {
    // The mock provider (no streamed deltas to carry): 24 replies of 900 KiB, then a command
    // that waits.
    let usage = json!({ "input": 100, "cached": 0, "output": 10, "reasoning": 0 });
    let exec = |text: String, command: &str| {
        json!({ "text": text, "usage": usage,
            "tool_calls": [{ "name": "exec_command", "arguments": { "command": command } }] })
    };
    let mut turns: Vec<Value> = (1..=24)
        .map(|n| exec(format!("reply {n}. {}", "x".repeat(900 * 1024)), "true"))
        .collect();
    turns.push(exec(
        "waiting".into(),
        "touch waiting; while [ ! -e go ]; do sleep 0.05; done",
    ));
    turns.push(json!({ "text": "all done", "usage": usage,
        "tool_calls": [{ "name": "signal_done", "arguments": { "message": "all done" } }] }));
    let mut world = World::new(json!([]));
    let scenario = world.user_home().join("long.scenario.json");
    std::fs::write(
        &scenario,
        json!({ "model": "fake-model", "turns": turns }).to_string(),
    )
    .unwrap();
    world.serve();
    let run = world.one_shot_with(&[
        "--provider",
        "mock",
        "--scenario",
        &scenario.display().to_string(),
        "--autonomy",
        "high",
        "a long run",
    ]);
    let id = world.one_shot_listed();
    // Relayed up to its last command: its 21 MiB of replies before it have passed through the
    // ring, which keeps 16 MiB. What the daemon holds of it no longer begins with its start,
    // nor with its first turns' commands.
    let mut relayed = Attached::spawn(&world, &id);
    loop {
        let batch = relayed.wait_for("tool_batch");
        if batch.to_string().contains("touch waiting") {
            break;
        }
    }
    drop(relayed);
    let mut held = Attached::spawn(&world, &id);
    let first = held.wait_for_any();
    assert_ne!(first["event"]["type"], "session_started", "{first}");
    drop(held);
    let watching = world.attach_on_a_tty(&id);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(world.project().join("go"), "").unwrap();
    let out = watching.wait_with_output().unwrap();
    let watched = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        &watched[..2000.min(watched.len())]
    );
    // Each batch once (the terminal shows a turn's text only when it runs no command).
    assert_eq!(watched.matches("▸ exec_command").count(), 25, "{watched}");
    assert!(watched.contains("all done"), "{watched}");
    // MCP's transcript of it is read from the record too: its lines carry no daemon seq.
    let transcript = mcp_transcript(&world, &id);
    assert!(
        transcript.contains("\n- session ended") && !transcript.contains("\n#"),
        "{}",
        &transcript[..transcript.len().min(2000)]
    );
    assert!(run.wait_with_output().unwrap().status.success());
    // Ended, it is shown whole from its record too, saying so.
    // (On a terminal whose human stays: an attach whose stdin ends detaches at once.)
    world.wait_status(&id, "done");
    let (ok, watched) = Tty::spawn(on_a_tty(&world.command(&["ctl", "attach", &id]))).finish();
    assert!(ok, "{}", &watched[..2000.min(watched.len())]);
    assert_eq!(watched.matches("▸ exec_command").count(), 25, "{watched}");
    assert!(watched.contains("shown from its record"), "{watched}");
    // `--json` prints what the daemon holds, its tail, and says so on stderr.
    let json_out = world.ctl(&["--json", "attach", &id]);
    assert_eq!(code(&json_out), 0, "{}", stderr(&json_out));
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&json_out.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_ne!(first["event"]["type"], "session_started", "{first}");
    assert!(
        stderr(&json_out).contains(&format!(
            "the daemon holds only the end of session {id}: `intendant sessions show {id}`"
        )),
        "{}",
        stderr(&json_out)
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// Two records alike (the same event at the same millisecond), one relayed before an attach
/// read the record and one after: the attach shows both. What it showed of the record is told
/// by where each relayed line ends in the log (`record_end`), not by what the line says.
#[test]
fn an_attach_shows_each_of_two_records_alike_once() {
    let (mut world, run, id) = one_shot_waiting_for_go();
    let mut relayed = Attached::spawn(&world, &id);
    relayed.wait_for("tool_batch");
    let log = PathBuf::from(world.ctl_ok(&["logs", &id]).trim()).join("session.jsonl");
    // Appended as a writer appends: one whole line.
    let append_alike = || {
        let line = intendant_protocol::events::SessionLogRecord {
            ts: "2026-12-07T03:00:00.000Z".to_owned(),
            seq: None,
            event: intendant_protocol::events::AppEvent::Warning {
                message: "a line said twice alike".into(),
            },
        };
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(format!("{}\n", serde_json::to_string(&line).unwrap()).as_bytes())
            .unwrap();
        std::fs::metadata(&log).unwrap().len()
    };
    let first_end = append_alike();
    let first = relayed.wait_for("warning");
    assert_eq!(
        first["record_end"], first_end,
        "where its line ends: {first}"
    );
    let mut watching = Tty::spawn(on_a_tty(&world.command(&["ctl", "attach", &id])));
    watching.wait_for("a line said twice alike", 1);
    let second_end = append_alike();
    assert_eq!(relayed.wait_for("warning")["record_end"], second_end);
    watching.wait_for("a line said twice alike", 2);
    std::fs::write(world.project().join("go"), "").unwrap();
    let (ok, watched) = watching.finish();
    assert!(ok, "{watched}");
    assert_eq!(
        watched.matches("a line said twice alike").count(),
        2,
        "{watched}"
    );
    assert_eq!(watched.matches("▸ exec_command").count(), 1, "{watched}");
    assert!(run.wait_with_output().unwrap().status.success());
    assert_eq!(world.stop_daemon(), 0);
}

/// A daemon and a session of it that answered its task and waits, idle, with two answers left
/// for follow-ups.
fn answering_three_times() -> (World, String) {
    let mut world = World::new(json!([
        text_turn("First answer."),
        text_turn("Second answer."),
        text_turn("Third answer.")
    ]));
    world.serve();
    let id = world.start("the first task", &["--autonomy", "high"]);
    world.wait_status(&id, "idle");
    (world, id)
}

/// `ctl attach` shows a follow-up sent to the session from elsewhere (another `ctl`, the
/// dashboard, MCP) as the session is sent it, and not again one typed at its own prompt (on the
/// screen already). It showed none: a watcher saw the model answer what it never saw asked.
#[test]
fn ctl_attach_shows_a_follow_up_sent_from_elsewhere_and_not_one_typed_at_it() {
    let (mut world, id) = answering_three_times();
    let mut watching = Tty::spawn(on_a_tty(&world.command(&["ctl", "attach", &id])));
    watching.wait_for("First answer.", 1);
    world.ctl_ok(&["send", &id, "sent from elsewhere"]);
    watching.wait_for("Second answer.", 1);
    watching.type_line("typed right here");
    watching.wait_for("Third answer.", 1);
    watching.type_eof();
    let (ok, watched) = watching.finish();
    assert!(ok, "{watched}");
    assert!(watched.contains("user: sent from elsewhere"), "{watched}");
    let elsewhere = watched.find("user: sent from elsewhere").unwrap();
    assert!(
        elsewhere < watched.find("Second answer.").unwrap(),
        "shown before its answer: {watched}"
    );
    assert_eq!(
        watched.matches("typed right here").count(),
        1,
        "the typed line alone: {watched}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// `ctl --json attach` prints a follow-up sent to the session from elsewhere (a script mirroring
/// the session missed the human's turns: it printed no intent at all), and not one it sent
/// itself, as `intendant --json` echoes none of its own.
#[test]
fn ctl_json_attach_prints_a_follow_up_sent_from_elsewhere_and_not_its_own() {
    let (mut world, id) = answering_three_times();
    let mut attached = Attached::spawn(&world, &id);
    attached.wait_for("round_complete");
    world.ctl_ok(&["send", &id, "sent from elsewhere"]);
    let elsewhere = attached.wait_for("control_command");
    assert_eq!(
        (&elsewhere["event"]["action"], &elsewhere["event"]["text"]),
        (&json!("follow_up"), &json!("sent from elsewhere")),
        "{elsewhere}"
    );
    attached.wait_for("round_complete");
    attached.send(&json!("sent right here"));
    let mut after = Vec::new();
    loop {
        let envelope = attached.wait_for_any();
        let done = envelope["event"]["type"] == "round_complete";
        after.push(envelope);
        if done {
            break;
        }
    }
    assert!(
        !after
            .iter()
            .any(|e| e["event"]["type"] == "control_command"),
        "its own follow-up not echoed: {after:#?}"
    );
    assert!(
        after
            .iter()
            .any(|e| e["event"]["type"] == "model_response" || e["event"]["type"] == "done"),
        "{after:#?}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// A one-shot run beside the daemon is followed live: `ctl attach` shows its events as the run
/// writes them (its command's batch while the command still waits) and ends with it; a
/// follow-up or an interrupt through the daemon is refused naming the process that runs it.
#[test]
fn a_one_shot_run_beside_the_daemon_is_followed_live_by_ctl_attach() {
    let (mut world, mut run, id) = one_shot_waiting_for_go();
    let listed = world.wait_status(&id, "running");
    assert_eq!(listed["run_by"], run.id(), "{listed}");
    let table = world.ctl_ok(&["sessions"]);
    assert!(
        table.contains(&format!("running pid {}", run.id())),
        "{table}"
    );
    let status = world.ctl_ok(&["status"]);
    assert!(
        status.contains("1 running (1 by other processes),"),
        "{status}"
    );
    // On a terminal, the attach says that process asks its own human.
    let watching = world.attach_on_a_tty(&id);
    let mut attached = Attached::spawn(&world, &id);
    let batch = attached.wait_for("tool_batch");
    assert_eq!(batch["session_id"], id.as_str());
    assert!(
        !world.project().join("go").exists() && run.try_wait().unwrap().is_none(),
        "relayed while the run goes on"
    );
    for refused in [
        world.ctl(&["send", &id, "more"]),
        world.ctl(&["interrupt", &id]),
    ] {
        assert_ne!(code(&refused), 0);
        let why = stderr(&refused);
        assert!(
            why.contains("run by another process") && why.contains(&format!("pid {}", run.id())),
            "{why}"
        );
    }
    std::fs::write(world.project().join("go"), "").unwrap();
    let done = attached.wait_for("done");
    assert_eq!(done["event"]["message"], "all done");
    let ended = attached.wait_for("session_ended");
    assert_eq!(ended["event"]["status"], "completed");
    let mut exit = None;
    wait_until("the attach ends with the session", || {
        exit = attached.child.try_wait().unwrap();
        exit.is_some()
    });
    assert_eq!(exit.and_then(|e| e.code()), Some(0));
    let out = watching.wait_with_output().unwrap();
    let watched = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{watched}");
    assert!(
        watched.contains(&format!(
            "is run by another process (pid {}), which asks its own human",
            run.id()
        )) && watched.contains("all done"),
        "{watched}"
    );
    // Shown from its record, then followed: each batch once.
    assert_eq!(watched.matches("▸ exec_command").count(), 1, "{watched}");
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    world.wait_status(&id, "done");
    assert_eq!(world.stop_daemon(), 0);
}

/// The daemon's rewind of a session it lists as ended whose record another writer holds (a
/// one-shot run resuming it since) is refused before it restores anything; once the record is
/// free it rewinds.
#[test]
fn a_daemon_rewind_of_a_session_another_writer_holds_is_refused_and_changes_nothing() {
    let mut world = World::new(json!([
        exec_turn("printf 'v1\\n' > a.txt"),
        exec_turn("printf 'v2\\n' > a.txt"),
        text_turn("done"),
    ]));
    world.serve();
    let id = world.stopped_after_a_round("write twice", "full");
    let events = world.home().join("logs").join(&id).join("session.jsonl");
    let held = hold_writers_lock(&events);
    let before = std::fs::read(&events).unwrap();
    let refused = world.ctl(&["rewind", &id, "--to", "2"]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("being resumed"),
        "{}",
        stderr(&refused)
    );
    let a = || std::fs::read_to_string(world.project().join("a.txt")).unwrap();
    assert_eq!(a(), "v2\n", "nothing restored");
    assert_eq!(std::fs::read(&events).unwrap(), before, "no note");
    drop(held);
    world.ctl_ok(&["rewind", &id, "--to", "2"]);
    assert_eq!(a(), "v1\n");
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn two_sessions_with_interleaved_approvals_from_two_clients() {
    let mut world = World::new(json!([
        exec_turn("echo a > a.txt"),
        exec_turn("echo b > b.txt")
    ]));
    world.serve();
    let a = world.start("make a", &[]);
    world.wait_status(&a, "waiting_for_human");
    // The next model turn goes to b only once a has taken its own.
    let b = world.start("make b", &[]);
    world.wait_status(&b, "waiting_for_human");
    assert_ne!(a, b);

    // Client one follows a and answers from its stdin; client two answers b with a verb.
    let mut attached = Attached::spawn(&world, &a);
    let asked = attached.wait_for("approval_required");
    assert_eq!(asked["session_id"], a.as_str());
    assert_eq!(asked["event"]["command_preview"], "$ echo a > a.txt");
    let for_b = world.approvals_of(&b);
    assert_eq!(for_b.len(), 1, "{for_b:?}");
    assert_eq!(for_b[0]["command_preview"], "$ echo b > b.txt");
    assert_ne!(
        for_b[0]["id"], asked["event"]["id"],
        "approval ids are daemon-wide"
    );
    let b_approval = for_b[0]["id"].to_string();
    world.ctl_ok(&["approve", &b, &b_approval]);
    world.wait_status(&b, "idle");
    assert!(world.project().join("b.txt").exists());
    assert!(!world.project().join("a.txt").exists(), "a still waits");
    assert_eq!(world.approvals_of(&a).len(), 1);

    attached.send(&json!({"action": "approve", "id": asked["event"]["id"]}));
    let resolved = attached.wait_for("approval_resolved");
    assert_eq!(resolved["event"]["verdict"], "approve");
    world.wait_status(&a, "idle");
    assert!(world.project().join("a.txt").exists());

    // Answering again is refused, from either client.
    let again = world.ctl(&["approve", &b, &b_approval]);
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    drop(attached);
    world.ctl_ok(&["stop", &a]);
    world.ctl_ok(&["stop", &b]);
    world.wait_status(&a, "interrupted");
    world.wait_status(&b, "interrupted");

    // Daemon sessions are recorded like one-shot runs.
    let listed = world.command(&["sessions", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{ids:?}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn attach_after_the_fact_and_after_a_restart_replays_the_same_events() {
    let mut world = World::new(json!([exec_turn("echo hi"), text_turn("Done.")]));
    world.serve();
    let id = world.stopped_after_a_round("say hi", "full");
    let before = world.replay(&id);
    let kinds: Vec<&str> = before
        .iter()
        .filter_map(|e| e["event"]["type"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"session_started"), "{kinds:?}");
    for kind in ["tool_batch_result", "round_complete"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    let seqs: Vec<u64> = before.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let since = world.ctl_ok(&["--json", "attach", &id, "--since", &seqs[2].to_string()]);
    assert_eq!(since.lines().count(), before.len() - 3);

    assert_eq!(world.stop_daemon(), 0);
    world.serve();
    let after = world.replay(&id);
    // The same events in the same order with the same seqs (deltas, never logged, are absent
    // from both).
    let strip = |events: &[Value]| -> Vec<(u64, Value)> {
        events
            .iter()
            .filter(|e| e["event"]["type"] != "model_response_delta")
            .map(|e| (e["seq"].as_u64().unwrap(), e["event"].clone()))
            .collect()
    };
    assert_eq!(strip(&after), strip(&before));
    assert_eq!(world.session(&id)["status"], "interrupted");
}

#[test]
fn ctl_exit_codes_and_refusals() {
    let mut world = World::new(json!([]));
    let out = world.ctl(&["status"]);
    assert_eq!(code(&out), 3, "no daemon: {}", stderr(&out));
    world.serve();
    let out = world.ctl(&["approve", "no-such-session", "1"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("no-such-session"), "{}", stderr(&out));
    assert_eq!(code(&world.ctl(&["stop", "no-such-session"])), 1);
    assert_eq!(code(&world.ctl(&["logs", "no-such-session"])), 1);
    assert_eq!(code(&world.ctl(&["attach", "no-such-session"])), 1);
    assert_eq!(code(&world.ctl(&["frobnicate"])), 2);
    assert_eq!(code(&world.ctl(&["autonomy", "reckless"])), 2);
    let out = world.ctl(&["start", "--project", "/no/such/dir", "task"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(world.ctl_ok(&["autonomy", "high"]), "high\n");
    assert_eq!(world.ctl_ok(&["autonomy"]), "high\n");
    world.ctl_ok(&["shutdown"]);
    let mut child = world.daemon.take().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(code(&world.ctl(&["status"])), 3);
}

#[test]
fn one_daemon_per_state_root_and_a_stale_socket_is_replaced() {
    let mut world = World::new(json!([]));
    // A crashed daemon's socket: a file nothing listens on.
    std::fs::create_dir_all(world.home()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(world.home().join("daemon.sock")).unwrap());
    world.serve();
    let pid = world.daemon.as_ref().unwrap().id();
    let second = world.command(&["serve"]).output().unwrap();
    assert_eq!(code(&second), 2, "{}", stderr(&second));
    assert!(
        stderr(&second).contains(&format!("pid {pid}")),
        "{}",
        stderr(&second)
    );
    // The first one still serves, through the same socket, private to its user.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&world.home().join("daemon.sock")), 0o600);
    assert_eq!(mode(&world.home()), 0o700);
    assert!(world.ctl_ok(&["status"]).contains(&format!("pid {pid}")));
    assert_eq!(world.stop_daemon(), 0);
    assert!(!world.home().join("daemon.sock").exists());
}

#[test]
fn bad_lines_on_the_real_socket_get_errors_and_the_connection_goes_on() {
    let mut world = World::new(json!([]));
    world.serve();
    let stream = UnixStream::connect(world.home().join("daemon.sock")).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut recv = || -> Value {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    assert_eq!(recv()["hello"], 1);
    writer
        .write_all(b"{\"hello\":1,\"client\":\"test\"}\n")
        .unwrap();
    writer.write_all(b"{\"id\":1,\"op\"\n").unwrap();
    assert_eq!(recv()["error"]["code"], "invalid_request");
    let long = format!(
        "{{\"id\":2,\"op\":\"sessions\",\"pad\":\"{}\"}}\n",
        "x".repeat(300_000)
    );
    writer.write_all(long.as_bytes()).unwrap();
    let reply = recv();
    assert_eq!(reply["error"]["code"], "invalid_request", "{reply}");
    writer
        .write_all(b"{\"id\":3,\"op\":\"send\",\"intent\":{\"session_id\":\"nope\",\"action\":\"approve\",\"id\":1}}\n")
        .unwrap();
    let reply = recv();
    assert_eq!(
        (reply["id"].clone(), reply["error"]["code"].clone()),
        (json!(3), json!("unknown_session"))
    );
    writer
        .write_all(b"{\"id\":4,\"op\":\"sessions\"}\n")
        .unwrap();
    assert_eq!(recv(), json!({"id": 4, "ok": []}));
    // A client that just hangs up mid-line is nobody's problem.
    writer.write_all(b"{\"id\":5,").unwrap();
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    assert_eq!(world.ctl_ok(&["--json", "sessions"]), "");
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn ctl_agenda_and_schedule_through_the_real_daemon() {
    let mut world = World::new(json!([]));
    world.serve();
    // Bad times: a clear error, exit 1, nothing kept.
    let out = world.ctl(&[
        "schedule",
        "--at",
        "2026-12-03T09:00:00 Mars/Olympus_Mons",
        "task",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown timezone \"Mars/Olympus_Mons\""),
        "{}",
        stderr(&out)
    );
    let out = world.ctl(&["schedule", "--at", "2020-01-01T00:00:00Z", "task"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("in the past"), "{}", stderr(&out));
    let out = world.ctl(&["agenda", "add", "x", "--remind", "soon"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(world.ctl_ok(&["agenda", "list"]), "the agenda is empty\n");

    let added = world.ctl_ok(&["agenda", "add", "renew the cert", "--remind", "+3d"]);
    assert!(
        added.contains("item") && added.contains("open") && added.contains("renew the cert"),
        "{added}"
    );
    let scheduled = world.ctl_ok(&[
        "schedule",
        "--at",
        "+1h",
        "--autonomy",
        "high",
        "nightly review",
    ]);
    assert!(scheduled.contains("scheduled 2 for"), "{scheduled}");
    assert!(
        scheduled.contains("sha256: ") && scheduled.contains("\"autonomy\": \"high\""),
        "{scheduled}"
    );
    // In the approval queue, category schedule, under `agenda`.
    let approvals = world.ctl_ok(&["--json", "approvals"]);
    let pending: Value = serde_json::from_str(approvals.lines().next().unwrap()).unwrap();
    assert_eq!(pending["session_id"], "agenda");
    assert_eq!(pending["category"], "schedule");
    world.ctl_ok(&["approve", "agenda", "2"]);
    let out = world.ctl(&["agenda", "approve", "2"]);
    assert_eq!(code(&out), 1, "answered once: {}", stderr(&out));
    let list = world.ctl_ok(&["--json", "agenda", "list"]);
    let states: Vec<String> = list
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["state"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(states, ["open", "approved"]);
    world.ctl_ok(&["agenda", "done", "1"]);
    world.ctl_ok(&["agenda", "done", "2"]);
    let list = world.ctl_ok(&["agenda", "list"]);
    assert_eq!(list.matches(" done ").count(), 2, "{list}");

    // A time in a named zone is that zone's local time (Paris is UTC+1 in January); snoozing
    // moves the reminder, and a snooze to a bad time changes nothing.
    world.ctl_ok(&[
        "agenda",
        "add",
        "pay the invoice",
        "--remind",
        "2030-01-15T10:00 Europe/Paris",
    ]);
    let at_of = |world: &World, id: u64| -> String {
        let list = world.ctl_ok(&["--json", "agenda", "list"]);
        let entry = list
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["id"] == id)
            .unwrap();
        entry["at"].as_str().unwrap().to_owned()
    };
    assert_eq!(at_of(&world, 3), "2030-01-15T09:00:00.000Z");
    let out = world.ctl(&["agenda", "snooze", "3", "2030-03-31T02:30 Europe/Paris"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert_eq!(at_of(&world, 3), "2030-01-15T09:00:00.000Z");
    world.ctl_ok(&["agenda", "snooze", "3", "2030-01-16T09:00:00Z"]);
    assert_eq!(at_of(&world, 3), "2030-01-16T09:00:00.000Z");
    world.ctl_ok(&["agenda", "snooze", "3", "+2h"]);
    assert_ne!(at_of(&world, 3), "2030-01-16T09:00:00.000Z");
}

/// A due reminder in the terminal: `ctl attach agenda` follows the agenda's events and prints
/// it when it fires (and `--json` gives its envelope).
#[test]
fn ctl_attach_agenda_prints_a_due_reminder() {
    let mut world = World::new(json!([]));
    world.serve();
    let follow = |json: bool| {
        let args: &[&str] = if json {
            &["ctl", "--json", "attach", "agenda"]
        } else {
            &["ctl", "attach", "agenda"]
        };
        let mut child = world
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        (child, rx)
    };
    let (mut text, text_lines) = follow(false);
    let (mut json_out, json_lines) = follow(true);
    // Both are following before the reminder is added.
    std::thread::sleep(Duration::from_millis(500));
    world.ctl_ok(&["agenda", "add", "water the plants", "--remind", "+2s"]);
    let saw = |rx: &mpsc::Receiver<String>, want: &dyn Fn(&str) -> bool| {
        let end = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while Instant::now() < end {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                if want(&line) {
                    return line;
                }
                seen.push(line);
            }
        }
        panic!("never printed; saw {seen:?}");
    };
    let line = saw(&text_lines, &|l| l.contains("water the plants"));
    assert!(line.contains("reminder"), "{line}");
    let line = saw(&json_lines, &|l| l.contains("water the plants"));
    let envelope: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(envelope["session_id"], "agenda");
    assert_eq!(envelope["event"]["type"], "agenda");
    assert_eq!(envelope["event"]["notice"], "reminder");
    for child in [&mut text, &mut json_out] {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(world.stop_daemon(), 0);
}

//! Worker sessions in the daemon: `ctl start --agent NAME` runs the session on that worker (a
//! fake ACP worker, and the pinned real codex, claude-code and kimi on the fake model), its
//! approval is answered from `ctl approve`, a resume continues on the recorded worker, and a
//! name no worker answers to is refused.

use serde_json::json;

use super::{World, code, stderr, wait_until};
use crate::suite::worker_real::shell_call_scenario;
use intendant_testkit::Wire;
use intendant_testkit::clis::{self, RealWorker};
use intendant_testkit::fake_clis::write_fake_worker;

impl World {
    /// Makes `bin/kimi` the fake kimi replaying `transcript` (recording to `record.jsonl`).
    fn fake_kimi(&self, transcript: &str) -> std::path::PathBuf {
        write_fake_worker(
            &self.root.path().join("bin"),
            "kimi",
            transcript,
            &self.root.path().join("record.jsonl"),
        )
        .unwrap()
    }

    /// Starts the daemon with what kimi's profile needs: a model and key it can use (the fake
    /// never calls a model).
    fn serve_for_kimi(&mut self) {
        self.serve_with(&[
            ("KIMI_MODEL_NAME", "fake-model"),
            ("KIMI_MODEL_API_KEY", "sk-fake-kimi-0123456789"),
        ]);
    }

    /// Answers session `id`'s one approval, the fake worker's `touch approved.txt`, with `ctl
    /// approve`; waits until the round ended and the file is there.
    fn approve_the_touch(&self, id: &str) {
        let asked = self.approvals_of(id);
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["command_preview"], "$ touch approved.txt");
        self.ctl_ok(&["approve", id, &asked[0]["id"].to_string()]);
        self.wait_status(id, "idle");
        assert!(self.project().join("approved.txt").exists());
    }

    /// The pinned real CLI of worker `agent` on this world's fake model, its state under the
    /// world's root; `None` when it is not installed (said; under `CI` that fails instead).
    fn real_worker(&self, agent: &str) -> Option<RealWorker> {
        let home = |name: &str| {
            let dir = self.root.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        let anthropic = self.server.base_url(Wire::Anthropic);
        match agent {
            "codex" => Some(clis::codex_worker(
                &clis::require("codex")?,
                &self.server.base_url(Wire::OpenAiResponses),
                &home("codex-home"),
            )),
            "claude-code" => Some(clis::claude_worker(&clis::require("claude")?, &anthropic)),
            "kimi" => clis::kimi_worker(&clis::require("kimi")?, &anthropic, &home("kimi-home")),
            other => panic!("no real worker {other}"),
        }
    }

    /// Waits (at most a minute) until `cond`; else fails naming `what`, with session `id` as
    /// listed, its log's last lines and what the daemon said (a real CLI that stalls says why
    /// only there).
    fn until(&self, id: &str, what: &str, cond: &dyn Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !cond() {
            if std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(self.session_log(id)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(12).collect();
                panic!(
                    "never: {what}\n{}\nits log's last lines, newest first:\n{}\nthe daemon \
                     said: {}",
                    self.session(id),
                    tail.join("\n"),
                    self.daemon_stderr()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Each start of the fake worker, as it recorded it (argv, pid, ...).
    fn worker_starts(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.root.path().join("record.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|entry| entry.get("pid").is_some())
            .collect()
    }

    /// How many sessions the daemon lists.
    fn sessions_count(&self) -> usize {
        self.ctl_ok(&["--json", "sessions"]).lines().count()
    }
}

/// A daemon running the fake kimi that replays `transcript` (its `[agent.kimi]` table holding
/// `more` too), and a session started on it.
fn started_on_fake_kimi(transcript: &str, more: &str) -> (World, String) {
    let mut world = World::new(json!([]));
    let exe = world.fake_kimi(transcript);
    world.trusted_config(&format!(
        "[agent.kimi]\npath = \"{}\"\n{more}",
        exe.display()
    ));
    world.serve_for_kimi();
    let id = world
        .ctl_ok(&["start", "--agent", "kimi", "Create approved.txt"])
        .trim()
        .to_owned();
    (world, id)
}

#[test]
fn ctl_start_agent_runs_the_worker_and_ctl_approve_answers_it() {
    let (mut world, id) = started_on_fake_kimi("kimi_approve.jsonl", "");
    let session = world.wait_status(&id, "waiting_for_human");
    assert_eq!(session["backend"], json!({"kind": "agent", "name": "kimi"}));
    world.approve_the_touch(&id);
    // A follow-up is the worker's next prompt in the same conversation.
    world.ctl_ok(&["send", &id, "And now?"]);
    let log = world.session_log(&id);
    wait_until("the second round is recorded", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Second answer."))
    });
    world.wait_status(&id, "idle");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\"verdict\":\"approve\""), "{logged}");
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

/// The project's `[agent] default_backend` runs a `ctl start` that names no agent (over the
/// daemon's `native`), and `ctl start --resume ID` continues on the recorded worker and its
/// conversation whatever the project says by then; another `--agent` on resume is refused.
/// A worker kept idle past `[agent.kimi] idle_exit_secs` is let go while its session waits (an
/// idle codex, claude or kimi held 250-450 MiB and dozens of threads until the session's own
/// `idle_timeout`), the session still idle; the next follow-up starts it again on its
/// conversation: the fake kimi's second start loads the session its first opened (its
/// transcript refuses anything else) and answers the follow-up.
#[test]
fn an_idle_worker_is_let_go_and_a_follow_up_starts_it_again_on_its_conversation() {
    let (mut world, id) = started_on_fake_kimi("kimi_approve.jsonl", "idle_exit_secs = 1\n");
    world.wait_status(&id, "waiting_for_human");
    world.approve_the_touch(&id);
    let first = world.worker_starts()[0]["pid"].as_u64().unwrap();
    wait_until("the idle worker is let go", || {
        !std::path::Path::new(&format!("/proc/{first}")).exists()
    });
    assert_eq!(world.wait_status(&id, "idle")["status"], "idle");

    world.fake_kimi("kimi_resume.jsonl");
    world.ctl_ok(&["send", &id, "And now?"]);
    let log = world.session_log(&id);
    wait_until("the follow-up is answered", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Second answer."))
    });
    world.wait_status(&id, "idle");
    let starts = world.worker_starts();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let record = std::fs::read_to_string(world.root.path().join("record.jsonl")).unwrap();
    assert!(
        record.contains(r#""method": "session/load""#),
        "the second start took the conversation up: {record}"
    );
    // Let go again, the session is stopped as any waiting one is: it ends `interrupted`,
    // recorded, with no start of its worker.
    let second = starts[1]["pid"].as_u64().unwrap();
    wait_until("the worker is let go again", || {
        !std::path::Path::new(&format!("/proc/{second}")).exists()
    });
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains(r#""event":"session_ended""#) && logged.contains("the session was stopped"),
        "{logged}"
    );
    assert_eq!(world.worker_starts().len(), 2);
    assert_eq!(world.stop_daemon(), 0);
}

/// A worker that never answers its handshake leaves its session stoppable: `ctl stop` ends it
/// `interrupted` and the worker with it.
#[test]
fn a_worker_silent_in_its_handshake_is_stopped_with_its_session() {
    let (mut world, id) = started_on_fake_kimi("kimi_silent_handshake.jsonl", "");
    wait_until("the worker reads its handshake", || {
        std::fs::read_to_string(world.root.path().join("record.jsonl"))
            .is_ok_and(|r| r.contains("initialize"))
    });
    let pid = world.worker_starts()[0]["pid"].as_u64().unwrap();
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    wait_until("the worker is gone", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    // It ended itself, as a stop asks (it was dropped once the daemon's grace ran out, its log
    // without its end).
    let log = std::fs::read_to_string(world.session_log(&id)).unwrap();
    assert!(
        log.contains(r#""event":"session_ended""#) && log.contains(r#""status":"interrupted""#),
        "{log}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn ctl_resume_continues_on_the_recorded_worker_and_refuses_another() {
    let mut world = World::new(json!([]));
    let exe = world.fake_kimi("kimi_approve.jsonl");
    let kimi_table = format!("[agent.kimi]\npath = \"{}\"\n", exe.display());
    world.trusted_config(&format!(
        "[agent]\ndefault_backend = \"kimi\"\n{kimi_table}"
    ));
    world.serve_for_kimi();

    let id = world
        .ctl_ok(&["start", "Create approved.txt"])
        .trim()
        .to_owned();
    let session = world.wait_status(&id, "waiting_for_human");
    assert_eq!(session["backend"], json!({"kind": "agent", "name": "kimi"}));
    world.approve_the_touch(&id);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");

    // By now the project would run native; the session resumes on kimi all the same, which
    // loads its recorded ACP session (any other request makes the fake exit 3).
    world.trusted_config(&format!(
        "[agent]\ndefault_backend = \"native\"\n{kimi_table}"
    ));
    world.fake_kimi("kimi_resume.jsonl");
    let resumed = world
        .ctl_ok(&["start", "--resume", &id, "And now?"])
        .trim()
        .to_owned();
    assert_eq!(resumed, id);
    wait_until("the resumed round is recorded", || {
        std::fs::read_to_string(world.session_log(&id)).is_ok_and(|l| l.contains("Second answer."))
    });
    let idle = world.wait_status(&id, "idle");
    assert_eq!(idle["backend"], json!({"kind": "agent", "name": "kimi"}));
    assert!(
        world.server.turn_requests().is_empty(),
        "our loop never ran"
    );
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");

    let out = world.ctl(&["start", "--resume", &id, "--agent", "native", "x"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("ran on kimi"), "{}", stderr(&out));
    assert_eq!(world.stop_daemon(), 0);
}

/// `ctl start --agent acp TASK -- COMMAND ARGS...`: the daemon runs that ACP agent (a fake
/// replaying kimi's ACP transcript) as the project's trusted `[agent.acp.some]` entry with that
/// command line (a command line from a request alone is refused:
/// `security_daemon_an_acp_command_line_counts_only_from_trusted_configuration`), `ctl approve`
/// answers its request, the listing names the entry, and a resume runs the same command; a
/// command line for anything but `acp` is refused.
#[test]
fn ctl_start_agent_acp_runs_its_command_line_in_the_daemon() {
    let mut world = World::new(json!([]));
    let exe = write_fake_worker(
        &world.root.path().join("bin"),
        "some-agent",
        "kimi_approve.jsonl",
        &world.root.path().join("record.jsonl"),
    )
    .unwrap();
    std::fs::write(
        world.project().join("intendant.toml"),
        format!(
            "[agent.acp.some]\ncommand = [{:?}, \"--flag-for-the-agent\"]\n",
            exe
        ),
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    world.serve_with(&[]);
    let exe_arg = exe.to_str().unwrap();
    let id = world
        .ctl_ok(&[
            "start",
            "--agent",
            "acp",
            "Create approved.txt",
            "--",
            exe_arg,
            "--flag-for-the-agent",
        ])
        .trim()
        .to_owned();
    let session = world.wait_status(&id, "waiting_for_human");
    assert_eq!(session["backend"], json!({"kind": "agent", "name": "some"}));
    assert_eq!(session["provider"], "some");
    world.approve_the_touch(&id);
    let logged = std::fs::read_to_string(world.session_log(&id)).unwrap();
    assert!(logged.contains("\"verdict\":\"approve\""), "{logged}");
    let record = std::fs::read_to_string(world.root.path().join("record.jsonl")).unwrap();
    let argv: serde_json::Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    assert_eq!(argv["argv"], json!(["--flag-for-the-agent"]));
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");

    // Resumed without `--agent`: the recorded command line runs again and loads its session.
    write_fake_worker(
        &world.root.path().join("bin"),
        "some-agent",
        "kimi_resume.jsonl",
        &world.root.path().join("record.jsonl"),
    )
    .unwrap();
    world.ctl_ok(&["start", "--resume", &id, "And now?"]);
    wait_until("the resumed round is recorded", || {
        std::fs::read_to_string(world.session_log(&id)).is_ok_and(|l| l.contains("Second answer."))
    });
    world.wait_status(&id, "idle");
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");

    for (args, says) in [
        (
            &["start", "--agent", "kimi", "task", "--", "/bin/true"][..],
            "is the ACP agent's, not kimi's",
        ),
        (
            &["start", "task", "--", "/bin/true"][..],
            "is the ACP agent's",
        ),
        (
            &["start", "--agent", "acp", "task"][..],
            "--agent acp -- COMMAND ARGS...",
        ),
    ] {
        let out = world.ctl(args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(world.sessions_count(), 1, "nothing else was started");
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn ctl_start_agent_with_no_such_worker_is_refused() {
    let mut world = World::new(json!([]));
    world.serve_with(&[]);
    let out = world.ctl(&["start", "--agent", "nope", "task"]);
    assert_ne!(code(&out), 0);
    assert!(
        stderr(&out).contains("unknown agent `nope`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// The pinned real CLI of worker `agent` once through the daemon (when installed:
/// [`World::real_worker`]): `ctl start --agent NAME`, its shell call answered from `ctl
/// approve`, the file made, the round complete and recorded; then stopped.
fn real_worker_asks_ctl_approve(world: World, agent: &str) {
    let Some(worker) = world.real_worker(agent) else {
        return;
    };
    let (mut world, id) = real_worker_approved(world, agent, &worker.config, &worker.env);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

/// [`real_worker_asks_ctl_approve`] up to the end of the first round: the daemon and the
/// session, idle.
fn real_worker_approved(
    mut world: World,
    agent: &str,
    config: &str,
    env: &[(String, String)],
) -> (World, String) {
    std::fs::write(world.project().join("intendant.toml"), config).unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.extend(intendant_testkit::clis::offline_env());
    world.serve_with(&env);

    let id = world
        .ctl_ok(&["start", "--agent", agent, "Create approved.txt"])
        .trim()
        .to_owned();
    world.until(&id, "the worker asks", &|| {
        world.session(&id)["status"] == "waiting_for_human"
    });
    let asked = world.approvals_of(&id);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0]["command_preview"]
            .as_str()
            .is_some_and(|p| p.contains("touch approved.txt")),
        "{asked:?}"
    );
    world.ctl_ok(&["approve", &id, &asked[0]["id"].to_string()]);
    let idle = world.wait_status(&id, "idle");
    assert!(world.project().join("approved.txt").exists(), "{idle}");
    assert_eq!(idle["backend"], json!({"kind": "agent", "name": agent}));
    let log = std::fs::read_to_string(world.session_log(&id)).unwrap();
    assert!(log.contains("\"verdict\":\"approve\""), "{log}");
    assert!(log.contains("\"round_complete\""), "{log}");
    assert!(log.contains("Created approved.txt."), "{log}");
    (world, id)
}

/// The pinned real CLI of worker `agent` let go while its session waits (`idle_exit_secs = 1`
/// added to its `[agent.NAME]` table): its session's groups hold no process any more; a follow-up
/// starts it again on its conversation, so the model's request for it carries the first
/// round (the shell call), and the session waits idle again.
fn real_worker_let_go_goes_on_with_its_conversation(world: World, agent: &str) {
    let Some(worker) = world.real_worker(agent) else {
        return;
    };
    let config = format!("{}idle_exit_secs = 1\n", worker.config);
    let (mut world, id) = real_worker_approved(world, agent, &config, &worker.env);
    let processes = || {
        let listed = world.ctl_ok(&["--json", "sessions"]);
        let session = listed
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .find(|session| session["id"] == id.as_str())
            .unwrap();
        session["usage"]["processes"].as_u64()
    };
    if processes().is_none() {
        let why = "no cgroup counts the session's processes here";
        assert!(std::env::var_os("CI").is_none(), "{why}; CI is set");
        #[allow(clippy::print_stderr)]
        {
            eprintln!("note: skipping: {why}");
        }
        return;
    }
    world.until(&id, "the idle worker is let go", &|| processes() == Some(0));
    let before = world.server.turn_requests().len();
    world.ctl_ok(&["send", &id, "And now?"]);
    world.until(&id, "the follow-up reaches the model", &|| {
        world.server.turn_requests().len() > before
    });
    world.until(&id, "the follow-up's round ends", &|| {
        world.session(&id)["status"] == "idle"
    });
    let requests = world.server.turn_requests();
    let body = requests.last().unwrap().body.to_string();
    assert!(
        body.contains("And now?") && body.contains("touch approved.txt"),
        "the follow-up's request carries the first round: {body}"
    );
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    assert_eq!(world.stop_daemon(), 0);
}

/// The real workers' scenario of the approval tests, with a third answer for a follow-up.
fn with_a_follow_up(mut scenario: serde_json::Value) -> serde_json::Value {
    scenario["turns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"text": "Still here."}));
    scenario
}

#[test]
fn the_real_codex_through_the_daemon_asks_ctl_approve() {
    real_worker_asks_ctl_approve(World::playing(shell_call_scenario()), "codex");
}

#[test]
fn the_real_claude_through_the_daemon_asks_ctl_approve() {
    let scenario = intendant_testkit::clis::bash_call_scenario();
    real_worker_asks_ctl_approve(World::playing(scenario), "claude-code");
}

#[test]
fn the_real_kimi_through_the_daemon_asks_ctl_approve() {
    let scenario = intendant_testkit::clis::bash_call_scenario();
    real_worker_asks_ctl_approve(World::playing(scenario), "kimi");
}

#[test]
fn the_real_codex_let_go_while_idle_goes_on_with_its_thread() {
    real_worker_let_go_goes_on_with_its_conversation(
        World::playing(shell_call_scenario()),
        "codex",
    );
}

#[test]
fn the_real_claude_let_go_while_idle_goes_on_with_its_session() {
    let scenario = with_a_follow_up(intendant_testkit::clis::bash_call_scenario());
    real_worker_let_go_goes_on_with_its_conversation(World::playing(scenario), "claude-code");
}

#[test]
fn the_real_kimi_let_go_while_idle_goes_on_with_its_session() {
    let scenario = with_a_follow_up(intendant_testkit::clis::bash_call_scenario());
    real_worker_let_go_goes_on_with_its_conversation(World::playing(scenario), "kimi");
}

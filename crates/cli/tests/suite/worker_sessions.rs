//! `intendant --agent NAME` and `[agent] default_backend` through the built binary, with a fake
//! worker CLI (`intendant-agents`' `fake_worker.py` replaying a recorded kimi ACP transcript):
//! the session runs on the worker, its approval is answered through `--json` stdin, and the
//! flags that name no runnable worker are refused before anything runs.

use std::path::PathBuf;
use std::process::Command;

use intendant_testkit::Wire;
use intendant_testkit::fake_clis::write_fake_worker;
use serde_json::{Value, json};

use super::controller::harness::{
    Ctl, JsonSession, assert_success, done_turn, events_of, run_with_limit,
};

/// A world with a fake worker executable `bin/NAME` replaying `transcript`, recording to
/// `record.jsonl`.
fn world_with_worker(name: &str, transcript: &str, turns: Value) -> (Ctl, PathBuf) {
    let world = Ctl::new(Wire::OpenAiResponses, turns);
    let exe = write_fake_worker(
        &world.root.path().join("bin"),
        name,
        transcript,
        &world.root.path().join("record.jsonl"),
    )
    .unwrap();
    (world, exe)
}

/// `intendant trust` for the world's project (worker paths are security-relevant).
fn trust(world: &Ctl) {
    let out = run_with_limit({
        let mut cmd = world.bare_command();
        cmd.arg("trust");
        cmd
    });
    assert_success(&out);
}

/// Approves the one shell call, asks one follow-up (the transcript expects a second prompt),
/// then closes stdin; returns the events.
fn approve_and_follow_up(cmd: Command) -> Vec<Value> {
    let mut session = JsonSession::spawn(cmd);
    let request = session.wait_for("approval_required");
    assert_eq!(request["command_preview"], "$ touch approved.txt");
    session.send(&json!({ "action": "approve", "id": request["id"] }));
    session.wait_for("round_complete");
    session.send(&json!({ "action": "follow_up", "text": "And now?" }));
    session.wait_for("round_complete");
    let (status, events) = session.finish();
    assert!(status.success(), "{status:?}: {events:#?}");
    events
}

fn the_one<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    let found = events_of(events, kind);
    assert_eq!(found.len(), 1, "one {kind}: {events:#?}");
    found[0]
}

/// The session's `session.jsonl`, found from its `session_started` id.
fn session_log(world: &Ctl, events: &[Value]) -> String {
    let id = the_one(events, "session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::read_to_string(
        world
            .intendant_home()
            .join(intendant_core::session_log::LOGS_DIR)
            .join(id)
            .join("session.jsonl"),
    )
    .unwrap()
}

fn assert_worker_session(world: &Ctl, events: &[Value], provider: &str) {
    assert_eq!(the_one(events, "session_started")["provider"], provider);
    assert_eq!(the_one(events, "session_ended")["status"], "completed");
    assert!(world.project().join("approved.txt").exists(), "{events:#?}");
    let log = session_log(world, events);
    assert!(log.contains("\"verdict\":\"approve\""), "{log}");
    assert!(log.contains("\"status\":\"completed\""), "{log}");
    assert!(
        world.turn_requests().is_empty(),
        "the worker ran the turns, not our loop"
    );
}

#[test]
fn an_acp_agent_after_dashdash_runs_the_session_and_asks_through_json() {
    let (world, exe) = world_with_worker("some-agent", "kimi_approve.jsonl", json!([]));
    let mut cmd = world.bare_command();
    cmd.args([
        "--json",
        "--no-sandbox",
        "--agent",
        "acp",
        "Create approved.txt",
    ])
    .arg("--")
    .arg(&exe)
    .arg("--flag-for-the-agent");
    let events = approve_and_follow_up(cmd);
    assert_worker_session(&world, &events, "acp");
    let record = std::fs::read_to_string(world.root.path().join("record.jsonl")).unwrap();
    let argv: Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    assert_eq!(argv["argv"], json!(["--flag-for-the-agent"]));
}

#[test]
fn the_projects_default_backend_runs_the_worker_and_agent_native_overrides_it() {
    let (world, exe) = world_with_worker("kimi", "kimi_approve.jsonl", json!([done_turn("ok")]));
    std::fs::write(
        world.project().join("intendant.toml"),
        format!(
            "[agent]\ndefault_backend = \"kimi\"\n[agent.kimi]\npath = \"{}\"\n",
            exe.display()
        ),
    )
    .unwrap();
    trust(&world);
    let mut cmd = world.bare_command();
    // kimi's profile needs a model and key it can use (the fake never calls a model).
    cmd.env("KIMI_MODEL_NAME", "fake-model")
        .env("KIMI_MODEL_API_KEY", "sk-fake-kimi-0123456789")
        .args(["--json", "--no-sandbox", "Create approved.txt"]);
    let events = approve_and_follow_up(cmd);
    assert_worker_session(&world, &events, "kimi");

    // `--agent native` is Intendant's own loop, whatever the project's default.
    let (out, events) = world.run_json("say ok", &["--agent", "native"]);
    assert_success(&out);
    assert_eq!(the_one(&events, "session_started")["provider"], "openai");
    assert_eq!(world.turn_requests().len(), 1);
}

/// A world whose project runs kimi as the fake worker `bin/kimi` (replaying `transcript`),
/// trusted; the command with the model variables kimi's profile needs.
fn kimi_world(transcript: &str) -> (Ctl, PathBuf) {
    kimi_world_with(transcript, "")
}

/// [`kimi_world`] with `more` after the project file's `[agent.kimi]` table.
fn kimi_world_with(transcript: &str, more: &str) -> (Ctl, PathBuf) {
    let (world, exe) = world_with_worker("kimi", transcript, json!([done_turn("ok")]));
    std::fs::write(
        world.project().join("intendant.toml"),
        format!("[agent.kimi]\npath = \"{}\"\n{more}", exe.display()),
    )
    .unwrap();
    trust(&world);
    (world, exe)
}

fn kimi_command(world: &Ctl, args: &[&str]) -> Command {
    let mut cmd = world.bare_command();
    // kimi's profile needs a model and key it can use (the fake never calls a model).
    cmd.env("KIMI_MODEL_NAME", "fake-model")
        .env("KIMI_MODEL_API_KEY", "sk-fake-kimi-0123456789")
        .args(["--json", "--no-sandbox"])
        .args(args);
    cmd
}

#[test]
fn resume_without_agent_continues_on_the_recorded_worker_and_its_conversation() {
    let (world, exe) = kimi_world("kimi_approve.jsonl");
    let events = approve_and_follow_up(kimi_command(
        &world,
        &["--agent", "kimi", "Create approved.txt"],
    ));
    assert_worker_session(&world, &events, "kimi");
    let id = the_one(&events, "session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The same executable now replays kimi's side of a resume: `session/load` of the recorded
    // ACP session, then the new prompt (any other request makes it exit 3).
    write_fake_worker(
        exe.parent().unwrap(),
        "kimi",
        "kimi_resume.jsonl",
        &world.root.path().join("record.jsonl"),
    )
    .unwrap();
    let out = run_with_limit(kimi_command(&world, &["--resume", &id, "And now?"]));
    assert_success(&out);
    let resumed = super::controller::harness::parse_events(&out.stdout);
    let started = the_one(&resumed, "session_started");
    assert_eq!(started["provider"], "kimi", "{resumed:#?}");
    assert_eq!(started["resumed"], true);
    assert_eq!(the_one(&resumed, "session_ended")["status"], "completed");
    assert!(
        session_log(&world, &resumed).contains("Second answer."),
        "{resumed:#?}"
    );
    assert!(world.turn_requests().is_empty(), "our loop never ran");
    let record = std::fs::read_to_string(world.root.path().join("record.jsonl")).unwrap();
    assert!(
        record.contains("session/load") && record.contains("session_4be91c12"),
        "the worker loaded its recorded session: {record}"
    );

    // Another backend on resume is refused, never a silent switch.
    for other in ["native", "claude-code"] {
        let out = run_with_limit(kimi_command(
            &world,
            &["--resume", &id, "--agent", other, "x"],
        ));
        assert_eq!(out.status.code(), Some(2), "{other}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ran on kimi"), "{other}: {stderr}");
    }
}

#[test]
fn agent_flags_naming_no_runnable_worker_are_refused_before_any_session() {
    let world = Ctl::new(Wire::OpenAiResponses, json!([]));
    let refused = |args: &[&str], says: &str| {
        let mut cmd = world.bare_command();
        cmd.args(["--json", "--no-sandbox"]).args(args);
        let out = run_with_limit(cmd);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        let logs = world
            .intendant_home()
            .join(intendant_core::session_log::LOGS_DIR);
        assert!(
            std::fs::read_dir(&logs).map_or(true, |mut d| d.next().is_none()),
            "no session recorded"
        );
    };
    refused(&["--agent", "nope", "task"], "unknown agent `nope`");
    refused(
        &["--agent", "acp", "task"],
        "--agent acp -- COMMAND ARGS...",
    );
    refused(
        &["--agent", "kimi", "task", "--", "/bin/true"],
        "is the ACP agent's",
    );
    refused(&["task", "--", "/bin/true"], "is the ACP agent's");
}

/// Secrets in the caller's environment: provider keys of Intendant's own and of other CLIs,
/// and unrelated credentials.
const CALLER_SECRETS: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-openai-caller-0123456789"),
    ("ANTHROPIC_API_KEY", "sk-ant-caller-0123456789"),
    ("GEMINI_API_KEY", "gemini-caller-0123456789"),
    ("KIMI_MODEL_NAME", "fake-model"),
    ("KIMI_MODEL_API_KEY", "sk-kimi-caller-0123456789"),
    ("AWS_SECRET_ACCESS_KEY", "aws-caller-secret"),
    ("GITHUB_TOKEN", "ghp-caller-token"),
];

/// Runs `worker` on a fake replaying `transcript` (configured by `table`, the rest of its
/// `[agent.NAME]`) with [`CALLER_SECRETS`] in intendant's environment; the names the worker's
/// environment held.
fn worker_env(worker: &str, transcript: &str, table: &str) -> Vec<String> {
    worker_started(worker, transcript, table)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

/// What the fake worker `worker` (replaying `transcript`, configured by `table`) recorded of
/// itself at its start, in a one-shot session that creates a file.
fn worker_started(worker: &str, transcript: &str, table: &str) -> Value {
    let (world, exe) = world_with_worker(worker, transcript, json!([]));
    std::fs::write(
        world.project().join("intendant.toml"),
        format!("[agent.{worker}]\npath = \"{}\"\n{table}", exe.display()),
    )
    .unwrap();
    trust(&world);
    let mut cmd = world.bare_command();
    cmd.envs(CALLER_SECRETS.iter().copied()).args([
        "--json",
        "--no-sandbox",
        "--agent",
        worker,
        "Create approved.txt",
    ]);
    approve_and_follow_up(cmd);
    let record = std::fs::read_to_string(world.root.path().join("record.jsonl")).unwrap();
    serde_json::from_str(record.lines().next().unwrap()).unwrap()
}

#[test]
fn a_worker_runs_in_the_sessions_cgroups_below_the_controllers_priority() {
    // What a worker CLI runs is the session's as much as a command is: bounded by its pids,
    // memory and cpu groups and ended with them (before, a worker ran in the controller's), and
    // at the sessions' nice value, entered before its exec, so its first threads and children
    // have both (before, it ran at the controller's priority).
    let started = worker_started("kimi", "kimi_approve.jsonl", "");
    let nice = started["nice"].as_i64().unwrap();
    assert!(
        nice >= i64::from(intendant_protocol::runtime::SESSION_NICE),
        "the worker's nice value: {nice}"
    );
    let cgroup = started["cgroup"].as_str().unwrap();
    let in_session = cgroup.lines().any(|line| {
        line.rsplit('/')
            .next()
            .is_some_and(|group| group.starts_with("intendant-"))
    });
    // Only root makes session cgroups on this machine (an ordinary user's are not delegated).
    if running_as_root() {
        assert!(in_session, "the worker's cgroups: {cgroup}");
    }
}

#[test]
fn a_bound_the_workers_tools_run_into_is_told_the_human_after_the_round() {
    // The approved command forks past the session's `pids_max`: the worker's model sees only
    // what its tool printed; the human is told, after the round, which bound it was.
    let (world, _) = kimi_world_with("kimi_fork_bomb.jsonl", "\n[limits]\npids_max = 40\n");
    let events = approve_and_follow_up(kimi_command(
        &world,
        &["--agent", "kimi", "Create approved.txt"],
    ));
    let warnings: Vec<&str> = events_of(&events, "warning")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    // Only root makes session cgroups on this machine (an ordinary user's are not delegated).
    if running_as_root() {
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("limits: the kernel refused ")
                    && w.contains("at most 40 processes and threads at once")),
            "{warnings:?}"
        );
    }
}

/// Whether the test runs as root.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The caller's secrets that reached the worker.
fn secrets_in(env: &[String]) -> Vec<&'static str> {
    CALLER_SECRETS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| env.iter().any(|n| n == name))
        .collect()
}

#[test]
fn each_worker_gets_a_minimal_environment_with_only_the_keys_of_its_own_login() {
    // claude-code: Intendant's Anthropic key only because its table admits it.
    let env = worker_env(
        "claude-code",
        "claude_approve.jsonl",
        "env = [\"ANTHROPIC_API_KEY\"]\n",
    );
    assert_eq!(secrets_in(&env), ["ANTHROPIC_API_KEY"], "{env:?}");
    // kimi: its own model variables, none of Intendant's provider keys.
    let env = worker_env("kimi", "kimi_approve.jsonl", "");
    assert_eq!(
        secrets_in(&env),
        ["KIMI_MODEL_NAME", "KIMI_MODEL_API_KEY"],
        "{env:?}"
    );
    // Nor anything else of intendant's own environment beyond the base list (PATH, HOME,
    // locale, proxies, ...).
    for own in ["INTENDANT_HOME", "RUST_BACKTRACE"] {
        assert!(!env.iter().any(|n| n == own), "{own} in {env:?}");
    }
}

/// SIGINT of `intendant --agent X --json` mid-turn, with a worker that ignores the interrupt and
/// runs a command of its own: the worker and its tree are ended (nothing left in the project,
/// found through /proc), the run exits 130, the session ends `interrupted` in its log.
#[test]
fn sigint_of_an_agent_session_ends_the_worker_and_leaves_no_process() {
    let (world, exe) = world_with_worker("some-agent", "acp_stop_ignored.jsonl", json!([]));
    let mut cmd = world.bare_command();
    cmd.args(["--json", "--no-sandbox", "--agent", "acp", "Run make"])
        .arg("--")
        .arg(&exe);
    let mut session = JsonSession::spawn(cmd);
    session.wait_for("tool_call");
    super::sessions::wait_until(|| {
        super::signals::processes_in(&world.project())
            .iter()
            .any(|(_, name)| name == "sleep")
    });
    session.signal(libc::SIGINT);
    let (status, events) = session.finish();
    assert_eq!(status.code(), Some(130), "{status:?}: {events:#?}");
    let ended = the_one(&events, "session_ended");
    assert_eq!(ended["status"], "interrupted", "{events:#?}");
    assert!(
        session_log(&world, &events).contains("\"status\":\"interrupted\""),
        "{events:#?}"
    );
    super::signals::assert_nothing_left(&world.project());
}

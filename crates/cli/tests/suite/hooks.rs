//! Hooks (`[hooks]`) through the binary against the fake model, one-shot and in the daemon: a
//! `pre_tool_use` guard denying `rm -rf` while `ls` runs, an `approval_request` reviewer
//! approving a read-only command at `medium` and deferring a destructive one (and never asked
//! what a deny rule refuses), every failure a clear event that fails closed at the two gates
//! and open elsewhere, every event run in order with its context reaching the model, and
//! untrusted hooks refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use super::controller::harness::events_of;
use super::daemon::World;
use super::sessions::{Env, exec_turn, text_turn, tool_outputs};

/// A guard: deny any call whose input mentions `rm -rf`, allow the rest.
const GUARD: &str = r#"input=$(cat)
case "$input" in
  *'rm -rf'*) echo '{"decision": "deny", "reason": "rm -rf is not allowed here"}' ;;
  *) echo '{"decision": "allow"}' ;;
esac"#;

/// A reviewer: approve a plain `ls`, defer anything destructive to the human.
const REVIEWER: &str = r#"input=$(cat)
case "$input" in
  *'"preview":"$ ls'*) echo '{"decision": "approve", "reason": "read-only"}' ;;
  *) echo '{"decision": "ask", "reason": "a human should look at this"}' ;;
esac"#;

/// Writes an executable `name` (a `#!/bin/sh` script) into `project`.
fn script(project: &Path, name: &str, body: &str) {
    let path = project.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes `intendant.toml` and trusts it, as a human would with `intendant trust`.
fn configure(env: &Env, config: &str) {
    std::fs::write(env.project.path().join("intendant.toml"), config).unwrap();
    let trusted = env.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{}", stderr(&trusted));
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn events_from(out: &Output) -> Vec<Value> {
    super::controller::harness::parse_events(&out.stdout)
}

fn hook_runs(events: &[Value]) -> Vec<(String, String, Option<String>)> {
    events_of(events, "hook_run")
        .into_iter()
        .map(|e| {
            (
                e["hook_event"].as_str().unwrap_or_default().to_owned(),
                e["verdict"].as_str().unwrap_or_default().to_owned(),
                e["failure"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn ended(events: &[Value]) -> String {
    let ended = events_of(events, "session_ended");
    assert_eq!(ended.len(), 1, "{events:#?}");
    ended[0]["status"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_pre_tool_use_hook_denies_rm_rf_and_lets_ls_run_and_the_turn_goes_on() {
    let env = Env::new(json!([
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "rm -rf build" } },
            { "name": "exec_command", "arguments": { "command": "ls" } }
        ] },
        text_turn("Done.")
    ]));
    std::fs::create_dir(env.project.path().join("build")).unwrap();
    script(env.project.path(), "guard.sh", GUARD);
    let config = "[[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = [\"./guard.sh\"]\n";
    std::fs::write(env.project.path().join("intendant.toml"), config).unwrap();

    // Untrusted, the hook is a security setting: a headless start is refused before anything.
    let refused = env.run_headless("clean up", &["--autonomy", "full"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("[[hooks.pre_tool_use]] command = [\"./guard.sh\"]"),
        "{}",
        stderr(&refused)
    );
    assert!(
        env.turn_bodies().is_empty(),
        "no model request before trust"
    );

    configure(&env, config);
    let out = env.run_headless("clean up", &["--autonomy", "full"]);
    let events = events_from(&out);
    assert!(out.status.success(), "{}\n{events:#?}", stderr(&out));
    assert_eq!(ended(&events), "completed");
    assert!(
        env.project.path().join("build").is_dir(),
        "rm -rf never ran"
    );
    assert_eq!(
        hook_runs(&events),
        [
            ("pre_tool_use".to_owned(), "deny".to_owned(), None),
            ("pre_tool_use".to_owned(), "allow".to_owned(), None)
        ]
    );
    let run = events_of(&events, "hook_run")[0];
    assert_eq!(run["hook"], "./guard.sh");
    assert_eq!(run["tool"], "exec_command");
    assert_eq!(run["reason"], "rm -rf is not allowed here");
    assert!(run["duration_ms"].is_u64(), "{run}");
    let outputs = tool_outputs(&env.turn_bodies()[1]);
    assert!(
        outputs[0].contains("not run: a pre_tool_use hook denied it: rm -rf is not allowed here"),
        "{outputs:?}"
    );
    assert!(outputs[1].contains("guard.sh"), "ls ran: {outputs:?}");
}

#[test]
fn an_approval_request_reviewer_approves_ls_at_medium_and_defers_rm_rf_to_the_human() {
    let env = Env::new(json!([
        exec_turn("ls"),
        exec_turn("rm -rf build"),
        text_turn("Done.")
    ]));
    std::fs::create_dir(env.project.path().join("build")).unwrap();
    script(env.project.path(), "review.sh", REVIEWER);
    configure(
        &env,
        "[[hooks.approval_request]]\ncommand = [\"./review.sh\"]\ntimeout_sec = 10\n",
    );
    // Headless: what the reviewer defers reaches no human and is denied.
    let out = env.run_headless("tidy", &["--autonomy", "medium"]);
    let events = events_from(&out);
    assert!(!out.status.success(), "{events:#?}");
    assert_eq!(ended(&events), "denied");
    assert_eq!(
        hook_runs(&events),
        [
            ("approval_request".to_owned(), "approve".to_owned(), None),
            ("approval_request".to_owned(), "ask".to_owned(), None)
        ]
    );
    // Only the deferred command was put to a human.
    let asked = events_of(&events, "approval_required");
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["command_preview"], "$ rm -rf build");
    assert!(env.project.path().join("build").is_dir());
    let outputs = tool_outputs(&env.turn_bodies()[1]);
    assert!(outputs[0].contains("build"), "ls ran: {outputs:?}");
}

#[test]
fn a_reviewer_is_never_asked_what_a_deny_rule_refuses() {
    let env = Env::new(json!([exec_turn("ls"), text_turn("Done.")]));
    script(
        env.project.path(),
        "yes.sh",
        "cat >/dev/null; echo '{\"decision\": \"approve\"}'",
    );
    configure(
        &env,
        "[approval]\ncommand_exec = \"deny\"\n\
         [[hooks.approval_request]]\ncommand = [\"./yes.sh\"]\n",
    );
    let out = env.run_headless("look", &["--autonomy", "medium"]);
    let events = events_from(&out);
    assert_eq!(ended(&events), "denied");
    assert!(hook_runs(&events).is_empty(), "{events:#?}");
    let reason = events_of(&events, "session_ended")[0]["reason"].to_string();
    assert!(reason.contains("[approval] rule denies"), "{reason}");
}

#[test]
fn each_failing_guard_is_a_clear_event_and_the_call_is_asked_so_headless_denies_it() {
    for (name, body, timeout, expected) in [
        ("hang.sh", "sleep 30", 1, "timed out after 1s"),
        (
            "flood.sh",
            "head -c 104857600 /dev/zero",
            30,
            "printed more than 64 KiB",
        ),
        (
            "garbage.sh",
            "echo 'not json'",
            30,
            "printed invalid output",
        ),
        (
            "fails.sh",
            "echo broken >&2; exit 7",
            30,
            "exited with status 7: broken",
        ),
        ("", "", 30, "cannot be started"),
    ] {
        let env = Env::new(json!([exec_turn("touch ran.txt"), text_turn("Done.")]));
        let program = if name.is_empty() {
            "./missing.sh".to_owned()
        } else {
            script(env.project.path(), name, body);
            format!("./{name}")
        };
        configure(
            &env,
            &format!(
                "[[hooks.pre_tool_use]]\ncommand = [\"{program}\"]\ntimeout_sec = {timeout}\n"
            ),
        );
        let started = std::time::Instant::now();
        let out = env.run_headless("touch it", &["--autonomy", "full"]);
        assert!(started.elapsed().as_secs() < 30, "{name}: bounded");
        let events = events_from(&out);
        assert_eq!(ended(&events), "denied", "{name}: {events:#?}");
        assert!(!env.project.path().join("ran.txt").exists(), "{name}");
        let runs = hook_runs(&events);
        assert_eq!(runs.len(), 1, "{name}: {runs:?}");
        assert_eq!(runs[0].1, "ask", "{name}");
        assert!(
            runs[0].2.as_deref().unwrap_or_default().contains(expected),
            "{name}: {runs:?}"
        );
        let warned: Vec<&Value> = events_of(&events, "warning");
        assert!(
            warned.iter().any(|w| w["message"]
                .as_str()
                .unwrap_or_default()
                .contains("counts as `ask`")),
            "{name}: {warned:?}"
        );
        // At full autonomy only the failed guard sent it to a human.
        assert_eq!(events_of(&events, "approval_required").len(), 1, "{name}");
    }
}

#[test]
fn every_event_runs_in_order_its_context_reaches_the_model_and_a_failing_one_fails_open() {
    let env = Env::new(json!([exec_turn("echo hi"), text_turn("All done.")]));
    // Each hook appends its event name and decides nothing, except where it adds context.
    script(
        env.project.path(),
        "note.sh",
        r#"input=$(cat)
event=$(printf '%s' "$input" | sed -n 's/^{"event":"\([a-z_]*\)".*/\1/p')
echo "$event" >> hooks.log
case "$event" in
  user_prompt) echo '{"additional_context": "PROMPT-CONTEXT"}' ;;
  post_tool_use) echo '{"additional_context": "POST-CONTEXT"}' ;;
  *) ;;
esac"#,
    );
    script(env.project.path(), "broken.sh", "exit 1");
    let mut config = String::new();
    for event in [
        "session_start",
        "user_prompt",
        "pre_tool_use",
        "post_tool_use",
        "stop",
        "session_end",
    ] {
        config.push_str(&format!("[[hooks.{event}]]\ncommand = [\"./note.sh\"]\n"));
    }
    config.push_str("[[hooks.post_tool_use]]\ncommand = [\"./broken.sh\"]\n");
    configure(&env, &config);
    let out = env.run_headless("greet", &["--autonomy", "full"]);
    let events = events_from(&out);
    assert!(out.status.success(), "{}\n{events:#?}", stderr(&out));
    assert_eq!(ended(&events), "completed");
    let log = std::fs::read_to_string(env.project.path().join("hooks.log")).unwrap();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "session_start",
            "user_prompt",
            "pre_tool_use",
            "post_tool_use",
            "stop",
            "session_end"
        ]
    );
    let bodies = env.turn_bodies();
    let first = bodies[0].to_string();
    assert!(
        first.contains("greet\\n\\n[from a user_prompt hook]\\nPROMPT-CONTEXT"),
        "{first}"
    );
    let outputs = tool_outputs(&bodies[1]);
    assert!(
        outputs[0].contains("[from a post_tool_use hook]\nPOST-CONTEXT"),
        "{outputs:?}"
    );
    // The broken post_tool_use hook failed open: a warning, and the session went on.
    let failed: Vec<_> = hook_runs(&events)
        .into_iter()
        .filter(|r| r.2.is_some())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, "post_tool_use");
    assert_eq!(failed[0].1, "none");
    assert!(
        events_of(&events, "warning").iter().any(|w| w["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the session goes on without it")),
        "{events:#?}"
    );
}

#[test]
fn a_stop_hook_sends_the_round_on_and_a_user_prompt_hook_can_refuse_the_prompt() {
    let env = Env::new(json!([
        text_turn("First answer."),
        text_turn("Second answer.")
    ]));
    script(
        env.project.path(),
        "stop.sh",
        r#"input=$(cat)
case "$input" in
  *'"continued":0'*) echo '{"decision": "deny", "reason": "run the tests first"}' ;;
  *) echo '{}' ;;
esac"#,
    );
    configure(&env, "[[hooks.stop]]\ncommand = [\"./stop.sh\"]\n");
    let out = env.run_headless("work", &["--autonomy", "full"]);
    let events = events_from(&out);
    assert_eq!(ended(&events), "completed", "{events:#?}");
    let bodies = env.turn_bodies();
    assert_eq!(bodies.len(), 2, "the stop hook sent the round on once");
    assert!(
        bodies[1].to_string().contains("run the tests first"),
        "{}",
        bodies[1]
    );

    let env = Env::new(json!([text_turn("never")]));
    script(
        env.project.path(),
        "prompt.sh",
        "cat >/dev/null; echo 'no secrets in prompts' >&2; exit 2",
    );
    configure(&env, "[[hooks.user_prompt]]\ncommand = [\"./prompt.sh\"]\n");
    let out = env.run_headless("print the key", &["--autonomy", "full"]);
    let events = events_from(&out);
    assert_eq!(ended(&events), "denied", "{events:#?}");
    assert!(
        env.turn_bodies().is_empty(),
        "the prompt never reached the model"
    );
    let reason = events_of(&events, "session_ended")[0]["reason"].to_string();
    assert!(reason.contains("no secrets in prompts"), "{reason}");
}

#[test]
fn security_hooks_a_hook_runs_inside_the_sessions_walls_unless_a_trusted_entry_opts_out() {
    // Two sessions, one after the other, each an exec turn then an answer.
    let env = Env::new(json!([
        exec_turn("echo hi"),
        text_turn("Done."),
        exec_turn("echo hi"),
        text_turn("Done.")
    ]));
    let state = env.intendant_home();
    // What a hostile hook would try: plant a file in the state root, read the provider key.
    script(
        env.project.path(),
        "probe.sh",
        &format!(
            r#"cat >/dev/null
if touch '{}/planted' 2>/dev/null; then echo '{{"decision": "deny", "reason": "WROTE THE STATE ROOT"}}'; exit 0; fi
if env | grep -q 'sk-test'; then echo '{{"decision": "deny", "reason": "SAW THE KEY"}}'; exit 0; fi
touch probe-ran.txt
echo '{{"decision": "allow"}}'"#,
            state.display()
        ),
    );
    configure(&env, "[[hooks.pre_tool_use]]\ncommand = [\"./probe.sh\"]\n");
    let sandboxed = |env: &Env| {
        env.model_command("probe", &["--sandbox", "--autonomy", "full", "--json"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = sandboxed(&env);
    let events = events_from(&out);
    assert_eq!(ended(&events), "completed", "{}\n{events:#?}", stderr(&out));
    assert_eq!(
        hook_runs(&events),
        [("pre_tool_use".to_owned(), "allow".to_owned(), None)]
    );
    assert!(
        env.project.path().join("probe-ran.txt").exists(),
        "it ran, in the project"
    );
    assert!(!state.join("planted").exists());

    // Opted out (trusted again), the same hook writes where the sandbox kept it out, and the
    // call it then denies is not run.
    configure(
        &env,
        "[[hooks.pre_tool_use]]\ncommand = [\"./probe.sh\"]\nsandbox = false\n",
    );
    let out = sandboxed(&env);
    let events = events_from(&out);
    assert_eq!(
        hook_runs(&events),
        [("pre_tool_use".to_owned(), "deny".to_owned(), None)],
        "{events:#?}"
    );
    assert!(state.join("planted").exists());
    // Still no key, even outside the sandbox.
    let reason = events_of(&events, "hook_run")[0]["reason"].to_string();
    assert!(reason.contains("WROTE THE STATE ROOT"), "{reason}");
}

/// The daemon: the guard and the reviewer work the same in a daemon session, where a human can
/// answer what the reviewer defers.
#[test]
fn in_the_daemon_the_guard_denies_and_the_reviewer_defers_to_the_human() {
    let mut world = World::new(json!([
        { "tool_calls": [
            { "name": "exec_command", "arguments": { "command": "rm -rf build" } },
            { "name": "exec_command", "arguments": { "command": "ls" } }
        ] },
        exec_turn("rm -rf build/cache"),
        text_turn("Done.")
    ]));
    let project = world.project();
    std::fs::create_dir_all(project.join("build/cache")).unwrap();
    script(
        &project,
        "guard.sh",
        r#"input=$(cat)
case "$input" in
  *'"rm -rf build"'*) echo '{"decision": "deny", "reason": "rm -rf is not allowed here"}' ;;
  *) echo '{"decision": "allow"}' ;;
esac"#,
    );
    script(&project, "review.sh", REVIEWER);
    std::fs::write(
        project.join("intendant.toml"),
        "[sandbox]\nenabled = false\n\
         [[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = [\"./guard.sh\"]\n\
         [[hooks.approval_request]]\ncommand = [\"./review.sh\"]\n",
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    world.serve();
    let id = world.start("tidy", &["--autonomy", "medium"]);
    world.wait_status(&id, "waiting_for_human");
    let pending = world.approvals_of(&id);
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["command_preview"], "$ rm -rf build/cache");
    world.ctl_ok(&["deny", &id, &pending[0]["id"].to_string()]);
    world.wait_status(&id, "done");
    assert!(project.join("build/cache").is_dir());
    let events: Vec<Value> = world
        .replay(&id)
        .into_iter()
        .map(|envelope| envelope["event"].clone())
        .collect();
    assert_eq!(
        hook_runs(&events),
        [
            ("pre_tool_use".to_owned(), "deny".to_owned(), None),
            ("pre_tool_use".to_owned(), "allow".to_owned(), None),
            ("approval_request".to_owned(), "approve".to_owned(), None),
            ("pre_tool_use".to_owned(), "allow".to_owned(), None),
            ("approval_request".to_owned(), "ask".to_owned(), None),
        ]
    );
    let outputs = tool_outputs(&world.turn_bodies()[1]);
    assert!(
        outputs[0].contains("a pre_tool_use hook denied it"),
        "{outputs:?}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

/// The daemon, where a human can answer: a guard that fails (here: invalid JSON; a hang,
/// too much output, a non-zero exit and a missing hook take the same path, tested one-shot
/// above) puts the call to the human even at `full`, and a failing `post_tool_use` hook
/// (missing) fails open with a warning.
#[test]
fn in_the_daemon_a_failing_guard_asks_the_human_and_a_missing_post_hook_fails_open() {
    let mut world = World::new(json!([exec_turn("touch asked.txt"), text_turn("Done.")]));
    let project = world.project();
    script(&project, "garbage.sh", "cat >/dev/null; echo 'not json'");
    std::fs::write(
        project.join("intendant.toml"),
        "[sandbox]\nenabled = false\n\
         [[hooks.pre_tool_use]]\ncommand = [\"./garbage.sh\"]\n\
         [[hooks.post_tool_use]]\ncommand = [\"./missing.sh\"]\n",
    )
    .unwrap();
    let trusted = world.command(&["trust"]).output().unwrap();
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    world.serve();
    let id = world.start("touch it", &["--autonomy", "full"]);
    world.wait_status(&id, "waiting_for_human");
    let pending = world.approvals_of(&id);
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["command_preview"], "$ touch asked.txt");
    world.ctl_ok(&["approve", &id, &pending[0]["id"].to_string()]);
    world.wait_status(&id, "idle");
    assert!(
        project.join("asked.txt").exists(),
        "approved by the human, it ran"
    );
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    let events: Vec<Value> = world
        .replay(&id)
        .into_iter()
        .map(|envelope| envelope["event"].clone())
        .collect();
    let runs = hook_runs(&events);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        (runs[0].0.as_str(), runs[0].1.as_str()),
        ("pre_tool_use", "ask")
    );
    assert!(
        runs[0]
            .2
            .as_deref()
            .unwrap_or_default()
            .contains("printed invalid output"),
        "{runs:?}"
    );
    assert_eq!(
        (runs[1].0.as_str(), runs[1].1.as_str()),
        ("post_tool_use", "none")
    );
    assert!(
        runs[1]
            .2
            .as_deref()
            .unwrap_or_default()
            .contains("cannot be started"),
        "{runs:?}"
    );
    let warned: Vec<String> = events_of(&events, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("the session goes on without it")),
        "{warned:?}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

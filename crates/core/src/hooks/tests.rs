//! The engine against real processes (`sh` scripts through the plain launcher): decisions,
//! matchers, how answers add up, and each failure a clear event that fails closed or open as
//! its event says.

use std::time::Duration;

use super::*;

struct World {
    project: tempfile::TempDir,
    bus: EventBus,
    events: tokio::sync::broadcast::Receiver<AppEvent>,
}

impl World {
    fn new() -> World {
        let bus = EventBus::new();
        let events = bus.subscribe();
        World {
            project: tempfile::tempdir().unwrap(),
            bus,
            events,
        }
    }

    /// Writes an executable `name` in the project holding `script` (after `#!/bin/sh`).
    fn script(&self, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.project.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn hooks(&self, toml_text: &str) -> Hooks {
        let config: HooksConfig = toml::from_str(toml_text).unwrap();
        let launcher = PlainLauncher::new(vec![("PATH".into(), "/usr/bin:/bin".into())]);
        Hooks::new(
            config,
            self.project.path(),
            "s-1",
            false,
            Arc::new(launcher),
        )
        .unwrap()
    }

    async fn run(&self, hooks: &Hooks, event: HookEvent, tool: Option<&str>) -> Outcome {
        let input = hooks.input(event, AutonomyLevel::Medium);
        hooks
            .run(&input, tool, &self.bus, &CancelToken::new())
            .await
    }

    fn drain(&mut self) -> Vec<AppEvent> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }
}

fn runs(events: &[AppEvent]) -> Vec<(HookVerdict, Option<String>, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            AppEvent::HookRun {
                verdict,
                reason,
                failure,
                ..
            } => Some((*verdict, reason.clone(), failure.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_guard_denies_rm_rf_and_lets_ls_through_and_sees_the_call() {
    let mut w = World::new();
    w.script(
        "guard.sh",
        r#"input=$(cat)
case "$input" in
  *'"rm -rf'*) echo '{"decision": "deny", "reason": "rm -rf is not allowed here"}' ;;
  *'"event":"pre_tool_use"'*'"session_id":"s-1"'*) echo '{"decision": "allow"}' ;;
  *) echo "unexpected input: $input" >&2; exit 1 ;;
esac"#,
    );
    let hooks =
        w.hooks("[[pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = [\"./guard.sh\"]\n");
    let mut input = hooks.input(HookEvent::PreToolUse, AutonomyLevel::Medium);
    input.tool = Some(intendant_protocol::hooks::HookTool {
        name: "exec_command".into(),
        call_id: "c1".into(),
        arguments: serde_json::json!({ "command": "rm -rf build" }),
    });
    let denied = hooks
        .run(&input, Some("exec_command"), &w.bus, &CancelToken::new())
        .await;
    assert_eq!(
        denied.verdict,
        HookVerdict::Deny,
        "{denied:?} {:?}",
        w.drain()
    );
    assert_eq!(denied.reason.as_deref(), Some("rm -rf is not allowed here"));
    input.tool.as_mut().unwrap().arguments = serde_json::json!({ "command": "ls" });
    let allowed = hooks
        .run(&input, Some("exec_command"), &w.bus, &CancelToken::new())
        .await;
    assert_eq!(allowed.verdict, HookVerdict::Allow, "{:?}", w.drain());
    // Another tool is not the matcher's: nothing runs.
    let other = w
        .run(&hooks, HookEvent::PreToolUse, Some("edit_file"))
        .await;
    assert_eq!(other.verdict, HookVerdict::None);
    let events = w.drain();
    let seen = runs(&events);
    assert_eq!(seen.len(), 2, "{events:?}");
    assert_eq!(seen[0].0, HookVerdict::Deny);
    assert_eq!(seen[1].0, HookVerdict::Allow);
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, AppEvent::Warning { .. }))
    );
}

#[tokio::test]
async fn each_failure_is_a_clear_event_and_counts_as_ask_for_the_gates() {
    let mut w = World::new();
    w.script("hang.sh", "sleep 30");
    w.script("flood.sh", "head -c 104857600 /dev/zero");
    w.script("garbage.sh", "echo 'this is not json'");
    w.script("fails.sh", "echo boom >&2; exit 3");
    w.script("wrong.sh", "echo '{\"decision\": \"approve\"}'");
    for (hook, expected) in [
        ("[\"./hang.sh\"]\ntimeout_sec = 1", "timed out after 1s"),
        ("[\"./flood.sh\"]", "printed more than 64 KiB"),
        ("[\"./garbage.sh\"]", "printed invalid output"),
        ("[\"./fails.sh\"]", "exited with status 3: boom"),
        ("[\"./missing.sh\"]", "cannot be started"),
        (
            "[\"./wrong.sh\"]",
            "\"approve\", which pre_tool_use does not take",
        ),
    ] {
        let hooks = w.hooks(&format!("[[pre_tool_use]]\ncommand = {hook}\n"));
        let started = std::time::Instant::now();
        let outcome = w
            .run(&hooks, HookEvent::PreToolUse, Some("exec_command"))
            .await;
        assert!(started.elapsed() < Duration::from_secs(20), "{hook}");
        assert_eq!(outcome.verdict, HookVerdict::Ask, "{hook}");
        assert!(
            outcome
                .reason
                .as_deref()
                .unwrap_or_default()
                .contains(expected),
            "{hook}: {outcome:?}"
        );
        let events = w.drain();
        let seen = runs(&events);
        assert_eq!(seen.len(), 1, "{hook}: {events:?}");
        assert_eq!(seen[0].0, HookVerdict::Ask);
        assert!(
            seen[0].2.as_deref().unwrap_or_default().contains(expected),
            "{hook}: {seen:?}"
        );
        assert!(
            events
                .iter()
                .any(|e| matches!(e, AppEvent::Warning { message }
                if message.contains("counts as `ask`"))),
            "{hook}: {events:?}"
        );
    }
}

#[tokio::test]
async fn the_other_events_fail_open_with_a_warning() {
    let mut w = World::new();
    w.script("garbage.sh", "echo '{{{'");
    let hooks = w.hooks("[[post_tool_use]]\ncommand = [\"./garbage.sh\"]\n");
    let outcome = w
        .run(&hooks, HookEvent::PostToolUse, Some("exec_command"))
        .await;
    assert_eq!(outcome.verdict, HookVerdict::Allow);
    let events = w.drain();
    assert_eq!(runs(&events)[0].0, HookVerdict::None);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AppEvent::Warning { message }
            if message.contains("the session goes on without it"))),
        "{events:?}"
    );
}

#[tokio::test]
async fn exit_status_2_is_a_deny_whose_reason_is_stderr() {
    let mut w = World::new();
    w.script("two.sh", "echo 'not on main' >&2; exit 2");
    let hooks = w.hooks("[[user_prompt]]\ncommand = [\"./two.sh\"]\n");
    let outcome = w.run(&hooks, HookEvent::UserPrompt, None).await;
    assert_eq!(outcome.verdict, HookVerdict::Deny);
    assert_eq!(outcome.reason.as_deref(), Some("not on main"));
    // An event that takes no deny counts exit 2 as a failure.
    let hooks = w.hooks("[[session_start]]\ncommand = [\"./two.sh\"]\n");
    let outcome = w.run(&hooks, HookEvent::SessionStart, None).await;
    assert_eq!(outcome.verdict, HookVerdict::Allow);
    assert!(runs(&w.drain()).iter().any(|r| r.2.is_some()));
}

#[tokio::test]
async fn a_reviewer_approves_only_when_every_matching_hook_approves() {
    let w = World::new();
    w.script(
        "yes.sh",
        "echo '{\"decision\": \"approve\", \"reason\": \"read-only\"}'",
    );
    w.script("silent.sh", "cat >/dev/null");
    w.script(
        "no.sh",
        "echo '{\"decision\": \"deny\", \"reason\": \"never\"}'",
    );
    let one = w.hooks("[[approval_request]]\ncommand = [\"./yes.sh\"]\n");
    assert_eq!(
        w.run(&one, HookEvent::ApprovalRequest, Some("exec_command"))
            .await
            .verdict,
        HookVerdict::Approve
    );
    let with_silent = w.hooks(
        "[[approval_request]]\ncommand = [\"./yes.sh\"]\n\
         [[approval_request]]\ncommand = [\"./silent.sh\"]\n",
    );
    assert_eq!(
        w.run(&with_silent, HookEvent::ApprovalRequest, None)
            .await
            .verdict,
        HookVerdict::Ask,
        "a reviewer that says nothing did not approve"
    );
    let with_no = w.hooks(
        "[[approval_request]]\ncommand = [\"./yes.sh\"]\n\
         [[approval_request]]\ncommand = [\"./no.sh\"]\n",
    );
    let outcome = w.run(&with_no, HookEvent::ApprovalRequest, None).await;
    assert_eq!(outcome.verdict, HookVerdict::Deny);
    assert_eq!(outcome.reason.as_deref(), Some("never"));
    // A matcher for another tool: no reviewer ran, so a human decides as before.
    let elsewhere =
        w.hooks("[[approval_request]]\nmatcher = \"edit_file\"\ncommand = [\"./yes.sh\"]\n");
    assert_eq!(
        w.run(&elsewhere, HookEvent::ApprovalRequest, Some("exec_command"))
            .await
            .verdict,
        HookVerdict::None
    );
}

#[tokio::test]
async fn additional_context_is_collected_and_bounded() {
    let w = World::new();
    w.script(
        "ctx.sh",
        "printf '{\"additional_context\": \"%s\"}' \"$(head -c 20000 /dev/zero | tr '\\0' x)\"",
    );
    let hooks = w.hooks("[[post_tool_use]]\ncommand = [\"./ctx.sh\"]\n");
    let outcome = w
        .run(&hooks, HookEvent::PostToolUse, Some("exec_command"))
        .await;
    assert_eq!(outcome.context.len(), 1);
    assert!(outcome.context[0].len() <= MAX_CONTEXT_BYTES + 4);
    assert!(outcome.context[0].starts_with("xxxx"));
}

#[test]
fn a_hook_that_must_be_sandboxed_is_refused_without_a_sandboxing_launcher() {
    let project = tempfile::tempdir().unwrap();
    let config: HooksConfig =
        toml::from_str("[[pre_tool_use]]\ncommand = [\"./guard.sh\"]\n").unwrap();
    let launcher: Arc<dyn HookLauncher> = Arc::new(PlainLauncher::new(Vec::new()));
    let e = Hooks::new(
        config.clone(),
        project.path(),
        "s",
        true,
        Arc::clone(&launcher),
    )
    .unwrap_err();
    assert!(e.contains("cannot run one there yet"), "{e}");
    assert!(e.contains("sandbox = false"), "{e}");
    // Outside a sandboxed session, or opted out, it runs.
    assert!(Hooks::new(config, project.path(), "s", false, Arc::clone(&launcher)).is_ok());
    let opted: HooksConfig =
        toml::from_str("[[pre_tool_use]]\ncommand = [\"./guard.sh\"]\nsandbox = false\n").unwrap();
    assert!(Hooks::new(opted, project.path(), "s", true, launcher).is_ok());
}

#[test]
fn a_relative_program_is_the_projects_and_a_bare_name_is_looked_up() {
    let root = Path::new("/p");
    assert_eq!(
        resolve(&["./g.py".into(), "x".into()], root),
        ["/p/./g.py", "x"]
    );
    assert_eq!(resolve(&["scripts/g".into()], root), ["/p/scripts/g"]);
    assert_eq!(resolve(&["python3".into()], root), ["python3"]);
    assert_eq!(resolve(&["/usr/bin/env".into()], root), ["/usr/bin/env"]);
}

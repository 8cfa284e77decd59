//! The success path of each CLI against fake CLIs replaying recorded transcripts, and the
//! invocation hardening the fakes observe: argv (never the prompt), stdin, the private
//! workspace and its modes, the minimal environment, the process group.

use intendant_agents::{AuthClass, BillingClass, Monetary};
use serde_json::{Value, json};

use super::support::{
    PROMPT_MARKER, claude, claude_run, codex, codex_run, request, strings, workspace_of,
};

#[tokio::test]
async fn codex_success_is_validated_and_hardened() {
    let fake = codex(json!({}));
    let resp = codex_run(&fake, &request("codex", "gpt-test"))
        .await
        .unwrap();
    assert_eq!(
        resp.value,
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(
        resp.events,
        [
            "thread.started",
            "item.completed",
            "turn.started",
            "turn.completed"
        ]
    );
    assert_eq!(resp.requested_model, "gpt-test");
    assert_eq!(resp.effective_model, "gpt-test");
    assert_eq!(resp.effective_model_source, "pinned");
    assert_eq!(resp.usage.input_tokens, 100);
    assert_eq!(resp.usage.cached_input_tokens, 20);
    assert_eq!(resp.runtime.kind, "codex-cli");
    assert_eq!(resp.runtime.version, "0.171.0");
    assert_eq!(resp.runtime.protocol, "exec-jsonl");
    assert_eq!(resp.auth_class, AuthClass::ApiKey);
    assert_eq!(resp.billing_class, BillingClass::Metered);
    assert_eq!(resp.monetary, Monetary::Unreported);
    assert_eq!(resp.attempts, 1);

    let rec = fake.record();
    let argv = serde_json::to_string(&rec["argv"]).unwrap();
    assert!(!argv.contains(PROMPT_MARKER), "prompt in argv: {argv}");
    assert!(rec["stdin"].as_str().unwrap().contains(PROMPT_MARKER));
    assert_eq!(rec["cwd_mode"], "0o700");
    assert_eq!(rec["cwd_entries"], json!([]));
    assert_eq!(rec["schema_mode"], "0o600");
    assert_eq!(rec["result_mode"], "0o600");
    assert_eq!(
        rec["pid"], rec["pgid"],
        "the child leads its own process group"
    );
    let argv = strings(&rec["argv"]);
    for flag in [
        "--ephemeral",
        "--ignore-user-config",
        "--ignore-rules",
        "--strict-config",
        "approval_policy=\"never\"",
        "web_search=\"disabled\"",
        "shell_environment_policy.inherit=\"none\"",
    ] {
        assert!(argv.contains(&flag), "{flag} in {argv:?}");
    }
    let sandbox = argv.iter().position(|a| *a == "--sandbox").unwrap();
    assert_eq!(argv[sandbox + 1], "read-only");
    let disabled: Vec<&str> = argv
        .windows(2)
        .filter(|w| w[0] == "--disable")
        .map(|w| w[1])
        .collect();
    assert_eq!(
        disabled,
        [
            "apps",
            "browser_use",
            "computer_use",
            "goals",
            "hooks",
            "in_app_browser",
            "multi_agent",
            "plugins",
            "shell_tool",
            "unified_exec"
        ]
    );
    let env = strings(&rec["env"]);
    assert!(env.contains(&"CODEX_API_KEY"));
    assert!(!env.contains(&"AWS_SECRET_ACCESS_KEY"), "{env:?}");
    assert!(
        env.iter().all(|n| [
            "PATH",
            "HOME",
            "LANG",
            "TMPDIR",
            "CODEX_API_KEY",
            "NO_COLOR",
            "RUST_LOG",
            "LC_CTYPE",
            "PWD"
        ]
        .contains(n)),
        "{env:?}"
    );
    assert!(
        !workspace_of(&rec).exists(),
        "the temporary workspace is removed"
    );
}

#[tokio::test]
async fn claude_success_reports_subscription_truthfully() {
    let fake = claude(json!({}));
    let resp = claude_run(&fake, &request("claude-code", "fake-model"))
        .await
        .unwrap();
    assert_eq!(
        resp.value,
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(resp.effective_model, "fake-model");
    assert_eq!(resp.effective_model_source, "reported");
    assert_eq!(resp.auth_class, AuthClass::ClaudeAi);
    assert_eq!(resp.billing_class, BillingClass::SubscriptionLimits);
    assert_eq!(
        resp.monetary,
        Monetary::SubscriptionLimits,
        "no fake $0.00 and no notional cost"
    );
    assert_eq!(resp.usage.input_tokens, 10);
    assert_eq!(
        resp.events,
        [
            "system.ui_invalidate",
            "system.init",
            "assistant",
            "user",
            "result"
        ]
    );
    let rec = fake.record();
    let argv = strings(&rec["argv"]);
    assert_eq!(argv[0], "-p");
    assert!(
        !argv.contains(&"--bare"),
        "--bare would skip the saved login"
    );
    let after = |flag: &str| {
        let at = argv.iter().position(|a| *a == flag).unwrap();
        argv[at + 1]
    };
    assert_eq!(after("--output-format"), "stream-json");
    assert_eq!(after("--model"), "fake-model");
    assert_eq!(after("--permission-mode"), "dontAsk");
    assert_eq!(after("--tools"), "", "an empty built-in tool list");
    assert_eq!(after("--mcp-config"), "{\"mcpServers\":{}}");
    assert_eq!(after("--disallowed-tools"), "mcp__*");
    assert_eq!(
        after("--setting-sources"),
        "",
        "no user/project/local settings"
    );
    let schema: Value = serde_json::from_str(after("--json-schema")).unwrap();
    assert_eq!(schema["required"], json!(["answer", "reason"]));
    for flag in [
        "--safe-mode",
        "--strict-mcp-config",
        "--disable-slash-commands",
        "--no-session-persistence",
    ] {
        assert!(argv.contains(&flag), "{flag} in {argv:?}");
    }
    let env = strings(&rec["env"]);
    assert!(!env.contains(&"ANTHROPIC_API_KEY"));
    assert!(!env.contains(&"AWS_SECRET_ACCESS_KEY"));
    assert!(rec["stdin"].as_str().unwrap().contains(PROMPT_MARKER));
    assert!(!rec["argv"].to_string().contains(PROMPT_MARKER));
    assert_eq!(rec["cwd_mode"], "0o700");
    assert_eq!(rec["pid"], rec["pgid"]);
}

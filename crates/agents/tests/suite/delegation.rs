//! Delegation against fake CLIs replaying recorded transcripts: every one of the 18 stable error
//! codes (the success paths are in `hardening`).

use std::sync::Arc;
use std::time::Duration;

use intendant_agents::config::AgentConfig;
use intendant_agents::{ApplicationValidator, ErrorCode, HostEnv, delegate};
use serde_json::{Value, json};

use super::support::{
    FakeCli, KEY_VALUE, assert_dies, assert_request_left_nothing, claude, claude_run, codex,
    codex_run, expect_code, request, run, transcript, wait_for, workspace_of,
};

#[tokio::test]
async fn missing_executable() {
    let fake = codex(json!({}));
    let mut config = fake.config();
    config.path = Some(fake.dir.path().join("nope"));
    let e = expect_code(
        run(&request("codex", "m"), &config, &fake.host(&[])).await,
        ErrorCode::CliMissingExecutable,
    );
    assert!(e.recovery_command.unwrap().contains("@openai/codex"));
    // PATH lookup finds nothing either.
    let host = HostEnv::from_pairs([("PATH", "/nonexistent"), ("CODEX_API_KEY", KEY_VALUE)]);
    expect_code(
        run(&request("codex", "m"), &AgentConfig::default(), &host).await,
        ErrorCode::CliMissingExecutable,
    );
}

#[tokio::test]
async fn unsupported_version() {
    let fake = codex(json!({"version": "codex-cli 0.10.0"}));
    let e = expect_code(
        codex_run(&fake, &request("codex", "m")).await,
        ErrorCode::CliUnsupportedVersion,
    );
    assert_eq!(e.details["version"], "0.10.0");
    let fake = codex(json!({"version": "no digits"}));
    expect_code(
        codex_run(&fake, &request("codex", "m")).await,
        ErrorCode::CliUnsupportedVersion,
    );
}

#[tokio::test]
async fn unsupported_capability_for_kimi_and_claude_overrides() {
    let fake = FakeCli::new("kimi", json!({"version": "2.1.0"}));
    expect_code(
        run(&request("kimi", "k2"), &fake.config(), &fake.host(&[])).await,
        ErrorCode::CliUnsupportedCapability,
    );
    let fake = claude(json!({}));
    let mut req = request("claude-code", "fake-model");
    req.config_overrides = vec!["x=1".into()];
    expect_code(
        claude_run(&fake, &req).await,
        ErrorCode::CliUnsupportedCapability,
    );
}

#[tokio::test]
async fn effort_must_be_a_plain_word() {
    let fake = codex(json!({}));
    let mut req = request("codex", "gpt-test");
    req.effort = Some("high\"\nsandbox_mode=\"danger-full-access".into());
    expect_code(
        codex_run(&fake, &req).await,
        ErrorCode::CliUnsupportedCapability,
    );
    assert!(!fake.has_record());
    req.effort = Some("high".into());
    codex_run(&fake, &req).await.unwrap();
    let argv = fake.record()["argv"].to_string();
    assert!(
        argv.contains("model_reasoning_effort=\\\"high\\\""),
        "{argv}"
    );
}

#[tokio::test]
async fn not_authenticated() {
    let fake = codex(json!({}));
    let e = expect_code(
        run(&request("codex", "m"), &fake.config(), &fake.host(&[])).await,
        ErrorCode::CliNotAuthenticated,
    );
    assert_eq!(e.recovery_command.as_deref(), Some("codex login"));
}

#[tokio::test]
async fn state_unwritable() {
    let fake = codex(json!({}));
    let mut req = request("codex", "gpt-test");
    let file = fake.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    req.temp_root = Some(file);
    expect_code(codex_run(&fake, &req).await, ErrorCode::CliStateUnwritable);
    assert!(!fake.has_record(), "the CLI never ran");
}

#[tokio::test]
async fn model_required() {
    let fake = codex(json!({}));
    let mut req = request("codex", "x");
    req.model = None;
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliModelRequired);
    assert!(e.recovery_command.unwrap().contains("--model"));
    // The configured model counts as explicit.
    let mut config = fake.config();
    config.model = Some("gpt-test".into());
    let resp = run(&req, &config, &fake.host(&[("CODEX_API_KEY", KEY_VALUE)]))
        .await
        .unwrap();
    assert_eq!(resp.requested_model, "gpt-test");
}

#[tokio::test]
async fn model_mismatch() {
    let fake = claude(json!({"transcript": transcript("claude_other_model.jsonl")}));
    let e = expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliModelMismatch,
    );
    assert_eq!(e.details["effective_model"], "claude-other-2");
    let fake = claude(json!({"transcript": transcript("claude_model_fallback.jsonl")}));
    let e = expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliModelMismatch,
    );
    assert_eq!(e.details["reported_models"], 2);
}

#[tokio::test]
async fn input_too_large() {
    let fake = codex(json!({}));
    let mut req = request("codex", "gpt-test");
    req.max_input_bytes = 10;
    expect_code(codex_run(&fake, &req).await, ErrorCode::CliInputTooLarge);
    // The schema has its own bound (it travels in claude's argv).
    let mut req = request("codex", "gpt-test");
    let names: Vec<String> = (0..20_000).map(|i| format!("value-{i}")).collect();
    req.schema = json!({"type": "string", "enum": names});
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliInputTooLarge);
    assert_eq!(e.details["max_schema_bytes"], 65536);
    assert!(!fake.has_record());
}

#[tokio::test]
async fn oversized_final_message_is_output_too_large() {
    let big = format!("{{\"answer\":42,\"reason\":\"{}\"}}", "r".repeat(100_000));
    let fake = codex(json!({ "result": big }));
    let mut req = request("codex", "gpt-test");
    req.max_output_bytes = 64 * 1024;
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliOutputTooLarge);
    assert_eq!(e.details["max_output_bytes"], 65536);
    assert!(!workspace_of(&fake.record()).exists());
}

#[tokio::test]
async fn output_too_large_stops_the_group() {
    let fake = codex(json!({"flood_bytes": 1_000_000, "hang": true, "grandchild": true}));
    let mut req = request("codex", "gpt-test");
    req.max_output_bytes = 64 * 1024;
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliOutputTooLarge);
    assert_eq!(e.details["max_output_bytes"], 65536);
    assert_request_left_nothing(&fake).await;
}

#[tokio::test]
async fn timeout_terms_then_kills_the_group() {
    let fake = codex(json!({"hang": true, "ignore_term": true, "grandchild": true}));
    let mut req = request("codex", "gpt-test");
    req.timeout = Duration::from_secs(1);
    req.grace = Duration::from_millis(300);
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliTimeout);
    assert_eq!(e.details["timeout_ms"], 1000);
    assert_request_left_nothing(&fake).await;
}

#[tokio::test]
async fn cancelled_stops_the_group() {
    let fake = codex(json!({"hang": true, "grandchild": true}));
    let req = request("codex", "gpt-test");
    let record = fake.record_path.clone();
    let cancel = async move { wait_for(&record).await };
    let host = fake.host(&[("CODEX_API_KEY", KEY_VALUE)]);
    let r = delegate(&req, &fake.config(), &host, cancel).await;
    expect_code(r, ErrorCode::CliCancelled);
    assert_request_left_nothing(&fake).await;
}

#[tokio::test]
async fn nonzero_exit() {
    let fake = codex(json!({"transcript": null, "exit": 2,
        "stderr": "error: unexpected argument; key sk-proj-LEAKEDKEY123456\n"}));
    let e = expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliNonzeroExit,
    );
    assert_eq!(e.details["exit_code"], 2);
}

#[tokio::test]
async fn malformed_protocol() {
    let fake = codex(json!({"transcript": transcript("codex_malformed.jsonl")}));
    expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliMalformedProtocol,
    );
    // A final message that is not one JSON document is malformed too.
    let fake = codex(json!({"result": "The answer is 42."}));
    expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliMalformedProtocol,
    );
    // A claude result without structured_output is no answer.
    let dir = tempfile::tempdir().unwrap();
    let edited = claude_variant(&dir, |mut result| {
        result.as_object_mut().unwrap().remove("structured_output");
        Some(result)
    });
    let fake = claude(json!({ "transcript": edited }));
    expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliMalformedProtocol,
    );
}

/// `claude_success.jsonl` with its `result` event edited (or dropped on `None`), written in `dir`.
fn claude_variant(dir: &tempfile::TempDir, edit: impl Fn(Value) -> Option<Value>) -> String {
    let original = std::fs::read_to_string(transcript("claude_success.jsonl")).unwrap();
    let mut out = String::new();
    for line in original.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let event = if event["type"] == "result" {
            edit(event)
        } else {
            Some(event)
        };
        if let Some(event) = event {
            out.push_str(&event.to_string());
            out.push('\n');
        }
    }
    let path = dir.path().join("claude_variant.jsonl");
    std::fs::write(&path, out).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn missing_terminal_state() {
    let fake = codex(json!({"transcript": transcript("codex_no_terminal.jsonl")}));
    expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliMissingTerminalState,
    );
    // Claude exiting 0 without its result event has not finished its turn either.
    let dir = tempfile::tempdir().unwrap();
    let fake = claude(json!({ "transcript": claude_variant(&dir, |_| None) }));
    expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliMissingTerminalState,
    );
}

#[tokio::test]
async fn turn_failed_is_classified_not_copied() {
    let fake =
        codex(json!({"transcript": transcript("codex_turn_failed_rate_limit.jsonl"), "exit": 1}));
    let e = expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliTurnFailed,
    );
    assert_eq!(e.details["provider_condition"], "rate_limited");
    assert_eq!(e.details["retryable"], true);
    let fake = claude(json!({"transcript": transcript("claude_overloaded.jsonl"), "exit": 1}));
    let e = expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliTurnFailed,
    );
    assert_eq!(e.details["provider_condition"], "overloaded");
    // `is_error: true` fails the turn even under `subtype: success`.
    let dir = tempfile::tempdir().unwrap();
    let edited = claude_variant(&dir, |mut result| {
        result["is_error"] = json!(true);
        Some(result)
    });
    let fake = claude(json!({ "transcript": edited }));
    let e = expect_code(
        claude_run(&fake, &request("claude-code", "fake-model")).await,
        ErrorCode::CliTurnFailed,
    );
    assert_eq!(e.details["is_error"], true);
}

#[tokio::test]
async fn schema_invalid_answer_is_refused() {
    let fake = codex(
        json!({"result": "{\"answer\":\"forty-two SECRET-PROMPT-MARKER\",\"reason\":\"x\"}"}),
    );
    let e = expect_code(
        codex_run(&fake, &request("codex", "gpt-test")).await,
        ErrorCode::CliSchemaInvalid,
    );
    assert_eq!(e.details["phase"], "answer");
    // A schema that reaches for a remote $ref is refused before anything runs.
    let fake = codex(json!({}));
    let mut req = request("codex", "gpt-test");
    req.schema = json!({"$ref": "https://127.0.0.1:9/schema.json"});
    let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliSchemaInvalid);
    assert_eq!(e.details["phase"], "schema");
    assert!(!fake.has_record());
}

struct RejectsFortyTwo;

impl ApplicationValidator for RejectsFortyTwo {
    fn validate(&self, value: &Value) -> Result<(), String> {
        if value["answer"] == 42 {
            Err("the answer must not be 42".into())
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn application_invalid() {
    let fake = claude(json!({}));
    let mut req = request("claude-code", "fake-model");
    req.validator = Some(Arc::new(RejectsFortyTwo));
    let e = expect_code(
        claude_run(&fake, &req).await,
        ErrorCode::CliApplicationInvalid,
    );
    assert_eq!(e.details["reason"], "the answer must not be 42");
}

#[tokio::test]
async fn permission_denied() {
    let fake = codex(json!({}));
    let not_exec = fake.dir.path().join("codex-not-exec");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let mut config = fake.config();
    config.path = Some(not_exec);
    expect_code(
        run(
            &request("codex", "m"),
            &config,
            &fake.host(&[("CODEX_API_KEY", KEY_VALUE)]),
        )
        .await,
        ErrorCode::CliPermissionDenied,
    );
    // allowed_auth narrows: a ChatGPT login is present but only API keys are allowed.
    fake.write_codex_chatgpt_login();
    let mut config = fake.config();
    config.allowed_auth = vec!["api_key".into()];
    let e = expect_code(
        run(&request("codex", "m"), &config, &fake.host(&[])).await,
        ErrorCode::CliPermissionDenied,
    );
    assert_eq!(e.details["found"], "chatgpt");

    // An override may choose an endpoint; it may not undo the hardening or the model pin.
    let fake = codex(json!({}));
    for bad in [
        "approval_policy=\"on-request\"",
        "sandbox_mode=\"danger-full-access\"",
        "features.shell_tool=true",
        "model=\"gpt-other\"",
        "mcp_servers.x.command=\"sh\"",
    ] {
        let mut req = request("codex", "gpt-test");
        req.config_overrides = vec![bad.to_owned()];
        let e = expect_code(codex_run(&fake, &req).await, ErrorCode::CliPermissionDenied);
        let key = bad.split('=').next().unwrap();
        assert_eq!(e.details["override_key"], key);
        assert!(!fake.has_record(), "{bad}: the CLI never ran");
    }
}

#[tokio::test]
async fn every_code_is_covered_here() {
    // Keeps this file honest: each code appears in a test above by name.
    let source = include_str!("delegation.rs");
    for code in ErrorCode::ALL {
        let variant = format!("{code:?}");
        assert!(
            source.matches(&format!("ErrorCode::{variant}")).count() >= 1,
            "{variant} has no test"
        );
    }
}

#[tokio::test]
async fn dropping_the_request_kills_the_group() {
    let fake = codex(json!({"hang": true, "ignore_term": true, "grandchild": true}));
    let req = request("codex", "gpt-test");
    let host = fake.host(&[("CODEX_API_KEY", KEY_VALUE)]);
    let config = fake.config();
    tokio::select! {
        _ = run(&req, &config, &host) => panic!("a hanging CLI cannot finish"),
        () = wait_for(&fake.record_path) => {}
    }
    assert_request_left_nothing(&fake).await;
}

#[tokio::test]
async fn a_helper_left_behind_by_a_finished_cli_is_stopped() {
    let fake = codex(json!({"grandchild": true}));
    codex_run(&fake, &request("codex", "gpt-test"))
        .await
        .unwrap();
    assert_dies(fake.record()["grandchild_pid"].as_i64().unwrap()).await;
}

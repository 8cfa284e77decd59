//! Delegation details beyond the error codes: which auth class and variables reach the child,
//! PATH discovery, endpoint overrides, and codex's own retries.

use intendant_agents::config::AgentConfig;
use intendant_agents::{AuthClass, Monetary};
use serde_json::json;

use super::support::{KEY_VALUE, claude, codex, codex_run, request, run, transcript};

#[tokio::test]
async fn claude_api_key_is_metered_with_reported_cost() {
    let fake = claude(json!({}));
    let req = request("claude-code", "fake-model");
    let resp = run(
        &req,
        &fake.config(),
        &fake.host(&[("ANTHROPIC_API_KEY", KEY_VALUE)]),
    )
    .await
    .unwrap();
    assert_eq!(resp.auth_class, AuthClass::ApiKey);
    assert_eq!(
        resp.monetary,
        Monetary::Reported {
            amount_usd: 0.00014000000000000001
        }
    );
}

#[tokio::test]
async fn path_lookup_finds_the_cli() {
    let fake = codex(json!({}));
    let path = format!("{}:/usr/bin:/bin", fake.exe.parent().unwrap().display());
    let host = fake.host(&[("PATH", &path), ("CODEX_API_KEY", KEY_VALUE)]);
    let resp = run(
        &request("codex", "gpt-test"),
        &AgentConfig::default(),
        &host,
    )
    .await
    .unwrap();
    assert_eq!(resp.value["answer"], 42);
}

#[tokio::test]
async fn codex_reconnects_count_as_attempts_not_failures() {
    let fake = codex(
        json!({"transcript": transcript("codex_reconnect_success.jsonl"),
        "result": "{\"answer\":42,\"reason\":\"r\"}"}),
    );
    let resp = codex_run(&fake, &request("codex", "gpt-test"))
        .await
        .unwrap();
    assert_eq!(resp.attempts, 2);
    assert_eq!(resp.value["answer"], 42);
}

#[tokio::test]
async fn chatgpt_login_is_preferred_and_keys_stay_out() {
    let fake = codex(json!({}));
    fake.write_codex_chatgpt_login();
    let resp = codex_run(&fake, &request("codex", "gpt-test"))
        .await
        .unwrap();
    assert_eq!(resp.auth_class, AuthClass::Chatgpt);
    assert_eq!(resp.monetary, Monetary::SubscriptionLimits);
    let env = fake.record()["env"].to_string();
    assert!(!env.contains("CODEX_API_KEY"), "{env}");
}

#[tokio::test]
async fn endpoint_override_admits_only_named_variables() {
    let fake = claude(json!({}));
    let mut req = request("claude-code", "fake-model");
    req.admitted_env = vec!["ANTHROPIC_BASE_URL".into()];
    let host = fake.host(&[
        ("ANTHROPIC_API_KEY", KEY_VALUE),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
        ("ANTHROPIC_MODEL", "should-not-pass"),
    ]);
    run(&req, &fake.config(), &host).await.unwrap();
    let values = &fake.record()["env_values"];
    assert_eq!(values["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9/");
    assert!(values.get("ANTHROPIC_MODEL").is_none());
}

#[tokio::test]
async fn endpoint_override_is_off_by_default() {
    // Endpoint variables in the caller's environment do not reach a CLI unless admitted, and
    // codex gets no provider override unless one is configured.
    let endpoints = [
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/anthropic"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/openai"),
        ("CODEX_API_KEY", KEY_VALUE),
    ];
    let fake = claude(json!({}));
    fake.write_claude_login();
    run(
        &request("claude-code", "fake-model"),
        &fake.config(),
        &fake.host(&endpoints),
    )
    .await
    .unwrap();
    let values = &fake.record()["env_values"];
    assert!(values.get("ANTHROPIC_BASE_URL").is_none(), "{values}");
    assert!(values.get("OPENAI_BASE_URL").is_none(), "{values}");

    let fake = codex(json!({}));
    run(
        &request("codex", "gpt-test"),
        &fake.config(),
        &fake.host(&endpoints),
    )
    .await
    .unwrap();
    let rec = fake.record();
    assert!(rec["env_values"].get("OPENAI_BASE_URL").is_none());
    let argv = rec["argv"].to_string();
    assert!(
        !argv.contains("model_provider") && !argv.contains("base_url"),
        "{argv}"
    );
}

#[tokio::test]
async fn allowed_auth_picks_the_allowed_class_over_the_preferred_one() {
    let fake = codex(json!({}));
    fake.write_codex_chatgpt_login();
    let config = AgentConfig {
        allowed_auth: vec!["api_key".into()],
        ..fake.config()
    };
    let resp = run(
        &request("codex", "gpt-test"),
        &config,
        &fake.host(&[("CODEX_API_KEY", KEY_VALUE)]),
    )
    .await
    .unwrap();
    assert_eq!(resp.auth_class, AuthClass::ApiKey);
    assert_eq!(resp.monetary, Monetary::Unreported);
    assert_eq!(fake.record()["env_values"]["CODEX_API_KEY"], KEY_VALUE);
}

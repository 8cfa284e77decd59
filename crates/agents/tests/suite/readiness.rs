//! Readiness objects against fake CLIs: exact field set, not-ready codes, and no secrets.

use intendant_agents::readiness::{self, Readiness};
use intendant_agents::{AuthClass, ErrorCode, profiles};
use serde_json::json;

use super::support::{FakeCli, KEY_VALUE};

/// The fields the issue lists, plus `error_code` only when not ready.
const FIELDS: &[&str] = &[
    "schema_version",
    "agent",
    "runtime",
    "ready",
    "installed",
    "authenticated",
    "supported",
    "executable",
    "version",
    "auth_class",
    "configured_model",
    "model_policy",
    "reason",
    "recovery_command",
];

fn field_names(r: &Readiness) -> Vec<String> {
    let v = serde_json::to_value(r).unwrap();
    let mut names: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    names.sort();
    names
}

fn expected(with_error: bool) -> Vec<String> {
    let mut names: Vec<String> = FIELDS.iter().map(|s| (*s).to_owned()).collect();
    if with_error {
        names.push("error_code".into());
    }
    names.sort();
    names
}

#[tokio::test]
async fn ready_codex_has_exactly_the_listed_fields_and_no_secret() {
    let fake = FakeCli::new("codex", json!({"version": "codex-cli 0.171.0"}));
    let mut config = fake.config();
    config.model = Some("gpt-test".into());
    let host = fake.host(&[("OPENAI_API_KEY", KEY_VALUE), ("CODEX_API_KEY", KEY_VALUE)]);
    let r = readiness::check(profiles::find("codex").unwrap(), &config, &host, &[]).await;
    assert!(r.ready, "{r:?}");
    assert_eq!(field_names(&r), expected(false));
    assert_eq!(r.schema_version, 1);
    assert_eq!(r.runtime, "codex-cli");
    assert_eq!(r.version.as_deref(), Some("0.171.0"));
    assert_eq!(r.auth_class, Some(AuthClass::ApiKey));
    assert_eq!(r.configured_model.as_deref(), Some("gpt-test"));
    assert_eq!(r.model_policy, "explicit_required");
    assert_eq!(r.reason, None);
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(KEY_VALUE), "{text}");
}

#[tokio::test]
async fn not_ready_names_a_stable_code() {
    let fake = FakeCli::new("claude", json!({"version": "2.1.332 (Claude Code)"}));
    let p = profiles::find("claude-code").unwrap();
    let r = readiness::check(p, &fake.config(), &fake.host(&[]), &[]).await;
    assert!(!r.ready && r.installed && r.supported && !r.authenticated);
    assert_eq!(r.error_code, Some(ErrorCode::CliNotAuthenticated));
    assert_eq!(field_names(&r), expected(true));
    assert!(r.reason.is_some() && r.recovery_command.is_some());

    fake.write_claude_login();
    let r = readiness::check(p, &fake.config(), &fake.host(&[]), &[]).await;
    assert!(r.ready, "{r:?}");
    assert_eq!(r.auth_class, Some(AuthClass::ClaudeAi));
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(KEY_VALUE), "{text}");

    let old = FakeCli::new("claude", json!({"version": "1.0.9 (Claude Code)"}));
    let r = readiness::check(
        p,
        &old.config(),
        &old.host(&[("ANTHROPIC_API_KEY", KEY_VALUE)]),
        &[],
    )
    .await;
    assert!(!r.supported);
    assert_eq!(r.version.as_deref(), Some("1.0.9"));
    assert_eq!(r.error_code, Some(ErrorCode::CliUnsupportedVersion));

    let broken = FakeCli::new("claude", json!({"version_exit": 1}));
    let r = readiness::check(p, &broken.config(), &broken.host(&[]), &[]).await;
    assert_eq!(r.error_code, Some(ErrorCode::CliUnsupportedVersion));
}

#[tokio::test]
async fn missing_kimi_is_not_installed() {
    let fake = FakeCli::new("kimi", json!({}));
    let mut config = fake.config();
    config.path = Some(fake.dir.path().join("missing-kimi"));
    let r = readiness::check(
        profiles::find("kimi").unwrap(),
        &config,
        &fake.host(&[]),
        &[],
    )
    .await;
    assert!(!r.installed && !r.ready);
    assert_eq!(r.executable, None);
    assert_eq!(r.error_code, Some(ErrorCode::CliMissingExecutable));
    assert!(
        r.recovery_command
            .unwrap()
            .contains("@moonshot-ai/kimi-code")
    );
}

#[tokio::test]
async fn table_shows_the_same_facts() {
    let fake = FakeCli::new("kimi", json!({"version": "2.1.0"}));
    let host = fake.host(&[("KIMI_MODEL_NAME", "k2"), ("KIMI_MODEL_API_KEY", KEY_VALUE)]);
    let r = readiness::check(profiles::find("kimi").unwrap(), &fake.config(), &host, &[]).await;
    assert!(r.ready, "{r:?}");
    let table = readiness::render_table(&[r]);
    assert!(table.starts_with("AGENT"), "{table}");
    assert!(
        table.contains("kimi") && table.contains("2.1.0") && table.contains("api_key"),
        "{table}"
    );
    assert!(!table.contains(KEY_VALUE));
    assert!(table.contains(fake.exe.to_str().unwrap()), "{table}");

    let missing = FakeCli::new("kimi", json!({}));
    let mut config = missing.config();
    config.path = Some(missing.dir.path().join("missing-kimi"));
    let r = readiness::check(profiles::find("kimi").unwrap(), &config, &host, &[]).await;
    let table = readiness::render_table(&[r]);
    assert!(
        table.contains("[runtime_missing_executable]") && table.contains("try: npm install"),
        "{table}"
    );
}

#[tokio::test]
async fn an_override_delegation_would_refuse_makes_it_not_ready() {
    let fake = FakeCli::new("codex", json!({"version": "codex-cli 0.171.0"}));
    let host = fake.host(&[("CODEX_API_KEY", KEY_VALUE)]);
    let p = profiles::find("codex").unwrap();
    let ok = ["model_provider=\"openai\"".to_owned()];
    assert!(readiness::check(p, &fake.config(), &host, &ok).await.ready);
    let bad = ["approval_policy=\"on-request\"".to_owned()];
    let r = readiness::check(p, &fake.config(), &host, &bad).await;
    assert!(
        !r.ready && r.installed && r.supported && r.authenticated,
        "{r:?}"
    );
    assert_eq!(r.error_code, Some(ErrorCode::CliPermissionDenied));
}

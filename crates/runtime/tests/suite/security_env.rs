//! Credentials never reach a command: every scrubbed variable is planted in the runtime's own
//! environment with a recognisable value, and `env` run through `execAsAgent` and `execPty`
//! must show none of them, whatever `INTENDANT_ENV_PASSTHROUGH` says.

use super::support::{Batch, Run, tempdir};
use serde_json::json;

/// Every provider key and ambient credential the policy names, spelled as users spell them.
const SCRUBBED: &[&str] = &[
    // provider and model keys (absolute deny)
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_ADMIN_KEY",
    "AZURE_OPENAI_API_KEY",
    "MISTRAL_API_KEY",
    "OPENROUTER_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "SOMEVENDOR_API_KEY",
    "SOMEVENDOR_API_TOKEN",
    "openai_api_key",
    "OPENAI_ORG_KEY_2",
    "DEEPSEEK_API_KEY",
    "MYAPIKEY",
    // ambient credentials
    "SSH_AUTH_SOCK",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "NPM_TOKEN",
    "HF_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "MY_SERVICE_SECRET",
    "DB_PASSWORD",
    "PGPASSWORD",
    "SERVICE_CREDENTIALS",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DEPLOY_PRIVATE_KEY",
    "STORAGE_ACCESS_KEY",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "NETRC",
    "DATABASE_URL",
    "SSH_AGENT_PID",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "GH_ENTERPRISE_TOKEN",
    "GITLAB_TOKEN",
    "NPM_CONFIG__AUTHTOKEN",
    "NPM_CONFIG__AUTH",
    "VAULT_TOKEN",
    "CI_JOB_TOKEN",
    "CLIENT_SECRET_FILE",
    "MYSQL_PWD",
    "GITHUB_PAT",
    "SENTRY_DSN",
    "DBUS_SESSION_BUS_ADDRESS",
    "TOKEN_FILE",
    // the runtime's own controls
    "INTENDANT_USER_DISPLAY_GRANTED",
    "INTENDANT_ENV_PASSTHROUGH",
    "INTENDANT_HOME",
    "INTENDANT_LOG_DIR",
];

fn leak_value(name: &str) -> String {
    format!("leak-{name}-marker")
}

/// Runs `env` through both model-driven shells with every scrubbed variable planted.
fn run_env_with(extra: &[(&str, &str)]) -> Run {
    let logs = tempdir();
    let mut batch = Batch::new(
        &json!({"commands": [
            {"function": "execAsAgent", "nonce": 1, "command": "env"},
            {"function": "execPty", "nonce": 2, "command": "env | grep -c . ; env | grep marker ; echo PTY_DONE"},
        ]}),
        logs.path(),
    );
    for name in SCRUBBED.iter().filter(|n| **n != "INTENDANT_LOG_DIR") {
        batch = batch.env(name, leak_value(name));
    }
    batch = batch.env("MY_HARMLESS_FLAG", "visible-ok");
    for (k, v) in extra {
        batch = batch.env(k, v);
    }
    let run = batch.run();
    assert!(run.status.success(), "{}", run.stderr);
    run
}

fn assert_no_leak(output: &str, shell: &str) {
    assert!(
        !output.contains("marker"),
        "{shell} saw a scrubbed variable:\n{output}"
    );
    for name in SCRUBBED {
        let line = format!("\n{name}=");
        assert!(!format!("\n{output}").contains(&line), "{shell} saw {name}");
    }
}

#[test]
fn every_scrubbed_variable_is_absent_from_exec_and_pty_shells() {
    let run = run_env_with(&[]);
    let exec_out = run.value(0)["stdout"].as_str().unwrap().to_owned();
    assert!(!run.value(0)["stdout_truncated"].as_bool().unwrap());
    assert!(
        exec_out.contains("MY_HARMLESS_FLAG=visible-ok"),
        "{exec_out}"
    );
    assert!(exec_out.contains("PATH="), "{exec_out}");
    assert_no_leak(&exec_out, "execAsAgent");
    let pty_out = run.value(1)["output"].as_str().unwrap().to_owned();
    assert!(pty_out.contains("PTY_DONE"), "{pty_out}");
    assert_no_leak(&pty_out, "execPty");
}

#[test]
fn passthrough_cannot_admit_a_key_or_credential() {
    let all = SCRUBBED.join(",");
    let run = run_env_with(&[("INTENDANT_ENV_PASSTHROUGH", &all)]);
    assert_no_leak(run.value(0)["stdout"].as_str().unwrap(), "execAsAgent");
    assert_no_leak(run.value(1)["output"].as_str().unwrap(), "execPty");
}

#[test]
fn sandbox_paths_are_not_handed_to_commands() {
    let logs = tempdir();
    let run = Batch::new(
        &json!({"commands": [{"function": "execAsAgent", "nonce": 1, "command": "env"}]}),
        logs.path(),
    )
    .env("INTENDANT_SANDBOX_WRITE_PATHS", logs.path())
    .run();
    assert!(run.status.success(), "{}", run.stderr);
    let out = run.value(0)["stdout"].as_str().unwrap().to_owned();
    assert!(!out.contains("INTENDANT_"), "{out}");
}

//! `intendant agents list|validate` and `intendant delegate` through the built binary, with fake
//! CLIs (the `intendant-agents` fixtures) configured in the project's intendant.toml.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const KEY: &str = "sk-test-CLIKEYVALUE0123456789";
const MARKER: &str = "CLI-PROMPT-MARKER";

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    /// A project whose `[agent.<name>] path` points at a fake CLI playing `scenario`.
    fn new(agent: &str, executable: &str, scenario: Value) -> Project {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["home", "tmp", "bin"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let scenario_path = dir.path().join("scenario.json");
        std::fs::write(&scenario_path, scenario.to_string()).unwrap();
        let exe = intendant_testkit::clis::write_fake_launcher(
            &dir.path().join("bin"),
            executable,
            &intendant_testkit::fake_clis::fixtures().join("fake_cli.py"),
            &scenario_path,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("schema.json"),
            json!({"type": "object", "properties": {"answer": {"type": "integer"},
                   "reason": {"type": "string"}}, "required": ["answer", "reason"]})
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("intendant.toml"),
            format!("[agent.{agent}]\npath = \"{}\"\n", exe.display()),
        )
        .unwrap();
        Project { dir }
    }

    /// Makes the fake record what it observed (argv, environment) and returns where.
    fn record(&self) -> PathBuf {
        let record = self.dir.path().join("record.json");
        let scenario_path = self.dir.path().join("scenario.json");
        let mut sc: Value =
            serde_json::from_str(&std::fs::read_to_string(&scenario_path).unwrap()).unwrap();
        sc["record"] = json!(record.display().to_string());
        std::fs::write(&scenario_path, sc.to_string()).unwrap();
        record
    }

    /// Appends `lines` to the `[agent.<name>]` table of intendant.toml.
    fn configure(&self, lines: &str) {
        let path = self.dir.path().join("intendant.toml");
        let mut toml = std::fs::read_to_string(&path).unwrap();
        toml.push_str(lines);
        std::fs::write(&path, toml).unwrap();
    }

    /// `intendant ARGS` in the project with a scrubbed environment.
    fn base(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_intendant"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.dir.path().join("home"))
            .env("TMPDIR", self.dir.path().join("tmp"));
        cmd
    }

    /// `[agent.*] path` and friends are security-relevant: a human trusts the file first.
    fn trust(&self) {
        let trusted = self.base(&["trust"]).stdin(Stdio::null()).output().unwrap();
        assert!(trusted.status.success(), "{trusted:?}");
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
        self.trust();
        let mut cmd = self.base(args);
        cmd.envs(env.iter().copied());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// An `rmcp` client of `intendant mcp --no-daemon` serving this project (trusted first).
    async fn mcp(
        &self,
        env: &[(&str, &str)],
    ) -> rmcp::service::RunningService<rmcp::service::RoleClient, ()> {
        use rmcp::ServiceExt;
        self.trust();
        let mut cmd = self.base(&["mcp", "--no-daemon"]);
        cmd.envs(env.iter().copied());
        let child = rmcp::transport::TokioChildProcess::new(tokio::process::Command::from(cmd));
        ().serve(child.unwrap()).await.unwrap()
    }
}

fn codex_project(extra: Value) -> Project {
    let mut sc = json!({
        "version": "codex-cli 0.171.0",
        "transcript": intendant_testkit::fake_clis::fixtures().join("transcripts/codex_success.jsonl").display().to_string(),
        "result": "{\"answer\":42,\"reason\":\"six times seven\"}",
    });
    if let (Some(b), Value::Object(e)) = (sc.as_object_mut(), extra) {
        b.extend(e);
    }
    Project::new("codex", "codex", sc)
}

/// stdout is exactly one JSON document (one line).
fn one_json(out: &Output) -> Value {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "stdout: {text}");
    serde_json::from_str(&text).unwrap()
}

fn delegate_args() -> Vec<&'static str> {
    vec![
        "delegate",
        "--agent",
        "codex",
        "--model",
        "gpt-test",
        "--schema",
        "schema.json",
        "--timeout",
        "60",
    ]
}

#[test]
fn validate_json_is_one_object_without_secrets() {
    let p = codex_project(json!({}));
    let out = p.run(
        &["agents", "validate", "codex", "--json"],
        &[("OPENAI_API_KEY", KEY)],
        "",
    );
    assert!(out.status.success(), "{out:?}");
    let v = one_json(&out);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["agent"], "codex");
    assert_eq!(v["ready"], true);
    assert_eq!(v["auth_class"], "api_key");
    assert_eq!(v["version"], "0.171.0");
    assert!(v.get("error_code").is_none());
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));

    let out = p.run(&["agents", "validate", "codex", "--json"], &[], "");
    assert_eq!(out.status.code(), Some(1));
    let v = one_json(&out);
    assert_eq!(v["ready"], false);
    assert_eq!(v["error_code"], "runtime_not_authenticated");
}

#[test]
fn list_shows_all_three_as_a_table() {
    let p = codex_project(json!({}));
    let out = p.run(&["agents", "list"], &[("CODEX_API_KEY", KEY)], "");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("AGENT"), "{text}");
    for name in ["codex", "claude-code", "kimi"] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} in {text}"
        );
    }
    assert!(!text.contains(KEY));
    let out = p.run(&["agents", "list", "--json"], &[], "");
    let v = one_json(&out);
    assert_eq!(v.as_array().unwrap().len(), 3);
}

#[test]
fn delegate_prints_the_response_and_exits_zero() {
    let p = codex_project(json!({}));
    let prompt = format!("Compute 6*7 {MARKER}");
    let out = p.run(&delegate_args(), &[("CODEX_API_KEY", KEY)], &prompt);
    assert!(out.status.success(), "{out:?}");
    let v = one_json(&out);
    assert_eq!(
        v["value"],
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(v["requested_model"], "gpt-test");
    assert_eq!(v["billing_class"], "metered");
    assert_eq!(v["runtime"]["kind"], "codex-cli");
}

/// The `delegate` tool of `intendant mcp` runs the same contract: the schema-validated value as
/// structured content, and an answer failing the schema as its stable code, the prompt and the
/// key in neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_through_mcp_returns_the_validated_value_or_the_code() {
    use super::mcp::mcp_client::{call, failed, ok};
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"},
                        "reason": {"type": "string"}}, "required": ["answer", "reason"]});
    let args = json!({"agent": "codex", "prompt": format!("Compute 6*7 {MARKER}"),
                      "schema": schema, "model": "gpt-test", "timeout_s": 60,
                      "max_output_bytes": 1_000_000});
    let p = codex_project(json!({}));
    let record = p.record();
    let client = p.mcp(&[("CODEX_API_KEY", KEY)]).await;
    let v = ok(call(client.peer(), "delegate", args.clone()).await);
    assert_eq!(
        v["value"],
        json!({"answer": 42, "reason": "six times seven"})
    );
    assert_eq!(v["requested_model"], "gpt-test");
    assert_eq!(v["runtime"]["kind"], "codex-cli");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert!(rec["stdin"].as_str().unwrap().contains(MARKER), "{rec}");
    assert_eq!(
        serde_json::from_str::<Value>(rec["schema"].as_str().unwrap()).unwrap(),
        schema
    );

    let p =
        codex_project(json!({"result": format!("{{\"answer\":\"{MARKER}\",\"reason\":\"x\"}}")}));
    let client = p.mcp(&[("CODEX_API_KEY", KEY)]).await;
    let result = call(client.peer(), "delegate", args).await;
    let text = serde_json::to_string(&result).unwrap();
    assert!(!text.contains(MARKER) && !text.contains(KEY), "{text}");
    let (code, message) = failed(result);
    assert_eq!(code, "runtime_schema_invalid", "{message}");
}

#[test]
fn delegate_errors_are_sanitized_objects_with_nonzero_exit() {
    let p =
        codex_project(json!({"result": format!("{{\"answer\":\"{MARKER}\",\"reason\":\"x\"}}")}));
    let out = p.run(&delegate_args(), &[("CODEX_API_KEY", KEY)], MARKER);
    assert_eq!(out.status.code(), Some(1));
    let v = one_json(&out);
    assert_eq!(v["code"], "runtime_schema_invalid");
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "details", "message", "recovery_command"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(MARKER) && !text.contains(KEY), "{text}");

    let mut args = delegate_args();
    args.extend(["--max-input-bytes", "4"]);
    let out = p.run(&args, &[("CODEX_API_KEY", KEY)], "far too long a prompt");
    assert_eq!(one_json(&out)["code"], "runtime_input_too_large");

    let out = p.run(
        &[
            "delegate",
            "--agent",
            "kimi",
            "--model",
            "k2",
            "--schema",
            "schema.json",
        ],
        &[],
        "x",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(one_json(&out)["code"], "runtime_unsupported_capability");

    let out = p.run(
        &["delegate", "--agent", "codex", "--schema", "schema.json"],
        &[("CODEX_API_KEY", KEY)],
        "x",
    );
    assert_eq!(one_json(&out)["code"], "runtime_model_required");
}

#[test]
fn allowed_auth_in_intendant_toml_narrows() {
    let p = codex_project(json!({}));
    p.configure("allowed_auth = [\"chatgpt\"]\n");
    let out = p.run(
        &["agents", "validate", "codex", "--json"],
        &[("CODEX_API_KEY", KEY)],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let v = one_json(&out);
    assert_eq!(v["authenticated"], false);
    assert_eq!(v["error_code"], "runtime_permission_denied");
    let out = p.run(&delegate_args(), &[("CODEX_API_KEY", KEY)], "x");
    assert_eq!(one_json(&out)["code"], "runtime_permission_denied");
}

#[test]
fn endpoint_flags_reach_the_cli_only_when_given() {
    let p = codex_project(json!({}));
    let record = p.record();
    let env = [
        ("CODEX_API_KEY", KEY),
        ("LOCAL_KEY", "local-key-value"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let out = p.run(&delegate_args(), &env, "x");
    assert!(out.status.success(), "{out:?}");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert!(rec["env_values"].get("OPENAI_BASE_URL").is_none());
    assert!(!rec["argv"].to_string().contains("model_provider"));

    let mut args = delegate_args();
    let provider = "model_providers.local={name=\"L\",base_url=\"http://127.0.0.1:9/v1\",\
                    env_key=\"LOCAL_KEY\"}";
    args.extend([
        "--agent-config",
        "model_provider=\"local\"",
        "--agent-config",
        provider,
        "--agent-env",
        "OPENAI_BASE_URL",
    ]);
    let out = p.run(&args, &env, "x");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(one_json(&out)["auth_class"], "api_key");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let values = &rec["env_values"];
    assert_eq!(values["OPENAI_BASE_URL"], "http://127.0.0.1:9/v1");
    assert_eq!(values["LOCAL_KEY"], "local-key-value");
    assert!(
        values.get("CODEX_API_KEY").is_none(),
        "the custom provider's key only"
    );
    assert!(rec["argv"].to_string().contains("model_providers.local"));
}

#[test]
fn unknown_agent_is_a_usage_error() {
    let p = codex_project(json!({}));
    let out = p.run(&["agents", "validate", "gemini-cli"], &[], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("codex"));
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: i64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !matches!(
        stat.rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next()),
        Some("Z") | None
    )
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{what} never happened");
}

/// A trusted project whose fake codex hangs and starts a grandchild, and `intendant delegate`
/// running on it (stdout and stderr piped) once the fake has started; with the fake's record
/// of itself (`pid`, `grandchild_pid`).
fn hanging_delegation() -> (Project, std::process::Child, Value) {
    let p = codex_project(json!({"transcript": null, "hang": true, "grandchild": true}));
    let record = p.record();
    p.trust();
    let mut child = p
        .base(&delegate_args())
        .env("CODEX_API_KEY", KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hang please")
        .unwrap();
    wait_until("the fake CLI starting", || record.exists());
    let rec = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    (p, child, rec)
}

/// Waits for the fake CLI of `rec` and its grandchild to be gone.
fn wait_for_the_cli_gone(rec: &Value) {
    for key in ["pid", "grandchild_pid"] {
        let pid = rec[key].as_i64().unwrap();
        wait_until("the CLI and its child ending", || !alive(pid));
    }
}

#[test]
fn ctrl_c_stops_the_cli_group_and_reports_cancelled() {
    let (p, child, rec) = hanging_delegation();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(one_json(&out)["code"], "runtime_cancelled");
    wait_for_the_cli_gone(&rec);
    let tmp_entries = std::fs::read_dir(p.dir.path().join("tmp")).unwrap().count();
    assert_eq!(tmp_entries, 0, "the temporary workspace is removed");
}

/// `kill -9` of the delegating process ends the delegated CLI and what it started: the CLI runs
/// below `intendant-runtime --guard` (before, it ran on with no deadline enforced, as long as it
/// liked).
#[test]
fn kill_9_of_the_delegating_process_ends_the_cli_and_its_children() {
    let (_p, mut child, rec) = hanging_delegation();
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for_the_cli_gone(&rec);
}

#[test]
fn a_typo_in_an_agent_table_is_refused_naming_the_key() {
    let project = codex_project(json!({}));
    project.configure("modle = \"gpt-test\"\n");
    let out = project.run(&["agents", "validate", "codex", "--json"], &[], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("intendant.toml") && stderr.contains("[agent.codex]"),
        "{stderr}"
    );
    assert!(stderr.contains("modle"), "{stderr}");
}

#[test]
fn an_untrusted_agent_path_is_refused_before_anything_runs() {
    let p = codex_project(json!({}));
    let record = p.record();
    let out = p
        .base(&["agents", "validate", "codex"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[agent.codex] path") && err.contains("intendant trust"),
        "{err}"
    );
    assert!(!record.exists(), "the planted executable ran");
}

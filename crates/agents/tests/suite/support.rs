//! Fake CLI executables: a wrapper script per test that runs `fixtures/fake_cli.py` with a
//! scenario, and helpers to build the caller environment and read what the fake observed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use intendant_agents::config::AgentConfig;
use intendant_agents::{CliError, CliResponse, DelegationRequest, ErrorCode, HostEnv, delegate};
use serde_json::{Value, json};
use tempfile::TempDir;

/// A marker planted in prompts; it must never appear in argv, errors or readiness output.
pub const PROMPT_MARKER: &str = "SECRET-PROMPT-MARKER";
/// A key value planted in the environment; it must never appear in output.
pub const KEY_VALUE: &str = "sk-test-PLANTEDKEYVALUE0123456789";

pub fn fixtures() -> PathBuf {
    intendant_testkit::fake_clis::fixtures()
}

pub fn transcript(name: &str) -> String {
    fixtures()
        .join("transcripts")
        .join(name)
        .display()
        .to_string()
}

pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "answer": {"type": "integer"},
            "reason": {"type": "string"}
        },
        "required": ["answer", "reason"],
        "additionalProperties": false
    })
}

/// One fake CLI in its own temporary directory.
pub struct FakeCli {
    pub dir: TempDir,
    pub exe: PathBuf,
    pub record_path: PathBuf,
}

impl FakeCli {
    /// `executable` is the file name (`codex`, `claude`, `kimi`); `scenario` is merged with a
    /// record path.
    pub fn new(executable: &str, mut scenario: Value) -> FakeCli {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for sub in ["home", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let record_path = dir.path().join("record.json");
        let scenario_path = dir.path().join("scenario.json");
        scenario["record"] = json!(record_path.display().to_string());
        std::fs::write(&scenario_path, scenario.to_string()).unwrap();
        let exe = intendant_testkit::clis::write_fake_launcher(
            &bin,
            executable,
            &fixtures().join("fake_cli.py"),
            &scenario_path,
        )
        .unwrap();
        FakeCli {
            dir,
            exe,
            record_path,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// `[agent.x] path = <fake>`.
    pub fn config(&self) -> AgentConfig {
        AgentConfig {
            path: Some(self.exe.clone()),
            ..AgentConfig::default()
        }
    }

    /// A caller environment: system PATH, private HOME and TMPDIR, plus `extra`.
    pub fn host(&self, extra: &[(&str, &str)]) -> HostEnv {
        let mut env = HostEnv::from_pairs([
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", self.home().to_str().unwrap()),
            ("TMPDIR", self.tmp().to_str().unwrap()),
            ("LANG", "C.UTF-8"),
            ("AWS_SECRET_ACCESS_KEY", "aws-should-never-pass"),
        ]);
        for (k, v) in extra {
            env = env.with(k, v);
        }
        env
    }

    /// What the fake observed on its last delegation run.
    pub fn record(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(&self.record_path).unwrap()).unwrap()
    }

    pub fn has_record(&self) -> bool {
        self.record_path.exists()
    }

    /// Writes a saved Claude subscription login under HOME.
    pub fn write_claude_login(&self) {
        let dir = self.home().join(".claude");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(".credentials.json"),
            json!({"claudeAiOauth": {"accessToken": KEY_VALUE, "refreshToken": KEY_VALUE,
                   "subscriptionType": "max"}})
            .to_string(),
        )
        .unwrap();
    }

    /// Writes a saved ChatGPT login under `$HOME/.codex`.
    pub fn write_codex_chatgpt_login(&self) {
        let dir = self.home().join(".codex");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("auth.json"),
            json!({"auth_mode": "chatgpt", "OPENAI_API_KEY": null,
                   "tokens": {"id_token": KEY_VALUE, "access_token": KEY_VALUE,
                              "account_id": "acct-should-not-leak"}})
            .to_string(),
        )
        .unwrap();
    }
}

/// A request with small limits for tests.
pub fn request(agent: &str, model: &str) -> DelegationRequest {
    let mut req = DelegationRequest::new(
        agent,
        format!("Compute 6*7. {PROMPT_MARKER}"),
        answer_schema(),
    );
    req.model = Some(model.to_owned());
    req.timeout = Duration::from_secs(30);
    req.grace = Duration::from_millis(500);
    req
}

/// Whether a process exists (signal 0).
pub fn alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // A zombie still answers kill(0); treat "zombie" as dead by reading its state.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    match stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next())
    {
        Some("Z") | None => false,
        Some(_) => true,
    }
}

/// Asserts that `pid` is gone, allowing the kernel a bounded moment to deliver a sent KILL.
pub async fn assert_dies(pid: i64) {
    for _ in 0..250 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("process {pid} outlived the request");
}

/// A recorded JSON array of strings (argv, environment names).
pub fn strings(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// The fake's temporary workspace (the parent of the working directory it recorded).
pub fn workspace_of(rec: &Value) -> PathBuf {
    Path::new(rec["cwd"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_owned()
}

/// The fake CLI, the helper it started and the temporary workspace are all gone.
pub async fn assert_request_left_nothing(fake: &FakeCli) {
    let rec = fake.record();
    assert_dies(rec["pid"].as_i64().unwrap()).await;
    assert_dies(rec["grandchild_pid"].as_i64().unwrap()).await;
    assert!(
        !workspace_of(&rec).exists(),
        "the temporary workspace is removed"
    );
}

/// Waits (bounded) until `path` exists.
pub async fn wait_for(path: &Path) {
    for _ in 0..500 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never appeared", path.display());
}

// Delegation helpers shared by the delegation test files.

pub const CODEX_VERSION: &str = "codex-cli 0.171.0";
pub const CLAUDE_VERSION: &str = "2.1.332 (Claude Code)";

pub fn codex(extra: Value) -> FakeCli {
    let mut sc = json!({
        "version": CODEX_VERSION,
        "transcript": transcript("codex_success.jsonl"),
        "result": "{\"answer\":42,\"reason\":\"six times seven\"}",
    });
    merge(&mut sc, extra);
    FakeCli::new("codex", sc)
}

pub fn claude(extra: Value) -> FakeCli {
    let mut sc = json!({
        "version": CLAUDE_VERSION,
        "transcript": transcript("claude_success.jsonl"),
    });
    merge(&mut sc, extra);
    FakeCli::new("claude", sc)
}

pub fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
}

pub async fn run(
    req: &DelegationRequest,
    config: &AgentConfig,
    host: &HostEnv,
) -> Result<CliResponse, CliError> {
    delegate(req, config, host, std::future::pending()).await
}

/// Runs a codex delegation with an API key in the environment.
pub async fn codex_run(fake: &FakeCli, req: &DelegationRequest) -> Result<CliResponse, CliError> {
    run(
        req,
        &fake.config(),
        &fake.host(&[("CODEX_API_KEY", KEY_VALUE)]),
    )
    .await
}

/// Runs a claude delegation with a saved subscription login.
pub async fn claude_run(fake: &FakeCli, req: &DelegationRequest) -> Result<CliResponse, CliError> {
    fake.write_claude_login();
    run(req, &fake.config(), &fake.host(&[])).await
}

/// The error never carries the prompt, the key, or other environment values.
pub fn assert_sanitized(e: &CliError) {
    let text = serde_json::to_string(&e.to_json()).unwrap();
    for secret in [
        PROMPT_MARKER,
        KEY_VALUE,
        "aws-should-never-pass",
        "SECRET-BODY-MARKER",
        "LEAKEDKEY",
    ] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}

pub fn expect_code(r: Result<CliResponse, CliError>, code: ErrorCode) -> CliError {
    let e = r.expect_err("expected an error");
    assert_eq!(e.code, code, "{e:?}");
    assert_sanitized(&e);
    e
}

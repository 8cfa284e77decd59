//! Readiness (`intendant agents validate NAME --json`): one schema-version-1 object per CLI.
//!
//! The object carries classifications and paths only; it is built from the same checks
//! delegation runs, so "ready" means a delegation would get past them.

use crate::config::AgentConfig;
use serde::{Deserialize, Serialize};

use crate::auth::AuthClass;
use crate::discover;
use crate::env::HostEnv;
use crate::error::{CliError, ErrorCode};
use crate::profile::AgentProfile;

/// The readiness schema version.
pub const SCHEMA_VERSION: u32 = 1;

/// The only model policy: every delegation names its model.
pub const MODEL_POLICY: &str = "explicit_required";

/// The readiness object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Readiness {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The profile name (`codex`).
    pub agent: String,
    /// The runtime kind (`codex-cli`).
    pub runtime: String,
    /// Installed, supported and authenticated.
    pub ready: bool,
    /// The executable was found.
    pub installed: bool,
    /// A usable (and allowed) login or key was found.
    pub authenticated: bool,
    /// The version is inside the supported range.
    pub supported: bool,
    /// The executable's path.
    pub executable: Option<String>,
    /// The version read from the executable.
    pub version: Option<String>,
    /// The auth class the CLI would use.
    pub auth_class: Option<AuthClass>,
    /// `[agent.<name>] model`, if configured.
    pub configured_model: Option<String>,
    /// Always [`MODEL_POLICY`].
    pub model_policy: String,
    /// Why it is not ready (`null` when ready).
    pub reason: Option<String>,
    /// What to run to fix it (`null` when ready).
    pub recovery_command: Option<String>,
    /// The stable code of the first failed check; absent when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
}

/// Checks one CLI. `extra_overrides` are `--agent-config` values on top of the config's.
pub async fn check(
    profile: &AgentProfile,
    config: &AgentConfig,
    host: &HostEnv,
    extra_overrides: &[String],
) -> Readiness {
    let mut r = Readiness {
        schema_version: SCHEMA_VERSION,
        agent: profile.name.to_owned(),
        runtime: profile.runtime.to_owned(),
        ready: false,
        installed: false,
        authenticated: false,
        supported: false,
        executable: None,
        version: None,
        auth_class: None,
        configured_model: config.model.clone(),
        model_policy: MODEL_POLICY.to_owned(),
        reason: None,
        recovery_command: None,
        error_code: None,
    };
    let mut first_error: Option<CliError> = None;
    let mut note = |e: CliError| {
        if first_error.is_none() {
            first_error = Some(e);
        }
    };
    match discover::find_executable(profile, config.path.as_deref(), host) {
        Ok(exe) => {
            r.installed = true;
            r.executable = Some(exe.display().to_string());
            match discover::probe_version(profile, &exe, host).await {
                Ok(v) => {
                    r.supported = true;
                    r.version = Some(v.to_string());
                }
                Err(e) => {
                    r.version = e
                        .details
                        .get("version")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned);
                    note(e);
                }
            }
        }
        Err(e) => note(e),
    }
    let mut overrides = config.config.clone();
    overrides.extend_from_slice(extra_overrides);
    if let Err(e) = crate::delegate::check_overrides(profile, &overrides) {
        note(e);
    }
    match discover::choose_auth(profile, host, &overrides, &config.allowed_auth) {
        Ok(c) => {
            r.authenticated = true;
            r.auth_class = Some(c.class);
        }
        Err(e) => note(e),
    }
    match first_error {
        None => r.ready = true,
        Some(e) => {
            r.reason = Some(e.message);
            r.recovery_command = e.recovery_command;
            r.error_code = Some(e.code);
        }
    }
    r
}

/// The short human table printed without `--json`.
pub fn render_table(items: &[Readiness]) -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let dash = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".to_owned());
    let mut rows = vec![[
        "AGENT".to_owned(),
        "READY".to_owned(),
        "INSTALLED".to_owned(),
        "VERSION".to_owned(),
        "SUPPORTED".to_owned(),
        "AUTH".to_owned(),
        "MODEL".to_owned(),
        "EXECUTABLE".to_owned(),
    ]];
    for r in items {
        rows.push([
            r.agent.clone(),
            yes_no(r.ready).to_owned(),
            yes_no(r.installed).to_owned(),
            dash(&r.version),
            yes_no(r.supported).to_owned(),
            r.auth_class
                .map_or_else(|| "none".to_owned(), |c| c.as_str().to_owned()),
            dash(&r.configured_model),
            dash(&r.executable),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|i| rows.iter().map(|row| row[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for r in items {
        if let Some(reason) = &r.reason {
            out.push_str(&format!("{}: {}", r.agent, reason));
            if let Some(code) = r.error_code {
                out.push_str(&format!(" [{code}]"));
            }
            if let Some(cmd) = &r.recovery_command {
                out.push_str(&format!(" (try: {cmd})"));
            }
            out.push('\n');
        }
    }
    out
}

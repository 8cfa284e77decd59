//! `kimi` (`@moonshot-ai/kimi-code`): readiness only. Its prompt mode (`-p` with
//! `--output-format stream-json`) and its ACP server carry no output schema, so a schema-checked
//! answer cannot be had from it and delegation answers `runtime_unsupported_capability`.
//!
//! Kimi runs on Node >= 22.19 (`#!/usr/bin/env node`): the `node` found first on the child's PATH
//! must be new enough, or the version probe fails and readiness says so.

use std::path::Path;

use crate::auth::{AuthCandidate, AuthClass, AuthProbe, read_login_file};
use crate::env::ChildEnvPolicy;
use crate::profile::{
    AgentProfile, Delegation, EffortSpelling, FlagSpellings, OverloadSign, ProviderCondition,
    Version, VersionRange,
};

/// The kimi profile.
pub const PROFILE: AgentProfile = AgentProfile {
    name: "kimi",
    runtime: "kimi-code-cli",
    package: "@moonshot-ai/kimi-code",
    executable: "kimi",
    versions: VersionRange {
        min: Version::new(2, 0, 0),
        below: Version::new(3, 0, 0),
    },
    runs_on: "Node.js >= 22.19 first on PATH",
    version_args: &["--version"],
    parse_version: Version::find_in,
    flags: FlagSpellings {
        model: "--model",
        effort: EffortSpelling::Unsupported,
        // Plan mode is kimi's only mode that neither asks nor acts; no sandbox flag exists.
        permission: &["--plan"],
        sandbox: &[],
        json_schema: None,
        config_override: None,
        config_override_keys: &[],
    },
    env: ChildEnvPolicy {
        keep: &["KIMI_CODE_HOME"],
        fixed: &[
            ("NO_COLOR", "1"),
            ("KIMI_CODE_NO_AUTO_UPDATE", "1"),
            ("KIMI_DISABLE_TELEMETRY", "1"),
        ],
    },
    detect_auth,
    overload_signs: &[
        OverloadSign {
            needle: "rate limit",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "quota",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "429",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "overloaded",
            condition: ProviderCondition::Overloaded,
        },
        OverloadSign {
            needle: "401",
            condition: ProviderCondition::AuthRejected,
        },
    ],
    delegation: Delegation::Unsupported {
        reason: "kimi's prompt mode and ACP carry no output schema, so its answer cannot be \
                 schema-checked; use codex or claude-code",
    },
    install_command: "npm install -g @moonshot-ai/kimi-code",
    login_command: "kimi login",
};

/// Preference: the saved Kimi login, then a key in the environment, then a key in config.toml.
fn detect_auth(probe: &AuthProbe<'_>) -> Vec<AuthCandidate> {
    let mut out = Vec::new();
    let home = probe.env.dir_or_home("KIMI_CODE_HOME", ".kimi-code");
    if home.as_deref().is_some_and(has_saved_login) {
        out.push(AuthCandidate::login(AuthClass::KimiLogin));
    }
    if probe.has_env("KIMI_MODEL_NAME") && probe.has_env("KIMI_MODEL_API_KEY") {
        out.push(AuthCandidate {
            class: AuthClass::ApiKey,
            admit_env: vec!["KIMI_MODEL_API_KEY".into(), "KIMI_MODEL_NAME".into()],
        });
    }
    if let Some(home) = home {
        out.extend(config_candidates(probe, &home.join("config.toml")));
    }
    out
}

/// OAuth tokens are stored as `credentials/<name>.json`.
fn has_saved_login(home: &Path) -> bool {
    std::fs::read_dir(home.join("credentials")).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "json"))
    })
}

/// Providers in config.toml with a stored key, or a key variable that is set.
fn config_candidates(probe: &AuthProbe<'_>, path: &Path) -> Vec<AuthCandidate> {
    let Some(text) = read_login_file(path) else {
        return Vec::new();
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return Vec::new();
    };
    let Some(providers) = table.get("providers").and_then(toml::Value::as_table) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for provider in providers.values().filter_map(toml::Value::as_table) {
        let field = |names: [&str; 2]| names.iter().find_map(|n| provider.get(*n));
        if field(["oauth", "oauth"]).is_some() {
            out.push(AuthCandidate::login(AuthClass::KimiLogin));
        } else if field(["api_key", "apiKey"])
            .and_then(toml::Value::as_str)
            .is_some_and(|k| !k.is_empty())
        {
            out.push(AuthCandidate::login(AuthClass::ApiKey));
        } else if let Some(var) = field(["api_key_env", "apiKeyEnv"]).and_then(toml::Value::as_str)
            && probe.has_env(var)
        {
            out.push(AuthCandidate::env(AuthClass::ApiKey, var));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::HostEnv;

    #[test]
    fn env_model_key_is_api_key_and_login_dir_is_subscription() {
        let home = tempfile::tempdir().unwrap();
        let env = HostEnv::from_pairs([
            ("KIMI_CODE_HOME", home.path().to_str().unwrap()),
            ("KIMI_MODEL_NAME", "k2"),
            ("KIMI_MODEL_API_KEY", "secret"),
        ]);
        let probe = AuthProbe {
            env: &env,
            config_overrides: &[],
        };
        let classes: Vec<AuthClass> = detect_auth(&probe).iter().map(|c| c.class).collect();
        assert_eq!(classes, [AuthClass::ApiKey]);
        std::fs::create_dir(home.path().join("credentials")).unwrap();
        std::fs::write(home.path().join("credentials/kimi-code.json"), "{}").unwrap();
        let classes: Vec<AuthClass> = detect_auth(&probe).iter().map(|c| c.class).collect();
        assert_eq!(classes, [AuthClass::KimiLogin, AuthClass::ApiKey]);
    }
}

//! `codex` (`@openai/codex`): non-interactive `codex exec --json`, JSONL thread events, the answer
//! schema in `--output-schema FILE` and the final message in `--output-last-message FILE`.
//!
//! Success (`docs/agents.md`): exit 0, a `turn.completed` event, no `turn.failed` / `error`
//! event, and a final message that is one JSON document. One exception, seen in codex 0.171: an
//! `error` event saying `Reconnecting... N/M` is codex retrying a broken stream itself; it counts
//! as an attempt. Codex's JSONL does not name the model it used, so the effective model is the
//! one pinned by `-m` with user config ignored.

use std::ffi::OsString;

use serde_json::Value;

use crate::auth::{AuthCandidate, AuthClass, AuthProbe, read_login_json};
use crate::env::ChildEnvPolicy;
use crate::error::{CliError, ErrorCode};
use crate::jsonl;
use crate::profile::{
    AgentProfile, Delegation, EffortSpelling, FlagSpellings, Invocation, OverloadSign,
    ProviderCondition, TokenUsage, Transcript, TurnOutcome, Version, VersionRange,
};

/// Providers built into codex; selecting one of these is not a custom endpoint.
const BUILT_IN_PROVIDERS: &[&str] = &["openai", "oss", "ollama", "lmstudio"];

/// How codex words a transparent retry of a broken stream ("Reconnecting... 1/5 (...)").
const RECONNECT_PREFIX: &str = "Reconnecting... ";

/// Feature gates switched off for delegation (a delegated turn gets no tools of its own).
const DISABLED_FEATURES: &[&str] = &[
    "apps",
    "browser_use",
    "computer_use",
    "goals",
    "hooks",
    "in_app_browser",
    "multi_agent",
    "plugins",
    "shell_tool",
    "unified_exec",
];

/// What `-c` overrides may set: a custom provider (`model_provider`, `model_providers.<id>` with
/// `base_url`, `env_key`, `wire_api`, retry limits), telemetry, and output tuning. The model,
/// approval, sandbox, features, tools, MCP servers and shell environment stay as argv pins them.
const OVERRIDE_KEYS: &[&str] = &[
    "model_provider",
    "model_providers",
    "analytics",
    "otel",
    "model_reasoning_effort",
    "model_reasoning_summary",
    "model_verbosity",
    "model_context_window",
    "model_max_output_tokens",
    "model_supports_reasoning_summaries",
];

/// The codex profile.
pub const PROFILE: AgentProfile = AgentProfile {
    name: "codex",
    runtime: "codex-cli",
    package: "@openai/codex",
    executable: "codex",
    versions: VersionRange {
        min: Version::new(0, 160, 0),
        below: Version::new(1, 0, 0),
    },
    runs_on: "Node.js >= 16 on PATH (the launcher runs a bundled native binary)",
    version_args: &["--version"],
    parse_version: Version::find_in,
    flags: FlagSpellings {
        model: "--model",
        effort: EffortSpelling::ConfigKey("model_reasoning_effort"),
        permission: &["-c", "approval_policy=\"never\""],
        sandbox: &["--sandbox", "read-only"],
        json_schema: Some("--output-schema"),
        config_override: Some("-c"),
        config_override_keys: OVERRIDE_KEYS,
    },
    env: ChildEnvPolicy {
        keep: &["CODEX_HOME"],
        fixed: &[("NO_COLOR", "1"), ("RUST_LOG", "error")],
    },
    detect_auth,
    overload_signs: &[
        OverloadSign {
            needle: "usage limit",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "rate limit",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "429",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "too many requests",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "overloaded",
            condition: ProviderCondition::Overloaded,
        },
        OverloadSign {
            needle: "503",
            condition: ProviderCondition::Overloaded,
        },
        OverloadSign {
            needle: "401",
            condition: ProviderCondition::AuthRejected,
        },
        OverloadSign {
            needle: "unauthorized",
            condition: ProviderCondition::AuthRejected,
        },
    ],
    delegation: Delegation::Supported {
        protocol: "exec-jsonl",
        build_argv,
        interpret,
    },
    install_command: "npm install -g @openai/codex",
    login_command: "codex login",
};

/// Config overrides parsed into one TOML table (`a.b=v` becomes `{a = {b = v}}`).
fn overrides_table(overrides: &[String]) -> toml::Table {
    let mut root = toml::Table::new();
    for entry in overrides {
        let Some((key, raw)) = entry.split_once('=') else {
            continue;
        };
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_owned()));
        let parts: Vec<&str> = key.trim().split('.').map(str::trim).collect();
        insert_dotted(&mut root, &parts, value);
    }
    root
}

fn insert_dotted(table: &mut toml::Table, parts: &[&str], value: toml::Value) {
    match parts {
        [] => {}
        [last] => {
            table.insert((*last).to_owned(), value);
        }
        [first, rest @ ..] => {
            let entry = table
                .entry((*first).to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(inner) = entry {
                insert_dotted(inner, rest, value);
            }
        }
    }
}

/// The custom provider selected by overrides, as `(name, env_key)`.
fn custom_provider(overrides: &[String]) -> Option<(String, Option<String>)> {
    let table = overrides_table(overrides);
    let name = table.get("model_provider")?.as_str()?.to_owned();
    if BUILT_IN_PROVIDERS.contains(&name.as_str()) {
        return None;
    }
    let env_key = table
        .get("model_providers")
        .and_then(|p| p.get(&name))
        .and_then(|p| p.get("env_key"))
        .and_then(toml::Value::as_str)
        .map(str::to_owned);
    Some((name, env_key))
}

/// Preference: a custom endpoint decides alone; else the saved ChatGPT login, then API keys.
fn detect_auth(probe: &AuthProbe<'_>) -> Vec<AuthCandidate> {
    if let Some((_, env_key)) = custom_provider(probe.config_overrides) {
        return match env_key {
            Some(key) if probe.has_env(&key) => vec![AuthCandidate::env(AuthClass::ApiKey, &key)],
            Some(_) => Vec::new(),
            None => vec![AuthCandidate::login(AuthClass::CustomEndpoint)],
        };
    }
    let mut out = Vec::new();
    let stored = probe
        .env
        .dir_or_home("CODEX_HOME", ".codex")
        .and_then(|home| read_login_json(&home.join("auth.json")));
    let stored_mode = stored.as_ref().map(|auth| {
        let mode = auth.get("auth_mode").and_then(Value::as_str).unwrap_or("");
        let has_tokens = auth.get("tokens").is_some_and(Value::is_object);
        let has_key = auth
            .get("OPENAI_API_KEY")
            .and_then(Value::as_str)
            .is_some_and(|k| !k.is_empty());
        (mode.to_ascii_lowercase(), has_tokens, has_key)
    });
    if let Some((mode, has_tokens, _)) = &stored_mode
        && (mode.starts_with("chatgpt") || (mode.is_empty() && *has_tokens))
    {
        out.push(AuthCandidate::login(AuthClass::Chatgpt));
    }
    for key in ["CODEX_API_KEY", "OPENAI_API_KEY"] {
        if probe.has_env(key) {
            out.push(AuthCandidate::env(AuthClass::ApiKey, key));
        }
    }
    if let Some((mode, _, true)) = &stored_mode
        && (mode == "apikey" || mode == "api_key" || mode.is_empty())
    {
        out.push(AuthCandidate::login(AuthClass::ApiKey));
    }
    out
}

fn build_argv(inv: &Invocation) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "exec",
        "--json",
        "--ephemeral",
        "--ignore-user-config",
        "--ignore-rules",
        "--strict-config",
        "--skip-git-repo-check",
        "--color",
        "never",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.extend(PROFILE.flags.sandbox.iter().map(OsString::from));
    args.extend(PROFILE.flags.permission.iter().map(OsString::from));
    args.extend(
        PROFILE
            .flags
            .model_and_effort(&inv.model, inv.effort.as_deref()),
    );
    for feature in DISABLED_FEATURES {
        args.push("--disable".into());
        args.push((*feature).into());
    }
    for fixed in [
        "web_search=\"disabled\"",
        "shell_environment_policy.inherit=\"none\"",
    ] {
        args.push("-c".into());
        args.push(fixed.into());
    }
    for entry in &inv.config_overrides {
        args.push("-c".into());
        args.push(entry.clone().into());
    }
    args.push("--cd".into());
    args.push(inv.workdir.clone().into());
    args.push("--output-schema".into());
    args.push(inv.schema_file.clone().into());
    args.push("--output-last-message".into());
    args.push(inv.result_file.clone().into());
    // "-" makes codex read the prompt from stdin; the prompt is never in argv.
    args.push("-".into());
    args
}

fn interpret(t: &Transcript, signs: &[OverloadSign]) -> Result<TurnOutcome, CliError> {
    let lines = jsonl::parse_lines(&t.stdout);
    let events = match lines {
        Ok(events) => events,
        Err(e) if t.exit_code != Some(0) => {
            return Err(jsonl::nonzero_exit(t, signs).with_detail("protocol", e.message));
        }
        Err(e) => return Err(e),
    };
    let mut seen = Vec::new();
    let mut completed: Option<&Value> = None;
    let mut failure_texts: Vec<&str> = Vec::new();
    let mut failed = false;
    let mut last_message: Option<&str> = None;
    let mut reconnects: u32 = 0;
    for event in &events {
        let kind = jsonl::event_type(event);
        jsonl::note_event(&mut seen, kind);
        match kind {
            "turn.completed" => completed = Some(event),
            "turn.failed" => {
                failed = true;
                if let Some(m) = event.pointer("/error/message").and_then(Value::as_str) {
                    failure_texts.push(m);
                }
            }
            "error" => {
                let message = event.get("message").and_then(Value::as_str).unwrap_or("");
                // Codex reports its own transparent stream retries as `error` events; only a
                // later turn.failed or a missing turn.completed makes the request fail.
                if message.starts_with(RECONNECT_PREFIX) {
                    reconnects = reconnects.saturating_add(1);
                } else {
                    failed = true;
                    failure_texts.push(message);
                }
            }
            "item.completed"
                if event.pointer("/item/type").and_then(Value::as_str) == Some("agent_message") =>
            {
                last_message = event.pointer("/item/text").and_then(Value::as_str);
            }
            _ => {}
        }
    }
    if failed {
        let stderr = String::from_utf8_lossy(&t.stderr_head);
        failure_texts.push(&stderr);
        let err = CliError::new(
            ErrorCode::CliTurnFailed,
            "codex reported that the turn failed",
        )
        .with_detail("events", seen.join(","));
        return Err(jsonl::with_condition(
            err,
            jsonl::classify(signs, &failure_texts),
        ));
    }
    if t.exit_code != Some(0) {
        return Err(jsonl::nonzero_exit(t, signs));
    }
    let Some(completed) = completed else {
        return Err(CliError::new(
            ErrorCode::CliMissingTerminalState,
            "codex exited without a turn.completed event",
        )
        .with_detail("events", seen.join(",")));
    };
    let from_file = t
        .result_file
        .as_deref()
        .map(String::from_utf8_lossy)
        .filter(|s| !s.trim().is_empty());
    let document = match (&from_file, last_message) {
        (Some(text), _) => text.as_ref(),
        (None, Some(text)) => text,
        (None, None) => "",
    };
    let value = jsonl::parse_final_document(document)?;
    let usage = completed.get("usage").cloned().unwrap_or(Value::Null);
    Ok(TurnOutcome {
        value,
        events: seen,
        effective_model: None,
        usage: TokenUsage {
            input_tokens: jsonl::u64_field(&usage, "input_tokens"),
            cached_input_tokens: jsonl::u64_field(&usage, "cached_input_tokens"),
            output_tokens: jsonl::u64_field(&usage, "output_tokens"),
        },
        reported_cost_usd: None,
        attempts: reconnects.saturating_add(1),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::env::HostEnv;

    fn transcript(stdout: &str, code: i32, result: Option<&str>) -> Transcript {
        Transcript {
            exit_code: Some(code),
            stdout: stdout.as_bytes().to_vec(),
            stderr_head: Vec::new(),
            result_file: result.map(|r| r.as_bytes().to_vec()),
        }
    }

    #[test]
    fn argv_never_contains_the_prompt_and_reads_stdin() {
        let inv = Invocation {
            model: "gpt-test".into(),
            effort: Some("high".into()),
            schema_json: "{}".into(),
            schema_file: PathBuf::from("/w/schema.json"),
            result_file: PathBuf::from("/w/result.json"),
            workdir: PathBuf::from("/w/cwd"),
            config_overrides: vec!["model_provider=\"fake\"".into()],
        };
        let argv: Vec<String> = build_argv(&inv)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(argv.first().map(String::as_str), Some("exec"));
        assert_eq!(argv.last().map(String::as_str), Some("-"));
        for needle in [
            "--json",
            "--ephemeral",
            "--ignore-user-config",
            "read-only",
            "approval_policy=\"never\"",
            "model_reasoning_effort=\"high\"",
            "model_provider=\"fake\"",
            "/w/schema.json",
        ] {
            assert!(argv.iter().any(|a| a == needle), "{needle} in {argv:?}");
        }
    }

    #[test]
    fn success_needs_turn_completed_and_a_document() {
        let ok = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.started\"}\n\
                  {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"cached_input_tokens\":1,\"output_tokens\":2}}\n";
        let out = interpret(&transcript(ok, 0, Some("{\"a\":1}")), &[]).unwrap();
        assert_eq!(out.value, serde_json::json!({"a": 1}));
        assert_eq!(out.usage.input_tokens, 5);
        assert_eq!(
            out.events,
            ["thread.started", "turn.started", "turn.completed"]
        );
        let e = interpret(
            &transcript("{\"type\":\"turn.started\"}\n", 0, Some("{}")),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::CliMissingTerminalState);
    }

    #[test]
    fn custom_provider_decides_auth() {
        let env = HostEnv::from_pairs([("FAKE_API_KEY", "k"), ("HOME", "/nonexistent")]);
        let overrides = vec![
            "model_provider=fake".to_owned(),
            "model_providers.fake={name=\"F\",base_url=\"http://127.0.0.1:1/v1\",env_key=\"FAKE_API_KEY\"}"
                .to_owned(),
        ];
        let probe = AuthProbe {
            env: &env,
            config_overrides: &overrides,
        };
        assert_eq!(
            detect_auth(&probe),
            vec![AuthCandidate::env(AuthClass::ApiKey, "FAKE_API_KEY")]
        );
    }
}

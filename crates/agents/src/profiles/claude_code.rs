//! `claude-code` (`@anthropic-ai/claude-code`): `claude -p --output-format stream-json --verbose`
//! with the prompt on stdin and the answer schema in `--json-schema`.
//!
//! Success (`docs/agents.md`): exit 0, a `result` event with `subtype: success` and `is_error`
//! not true, exactly one reported model (several model-usage keys mean a silent fallback and are
//! refused), and `structured_output` present. `--bare` is deliberately not used: it skips the
//! saved login.

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

/// The claude-code profile.
pub const PROFILE: AgentProfile = AgentProfile {
    name: "claude-code",
    runtime: "claude-code-cli",
    package: "@anthropic-ai/claude-code",
    executable: "claude",
    versions: VersionRange {
        min: Version::new(2, 0, 0),
        below: Version::new(3, 0, 0),
    },
    runs_on: "Node.js >= 18 on PATH",
    version_args: &["--version"],
    parse_version: Version::find_in,
    flags: FlagSpellings {
        model: "--model",
        effort: EffortSpelling::Flag("--effort"),
        permission: &["--permission-mode", "dontAsk"],
        // Claude has no OS sandbox flag; an empty built-in tool list leaves it nothing to run.
        sandbox: &["--tools", ""],
        json_schema: Some("--json-schema"),
        config_override: None,
        config_override_keys: &[],
    },
    env: ChildEnvPolicy {
        keep: &["CLAUDE_CONFIG_DIR"],
        fixed: &[
            ("NO_COLOR", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
        ],
    },
    detect_auth,
    overload_signs: &[
        OverloadSign {
            needle: "rate limit",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "rate_limit",
            condition: ProviderCondition::RateLimited,
        },
        OverloadSign {
            needle: "usage limit",
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
            needle: "529",
            condition: ProviderCondition::Overloaded,
        },
        OverloadSign {
            needle: "invalid api key",
            condition: ProviderCondition::AuthRejected,
        },
        OverloadSign {
            needle: "authentication_error",
            condition: ProviderCondition::AuthRejected,
        },
        OverloadSign {
            needle: "401",
            condition: ProviderCondition::AuthRejected,
        },
    ],
    delegation: Delegation::Supported {
        protocol: "print-stream-json",
        build_argv,
        interpret,
    },
    install_command: "npm install -g @anthropic-ai/claude-code",
    login_command: "claude auth login",
};

/// Preference: the subscription login (token or saved credentials), then API keys.
fn detect_auth(probe: &AuthProbe<'_>) -> Vec<AuthCandidate> {
    let mut out = Vec::new();
    if probe.has_env("CLAUDE_CODE_OAUTH_TOKEN") {
        out.push(AuthCandidate::env(
            AuthClass::ClaudeAi,
            "CLAUDE_CODE_OAUTH_TOKEN",
        ));
    }
    let saved_login = probe
        .env
        .dir_or_home("CLAUDE_CONFIG_DIR", ".claude")
        .and_then(|dir| read_login_json(&dir.join(".credentials.json")))
        .is_some_and(|c| c.get("claudeAiOauth").is_some_and(Value::is_object));
    if saved_login {
        out.push(AuthCandidate::login(AuthClass::ClaudeAi));
    }
    for key in ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"] {
        if probe.has_env(key) {
            out.push(AuthCandidate::env(AuthClass::ApiKey, key));
        }
    }
    out
}

fn build_argv(inv: &Invocation) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["-p", "--output-format", "stream-json", "--verbose"]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(
        PROFILE
            .flags
            .model_and_effort(&inv.model, inv.effort.as_deref()),
    );
    args.push("--json-schema".into());
    args.push(schema_for_claude(&inv.schema_json).into());
    args.extend(PROFILE.flags.permission.iter().map(OsString::from));
    args.extend(PROFILE.flags.sandbox.iter().map(OsString::from));
    for fixed in [
        "--safe-mode",
        "--strict-mcp-config",
        "--disable-slash-commands",
        "--no-session-persistence",
    ] {
        args.push(fixed.into());
    }
    args.push("--mcp-config".into());
    args.push("{\"mcpServers\":{}}".into());
    args.push("--disallowed-tools".into());
    args.push("mcp__*".into());
    args.push("--setting-sources".into());
    args.push("".into());
    args
}

/// Claude's validator knows no `$schema` URI but draft-07's; Intendant's own Draft 2020-12
/// check is authoritative, so the declaration is dropped from what claude sees.
fn schema_for_claude(schema_json: &str) -> String {
    match serde_json::from_str::<Value>(schema_json) {
        Ok(Value::Object(mut map)) => {
            map.remove("$schema");
            Value::Object(map).to_string()
        }
        Ok(_) | Err(_) => schema_json.to_owned(),
    }
}

/// Claude refuses a schema its validator cannot compile with this line on stderr.
const SCHEMA_REFUSED: &str = "--json-schema is not a valid json schema";

fn interpret(t: &Transcript, signs: &[OverloadSign]) -> Result<TurnOutcome, CliError> {
    let events = match jsonl::parse_lines(&t.stdout) {
        Ok(events) => events,
        Err(e) if t.exit_code != Some(0) => {
            return Err(jsonl::nonzero_exit(t, signs).with_detail("protocol", e.message));
        }
        Err(e) => return Err(e),
    };
    let mut seen = Vec::new();
    let mut result: Option<&Value> = None;
    let mut init_model: Option<&str> = None;
    let mut retries: u32 = 0;
    for event in &events {
        let kind = jsonl::event_type(event);
        let subtype = event.get("subtype").and_then(Value::as_str);
        match subtype {
            Some(sub) if kind == "system" => jsonl::note_event(&mut seen, &format!("system.{sub}")),
            Some(_) | None => jsonl::note_event(&mut seen, kind),
        }
        match (kind, subtype) {
            ("system", Some("init")) => init_model = event.get("model").and_then(Value::as_str),
            ("system", Some("api_retry")) => retries = retries.saturating_add(1),
            ("result", _) => result = Some(event),
            _ => {}
        }
    }
    let Some(result) = result else {
        let stderr = String::from_utf8_lossy(&t.stderr_head).to_lowercase();
        if t.exit_code != Some(0) && stderr.contains(SCHEMA_REFUSED) {
            return Err(CliError::new(
                ErrorCode::CliSchemaInvalid,
                "claude's draft-07 validator cannot compile the schema; \
                 keep to keywords both drafts share",
            )
            .with_detail("phase", "schema"));
        }
        if t.exit_code != Some(0) {
            return Err(jsonl::nonzero_exit(t, signs));
        }
        return Err(CliError::new(
            ErrorCode::CliMissingTerminalState,
            "claude exited without a result event",
        )
        .with_detail("events", seen.join(",")));
    };
    let subtype = result.get("subtype").and_then(Value::as_str).unwrap_or("");
    let is_error = result.get("is_error").and_then(Value::as_bool) == Some(true);
    if subtype != "success" || is_error {
        let text = result.get("result").and_then(Value::as_str).unwrap_or("");
        let stderr = String::from_utf8_lossy(&t.stderr_head);
        let err = CliError::new(
            ErrorCode::CliTurnFailed,
            "claude reported that the turn failed",
        )
        .with_detail("subtype", sanitize_subtype(subtype))
        .with_detail("is_error", is_error);
        return Err(jsonl::with_condition(
            err,
            jsonl::classify(signs, &[text, &stderr]),
        ));
    }
    if t.exit_code != Some(0) {
        return Err(jsonl::nonzero_exit(t, signs));
    }
    let effective_model = effective_model(result, init_model)?;
    let value = match result.get("structured_output") {
        Some(v) if !v.is_null() => v.clone(),
        Some(_) | None => {
            return Err(CliError::new(
                ErrorCode::CliMalformedProtocol,
                "claude's result carries no structured_output",
            ));
        }
    };
    let usage = result.get("usage").cloned().unwrap_or(Value::Null);
    let cached = jsonl::u64_field(&usage, "cache_read_input_tokens");
    Ok(TurnOutcome {
        value,
        events: seen,
        effective_model: Some(effective_model),
        usage: TokenUsage {
            input_tokens: jsonl::u64_field(&usage, "input_tokens")
                + cached
                + jsonl::u64_field(&usage, "cache_creation_input_tokens"),
            cached_input_tokens: cached,
            output_tokens: jsonl::u64_field(&usage, "output_tokens"),
        },
        reported_cost_usd: result.get("total_cost_usd").and_then(Value::as_f64),
        attempts: retries.saturating_add(1),
    })
}

/// Subtypes are a small fixed vocabulary; anything else is reported as `other`.
fn sanitize_subtype(subtype: &str) -> &'static str {
    match subtype {
        "success" => "success",
        "error_max_turns" => "error_max_turns",
        "error_during_execution" => "error_during_execution",
        "error_max_structured_output_retries" => "error_max_structured_output_retries",
        "error_max_budget_usd" => "error_max_budget_usd",
        _ => "other",
    }
}

/// Exactly one model in `modelUsage` (else the init event's model when usage names none).
fn effective_model(result: &Value, init_model: Option<&str>) -> Result<String, CliError> {
    let keys: Vec<&String> = result
        .get("modelUsage")
        .and_then(Value::as_object)
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    match (keys.as_slice(), init_model) {
        ([one], _) => Ok((*one).clone()),
        ([], Some(init)) => Ok(init.to_owned()),
        ([], None) => Err(CliError::new(
            ErrorCode::CliModelMismatch,
            "claude reported no effective model",
        )),
        (many, _) => Err(CliError::new(
            ErrorCode::CliModelMismatch,
            "claude reported several models (an ambiguous fallback)",
        )
        .with_detail("reported_models", many.len() as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(stdout: &str) -> Transcript {
        Transcript {
            exit_code: Some(0),
            stdout: stdout.as_bytes().to_vec(),
            stderr_head: Vec::new(),
            result_file: None,
        }
    }

    #[test]
    fn schema_declaration_is_dropped_for_claude() {
        let s = schema_for_claude(
            "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\"}",
        );
        assert_eq!(s, "{\"type\":\"object\"}");
    }

    #[test]
    fn a_schema_claude_cannot_compile_is_schema_invalid() {
        let t = Transcript {
            exit_code: Some(1),
            stdout: Vec::new(),
            stderr_head: b"Error: --json-schema is not a valid JSON Schema: strict mode: \
                           unknown keyword: \"dependentRequired\""
                .to_vec(),
            result_file: None,
        };
        let e = interpret(&t, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::CliSchemaInvalid);
        assert_eq!(e.details["phase"], "schema");
    }

    #[test]
    fn two_models_are_an_ambiguous_fallback() {
        let out = "{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m1\"}\n\
                   {\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\
                   \"structured_output\":{},\"modelUsage\":{\"m1\":{},\"m2\":{}}}\n";
        let e = interpret(&transcript(out), &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::CliModelMismatch);
    }

    #[test]
    fn success_reads_structured_output_usage_and_retries() {
        let out = "{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m1\"}\n\
                   {\"type\":\"system\",\"subtype\":\"api_retry\"}\n\
                   {\"type\":\"assistant\",\"message\":{}}\n\
                   {\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\
                   \"structured_output\":{\"ok\":true},\"total_cost_usd\":0.5,\
                   \"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":4,\"output_tokens\":5},\
                   \"modelUsage\":{\"m1\":{}}}\n";
        let o = interpret(&transcript(out), &[]).unwrap();
        assert_eq!(o.value, serde_json::json!({"ok": true}));
        assert_eq!(o.effective_model.as_deref(), Some("m1"));
        assert_eq!(o.usage.input_tokens, 7);
        assert_eq!(o.attempts, 2);
        assert_eq!(
            o.events,
            ["system.init", "system.api_retry", "assistant", "result"]
        );
    }
}

//! The 18 stable error codes of the delegation contract (`docs/agents.md`) and the sanitized,
//! bounded error object.
//!
//! Every message and detail value passes through [`sanitize`] before it is stored, so an error can
//! be printed, logged or persisted without leaking a prompt, a transcript, an environment value
//! or a key. Callers construct messages from facts Intendant itself knows (paths, versions,
//! counts); provider text is never copied in, only classified.

use std::sync::LazyLock;

pub use intendant_protocol::delegation::ErrorCode;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest message kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 512;
/// Longest string detail value kept, in bytes.
pub const MAX_DETAIL_VALUE_BYTES: usize = 256;
/// Most detail entries kept.
pub const MAX_DETAILS: usize = 16;

/// The durable error object: `{code, message, recovery_command, details}`, sanitized and bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CliError {
    /// The stable code.
    pub code: ErrorCode,
    /// A short human sentence built from facts Intendant knows; never provider text.
    pub message: String,
    /// A command that would fix or diagnose the problem, when one exists.
    pub recovery_command: Option<String>,
    /// Small structured facts (limits, exit codes, classifications).
    pub details: Map<String, Value>,
}

impl CliError {
    /// A new error; the message is sanitized and bounded here.
    pub fn new(code: ErrorCode, message: impl AsRef<str>) -> CliError {
        CliError {
            code,
            message: sanitize(message.as_ref(), MAX_MESSAGE_BYTES),
            recovery_command: None,
            details: Map::new(),
        }
    }

    /// Sets the recovery command (sanitized).
    #[must_use]
    pub fn with_recovery(mut self, command: impl AsRef<str>) -> CliError {
        self.recovery_command = Some(sanitize(command.as_ref(), MAX_MESSAGE_BYTES));
        self
    }

    /// Adds one detail; strings are sanitized, and entries past [`MAX_DETAILS`] are dropped.
    #[must_use]
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> CliError {
        if self.details.len() < MAX_DETAILS {
            self.details
                .insert(key.to_owned(), sanitize_value(value.into(), 0));
        }
        self
    }

    /// Redacts the given literal secrets (e.g. the values of admitted key variables) everywhere.
    #[must_use]
    pub fn redacting(mut self, secrets: &[String]) -> CliError {
        self.message = redact_literals(&self.message, secrets);
        if let Some(cmd) = self.recovery_command.take() {
            self.recovery_command = Some(redact_literals(&cmd, secrets));
        }
        let details = std::mem::take(&mut self.details);
        self.details = details
            .into_iter()
            .map(|(k, v)| (k, redact_value(v, secrets)))
            .collect();
        self
    }

    /// The error as the JSON object printed by `intendant delegate`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "code": self.code,
            "message": self.message,
            "recovery_command": self.recovery_command,
            "details": self.details,
        })
    }
}

static KEY_LIKE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)(?:",
        r"\bsk-[a-z0-9_\-]{6,}",
        r"|\b(?:bearer|token|api[_-]?key|authorization|secret|password)\s*[:=]\s*\S{4,}",
        r"|\beyJ[a-z0-9_\-]{10,}\.[a-z0-9_\-]{4,}(?:\.[a-z0-9_\-]*)?",
        r"|\b[a-z0-9_\-]{32,}\b",
        r")"
    ))
    .ok()
});

/// Redacts key-like substrings and cuts `text` to at most `max_bytes` (on a char boundary).
pub fn sanitize(text: &str, max_bytes: usize) -> String {
    let redacted = match KEY_LIKE.as_ref() {
        Some(re) => re.replace_all(text, "[REDACTED]").into_owned(),
        None => String::from("[REDACTED]"),
    };
    let cleaned: String = redacted
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    truncate(&cleaned, max_bytes)
}

fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes.saturating_sub(3);
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

fn sanitize_value(value: Value, depth: usize) -> Value {
    match value {
        Value::String(s) => Value::String(sanitize(&s, MAX_DETAIL_VALUE_BYTES)),
        Value::Array(items) if depth < 2 => Value::Array(
            items
                .into_iter()
                .take(MAX_DETAILS)
                .map(|v| sanitize_value(v, depth + 1))
                .collect(),
        ),
        Value::Object(map) if depth < 2 => Value::Object(
            map.into_iter()
                .take(MAX_DETAILS)
                .map(|(k, v)| (sanitize(&k, 64), sanitize_value(v, depth + 1)))
                .collect(),
        ),
        Value::Array(_) | Value::Object(_) => Value::String("[elided]".to_owned()),
        other @ (Value::Null | Value::Bool(_) | Value::Number(_)) => other,
    }
}

pub(crate) fn redact_literals(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret.as_str(), "[REDACTED]");
    }
    out
}

fn redact_value(value: Value, secrets: &[String]) -> Value {
    match value {
        Value::String(s) => Value::String(redact_literals(&s, secrets)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| redact_value(v, secrets))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, redact_value(v, secrets)))
                .collect(),
        ),
        other @ (Value::Null | Value::Bool(_) | Value::Number(_)) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_to_their_stable_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, Value::String(code.name().to_owned()));
            assert_eq!(serde_json::from_value::<ErrorCode>(json).unwrap(), code);
        }
        assert!(serde_json::from_value::<ErrorCode>(Value::from("cli_timeout")).is_err());
    }

    #[test]
    fn the_wire_names_are_the_contracts() {
        let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "runtime_missing_executable",
                "runtime_unsupported_version",
                "runtime_unsupported_capability",
                "runtime_not_authenticated",
                "runtime_state_unwritable",
                "runtime_model_required",
                "runtime_model_mismatch",
                "runtime_input_too_large",
                "runtime_output_too_large",
                "runtime_timeout",
                "runtime_cancelled",
                "runtime_nonzero_exit",
                "runtime_malformed_protocol",
                "runtime_missing_terminal_state",
                "runtime_turn_failed",
                "runtime_schema_invalid",
                "runtime_application_invalid",
                "runtime_permission_denied",
            ]
        );
    }

    #[test]
    fn key_like_strings_are_redacted() {
        let s = sanitize(
            "failed with sk-proj-abcdefghijkl and Bearer: abcd1234efgh and \
             0123456789abcdef0123456789abcdef01",
            512,
        );
        assert!(!s.contains("sk-proj"), "{s}");
        assert!(!s.contains("abcd1234efgh"), "{s}");
        assert!(!s.contains("0123456789abcdef0123"), "{s}");
    }

    #[test]
    fn messages_are_bounded() {
        let e = CliError::new(ErrorCode::CliTimeout, "x ".repeat(2000));
        assert!(e.message.len() <= MAX_MESSAGE_BYTES);
        let mut e = CliError::new(ErrorCode::CliTimeout, "t");
        for i in 0..40 {
            e = e.with_detail(&format!("k{i}"), "v".repeat(1000));
        }
        assert_eq!(e.details.len(), MAX_DETAILS);
        assert!(
            e.details
                .values()
                .all(|v| v.as_str().unwrap().len() <= MAX_DETAIL_VALUE_BYTES)
        );
    }

    #[test]
    fn literal_secrets_are_redacted() {
        let e = CliError::new(ErrorCode::CliTurnFailed, "key hunter2x leaked")
            .with_detail("d", "also hunter2x")
            .redacting(&["hunter2x".to_owned()]);
        assert!(!serde_json::to_string(&e).unwrap().contains("hunter2x"));
    }
}

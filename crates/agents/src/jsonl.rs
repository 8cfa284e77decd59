//! Shared pieces of reading a CLI's JSONL transcript: line splitting, event-type bookkeeping and
//! failure classification. Each profile applies its own success rules on top.

use serde_json::Value;

use crate::error::{CliError, ErrorCode};
use crate::profile::{OverloadSign, ProviderCondition, Transcript};

/// Parses every non-blank stdout line as a JSON object.
///
/// A line that is not a JSON object (including a truncated last line) makes the whole transcript
/// malformed: a half-read protocol is never trusted.
pub fn parse_lines(stdout: &[u8]) -> Result<Vec<Value>, CliError> {
    let text = std::str::from_utf8(stdout).map_err(|_| {
        CliError::new(
            ErrorCode::CliMalformedProtocol,
            "the CLI's output is not UTF-8",
        )
    })?;
    let mut events = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match crate::worker::framing::parse_object(line) {
            Ok(v) => events.push(v),
            Err(_) => {
                return Err(CliError::new(
                    ErrorCode::CliMalformedProtocol,
                    format!("line {} of the CLI's output is not a JSON event", index + 1),
                )
                .with_detail("line", index as u64 + 1));
            }
        }
    }
    Ok(events)
}

/// The `type` field of an event, or `""`.
pub fn event_type(event: &Value) -> &str {
    event.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Records `kind` once, in first-seen order.
pub fn note_event(seen: &mut Vec<String>, kind: &str) {
    if !kind.is_empty() && !seen.iter().any(|k| k == kind) && seen.len() < 64 {
        seen.push(kind.to_owned());
    }
}

/// Classifies failure text by the profile's overload signs; the text itself is never kept.
pub fn classify(signs: &[OverloadSign], texts: &[&str]) -> Option<ProviderCondition> {
    let lowered: Vec<String> = texts.iter().map(|t| t.to_lowercase()).collect();
    signs
        .iter()
        .find(|s| lowered.iter().any(|t| shows(t, s.needle)))
        .map(|s| s.condition)
}

/// Whether `text` holds `needle`; a number (an HTTP status) only as a word of its own, never as
/// digits of another or of an id (a duration of `14293` ms, a session `5a429c0e-...` is no 429).
fn shows(text: &str, needle: &str) -> bool {
    if needle.is_empty() || !needle.bytes().all(|b| b.is_ascii_digit()) {
        return text.contains(needle);
    }
    let bytes = text.as_bytes();
    text.match_indices(needle).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + needle.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// Adds a provider classification (if any) to an error.
pub fn with_condition(err: CliError, condition: Option<ProviderCondition>) -> CliError {
    match condition {
        Some(c) => err
            .with_detail(
                "provider_condition",
                serde_json::to_value(c).unwrap_or(Value::Null),
            )
            .with_detail("retryable", c.is_retryable()),
        None => err,
    }
}

/// `runtime_nonzero_exit` for a transcript, classified by its stderr.
pub fn nonzero_exit(t: &Transcript, signs: &[OverloadSign]) -> CliError {
    let stderr = String::from_utf8_lossy(&t.stderr_head);
    let err = match t.exit_code {
        Some(code) => CliError::new(
            ErrorCode::CliNonzeroExit,
            format!("the CLI exited with status {code}"),
        )
        .with_detail("exit_code", code),
        None => CliError::new(ErrorCode::CliNonzeroExit, "the CLI was killed by a signal"),
    };
    with_condition(err, classify(signs, &[&stderr]))
}

/// Parses the final answer document (the whole text must be one JSON value).
pub fn parse_final_document(text: &str) -> Result<Value, CliError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(CliError::new(
            ErrorCode::CliMalformedProtocol,
            "the CLI's final message is empty",
        ));
    }
    serde_json::from_str(trimmed).map_err(|e| {
        CliError::new(
            ErrorCode::CliMalformedProtocol,
            "the CLI's final message is not one JSON document",
        )
        .with_detail("parse_error_line", e.line() as u64)
        .with_detail("parse_error_column", e.column() as u64)
    })
}

/// Reads a non-negative integer field, 0 when absent.
pub fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_last_line_is_malformed() {
        let e = parse_lines(b"{\"type\":\"a\"}\n{\"type\":").unwrap_err();
        assert_eq!(e.code, ErrorCode::CliMalformedProtocol);
        assert_eq!(e.details["line"], 2);
    }

    #[test]
    fn classification_keeps_no_text() {
        let signs = [OverloadSign {
            needle: "429",
            condition: ProviderCondition::RateLimited,
        }];
        assert_eq!(
            classify(&signs, &["HTTP 429 secret body"]),
            Some(ProviderCondition::RateLimited)
        );
        let e = with_condition(
            CliError::new(ErrorCode::CliTurnFailed, "turn failed"),
            Some(ProviderCondition::RateLimited),
        );
        assert_eq!(e.details["provider_condition"], "rate_limited");
        assert_eq!(e.details["retryable"], true);
    }

    #[test]
    fn a_status_is_a_whole_number_never_digits_of_another() {
        let signs = [
            OverloadSign {
                needle: "429",
                condition: ProviderCondition::RateLimited,
            },
            OverloadSign {
                needle: "529",
                condition: ProviderCondition::Overloaded,
            },
        ];
        // A 529 from a gateway on port 34291 (claude names it): overloaded, not rate limited;
        // read as a 429 whenever the port held those digits, the real-CLI test failed so.
        assert_eq!(
            classify(
                &signs,
                &[
                    "API Error: 529 injected HTTP 529. If it persists, check your inference \
                   gateway (127.0.0.1:34291)."
                ]
            ),
            Some(ProviderCondition::Overloaded)
        );
        assert_eq!(
            classify(
                &signs,
                &["{\"duration_ms\":14293,\"result\":\"API Error: 529\"}"]
            ),
            Some(ProviderCondition::Overloaded)
        );
        assert_eq!(classify(&signs, &["request 1429 took 5290 ms"]), None);
        assert_eq!(
            classify(&signs, &["session 5a429c0e-0b53-4f29-8e1d-d529"]),
            None
        );
        assert_eq!(
            classify(&signs, &["429"]),
            Some(ProviderCondition::RateLimited)
        );
        assert_eq!(
            classify(&signs, &["status=429;"]),
            Some(ProviderCondition::RateLimited)
        );
    }
}

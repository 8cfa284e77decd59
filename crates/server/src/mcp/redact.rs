//! The last check on everything the MCP server sends: no credential of this process (any
//! variable `intendant_core::secrets` treats as secret) appears in a result, whatever a session
//! or a CLI printed.

use serde_json::Value;

/// Values shorter than this are not treated as secrets (they would match ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The secret values to take out of results.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// The credentials of this process (secluded ones included).
    pub fn from_process() -> Redactor {
        Redactor::new(
            intendant_core::secrets::vars()
                .into_iter()
                .filter(|(name, _)| intendant_core::secrets::is_secret_name(name))
                .map(|(_, value)| value),
        )
    }

    /// A redactor of `secrets` (the short ones are dropped).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // The longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// This redactor and `more` secrets.
    pub fn and(self, more: impl IntoIterator<Item = String>) -> Redactor {
        Redactor::new(self.secrets.into_iter().chain(more))
    }

    /// `text` with every secret replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// `value` with every secret in its strings (and keys) replaced.
    pub fn value(&self, value: Value) -> Value {
        if self.secrets.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.text(&k), self.value(v)))
                    .collect(),
            ),
            other @ (Value::Null | Value::Bool(_) | Value::Number(_)) => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_in_strings_and_keys() {
        let r = Redactor::new(["sk-test-abcdef123".to_owned(), "short".to_owned()]);
        let v =
            serde_json::json!({"out": "key=sk-test-abcdef123!", "sk-test-abcdef123": [1, "short"]});
        let v = r.value(v);
        assert_eq!(
            v,
            serde_json::json!({"out": "key=[redacted]!", "[redacted]": [1, "short"]})
        );
    }
}

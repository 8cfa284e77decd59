//! The answer's JSON Schema: Draft 2020-12, with every remote `$ref` refused.
//!
//! Validation errors report where the answer failed (instance and schema paths), never the
//! offending value: that value is model output, and errors must not carry transcripts.

use jsonschema::{Retrieve, Uri, Validator};
use serde_json::Value;

use crate::error::{CliError, ErrorCode};

/// Most validation failures listed in an error.
const MAX_REPORTED_FAILURES: usize = 8;

/// Refuses every retrieval: schemas must be self-contained.
struct RefuseRetrieval;

impl Retrieve for RefuseRetrieval {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "remote $ref resolution is disabled ({})",
            uri.scheme().as_str()
        )
        .into())
    }
}

/// A compiled answer schema.
#[derive(Debug)]
pub struct AnswerSchema {
    validator: Validator,
    compact: String,
}

impl AnswerSchema {
    /// Compiles `schema` as Draft 2020-12; an invalid schema or a remote `$ref` is refused.
    pub fn compile(schema: &Value) -> Result<AnswerSchema, CliError> {
        if !schema.is_object() {
            return Err(CliError::new(
                ErrorCode::CliSchemaInvalid,
                "the answer schema must be a JSON object",
            )
            .with_detail("phase", "schema"));
        }
        let validator = jsonschema::draft202012::options()
            .with_retriever(RefuseRetrieval)
            .should_validate_formats(true)
            .build(schema)
            .map_err(|e| {
                CliError::new(
                    ErrorCode::CliSchemaInvalid,
                    "the answer schema is not a valid, self-contained Draft 2020-12 schema",
                )
                .with_detail("phase", "schema")
                .with_detail("schema_path", e.schema_path().to_string())
            })?;
        Ok(AnswerSchema {
            validator,
            compact: schema.to_string(),
        })
    }

    /// The schema as compact JSON.
    pub fn compact(&self) -> &str {
        &self.compact
    }

    /// Checks an answer; the error lists failing locations only.
    pub fn check(&self, value: &Value) -> Result<(), CliError> {
        let failures: Vec<Value> = self
            .validator
            .iter_errors(value)
            .take(MAX_REPORTED_FAILURES)
            .map(|e| {
                serde_json::json!({
                    "instance_path": e.instance_path().to_string(),
                    "schema_path": e.schema_path().to_string(),
                })
            })
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        Err(CliError::new(
            ErrorCode::CliSchemaInvalid,
            "the CLI's answer does not match the schema",
        )
        .with_detail("phase", "answer")
        .with_detail("failures", Value::Array(failures)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_are_checked_without_echoing_values() {
        let s = AnswerSchema::compile(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        }))
        .unwrap();
        assert!(s.check(&json!({"n": 3})).is_ok());
        let e = s
            .check(&json!({"n": "very-secret-model-output"}))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::CliSchemaInvalid);
        let text = serde_json::to_string(&e).unwrap();
        assert!(!text.contains("very-secret"), "{text}");
        assert!(text.contains("/n"), "{text}");
    }

    #[test]
    fn remote_refs_are_refused() {
        let e = AnswerSchema::compile(&json!({"$ref": "https://example.com/s.json"})).unwrap_err();
        assert_eq!(e.code, ErrorCode::CliSchemaInvalid);
        let e = AnswerSchema::compile(&json!({"$ref": "file:///etc/passwd"})).unwrap_err();
        assert_eq!(e.code, ErrorCode::CliSchemaInvalid);
    }

    #[test]
    fn a_declared_older_draft_is_still_checked_as_2020_12() {
        let s = AnswerSchema::compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "dependentRequired": {"a": ["b"]},
        }))
        .unwrap();
        assert!(s.check(&json!({"a": 1, "b": 2})).is_ok());
        assert!(s.check(&json!({"a": 1})).is_err());
    }

    #[test]
    fn local_refs_work_and_2020_12_keywords_apply() {
        let s = AnswerSchema::compile(&json!({
            "$defs": {"item": {"type": "string"}},
            "type": "array",
            "prefixItems": [{"$ref": "#/$defs/item"}],
            "items": false,
        }))
        .unwrap();
        assert!(s.check(&json!(["a"])).is_ok());
        assert!(s.check(&json!(["a", "b"])).is_err());
        assert!(s.check(&json!([1])).is_err());
    }
}

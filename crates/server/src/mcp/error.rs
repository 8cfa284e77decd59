//! A tool call's failure as the client sees it: a stable code, a message, and the structured
//! content of a failed call. A leaf: every tool module returns it and none is needed to build it.

use intendant_protocol::daemon::HostError;
use intendant_protocol::mcp::ToolErrorCode;
use serde_json::{Map, Value, json};

/// Why a tool call failed: a stable code and a message for the model and its human.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// The stable code (`unknown_session`, `invalid_arguments`, `runtime_timeout`, ...).
    pub code: ToolErrorCode,
    /// What went wrong.
    pub message: String,
    /// More, for `delegate` (the contract's `recovery_command` and `details`).
    pub extra: Map<String, Value>,
}

impl ToolError {
    /// An error of `code` saying `message`.
    pub fn new(code: impl Into<ToolErrorCode>, message: impl Into<String>) -> ToolError {
        ToolError {
            code: code.into(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// The error as the structured content of a failed call.
    pub fn to_json(&self) -> Value {
        let mut error = self.extra.clone();
        error.insert("code".into(), Value::from(self.code.name()));
        error.insert("message".into(), Value::String(self.message.clone()));
        json!({ "error": error })
    }
}

impl From<HostError> for ToolError {
    fn from(e: HostError) -> ToolError {
        ToolError {
            code: e.code.into(),
            message: e.message,
            extra: Map::new(),
        }
    }
}

/// A tool's result.
pub type ToolResult = Result<Value, ToolError>;

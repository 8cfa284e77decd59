//! What the daemon's tests share: the built `intendant-runtime` and scripted model turns.

use std::path::PathBuf;

use intendant_core::runner::{RUNTIME_BIN, RUNTIME_PATH_ENV};
use serde_json::{Value, json};

/// The `intendant-runtime` binary: `$INTENDANT_RUNTIME`, else the one built into this target
/// directory.
pub fn runtime_bin() -> PathBuf {
    intendant_testkit::built_binary(RUNTIME_BIN, RUNTIME_PATH_ENV)
}

/// A turn running one shell command.
pub fn exec_turn(command: &str) -> Value {
    json!({ "tool_calls": [{ "name": "exec_command", "arguments": { "command": command } }] })
}

/// A turn that only says `text`.
pub fn text_turn(text: &str) -> Value {
    json!({ "text": text })
}

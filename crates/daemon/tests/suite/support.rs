//! What the daemon's tests share: the built `intendant-runtime` and scripted model turns.

use std::path::{Path, PathBuf};

use intendant_core::runner::{RUNTIME_BIN, RUNTIME_PATH_ENV};
use serde_json::{Value, json};

/// The `intendant-runtime` binary: `$INTENDANT_RUNTIME`, else the one built into this target
/// directory (`target/debug/`, two levels above this test binary in `deps/`).
pub fn runtime_bin() -> PathBuf {
    if let Some(path) = std::env::var_os(RUNTIME_PATH_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).unwrap();
    let runtime = target.join(RUNTIME_BIN);
    assert!(
        runtime.is_file(),
        "{} is missing: build the workspace first (`cargo build -p intendant-runtime`)",
        runtime.display()
    );
    runtime
}

/// A turn running one shell command.
pub fn exec_turn(command: &str) -> Value {
    json!({ "tool_calls": [{ "name": "exec_command", "arguments": { "command": command } }] })
}

/// A turn that only says `text`.
pub fn text_turn(text: &str) -> Value {
    json!({ "text": text })
}

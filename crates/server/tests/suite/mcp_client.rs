//! What every MCP test does with a client: call a tool, and read a result as success or as an
//! error with its code (shared with the `intendant mcp` tests of the cli crate).

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;

/// Calls `tool` with `args` (an object).
pub async fn call(client: &Peer<RoleClient>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

/// The structured content of a successful call (its text is the same JSON).
pub fn ok(result: CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let value = result.structured_content.clone().unwrap();
    let text = result.content[0].as_text().unwrap().text.clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    value
}

/// The error code and message of a failed call.
pub fn failed(result: CallToolResult) -> (String, String) {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let error = &result.structured_content.as_ref().unwrap()["error"];
    let text = &result.content[0].as_text().unwrap().text;
    let (code, message) = (
        error["code"].as_str().unwrap(),
        error["message"].as_str().unwrap(),
    );
    assert_eq!(text, &format!("{code}: {message}"));
    (code.to_owned(), message.to_owned())
}

//! What every MCP test does with a client: call a tool, read a result as success or as an
//! error with its code, and record resource updates (shared with the `intendant mcp` tests of
//! the cli crate).

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData as McpError};
use serde_json::{Value, json};
use tokio::sync::mpsc;

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

/// A client that records resource updates and answers elicitations with `answer`.
#[derive(Clone)]
pub struct Recorder {
    /// Where each updated resource's URI (and each elicitation's message) goes.
    pub updates: mpsc::UnboundedSender<String>,
    /// The decision to elicitations; `None`: the client does not support elicitation.
    pub answer: Option<&'static str>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.answer {
            Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("recorder", "1"))
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updates.send(params.uri);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Err(McpError::invalid_params("form only", None));
        };
        let _ = self.updates.send(format!("elicited: {message}"));
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "decision": self.answer.unwrap_or("deny") })))
    }
}

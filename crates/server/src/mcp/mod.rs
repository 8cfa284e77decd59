//! The MCP server: Intendant as a tool for another agent (Claude Code, Codex, an IDE, a
//! script), built on the official Rust SDK (`rmcp`) over an `Arc<dyn SessionHost>`.
//!
//! One decision shapes it: no call waits for a session's work past a bounded wait
//! ([`args::MAX_WAIT_S`]); long work is followed by polling `get_session` or reading the
//! session's resource, whose updates are notified while it runs.
//!
//! And one rule: the client is a model, not a human. Its starts get only the projects a human
//! gave the server (its working directory, `[mcp] projects`) and at most `[mcp] max_autonomy`;
//! approvals go to a human (as elicitations the client shows its user), and the tools that
//! answer them or raise autonomy exist only where the owner set `[mcp] allow_model_approvals`
//! ([`intendant_daemon::control_plane::McpPolicy`]).
//!
//! # Layout
//!
//! - [`args`]: each tool's arguments and their JSON Schemas.
//! - [`tools`]: the catalog and what each tool does over the host.
//! - [`follow`]: bounded waits for a round's end, bounded pages of events.
//! - [`resources`]: `intendant://session/ID` (transcript) and `.../status`, the agenda
//!   `intendant://agenda`, and the watchers sending resource-updated notifications.
//! - [`elicit`]: a started session's approvals offered to its client as elicitations.
//! - [`error`]: a failed call's stable code and message ([`error::ToolError`]), a leaf.
//! - [`delegate`]: the bounded delegation contract as the `delegate` tool.
//! - [`redact`]: no credential of this process in anything sent.
//! - [`http`]: the same server over streamable HTTP, at `/mcp` of the dashboard's listener.

pub mod args;
pub mod delegate;
pub mod elicit;
pub mod error;
pub mod follow;
pub mod http;
pub mod redact;
pub mod resources;
pub mod tools;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use intendant_core::host::SessionHost;
use intendant_daemon::control_plane::McpPolicy;
use intendant_protocol::daemon::{HostError, HostErrorCode, SessionSummary, SessionsPage};
use intendant_protocol::mcp::CallErrorCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, RunningService};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::task::JoinHandle;

use self::error::ToolError;
use self::redact::Redactor;
use self::resources::{SessionResource, Watchers};
use self::tools::Tools;

/// The sessions one page of `resources/list` holds (two resources each): a daemon of thousands
/// of sessions is listed a page at a time.
pub const RESOURCE_PAGE_SESSIONS: usize = 256;

/// What the server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "Intendant runs tasks in sandboxed sessions. Start one with \
run_task (wait_s to wait for its first round), follow it with get_session or the resource \
intendant://session/ID, see what waits for a human with list_approvals, and end it with stop. \
Approvals are answered by a human (this client's prompt, the dashboard, intendant ctl). \
delegate hands one bounded, schema-checked task to an external agent CLI.";

/// The MCP server of one client connection.
pub struct McpServer {
    tools: Arc<Tools>,
    redactor: Redactor,
    watchers: Watchers,
    elicitations: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if let Ok(tasks) = self.elicitations.lock() {
            tasks.iter().for_each(JoinHandle::abort);
        }
    }
}

impl McpServer {
    /// A server over `host` under the owner's `policy` (`[mcp]`); relative project
    /// directories resolve against `cwd`, which is also a project it may use.
    pub fn new(host: Arc<dyn SessionHost>, cwd: PathBuf, policy: McpPolicy) -> McpServer {
        McpServer::with_redactor(host, Some(cwd), Redactor::from_process(), policy)
    }

    /// A server that redacts `redactor`'s values (the daemon adds its web token); without a
    /// `cwd`, relative project directories are refused and only `[mcp] projects` may be used.
    pub fn with_redactor(
        host: Arc<dyn SessionHost>,
        cwd: Option<PathBuf>,
        redactor: Redactor,
        policy: McpPolicy,
    ) -> McpServer {
        McpServer {
            tools: Arc::new(Tools::new(host, cwd, Arc::new(policy))),
            redactor,
            watchers: Watchers::default(),
            elicitations: Mutex::new(Vec::new()),
        }
    }

    fn host(&self) -> Arc<dyn SessionHost> {
        Arc::clone(self.tools.host())
    }

    /// `value` as a successful call's result (structured and as text).
    fn success(&self, value: Value) -> CallToolResult {
        CallToolResult::structured(self.redactor.value(value))
    }

    /// `error` as a failed call's result: the message as text, the error as structured content.
    fn failure(&self, error: &ToolError) -> CallToolResult {
        let value = self.redactor.value(error.to_json());
        let text = self
            .redactor
            .text(&format!("{}: {}", error.code, error.message));
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(value);
        result
    }

    /// Starts offering the approvals of session `id` (started by this client) as elicitations.
    fn offer_approvals(&self, context: &RequestContext<RoleServer>, id: &str) {
        if !elicit::supported(&context.peer) {
            return;
        }
        let task = tokio::spawn(elicit::offer_approvals(
            self.host(),
            context.peer.clone(),
            id.to_owned(),
            self.redactor.clone(),
        ));
        if let Ok(mut tasks) = self.elicitations.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }
}

fn resource_error(e: HostError, uri: &str) -> McpError {
    match e.code {
        HostErrorCode::UnknownSession => {
            McpError::resource_not_found(format!("no resource {uri}: {}", e.message), None)
        }
        HostErrorCode::UnknownApproval
        | HostErrorCode::AlreadyAnswered
        | HostErrorCode::SessionFinished
        | HostErrorCode::InvalidRequest
        | HostErrorCode::ShuttingDown
        | HostErrorCode::Unavailable
        | HostErrorCode::Forbidden
        | HostErrorCode::Busy
        | HostErrorCode::Internal => McpError::internal_error(e.message, None),
    }
}

fn parse_resource(uri: &str) -> Result<SessionResource, McpError> {
    SessionResource::parse(uri).ok_or_else(|| {
        McpError::resource_not_found(
            format!(
                "no resource {uri}: session resources are {}ID and {}ID/status, and the \
                 agenda is {}",
                resources::PREFIX,
                resources::PREFIX,
                resources::AGENDA_URI
            ),
            None,
        )
    })
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        ServerConfig::new(capabilities)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("intendant", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    // Resource subscriptions and elicitation are server-to-client traffic of the session
    // model, which protocol versions from 2026-07-28 on replace.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::list(
            self.tools.policy(),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if !tools::exists(name, self.tools.policy()) {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {name:?}; the tools are {}",
                    tools::names(self.tools.policy()).join(", ")
                ),
                None,
            ));
        }
        let arguments = request.arguments.unwrap_or_default();
        let outcome = tokio::select! {
            outcome = self.tools.call(name, arguments) => outcome,
            () = context.ct.cancelled() => Err(ToolError::new(CallErrorCode::Cancelled, "the call was cancelled")),
        };
        let result = match outcome {
            Ok(value) => {
                if name == "run_task"
                    && let Some(id) = value.get("session_id").and_then(Value::as_str)
                {
                    self.offer_approvals(&context, id);
                }
                self.success(value)
            }
            Err(error) => self.failure(&error),
        };
        Ok(result.into())
    }

    /// Each session's two resources, [`RESOURCE_PAGE_SESSIONS`] sessions a page (the cursor is
    /// the last session of the page before), then the agenda's.
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let failed = |e: HostError| McpError::internal_error(e.message, None);
        // The page after the last one's end, and one more session to tell whether more follow:
        // only that is read of the host, not every session it ever ran.
        let page = SessionsPage {
            after: request.and_then(|r| r.cursor),
            limit: Some(RESOURCE_PAGE_SESSIONS as u32 + 1),
            ..SessionsPage::ALL
        };
        // In a fleet, every member's sessions (each one's transcript is read from its owner).
        let mut sessions: Vec<SessionSummary> = match self
            .host()
            .fleet_sessions_page(&page)
            .await
            .map_err(failed)?
        {
            Some(fleet) => {
                let mut sessions: Vec<SessionSummary> =
                    fleet.rows().into_iter().map(|row| row.session).collect();
                sessions.sort_by(|a, b| a.id.cmp(&b.id));
                sessions
            }
            None => self.host().sessions_page(&page).await.map_err(failed)?,
        };
        let more = sessions.len() > RESOURCE_PAGE_SESSIONS;
        sessions.truncate(RESOURCE_PAGE_SESSIONS);
        let mut listed: Vec<_> = sessions.iter().flat_map(resources::listed).collect();
        // Only a host that keeps an agenda (the daemon) offers it.
        if !more
            && self
                .host()
                .agenda(intendant_protocol::agenda::AgendaOp::List)
                .await
                .is_ok()
        {
            listed.push(resources::agenda_listed());
        }
        let mut result = ListResourcesResult::with_all_items(listed);
        result.next_cursor = more
            .then(|| sessions.last().map(|s| s.id.clone()))
            .flatten();
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let resource = parse_resource(&uri)?;
        let host = self.host();
        let content = match &resource {
            SessionResource::Transcript(id) => {
                let text = resources::transcript_text(host.as_ref(), id)
                    .await
                    .map_err(|e| resource_error(e, &uri))?;
                ResourceContents::text(self.redactor.text(&text), uri.clone())
            }
            SessionResource::Status(id) => {
                let text = resources::status_text(host.as_ref(), id)
                    .await
                    .map_err(|e| resource_error(e, &uri))?;
                ResourceContents::text(self.redactor.text(&text), uri.clone())
                    .with_mime_type("application/json")
            }
            SessionResource::Agenda => {
                let text = resources::agenda_text(host.as_ref())
                    .await
                    .map_err(|e| resource_error(e, &uri))?;
                ResourceContents::text(self.redactor.text(&text), uri.clone())
                    .with_mime_type("application/json")
            }
        };
        Ok(ReadResourceResult::new(vec![content]).into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let resource = parse_resource(&request.uri)?;
        self.watchers
            .subscribe(self.host(), context.peer, request.uri.clone(), resource)
            .await
            .map_err(|e| resource_error(e, &request.uri))
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.watchers.unsubscribe(&request.uri);
        Ok(())
    }
}

/// Serves one client on this process's stdin and stdout until it disconnects.
pub async fn serve_stdio(
    host: Arc<dyn SessionHost>,
    cwd: PathBuf,
    policy: McpPolicy,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running: RunningService<RoleServer, McpServer> = McpServer::new(host, cwd, policy)
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}

//! The MCP server over streamable HTTP, mounted at [`PATH`] of the dashboard's listener
//! (`WebServer::with_routes(routes(..))`) when the daemon serves one: the same tools, resources
//! and notifications as on stdio, each client session its own [`McpServer`] over the daemon's
//! host.
//!
//! It sits behind the dashboard's `access::guard` like every route (the `Host` header, a foreign
//! `Origin` refused, the login cookie or `Authorization: Bearer TOKEN`), so rmcp's own Host and
//! Origin checks are off here; before that, its listener refuses a session's processes
//! ([`crate::peer`]). A client over HTTP has no working directory on this machine, so project
//! directories must be absolute and listed in `[mcp] projects`; the web token is redacted from
//! every result. Sessions are bounded: at most `[daemon] mcp_sessions` open at once for the
//! token (one more `initialize` is a 503 `busy`), each ended after `[daemon] mcp_idle_secs`
//! without a request, and those opened under a token that was since replaced (`ctl web-token
//! --rotate`) ended at the next `initialize`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use intendant_core::host::SessionHost;
use intendant_daemon::control_plane::{ClientLimits, McpPolicy};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::McpServer;
use super::redact::Redactor;
use crate::web::access::Access;

/// Where the dashboard's listener serves MCP.
pub use crate::web::access::MCP_PATH as PATH;
/// Largest JSON-RPC request body accepted.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// The service answering at [`PATH`]: one MCP session per client (`Mcp-Session-Id`), ended
/// (open streams closed) when `cancel` is cancelled. `secrets` returns the values to redact
/// besides this process's credentials (the web token in force).
fn service(
    host: Arc<dyn SessionHost>,
    policy: McpPolicy,
    secrets: impl Fn() -> Vec<String> + Send + Sync + 'static,
    cancel: CancellationToken,
    sessions: Arc<LocalSessionManager>,
) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_REQUEST_BYTES)
        .with_cancellation_token(cancel);
    StreamableHttpService::new(
        move || {
            Ok(McpServer::with_redactor(
                host.clone(),
                None,
                Redactor::from_process().and(secrets()),
                policy.clone(),
            ))
        },
        sessions,
        config,
    )
}

/// What bounds the open MCP sessions.
struct SessionCap {
    sessions: Arc<LocalSessionManager>,
    max: usize,
    /// Held while a session is being opened, so two `initialize`s cannot both take the last
    /// place.
    opening: tokio::sync::Mutex<()>,
    /// The dashboard's login, whose token each session was opened under.
    access: Arc<Access>,
    /// Each open session's id and the token in force when it opened.
    opened_under: std::sync::Mutex<std::collections::HashMap<Arc<str>, String>>,
}

impl SessionCap {
    /// Ends the sessions opened under a token no longer in force (`ctl web-token --rotate`):
    /// their clients can make no request, and their places would keep the new token's out
    /// until they expired. Forgets those that ended by themselves.
    async fn end_the_old_tokens(&self) {
        let current = self.access.current_token().ok();
        let open: Vec<Arc<str>> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        let stale: Vec<Arc<str>> = {
            let mut opened = self
                .opened_under
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            opened.retain(|id, _| open.contains(id));
            opened
                .iter()
                .filter(|(_, token)| current.as_deref() != Some(token.as_str()))
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in stale {
            let _ = self.sessions.close_session(&id).await;
            self.opened_under
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&id);
        }
    }

    /// Records the session `response` opened under the token in force.
    fn opened(&self, response: &Response) {
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let (Some(id), Ok(token)) = (id, self.access.current_token()) {
            self.opened_under
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(Arc::from(id), token);
        }
    }
}

/// Lets a request that opens a session (a POST without `Mcp-Session-Id`) through only while
/// fewer than the cap are open; otherwise a 503 whose JSON-RPC error says `busy`.
async fn cap_sessions(
    State(cap): State<Arc<SessionCap>>,
    request: Request,
    next: Next,
) -> Response {
    let opens =
        request.method() == Method::POST && !request.headers().contains_key("mcp-session-id");
    if !opens {
        return next.run(request).await;
    }
    let _opening = cap.opening.lock().await;
    cap.end_the_old_tokens().await;
    let open = cap.sessions.sessions.read().await.len();
    if open >= cap.max {
        let message = format!(
            "busy: {open} MCP sessions are open, the most [daemon] mcp_sessions allows; end one \
             (DELETE with its Mcp-Session-Id) or wait until an idle one expires"
        );
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32000, "message": message, "data": {"code": "busy"}},
        });
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    let response = next.run(request).await;
    cap.opened(&response);
    response
}

/// Ends every MCP session served by [`routes`] (their open streams closed), when told or
/// dropped: a listener shutting down would otherwise wait on those streams.
#[derive(Debug)]
pub struct McpSessions {
    cancel: CancellationToken,
}

impl McpSessions {
    /// Ends them now.
    pub fn end(&self) {
        self.cancel.cancel();
    }
}

impl Drop for McpSessions {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The route [`PATH`] for the dashboard of `access` (whose web token is redacted too) under the
/// owner's `policy`, with the default limits, and the handle that ends its sessions.
pub fn routes(
    host: Arc<dyn SessionHost>,
    access: Arc<Access>,
    policy: McpPolicy,
) -> (Router, McpSessions) {
    routes_with(host, access, policy, ClientLimits::default())
}

/// [`routes`] bounded by `limits` (`mcp_sessions`, `mcp_idle`).
pub fn routes_with(
    host: Arc<dyn SessionHost>,
    access: Arc<Access>,
    policy: McpPolicy,
    limits: ClientLimits,
) -> (Router, McpSessions) {
    let cancel = CancellationToken::new();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.mcp_idle);
    let sessions = Arc::new(sessions);
    let secrets = access.clone();
    let service = service(
        host,
        policy,
        move || secrets.current_token().into_iter().collect(),
        cancel.clone(),
        sessions.clone(),
    );
    let cap = Arc::new(SessionCap {
        sessions,
        max: limits.mcp_sessions.max(1),
        opening: tokio::sync::Mutex::new(()),
        access,
        opened_under: std::sync::Mutex::new(std::collections::HashMap::new()),
    });
    (
        Router::new()
            .route_service(PATH, service)
            .layer(axum::middleware::from_fn_with_state(cap, cap_sessions)),
        McpSessions { cancel },
    )
}

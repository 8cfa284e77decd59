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
//! every result.

use std::sync::Arc;

use axum::Router;
use intendant_core::host::SessionHost;
use intendant_daemon::control_plane::McpPolicy;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::McpServer;
use super::redact::Redactor;
use crate::web::access::Access;

/// Where the dashboard's listener serves MCP.
pub const PATH: &str = "/mcp";
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
        Arc::new(LocalSessionManager::default()),
        config,
    )
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
/// owner's `policy`, and the handle that ends its sessions.
pub fn routes(
    host: Arc<dyn SessionHost>,
    access: Arc<Access>,
    policy: McpPolicy,
) -> (Router, McpSessions) {
    let cancel = CancellationToken::new();
    let service = service(
        host,
        policy,
        move || access.current_token().into_iter().collect(),
        cancel.clone(),
    );
    (
        Router::new().route_service(PATH, service),
        McpSessions { cancel },
    )
}

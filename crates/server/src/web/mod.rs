//! The web dashboard: every session and every pending approval of one daemon (of every member,
//! on a fleet member), live, from any browser that has the login token.
//!
//! The design decision to know: the dashboard is a frontend like any other. It holds an
//! `Arc<dyn SessionHost>` and nothing else; pages read JSON snapshots and one live SSE stream
//! of envelopes (resumed by `seq`), and every button is one `POST /api/intents`. The page is
//! three embedded files (no build step), renders every model and command byte as text, and
//! is allowed by its CSP to run only its own script.
//!
//! # Layout
//! - [`access`]: Host/Origin checks, the cookie or bearer login, the login page.
//! - [`token`]: the login token in the state root (0600), rotation.
//! - [`api`]: the JSON endpoints and intents, [`api::ApiError`].
//! - [`live`]: `GET /api/events`, server-sent events resumed by `Last-Event-ID`.
//! - `assets/`: `index.html`, `app.js`, `app.css`, `login.html`, embedded with `include_str!`.

pub mod access;
pub mod api;
mod connections;

pub use connections::MAX_HEAD_BYTES;
pub mod live;
pub mod token;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use intendant_daemon::control_plane::ClientLimits;

use self::access::Access;
use self::api::{ApiError, Host};
use self::token::TokenError;
use crate::gate::Gate;

/// Largest request body accepted (an intent or a login form); more is a 413. The control
/// socket's line bound, so a task or follow-up `ctl` takes (`MAX_TASK_BYTES`) the page takes
/// too.
pub const MAX_BODY_BYTES: usize = intendant_protocol::socket::MAX_REQUEST_LINE;
/// Where the dashboard listens unless told otherwise: loopback, a free port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:0";

/// Where and how to serve the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfig {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// Whether a non-loopback address may be bound (the token is still required).
    pub allow_remote: bool,
}

impl WebConfig {
    /// Where to serve: `flag` (the address given to `--web`, `None` when `--web` had none),
    /// else `[daemon] web` in the state root's `intendant.toml`, else [`DEFAULT_ADDR`].
    pub fn resolve(
        flag: Option<&str>,
        allow_remote: bool,
        home: &std::path::Path,
    ) -> Result<WebConfig, WebError> {
        let configured;
        let text = match flag {
            Some(addr) => addr,
            None => {
                configured = intendant_daemon::control_plane::web_address(home)?;
                configured.as_deref().unwrap_or(DEFAULT_ADDR)
            }
        };
        let addr = text.parse().map_err(|_| WebError::BadAddress {
            value: text.to_string(),
        })?;
        Ok(WebConfig { addr, allow_remote })
    }
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// A non-loopback address without the explicit opt-in.
    #[error(
        "refusing to serve the dashboard on {addr}, which is not a loopback address: pass \
         --web-allow-remote to expose it (the login token is still required)"
    )]
    RemoteRefused {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// `--web` or `[daemon] web` is not an address.
    #[error("{value:?} is not an address to serve the dashboard on (e.g. 127.0.0.1:7878)")]
    BadAddress {
        /// What was given.
        value: String,
    },
    /// The state root's `intendant.toml` could not be read, or its `[daemon] web` is not a
    /// string.
    #[error(transparent)]
    Config(#[from] intendant_daemon::control_plane::SettingsError),
    /// Binding the address failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The failure.
        source: std::io::Error,
    },
    /// The login token could not be read or created.
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// A bound dashboard, not yet serving.
pub struct WebServer {
    listener: tokio::net::TcpListener,
    access: Arc<Access>,
    host: Host,
    /// Routes served beside the dashboard's, behind the same guard.
    extra: Router,
    /// Where refused clients (processes of a session) are reported.
    refusals: intendant_daemon::log::DaemonLog,
    /// What its clients may hold (`max_web_connections`, `max_web_streams`).
    limits: ClientLimits,
    /// Its connections' places (`max_web_connections` of them).
    gate: Arc<Gate>,
}

/// How many connections the dashboard holds (the control socket's `load` shows it).
#[derive(Debug, Clone)]
pub struct WebLoad(Arc<Gate>);

impl WebLoad {
    /// Connections open now, answering a request or not.
    pub fn connections(&self) -> usize {
        self.0.held()
    }

    /// The most it serves at once (`[daemon] max_web_connections`).
    pub fn max(&self) -> usize {
        self.0.max()
    }
}

impl std::fmt::Debug for WebServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebServer")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl WebServer {
    /// Binds `config.addr` for the daemon `host` of the state root `home` (where the token
    /// lives).
    pub async fn bind(
        config: &WebConfig,
        host: Host,
        home: PathBuf,
    ) -> Result<WebServer, WebError> {
        if !config.addr.ip().is_loopback() && !config.allow_remote {
            return Err(WebError::RemoteRefused { addr: config.addr });
        }
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| WebError::Bind {
                addr: config.addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| WebError::Bind {
            addr: config.addr,
            source,
        })?;
        let access = Arc::new(Access::new(home, local)?);
        Ok(WebServer {
            listener,
            access,
            host,
            extra: Router::new(),
            refusals: intendant_daemon::log::DaemonLog::discard(),
            limits: ClientLimits::default(),
            gate: Gate::new(ClientLimits::default().max_web_connections),
        })
    }

    /// Serves `routes` on the same listener, behind the same Host/Origin checks and login (a
    /// client that is not a browser authenticates with `Authorization: Bearer TOKEN`).
    pub fn with_routes(mut self, routes: Router) -> WebServer {
        self.extra = self.extra.merge(routes);
        self
    }

    /// Reports every refused client (a process of a session) to `log`.
    pub fn with_refusal_log(mut self, log: intendant_daemon::log::DaemonLog) -> WebServer {
        // A flood of refused connections must not bury the rest of the journal.
        self.refusals = log.at_most(crate::peer::REFUSALS_A_SECOND);
        self
    }

    /// Serves its clients within `limits` (the defaults unless told).
    ///
    /// At most `max_web_connections` connections are served at once: one more takes the place
    /// of the oldest connection not answering a request (before its first, or between two),
    /// which is closed, and gets a 503 `busy` when every connection is answering one.
    pub fn with_limits(mut self, limits: ClientLimits) -> WebServer {
        self.limits = limits;
        self.gate = Gate::new(limits.max_web_connections);
        self
    }

    /// How many connections it holds, as it serves (take it after [`Self::with_limits`]).
    pub fn load(&self) -> WebLoad {
        WebLoad(self.gate.clone())
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The URL that logs a browser in (it carries the token: print it to the user only).
    pub fn login_url(&self) -> Result<String, WebError> {
        Ok(self.access.login_url()?)
    }

    /// The login state, to rotate the token while serving.
    pub fn access(&self) -> Arc<Access> {
        self.access.clone()
    }

    /// Serves until `shutdown` completes (open event streams are closed then). A connection
    /// from a process of a session is refused before any request is read
    /// ([`crate::peer::CheckedListener`]).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let streams = live::StreamCap::new(self.limits.max_web_streams, self.limits.client_buffer);
        let app = guarded(
            dashboard_routes(self.host, self.access.clone(), streams).merge(self.extra),
            self.access,
        );
        let local = self.listener.local_addr()?;
        let listener =
            crate::peer::CheckedListener::new(self.listener, local, self.refusals, self.gate);
        connections::serve(listener, app, self.limits.handshake_timeout, shutdown).await;
        Ok(())
    }
}

/// The dashboard's routes behind its [`access::guard`].
pub fn router(host: Host, access: Arc<Access>) -> Router {
    let limits = ClientLimits::default();
    let streams = live::StreamCap::new(limits.max_web_streams, limits.client_buffer);
    guarded(dashboard_routes(host, access.clone(), streams), access)
}

/// `routes` behind the body limit and [`access::guard`].
fn guarded(routes: Router, access: Arc<Access>) -> Router {
    routes
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(access, access::guard))
}

fn dashboard_routes(host: Host, access: Arc<Access>, streams: live::StreamCap) -> Router {
    let api = Router::new()
        .route("/api/sessions", get(api::sessions))
        .route("/api/sessions/{id}", get(api::session))
        .route("/api/sessions/{id}/events", get(api::session_events))
        .route("/api/sessions/{id}/record", get(api::session_record))
        .route("/api/approvals", get(api::approvals))
        .route("/api/agenda", get(api::agenda))
        .route("/api/memories", get(api::memories))
        .route("/api/memories/{id}", get(api::memory))
        .route("/api/settings", get(api::settings))
        .route("/api/intents", axum::routing::post(api::post_intent))
        .route(
            "/api/events",
            get(live::events).layer(axum::Extension(streams)),
        )
        .with_state(host);
    let login = Router::new()
        .route(
            access::LOGIN_PATH,
            get(access::login_get).post(access::login_post),
        )
        .with_state(access);
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        )
        // Browsers ask for it unprompted; there is none.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .merge(api)
        .merge(login)
}

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no such page: {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_comes_from_the_flag_then_the_config_then_loopback() {
        let home = tempfile::tempdir().unwrap();
        let resolve = |flag| WebConfig::resolve(flag, false, home.path());
        assert_eq!(resolve(None).unwrap().addr.to_string(), "127.0.0.1:0");
        std::fs::write(
            home.path().join("intendant.toml"),
            "[daemon]\nweb = \"127.0.0.1:7878\"\n",
        )
        .unwrap();
        assert_eq!(resolve(None).unwrap().addr.to_string(), "127.0.0.1:7878");
        assert_eq!(
            resolve(Some("[::1]:9000")).unwrap().addr.to_string(),
            "[::1]:9000"
        );
        let err = resolve(Some("localhost")).unwrap_err();
        assert!(err.to_string().contains("not an address"), "{err}");
        std::fs::write(home.path().join("intendant.toml"), "[daemon]\nweb = 7878\n").unwrap();
        let err = resolve(None).unwrap_err();
        assert!(err.to_string().contains("must be a string"), "{err}");
    }
}

//! `browse`: fetch a public web page as text, without ever becoming a LAN client.
//!
//! Every hop (the initial URL and each redirect, followed by hand, at most
//! [`MAX_REDIRECTS`]) goes through [`netguard`]: the URL and host are checked, the name is
//! resolved *before* connecting, the whole answer must be public, and the HTTP client is then
//! pinned to exactly those addresses through its resolver hook, so a second, rebinding DNS
//! answer is never consulted. IP-literal hosts skip the resolver hook and are checked by
//! [`netguard::check_url`] itself. Ambient proxies (`HTTP_PROXY`...) are disabled on this
//! path, since a proxy would resolve and connect on our behalf.
//!
//! The one exception is a `proxy` session's own egress proxy, named by the controller through
//! [`EGRESS_PROXY_PORT_ENV`] (a control variable no command can set for a later runtime): inside
//! the session's network namespace it is the only way out, so every hop goes through it and the
//! proxy resolves and connects. Each URL is still checked here first (literals, local names,
//! schemes); the proxy then applies the session's host lists and judges the resolved answer with
//! the same address guard, so nothing here is relaxed.
//!
//! The body is read chunk by chunk and the stream dropped as soon as the [`BODY_CAP_BYTES`]
//! prefix is full; the rest is never buffered. HTML becomes readable text; other text types,
//! JSON and XML pass through; anything else is refused. The whole fetch, DNS included, is
//! bounded by [`TOTAL_TIMEOUT`].
//!
//! The resolver is injectable ([`HostResolver`]) so tests can feed hostile answers; whatever
//! it returns still goes through the policy. Nothing in a release build can relax the policy.

pub mod helper;
mod text;

use crate::netguard::{self, CheckedUrl, Host, NetGuardError};
use intendant_protocol::network::EGRESS_PROXY_PORT_ENV;
use intendant_protocol::runtime::BrowseResult;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

pub use text::ContentKind;

/// Bytes of the body read at most; the stream is dropped once this prefix is full.
pub const BODY_CAP_BYTES: usize = 50 * 1024;
/// Bound on the whole fetch: DNS, connects, redirects and body.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(15);
/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;
/// Width HTML is wrapped to when converted to text.
const TEXT_WIDTH: usize = 100;
/// `User-Agent` sent with every request.
const USER_AGENT: &str = concat!("intendant-runtime/", env!("CARGO_PKG_VERSION"), " (browse)");

/// Why a fetch failed.
#[derive(Debug, Error)]
pub enum BrowseError {
    /// The URL, a host name or an address was refused by the policy.
    #[error(transparent)]
    Refused(#[from] NetGuardError),
    /// Name resolution failed.
    #[error("DNS lookup for `{host}` failed: {message}")]
    Dns {
        /// The name looked up.
        host: String,
        /// The resolver's error.
        message: String,
    },
    /// The request itself failed (connect, TLS, protocol).
    #[error("request to {url} failed: {message}")]
    Http {
        /// The URL of the failing hop.
        url: String,
        /// The error chain.
        message: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    #[error("more than {MAX_REDIRECTS} redirects, last to {0}")]
    TooManyRedirects(String),
    /// A redirect whose `Location` is missing or unusable.
    #[error("redirect from {url} has an unusable Location header: {reason}")]
    BadRedirect {
        /// The URL that redirected.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The content is not text.
    #[error("refusing non-text content ({content_type}) from {url}")]
    Binary {
        /// The URL of the response.
        url: String,
        /// Its declared or sniffed type.
        content_type: String,
    },
    /// The whole fetch took longer than its bound.
    #[error("fetch timed out after {0:?}")]
    Timeout(Duration),
    /// The async runtime for the fetch could not start.
    #[error("cannot start the fetch runtime: {0}")]
    Runtime(String),
    /// The session's egress proxy was named badly (a controller bug, never a command's input).
    #[error("{EGRESS_PROXY_PORT_ENV} must be a port number, not {0:?}")]
    BadProxyPort(String),
}

/// Resolves host names for `browse`. Every answer is checked by the policy afterwards.
pub trait HostResolver: Send + Sync {
    /// All addresses of `host`.
    fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>>;
}

/// The system resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// A configured fetcher. [`browse`] uses the default one.
#[derive(Clone)]
pub struct Browser {
    resolver: Arc<dyn HostResolver>,
    timeout: Duration,
    /// The session's egress proxy (a loopback port inside its namespace), when it has one.
    egress_proxy: Option<u16>,
    /// Test-only: maps a checked public address to where the test server really listens.
    #[cfg(test)]
    dial: Option<fn(IpAddr) -> IpAddr>,
}

impl Default for Browser {
    fn default() -> Self {
        Browser::with_resolver(Arc::new(SystemResolver))
    }
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("timeout", &self.timeout)
            .field("egress_proxy", &self.egress_proxy)
            .finish_non_exhaustive()
    }
}

/// Fetches `url` as text, through the session's egress proxy when the controller named one.
pub fn browse(url: &str) -> Result<BrowseResult, BrowseError> {
    let browser = Browser::default();
    match std::env::var_os(EGRESS_PROXY_PORT_ENV) {
        None => browser.fetch(url),
        Some(value) => {
            let port = value
                .to_str()
                .and_then(|v| v.parse::<u16>().ok())
                .filter(|port| *port != 0)
                .ok_or_else(|| BrowseError::BadProxyPort(value.to_string_lossy().into_owned()))?;
            browser.through_egress_proxy(port).fetch(url)
        }
    }
}

impl Browser {
    /// A fetcher using `resolver` for names (its answers are still checked).
    pub fn with_resolver(resolver: Arc<dyn HostResolver>) -> Self {
        Browser {
            resolver,
            timeout: TOTAL_TIMEOUT,
            egress_proxy: None,
            #[cfg(test)]
            dial: None,
        }
    }

    /// Lowers the total timeout (it can never exceed [`TOTAL_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.min(TOTAL_TIMEOUT);
        self
    }

    /// Sends every hop through the session's egress proxy at `127.0.0.1:port` (inside the
    /// session's namespace), which resolves the name and judges the answer itself; no lookup is
    /// made here (the namespace has no route to a resolver).
    pub fn through_egress_proxy(mut self, port: u16) -> Self {
        self.egress_proxy = Some(port);
        self
    }

    /// Fetches `url` as text, on a private current-thread async runtime.
    pub fn fetch(&self, url: &str) -> Result<BrowseResult, BrowseError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BrowseError::Runtime(e.to_string()))?;
        // The timer must be created inside the runtime, hence the async block.
        let outcome =
            rt.block_on(async { tokio::time::timeout(self.timeout, self.fetch_async(url)).await });
        // A resolver thread may still be blocked in getaddrinfo; do not wait for it.
        rt.shutdown_background();
        outcome.unwrap_or(Err(BrowseError::Timeout(self.timeout)))
    }

    async fn fetch_async(&self, requested: &str) -> Result<BrowseResult, BrowseError> {
        let mut target = netguard::check_url(requested)?;
        let mut redirects = 0usize;
        loop {
            let pinned = self.pin(&target).await?;
            let client = self.client(&target, &pinned)?;
            let response = client
                .get(target.url.clone())
                .send()
                .await
                .map_err(|e| http_error(&target, &e))?;
            if !response.status().is_redirection() {
                return self.read(requested, &target, response).await;
            }
            let Some(location) = response.headers().get(reqwest::header::LOCATION) else {
                return self.read(requested, &target, response).await;
            };
            let bad = |reason: String| BrowseError::BadRedirect {
                url: target.url.to_string(),
                reason,
            };
            let location = location.to_str().map_err(|e| bad(e.to_string()))?;
            let next = target.url.join(location).map_err(|e| bad(e.to_string()))?;
            drop(response);
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(BrowseError::TooManyRedirects(next.to_string()));
            }
            target = netguard::check_parsed_url(next)?;
        }
    }

    /// The checked addresses to connect to for `target`.
    async fn pin(&self, target: &CheckedUrl) -> Result<Vec<IpAddr>, BrowseError> {
        if self.egress_proxy.is_some() {
            // The proxy resolves and judges the answer (the same guard); it connects, not us.
            return Ok(Vec::new());
        }
        let name = match &target.host {
            Host::Ip(ip) => return Ok(vec![*ip]),
            Host::Name(name) => name.clone(),
        };
        let resolver = Arc::clone(&self.resolver);
        let (lookup_name, port) = (name.clone(), target.port);
        let answers = tokio::task::spawn_blocking(move || resolver.lookup(&lookup_name, port))
            .await
            .map_err(|e| BrowseError::Runtime(e.to_string()))?
            .map_err(|e| BrowseError::Dns {
                host: name.clone(),
                message: e.to_string(),
            })?;
        netguard::check_answers(&name, &answers)?;
        Ok(answers)
    }

    /// A client for one hop: no automatic redirects; either no proxy and the resolver pinned
    /// to `pinned`, or the session's egress proxy alone.
    fn client(
        &self,
        target: &CheckedUrl,
        pinned: &[IpAddr],
    ) -> Result<reqwest::Client, BrowseError> {
        let builder = intendant_netguard::http::client_builder()
            .map_err(|e| BrowseError::Http {
                url: target.url.to_string(),
                message: e.to_string(),
            })?
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .user_agent(USER_AGENT)
            .timeout(self.timeout);
        if let Some(port) = self.egress_proxy {
            let proxy = reqwest::Proxy::all(format!("http://127.0.0.1:{port}"))
                .map_err(|e| http_error(target, &e))?;
            return builder
                .proxy(proxy)
                .build()
                .map_err(|e| http_error(target, &e));
        }
        let mut builder = builder;
        if let Host::Name(name) = &target.host {
            let addrs = pinned.iter().map(|ip| self.dial(*ip)).collect();
            builder = builder.dns_resolver(Arc::new(PinnedResolver {
                name: name.clone(),
                addrs,
            }));
        }
        builder.build().map_err(|e| http_error(target, &e))
    }

    #[cfg(test)]
    fn dial(&self, ip: IpAddr) -> IpAddr {
        self.dial.map_or(ip, |map| map(ip))
    }

    #[cfg(not(test))]
    fn dial(&self, ip: IpAddr) -> IpAddr {
        ip
    }

    /// Reads at most [`BODY_CAP_BYTES`] of the body, then drops the stream.
    async fn read(
        &self,
        requested: &str,
        target: &CheckedUrl,
        mut response: reqwest::Response,
    ) -> Result<BrowseResult, BrowseError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let declared = text::classify_content_type(content_type.as_deref());
        let binary = |ct: &str| BrowseError::Binary {
            url: target.url.to_string(),
            content_type: ct.to_owned(),
        };
        if declared == ContentKind::Binary {
            return Err(binary(content_type.as_deref().unwrap_or("unknown")));
        }
        let length = response.content_length();
        let mut body: Vec<u8> = Vec::new();
        let mut ended = false;
        while body.len() < BODY_CAP_BYTES {
            match response.chunk().await.map_err(|e| http_error(target, &e))? {
                Some(chunk) => body.extend_from_slice(&chunk),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        // Stop reading here: dropping the response closes the connection mid-body.
        drop(response);
        let over_cap =
            body.len() > BODY_CAP_BYTES || (!ended && length.is_none_or(|n| n > body.len() as u64));
        body.truncate(BODY_CAP_BYTES);
        let kind = match declared {
            ContentKind::Unknown => text::sniff(&body),
            ContentKind::Html | ContentKind::Text | ContentKind::Binary => declared,
        };
        let decoded = match kind {
            ContentKind::Binary => return Err(binary("sniffed binary")),
            ContentKind::Html | ContentKind::Text | ContentKind::Unknown => {
                text::decode(&body, content_type.as_deref())
            }
        };
        let readable = match kind {
            ContentKind::Html => text::html_to_text(&decoded, TEXT_WIDTH),
            ContentKind::Text | ContentKind::Unknown | ContentKind::Binary => decoded,
        };
        let (text, cut) = text::cap(readable, BODY_CAP_BYTES);
        Ok(BrowseResult {
            url: requested.to_owned(),
            final_url: target.url.to_string(),
            status,
            content_type,
            text,
            truncated: over_cap || cut,
        })
    }
}

#[cfg(test)]
impl Browser {
    /// Test-only: connect to `map(checked address)` instead of the checked address itself, so a
    /// public-looking answer can reach a loopback test server. Absent from non-test builds.
    fn with_dial(mut self, map: fn(IpAddr) -> IpAddr) -> Self {
        self.dial = Some(map);
        self
    }
}

/// The client's resolver for one hop: answers only the checked name, only with the checked
/// addresses (the client sets the port from the URL).
struct PinnedResolver {
    name: String,
    addrs: Vec<IpAddr>,
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let asked = name.as_str().trim_end_matches('.');
        let answer: Result<reqwest::dns::Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if asked.eq_ignore_ascii_case(&self.name) {
                let addrs: Vec<SocketAddr> = self
                    .addrs
                    .iter()
                    .map(|ip| SocketAddr::new(*ip, 0))
                    .collect();
                Ok(Box::new(addrs.into_iter()))
            } else {
                Err(format!("`{asked}` was not checked for this hop").into())
            };
        Box::pin(std::future::ready(answer))
    }
}

/// The error and its sources on one line (the URL is named once, by the variant).
fn http_error(target: &CheckedUrl, err: &reqwest::Error) -> BrowseError {
    let mut message = String::from(if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect error"
    } else if err.is_body() || err.is_decode() {
        "body error"
    } else {
        "request error"
    });
    if let Some(source) = std::error::Error::source(err) {
        message.push_str(": ");
        message.push_str(&intendant_netguard::http::error_chain(source));
    }
    BrowseError::Http {
        url: target.url.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests;

//! Who may talk to the dashboard: every request passes [`guard`] first.
//!
//! In order: the `Host` header must name this server (a loopback name or an IP literal with our
//! port, never another DNS name, which is what a DNS-rebinding page would send); an `Origin`
//! (or `Sec-Fetch-Site: cross-site`) from anywhere else is refused, and a cookie-authenticated
//! request that changes anything must carry our `Origin`; then the request needs the session
//! cookie or `Authorization: Bearer TOKEN`. Without them an API or MCP call gets a JSON 401, a page
//! the login page. Only a request that passed them holds its connection's place against
//! newcomers while it is answered. No response carries CORS headers, so no other origin can read one.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::api::ApiError;
use super::connections::{Place, until_sent};
use super::token::{self, TokenError};

/// Name of the session cookie.
pub const COOKIE_NAME: &str = "intendant_session";
/// Path of the login endpoint (the printed URL is `/login?token=...`).
pub const LOGIN_PATH: &str = "/login";
/// Where the listener serves MCP (`mcp::http` mounts it): a client there is a program, so it
/// gets a JSON 401, never the login page. Owned here, not by `mcp`, because MCP is mounted on
/// the dashboard's listener, not the other way round.
pub const MCP_PATH: &str = "/mcp";
/// Paths served without a login: the login endpoint and the static assets the login page uses.
const PUBLIC_PREFIX: &str = "/assets/";

/// The login state of one dashboard: the state root's token (re-read when the file changes, so
/// a rotation by another process takes effect at once) and the addresses it answers on.
#[derive(Debug)]
pub struct Access {
    home: PathBuf,
    local: SocketAddr,
    token: Mutex<CachedToken>,
}

#[derive(Debug)]
struct CachedToken {
    token: String,
    stamp: Option<FileStamp>,
}

/// What identifies one version of the token file (a rotation renames a new file over it).
type FileStamp = (u64, i64, i64, i64, i64);

impl Access {
    /// The access rules of a dashboard listening on `local` for the state root `home`; creates
    /// the token when there is none.
    pub fn new(home: PathBuf, local: SocketAddr) -> Result<Access, TokenError> {
        let stamp = file_stamp(&home);
        let token = token::load_or_create(&home)?;
        Ok(Access {
            home,
            local,
            token: Mutex::new(CachedToken { token, stamp }),
        })
    }

    /// The URL that logs a browser in (it carries the token).
    pub fn login_url(&self) -> Result<String, TokenError> {
        let host = match self.local.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        Ok(format!(
            "http://{host}:{}{LOGIN_PATH}?token={}",
            self.local.port(),
            self.current_token()?
        ))
    }

    /// Replaces the token (see [`token::rotate`]) and returns the new login URL.
    pub fn rotate(&self) -> Result<String, TokenError> {
        token::rotate(&self.home)?;
        self.login_url()
    }

    /// The token now in force (re-read when the file was replaced or removed).
    pub(crate) fn current_token(&self) -> Result<String, TokenError> {
        let mut cached = self
            .token
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = file_stamp(&self.home);
        if stamp.is_none() || stamp != cached.stamp {
            cached.token = token::load_or_create(&self.home)?;
            cached.stamp = file_stamp(&self.home);
        }
        Ok(cached.token.clone())
    }

    /// Whether `host` (a `Host` header) names this server.
    fn host_allowed(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        if port != self.local.port() {
            return false;
        }
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let Ok(ip) = name.parse::<IpAddr>() else {
            // Any other DNS name is what a rebinding attack sends.
            return false;
        };
        let bound = self.local.ip();
        !ip.is_unspecified() && (ip.is_loopback() || ip == bound || bound.is_unspecified())
    }
}

fn file_stamp(home: &std::path::Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(home.join(token::TOKEN_FILE)).ok()?;
    // The change time too: an edit in place that keeps the modification time (`touch -d`) still
    // moves it, and nobody can set it back.
    Some((
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    ))
}

/// `name` and port of a `Host` header (`name:port`, `[v6]:port`); `None` without a port, which
/// no client of ours sends (we never listen on port 80).
fn split_host(host: &str) -> Option<(&str, u16)> {
    let (name, port) = host.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let name = match name.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']')?,
        None if name.contains(':') => return None,
        None => name,
    };
    Some((name, port))
}

/// The checks every request passes, in the order the module doc gives.
pub async fn guard(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(host), None) => host.to_str().unwrap_or(""),
        _ => "",
    };
    if !access.host_allowed(host) {
        return ApiError::forbidden("the Host header does not name this dashboard").into_response();
    }
    let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
    if let Some(origin) = origin
        && origin != format!("http://{host}")
    {
        return ApiError::forbidden("requests from another origin are refused").into_response();
    }
    if headers
        .get("sec-fetch-site")
        .is_some_and(|s| s.as_bytes() == b"cross-site")
    {
        return ApiError::forbidden("cross-site requests are refused").into_response();
    }
    let path = request.uri().path();
    if path == LOGIN_PATH || path.starts_with(PUBLIC_PREFIX) {
        return with_security_headers(next.run(request).await);
    }
    let token = match access.current_token() {
        Ok(token) => token,
        Err(_) => return ApiError::internal("the web token cannot be read").into_response(),
    };
    let by_bearer = bearer(headers).is_some_and(|b| token::same_secret(b, &token));
    let by_cookie = !by_bearer
        && cookie(headers, COOKIE_NAME)
            .is_some_and(|c| token::same_secret(c, &token::session_cookie_value(&token)));
    if !by_bearer && !by_cookie {
        return unauthorized(path, false);
    }
    let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD);
    if by_cookie && changes_state && origin.is_none() {
        return ApiError::forbidden("a browser request that changes state must carry its Origin")
            .into_response();
    }
    // Only now may the request keep its connection's place from a newcomer.
    let working = request.extensions().get::<Place>().map(Place::begin);
    let response = with_security_headers(next.run(request).await);
    match working {
        Some(working) => until_sent(working, response),
        None => response,
    }
}

/// `?token=` of the login URL, or the login form's field.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: Option<String>,
}

/// `GET /login?token=T`: the printed URL. A right token sets the cookie and redirects to `/`
/// (which drops the token from the address bar); no token shows the login form.
pub async fn login_get(
    State(access): State<Arc<Access>>,
    Query(form): Query<LoginForm>,
) -> Response {
    login(&access, form.token.as_deref())
}

/// `POST /login` with the login form.
pub async fn login_post(
    State(access): State<Arc<Access>>,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    login(&access, form.token.as_deref())
}

fn login(access: &Access, given: Option<&str>) -> Response {
    let Some(given) = given else {
        return unauthorized(LOGIN_PATH, false);
    };
    let token = match access.current_token() {
        Ok(token) => token,
        Err(_) => return ApiError::internal("the web token cannot be read").into_response(),
    };
    if !token::same_secret(given.trim(), &token) {
        return unauthorized(LOGIN_PATH, true);
    }
    let cookie = format!(
        "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/",
        token::session_cookie_value(&token)
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    with_security_headers(response)
}

/// 401: JSON for the API, the login page for everything else.
fn unauthorized(path: &str, wrong_token: bool) -> Response {
    if path.starts_with("/api/") || path == MCP_PATH {
        return ApiError::unauthorized().into_response();
    }
    let note = if wrong_token {
        "<p class=\"error\">That token is not the current one.</p>"
    } else {
        ""
    };
    let page = LOGIN_PAGE.replace("<!--note-->", note);
    let mut response = (StatusCode::UNAUTHORIZED, page).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    with_security_headers(response)
}

const LOGIN_PAGE: &str = include_str!("assets/login.html");

/// Headers on every answer: no sniffing, no framing, no referrer (the login URL carries the
/// token), nothing cached, scripts and styles only from this origin.
fn with_security_headers(mut response: Response<Body>) -> Response<Body> {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(addr: &str) -> (tempfile::TempDir, Access) {
        let home = tempfile::tempdir().unwrap();
        let access = Access::new(home.path().to_path_buf(), addr.parse().unwrap()).unwrap();
        (home, access)
    }

    #[test]
    fn hosts_that_name_this_server() {
        let (_h, loopback) = access("127.0.0.1:4000");
        for ok in [
            "127.0.0.1:4000",
            "localhost:4000",
            "LOCALHOST:4000",
            "[::1]:4000",
        ] {
            assert!(loopback.host_allowed(ok), "{ok}");
        }
        for bad in [
            "127.0.0.1:4001",
            "127.0.0.1",
            "evil.example:4000",
            "localhost.evil.example:4000",
            "10.0.0.2:4000",
            "",
            "::1:4000",
        ] {
            assert!(!loopback.host_allowed(bad), "{bad}");
        }
        let (_h, any) = access("0.0.0.0:4000");
        assert!(any.host_allowed("192.0.2.7:4000"));
        assert!(!any.host_allowed("rebind.example:4000"));
        assert!(!any.host_allowed("0.0.0.0:4000"));
    }

    #[test]
    fn a_rotation_by_another_process_is_seen() {
        let (home, access) = access("127.0.0.1:4000");
        let before = access.current_token().unwrap();
        let after = token::rotate(home.path()).unwrap();
        assert_ne!(before, after);
        assert_eq!(access.current_token().unwrap(), after);
        assert!(access.login_url().unwrap().ends_with(&after));
        // Edited in place with its modification time put back: seen by its change time.
        let file = home.path().join(token::TOKEN_FILE);
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        let edited = "e".repeat(after.len());
        std::fs::write(&file, &edited).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(access.current_token().unwrap(), edited);
    }
}

//! The dashboard of the built daemon: `intendant serve --web` and a bare `intendant --web`
//! print a login URL, the URL logs a browser in (the session cookie), the dashboard shows the
//! daemon's sessions, and a non-loopback address is refused without `--web-allow-remote`.
//! HTTP is spoken by hand over a loopback socket; nothing asserts on time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use serde_json::{Value, json};

use super::daemon::{World, stderr};
use super::sessions::text_turn;

/// The login URL a daemon printed, split into what a client needs.
pub(super) struct LoginUrl {
    pub(super) port: u16,
    /// `/login?token=...`
    path: String,
    pub(super) token: String,
}

impl LoginUrl {
    fn parse(line: &str) -> LoginUrl {
        let rest = line
            .trim()
            .strip_prefix("http://127.0.0.1:")
            .unwrap_or_else(|| panic!("not a loopback URL: {line:?}"));
        let (port, path) = rest.split_at(rest.find('/').expect("a path"));
        let token = path
            .strip_prefix("/login?token=")
            .unwrap_or_else(|| panic!("not a login URL: {line:?}"));
        assert!(!token.is_empty(), "{line:?}");
        LoginUrl {
            port: port.parse().unwrap(),
            path: path.to_owned(),
            token: token.to_owned(),
        }
    }
}

/// Starts the daemon with `args` (which serve the dashboard) and returns the URL it printed.
fn serve_web(world: &mut World, args: &[&str]) -> LoginUrl {
    let mut daemon = world.command(args);
    daemon.stderr(Stdio::null());
    spawn_web(world, daemon)
}

/// Spawns `daemon` (a command serving the dashboard) as `world`'s daemon and returns the URL it
/// printed on its stdout.
pub(super) fn spawn_web(world: &mut World, mut daemon: std::process::Command) -> LoginUrl {
    let mut child = daemon.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    world.daemon = Some(child);
    LoginUrl::parse(&line)
}

/// One answer of the dashboard.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `GET path` on 127.0.0.1:`port` with `headers`, over a fresh connection.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

pub(super) fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

#[test]
fn serve_web_prints_a_login_url_that_sets_the_session_cookie() {
    let mut world = World::new(json!([text_turn("Hello from the model.")]));
    let url = serve_web(&mut world, &["serve", "--web"]);

    let anonymous = get(url.port, "/api/sessions", &[]);
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let page = get(url.port, "/", &[]);
    assert_eq!(page.status, 401);
    assert!(page.body.contains("<form"), "the login page: {}", page.body);
    let wrong = get(url.port, "/login?token=not-the-token", &[]);
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());

    let login = get(url.port, &url.path, &[]);
    assert_eq!(login.status, 303, "{}", login.body);
    assert_eq!(
        login.header("location"),
        Some("/"),
        "the token leaves the address bar"
    );
    let set_cookie = login.header("set-cookie").expect("a session cookie");
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    assert!(
        !cookie.contains(&url.token),
        "the cookie is not the token itself: {cookie}"
    );
    let cookie = [("Cookie", cookie.as_str())];

    let index = get(url.port, "/", &cookie);
    assert_eq!(index.status, 200);
    assert!(
        index
            .header("content-type")
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        index.headers
    );

    // The dashboard and the control socket are one daemon: a session started by ctl is listed.
    let id = world.start("say hello", &[]);
    world.wait_status(&id, "idle");
    let sessions = get(url.port, "/api/sessions", &cookie);
    assert_eq!(sessions.status, 200, "{}", sessions.body);
    let listed = sessions.json();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {listed}"));
    assert_eq!(row["status"], "idle");
    let events = get(url.port, &format!("/api/sessions/{id}/events"), &cookie).json();
    assert!(
        events.to_string().contains("Hello from the model."),
        "{events}"
    );
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn a_bare_intendant_web_is_the_daemon_on_the_configured_address() {
    let mut world = World::new(json!([]));
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    std::fs::create_dir_all(world.home()).unwrap();
    std::fs::write(
        world.home().join("intendant.toml"),
        format!("[daemon]\nweb = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let url = serve_web(&mut world, &["--web"]);
    assert_eq!(url.port, port, "[daemon] web is where it listens");
    let bearer = format!("Bearer {}", url.token);
    let approvals = get(url.port, "/api/approvals", &[("Authorization", &bearer)]);
    assert_eq!(approvals.status, 200, "{}", approvals.body);
    assert_eq!(approvals.json(), json!([]));
    let status = world.command(&["ctl", "status"]).output().unwrap();
    assert!(status.status.success(), "{}", stderr(&status));
    assert_eq!(world.stop_daemon(), 0);
}

#[test]
fn a_non_loopback_address_needs_web_allow_remote() {
    let world = World::new(json!([]));
    for args in [
        &["serve", "--web", "0.0.0.0:0"][..],
        &["--web", "0.0.0.0:0"][..],
    ] {
        let out = world.command(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--web-allow-remote"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty(), "no login URL printed");
    }
    let out = world
        .command(&["serve", "--web", "localhost"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not an address"), "{}", stderr(&out));
    let out = world
        .command(&["serve", "--web-allow-remote"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a usage error: {}",
        stderr(&out)
    );
}

//! `browse` against a local HTTP server that counts hits. The resolver is scripted; the
//! test-only dial map sends the one public-looking address [`PUBLIC`] to 127.0.0.1, so the
//! success path works without traffic leaving the machine, while every other address (the
//! hostile answers) is dialled as-is and would show up as a hit if the policy let it through.

use super::*;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};

const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const SITE: &str = "site.example.org";

fn dial_public_to_loopback(ip: IpAddr) -> IpAddr {
    if ip == PUBLIC { LOOPBACK } else { ip }
}

enum Reply {
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    Endless,
    Silent,
}

fn ok(content_type: &str, body: &str) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("Content-Type".into(), content_type.into())],
        body: body.as_bytes().to_vec(),
    }
}

fn redirect(location: &str) -> Reply {
    Reply::Full {
        status: 302,
        headers: vec![("Location".into(), location.into())],
        body: Vec::new(),
    }
}

type Handler = Box<dyn Fn(&str) -> Reply + Send + Sync>;

struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
    /// Bytes the endless reply wrote before the client went away, once it has.
    endless_done: mpsc::Receiver<usize>,
}

impl Server {
    fn start(handler: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let (done_tx, endless_done) = mpsc::channel();
        let handler: Arc<Handler> = Arc::new(Box::new(handler));
        let counter = Arc::clone(&hits);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let (handler, done_tx) = (Arc::clone(&handler), done_tx.clone());
                std::thread::spawn(move || serve(stream, &handler, &done_tx));
            }
        });
        Server {
            port,
            hits,
            endless_done,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
}

fn serve(stream: TcpStream, handler: &Handler, done: &mpsc::Sender<usize>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap_or_default();
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let mut out = stream;
    match handler(&path) {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("Connection: close\r\n\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(&body);
        }
        Reply::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
            let mut sent = 0usize;
            if out.write_all(head.as_bytes()).is_ok() {
                let chunk = [b'a'; 8192];
                while out.write_all(&chunk).is_ok() {
                    sent += chunk.len();
                }
            }
            let _ = done.send(sent);
        }
        Reply::Silent => {
            // Hold the connection open without answering until the client gives up.
            let mut buf = [0u8; 1];
            let _ = std::io::Read::read(&mut reader, &mut buf);
        }
    }
}

/// Answers each name with the next scripted answer (the last one repeats) and counts lookups.
#[derive(Default)]
struct ScriptedResolver {
    answers: Mutex<HashMap<String, VecDeque<Vec<IpAddr>>>>,
    lookups: AtomicUsize,
}

impl ScriptedResolver {
    fn with(entries: &[(&str, &[&[IpAddr]])]) -> Arc<ScriptedResolver> {
        let r = ScriptedResolver::default();
        for (name, answers) in entries {
            let queue = answers.iter().map(|a| a.to_vec()).collect();
            r.answers.lock().unwrap().insert((*name).to_owned(), queue);
        }
        Arc::new(r)
    }
}

impl HostResolver for ScriptedResolver {
    fn lookup(&self, host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let mut all = self.answers.lock().unwrap();
        let queue = all
            .get_mut(host)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "NXDOMAIN"))?;
        let answer = if queue.len() > 1 {
            queue.pop_front()
        } else {
            queue.front().cloned()
        };
        Ok(answer.unwrap_or_default())
    }
}

fn browser(resolver: Arc<ScriptedResolver>) -> Browser {
    Browser::with_resolver(resolver).with_dial(dial_public_to_loopback)
}

fn site() -> Arc<ScriptedResolver> {
    ScriptedResolver::with(&[(SITE, &[&[PUBLIC]])])
}

#[test]
fn html_page_is_fetched_as_readable_text() {
    let server = Server::start(|_| {
        ok(
            "text/html; charset=utf-8",
            "<h1>Title</h1><p>Body &amp; soul</p>",
        )
    });
    let url = server.url(SITE, "/page");
    let got = browser(site()).fetch(&url).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.final_url, url);
    assert!(
        got.text.contains("Title") && got.text.contains("Body & soul"),
        "{}",
        got.text
    );
    assert!(!got.text.contains("<p>"));
    assert!(!got.truncated);
    assert_eq!(server.hits(), 1);
}

#[test]
fn a_deeply_nested_page_is_flattened_not_fatal() {
    // 50 KiB of nested lists used to overflow the converter's stack and abort the runtime.
    let server = Server::start(|_| {
        let mut page = "<ul><li>".repeat(6000);
        page.push_str("the bottom");
        ok("text/html", &page)
    });
    let got = browser(site()).fetch(&server.url(SITE, "/")).unwrap();
    assert_eq!(got.text, "the bottom");
}

#[test]
fn json_and_plain_text_pass_through() {
    let server = Server::start(|p| match p {
        "/j" => ok("application/json", r#"{"a":[1,2]}"#),
        _ => ok("text/plain", "<b>not html</b>"),
    });
    let b = browser(site());
    assert_eq!(
        b.fetch(&server.url(SITE, "/j")).unwrap().text,
        r#"{"a":[1,2]}"#
    );
    assert_eq!(
        b.fetch(&server.url(SITE, "/t")).unwrap().text,
        "<b>not html</b>"
    );
}

#[test]
fn binary_content_is_refused_declared_or_sniffed() {
    let server = Server::start(|p| match p {
        "/png" => ok("image/png", "\u{89}PNG"),
        _ => Reply::Full {
            status: 200,
            headers: Vec::new(),
            body: b"\x7fELF\x02\x01\x01\0\0\0\0".to_vec(),
        },
    });
    let b = browser(site());
    for path in ["/png", "/elf"] {
        let err = b.fetch(&server.url(SITE, path)).unwrap_err();
        assert!(matches!(err, BrowseError::Binary { .. }), "{path}: {err}");
    }
}

#[test]
fn never_ending_body_is_capped_and_the_stream_dropped() {
    let server = Server::start(|_| Reply::Endless);
    let got = browser(site()).fetch(&server.url(SITE, "/")).unwrap();
    assert!(got.truncated);
    assert_eq!(got.text.len(), BODY_CAP_BYTES);
    // The server only stops writing when the client has closed the connection; a generous
    // bound guards against a hang, it does not measure speed.
    let sent = server
        .endless_done
        .recv_timeout(Duration::from_secs(30))
        .unwrap();
    assert!(sent >= BODY_CAP_BYTES);
}

#[test]
fn same_host_redirects_are_followed_and_rechecked() {
    let server = Server::start(|p| match p {
        "/a" => redirect("/b"),
        _ => ok("text/plain", "final"),
    });
    let got = browser(site()).fetch(&server.url(SITE, "/a")).unwrap();
    assert_eq!(got.text, "final");
    assert_eq!(got.final_url, server.url(SITE, "/b"));
    assert_eq!(server.hits(), 2);
}

#[test]
fn redirect_to_a_private_address_is_refused_before_connecting() {
    let inner = Server::start(|_| ok("text/plain", "internal secret"));
    let target = inner.url("127.0.0.1", "/admin");
    let outer = Server::start(move |_| redirect(&target));
    let err = browser(site()).fetch(&outer.url(SITE, "/")).unwrap_err();
    assert!(matches!(err, BrowseError::Refused(_)), "{err}");
    assert_eq!(inner.hits(), 0);
}

#[test]
fn dns_rebinding_between_hops_is_refused() {
    // First answer public, second (for the redirect hop) loopback: pinning means the second
    // hop is re-resolved and re-checked, never connected on trust.
    let resolver = ScriptedResolver::with(&[(SITE, &[&[PUBLIC], &[LOOPBACK]])]);
    let server = Server::start(|p| match p {
        "/" => redirect("/again"),
        _ => ok("text/plain", "rebound"),
    });
    let err = browser(resolver).fetch(&server.url(SITE, "/")).unwrap_err();
    assert!(matches!(err, BrowseError::Refused(_)), "{err}");
    assert_eq!(server.hits(), 1, "the rebound hop must never connect");
}

#[test]
fn mixed_public_and_private_answer_is_refused_as_a_whole() {
    let server = Server::start(|_| ok("text/plain", "x"));
    for answer in [[PUBLIC, LOOPBACK], [LOOPBACK, PUBLIC]] {
        let resolver = ScriptedResolver::with(&[(SITE, &[&answer])]);
        let err = browser(resolver).fetch(&server.url(SITE, "/")).unwrap_err();
        assert!(matches!(err, BrowseError::Refused(_)), "{err}");
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn more_than_five_redirects_are_refused() {
    let server = Server::start(|p| {
        let n: u32 = p.trim_start_matches('/').parse().unwrap_or(0);
        redirect(&format!("/{}", n + 1))
    });
    let err = browser(site()).fetch(&server.url(SITE, "/0")).unwrap_err();
    assert!(matches!(err, BrowseError::TooManyRedirects(_)), "{err}");
    assert_eq!(server.hits(), MAX_REDIRECTS + 1);
}

#[test]
fn redirect_to_another_scheme_is_refused() {
    let server = Server::start(|_| redirect("file:///etc/passwd"));
    let err = browser(site()).fetch(&server.url(SITE, "/")).unwrap_err();
    assert!(
        matches!(err, BrowseError::Refused(NetGuardError::Scheme(_))),
        "{err}"
    );
}

#[test]
fn local_names_and_literals_are_refused_without_a_lookup_or_a_hit() {
    let server = Server::start(|_| ok("text/plain", "x"));
    let resolver = site();
    let b = browser(Arc::clone(&resolver));
    for host in [
        "localhost",
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "intranet",
        "x.localhost",
    ] {
        let err = b.fetch(&server.url(host, "/")).unwrap_err();
        assert!(matches!(err, BrowseError::Refused(_)), "{host}: {err}");
    }
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0);
    assert_eq!(server.hits(), 0);
}

#[test]
fn dns_failure_and_empty_answers_are_errors() {
    let resolver = ScriptedResolver::with(&[("empty.example.org", &[&[]])]);
    let b = browser(resolver);
    assert!(matches!(
        b.fetch("http://nx.example.org/"),
        Err(BrowseError::Dns { .. })
    ));
    assert!(matches!(
        b.fetch("http://empty.example.org/"),
        Err(BrowseError::Refused(NetGuardError::NoAddress(_)))
    ));
}

#[test]
fn a_silent_server_hits_the_total_timeout() {
    let server = Server::start(|_| Reply::Silent);
    let b = browser(site()).with_timeout(Duration::from_millis(300));
    let err = b.fetch(&server.url(SITE, "/")).unwrap_err();
    assert!(
        matches!(err, BrowseError::Timeout(_) | BrowseError::Http { .. }),
        "{err}"
    );
    assert_eq!(
        b.with_timeout(Duration::from_secs(3600)).timeout,
        TOTAL_TIMEOUT
    );
}

/// Env var through which [`ambient_proxy_variables_are_ignored`] passes the origin port.
const PROXY_CHILD_PORT: &str = "INTENDANT_TEST_BROWSE_ORIGIN_PORT";

#[test]
#[ignore = "run by ambient_proxy_variables_are_ignored in a child process with proxy variables"]
fn proxy_child() {
    let Ok(port) = std::env::var(PROXY_CHILD_PORT) else {
        return;
    };
    let got = browser(site())
        .fetch(&format!("http://{SITE}:{port}/"))
        .unwrap();
    assert_eq!(got.text, "direct");
}

#[test]
fn ambient_proxy_variables_are_ignored() {
    // Proxy variables can only be set safely for a fresh process: re-run this test binary on
    // `proxy_child` with every proxy variable pointing at a counting fake proxy.
    let origin = Server::start(|_| ok("text/plain", "direct"));
    let proxy = Server::start(|_| ok("text/plain", "via proxy"));
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "browse::tests::proxy_child",
        "--ignored",
        "--nocapture",
    ])
    .env(PROXY_CHILD_PORT, origin.port.to_string())
    .env_remove("NO_PROXY")
    .env_remove("no_proxy");
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env(var, &proxy_url);
    }
    let out = cmd.output().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log.contains("1 passed"), "the child must really run: {log}");
    assert_eq!(proxy.hits(), 0);
    assert_eq!(origin.hits(), 1);
}

#[test]
fn in_a_proxy_session_every_hop_goes_through_its_egress_proxy_without_a_lookup() {
    // The fake egress proxy sees absolute URIs (plain HTTP through a proxy); a redirect to a
    // local name is refused here, before the proxy is asked again.
    let proxy = Server::start(|target| match target {
        "http://site.example.org/start" => redirect("http://docs.example.org/page"),
        "http://docs.example.org/page" => redirect("http://nas.local/"),
        other => ok("text/plain", &format!("proxy got {other}")),
    });
    let resolver = site();
    let b = Browser::with_resolver(resolver.clone()).through_egress_proxy(proxy.port);
    let got = b.fetch("http://www.example.org/x?y=1").unwrap();
    assert_eq!(got.text, "proxy got http://www.example.org/x?y=1");
    let err = b.fetch("http://site.example.org/start").unwrap_err();
    assert!(matches!(err, BrowseError::Refused(_)), "{err}");
    assert_eq!(
        proxy.hits(),
        3,
        "two hops went through, the refused one never"
    );
    for refused in ["http://localhost/", "http://127.0.0.1/", "http://10.0.0.5/"] {
        assert!(matches!(b.fetch(refused), Err(BrowseError::Refused(_))));
    }
    assert_eq!(proxy.hits(), 3);
    assert_eq!(
        resolver.lookups.load(Ordering::SeqCst),
        0,
        "the proxy resolves, not browse"
    );
}

#[test]
fn a_refusal_of_the_egress_proxy_reaches_the_model() {
    let proxy = Server::start(|_| Reply::Full {
        status: 403,
        headers: vec![("Content-Type".into(), "text/plain".into())],
        body: b"intendant egress proxy: www.example.org is in no allow list".to_vec(),
    });
    let got = Browser::with_resolver(site())
        .through_egress_proxy(proxy.port)
        .fetch("http://www.example.org/")
        .unwrap();
    assert_eq!(got.status, 403);
    assert!(got.text.contains("in no allow list"), "{}", got.text);
}

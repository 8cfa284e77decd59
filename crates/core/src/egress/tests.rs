//! The egress proxy attacked and used on 127.0.0.1 only: its handoff socket is on a tempdir,
//! the relay port handed over there is on 127.0.0.1, the hosts it reaches are the test's own
//! listeners (opened with `allow_addresses`), and names are resolved from a fixed table, so no
//! test asks a name server.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg};
use intendant_protocol::network::EgressVerdict;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::approval::ApprovalPolicy;

mod bounds;
mod tunnels;
use crate::bus::EventBus;
use crate::egress::EgressSettings;

/// What the fake session answers and what it saw.
struct Fake {
    answer: AskOutcome,
    asked: Mutex<Vec<(String, u16)>>,
    records: Mutex<Vec<EgressRecord>>,
}

impl EgressHooks for Fake {
    fn ask(self: Arc<Self>, host: String, port: u16) -> BoxFuture<'static, AskOutcome> {
        self.asked.lock().unwrap().push((host, port));
        let answer = self.answer.clone();
        Box::pin(async move { answer })
    }

    fn record(&self, record: EgressRecord) {
        self.records.lock().unwrap().push(record);
    }
}

struct Harness {
    proxy: EgressProxy,
    fake: Arc<Fake>,
    /// The relay port handed over, as a session's holder hands its own.
    relay: std::net::SocketAddr,
    /// The link it was handed over on, kept open for a test to hand more.
    link: std::os::unix::net::UnixStream,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn start(settings: EgressSettings, answer: AskOutcome, limits: ProxyLimits) -> Harness {
        Harness::with_lookup(settings, answer, limits, BTreeMap::new())
    }

    fn with_lookup(
        settings: EgressSettings,
        answer: AskOutcome,
        limits: ProxyLimits,
        names: BTreeMap<String, Vec<IpAddr>>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let fake = Arc::new(Fake {
            answer,
            asked: Mutex::new(Vec::new()),
            records: Mutex::new(Vec::new()),
        });
        let proxy = EgressProxy::start(
            &dir.path().join(HANDOFF_NAME),
            EgressPolicy::new(&settings).unwrap(),
            Arc::clone(&fake) as Arc<dyn EgressHooks>,
            limits,
            Lookup::Table(names),
            &tokio::runtime::Handle::current(),
        )
        .unwrap();
        let relay = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let link = std::os::unix::net::UnixStream::connect(proxy.handoff_socket()).unwrap();
        hand_over(&link, &relay);
        Harness {
            proxy,
            fake,
            relay: relay.local_addr().unwrap(),
            link,
            _dir: dir,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.relay).await.unwrap()
    }

    /// Sends `request` and reads until the proxy closes.
    async fn exchange(&self, request: &[u8]) -> String {
        let mut conn = self.connect().await;
        conn.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut out))
            .await
            .expect("the proxy answered and closed")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn records(&self, n: usize) -> Vec<EgressRecord> {
        for _ in 0..500 {
            let records = self.fake.records.lock().unwrap().clone();
            if records.len() >= n {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("fewer than {n} records");
    }

    fn asked(&self) -> Vec<(String, u16)> {
        self.fake.asked.lock().unwrap().clone()
    }
}

fn allow(hosts: &[&str], ranges: &[&str]) -> EgressSettings {
    EgressSettings {
        allow: hosts.iter().map(|h| h.to_string()).collect(),
        allow_addresses: ranges.iter().map(|r| r.to_string()).collect(),
        ..EgressSettings::default()
    }
}

fn refused() -> AskOutcome {
    AskOutcome::Refused("the test refuses".into())
}

/// A listener that echoes every connection and counts them.
async fn echo_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut rd, mut wr) = conn.split();
                let _ = tokio::io::copy(&mut rd, &mut wr).await;
            });
        }
    });
    (port, accepted)
}

/// A one-request HTTP server: hands the head it got to the test and answers `ok`.
async fn http_server() -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while http::head_end(&buf).is_none() {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        }
    });
    (port, rx)
}

#[test]
fn host_patterns_match_exactly_or_below_a_wildcard() {
    let exact: HostPattern = "Crates.IO.".parse().unwrap();
    assert!(exact.matches("crates.io"));
    assert!(!exact.matches("static.crates.io"));
    assert!(!exact.matches("evilcrates.io"));
    let wild: HostPattern = "*.npmjs.org".parse().unwrap();
    assert!(wild.matches("registry.npmjs.org"));
    assert!(wild.matches("a.b.npmjs.org"));
    assert!(
        !wild.matches("npmjs.org"),
        "the wildcard is below the domain"
    );
    assert!(!wild.matches("evilnpmjs.org"));
    assert!(!wild.matches("npmjs.org.evil.example"));
    assert_eq!(wild.to_string(), "*.npmjs.org");
    let ip: HostPattern = "0x7f.1".parse().unwrap();
    assert!(
        ip.matches("127.0.0.1"),
        "an address literal in its plain form"
    );
    assert_eq!(normalize_host("[::1]").unwrap(), "::1");
    assert_eq!(normalize_host("2130706433").unwrap(), "127.0.0.1");
    assert_eq!(normalize_host("Pkg.Example.").unwrap(), "pkg.example");
    for bad in ["", "a..b", "a b.c", "x/y.z", "é.example"] {
        assert!(normalize_host(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bad_patterns_ranges_and_host_entries_are_refused_naming_the_entry() {
    let err = |s: EgressSettings| EgressPolicy::new(&s).unwrap_err();
    for (pattern, why) in [
        ("*.org", "top-level"),
        ("*", "host pattern"),
        ("a.*.org", "first label"),
        ("*.", "host pattern"),
        ("exa mple.com", "host pattern"),
        ("", "host pattern"),
    ] {
        let e = err(allow(&[pattern], &[]));
        assert!(
            e.contains("[sandbox.network] allow") && e.contains(why),
            "{pattern}: {e}"
        );
    }
    let e = err(EgressSettings {
        deny: vec!["**.x.y".into()],
        ..EgressSettings::default()
    });
    assert!(e.contains("[sandbox.network] deny"), "{e}");
    let e = err(allow(&[], &["10.0.0.0/8", "everything"]));
    assert!(
        e.contains("allow_addresses") && e.contains("everything"),
        "{e}"
    );
    let e = err(allow(&[], &["0.0.0.0/0"]));
    assert!(e.contains("every address"), "{e}");
    let hosts = |name: &str, addr: &str| EgressSettings {
        hosts: BTreeMap::from([(name.to_owned(), addr.to_owned())]),
        ..EgressSettings::default()
    };
    let e = err(hosts("pkg.internal", "10.20.0.5.1"));
    assert!(e.contains("not an IP address"), "{e}");
    let e = err(hosts("bad name", "10.20.0.5"));
    assert!(e.contains("not a host name"), "{e}");
}

#[test]
fn deny_comes_first_then_allow_then_the_default_list() {
    let policy = EgressPolicy::new(&EgressSettings {
        allow: vec!["*.corp.example".into(), "crates.io".into()],
        deny: vec!["crates.io".into(), "bad.corp.example".into()],
        ..EgressSettings::default()
    })
    .unwrap();
    assert!(
        matches!(policy.verdict("crates.io"), HostVerdict::Denied(r) if r.contains("deny has \"crates.io\""))
    );
    assert!(matches!(
        policy.verdict("bad.corp.example"),
        HostVerdict::Denied(_)
    ));
    assert!(
        matches!(policy.verdict("git.corp.example"), HostVerdict::Allowed(r) if r.contains("allow has \"*.corp.example\""))
    );
    assert!(
        matches!(policy.verdict("registry.npmjs.org"), HostVerdict::Allowed(r) if r.contains("default allow list"))
    );
    assert_eq!(policy.verdict("example.com"), HostVerdict::Unlisted);
    // Every default entry is an exact name that parses; turning the list off leaves none.
    for host in DEFAULT_ALLOW {
        assert!(
            matches!(
                policy.verdict(host),
                HostVerdict::Allowed(_) | HostVerdict::Denied(_)
            ),
            "{host}"
        );
    }
    let off = EgressPolicy::new(&EgressSettings {
        default_allow: Some(false),
        ..EgressSettings::default()
    })
    .unwrap();
    assert_eq!(off.verdict("github.com"), HostVerdict::Unlisted);
}

#[test]
fn proxy_heads_are_read_and_rewritten() {
    assert_eq!(
        parse_head(b"CONNECT crates.io:443 HTTP/1.1\r\nHost: crates.io:443\r\n\r\n").unwrap(),
        ProxyRequest::Connect {
            host: "crates.io".into(),
            port: 443
        }
    );
    assert_eq!(
        parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap(),
        ProxyRequest::Connect {
            host: "::1".into(),
            port: 8443
        }
    );
    let ProxyRequest::Forward { host, port, head } = parse_head(
        b"GET http://Pkg.Example:8080/simple/x?y=1#frag HTTP/1.1\r\nHost: pkg.example:8080\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
    )
    .unwrap() else {
        panic!("not a forward");
    };
    assert_eq!((host.as_str(), port), ("Pkg.Example", 8080));
    let head = String::from_utf8(head).unwrap();
    assert_eq!(
        head,
        "GET /simple/x?y=1 HTTP/1.1\r\nHost: pkg.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let ProxyRequest::Forward { port, head, .. } =
        parse_head(b"HEAD http://h.example HTTP/1.0\n\n").unwrap()
    else {
        panic!("not a forward");
    };
    assert_eq!(port, 80);
    assert!(
        String::from_utf8(head)
            .unwrap()
            .starts_with("HEAD / HTTP/1.0\r\nHost: h.example\r\n")
    );
    for (bad, why) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], "absolute http:// URL"),
        (b"GET https://x.example/ HTTP/1.1\r\n\r\n", "CONNECT"),
        (b"CONNECT x.example HTTP/1.1\r\n\r\n", "host:port"),
        (b"CONNECT x.example:0 HTTP/1.1\r\n\r\n", "not a port"),
        (b"CONNECT x.example:99999 HTTP/1.1\r\n\r\n", "not a port"),
        (
            b"CONNECT user:pw@x.example:443 HTTP/1.1\r\n\r\n",
            "credentials",
        ),
        (
            b"GET http://user@x.example/ HTTP/1.1\r\n\r\n",
            "credentials",
        ),
        (b"get http://x.example/ HTTP/1.1\r\n\r\n", "method"),
        (b"GET http://x.example/ HTTP/2\r\n\r\n", "HTTP/1.x"),
        (
            b"GET http://x.example/ HTTP/1.1 extra\r\n\r\n",
            "request line",
        ),
        (
            b"GET http://x.example/ HTTP/1.1\r\nno colon\r\n\r\n",
            "header line",
        ),
        (b"CONNECT [::1:443 HTTP/1.1\r\n\r\n", "unclosed"),
        (b"\xff\xfe\r\n\r\n", "not text"),
    ] {
        let e = parse_head(bad).unwrap_err();
        assert!(e.contains(why), "{:?}: {e}", String::from_utf8_lossy(bad));
    }
}

/// Sends `fd` over `link` as the holder does: one byte with `SCM_RIGHTS`.
fn hand_over(link: &std::os::unix::net::UnixStream, fd: impl AsFd) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [fd.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let byte = [0u8; 1];
    let sent = rustix::net::sendmsg(
        link,
        &[std::io::IoSlice::new(&byte)],
        &mut control,
        SendFlags::empty(),
    );
    assert_eq!(sent.unwrap(), 1);
}

/// Opens a `CONNECT` tunnel to `127.0.0.1:port` through `h` and reads the proxy's 200.
async fn tunnel(h: &Harness, port: u16) -> TcpStream {
    let mut conn = h.connect().await;
    conn.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut ok = vec![0u8; CONNECT_OK_LEN];
    conn.read_exact(&mut ok).await.unwrap();
    assert!(ok.starts_with(b"HTTP/1.1 200"), "{ok:?}");
    conn
}

#[tokio::test]
async fn an_allowed_tunnel_carries_bytes_both_ways_and_is_recorded() {
    let (port, accepted) = echo_server().await;
    let h = Harness::with_lookup(
        allow(&["echo.test"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits::default(),
        BTreeMap::from([("echo.test".to_owned(), vec!["127.0.0.1".parse().unwrap()])]),
    );
    let mut conn = h.connect().await;
    let req = format!("CONNECT echo.test:{port} HTTP/1.1\r\nHost: echo.test\r\n\r\nearly");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut got = vec![0u8; CONNECT_OK_LEN + 5];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        "HTTP/1.1 200 Connection established\r\n\r\nearly",
        "the bytes sent after the head went through first"
    );
    conn.write_all(b"hello").await.unwrap();
    let mut echo = [0u8; 5];
    conn.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"hello");
    conn.shutdown().await.unwrap();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).await.unwrap();
    let records = h.records(1).await;
    assert_eq!(records[0].host, "echo.test");
    assert_eq!(records[0].port, port);
    assert_eq!(records[0].verdict, EgressVerdict::Allowed);
    assert!(
        records[0].rule.contains("allow has \"echo.test\""),
        "{}",
        records[0].rule
    );
    assert_eq!((records[0].bytes_up, records[0].bytes_down), (10, 10));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert!(h.asked().is_empty(), "a listed host is never asked about");
}

const CONNECT_OK_LEN: usize = "HTTP/1.1 200 Connection established\r\n\r\n".len();

#[tokio::test]
async fn loopback_is_refused_by_the_address_guard_even_for_an_allowed_name() {
    let (port, accepted) = echo_server().await;
    let h = Harness::with_lookup(
        allow(
            &["localhost", "127.0.0.1", "0x7f.1", "[::ffff:127.0.0.1]"],
            &[],
        ),
        refused(),
        ProxyLimits::default(),
        BTreeMap::from([("localhost".to_owned(), vec!["127.0.0.1".parse().unwrap()])]),
    );
    for target in [
        "localhost",
        "127.0.0.1",
        "2130706433",
        "127.1",
        "[::ffff:127.0.0.1]",
    ] {
        let answer = h
            .exchange(format!("CONNECT {target}:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden"),
            "{target}: {answer}"
        );
        assert!(
            answer.contains("loopback") && answer.contains("allow_addresses"),
            "{target}: the body names the rule and the way to open it: {answer}"
        );
    }
    let answer = h
        .exchange(format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n").as_bytes())
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing reached the listener"
    );
    let records = h.records(6).await;
    assert!(records.iter().all(|r| r.verdict == EgressVerdict::Refused));
}

#[tokio::test]
async fn an_answer_with_one_private_address_is_refused_as_a_whole() {
    let (port, accepted) = echo_server().await;
    for addrs in [
        vec!["93.184.216.34", "127.0.0.1"],
        vec!["127.0.0.1", "93.184.216.34"],
        vec!["169.254.169.254"],
        vec!["10.1.2.3"],
        vec!["::1"],
        vec!["fe80::1"],
        vec!["224.0.0.1"],
    ] {
        let ips = addrs.iter().map(|a| a.parse().unwrap()).collect();
        let h = Harness::with_lookup(
            allow(&["rebind.example"], &[]),
            refused(),
            ProxyLimits::default(),
            BTreeMap::from([("rebind.example".to_owned(), ips)]),
        );
        let answer = h
            .exchange(format!("CONNECT rebind.example:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{addrs:?}: {answer}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unlisted_host_is_asked_before_any_lookup_and_a_refusal_is_a_403() {
    // The table is empty: had the proxy looked the name up, the answer would be a 502.
    let h = Harness::start(
        EgressSettings::default(),
        AskOutcome::Refused("denied by the user".into()),
        ProxyLimits::default(),
    );
    let answer = h
        .exchange(b"CONNECT unlisted.example:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{answer}");
    assert!(
        answer.contains("refused unlisted.example:443: denied by the user")
            && answer.contains("add \"unlisted.example\" to [sandbox.network] allow"),
        "{answer}"
    );
    assert_eq!(h.asked(), [("unlisted.example".to_owned(), 443)]);
    let records = h.records(1).await;
    assert_eq!(records[0].verdict, EgressVerdict::Refused);
    assert_eq!(records[0].rule, "denied by the user");
}

#[tokio::test]
async fn an_approved_host_named_by_the_hosts_map_gets_one_forwarded_request() {
    let (port, mut heads) = http_server().await;
    let h = Harness::start(
        EgressSettings {
            allow_addresses: vec!["127.0.0.1".into()],
            hosts: BTreeMap::from([("pkg.internal".to_owned(), "127.0.0.1".to_owned())]),
            ..EgressSettings::default()
        },
        AskOutcome::Allowed("approved by the test".into()),
        ProxyLimits::default(),
    );
    let answer = h
        .exchange(
            format!(
                "GET http://pkg.internal:{port}/simple/?q=1 HTTP/1.1\r\nHost: pkg.internal:{port}\r\nProxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok"),
        "{answer}"
    );
    let head = heads.recv().await.unwrap();
    assert_eq!(
        head,
        format!(
            "GET /simple/?q=1 HTTP/1.1\r\nHost: pkg.internal:{port}\r\nConnection: close\r\n\r\n"
        )
    );
    assert_eq!(
        h.asked(),
        [("pkg.internal".to_owned(), port)],
        "in neither list: asked"
    );
    let records = h.records(1).await;
    assert_eq!(records[0].verdict, EgressVerdict::Allowed);
    assert_eq!(records[0].rule, "approved by the test");
    assert_eq!(records[0].bytes_down, 40);
}

#[tokio::test]
async fn local_names_are_refused_without_asking() {
    let h = Harness::start(
        EgressSettings::default(),
        AskOutcome::Allowed("the test would allow".into()),
        ProxyLimits::default(),
    );
    for name in [
        "localhost",
        "printer.local",
        "metadata.google.internal",
        "intranet",
    ] {
        let answer = h
            .exchange(format!("CONNECT {name}:80 HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{name}: {answer}");
        assert!(answer.contains("[sandbox.network] hosts"), "{answer}");
    }
    // An unlisted address the guard refuses is refused unasked too.
    for literal in ["127.0.0.1", "169.254.169.254", "[::1]", "10.0.0.1"] {
        let answer = h
            .exchange(format!("CONNECT {literal}:80 HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{literal}: {answer}");
        assert!(answer.contains("allow_addresses"), "{answer}");
    }
    assert!(h.asked().is_empty());
}

#[tokio::test]
async fn garbage_gets_a_400_and_the_proxy_serves_on() {
    let (port, _) = echo_server().await;
    let h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits::default(),
    );
    let mut huge = b"GET http://x.example/ HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
    for garbage in [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
        b"hello proxy\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT a b c d\r\n\r\n",
        &huge,
    ] {
        let answer = h.exchange(garbage).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request"),
            "{:?}: {answer}",
            String::from_utf8_lossy(&garbage[..garbage.len().min(40)])
        );
        assert!(
            answer.contains("intendant egress proxy: bad request"),
            "{answer}"
        );
    }
    tunnel(&h, port).await;
}

#[tokio::test]
async fn an_unresolvable_host_is_a_502() {
    let h = Harness::start(
        allow(&["nowhere.example"], &[]),
        refused(),
        ProxyLimits::default(),
    );
    let answer = h
        .exchange(b"CONNECT nowhere.example:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 502 Bad Gateway"), "{answer}");
    assert!(
        answer.contains("nowhere.example does not resolve"),
        "{answer}"
    );
    assert_eq!(h.records(1).await[0].verdict, EgressVerdict::Failed);
}

#[tokio::test]
async fn the_connection_cap_answers_503_and_frees_its_slots() {
    let (port, _) = echo_server().await;
    let h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits {
            max_connections: 2,
            ..ProxyLimits::default()
        },
    );
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(tunnel(&h, port).await);
    }
    assert_eq!(h.proxy.open_connections(), 2);
    let answer = h.exchange(connect.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("2 connections open"), "{answer}");
    drop(open);
    for _ in 0..200 {
        if h.proxy.open_connections() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.proxy.open_connections(), 0);
    let mut conn = h.connect().await;
    conn.write_all(connect.as_bytes()).await.unwrap();
    let mut ok = vec![0u8; CONNECT_OK_LEN];
    conn.read_exact(&mut ok).await.unwrap();
    assert!(ok.starts_with(b"HTTP/1.1 200"));
}

#[tokio::test]
async fn a_silent_client_and_an_idle_tunnel_are_closed() {
    let (port, _) = echo_server().await;
    let h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        refused(),
        ProxyLimits {
            head_timeout: Duration::from_millis(200),
            idle_timeout: Duration::from_millis(300),
            ..ProxyLimits::default()
        },
    );
    let mut silent = h.connect().await;
    silent.write_all(b"CONNECT 127.0.0.1:").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408"));
    let mut idle = h.connect().await;
    idle.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut out))
        .await
        .expect("the idle tunnel was closed")
        .unwrap();
    assert_eq!(out.len(), CONNECT_OK_LEN);
}

#[tokio::test]
async fn shutting_down_closes_every_connection_and_removes_the_socket() {
    let (port, _) = echo_server().await;
    let mut h = Harness::start(
        allow(&["127.0.0.1"], &["127.0.0.1/32"]),
        AskOutcome::Allowed("x".into()),
        ProxyLimits::default(),
    );
    let mut tunnels = Vec::new();
    for _ in 0..5 {
        tunnels.push(tunnel(&h, port).await);
    }
    let handoff = h.proxy.handoff_socket().to_path_buf();
    h.proxy.shutdown();
    assert!(!handoff.exists());
    for mut conn in tunnels {
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut out))
            .await
            .expect("closed at the session's end");
        assert!(read.is_err() || out.is_empty());
    }
    assert!(TcpStream::connect(h.relay).await.is_err());
}

#[tokio::test]
async fn thousands_of_connections_leave_nothing_open() {
    let h = Harness::start(
        EgressSettings::default(),
        refused(),
        ProxyLimits {
            max_connections: 16,
            ..ProxyLimits::default()
        },
    );
    let relay = h.relay;
    let mut tasks = tokio::task::JoinSet::new();
    let mut answers = Vec::new();
    for i in 0..2000 {
        tasks.spawn(async move {
            let Ok(mut conn) = TcpStream::connect(relay).await else {
                return String::new();
            };
            let request = if i % 2 == 0 {
                "CONNECT unlisted.example:443 HTTP/1.1\r\n\r\n".to_owned()
            } else {
                "garbage garbage\r\n\r\n".to_owned()
            };
            let _ = conn.write_all(request.as_bytes()).await;
            let mut out = Vec::new();
            let _ = conn.read_to_end(&mut out).await;
            String::from_utf8_lossy(&out).into_owned()
        });
        if tasks.len() >= 64
            && let Some(answer) = tasks.join_next().await
        {
            answers.push(answer.unwrap());
        }
    }
    while let Some(answer) = tasks.join_next().await {
        answers.push(answer.unwrap());
    }
    // Each client got its answer, or (past the cap and the busy answers) was closed unanswered.
    assert!(
        answers
            .iter()
            .all(|a| a.is_empty() || a.starts_with("HTTP/1.1 "))
    );
    assert_eq!(answers.len(), 2000);
    assert!(
        answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 403"))
            .count()
            > 100
    );
    for _ in 0..200 {
        if h.proxy.open_connections() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.proxy.open_connections(), 0);
}

#[test]
fn the_proxy_variables_replace_the_hosts_own() {
    let env = vec![
        ("PATH".into(), "/bin".into()),
        ("https_proxy".into(), "http://corp:3128".into()),
        ("No_Proxy".into(), "*".into()),
    ];
    let env = with_proxy_env(env, 41000);
    let get = |name: &str| {
        env.iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.to_str().unwrap())
            .collect::<Vec<_>>()
    };
    for name in PROXY_ENV_VARS {
        assert_eq!(get(name), ["http://127.0.0.1:41000"], "{name}");
    }
    assert_eq!(get("NO_PROXY"), [NO_PROXY_VALUE]);
    assert_eq!(get("no_proxy"), [NO_PROXY_VALUE]);
    assert!(get("No_Proxy").is_empty());
    assert_eq!(get("PATH"), ["/bin"]);
}

#[test]
fn a_socket_path_too_long_for_the_kernel_is_an_error() {
    assert!(handoff_path(std::path::Path::new("/tmp/s")).is_ok());
    let deep = std::path::PathBuf::from(format!("/{}", "d".repeat(120)));
    assert!(handoff_path(&deep).unwrap_err().contains("INTENDANT_HOME"));
}

fn session(level: AutonomyLevel, table: &[(&str, &str)], interactive: bool) -> Arc<SessionEgress> {
    let table = table
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    SessionEgress::new(
        "s1",
        ApprovalPolicy::new(level, &table).unwrap(),
        interactive,
        None,
    )
}

async fn ask(egress: &Arc<SessionEgress>, host: &str) -> AskOutcome {
    Arc::clone(egress).ask(host.to_owned(), 443).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_input_closed_before_it_ran_refuses_without_waiting() {
    // `intendant --json < /dev/null`: the input ends before the loop attaches the proxy.
    for _ in 0..50 {
        let bus = EventBus::new();
        bus.close_intents();
        let egress = session(AutonomyLevel::Medium, &[], true);
        egress.attach(&bus);
        let outcome = tokio::time::timeout(Duration::from_secs(5), ask(&egress, "x.example"))
            .await
            .expect("refused at once, not left waiting");
        assert!(matches!(outcome, AskOutcome::Refused(_)), "{outcome:?}");
    }
}

#[tokio::test]
async fn unlisted_hosts_follow_the_level_and_the_network_rule() {
    let bus = EventBus::new();
    for (level, table, want) in [
        (AutonomyLevel::Low, &[][..], false),
        (AutonomyLevel::Full, &[][..], true),
        (AutonomyLevel::Low, &[("network", "auto")][..], true),
        (AutonomyLevel::Full, &[("network", "deny")][..], false),
        // Asked, and nobody can answer: refused.
        (AutonomyLevel::Medium, &[][..], false),
        (AutonomyLevel::High, &[][..], false),
    ] {
        let egress = session(level, table, false);
        egress.attach(&bus);
        let outcome = ask(&egress, "unlisted.example").await;
        assert_eq!(
            matches!(outcome, AskOutcome::Allowed(_)),
            want,
            "{level} {table:?}: {outcome:?}"
        );
    }
    let e = session(AutonomyLevel::Low, &[], true);
    let AskOutcome::Refused(why) = ask(&e, "x.example").await else {
        panic!("allowed at low");
    };
    assert!(why.contains("autonomy low"), "{why}");
    // Interactive, but not attached to a bus yet: nobody can answer.
    let e = session(AutonomyLevel::Medium, &[], true);
    let AskOutcome::Refused(why) = ask(&e, "x.example").await else {
        panic!("allowed without a human");
    };
    assert!(why.contains("no human can answer"), "{why}");
}

/// Answers the next network approval on `bus` with `answer`, returning what it showed.
async fn answer_next(
    events: &mut tokio::sync::broadcast::Receiver<AppEvent>,
    bus: &EventBus,
    answer: fn(u64) -> ControlMsg,
) -> (String, String) {
    loop {
        if let AppEvent::ApprovalRequired {
            id,
            command_preview,
            detail,
            category,
            ..
        } = events.recv().await.unwrap()
        {
            assert_eq!(category, ActionCategory::Network);
            bus.send_intent(answer(id));
            return (command_preview, detail.unwrap_or_default());
        }
    }
}

#[tokio::test]
async fn a_human_answers_an_unlisted_host_on_the_bus() {
    let bus = EventBus::new();
    let mut events = bus.subscribe();
    let egress = session(AutonomyLevel::Medium, &[], true);
    egress.attach(&bus);
    egress.set_running(Some("$ curl https://a.example/".into()));

    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "a.example").await }
    });
    let (preview, detail) = answer_next(&mut events, &bus, |id| ControlMsg::Approve { id }).await;
    assert_eq!(preview, "connect to a.example:443");
    assert!(
        detail.contains("asked by: $ curl https://a.example/"),
        "{detail}"
    );
    assert!(detail.contains("[sandbox.network] allow"), "{detail}");
    assert!(
        matches!(asking.await.unwrap(), AskOutcome::Allowed(r) if r.contains("this connection"))
    );

    // Approve is for one connection: the next is asked again; skip and deny refuse.
    let skip: fn(u64) -> ControlMsg = |id| ControlMsg::Skip { id };
    let deny: fn(u64) -> ControlMsg = |id| ControlMsg::Deny { id };
    for (answer, want) in [(skip, "skipped by the user"), (deny, "denied by the user")] {
        assert_eq!(egress.take_denial(), None, "approve and skip deny nothing");
        let asking = tokio::spawn({
            let e = Arc::clone(&egress);
            async move { ask(&e, "a.example").await }
        });
        answer_next(&mut events, &bus, answer).await;
        assert_eq!(asking.await.unwrap(), AskOutcome::Refused(want.into()));
    }
    // The denial ends the turn once (taken).
    assert_eq!(
        egress.take_denial().as_deref(),
        Some("the user denied the connection to a.example:443")
    );
    assert_eq!(egress.take_denial(), None);

    // Approve-all is the host for the session, not the session's level.
    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "b.example").await }
    });
    answer_next(&mut events, &bus, |id| ControlMsg::ApproveAll { id }).await;
    assert!(matches!(asking.await.unwrap(), AskOutcome::Allowed(_)));
    assert!(
        matches!(ask(&egress, "b.example").await, AskOutcome::Allowed(r) if r.contains("this session"))
    );
    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "c.example").await }
    });
    answer_next(&mut events, &bus, |id| ControlMsg::Deny { id }).await;
    assert!(matches!(asking.await.unwrap(), AskOutcome::Refused(_)));
    // A new batch starts without an earlier batch's denial.
    egress.set_running(Some("$ true".into()));
    assert_eq!(
        egress.take_denial(),
        None,
        "a new batch forgets an old denial"
    );

    // Once the input closes, a waiting question and every later one are refused.
    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "d.example").await }
    });
    loop {
        if let AppEvent::ApprovalRequired { .. } = events.recv().await.unwrap() {
            break;
        }
    }
    bus.close_intents();
    assert!(matches!(asking.await.unwrap(), AskOutcome::Refused(r) if r.contains("input closed")));
    assert!(
        matches!(ask(&egress, "e.example").await, AskOutcome::Refused(r) if r.contains("no human"))
    );
}

#[tokio::test]
async fn each_record_is_an_egress_event_on_the_bus() {
    let bus = EventBus::new();
    let mut log = bus.subscribe_session_log();
    let egress = session(AutonomyLevel::Medium, &[], true);
    egress.attach(&bus);
    egress.record(EgressRecord {
        host: "crates.io".into(),
        port: 443,
        verdict: EgressVerdict::Allowed,
        rule: "the default allow list has \"crates.io\"".into(),
        bytes_up: 10,
        bytes_down: 20,
        duration: Duration::from_millis(1500),
    });
    assert_eq!(
        log.recv().await.unwrap(),
        AppEvent::Egress {
            host: "crates.io".into(),
            port: 443,
            verdict: EgressVerdict::Allowed,
            rule: "the default allow list has \"crates.io\"".into(),
            bytes_up: 10,
            bytes_down: 20,
            duration_ms: 1500,
        }
    );
}

#[tokio::test]
async fn a_socket_a_killed_controller_left_is_replaced_and_a_live_one_or_a_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(HANDOFF_NAME);
    let start = || {
        EgressProxy::start(
            &socket,
            EgressPolicy::new(&EgressSettings::default()).unwrap(),
            Arc::new(Fake {
                answer: refused(),
                asked: Mutex::new(Vec::new()),
                records: Mutex::new(Vec::new()),
            }) as Arc<dyn EgressHooks>,
            ProxyLimits::default(),
            Lookup::Table(BTreeMap::new()),
            &tokio::runtime::Handle::current(),
        )
    };
    // A dead proxy's socket: bound, then its process gone (the std listener leaves the file).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let mut proxy = start().expect("a stale socket is replaced");
    assert!(tokio::net::UnixStream::connect(&socket).await.is_ok());
    // A live proxy on the path is never displaced.
    let Err(err) = start() else {
        panic!("a live socket is in use")
    };
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    proxy.shutdown();
    // Anything that is not a socket stays as it was.
    std::fs::write(&socket, "keep").unwrap();
    assert!(start().is_err());
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "keep");
}

/// `allow_host` on the bus: the connection, the host for the rest of the session, and the
/// project's allow list, kept trusted; where the file cannot count, the session only and a
/// warning saying why.
#[tokio::test]
async fn allow_host_keeps_the_host_for_the_session_and_in_the_projects_list() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join(crate::config::CONFIG_FILE_NAME);
    std::fs::write(&file, "[approval]\nnetwork = \"ask\"\n").unwrap();
    let bus = EventBus::new();
    let mut events = bus.subscribe();
    let egress = SessionEgress::new(
        "s1",
        ApprovalPolicy::new(AutonomyLevel::Medium, &BTreeMap::new()).unwrap(),
        true,
        Some(ProjectAllowList::new(home.path(), project.path())),
    );
    egress.attach(&bus);
    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "a.example").await }
    });
    let (_, detail) = answer_next(&mut events, &bus, |id| ControlMsg::AllowHost { id }).await;
    assert!(
        detail.contains("allow host: a.example for good"),
        "{detail}"
    );
    let AskOutcome::Allowed(rule) = asking.await.unwrap() else {
        panic!("allow_host refused the connection");
    };
    assert!(
        rule.contains("for good") && rule.contains("added"),
        "{rule}"
    );
    // The session's next connection is not asked.
    assert!(
        matches!(ask(&egress, "a.example").await, AskOutcome::Allowed(r) if r.contains("this session"))
    );
    // The next session's configuration lists it, trusted.
    let review = crate::trust::review_project(
        &crate::trust::TrustStore::new(home.path()),
        project.path(),
        &crate::dotenv::EnvLookup::default(),
        crate::dotenv::Endpoints::InEffect,
    )
    .unwrap();
    assert!(review.untrusted.is_empty(), "{:?}", review.untrusted);
    let policy = EgressPolicy::new(&review.config.sandbox.network.egress).unwrap();
    assert!(
        matches!(policy.verdict("a.example"), HostVerdict::Allowed(_)),
        "{:?}",
        policy.verdict("a.example")
    );

    // A command plants an untrusted setting: the answer keeps the host for the session only.
    let planted = "[sandbox]\nenabled = false\n";
    std::fs::write(&file, planted).unwrap();
    let asking = tokio::spawn({
        let e = Arc::clone(&egress);
        async move { ask(&e, "b.example").await }
    });
    answer_next(&mut events, &bus, |id| ControlMsg::AllowHost { id }).await;
    assert!(matches!(asking.await.unwrap(), AskOutcome::Allowed(r) if r.contains("not changed")));
    loop {
        if let AppEvent::Warning { message } = events.recv().await.unwrap() {
            assert!(
                message.contains("b.example is allowed for the rest of this session only")
                    && message.contains("enabled = false"),
                "{message}"
            );
            break;
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), planted);
    assert!(matches!(
        ask(&egress, "b.example").await,
        AskOutcome::Allowed(_)
    ));
}

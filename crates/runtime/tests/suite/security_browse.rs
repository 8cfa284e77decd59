//! `browse` never becomes a LAN client: a local server that counts connections listens on
//! loopback, and every refused URL form pointing at it (through the binary) and every hostile
//! DNS answer naming it (through the library with an injected resolver) must leave it at zero.

use super::support::{run, tempdir};
use intendant_runtime::browse::{BrowseError, Browser, HostResolver};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts every connection on 127.0.0.1 and, when available, [::1], on one port.
struct CountingServer {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl CountingServer {
    fn start() -> CountingServer {
        let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = v4.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let mut listeners = vec![v4];
        listeners.extend(TcpListener::bind((Ipv6Addr::LOCALHOST, port)).ok());
        for listener in listeners {
            let hits = Arc::clone(&hits);
            std::thread::spawn(move || {
                for mut stream in listener.incoming().flatten() {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let mut buf = [0u8; 1024];
                    let _ = stream.read(&mut buf);
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nsecret",
                    );
                }
            });
        }
        CountingServer { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Every spelling of "this machine" or the LAN a URL can carry.
fn refused_hosts() -> Vec<&'static str> {
    vec![
        "127.0.0.1",
        "127.0.0.1.",
        "localhost",
        "LocalHost.",
        "app.localhost",
        "2130706433",
        "0x7f000001",
        "0x7f.1",
        "127.1",
        "127.0.1",
        "0177.0.0.1",
        "017700000001",
        "0",
        "0.0.0.0",
        "[::]",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "[64:ff9b::127.0.0.1]",
        "[2002:7f00:1::1]",
        "intranet",
        "printer.local",
        "db.internal",
    ]
}

#[test]
fn every_refused_address_form_never_reaches_the_server() {
    let server = CountingServer::start();
    let hosts = refused_hosts();
    let commands: Vec<Value> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            json!({"function": "browse", "nonce": i,
                   "url": format!("http://{h}:{}/latest/meta-data", server.port)})
        })
        .collect();
    let logs = tempdir();
    let r = run(Value::Array(commands), logs.path());
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(r.envelopes.len(), hosts.len());
    for (i, h) in hosts.iter().enumerate() {
        assert!(r.error(i).contains("refusing"), "{h}: {}", r.error(i));
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn non_http_schemes_and_credentials_are_refused() {
    let logs = tempdir();
    let urls = [
        "file:///etc/passwd",
        "ftp://example.com/",
        "gopher://example.com/",
        "http://user:pw@example.com/",
    ];
    let commands: Vec<Value> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| json!({"function": "browse", "nonce": i, "url": u}))
        .collect();
    let r = run(Value::Array(commands), logs.path());
    for (i, u) in urls.iter().enumerate() {
        assert!(!r.error(i).is_empty(), "{u}");
    }
}

/// Answers every name with a fixed list, counting lookups.
struct Hostile {
    answer: Vec<IpAddr>,
    lookups: AtomicUsize,
}

impl HostResolver for Hostile {
    fn lookup(&self, _host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Ok(self.answer.clone())
    }
}

fn hostile(answer: &[&str]) -> Arc<Hostile> {
    Arc::new(Hostile {
        answer: answer.iter().map(|a| a.parse().unwrap()).collect(),
        lookups: AtomicUsize::new(0),
    })
}

#[test]
fn hostile_dns_answers_are_refused_before_connecting() {
    let server = CountingServer::start();
    let url = format!("http://evil.example.org:{}/", server.port);
    let answers: &[&[&str]] = &[
        &["127.0.0.1"],
        &["::1"],
        &["93.184.216.34", "127.0.0.1"],
        &["127.0.0.1", "93.184.216.34"],
        &["2606:4700::1111", "::ffff:127.0.0.1"],
        &["10.0.0.1"],
        &["169.254.169.254"],
        &["100.64.0.1"],
        &["fd00::1"],
        &[],
    ];
    for answer in answers {
        let resolver = hostile(answer);
        let err = Browser::with_resolver(resolver.clone())
            .fetch(&url)
            .unwrap_err();
        assert!(matches!(err, BrowseError::Refused(_)), "{answer:?}: {err}");
        assert_eq!(resolver.lookups.load(Ordering::SeqCst), 1);
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn local_names_are_refused_without_a_dns_query() {
    let resolver = hostile(&["93.184.216.34"]);
    let b = Browser::with_resolver(resolver.clone());
    for url in [
        "http://localhost/",
        "http://intranet/",
        "http://nas.lan/",
        "http://x.local/",
    ] {
        assert!(
            matches!(b.fetch(url), Err(BrowseError::Refused(_))),
            "{url}"
        );
    }
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0);
}

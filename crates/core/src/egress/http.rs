//! The little HTTP the proxy speaks: one request head read and judged (`CONNECT host:port`, or
//! an absolute-URI `http://` request), and its own short answers.

/// The largest request head read; longer is refused without reading more.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What a client asked the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: a tunnel (TLS, usually).
    Connect {
        /// The host as written (brackets of an IPv6 literal removed).
        host: String,
        /// The port.
        port: u16,
    },
    /// A plain-HTTP request in absolute form, to forward once as origin form.
    Forward {
        /// The host as written.
        host: String,
        /// The port (80 unless written).
        port: u16,
        /// The head to send upstream: origin-form target, the client's headers less the
        /// proxy's own and `Connection`, then `Connection: close` (one request per connection,
        /// so a reused connection can never carry a request to another host).
        head: Vec<u8>,
    },
}

impl ProxyRequest {
    /// The destination.
    pub fn destination(&self) -> (&str, u16) {
        match self {
            ProxyRequest::Connect { host, port } | ProxyRequest::Forward { host, port, .. } => {
                (host, *port)
            }
        }
    }
}

/// Where the head ends in `buf` (the index just past its blank line), if it does.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

/// Reads a request head (everything up to its blank line). Anything it cannot read as a proxy
/// request is an error for a 400, saying what was wrong.
pub fn parse_head(head: &[u8]) -> Result<ProxyRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not text".to_owned())?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: {:?}", clip(first)));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("not an HTTP method: {:?}", clip(method)));
    }
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(format!("not HTTP/1.x: {:?}", clip(version)));
    }
    let headers: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
    for header in &headers {
        let name = header.split_once(':').map(|(n, _)| n).unwrap_or_default();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("not a header line: {:?}", clip(header)));
        }
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(ProxyRequest::Connect { host, port });
    }
    let rest = strip_prefix_ignore_case(target, "http://").ok_or_else(|| {
        if strip_prefix_ignore_case(target, "https://").is_some() {
            "an https:// URL goes through CONNECT, not as a plain request".to_owned()
        } else {
            format!(
                "a proxy request names an absolute http:// URL or uses CONNECT, not {:?}",
                clip(target)
            )
        }
    })?;
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(split);
    let (host, port) = authority(auth, Some(80))?;
    let path = match path.split('#').next().unwrap_or_default() {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    let mut out = format!("{method} {path} {version}\r\n");
    let mut has_host = false;
    for header in headers {
        let name = header
            .split_once(':')
            .map(|(n, _)| n.to_ascii_lowercase())
            .unwrap_or_default();
        match name.as_str() {
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive" => continue,
            "host" => has_host = true,
            _ => {}
        }
        out.push_str(header);
        out.push_str("\r\n");
    }
    if !has_host {
        out.push_str(&format!("Host: {auth}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(ProxyRequest::Forward {
        host,
        port,
        head: out.into_bytes(),
    })
}

/// `host:port` (`[v6]:port`); `default` when the port may be left out. Credentials are refused.
fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), String> {
    if text.contains('@') {
        return Err("credentials in a proxy target are refused".into());
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed IPv6 literal in {:?}", clip(text)))?;
        (host, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("not a port: {:?}", clip(p)))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("CONNECT needs host:port, not {:?}", clip(text))),
    };
    if host.is_empty() {
        return Err("the target has no host".into());
    }
    Ok((host.to_owned(), port))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// At most 80 characters of client input, for an error message.
fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// One of the proxy's own answers: status line, a plain-text body, and the connection closed.
pub fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to a `CONNECT` that was let through.
pub const CONNECT_OK: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

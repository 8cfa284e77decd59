//! Just enough HTTP/1.1 for the fake: read one request at a time from a kept-alive connection,
//! write plain responses, and write streaming bodies chunk by chunk so faults can cut and split
//! the bytes wherever a scenario says.

use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::scenario::TcpChunking;

/// Request head and body size limits: a fake must not grow without bound either.
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One parsed HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: String,
    /// Path and query as sent.
    pub target: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub keep_alive: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    budget: &mut usize,
) -> Result<String, ReadError> {
    let mut line = Vec::new();
    let read = (&mut *reader)
        .take(*budget as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Err(ReadError::Closed);
    }
    if read > *budget {
        return Err(ReadError::Malformed("request head too large".into()));
    }
    *budget -= read;
    if !line.ends_with(b"\n") {
        return Err(ReadError::Malformed("truncated request head".into()));
    }
    let text =
        String::from_utf8(line).map_err(|_| ReadError::Malformed("head is not UTF-8".into()))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads the next request; `Closed` when the client closed the kept-alive connection cleanly.
/// Answers `expect: 100-continue` on `writer` before reading the body (curl sends it).
pub(crate) async fn read_request<R, W>(reader: &mut R, writer: &mut W) -> Result<Request, ReadError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut budget = MAX_HEAD_BYTES;
    let mut start = read_line(reader, &mut budget).await?;
    while start.is_empty() {
        start = read_line(reader, &mut budget).await?;
    }
    let mut parts = start.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Malformed(format!("bad request line {start:?}")));
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader, &mut budget).await?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ReadError::Malformed(format!("bad header line {line:?}")));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut request = Request {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
        body: Vec::new(),
        keep_alive: version == "HTTP/1.1",
    };
    if let Some(connection) = request.header("connection") {
        let connection = connection.to_ascii_lowercase();
        if connection.contains("close") {
            request.keep_alive = false;
        } else if connection.contains("keep-alive") {
            request.keep_alive = true;
        }
    }
    if request
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        writer.flush().await?;
    }
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    if chunked {
        request.body = read_chunked(reader).await?;
    } else if let Some(length) = request.header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| ReadError::Malformed(format!("bad content-length {length:?}")))?;
        if length > MAX_BODY_BYTES {
            return Err(ReadError::Malformed("request body too large".into()));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        request.body = body;
    }
    Ok(request)
}

async fn read_chunked<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let mut budget = MAX_HEAD_BYTES;
        let size_line = read_line(reader, &mut budget).await?;
        let size_text = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| ReadError::Malformed(format!("bad chunk size {size_text:?}")))?;
        if size == 0 {
            // Trailers, if any, end with an empty line.
            while !read_line(reader, &mut budget).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(ReadError::Malformed("request body too large".into()));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).await?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf).await?;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Writes a complete response with a JSON (or other) body.
pub(crate) async fn write_full<W: AsyncWrite + Unpin>(
    writer: &mut W,
    status: u16,
    extra_headers: &[(&str, String)],
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {}\r\n",
        reason(status),
        body.len(),
        if keep_alive { "keep-alive" } else { "close" },
    );
    for (name, value) in extra_headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    writer.write_all(&bytes).await?;
    writer.flush().await
}

/// Writes the head of a chunked streaming response.
pub(crate) async fn write_stream_head<W: AsyncWrite + Unpin>(
    writer: &mut W,
    content_type: &str,
    keep_alive: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\nconnection: {}\r\nx-request-id: req_fake\r\n\r\n",
        if keep_alive { "keep-alive" } else { "close" },
    );
    writer.write_all(head.as_bytes()).await?;
    writer.flush().await
}

/// Writes one body piece as one HTTP chunk (and, with nodelay, one TCP segment).
pub(crate) async fn write_chunk<W: AsyncWrite + Unpin>(
    writer: &mut W,
    piece: &[u8],
) -> std::io::Result<()> {
    if piece.is_empty() {
        return Ok(());
    }
    let mut bytes = format!("{:x}\r\n", piece.len()).into_bytes();
    bytes.extend_from_slice(piece);
    bytes.extend_from_slice(b"\r\n");
    writer.write_all(&bytes).await?;
    writer.flush().await
}

/// Ends a chunked body.
pub(crate) async fn write_last_chunk<W: AsyncWrite + Unpin>(writer: &mut W) -> std::io::Result<()> {
    writer.write_all(b"0\r\n\r\n").await?;
    writer.flush().await
}

/// Cuts the concatenated events into socket writes per the chunking mode.
pub(crate) fn pieces(events: &[Vec<u8>], mode: TcpChunking) -> Vec<Vec<u8>> {
    match mode {
        TcpChunking::PerEvent => events.to_vec(),
        TcpChunking::Every(size) => events
            .concat()
            .chunks(size.max(1))
            .map(<[u8]>::to_vec)
            .collect(),
        TcpChunking::Awkward => {
            let mut out = Vec::new();
            for event in events {
                let cuts = awkward_cuts(event);
                let mut start = 0;
                for cut in cuts {
                    out.push(event[start..cut].to_vec());
                    start = cut;
                }
                out.push(event[start..].to_vec());
            }
            out
        }
    }
}

/// Cut positions inside an event: after the first byte of each multi-byte UTF-8 character,
/// between CR and LF, inside the `data` field name, and in the middle of the JSON payload.
fn awkward_cuts(event: &[u8]) -> Vec<usize> {
    let mut cuts = Vec::new();
    for (index, byte) in event.iter().enumerate() {
        let lead_of_multibyte = *byte >= 0xC0;
        let cr_before_lf = *byte == b'\r' && event.get(index + 1) == Some(&b'\n');
        if (lead_of_multibyte || cr_before_lf) && index + 1 < event.len() {
            cuts.push(index + 1);
        }
    }
    if let Some(data) = find(event, b"data:") {
        cuts.push(data + 2);
        if let Some(end) = event[data..].iter().position(|b| *b == b'\n') {
            cuts.push(data + 5 + (end.saturating_sub(5)) / 2);
        }
    }
    cuts.retain(|cut| *cut > 0 && *cut < event.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Sleeps `ms` milliseconds when non-zero.
pub(crate) async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

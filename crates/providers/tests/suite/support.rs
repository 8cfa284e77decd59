//! A tiny scripted HTTP/1.1 server on 127.0.0.1: each request gets the next canned response,
//! written piece by piece with controllable chunk boundaries, delays and cuts. Every request is
//! recorded (head and body) for assertions.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use intendant_providers::{
    ChatRequest, ChatResponse, ProviderConfig, ProviderKind, RetryNotice, RetryPolicy, StopReason,
    StreamEvent, Usage, build_provider,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The key every test configures; no error string may contain it.
pub const TEST_KEY: &str = "sk-test-SECRETabcdef0123456789";

/// One step of a canned body.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Write these bytes (then flush).
    Bytes(Vec<u8>),
    /// Wait.
    Delay(Duration),
    /// Close the connection now.
    Cut,
    /// Stay silent until the client goes away.
    Hang,
    /// Write this byte forever, in 64 KiB writes, until the client goes away.
    Endless(u8),
}

/// One canned response.
#[derive(Debug, Clone)]
pub struct Canned {
    /// Status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Delay before the status line.
    pub head_delay: Option<Duration>,
    /// Never send headers.
    pub no_head: bool,
    /// The body.
    pub body: Vec<Piece>,
}

impl Canned {
    /// 200 with an SSE body written as the given pieces.
    pub fn sse(body: Vec<Piece>) -> Self {
        Canned {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            head_delay: None,
            no_head: false,
            body,
        }
    }

    /// 200 with `bytes` split every `chunk` bytes.
    pub fn sse_chunked(bytes: &[u8], chunk: usize) -> Self {
        Self::sse(
            bytes
                .chunks(chunk.max(1))
                .map(|c| Piece::Bytes(c.to_vec()))
                .collect(),
        )
    }

    /// An error status with a JSON body.
    pub fn status(status: u16, body: &str) -> Self {
        Canned {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            head_delay: None,
            no_head: false,
            body: vec![Piece::Bytes(body.as_bytes().to_vec())],
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request line, e.g. `POST /v1/responses HTTP/1.1`.
    pub request_line: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Recorded {
    /// A header value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// The scripted server.
pub struct ScriptServer {
    /// Base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl ScriptServer {
    /// Serves `script` in order; once it runs out, the last response repeats.
    pub async fn start(script: Vec<Canned>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            let mut served = 0usize;
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let canned = script[served.min(script.len() - 1)].clone();
                served += 1;
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, canned, recorded).await;
                });
            }
        });
        ScriptServer { url, requests }
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    canned: Canned,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    recorded.lock().unwrap().push(Recorded {
        request_line,
        headers,
        body,
    });

    if canned.no_head {
        let mut sink = [0u8; 1024];
        while socket.read(&mut sink).await? > 0 {}
        return Ok(());
    }
    if let Some(delay) = canned.head_delay {
        tokio::time::sleep(delay).await;
    }
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        canned.status
    );
    for (k, v) in &canned.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;
    for piece in canned.body {
        match piece {
            Piece::Bytes(bytes) => {
                socket.write_all(&bytes).await?;
                socket.flush().await?;
            }
            Piece::Delay(d) => tokio::time::sleep(d).await,
            Piece::Cut => return Ok(()),
            Piece::Hang => {
                let mut sink = [0u8; 1024];
                while socket.read(&mut sink).await? > 0 {}
                return Ok(());
            }
            Piece::Endless(byte) => {
                let block = vec![byte; 64 * 1024];
                loop {
                    socket.write_all(&block).await?;
                }
            }
        }
    }
    socket.shutdown().await?;
    Ok(())
}

/// A fixture file's bytes.
pub fn fixture(wire: &str, name: &str) -> Vec<u8> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", wire, name]
        .iter()
        .collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Observed retries.
pub type Notices = Arc<Mutex<Vec<RetryNotice>>>;

/// A config for `server` with fast retries (10 ms base) recorded into the returned list.
pub fn config(server: &ScriptServer, base_path: &str) -> (ProviderConfig, Notices) {
    let notices: Notices = Arc::default();
    let sink = notices.clone();
    let mut config = ProviderConfig::new(
        format!("{}{base_path}", server.url),
        Some(TEST_KEY.to_owned()),
    );
    config.retry = RetryPolicy::with_base_delay(Duration::from_millis(10)).observed(Arc::new(
        move |n: &RetryNotice| sink.lock().unwrap().push(n.clone()),
    ));
    config.idle_timeout = Duration::from_secs(10);
    config.header_timeout = Duration::from_secs(10);
    (config, notices)
}

/// Runs one request through `kind` against `config` and collects every event.
pub async fn run(
    kind: ProviderKind,
    config: ProviderConfig,
    request: &ChatRequest,
) -> Result<Vec<StreamEvent>, intendant_providers::ProviderError> {
    use futures::StreamExt;
    let provider = build_provider(kind, config)?;
    let stream = provider.chat_stream(request).await?;
    Ok(stream.collect().await)
}

/// Folds events into a response.
pub fn fold(
    events: &[StreamEvent],
) -> Result<intendant_providers::ChatResponse, intendant_providers::ProviderError> {
    let mut acc = intendant_providers::ResponseAccumulator::new("test");
    for e in events {
        acc.push(e);
    }
    acc.finish()
}

/// A simple request.
pub fn simple_request(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.to_owned(),
        system: "You are terse.".to_owned(),
        items: vec![intendant_providers::ConversationItem::User {
            text: "Say hello.".to_owned(),
        }],
        ..ChatRequest::default()
    }
}

/// Asserts no error text anywhere contains the test key.
pub fn assert_masked(text: &str) {
    assert!(!text.contains(TEST_KEY), "key leaked: {text}");
    assert!(
        !text.contains("SECRETabcdef"),
        "key fragment leaked: {text}"
    );
}

/// The usage every wire's `text.sse` golden fixture reports (Anthropic counts input apart).
pub const GREETING_USAGE: Usage = Usage {
    input_tokens: 2006,
    cached_input_tokens: 1920,
    output_tokens: 18,
    reasoning_tokens: 0,
};

/// The folded answer of a wire's `text.sse` golden fixture: the same non-ASCII text, a normal
/// end of turn and `usage`.
pub fn assert_greeting(resp: &ChatResponse, usage: Usage) {
    assert_eq!(resp.text, "Hi there! Größe: 5 € — done.");
    assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(resp.usage, Some(usage));
}

/// A follow-up request on `model` that replays `resp`'s first reasoning item and its text
/// after a one-word question, so a test can check how the wire echoes them back.
pub fn echo_request(model: &str, resp: ChatResponse) -> ChatRequest {
    ChatRequest {
        model: model.to_owned(),
        items: vec![
            intendant_providers::ConversationItem::User { text: "q".into() },
            intendant_providers::ConversationItem::Reasoning(resp.reasoning[0].clone()),
            intendant_providers::ConversationItem::Assistant { text: resp.text },
        ],
        ..ChatRequest::default()
    }
}

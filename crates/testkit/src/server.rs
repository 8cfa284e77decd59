//! [`FakeModelServer`]: the listener and its connections. What each request gets lives in
//! `state`; writing the response bytes lives in `respond`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::http::{self, ReadError};
use crate::respond;
use crate::scenario::Scenario;
use crate::state::{RecordedRequest, Served, Shared};
use crate::wire::Wire;

/// Pause after a failed `accept` before trying again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The scenario is unusable.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    /// Binding 127.0.0.1 failed.
    #[error("cannot bind 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for (0 = any).
        port: u16,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A fake model API on 127.0.0.1 serving one scenario over all four wires; stops when dropped.
pub struct FakeModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FakeModelServer {
    /// Validates the scenario and serves it on an ephemeral port of 127.0.0.1.
    pub async fn start(scenario: Scenario) -> Result<Self, ServerError> {
        Self::start_on_port(scenario, 0).await
    }

    /// Like [`start`](Self::start) on a chosen port (0 = ephemeral).
    pub async fn start_on_port(scenario: Scenario, port: u16) -> Result<Self, ServerError> {
        scenario.validate()?;
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| ServerError::Bind { port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { port, source })?;
        let shared = Arc::new(Shared::new(scenario));
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL a client of `wire` is configured with: OpenAI clients append `/responses` or
    /// `/chat/completions` to `…/v1`; Anthropic and Gemini clients append their full paths.
    pub fn base_url(&self, wire: Wire) -> String {
        match wire {
            Wire::OpenAiResponses | Wire::OpenAiChat => format!("http://{}/v1", self.addr),
            Wire::Anthropic | Wire::Gemini => format!("http://{}", self.addr),
        }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().requests.clone()
    }

    /// The requests that were served a scripted turn or one of its faults.
    pub fn turn_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| matches!(r.served, Served::Turn { .. } | Served::Fault { .. }))
            .collect()
    }

    /// Broken invariants and failed `expect` checks so far (empty when the client behaved).
    pub fn invariant_violations(&self) -> Vec<String> {
        self.shared.state().violations.clone()
    }

    /// How many of the scenario's `turns` have been served cleanly.
    pub fn turns_consumed(&self) -> usize {
        self.shared.state().main.cursor
    }

    /// How many turns of the scenario's script `index` (of `scripts`) have been served cleanly.
    pub fn script_turns_consumed(&self, index: usize) -> usize {
        self.shared
            .state()
            .scripts
            .get(index)
            .map_or(0, |track| track.cursor)
    }

    /// Stops accepting and drops every open connection.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for FakeModelServer {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(serve_connection(stream, Arc::clone(&shared)));
                    }
                    // Out of descriptors or similar: back off instead of spinning.
                    Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    // Each write must leave as its own segment for the chunking faults to mean anything.
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let request = match http::read_request(&mut reader, &mut write).await {
            Ok(request) => request,
            Err(ReadError::Malformed(message)) => {
                let body = serde_json::json!({ "error": { "message": message } }).to_string();
                let _ = http::write_full(
                    &mut write,
                    400,
                    &[],
                    "application/json",
                    body.as_bytes(),
                    false,
                )
                .await;
                return;
            }
            Err(ReadError::Closed | ReadError::Io(_)) => return,
        };
        match respond::handle(&shared, request, &mut reader, &mut write).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

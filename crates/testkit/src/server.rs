//! [`FakeModelServer`]: the listener, the shared scenario state, request recording and the
//! decision of what each request gets (a scripted turn, a fault, a side reply). Writing the
//! response bytes lives in `respond`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::http::{self, ReadError};
use crate::ledger::Ledger;
use crate::respond;
use crate::scenario::{Fault, Scenario, Turn};
use crate::wire::{RequestFacts, Wire};

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

/// What the server did with a request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Served {
    /// The clean scripted turn `index` (0-based), after `attempt` faulted attempts.
    Turn {
        /// Turn index.
        index: usize,
        /// How many attempts at this turn came before (faults).
        attempt: u32,
    },
    /// A fault of turn `index`; the turn was not consumed.
    Fault {
        /// Turn index.
        index: usize,
        /// 0-based attempt number at this turn.
        attempt: u32,
    },
    /// Side traffic answered with the side reply.
    Side,
    /// Every turn was already consumed; answered per `on_exhausted`.
    Exhausted,
    /// A model listing.
    Models,
    /// Anthropic token counting.
    CountTokens,
    /// The request could not be served (unknown route, bad body, unsupported encoding).
    Rejected {
        /// HTTP status returned.
        status: u16,
    },
}

/// Headers whose values are credentials.
const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "proxy-authorization",
];

/// One request as the server received it. `Debug` masks credentials; use [`redacted`]
/// (`RecordedRequest::redacted`) before writing a recording anywhere.
#[derive(Clone, serde::Serialize)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path with query, as sent.
    pub path: String,
    /// Headers, names lowercased, in arrival order (secrets included: this is test memory).
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty, a JSON string when not JSON.
    pub body: Value,
    /// The wire the path selected, if any.
    pub wire: Option<Wire>,
    /// What the server answered.
    pub served: Served,
}

impl std::fmt::Debug for RecordedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = self.redacted();
        f.debug_struct("RecordedRequest")
            .field("method", &redacted.method)
            .field("path", &redacted.path)
            .field("headers", &redacted.headers)
            .field("body", &redacted.body)
            .field("wire", &redacted.wire)
            .field("served", &redacted.served)
            .finish()
    }
}

impl RecordedRequest {
    /// A copy with credential headers and a `key=` query parameter replaced by `***`.
    pub fn redacted(&self) -> RecordedRequest {
        let mut copy = self.clone();
        for (name, value) in &mut copy.headers {
            if SECRET_HEADERS.contains(&name.as_str()) {
                *value = "***".to_owned();
            }
        }
        if let Some((route, query)) = self.path.split_once('?') {
            let query: Vec<&str> = query
                .split('&')
                .map(|pair| {
                    if pair.starts_with("key=") {
                        "key=***"
                    } else {
                        pair
                    }
                })
                .collect();
            copy.path = format!("{route}?{}", query.join("&"));
        }
        copy
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Mutable state shared by all connections.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Index of the next unconsumed turn.
    pub cursor: usize,
    /// Faulted attempts so far at `cursor`.
    pub attempts: u32,
    pub requests: Vec<RecordedRequest>,
    pub violations: Vec<String>,
    pub ledger: Ledger,
}

pub(crate) struct Shared {
    pub scenario: Scenario,
    state: Mutex<State>,
}

impl Shared {
    /// A poisoned lock only means another connection panicked; the data is still consistent
    /// enough for a test double, so keep serving.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The decision for one model request.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    Clean { index: usize, turn: Turn },
    Fault { turn: Turn, fault: Fault },
    Side { turn: Turn },
    Exhausted,
}

impl Shared {
    /// Decides what a model request gets and advances the script; records expectation failures.
    pub fn plan(&self, wire: Wire, facts: &RequestFacts, raw_body: &str) -> (Plan, Served) {
        let side = &self.scenario.side_requests;
        let is_side = (side.when_no_tools && facts.tool_names.is_empty())
            || facts
                .model
                .as_ref()
                .is_some_and(|model| side.models.contains(model));
        if is_side {
            return (
                Plan::Side {
                    turn: Turn::text(side.reply.clone()),
                },
                Served::Side,
            );
        }
        let mut state = self.state();
        let mut violations = state.ledger.check(wire, facts);
        let Some(turn) = self.scenario.turns.get(state.cursor).cloned() else {
            state.violations.append(&mut violations);
            return (Plan::Exhausted, Served::Exhausted);
        };
        let index = state.cursor;
        let attempt = state.attempts;
        if attempt == 0
            && let Some(expect) = &turn.expect
        {
            violations.extend(crate::respond::check_expect(
                expect,
                index,
                &state.ledger,
                wire,
                facts,
                raw_body,
            ));
        }
        state.violations.append(&mut violations);
        let mut seen = 0;
        for fault in &turn.faults {
            seen += fault.times();
            if attempt < seen {
                state.attempts += 1;
                let fault = fault.clone();
                return (
                    Plan::Fault { turn, fault },
                    Served::Fault { index, attempt },
                );
            }
        }
        state.cursor += 1;
        state.attempts = 0;
        (Plan::Clean { index, turn }, Served::Turn { index, attempt })
    }
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
        let shared = Arc::new(Shared {
            scenario,
            state: Mutex::new(State::default()),
        });
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

    /// How many scripted turns have been served cleanly.
    pub fn turns_consumed(&self) -> usize {
        self.shared.state().cursor
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

/// Appends a recorded request.
pub(crate) fn record(shared: &Shared, request: RecordedRequest) {
    shared.state().requests.push(request);
}

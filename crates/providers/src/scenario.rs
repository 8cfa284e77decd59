//! The scenario file: what a scripted model answers, turn by turn, and how badly it behaves.
//! [`crate::scripted::ScriptedProvider`] plays its turns in process; the test kit's fake model
//! server serves them over HTTP with the faults.
//!
//! A scenario is JSON. Each model request of the main conversation consumes the next [`Turn`];
//! a turn's [`Fault`]s are served first (one per attempt, `times` attempts each) without consuming
//! it, so a client that retries sees the fault and then the clean turn. Requests that are not part
//! of the main conversation (see [`SideRequests`]) get a short text reply and consume nothing.
//! A turn may instead [`Replay`] a recorded response byte for byte (the fake server only).
//!
//! ```json
//! {
//!   "model": "fake-model",
//!   "on_exhausted": "done",
//!   "side_requests": { "when_no_tools": true, "models": ["claude-haiku-4-5"] },
//!   "turns": [
//!     { "reasoning": { "text": "Let me look." },
//!       "tool_calls": [ { "name": "shell", "arguments": { "command": ["ls"] } } ],
//!       "usage": { "input": 120, "cached": 100, "output": 12, "reasoning": 5 },
//!       "faults": [ { "type": "http_status", "status": 429, "retry_after": 1, "times": 2 } ] },
//!     { "text": "All done.", "expect": { "tool_results_for_previous": true } }
//!   ]
//! }
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

mod replay;

pub use replay::Replay;

/// A whole scripted conversation plus the server's policy for requests outside the script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Model name reported in responses when the request names none (Gemini names it in the path).
    #[serde(default = "default_model")]
    pub model: String,
    /// The scripted turns, consumed in order by main-conversation requests.
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// What to answer once every turn has been consumed.
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// Which requests are side traffic (titles, token counting, probes) rather than turns.
    #[serde(default)]
    pub side_requests: SideRequests,
    /// Per-conversation scripts: a conversation whose user messages contain a script's
    /// `when_task_contains` plays that script's turns, with a cursor of its own, instead of
    /// `turns` (the first matching script; the scripted model chooses at a session's first
    /// request, the fake model server at each request). One file then drives a parent session
    /// and each of its sub-agents, or an outer agent and the session it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scripts: Vec<Script>,
}

/// One session's script in [`Scenario::scripts`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Text a user message of the session contains (its task, typically).
    pub when_task_contains: String,
    /// The turns this session plays, in order.
    pub turns: Vec<Turn>,
}

impl Scenario {
    /// The turns a session plays: those of the first script whose key one of `user_texts`
    /// contains (with its index), else `turns`.
    pub fn turns_for<'a>(
        &self,
        user_texts: impl Iterator<Item = &'a str> + Clone,
    ) -> (Option<usize>, &[Turn]) {
        for (index, script) in self.scripts.iter().enumerate() {
            if user_texts
                .clone()
                .any(|t| t.contains(&script.when_task_contains))
            {
                return (Some(index), &script.turns);
            }
        }
        (None, &self.turns)
    }
}

fn default_model() -> String {
    "fake-model".to_owned()
}

/// What the server answers after the last scripted turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// A plain final text turn saying `done` (real CLIs sometimes ask once more; this ends them).
    #[default]
    Done,
    /// HTTP 400 `invalid_request_error` naming the exhaustion (not retryable, so clients stop).
    Error,
}

/// Rules that classify a request as side traffic: answered with `reply`, never consuming a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SideRequests {
    /// A request that offers no tools is side traffic (real CLIs' title and summary calls).
    #[serde(default)]
    pub when_no_tools: bool,
    /// A request naming one of these models is side traffic (e.g. a small model for titles).
    #[serde(default)]
    pub models: Vec<String>,
    /// The text of the reply to side traffic.
    #[serde(default = "default_side_reply")]
    pub reply: String,
}

impl Default for SideRequests {
    fn default() -> Self {
        Self {
            when_no_tools: false,
            models: Vec::new(),
            reply: default_side_reply(),
        }
    }
}

fn default_side_reply() -> String {
    "ok".to_owned()
}

/// One model response: optional reasoning, then text, then tool calls, then usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Visible text, streamed as text deltas.
    #[serde(default)]
    pub text: Option<String>,
    /// Reasoning streamed before the text, with an opaque signature the client must echo.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// Tool calls; several in one turn are parallel calls.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// Token usage reported at the end of the stream.
    #[serde(default)]
    pub usage: Usage,
    /// Why the turn stops.
    #[serde(default)]
    pub stop: StopKind,
    /// Faults served (one per attempt) before the clean turn.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// How the bytes are delivered (delays, delta sizes, TCP chunking).
    #[serde(default)]
    pub delivery: Delivery,
    /// Checks on the request that consumes this turn; failures become invariant violations.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// A recorded response served byte for byte instead of one rendered from the fields above
    /// (the fake model server only: the scripted model plays rendered turns).
    #[serde(default)]
    pub replay: Option<Replay>,
}

impl Turn {
    /// A turn that only says `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A turn that only calls tools.
    pub fn tool_calls(calls: Vec<ToolCallSpec>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::default()
        }
    }
}

/// Reasoning content of a turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// The reasoning text (Responses: summary text; Anthropic: thinking; Gemini: thought part).
    pub text: String,
    /// The opaque token (signature / encrypted_content / thoughtSignature); generated if absent.
    #[serde(default)]
    pub signature: Option<String>,
}

/// One tool call the model makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// Tool name as the client declared it.
    pub name: String,
    /// Arguments; serialized compactly and streamed as argument deltas.
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// Call id; generated in the wire's own style (`call_…`, `toolu_…`) if absent.
    #[serde(default)]
    pub id: Option<String>,
}

impl ToolCallSpec {
    /// A call of `name` with `arguments` and a generated id.
    pub fn new(name: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            arguments,
            id: None,
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Token usage reported for a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Input (prompt) tokens, cached ones included (Anthropic reports the uncached remainder).
    #[serde(default = "default_input")]
    pub input: u64,
    /// Of `input`, tokens served from the prompt cache.
    #[serde(default)]
    pub cached: u64,
    /// Output tokens, reasoning included.
    #[serde(default = "default_output")]
    pub output: u64,
    /// Of `output`, reasoning tokens.
    #[serde(default)]
    pub reasoning: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Self {
            input: default_input(),
            cached: 0,
            output: default_output(),
            reasoning: 0,
        }
    }
}

fn default_input() -> u64 {
    10
}

fn default_output() -> u64 {
    5
}

/// Why a turn ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopKind {
    /// End of turn, or tool use when the turn has tool calls.
    #[default]
    Natural,
    /// The output token limit was hit (Responses: `response.incomplete`).
    MaxTokens,
}

/// A misbehaviour served instead of the clean turn, for `times` consecutive attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// An HTTP error status before any stream, with the wire's error body.
    HttpStatus {
        /// The status code, e.g. 429, 500, 529, 400.
        status: u16,
        /// Seconds for the `retry-after` header.
        #[serde(default)]
        retry_after: Option<u64>,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200, the start of the turn, then the wire's error event.
    ErrorEvent {
        /// The error class.
        kind: ErrorKind,
        /// The error message.
        #[serde(default = "default_error_message")]
        message: String,
        /// For OpenAI Responses, which of its error event shapes to send.
        #[serde(default)]
        shape: ResponsesErrorShape,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200, `after_events` whole events, half of the next one, then the connection closes.
    Cut {
        /// Whole events sent before the cut.
        #[serde(default = "two")]
        after_events: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200, `after_events` whole events, then a clean end of the body without the
    /// terminal event (a stream that stops early rather than breaking).
    EndEarly {
        /// Whole events sent before the body ends.
        #[serde(default = "two")]
        after_events: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200, `after_events` whole events, then `data: ` and a line that never ends (capped
    /// at 256 MiB) until the client hangs up: a bounded-memory test for SSE parsers.
    EndlessLine {
        /// Whole events sent before the endless line.
        #[serde(default = "two")]
        after_events: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// An HTTP error status whose error message repeats the request's credential (the bearer
    /// token, `x-api-key` or `x-goog-api-key` value) after `pad` characters of filler: a server
    /// that reflects the key it was sent, for masking tests.
    EchoKey {
        /// The status code (an error status).
        #[serde(default = "unauthorized")]
        status: u16,
        /// Filler characters before the echoed key.
        #[serde(default = "default_echo_pad")]
        pad: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// A redirect to the origin `to` (e.g. `http://127.0.0.1:8080`; absent: this server's own)
    /// followed by the request's own path and query.
    Redirect {
        /// The origin redirected to.
        #[serde(default)]
        to: Option<String>,
        /// The status code (a 3xx).
        #[serde(default = "temporary_redirect")]
        status: u16,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200 and a reply far larger than any real one: `bytes` of text (or of tool-call
    /// arguments) in deltas of 16 KiB, then the rest of the turn, unless the client hangs up
    /// first: a bounded-memory test for clients. Gemini sends calls whole, so its
    /// `tool_arguments` flood is many calls.
    Flood {
        /// What grows.
        #[serde(default)]
        what: FloodKind,
        /// Bytes of flood streamed.
        bytes: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
    /// HTTP 200, `after_events` whole events, then silence until the client gives up.
    Stall {
        /// Whole events sent before going silent.
        #[serde(default = "two")]
        after_events: usize,
        /// How many attempts get this fault.
        #[serde(default = "one")]
        times: u32,
    },
}

impl Fault {
    /// How many consecutive attempts this fault is served for.
    pub fn times(&self) -> u32 {
        match self {
            Fault::HttpStatus { times, .. }
            | Fault::ErrorEvent { times, .. }
            | Fault::Cut { times, .. }
            | Fault::EndEarly { times, .. }
            | Fault::EndlessLine { times, .. }
            | Fault::EchoKey { times, .. }
            | Fault::Redirect { times, .. }
            | Fault::Flood { times, .. }
            | Fault::Stall { times, .. } => *times,
        }
    }
}

fn one() -> u32 {
    1
}

fn unauthorized() -> u16 {
    401
}

fn default_echo_pad() -> usize {
    480
}

fn temporary_redirect() -> u16 {
    307
}

/// What a [`Fault::Flood`] grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloodKind {
    /// The reply's visible text.
    #[default]
    Text,
    /// The arguments of one tool call (`exec_command`).
    ToolArguments,
}

fn two() -> usize {
    2
}

fn default_error_message() -> String {
    "injected fault".to_owned()
}

/// An error class, rendered in each wire's own vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Anthropic `overloaded_error` (529); OpenAI `server_is_overloaded`; Gemini `UNAVAILABLE`.
    Overloaded,
    /// Rate limited: Anthropic `rate_limit_error`; OpenAI `rate_limit_exceeded`; Gemini 429.
    RateLimit,
    /// Internal server error.
    Server,
    /// The request was invalid (not retryable).
    InvalidRequest,
}

/// The OpenAI Responses API reports a mid-stream failure in more than one shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponsesErrorShape {
    /// `response.failed` carrying `response.error {code, message}`.
    #[default]
    Failed,
    /// `error` event with top-level `code`, `message`, `param`.
    Flat,
    /// `error` event with a nested `error {type, code, message}` object.
    Nested,
}

/// How a turn's bytes are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    /// Milliseconds to wait after the response headers, before the first body chunk.
    #[serde(default)]
    pub first_chunk_delay_ms: u64,
    /// Milliseconds to wait between body chunks.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Characters per text / reasoning / argument delta (1 splits every JSON token apart).
    #[serde(default = "default_delta_chars")]
    pub delta_chars: usize,
    /// How the SSE bytes are cut into writes on the socket.
    #[serde(default)]
    pub tcp: TcpChunking,
}

impl Default for Delivery {
    fn default() -> Self {
        Self {
            first_chunk_delay_ms: 0,
            chunk_delay_ms: 0,
            delta_chars: default_delta_chars(),
            tcp: TcpChunking::default(),
        }
    }
}

fn default_delta_chars() -> usize {
    12
}

/// How the SSE byte stream is cut into socket writes (each an HTTP chunk).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpChunking {
    /// One write per SSE event.
    #[default]
    PerEvent,
    /// Cut inside every multi-byte UTF-8 character, between every CR and LF, and inside every
    /// `data:` field name and JSON payload.
    Awkward,
    /// Fixed-size writes of this many bytes, ignoring event boundaries.
    Every(usize),
}

/// Checks on the request that consumes a turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The request answers every tool call of the previous scripted turn.
    #[serde(default)]
    pub tool_results_for_previous: bool,
    /// The request offers tools with these names.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The raw request body contains each of these strings.
    #[serde(default)]
    pub body_contains: Vec<String>,
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The JSON does not describe a scenario.
    #[error("invalid scenario JSON: {0}")]
    Parse(#[from] serde_json::Error),
    /// The JSON parsed but a value is unusable.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

impl Scenario {
    /// A scenario of these turns with default policies.
    pub fn new(turns: Vec<Turn>) -> Self {
        Self {
            model: default_model(),
            turns,
            ..Self::default()
        }
    }

    /// Parses and validates scenario JSON.
    pub fn from_json(json: &str) -> Result<Self, ScenarioError> {
        let scenario: Scenario = serde_json::from_str(json)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut scenario = Self::from_json(&text)?;
        if let Some(dir) = path.parent() {
            let turns = scenario
                .turns
                .iter_mut()
                .chain(scenario.scripts.iter_mut().flat_map(|s| s.turns.iter_mut()));
            for replay in turns.filter_map(|turn| turn.replay.as_mut()) {
                if replay.file.is_relative() {
                    replay.file = dir.join(&replay.file);
                }
            }
        }
        Ok(scenario)
    }

    /// Rejects values the server could not serve faithfully.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        validate_turns("", &self.turns)?;
        for (index, script) in self.scripts.iter().enumerate() {
            if script.when_task_contains.is_empty() {
                return Err(ScenarioError::Invalid(format!(
                    "script {index}: when_task_contains is empty"
                )));
            }
            validate_turns(&format!("script {index}, "), &script.turns)?;
        }
        Ok(())
    }
}

/// Checks `turns`; errors name `prefix` and the turn's index.
fn validate_turns(prefix: &str, turns: &[Turn]) -> Result<(), ScenarioError> {
    for (index, turn) in turns.iter().enumerate() {
        let bad = |what: String| ScenarioError::Invalid(format!("{prefix}turn {index}: {what}"));
        if turn.delivery.delta_chars == 0 {
            return Err(bad("delivery.delta_chars must be at least 1".into()));
        }
        if turn.delivery.tcp == TcpChunking::Every(0) {
            return Err(bad("delivery.tcp.every must be at least 1".into()));
        }
        if turn.usage.cached > turn.usage.input {
            return Err(bad("usage.cached exceeds usage.input".into()));
        }
        if turn.usage.reasoning > turn.usage.output {
            return Err(bad("usage.reasoning exceeds usage.output".into()));
        }
        for call in &turn.tool_calls {
            if call.name.is_empty() {
                return Err(bad("a tool call has an empty name".into()));
            }
        }
        for fault in &turn.faults {
            if fault.times() == 0 {
                return Err(bad("a fault has times = 0".into()));
            }
            match fault {
                Fault::HttpStatus { status, .. } | Fault::EchoKey { status, .. } => {
                    if !(400..=599).contains(status) {
                        return Err(bad(format!("status {status} is not an error status")));
                    }
                }
                Fault::Redirect { status, .. } => {
                    if !(300..=399).contains(status) {
                        return Err(bad(format!("redirect status {status} is not a 3xx")));
                    }
                }
                Fault::Flood { bytes, .. } => {
                    if *bytes == 0 {
                        return Err(bad("a flood needs bytes of at least 1".into()));
                    }
                }
                Fault::ErrorEvent { .. }
                | Fault::Cut { .. }
                | Fault::EndEarly { .. }
                | Fault::EndlessLine { .. }
                | Fault::Stall { .. } => {}
            }
        }
        let rendered =
            turn.text.is_some() || !turn.tool_calls.is_empty() || turn.reasoning.is_some();
        match &turn.replay {
            Some(_) if rendered => {
                return Err(bad(
                    "a replayed turn serves its file; it has no text, reasoning or tool calls"
                        .into(),
                ));
            }
            Some(replay) if !(100..=599).contains(&replay.status) => {
                return Err(bad(format!(
                    "replay status {} is not an HTTP status",
                    replay.status
                )));
            }
            Some(_) => {}
            None if !rendered => {
                return Err(bad(
                    "a turn needs text, reasoning, tool calls or a replay".into()
                ));
            }
            None => {}
        }
    }
    Ok(())
}

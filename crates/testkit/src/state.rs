//! The server's shared state: the scenario cursor, the recording of every request, the ledger
//! of what was issued, and the decision of what each model request gets (a scripted turn, a
//! fault, a side reply) with its `expect` checks.

use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::ledger::Ledger;
use crate::scenario::{Expect, Fault, Scenario, Turn};
use crate::wire::{RequestFacts, Wire};

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

/// Where one script of turns stands: the scenario's `turns`, or one of its `scripts`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Track {
    /// Index of the next unconsumed turn of the script.
    pub cursor: usize,
    /// Faulted attempts so far at `cursor`.
    pub attempts: u32,
}

/// Mutable state shared by all connections.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The scenario's `turns`.
    pub main: Track,
    /// One per entry of the scenario's `scripts`.
    pub scripts: Vec<Track>,
    pub requests: Vec<RecordedRequest>,
    pub violations: Vec<String>,
    pub ledger: Ledger,
}

pub(crate) struct Shared {
    pub scenario: Scenario,
    state: Mutex<State>,
}

impl Shared {
    /// Fresh state for a validated scenario.
    pub fn new(scenario: Scenario) -> Self {
        let state = State {
            scripts: vec![Track::default(); scenario.scripts.len()],
            ..State::default()
        };
        Self {
            scenario,
            state: Mutex::new(state),
        }
    }

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
        // A conversation whose user messages name a script plays it; every other one `turns`.
        // Turn indices are global: `turns` first, then each script's turns in order.
        let (script, turns) = self
            .scenario
            .turns_for(facts.user_texts.iter().map(String::as_str));
        let offset = script.map_or(0, |index| {
            self.scenario.turns.len()
                + self.scenario.scripts[..index]
                    .iter()
                    .map(|s| s.turns.len())
                    .sum::<usize>()
        });
        let mut state = self.state();
        let mut violations = state.ledger.check(wire, facts);
        let track = match script {
            Some(index) => state.scripts[index],
            None => state.main,
        };
        let Some(turn) = turns.get(track.cursor).cloned() else {
            state.violations.append(&mut violations);
            return (Plan::Exhausted, Served::Exhausted);
        };
        let index = offset + track.cursor;
        let previous = (track.cursor > 0).then(|| index - 1);
        let attempt = track.attempts;
        if attempt == 0
            && let Some(expect) = &turn.expect
        {
            violations.extend(check_expect(
                expect,
                index,
                previous,
                &state.ledger,
                wire,
                facts,
                raw_body,
            ));
        }
        state.violations.append(&mut violations);
        let mut seen = 0;
        let mut next = Track {
            cursor: track.cursor + 1,
            attempts: 0,
        };
        let mut plan = (
            Plan::Clean {
                index,
                turn: turn.clone(),
            },
            Served::Turn { index, attempt },
        );
        for fault in &turn.faults {
            seen += fault.times();
            if attempt < seen {
                next = Track {
                    cursor: track.cursor,
                    attempts: attempt + 1,
                };
                plan = (
                    Plan::Fault {
                        turn: turn.clone(),
                        fault: fault.clone(),
                    },
                    Served::Fault { index, attempt },
                );
                break;
            }
        }
        match script {
            Some(script) => state.scripts[script] = next,
            None => state.main = next,
        }
        plan
    }
}

/// Appends a recorded request.
pub(crate) fn record(shared: &Shared, request: RecordedRequest) {
    shared.state().requests.push(request);
}

/// Checks a turn's `expect` against the request that first reaches it.
pub(crate) fn check_expect(
    expect: &Expect,
    index: usize,
    previous: Option<usize>,
    ledger: &Ledger,
    wire: Wire,
    facts: &RequestFacts,
    raw_body: &str,
) -> Vec<String> {
    let mut violations = Vec::new();
    if expect.tool_results_for_previous
        && let Some(previous) = previous
    {
        for (issued_wire, call) in ledger.calls_of_turn(previous) {
            let answered = facts.tool_results.iter().any(|result| match issued_wire {
                Wire::Gemini => result.name.as_deref() == Some(call.name.as_str()),
                Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => {
                    result.id.as_deref() == Some(call.id.as_str())
                }
            });
            if !answered {
                violations.push(format!(
                    "turn {index} ({wire}): expected a tool result for call {} ({}) of turn {previous}",
                    call.id,
                    call.name,
                ));
            }
        }
    }
    for tool in &expect.tools {
        if !facts.tool_names.contains(tool) {
            violations.push(format!(
                "turn {index} ({wire}): expected tool {tool:?} to be offered; offered {:?}",
                facts.tool_names
            ));
        }
    }
    for needle in &expect.body_contains {
        if !raw_body.contains(needle.as_str()) {
            violations.push(format!(
                "turn {index} ({wire}): request body does not contain {needle:?}"
            ));
        }
    }
    violations
}

//! What a worker's protocol messages become on our bus: the same events the native loop emits
//! (turns, text deltas, whole responses, tool calls and outputs, usage with cost, errors), so
//! every frontend and the session log see one vocabulary whichever worker runs.

use intendant_core::bus::EventBus;
use intendant_core::usage::{Usage, UsageTracker, usage_event};
use intendant_protocol::events::AppEvent;

/// Most bytes of one tool output put in an event.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The session's events from one worker: the bus plus the counters events carry.
pub struct WorkerEvents {
    bus: EventBus,
    usage: UsageTracker,
    cost_usd: f64,
    turn: u32,
    last_message: String,
}

impl WorkerEvents {
    /// Events on `bus`, usage priced for `model` (0 when its price is unknown and the worker
    /// reports no cost).
    pub fn new(bus: EventBus, model: &str) -> WorkerEvents {
        WorkerEvents {
            bus,
            usage: UsageTracker::new(model, None),
            cost_usd: 0.0,
            turn: 0,
            last_message: String::new(),
        }
    }

    /// The bus.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// Emits any event.
    pub fn emit(&self, event: AppEvent) {
        self.bus.emit(event);
    }

    /// A protocol turn opened: `turn_started` with the next turn number.
    pub fn turn_started(&mut self) {
        self.turn += 1;
        self.last_message.clear();
        self.emit(AppEvent::TurnStarted { turn: self.turn });
    }

    /// Turns so far.
    pub fn turns(&self) -> u32 {
        self.turn
    }

    /// Visible model text as it streams.
    pub fn text_delta(&self, text: &str) {
        if !text.is_empty() {
            self.emit(AppEvent::ModelResponseDelta {
                text: text.to_owned(),
            });
        }
    }

    /// One whole agent message (the authoritative text, not the sum of the deltas).
    pub fn message(&mut self, text: &str, reasoning: &str) {
        self.last_message = text.to_owned();
        self.emit(AppEvent::ModelResponse {
            turn: self.turn,
            text: text.to_owned(),
            reasoning: reasoning.to_owned(),
            tool_calls: Vec::new(),
        });
    }

    /// The last whole message of the open turn (the round's final message).
    pub fn last_message(&self) -> &str {
        &self.last_message
    }

    /// The worker started a tool (`name` in our vocabulary where one exists: `exec_command`,
    /// `edit_file`).
    pub fn tool_call(&self, call_id: &str, name: &str, arguments: serde_json::Value) {
        self.emit(AppEvent::ToolCall {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
    }

    /// A tool's result, bounded to [`MAX_OUTPUT_BYTES`].
    pub fn tool_output(&self, call_id: &str, name: &str, output: &str) {
        self.emit(AppEvent::AgentOutput {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            output: bounded(output, MAX_OUTPUT_BYTES),
        });
    }

    /// Usage of one model request; `reported_cost_usd` when the worker prices it itself, else
    /// priced from our table.
    pub fn usage(&mut self, usage: &Usage, reported_cost_usd: Option<f64>) {
        let priced = self.usage.record(usage);
        let cost = reported_cost_usd.unwrap_or(priced);
        self.cost_usd += cost;
        self.emit(usage_event(self.turn, usage, cost));
    }

    /// Session totals: tokens and cost so far.
    pub fn totals(&self) -> (Usage, f64) {
        (self.usage.total(), self.cost_usd)
    }

    /// Something failed (the session may go on).
    pub fn error(&self, message: impl Into<String>) {
        self.emit(AppEvent::Error {
            message: message.into(),
        });
    }

    /// Something looks wrong; nothing ended.
    pub fn warning(&self, message: impl Into<String>) {
        self.emit(AppEvent::Warning {
            message: message.into(),
        });
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, saying how much was cut.
pub fn bounded(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… {} more bytes", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_bounded_on_a_char_boundary() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("aé", 2), "a… 2 more bytes");
    }
}

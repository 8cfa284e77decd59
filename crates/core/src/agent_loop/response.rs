//! What one response means beyond its tool calls: a refusal (shown, and the round's end when
//! the model asked for nothing else) and a truncation by the output token cap (shown, and the
//! model told when the loop goes on; a call the cap cut mid-arguments is never run).

use intendant_protocol::events::AppEvent;
use intendant_providers::{ChatResponse, StopReason};

use super::{AgentLoop, RoundStop};

/// Responses in a row the cap may cut before the round ends instead of asking for the rest.
const MAX_TRUNCATED_IN_A_ROW: u32 = 3;

impl AgentLoop {
    /// Shows a refusal (or a safety filter's stop) and returns the round's end; `None` when
    /// the response is neither.
    pub(super) fn refusal(&self, response: &ChatResponse) -> Option<RoundStop> {
        let text = if !response.refusal.trim().is_empty() {
            response.refusal.clone()
        } else {
            match response.stop_reason {
                Some(StopReason::Refusal) => {
                    "the model refused (the provider gave no explanation)".to_owned()
                }
                Some(StopReason::ContentFilter) => {
                    "the provider's safety filter stopped the response".to_owned()
                }
                Some(
                    StopReason::EndTurn
                    | StopReason::ToolUse
                    | StopReason::MaxTokens
                    | StopReason::Other(_),
                )
                | None => return None,
            }
        };
        self.bus.emit(AppEvent::Refusal {
            turn: self.turn,
            text: text.clone(),
        });
        Some(RoundStop::Refused(text))
    }

    /// Shows a truncated response and returns what the model is told; `None` when the
    /// response ended on its own.
    pub(super) fn truncation(&mut self, response: &ChatResponse) -> Option<String> {
        if !response.truncated() {
            self.truncated_in_a_row = 0;
            return None;
        }
        self.truncated_in_a_row += 1;
        let limit = self
            .cfg
            .max_output_tokens
            .map(|n| format!(" ({n} tokens)"))
            .unwrap_or_default();
        let cut: Vec<String> = response
            .cut_calls
            .iter()
            .map(|c| format!("`{}`", c.name))
            .collect();
        let (detail, for_model) = if cut.is_empty() {
            (
                format!("the response reached the output token limit{limit} and was cut off"),
                format!(
                    "[controller] Your previous response was cut off at the output token \
                     limit{limit}. Continue from where it stopped, more briefly."
                ),
            )
        } else {
            let calls = cut.join(", ");
            (
                format!(
                    "the response reached the output token limit{limit}; the call to {calls} \
                     was cut mid-arguments and was not run"
                ),
                format!(
                    "[controller] Your previous response was cut off at the output token \
                     limit{limit} while writing the call to {calls}; that call was not run. \
                     Issue it again with shorter arguments (for a large file, write it in parts)."
                ),
            )
        };
        self.bus.emit(AppEvent::Truncated {
            turn: self.turn,
            detail,
        });
        Some(for_model)
    }

    /// Whether the loop may ask for the rest of a cut response (not after too many in a row).
    pub(super) fn may_continue_cut(&self) -> bool {
        self.truncated_in_a_row < MAX_TRUNCATED_IN_A_ROW
    }
}

//! The scripted model: a [`ChatProvider`] that plays a [`Scenario`] in process, with no key and
//! no network (`intendant --provider mock --scenario FILE`, "try it without a key").
//!
//! It plays the same scenario file the test kit's fake model server serves: each main request
//! takes the next turn (reasoning, text, tool calls, usage, stop) as normalized events, in
//! deltas of `delivery.delta_chars` characters with the delivery's delays; side requests get
//! the side reply; `on_exhausted` decides what follows the last turn. Faults are the fake
//! server's business (they break HTTP, and there is none here), so a scenario with faults is
//! refused, and so is a replayed recording; `expect` checks and `delivery.tcp` are the
//! server's too and are not applied.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::stream;

use crate::scenario::{OnExhausted, Scenario, ScenarioError, StopKind, Turn};
use crate::{
    ChatProvider, ChatRequest, ConversationItem, EventStream, ProviderError, ReasoningItem,
    StopReason, StreamEvent, ToolCall, Usage,
};

/// The name the scripted model reports (and `--provider` selects it by).
const NAME: &str = "mock";

/// A [`ChatProvider`] playing a scenario's turns in order.
#[derive(Debug)]
pub struct ScriptedProvider {
    scenario: Scenario,
    progress: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    /// Index of the next unplayed turn.
    cursor: usize,
    /// Tool calls issued so far (for generated ids).
    calls: usize,
    /// The script this session plays, chosen at its first main request (`Some(None)`: the
    /// scenario's own turns).
    script: Option<Option<usize>>,
}

impl ScriptedProvider {
    /// A provider for `scenario`, validated; a scenario with faults is refused.
    pub fn new(scenario: Scenario) -> Result<Self, ScenarioError> {
        scenario.validate()?;
        let mut all_turns = scenario
            .turns
            .iter()
            .chain(scenario.scripts.iter().flat_map(|s| &s.turns));
        if let Some(index) = all_turns.position(|t| !t.faults.is_empty() || t.replay.is_some()) {
            return Err(ScenarioError::Invalid(format!(
                "turn {index}: faults and replays are served only by the fake model server \
                 (intendant-fake-model); the scripted model plays rendered turns"
            )));
        }
        Ok(Self {
            scenario,
            progress: Mutex::new(Progress::default()),
        })
    }

    /// The model the scenario names.
    pub fn model(&self) -> &str {
        &self.scenario.model
    }

    fn progress(&self) -> MutexGuard<'_, Progress> {
        // Progress is two counters, consistent after any panic.
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The turn `request` gets, advancing the script when it is a main request.
    fn next_turn(&self, request: &ChatRequest) -> Result<Turn, ProviderError> {
        let side = &self.scenario.side_requests;
        if (side.when_no_tools && request.tools.is_empty()) || side.models.contains(&request.model)
        {
            return Ok(Turn::text(side.reply.clone()));
        }
        let mut progress = self.progress();
        let script = *progress.script.get_or_insert_with(|| {
            let texts = request.items.iter().filter_map(|item| match item {
                ConversationItem::User { text } => Some(text.as_str()),
                _ => None,
            });
            self.scenario.turns_for(texts).0
        });
        let turns = match script {
            Some(index) => &self.scenario.scripts[index].turns,
            None => &self.scenario.turns,
        };
        match turns.get(progress.cursor) {
            Some(turn) => {
                progress.cursor += 1;
                Ok(turn.clone())
            }
            None => match self.scenario.on_exhausted {
                OnExhausted::Done => Ok(Turn::text("done")),
                OnExhausted::Error => Err(ProviderError::Stream {
                    provider: NAME,
                    message: format!(
                        "scripted model exhausted: all {} turns were played",
                        turns.len()
                    ),
                    retryable: false,
                    retry_after_ms: None,
                }),
            },
        }
    }

    /// The turn's events, in the order a wire streams them.
    fn events(&self, turn: &Turn) -> Vec<StreamEvent> {
        let chars = turn.delivery.delta_chars;
        let mut out = Vec::new();
        if let Some(reasoning) = &turn.reasoning {
            for piece in pieces(&reasoning.text, chars) {
                out.push(StreamEvent::ReasoningDelta { text: piece });
            }
            out.push(StreamEvent::ReasoningDone {
                item: ReasoningItem {
                    provider: NAME.to_owned(),
                    text: reasoning.text.clone(),
                    signature: reasoning.signature.clone(),
                    ..ReasoningItem::default()
                },
            });
        }
        if let Some(text) = &turn.text {
            for piece in pieces(text, chars) {
                out.push(StreamEvent::TextDelta { text: piece });
            }
        }
        let first_call = {
            let mut progress = self.progress();
            let first = progress.calls;
            progress.calls += turn.tool_calls.len();
            first
        };
        for (index, spec) in turn.tool_calls.iter().enumerate() {
            let call_id = spec
                .id
                .clone()
                .unwrap_or_else(|| format!("call_mock_{}", first_call + index));
            out.push(StreamEvent::ToolCallStart {
                index,
                call_id: call_id.clone(),
                name: spec.name.clone(),
            });
            let arguments = spec.arguments.to_string();
            for piece in pieces(&arguments, chars) {
                out.push(StreamEvent::ToolCallArgumentsDelta {
                    index,
                    delta: piece,
                });
            }
            out.push(StreamEvent::ToolCallDone {
                index,
                call: ToolCall {
                    call_id,
                    name: spec.name.clone(),
                    arguments,
                    thought_signature: None,
                    provider_id: false,
                },
            });
        }
        out.push(StreamEvent::Usage {
            usage: Usage {
                input_tokens: turn.usage.input,
                cached_input_tokens: turn.usage.cached,
                output_tokens: turn.usage.output,
                reasoning_tokens: turn.usage.reasoning,
            },
        });
        let stop_reason = match turn.stop {
            StopKind::MaxTokens => StopReason::MaxTokens,
            StopKind::Natural if turn.tool_calls.is_empty() => StopReason::EndTurn,
            StopKind::Natural => StopReason::ToolUse,
        };
        out.push(StreamEvent::Completed { stop_reason });
        out
    }
}

/// `text` in pieces of `chars` characters (none for empty text).
fn pieces(text: &str, chars: usize) -> Vec<String> {
    let all: Vec<char> = text.chars().collect();
    if all.is_empty() {
        return Vec::new();
    }
    all.chunks(chars.max(1))
        .map(|chunk| chunk.iter().collect())
        .collect()
}

#[async_trait::async_trait]
impl ChatProvider for ScriptedProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError> {
        let turn = self.next_turn(request)?;
        let events = self.events(&turn);
        let first = Duration::from_millis(turn.delivery.first_chunk_delay_ms);
        let between = Duration::from_millis(turn.delivery.chunk_delay_ms);
        if first.is_zero() && between.is_zero() {
            return Ok(stream::iter(events).boxed());
        }
        let paced = stream::iter(events.into_iter().enumerate()).then(move |(index, event)| {
            let pause = if index == 0 { first } else { between };
            async move {
                tokio::time::sleep(pause).await;
                event
            }
        });
        Ok(paced.boxed())
    }
}

//! Folding a stream of [`StreamEvent`]s into one [`ChatResponse`].

use std::collections::BTreeMap;

use futures::StreamExt;

use crate::{ChatResponse, EventStream, ProviderError, StreamEvent, ToolCall};

/// Folds stream events into a [`ChatResponse`]: text and reasoning concatenated, tool-call
/// arguments assembled per index, tool calls ordered by index, the last usage kept.
#[derive(Debug, Clone)]
pub struct ResponseAccumulator {
    provider: &'static str,
    response: ChatResponse,
    calls: BTreeMap<usize, ToolCall>,
    error: Option<(String, bool, Option<u64>)>,
}

impl Default for ResponseAccumulator {
    fn default() -> Self {
        Self::new("model")
    }
}

impl ResponseAccumulator {
    /// An empty accumulator; `provider` names the wire in the error [`Self::finish`] may return.
    pub fn new(provider: &'static str) -> Self {
        Self {
            provider,
            response: ChatResponse::default(),
            calls: BTreeMap::new(),
            error: None,
        }
    }

    /// Folds one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { text } => self.response.text.push_str(text),
            StreamEvent::ReasoningDelta { text } => self.response.reasoning_text.push_str(text),
            StreamEvent::ReasoningDone { item } => self.response.reasoning.push(item.clone()),
            StreamEvent::ToolCallStart {
                index,
                call_id,
                name,
            } => {
                let call = self.calls.entry(*index).or_default();
                call.call_id.clone_from(call_id);
                call.name.clone_from(name);
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                self.calls
                    .entry(*index)
                    .or_default()
                    .arguments
                    .push_str(delta);
            }
            StreamEvent::ToolCallDone { index, call } => {
                let slot = self.calls.entry(*index).or_default();
                let streamed = std::mem::take(&mut slot.arguments);
                *slot = call.clone();
                if slot.arguments.is_empty() {
                    slot.arguments = streamed;
                }
            }
            StreamEvent::Usage { usage } => self.response.usage = Some(*usage),
            StreamEvent::Completed { stop_reason } => {
                self.response.stop_reason = Some(stop_reason.clone());
            }
            StreamEvent::Error {
                message,
                retryable,
                retry_after_ms,
            } => self.error = Some((message.clone(), *retryable, *retry_after_ms)),
        }
    }

    /// The response so far (tool calls not yet included).
    pub fn partial(&self) -> &ChatResponse {
        &self.response
    }

    /// The folded response, or the stream's error. A stream that never completed is a
    /// retryable error.
    pub fn finish(self) -> Result<ChatResponse, ProviderError> {
        if let Some((message, retryable, retry_after_ms)) = self.error {
            return Err(ProviderError::Stream {
                provider: self.provider,
                message,
                retryable,
                retry_after_ms,
            });
        }
        if self.response.stop_reason.is_none() {
            return Err(ProviderError::Stream {
                provider: self.provider,
                message: "stream ended before the response completed".to_owned(),
                retryable: true,
                retry_after_ms: None,
            });
        }
        let mut response = self.response;
        response.tool_calls = self.calls.into_values().collect();
        Ok(response)
    }
}

/// Drains `stream` into a [`ChatResponse`].
pub async fn collect_response(
    provider: &'static str,
    mut stream: EventStream,
) -> Result<ChatResponse, ProviderError> {
    let mut acc = ResponseAccumulator::new(provider);
    while let Some(event) = stream.next().await {
        acc.push(&event);
    }
    acc.finish()
}

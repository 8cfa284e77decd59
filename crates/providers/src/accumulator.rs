//! Folding a stream of [`StreamEvent`]s into one [`ChatResponse`], within [`ReplyLimits`]: the
//! caps are checked before each event's content is appended, so a model streaming without end
//! costs at most the cap, and the caller stops reading once [`ResponseAccumulator::over_limit`].

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;

use crate::error::ReplyCap;
use crate::{ChatResponse, EventStream, ProviderError, StopReason, StreamEvent, ToolCall};

/// Default cap on everything one reply streams: 16 MiB, some 30 times the largest output any
/// current model is allowed (128k tokens, about 0.5 MiB), so only a broken or hostile server
/// reaches it.
pub const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Default cap on one tool call's arguments: 8 MiB, room for writing an 8 MiB file in one
/// `edit_file` call, and the SSE decoder's largest event, so one call cannot outgrow one event.
pub const DEFAULT_MAX_TOOL_CALL_BYTES: usize = 8 * 1024 * 1024;

/// Caps on one model reply, in bytes of content buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Everything one reply streams: text, reasoning (text and opaque items) and every tool
    /// call's arguments.
    pub max_reply_bytes: usize,
    /// The arguments of any one tool call.
    pub max_tool_call_bytes: usize,
}

impl Default for ReplyLimits {
    fn default() -> Self {
        Self {
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_tool_call_bytes: DEFAULT_MAX_TOOL_CALL_BYTES,
        }
    }
}

/// Folds stream events into a [`ChatResponse`]: text and reasoning concatenated, tool-call
/// arguments assembled per index, tool calls ordered by index, the last usage kept. A response
/// that streamed refusal text stops as a refusal when the wire ended it as an answer (end of
/// turn or tool use), whatever the wire.
#[derive(Debug, Clone)]
pub struct ResponseAccumulator {
    provider: &'static str,
    response: ChatResponse,
    calls: BTreeMap<usize, ToolCall>,
    /// Calls that opened with a start event and have streamed no arguments since: the ones a
    /// wire closes with `{}` when the cap cuts them before their first argument byte.
    opened_without_arguments: BTreeSet<usize>,
    /// The call the last content event belonged to, if it was a call's.
    last_content_call: Option<usize>,
    error: Option<(String, bool, Option<u64>)>,
    limits: ReplyLimits,
    /// Content bytes buffered so far, over every part of the reply.
    buffered: usize,
    exceeded: Option<ReplyCap>,
}

impl Default for ResponseAccumulator {
    fn default() -> Self {
        Self::new("model")
    }
}

impl ResponseAccumulator {
    /// An empty accumulator with the default limits; `provider` names the wire in the error
    /// [`Self::finish`] may return.
    pub fn new(provider: &'static str) -> Self {
        Self::with_limits(provider, ReplyLimits::default())
    }

    /// An empty accumulator enforcing `limits`.
    pub fn with_limits(provider: &'static str, limits: ReplyLimits) -> Self {
        Self {
            provider,
            response: ChatResponse::default(),
            calls: BTreeMap::new(),
            opened_without_arguments: BTreeSet::new(),
            last_content_call: None,
            error: None,
            limits,
            buffered: 0,
            exceeded: None,
        }
    }

    /// Whether a cap was exceeded: the reply can only fail now, so stop reading the stream.
    pub fn over_limit(&self) -> bool {
        self.exceeded.is_some()
    }

    /// The content bytes `event` adds, and for a tool-call event the size its call's arguments
    /// reach.
    fn growth(&self, event: &StreamEvent) -> (usize, Option<usize>) {
        let streamed = |index: &usize| self.calls.get(index).map_or(0, |c| c.arguments.len());
        match event {
            StreamEvent::TextDelta { text }
            | StreamEvent::ReasoningDelta { text }
            | StreamEvent::RefusalDelta { text }
            | StreamEvent::Warning { message: text } => (text.len(), None),
            StreamEvent::ReasoningDone { item } => {
                let opaque = [
                    &item.id,
                    &item.encrypted_content,
                    &item.signature,
                    &item.redacted_data,
                    &item.raw,
                ];
                let bytes = opaque.iter().map(|o| o.as_ref().map_or(0, String::len));
                (item.text.len() + bytes.sum::<usize>(), None)
            }
            StreamEvent::ToolCallStart { name, call_id, .. } => (name.len() + call_id.len(), None),
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                (delta.len(), Some(streamed(index) + delta.len()))
            }
            StreamEvent::ToolCallDone { index, call } => {
                // The done call replaces what streamed for it (Gemini's carries it all).
                let arguments = call.arguments.len().saturating_sub(streamed(index));
                let ids = if self.calls.contains_key(index) {
                    0
                } else {
                    call.name.len() + call.call_id.len()
                };
                (arguments + ids, Some(call.arguments.len()))
            }
            StreamEvent::Usage { .. }
            | StreamEvent::Completed { .. }
            | StreamEvent::Error { .. } => (0, None),
        }
    }

    /// Folds one event; past a cap, content is no longer kept (see [`Self::over_limit`]).
    pub fn push(&mut self, event: &StreamEvent) {
        if self.exceeded.is_some() {
            return;
        }
        let (added, call_size) = self.growth(event);
        let cap = if call_size.is_some_and(|size| size > self.limits.max_tool_call_bytes) {
            Some(ReplyCap::ToolCall)
        } else {
            (self.buffered.saturating_add(added) > self.limits.max_reply_bytes)
                .then_some(ReplyCap::Reply)
        };
        if let Some(cap) = cap {
            self.exceeded = Some(cap);
            self.response = ChatResponse::default();
            self.calls.clear();
            return;
        }
        self.buffered += added;
        self.last_content_call = match event {
            StreamEvent::ToolCallStart { index, .. }
            | StreamEvent::ToolCallArgumentsDelta { index, .. }
            | StreamEvent::ToolCallDone { index, .. } => Some(*index),
            StreamEvent::TextDelta { .. }
            | StreamEvent::ReasoningDelta { .. }
            | StreamEvent::RefusalDelta { .. }
            | StreamEvent::ReasoningDone { .. } => None,
            StreamEvent::Warning { .. }
            | StreamEvent::Usage { .. }
            | StreamEvent::Completed { .. }
            | StreamEvent::Error { .. } => self.last_content_call,
        };
        match event {
            StreamEvent::TextDelta { text } => self.response.text.push_str(text),
            StreamEvent::ReasoningDelta { text } => self.response.reasoning_text.push_str(text),
            StreamEvent::RefusalDelta { text } => self.response.refusal.push_str(text),
            StreamEvent::Warning { message } => self.response.warnings.push(message.clone()),
            StreamEvent::ReasoningDone { item } => self.response.reasoning.push(item.clone()),
            StreamEvent::ToolCallStart {
                index,
                call_id,
                name,
            } => {
                let call = self.calls.entry(*index).or_default();
                call.call_id.clone_from(call_id);
                call.name.clone_from(name);
                self.opened_without_arguments.insert(*index);
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                if !delta.is_empty() {
                    self.opened_without_arguments.remove(index);
                }
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
                // The OpenAI wires end a refused answer as any other; the refusal text decides.
                let refused = !self.response.refusal.is_empty()
                    && matches!(stop_reason, StopReason::EndTurn | StopReason::ToolUse);
                self.response.stop_reason = Some(if refused {
                    StopReason::Refusal
                } else {
                    stop_reason.clone()
                });
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
        if let Some(cap) = self.exceeded {
            let limit = match cap {
                ReplyCap::Reply => self.limits.max_reply_bytes,
                ReplyCap::ToolCall => self.limits.max_tool_call_bytes,
            };
            return Err(ProviderError::TooLarge {
                provider: self.provider,
                cap,
                limit,
            });
        }
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
        let truncated = response.truncated();
        for (index, call) in self.calls {
            let empty_at_the_cut = self.last_content_call == Some(index)
                && self.opened_without_arguments.contains(&index);
            if truncated && cut_off(&call, empty_at_the_cut) {
                response.cut_calls.push(call);
            } else {
                response.tool_calls.push(call);
            }
        }
        Ok(response)
    }
}

/// Whether a call of a response the output token cap ended was cut off mid-arguments: its
/// arguments are not a whole JSON object, or it is the call the cap interrupted after it opened
/// and before its first argument byte (`empty_at_the_cut`: the wires close such a call with
/// `{}`). A call that arrived whole, as Gemini sends them (arguments and all), was not
/// interrupted.
fn cut_off(call: &ToolCall, empty_at_the_cut: bool) -> bool {
    let whole = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .is_ok_and(|value| value.is_object());
    !whole || (empty_at_the_cut && call.arguments.trim() == "{}")
}

/// Drains `stream` into a [`ChatResponse`].
pub async fn collect_response(
    provider: &'static str,
    mut stream: EventStream,
) -> Result<ChatResponse, ProviderError> {
    let mut acc = ResponseAccumulator::new(provider);
    while let Some(event) = stream.next().await {
        acc.push(&event);
        if acc.over_limit() {
            break;
        }
    }
    acc.finish()
}

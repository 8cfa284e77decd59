//! Model providers: one [`ChatProvider`] trait, one normalized request ([`ChatRequest`]) and one
//! normalized stream-event enum ([`StreamEvent`]), four wire implementations.
//!
//! The design decision to know: every wire is folded into the *same* event vocabulary at the
//! SSE boundary, and opaque provider state (reasoning items, thinking signatures, thought
//! signatures) travels through the conversation as bytes that are echoed back unchanged.
//!
//! # Layout
//! - `types`: the normalized request, conversation items, stream events, usage.
//! - `accumulator`: [`ResponseAccumulator`], folding events into a [`ChatResponse`] within
//!   [`ReplyLimits`].
//! - `error`: [`ProviderError`] and its retry classification; `mask`: API-key masking.
//! - `sse`: the incremental, bounded SSE decoder and the [`sse::WireParser`] glue.
//! - `http` (private): POST with retry, error classification, the idle-timed event stream.
//! - `json_scan`, `fast_path` (private): a strict single-pass JSON reader that each wire steers
//!   to decode its plain text-delta events (the bulk of every stream) without `serde_json`;
//!   every other shape goes through the wires' `serde_json` decoding.
//! - `retry`: the connection-establishment retry policy (observable backoff).
//! - `config`: [`ProviderKind`], [`ProviderConfig`] (endpoints from env values).
//! - `build` (private): [`build_provider`], the one place a kind becomes a wire.
//! - `models`: the model capability table and the default [`ToolMode`] per wire and family.
//! - `scenario`: the scenario file (turns, and the faults the test kit's fake server injects);
//!   `scripted`: [`scripted::ScriptedProvider`], the in-process scripted model behind
//!   `--provider mock`.
//! - `wire_tools` (private): a request's tools encoded once per shared set and wire.
//! - wires: `openai_responses`, `anthropic`, `gemini`, `openai_chat`.

pub mod accumulator;
pub mod anthropic;
mod build;
pub mod config;
pub mod error;
mod fast_path;
pub mod gemini;
mod http;
mod json_scan;
pub mod mask;
pub mod models;
pub mod openai_chat;
pub mod openai_responses;
pub mod retry;
pub mod scenario;
pub mod scripted;
pub mod sse;
pub mod types;
mod wire_tools;

pub use accumulator::{ReplyLimits, ResponseAccumulator, collect_response};
pub use build::build_provider;
pub use config::{ProviderConfig, ProviderKind};
pub use error::{ProviderError, ReplyCap};
pub use mask::mask_api_keys;
pub use models::{ModelCapabilities, ToolMode, capabilities, default_tool_mode};
pub use retry::{RetryNotice, RetryObserver, RetryPolicy};
pub use types::*;

use futures::stream::BoxStream;

/// A stream of normalized events for one model turn. It ends after [`StreamEvent::Completed`] or
/// [`StreamEvent::Error`].
pub type EventStream = BoxStream<'static, StreamEvent>;

/// One model API. Implementations are cheap to clone behind an `Arc` and safe to share.
#[async_trait::async_trait]
pub trait ChatProvider: Send + Sync {
    /// Wire name, e.g. `openai`, `anthropic`, `gemini`, `openai-chat`.
    fn name(&self) -> &'static str;

    /// Sends `request` and returns its event stream once the HTTP response has begun.
    ///
    /// Connection establishment is retried per the retry policy; failures after this returns
    /// arrive as [`StreamEvent::Error`] (a stream restart is the caller's decision).
    async fn chat_stream(&self, request: &ChatRequest) -> Result<EventStream, ProviderError>;
}

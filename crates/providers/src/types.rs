//! The normalized request and stream vocabulary shared by every wire.

use serde::{Deserialize, Serialize};

/// One request to a model, independent of the wire.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// Model name as the API knows it.
    pub model: String,
    /// System instructions.
    pub system: String,
    /// The conversation so far, oldest first.
    pub items: Vec<ConversationItem>,
    /// Tools the model may call (shared: a session offers the same ones turn after turn).
    pub tools: std::sync::Arc<[ToolDefinition]>,
    /// How the model may use the tools.
    pub tool_choice: ToolChoice,
    /// Cap on output tokens, where the wire supports it.
    pub max_output_tokens: Option<u32>,
    /// Reasoning effort for models that support it.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Constrain the final answer to this JSON Schema.
    pub output_schema: Option<OutputSchema>,
    /// Stable per-session key for server-side prompt caching (OpenAI `prompt_cache_key`).
    pub cache_key: Option<String>,
}

/// One entry of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConversationItem {
    /// Text from the user (or the controller speaking for it).
    User {
        /// The text.
        text: String,
    },
    /// Visible text from the model.
    Assistant {
        /// The text.
        text: String,
    },
    /// Opaque reasoning state to echo back byte-for-byte on the next request.
    Reasoning(ReasoningItem),
    /// A refusal from the model: it declined the request (OpenAI `refusal`, Anthropic
    /// `stop_reason: refusal`). Kept apart from text so each wire can echo it as its own kind.
    Refusal {
        /// What the model said, or the provider's explanation when it said nothing.
        text: String,
    },
    /// A tool call the model made.
    ToolCall(ToolCall),
    /// The answer to a tool call.
    ToolResult {
        /// Id of the call this answers.
        call_id: String,
        /// Name of the tool called (Gemini needs it).
        name: String,
        /// Result text.
        output: String,
        /// Whether the tool failed.
        is_error: bool,
        /// Images the tool returned, sent on the wires that take images in a tool result
        /// (Responses, Anthropic, Gemini); Chat Completions gets the text alone, which names
        /// them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ToolImage>,
    },
}

/// An image a tool returned, base64-encoded as the wires carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolImage {
    /// Its IANA media type: `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// Its bytes in standard base64.
    pub data: String,
}

/// Reasoning the provider asked to have echoed back. Fields are wire-specific and opaque.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningItem {
    /// Which wire produced it (`openai`, `anthropic`, ...); other wires drop it.
    pub provider: String,
    /// OpenAI reasoning item id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Human-readable reasoning text or summary.
    #[serde(default)]
    pub text: String,
    /// OpenAI `encrypted_content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    /// Anthropic thinking `signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Anthropic `redacted_thinking` data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted_data: Option<String>,
    /// The wire's own JSON of the item exactly as received (OpenAI reasoning output item);
    /// when present it is echoed back byte-for-byte instead of being rebuilt from the fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// A complete tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id; synthesized when the wire gave none.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON text, exactly as streamed.
    pub arguments: String,
    /// Gemini `thoughtSignature` on the part, echoed back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    /// Whether `call_id` came from the provider rather than being synthesized: a wire whose
    /// server names calls only sometimes (Gemini 3 does, 2.5 does not) echoes only these.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider_id: bool,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// How the model may use tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Tool {
        /// Tool name.
        name: String,
    },
}

/// Reasoning effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// Minimal.
    Low,
    /// Default.
    Medium,
    /// Most.
    High,
}

/// A JSON Schema the final answer must satisfy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// Schema name (OpenAI requires one).
    pub name: String,
    /// The schema.
    pub schema: serde_json::Value,
}

/// Token usage of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens, cached ones included.
    pub input_tokens: u64,
    /// Input tokens served from the prompt cache.
    pub cached_input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Natural end of the turn.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// Output token cap reached.
    MaxTokens,
    /// The model refused (OpenAI `refusal`, Anthropic `stop_reason: refusal`).
    Refusal,
    /// A safety filter stopped the output.
    ContentFilter,
    /// Anything else, verbatim.
    Other(String),
}

/// One normalized streaming event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Visible text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Refusal text (OpenAI `refusal` deltas; the refusal's explanation elsewhere).
    RefusalDelta {
        /// The new text.
        text: String,
    },
    /// Something in the stream was not understood and was skipped (an unknown content part);
    /// the response goes on.
    Warning {
        /// What was skipped, and why.
        message: String,
    },
    /// Reasoning text (summary or full).
    ReasoningDelta {
        /// The new text.
        text: String,
    },
    /// A finished reasoning item to echo back.
    ReasoningDone {
        /// The item.
        item: ReasoningItem,
    },
    /// A tool call began.
    ToolCallStart {
        /// Position of the call in this response.
        index: usize,
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallArgumentsDelta {
        /// Position of the call in this response.
        index: usize,
        /// The fragment.
        delta: String,
    },
    /// A tool call is complete.
    ToolCallDone {
        /// Position of the call in this response.
        index: usize,
        /// The whole call.
        call: ToolCall,
    },
    /// Token usage (may arrive more than once; the last one wins).
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// The response finished.
    Completed {
        /// Why it stopped.
        stop_reason: StopReason,
    },
    /// The stream failed.
    Error {
        /// What went wrong (keys masked).
        message: String,
        /// Whether retrying may help.
        retryable: bool,
        /// Server-requested delay, in milliseconds.
        retry_after_ms: Option<u64>,
    },
}

/// A whole model response, folded from its events by [`crate::ResponseAccumulator`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Visible text.
    pub text: String,
    /// Reasoning text, concatenated.
    pub reasoning_text: String,
    /// Reasoning items to echo back, in order.
    pub reasoning: Vec<ReasoningItem>,
    /// Tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Usage, when reported.
    pub usage: Option<Usage>,
    /// Why it stopped; `None` if the stream never completed.
    pub stop_reason: Option<StopReason>,
    /// Refusal text, when the model refused.
    pub refusal: String,
    /// What the stream held that was skipped ([`StreamEvent::Warning`]), in order.
    pub warnings: Vec<String>,
    /// Tool calls the output token cap cut off mid-arguments: never to be run.
    pub cut_calls: Vec<ToolCall>,
}

impl ChatResponse {
    /// Whether the output token cap cut the response short.
    pub fn truncated(&self) -> bool {
        self.stop_reason == Some(StopReason::MaxTokens)
    }

    /// Whether the model refused.
    pub fn refused(&self) -> bool {
        self.stop_reason == Some(StopReason::Refusal) || !self.refusal.is_empty()
    }
}

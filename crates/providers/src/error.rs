//! Provider errors and their retry classification.

use thiserror::Error;

/// A failed model request. Messages never contain an API key.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ProviderError {
    /// The server answered with an HTTP error status.
    #[error("{provider} returned HTTP {status}: {message}")]
    Http {
        /// Wire name.
        provider: &'static str,
        /// Status code.
        status: u16,
        /// Masked, bounded body excerpt.
        message: String,
        /// `retry-after`, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// Connecting or sending failed.
    #[error("{provider} transport error: {message}")]
    Transport {
        /// Wire name.
        provider: &'static str,
        /// Masked description.
        message: String,
        /// Whether another attempt may succeed: not after a timeout, nor after TLS refused the
        /// server (a certificate not trusted does not change within a retry's wait).
        retryable: bool,
    },
    /// The stream broke or carried an error event.
    #[error("{provider} stream error: {message}")]
    Stream {
        /// Wire name.
        provider: &'static str,
        /// Masked description.
        message: String,
        /// Whether a restart may help.
        retryable: bool,
        /// Server-requested delay, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// The server redirected to another origin: the request carries the API key, so the
    /// redirect is not followed (reqwest would re-send `x-api-key` and `x-goog-api-key`).
    #[error(
        "{provider} redirected the request to {location}, another origin; it is not followed \
         because provider requests carry the API key (set the base URL to the final endpoint)"
    )]
    Redirect {
        /// Wire name.
        provider: &'static str,
        /// The redirect target, masked.
        location: String,
    },
    /// The reply outgrew a cap of [`crate::ReplyLimits`]; reading stopped there.
    #[error(
        "{provider} reply exceeded the cap on {} ({limit} bytes): the model's output was \
         dropped; raise `{}` under [limits] in intendant.toml if this reply was intended",
        cap.describe(),
        cap.config_key()
    )]
    TooLarge {
        /// Wire name.
        provider: &'static str,
        /// Which cap.
        cap: ReplyCap,
        /// The cap, in bytes.
        limit: usize,
    },
    /// The request or configuration is unusable (no key, bad URL, ...).
    #[error("{0}")]
    Config(String),
}

impl ProviderError {
    /// Whether the retry policy may try again.
    pub fn is_retryable(&self) -> bool {
        match self {
            // A server refusing the tool definitions (llama.cpp answers 500) refuses them again.
            ProviderError::Http { status, .. } => {
                (*status == 429 || *status >= 500) && !self.rejects_tools()
            }
            ProviderError::Transport { retryable, .. } => *retryable,
            ProviderError::Stream { retryable, .. } => *retryable,
            ProviderError::Redirect { .. }
            | ProviderError::TooLarge { .. }
            | ProviderError::Config(_) => false,
        }
    }

    /// Whether the server refused the request because it offered tool definitions: Ollama
    /// (`... does not support tools`), llama.cpp without `--jinja` (`tools param requires
    /// --jinja flag`), vLLM without a tool parser (`"auto" tool choice requires
    /// --enable-auto-tool-choice ...`), strict servers (`tools: Extra inputs are not permitted`).
    /// The caller may retry with tools described in text instead.
    pub fn rejects_tools(&self) -> bool {
        let ProviderError::Http {
            status, message, ..
        } = self
        else {
            return false;
        };
        let message = message.to_ascii_lowercase();
        let names_tools = message.contains("tool") || message.contains("function call");
        let refuses = [
            "support",
            "requires",
            "enable",
            "jinja",
            "not permitted",
            "not allowed",
            "unrecognized",
        ]
        .iter()
        .any(|phrase| message.contains(phrase));
        matches!(status, 400 | 404 | 422 | 500 | 501) && names_tools && refuses
    }
}

/// Which cap of [`crate::ReplyLimits`] a reply exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyCap {
    /// [`crate::ReplyLimits::max_reply_bytes`].
    Reply,
    /// [`crate::ReplyLimits::max_tool_call_bytes`].
    ToolCall,
}

impl ReplyCap {
    /// The key that sets this cap in the `[limits]` table of `intendant.toml`.
    pub fn config_key(self) -> &'static str {
        match self {
            ReplyCap::Reply => "max_reply_bytes",
            ReplyCap::ToolCall => "max_tool_call_bytes",
        }
    }

    /// What the cap bounds, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ReplyCap::Reply => "the whole reply",
            ReplyCap::ToolCall => "one tool call's arguments",
        }
    }
}

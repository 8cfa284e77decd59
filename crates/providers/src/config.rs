//! Provider selection and configuration: which wire, which endpoint, which key, which limits.
//!
//! Endpoint resolution is a pure function of the environment values passed in, so tests never
//! depend on (or reach) real hosts.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::ProviderError;
use crate::retry::RetryPolicy;
use crate::sse::MAX_EVENT_BYTES;

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default longest wait for response headers after the request was sent.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(300);

/// Default longest silence between two chunks of a stream.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Which wire a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI Responses API.
    OpenAi,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini API.
    Gemini,
    /// OpenAI-compatible Chat Completions (Ollama, llama.cpp server, vLLM, proxies).
    OpenAiChat,
}

impl ProviderKind {
    /// Every kind, in a stable order.
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::OpenAiChat,
    ];

    /// The name used on the command line and in [`ChatProvider::name`].
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::OpenAiChat => "openai-chat",
        }
    }

    /// Environment variable holding the endpoint.
    pub fn base_url_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiChat => "OPENAI_BASE_URL",
            ProviderKind::Anthropic => "ANTHROPIC_BASE_URL",
            ProviderKind::Gemini => "GEMINI_BASE_URL",
        }
    }

    /// Environment variable holding the API key.
    pub fn api_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiChat => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Gemini => "GEMINI_API_KEY",
        }
    }

    /// Endpoint used when the environment names none.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiChat => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Gemini => "https://generativelanguage.googleapis.com",
        }
    }

    /// Whether a request without a key is refused before it is sent. Local OpenAI-compatible
    /// servers (Ollama, llama.cpp) usually need none.
    pub fn requires_api_key(self) -> bool {
        match self {
            ProviderKind::OpenAi | ProviderKind::Anthropic | ProviderKind::Gemini => true,
            ProviderKind::OpenAiChat => false,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderKind {
    type Err = ProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                ProviderError::Config(format!(
                    "unknown provider {s:?}; expected openai, anthropic, gemini or openai-chat"
                ))
            })
    }
}

/// Everything one provider instance needs. `Debug` never shows the key.
#[derive(Clone)]
pub struct ProviderConfig {
    /// Endpoint base, e.g. `https://api.openai.com/v1` (no trailing slash needed).
    pub base_url: String,
    /// API key; sent only in the wire's auth header and masked in every error.
    pub api_key: Option<String>,
    /// Connection-establishment retry policy.
    pub retry: RetryPolicy,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Longest wait for response headers (a timeout here is never retried).
    pub header_timeout: Duration,
    /// Longest silence between two chunks of a stream (no total timeout on streams).
    pub idle_timeout: Duration,
    /// Largest SSE line or event accepted.
    pub max_event_bytes: usize,
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

impl ProviderConfig {
    /// A configuration with default timeouts, limits and retry policy.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key,
            retry: RetryPolicy::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_event_bytes: MAX_EVENT_BYTES,
        }
    }

    /// The configuration for `kind` from the values of its environment variables (`base_url`
    /// from [`ProviderKind::base_url_env`], `api_key` from [`ProviderKind::api_key_env`]);
    /// empty values count as unset.
    pub fn from_env_values(
        kind: ProviderKind,
        base_url: Option<&str>,
        api_key: Option<&str>,
    ) -> Self {
        let set = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let base = set(base_url).unwrap_or_else(|| kind.default_base_url().to_owned());
        Self::new(base, set(api_key))
    }

    /// [`Self::from_env_values`] with the process environment.
    pub fn from_env(kind: ProviderKind) -> Self {
        let base = std::env::var(kind.base_url_env()).ok();
        let key = std::env::var(kind.api_key_env()).ok();
        Self::from_env_values(kind, base.as_deref(), key.as_deref())
    }

    /// `base_url` joined with `path` (which starts with `/`), after validating the scheme.
    pub(crate) fn endpoint(&self, path: &str) -> Result<String, ProviderError> {
        let base = self.base_url.trim().trim_end_matches('/');
        let valid = base
            .strip_prefix("https://")
            .or_else(|| base.strip_prefix("http://"))
            .is_some_and(|host| !host.is_empty() && !host.contains(char::is_whitespace));
        if !valid {
            return Err(ProviderError::Config(format!(
                "invalid base URL {:?}: expected http:// or https://",
                crate::mask::mask_secret(base, self.api_key.as_deref())
            )));
        }
        Ok(format!("{base}{path}"))
    }
}

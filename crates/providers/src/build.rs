//! Provider construction: the one place a [`ProviderKind`] and a [`ProviderConfig`] become a
//! wire's [`ChatProvider`] (kept apart from `config`, which every wire reads).

use std::sync::Arc;

use crate::config::{ProviderConfig, ProviderKind};
use crate::{ChatProvider, ProviderError};

/// A provider of `kind` with `config`.
pub fn build_provider(
    kind: ProviderKind,
    config: ProviderConfig,
) -> Result<Arc<dyn ChatProvider>, ProviderError> {
    Ok(match kind {
        ProviderKind::OpenAi => Arc::new(crate::openai_responses::OpenAiResponsesProvider::new(
            config,
        )?),
        ProviderKind::Anthropic => Arc::new(crate::anthropic::AnthropicProvider::new(config)?),
        ProviderKind::Gemini => Arc::new(crate::gemini::GeminiProvider::new(config)?),
        ProviderKind::OpenAiChat => Arc::new(crate::openai_chat::OpenAiChatProvider::new(config)?),
    })
}

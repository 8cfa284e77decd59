//! Model capability table: context window, output cap and reasoning support per model family,
//! matched by the longest name prefix, with conservative defaults for unknown models; and how
//! a model is offered tools ([`ToolMode`], [`default_tool_mode`]).

use serde::{Deserialize, Serialize};

use crate::ProviderKind;

/// How the model is offered tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Tool definitions in the request; the model answers with native tool calls.
    Native,
    /// No tool definitions: the system prompt describes the tools and the model answers with
    /// JSON commands in its text, which the controller extracts.
    Text,
}

/// Model families served over Chat Completions (Ollama, llama.cpp, vLLM) whose chat templates
/// have no tool calling: they answer tool definitions with plain text, or the server refuses
/// them. Matched as name prefixes of the model's last path segment, case-insensitively.
const TEXT_TOOL_FAMILIES: &[&str] = &[
    "gemma",
    "deepseek-r1",
    "phi3",
    "phi-3",
    "llama2",
    "llama-2",
    "codellama",
    "tinyllama",
    "starcoder",
];

/// The tool mode a model gets when `[provider] tool_mode` is not set: native on every wire,
/// except models of a family without tool calling (`gemma`, `deepseek-r1`, `phi3`, `llama2`,
/// `codellama`, `tinyllama`, `starcoder`) over Chat Completions or Gemini (which serves
/// Gemma without function calling), which get text.
pub fn default_tool_mode(kind: ProviderKind, model: &str) -> ToolMode {
    match kind {
        ProviderKind::OpenAi | ProviderKind::Anthropic => ToolMode::Native,
        ProviderKind::OpenAiChat | ProviderKind::Gemini => {
            let lower = model.trim().to_ascii_lowercase();
            let name = lower.rsplit('/').next().unwrap_or(&lower);
            if TEXT_TOOL_FAMILIES
                .iter()
                .any(|family| name.starts_with(family))
            {
                ToolMode::Text
            } else {
                ToolMode::Native
            }
        }
    }
}

/// What a model can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelCapabilities {
    /// Context window in tokens (input plus output).
    pub context_window: u64,
    /// Largest output the API allows in one response.
    pub max_output_tokens: u32,
    /// Whether the model takes a reasoning effort / thinking budget.
    pub supports_reasoning: bool,
}

/// Capabilities assumed for a model the table does not know.
pub const UNKNOWN_MODEL: ModelCapabilities = ModelCapabilities {
    context_window: 128_000,
    max_output_tokens: 8_192,
    supports_reasoning: false,
};

const fn caps(
    context_window: u64,
    max_output_tokens: u32,
    supports_reasoning: bool,
) -> ModelCapabilities {
    ModelCapabilities {
        context_window,
        max_output_tokens,
        supports_reasoning,
    }
}

/// Families by name prefix; the longest matching prefix wins, so specific entries may follow
/// general ones in any order.
const TABLE: &[(&str, ModelCapabilities)] = &[
    // OpenAI
    ("gpt-5", caps(400_000, 128_000, true)),
    ("gpt-5-chat", caps(128_000, 16_384, false)),
    ("gpt-4.1", caps(1_047_576, 32_768, false)),
    ("gpt-4o", caps(128_000, 16_384, false)),
    ("o1", caps(200_000, 100_000, true)),
    ("o3", caps(200_000, 100_000, true)),
    ("o4-mini", caps(200_000, 100_000, true)),
    ("codex-mini", caps(200_000, 100_000, true)),
    ("gpt-oss", caps(131_072, 32_768, true)),
    // Anthropic
    ("claude-opus-4", caps(200_000, 32_000, true)),
    ("claude-opus-4-5", caps(200_000, 64_000, true)),
    ("claude-sonnet-4", caps(200_000, 64_000, true)),
    ("claude-haiku-4", caps(200_000, 64_000, true)),
    ("claude-3-7-sonnet", caps(200_000, 64_000, true)),
    ("claude-3-5-sonnet", caps(200_000, 8_192, false)),
    ("claude-3-5-haiku", caps(200_000, 8_192, false)),
    ("claude-3-haiku", caps(200_000, 4_096, false)),
    // Gemini
    ("gemini-3", caps(1_048_576, 65_536, true)),
    ("gemini-2.5", caps(1_048_576, 65_536, true)),
    ("gemini-2.0", caps(1_048_576, 8_192, false)),
    ("gemini-1.5-pro", caps(2_097_152, 8_192, false)),
    ("gemini-1.5", caps(1_048_576, 8_192, false)),
];

/// Capabilities of `model` (a `models/` or `provider/` prefix is ignored; case-insensitive).
pub fn capabilities(model: &str) -> ModelCapabilities {
    let lower = model.trim().to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    TABLE
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(UNKNOWN_MODEL, |(_, caps)| *caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        assert_eq!(capabilities("gpt-5-chat-latest").max_output_tokens, 16_384);
        assert_eq!(capabilities("gpt-5.1-codex").max_output_tokens, 128_000);
        assert_eq!(
            capabilities("claude-opus-4-5-20251101").max_output_tokens,
            64_000
        );
        assert_eq!(
            capabilities("claude-opus-4-1-20250805").max_output_tokens,
            32_000
        );
        assert!(capabilities("models/gemini-2.5-flash").supports_reasoning);
        assert_eq!(capabilities("llama3.1:8b"), UNKNOWN_MODEL);
    }

    #[test]
    fn tool_mode_defaults_to_native_but_for_chat_families_without_tools() {
        for kind in ProviderKind::ALL {
            assert_eq!(default_tool_mode(kind, "llama3.1:8b"), ToolMode::Native);
        }
        for (kind, model, mode) in [
            (
                ProviderKind::OpenAiChat,
                "library/Gemma3:4b",
                ToolMode::Text,
            ),
            (ProviderKind::OpenAiChat, "deepseek-r1:14b", ToolMode::Text),
            (
                ProviderKind::Gemini,
                "models/gemma-3-27b-it",
                ToolMode::Text,
            ),
            (ProviderKind::Anthropic, "gemma", ToolMode::Native),
        ] {
            assert_eq!(default_tool_mode(kind, model), mode, "{kind:?} {model}");
        }
    }
}

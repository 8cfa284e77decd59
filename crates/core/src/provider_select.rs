//! Which provider and model a run uses, and the key it authenticates with.
//!
//! Order: `--provider`, else `PROVIDER`, else the first of OpenAI, Anthropic, Gemini with a key
//! set (in the environment or a `.env`). `openai-chat` and `mock` are only ever explicit.

use intendant_providers::{ProviderConfig, ProviderKind};
use thiserror::Error;

use crate::dotenv::EnvLookup;

/// Variable choosing the provider.
pub const PROVIDER_ENV: &str = "PROVIDER";
/// Variable choosing the model.
pub const MODEL_ENV: &str = "MODEL_NAME";

/// The provider choice before any connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChoice {
    /// A real wire.
    Wire(ProviderKind),
    /// The in-process fake model, driven by a scenario file.
    Mock,
}

/// A resolved selection.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Provider.
    pub choice: ProviderChoice,
    /// Model name (for `Mock`, empty until the scenario names one).
    pub model: String,
    /// Endpoint, key and limits (the key never appears in `Debug`).
    pub config: Option<ProviderConfig>,
}

/// Why no provider could be chosen.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SelectError {
    /// The provider name is unknown.
    #[error("unknown provider {0:?}; expected openai, anthropic, gemini, openai-chat or mock")]
    UnknownProvider(String),
    /// No key for any provider.
    #[error(
        "no API key found: set OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY (in the \
         environment or a .env file), or try `--provider mock --scenario FILE`"
    )]
    NoKey,
    /// The chosen provider needs a key that is not set.
    #[error("provider {provider} needs {env} (in the environment or a .env file)")]
    MissingKey {
        /// Provider name.
        provider: &'static str,
        /// The variable.
        env: &'static str,
    },
    /// No model for a provider without a default.
    #[error("provider {0} has no default model; pass --model or set MODEL_NAME")]
    NoModel(&'static str),
}

/// The default model of `kind`, if it has one.
pub fn default_model(kind: ProviderKind) -> Option<&'static str> {
    match kind {
        ProviderKind::OpenAi => Some("gpt-5"),
        ProviderKind::Anthropic => Some("claude-sonnet-4-5"),
        ProviderKind::Gemini => Some("gemini-2.5-pro"),
        ProviderKind::OpenAiChat => None,
    }
}

/// Resolves the provider, model and configuration.
pub fn select(
    flag_provider: Option<&str>,
    flag_model: Option<&str>,
    env: &EnvLookup,
) -> Result<Selection, SelectError> {
    let named = flag_provider
        .map(str::to_owned)
        .or_else(|| env.get(PROVIDER_ENV).map(str::to_owned));
    let model_override = flag_model
        .map(str::to_owned)
        .or_else(|| env.get(MODEL_ENV).map(str::to_owned));
    let kind = match named.as_deref().map(|n| n.trim().to_ascii_lowercase()) {
        Some(name) if name == "mock" => {
            return Ok(Selection {
                choice: ProviderChoice::Mock,
                model: model_override.unwrap_or_default(),
                config: None,
            });
        }
        Some(name) => name
            .parse::<ProviderKind>()
            .map_err(|_| SelectError::UnknownProvider(name))?,
        None => [
            ProviderKind::OpenAi,
            ProviderKind::Anthropic,
            ProviderKind::Gemini,
        ]
        .into_iter()
        .find(|k| env.get(k.api_key_env()).is_some())
        .ok_or(SelectError::NoKey)?,
    };
    let config = ProviderConfig::from_env_values(
        kind,
        env.get(kind.base_url_env()),
        env.get(kind.api_key_env()),
    );
    if kind.requires_api_key() && config.api_key.is_none() {
        return Err(SelectError::MissingKey {
            provider: kind.as_str(),
            env: kind.api_key_env(),
        });
    }
    let model = match model_override {
        Some(m) => m,
        None => default_model(kind)
            .ok_or(SelectError::NoModel(kind.as_str()))?
            .to_owned(),
    };
    Ok(Selection {
        choice: ProviderChoice::Wire(kind),
        model,
        config: Some(config),
    })
}

/// A key shown for recognition only: a short prefix and the last 4 characters.
pub fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 12 {
        return "****".to_owned();
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvLookup {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        EnvLookup::load_with(map, Path::new("/nonexistent-dir-for-test"), None)
    }

    #[test]
    fn first_key_wins_in_order() {
        let s = select(
            None,
            None,
            &env(&[("GEMINI_API_KEY", "g"), ("ANTHROPIC_API_KEY", "a")]),
        )
        .unwrap();
        assert_eq!(s.choice, ProviderChoice::Wire(ProviderKind::Anthropic));
        assert_eq!(s.model, "claude-sonnet-4-5");
        assert_eq!(
            select(None, None, &env(&[])).unwrap_err(),
            SelectError::NoKey
        );
    }

    #[test]
    fn explicit_choice_and_model() {
        let e = env(&[
            ("PROVIDER", "gemini"),
            ("GEMINI_API_KEY", "g"),
            ("MODEL_NAME", "m1"),
        ]);
        let s = select(None, None, &e).unwrap();
        assert_eq!(
            (s.choice, s.model.as_str()),
            (ProviderChoice::Wire(ProviderKind::Gemini), "m1")
        );
        let s = select(Some("openai-chat"), Some("llama"), &env(&[])).unwrap();
        assert_eq!(s.choice, ProviderChoice::Wire(ProviderKind::OpenAiChat));
        assert_eq!(
            select(Some("openai-chat"), None, &env(&[])).unwrap_err(),
            SelectError::NoModel("openai-chat")
        );
        assert_eq!(
            select(Some("openai"), None, &env(&[])).unwrap_err(),
            SelectError::MissingKey {
                provider: "openai",
                env: "OPENAI_API_KEY"
            }
        );
        assert!(matches!(
            select(Some("nope"), None, &env(&[])),
            Err(SelectError::UnknownProvider(_))
        ));
        assert_eq!(
            select(Some("mock"), None, &env(&[])).unwrap().choice,
            ProviderChoice::Mock
        );
    }

    #[test]
    fn masks_keys() {
        assert_eq!(mask_key("sk-abcdefghijklmnop"), "sk-…mnop");
        assert_eq!(mask_key("short"), "****");
    }
}

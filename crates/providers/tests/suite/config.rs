//! Provider selection, endpoints from environment values, capability defaults.

use std::str::FromStr;

use intendant_providers::models::UNKNOWN_MODEL;
use intendant_providers::{
    ProviderConfig, ProviderError, ProviderKind, build_provider, capabilities,
};

use super::support::{Canned, ScriptServer, TEST_KEY, run, simple_request};

#[test]
fn kinds_parse_from_their_names() {
    for (name, kind) in [
        ("openai", ProviderKind::OpenAi),
        ("anthropic", ProviderKind::Anthropic),
        ("gemini", ProviderKind::Gemini),
        ("openai-chat", ProviderKind::OpenAiChat),
        (" OpenAI-Chat ", ProviderKind::OpenAiChat),
    ] {
        assert_eq!(ProviderKind::from_str(name).unwrap(), kind);
    }
    for kind in ProviderKind::ALL {
        assert_eq!(kind.to_string().parse::<ProviderKind>().unwrap(), kind);
    }
    let err = "mock-ish".parse::<ProviderKind>().unwrap_err();
    assert!(err.to_string().contains("openai-chat"));
}

#[test]
fn endpoints_come_from_env_values_with_defaults() {
    let cfg = ProviderConfig::from_env_values(ProviderKind::OpenAi, None, Some("k"));
    assert_eq!(cfg.base_url, "https://api.openai.com/v1");
    let cfg = ProviderConfig::from_env_values(ProviderKind::Anthropic, Some("  "), None);
    assert_eq!(cfg.base_url, "https://api.anthropic.com");
    assert_eq!(cfg.api_key, None);
    let cfg = ProviderConfig::from_env_values(ProviderKind::Gemini, None, Some(""));
    assert_eq!(cfg.base_url, "https://generativelanguage.googleapis.com");
    assert_eq!(cfg.api_key, None);
    let cfg = ProviderConfig::from_env_values(
        ProviderKind::OpenAiChat,
        Some("http://127.0.0.1:11434/v1"),
        None,
    );
    assert_eq!(cfg.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(ProviderKind::OpenAiChat.base_url_env(), "OPENAI_BASE_URL");
    assert_eq!(ProviderKind::Gemini.api_key_env(), "GEMINI_API_KEY");
}

#[test]
fn debug_never_shows_the_key() {
    let cfg = ProviderConfig::new("http://127.0.0.1:1", Some(TEST_KEY.to_owned()));
    let text = format!("{cfg:?}");
    assert!(!text.contains(TEST_KEY) && text.contains("REDACTED"));
}

#[tokio::test]
async fn trailing_slash_is_joined_and_bad_urls_refused() {
    let server = ScriptServer::start(vec![Canned::status(400, "{}")]).await;
    let cfg = ProviderConfig::new(format!("{}/v1/", server.url), Some(TEST_KEY.into()));
    let _ = run(ProviderKind::OpenAi, cfg, &simple_request("gpt-5")).await;
    assert_eq!(
        server.requests()[0].request_line,
        "POST /v1/responses HTTP/1.1"
    );

    for bad in ["ftp://x", "localhost:8080", "http://", ""] {
        let cfg = ProviderConfig::new(bad, Some(TEST_KEY.into()));
        let provider = build_provider(ProviderKind::Anthropic, cfg).unwrap();
        let err = provider
            .chat_stream(&simple_request("claude-sonnet-4-5"))
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ProviderError::Config(_)), "{bad}: {err}");
    }
}

#[test]
fn capability_table_and_unknown_defaults() {
    assert!(capabilities("gpt-5").supports_reasoning);
    assert_eq!(capabilities("claude-sonnet-4-5").context_window, 200_000);
    assert_eq!(capabilities("gemini-2.5-pro").context_window, 1_048_576);
    assert!(!capabilities("gpt-4o-mini").supports_reasoning);
    assert_eq!(capabilities("some-local-model"), UNKNOWN_MODEL);
}

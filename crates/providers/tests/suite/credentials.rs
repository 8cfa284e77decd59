//! Attacks on the key from a hostile or compromised endpoint: a server that echoes the key in
//! its error body (a key of no known shape, placed so the error excerpt's cut falls inside
//! it), and a redirect to another origin that would receive the key's header.

use intendant_providers::{
    ChatRequest, ProviderConfig, ProviderError, ProviderKind, RetryPolicy, build_provider,
};
use intendant_testkit::{FakeModelServer, Fault, Scenario, Turn, Wire};

const PAIRS: [(ProviderKind, Wire); 4] = [
    (ProviderKind::OpenAi, Wire::OpenAiResponses),
    (ProviderKind::Anthropic, Wire::Anthropic),
    (ProviderKind::Gemini, Wire::Gemini),
    (ProviderKind::OpenAiChat, Wire::OpenAiChat),
];

/// A key with no known prefix, longer than the 512-character error excerpt leaves of it.
fn shapeless_key() -> String {
    (0..300)
        .map(|i| char::from(b"Qz7Kp2Wm9Rt4"[i % 12]))
        .collect()
}

/// Every 8-character piece of `key` that appears in `text`.
fn key_pieces_in(text: &str, key: &str) -> Vec<String> {
    (0..=key.len() - 8)
        .map(|i| &key[i..i + 8])
        .filter(|piece| text.contains(piece))
        .map(str::to_owned)
        .collect()
}

fn one_fault_then_done(fault: Fault) -> Scenario {
    let mut turn = Turn::text("never reached");
    turn.faults = vec![fault];
    Scenario::new(vec![turn])
}

async fn first_error(kind: ProviderKind, config: ProviderConfig) -> ProviderError {
    let provider = build_provider(kind, config).unwrap();
    let request = ChatRequest {
        model: "fake-model".into(),
        ..ChatRequest::default()
    };
    match provider.chat_stream(&request).await {
        Ok(_) => panic!("{kind}: the request succeeded"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn a_key_echoed_in_an_error_body_is_masked_before_the_excerpt_cuts_it() {
    let key = shapeless_key();
    for (kind, wire) in PAIRS {
        // "invalid_request_error: " plus the pad puts the 512-character cut inside the key.
        let server = FakeModelServer::start(one_fault_then_done(Fault::EchoKey {
            status: 401,
            pad: 440,
            times: 1,
        }))
        .await
        .unwrap();
        let config = ProviderConfig::new(server.base_url(wire), Some(key.clone()));
        let error = first_error(kind, config).await;
        let text = format!("{error} {error:?}");
        assert!(text.contains("401"), "{kind}: {text}");
        assert!(text.contains("[REDACTED]"), "{kind}: {text}");
        let leaked = key_pieces_in(&text, &key);
        assert!(
            leaked.is_empty(),
            "{kind}: key pieces leaked: {leaked:?} in {text}"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_never_receives_the_key() {
    for (kind, wire) in PAIRS {
        let elsewhere = FakeModelServer::start(Scenario::new(vec![Turn::text("stolen")]))
            .await
            .unwrap();
        let origin = format!("http://{}", elsewhere.addr());
        let server = FakeModelServer::start(one_fault_then_done(Fault::Redirect {
            to: Some(origin.clone()),
            status: 307,
            times: 1,
        }))
        .await
        .unwrap();
        let mut config = ProviderConfig::new(server.base_url(wire), Some(shapeless_key()));
        config.retry = RetryPolicy::with_base_delay(std::time::Duration::from_millis(1));
        let error = first_error(kind, config).await;
        assert!(!error.is_retryable(), "{kind}: {error:?}");
        let text = error.to_string();
        assert!(text.contains("redirect"), "{kind}: {text}");
        assert!(
            text.contains(&origin),
            "{kind}: the target is named: {text}"
        );
        for request in elsewhere.requests() {
            for header in ["authorization", "x-api-key", "x-goog-api-key"] {
                assert!(
                    request.header(header).is_none(),
                    "{kind}: {header} reached the other origin"
                );
            }
        }
        assert!(
            elsewhere.requests().is_empty(),
            "{kind}: the redirect was followed"
        );
        assert_eq!(
            server.requests().len(),
            1,
            "{kind}: a refusal is not retried"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_the_same_origin_is_followed() {
    for (kind, wire) in PAIRS {
        let mut turn = Turn::text("arrived");
        turn.faults = vec![Fault::Redirect {
            to: None,
            status: 307,
            times: 1,
        }];
        let server = FakeModelServer::start(Scenario::new(vec![turn]))
            .await
            .unwrap();
        let config = ProviderConfig::new(server.base_url(wire), Some(shapeless_key()));
        let provider = build_provider(kind, config).unwrap();
        let request = ChatRequest {
            model: "fake-model".into(),
            ..ChatRequest::default()
        };
        let stream = provider.chat_stream(&request).await.unwrap();
        let response = intendant_providers::collect_response("test", stream)
            .await
            .unwrap();
        assert_eq!(response.text, "arrived", "{kind}");
        assert_eq!(
            server.requests().len(),
            2,
            "{kind}: the redirect and its target"
        );
    }
}

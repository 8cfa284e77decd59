//! A server streaming far more than any real reply: every wire stops at the reply caps, with
//! the typed error, having buffered at most the cap.

use futures::StreamExt;
use intendant_providers::{
    ChatRequest, ProviderConfig, ProviderError, ProviderKind, ReplyCap, ReplyLimits,
    ResponseAccumulator, build_provider,
};
use intendant_testkit::{FakeModelServer, Fault, FloodKind, Scenario, Turn, Wire};

use super::support::TEST_KEY;

const PAIRS: [(ProviderKind, Wire); 4] = [
    (ProviderKind::OpenAi, Wire::OpenAiResponses),
    (ProviderKind::Anthropic, Wire::Anthropic),
    (ProviderKind::Gemini, Wire::Gemini),
    (ProviderKind::OpenAiChat, Wire::OpenAiChat),
];

const LIMITS: ReplyLimits = ReplyLimits {
    max_reply_bytes: 1024 * 1024,
    max_tool_call_bytes: 256 * 1024,
};

async fn flooded(kind: ProviderKind, wire: Wire, what: FloodKind) -> ProviderError {
    let mut turn = Turn::text("never reached");
    turn.faults = vec![Fault::Flood {
        what,
        bytes: 64 * 1024 * 1024,
        times: 1,
    }];
    let server = FakeModelServer::start(Scenario::new(vec![turn]))
        .await
        .unwrap();
    let config = ProviderConfig::new(server.base_url(wire), Some(TEST_KEY.to_owned()));
    let provider = build_provider(kind, config).unwrap();
    let request = ChatRequest {
        model: "fake-model".into(),
        ..ChatRequest::default()
    };
    let mut stream = provider.chat_stream(&request).await.unwrap();
    let mut acc = ResponseAccumulator::with_limits("test", LIMITS);
    while let Some(event) = stream.next().await {
        acc.push(&event);
        if acc.over_limit() {
            break;
        }
    }
    acc.finish().unwrap_err()
}

#[tokio::test]
async fn an_endless_text_reply_stops_at_the_reply_cap_on_every_wire() {
    for (kind, wire) in PAIRS {
        let err = flooded(kind, wire, FloodKind::Text).await;
        assert!(
            matches!(
                err,
                ProviderError::TooLarge {
                    cap: ReplyCap::Reply,
                    ..
                }
            ),
            "{kind}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_huge_tool_call_stops_at_a_cap_on_every_wire() {
    for (kind, wire) in PAIRS {
        let err = flooded(kind, wire, FloodKind::ToolArguments).await;
        // Gemini sends each call whole, so its flood is many calls: the reply cap stops it.
        let cap = match wire {
            Wire::Gemini => ReplyCap::Reply,
            Wire::OpenAiResponses | Wire::OpenAiChat | Wire::Anthropic => ReplyCap::ToolCall,
        };
        assert!(
            matches!(err, ProviderError::TooLarge { cap: c, .. } if c == cap),
            "{kind}: {err:?}"
        );
    }
}

//! Folding events into a response.

use intendant_providers::{
    ProviderError, ReasoningItem, ReplyCap, ReplyLimits, ResponseAccumulator, StopReason,
    StreamEvent, ToolCall, Usage,
};

fn start(index: usize, id: &str, name: &str) -> StreamEvent {
    StreamEvent::ToolCallStart {
        index,
        call_id: id.into(),
        name: name.into(),
    }
}

fn delta(index: usize, d: &str) -> StreamEvent {
    StreamEvent::ToolCallArgumentsDelta {
        index,
        delta: d.into(),
    }
}

#[test]
fn interleaved_calls_are_assembled_per_index_and_ordered() {
    let mut acc = ResponseAccumulator::new("test");
    let events = vec![
        StreamEvent::TextDelta {
            text: "Let me ".into(),
        },
        start(1, "b", "second"),
        start(0, "a", "first"),
        delta(1, "{\"y\":"),
        delta(0, "{\"x\":"),
        delta(0, "1}"),
        delta(1, "2}"),
        StreamEvent::TextDelta {
            text: "look.".into(),
        },
        StreamEvent::ReasoningDelta {
            text: "think".into(),
        },
        StreamEvent::ReasoningDone {
            item: ReasoningItem {
                provider: "openai".into(),
                text: "think".into(),
                ..ReasoningItem::default()
            },
        },
        StreamEvent::Usage {
            usage: Usage {
                input_tokens: 1,
                ..Usage::default()
            },
        },
        StreamEvent::Usage {
            usage: Usage {
                input_tokens: 10,
                cached_input_tokens: 4,
                output_tokens: 3,
                reasoning_tokens: 1,
            },
        },
        StreamEvent::Completed {
            stop_reason: StopReason::ToolUse,
        },
    ];
    for e in &events {
        acc.push(e);
    }
    let resp = acc.finish().unwrap();
    assert_eq!(resp.text, "Let me look.");
    assert_eq!(resp.reasoning_text, "think");
    assert_eq!(resp.reasoning.len(), 1);
    let names: Vec<&str> = resp.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(resp.tool_calls[0].arguments, "{\"x\":1}");
    assert_eq!(resp.tool_calls[1].arguments, "{\"y\":2}");
    assert_eq!(resp.usage.unwrap().input_tokens, 10, "last usage wins");
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
}

#[test]
fn done_event_is_authoritative_but_keeps_streamed_args_when_empty() {
    let mut acc = ResponseAccumulator::default();
    acc.push(&start(0, "a", "f"));
    acc.push(&delta(0, "{\"partial\":"));
    acc.push(&StreamEvent::ToolCallDone {
        index: 0,
        call: ToolCall {
            call_id: "a".into(),
            name: "f".into(),
            arguments: "{\"full\":true}".into(),
            thought_signature: Some("sig".into()),
            provider_id: false,
        },
    });
    acc.push(&start(1, "b", "g"));
    acc.push(&delta(1, "{}"));
    acc.push(&StreamEvent::ToolCallDone {
        index: 1,
        call: ToolCall {
            call_id: "b".into(),
            name: "g".into(),
            ..ToolCall::default()
        },
    });
    acc.push(&StreamEvent::Completed {
        stop_reason: StopReason::ToolUse,
    });
    let resp = acc.finish().unwrap();
    assert_eq!(resp.tool_calls[0].arguments, "{\"full\":true}");
    assert_eq!(resp.tool_calls[0].thought_signature.as_deref(), Some("sig"));
    assert_eq!(resp.tool_calls[1].arguments, "{}");
}

#[test]
fn error_event_becomes_the_error() {
    let mut acc = ResponseAccumulator::new("wire");
    acc.push(&StreamEvent::TextDelta { text: "x".into() });
    acc.push(&StreamEvent::Error {
        message: "overloaded".into(),
        retryable: true,
        retry_after_ms: Some(5),
    });
    assert_eq!(acc.partial().text, "x");
    let err = acc.finish().unwrap_err();
    assert!(err.is_retryable());
    assert!(matches!(
        err,
        ProviderError::Stream {
            provider: "wire",
            retry_after_ms: Some(5),
            ..
        }
    ));
}

#[test]
fn a_stream_without_completion_is_a_retryable_error() {
    let mut acc = ResponseAccumulator::new("wire");
    acc.push(&StreamEvent::TextDelta { text: "x".into() });
    let err = acc.finish().unwrap_err();
    assert!(err.is_retryable());
}

fn small_limits() -> ReplyLimits {
    ReplyLimits {
        max_reply_bytes: 100,
        max_tool_call_bytes: 40,
    }
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.into() }
}

#[test]
fn a_reply_over_its_cap_fails_naming_the_cap_and_its_key_and_keeps_nothing() {
    let mut acc = ResponseAccumulator::with_limits("wire", small_limits());
    acc.push(&text(&"a".repeat(60)));
    assert!(!acc.over_limit());
    acc.push(&StreamEvent::ReasoningDelta {
        text: "b".repeat(41),
    });
    assert!(acc.over_limit(), "60 + 41 bytes exceed 100");
    assert!(
        acc.partial().text.is_empty(),
        "nothing is kept past the cap"
    );
    acc.push(&StreamEvent::Completed {
        stop_reason: StopReason::EndTurn,
    });
    let err = acc.finish().unwrap_err();
    assert_eq!(
        err,
        ProviderError::TooLarge {
            provider: "wire",
            cap: ReplyCap::Reply,
            limit: 100
        }
    );
    assert!(!err.is_retryable());
    let message = err.to_string();
    assert!(
        message.contains("max_reply_bytes") && message.contains("100 bytes"),
        "{message}"
    );
}

#[test]
fn one_tool_call_over_its_cap_fails_though_the_reply_is_within_its_own() {
    let mut acc = ResponseAccumulator::with_limits("wire", small_limits());
    acc.push(&start(0, "a", "f"));
    acc.push(&delta(0, &"x".repeat(30)));
    acc.push(&start(1, "b", "g"));
    acc.push(&delta(1, &"y".repeat(30)));
    assert!(!acc.over_limit(), "30 bytes per call, 64 in all");
    acc.push(&delta(0, &"x".repeat(11)));
    assert!(acc.over_limit(), "call 0 reached 41 bytes");
    let err = acc.finish().unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::TooLarge {
                cap: ReplyCap::ToolCall,
                limit: 40,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("max_tool_call_bytes"));
}

#[test]
fn a_whole_call_in_its_done_event_counts_against_the_caps() {
    let mut acc = ResponseAccumulator::with_limits("wire", small_limits());
    acc.push(&StreamEvent::ToolCallDone {
        index: 0,
        call: ToolCall {
            call_id: "c".into(),
            name: "f".into(),
            arguments: "z".repeat(41),
            thought_signature: None,
            provider_id: false,
        },
    });
    assert!(acc.over_limit());
}

#[test]
fn a_reply_exactly_at_its_caps_is_whole() {
    let mut acc = ResponseAccumulator::with_limits("wire", small_limits());
    acc.push(&start(0, "a", "f"));
    acc.push(&delta(0, &"x".repeat(40)));
    acc.push(&StreamEvent::ToolCallDone {
        index: 0,
        call: ToolCall {
            call_id: "a".into(),
            name: "f".into(),
            arguments: "x".repeat(40),
            thought_signature: None,
            provider_id: false,
        },
    });
    acc.push(&text(&"t".repeat(58)));
    acc.push(&StreamEvent::Completed {
        stop_reason: StopReason::ToolUse,
    });
    assert!(!acc.over_limit());
    let response = acc.finish().unwrap();
    assert_eq!(response.tool_calls[0].arguments.len(), 40);
    assert_eq!(response.text.len(), 58);
}

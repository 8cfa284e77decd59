//! The SSE decoder: framing, splits anywhere, limits.

use intendant_providers::sse::{MAX_EVENT_BYTES, OwnedSseEvent, SseDecoder, SseError};
use proptest::prelude::*;

fn decode_in(chunks: &[&[u8]]) -> Vec<OwnedSseEvent> {
    let mut dec = SseDecoder::new();
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(dec.feed_collect(chunk).unwrap());
    }
    out
}

fn ev(event: &str, data: &str) -> OwnedSseEvent {
    OwnedSseEvent {
        event: event.into(),
        data: data.into(),
    }
}

const SAMPLE: &str = ": keep-alive comment\n\
event: first\n\
data: {\"a\":1}\n\
\n\
data: line one\n\
data: line two\n\
id: 7\n\
retry: 1000\n\
\n\
data:no-space\n\
\n\
event: empty\n\
\n\
data: héllo wörld ✓ 😀\n\
\n\
data\n\
\n";

fn expected() -> Vec<OwnedSseEvent> {
    vec![
        ev("first", "{\"a\":1}"),
        ev("message", "line one\nline two"),
        ev("message", "no-space"),
        ev("message", "héllo wörld ✓ 😀"),
        ev("message", ""),
    ]
}

#[test]
fn lf_framing_comments_multiline_and_names() {
    assert_eq!(decode_in(&[SAMPLE.as_bytes()]), expected());
}

#[test]
fn crlf_and_cr_framing_give_the_same_events() {
    let crlf = SAMPLE.replace('\n', "\r\n");
    assert_eq!(decode_in(&[crlf.as_bytes()]), expected());
    let cr = SAMPLE.replace('\n', "\r");
    assert_eq!(decode_in(&[cr.as_bytes()]), expected());
}

#[test]
fn byte_by_byte_feeding_splits_utf8_and_crlf() {
    let crlf = SAMPLE.replace('\n', "\r\n");
    let bytes: Vec<&[u8]> = crlf.as_bytes().chunks(1).collect();
    assert_eq!(decode_in(&bytes), expected());
}

#[test]
fn an_empty_chunk_between_cr_and_lf_keeps_the_pair() {
    let events = decode_in(&[b"event: first\r", b"", b"\ndata: x\r\n\r\n"]);
    assert_eq!(events, vec![ev("first", "x")]);
}

#[test]
fn unterminated_event_at_eof_is_not_dispatched() {
    assert_eq!(
        decode_in(&[b"data: complete\n\ndata: partial\n"]),
        vec![ev("message", "complete")]
    );
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let events = decode_in(&[b"data: a\xffb\n\n"]);
    assert_eq!(events, vec![ev("message", "a\u{fffd}b")]);
}

#[test]
fn endless_line_errors_at_the_default_cap_with_bounded_memory() {
    let mut dec = SseDecoder::new();
    dec.feed(b"data: ", |_| {}).unwrap();
    let block = vec![b'x'; 64 * 1024];
    let mut fed = 0usize;
    let err = loop {
        match dec.feed(&block, |_| {}) {
            Ok(()) => {
                fed += block.len();
                assert!(dec.buffered_bytes() <= MAX_EVENT_BYTES);
                assert!(
                    fed <= MAX_EVENT_BYTES + block.len(),
                    "no error past the cap"
                );
            }
            Err(err) => break err,
        }
    };
    assert_eq!(
        err,
        SseError::TooLarge {
            limit: MAX_EVENT_BYTES
        }
    );
    assert_eq!(dec.buffered_bytes(), 0, "memory released after the failure");
    // The decoder stays failed.
    assert!(dec.feed(b"\n\n", |_| {}).is_err());
}

#[test]
fn event_of_many_small_lines_is_capped_too() {
    let mut dec = SseDecoder::with_limit(1024);
    let line = b"data: 0123456789012345678901234567890123456789\n";
    let mut result = Ok(());
    for _ in 0..100 {
        result = dec.feed(line, |_| {});
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(SseError::TooLarge { limit: 1024 }));
}

#[test]
fn single_line_event_in_one_chunk_is_capped() {
    let mut dec = SseDecoder::with_limit(10);
    assert!(dec.feed(b"data: 0123456789abc\n\n", |_| {}).is_err());
    let mut dec = SseDecoder::with_limit(10);
    assert_eq!(
        dec.feed_collect(b"data: 012345678\r\n\r\n").unwrap().len(),
        1
    );
}

#[test]
fn line_split_across_chunks_is_capped() {
    let mut dec = SseDecoder::with_limit(100);
    dec.feed(&[b'y'; 60], |_| {}).unwrap();
    assert!(dec.feed(&[b'y'; 60], |_| {}).is_err());
}

proptest! {
    #[test]
    fn any_chunking_gives_the_same_events(
        cuts in proptest::collection::vec(0usize..400, 0..12),
        crlf in any::<bool>(),
    ) {
        let text = if crlf { SAMPLE.replace('\n', "\r\n") } else { SAMPLE.to_owned() };
        let bytes = text.as_bytes();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for p in points {
            chunks.push(&bytes[last..p]);
            last = p;
        }
        chunks.push(&bytes[last..]);
        prop_assert_eq!(decode_in(&chunks), expected());
    }
}

/// Invalid UTF-8 inside a text delta makes the wire's fast path decline; full decoding then
/// reads the data as browsers do, with U+FFFD, on every wire.
#[test]
fn invalid_utf8_in_a_text_delta_is_replaced_on_every_wire() {
    use intendant_providers::StreamEvent;
    use intendant_providers::anthropic::MessagesParser;
    use intendant_providers::gemini::GeminiParser;
    use intendant_providers::openai_chat::ChatParser;
    use intendant_providers::openai_responses::ResponsesParser;
    use intendant_providers::sse::{WireParser, WireStreamDecoder};

    fn first_text<P: WireParser>(parser: P, stream: &[u8]) -> Option<StreamEvent> {
        let mut decoder = WireStreamDecoder::new(parser);
        let mut out = Vec::new();
        decoder.feed(stream, &mut out);
        out.into_iter().next()
    }
    let expected = Some(StreamEvent::TextDelta {
        text: "a\u{fffd}b\u{fffd}".to_owned(),
    });
    let responses = b"data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"a\xffb\xe6\x97\"}\n\n";
    assert_eq!(first_text(ResponsesParser::default(), responses), expected);
    let anthropic = b"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\xffb\xe6\x97\"}}\n\n";
    assert_eq!(first_text(MessagesParser::default(), anthropic), expected);
    let gemini =
        b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\xffb\xe6\x97\"}]}}]}\r\n\r\n";
    assert_eq!(first_text(GeminiParser::new(), gemini), expected);
    let chat =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xffb\xe6\x97\"}}]}\n\n";
    assert_eq!(first_text(ChatParser::new(), chat), expected);
    // Outside a string it is a syntax error, reported as such.
    let bad = b"data: {\"choices\":[]}\xff\n\n";
    assert!(matches!(
        first_text(ChatParser::new(), bad),
        Some(StreamEvent::Error {
            retryable: false,
            ..
        })
    ));
}

/// Deltas that arrive in one network chunk come out as one event per run of the same kind (and
/// call); deltas of separate chunks stay separate, so text still streams as it arrives; and an
/// event the caller already holds is never extended.
#[test]
fn deltas_of_one_chunk_coalesce_without_touching_earlier_events() {
    use intendant_providers::StreamEvent;
    use intendant_providers::anthropic::MessagesParser;
    use intendant_providers::gemini::GeminiParser;
    use intendant_providers::openai_chat::ChatParser;
    use intendant_providers::openai_responses::ResponsesParser;
    use intendant_providers::sse::{WireParser, WireStreamDecoder};

    fn text(t: &str) -> StreamEvent {
        StreamEvent::TextDelta { text: t.into() }
    }
    fn reasoning(t: &str) -> StreamEvent {
        StreamEvent::ReasoningDelta { text: t.into() }
    }
    /// Feeds `first` then `second` into the same `out`, as a caller that keeps its events does.
    fn run<P: WireParser>(parser: P, first: &str, second: &str) -> Vec<StreamEvent> {
        let mut decoder = WireStreamDecoder::new(parser);
        let mut out = Vec::new();
        decoder.feed(first.as_bytes(), &mut out);
        decoder.feed(second.as_bytes(), &mut out);
        out
    }
    let sse = |events: &[String]| events.concat();

    let responses = |kind: &str, t: &str| {
        format!(
            "data: {{\"type\":\"response.{kind}.delta\",\"output_index\":0,\"delta\":\"{t}\"}}\n\n"
        )
    };
    assert_eq!(
        run(
            ResponsesParser::default(),
            &sse(&[
                responses("reasoning_summary_text", "th"),
                responses("reasoning_summary_text", "ink"),
                responses("output_text", "Hel"),
                responses("output_text", "lo"),
            ]),
            &responses("output_text", " world"),
        ),
        [reasoning("think"), text("Hello"), text(" world")]
    );

    let anthropic = |t: &str| {
        format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{t}\"}}}}\n\n"
        )
    };
    assert_eq!(
        run(
            MessagesParser::default(),
            &sse(&[anthropic("a"), anthropic("b"), anthropic("c")]),
            &sse(&[anthropic("d"), anthropic("e")]),
        ),
        [text("abc"), text("de")]
    );

    let gemini = |t: &str| {
        format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{t}\"}}]}}}}]}}\r\n\r\n"
        )
    };
    assert_eq!(
        run(
            GeminiParser::new(),
            &sse(&[gemini("x"), gemini("y")]),
            &gemini("z"),
        ),
        [text("xy"), text("z")]
    );

    // Tool-call arguments coalesce per call: a second call's fragment starts a new event. A
    // call opens with its id and name; its later fragments carry only arguments.
    let chunk = |delta: serde_json::Value| {
        format!(
            "data: {}\n\n",
            serde_json::json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    let opening = |index: u32, id: &str, args: &str| {
        chunk(
            serde_json::json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": "f", "arguments": args}}]}),
        )
    };
    let fragment = |index: u32, args: &str| {
        chunk(
            serde_json::json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
        )
    };
    let events = run(
        ChatParser::new(),
        &sse(&[
            chunk(serde_json::json!({"content": "I'll "})),
            chunk(serde_json::json!({"content": "call"})),
        ]),
        &sse(&[
            opening(0, "c1", "{\"a\""),
            fragment(0, ":1}"),
            opening(1, "c2", "{}"),
        ]),
    );
    let args: Vec<(usize, &str)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallArgumentsDelta { index, delta } => Some((*index, delta.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(events[0], text("I'll call"));
    assert_eq!(args, [(0, "{\"a\":1}"), (1, "{}")]);
}

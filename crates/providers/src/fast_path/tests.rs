//! The fast paths against full decoding: same events for every shape they accept, and invalid
//! UTF-8 always declined.

use proptest::prelude::*;
use serde_json::json;

use crate::StreamEvent;
use crate::anthropic::MessagesParser;
use crate::gemini::GeminiParser;
use crate::openai_chat::ChatParser;
use crate::openai_responses::ResponsesParser;
use crate::sse::{DeltaKind, push_delta};

/// A chat parser whose synthesized call ids are the same each time (calls without an id get
/// one from a random prefix).
fn chat_parser() -> ChatParser {
    fastrand::seed(7);
    ChatParser::new()
}

fn both<F, S>(fast: F, slow: S) -> (Vec<StreamEvent>, Vec<StreamEvent>)
where
    F: FnOnce(&mut Vec<StreamEvent>) -> bool,
    S: FnOnce(&mut Vec<StreamEvent>),
{
    let mut a = Vec::new();
    assert!(fast(&mut a), "fast path declined");
    let mut b = Vec::new();
    slow(&mut b);
    (a, b)
}

proptest! {
    #[test]
    fn fast_and_full_decoding_agree(text in any::<String>(), reasoning in any::<bool>()) {
        let kind = if reasoning { "response.reasoning_summary_text.delta" } else { "response.output_text.delta" };
        let data = json!({"type": kind, "sequence_number": 4, "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": text, "logprobs": []}).to_string();
        let (a, b) = both(
            |o| super::openai_responses(data.as_bytes()).map(|(t, k)| push_delta(o, k, t)).is_some(),
            |o| ResponsesParser::default().slow_event(&data, o),
        );
        prop_assert_eq!(a, b);

        let data = json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}).to_string();
        let (a, b) = both(
            |o| super::anthropic(data.as_bytes()).map(|t| push_delta(o, DeltaKind::Text, t)).is_some(),
            |o| MessagesParser::default().slow_event(&data, o),
        );
        prop_assert_eq!(a, b);

        let data = json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}, "modelVersion": "m"}).to_string();
        let mut fast = GeminiParser::new();
        let mut slow = GeminiParser::new();
        let (a, b) = both(|o| fast.fast_event(data.as_bytes(), o), |o| slow.slow_event(&data, o));
        prop_assert_eq!(a, b);

        let delta = if reasoning {
            json!({"reasoning_content": text, "content": null})
        } else {
            json!({"content": text})
        };
        let data = json!({"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]}).to_string();
        let (a, b) = both(
            |o| super::openai_chat(data.as_bytes(), &mut Vec::new(), o),
            |o| chat_parser().slow_event(&data, o),
        );
        prop_assert_eq!(a, b);
    }
}

type Json = BoxedStrategy<String>;

fn one_of(options: &[&str]) -> Json {
    let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
    proptest::sample::select(options).boxed()
}

/// Text values as servers send them, plus wrong types.
fn text() -> Json {
    prop_oneof![
        4 => any::<String>().prop_map(|t| json!(t).to_string()),
        1 => one_of(&["null", "5", r#""a\u00e9\n""#, r#""\ud800""#]),
    ]
    .boxed()
}

/// An object holding each of `members` with its probability, in any order, sometimes one
/// of them twice or under an escaped key.
fn object(members: Vec<(&'static str, Json, f64)>) -> Json {
    let members: Vec<_> = members
        .into_iter()
        .map(|(key, value, p)| proptest::option::weighted(p, value.prop_map(move |v| (key, v))))
        .collect();
    (members, 0..16usize)
        .prop_flat_map(|(members, twist)| {
            let mut members: Vec<String> = members
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            match (twist, members.first().cloned()) {
                (0, Some(first)) => members.push(first),
                (1, Some(first)) => members.push(first.replacen('"', "\"\\u0061", 1)),
                _ => {}
            }
            Just(members).prop_shuffle()
        })
        .prop_map(|members| format!("{{{}}}", members.join(",")))
        .boxed()
}

/// An array of mostly one element, sometimes none or two.
fn array(element: Json) -> Json {
    prop_oneof![
        1 => Just(Vec::new()),
        6 => element.clone().prop_map(|e| vec![e]),
        1 => proptest::collection::vec(element, 2),
    ]
    .prop_map(|items| format!("[{}]", items.join(",")))
    .boxed()
}

fn chat_chunk() -> Json {
    let delta = object(vec![
        ("content", text(), 0.8),
        ("reasoning_content", text(), 0.3),
        ("reasoning", text(), 0.2),
        (
            "tool_calls",
            one_of(&[
                "null",
                r#"[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]"#,
            ]),
            0.2,
        ),
        ("role", one_of(&[r#""assistant""#]), 0.3),
    ]);
    let choice = object(vec![
        (
            "delta",
            prop_oneof![8 => delta, 1 => one_of(&["null", "[]"])].boxed(),
            0.9,
        ),
        (
            "finish_reason",
            one_of(&["null", "null", r#""stop""#, "7"]),
            0.7,
        ),
        ("index", one_of(&["0"]), 0.7),
    ]);
    object(vec![
        ("choices", array(choice), 0.9),
        (
            "usage",
            one_of(&["null", r#"{"prompt_tokens":3,"completion_tokens":2}"#]),
            0.2,
        ),
        (
            "error",
            one_of(&["null", r#"{"message":"m","type":"server_error"}"#]),
            0.1,
        ),
        ("id", one_of(&[r#""chatcmpl-1""#, "[1,{\"a\":null}]"]), 0.7),
    ])
}

fn gemini_chunk() -> Json {
    let part = object(vec![
        ("text", text(), 0.9),
        ("thought", one_of(&["true", "false"]), 0.1),
        ("thoughtSignature", one_of(&[r#""sig""#]), 0.1),
        ("functionCall", one_of(&[r#"{"name":"f","args":{}}"#]), 0.1),
    ]);
    let content = object(vec![
        ("parts", array(part), 0.9),
        ("role", one_of(&[r#""model""#]), 0.7),
    ]);
    let candidate = object(vec![
        ("content", content, 0.9),
        ("finishReason", one_of(&["null", "null", r#""STOP""#]), 0.3),
        ("index", one_of(&["0"]), 0.7),
    ]);
    let count = one_of(&["3", "3", "-1", "2.5", "null", "18446744073709551616"]);
    let usage = object(vec![
        ("promptTokenCount", count.clone(), 0.8),
        ("candidatesTokenCount", count.clone(), 0.5),
        ("cachedContentTokenCount", count.clone(), 0.2),
        ("thoughtsTokenCount", count, 0.3),
        ("totalTokenCount", one_of(&["6", "\"x\""]), 0.6),
    ]);
    object(vec![
        ("candidates", array(candidate), 0.9),
        (
            "usageMetadata",
            prop_oneof![8 => usage, 1 => one_of(&["null", "5"])].boxed(),
            0.7,
        ),
        (
            "promptFeedback",
            one_of(&["null", r#"{"blockReason":"SAFETY"}"#]),
            0.1,
        ),
        (
            "error",
            one_of(&["null", r#"{"code":503,"message":"m"}"#]),
            0.1,
        ),
        ("modelVersion", one_of(&[r#""m""#]), 0.7),
    ])
}

fn responses_event() -> Json {
    let index = one_of(&["0", "null", "-1", r#""0""#]);
    object(vec![
        (
            "type",
            one_of(&[
                r#""response.output_text.delta""#,
                r#""response.reasoning_summary_text.delta""#,
                r#""response.function_call_arguments.delta""#,
                "3",
            ]),
            0.95,
        ),
        ("delta", text(), 0.9),
        ("output_index", index.clone(), 0.6),
        ("summary_index", index, 0.2),
        ("item", one_of(&["null", r#"{"type":"message"}"#]), 0.05),
        ("response", one_of(&["null", "{}"]), 0.05),
        ("sequence_number", one_of(&["4", r#""x""#]), 0.6),
        ("logprobs", one_of(&["[]", "[{\"t\":[1,2.5e3,true]}]"]), 0.5),
    ])
}

fn anthropic_event() -> Json {
    let delta = object(vec![
        (
            "type",
            one_of(&[r#""text_delta""#, r#""input_json_delta""#, "1"]),
            0.95,
        ),
        ("text", text(), 0.9),
        ("partial_json", one_of(&[r#""{""#]), 0.05),
        ("thinking", one_of(&[r#""t""#]), 0.05),
    ]);
    object(vec![
        (
            "type",
            one_of(&[r#""content_block_delta""#, r#""ping""#]),
            0.95,
        ),
        ("index", one_of(&["0", "null", "-1", r#""0""#]), 0.8),
        (
            "delta",
            prop_oneof![8 => delta, 1 => one_of(&["null", "[]"])].boxed(),
            0.95,
        ),
        ("usage", one_of(&["null", r#"{"output_tokens":1}"#]), 0.05),
        ("error", one_of(&["null", r#"{"type":"api_error"}"#]), 0.05),
    ])
}

/// `json` as bytes, sometimes with an invalid UTF-8 sequence inserted somewhere (in a
/// string, where full decoding replaces it, or outside, where it is a syntax error).
fn maybe_corrupt(json: Json) -> BoxedStrategy<Vec<u8>> {
    let invalid: Vec<&'static [u8]> = vec![b"\xff", b"\x80", b"\xc3", b"\xe6\x97", b"\xed\xa0\x80"];
    (
        json,
        0..4usize,
        any::<proptest::sample::Index>(),
        proptest::sample::select(invalid),
    )
        .prop_map(|(json, twist, at, bad)| {
            let mut bytes = json.into_bytes();
            if twist == 0 {
                let at = at.index(bytes.len() + 1);
                bytes.splice(at..at, bad.iter().copied());
            }
            bytes
        })
        .boxed()
}

/// Runs each data through `parser` as a `message` event, then ends the stream.
fn through<P: crate::sse::WireParser>(mut parser: P, data: &[&[u8]]) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    for data in data {
        let event = crate::sse::SseEvent {
            event: "message",
            data,
        };
        parser.on_event(event, &mut out);
    }
    parser.on_eof(&mut out);
    out
}

/// One event through full decoding only (of the lossy text), then the end of the stream.
fn through_slow<P: crate::sse::WireParser>(
    mut parser: P,
    data: &[u8],
    slow: fn(&mut P, &str, &mut Vec<StreamEvent>),
) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    slow(&mut parser, &lossy(data), &mut out);
    parser.on_eof(&mut out);
    out
}

/// Full decoding only, of the data as [`crate::sse::SseEvent::text`] decodes it.
fn lossy(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// A stream of `chunks` ending with a plain finish: the events a parser yields when every
/// chunk goes through `on_event` (fast path first) or through full decoding only.
fn gemini_stream(chunks: &[Vec<u8>], fast: bool) -> Vec<StreamEvent> {
    let last = br#"{"candidates":[{"content":{"parts":[{"text":"."}]},"finishReason":"STOP"}]}"#;
    let all: Vec<&[u8]> = chunks
        .iter()
        .map(Vec::as_slice)
        .chain([&last[..]])
        .collect();
    // The same synthesized call ids on both sides.
    fastrand::seed(7);
    if fast {
        return through(GeminiParser::new(), &all);
    }
    let mut parser = GeminiParser::new();
    let mut out = Vec::new();
    for data in all {
        parser.slow_event(&lossy(data), &mut out);
    }
    crate::sse::WireParser::on_eof(&mut parser, &mut out);
    out
}

proptest! {
    // Most generated shapes are declined; enough cases that hundreds are accepted.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whatever shape a chunk has, taking the fast path where it accepts gives exactly the
    /// events of full decoding (so every shape it accepts, it decodes right).
    #[test]
    fn fast_paths_never_change_the_events(
        chat in maybe_corrupt(chat_chunk()),
        gemini in proptest::collection::vec(maybe_corrupt(gemini_chunk()), 1..3),
        responses in maybe_corrupt(responses_event()),
        anthropic in maybe_corrupt(anthropic_event()),
    ) {
        let mut fast = Vec::new();
        let mut slow = Vec::new();
        if super::openai_chat(&chat, &mut Vec::new(), &mut fast) {
            prop_assert!(std::str::from_utf8(&chat).is_ok(), "{:?}", lossy(&chat));
            chat_parser().slow_event(&lossy(&chat), &mut slow);
            prop_assert_eq!(&fast, &slow, "{}", lossy(&chat));
        }
        prop_assert_eq!(
            through(chat_parser(), &[&chat]),
            through_slow(chat_parser(), &chat, ChatParser::slow_event)
        );
        if let Some((text, kind)) = super::openai_responses(&responses) {
            prop_assert!(std::str::from_utf8(&responses).is_ok(), "{:?}", lossy(&responses));
            slow.clear();
            ResponsesParser::default().slow_event(&lossy(&responses), &mut slow);
            let mut event = Vec::new();
            push_delta(&mut event, kind, text);
            prop_assert_eq!(event, slow.clone(), "{}", lossy(&responses));
        }
        prop_assert_eq!(
            through(ResponsesParser::default(), &[&responses]),
            through_slow(ResponsesParser::default(), &responses, ResponsesParser::slow_event)
        );
        if let Some(text) = super::anthropic(&anthropic) {
            prop_assert!(std::str::from_utf8(&anthropic).is_ok(), "{:?}", lossy(&anthropic));
            slow.clear();
            MessagesParser::default().slow_event(&lossy(&anthropic), &mut slow);
            let mut event = Vec::new();
            push_delta(&mut event, DeltaKind::Text, text);
            prop_assert_eq!(event, slow.clone(), "{}", lossy(&anthropic));
        }
        prop_assert_eq!(
            through(MessagesParser::default(), &[&anthropic]),
            through_slow(MessagesParser::default(), &anthropic, MessagesParser::slow_event)
        );
        for chunk in &gemini {
            if super::gemini(chunk, &mut super::UsageTemplate::default()).is_some() {
                prop_assert!(std::str::from_utf8(chunk).is_ok(), "{:?}", lossy(chunk));
            }
        }
        prop_assert_eq!(gemini_stream(&gemini, true), gemini_stream(&gemini, false), "{:?}", gemini);
    }
}

#[test]
fn other_shapes_are_declined() {
    assert!(super::openai_responses(br#"{"type":"response.completed","response":{}}"#).is_none());
    assert!(
        super::openai_responses(br#"{"type":"response.output_text.delta","delta":5}"#).is_none()
    );
    assert!(super::anthropic(br#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}"#).is_none());
    assert!(
        super::gemini(
            br#"{"candidates":[{"content":{"parts":[{"text":"a","thought":true}]}}]}"#,
            &mut super::UsageTemplate::default()
        )
        .is_none()
    );
    assert!(
        super::gemini(
            br#"{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}"#,
            &mut super::UsageTemplate::default()
        )
        .is_none()
    );
    assert!(
        super::gemini(
            br#"{"candidates":[{"content":{"parts":[{"text":"a"},{"text":"b"}]}}]}"#,
            &mut super::UsageTemplate::default()
        )
        .is_none()
    );
    let mut out = Vec::new();
    assert!(!super::openai_chat(
        br#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
        &mut Vec::new(),
        &mut out
    ));
    assert!(!super::openai_chat(
        br#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
        &mut Vec::new(),
        &mut out
    ));
    assert!(!super::openai_chat(
        br#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        &mut Vec::new(),
        &mut out
    ));
    assert!(!super::openai_chat(
        b"{\"choices\":[{\"delta\":{\"content\":\"a\xff\"}}]}",
        &mut Vec::new(),
        &mut out
    ));
    assert!(out.is_empty());
    assert!(super::anthropic(
        b"{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\xc3\"}}"
    )
    .is_none());
}

/// Gemini repeats one usage object in chunk after chunk, its counts changing at most; the fast
/// path reads a usage of the previous one's shape through it as a template, and the stream still
/// yields exactly the events of full decoding: with counts that change (in length too), with
/// another shape, with something invalid after a match, with counts that are not plain integers,
/// with a usage that only starts like the previous one, and when full decoding read a chunk in
/// between.
#[test]
fn gemini_usage_of_the_previous_shape_is_read_through_it_without_changing_the_events() {
    let chunk = |text: &str, usage: &str| {
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":"{text}"}}],"role":"model"}},"index":0}}],"usageMetadata":{usage},"modelVersion":"m"}}"#
        )
        .into_bytes()
    };
    let counts = |prompt: &str, candidates: &str| {
        format!(
            r#"{{"promptTokenCount":{prompt},"candidatesTokenCount":{candidates},"totalTokenCount":7,"promptTokensDetails":[{{"modality":"TEXT","tokenCount":7}}]}}"#
        )
    };
    let first = counts("7", "1");
    let other = r#"{"promptTokenCount":7,"totalTokenCount":10}"#;
    let streams = [
        vec![chunk("a", &first), chunk("b", &first), chunk("c", &first)],
        vec![chunk("a", &first), chunk("b", &counts("7", "2")), chunk("c", &counts("7", "1234"))],
        // Back to the template's very bytes after other counts: those bytes' counts again.
        vec![chunk("a", &first), chunk("b", &counts("7", "2")), chunk("c", &first)],
        vec![chunk("a", &first), chunk("b", other), chunk("c", other)],
        vec![chunk("a", &first), chunk("b", &format!("{first} x"))],
        vec![chunk("a", &first), chunk("b", &format!("{first}}}"))],
        vec![chunk("a", &first), chunk("b", &counts("7", "02"))],
        vec![chunk("a", &first), chunk("b", &counts("7", "-2"))],
        vec![chunk("a", &first), chunk("b", &counts("7", "2.5"))],
        vec![chunk("a", &first), chunk("b", &counts("7", "99999999999999999999"))],
        vec![chunk("a", &first), chunk("b", &counts("7", ""))],
        vec![chunk("a", other), chunk("b", &format!("{}1}}", &other[..other.len() - 2]))],
        // The total changes too (a hole of the template though never stored), or is no integer.
        vec![
            chunk("a", other),
            chunk("b", r#"{"promptTokenCount":7,"totalTokenCount":11}"#),
            chunk("c", r#"{"promptTokenCount":7,"totalTokenCount":7.5}"#),
        ],
        // Same length, same counts' places, but the last member is a count only in the second.
        vec![
            chunk("a", r#"{"promptTokenCount":7,"thoughtsTokenCouns":5}"#),
            chunk("b", r#"{"promptTokenCount":7,"thoughtsTokenCount":5}"#),
        ],
        // The middle chunk (a thought) takes full decoding, which may change the usage.
        vec![
            chunk("a", &first),
            format!(r#"{{"candidates":[{{"content":{{"parts":[{{"text":"t","thought":true}}]}}}}],"usageMetadata":{other}}}"#).into_bytes(),
            chunk("c", &first),
        ],
    ];
    for stream in &streams {
        let fast = gemini_stream(stream, true);
        assert_eq!(
            fast,
            gemini_stream(stream, false),
            "{:?}",
            stream.iter().map(|c| lossy(c)).collect::<Vec<_>>()
        );
        assert!(
            fast.iter()
                .any(|e| matches!(e, StreamEvent::Usage { .. } | StreamEvent::Error { .. }))
        );
    }
    // The usage of the last chunk wins: its 1234 candidates' tokens, not the first chunk's 1.
    let fast = gemini_stream(&streams[1], true);
    assert!(
        fast.iter()
            .any(|e| matches!(e, StreamEvent::Usage { usage } if usage.output_tokens == 1234))
    );
    // A usage of the template's shape is read through it; another is read in full and becomes
    // the template.
    let mut template = super::UsageTemplate::default();
    assert!(
        matches!(usage_after(&mut template, &chunk("a", &first)), Some(Some(u)) if u.prompt_token_count == 7)
    );
    assert!(
        matches!(usage_after(&mut template, &chunk("b", &first)), Some(Some(u)) if u.prompt_token_count == 7),
        "the very template: its own counts"
    );
    assert!(matches!(
        usage_after(&mut template, &chunk("c", &counts("8", "30"))),
        Some(Some(u)) if u.prompt_token_count == 8 && u.candidates_token_count == 30
    ));
    assert!(
        matches!(usage_after(&mut template, &chunk("d", other)), Some(Some(u)) if u.candidates_token_count == 0)
    );
    assert_eq!(template.bytes, other.as_bytes());
    assert!(matches!(
        usage_after(&mut template, &chunk("e", &first)),
        Some(Some(_))
    ));
    assert_eq!(template.bytes, first.as_bytes());
    assert!(matches!(
        usage_after(&mut template, &chunk("f", &counts("9", "1"))),
        Some(Some(u)) if u.prompt_token_count == 9
    ));
    assert_eq!(
        template.bytes,
        first.as_bytes(),
        "read through the template, which stays"
    );
}

fn usage_after(
    template: &mut super::UsageTemplate,
    data: &[u8],
) -> Option<Option<super::UsageMetadata>> {
    super::gemini(data, template).map(|c| c.usage)
}

/// Openings a stream's chat chunks may share: skipped members (valid or not, one escaped key),
/// and one that reads a member, which is never remembered.
const CHAT_OPENINGS: &[&str] = &[
    r#""id":"c1","object":"chat.completion.chunk","created":5,"#,
    r#""id":"c1","#,
    r#""id":[1,{"a":null}], "#,
    r#""id":"c1","created":05,"#,
    r#""\u0069d":"c1","#,
    r#""usage":null,"#,
    "",
];

/// A chat chunk from [`chat_chunk`] with one of [`CHAT_OPENINGS`] put first.
fn chat_chunk_opening() -> BoxedStrategy<Vec<u8>> {
    (proptest::sample::select(CHAT_OPENINGS), chat_chunk())
        .prop_map(|(opening, chunk)| format!("{{{opening}{}", &chunk[1..]))
        .prop_flat_map(|chunk| maybe_corrupt(Just(chunk).boxed()))
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A stream of chat chunks that share openings (which the fast path remembers and steps
    /// over unread) yields exactly the events of full decoding.
    #[test]
    fn remembered_chat_openings_never_change_the_events(
        chunks in proptest::collection::vec(chat_chunk_opening(), 2..5),
    ) {
        let data: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let mut slow = Vec::new();
        let mut parser = chat_parser();
        for chunk in &chunks {
            parser.slow_event(&lossy(chunk), &mut slow);
        }
        crate::sse::WireParser::on_eof(&mut parser, &mut slow);
        prop_assert_eq!(
            through(chat_parser(), &data),
            slow,
            "{:?}",
            chunks.iter().map(|c| lossy(c)).collect::<Vec<_>>()
        );
    }
}

/// The opening is remembered from one chunk and stepped over in the next, only up to the first
/// member read; a chunk that differs in it is read in full and remembered instead.
#[test]
fn chat_openings_are_remembered_up_to_the_first_member_read() {
    let mut memo = Vec::new();
    let mut out = Vec::new();
    let chunk = |opening: &str, text: &str| {
        format!(
            r#"{{{opening}"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}],"usage":null}}"#
        )
    };
    let opening = r#""id":"c1","created":5,"#;
    assert!(super::openai_chat(
        chunk(opening, "a").as_bytes(),
        &mut memo,
        &mut out
    ));
    assert_eq!(memo, format!("{{{opening}").as_bytes());
    assert!(super::openai_chat(
        chunk(opening, "b").as_bytes(),
        &mut memo,
        &mut out
    ));
    let other = r#""id":"c2","#;
    assert!(super::openai_chat(
        chunk(other, "c").as_bytes(),
        &mut memo,
        &mut out
    ));
    assert_eq!(memo, format!("{{{other}").as_bytes());
    // A read member first: nothing to remember, the old opening stays.
    assert!(super::openai_chat(
        br#"{"usage":null,"id":"c3","choices":[{"delta":{"content":"d"}}]}"#,
        &mut memo,
        &mut out
    ));
    assert_eq!(memo, format!("{{{other}").as_bytes());
    // An opening too long to keep a copy of is read, not remembered.
    let long = format!(
        r#""id":"{}","#,
        "x".repeat(crate::json_scan::MAX_REMEMBERED)
    );
    assert!(super::openai_chat(
        chunk(&long, "e").as_bytes(),
        &mut memo,
        &mut out
    ));
    assert_eq!(memo, format!("{{{other}").as_bytes());
    // An opening that only starts like the remembered one is read in full (and is invalid).
    assert!(!super::openai_chat(
        format!(r#"{{{other}"id":,"choices":[]}}"#).as_bytes(),
        &mut memo,
        &mut out
    ));
    let texts: Vec<&str> = out
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta { text } => text.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(texts, ["abcde"]);
}

/// Usages a stream's Gemini chunks may carry: one shape with counts that change (or come back),
/// another shape, `null`, none, and counts that are no plain integers.
fn gemini_usage_chunk() -> BoxedStrategy<Vec<u8>> {
    // Mostly two plain values, so that a usage often comes back to an earlier one.
    let count = proptest::sample::select(vec![
        "7", "12", "7", "12", "7", "12", "007", "-1", "1.5", "",
    ]);
    (0..8usize, count.clone(), count)
        .prop_map(|(shape, a, b)| {
            let usage = match shape {
                0..=3 => format!(
                    r#","usageMetadata":{{"promptTokenCount":{a},"candidatesTokenCount":{b},"totalTokenCount":{a},"promptTokensDetails":[{{"modality":"TEXT","tokenCount":7}}]}}"#
                ),
                4 => format!(r#","usageMetadata":{{"totalTokenCount":{b},"promptTokenCount":{a}}}"#),
                5 => r#","usageMetadata":null"#.to_owned(),
                6 => String::new(),
                _ => format!(r#","usageMetadata":{{"promptTokenCount":{a}}} "#),
            };
            format!(r#"{{"candidates":[{{"content":{{"parts":[{{"text":"t"}}],"role":"model"}}}}]{usage}}}"#)
                .into_bytes()
        })
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Streams whose usages share, change, repeat and return to a template's shape yield
    /// exactly the events of full decoding (the last usage read wins on both sides).
    #[test]
    fn gemini_usage_templates_never_change_the_events(
        chunks in proptest::collection::vec(gemini_usage_chunk(), 2..5),
    ) {
        prop_assert_eq!(
            gemini_stream(&chunks, true),
            gemini_stream(&chunks, false),
            "{:?}",
            chunks.iter().map(|c| lossy(c)).collect::<Vec<_>>()
        );
    }
}

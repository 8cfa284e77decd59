//! Fast decoding of each wire's plain text-delta event, the bulk of every stream.
//!
//! Each function recognises only the simplest shape of its wire's delta event and returns
//! `None` for anything else, so the wire's full `serde_json` decoding stays the reference: the
//! tests below check that both paths yield the same events.

use std::borrow::Cow;

use crate::StreamEvent;
use crate::json_scan::Seg::{self, Key, Only};
use crate::json_scan::{extract, is_null_or_absent, string_value};

fn owned(text: Cow<'_, str>) -> String {
    text.into_owned()
}

/// OpenAI Responses: `response.output_text.delta`, `response.refusal.delta` and the reasoning
/// text deltas.
pub(crate) fn openai_responses(data: &str) -> Option<StreamEvent> {
    let [kind, delta] = extract(data, [&[Key("type")], &[Key("delta")]])?;
    let text = owned(string_value(delta?)?);
    match kind? {
        r#""response.output_text.delta""# | r#""response.refusal.delta""# => {
            Some(StreamEvent::TextDelta { text })
        }
        r#""response.reasoning_summary_text.delta""# | r#""response.reasoning_text.delta""# => {
            Some(StreamEvent::ReasoningDelta { text })
        }
        _ => None,
    }
}

/// Anthropic: `content_block_delta` with a `text_delta`.
pub(crate) fn anthropic(data: &str) -> Option<StreamEvent> {
    let [kind, delta_kind, text] = extract(
        data,
        [
            &[Key("type")],
            &[Key("delta"), Key("type")],
            &[Key("delta"), Key("text")],
        ],
    )?;
    if kind? != r#""content_block_delta""# || delta_kind? != r#""text_delta""# {
        return None;
    }
    Some(StreamEvent::TextDelta {
        text: owned(string_value(text?)?),
    })
}

/// A Gemini chunk with one candidate holding one plain text part and no finish reason.
pub(crate) struct GeminiText<'a> {
    /// Raw `usageMetadata`, when present.
    pub(crate) usage: Option<&'a str>,
    /// The part's text.
    pub(crate) text: Cow<'a, str>,
}

/// Gemini: a chunk with exactly one candidate, one part, plain (non-thought) text.
pub(crate) fn gemini(data: &str) -> Option<GeminiText<'_>> {
    const PART: [Seg; 5] = [Key("candidates"), Only, Key("content"), Key("parts"), Only];
    let [
        text,
        thought,
        signature,
        call,
        finish,
        usage,
        feedback,
        error,
    ] = extract(
        data,
        [
            &[PART[0], PART[1], PART[2], PART[3], PART[4], Key("text")],
            &[PART[0], PART[1], PART[2], PART[3], PART[4], Key("thought")],
            &[
                PART[0],
                PART[1],
                PART[2],
                PART[3],
                PART[4],
                Key("thoughtSignature"),
            ],
            &[
                PART[0],
                PART[1],
                PART[2],
                PART[3],
                PART[4],
                Key("functionCall"),
            ],
            &[Key("candidates"), Only, Key("finishReason")],
            &[Key("usageMetadata")],
            &[Key("promptFeedback")],
            &[Key("error")],
        ],
    )?;
    if thought.is_some()
        || signature.is_some()
        || call.is_some()
        || !is_null_or_absent(finish)
        || !is_null_or_absent(feedback)
        || !is_null_or_absent(error)
    {
        return None;
    }
    Some(GeminiText {
        usage: usage.filter(|u| *u != "null"),
        text: string_value(text?)?,
    })
}

/// Chat Completions: one choice whose delta carries only text and/or reasoning text. Pushes the
/// events and returns `true`, or returns `false` having pushed nothing.
pub(crate) fn openai_chat(data: &str, out: &mut Vec<StreamEvent>) -> bool {
    const DELTA: [Seg; 3] = [Key("choices"), Only, Key("delta")];
    let texts = (|| {
        let [
            content,
            reasoning_content,
            reasoning,
            calls,
            finish,
            usage,
            error,
        ] = extract(
            data,
            [
                &[DELTA[0], DELTA[1], DELTA[2], Key("content")],
                &[DELTA[0], DELTA[1], DELTA[2], Key("reasoning_content")],
                &[DELTA[0], DELTA[1], DELTA[2], Key("reasoning")],
                &[DELTA[0], DELTA[1], DELTA[2], Key("tool_calls")],
                &[Key("choices"), Only, Key("finish_reason")],
                &[Key("usage")],
                &[Key("error")],
            ],
        )?;
        if !is_null_or_absent(calls)
            || !is_null_or_absent(finish)
            || !is_null_or_absent(usage)
            || !is_null_or_absent(error)
            || [content, reasoning_content, reasoning]
                .iter()
                .all(|t| is_null_or_absent(*t))
        {
            return None;
        }
        let text = |raw: Option<&str>| -> Option<Option<String>> {
            match raw {
                None | Some("null") => Some(None),
                Some(raw) => Some(Some(owned(string_value(raw)?))),
            }
        };
        Some([text(reasoning_content)?, text(reasoning)?, text(content)?])
    })();
    let Some([reasoning_content, reasoning, content]) = texts else {
        return false;
    };
    for text in [reasoning_content, reasoning].into_iter().flatten() {
        if !text.is_empty() {
            out.push(StreamEvent::ReasoningDelta { text });
        }
    }
    if let Some(text) = content.filter(|t| !t.is_empty()) {
        out.push(StreamEvent::TextDelta { text });
    }
    true
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use crate::StreamEvent;
    use crate::anthropic::MessagesParser;
    use crate::gemini::GeminiParser;
    use crate::openai_chat::ChatParser;
    use crate::openai_responses::ResponsesParser;

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
                |o| super::openai_responses(&data).map(|e| o.push(e)).is_some(),
                |o| ResponsesParser::default().slow_event(&data, o),
            );
            prop_assert_eq!(a, b);

            let data = json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}).to_string();
            let (a, b) = both(
                |o| super::anthropic(&data).map(|e| o.push(e)).is_some(),
                |o| MessagesParser::default().slow_event(&data, o),
            );
            prop_assert_eq!(a, b);

            let data = json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}],
                "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}, "modelVersion": "m"}).to_string();
            let mut fast = GeminiParser::new();
            let mut slow = GeminiParser::new();
            let (a, b) = both(|o| fast.fast_event(&data, o), |o| slow.slow_event(&data, o));
            prop_assert_eq!(a, b);

            let delta = if reasoning {
                json!({"reasoning_content": text, "content": null})
            } else {
                json!({"content": text})
            };
            let data = json!({"id": "c", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]}).to_string();
            let (a, b) = both(
                |o| super::openai_chat(&data, o),
                |o| ChatParser::new().slow_event(&data, o),
            );
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn other_shapes_are_declined() {
        assert!(
            super::openai_responses(r#"{"type":"response.completed","response":{}}"#).is_none()
        );
        assert!(
            super::openai_responses(r#"{"type":"response.output_text.delta","delta":5}"#).is_none()
        );
        assert!(super::anthropic(r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}"#).is_none());
        assert!(
            super::gemini(
                r#"{"candidates":[{"content":{"parts":[{"text":"a","thought":true}]}}]}"#
            )
            .is_none()
        );
        assert!(
            super::gemini(
                r#"{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}"#
            )
            .is_none()
        );
        assert!(
            super::gemini(r#"{"candidates":[{"content":{"parts":[{"text":"a"},{"text":"b"}]}}]}"#)
                .is_none()
        );
        let mut out = Vec::new();
        assert!(!super::openai_chat(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            &mut out
        ));
        assert!(!super::openai_chat(
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            &mut out
        ));
        assert!(!super::openai_chat(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            &mut out
        ));
        assert!(out.is_empty());
    }
}

//! Fast decoding of each wire's plain text-delta event, the bulk of every stream.
//!
//! Each function recognises only the simplest shape of its wire's delta event and returns
//! `None` for anything else, so the wire's full `serde_json` decoding stays the reference: the
//! tests below check that both paths yield the same events. Every member the full decoding
//! knows is either read here or makes the fast path decline, so a type error in any of them
//! still surfaces through serde. The data is raw bytes: the JSON reader validates its UTF-8, so
//! data that is not valid UTF-8 is declined here and decoded (replaced) by the full path.

use std::borrow::Cow;
use std::ops::Range;

use crate::StreamEvent;
use crate::gemini::UsageMetadata;
use crate::json_scan::{Reader, read};
use crate::sse::{DeltaKind, push_delta};

/// OpenAI Responses: `response.output_text.delta`, `response.refusal.delta` and the reasoning
/// text deltas.
pub(crate) fn openai_responses(data: &[u8]) -> Option<(Cow<'_, str>, DeltaKind)> {
    let (mut kind, mut delta) = (None, None);
    read(data, |r| {
        r.object(|r, key| {
            Some(match key {
                b"type" => {
                    kind = Some(r.string()?);
                    true
                }
                b"delta" => {
                    delta = Some(r.string()?);
                    true
                }
                b"output_index" | b"summary_index" => {
                    index(r)?;
                    true
                }
                b"item" | b"arguments" | b"response" | b"code" | b"message" | b"error" => {
                    return None;
                }
                _ => false,
            })
        })
    })?;
    let text = delta?;
    match kind?.as_ref() {
        "response.output_text.delta" | "response.refusal.delta" => Some((text, DeltaKind::Text)),
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            Some((text, DeltaKind::Reasoning))
        }
        _ => None,
    }
}

/// Anthropic: `content_block_delta` with a `text_delta`; returns the text.
pub(crate) fn anthropic(data: &[u8]) -> Option<Cow<'_, str>> {
    let (mut kind, mut delta_kind, mut text) = (None, None, None);
    read(data, |r| {
        r.object(|r, key| {
            Some(match key {
                b"type" => {
                    kind = Some(r.string()?);
                    true
                }
                b"delta" => {
                    r.object(|r, key| {
                        Some(match key {
                            b"type" => {
                                delta_kind = Some(r.string()?);
                                true
                            }
                            b"text" => {
                                text = Some(r.string()?);
                                true
                            }
                            b"partial_json" | b"thinking" | b"signature" | b"stop_reason" => {
                                return None;
                            }
                            _ => false,
                        })
                    })?;
                    true
                }
                b"index" => {
                    index(r)?;
                    true
                }
                b"content_block" | b"message" | b"usage" | b"error" => return None,
                _ => false,
            })
        })
    })?;
    if kind? != "content_block_delta" || delta_kind? != "text_delta" {
        return None;
    }
    text
}

/// An optional index: `null` or a non-negative integer.
fn index(r: &mut Reader<'_>) -> Option<()> {
    if r.null().is_none() {
        r.u64()?;
    }
    Some(())
}

/// A Gemini chunk with one candidate holding one plain text part and no finish reason.
pub(crate) struct GeminiText<'a> {
    /// The chunk's `usageMetadata`.
    pub(crate) usage: GeminiUsage,
    /// The part's text.
    pub(crate) text: Cow<'a, str>,
}

/// A Gemini chunk's `usageMetadata`, as the fast path found it.
pub(crate) enum GeminiUsage {
    /// Absent or `null`: the usage so far stands.
    Absent,
    /// Byte for byte the object given as the previous usage: the usage so far stands.
    Unchanged,
    /// An object read anew, and where it lies in the chunk.
    New(UsageMetadata, Range<usize>),
}

/// Gemini: a chunk with exactly one candidate, one part, plain (non-thought) text.
///
/// `previous_usage` is the `usageMetadata` object of the previous chunk this path read (or
/// empty). Gemini repeats the same usage in every chunk until the last, so a usage that starts
/// with those very bytes is stepped over unread: an object ends at its own closing brace, so
/// those bytes are the whole value, already validated and read.
pub(crate) fn gemini<'a>(data: &'a [u8], previous_usage: &[u8]) -> Option<GeminiText<'a>> {
    let (mut usage, mut text) = (GeminiUsage::Absent, None);
    read(data, |r| {
        r.object(|r, key| {
            Some(match key {
                b"candidates" => {
                    r.only(|r| gemini_candidate(r, &mut text))?;
                    true
                }
                b"usageMetadata" => {
                    usage = if r.skip_exact(previous_usage) {
                        GeminiUsage::Unchanged
                    } else {
                        let start = r.position();
                        match gemini_usage(r)? {
                            Some(read) => GeminiUsage::New(read, start..r.position()),
                            None => GeminiUsage::Absent,
                        }
                    };
                    true
                }
                b"promptFeedback" | b"error" => {
                    r.null()?;
                    true
                }
                _ => false,
            })
        })
    })?;
    Some(GeminiText { usage, text: text? })
}

/// `usageMetadata`: `null` or an object whose counts are `u64`s.
fn gemini_usage(r: &mut Reader<'_>) -> Option<Option<UsageMetadata>> {
    if r.null().is_some() {
        return Some(None);
    }
    let mut usage = UsageMetadata::default();
    r.object(|r, key| {
        let count = match key {
            b"promptTokenCount" => &mut usage.prompt_token_count,
            b"candidatesTokenCount" => &mut usage.candidates_token_count,
            b"cachedContentTokenCount" => &mut usage.cached_content_token_count,
            b"thoughtsTokenCount" => &mut usage.thoughts_token_count,
            _ => return Some(false),
        };
        *count = r.u64()?;
        Some(true)
    })?;
    Some(Some(usage))
}

/// A candidate without a finish reason whose content is one plain text part.
fn gemini_candidate<'a>(r: &mut Reader<'a>, text: &mut Option<Cow<'a, str>>) -> Option<()> {
    r.object(|r, key| {
        Some(match key {
            b"content" => {
                r.object(|r, key| {
                    Some(match key {
                        b"parts" => {
                            r.only(|r| gemini_part(r, text))?;
                            true
                        }
                        _ => false,
                    })
                })?;
                true
            }
            b"finishReason" => {
                r.null()?;
                true
            }
            _ => false,
        })
    })
}

fn gemini_part<'a>(r: &mut Reader<'a>, text: &mut Option<Cow<'a, str>>) -> Option<()> {
    r.object(|r, key| match key {
        b"text" => {
            *text = Some(r.string()?);
            Some(true)
        }
        // Thoughts, signatures and calls take the full path.
        b"thought" | b"thoughtSignature" | b"functionCall" => None,
        _ => Some(false),
    })
}

/// Chat Completions: one choice whose delta carries only text and/or reasoning text. Pushes the
/// events and returns `true`, or returns `false` having pushed nothing.
///
/// `skipped` remembers the chunk's opening members before `choices` (id, object, created,
/// model, fingerprint), which servers repeat unchanged in every chunk of a stream (see
/// [`crate::json_scan::Reader::object_memo`]).
pub(crate) fn openai_chat(data: &[u8], skipped: &mut Vec<u8>, out: &mut Vec<StreamEvent>) -> bool {
    let mut texts = [None, None, None];
    let read_ok = read(data, |r| {
        r.object_memo(skipped, |r, key| {
            Some(match key {
                b"choices" => {
                    r.only(|r| chat_choice(r, &mut texts))?;
                    true
                }
                b"usage" | b"error" => {
                    r.null()?;
                    true
                }
                _ => false,
            })
        })
    });
    if read_ok.is_none() || texts.iter().all(Option::is_none) {
        return false;
    }
    for (slot, text) in texts.into_iter().enumerate() {
        let Some(text) = text.filter(|t| !t.is_empty()) else {
            continue;
        };
        let kind = if slot == CONTENT {
            DeltaKind::Text
        } else {
            DeltaKind::Reasoning
        };
        push_delta(out, kind, text);
    }
    true
}

/// Where `chat_choice` puts the delta's `content`, after the two reasoning texts (the order in
/// which full decoding emits them).
const CONTENT: usize = 2;

/// A choice without a finish reason whose delta holds no tool calls; fills `texts` with its
/// `reasoning_content`, `reasoning` and `content`.
fn chat_choice<'a>(r: &mut Reader<'a>, texts: &mut [Option<Cow<'a, str>>; 3]) -> Option<()> {
    r.object(|r, key| {
        Some(match key {
            b"delta" => {
                r.object(|r, key| {
                    let slot = match key {
                        b"reasoning_content" => 0,
                        b"reasoning" => 1,
                        b"content" => CONTENT,
                        b"tool_calls" => return r.null().map(|()| true),
                        _ => return Some(false),
                    };
                    texts[slot] = r.string_or_null()?;
                    Some(true)
                })?;
                true
            }
            b"finish_reason" => {
                r.null()?;
                true
            }
            _ => false,
        })
    })
}

#[cfg(test)]
mod tests;

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

use serde::Deserialize;

use crate::StreamEvent;
use crate::json_scan::{MAX_REMEMBERED, Reader, read};
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
        "response.output_text.delta" => Some((text, DeltaKind::Text)),
        "response.refusal.delta" => Some((text, DeltaKind::Refusal)),
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
    /// The chunk's usage counts; `None` when it has none (no `usageMetadata`, or `null`).
    pub(crate) usage: Option<UsageMetadata>,
    /// The part's text.
    pub(crate) text: Cow<'a, str>,
}

/// Gemini: a chunk with exactly one candidate, one part, plain (non-thought) text. Its usage is
/// read through `template` (see [`UsageTemplate`]), which then describes it; when this path
/// declines the chunk, the caller's full decoding must forget the template.
pub(crate) fn gemini<'a>(data: &'a [u8], template: &mut UsageTemplate) -> Option<GeminiText<'a>> {
    let (mut usage, mut text) = (None, None);
    read(data, |r| {
        r.object(|r, key| {
            Some(match key {
                b"candidates" => {
                    r.only(|r| gemini_candidate(r, &mut text))?;
                    true
                }
                b"usageMetadata" => {
                    usage = template.read_usage(r)?;
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

/// A Gemini chunk's `usageMetadata`, filled by the fast path or by the wire's full decoding.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageMetadata {
    #[serde(default)]
    pub(crate) prompt_token_count: u64,
    #[serde(default)]
    pub(crate) candidates_token_count: u64,
    #[serde(default)]
    pub(crate) cached_content_token_count: u64,
    #[serde(default)]
    pub(crate) thoughts_token_count: u64,
}

/// The count of [`UsageMetadata`] a member fills (`Total` fills none: it is checked, and kept as
/// a template's hole, because it changes with the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UsageCount {
    Prompt,
    Candidates,
    Cached,
    Thoughts,
    Total,
}

impl UsageCount {
    fn of(key: &[u8]) -> Option<UsageCount> {
        Some(match key {
            b"promptTokenCount" => UsageCount::Prompt,
            b"candidatesTokenCount" => UsageCount::Candidates,
            b"cachedContentTokenCount" => UsageCount::Cached,
            b"thoughtsTokenCount" => UsageCount::Thoughts,
            b"totalTokenCount" => UsageCount::Total,
            _ => return None,
        })
    }

    /// Stores `value` in `usage`.
    fn set(self, usage: &mut UsageMetadata, value: u64) {
        match self {
            UsageCount::Prompt => usage.prompt_token_count = value,
            UsageCount::Candidates => usage.candidates_token_count = value,
            UsageCount::Cached => usage.cached_content_token_count = value,
            UsageCount::Thoughts => usage.thoughts_token_count = value,
            UsageCount::Total => {}
        }
    }
}

/// The `usageMetadata` object the fast path last read in full, kept as a template.
///
/// Gemini sends one usage object in chunk after chunk, its counts changing at most. A usage
/// that equals the template byte for byte outside the counts' digits, each count's digits being
/// a plain integer again, has the same members, valid as before (a number ends where its digits
/// do, and the template's next byte is a comma or a closing brace), so only the counts are read.
#[derive(Debug, Default)]
pub(crate) struct UsageTemplate {
    bytes: Vec<u8>,
    /// Where each count's digits are in `bytes`, in order.
    counts: Vec<(Range<usize>, UsageCount)>,
    /// The counts `bytes` hold.
    usage: UsageMetadata,
}

impl UsageTemplate {
    /// No template (the full decoding may have changed the usage since).
    pub(crate) fn forget(&mut self) {
        self.bytes.clear();
        self.counts.clear();
    }

    /// Reads the `usageMetadata` value at `r` (`Some(None)`: `null`): through the template when
    /// it has the template's shape, else in full, and then it becomes the template.
    #[inline(always)]
    fn read_usage(&mut self, r: &mut Reader<'_>) -> Option<Option<UsageMetadata>> {
        // The very object again, the usual case, costs one comparison here.
        let same = |rest: &[u8]| {
            rest.starts_with(&self.bytes)
                .then_some((self.usage, self.bytes.len()))
        };
        if !self.bytes.is_empty()
            && let Some(usage) = r.known(same)
        {
            return Some(Some(usage));
        }
        self.read_usage_otherwise(r)
    }

    /// [`Self::read_usage`] of anything but the template's own bytes.
    #[inline(never)]
    fn read_usage_otherwise(&mut self, r: &mut Reader<'_>) -> Option<Option<UsageMetadata>> {
        if let Some(found) = r.known(|rest| self.read(rest)) {
            return Some(Some(found));
        }
        self.forget();
        let start = r.position();
        let usage = gemini_usage(r, &mut self.counts)?;
        let bytes = r.since(start);
        match usage {
            Some(read) if bytes.len() <= MAX_REMEMBERED => {
                self.bytes.extend_from_slice(bytes);
                self.usage = read;
            }
            Some(_) | None => self.forget(),
        }
        Some(usage)
    }

    /// The usage at the start of `text`, and its length, when it has the template's shape.
    fn read(&self, text: &[u8]) -> Option<(UsageMetadata, usize)> {
        if self.bytes.is_empty() {
            return None;
        }
        let mut usage = UsageMetadata::default();
        let (mut at, mut from) = (0, 0);
        for (digits, count) in &self.counts {
            let literal = self.bytes.get(from..digits.start)?;
            at += text
                .get(at..)?
                .starts_with(literal)
                .then_some(literal.len())?;
            let rest = text.get(at..)?;
            let run = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            count.set(&mut usage, read(&rest[..run], Reader::u64)?);
            at += run;
            from = digits.end;
        }
        let literal = self.bytes.get(from..)?;
        at += text
            .get(at..)?
            .starts_with(literal)
            .then_some(literal.len())?;
        Some((usage, at))
    }
}

/// `usageMetadata`: `null` or an object whose counts are `u64`s; notes where each count's
/// digits are, from the object's start.
fn gemini_usage(
    r: &mut Reader<'_>,
    counts: &mut Vec<(Range<usize>, UsageCount)>,
) -> Option<Option<UsageMetadata>> {
    if r.null().is_some() {
        return Some(None);
    }
    let base = r.position();
    let mut usage = UsageMetadata::default();
    r.object(|r, key| {
        let Some(count) = UsageCount::of(key) else {
            return Some(false);
        };
        let start = r.position() - base;
        count.set(&mut usage, r.u64()?);
        counts.push((start..r.position() - base, count));
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
                        // A refusal takes the full path, which reads it as refusal text.
                        b"tool_calls" | b"refusal" => return r.null().map(|()| true),
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

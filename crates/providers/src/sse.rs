//! Incremental Server-Sent Events decoding shared by every wire, and the glue that turns an
//! SSE byte stream into normalized [`StreamEvent`]s.
//!
//! The decoder works on raw bytes: a line (and so a UTF-8 character) may be split anywhere
//! between network chunks, and lines end in LF, CRLF or a lone CR. An event's data is handed
//! over as raw bytes, not yet checked as UTF-8: the wires' fast paths validate it while reading
//! it as JSON, and everything else decodes it with [`SseEvent::text`] (invalid UTF-8 replaced,
//! as browsers decode SSE). Memory is bounded: a line or an event larger than the decoder's limit
//! (default [`MAX_EVENT_BYTES`]) is an error, so a hostile server streaming an endless line
//! cannot grow the buffer without limit.

use std::borrow::Cow;

use thiserror::Error;

use crate::StreamEvent;

/// Largest line or event (data bytes) one stream may buffer.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// A malformed or oversized SSE stream.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SseError {
    /// A line or an event grew past the limit.
    #[error("SSE event exceeds the {limit}-byte limit")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// One decoded event, borrowed from the decoder's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` name, `message` when none was given.
    pub event: &'a str,
    /// The `data:` lines joined by `\n`, as received: possibly invalid UTF-8 (see
    /// [`SseEvent::text`]).
    pub data: &'a [u8],
}

impl<'a> SseEvent<'a> {
    /// The data as text, invalid UTF-8 replaced rather than fatal (as browsers decode SSE).
    pub fn text(&self) -> Cow<'a, str> {
        lossy_text(self.data)
    }
}

/// An owned copy of an [`SseEvent`], for tests and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedSseEvent {
    /// The `event:` name, `message` when none was given.
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Incremental SSE decoder over byte chunks.
#[derive(Debug)]
pub struct SseDecoder {
    /// Bytes of a line whose end has not arrived yet.
    line: Vec<u8>,
    /// Data of the event being assembled (each line followed by `\n`).
    data: Vec<u8>,
    /// `event:` name of the event being assembled.
    event: String,
    /// The previous chunk ended in CR: a leading LF in the next one belongs to it.
    pending_cr: bool,
    limit: usize,
    failed: Option<SseError>,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the default [`MAX_EVENT_BYTES`] limit.
    pub fn new() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }

    /// A decoder that refuses lines or events over `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            event: String::new(),
            pending_cr: false,
            limit: limit.max(1),
            failed: None,
        }
    }

    /// Bytes currently held for incomplete lines and events (bounded by about twice the limit).
    pub fn buffered_bytes(&self) -> usize {
        self.line.len() + self.data.len() + self.event.len()
    }

    /// Feeds one network chunk, calling `on_event` for every event it completes.
    ///
    /// After an error the decoder stays failed and returns the same error.
    pub fn feed<F>(&mut self, mut chunk: &[u8], mut on_event: F) -> Result<(), SseError>
    where
        F: FnMut(SseEvent<'_>),
    {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) else {
                if self.line.len() + chunk.len() > self.limit {
                    return Err(self.fail());
                }
                self.line.extend_from_slice(chunk);
                return Ok(());
            };
            if self.line.is_empty() && self.data.is_empty() {
                match self.dispatch_single_line(chunk, end, &mut on_event) {
                    Ok(Some(consumed)) => {
                        chunk = &chunk[consumed..];
                        continue;
                    }
                    Ok(None) => {}
                    Err(()) => return Err(self.fail()),
                }
            }
            let result = if self.line.is_empty() {
                self.process_line(&chunk[..end], &mut on_event)
            } else {
                if self.line.len() + end > self.limit {
                    return Err(self.fail());
                }
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&chunk[..end]);
                let result = self.process_line(&line, &mut on_event);
                line.clear();
                self.line = line;
                result
            };
            if result.is_err() {
                return Err(self.fail());
            }
            let mut next = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(end + 1) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            chunk = &chunk[next..];
        }
        Ok(())
    }

    /// Feeds a chunk and returns owned copies of the events it completed.
    pub fn feed_collect(&mut self, chunk: &[u8]) -> Result<Vec<OwnedSseEvent>, SseError> {
        let mut out = Vec::new();
        self.feed(chunk, |ev| {
            out.push(OwnedSseEvent {
                event: ev.event.to_owned(),
                data: ev.text().into_owned(),
            })
        })?;
        Ok(out)
    }

    fn fail(&mut self) -> SseError {
        let err = SseError::TooLarge { limit: self.limit };
        self.failed = Some(err.clone());
        // Release the memory a hostile stream made us hold.
        self.line = Vec::new();
        self.data = Vec::new();
        err
    }

    /// The common case, without copying: a one-line `data:` event whose blank line follows in
    /// the same chunk. Returns the bytes consumed, or `None` to take the general path.
    fn dispatch_single_line<F>(
        &mut self,
        chunk: &[u8],
        end: usize,
        on_event: &mut F,
    ) -> Result<Option<usize>, ()>
    where
        F: FnMut(SseEvent<'_>),
    {
        let Some(value) = chunk[..end].strip_prefix(b"data:") else {
            return Ok(None);
        };
        let blank = match (chunk[end], chunk.get(end + 1)) {
            (b'\n', _) => end + 1,
            (b'\r', Some(b'\n')) => end + 2,
            (b'\r', Some(_)) => end + 1,
            // A CR ending the chunk may be the first half of a CRLF.
            _ => return Ok(None),
        };
        let consumed = match (chunk.get(blank), chunk.get(blank + 1)) {
            (Some(b'\n'), _) => blank + 1,
            (Some(b'\r'), Some(b'\n')) => blank + 2,
            (Some(b'\r'), Some(_)) => blank + 1,
            (Some(b'\r'), None) => {
                self.pending_cr = true;
                blank + 1
            }
            _ => return Ok(None),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if value.len() + 1 > self.limit {
            return Err(());
        }
        let event = if self.event.is_empty() {
            "message"
        } else {
            self.event.as_str()
        };
        on_event(SseEvent { event, data: value });
        self.event.clear();
        Ok(Some(consumed))
    }

    fn process_line<F>(&mut self, line: &[u8], on_event: &mut F) -> Result<(), ()>
    where
        F: FnMut(SseEvent<'_>),
    {
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.limit {
                    return Err(());
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
            }
            // `id` and `retry` steer browser reconnection, which no wire here relies on.
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_event: &mut F)
    where
        F: FnMut(SseEvent<'_>),
    {
        if self.data.is_empty() {
            self.event.clear();
            return;
        }
        let data = &self.data[..self.data.len() - 1];
        let event = if self.event.is_empty() {
            "message"
        } else {
            self.event.as_str()
        };
        on_event(SseEvent { event, data });
        self.data.clear();
        self.event.clear();
    }
}

/// `bytes` as text, invalid UTF-8 replaced rather than fatal (as browsers decode SSE).
fn lossy_text(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Turns the SSE events of one wire into normalized [`StreamEvent`]s.
///
/// Deltas coalesce: a text, reasoning or tool-argument delta extends a delta of the same kind
/// (and call) that ends `out` instead of adding an event (see [`push_delta`]), so a network chunk
/// of a hundred token-sized deltas yields one event, not a hundred allocations and a hundred
/// trips through every consumer. The folded text is the same; only the cuts between deltas
/// move. [`WireStreamDecoder`] never extends an event that was in `out` before its call.
pub trait WireParser: Send + 'static {
    /// Handles one SSE event, pushing zero or more normalized events.
    fn on_event(&mut self, event: SseEvent<'_>, out: &mut Vec<StreamEvent>);

    /// The byte stream ended. Pushes the terminal event (a completion, or a retryable error when
    /// the wire's terminal event never arrived).
    fn on_eof(&mut self, out: &mut Vec<StreamEvent>);
}

/// What a [`push_delta`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeltaKind {
    /// Visible text.
    Text,
    /// Reasoning text.
    Reasoning,
    /// Refusal text.
    Refusal,
    /// JSON arguments of the tool call at this index.
    Arguments(usize),
}

/// Appends a delta to `out`, extending the last event instead when it is a delta of the same
/// kind (and call); every wire pushes its deltas through here, the fast paths too, so both
/// decodings of an event yield the same events.
pub(crate) fn push_delta(out: &mut Vec<StreamEvent>, kind: DeltaKind, text: Cow<'_, str>) {
    match (out.last_mut(), kind) {
        (Some(StreamEvent::TextDelta { text: last }), DeltaKind::Text)
        | (Some(StreamEvent::ReasoningDelta { text: last }), DeltaKind::Reasoning)
        | (Some(StreamEvent::RefusalDelta { text: last }), DeltaKind::Refusal) => {
            last.push_str(&text);
        }
        (
            Some(StreamEvent::ToolCallArgumentsDelta {
                index: last_index,
                delta: last,
            }),
            DeltaKind::Arguments(index),
        ) if *last_index == index => last.push_str(&text),
        _ => out.push(match kind {
            DeltaKind::Text => StreamEvent::TextDelta {
                text: text.into_owned(),
            },
            DeltaKind::Reasoning => StreamEvent::ReasoningDelta {
                text: text.into_owned(),
            },
            DeltaKind::Refusal => StreamEvent::RefusalDelta {
                text: text.into_owned(),
            },
            DeltaKind::Arguments(index) => StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: text.into_owned(),
            },
        }),
    }
}

/// An [`SseDecoder`] and a [`WireParser`]: bytes in, normalized events out, until the first
/// terminal event ([`StreamEvent::Completed`] or [`StreamEvent::Error`]).
#[derive(Debug)]
pub struct WireStreamDecoder<P> {
    sse: SseDecoder,
    parser: P,
    finished: bool,
    /// Where the parser's events go when the caller's `out` is not empty, so that no delta is
    /// ever folded into an event the caller already had.
    batch: Vec<StreamEvent>,
}

impl<P: WireParser> WireStreamDecoder<P> {
    /// A decoder with the default line/event limit.
    pub fn new(parser: P) -> Self {
        Self::with_limit(parser, MAX_EVENT_BYTES)
    }

    /// A decoder refusing lines or events over `limit` bytes.
    pub fn with_limit(parser: P, limit: usize) -> Self {
        Self {
            sse: SseDecoder::with_limit(limit),
            parser,
            finished: false,
            batch: Vec::new(),
        }
    }

    /// Whether a terminal event has been produced; later input is ignored.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Bytes held for incomplete lines and events.
    pub fn buffered_bytes(&self) -> usize {
        self.sse.buffered_bytes()
    }

    /// Marks the stream finished without another event (the caller already reported why).
    pub fn abort(&mut self) {
        self.finished = true;
    }

    /// Feeds one network chunk, appending normalized events to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.with_fresh(out, |this, fresh| this.feed_fresh(chunk, fresh));
    }

    /// The byte stream ended: appends the terminal event if none was produced yet.
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.with_fresh(out, |this, fresh| {
            this.parser.on_eof(fresh);
            if !fresh.iter().any(is_terminal) {
                fresh.push(truncated_error());
            }
            truncate_after_terminal(fresh);
            this.finished = true;
        });
    }

    /// Runs `produce` on an empty vector: `out` itself when it is empty (the usual case),
    /// else the reused `batch`, appended to `out` afterwards.
    fn with_fresh(
        &mut self,
        out: &mut Vec<StreamEvent>,
        produce: impl FnOnce(&mut Self, &mut Vec<StreamEvent>),
    ) {
        if out.is_empty() {
            produce(self, out);
        } else {
            let mut batch = std::mem::take(&mut self.batch);
            produce(self, &mut batch);
            out.append(&mut batch);
            self.batch = batch;
        }
    }

    fn feed_fresh(&mut self, chunk: &[u8], out: &mut Vec<StreamEvent>) {
        let parser = &mut self.parser;
        let finished = &mut self.finished;
        let result = self.sse.feed(chunk, |event| {
            if *finished {
                return;
            }
            // A coalesced delta extends the event before `before`, never a terminal one.
            let before = out.len();
            parser.on_event(event, out);
            if out[before..].iter().any(is_terminal) {
                *finished = true;
            }
        });
        if self.finished {
            truncate_after_terminal(out);
            return;
        }
        if let Err(err) = result {
            out.push(StreamEvent::Error {
                message: err.to_string(),
                retryable: false,
                retry_after_ms: None,
            });
            self.finished = true;
        }
    }
}

/// Whether `event` ends a stream.
pub fn is_terminal(event: &StreamEvent) -> bool {
    match event {
        StreamEvent::Completed { .. } | StreamEvent::Error { .. } => true,
        StreamEvent::TextDelta { .. }
        | StreamEvent::ReasoningDelta { .. }
        | StreamEvent::RefusalDelta { .. }
        | StreamEvent::Warning { .. }
        | StreamEvent::ReasoningDone { .. }
        | StreamEvent::ToolCallStart { .. }
        | StreamEvent::ToolCallArgumentsDelta { .. }
        | StreamEvent::ToolCallDone { .. }
        | StreamEvent::Usage { .. } => false,
    }
}

/// The error for a stream that ended before its wire's terminal event.
pub fn truncated_error() -> StreamEvent {
    StreamEvent::Error {
        message: "stream ended before the response completed".to_owned(),
        retryable: true,
        retry_after_ms: None,
    }
}

/// The error event for a data payload a wire could not parse.
pub(crate) fn malformed_event(wire: &str, err: &serde_json::Error) -> StreamEvent {
    StreamEvent::Error {
        message: format!("malformed {wire} event: {err}"),
        retryable: false,
        retry_after_ms: None,
    }
}

fn truncate_after_terminal(out: &mut Vec<StreamEvent>) {
    if let Some(pos) = out.iter().position(is_terminal) {
        out.truncate(pos + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Vec<OwnedSseEvent> {
        let mut dec = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(dec.feed_collect(c).unwrap());
        }
        out
    }

    #[test]
    fn lone_cr_split_from_lf_is_one_line_end() {
        let evs = collect(&[b"data: a\r", b"\n\r", b"\ndata: b\r\r"]);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, "a");
        assert_eq!(evs[1].data, "b");
    }
}

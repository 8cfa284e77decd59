//! Reading the one `AgentInput` from stdin, bounded, with a safe preview when it does not parse.
//!
//! At most `MAX_INPUT_BYTES + 1` bytes are ever read: one byte past the limit proves the input is
//! oversized without buffering (or even reading) the rest. stdin is read through its raw
//! descriptor, not std's buffered `Stdin`, so not even a read-ahead block passes the limit.
//!
//! A parse failure is reported as one bounded line: the parser's message (serde quotes offending
//! strings in full, so it is capped too) and an escaped preview of the input, each cut on a
//! character boundary, plus the count of input bytes the preview leaves out.

use intendant_protocol::runtime::{AgentInput, MAX_INPUT_BYTES};
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use thiserror::Error;

/// Bytes of a malformed input shown in the parse error (after escaping).
pub const PARSE_PREVIEW_BYTES: usize = 2048;
/// Bytes of the parser's own message kept in the parse error.
pub const PARSE_MESSAGE_BYTES: usize = 512;

/// Why the input was rejected; nothing has run.
#[derive(Debug, Error)]
pub enum InputError {
    /// More than the limit arrived.
    #[error("input exceeds {limit} bytes; refusing to run anything")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// stdin could not be read.
    #[error("could not read stdin: {0}")]
    Read(#[source] io::Error),
    /// The bytes are not an `AgentInput`.
    #[error("invalid input: {message}; input preview: {preview}{omitted_note}")]
    Parse {
        /// The serde error, one line, at most [`PARSE_MESSAGE_BYTES`] (`...` marks a cut).
        message: String,
        /// At most [`PARSE_PREVIEW_BYTES`] of escaped input, cut on a character boundary.
        preview: String,
        /// `" (N more bytes omitted)"`, or empty when the whole input is shown.
        omitted_note: String,
    },
}

/// Reads and parses one `AgentInput` from `reader`, reading at most `limit + 1` bytes.
pub fn read_input(reader: impl Read, limit: usize) -> Result<AgentInput, InputError> {
    let mut buf = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(InputError::Read)?;
    if buf.len() > limit {
        return Err(InputError::TooLarge { limit });
    }
    parse_input(&buf)
}

/// Reads stdin with the protocol's [`MAX_INPUT_BYTES`] limit, straight from file descriptor 0.
pub fn read_stdin() -> Result<AgentInput, InputError> {
    let fd = io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(InputError::Read)?;
    read_input(File::from(fd), MAX_INPUT_BYTES)
}

/// Parses `bytes` as an `AgentInput`.
pub fn parse_input(bytes: &[u8]) -> Result<AgentInput, InputError> {
    serde_json::from_slice(bytes).map_err(|error| {
        let mut message = OneLine::new(PARSE_MESSAGE_BYTES);
        // The writer refuses past its cap, which ends the formatting early: the full message
        // (possibly a quoted multi-megabyte string) is never built.
        let _ = write!(message, "{error}");
        let (preview, shown) = escaped_preview(bytes, PARSE_PREVIEW_BYTES);
        let omitted = bytes.len() - shown;
        InputError::Parse {
            message: message.finish(),
            preview,
            omitted_note: if omitted > 0 {
                format!(" ({omitted} more bytes omitted)")
            } else {
                String::new()
            },
        }
    })
}

/// The longest escaped prefix of `bytes` that fits `max` bytes, and how many input bytes it
/// covers. Characters are escaped as by `char::escape_debug` (so no newline or control byte can
/// split the line) and invalid UTF-8 bytes as `\xNN`; nothing is cut in the middle.
pub fn escaped_preview(bytes: &[u8], max: usize) -> (String, usize) {
    let mut out = String::new();
    let mut shown = 0;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if !push_within(&mut out, max, c.escape_debug()) {
                return (out, shown);
            }
            shown += c.len_utf8();
        }
        for b in chunk.invalid() {
            if !push_within(&mut out, max, format!("\\x{b:02x}").chars()) {
                return (out, shown);
            }
            shown += 1;
        }
    }
    (out, shown)
}

/// Appends `piece` to `out` if the result stays within `max` bytes.
fn push_within(out: &mut String, max: usize, piece: impl Iterator<Item = char> + Clone) -> bool {
    let len: usize = piece.clone().map(char::len_utf8).sum();
    if out.len() + len > max {
        return false;
    }
    out.extend(piece);
    true
}

/// A `fmt::Write` sink keeping one line of at most `max` bytes: control characters are
/// escaped, and writing past the cap fails (which stops the formatter) and marks the cut.
#[derive(Debug)]
struct OneLine {
    text: String,
    max: usize,
    cut: bool,
}

impl OneLine {
    const CUT_MARK: &'static str = "...";

    fn new(max: usize) -> Self {
        OneLine {
            text: String::new(),
            max: max.saturating_sub(Self::CUT_MARK.len()),
            cut: false,
        }
    }

    fn finish(mut self) -> String {
        if self.cut {
            self.text.push_str(Self::CUT_MARK);
        }
        self.text
    }
}

impl fmt::Write for OneLine {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            let fits = if c.is_control() {
                push_within(&mut self.text, self.max, c.escape_default())
            } else {
                push_within(&mut self.text, self.max, std::iter::once(c))
            };
            if !fits {
                self.cut = true;
                return Err(fmt::Error);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_error(input: &[u8]) -> (String, String, String) {
        match parse_input(input).unwrap_err() {
            InputError::Parse {
                message,
                preview,
                omitted_note,
            } => (message, preview, omitted_note),
            other => panic!("wrong error {other}"),
        }
    }

    #[test]
    fn oversize_is_refused_without_reading_everything() {
        let data = [b' '; 100];
        let mut reader = &data[..];
        let err = read_input(&mut reader, 10).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { limit: 10 }));
        // Only limit + 1 bytes were consumed.
        assert_eq!(reader.len(), 89);
    }

    #[test]
    fn parse_error_preview_is_capped_on_a_char_boundary() {
        let mut bad = "{".to_owned();
        bad.push_str(&"é".repeat(3000));
        let (_, preview, omitted_note) = parse_error(bad.as_bytes());
        assert_eq!(
            preview.len(),
            PARSE_PREVIEW_BYTES - 1,
            "1 + 1023 * 2 bytes fit"
        );
        assert!(preview.starts_with("{é"));
        let omitted = bad.len() - preview.len();
        assert_eq!(omitted_note, format!(" ({omitted} more bytes omitted)"));
    }

    #[test]
    fn escaping_never_pushes_the_preview_past_its_cap() {
        // Newlines and invalid bytes expand when escaped; the cap is on the escaped text and
        // the omitted count is in input bytes.
        let mut bad = b"{\"commands\":[".to_vec();
        bad.extend(std::iter::repeat_n(b'\n', 1000));
        bad.extend(std::iter::repeat_n(0xff, 1000));
        let (_, preview, omitted_note) = parse_error(&bad);
        assert!(preview.len() <= PARSE_PREVIEW_BYTES, "{}", preview.len());
        assert!(!preview.contains('\n'));
        // The 13-byte prefix escapes to 15 bytes (two quotes), each newline to 2, each 0xff to 4.
        let shown = 13 + 1000 + (PARSE_PREVIEW_BYTES - 15 - 2000) / 4;
        assert!(preview.ends_with("\\xff"), "{preview}");
        assert_eq!(
            omitted_note,
            format!(" ({} more bytes omitted)", bad.len() - shown)
        );
    }

    #[test]
    fn a_huge_quoted_string_in_the_parser_message_is_capped() {
        // serde_json quotes a wrongly typed string in full; the message must not carry it all.
        let mut bad = b"{\"commands\":\"".to_vec();
        bad.extend(std::iter::repeat_n(b'x', 1 << 20));
        bad.extend(b"\\nsecond line\"}");
        let err = parse_input(&bad).unwrap_err();
        let (message, ..) = parse_error(&bad);
        assert!(message.len() <= PARSE_MESSAGE_BYTES, "{}", message.len());
        assert!(message.starts_with("invalid type: string"), "{message}");
        assert!(message.ends_with("..."));
        let line = err.to_string();
        assert!(!line.contains('\n'));
        assert!(line.len() < PARSE_MESSAGE_BYTES + PARSE_PREVIEW_BYTES + 100);
    }

    #[test]
    fn short_parser_messages_are_kept_whole_on_one_line() {
        let (message, preview, omitted_note) =
            parse_error(b"{\"commands\":[{\"function\":\"x\"}]}");
        assert_eq!(message, "missing field `nonce` at line 1 column 29");
        assert_eq!(preview, r#"{\"commands\":[{\"function\":\"x\"}]}"#);
        assert_eq!(omitted_note, "");
        let (message, ..) = parse_error(b"{\"commands\":[],\"a\nb\":1}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn valid_input_parses() {
        let input = read_input(&br#"{"commands":[]}"#[..], 100).unwrap();
        assert!(input.commands.is_empty());
    }
}

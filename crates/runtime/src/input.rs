//! Reading the one `AgentInput` from stdin, bounded, with a safe preview when it does not parse.
//!
//! At most `MAX_INPUT_BYTES + 1` bytes are ever read: one byte past the limit proves the input is
//! oversized without buffering (or even reading) the rest.

use intendant_protocol::runtime::{AgentInput, MAX_INPUT_BYTES};
use std::io::{self, Read};
use thiserror::Error;

use crate::artifact::utf8_prefix;

/// Bytes of a malformed input shown in the parse error.
pub const PARSE_PREVIEW_BYTES: usize = 2048;

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
    #[error("invalid input: {error}; input preview: {preview}{omitted_note}")]
    Parse {
        /// The serde error.
        error: serde_json::Error,
        /// At most [`PARSE_PREVIEW_BYTES`] of the input, cut on a UTF-8 boundary.
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

/// Reads stdin with the protocol's [`MAX_INPUT_BYTES`] limit.
pub fn read_stdin() -> Result<AgentInput, InputError> {
    read_input(io::stdin().lock(), MAX_INPUT_BYTES)
}

/// Parses `bytes` as an `AgentInput`.
pub fn parse_input(bytes: &[u8]) -> Result<AgentInput, InputError> {
    serde_json::from_slice(bytes).map_err(|error| {
        let shown = utf8_prefix(bytes, PARSE_PREVIEW_BYTES);
        let omitted = bytes.len() - shown.len();
        InputError::Parse {
            error,
            // Lossy so that invalid UTF-8 in the input still yields a printable one-liner;
            // escape_debug keeps newlines and control bytes from splitting the line.
            preview: String::from_utf8_lossy(shown).escape_debug().to_string(),
            omitted_note: if omitted > 0 {
                format!(" ({omitted} more bytes omitted)")
            } else {
                String::new()
            },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = parse_input(bad.as_bytes()).unwrap_err();
        let InputError::Parse {
            preview,
            omitted_note,
            ..
        } = &err
        else {
            panic!("wrong error {err}");
        };
        assert!(preview.len() <= PARSE_PREVIEW_BYTES);
        assert!(preview.starts_with("{é"));
        let omitted = bad.len() - preview.len();
        assert_eq!(omitted_note, &format!(" ({omitted} more bytes omitted)"));
    }

    #[test]
    fn valid_input_parses() {
        let input = read_input(&br#"{"commands":[]}"#[..], 100).unwrap();
        assert!(input.commands.is_empty());
    }
}

//! The one framing layer of every worker protocol: one JSON object per line, each line bounded.
//!
//! A line longer than the bound is never buffered past it: the reader stops at the bound and
//! reports [`FrameError::TooLong`]. A line that is not one JSON object is
//! [`FrameError::Malformed`], naming the line; a half-read protocol is never trusted, so the
//! callers end the session on either.

use serde_json::Value;
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Default bound of one protocol line (a whole file change or command output fits).
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// Why a worker's output could not be read as protocol lines.
#[derive(Debug, Error)]
pub enum FrameError {
    /// A line exceeded the bound.
    #[error("line {line} of the worker's output is longer than {limit} bytes")]
    TooLong {
        /// 1-based line number.
        line: u64,
        /// The bound.
        limit: usize,
    },
    /// A line that is not one JSON object.
    #[error("line {line} of the worker's output is not a JSON object: {reason}")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// The parser's complaint (never the line itself, which may hold secrets).
        reason: String,
    },
    /// Reading the pipe failed.
    #[error("reading the worker's output failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Parses one line as a JSON object (surrounding whitespace ignored).
pub fn parse_object(line: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(line.trim()) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("a JSON value that is not an object".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads protocol lines from a worker's stdout.
pub struct FrameReader<R> {
    reader: BufReader<R>,
    limit: usize,
    line: u64,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader whose lines are at most `limit` bytes (newline excluded).
    pub fn new(reader: R, limit: usize) -> FrameReader<R> {
        FrameReader {
            reader: BufReader::new(reader),
            limit,
            line: 0,
            buf: Vec::new(),
        }
    }

    /// The number of the line last read (1-based; 0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The next object; `Ok(None)` at end of file. Blank lines are skipped.
    pub async fn next(&mut self) -> Result<Option<Value>, FrameError> {
        loop {
            self.buf.clear();
            self.line += 1;
            if !self.read_line().await? {
                return Ok(None);
            }
            let text = std::str::from_utf8(&self.buf).map_err(|_| FrameError::Malformed {
                line: self.line,
                reason: "not UTF-8".to_owned(),
            })?;
            if text.trim().is_empty() {
                continue;
            }
            return parse_object(text)
                .map(Some)
                .map_err(|reason| FrameError::Malformed {
                    line: self.line,
                    reason,
                });
        }
    }

    /// Reads one line into `buf` (newline stripped), never more than the limit; `false` at end
    /// of file with nothing read.
    async fn read_line(&mut self) -> Result<bool, FrameError> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(!self.buf.is_empty());
            }
            let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
                Some(pos) => (&available[..pos], Some(pos)),
                None => (available, None),
            };
            if self.buf.len() + chunk.len() > self.limit {
                return Err(FrameError::TooLong {
                    line: self.line,
                    limit: self.limit,
                });
            }
            self.buf.extend_from_slice(chunk);
            let used = found.map_or(chunk.len(), |pos| pos + 1);
            self.reader.consume(used);
            if found.is_some() {
                return Ok(true);
            }
        }
    }
}

/// Writes one value as one line and flushes it.
pub async fn write_line<W: AsyncWrite + Unpin>(
    writer: &mut W,
    value: &Value,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], limit: usize) -> Vec<Result<Value, String>> {
        let mut r = FrameReader::new(input, limit);
        let mut out = Vec::new();
        loop {
            match r.next().await {
                Ok(Some(v)) => out.push(Ok(v)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn lines_become_objects_and_a_last_line_without_newline_counts() {
        let got = read_all(b"{\"a\":1}\n\n  {\"b\":2}", 64).await;
        assert_eq!(
            got,
            [
                Ok(serde_json::json!({"a":1})),
                Ok(serde_json::json!({"b":2}))
            ]
        );
    }

    #[tokio::test]
    async fn a_malformed_line_is_named_without_its_text() {
        let got = read_all(b"{\"a\":1}\nsecret-token not json\n", 64).await;
        let err = got[1].clone().unwrap_err();
        assert!(
            err.starts_with("line 2 of the worker's output is not a JSON object"),
            "{err}"
        );
        assert!(!err.contains("secret-token"), "{err}");
        let got = read_all(b"[1,2]\n", 64).await;
        assert!(got[0].clone().unwrap_err().contains("not an object"));
    }

    #[tokio::test]
    async fn a_long_line_stops_at_the_bound() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.push(b'\n');
        let got = read_all(&input, 32).await;
        assert_eq!(
            got[1].clone().unwrap_err(),
            "line 2 of the worker's output is longer than 32 bytes"
        );
    }
}

//! Text from stdin, bounded, so a huge input is refused without being held: a text argument
//! given as `-` (`intendant - < task.md`, `intendant memory add - < note.md`), and the lines of
//! a frontend that reads intents from stdin (`intendant --json`, `ctl --json attach`).

use std::io::{BufRead, Read as _};

/// Why a `-` argument's text could not be had.
#[derive(Debug)]
pub enum StdinTextError {
    /// Stdin holds more than the limit.
    TooLong { limit: usize },
    /// What stdin holds is not UTF-8.
    NotUtf8,
    /// Stdin could not be read.
    Read(std::io::Error),
}

impl std::fmt::Display for StdinTextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinTextError::TooLong { limit } => {
                write!(f, "stdin holds more than {limit} bytes")
            }
            StdinTextError::NotUtf8 => f.write_str("what stdin holds is not UTF-8"),
            StdinTextError::Read(e) => write!(f, "cannot read stdin: {e}"),
        }
    }
}

/// `text` itself, or for `-` what stdin holds, at most `limit` bytes (read to one byte past
/// it, so more is refused without being held).
pub fn text_arg(text: String, limit: usize) -> Result<String, StdinTextError> {
    if text != "-" {
        return Ok(text);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(StdinTextError::Read)?;
    if bytes.len() > limit {
        return Err(StdinTextError::TooLong { limit });
    }
    String::from_utf8(bytes).map_err(|_| StdinTextError::NotUtf8)
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum StdinLine {
    /// A line (its newline left out) is in the buffer.
    Line,
    /// A line longer than the bound: skipped up to its newline, the buffer left empty.
    TooLong,
    /// End of input.
    Eof,
}

/// Reads the next line of `reader` into `buf` (cleared first), at most `max` bytes of it held:
/// a longer one is skipped to its newline. A last line without a newline still counts.
pub fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<StdinLine> {
    buf.clear();
    let (mut seen, mut too_long) = (false, false);
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(match (seen, too_long) {
                (false, _) => StdinLine::Eof,
                (true, true) => StdinLine::TooLong,
                (true, false) => StdinLine::Line,
            });
        }
        seen = true;
        let (chunk, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        if !too_long && buf.len() + chunk.len() > max {
            too_long = true;
            buf.clear();
        } else if !too_long {
            buf.extend_from_slice(chunk);
        }
        reader.consume(used);
        if done {
            return Ok(if too_long {
                StdinLine::TooLong
            } else {
                StdinLine::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_the_bound_is_skipped_whole_and_the_next_read() {
        let input = format!("short\n{}\nnext\nlast", "x".repeat(100));
        // A reader smaller than the long line: it is skipped across several fills.
        let mut reader = std::io::BufReader::with_capacity(8, input.as_bytes());
        let mut buf = Vec::new();
        let mut read = || {
            let got = read_line(&mut reader, &mut buf, 10).unwrap();
            (got, String::from_utf8_lossy(&buf).into_owned())
        };
        assert_eq!(read(), (StdinLine::Line, "short".to_owned()));
        assert_eq!(read(), (StdinLine::TooLong, String::new()));
        assert_eq!(read(), (StdinLine::Line, "next".to_owned()));
        assert_eq!(read(), (StdinLine::Line, "last".to_owned()));
        assert_eq!(read(), (StdinLine::Eof, String::new()));
    }
}

//! Text from stdin, bounded, so a huge input is refused without being held: a text argument
//! given as `-` (`intendant - < task.md`, `intendant memory add - < note.md`), and the lines of
//! a frontend that reads intents from stdin (`intendant --json`, `ctl --json attach`).

use std::io::{BufRead, Read as _};

use intendant_core::bounded_line::Gathering;
pub use intendant_core::bounded_line::Line;

/// Why a `-` argument's text could not be had.
#[derive(Debug)]
pub enum StdinTextError {
    /// Stdin holds more than the limit.
    TooLong { limit: usize },
    /// What stdin holds is not UTF-8.
    NotUtf8,
    /// Stdin could not be read.
    Read(std::io::Error),
    /// Stdin held nothing but blanks (a task, follow-up or answer).
    Empty,
}

impl std::fmt::Display for StdinTextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinTextError::TooLong { limit } => {
                write!(f, "stdin holds more than {limit} bytes")
            }
            StdinTextError::NotUtf8 => f.write_str("what stdin holds is not UTF-8"),
            StdinTextError::Read(e) => write!(f, "cannot read stdin: {e}"),
            StdinTextError::Empty => f.write_str("stdin held nothing"),
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

/// `text` itself, or for `-` a task, follow-up or answer read from stdin: at most
/// `MAX_TASK_BYTES` (what a daemon's session takes), its trailing blank lines dropped, refused
/// when nothing else is there.
pub fn task_text(text: String) -> Result<String, StdinTextError> {
    if text != "-" {
        return Ok(text);
    }
    let read = text_arg(text, intendant_protocol::socket::MAX_TASK_BYTES)?;
    match read.trim_end() {
        "" => Err(StdinTextError::Empty),
        kept => Ok(kept.to_owned()),
    }
}

/// Reads the next line of `reader` into `buf` (cleared first), at most `max` bytes of it held
/// ([`Gathering`]): a longer one is skipped to its newline, the buffer left empty. A last line
/// without a newline still counts.
pub fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let mut line = Gathering::start(max, buf);
    let end = loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            break line.at_eof();
        }
        let (used, end) = line.take(buf, available);
        reader.consume(used);
        if let Some(end) = end {
            break end;
        }
    };
    // Nothing here answers a line by its head.
    if end == Line::TooLong {
        buf.clear();
    }
    Ok(end)
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
        assert_eq!(read(), (Line::Complete, "short".to_owned()));
        assert_eq!(read(), (Line::TooLong, String::new()));
        assert_eq!(read(), (Line::Complete, "next".to_owned()));
        assert_eq!(read(), (Line::Complete, "last".to_owned()));
        assert_eq!(read(), (Line::Eof, String::new()));
    }
}

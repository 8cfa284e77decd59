//! A text argument given as `-`: read from stdin instead (`intendant - < task.md`, `intendant
//! memory add - < note.md`), bounded, so a huge input is refused without being held.

use std::io::Read as _;

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

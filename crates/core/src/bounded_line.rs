//! Lines a peer sends, gathered at most a bound at a time, so no peer makes a reader hold more
//! than one line's bound: the daemon's control socket (tokio) and a frontend's stdin (blocking)
//! read through [`Gathering`], each with its own reader around it.

/// How a line ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line (newline left out) is in the buffer.
    Complete,
    /// The line was longer than the bound; it was skipped up to its newline, and the buffer
    /// holds its first [`HEAD`] bytes (where a request's id is).
    TooLong,
    /// The input ended before any byte of a line.
    Eof,
}

/// How much of a line over the bound is kept: its head.
pub const HEAD: usize = 64;

/// One line being gathered from a reader's chunks into a buffer.
#[derive(Debug)]
pub struct Gathering {
    max: usize,
    seen: bool,
    too_long: bool,
}

impl Gathering {
    /// A line of at most `max` bytes, into `buf` (cleared).
    pub fn start(max: usize, buf: &mut Vec<u8>) -> Gathering {
        buf.clear();
        Gathering {
            max,
            seen: false,
            too_long: false,
        }
    }

    /// Takes the line's part of `available` (what the reader holds now, not empty) into `buf`:
    /// how many bytes the reader may consume, and how the line ended when its newline was
    /// among them.
    pub fn take(&mut self, buf: &mut Vec<u8>, available: &[u8]) -> (usize, Option<Line>) {
        self.seen = true;
        let (chunk, used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        if !self.too_long {
            if buf.len() + chunk.len() > self.max {
                self.too_long = true;
                // Its head stays, for the id to answer.
                let room = HEAD.saturating_sub(buf.len());
                buf.truncate(HEAD);
                buf.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        (used, done.then(|| self.end()))
    }

    /// How the line ended once the input did (a last line without a newline still counts).
    pub fn at_eof(&self) -> Line {
        if self.seen { self.end() } else { Line::Eof }
    }

    fn end(&self) -> Line {
        if self.too_long {
            Line::TooLong
        } else {
            Line::Complete
        }
    }
}

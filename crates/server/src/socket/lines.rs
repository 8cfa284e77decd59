//! Bounded line reading: a peer can never make this side buffer more than one line's bound.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// What [`LineReader::next_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line (newline stripped) is in the buffer.
    Complete,
    /// The line was longer than the bound; it was skipped up to its newline.
    TooLong,
    /// The peer closed the connection.
    Eof,
}

/// Reads newline-terminated lines of at most `max` bytes.
pub(crate) struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner: BufReader::new(inner),
            max,
        }
    }

    /// Reads the next line into `buf` (cleared first). A last line without a newline before
    /// the end of the stream still counts as a line.
    pub(crate) async fn next_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<Line> {
        buf.clear();
        let mut too_long = false;
        let mut seen_any = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok(match (seen_any, too_long) {
                    (false, _) => Line::Eof,
                    (true, true) => Line::TooLong,
                    (true, false) => Line::Complete,
                });
            }
            seen_any = true;
            let (chunk, used, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            if !too_long {
                if buf.len() + chunk.len() > self.max {
                    too_long = true;
                    buf.clear();
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            self.inner.consume(used);
            if done {
                return Ok(if too_long {
                    Line::TooLong
                } else {
                    Line::Complete
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_the_stream_goes_on() {
        let input: &[u8] = b"short\nthis one is far too long\nok\nlast";
        let mut reader = LineReader::new(input, 8);
        let mut buf = Vec::new();
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"short");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::TooLong);
        assert!(buf.is_empty());
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"ok");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"last");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Eof);
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_bound_is_read() {
        let input: &[u8] = b"12345678\n123456789\n";
        let mut reader = LineReader::new(input, 8);
        let mut buf = Vec::new();
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::TooLong);
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Eof);
    }
}

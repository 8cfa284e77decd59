//! Bounded line reading of the control socket ([`intendant_core::bounded_line`] gathers each
//! line): a peer can never make this side buffer more than one line's bound.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use intendant_core::bounded_line::Gathering;
pub(crate) use intendant_core::bounded_line::Line;

/// The id a line starts with (`{"id":7,...`, as every client of ours writes a request), read
/// from the head of one too long to parse; `None` unless the whole number is there.
pub(crate) fn leading_id(head: &[u8]) -> Option<u64> {
    let head = match std::str::from_utf8(head) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(head.get(..e.valid_up_to())?).ok()?,
    };
    let rest = head
        .trim_start()
        .strip_prefix('{')?
        .trim_start()
        .strip_prefix("\"id\"")?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    // A number cut by the head's end is not the id.
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest.get(..end)?.parse().ok()
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

    /// What the lines are read from.
    pub(crate) fn get_ref(&self) -> &R {
        self.inner.get_ref()
    }

    /// Reads the next line into `buf` (cleared first). A last line without a newline before
    /// the end of the stream still counts as a line.
    pub(crate) async fn next_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<Line> {
        let mut line = Gathering::start(self.max, buf);
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok(line.at_eof());
            }
            let (used, end) = line.take(buf, available);
            self.inner.consume(used);
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_core::bounded_line::HEAD;

    #[tokio::test]
    async fn lines_are_bounded_and_the_stream_goes_on() {
        let input: &[u8] = b"short\nthis one is far too long\nok\nlast";
        let mut reader = LineReader::new(input, 8);
        let mut buf = Vec::new();
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"short");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::TooLong);
        assert_eq!(buf, b"this one is far too long", "its head kept");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"ok");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"last");
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Eof);
    }

    #[test]
    fn the_id_is_read_from_a_head_only_when_it_is_whole() {
        assert_eq!(
            leading_id(br#"{"id":42,"op":"send","text":"aaaa"#),
            Some(42)
        );
        assert_eq!(leading_id(br#" { "id" : 7 , "op""#), Some(7));
        assert_eq!(leading_id(br#"{"id":12"#), None, "cut: maybe 123");
        assert_eq!(leading_id(br#"{"op":"send","id":3,"#), None);
        assert_eq!(leading_id(b"\xff\xfe"), None);
        assert_eq!(leading_id(b"xxxxxxxx"), None);
    }

    #[tokio::test]
    async fn a_long_lines_head_is_kept_across_reads() {
        let line = format!("{{\"id\":9,\"text\":\"{}\"}}\nnext\n", "y".repeat(500));
        // A reader's buffer far smaller than the line: the head is gathered over several fills.
        let mut reader = LineReader {
            inner: BufReader::with_capacity(5, line.as_bytes()),
            max: 100,
        };
        let mut buf = Vec::new();
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::TooLong);
        assert_eq!(buf.len(), HEAD);
        assert_eq!(leading_id(&buf), Some(9));
        assert_eq!(reader.next_line(&mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"next");
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

//! JSON Lines on disk: append one record per `write`, read back tolerating a torn last line.
//!
//! A writer killed mid-`write` can leave a final line without its newline (or cut inside the
//! JSON). Readers skip such a tail and say so; `repair_tail` makes the file appendable again
//! before a resumed session writes after it, so the torn bytes never end up mid-file.

use std::fs::File;
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SessionLogError;
use crate::record_dir::open_read_nofollow;

/// What a reader found at the end of a file that was cut mid-write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// 1-based line number of the torn line.
    pub line: usize,
    /// Bytes of the torn line that were skipped.
    pub bytes: usize,
}

/// A line other than the last that is not a record, passed over by a
/// [lenient read](read_jsonl_leniently).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedLine {
    /// 1-based line number.
    pub line: usize,
    /// The line's length in bytes.
    pub bytes: usize,
    /// Why it does not read.
    pub message: String,
}

/// The records of one JSON Lines file.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlRead<T> {
    /// Every complete record, in file order.
    pub records: Vec<T>,
    /// Set when the last line was torn and skipped.
    pub torn_tail: Option<TornTail>,
    /// The lines a [lenient read](read_jsonl_leniently) passed over (never any from
    /// [`read_jsonl`], which fails on the first).
    pub skipped: Vec<SkippedLine>,
}

/// What a read does with a line other than the last that is not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BadLine {
    /// The read fails ([`SessionLogError::Corrupt`]).
    Fails,
    /// The line is passed over and named ([`JsonlRead::skipped`]).
    PassedOver,
}

/// Appends `value` as one line. The line and its newline go out in a single `write` on an
/// unbuffered append-mode file, so a killed process leaves either the whole line or a torn tail.
pub(crate) fn append_line(
    file: &mut File,
    path: &Path,
    value: &impl Serialize,
) -> Result<(), SessionLogError> {
    let mut line = serde_json::to_vec(value).map_err(|e| SessionLogError::Encode {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    line.push(b'\n');
    file.write_all(&line)
        .and_then(|()| file.flush())
        .map_err(|source| SessionLogError::io(path, source))
}

/// The complete lines of the open `file` (after [`repair_tail`], every line is whole).
pub(crate) fn count_lines(file: &File) -> std::io::Result<u64> {
    let mut reader = file.try_clone()?;
    std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(0))?;
    let mut count = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        count += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
}

/// Reads every record of `path`. A missing file has no records. A last line without its newline
/// that does not parse is torn and skipped; any other line that does not parse is an error. A
/// link at `path` is refused, never followed.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<JsonlRead<T>, SessionLogError> {
    read_lines(path, BadLine::Fails)
}

/// [`read_jsonl`], but a line other than the last that does not parse (damaged, or a record a
/// newer build wrote) is passed over and named in [`JsonlRead::skipped`]: for a reader that
/// shows what it can.
pub fn read_jsonl_leniently<T: DeserializeOwned>(
    path: &Path,
) -> Result<JsonlRead<T>, SessionLogError> {
    read_lines(path, BadLine::PassedOver)
}

fn read_lines<T: DeserializeOwned>(
    path: &Path,
    bad: BadLine,
) -> Result<JsonlRead<T>, SessionLogError> {
    let mut bytes = Vec::new();
    match open_read_nofollow(path) {
        Ok(mut f) => f
            .read_to_end(&mut bytes)
            .map_err(|source| SessionLogError::io(path, source))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(JsonlRead {
                records: Vec::new(),
                torn_tail: None,
                skipped: Vec::new(),
            });
        }
        Err(source) => return Err(SessionLogError::io(path, source)),
    };
    let mut records = Vec::new();
    let mut torn_tail = None;
    let mut skipped = Vec::new();
    let ends_clean = bytes.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // `split` yields an empty final piece after a trailing newline; it is not a line.
    let count = if ends_clean {
        lines.len().saturating_sub(1)
    } else {
        lines.len()
    };
    for (idx, line) in lines.iter().take(count).enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let is_last_unterminated = !ends_clean && idx + 1 == count;
        match serde_json::from_slice::<T>(line) {
            Ok(v) => records.push(v),
            Err(_) if is_last_unterminated => {
                torn_tail = Some(TornTail {
                    line: idx + 1,
                    bytes: line.len(),
                });
            }
            Err(e) if bad == BadLine::PassedOver => skipped.push(SkippedLine {
                line: idx + 1,
                bytes: line.len(),
                message: e.to_string(),
            }),
            Err(e) => {
                return Err(SessionLogError::Corrupt {
                    path: path.to_path_buf(),
                    line: idx + 1,
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(JsonlRead {
        records,
        torn_tail,
        skipped,
    })
}

/// Makes `file` (open for reading and appending, at `path`) end at a line boundary before more
/// lines are appended: a torn tail is cut off, a complete record that only lost its newline gets
/// one. Returns whether bytes were cut. Only the last line is read: a file that ends in a
/// newline costs one byte's read, however long it is (a record appended every turn would
/// otherwise read its whole file again each time).
pub(crate) fn repair_tail(file: &File, path: &Path) -> Result<bool, SessionLogError> {
    use std::os::unix::fs::FileExt;
    let io = |source| SessionLogError::io(path, source);
    let len = file.metadata().map_err(io)?.len();
    let mut last = [0u8; 1];
    if len == 0 {
        return Ok(false);
    }
    file.read_exact_at(&mut last, len - 1).map_err(io)?;
    if last[0] == b'\n' {
        return Ok(false);
    }
    let start = last_line_start(file, len).map_err(io)?;
    let tail_len = usize::try_from(len - start)
        .map_err(|_| io(std::io::Error::other("its last line is larger than memory")))?;
    let mut tail = vec![0u8; tail_len];
    file.read_exact_at(&mut tail, start).map_err(io)?;
    if serde_json::from_slice::<serde_json::Value>(&tail).is_ok() {
        (&*file).write_all(b"\n").map_err(io)?;
        Ok(false)
    } else {
        file.set_len(start).map_err(io)?;
        Ok(true)
    }
}

/// How much of a file's end [`rev_lines`] reads at first (a record's last line is mostly far
/// shorter: a start reading the ends of thousands of logs copies this much of each)...
const TAIL_CHUNK: usize = 1024;
/// ...doubling each read up to this, for a reader that goes on further back.
const TAIL_CHUNK_MOST: usize = 64 * 1024;

/// Where the last line of `file` (`len` bytes, not ending in a newline) starts: just after its
/// last newline, or 0.
fn last_line_start(file: &File, len: u64) -> std::io::Result<u64> {
    let mut start = 0;
    rev_lines(file, len, |at, _| {
        start = at;
        ControlFlow::Break(())
    })?;
    Ok(start)
}

/// Calls `visit` with each line of the first `end` bytes of `file` and where it starts, the
/// last line first, until it breaks: the lines between newlines (without them), the last one
/// whether or not a newline ends it, empty lines left out. Read backwards, a chunk at a time,
/// each twice the last up to 64 KiB; a line longer than that is read in chunks doubling in
/// size, so reading it is linear.
pub(crate) fn rev_lines(
    file: &File,
    end: u64,
    mut visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    // The bytes from `from` up to the start of the last line visited, not yet visited; each
    // read goes into `read`, then they are put after it, and the two trade places (both keep
    // their memory from one read to the next).
    let mut buf: Vec<u8> = Vec::new();
    let mut read: Vec<u8> = Vec::new();
    let mut from = end;
    let mut chunk = TAIL_CHUNK;
    while from > 0 {
        let want = chunk.max(buf.len()) as u64;
        chunk = (2 * chunk).min(TAIL_CHUNK_MOST);
        let next = from.saturating_sub(want);
        // At most `want`, which is a length in memory, so the cast is lossless.
        read.resize((from - next) as usize, 0);
        file.read_exact_at(&mut read, next)?;
        read.extend_from_slice(&buf);
        std::mem::swap(&mut buf, &mut read);
        from = next;
        // Every piece after a newline is a whole line now.
        let mut line_end = buf.len();
        while let Some(nl) = memchr::memrchr(b'\n', &buf[..line_end]) {
            if nl + 1 < line_end && visit(from + nl as u64 + 1, &buf[nl + 1..line_end]).is_break() {
                return Ok(());
            }
            line_end = nl;
        }
        buf.truncate(line_end);
    }
    if !buf.is_empty() {
        let _ = visit(0, &buf);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_dir::RecordDir;
    use serde_json::{Value, json};

    /// `dir/f.jsonl` opened for appending the way the session log opens it.
    fn open_append(dir: &Path) -> File {
        RecordDir::open(dir)
            .unwrap()
            .open_append("f.jsonl")
            .unwrap()
    }

    fn read(text: &str) -> Result<JsonlRead<Value>, SessionLogError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        std::fs::write(&p, text).unwrap();
        read_jsonl(&p)
    }

    #[test]
    fn clean_file_reads_all() {
        let r = read("{\"a\":1}\n\n{\"a\":2}\n").unwrap();
        assert_eq!(r.records, vec![json!({"a":1}), json!({"a":2})]);
        assert_eq!(r.torn_tail, None);
    }

    #[test]
    fn torn_last_line_is_skipped_and_reported() {
        let r = read("{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.torn_tail, Some(TornTail { line: 3, bytes: 5 }));
    }

    #[test]
    fn complete_unterminated_line_counts() {
        let r = read("{\"a\":1}\n{\"a\":2}").unwrap();
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.torn_tail, None);
    }

    #[test]
    fn corrupt_middle_line_is_an_error() {
        let e = read("{\"a\":1}\nnot json\n{\"a\":2}\n").unwrap_err();
        assert!(matches!(e, SessionLogError::Corrupt { line: 2, .. }), "{e}");
    }

    #[test]
    fn a_lenient_read_passes_over_corrupt_middle_lines_and_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        std::fs::write(
            &p,
            "{\"a\":1}\nnot json\n{\"a\":2}\n{\"a\n{\"a\":3}\n{\"a\":",
        )
        .unwrap();
        let r: JsonlRead<Value> = read_jsonl_leniently(&p).unwrap();
        assert_eq!(
            r.records,
            vec![json!({"a":1}), json!({"a":2}), json!({"a":3})]
        );
        let lines: Vec<(usize, usize)> = r.skipped.iter().map(|s| (s.line, s.bytes)).collect();
        assert_eq!(lines, [(2, 8), (4, 3)]);
        assert_eq!(r.torn_tail, Some(TornTail { line: 6, bytes: 5 }));
    }

    #[test]
    fn missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let r: JsonlRead<Value> = read_jsonl(&dir.path().join("none")).unwrap();
        assert!(r.records.is_empty());
    }

    #[test]
    fn repair_cuts_torn_tail_and_appends_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        std::fs::write(&p, "{\"a\":1}\n{\"a\":").unwrap();
        let mut f = open_append(dir.path());
        assert!(repair_tail(&f, &p).unwrap());
        append_line(&mut f, &p, &json!({"a":3})).unwrap();
        let r: JsonlRead<Value> = read_jsonl(&p).unwrap();
        assert_eq!(r.records, vec![json!({"a":1}), json!({"a":3})]);
        assert_eq!(r.torn_tail, None);
    }

    proptest::proptest! {
        /// A writer killed at any byte leaves a file whose complete lines read back, and which
        /// appends cleanly after repair.
        #[test]
        fn any_cut_reads_a_prefix_and_repairs(
            texts in proptest::collection::vec("\\PC{0,40}", 1..8),
            cut_at in 0usize..2000,
        ) {
            let records: Vec<Value> = texts.iter().map(|t| json!({"t": t})).collect();
            let mut bytes = Vec::new();
            for r in &records {
                bytes.extend(serde_json::to_vec(r).unwrap());
                bytes.push(b'\n');
            }
            let cut = cut_at.min(bytes.len());
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("f.jsonl");
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let read: JsonlRead<Value> = read_jsonl(&p).unwrap();
            let whole_lines = bytes[..cut].iter().filter(|b| **b == b'\n').count();
            proptest::prop_assert!(read.records.len() >= whole_lines);
            proptest::prop_assert_eq!(&read.records[..], &records[..read.records.len()]);
            let mut f = open_append(dir.path());
            repair_tail(&f, &p).unwrap();
            append_line(&mut f, &p, &json!({"t": "after"})).unwrap();
            let again: JsonlRead<Value> = read_jsonl(&p).unwrap();
            proptest::prop_assert!(again.torn_tail.is_none());
            proptest::prop_assert_eq!(again.records.last(), Some(&json!({"t": "after"})));
            proptest::prop_assert_eq!(&again.records[..again.records.len() - 1], &read.records[..]);
        }
    }

    #[test]
    fn a_tail_longer_than_a_chunk_is_cut_or_terminated_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        let long = "x".repeat(3 * TAIL_CHUNK + 17);
        let head = format!("{{\"a\":1}}\n{{\"b\":\"{long}\"}}\n");
        // Torn: everything after the last newline goes, however far back it is.
        std::fs::write(&p, format!("{head}{{\"c\":\"{long}")).unwrap();
        assert!(repair_tail(&open_append(dir.path()), &p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), head);
        // Whole but for its newline: kept, and terminated.
        let whole = format!("{{\"c\":\"{long}\"}}");
        std::fs::write(&p, format!("{head}{whole}")).unwrap();
        assert!(!repair_tail(&open_append(dir.path()), &p).unwrap());
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("{head}{whole}\n")
        );
        // One long torn line and nothing before it.
        std::fs::write(&p, format!("{{\"c\":\"{long}")).unwrap();
        assert!(repair_tail(&open_append(dir.path()), &p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "");
    }

    #[test]
    fn repair_terminates_complete_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        std::fs::write(&p, "{\"a\":1}").unwrap();
        assert!(!repair_tail(&open_append(dir.path()), &p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        std::fs::write(&p, "{\"a").unwrap();
        assert!(repair_tail(&open_append(dir.path()), &p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "");
    }
}

//! The numbered records of a daemon session's `session.jsonl`, read without holding the log:
//! its last `seq` and its last records of some events, read from its end ([`last_seq`],
//! [`rev_records`]), and a cursor over the records of a seq range, read forward a few KiB at a
//! time ([`NumberedRecords`]).
//!
//! The design decision to know: a daemon appends each session's records in `seq` order (it
//! numbers and writes an event under one lock), so a reader can stop at the first record past
//! what it wants, from either end. A log grows to the size of everything its commands printed;
//! a daemon reading whole logs to learn one number at start, or to replay history to a client,
//! paid for all of them in time and memory.
//!
//! Lines without a `seq` (a one-shot run's) are passed over, and so is a line that does not
//! parse (a torn last line, or one being written): neither is part of the daemon's stream.

use std::fs::File;
use std::ops::{ControlFlow, Range};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use intendant_protocol::events::SessionLogRecord;
use serde::Deserialize;

use super::jsonl::rev_lines;
use super::{EVENTS_FILE, SessionLogError};
use crate::record_dir::open_read_nofollow;

/// How much of a log a cursor reads at a time, and so about what it holds between records (a
/// longer line is held whole while it is read).
const READ_CHUNK: usize = 4 * 1024;

/// A record's `seq` alone: parsed without building the rest of it.
#[derive(Deserialize)]
struct SeqOnly {
    seq: Option<u64>,
}

/// The `seq` of `line`, when it is a whole record that has one.
fn seq_of(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<SeqOnly>(line).ok()?.seq
}

/// `dir`'s `session.jsonl`, open; `None` when there is none.
fn open_events(dir: &Path) -> Result<Option<(PathBuf, File)>, SessionLogError> {
    let path = dir.join(EVENTS_FILE);
    match open_read_nofollow(&path) {
        Ok(file) => Ok(Some((path, file))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SessionLogError::io(&path, source)),
    }
}

fn file_len(path: &Path, file: &File) -> Result<u64, SessionLogError> {
    Ok(file
        .metadata()
        .map_err(|source| SessionLogError::io(path, source))?
        .len())
}

/// The highest `seq` session `dir`'s log holds (`None` when it has no numbered record), read
/// from the end: the last numbered line.
pub fn last_seq(dir: &Path) -> Result<Option<u64>, SessionLogError> {
    let Some((path, file)) = open_events(dir)? else {
        return Ok(None);
    };
    let len = file_len(&path, &file)?;
    let mut last = None;
    rev_lines(&file, len, |_, line| match seq_of(line) {
        Some(seq) => {
            last = Some(seq);
            ControlFlow::Break(())
        }
        None => ControlFlow::Continue(()),
    })
    .map_err(|source| SessionLogError::io(&path, source))?;
    Ok(last)
}

/// An event's name alone: parsed without building the rest of the record.
#[derive(Deserialize)]
struct EventOnly<'a> {
    #[serde(borrow)]
    event: std::borrow::Cow<'a, str>,
}

/// Whether the record `line` is of one of `events`, read without building the rest of it (a
/// line that does not parse is of none).
pub(super) fn is_event_of(line: &[u8], events: &[&str]) -> bool {
    serde_json::from_slice::<EventOnly>(line)
        .is_ok_and(|only| events.contains(&only.event.as_ref()))
}

/// Calls `visit` with each record of session `dir`'s log whose event is one of `events`, the
/// last first, until it breaks: read from the end a chunk at a time, so what it costs is what
/// lies after the record it stops at, not the log's length. Other lines are only scanned for
/// their event's name; a line that does not parse, or holds an event this build does not
/// know, is passed over. A session without a log has no records.
pub fn rev_records(
    dir: &Path,
    events: &[&str],
    mut visit: impl FnMut(SessionLogRecord) -> ControlFlow<()>,
) -> Result<(), SessionLogError> {
    let Some((path, file)) = open_events(dir)? else {
        return Ok(());
    };
    let len = file_len(&path, &file)?;
    rev_lines(&file, len, |_, line| {
        match is_event_of(line, events).then(|| serde_json::from_slice::<SessionLogRecord>(line)) {
            Some(Ok(record)) => visit(record),
            Some(Err(_)) | None => ControlFlow::Continue(()),
        }
    })
    .map_err(|source| SessionLogError::io(&path, source))
}

/// The records of one session's log numbered `after < seq < below`, in order, read forward a
/// chunk at a time; the file is opened again for each chunk, so a cursor holds no descriptor.
#[derive(Debug)]
pub struct NumberedRecords {
    path: PathBuf,
    below: u64,
    /// The seq of the first record in the range.
    first: u64,
    /// The seq of the last record in the range that reads as this build's event.
    last: u64,
    /// Where `buf[0]` is in the file.
    offset: u64,
    /// Bytes read from `offset` on; those before `taken` are given out.
    buf: Vec<u8>,
    taken: usize,
    /// The file had no more bytes at the last read.
    eof: bool,
    done: bool,
    /// The seq of the next record and where its line starts, once peeked.
    peeked: Option<(u64, u64)>,
}

impl NumberedRecords {
    /// The records of session `dir` numbered `after < seq < below`; `None` when it has none.
    /// Finding where they start reads the log from its end back to them (or only its first
    /// line, when the whole log is in the range), never the part before.
    pub fn open(
        dir: &Path,
        after: u64,
        below: u64,
    ) -> Result<Option<NumberedRecords>, SessionLogError> {
        let Some((path, file)) = open_events(dir)? else {
            return Ok(None);
        };
        let io = |source| SessionLogError::io(&path, source);
        let len = file_len(&path, &file)?;
        // A log whose first record is in the range starts there: no need to look further back
        // than its last record.
        let head = first_line(&file, len).map_err(io)?;
        let whole = head
            .and_then(|line| seq_of(&line))
            .filter(|seq| *seq > after);
        let mut last = None;
        let mut start = whole.map(|seq| (0, seq));
        rev_lines(&file, len, |at, line| {
            let Some(seq) = seq_of(line) else {
                return ControlFlow::Continue(());
            };
            if seq <= after {
                return ControlFlow::Break(());
            }
            if seq < below {
                if last.is_none() && serde_json::from_slice::<SessionLogRecord>(line).is_ok() {
                    last = Some(seq);
                }
                if whole.is_none() {
                    start = Some((at, seq));
                }
            }
            if whole.is_some() && last.is_some() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(io)?;
        let (Some((offset, first)), Some(last)) = (start, last) else {
            return Ok(None);
        };
        Ok(Some(NumberedRecords {
            path,
            below,
            first,
            last,
            offset,
            buf: Vec::new(),
            taken: 0,
            eof: false,
            done: false,
            peeked: None,
        }))
    }

    /// The seq of the first record in the range (the first given, unless it is an event this
    /// build does not know).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The seq of the last record the cursor gives.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Bytes the cursor holds: its chunk (or a long line being read).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// The seq of the next record of the range, read up to it but not taken; `None` after
    /// its last (what the cursor held is then given back).
    pub fn peek(&mut self) -> Result<Option<u64>, SessionLogError> {
        if let Some((seq, _)) = self.peeked {
            return Ok(Some(seq));
        }
        while !self.done {
            let start = self.offset + self.taken as u64;
            let Some(line) = self
                .next_line()
                .map_err(|source| SessionLogError::io(&self.path, source))?
            else {
                break;
            };
            let Some(seq) = seq_of(&self.buf[line]) else {
                continue;
            };
            if seq >= self.below || seq > self.last {
                break;
            }
            self.peeked = Some((seq, start));
            return Ok(Some(seq));
        }
        self.done = true;
        self.buf = Vec::new();
        Ok(None)
    }

    /// Takes the next record of the range (the one [`NumberedRecords::peek`] names) and the
    /// length of its line: `None` after the last, and for a record of an event this build does
    /// not know (it is passed over all the same).
    pub fn take(&mut self) -> Result<Option<(SessionLogRecord, usize)>, SessionLogError> {
        if self.peek()?.is_none() {
            return Ok(None);
        }
        let Some((_, start)) = self.peeked.take() else {
            return Ok(None);
        };
        if start < self.offset || start > self.offset + self.taken as u64 {
            // Given back since it was peeked: read again from the line.
            self.seek(start);
        } else {
            // Peeked from what is held: take it again from there.
            self.taken = (start - self.offset) as usize;
        }
        let line = self
            .next_line()
            .map_err(|source| SessionLogError::io(&self.path, source))?;
        Ok(line.and_then(|line| {
            let bytes = &self.buf[line];
            let record = serde_json::from_slice::<SessionLogRecord>(bytes).ok()?;
            Some((record, bytes.len()))
        }))
    }

    /// Gives back what the cursor holds: it reads again from where it stands when next asked.
    pub fn release(&mut self) {
        let at = self
            .peeked
            .map_or(self.offset + self.taken as u64, |(_, start)| start);
        self.seek(at);
    }

    /// Moves to `at`, holding nothing.
    fn seek(&mut self, at: u64) {
        self.offset = at;
        self.buf = Vec::new();
        self.taken = 0;
        self.eof = false;
    }

    /// Where in `buf` the next line is (without its newline); a last line without one counts.
    fn next_line(&mut self) -> std::io::Result<Option<Range<usize>>> {
        loop {
            let rest = &self.buf[self.taken..];
            if let Some(nl) = rest.iter().position(|b| *b == b'\n') {
                let line = self.taken..self.taken + nl;
                self.taken += nl + 1;
                return Ok(Some(line));
            }
            if self.eof {
                if rest.is_empty() {
                    return Ok(None);
                }
                let line = self.taken..self.buf.len();
                self.taken = self.buf.len();
                return Ok(Some(line));
            }
            self.fill()?;
        }
    }

    /// Drops what was given out and reads the next chunk after what is kept.
    fn fill(&mut self) -> std::io::Result<()> {
        self.offset += self.taken as u64;
        self.buf.drain(..self.taken);
        self.taken = 0;
        if self.buf.capacity() > 4 * READ_CHUNK && self.buf.len() < READ_CHUNK {
            // A long line passed: give its room back.
            self.buf.shrink_to(2 * READ_CHUNK);
        }
        let file = open_read_nofollow(&self.path)?;
        let kept = self.buf.len();
        // At least a chunk, and as much again as a long line already holds (linear, however
        // long the line).
        self.buf.resize(kept + READ_CHUNK.max(kept), 0);
        let read = file.read_at(&mut self.buf[kept..], self.offset + kept as u64)?;
        self.buf.truncate(kept + read);
        self.eof = read == 0;
        Ok(())
    }
}

/// The first line of `file` (`len` bytes), without its newline; `None` for an empty file. Read
/// a chunk at a time, doubling, so only as far as the line goes.
fn first_line(file: &File, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let have = buf.len() as u64;
        if have >= len {
            return Ok((!buf.is_empty()).then_some(buf));
        }
        let want = READ_CHUNK.max(buf.len()) as u64;
        // At most `want`, a length in memory, so the cast is lossless.
        let mut chunk = vec![0u8; want.min(len - have) as usize];
        file.read_exact_at(&mut chunk, have)?;
        if let Some(nl) = chunk.iter().position(|b| *b == b'\n') {
            buf.extend_from_slice(&chunk[..nl]);
            return Ok(Some(buf));
        }
        buf.extend_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests;

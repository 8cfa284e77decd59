//! What a catching-up subscriber is replayed from the session logs: the envelopes the ring no
//! longer holds, merged across sessions in `seq` order a record at a time.
//!
//! The design decision to know: nothing here holds a log. Each session's part is a
//! [`NumberedRecords`] cursor that reads a few KiB at a time (and finds where its part starts
//! from the log's end), and a cursor reads only once the merge reaches its first seq, so what a
//! replay holds is a chunk per session whose history overlaps the point it has reached, whatever
//! the logs add up to. The subscriber's own bounded queue paces it: a client that reads nothing
//! costs one batch. A replay built whole in memory cost a client asking for everything from
//! seq 0 of a state root with 200 MB of logs some 700 MiB of the daemon's memory, per
//! subscription.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use intendant_core::session_log::NumberedRecords;
use intendant_protocol::daemon::Envelope;
use intendant_protocol::events::SessionLogRecord;

/// Envelopes read per step (each step runs on the blocking pool)...
pub(super) const BATCH: usize = 64;
/// ...or fewer, once their lines add up to this many bytes (at least one is read).
pub(super) const BATCH_BYTES: usize = 64 * 1024;

/// One session's part of a replay.
struct Part {
    session_id: String,
    records: NumberedRecords,
    /// Its next record and its line's length, once its cursor has been read.
    head: Option<(SessionLogRecord, usize)>,
}

/// The envelopes of the sessions' logs with `after < seq < below`, in `seq` order.
pub(super) struct LogReplay {
    parts: Vec<Part>,
    /// Each part not yet finished by the seq it gives next: its head's, else its first's
    /// (a bound below what it gives next, until it is read).
    order: BinaryHeap<Reverse<(u64, usize)>>,
    last: u64,
}

impl LogReplay {
    /// The replay of the logs in `dirs` (each a session's directory) for `after < seq < below`.
    /// A log that cannot be read is left out, as a replay can do nothing better with it.
    /// Reads each log's end (and a log that starts in the range, its first line), not its
    /// whole.
    pub(super) fn open(dirs: &[PathBuf], after: u64, below: u64) -> LogReplay {
        let mut parts = Vec::new();
        let mut order = BinaryHeap::new();
        let mut last = 0;
        for dir in dirs {
            let Some(session_id) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            let Ok(Some(records)) = NumberedRecords::open(dir, after, below) else {
                continue;
            };
            last = last.max(records.last());
            order.push(Reverse((records.first(), parts.len())));
            parts.push(Part {
                session_id,
                records,
                head: None,
            });
        }
        LogReplay { parts, order, last }
    }

    /// The seq of the last envelope the replay gives (0 when it gives none).
    pub(super) fn last(&self) -> u64 {
        self.last
    }

    /// The next envelopes: up to `max`, fewer once their lines add up to `max_bytes`; empty
    /// once every part is given.
    pub(super) fn next_batch(&mut self, max: usize, max_bytes: usize) -> Vec<Envelope> {
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max && bytes < max_bytes {
            let Some(Reverse((_, index))) = self.order.pop() else {
                break;
            };
            let part = &mut self.parts[index];
            let Some((record, len)) = part.head.take() else {
                // Reached for the first time: read its first record, and go by its seq.
                if let Some(head) = Self::advance(part) {
                    self.order.push(Reverse((head, index)));
                }
                continue;
            };
            if let Some(next) = Self::advance(part) {
                self.order.push(Reverse((next, index)));
            }
            bytes += len;
            if let Some(seq) = record.seq {
                out.push(Envelope {
                    member: None,
                    seq,
                    session_id: part.session_id.clone(),
                    ts: record.ts,
                    event: record.event,
                });
            }
        }
        out
    }

    /// Reads `part`'s next record into its head; its seq, `None` when the part is done (or
    /// its log can no longer be read).
    fn advance(part: &mut Part) -> Option<u64> {
        part.head = part.records.next_record().ok().flatten();
        part.head.as_ref().and_then(|(r, _)| r.seq)
    }

    /// Bytes the parts hold between steps: their cursors' chunks.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.parts.iter().map(|p| p.records.held()).sum()
    }
}

#[cfg(test)]
mod tests;

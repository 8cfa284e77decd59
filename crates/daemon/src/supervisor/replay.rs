//! What a catching-up subscriber is replayed from the session logs: the envelopes the ring no
//! longer holds, merged across sessions in `seq` order a record at a time.
//!
//! The design decision to know: nothing here holds a log. Each session's part is a
//! [`NumberedRecords`] cursor that reads a few KiB at a time (and finds where its part starts
//! from the log's end), and a cursor reads only once the merge reaches its first seq; the
//! chunks the parts hold add up to at most a MiB (past it a part reads again from its place
//! each time it is reached), so what a replay holds does not grow with the logs, nor with how
//! many sessions ran side by side. A step is sent only once the subscriber has taken the last
//! (`hub::send_when_drained`) and the next is read meanwhile, so a client that reads nothing
//! costs two steps.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use intendant_core::session_log::NumberedRecords;
use intendant_protocol::daemon::Envelope;

/// Envelopes read per step (each step runs on the blocking pool)...
pub(super) const BATCH: usize = 64;
/// ...or fewer, once their lines add up to this many bytes (at least one is read).
pub(super) const BATCH_BYTES: usize = 64 * 1024;
/// What the parts may hold read ahead, in all: past it, a part gives back its chunk after each
/// record and reads from its place again when next reached (a history of thousands of
/// sessions side by side then costs a read per record, not a chunk per session).
const HELD_BYTES: usize = 1 << 20;

/// One session's part of a replay.
struct Part {
    session_id: String,
    records: NumberedRecords,
}

/// The envelopes of the sessions' logs with `after < seq < below`, in `seq` order.
pub(super) struct LogReplay {
    parts: Vec<Part>,
    /// Each part not yet finished, by the seq of its next record.
    order: BinaryHeap<Reverse<(u64, usize)>>,
    last: u64,
    /// What the parts hold, in bytes.
    held: usize,
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
            });
        }
        LogReplay {
            parts,
            order,
            last,
            held: 0,
        }
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
            let before = part.records.held();
            // A log that can no longer be read ends its part.
            let record = part.records.take().ok().flatten();
            if let Ok(Some(next)) = part.records.peek() {
                self.order.push(Reverse((next, index)));
            }
            if self.held - before + part.records.held() > HELD_BYTES {
                part.records.release();
            }
            self.held = self.held - before + part.records.held();
            let Some((record, len)) = record else {
                continue;
            };
            bytes += len;
            if let Some(seq) = record.seq {
                out.push(Envelope {
                    member: None,
                    record_end: None,
                    seq,
                    session_id: part.session_id.clone(),
                    ts: record.ts,
                    event: record.event,
                });
            }
        }
        out
    }

    /// Bytes the parts hold between steps.
    #[cfg(test)]
    fn held(&self) -> usize {
        debug_assert_eq!(
            self.held,
            self.parts.iter().map(|p| p.records.held()).sum::<usize>()
        );
        self.held
    }
}

#[cfg(test)]
mod tests;

//! Extracting one command's output from a PTY byte stream: escape-sequence stripping and the
//! start/end markers, with memory bounded to the 10 KiB tail plus one marker's length.

use intendant_protocol::runtime::LOG_TAIL_BYTES;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use crate::artifact;

/// Where a command's output stands in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitStart,
    Body,
    AwaitStatus,
}

/// Extracts one command's output from the PTY stream, bounded in memory.
pub struct Capture {
    start: Vec<u8>,
    end: Vec<u8>,
    phase: Phase,
    pending: Vec<u8>,
    stripper: AnsiStripper,
    tail: Vec<u8>,
    total: u64,
    transcript: Result<(BufWriter<File>, PathBuf), String>,
}

/// Bytes of the status field after the end marker beyond which it is considered garbage.
const MAX_STATUS_BYTES: usize = 32;

impl Capture {
    /// A capture for command `nonce`, streaming to `transcript` (or noting why it cannot).
    pub fn new(nonce: u64, transcript: io::Result<(File, PathBuf)>) -> Self {
        Capture {
            start: format!("__PTY_START_{nonce}__\n").into_bytes(),
            end: format!("\n__PTY_END_{nonce}__ ").into_bytes(),
            phase: Phase::AwaitStart,
            pending: Vec::new(),
            stripper: AnsiStripper::default(),
            tail: Vec::new(),
            total: 0,
            transcript: transcript
                .map(|(f, p)| (BufWriter::new(f), p))
                .map_err(|e| e.to_string()),
        }
    }

    /// Feeds raw PTY bytes; `Some(status)` once the end marker and its status line arrived.
    pub fn feed(&mut self, raw: &[u8]) -> Option<Option<i32>> {
        self.stripper.strip_into(raw, &mut self.pending);
        loop {
            match self.phase {
                Phase::AwaitStart => match find(&self.pending, &self.start) {
                    Some(at) => {
                        self.pending.drain(..at + self.start.len());
                        self.phase = Phase::Body;
                    }
                    None => {
                        let keep = self.start.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        self.pending.drain(..cut);
                        return None;
                    }
                },
                Phase::Body => match find(&self.pending, &self.end) {
                    Some(at) => {
                        let body: Vec<u8> = self.pending.drain(..at).collect();
                        self.commit(&body);
                        self.pending.drain(..self.end.len());
                        self.phase = Phase::AwaitStatus;
                    }
                    None => {
                        let keep = self.end.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        let body: Vec<u8> = self.pending.drain(..cut).collect();
                        self.commit(&body);
                        return None;
                    }
                },
                Phase::AwaitStatus => {
                    return match self.pending.iter().position(|b| *b == b'\n') {
                        Some(nl) => Some(
                            std::str::from_utf8(&self.pending[..nl])
                                .ok()
                                .and_then(|s| s.trim().parse().ok()),
                        ),
                        None if self.pending.len() > MAX_STATUS_BYTES => Some(None),
                        None => None,
                    };
                }
            }
        }
    }

    fn commit(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.total += bytes.len() as u64;
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * LOG_TAIL_BYTES {
            let cut = self.tail.len() - LOG_TAIL_BYTES;
            self.tail.drain(..cut);
        }
        if let Ok((w, _)) = &mut self.transcript
            && let Err(e) = w.write_all(bytes)
        {
            self.fail_transcript(format!("write failed: {e}"));
        }
    }

    fn fail_transcript(&mut self, why: String) {
        if let Ok((_, path)) = &self.transcript {
            let _ = std::fs::remove_file(path);
        }
        self.transcript = Err(why);
    }

    /// The result's `output`, `truncated` and `transcript_log`; deletes an unneeded transcript.
    pub fn finish(mut self) -> (String, bool, Option<String>) {
        if self.phase == Phase::Body {
            let rest = std::mem::take(&mut self.pending);
            self.commit(&rest);
        }
        // Whole output that also fits once invalid bytes became U+FFFD: returned as is.
        let whole = (self.total <= LOG_TAIL_BYTES as u64)
            .then(|| artifact::lossy_tail(&self.tail, LOG_TAIL_BYTES))
            .and_then(|(text, cut)| (!cut).then_some(text));
        if let Some(text) = whole {
            if let Ok((_, path)) = &self.transcript {
                let _ = std::fs::remove_file(path);
            }
            return (text, false, None);
        }
        let flushed = match &mut self.transcript {
            Ok((w, _)) => w.flush().map_err(|e| format!("flush failed: {e}")),
            Err(why) => Err(why.clone()),
        };
        if let Err(why) = flushed {
            self.fail_transcript(why);
        }
        let (marker, kept) = match &self.transcript {
            Ok((_, path)) => (
                format!(
                    "[output truncated: {} bytes in total, showing the end; full transcript: {}]\n",
                    self.total,
                    path.display()
                ),
                Some(path.display().to_string()),
            ),
            Err(why) => (
                format!(
                    "[output truncated: {} bytes in total, showing the end; the full transcript could not be preserved: {why}]\n",
                    self.total
                ),
                None,
            ),
        };
        let room = LOG_TAIL_BYTES.saturating_sub(marker.len());
        let from = self.tail.len().saturating_sub(room);
        let (tail, _) = artifact::lossy_tail(artifact::skip_partial_char(&self.tail[from..]), room);
        let mut output = marker;
        output.push_str(&tail);
        (output, true, kept)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Streaming removal of terminal escape sequences, carriage returns and stray control bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum AnsiStripper {
    /// Plain text.
    #[default]
    Ground,
    /// After ESC.
    Escape,
    /// ESC followed by intermediate bytes (e.g. a charset designation `ESC ( B`).
    Intermediate,
    /// Inside a CSI sequence `ESC [ ... final`.
    Csi,
    /// Inside a string sequence (OSC, DCS, ...) ended by BEL or `ESC \`.
    Str,
    /// ESC inside a string sequence.
    StrEscape,
}

impl AnsiStripper {
    /// Appends the printable part of `input` to `out`, carrying state across calls.
    pub fn strip_into(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            *self = match (*self, b) {
                (AnsiStripper::Ground, 0x1b) => AnsiStripper::Escape,
                (AnsiStripper::Ground, b'\n' | b'\t') => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Ground, 0x00..=0x1f | 0x7f) => AnsiStripper::Ground,
                (AnsiStripper::Ground, _) => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Escape, b'[') => AnsiStripper::Csi,
                (AnsiStripper::Escape, b']' | b'P' | b'X' | b'^' | b'_') => AnsiStripper::Str,
                (AnsiStripper::Escape | AnsiStripper::Intermediate, 0x20..=0x2f) => {
                    AnsiStripper::Intermediate
                }
                (AnsiStripper::Escape | AnsiStripper::Intermediate, _) => AnsiStripper::Ground,
                (AnsiStripper::Csi, 0x40..=0x7e) => AnsiStripper::Ground,
                (AnsiStripper::Csi, _) => AnsiStripper::Csi,
                // A newline ends an unterminated string so it cannot swallow the end marker.
                (AnsiStripper::Str | AnsiStripper::StrEscape, b'\n') => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Str, 0x07) => AnsiStripper::Ground,
                (AnsiStripper::Str, 0x1b) => AnsiStripper::StrEscape,
                (AnsiStripper::Str, _) => AnsiStripper::Str,
                (AnsiStripper::StrEscape, b'\\') => AnsiStripper::Ground,
                (AnsiStripper::StrEscape, _) => AnsiStripper::Str,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(chunks: &[&[u8]]) -> String {
        let mut s = AnsiStripper::default();
        let mut out = Vec::new();
        for c in chunks {
            s.strip_into(c, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strips_sequences_across_chunks() {
        assert_eq!(strip(&[b"\x1b[1;3", b"1mred\x1b[0m\r\n"]), "red\n");
        assert_eq!(strip(&[b"\x1b]0;title\x07a\x1b(Bb"]), "ab");
        assert_eq!(strip(&[b"x\x1b]8;;http://e\x1b", b"\\y"]), "xy");
        assert_eq!(strip(&["é\t€".as_bytes()]), "é\t€");
    }

    #[test]
    fn capture_finds_markers_split_anywhere() {
        let stream = b"junk __PTY_START_7__\nhello\nworld\n__PTY_END_7__ 3\nlater";
        for split in 0..stream.len() {
            let mut c = Capture::new(7, Err(io::Error::other("none")));
            let first = c.feed(&stream[..split]);
            let status = first.or_else(|| c.feed(&stream[split..]));
            assert_eq!(status, Some(Some(3)), "split at {split}");
            let (out, truncated, log) = c.finish();
            assert_eq!(out, "hello\nworld");
            assert!(!truncated);
            assert!(log.is_none());
        }
    }

    #[test]
    fn capture_ignores_other_nonces_and_bounds_memory() {
        let mut c = Capture::new(2, Err(io::Error::other("disk full")));
        assert_eq!(c.feed(b"__PTY_START_1__\nold\n__PTY_END_1__ 0\n"), None);
        assert_eq!(c.feed(b"__PTY_START_2__\n"), None);
        let line = [b'x'; 1000];
        for _ in 0..100 {
            assert_eq!(c.feed(&line), None);
            assert!(c.pending.len() < 2000 && c.tail.len() <= 2 * LOG_TAIL_BYTES + 1000);
        }
        assert_eq!(c.feed(b"\n__PTY_END_2__ 0\n"), Some(Some(0)));
        let (out, truncated, log) = c.finish();
        assert!(truncated);
        assert!(log.is_none());
        assert!(out.len() <= LOG_TAIL_BYTES);
        assert!(out.starts_with("[output truncated: 100000 bytes"), "{out}");
        assert!(out.contains("could not be preserved: disk full"));
    }
}

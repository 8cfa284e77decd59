//! The records another process appends to a session's `session.jsonl` while it runs the
//! session (a one-shot `intendant TASK`, or an `intendant --resume`), read as they are written:
//! what a daemon relays of a session it lists but does not run ([`LogTail`]).
//!
//! The design decision to know: the writer appends each record in one `write` of a whole line
//! (see [`super::jsonl`]), so a reader takes only the lines its newline ended and leaves a last
//! line without one for its next read (it is being written). A read takes at most a budget of
//! bytes, so a reader never holds more than that however fast the log grows; a line longer
//! than the budget is passed over whole, up to its newline, and counted.

use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use intendant_protocol::events::{AppEvent, ControlMsg, SessionLogRecord};

use super::jsonl::rev_lines;
use super::numbered::{is_event_of, rev_records};
use super::{EVENTS_FILE, SessionLogError};
use crate::record_dir::open_read_nofollow;

/// The name of the event that ends a run of a session in its log.
const RUN_ENDED: &str = "session_ended";

/// The name of the event that starts a run of a session in its log.
const RUN_STARTED: &str = "session_started";

/// The name of a follow-up the daemon held for a session until it could take it.
const FOLLOW_UP_HELD: &str = "follow_up_held";

/// The name of an intent sent to a session (a follow-up among them).
const INTENT: &str = "control_command";

/// The name of the event that starts a model turn.
const TURN_STARTED: &str = "turn_started";

/// The name of the event that ends a round.
const ROUND_COMPLETE: &str = "round_complete";

/// A session's log, read forward from a place as its writer appends to it.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    /// Where the next line starts.
    offset: u64,
    /// The line at `offset` is longer than a read's budget: it is passed over up to its newline.
    skipping: bool,
}

/// One record as a read found it.
#[derive(Debug)]
pub struct Logged {
    /// The record.
    pub record: SessionLogRecord,
    /// Where its line ends in the log: the offset just past its newline, where the next line
    /// starts. What a reader that read the log up to an offset has shown is exactly the
    /// records that end at or before it.
    pub end: u64,
}

/// What one [`LogTail::read`] found.
#[derive(Debug, Default)]
pub struct Appended {
    /// The whole records appended since the last read, in order.
    pub records: Vec<Logged>,
    /// Lines passed over: longer than the budget, or not a record this build reads.
    pub passed_over: usize,
}

impl LogTail {
    /// The log of session `dir`, from where its run going on now starts: just after the last
    /// run's `session_ended` (a resumed session's earlier runs are history), or its start. Read
    /// from the log's end back to that record, never further.
    pub fn of_current_run(dir: &Path) -> Result<LogTail, SessionLogError> {
        let path = dir.join(EVENTS_FILE);
        let file = match open_read_nofollow(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogTail {
                    path,
                    offset: 0,
                    skipping: false,
                });
            }
            Err(source) => return Err(SessionLogError::io(&path, source)),
        };
        let len = file
            .metadata()
            .map_err(|source| SessionLogError::io(&path, source))?
            .len();
        let mut offset = 0;
        rev_lines(&file, len, |at, line| {
            // Only a whole line: a last one being written is the current run's.
            let whole = at + (line.len() as u64) < len;
            if whole && is_event_of(line, &[RUN_ENDED]) {
                offset = at + line.len() as u64 + 1;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .map_err(|source| SessionLogError::io(&path, source))?;
        Ok(LogTail {
            path,
            offset,
            skipping: false,
        })
    }

    /// The log of session `dir` from byte `offset`, one a read before left it at (the start of
    /// a line; from any other place, the rest of that line is passed over as no record).
    pub fn at(dir: &Path, offset: u64) -> LogTail {
        LogTail {
            path: dir.join(EVENTS_FILE),
            offset,
            skipping: false,
        }
    }

    /// Where the next read starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The whole lines appended since the last read, reading at most `budget` bytes (what is
    /// left is read next time). A log not there yet has none; one cut shorter than where the
    /// reader stands (rewritten under it) is read again from its start.
    pub fn read(&mut self, budget: usize) -> Result<Appended, SessionLogError> {
        let mut found = Appended::default();
        let file = match open_read_nofollow(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(source) => return Err(SessionLogError::io(&self.path, source)),
        };
        let len = file
            .metadata()
            .map_err(|source| SessionLogError::io(&self.path, source))?
            .len();
        if len < self.offset {
            self.offset = 0;
            self.skipping = false;
        }
        let want = usize::try_from(len - self.offset).map_or(budget, |left| left.min(budget));
        if want == 0 {
            return Ok(found);
        }
        let mut buf = vec![0u8; want];
        file.read_exact_at(&mut buf, self.offset)
            .map_err(|source| SessionLogError::io(&self.path, source))?;
        let mut used = 0;
        while let Some(nl) = memchr::memchr(b'\n', &buf[used..]) {
            let line = &buf[used..used + nl];
            used += nl + 1;
            if std::mem::take(&mut self.skipping) {
                found.passed_over += 1;
                continue;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<SessionLogRecord>(line) {
                Ok(record) => found.records.push(Logged {
                    record,
                    end: self.offset + used as u64,
                }),
                Err(_) => found.passed_over += 1,
            }
        }
        if used == 0 && want == budget {
            // A line longer than a read's budget: passed over, up to its newline.
            used = want;
            self.skipping = true;
        }
        self.offset += used as u64;
        Ok(found)
    }
}

/// Most bytes of a log one read takes where a whole record is read ([`each_record`]).
pub const RECORD_READ_BYTES: usize = 4 << 20;

/// Every record of session `dir`'s log, in order, read `budget` bytes at a time (never the
/// whole log at once), each handed to `each` with where its line ends; how many lines were
/// passed over (longer than the budget, or no record this build reads). A log not there has
/// none.
pub fn each_record(
    dir: &Path,
    budget: usize,
    mut each: impl FnMut(Logged),
) -> Result<usize, SessionLogError> {
    let mut tail = LogTail::at(dir, 0);
    let mut passed_over = 0;
    loop {
        let from = tail.offset();
        let found = tail.read(budget)?;
        passed_over += found.passed_over;
        found.records.into_iter().for_each(&mut each);
        if tail.offset() == from {
            return Ok(passed_over);
        }
    }
}

/// Whether session `dir`'s log holds a run's start (`session_started`): a session created but
/// never run (queued for a slot when its daemon stopped) has none. Read forward a line at a
/// time up to the first start, which is a log's first line once it ran, however long that line
/// is (a long task); only each line's event name is parsed.
pub fn has_started(dir: &Path) -> Result<bool, SessionLogError> {
    use std::io::BufRead as _;
    let path = dir.join(EVENTS_FILE);
    let file = match open_read_nofollow(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(SessionLogError::io(&path, source)),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| SessionLogError::io(&path, source))?;
        if read == 0 {
            return Ok(false);
        }
        if is_event_of(line.trim_ascii_end(), &[RUN_STARTED]) {
            return Ok(true);
        }
    }
}

/// The follow-ups sent to session `dir` that it never took, oldest first: a resume sends them.
///
/// The design decision to know: a follow-up is taken when a round begins after it reached the
/// session's loop, not when it reached it. One that reaches a session whose round works waits
/// in the loop for the round's end, and one the daemon holds (for a slot, or while the round
/// waits for a human: [`AppEvent::FollowUpHeld`]) reaches the loop later, those held together
/// joined into one; either is lost with the daemon until a round began with it. A round begins
/// where a turn or a round's end comes after a round's end (the round's end alone: it ended
/// before its first turn); everything that reached the loop before that was taken. A run's
/// first round takes its task, not the follow-ups: those that reached a session waiting for
/// its first slot wait for that round's end; a resume's first round takes what its run before
/// left unsent, which the resume put in its task (told apart from a follow-up that reached the
/// resumed session before it started by that text: one with the very text of one put in the
/// task is taken for it).
///
/// Read from the log's end back to the last round that began, so what it costs is what came
/// after that round's start, not the log's length.
pub fn unsent_follow_ups(dir: &Path) -> Result<Vec<String>, SessionLogError> {
    // Read back, last first; where the mark (a turn, a round's end, a run's start) after the
    // one being read is among them, if it is a turn or a round's end.
    let mut after = Vec::new();
    let mut later_mark = None;
    rev_records(
        dir,
        &[
            FOLLOW_UP_HELD,
            INTENT,
            RUN_STARTED,
            TURN_STARTED,
            ROUND_COMPLETE,
        ],
        |record| {
            match &record.event {
                AppEvent::RoundComplete { .. } | AppEvent::TurnStarted { .. } => {
                    if let (AppEvent::RoundComplete { .. }, Some(began)) =
                        (&record.event, later_mark)
                    {
                        // The mark after this round's end began a round, which took everything
                        // that reached the loop before it.
                        after.truncate(began);
                        return ControlFlow::Break(());
                    }
                    later_mark = Some(after.len());
                }
                AppEvent::SessionStarted { .. } => later_mark = None,
                _ => {}
            }
            after.push(record.event);
            ControlFlow::Continue(())
        },
    )?;
    let mut follow = Unsent::default();
    after.into_iter().rev().for_each(|event| follow.read(event));
    Ok(follow.texts.into_iter().map(|(_, text)| text).collect())
}

/// What [`unsent_follow_ups`] folds a session's log into, read forward from a round's start.
#[derive(Debug, Default)]
struct Unsent {
    /// The follow-ups not taken yet, in the order the log holds them; `true`: held by the
    /// daemon, not yet in the loop.
    texts: Vec<(bool, String)>,
    /// A round has ended and none has begun since.
    between_rounds: bool,
}

impl Unsent {
    fn read(&mut self, event: AppEvent) {
        match event {
            AppEvent::FollowUpHeld { text } => self.texts.push((true, text)),
            // The held ones reach the loop in it, joined.
            AppEvent::ControlCommand(ControlMsg::FollowUp { text }) => {
                self.texts.retain(|(held, _)| !held);
                self.texts.push((false, text));
            }
            AppEvent::TurnStarted { .. } | AppEvent::RoundComplete { .. } => {
                if self.between_rounds {
                    self.texts.retain(|(held, _)| *held);
                }
                self.between_rounds = matches!(event, AppEvent::RoundComplete { .. });
            }
            AppEvent::SessionStarted { task, resumed, .. } => {
                if resumed {
                    let folded = self
                        .texts
                        .iter()
                        .take_while(|(_, text)| task.contains(text.as_str()))
                        .count();
                    self.texts.drain(..folded);
                }
                self.between_rounds = false;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::events::{EndStatus, RoundEnd};
    use std::io::Write;

    fn line(event: AppEvent) -> String {
        let record = SessionLogRecord {
            ts: "2026-12-06T00:00:00.000Z".to_owned(),
            seq: None,
            event,
        };
        format!("{}\n", serde_json::to_string(&record).unwrap())
    }

    fn ended() -> String {
        line(AppEvent::SessionEnded {
            session_id: "s".to_owned(),
            status: EndStatus::Completed,
            reason: "done".to_owned(),
        })
    }

    fn started(task: &str) -> String {
        line(AppEvent::SessionStarted {
            session_id: "s".to_owned(),
            task: task.to_owned(),
            model: "m".to_owned(),
            provider: "p".to_owned(),
            project_root: "/p".to_owned(),
            resumed: false,
        })
    }

    fn turn(n: u32) -> String {
        line(AppEvent::TurnStarted { turn: n })
    }

    fn append(dir: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(EVENTS_FILE))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn turns(found: &Appended) -> Vec<u32> {
        found
            .records
            .iter()
            .filter_map(|r| match r.record.event {
                AppEvent::TurnStarted { turn } => Some(turn),
                _ => None,
            })
            .collect()
    }

    /// No log, or one without a run's start, has not started; one whose start lies 100 KiB in,
    /// on a line of a megabyte, has.
    #[test]
    fn a_log_has_started_once_it_holds_a_runs_start_however_far_in() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!has_started(dir.path()).unwrap(), "no log");
        append(dir.path(), "");
        assert!(!has_started(dir.path()).unwrap(), "an empty log");
        let lines = turn(1).repeat(100 * 1024 / turn(1).len());
        append(dir.path(), &lines);
        assert!(!has_started(dir.path()).unwrap(), "100 KiB and no start");
        // A start whose task is a megabyte: its line is read whole.
        append(dir.path(), &started(&"t".repeat(1 << 20)));
        assert!(has_started(dir.path()).unwrap());
    }

    /// The follow-ups a session never took: every one until a round began after it reached
    /// the loop (one delivered is all held before it, joined), and those that reached a
    /// session before its run started until its first round ended, but not those a resume put
    /// in its task.
    #[test]
    fn a_follow_up_is_unsent_until_a_round_begins_after_it_reached_the_loop() {
        let held = |text: &str| {
            line(AppEvent::FollowUpHeld {
                text: text.to_owned(),
            })
        };
        let sent = |text: &str| {
            line(AppEvent::ControlCommand(ControlMsg::FollowUp {
                text: text.to_owned(),
            }))
        };
        let round_end = || {
            line(AppEvent::RoundComplete {
                round: 1,
                turns: 1,
                reason: RoundEnd::Done,
                input_tokens: 1,
                output_tokens: 1,
                cost_usd: 0.0,
            })
        };
        let resumed = |task: &str| {
            let started = started(task);
            started.replace(r#""resumed":false"#, r#""resumed":true"#)
        };
        let unsent = |dir: &tempfile::TempDir| unsent_follow_ups(dir.path()).unwrap();

        let never_ran = tempfile::tempdir().unwrap();
        assert!(unsent(&never_ran).is_empty(), "no log");
        append(never_ran.path(), &(sent("a") + &sent("b")));
        assert_eq!(unsent(&never_ran), ["a", "b"]);
        // Its resume put them in its task; one sent before that run started waits for the
        // end of its first round.
        append(
            never_ran.path(),
            &(sent("c") + &resumed("t\n\na\n\nb\n\ngo on") + &turn(1)),
        );
        assert_eq!(unsent(&never_ran), ["c"]);
        append(never_ran.path(), &(round_end() + &turn(2)));
        assert!(unsent(&never_ran).is_empty());

        let ran = tempfile::tempdir().unwrap();
        append(
            ran.path(),
            &(started("t") + &turn(1) + &held("a") + &held("b")),
        );
        assert_eq!(unsent(&ran), ["a", "b"]);
        append(ran.path(), &(sent("a\n\nb") + &turn(2)));
        assert_eq!(
            unsent(&ran),
            ["a\n\nb"],
            "in the loop while its round goes on"
        );
        append(ran.path(), &round_end());
        assert_eq!(
            unsent(&ran),
            ["a\n\nb"],
            "its round ended, the next not begun"
        );
        append(ran.path(), &turn(3));
        assert!(unsent(&ran).is_empty(), "the next round began with it");
        // Sent while the loop waits between rounds: taken by a round that ends before a turn.
        append(ran.path(), &(round_end() + &sent("c")));
        assert_eq!(unsent(&ran), ["c"]);
        append(ran.path(), &round_end());
        assert!(unsent(&ran).is_empty());
        append(ran.path(), &(held("d") + &ended()));
        assert_eq!(unsent(&ran), ["d"], "held when its run ended");
        // A resume gave the run it starts what was held; one with another text reached it.
        append(ran.path(), &(sent("e") + &resumed("d\n\ngo on") + &turn(1)));
        assert_eq!(unsent(&ran), ["e"]);

        // One that reached a session waiting for its first slot waits for its first round.
        let queued = tempfile::tempdir().unwrap();
        append(queued.path(), &(sent("f") + &started("t") + &turn(1)));
        assert_eq!(unsent(&queued), ["f"]);
        append(queued.path(), &(round_end() + &turn(2)));
        assert!(unsent(&queued).is_empty());
    }

    #[test]
    fn only_whole_lines_are_taken_and_a_line_being_written_waits_for_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let mut tail = LogTail::of_current_run(dir.path()).unwrap();
        assert!(tail.read(1 << 20).unwrap().records.is_empty(), "no log yet");
        let second = turn(2);
        let (head, rest) = second.split_at(10);
        append(dir.path(), &(turn(1) + head));
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![1]);
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), Vec::<u32>::new());
        append(dir.path(), rest);
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![2]);
    }

    #[test]
    fn a_resumed_sessions_tail_starts_after_its_last_run_ended() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &(turn(1) + &ended() + &turn(2) + &ended()));
        let mut tail = LogTail::of_current_run(dir.path()).unwrap();
        assert!(tail.read(1 << 20).unwrap().records.is_empty());
        append(dir.path(), &turn(3));
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![3]);

        // A run that has not ended yet is read from its start, a line being written left out.
        let fresh = tempfile::tempdir().unwrap();
        let third = turn(3);
        append(fresh.path(), &(turn(1) + &turn(2) + &third[..5]));
        let mut tail = LogTail::of_current_run(fresh.path()).unwrap();
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![1, 2]);
        append(fresh.path(), &third[5..]);
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![3]);
    }

    #[test]
    fn a_read_holds_at_most_its_budget_and_a_longer_line_is_passed_over_whole() {
        let dir = tempfile::tempdir().unwrap();
        let huge = line(AppEvent::Done {
            message: "x".repeat(10_000),
        });
        append(
            dir.path(),
            &(turn(1) + &huge + &turn(2) + "not json\n" + &turn(3)),
        );
        let mut tail = LogTail::of_current_run(dir.path()).unwrap();
        let budget = 1000;
        let mut got = Vec::new();
        let mut passed_over = 0;
        for _ in 0..100 {
            let found = tail.read(budget).unwrap();
            got.extend(turns(&found));
            passed_over += found.passed_over;
        }
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(
            passed_over, 2,
            "the long line and the one that is no record"
        );
        assert_eq!(
            tail.offset(),
            std::fs::metadata(dir.path().join(EVENTS_FILE))
                .unwrap()
                .len()
        );
    }

    #[test]
    fn a_tail_taken_up_where_a_read_left_it_reads_on_from_there() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &(turn(1) + &turn(2)));
        let mut first = LogTail::at(dir.path(), 0);
        let found = first.read(1 << 20).unwrap();
        assert_eq!(turns(&found), vec![1, 2]);
        // Each record says where its line ends: the next one starts there.
        let ends: Vec<u64> = found.records.iter().map(|r| r.end).collect();
        let one = turn(1).len() as u64;
        assert_eq!(ends, vec![one, 2 * one]);
        assert_eq!(
            turns(&LogTail::at(dir.path(), ends[0]).read(1 << 20).unwrap()),
            vec![2]
        );
        append(dir.path(), &turn(3));
        let mut again = LogTail::at(dir.path(), first.offset());
        assert_eq!(turns(&again.read(1 << 20).unwrap()), vec![3]);
        // From inside a line: its rest is no record, the lines after it are read.
        let mut inside = LogTail::at(dir.path(), 3);
        let found = inside.read(1 << 20).unwrap();
        assert_eq!((turns(&found), found.passed_over), (vec![2, 3], 1));
    }

    #[test]
    fn every_record_is_handed_over_in_order_a_budget_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut got = Vec::new();
        assert_eq!(each_record(dir.path(), 64, |r| got.push(r)).unwrap(), 0);
        assert!(got.is_empty(), "no log, no record");
        let huge = line(AppEvent::Done {
            message: "x".repeat(500),
        });
        append(
            dir.path(),
            &(turn(1) + &turn(2) + &huge + &turn(3) + &ended()),
        );
        let mut turned = Vec::new();
        let mut ends = 0;
        let passed_over = each_record(dir.path(), 200, |r| match r.record.event {
            AppEvent::TurnStarted { turn } => turned.push(turn),
            AppEvent::SessionEnded { .. } => ends += 1,
            _ => {}
        })
        .unwrap();
        assert_eq!((turned, ends, passed_over), (vec![1, 2, 3], 1, 1));
    }

    #[test]
    fn a_log_cut_under_the_reader_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &(turn(1) + &turn(2)));
        let mut tail = LogTail::of_current_run(dir.path()).unwrap();
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![1, 2]);
        std::fs::write(dir.path().join(EVENTS_FILE), turn(7)).unwrap();
        assert_eq!(turns(&tail.read(1 << 20).unwrap()), vec![7]);
    }

    #[test]
    fn a_link_at_the_log_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        append(elsewhere.path(), &turn(1));
        std::os::unix::fs::symlink(
            elsewhere.path().join(EVENTS_FILE),
            dir.path().join(EVENTS_FILE),
        )
        .unwrap();
        assert!(LogTail::of_current_run(dir.path()).is_err());
    }
}

use super::*;
use crate::session_log::read_events;
use intendant_protocol::events::AppEvent;

/// The next record of the range `cursor` gives and the length of its line, `None` after its
/// last: records of events this build does not know are passed over, as are lines without a
/// seq and lines that do not parse (what a replay makes of `peek` and `take`).
fn next_record(
    cursor: &mut NumberedRecords,
) -> Result<Option<(SessionLogRecord, usize)>, SessionLogError> {
    while cursor.peek()?.is_some() {
        if let Some(record) = cursor.take()? {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

/// One numbered record's line.
fn line(seq: Option<u64>, event: AppEvent) -> String {
    let record = SessionLogRecord {
        ts: "2026-12-05T04:00:00.000Z".into(),
        seq,
        event,
    };
    serde_json::to_string(&record).unwrap() + "\n"
}

fn turn(seq: u64) -> String {
    line(Some(seq), AppEvent::TurnStarted { turn: seq as u32 })
}

fn warning(seq: u64, bytes: usize) -> String {
    line(
        Some(seq),
        AppEvent::Warning {
            message: "w".repeat(bytes),
        },
    )
}

/// A session directory whose `session.jsonl` is `text`.
fn log(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(EVENTS_FILE), text).unwrap();
    dir
}

/// Every seq the cursor gives for `after < seq < below`.
fn seqs(dir: &Path, after: u64, below: u64) -> Option<Vec<u64>> {
    let mut cursor = NumberedRecords::open(dir, after, below).unwrap()?;
    let mut out = Vec::new();
    while let Some((record, bytes)) = next_record(&mut cursor).unwrap() {
        assert_eq!(bytes, serde_json::to_string(&record).unwrap().len());
        out.push(record.seq.unwrap());
    }
    assert_eq!(
        out.last().copied(),
        Some(cursor.last()),
        "last() is the last given"
    );
    Some(out)
}

#[test]
fn the_last_seq_is_read_from_the_end_past_a_torn_line_and_unnumbered_ones() {
    let mut text = line(None, AppEvent::TurnStarted { turn: 1 });
    for seq in [3, 9, 41] {
        text.push_str(&turn(seq));
    }
    text.push_str(&line(None, AppEvent::TurnStarted { turn: 2 }));
    text.push_str("{\"event\":\"turn_started\",\"seq\":99,\"ts\":");
    assert_eq!(last_seq(log(&text).path()).unwrap(), Some(41));
    // A last record longer than the chunk read from the end first.
    text.push('\n');
    text.push_str(&warning(42, 5 * TAIL));
    assert_eq!(last_seq(log(&text).path()).unwrap(), Some(42));
    // No numbered record, or no log at all.
    let one_shot = line(None, AppEvent::TurnStarted { turn: 1 });
    assert_eq!(last_seq(log(&one_shot).path()).unwrap(), None);
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(last_seq(empty.path()).unwrap(), None);
}

/// The chunk `rev_lines` starts with, for lines longer than it.
const TAIL: usize = 16 * 1024;

#[test]
fn a_range_gives_its_records_in_order_and_passes_over_what_is_not_the_daemons() {
    let mut text = line(None, AppEvent::TurnStarted { turn: 1 });
    text.push_str(&turn(5));
    text.push_str(&turn(6));
    // An event a newer build wrote, a corrupt line, a one-shot line: none is given.
    text.push_str(
        "{\"event\":\"from_a_newer_build\",\"seq\":7,\"ts\":\"2026-12-05T04:00:00.000Z\"}\n",
    );
    text.push_str("not json\n");
    text.push_str(&line(None, AppEvent::TurnStarted { turn: 2 }));
    text.push_str(&warning(8, 3 * READ_CHUNK));
    text.push_str(&turn(12));
    text.push_str(&turn(13));
    let dir = log(&text);
    assert_eq!(seqs(dir.path(), 0, u64::MAX), Some(vec![5, 6, 8, 12, 13]));
    assert_eq!(seqs(dir.path(), 5, 13), Some(vec![6, 8, 12]));
    assert_eq!(seqs(dir.path(), 6, 9), Some(vec![8]));
    // Starting inside the long record's neighbourhood, and only the unknown one in range.
    assert_eq!(seqs(dir.path(), 8, 100), Some(vec![12, 13]));
    assert_eq!(seqs(dir.path(), 6, 8), None);
    // Nothing after `after`, nothing below `below`.
    assert_eq!(seqs(dir.path(), 13, 100), None);
    assert_eq!(seqs(dir.path(), 0, 5), None);
    let cursor = NumberedRecords::open(dir.path(), 5, 100).unwrap().unwrap();
    assert_eq!((cursor.first(), cursor.last()), (6, 13));
}

#[test]
fn a_cursor_holds_a_chunk_not_the_log_and_gives_a_long_lines_room_back() {
    let mut text = String::new();
    for seq in 1..=5_000 {
        text.push_str(&turn(seq));
    }
    text.push_str(&warning(5_001, 1 << 20));
    for seq in 5_002..=45_000 {
        text.push_str(&turn(seq));
    }
    let dir = log(&text);
    let mut cursor = NumberedRecords::open(dir.path(), 0, u64::MAX)
        .unwrap()
        .unwrap();
    let mut given = 0u64;
    let mut most_before = 0;
    let mut most_around = 0;
    let mut most_after = 0;
    while let Some((record, _)) = next_record(&mut cursor).unwrap() {
        given += 1;
        assert_eq!(record.seq, Some(given));
        let held = cursor.held();
        match given {
            ..=5_000 => most_before = most_before.max(held),
            // The long line is held whole, with as much again read after it.
            5_001..=25_000 => most_around = most_around.max(held),
            _ => most_after = most_after.max(held),
        }
    }
    assert_eq!(given, 45_000);
    assert!(most_before <= 2 * READ_CHUNK, "{most_before} bytes held");
    assert!(most_around <= 3 << 20, "{most_around} bytes held");
    assert!(
        most_after <= 4 * READ_CHUNK,
        "{most_after} bytes held after the long line"
    );
    assert_eq!(cursor.held(), 0, "nothing is held at the end");
}

proptest::proptest! {
    /// Whatever the log and the range, the cursor gives what reading the whole log and keeping
    /// the range would, and the last seq is the whole log's highest.
    #[test]
    fn a_cursor_gives_what_the_whole_log_holds_in_its_range(
        steps in proptest::collection::vec((1u64..4, 0usize..3, 0usize..40), 0..40),
        torn in proptest::bool::ANY,
        after in 0u64..100,
        span in 1u64..100,
        release in 1usize..4,
    ) {
        let mut text = String::new();
        let mut seq = 0;
        for (gap, kind, size) in steps {
            seq += gap;
            match kind {
                0 => text.push_str(&turn(seq)),
                1 => text.push_str(&warning(seq, size * 1_000)),
                _ => text.push_str(&line(None, AppEvent::TurnStarted { turn: 0 })),
            }
        }
        if torn {
            text.push_str("{\"event\":\"turn_started\",\"seq\":100");
        }
        let dir = log(&text);
        let whole = read_events(dir.path()).unwrap();
        let below = after + span;
        let want: Vec<u64> = whole
            .records
            .iter()
            .filter_map(|r| r.seq)
            .filter(|s| *s > after && *s < below)
            .collect();
        let got = seqs(dir.path(), after, below).unwrap_or_default();
        proptest::prop_assert_eq!(&got, &want);
        // Given back at any point, a cursor reads on from where it stood.
        let mut given_back = Vec::new();
        if let Some(mut cursor) = NumberedRecords::open(dir.path(), after, below).unwrap() {
            let mut n = 0;
            while let Some(seq) = cursor.peek().unwrap() {
                n += 1;
                if n % release == 0 {
                    cursor.release();
                }
                if let Some((record, _)) = cursor.take().unwrap() {
                    proptest::prop_assert_eq!(record.seq, Some(seq));
                    given_back.push(seq);
                }
                if n % release == 1 {
                    cursor.release();
                    proptest::prop_assert_eq!(cursor.held(), 0);
                }
            }
        }
        proptest::prop_assert_eq!(given_back, want);
        let highest = whole.records.iter().filter_map(|r| r.seq).max();
        proptest::prop_assert_eq!(last_seq(dir.path()).unwrap(), highest);
    }
}

#[test]
fn opening_a_log_whose_records_are_all_in_range_reads_its_first_line_and_its_end_only() {
    // A first record, 64 GiB of nothing (a hole: no disk, but a reader of the whole log would
    // read it, or hold it), a last record.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EVENTS_FILE);
    let file = std::fs::File::create(&path).unwrap();
    let first = turn(7);
    file.write_all_at(first.as_bytes(), 0).unwrap();
    let end = (64u64 << 30) + first.len() as u64;
    let last = format!("\n{}", warning(9, 20 * TAIL));
    file.write_all_at(last.as_bytes(), end).unwrap();
    let cursor = NumberedRecords::open(dir.path(), 0, u64::MAX)
        .unwrap()
        .unwrap();
    assert_eq!((cursor.first(), cursor.last()), (7, 9));
    assert_eq!(last_seq(dir.path()).unwrap(), Some(9));
    // Nothing is in range after 9: only the end is read to know it.
    assert!(
        NumberedRecords::open(dir.path(), 9, u64::MAX)
            .unwrap()
            .is_none()
    );
}

/// The events `rev_records` gives for `events` in `dir`, last first, stopping after `most`.
fn rev_events(dir: &Path, events: &[&str], most: usize) -> Vec<AppEvent> {
    let mut out = Vec::new();
    rev_records(dir, events, |record| {
        out.push(record.event);
        if out.len() == most {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    out
}

#[test]
fn the_last_records_of_some_events_are_read_from_the_end_past_what_does_not_parse() {
    let done = |message: &str| AppEvent::Done {
        message: message.into(),
    };
    let mut text = line(Some(1), done("first"));
    text.push_str(&turn(2));
    text.push_str(&line(None, done("unnumbered")));
    // An event of the name asked for whose fields this build does not know, one this build
    // does not know at all, and a torn last line.
    text.push_str("{\"event\":\"done\",\"seq\":3,\"ts\":\"t\",\"words\":1}\n");
    text.push_str("{\"event\":\"from_a_newer_build\",\"seq\":4,\"ts\":\"t\"}\n");
    text.push_str(&warning(5, 5 * TAIL));
    text.push_str("{\"event\":\"done\",\"seq\":6,\"message\":\"torn");
    let dir = log(&text);
    assert_eq!(
        rev_events(dir.path(), &["done"], usize::MAX),
        vec![done("unnumbered"), done("first")]
    );
    assert_eq!(
        rev_events(dir.path(), &["done"], 1),
        vec![done("unnumbered")]
    );
    assert_eq!(
        rev_events(dir.path(), &["turn_started", "warning"], usize::MAX).len(),
        2
    );
    assert!(rev_events(dir.path(), &["session_ended"], usize::MAX).is_empty());
    let none = tempfile::tempdir().unwrap();
    assert!(rev_events(none.path(), &["done"], usize::MAX).is_empty());
}

#[test]
fn reading_the_last_records_stops_where_it_is_told() {
    // 64 GiB of nothing (a hole) before the records asked for: a reader past them would read
    // it, or hold it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EVENTS_FILE);
    let file = std::fs::File::create(&path).unwrap();
    let end = 64u64 << 30;
    let tail = format!("\n{}{}", warning(8, 20 * TAIL), turn(9));
    file.write_all_at(tail.as_bytes(), end).unwrap();
    assert_eq!(
        rev_events(dir.path(), &["warning"], 1),
        vec![AppEvent::Warning {
            message: "w".repeat(20 * TAIL)
        }]
    );
}

use std::path::Path;

use intendant_core::session_log::EVENTS_FILE;
use intendant_protocol::events::{AppEvent, SessionLogRecord};

use super::*;

/// A session directory `id` under `root` whose log numbers one record each of `seqs`.
fn session(root: &Path, id: &str, seqs: impl IntoIterator<Item = u64>) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for seq in seqs {
        let record = SessionLogRecord {
            ts: "2026-12-05T04:00:00.000Z".into(),
            seq: Some(seq),
            event: AppEvent::Warning {
                message: format!("{id} says {seq}"),
            },
        };
        text.push_str(&serde_json::to_string(&record).unwrap());
        text.push('\n');
    }
    std::fs::write(dir.join(EVENTS_FILE), text).unwrap();
    dir
}

/// Everything `replay` gives, `batch` at a time (and one at a time with `one_by_one`, its
/// bytes capped below a line's).
fn drain(replay: &mut LogReplay, batch: usize, one_by_one: bool) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let step = replay.next_batch(batch, if one_by_one { 1 } else { usize::MAX });
        if step.is_empty() {
            return out;
        }
        assert!(step.len() <= if one_by_one { 1 } else { batch });
        out.extend(step.into_iter().map(|e| (e.seq, e.session_id)));
    }
}

#[test]
fn the_sessions_logs_are_merged_in_seq_order_within_the_range() {
    let root = tempfile::tempdir().unwrap();
    let a = session(root.path(), "a", [1, 4, 5, 9, 20]);
    let b = session(root.path(), "b", [2, 3, 10, 11]);
    let c = session(root.path(), "c", [6, 7, 8, 12, 30]);
    // A session wholly before the range, and a directory with no log.
    let old = session(root.path(), "old", [0]);
    let empty = root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let dirs = [a, b, c, old, empty];
    let mut replay = LogReplay::open(&dirs, 1, 20);
    assert_eq!(replay.last(), 12);
    let got = drain(&mut replay, 3, false);
    let want: Vec<(u64, String)> = [
        (2, "b"),
        (3, "b"),
        (4, "a"),
        (5, "a"),
        (6, "c"),
        (7, "c"),
        (8, "c"),
        (9, "a"),
        (10, "b"),
        (11, "b"),
        (12, "c"),
    ]
    .into_iter()
    .map(|(seq, id)| (seq, id.to_owned()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(drain(&mut LogReplay::open(&dirs, 1, 20), 3, true), want);
    // Nothing in range: no part, nothing given.
    let mut none = LogReplay::open(&dirs, 30, 40);
    assert_eq!(none.last(), 0);
    assert!(none.next_batch(10, usize::MAX).is_empty());
}

#[test]
fn a_replay_holds_the_sessions_it_has_reached_not_the_history() {
    // 200 sessions one after another, 8 MB of logs in all: a replay from the start holds the
    // chunk of the one it is in and of the next it has looked at.
    let root = tempfile::tempdir().unwrap();
    let per = 500;
    let dirs: Vec<PathBuf> = (0..200u64)
        .map(|n| {
            session(
                root.path(),
                &format!("s{n:03}"),
                n * per + 1..=(n + 1) * per,
            )
        })
        .collect();
    let mut replay = LogReplay::open(&dirs, 0, u64::MAX);
    let mut given = 0;
    let mut most = 0;
    loop {
        let step = replay.next_batch(BATCH, BATCH_BYTES);
        if step.is_empty() {
            break;
        }
        given += step.len();
        most = most.max(replay.held());
    }
    assert_eq!(given, 200 * 500);
    assert!(most <= 4 * 4096, "a replay held {most} bytes between steps");
    // 300 sessions side by side (each seq in turn), a chunk each would be 2.4 MB: the parts
    // hold at most their budget (and a line).
    let root = tempfile::tempdir().unwrap();
    let sessions = 300;
    let per = 100;
    let dirs: Vec<PathBuf> = (0..sessions)
        .map(|n| {
            let seqs = (0..per).map(move |k| k * sessions + n + 1);
            session(root.path(), &format!("t{n:03}"), seqs)
        })
        .collect();
    let mut replay = LogReplay::open(&dirs, 0, u64::MAX);
    let mut seqs = Vec::new();
    let mut most = 0;
    loop {
        let step = replay.next_batch(BATCH, BATCH_BYTES);
        if step.is_empty() {
            break;
        }
        seqs.extend(step.iter().map(|e| e.seq));
        most = most.max(replay.held());
    }
    assert_eq!(seqs, (1..=sessions * per).collect::<Vec<u64>>());
    assert!(
        most <= HELD_BYTES + 2 * 4096,
        "a replay held {most} bytes between steps"
    );
}

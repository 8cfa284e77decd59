//! [`LogPrefetch`]: when it starts creating ahead, hand-over order, replaced pairs, creation
//! failures, and clean shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::time::Duration;

fn logs_of(dir: &Path, nonce: u64) -> Vec<PathBuf> {
    let prefix = format!("{nonce}_");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

fn all_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Waits (bounded) until the creator has made the pair of `nonce`.
fn wait_for_pair(dir: &Path, nonce: u64) {
    for _ in 0..1000 {
        if logs_of(dir, nonce).len() == 2 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the pair of {nonce} was never created");
}

/// A prefetch that takes every disk for slow: the creator starts after the first pair.
fn eager() -> LogPrefetch {
    with_slow_pair(Duration::ZERO)
}

fn with_slow_pair(slow_pair: Duration) -> LogPrefetch {
    let mut logs = LogPrefetch::default();
    logs.slow_pair = slow_pair;
    logs
}

/// The creator threads still listed, once a joined one had up to a second to leave
/// `/proc/self/task`: `join` returns when the thread's exit clears its id, a moment before the
/// kernel unlists it.
fn creator_threads() -> usize {
    let listed = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim() == "log-creator")
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let n = listed();
        if n == 0 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn pairs_are_handed_over_in_order_and_unused_ones_removed_at_finish() {
    let dir = tempfile::tempdir().unwrap();
    let mut logs = eager();
    logs.start((1..=10).collect());
    let first = logs.take(dir.path(), 1).unwrap();
    let second = logs.take(dir.path(), 2).unwrap();
    assert!(first.out_path.starts_with(dir.path()) && second.err_path.starts_with(dir.path()));
    assert!(
        second
            .out_path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("2_")
    );
    // The creator runs ahead, but only by a bounded number of pairs.
    wait_for_pair(dir.path(), 2 + LOOKAHEAD as u64);
    assert!(logs_of(dir.path(), 10).is_empty());
    logs.finish();
    assert_eq!(
        all_files(dir.path()),
        4,
        "only the two pairs handed over remain"
    );
    #[cfg(target_os = "linux")]
    assert_eq!(creator_threads(), 0, "finish leaves no thread running");
    logs.finish(); // a second finish is a no-op
}

#[test]
fn a_pair_replaced_far_ahead_is_not_used_and_its_target_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let victim = other.path().join("victim");
    std::fs::write(&victim, "untouched").unwrap();
    let mut logs = eager();
    logs.start(vec![1, 2, 3, 4]);
    let _first = logs.take(dir.path(), 1).unwrap();
    wait_for_pair(dir.path(), 4);
    let swapped = logs_of(dir.path(), 4);
    for path in &swapped {
        std::fs::remove_file(path).unwrap();
        std::os::unix::fs::symlink(&victim, path).unwrap();
    }
    let fourth = logs.take(dir.path(), 4).unwrap();
    assert!(!swapped.contains(&fourth.out_path) && !swapped.contains(&fourth.err_path));
    assert!(fourth.in_place());
    // The skipped pairs of 2 and 3 are gone; the symlinks (not ours any more) are left alone.
    assert!(logs_of(dir.path(), 2).is_empty() && logs_of(dir.path(), 3).is_empty());
    for path in &swapped {
        assert!(std::fs::symlink_metadata(path).unwrap().is_symlink());
    }
    logs.finish();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
}

#[test]
fn a_failed_creation_is_reported_by_the_command_it_was_for() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone");
    let mut logs = eager();
    logs.start(vec![5, 6]);
    match logs.take(&missing, 5) {
        Err(ExecError::Artifact { stream, dir, .. }) => {
            assert_eq!(stream, "stdout");
            assert_eq!(dir, missing.display().to_string());
        }
        Ok(pair) => panic!("created in a missing dir: {pair:?}"),
    }
    // Once the dir exists, the next command creates its own pair.
    std::fs::create_dir(&missing).unwrap();
    assert!(logs.take(&missing, 6).unwrap().in_place());
    logs.finish();
    assert_eq!(all_files(&missing), 2);
}

#[test]
fn an_unexpected_nonce_creates_its_own_pair_and_drop_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut logs = eager();
        logs.start(vec![1, 2]);
        let other = logs.take(dir.path(), 9).unwrap();
        assert!(other.in_place());
        wait_for_pair(dir.path(), 2);
    }
    assert_eq!(
        all_files(dir.path()),
        2,
        "dropping the prefetch removed pairs 1 and 2"
    );
    assert_eq!(logs_of(dir.path(), 9).len(), 2);
}

#[test]
fn a_fast_disk_starts_no_thread_and_a_slow_one_starts_it_for_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut fast = with_slow_pair(Duration::MAX);
    fast.start(vec![1, 2, 3]);
    for nonce in 1..=3 {
        assert!(fast.take(dir.path(), nonce).unwrap().in_place());
        assert!(
            fast.creator.is_none(),
            "no thread while pairs are quick to create"
        );
    }
    fast.finish();
    assert_eq!(all_files(dir.path()), 6);

    let dir = tempfile::tempdir().unwrap();
    let mut slow = eager();
    slow.start(vec![1, 2, 3]);
    let _first = slow.take(dir.path(), 1).unwrap();
    let creator = slow
        .creator
        .as_ref()
        .expect("a slow pair starts the creator");
    assert_eq!(creator.pending, [2, 3], "for the commands still to come");
    wait_for_pair(dir.path(), 3);
    slow.finish();
    assert_eq!(
        all_files(dir.path()),
        2,
        "the pairs made ahead and never used are removed"
    );
}

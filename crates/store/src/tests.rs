use std::os::unix::fs::PermissionsExt;

use super::*;
use intendant_testkit::full_disk;
use migrations::Migration;

const TEST_SCHEMA: &[Migration] = &[
    Migration {
        name: "notes",
        sql: "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
    },
    Migration {
        name: "notes' search",
        sql: "CREATE VIRTUAL TABLE notes_fts USING fts5(body);",
    },
];

fn version(store: &Store) -> u32 {
    store
        .with(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
        .unwrap()
}

#[test]
fn a_new_database_is_owner_only_in_wal_mode_and_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join(DB_FILE), TEST_SCHEMA).unwrap();
    assert_eq!(version(&store), 2);
    let mode: String = store
        .with(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(mode, "wal");
    store
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('x')", []))
        .unwrap();
    for name in [DB_FILE, "intendant.db-wal", "intendant.db-shm"] {
        let meta = std::fs::metadata(dir.path().join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
    }
}

#[test]
fn the_bundled_sqlite_has_fts5() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join(DB_FILE), TEST_SCHEMA).unwrap();
    let hits: i64 = store
        .write(|tx| {
            tx.execute(
                "INSERT INTO notes_fts (body) VALUES ('the build uses nextest')",
                [],
            )?;
            tx.query_row(
                "SELECT count(*) FROM notes_fts WHERE notes_fts MATCH 'nextest'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    assert_eq!(hits, 1);
}

#[test]
fn reopening_runs_only_the_new_migrations_and_keeps_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let store = Store::open_with(&path, &TEST_SCHEMA[..1]).unwrap();
    store
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('kept')", []))
        .unwrap();
    drop(store);
    let store = Store::open_with(&path, TEST_SCHEMA).unwrap();
    assert_eq!(version(&store), 2);
    let body: String = store
        .with(|c| c.query_row("SELECT body FROM notes", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(body, "kept");
}

#[test]
fn a_failing_migration_leaves_the_database_at_the_last_whole_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let broken = [
        TEST_SCHEMA[0],
        Migration {
            name: "broken",
            sql: "CREATE TABLE half (id INTEGER); THIS IS NOT SQL;",
        },
    ];
    let e = Store::open_with(&path, &broken).unwrap_err();
    assert!(matches!(e, StoreError::Sqlite { .. }), "{e}");
    let store = Store::open_with(&path, &broken[..1]).unwrap();
    assert_eq!(version(&store), 1);
    let half: i64 = store
        .with(|c| {
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'half'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    assert_eq!(
        half, 0,
        "the failed migration's first statement was rolled back"
    );
}

#[test]
fn a_database_from_a_newer_build_is_refused_not_downgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    drop(Store::open_with(&path, TEST_SCHEMA).unwrap());
    let e = Store::open_with(&path, &TEST_SCHEMA[..1]).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::TooNew {
                found: 2,
                known: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("newer than this build"), "{e}");
}

#[test]
fn a_corrupted_file_is_a_clear_error_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let garbage = vec![0x5a_u8; 8192];
    std::fs::write(&path, &garbage).unwrap();
    let e = Store::open_with(&path, TEST_SCHEMA).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("restore a backup"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

#[test]
fn a_link_in_the_databases_place_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere.db");
    drop(Store::open_with(&elsewhere, TEST_SCHEMA).unwrap());
    let path = dir.path().join(DB_FILE);
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let e = Store::open_with(&path, TEST_SCHEMA).unwrap_err();
    assert!(matches!(e, StoreError::NotAFile { .. }), "{e}");
}

#[test]
fn a_full_database_keeps_nothing_of_the_write_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join(DB_FILE), TEST_SCHEMA).unwrap();
    store
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('before')", []))
        .unwrap();
    // The same SQLITE_FULL a full disk gives, without filling one.
    let pages: i64 = store
        .with(|c| c.query_row("PRAGMA page_count", [], |r| r.get(0)))
        .unwrap();
    store
        .with(|c| c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(())))
        .unwrap();
    let big = "x".repeat(1 << 20);
    let e = store
        .write(|tx| {
            tx.execute("INSERT INTO notes (body) VALUES ('lost with it')", [])?;
            tx.execute("INSERT INTO notes (body) VALUES (?1)", [&big])
        })
        .unwrap_err();
    assert!(matches!(e, StoreError::Full { .. }), "{e}");
    let bodies: Vec<String> = store
        .with(|c| {
            let mut st = c.prepare("SELECT body FROM notes ORDER BY id")?;
            st.query_map([], |r| r.get(0))?.collect()
        })
        .unwrap();
    assert_eq!(bodies, ["before"]);
}

#[test]
fn a_write_held_by_another_process_waits_then_says_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let store = Store::open_with(&path, TEST_SCHEMA).unwrap();
    let other = Store::open_with(&path, TEST_SCHEMA).unwrap();
    // A short wait for the test: the error is the same after BUSY_TIMEOUT.
    other
        .with(|c| c.busy_timeout(std::time::Duration::from_millis(50)))
        .unwrap();
    let held = store.inner.conn.lock().unwrap();
    held.execute_batch("BEGIN IMMEDIATE").unwrap();
    let e = other
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('x')", []))
        .unwrap_err();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    held.execute_batch("ROLLBACK").unwrap();
    drop(held);
    other
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('x')", []))
        .unwrap();
}

#[test]
fn a_backup_is_a_consistent_owner_only_copy() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join(DB_FILE), TEST_SCHEMA).unwrap();
    store
        .write(|tx| tx.execute("INSERT INTO notes (body) VALUES ('saved')", []))
        .unwrap();
    let dest = dir.path().join("backup.db");
    store.backup_to(&dest).unwrap();
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let copy = Store::open_with(&dest, TEST_SCHEMA).unwrap();
    let body: String = copy
        .with(|c| c.query_row("SELECT body FROM notes", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(body, "saved");
    let again = store.backup_to(&dest).unwrap_err();
    assert!(matches!(again, StoreError::Io { .. }), "{again}");
}

/// A really full disk, not a size limit: a 512 KiB tmpfs with the database and a ballast file
/// on it. Writing memories until the disk is full ends in [`StoreError::Full`], and every memory
/// written before is still there and searchable; once the ballast is removed (space freed), the
/// same write succeeds.
#[test]
fn on_a_really_full_disk_a_write_fails_as_full_and_everything_before_it_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().to_path_buf();
    let ran = std::thread::spawn(move || {
        full_disk::small_tmpfs(&mount, 512 * 1024)?;
        let ballast = mount.join("ballast");
        std::fs::write(&ballast, vec![0_u8; 64 * 1024]).unwrap();
        let memories = memory::Memories::new(Store::open(&mount).unwrap());
        let scope = memory::Scope::User;
        let source = memory::Source::Human;
        let mut kept = 0_usize;
        let full = loop {
            let text = format!("fact {kept}: {}", "lorem ipsum dolor ".repeat(100));
            match memories.add(&scope, &text, &source) {
                Ok(_) => kept += 1,
                Err(e) => break e,
            }
            assert!(kept < 10_000, "the disk never filled");
        };
        assert!(
            matches!(full, memory::MemoryError::Store(StoreError::Full { .. })),
            "{full}"
        );
        assert!(
            full.to_string().contains("free space and try again"),
            "{full}"
        );
        assert!(kept > 10, "only {kept} memories fit");
        let all = memory::ScopeFilter::All;
        assert_eq!(memories.count(&all).unwrap(), kept as u64);
        let found = memories
            .search(&format!("\"fact {}\"", kept - 1), &all, 5)
            .unwrap();
        assert!(!found.hits.is_empty(), "the last kept one is searchable");
        // Space freed: the write that failed now goes through.
        std::fs::remove_file(&ballast).unwrap();
        memories.add(&scope, "after the cleanup", &source).unwrap();
        assert_eq!(memories.count(&all).unwrap(), kept as u64 + 1);
        Some(())
    })
    .join()
    .unwrap();
    if ran.is_none() {
        full_disk::skipped();
    }
}

//! The schema, as one ordered list of migrations. The database's `PRAGMA user_version` counts
//! the migrations it has applied; opening runs the rest, each in its own transaction with its
//! version bump.
//!
//! To change the schema, append a [`Migration`] to [`ALL`]; never edit or reorder one that has
//! landed (a database that applied it would not see the change).

use rusqlite::Connection;

/// One schema step.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// What it is for, in a few words.
    pub name: &'static str,
    /// The statements it runs.
    pub sql: &'static str,
}

/// Every migration, oldest first.
pub const ALL: &[Migration] = &[WORKFLOW_AND_AGENDA, MEMORIES, MEMORY_PROPOSALS];

/// Memory proposals waiting for a human, kept across sessions and restarts
/// (`crate::memory::proposals`).
const MEMORY_PROPOSALS: Migration = Migration {
    name: "memory proposals",
    sql: crate::memory::proposals::MIGRATION_SQL,
};

/// Memories and their full-text index, kept in step by triggers (`crate::memory`).
const MEMORIES: Migration = Migration {
    name: "memories and their full-text index",
    sql: crate::memory::MIGRATION_SQL,
};

/// Workflow checkpoints (one JSON document per session and name) and the agenda (parked work
/// items and one-shot scheduled sessions; times are Unix seconds, UTC).
const WORKFLOW_AND_AGENDA: Migration = Migration {
    name: "workflow checkpoints and the agenda",
    sql: "
CREATE TABLE workflow_checkpoints (
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    updated INTEGER NOT NULL,
    PRIMARY KEY (session_id, name)
) STRICT;
CREATE TABLE agenda (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('item', 'schedule')),
    text TEXT NOT NULL,
    created INTEGER NOT NULL,
    at INTEGER,
    state TEXT NOT NULL,
    reminded INTEGER NOT NULL DEFAULT 0,
    request TEXT,
    digest TEXT,
    approved_digest TEXT,
    claimed_at INTEGER,
    claimed_by TEXT,
    session_id TEXT,
    note TEXT
) STRICT;
CREATE INDEX agenda_due ON agenda (state, at);
",
};

/// Why migrating failed.
#[derive(Debug)]
pub(crate) enum MigrateError {
    /// The database has applied more migrations than this build knows.
    TooNew {
        /// Its `user_version`.
        found: u32,
        /// How many this build has.
        known: u32,
    },
    /// A statement failed; its transaction was rolled back.
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> MigrateError {
        MigrateError::Sqlite(e)
    }
}

/// Applies the migrations of `list` that `conn`'s database has not applied yet.
pub(crate) fn run(conn: &mut Connection, list: &[Migration]) -> Result<(), MigrateError> {
    let known = u32::try_from(list.len()).unwrap_or(u32::MAX);
    let found: u32 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > known {
        return Err(MigrateError::TooNew { found, known });
    }
    for (version, migration) in (found + 1..).zip(&list[found as usize..]) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated meanwhile: look again under the write lock.
        let now: u32 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if now >= version {
            continue;
        }
        tx.execute_batch(migration.sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

//! The controller's embedded database: one SQLite file, `$INTENDANT_HOME/intendant.db`, for
//! what a long-running host remembers across sessions (memories, workflow checkpoints, the
//! agenda). The session records (`logs/<id>/`) stay files of their own.
//!
//! Only the controller or the daemon opens it: the state root is outside every command's
//! sandbox (`docs/security.md`), the file and its `-wal`/`-shm` companions are created owner-only,
//! and a symbolic link in its place is refused rather than followed.
//!
//! The design decisions to know:
//! - **Migrations** are one ordered list ([`migrations::ALL`]); the database's `user_version` is
//!   how many of them it has applied. Each runs in its own transaction with its version bump, so
//!   a crash leaves the database at a whole version. A database from a newer build (a version
//!   beyond the list) is refused, never downgraded.
//! - **WAL** with `synchronous = NORMAL`: readers never wait for the writer, and a committed
//!   transaction survives a crash of the process (not necessarily a power cut: the same promise
//!   as the session records). Two processes (two daemons) share the file safely; a write that
//!   finds it locked waits [`BUSY_TIMEOUT`], then fails with [`StoreError::Locked`].
//! - **Errors say what to do**: a locked, corrupted or full database is its own
//!   [`StoreError`] variant with the file's path, and nothing is overwritten to "repair" it.
//! - **Backup** is [`Store::backup_to`] (`VACUUM INTO`: a consistent copy while sessions run);
//!   restoring is copying that file back with the daemon stopped (`docs/store.md`).
//!
//! Calls are synchronous and short; async callers run them on a blocking thread.
//!
//! # Layout
//! - `migrations`: the ordered schema list and the runner.
//! - `workflow`: workflow checkpoints, named JSON documents of a session (`workflow_checkpoint`).
//! - `agenda`: parked work items with reminders and one-shot scheduled sessions, claimed once.
//! - `memory`: memories, their scopes and their full-text search (`docs/memory.md`);
//!   `memory::proposals`: what sessions proposed, pending until a human answers.
//! - `shared`: [`SharedStore`], the one lazily opened [`Store`] of a process.

pub mod agenda;
pub mod memory;
pub mod migrations;
mod shared;
pub mod workflow;

pub use shared::SharedStore;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use thiserror::Error;

/// The database's file name under the state root.
pub const DB_FILE: &str = "intendant.db";

/// How long a write waits for another process's transaction before [`StoreError::Locked`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong with the database, with its path and what to do about it.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Another process held the database longer than [`BUSY_TIMEOUT`].
    #[error(
        "the database {} is locked by another process (waited {}s); try again, or stop the other intendant using it",
        path.display(),
        BUSY_TIMEOUT.as_secs()
    )]
    Locked {
        /// The database file.
        path: PathBuf,
    },
    /// The file is not a database, or its pages are damaged. It is left as it is.
    #[error(
        "the database {} is corrupted ({detail}); it was left untouched: restore a backup (`docs/store.md`) or move it aside to start empty",
        path.display()
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's words.
        detail: String,
    },
    /// The disk (or the database's size limit) is full: nothing of this write was kept.
    #[error("the database {} is full (disk or size limit): this change was not saved; free space and try again", path.display())]
    Full {
        /// The database file.
        path: PathBuf,
    },
    /// The database was written by a newer intendant.
    #[error(
        "the database {} has schema version {found}, newer than this build knows ({known}); use the newer intendant, or restore a backup",
        path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: u32,
        /// The number of migrations this build has.
        known: u32,
    },
    /// A symbolic link, or something other than a regular file, in the database's place.
    #[error("{} is not a regular file: the database is never opened through a link", path.display())]
    NotAFile {
        /// The path found.
        path: PathBuf,
    },
    /// Any other SQLite failure.
    #[error("database {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// Creating the state root or setting the file's mode failed.
    #[error("database {}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Sorts a SQLite error on `path` into the variant a user can act on.
    pub fn from_sqlite(path: &Path, source: rusqlite::Error) -> StoreError {
        let path = path.to_path_buf();
        match source.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StoreError::Locked { path }
            }
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt {
                path,
                detail: source.to_string(),
            },
            Some(ErrorCode::DiskFull) => StoreError::Full { path },
            _ => StoreError::Sqlite { path, source },
        }
    }
}

/// The open database: cheap to clone, one connection shared under a lock.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database of the state root `home`, migrated to this
    /// build's schema.
    pub fn open(home: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(home).map_err(|source| StoreError::Io {
            path: home.to_path_buf(),
            source,
        })?;
        Store::open_at(&home.join(DB_FILE))
    }

    /// Opens (creating if needed) the database file at `path`, migrated to this build's schema.
    pub fn open_at(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, migrations::ALL)
    }

    /// Opens the database at `path` migrated with `list` (tests give their own).
    fn open_with(path: &Path, list: &[migrations::Migration]) -> Result<Store, StoreError> {
        create_owner_only(path)?;
        let sqlite = |source| StoreError::from_sqlite(path, source);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NOFOLLOW
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sqlite)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
        // The first real read: a file that is not a database fails here.
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(sqlite)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(sqlite)?;
        let mut conn = conn;
        migrations::run(&mut conn, list).map_err(|e| match e {
            migrations::MigrateError::TooNew { found, known } => StoreError::TooNew {
                path: path.to_path_buf(),
                found,
                known,
            },
            migrations::MigrateError::Sqlite(source) => sqlite(source),
        })?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                conn: Mutex::new(conn),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` on the connection; its SQLite errors come back sorted ([`StoreError`]).
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        f(&mut self.lock()).map_err(|e| StoreError::from_sqlite(&self.inner.path, e))
    }

    /// Runs `f` in one transaction that takes the write lock at its start (`BEGIN IMMEDIATE`),
    /// so two processes deciding on the same rows never both act: one commits, the other sees
    /// its result. Rolled back if `f` fails.
    pub fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let run = |conn: &mut Connection| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let value = f(&tx)?;
            tx.commit()?;
            Ok(value)
        };
        run(&mut conn).map_err(|e| StoreError::from_sqlite(&self.inner.path, e))
    }

    /// Writes a consistent copy of the database to `dest` (which must not exist), while other
    /// connections go on reading and writing.
    pub fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        let dest_text = dest.to_str().ok_or_else(|| StoreError::Io {
            path: dest.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the backup's destination is not valid UTF-8",
            ),
        })?;
        // Created here, empty and owner-only: `VACUUM INTO` fills an empty file as it finds it.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dest)
            .map_err(|source| StoreError::Io {
                path: dest.to_path_buf(),
                source,
            })?;
        self.lock()
            .execute("VACUUM INTO ?1", [dest_text])
            .map(drop)
            .map_err(|e| StoreError::from_sqlite(&self.inner.path, e))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call leaves no half transaction: rusqlite rolls it back on drop.
        self.inner
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Makes sure `path` is a regular file, creating it empty and owner-only if missing, never
/// through a link. SQLite gives the `-wal` and `-shm` files the database file's mode.
fn create_owner_only(path: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(_) => Err(StoreError::NotAFile {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map(drop)
            // Another process created it meanwhile: theirs is as good.
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(io(e)),
            }),
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests;

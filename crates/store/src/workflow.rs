//! Workflow checkpoints: named JSON documents a session writes (`workflow_checkpoint`) so a long
//! orchestration's state outlives compaction and a resume. Keyed by session id and name; a
//! write replaces the document of that name. Bounded: [`MAX_DATA_BYTES`] per document,
//! [`MAX_PER_SESSION`] names per session, names of [`MAX_NAME_CHARS`] printable characters.

use thiserror::Error;

use crate::{Store, StoreError};

/// Largest document, in bytes of its JSON text.
pub const MAX_DATA_BYTES: usize = 256 * 1024;
/// Most checkpoint names one session may keep.
pub const MAX_PER_SESSION: usize = 64;
/// Longest name, in characters.
pub const MAX_NAME_CHARS: usize = 100;

/// Why a checkpoint could not be written or read; nothing was changed.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// The name is empty, too long, or has control characters.
    #[error(
        "checkpoint name {0:?} is not valid: 1 to {MAX_NAME_CHARS} characters, no control characters"
    )]
    BadName(String),
    /// The data is not JSON.
    #[error("checkpoint {name:?}: data is not JSON ({detail}); nothing was saved")]
    NotJson {
        /// The checkpoint.
        name: String,
        /// The parser's words.
        detail: String,
    },
    /// The data is over [`MAX_DATA_BYTES`].
    #[error(
        "checkpoint {name:?}: data is {bytes} bytes, over the {MAX_DATA_BYTES}-byte limit; nothing was saved (keep the state, not the history)"
    )]
    TooBig {
        /// The checkpoint.
        name: String,
        /// Its size.
        bytes: usize,
    },
    /// The session already keeps [`MAX_PER_SESSION`] other names.
    #[error(
        "checkpoint {name:?}: this session already keeps {MAX_PER_SESSION} checkpoints; overwrite one of them instead"
    )]
    TooMany {
        /// The new name.
        name: String,
    },
    /// No checkpoint of that name.
    #[error("no checkpoint {name:?}{}", known_list(known))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// The database failed (locked, full, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "; there are none".to_owned()
    } else {
        format!("; there are: {}", known.join(", "))
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Whether the name is new (else an earlier document was replaced).
    pub created: bool,
    /// Size of the stored JSON text.
    pub bytes: usize,
}

/// Checks `name`.
fn check_name(name: &str) -> Result<(), CheckpointError> {
    let n = name.chars().count();
    if n == 0 || n > MAX_NAME_CHARS || name.chars().any(char::is_control) || name.trim() != name {
        return Err(CheckpointError::BadName(name.to_owned()));
    }
    Ok(())
}

/// Stores `data` (JSON text) as checkpoint `name` of `session`, at `now` (Unix seconds).
pub fn write(
    store: &Store,
    session: &str,
    name: &str,
    data: &str,
    now: i64,
) -> Result<Written, CheckpointError> {
    check_name(name)?;
    if data.len() > MAX_DATA_BYTES {
        return Err(CheckpointError::TooBig {
            name: name.to_owned(),
            bytes: data.len(),
        });
    }
    let value: serde_json::Value =
        serde_json::from_str(data).map_err(|e| CheckpointError::NotJson {
            name: name.to_owned(),
            detail: e.to_string(),
        })?;
    let text = value.to_string();
    let bytes = text.len();
    // Counted and written in one write transaction: two writers never both pass the limit.
    let outcome = store.write(|tx| {
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM workflow_checkpoints WHERE session_id = ?1 AND name = ?2)",
            (session, name),
            |r| r.get(0),
        )?;
        let count: i64 = tx.query_row(
            "SELECT count(*) FROM workflow_checkpoints WHERE session_id = ?1",
            [session],
            |r| r.get(0),
        )?;
        if !exists && count >= MAX_PER_SESSION as i64 {
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO workflow_checkpoints (session_id, name, data, updated) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (session_id, name) DO UPDATE SET data = excluded.data, updated = excluded.updated",
            (session, name, &text, now),
        )?;
        Ok(Some(!exists))
    })?;
    match outcome {
        Some(created) => Ok(Written { created, bytes }),
        None => Err(CheckpointError::TooMany {
            name: name.to_owned(),
        }),
    }
}

/// The JSON text of checkpoint `name` of `session`.
pub fn read(store: &Store, session: &str, name: &str) -> Result<String, CheckpointError> {
    check_name(name)?;
    let found: Option<String> = store.with(|c| {
        let mut stmt =
            c.prepare("SELECT data FROM workflow_checkpoints WHERE session_id = ?1 AND name = ?2")?;
        let mut rows = stmt.query((session, name))?;
        match rows.next()? {
            Some(row) => row.get(0).map(Some),
            None => Ok(None),
        }
    })?;
    match found {
        Some(data) => Ok(data),
        None => Err(CheckpointError::Unknown {
            name: name.to_owned(),
            known: names(store, session)?,
        }),
    }
}

/// The names of `session`'s checkpoints, oldest write first.
pub fn names(store: &Store, session: &str) -> Result<Vec<String>, StoreError> {
    store.with(|c| {
        let mut stmt = c.prepare(
            "SELECT name FROM workflow_checkpoints WHERE session_id = ?1 ORDER BY updated, name",
        )?;
        let rows = stmt.query_map([session], |r| r.get(0))?;
        rows.collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn a_checkpoint_is_written_read_back_and_replaced() {
        let (_d, store) = store();
        let w = write(&store, "s1", "plan", r#"{"step": 1, "todo": ["a"]}"#, 10).unwrap();
        assert!(w.created);
        assert_eq!(
            read(&store, "s1", "plan").unwrap(),
            r#"{"step":1,"todo":["a"]}"#
        );
        let w = write(&store, "s1", "plan", r#"{"step": 2}"#, 11).unwrap();
        assert!(!w.created);
        assert_eq!(read(&store, "s1", "plan").unwrap(), r#"{"step":2}"#);
        // Another session's are its own.
        assert!(matches!(
            read(&store, "s2", "plan"),
            Err(CheckpointError::Unknown { .. })
        ));
        write(&store, "s1", "notes", "[1,2]", 12).unwrap();
        assert_eq!(names(&store, "s1").unwrap(), ["plan", "notes"]);
    }

    #[test]
    fn bad_input_is_refused_with_what_to_do_and_changes_nothing() {
        let (_d, store) = store();
        write(&store, "s", "plan", "{}", 1).unwrap();
        let e = write(&store, "s", "plan", "{not json", 2).unwrap_err();
        assert!(matches!(e, CheckpointError::NotJson { .. }), "{e}");
        assert!(e.to_string().contains("not JSON"), "{e}");
        assert_eq!(read(&store, "s", "plan").unwrap(), "{}");

        let big = format!("\"{}\"", "x".repeat(MAX_DATA_BYTES));
        let e = write(&store, "s", "plan", &big, 3).unwrap_err();
        assert!(matches!(e, CheckpointError::TooBig { .. }), "{e}");
        assert_eq!(read(&store, "s", "plan").unwrap(), "{}");

        for bad in ["", " x", "a\nb", &"n".repeat(MAX_NAME_CHARS + 1)] {
            assert!(
                matches!(
                    write(&store, "s", bad, "{}", 4),
                    Err(CheckpointError::BadName(_))
                ),
                "{bad:?}"
            );
        }
        let e = read(&store, "s", "nope").unwrap_err();
        assert_eq!(e.to_string(), "no checkpoint \"nope\"; there are: plan");
    }

    #[test]
    fn a_session_keeps_at_most_the_limit_of_names_but_may_overwrite_them() {
        let (_d, store) = store();
        for i in 0..MAX_PER_SESSION {
            write(&store, "s", &format!("c{i}"), "1", i as i64).unwrap();
        }
        let e = write(&store, "s", "one-more", "1", 100).unwrap_err();
        assert!(matches!(e, CheckpointError::TooMany { .. }), "{e}");
        write(&store, "s", "c0", "2", 101).unwrap();
        assert_eq!(read(&store, "s", "c0").unwrap(), "2");
        assert_eq!(names(&store, "s").unwrap().len(), MAX_PER_SESSION);
        // Another session has its own count.
        write(&store, "t", "one-more", "1", 102).unwrap();
    }

    #[test]
    fn a_locked_database_is_a_locked_error_and_the_document_is_unchanged() {
        let (dir, store) = store();
        write(&store, "s", "plan", "1", 1).unwrap();
        let other = rusqlite::Connection::open(dir.path().join(crate::DB_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let e = write(&store, "s", "plan", "2", 2).unwrap_err();
        assert!(
            matches!(e, CheckpointError::Store(StoreError::Locked { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("locked by another process"), "{e}");
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(read(&store, "s", "plan").unwrap(), "1");
    }
}

//! Memories: short facts a human decided are worth keeping across sessions, each in one scope
//! (a project, or the user everywhere), found again by full-text search.
//!
//! The table `memories` holds them; `memories_fts` (FTS5, external content) indexes their text
//! and is kept in step by triggers, so every insert, edit and delete changes both in the same
//! transaction. Search ranks with bm25. Nothing here decides who may add one: a session's model
//! only proposes (`intendant_core::memory`), a human approves.
//!
//! A text is at most [`MAX_TEXT_BYTES`]: a longer one is refused before anything is written,
//! and the table refuses it too (a `CHECK`), whoever writes.

use std::fmt;
use std::str::FromStr;

use rusqlite::{ErrorCode, OptionalExtension, Row, params_from_iter};
use thiserror::Error;

use crate::{Store, StoreError};

pub mod proposals;

/// The most bytes of text one memory holds.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// The most bytes of one search query.
pub const MAX_QUERY_BYTES: usize = 1024;
/// The most memories one listing or search returns.
pub const MAX_LIMIT: usize = 200;

/// Where a memory applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The user's, in every project (`user`).
    User,
    /// One project, by its canonical absolute path (`project:/path/to/project`).
    Project(String),
}

impl Scope {
    /// The scope of the project at `root` (which should be canonical already).
    pub fn project(root: &std::path::Path) -> Scope {
        Scope::Project(root.to_string_lossy().into_owned())
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::User => f.write_str("user"),
            Scope::Project(path) => write!(f, "project:{path}"),
        }
    }
}

impl FromStr for Scope {
    type Err = MemoryError;

    fn from_str(s: &str) -> Result<Scope, MemoryError> {
        match s {
            "user" => Ok(Scope::User),
            _ => match s.strip_prefix("project:") {
                Some(path) if path.starts_with('/') && !path.contains('\0') => {
                    Ok(Scope::Project(path.to_owned()))
                }
                Some(_) | None => Err(MemoryError::BadScope(s.to_owned())),
            },
        }
    }
}

/// Who made a memory what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A human, through `intendant memory add|edit` or the dashboard (`human`).
    Human,
    /// A session's model proposed it and a human approved it (`session:<id>`).
    Session(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Human => f.write_str("human"),
            Source::Session(id) => write!(f, "session:{id}"),
        }
    }
}

impl Source {
    fn parse(s: &str) -> Source {
        match s.strip_prefix("session:") {
            Some(id) => Source::Session(id.to_owned()),
            // The table's CHECK allows only these two shapes.
            None => Source::Human,
        }
    }
}

/// One stored memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Its number, never reused.
    pub id: i64,
    /// Where it applies.
    pub scope: Scope,
    /// The fact.
    pub text: String,
    /// Who made it.
    pub source: Source,
    /// When it was added (UTC, RFC 3339 with milliseconds).
    pub created: String,
    /// When its text last changed (UTC).
    pub updated: String,
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The memory found.
    pub memory: Memory,
    /// Its bm25 rank: lower is a better match.
    pub rank: f64,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Found {
    /// Best match first.
    pub hits: Vec<Hit>,
    /// The query was not valid FTS5 syntax, so its words were searched as plain terms (all of
    /// them must appear).
    pub read_as_plain_terms: bool,
}

/// Which memories a listing or search covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ScopeFilter {
    /// Every scope.
    #[default]
    All,
    /// Only these scopes.
    Only(Vec<Scope>),
}

/// Why a memory operation failed; nothing was changed.
#[derive(Debug, Error)]
pub enum MemoryError {
    /// The text is longer than [`MAX_TEXT_BYTES`].
    #[error(
        "a memory holds at most {MAX_TEXT_BYTES} bytes of text and this one has {bytes}: nothing was stored (keep one short fact per memory)"
    )]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// The text is empty or only white space.
    #[error("a memory needs some text: nothing was stored")]
    Empty,
    /// A scope that is neither `user` nor `project:<absolute path>`.
    #[error("scope {0:?} is not `user` or `project:<absolute path>`")]
    BadScope(String),
    /// No memory has this id.
    #[error("there is no memory {0}")]
    NotFound(i64),
    /// The query is empty, or longer than [`MAX_QUERY_BYTES`].
    #[error("{0}")]
    BadQuery(String),
    /// [`proposals::MAX_PENDING`] proposals already wait for a human.
    #[error(
        "{} proposals already wait for a human in this state root",
        proposals::MAX_PENDING
    )]
    TooManyPending,
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The memories of a [`Store`].
#[derive(Debug, Clone)]
pub struct Memories {
    store: Store,
}

const COLUMNS: &str = "m.id, m.scope, m.text, m.source, m.created, m.updated";
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

impl Memories {
    /// The memories kept in `store`.
    pub fn new(store: Store) -> Memories {
        Memories { store }
    }

    /// The database they are in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Stores `text` in `scope`, made by `source`.
    pub fn add(&self, scope: &Scope, text: &str, source: &Source) -> Result<Memory, MemoryError> {
        check_text(text)?;
        let (scope, source) = (scope.to_string(), source.to_string());
        let id = self.store.write(|tx| {
            tx.execute(
                &format!(
                    "INSERT INTO memories (scope, text, source, created, updated) \
                     VALUES (?1, ?2, ?3, {NOW}, {NOW})"
                ),
                [&scope, text, &source],
            )?;
            Ok(tx.last_insert_rowid())
        })?;
        self.get(id)?.ok_or(MemoryError::NotFound(id))
    }

    /// The memory `id`, if there is one.
    pub fn get(&self, id: i64) -> Result<Option<Memory>, MemoryError> {
        Ok(self.store.with(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM memories m WHERE m.id = ?1"),
                [id],
                memory_of,
            )
            .optional()
        })?)
    }

    /// Replaces the text of memory `id` (a human's edit: the source becomes `human`).
    pub fn edit(&self, id: i64, text: &str) -> Result<Memory, MemoryError> {
        check_text(text)?;
        let changed = self.store.write(|tx| {
            tx.execute(
                &format!(
                    "UPDATE memories SET text = ?2, source = 'human', updated = {NOW} WHERE id = ?1"
                ),
                rusqlite::params![id, text],
            )
        })?;
        if changed == 0 {
            return Err(MemoryError::NotFound(id));
        }
        self.get(id)?.ok_or(MemoryError::NotFound(id))
    }

    /// Deletes memory `id`, returning what it was.
    pub fn remove(&self, id: i64) -> Result<Memory, MemoryError> {
        let gone = self.store.write(|tx| {
            let memory = tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM memories m WHERE m.id = ?1"),
                    [id],
                    memory_of,
                )
                .optional()?;
            if memory.is_some() {
                tx.execute("DELETE FROM memories WHERE id = ?1", [id])?;
            }
            Ok(memory)
        })?;
        gone.ok_or(MemoryError::NotFound(id))
    }

    /// The memories of `filter`, most recently changed first, at most `limit` (capped at
    /// [`MAX_LIMIT`]).
    pub fn list(&self, filter: &ScopeFilter, limit: usize) -> Result<Vec<Memory>, MemoryError> {
        let (clause, scopes) = scope_clause(filter, 1);
        let sql = format!(
            "SELECT {COLUMNS} FROM memories m WHERE {clause} ORDER BY m.updated DESC, m.id DESC LIMIT {}",
            limit.min(MAX_LIMIT)
        );
        Ok(self.store.with(|c| {
            c.prepare(&sql)?
                .query_map(params_from_iter(&scopes), memory_of)?
                .collect()
        })?)
    }

    /// How many memories `filter` covers.
    pub fn count(&self, filter: &ScopeFilter) -> Result<u64, MemoryError> {
        let (clause, scopes) = scope_clause(filter, 1);
        let sql = format!("SELECT count(*) FROM memories m WHERE {clause}");
        let n: i64 = self
            .store
            .with(|c| c.query_row(&sql, params_from_iter(&scopes), |r| r.get(0)))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The memories of `filter` matching `query` (FTS5 syntax: words, `"phrases"`, `OR`,
    /// `NOT`, `prefix*`), best bm25 match first, at most `limit` (capped at [`MAX_LIMIT`]). A
    /// query that is not valid FTS5 syntax is searched as its plain words instead, and
    /// [`Found::read_as_plain_terms`] says so.
    pub fn search(
        &self,
        query: &str,
        filter: &ScopeFilter,
        limit: usize,
    ) -> Result<Found, MemoryError> {
        if query.trim().is_empty() {
            return Err(MemoryError::BadQuery("the search query is empty".into()));
        }
        if query.len() > MAX_QUERY_BYTES {
            return Err(MemoryError::BadQuery(format!(
                "the search query has {} bytes; at most {MAX_QUERY_BYTES}",
                query.len()
            )));
        }
        match self.search_fts(query, filter, limit) {
            Ok(hits) => Ok(Found {
                hits,
                read_as_plain_terms: false,
            }),
            Err(e) if is_query_error(&e) => {
                let plain = plain_terms(query);
                if plain.is_empty() {
                    return Err(MemoryError::BadQuery(format!(
                        "the search query {query:?} has no words to search for"
                    )));
                }
                let hits = self
                    .search_fts(&plain, filter, limit)
                    .map_err(|e| StoreError::from_sqlite(self.store.path(), e))?;
                Ok(Found {
                    hits,
                    read_as_plain_terms: true,
                })
            }
            Err(e) => Err(StoreError::from_sqlite(self.store.path(), e).into()),
        }
    }

    fn search_fts(
        &self,
        query: &str,
        filter: &ScopeFilter,
        limit: usize,
    ) -> rusqlite::Result<Vec<Hit>> {
        let (clause, scopes) = scope_clause(filter, 2);
        let sql = format!(
            "SELECT {COLUMNS}, bm25(memories_fts) AS rank FROM memories_fts \
             JOIN memories m ON m.id = memories_fts.rowid \
             WHERE memories_fts MATCH ?1 AND {clause} ORDER BY rank, m.id LIMIT {}",
            limit.min(MAX_LIMIT)
        );
        let params = std::iter::once(query.to_owned()).chain(scopes);
        // Straight on the connection: a syntax error must come back unsorted to be told apart.
        let conn = self.store.lock();
        let mut statement = conn.prepare(&sql)?;
        let rows = statement.query_map(params_from_iter(params), |row| {
            Ok(Hit {
                memory: memory_of(row)?,
                rank: row.get(6)?,
            })
        })?;
        rows.collect()
    }
}

/// Refuses an empty or too long text.
fn check_text(text: &str) -> Result<(), MemoryError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(MemoryError::TooLong { bytes: text.len() });
    }
    if text.trim().is_empty() {
        return Err(MemoryError::Empty);
    }
    Ok(())
}

/// The `WHERE` condition of `filter` (its parameters numbered from `first`) and its values.
fn scope_clause(filter: &ScopeFilter, first: usize) -> (String, Vec<String>) {
    match filter {
        ScopeFilter::All => ("1".to_owned(), Vec::new()),
        ScopeFilter::Only(scopes) if scopes.is_empty() => ("0".to_owned(), Vec::new()),
        ScopeFilter::Only(scopes) => {
            let marks: Vec<String> = (first..first + scopes.len())
                .map(|n| format!("?{n}"))
                .collect();
            (
                format!("m.scope IN ({})", marks.join(", ")),
                scopes.iter().map(Scope::to_string).collect(),
            )
        }
    }
}

/// Whether SQLite refused the query itself (FTS5 syntax, an unknown column filter), not the
/// database.
fn is_query_error(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(ErrorCode::Unknown)
}

/// `query`'s words, each quoted as an FTS5 string, all required.
fn plain_terms(query: &str) -> String {
    query
        .split_whitespace()
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn memory_of(row: &Row<'_>) -> rusqlite::Result<Memory> {
    let scope: String = row.get(1)?;
    let source: String = row.get(3)?;
    Ok(Memory {
        id: row.get(0)?,
        scope: scope.parse().map_err(|e: MemoryError| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e))
        })?,
        text: row.get(2)?,
        source: Source::parse(&source),
        created: row.get(4)?,
        updated: row.get(5)?,
    })
}

/// The schema: the table, its full-text index and the triggers keeping the index in step.
pub(crate) const MIGRATION_SQL: &str = "
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL CHECK (scope = 'user' OR scope GLOB 'project:/*'),
    text TEXT NOT NULL CHECK (length(CAST(text AS BLOB)) BETWEEN 1 AND 16384),
    source TEXT NOT NULL CHECK (source = 'human' OR source GLOB 'session:?*'),
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE INDEX memories_by_scope ON memories (scope, updated);
CREATE VIRTUAL TABLE memories_fts USING fts5(
    text, content = 'memories', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_added AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER memories_removed AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER memories_edited AFTER UPDATE OF text ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
";

#[cfg(test)]
mod tests;

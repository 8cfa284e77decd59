//! The memories as the daemon's human surfaces (the dashboard's Memory page) list, search and
//! change them ([`MemoryOp`], `docs/memory.md`): the same store calls as `intendant memory`, on
//! the daemon's one database connection, on a blocking thread. What a human adds or edits here
//! is `human`'s. A session's model never reaches this: its tools are `intendant_core::memory`'s,
//! and every surface that reaches this refuses a session's processes.

use intendant_protocol::daemon::{HostError, HostErrorCode};
use intendant_protocol::memory::{MemoryAnswer, MemoryEntry, MemoryOp};
use intendant_store::memory::{Memories, Memory, MemoryError, Scope, ScopeFilter, Source};
use intendant_store::{Store, StoreError};

use super::Supervisor;

/// What a listing or search returns unless told.
const DEFAULT_LIMIT: usize = 50;
/// The most a listing or search returns.
const MAX_LIMIT: u32 = 200;

fn memory_error(e: MemoryError) -> HostError {
    let code = match &e {
        MemoryError::NotFound(_)
        | MemoryError::TooLong { .. }
        | MemoryError::Empty
        | MemoryError::BadScope(_)
        | MemoryError::BadQuery(_) => HostErrorCode::InvalidRequest,
        MemoryError::Store(StoreError::Locked { .. }) => HostErrorCode::Busy,
        MemoryError::Store(_) => HostErrorCode::Internal,
    };
    HostError::new(code, e.to_string())
}

fn invalid(message: String) -> HostError {
    HostError::new(HostErrorCode::InvalidRequest, message)
}

fn entry(m: &Memory, rank: Option<f64>) -> MemoryEntry {
    MemoryEntry {
        id: u64::try_from(m.id).unwrap_or(0),
        scope: m.scope.to_string(),
        text: m.text.clone(),
        source: m.source.to_string(),
        created: m.created.clone(),
        updated: m.updated.clone(),
        rank,
    }
}

/// `all` (or nothing), `user`, or `project:<absolute path>`.
fn filter(scope: Option<&str>) -> Result<ScopeFilter, HostError> {
    match scope.map(str::trim) {
        None | Some("" | "all") => Ok(ScopeFilter::All),
        Some(s) => Ok(ScopeFilter::Only(vec![
            s.parse::<Scope>().map_err(memory_error)?,
        ])),
    }
}

fn limit(limit: Option<u32>) -> Result<usize, HostError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n as usize),
        Some(n) => Err(invalid(format!(
            "limit {n} is not between 1 and {MAX_LIMIT}"
        ))),
    }
}

fn id_of(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// Runs `op` on the database (blocking).
fn apply(store: Store, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
    let memories = Memories::new(store);
    let one = |m: Result<Memory, MemoryError>| {
        m.map(|m| MemoryAnswer {
            memories: vec![entry(&m, None)],
            note: None,
        })
        .map_err(memory_error)
    };
    match op {
        MemoryOp::List { scope, limit: n } => {
            let list = memories
                .list(&filter(scope.as_deref())?, limit(n)?)
                .map_err(memory_error)?;
            Ok(MemoryAnswer {
                memories: list.iter().map(|m| entry(m, None)).collect(),
                note: None,
            })
        }
        MemoryOp::Search {
            query,
            scope,
            limit: n,
        } => {
            let found = memories
                .search(&query, &filter(scope.as_deref())?, limit(n)?)
                .map_err(memory_error)?;
            Ok(MemoryAnswer {
                memories: found
                    .hits
                    .iter()
                    .map(|h| entry(&h.memory, Some(h.rank)))
                    .collect(),
                note: found.read_as_plain_terms.then(|| {
                    "the query is not valid FTS5 syntax: its words were searched as plain terms"
                        .to_owned()
                }),
            })
        }
        MemoryOp::Show { id } => one(memories
            .get(id_of(id))
            .and_then(|m| m.ok_or(MemoryError::NotFound(id_of(id))))),
        MemoryOp::Add { scope, text } => {
            let scope = scope.trim().parse::<Scope>().map_err(memory_error)?;
            one(memories.add(&scope, &text, &Source::Human))
        }
        MemoryOp::Edit { id, text } => one(memories.edit(id_of(id), &text)),
        MemoryOp::Remove { id } => one(memories.remove(id_of(id))),
    }
}

impl Supervisor {
    /// One memory operation from a human's surface.
    pub(super) async fn memory_op(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        let shared = self.inner.env.store.clone();
        tokio::task::spawn_blocking(move || {
            let store = shared
                .get()
                .map_err(|e| memory_error(MemoryError::Store(e)))?;
            apply(store, op)
        })
        .await
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?
    }
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
    fn a_human_adds_finds_edits_and_removes_a_memory() {
        let (_dir, store) = store();
        let added = apply(
            store.clone(),
            MemoryOp::Add {
                scope: "project:/src/app".into(),
                text: "tabs, never spaces".into(),
            },
        )
        .unwrap();
        let m = &added.memories[0];
        assert_eq!(
            (m.scope.as_str(), m.source.as_str()),
            ("project:/src/app", "human")
        );
        let found = apply(
            store.clone(),
            MemoryOp::Search {
                query: "tabs".into(),
                scope: Some("project:/src/app".into()),
                limit: None,
            },
        )
        .unwrap();
        assert_eq!(found.memories.len(), 1);
        assert!(found.memories[0].rank.is_some());
        let none = apply(
            store.clone(),
            MemoryOp::Search {
                query: "tabs".into(),
                scope: Some("user".into()),
                limit: None,
            },
        )
        .unwrap();
        assert!(none.memories.is_empty());
        let plain = apply(
            store.clone(),
            MemoryOp::Search {
                query: "tabs AND (".into(),
                scope: None,
                limit: None,
            },
        )
        .unwrap();
        assert!(plain.note.unwrap().contains("plain terms"));
        let edited = apply(
            store.clone(),
            MemoryOp::Edit {
                id: m.id,
                text: "spaces after all".into(),
            },
        )
        .unwrap();
        assert_eq!(edited.memories[0].text, "spaces after all");
        apply(store.clone(), MemoryOp::Remove { id: m.id }).unwrap();
        let gone = apply(store, MemoryOp::Show { id: m.id }).unwrap_err();
        assert!(gone.message.contains("no memory"), "{}", gone.message);
    }

    #[test]
    fn bad_input_is_one_clear_refusal_that_stores_nothing() {
        let (_dir, store) = store();
        let refusals = [
            MemoryOp::Add {
                scope: "all".into(),
                text: "x".into(),
            },
            MemoryOp::Add {
                scope: "project:relative".into(),
                text: "x".into(),
            },
            MemoryOp::Add {
                scope: "user".into(),
                text: " \n".into(),
            },
            MemoryOp::Add {
                scope: "user".into(),
                text: "x".repeat(16 * 1024 + 1),
            },
            MemoryOp::Search {
                query: String::new(),
                scope: None,
                limit: None,
            },
            MemoryOp::List {
                scope: Some("everyone".into()),
                limit: None,
            },
            MemoryOp::List {
                scope: None,
                limit: Some(0),
            },
            MemoryOp::Edit {
                id: 9,
                text: "x".into(),
            },
        ];
        for op in refusals {
            let err = apply(store.clone(), op.clone()).unwrap_err();
            assert!(err.code == HostErrorCode::InvalidRequest, "{op:?}: {err:?}");
        }
        let all = apply(
            store,
            MemoryOp::List {
                scope: None,
                limit: None,
            },
        )
        .unwrap();
        assert!(all.memories.is_empty());
    }
}

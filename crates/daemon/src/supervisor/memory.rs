//! The memories as the daemon's human surfaces (the dashboard's Memory page) list, search and
//! change them ([`MemoryOp`], `docs/memory.md`): the same store calls as `intendant memory`, on
//! the daemon's one database connection, on a blocking thread. What a human adds or edits here
//! is `human`'s. A session's model never reaches this: its tools are `intendant_core::memory`'s,
//! and every surface that reaches this refuses a session's processes.
//!
//! Memory proposals whose session no longer runs here (it ended, or the daemon restarted) wait
//! in the approval queue under the pseudo-session [`MEMORY_SESSION`], numbered by the
//! proposal, until a human approves (stored) or denies or skips (dropped) one; a running
//! session's own proposals are its approvals.

use intendant_core::preview::escape_invisible;
use intendant_protocol::daemon::{HostError, HostErrorCode, PendingApproval};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, Verdict};
use intendant_protocol::memory::{MEMORY_SESSION, MemoryAnswer, MemoryEntry, MemoryOp};
use intendant_store::memory::proposals::{Proposal, ProposalError, Proposals};
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
        MemoryError::TooManyPending => HostErrorCode::Busy,
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

/// A proposal waiting in the queue as every surface shows it: the whole text, escaped.
fn pending_approval(p: &Proposal) -> PendingApproval {
    let project = match &p.scope {
        Scope::Project(path) => path.clone(),
        Scope::User => String::new(),
    };
    let one_line: String = escape_invisible(&p.text.replace('\n', " "))
        .chars()
        .take(160)
        .collect();
    PendingApproval {
        id: u64::try_from(p.id).unwrap_or(0),
        session_id: MEMORY_SESSION.to_owned(),
        project,
        command_preview: format!("remember ({}): {one_line}", p.scope),
        detail: Some(format!(
            "Session {} proposed this memory for {} and ended before anyone answered:\n\n{}\n\n\
             approve: store it (found later by memory_search in this scope); deny or skip: drop \
             it. Only a human approves a memory.",
            p.session_id,
            p.scope,
            escape_invisible(&p.text)
        )),
        category: ActionCategory::Memory,
        seq: 0,
        requested: p.created.clone(),
    }
}

fn proposal_error(e: ProposalError) -> HostError {
    match e {
        ProposalError::Unknown(id) => HostError::new(
            HostErrorCode::UnknownApproval,
            format!("no memory proposal {id} waits for an answer"),
        ),
        ProposalError::Answered { .. } => {
            HostError::new(HostErrorCode::AlreadyAnswered, e.to_string())
        }
        ProposalError::Memory(e) => memory_error(e),
    }
}

impl Supervisor {
    /// One memory operation from a human's surface.
    pub(super) async fn memory_op(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        self.with_store(move |store| apply(store, op)).await
    }

    /// Runs `f` with the database on a blocking thread.
    async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(Store) -> Result<T, HostError> + Send + 'static,
    ) -> Result<T, HostError> {
        let shared = self.inner.env.store.clone();
        tokio::task::spawn_blocking(move || {
            let store = shared
                .get()
                .map_err(|e| memory_error(MemoryError::Store(e)))?;
            f(store)
        })
        .await
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?
    }

    /// Whether session `id` runs here now (its own proposals are its approvals then).
    fn runs_here(&self, id: &str) -> bool {
        let state = self.inner.lock();
        state.sessions.get(id).is_some_and(super::Entry::runs_here)
    }

    /// The proposals waiting for a human whose session does not run here, as approvals (none
    /// when the database cannot be read: the sessions' approvals are still listed).
    pub(super) async fn pending_proposals(&self) -> Vec<PendingApproval> {
        let pending = self
            .with_store(|store| Proposals::new(store).pending().map_err(memory_error))
            .await
            .unwrap_or_default();
        pending
            .iter()
            .filter(|p| !self.runs_here(&p.session_id))
            .map(pending_approval)
            .collect()
    }

    /// A human's answer to a proposal waiting under [`MEMORY_SESSION`]: approve (or approve
    /// all, which approves this one only) stores it, deny or skip drops it; anything else is
    /// refused.
    pub(super) async fn answer_proposal(&self, msg: ControlMsg) -> Result<(), HostError> {
        let (id, approve) = match msg {
            ControlMsg::Approve { id } | ControlMsg::ApproveAll { id } => (id, true),
            ControlMsg::Deny { id } | ControlMsg::Skip { id } => (id, false),
            other => {
                return Err(HostError::new(
                    HostErrorCode::InvalidRequest,
                    format!(
                        "a memory proposal is approved, denied or skipped, not answered with {}",
                        other.name()
                    ),
                ));
            }
        };
        let row = id_of(id);
        let unknown = || {
            HostError::new(
                HostErrorCode::UnknownApproval,
                format!("no memory proposal {id} waits for an answer"),
            )
        };
        let proposal = self
            .with_store(move |store| Proposals::new(store).get(row).map_err(memory_error))
            .await?
            .ok_or_else(unknown)?;
        if self.runs_here(&proposal.session_id) {
            // Its session asks it itself: answer that approval, so the session hears of it.
            return Err(unknown());
        }
        self.with_store(move |store| {
            let proposals = Proposals::new(store);
            if approve {
                proposals.approve(row).map(drop)
            } else {
                proposals.drop(row).map(drop)
            }
            .map_err(proposal_error)
        })
        .await?;
        // Followers of the queue (an open dashboard) read it again without this proposal.
        let verdict = if approve {
            Verdict::Approve
        } else {
            Verdict::Deny
        };
        self.inner
            .publish(MEMORY_SESSION, &AppEvent::ApprovalResolved { id, verdict });
        Ok(())
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

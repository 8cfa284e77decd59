//! Memory proposals: a fact a session's model proposed, kept from the moment it is proposed
//! until a human answers it. Keeping them here, not only in the session's memory, is what lets a
//! proposal outlive its session and the daemon (a daemon restarted, or killed, finds it pending
//! again), like a scheduled session waiting for its owner.
//!
//! A proposal is answered once: [`Proposals::approve`] stores the memory (with the session as
//! its source) and marks the proposal in the same write transaction; [`Proposals::drop`] marks
//! it dropped. Either refuses a proposal that is no longer pending, so two surfaces (or two
//! daemons) answering at once never store it twice.

use rusqlite::{OptionalExtension, Row};

use super::{Memory, MemoryError, NOW, Scope, Source, check_text};
use crate::Store;

/// The most proposals a state root keeps waiting for a human, over every session: a daemon keeps
/// a session's unanswered proposals after it ends, and each is an approval every surface lists
/// (up to about 32 KiB with its text), so without a bound a long run of sessions grew the
/// approval queue, and every dashboard's read of it, without end.
pub const MAX_PENDING: usize = 100;

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalState {
    /// Waiting for a human.
    Pending,
    /// A human approved it: it is a memory.
    Approved,
    /// A human denied or skipped it, or nobody could answer it any more: nothing was stored.
    Dropped,
}

impl ProposalState {
    /// Its name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            ProposalState::Pending => "pending",
            ProposalState::Approved => "approved",
            ProposalState::Dropped => "dropped",
        }
    }

    fn parse(s: &str) -> ProposalState {
        match s {
            "approved" => ProposalState::Approved,
            "dropped" => ProposalState::Dropped,
            // The table's CHECK allows only the three names.
            _ => ProposalState::Pending,
        }
    }
}

/// One proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// Its number, never reused.
    pub id: i64,
    /// Where it would apply.
    pub scope: Scope,
    /// The fact.
    pub text: String,
    /// The session whose model proposed it.
    pub session_id: String,
    /// When it was proposed (UTC, RFC 3339 with milliseconds).
    pub created: String,
    /// Where it stands.
    pub state: ProposalState,
    /// The memory it became, once approved.
    pub memory_id: Option<i64>,
}

/// Why a proposal could not be answered; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ProposalError {
    /// No proposal has this id.
    #[error("there is no memory proposal {0}")]
    Unknown(i64),
    /// It was answered already.
    #[error("memory proposal {id} was already answered (it is {})", state.as_str())]
    Answered {
        /// The proposal.
        id: i64,
        /// What it is now.
        state: ProposalState,
    },
    /// The text, or the database, failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

const COLUMNS: &str = "id, scope, text, session_id, created, state, memory_id";

/// The memory proposals of a [`Store`].
#[derive(Debug, Clone)]
pub struct Proposals {
    store: Store,
}

impl Proposals {
    /// The proposals kept in `store`.
    pub fn new(store: Store) -> Proposals {
        Proposals { store }
    }

    /// Keeps session `session_id`'s proposal of `text` for `scope`, pending; refused while
    /// [`MAX_PENDING`] proposals wait.
    pub fn propose(
        &self,
        scope: &Scope,
        text: &str,
        session_id: &str,
    ) -> Result<Proposal, MemoryError> {
        check_text(text)?;
        let scope = scope.to_string();
        let id = self
            .store
            .write(|tx| {
                // Counted in the write transaction: two daemons proposing at once never pass it.
                let pending: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM memory_proposals WHERE state = 'pending'",
                    [],
                    |row| row.get(0),
                )?;
                if usize::try_from(pending).unwrap_or(usize::MAX) >= MAX_PENDING {
                    return Ok(None);
                }
                tx.execute(
                    &format!(
                        "INSERT INTO memory_proposals (scope, text, session_id, created, state) \
                     VALUES (?1, ?2, ?3, {NOW}, 'pending')"
                    ),
                    [&scope, text, session_id],
                )?;
                Ok(Some(tx.last_insert_rowid()))
            })?
            .ok_or(MemoryError::TooManyPending)?;
        self.get(id)?.ok_or(MemoryError::NotFound(id))
    }

    /// The proposal `id`, if there is one.
    pub fn get(&self, id: i64) -> Result<Option<Proposal>, MemoryError> {
        Ok(self.store.with(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM memory_proposals WHERE id = ?1"),
                [id],
                proposal_of,
            )
            .optional()
        })?)
    }

    /// Every proposal still waiting for a human, oldest first.
    pub fn pending(&self) -> Result<Vec<Proposal>, MemoryError> {
        Ok(self.store.with(|c| {
            c.prepare(&format!(
                "SELECT {COLUMNS} FROM memory_proposals WHERE state = 'pending' ORDER BY id"
            ))?
            .query_map([], proposal_of)?
            .collect()
        })?)
    }

    /// A human approves proposal `id`: it becomes a memory of its scope with its session as the
    /// source, in the transaction that marks it approved.
    pub fn approve(&self, id: i64) -> Result<Memory, ProposalError> {
        let outcome = self.store.write(|tx| {
            let Some(p) = tx
                .query_row(
                    &format!("SELECT {COLUMNS} FROM memory_proposals WHERE id = ?1"),
                    [id],
                    proposal_of,
                )
                .optional()?
            else {
                return Ok(Err(ProposalError::Unknown(id)));
            };
            if p.state != ProposalState::Pending {
                return Ok(Err(ProposalError::Answered { id, state: p.state }));
            }
            let source = Source::Session(p.session_id.clone()).to_string();
            tx.execute(
                &format!(
                    "INSERT INTO memories (scope, text, source, created, updated) \
                     VALUES (?1, ?2, ?3, {NOW}, {NOW})"
                ),
                [&p.scope.to_string(), &p.text, &source],
            )?;
            let memory = tx.last_insert_rowid();
            tx.execute(
                &format!(
                    "UPDATE memory_proposals SET state = 'approved', memory_id = ?2, \
                     answered = {NOW} WHERE id = ?1"
                ),
                [id, memory],
            )?;
            Ok(Ok(memory))
        });
        let memory = outcome.map_err(MemoryError::from)??;
        let memories = super::Memories::new(self.store.clone());
        Ok(memories.get(memory)?.ok_or(MemoryError::NotFound(memory))?)
    }

    /// Proposal `id` is dropped (a human denied or skipped it, or nobody can answer it any
    /// more): nothing is stored.
    pub fn drop(&self, id: i64) -> Result<Proposal, ProposalError> {
        let outcome = self.store.write(|tx| {
            let state: Option<String> = tx
                .query_row(
                    "SELECT state FROM memory_proposals WHERE id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .optional()?;
            match state.as_deref().map(ProposalState::parse) {
                None => Ok(Err(ProposalError::Unknown(id))),
                Some(ProposalState::Pending) => {
                    tx.execute(
                        &format!(
                            "UPDATE memory_proposals SET state = 'dropped', answered = {NOW} \
                             WHERE id = ?1"
                        ),
                        [id],
                    )?;
                    Ok(Ok(()))
                }
                Some(state) => Ok(Err(ProposalError::Answered { id, state })),
            }
        });
        outcome.map_err(MemoryError::from)??;
        self.get(id)?.ok_or(ProposalError::Unknown(id))
    }
}

fn proposal_of(row: &Row<'_>) -> rusqlite::Result<Proposal> {
    let scope: String = row.get(1)?;
    let state: String = row.get(5)?;
    Ok(Proposal {
        id: row.get(0)?,
        scope: scope.parse().map_err(|e: MemoryError| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e))
        })?,
        text: row.get(2)?,
        session_id: row.get(3)?,
        created: row.get(4)?,
        state: ProposalState::parse(&state),
        memory_id: row.get(6)?,
    })
}

/// The schema: proposals, with the same bounds on scope and text as the memories themselves.
pub(crate) const MIGRATION_SQL: &str = "
CREATE TABLE memory_proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL CHECK (scope = 'user' OR scope GLOB 'project:/*'),
    text TEXT NOT NULL CHECK (length(CAST(text AS BLOB)) BETWEEN 1 AND 16384),
    session_id TEXT NOT NULL CHECK (length(session_id) > 0),
    created TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'dropped')),
    memory_id INTEGER,
    answered TEXT
);
CREATE INDEX memory_proposals_pending ON memory_proposals (state, id);
";

#[cfg(test)]
mod tests {
    use super::*;

    fn proposals() -> (tempfile::TempDir, Proposals) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, Proposals::new(store))
    }

    #[test]
    fn a_proposal_is_kept_until_answered_once() {
        let (dir, proposals) = proposals();
        let p = proposals.propose(&Scope::User, "use tabs", "s-1").unwrap();
        assert_eq!(p.state, ProposalState::Pending);
        // Another connection (a daemon started again) finds it pending.
        let again = Proposals::new(Store::open(dir.path()).unwrap());
        assert_eq!(again.pending().unwrap(), vec![p.clone()]);
        let memory = again.approve(p.id).unwrap();
        assert_eq!(memory.source, Source::Session("s-1".into()));
        assert_eq!(memory.text, "use tabs");
        assert!(matches!(
            proposals.approve(p.id),
            Err(ProposalError::Answered {
                state: ProposalState::Approved,
                ..
            })
        ));
        assert!(matches!(
            proposals.drop(p.id),
            Err(ProposalError::Answered { .. })
        ));
        let memories = super::super::Memories::new(proposals.store.clone());
        assert_eq!(
            memories.count(&super::super::ScopeFilter::All).unwrap(),
            1,
            "stored once"
        );
        assert_eq!(
            proposals.get(p.id).unwrap().unwrap().memory_id,
            Some(memory.id)
        );
        assert!(proposals.pending().unwrap().is_empty());
    }

    #[test]
    fn a_state_root_keeps_at_most_max_pending_proposals_waiting() {
        let (dir, proposals) = proposals();
        let mut kept = Vec::new();
        for n in 0..MAX_PENDING {
            let session = format!("s-{}", n % 7);
            kept.push(proposals.propose(&Scope::User, "a fact", &session).unwrap());
        }
        // From any session, and from another connection (a second daemon) alike.
        let other = Proposals::new(Store::open(dir.path()).unwrap());
        for p in [&proposals, &other] {
            let refused = p.propose(&Scope::User, "one more", "s-new").unwrap_err();
            assert!(matches!(refused, MemoryError::TooManyPending));
            assert!(
                refused.to_string().contains("100 proposals already wait"),
                "{refused}"
            );
        }
        assert_eq!(proposals.pending().unwrap().len(), MAX_PENDING);
        // One answered makes room for one.
        proposals.drop(kept[0].id).unwrap();
        other.propose(&Scope::User, "now it fits", "s-new").unwrap();
        assert!(
            proposals
                .propose(&Scope::User, "not this", "s-new")
                .is_err()
        );
    }

    #[test]
    fn a_dropped_proposal_stores_nothing_and_bad_ones_are_refused() {
        let (_dir, proposals) = proposals();
        let p = proposals
            .propose(&Scope::Project("/src/app".into()), "x", "s-1")
            .unwrap();
        assert_eq!(proposals.drop(p.id).unwrap().state, ProposalState::Dropped);
        assert!(matches!(
            proposals.approve(p.id),
            Err(ProposalError::Answered { .. })
        ));
        assert!(matches!(
            proposals.approve(99),
            Err(ProposalError::Unknown(99))
        ));
        assert!(matches!(
            proposals.propose(&Scope::User, &"x".repeat(10 << 20), "s-1"),
            Err(MemoryError::TooLong { .. })
        ));
        assert!(matches!(
            proposals.propose(&Scope::User, " ", "s-1"),
            Err(MemoryError::Empty)
        ));
        let memories = super::super::Memories::new(proposals.store.clone());
        assert_eq!(memories.count(&super::super::ScopeFilter::All).unwrap(), 0);
        assert!(proposals.pending().unwrap().is_empty());
    }
}

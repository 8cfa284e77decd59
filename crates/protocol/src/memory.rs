//! The memories on the wire, for the daemon's surfaces (the dashboard's Memory page): one
//! operation ([`MemoryOp`]) answered with the memories it listed, found or changed
//! ([`MemoryAnswer`]). A human's surface only: a session's model has its own tools
//! (`memory_search`, `memory_read`, `memory_propose`) and never reaches these (`docs/memory.md`).

use serde::{Deserialize, Serialize};

/// The session id a memory proposal is filed under in the daemon's approval queue once its
/// session has ended (or the daemon restarted): answered there by a human, with the proposal's
/// own number (never a real session's id: those are timestamps with a random suffix).
pub const MEMORY_SESSION: &str = "memory";

/// One memory as a surface shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Its number, never reused.
    pub id: u64,
    /// `user` or `project:<absolute path>`.
    pub scope: String,
    /// The fact, whole.
    pub text: String,
    /// `human`, or `session:<id>` (proposed by that session, approved by a human).
    pub source: String,
    /// When it was added (UTC, RFC 3339).
    pub created: String,
    /// When its text last changed (UTC, RFC 3339).
    pub updated: String,
    /// In a search: its bm25 rank (lower is a better match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<f64>,
}

/// One operation on the memories. `scope` is `all` (the default), `user`, or
/// `project:<absolute path>`; `limit` 1 to 200 (default 50).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum MemoryOp {
    /// The memories of a scope, most recently changed first.
    List {
        /// Which scope.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// At most this many.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// Full-text search (FTS5 syntax; a query that is not is read as plain words), best first.
    Search {
        /// The query.
        query: String,
        /// Which scope.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// At most this many.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// One memory.
    Show {
        /// Its id.
        id: u64,
    },
    /// A human adds a memory (its source is `human`).
    Add {
        /// `user` or `project:<absolute path>` (not `all`).
        scope: String,
        /// The fact (1 byte to 16 KiB).
        text: String,
    },
    /// A human replaces a memory's text (its source becomes `human`).
    Edit {
        /// Its id.
        id: u64,
        /// The new text.
        text: String,
    },
    /// A human deletes a memory.
    Remove {
        /// Its id.
        id: u64,
    },
}

/// What a [`MemoryOp`] answers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MemoryAnswer {
    /// The memories listed, found or changed (a removal: what it was).
    pub memories: Vec<MemoryEntry>,
    /// Said when a search's query was not FTS5 syntax and was read as plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_ops_have_stable_wire_names() {
        let op: MemoryOp =
            serde_json::from_str(r#"{"action":"search","query":"tabs","scope":"user"}"#).unwrap();
        assert_eq!(
            op,
            MemoryOp::Search {
                query: "tabs".into(),
                scope: Some("user".into()),
                limit: None
            }
        );
        for (op, name) in [
            (
                MemoryOp::List {
                    scope: None,
                    limit: None,
                },
                "list",
            ),
            (MemoryOp::Show { id: 1 }, "show"),
            (
                MemoryOp::Add {
                    scope: "user".into(),
                    text: "t".into(),
                },
                "add",
            ),
            (
                MemoryOp::Edit {
                    id: 1,
                    text: "t".into(),
                },
                "edit",
            ),
            (MemoryOp::Remove { id: 1 }, "remove"),
        ] {
            assert_eq!(serde_json::to_value(&op).unwrap()["action"], name);
        }
        assert!(serde_json::from_str::<MemoryOp>(r#"{"action":"approve","id":1}"#).is_err());
        assert!(serde_json::from_str::<MemoryOp>(r#"{"action":"add","text":"t"}"#).is_err());
    }
}

//! Rewinding a session, as every surface asks for it (the control socket's `rewind`, `intendant
//! ctl rewind`, the dashboard, MCP's `rewind` tool) and is answered: [`RewindRequest`] in,
//! [`RewindReport`] out. A request with `preview` changes nothing and says what a rewind would
//! change (the files and the diff), which is what the dashboard shows before it rewinds.

use serde::{Deserialize, Serialize};

use crate::closed_set::closed_set;

closed_set! {
    /// How one path differs between two checkpoints.
    pub enum ChangeKind ("change kind") {
        /// It appeared.
        Added = "added",
        /// Its content or mode changed.
        Modified = "modified",
        /// It went away.
        Deleted = "deleted",
        /// It changed kind (a file became a link, or back).
        TypeChanged = "type_changed",
    }
}

impl ChangeKind {
    /// One letter, as `git status --short` shows it.
    pub fn letter(self) -> char {
        match self {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
            ChangeKind::TypeChanged => 'T',
        }
    }
}

closed_set! {
    /// What a rewind puts back.
    pub enum RewindScope ("rewind scope") {
        /// The project's files and the conversation (the default).
        Both = "both",
        /// Only the project's files.
        Code = "code",
        /// Only the conversation: the next follow-up or resume continues from before the turn.
        Conversation = "conversation",
    }
}

impl RewindScope {
    /// Whether files are restored.
    pub fn code(self) -> bool {
        match self {
            RewindScope::Both | RewindScope::Code => true,
            RewindScope::Conversation => false,
        }
    }

    /// Whether the conversation is cut back.
    pub fn conversation(self) -> bool {
        match self {
            RewindScope::Both | RewindScope::Conversation => true,
            RewindScope::Code => false,
        }
    }
}

/// A rewind (or its undo, or a preview of either) of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindRequest {
    /// The session.
    pub session_id: String,
    /// Rewind to before this turn (as `intendant checkpoints` numbers it); absent with `undo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_turn: Option<u32>,
    /// Undo the session's last rewind instead (itself checkpointed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
    /// What to put back (default both).
    #[serde(default = "both")]
    pub scope: RewindScope,
    /// Rewind even when files changed since the session's last checkpoint by something other
    /// than the session (what they hold now is lost).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Change nothing: say what the rewind would change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preview: bool,
    /// Rewind the session's sub-agents' worktrees too, each to how it was when the session's
    /// turn began (an undo: each one's last rewind); without it they are left as they are.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_children: bool,
}

fn both() -> RewindScope {
    RewindScope::Both
}

impl RewindRequest {
    /// A rewind of `session_id` to before `turn`, files and conversation.
    pub fn to_turn(session_id: impl Into<String>, turn: u32) -> RewindRequest {
        RewindRequest {
            session_id: session_id.into(),
            to_turn: Some(turn),
            undo: false,
            scope: RewindScope::Both,
            force: false,
            preview: false,
            with_children: false,
        }
    }

    /// The undo of `session_id`'s last rewind.
    pub fn undo(session_id: impl Into<String>) -> RewindRequest {
        RewindRequest {
            to_turn: None,
            undo: true,
            ..RewindRequest::to_turn(session_id, 0)
        }
    }

    /// Whether the request names exactly one of a turn and `undo`; what is wrong otherwise.
    pub fn check(&self) -> Result<(), String> {
        match (self.to_turn, self.undo) {
            (Some(_), true) => Err("give either to_turn or undo, not both".to_owned()),
            (None, false) => Err("give the turn to rewind to (to_turn), or undo".to_owned()),
            (Some(0), false) => Err("turns are numbered from 1".to_owned()),
            (Some(_), false) | (None, true) => Ok(()),
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Project-relative path.
    pub path: String,
    /// How it changes.
    pub kind: ChangeKind,
}

/// Conversation items a rewind drops: `conversation.jsonl` items `keep..until` (0-based, end
/// exclusive) no longer reach the model; the log keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationCut {
    /// Items before this index stay.
    pub keep: u64,
    /// Items from this index on (written after the rewind) stay too.
    pub until: u64,
}

/// What a rewind did, or (for a preview) would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindReport {
    /// The session.
    pub session_id: String,
    /// Whether this is a preview (nothing was changed).
    pub preview: bool,
    /// The turn rewound to before (`None` for an undo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_turn: Option<u32>,
    /// The checkpointed turn whose "before" the files go back to (the first at or after
    /// `to_turn`), for a rewind to a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_turn: Option<u32>,
    /// The paths that change (a preview's, from the project now to the target), or that
    /// changed (written or removed).
    pub changes: Vec<FileChange>,
    /// A preview's unified diff from the project now to what the rewind restores (cut at
    /// [`MAX_PREVIEW_DIFF`] bytes, `diff_truncated` then set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Whether `diff` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diff_truncated: bool,
    /// Files changed since the session's last checkpoint by something other than the session:
    /// a rewind of the files refuses while there are any, unless forced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_outside: Vec<String>,
    /// Paths the target did not capture, left as they are (each with why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_restored: Vec<String>,
    /// Ignored paths, left as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// The conversation items no longer sent to the model (for an undo: sent again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_cut: Option<ConversationCut>,
    /// One sentence for a human.
    pub summary: String,
    /// With `with_children`: the report of each sub-agent's worktree rewound (or previewed)
    /// alongside, descendants included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<RewindReport>,
}

/// Longest diff a preview carries, in bytes.
pub const MAX_PREVIEW_DIFF: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_kinds_and_scopes_are_pinned() {
        let kinds: Vec<(&str, char)> = ChangeKind::ALL
            .iter()
            .map(|k| (k.name(), k.letter()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("added", 'A'),
                ("modified", 'M'),
                ("deleted", 'D'),
                ("type_changed", 'T')
            ]
        );
        let scopes: Vec<(&str, bool, bool)> = RewindScope::ALL
            .iter()
            .map(|s| (s.name(), s.code(), s.conversation()))
            .collect();
        assert_eq!(
            scopes,
            [
                ("both", true, true),
                ("code", true, false),
                ("conversation", false, true)
            ]
        );
    }

    #[test]
    fn a_request_on_the_wire_defaults_to_both_and_names_a_turn_or_undo() {
        let request: RewindRequest =
            serde_json::from_str(r#"{"session_id":"s1","to_turn":2}"#).unwrap();
        assert_eq!(request, RewindRequest::to_turn("s1", 2));
        assert_eq!(request.check(), Ok(()));
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"session_id":"s1","to_turn":2,"scope":"both"}"#
        );
        let undo = RewindRequest::undo("s1");
        assert_eq!(undo.check(), Ok(()));
        let neither: RewindRequest = serde_json::from_str(r#"{"session_id":"s1"}"#).unwrap();
        assert!(neither.check().unwrap_err().contains("to_turn"));
        let both = RewindRequest {
            undo: true,
            ..RewindRequest::to_turn("s1", 1)
        };
        assert!(both.check().unwrap_err().contains("not both"));
        assert!(
            RewindRequest::to_turn("s1", 0)
                .check()
                .unwrap_err()
                .contains("from 1")
        );
        assert!(
            serde_json::from_str::<RewindRequest>(r#"{"session_id":"s","scope":"files"}"#).is_err()
        );
    }
}

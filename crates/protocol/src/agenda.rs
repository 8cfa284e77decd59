//! The daemon's agenda on the wire: parked work items with an optional reminder, and one-shot
//! scheduled sessions the owner approves (`docs/agenda.md`).
//!
//! Every surface asks through one operation ([`AgendaOp`], the socket's `agenda` op) and gets
//! the entries it touched or listed ([`AgendaItem`]). A pending schedule also shows in the
//! approval queue as category `schedule`, under the pseudo-session [`AGENDA_SESSION`]; an
//! agenda happening (a due reminder, a scheduled session started or missed) is an
//! [`AppEvent::Agenda`](crate::events::AppEvent) numbered like every event, under the same
//! pseudo-session.

use serde::{Deserialize, Serialize};

use crate::closed_set::closed_set;
use crate::daemon::StartRequest;
use crate::utc::UtcTime;

pub use crate::events::AgendaNotice;

/// The session id the agenda's events and approvals are filed under (never a real session's:
/// those are timestamps with a random suffix).
pub const AGENDA_SESSION: &str = "agenda";

closed_set! {
    /// What an agenda entry is.
    pub enum AgendaKind ("agenda kind") {
        /// A parked work item.
        Item = "item",
        /// A one-shot scheduled session.
        Schedule = "schedule",
    }
}

closed_set! {
    /// Where an agenda entry stands.
    pub enum AgendaState ("agenda state") {
        /// An item not yet done.
        Open = "open",
        /// An item done, or a schedule cancelled before it ran.
        Done = "done",
        /// A schedule waiting for the owner's approval.
        Pending = "pending",
        /// A schedule approved, waiting for its time.
        Approved = "approved",
        /// A schedule the owner refused.
        Rejected = "rejected",
        /// A schedule a daemon is starting.
        Claimed = "claimed",
        /// A schedule whose session was started.
        Started = "started",
        /// A schedule whose session could not be started.
        Failed = "failed",
        /// A schedule not run at its time (daemon down, never approved, or uncertain); never
        /// run on its own.
        Missed = "missed",
    }
}

/// One agenda entry as every surface shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgendaItem {
    /// Its id.
    pub id: u64,
    /// Item or schedule.
    pub kind: AgendaKind,
    /// The item's text, or the scheduled task.
    pub text: String,
    /// Where it stands.
    pub state: AgendaState,
    /// When it was added (UTC, RFC 3339).
    pub created: String,
    /// The item's reminder, or the schedule's time (UTC, RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// For a schedule: the whole start request it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<StartRequest>,
    /// For a schedule: sha256 (hex) of the request's JSON as stored; what the owner approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// For a started schedule: its session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Why it failed or was missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One agenda operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum AgendaOp {
    /// The entries, oldest first: every one still to come or under way, and the newest 200 that
    /// ended.
    List,
    /// Park a work item, with an optional reminder.
    Add {
        /// What to do.
        text: String,
        /// When to remind, in the future, as a user writes a time (RFC 3339 with an offset, a date
        /// and time with an IANA zone name, or `+10m`: `docs/agenda.md`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remind_at: Option<String>,
    },
    /// Mark an item done, or cancel a schedule that has not run.
    Done {
        /// The entry.
        id: u64,
    },
    /// Move an item's reminder (and arm it again).
    Snooze {
        /// The entry.
        id: u64,
        /// The new time, in the future, written as `remind_at` is.
        until: String,
    },
    /// Schedule one session: it waits for the owner's approval (category `schedule`).
    Schedule {
        /// When to start it, in the future, written as `remind_at` is.
        at: String,
        /// Exactly what to start.
        request: Box<StartRequest>,
    },
    /// The owner approves a pending schedule.
    Approve {
        /// The entry.
        id: u64,
    },
    /// The owner refuses a pending schedule.
    Reject {
        /// The entry.
        id: u64,
    },
}

/// `seconds` (Unix) as RFC 3339 UTC.
pub fn rfc3339(seconds: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    UtcTime::from_system(t).rfc3339()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agenda_ops_and_sets_have_stable_wire_names() {
        let op = AgendaOp::Snooze {
            id: 3,
            until: "2026-12-03T09:00:00Z".into(),
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"action":"snooze","id":3,"until":"2026-12-03T09:00:00Z"}"#
        );
        let names: Vec<&str> = AgendaState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "open", "done", "pending", "approved", "rejected", "claimed", "started", "failed",
                "missed"
            ]
        );
        let notices: Vec<&str> = AgendaNotice::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(notices, ["reminder", "started", "missed", "failed"]);
    }
}

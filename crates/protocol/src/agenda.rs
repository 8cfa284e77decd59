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
    /// Every entry, oldest first.
    List,
    /// Park a work item, with an optional reminder.
    Add {
        /// What to do.
        text: String,
        /// When to remind (UTC, RFC 3339; in the future).
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
        /// The new time (UTC, RFC 3339; in the future).
        until: String,
    },
    /// Schedule one session: it waits for the owner's approval (category `schedule`).
    Schedule {
        /// When to start it (UTC, RFC 3339; in the future).
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

/// The furthest a relative time reaches: ten years.
const MAX_RELATIVE_SECONDS: i64 = 3650 * 86_400;

/// Reads a time a user gives: RFC 3339 with `Z` or an offset (`2026-12-03T09:00:00+01:00`), or
/// relative to `now` (Unix seconds) as `+N` with a unit `s`, `m`, `h` or `d` (`+10m`). Returns
/// Unix seconds. A time with a named zone (`... Europe/Paris`, `... PST`) is refused: only
/// offsets say exactly which instant is meant.
pub fn parse_when(text: &str, now: i64) -> Result<i64, String> {
    let t = text.trim();
    if let Some(rel) = t.strip_prefix('+') {
        let (digits, unit) =
            rel.split_at(rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len()));
        let n: i64 = digits.parse().map_err(|_| {
            format!("{text:?}: a relative time is +N with a unit, e.g. +10m, +2h, +1d")
        })?;
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?}; use s, m, h or d (e.g. +10m)"
                ));
            }
        };
        return n
            .checked_mul(scale)
            .filter(|d| *d <= MAX_RELATIVE_SECONDS)
            .and_then(|d| now.checked_add(d))
            .ok_or_else(|| format!("{text:?} is too far ahead (at most ten years)"));
    }
    if let Some((_, zone)) = t.rsplit_once(char::is_whitespace) {
        return Err(format!(
            "{text:?}: unknown timezone {zone:?}; give the time in RFC 3339 with `Z` or an \
             offset (2026-12-03T09:00:00+01:00), or relative (+10m)"
        ));
    }
    let (base, offset) = split_offset(t).ok_or_else(|| {
        format!(
            "{text:?} is not a time: use RFC 3339 with `Z` or an offset (2026-12-03T09:00:00Z, \
             2026-12-03T09:00:00+01:00), or relative (+10m)"
        )
    })?;
    let utc = UtcTime::parse_rfc3339(&format!("{base}Z"))
        .ok_or_else(|| format!("{text:?} is not a valid RFC 3339 date and time"))?;
    Ok(utc.unix_seconds() - offset)
}

/// `(date-time without its zone, offset in seconds east of UTC)`.
fn split_offset(t: &str) -> Option<(&str, i64)> {
    if let Some(base) = t.strip_suffix('Z').or_else(|| t.strip_suffix('z')) {
        return Some((base, 0));
    }
    let at = t.len().checked_sub(6)?;
    let (base, zone) = t.split_at(at);
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = zone[1..].split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && base.contains('T')).then_some((base, sign * (h * 3600 + m * 60)))
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

    const NOW: i64 = 1_796_200_000; // 2026-12-02T...Z

    #[test]
    fn times_are_rfc3339_with_an_offset_or_relative() {
        let z = parse_when("2026-12-03T09:00:00Z", NOW).unwrap();
        assert_eq!(rfc3339(z), "2026-12-03T09:00:00.000Z");
        assert_eq!(parse_when("2026-12-03T10:00:00+01:00", NOW).unwrap(), z);
        assert_eq!(parse_when("2026-12-03T04:30:00-04:30", NOW).unwrap(), z);
        assert_eq!(parse_when("2026-12-03T09:00:00.250Z", NOW).unwrap(), z);
        assert_eq!(parse_when("+10m", NOW).unwrap(), NOW + 600);
        assert_eq!(parse_when(" +2h ", NOW).unwrap(), NOW + 7200);
        assert_eq!(parse_when("+1d", NOW).unwrap(), NOW + 86_400);
    }

    #[test]
    fn a_named_timezone_or_a_bad_time_is_a_clear_error() {
        let e = parse_when("2026-12-03T09:00:00 Europe/Paris", NOW).unwrap_err();
        assert!(e.contains("unknown timezone \"Europe/Paris\""), "{e}");
        let e = parse_when("2026-12-03 09:00 PST", NOW).unwrap_err();
        assert!(e.contains("unknown timezone"), "{e}");
        for bad in [
            "tomorrow",
            "2026-12-03T09:00:00",
            "2026-13-03T09:00:00Z",
            "+10",
            "+10w",
            "+m",
            "+99999999999999d",
        ] {
            assert!(parse_when(bad, NOW).is_err(), "{bad}");
        }
        let e = parse_when("+10w", NOW).unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
    }

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

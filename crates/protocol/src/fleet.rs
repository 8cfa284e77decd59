//! The fleet as the daemon's frontends see it: the daemons joined to one NATS JetStream server
//! (`docs/fleet.md`), each as it last reported itself.

use serde::{Deserialize, Serialize};

/// One member of the fleet, as its own heartbeat last said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetMember {
    /// Its name in the fleet (`[fleet] name`; by default its host and state root).
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// What it offers placement (`[fleet] labels`).
    #[serde(default)]
    pub labels: Vec<String>,
    /// Its process id on its host.
    pub pid: u32,
    /// Random per run: a restarted daemon under the same name is another instance.
    pub instance: String,
    /// Sessions holding a running slot.
    pub running: u64,
    /// Sessions waiting for a follow-up (no slot).
    pub idle: u64,
    /// Sessions waiting for a slot.
    pub queued: u64,
    /// Its `[daemon] max_running`.
    pub max_running: u64,
    /// When it joined (RFC 3339 UTC).
    pub joined: String,
    /// When it last reported (RFC 3339 UTC).
    pub seen: String,
    /// How often it reports, in milliseconds: a member silent for three of these is gone.
    pub heartbeat_ms: u64,
}

/// The fleet as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetView {
    /// This daemon's own name in the fleet.
    pub member: String,
    /// The NATS server, without credentials.
    pub server: String,
    /// Every member whose last report is younger than the fleet's expiry, this one included,
    /// by name.
    pub members: Vec<FleetMember>,
    /// Why the members could not be read just now (the server away), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One member's sessions, as it last published them to the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSessions {
    /// The member's name.
    pub member: String,
    /// When it published them (RFC 3339 UTC).
    pub published: String,
    /// Its sessions, oldest first: the newest [`MemberSessions::LIMIT`] at most.
    pub sessions: Vec<crate::daemon::SessionSummary>,
    /// Older sessions it has and left out of the list.
    #[serde(default)]
    pub omitted: u64,
    /// The member is gone (its heartbeat stopped): what it listed unfinished is shown
    /// `interrupted`, since nothing runs it any more.
    #[serde(default)]
    pub lost: bool,
}

impl MemberSessions {
    /// The most sessions a member publishes (its newest).
    pub const LIMIT: usize = 256;
}

/// The `ok` of `Op::FleetSessions`: every member's sessions, this one's as it has them now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSessions {
    /// This daemon's own name in the fleet.
    pub member: String,
    /// Each member's sessions, by member name.
    pub members: Vec<MemberSessions>,
    /// Why the other members' sessions could not be read just now (the server away), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FleetSessions {
    /// Every member's sessions as one list, each with its member, oldest first (by creation,
    /// then id): what the dashboard's and MCP's session lists show in a fleet.
    pub fn rows(self) -> Vec<FleetSessionRow> {
        let mut rows: Vec<FleetSessionRow> = self
            .members
            .into_iter()
            .flat_map(|m| {
                let (member, lost) = (m.member, m.lost);
                m.sessions.into_iter().map(move |session| FleetSessionRow {
                    session,
                    member: member.clone(),
                    member_lost: lost,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            (&a.session.created, &a.session.id).cmp(&(&b.session.created, &b.session.id))
        });
        rows
    }

    /// Only the sessions of `page` (of its status, if it names one), counted by id over every
    /// member (a session two members list, a lost one's and the one that took it over, counts
    /// once), each left under its member; every member stays, with its `omitted` and `lost`.
    pub fn page(mut self, page: &crate::daemon::SessionsPage) -> FleetSessions {
        if *page == crate::daemon::SessionsPage::ALL {
            return self;
        }
        for member in &mut self.members {
            member.sessions.retain(|s| page.admits_status(s.status));
        }
        let kept: std::collections::HashSet<String> =
            page.of(self.ids(), String::as_str).into_iter().collect();
        for member in &mut self.members {
            member.sessions.retain(|s| kept.contains(&s.id));
        }
        self
    }

    /// The ids of the sessions it lists, each once, in order (a page's order).
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .members
            .iter()
            .flat_map(|m| m.sessions.iter().map(|s| s.id.clone()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Adds the sessions of `next`, a later page of the same listing, each under its member
    /// (its `omitted`, `lost` and `published` as the later page says; `error` the later one's).
    pub fn extend(&mut self, next: FleetSessions) {
        for mut member in next.members {
            match self.members.iter_mut().find(|m| m.member == member.member) {
                Some(known) => {
                    known.sessions.append(&mut member.sessions);
                    known.published = member.published;
                    known.omitted = member.omitted;
                    known.lost = member.lost;
                }
                None => self.members.push(member),
            }
        }
        self.members.sort_by(|a, b| a.member.cmp(&b.member));
        self.error = next.error.or(self.error.take());
    }
}

/// One session of the fleet's list: its summary with the member that owns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSessionRow {
    /// The session as its member last listed it.
    #[serde(flatten)]
    pub session: crate::daemon::SessionSummary,
    /// The member that owns it.
    pub member: String,
    /// That member is gone (its heartbeat stopped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub member_lost: bool,
}

/// A session to run somewhere in the fleet (`ctl start --fleet`), as it waits in the work queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetStartRequest {
    /// The placement's id (given by the member that queued it).
    #[serde(default)]
    pub id: String,
    /// The member that queued it.
    #[serde(default)]
    pub by: String,
    /// The session as a local start would ask for it; its `project` is the clone the taking
    /// member makes, whatever it says here.
    pub start: crate::daemon::StartRequest,
    /// The project as a git repository every member can reach (a URL or a path there).
    pub repo: String,
    /// The branch or tag to work from (default: the repository's default branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// Only this member may take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// Only a member with this label may take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The `ok` of `Op::FleetStart`: the request waits in the fleet's work queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPlacement {
    /// The placement's id.
    pub id: String,
    /// The subject it waits on.
    pub subject: String,
}

/// Where a placement stands (`ctl placement ID`, `ctl start --fleet --wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementState {
    /// Queued: no member has taken it yet.
    Pending,
    /// A member took it and prepares it (clones the repository).
    Taken,
    /// It runs on `member` as `session`.
    Started,
    /// It did not start: `reason` says why (the member that took it never offers it again).
    Failed,
}

impl PlacementState {
    /// The state as `ctl placement` words it.
    pub fn name(self) -> &'static str {
        match self {
            PlacementState::Pending => "pending",
            PlacementState::Taken => "taken",
            PlacementState::Started => "started",
            PlacementState::Failed => "failed",
        }
    }
}

/// A placement's outcome as the fleet keeps it, written by the member that queued it
/// (`pending`) and then by the member that took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementStatus {
    /// The placement's id.
    pub id: String,
    /// The member that queued it.
    pub by: String,
    /// Where it stands.
    pub state: PlacementState,
    /// The member that took it (once taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The session it runs as (once started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Why it failed (a URL's user and password left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was last written (RFC 3339 UTC).
    pub updated: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{SessionSummary, SessionsPage};

    fn session(id: &str) -> SessionSummary {
        serde_json::from_value(serde_json::json!({
            "id": id, "project": "/p", "task": "t", "backend": {"kind": "native"},
            "provider": "mock", "model": "m", "status": "done", "autonomy": "medium",
            "created": "2026-01-01T00:00:00Z", "input_tokens": 0, "output_tokens": 0,
            "cost_usd": 0.0, "pending_approvals": 0,
        }))
        .unwrap()
    }

    fn member(name: &str, ids: &[&str], lost: bool) -> MemberSessions {
        MemberSessions {
            member: name.into(),
            published: "2026-01-01T00:00:00Z".into(),
            sessions: ids.iter().map(|id| session(id)).collect(),
            omitted: 3,
            lost,
        }
    }

    fn fleet() -> FleetSessions {
        FleetSessions {
            member: "a".into(),
            // `c` is on the lost member and on the one that took it over.
            members: vec![
                member("a", &["a1", "a3", "c"], false),
                member("b", &["a2", "b9"], false),
                member("l", &["c"], true),
            ],
            error: None,
        }
    }

    fn ids(fleet: &FleetSessions) -> Vec<(String, String)> {
        let mut ids: Vec<(String, String)> = fleet
            .members
            .iter()
            .flat_map(|m| m.sessions.iter().map(|s| (s.id.clone(), m.member.clone())))
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn a_fleet_page_counts_each_id_once_over_every_member_and_pages_join_back() {
        let pair = |id: &str, m: &str| (id.to_owned(), m.to_owned());
        let first = fleet().page(&SessionsPage {
            limit: Some(2),
            ..SessionsPage::ALL
        });
        assert_eq!(ids(&first), [pair("a1", "a"), pair("a2", "b")]);
        assert_eq!(first.members.len(), 3, "every member stays");
        assert_eq!(first.ids().last().map(String::as_str), Some("a2"));
        let second = fleet().page(&SessionsPage::after(Some("a2".into())));
        // `c` counts once: both of its copies come in the one page.
        assert_eq!(
            ids(&second),
            [
                pair("a3", "a"),
                pair("b9", "b"),
                pair("c", "a"),
                pair("c", "l")
            ]
        );
        let newest = fleet().page(&SessionsPage::newest(1));
        assert_eq!(ids(&newest), [pair("c", "a"), pair("c", "l")]);
        assert_eq!(fleet().page(&SessionsPage::ALL), fleet());

        let mut joined = first;
        joined.extend(second);
        assert_eq!(ids(&joined), ids(&fleet()));
        assert_eq!(
            joined
                .members
                .iter()
                .map(|m| m.sessions.len())
                .sum::<usize>(),
            6
        );
        assert_eq!(joined.members.iter().map(|m| m.omitted).sum::<u64>(), 9);
    }

    #[test]
    fn a_fleet_page_of_one_status_before_a_session_holds_only_those() {
        let pair = |id: &str, m: &str| (id.to_owned(), m.to_owned());
        let mut failed = fleet();
        for member in &mut failed.members {
            for session in &mut member.sessions {
                if ["a1", "b9", "c"].contains(&session.id.as_str()) {
                    session.status = crate::daemon::SessionStatus::Failed;
                }
            }
        }
        let page = SessionsPage {
            status: Some(crate::daemon::SessionStatus::Failed),
            before: Some("c".into()),
            ..SessionsPage::newest(5)
        };
        assert_eq!(
            ids(&failed.clone().page(&page)),
            [pair("a1", "a"), pair("b9", "b")]
        );
        let newest_failed = SessionsPage {
            before: None,
            ..page
        };
        assert_eq!(
            ids(&failed.page(&SessionsPage {
                limit: Some(1),
                ..newest_failed
            })),
            [pair("c", "a"), pair("c", "l")]
        );
    }
}

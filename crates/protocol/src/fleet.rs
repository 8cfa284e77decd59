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

//! One host, any door (`docs/fleet.md`): [`FleetHost`], the `SessionHost` every surface of a
//! fleet member holds. What names a session another member owns (an approval's answer, a
//! question's answer, a follow-up, an interrupt, a stop, an autonomy change, a subscription)
//! is routed to that member over the fleet's NATS server and acknowledged by it; the rest is
//! this daemon's own supervisor.
//!
//! # Layout
//! - [`owner`]: the owner's side: answering routed control with the local supervisor (a
//!   model's request held to the owner's `[mcp]` policy) and publishing every local event for
//!   followers.
//! - [`all`]: the stream of every session: this daemon's events and every other member's, each
//!   of those marked with its member.
//! - [`follow`]: the follower's side of a subscription to another member's session: its record
//!   replayed from the owner, then its live events, gaps filled from the owner.

pub mod all;
pub mod follow;
pub mod owner;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::{EventStream, SessionHost};
use intendant_fleet::Member;
use intendant_fleet::route::{ControlOp, Surface};
use intendant_protocol::agenda::{AGENDA_SESSION, AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    HostError, HostErrorCode, PendingApproval, PruneReport, PruneRequest, Sent, SessionCounts,
    SessionIntent, SessionSummary, SessionsPage, Settings, SettingsChange, StartRequest,
};
use intendant_protocol::fleet::{FleetSessions, MemberSessions};
use intendant_protocol::memory::{MEMORY_SESSION, MemoryAnswer, MemoryOp};

/// The longest a listing of the fleet's approvals waits for one member.
const APPROVALS_WAIT: Duration = Duration::from_secs(3);
/// How many times a lookup of another member's session reads the fleet's listing when the
/// server does not answer (a moment's stall under load is not "no such session").
const LISTING_READS: usize = 2;

/// The daemon's own host with every call about another member's session routed to it.
pub struct FleetHost {
    local: Arc<dyn SessionHost>,
    member: Arc<Member>,
    surface: Surface,
}

impl FleetHost {
    /// `local` (this daemon's supervisor) as a member of `member`'s fleet, for a surface of
    /// kind `surface` (a model's answers stay a model's at the owner).
    pub fn new(local: Arc<dyn SessionHost>, member: Arc<Member>, surface: Surface) -> FleetHost {
        FleetHost {
            local,
            member,
            surface,
        }
    }

    /// The member that owns session `id`: `None` for this daemon, else the member whose
    /// published list has it (refused when it is gone).
    async fn owner(&self, id: &str) -> Result<Option<String>, HostError> {
        if id == AGENDA_SESSION || id == MEMORY_SESSION {
            return Ok(None);
        }
        match self.local.session(id).await {
            Ok(_) => return Ok(None),
            Err(e) if e.code != HostErrorCode::UnknownSession => return Err(e),
            Err(_) => {}
        }
        let (owner, _) = self.elsewhere(id).await?;
        if owner.lost {
            return Err(HostError::new(
                HostErrorCode::Unavailable,
                format!(
                    "session {id} is member {}'s, which is gone (its heartbeat stopped); nothing \
                     was done",
                    owner.member
                ),
            ));
        }
        Ok(Some(owner.member))
    }

    /// Session `id` as another member last published it, with that member's list: the
    /// listing read a second time when the fleet's server did not answer the first, and its
    /// error said when the session is not found.
    async fn elsewhere(&self, id: &str) -> Result<(MemberSessions, SessionSummary), HostError> {
        let mut error = None;
        for _ in 0..LISTING_READS {
            let listed = self.member.fleet_sessions(Vec::new()).await;
            let found = listed.members.into_iter().find_map(|m| {
                let session = m.sessions.iter().find(|s| s.id == id)?.clone();
                (m.member != self.member.name()).then_some((m, session))
            });
            if let Some(found) = found {
                return Ok(found);
            }
            error = listed.error;
            if error.is_none() {
                break;
            }
        }
        Err(HostError::new(
            HostErrorCode::UnknownSession,
            match error {
                Some(error) => format!("no session {id} here, and {error}"),
                None => format!(
                    "no session {id} on any member (a session started on another member is \
                     listed within one of its heartbeats)"
                ),
            },
        ))
    }

    /// Routes `op` to `owner`, expecting no answer but its acknowledgement.
    async fn route(&self, owner: &str, op: ControlOp) -> Result<(), HostError> {
        self.member.route(owner, self.surface, op).await.map(drop)
    }

    /// Every other live member's pending approvals, each member asked at once (one that does
    /// not answer in [`APPROVALS_WAIT`] is left out).
    async fn others_approvals(&self) -> Vec<PendingApproval> {
        let Ok(view) = self.member.view().await else {
            return Vec::new();
        };
        let asks =
            view.members
                .iter()
                .filter(|m| m.name != self.member.name())
                .map(|m| async move {
                    let asked = self
                        .member
                        .route(&m.name, self.surface, ControlOp::Approvals);
                    match tokio::time::timeout(APPROVALS_WAIT, asked).await {
                        Ok(Ok(value)) => serde_json::from_value::<Vec<PendingApproval>>(value)
                            .unwrap_or_default(),
                        _ => Vec::new(),
                    }
                });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

#[async_trait::async_trait]
impl SessionHost for FleetHost {
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        self.local.start(request).await
    }

    /// This daemon's sessions (`ctl sessions` and the dashboard's list show every member's,
    /// through [`SessionHost::fleet_sessions`]).
    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        self.local.sessions_page(page).await
    }

    /// This daemon's, as [`Self::sessions_page`] lists them.
    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        self.local.sessions_count(page).await
    }

    /// This daemon's, as [`Self::sessions_page`] lists them.
    async fn session_counts(&self) -> Result<SessionCounts, HostError> {
        self.local.session_counts().await
    }

    /// This daemon's: a sub-agent runs where its parent does.
    async fn children(&self, parent: &str) -> Result<Vec<SessionSummary>, HostError> {
        self.local.children(parent).await
    }

    /// This daemon's sessions as it has them now and every other member's as it last
    /// published them (a lost member's unfinished ones `interrupted`), by member.
    async fn fleet_sessions(&self) -> Result<Option<FleetSessions>, HostError> {
        let local = self.local.sessions().await?;
        Ok(Some(self.member.fleet_sessions(local).await))
    }

    /// This daemon's part of the page is within its own page: only that is read of it.
    async fn fleet_sessions_page(
        &self,
        page: &SessionsPage,
    ) -> Result<Option<FleetSessions>, HostError> {
        let local = self.local.sessions_page(page).await?;
        Ok(Some(self.member.fleet_sessions(local).await.page(page)))
    }

    /// This daemon's counted where it keeps them, the others' among what they published (a
    /// lost member's session this daemon took over counted once, here).
    async fn fleet_sessions_count(&self, page: &SessionsPage) -> Result<Option<u64>, HostError> {
        let local = self.local.sessions_count(page).await?;
        let others = self
            .member
            .fleet_sessions(Vec::new())
            .await
            .page(&page.unlimited());
        let mut count = local;
        for member in others.members.iter().filter(|m| m.member != others.member) {
            for session in &member.sessions {
                // Known here is all that is asked: no record is read for it.
                let here = member.lost && self.local.log_dir(&session.id).await.is_ok();
                count += u64::from(!here);
            }
        }
        Ok(Some(count))
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        match self.local.session(id).await {
            Err(e) if e.code == HostErrorCode::UnknownSession => {}
            found => return found,
        }
        self.elsewhere(id).await.map(|(_, session)| session)
    }

    async fn session_listed(&self, id: &str) -> Result<SessionSummary, HostError> {
        match self.local.session_listed(id).await {
            Err(e) if e.code == HostErrorCode::UnknownSession => {}
            found => return found,
        }
        self.elsewhere(id)
            .await
            .map(|(_, session)| session.listed())
    }

    /// This daemon's pending approvals and every other live member's (their own sessions'
    /// alone: a member's memory proposals and schedules are answered at that member).
    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        let mut all = self.local.approvals().await?;
        all.extend(self.others_approvals().await);
        all.sort_by(|a, b| (&a.requested, a.seq).cmp(&(&b.requested, b.seq)));
        Ok(all)
    }

    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError> {
        match self.owner(&intent.session_id).await? {
            None => self.local.send(intent).await,
            Some(owner) => self
                .member
                .route(&owner, self.surface, ControlOp::Send { intent })
                .await
                .map(Sent::from_reply),
        }
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        match self.owner(id).await? {
            None => self.local.interrupt(id).await,
            Some(owner) => {
                let session_id = id.to_owned();
                self.route(&owner, ControlOp::Interrupt { session_id })
                    .await
            }
        }
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        match self.owner(id).await? {
            None => self.local.stop(id).await,
            Some(owner) => {
                let session_id = id.to_owned();
                self.route(&owner, ControlOp::Stop { session_id }).await
            }
        }
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        let Some(id) = session else {
            return self.local.set_autonomy(None, level).await;
        };
        match self.owner(id).await? {
            None => self.local.set_autonomy(session, level).await,
            Some(owner) => {
                let session_id = id.to_owned();
                self.route(&owner, ControlOp::SetAutonomy { session_id, level })
                    .await
            }
        }
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        self.local.settings().await
    }

    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        self.local.update_settings(change).await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        let Some(id) = session else {
            return all::subscribe(self.local.as_ref(), Arc::clone(&self.member), after).await;
        };
        match self.owner(id).await? {
            None => self.local.subscribe(session, after).await,
            Some(owner) => follow::subscribe(Arc::clone(&self.member), owner, id, after).await,
        }
    }

    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError> {
        self.local.rewind(request).await
    }

    async fn agenda(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        self.local.agenda(op).await
    }

    async fn memory(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        self.local.memory(op).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneReport, HostError> {
        self.local.prune(request).await
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        match self.owner(id).await? {
            None => self.local.log_dir(id).await,
            Some(owner) => Err(HostError::new(
                HostErrorCode::InvalidRequest,
                format!("session {id}'s log is on member {owner}: read it there"),
            )),
        }
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        self.local.shutdown().await
    }
}

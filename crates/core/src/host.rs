//! [`SessionHost`]: what every long-lived frontend (the control socket and `intendant ctl`, the
//! web dashboard, MCP, a session spawning sub-agents) asks of the daemon. The session supervisor
//! implements it; a client of the control socket implements it too (for `intendant ctl` and
//! `intendant mcp` in other processes). Frontends hold an `Arc<dyn SessionHost>` and never touch sessions directly, so
//! each of them only renders events and sends intents.
//!
//! Every state-changing call lands in the one writer (the control plane / supervisor), whichever
//! frontend made it. The vocabulary is `intendant_protocol::daemon`.

#[cfg(any(test, feature = "host-double"))]
pub mod double;

use std::path::PathBuf;

use intendant_protocol::agenda::{AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    HostError, Pages, PendingApproval, PruneReport, PruneRequest, Sent, SessionCounts,
    SessionIntent, SessionSummary, SessionsPage, Settings, SettingsChange, StartRequest,
    StreamItem,
};
use intendant_protocol::fleet::FleetSessions;
use intendant_protocol::memory::{MemoryAnswer, MemoryOp};
use tokio::sync::mpsc;

/// The daemon as its frontends see it: the session supervisor in the daemon's process, or a
/// client of its control socket in another one (`intendant ctl`, `intendant mcp`). Every call can fail with a [`HostError`] (a remote host adds
/// `HostErrorCode::Unavailable` when the daemon cannot be reached). Calls never
/// wait for a session's work: they return once the request is accepted or refused; long work is
/// followed through [`SessionHost::subscribe`].
#[async_trait::async_trait]
pub trait SessionHost: Send + Sync + 'static {
    /// Creates a session (queued when `[daemon] max_running` sessions already run) and returns
    /// it as listed.
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError>;

    /// The sessions this daemon knows in `page`, oldest first: those it runs and those whose
    /// logs it found at start, each as a listing carries it ([`SessionSummary::listed`]: long
    /// texts cut; [`Self::session`] has them whole).
    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError>;

    /// Every session this daemon knows, oldest first, read a page of [`SessionsPage::SIZE`] at
    /// a time ([`Self::sessions_page`]), so no one reply holds them all.
    async fn sessions(&self) -> Result<Vec<SessionSummary>, HostError> {
        self.sessions_in(&SessionsPage::ALL).await
    }

    /// Every session `filter` admits (its bounds and status; its limit aside), oldest first,
    /// read as [`Self::sessions`] reads them all.
    async fn sessions_in(&self, filter: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        let mut all: Vec<SessionSummary> = Vec::new();
        let mut pages = Pages::default();
        while let Some(next) = pages.next() {
            let page = SessionsPage {
                after: next.after.or_else(|| filter.after.clone()),
                limit: next.limit,
                ..filter.unlimited()
            };
            let got = self.sessions_page(&page).await?;
            let new = pages.took(got.iter().map(|s| s.id.as_str()));
            all.extend(got.into_iter().take(new));
        }
        Ok(all)
    }

    /// How many sessions `page` admits, its limit aside (its bounds and status): counted from
    /// [`Self::sessions_in`], unless the host counts them where it keeps them (each host a
    /// daemon's surfaces hold does).
    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        Ok(self.sessions_in(page).await?.len() as u64)
    }

    /// The sessions whose parent is `parent` (its sub-agents), oldest first, as a listing
    /// carries them: read from the whole listing, unless the host finds them without it (a
    /// parent waiting on its children asks five times a second, and a daemon keeps every session
    /// its state root holds).
    async fn children(&self, parent: &str) -> Result<Vec<SessionSummary>, HostError> {
        let sessions = self.sessions().await?;
        Ok(sessions
            .into_iter()
            .filter(|s| s.parent.as_deref() == Some(parent))
            .collect())
    }

    /// How many sessions this daemon knows, by what they are doing: counted from the listing,
    /// unless the host keeps them at hand.
    async fn session_counts(&self) -> Result<SessionCounts, HostError> {
        let sessions = self.sessions().await?;
        Ok(SessionCounts::of(sessions.iter().map(|s| s.status)))
    }

    /// One session.
    async fn session(&self, id: &str) -> Result<SessionSummary, HostError>;

    /// One session as a listing carries it ([`SessionSummary::listed`]): [`Self::session`] cut,
    /// unless the host has the row at hand (a daemon reads an ended session's long texts back
    /// whole from its records for [`Self::session`], only to have them cut again here).
    async fn session_listed(&self, id: &str) -> Result<SessionSummary, HostError> {
        Ok(self.session(id).await?.listed())
    }

    /// Every fleet member's sessions, each under its member (this daemon's as it has them now,
    /// the others' as they last published them), or `None` for a host in no fleet: a host
    /// that is not a fleet member's door has nothing but [`SessionHost::sessions`].
    async fn fleet_sessions(&self) -> Result<Option<FleetSessions>, HostError> {
        Ok(None)
    }

    /// A [`SessionsPage`] of [`Self::fleet_sessions`], by id over every member: the listing's
    /// page, unless the host reads only that page of its own.
    async fn fleet_sessions_page(
        &self,
        page: &SessionsPage,
    ) -> Result<Option<FleetSessions>, HostError> {
        Ok(self.fleet_sessions().await?.map(|fleet| fleet.page(page)))
    }

    /// How many sessions of every fleet member `page` admits, its limit aside (each counted
    /// once, as [`Self::fleet_sessions_page`] lists them), or `None` for a host in no fleet:
    /// counted over the listing, unless the host counts its own where it keeps them.
    async fn fleet_sessions_count(&self, page: &SessionsPage) -> Result<Option<u64>, HostError> {
        Ok(self
            .fleet_sessions_page(&page.unlimited())
            .await?
            .map(|fleet| fleet.ids().len() as u64))
    }

    /// Every pending approval of every session, oldest first.
    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError>;

    /// Delivers an intent (an approval answer, a question's answer, a follow-up) to its
    /// session, and says where it went (a follow-up to a round that goes on is its next
    /// round). An answer to an approval that is no longer pending is
    /// `HostErrorCode::AlreadyAnswered`.
    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError>;

    /// Ends the session's current turn (killing the running batch); the session stays open
    /// for follow-ups.
    async fn interrupt(&self, id: &str) -> Result<(), HostError>;

    /// Session `id`'s round waits on its sub-agents (`wait_sub_agents`): a running slot it
    /// holds goes to the sessions queued for one meanwhile, its children among them. A host
    /// without slots (or a session it does not run) does nothing.
    async fn set_aside(&self, _id: &str) {}

    /// Session `id`'s wait on its sub-agents ended: resolves once it holds a running slot
    /// again ([`SessionHost::set_aside`]), at once on a host without slots.
    async fn rejoin(&self, _id: &str) {}

    /// Ends the session (killing the running batch); it ends `interrupted` and stays resumable.
    async fn stop(&self, id: &str) -> Result<(), HostError>;

    /// Sets the autonomy level of one session, or the default of new sessions when `session` is
    /// `None` (persisted).
    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError>;

    /// The control plane's settings.
    async fn settings(&self) -> Result<Settings, HostError>;

    /// Changes settings (persisted atomically) and returns the new ones.
    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError>;

    /// Events after `after` (a `seq`; `0` for everything, `None` for only what comes from now
    /// on), of one session or of all. The stream's queue is bounded: a subscriber that stops
    /// reading gets [`StreamItem::Lagged`] and the stream ends, never blocking the daemon.
    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError>;

    /// Rewinds a session's files and conversation to before a turn, undoes its last rewind,
    /// or (with `preview`) says what either would change, changing nothing. Refused
    /// (`InvalidRequest`) while a turn of the session runs or waits for a human; a
    /// conversation rewind of a session waiting for a follow-up takes effect for that
    /// follow-up.
    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError>;

    /// One operation on the daemon's agenda (`intendant_protocol::agenda`): the entries it
    /// listed or changed. Approving a schedule is the owner's alone: every surface that
    /// reaches this refuses a session's processes. A host without an agenda refuses every
    /// operation.
    async fn agenda(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        let _ = op;
        Err(HostError {
            code: intendant_protocol::daemon::HostErrorCode::InvalidRequest,
            message: "this host keeps no agenda".to_owned(),
        })
    }

    /// One operation on the memories (`intendant_protocol::memory`), a human's: only the
    /// daemon's surfaces that refuse a session's processes reach it (the dashboard). A host
    /// without the database refuses every operation.
    async fn memory(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        let _ = op;
        Err(HostError {
            code: intendant_protocol::daemon::HostErrorCode::InvalidRequest,
            message: "this host keeps no memories".to_owned(),
        })
    }

    /// Removes the records of sessions that ended long ago (`intendant sessions prune`), a
    /// human's: only the control socket reaches it, which refuses a session's processes. A host
    /// that keeps no records refuses it.
    async fn prune(&self, request: PruneRequest) -> Result<PruneReport, HostError> {
        let _ = request;
        Err(HostError {
            code: intendant_protocol::daemon::HostErrorCode::InvalidRequest,
            message: "this host keeps no records to prune".to_owned(),
        })
    }

    /// The session's log directory (its `session.jsonl`).
    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError>;

    /// Stops every session and then the daemon; returns at once (the host's owner waits).
    async fn shutdown(&self) -> Result<(), HostError>;
}

/// One subscriber's stream of [`StreamItem`]s, fed by the host through a bounded queue.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<StreamItem>,
    history_end: u64,
}

impl EventStream {
    /// A stream reading `rx` (the host keeps the sender). `history_end` is the `seq` of the last
    /// event the stream replays from before the subscription (`0` when it replays none): a
    /// frontend that wants a snapshot (the dashboard's `GET /api/sessions/{id}/events`) reads
    /// up to it and stops, without waiting for what comes next.
    pub fn new(rx: mpsc::Receiver<StreamItem>, history_end: u64) -> EventStream {
        EventStream { rx, history_end }
    }

    /// The `seq` of the last replayed event (`0` when the stream replays nothing): every item
    /// with a greater `seq` was published after the subscription.
    pub fn history_end(&self) -> u64 {
        self.history_end
    }

    /// The next item; `None` once the host ended the stream (after a `Lagged`, or at
    /// shutdown). Cancel-safe.
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.rx.recv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stream_reports_where_its_history_ends() {
        let (tx, rx) = mpsc::channel(2);
        let mut stream = EventStream::new(rx, 41);
        assert_eq!(stream.history_end(), 41);
        tx.send(StreamItem::Lagged { next_seq: 42 }).await.unwrap();
        drop(tx);
        assert_eq!(
            stream.next().await,
            Some(StreamItem::Lagged { next_seq: 42 })
        );
        assert_eq!(stream.next().await, None);
    }
}

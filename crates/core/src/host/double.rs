//! The one in-memory [`SessionHost`] for tests of the frontends over it (the control socket, the
//! dashboard, MCP, sub-agents): sessions, a daemon-wide gapless `seq` with replay from a seq,
//! bounded subscriber queues that end with `Lagged` (and subscriptions it can be told to
//! refuse), the approval queue, and a record of what it was asked. Built only for tests
//! (`cfg(test)`, or the `host-double` feature a dev-dependency turns on).
//!
//! Two kinds: [`HostDouble::new`] holds what a test puts in it ([`HostDouble::publish`],
//! [`HostDouble::ask_approval`], [`HostDouble::insert`]) and only records intents;
//! [`HostDouble::scripted`] also plays each session a small script, so a tool layer can be run
//! against the trait's contract end to end: a task containing `needs approval` asks one approval
//! (`$ touch out.txt`) and finishes once approved (ends `denied` when denied), a task containing
//! `ask` asks a question and finishes once answered, any other task finishes its first round at
//! once; a follow-up runs one more round.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_protocol::agenda::{AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{ChangeKind, FileChange, RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    Backend, Envelope, HostError, HostErrorCode, PendingApproval, Sent, SessionIntent,
    SessionStatus, SessionSummary, SessionsPage, Settings, SettingsChange, StartRequest,
    StreamItem,
};
use intendant_protocol::events::{
    ActionCategory, AppEvent, ContextAction, ControlMsg, EndStatus, RoundEnd, Verdict,
};
use tokio::sync::mpsc;

use super::{EventStream, SessionHost};

/// Queue of each subscriber of a plain double (a test of lagging fills it).
pub const SUBSCRIBER_CAPACITY: usize = 64;
/// Queue of each subscriber of a scripted double (its sessions publish on their own).
const SCRIPTED_CAPACITY: usize = 1024;
/// Every timestamp the double writes.
const TS: &str = "2026-12-01T10:00:00.000Z";

#[derive(Default)]
struct State {
    scripted: bool,
    id_prefix: String,
    /// Session, approval and question ids come from one counter, as a daemon's would.
    next_id: u64,
    seq: u64,
    sessions: Vec<SessionSummary>,
    log: Vec<Envelope>,
    approvals: Vec<PendingApproval>,
    answered: HashSet<u64>,
    /// Open questions: session, question id.
    questions: Vec<(String, u64)>,
    subscribers: Vec<(Option<String>, mpsc::Sender<StreamItem>)>,
    default_autonomy: AutonomyLevel,
    started: Vec<StartRequest>,
    intents: Vec<SessionIntent>,
    interrupts: Vec<String>,
    stopped: Vec<String>,
    rewinds: Vec<RewindRequest>,
    agenda: Vec<AgendaOp>,
    calls: Vec<String>,
    /// Sessions handed out by [`SessionHost::sessions_page`], every page together.
    listed: usize,
    /// How many subscriptions were asked for, refused ones too.
    subscriptions: usize,
    shut_down: bool,
    /// Subscriptions still to refuse ([`HostDouble::refuse_subscriptions`]).
    refused_subscriptions: usize,
}

/// The test double of [`SessionHost`] (see the module doc for its two kinds).
#[derive(Default, Clone)]
pub struct HostDouble {
    state: Arc<Mutex<State>>,
}

fn unknown(id: &str) -> HostError {
    HostError::new(HostErrorCode::UnknownSession, format!("no session {id}"))
}

impl State {
    fn publish(&mut self, session: &str, event: AppEvent) -> u64 {
        self.publish_at(session, event, TS)
    }

    fn publish_at(&mut self, session: &str, event: AppEvent, ts: &str) -> u64 {
        self.seq += 1;
        let seq = self.seq;
        let envelope = Envelope {
            member: None,
            record_end: None,
            seq,
            session_id: session.to_owned(),
            ts: ts.into(),
            event,
        };
        let shared = Arc::new(envelope.clone());
        self.log.push(envelope);
        self.subscribers.retain(|(filter, tx)| {
            if filter.as_deref().is_some_and(|f| f != session) {
                return !tx.is_closed();
            }
            match tx.try_send(StreamItem::Event(shared.clone())) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The lagged notice gets through once the subscriber reads again.
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(StreamItem::Lagged { next_seq: seq }).await;
                    });
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        seq
    }

    fn session_mut(&mut self, id: &str) -> Result<&mut SessionSummary, HostError> {
        self.sessions
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or_else(|| unknown(id))
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn finish_round(&mut self, id: &str, message: &str) {
        self.publish(
            id,
            AppEvent::Done {
                message: message.to_owned(),
            },
        );
        self.publish(
            id,
            AppEvent::RoundComplete {
                round: 1,
                turns: 1,
                reason: RoundEnd::Done,
                input_tokens: 10,
                output_tokens: 5,
                cost_usd: 0.0,
            },
        );
        if let Ok(s) = self.session_mut(id) {
            s.status = SessionStatus::Idle;
            s.final_text = Some(message.to_owned());
            s.input_tokens = 10;
            s.output_tokens = 5;
        }
    }

    /// The script's first round of a new session.
    fn play_start(&mut self, id: &str, request: &StartRequest) -> Result<(), HostError> {
        if request.task.contains("needs approval") {
            let approval = self.next_id();
            self.publish(
                id,
                AppEvent::ApprovalRequired {
                    id: approval,
                    session_id: id.to_owned(),
                    command_preview: "$ touch out.txt".into(),
                    detail: None,
                    category: ActionCategory::CommandExec,
                },
            );
            let seq = self.seq;
            self.approvals.push(PendingApproval {
                id: approval,
                session_id: id.to_owned(),
                project: request.project.clone(),
                command_preview: "$ touch out.txt".into(),
                detail: None,
                category: ActionCategory::CommandExec,
                seq,
                requested: "2026-12-01T10:00:00Z".into(),
            });
            let s = self.session_mut(id)?;
            s.status = SessionStatus::WaitingForHuman;
            s.pending_approvals = 1;
        } else if request.task.contains("ask") {
            let question = self.next_id();
            self.publish(
                id,
                AppEvent::HumanQuestion {
                    id: question,
                    question: "which file?".into(),
                },
            );
            self.questions.push((id.to_owned(), question));
            self.session_mut(id)?.status = SessionStatus::WaitingForHuman;
        } else {
            let message = format!("finished: {}", request.task);
            self.finish_round(id, &message);
        }
        Ok(())
    }

    /// The script's answer to an approval's verdict.
    fn play_verdict(&mut self, id: &str, approval: u64, verdict: Verdict) -> Result<(), HostError> {
        self.session_mut(id)?.pending_approvals = 0;
        self.publish(
            id,
            AppEvent::ApprovalResolved {
                id: approval,
                verdict,
            },
        );
        if verdict == Verdict::Deny {
            self.publish(
                id,
                AppEvent::SessionEnded {
                    session_id: id.to_owned(),
                    status: EndStatus::Denied,
                    reason: "denied".into(),
                },
            );
            self.session_mut(id)?.status = SessionStatus::Done;
        } else {
            self.finish_round(id, "approved and done: wrote out.txt");
        }
        Ok(())
    }

    /// The script's answer to input or a follow-up.
    fn play_message(&mut self, id: &str, msg: &ControlMsg) -> Result<(), HostError> {
        match msg {
            ControlMsg::Input { text } => {
                let Some(pos) = self.questions.iter().position(|(s, _)| s == id) else {
                    return Err(HostError::new(
                        HostErrorCode::UnknownApproval,
                        format!("session {id} asked no question"),
                    ));
                };
                let (_, question) = self.questions.remove(pos);
                self.publish(
                    id,
                    AppEvent::HumanAnswer {
                        id: question,
                        text: text.clone(),
                    },
                );
                self.finish_round(id, &format!("answered: {text}"));
            }
            ControlMsg::FollowUp { text } => {
                self.session_mut(id)?.status = SessionStatus::Running;
                // As a daemon's session records what reached its loop.
                self.publish(id, AppEvent::ControlCommand(msg.clone()));
                self.publish(id, AppEvent::TurnStarted { turn: 2 });
                self.finish_round(id, &format!("follow-up done: {text}"));
            }
            ControlMsg::Approve { .. }
            | ControlMsg::Deny { .. }
            | ControlMsg::Skip { .. }
            | ControlMsg::ApproveAll { .. }
            | ControlMsg::AllowHost { .. } => {}
        }
        Ok(())
    }
}

impl HostDouble {
    /// A double that holds what the test puts in it; session ids `s1`, `s2`, ...
    pub fn new() -> Arc<HostDouble> {
        HostDouble::build(false, "s")
    }

    /// A double whose sessions play the script of the module doc; session ids `s1`, `s2`, ...
    pub fn scripted() -> Arc<HostDouble> {
        HostDouble::build(true, "s")
    }

    /// A plain double whose session ids are `prefix1`, `prefix2`, ...
    pub fn with_ids(prefix: &str) -> Arc<HostDouble> {
        HostDouble::build(false, prefix)
    }

    fn build(scripted: bool, prefix: &str) -> Arc<HostDouble> {
        let double = HostDouble::default();
        {
            let mut state = double.state();
            state.scripted = scripted;
            state.id_prefix = prefix.to_owned();
        }
        Arc::new(double)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked holding the lock has failed already; later reads still work.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `event` for `session` with the next seq; returns the seq.
    pub fn publish(&self, session: &str, event: AppEvent) -> u64 {
        self.state().publish(session, event)
    }

    /// [`Self::publish`] stamped `ts` (RFC 3339) where every other event is stamped the same
    /// fixed time.
    pub fn publish_at(&self, session: &str, event: AppEvent, ts: &str) -> u64 {
        self.state().publish_at(session, event, ts)
    }

    /// Adds a pending approval `id` to `session` (and its `approval_required` event).
    pub fn ask_approval(&self, session: &str, id: u64) {
        self.ask_approval_of(session, id, ActionCategory::Destructive);
    }

    /// Adds a pending approval `id` of `category` to `session` (and its event).
    pub fn ask_approval_of(&self, session: &str, id: u64, category: ActionCategory) {
        let seq = self.publish(
            session,
            AppEvent::ApprovalRequired {
                id,
                session_id: session.to_owned(),
                command_preview: format!("rm -rf build{id}"),
                detail: None,
                category,
            },
        );
        self.state().approvals.push(PendingApproval {
            id,
            session_id: session.to_owned(),
            project: "/p".into(),
            command_preview: format!("rm -rf build{id}"),
            detail: None,
            category,
            seq,
            requested: TS.into(),
        });
    }

    /// Lists `summary` as a session of this host.
    pub fn insert(&self, summary: SessionSummary) {
        self.state().sessions.push(summary);
    }

    /// Sets the status of the listed session `id` (no event).
    pub fn set_status(&self, id: &str, status: SessionStatus) {
        if let Ok(s) = self.state().session_mut(id) {
            s.status = status;
        }
    }

    /// Forgets every listed session.
    pub fn clear_sessions(&self) {
        self.state().sessions.clear();
    }

    /// Every start request taken, in order.
    pub fn started(&self) -> Vec<StartRequest> {
        self.state().started.clone()
    }

    /// Every intent delivered, in order.
    pub fn intents(&self) -> Vec<SessionIntent> {
        self.state().intents.clone()
    }

    /// The sessions interrupted, in order.
    pub fn interrupts(&self) -> Vec<String> {
        self.state().interrupts.clone()
    }

    /// The sessions stopped, in order.
    pub fn stopped(&self) -> Vec<String> {
        self.state().stopped.clone()
    }

    /// Every rewind request taken (previews included), in order.
    pub fn rewinds(&self) -> Vec<RewindRequest> {
        self.state().rewinds.clone()
    }

    /// Every agenda operation taken, in order.
    pub fn agenda_ops(&self) -> Vec<AgendaOp> {
        self.state().agenda.clone()
    }

    /// What the host was asked, in order, one line a call (`start TASK in PROJECT`,
    /// `send ID MSG`, `interrupt ID`, `stop ID`, `set_autonomy SESSION LEVEL`,
    /// `rewind ID TURN` or `rewind ID undo`).
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// How many subscriptions [`SessionHost::subscribe`] was asked for, refused ones too.
    pub fn subscriptions(&self) -> usize {
        self.state().subscriptions
    }

    /// How many sessions [`SessionHost::sessions_page`] handed out, every page together: what
    /// a surface read of the listing.
    pub fn listed(&self) -> usize {
        self.state().listed
    }

    /// The sessions of `page`, whole.
    fn admitted(&self, page: &SessionsPage) -> Vec<SessionSummary> {
        // In the order started, the daemon's order; its ids (`s1`, `s2`, ..., `s10`) do not
        // sort so, so a page starts after where `after` is listed and ends where `before` is
        // (an id listed nowhere, before the first that sorts after it).
        let st = self.state();
        let at = |id: &Option<String>, none: usize, past: usize| match id {
            Some(id) => match st.sessions.iter().position(|s| &s.id == id) {
                Some(at) => at + past,
                None => st
                    .sessions
                    .iter()
                    .position(|s| s.id > *id)
                    .unwrap_or(st.sessions.len()),
            },
            None => none,
        };
        let start = at(&page.after, 0, 1);
        let end = at(&page.before, st.sessions.len(), 0).max(start);
        let admitted: Vec<&SessionSummary> = st.sessions[start..end]
            .iter()
            .filter(|s| page.admits_status(s.status))
            .collect();
        let most = page.most();
        let skip = if page.last {
            admitted.len().saturating_sub(most)
        } else {
            0
        };
        admitted
            .into_iter()
            .skip(skip)
            .take(most)
            .cloned()
            .collect()
    }

    /// Whether [`SessionHost::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.state().shut_down
    }

    /// Refuses the next `count` subscriptions (`Unavailable`), as a daemon that cannot be
    /// reached for a moment does.
    pub fn refuse_subscriptions(&self, count: usize) {
        self.state().refused_subscriptions = count;
    }
}

#[async_trait::async_trait]
impl SessionHost for HostDouble {
    /// Records the operation; lists nothing and changes nothing (the daemon's agenda is tested
    /// on the real supervisor).
    async fn agenda(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        self.state().agenda.push(op);
        Ok(Vec::new())
    }

    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        let mut st = self.state();
        st.calls
            .push(format!("start {} in {}", request.task, request.project));
        if let Some(id) = request.resume.as_deref() {
            // A resume goes on as the listed session, under its id (as the daemon's does).
            st.started.push(request.clone());
            let resumed = st.session_mut(id)?;
            resumed.status = SessionStatus::Running;
            if let Some(level) = request.autonomy {
                resumed.autonomy = level;
            }
            let summary = resumed.clone();
            st.publish(id, AppEvent::TurnStarted { turn: 1 });
            return Ok(summary);
        }
        if request.task.is_empty() {
            return Err(HostError::new(HostErrorCode::InvalidRequest, "empty task"));
        }
        let n = st.next_id();
        let id = format!("{}{n}", st.id_prefix);
        let scripted = st.scripted;
        let summary = SessionSummary {
            id: id.clone(),
            parent: request.parent.clone(),
            project: request.project.clone(),
            task: request.task.clone(),
            backend: match scripted {
                true => request.backend.clone().unwrap_or(Backend::Native),
                false => Backend::Native,
            },
            provider: request.provider.clone().unwrap_or_else(|| "mock".into()),
            model: request.model.clone().unwrap_or_else(|| match scripted {
                true => "scripted".into(),
                false => "m".into(),
            }),
            status: SessionStatus::Running,
            reason: None,
            autonomy: request.autonomy.unwrap_or(st.default_autonomy),
            created: "2026-12-01T10:00:00Z".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            skills: Vec::new(),
            final_text: None,
            result: None,
            worktree: None,
            usage: None,
            run_by: None,
            network: None,
        };
        st.sessions.push(summary.clone());
        st.started.push(request.clone());
        if scripted {
            st.publish(
                &id,
                AppEvent::SessionStarted {
                    session_id: id.clone(),
                    task: request.task.clone(),
                    model: summary.model.clone(),
                    provider: summary.provider.clone(),
                    project_root: request.project.clone(),
                    resumed: false,
                },
            );
        }
        st.publish(&id, AppEvent::TurnStarted { turn: 1 });
        if scripted {
            st.play_start(&id, &request)?;
        }
        let summary = st.session_mut(&id)?.clone();
        Ok(summary)
    }

    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        let sessions = self.admitted(page);
        self.state().listed += sessions.len();
        Ok(sessions.into_iter().map(SessionSummary::listed).collect())
    }

    /// Counted where they are kept, nothing handed out.
    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        Ok(self.admitted(&page.unlimited()).len() as u64)
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.state().session_mut(id).map(|s| s.clone())
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        Ok(self.state().approvals.clone())
    }

    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError> {
        let mut st = self.state();
        let msg = serde_json::to_string(&intent.msg).unwrap_or_default();
        st.calls.push(format!("send {} {msg}", intent.session_id));
        let id = intent.session_id.clone();
        let status = st.session_mut(&id)?.status;
        if status.is_finished() {
            return Err(HostError::new(
                HostErrorCode::SessionFinished,
                format!("session {id} has ended"),
            ));
        }
        let verdict = match &intent.msg {
            ControlMsg::Approve { id: a }
            | ControlMsg::ApproveAll { id: a }
            | ControlMsg::AllowHost { id: a } => Some((*a, Verdict::Approve)),
            ControlMsg::Skip { id: a } => Some((*a, Verdict::Skip)),
            ControlMsg::Deny { id: a } => Some((*a, Verdict::Deny)),
            ControlMsg::Input { .. } | ControlMsg::FollowUp { .. } => None,
        };
        if let Some((approval, verdict)) = verdict {
            let Some(at) = st
                .approvals
                .iter()
                .position(|a| a.id == approval && a.session_id == id)
            else {
                return Err(match st.answered.contains(&approval) {
                    true => HostError::new(
                        HostErrorCode::AlreadyAnswered,
                        format!("approval {approval} was already answered"),
                    ),
                    false => HostError::new(
                        HostErrorCode::UnknownApproval,
                        format!("session {id} has no approval {approval}"),
                    ),
                });
            };
            st.approvals.remove(at);
            st.answered.insert(approval);
            if st.scripted {
                st.play_verdict(&id, approval, verdict)?;
            }
        } else if st.scripted {
            st.play_message(&id, &intent.msg)?;
        }
        // Where a daemon would have put it, by the status it was sent to.
        let sent = match (&intent.msg, status) {
            (ControlMsg::FollowUp { .. }, SessionStatus::Running) => Sent::AfterRound,
            (ControlMsg::FollowUp { .. }, SessionStatus::WaitingForHuman) => Sent::AfterAnswer,
            (_, SessionStatus::Queued) => Sent::Queued,
            _ => Sent::Now,
        };
        st.intents.push(intent);
        Ok(sent)
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        let mut st = self.state();
        st.calls.push(format!("interrupt {id}"));
        let scripted = st.scripted;
        let session = st.session_mut(id)?;
        if scripted {
            session.status = SessionStatus::Idle;
        }
        st.interrupts.push(id.to_owned());
        Ok(())
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        let mut st = self.state();
        st.calls.push(format!("stop {id}"));
        st.session_mut(id)?.status = SessionStatus::Interrupted;
        st.stopped.push(id.to_owned());
        if st.scripted {
            st.publish(
                id,
                AppEvent::SessionEnded {
                    session_id: id.to_owned(),
                    status: EndStatus::Failed,
                    reason: "stopped".into(),
                },
            );
        }
        Ok(())
    }

    /// A rewind as the daemon takes it, without files: an unknown session and a session whose
    /// turn runs are refused; otherwise the report says `a.txt` changes (and, unless a
    /// preview, publishes the rewind on the session's stream).
    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError> {
        let mut st = self.state();
        let target = request
            .to_turn
            .map_or_else(|| "undo".to_owned(), |t| t.to_string());
        st.calls
            .push(format!("rewind {} {target}", request.session_id));
        request
            .check()
            .map_err(|m| HostError::new(HostErrorCode::InvalidRequest, m))?;
        let status = st.session_mut(&request.session_id)?.status;
        match status {
            SessionStatus::Running | SessionStatus::WaitingForHuman | SessionStatus::Queued => {
                return Err(HostError::new(
                    HostErrorCode::InvalidRequest,
                    format!(
                        "session {} is running a turn; rewind it once the turn ends",
                        request.session_id
                    ),
                ));
            }
            SessionStatus::Idle
            | SessionStatus::Done
            | SessionStatus::Failed
            | SessionStatus::Interrupted => {}
        }
        let summary = format!(
            "{} {target}",
            if request.preview {
                "rewinding"
            } else {
                "rewound"
            }
        );
        let report = RewindReport {
            session_id: request.session_id.clone(),
            preview: request.preview,
            to_turn: request.to_turn,
            checkpoint_turn: request.to_turn,
            changes: vec![FileChange {
                path: "a.txt".into(),
                kind: ChangeKind::Modified,
            }],
            diff: request.preview.then(|| "-v2\n+v1\n".to_owned()),
            diff_truncated: false,
            changed_outside: Vec::new(),
            not_restored: Vec::new(),
            ignored: Vec::new(),
            conversation_cut: None,
            summary: summary.clone(),
            children: Vec::new(),
        };
        if !request.preview {
            st.publish(
                &request.session_id,
                AppEvent::ContextManagement {
                    action: ContextAction::Rewind,
                    detail: summary,
                },
            );
        }
        st.rewinds.push(request);
        Ok(report)
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        let mut st = self.state();
        st.calls
            .push(format!("set_autonomy {session:?} {}", level.name()));
        match session {
            Some(id) => st.session_mut(id)?.autonomy = level,
            None => st.default_autonomy = level,
        }
        Ok(())
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        Ok(Settings {
            default_autonomy: self.state().default_autonomy,
            default_backend: Backend::Native,
            max_running: 4,
            max_autonomy: AutonomyLevel::Full,
        })
    }

    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        if change.max_running == Some(0) {
            return Err(HostError::new(
                HostErrorCode::InvalidRequest,
                "max_running must be at least 1",
            ));
        }
        if let Some(level) = change.default_autonomy {
            self.state().default_autonomy = level;
        }
        self.settings().await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        let mut st = self.state();
        st.subscriptions += 1;
        if st.refused_subscriptions > 0 {
            st.refused_subscriptions -= 1;
            return Err(HostError::new(
                HostErrorCode::Unavailable,
                "the double refuses this subscription",
            ));
        }
        if let Some(id) = session {
            st.session_mut(id)?;
        }
        let history: Vec<Envelope> = match after {
            None => Vec::new(),
            Some(after) => st
                .log
                .iter()
                .filter(|e| e.seq > after && session.is_none_or(|s| s == e.session_id))
                .cloned()
                .collect(),
        };
        let history_end = history.last().map_or(0, |e| e.seq);
        let capacity = match st.scripted {
            true => SCRIPTED_CAPACITY,
            false => SUBSCRIBER_CAPACITY,
        };
        let (tx, rx) = mpsc::channel(capacity + history.len());
        for envelope in history {
            // The queue was made with room for the whole history.
            let _ = tx.try_send(StreamItem::Event(Arc::new(envelope)));
        }
        st.subscribers.push((session.map(str::to_owned), tx));
        Ok(EventStream::new(rx, history_end))
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        self.state().session_mut(id)?;
        Ok(PathBuf::from("/logs").join(id))
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        let mut st = self.state();
        st.shut_down = true;
        st.subscribers.clear();
        Ok(())
    }
}

//! A small in-memory `SessionHost`: sessions, an approval queue and a gapless event log with
//! bounded subscriber queues, so the socket layer can be tested without a supervisor.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use intendant_core::host::{EventStream, SessionHost};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    Backend, Envelope, HostError, HostErrorCode, PendingApproval, SessionIntent, SessionStatus,
    SessionSummary, Settings, SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg};
use tokio::sync::mpsc;

/// Queue of each subscriber.
pub const SUBSCRIBER_CAPACITY: usize = 64;

#[derive(Default)]
struct State {
    sessions: Vec<SessionSummary>,
    approvals: Vec<PendingApproval>,
    log: Vec<Envelope>,
    subscribers: Vec<(Option<String>, mpsc::Sender<StreamItem>)>,
    intents: Vec<SessionIntent>,
    /// Approvals answered so far (a second answer is `AlreadyAnswered`).
    answered: Vec<u64>,
    /// Sessions interrupted, in order.
    interrupts: Vec<String>,
    settings_autonomy: Option<AutonomyLevel>,
    shut_down: bool,
}

#[derive(Default, Clone)]
pub struct HostDouble {
    state: Arc<Mutex<State>>,
}

fn unknown(id: &str) -> HostError {
    HostError::new(HostErrorCode::UnknownSession, format!("no session {id}"))
}

impl HostDouble {
    pub fn new() -> Arc<HostDouble> {
        Arc::new(HostDouble::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Publishes `event` for `session` with the next seq; returns the seq.
    pub fn publish(&self, session: &str, event: AppEvent) -> u64 {
        let mut state = self.state();
        let seq = state.log.len() as u64 + 1;
        let envelope = Envelope {
            seq,
            session_id: session.to_string(),
            ts: "2026-12-01T10:00:00.000Z".into(),
            event,
        };
        state.log.push(envelope.clone());
        state.subscribers.retain(|(filter, tx)| {
            if filter.as_deref().is_some_and(|f| f != session) {
                return true;
            }
            match tx.try_send(StreamItem::Event(envelope.clone())) {
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

    /// Adds a pending approval to `session` (and its `approval_required` event).
    pub fn ask_approval(&self, session: &str, id: u64) {
        let seq = self.publish(
            session,
            AppEvent::ApprovalRequired {
                id,
                session_id: session.to_string(),
                command_preview: format!("rm -rf build{id}"),
                detail: None,
                category: ActionCategory::Destructive,
            },
        );
        self.state().approvals.push(PendingApproval {
            id,
            session_id: session.to_string(),
            project: "/p".into(),
            command_preview: format!("rm -rf build{id}"),
            detail: None,
            category: ActionCategory::Destructive,
            seq,
            requested: "2026-12-01T10:00:00.000Z".into(),
        });
    }

    pub fn intents(&self) -> Vec<SessionIntent> {
        self.state().intents.clone()
    }

    pub fn interrupts(&self) -> Vec<String> {
        self.state().interrupts.clone()
    }

    pub fn is_shut_down(&self) -> bool {
        self.state().shut_down
    }

    fn find(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.state()
            .sessions
            .iter()
            .find(|s| s.id == id)
            .cloned()
            .ok_or_else(|| unknown(id))
    }
}

#[async_trait::async_trait]
impl SessionHost for HostDouble {
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        if request.task.is_empty() {
            return Err(HostError::new(HostErrorCode::InvalidRequest, "empty task"));
        }
        let summary = {
            let mut state = self.state();
            let summary = SessionSummary {
                id: format!("s{}", state.sessions.len() + 1),
                parent: None,
                project: request.project,
                task: request.task,
                backend: Backend::Native,
                provider: request.provider.unwrap_or_else(|| "mock".into()),
                model: request.model.unwrap_or_else(|| "m".into()),
                status: SessionStatus::Running,
                autonomy: request.autonomy.unwrap_or(AutonomyLevel::Medium),
                created: "2026-12-01T10:00:00Z".into(),
                input_tokens: 0,
                output_tokens: 0,
                cost_usd: 0.0,
                pending_approvals: 0,
                final_text: None,
                result: None,
                worktree: None,
            };
            state.sessions.push(summary.clone());
            summary
        };
        self.publish(&summary.id, AppEvent::TurnStarted { turn: 1 });
        Ok(summary)
    }

    async fn sessions(&self) -> Result<Vec<SessionSummary>, HostError> {
        Ok(self.state().sessions.clone())
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.find(id)
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        Ok(self.state().approvals.clone())
    }

    async fn send(&self, intent: SessionIntent) -> Result<(), HostError> {
        self.find(&intent.session_id)?;
        let approval = match &intent.msg {
            ControlMsg::Approve { id }
            | ControlMsg::Deny { id }
            | ControlMsg::Skip { id }
            | ControlMsg::ApproveAll { id } => Some(*id),
            ControlMsg::Input { .. } | ControlMsg::FollowUp { .. } => None,
        };
        let mut state = self.state();
        if let Some(id) = approval {
            let at = state
                .approvals
                .iter()
                .position(|a| a.id == id && a.session_id == intent.session_id)
                .ok_or_else(|| match state.answered.contains(&id) {
                    true => HostError::new(
                        HostErrorCode::AlreadyAnswered,
                        format!("approval {id} was already answered"),
                    ),
                    false => {
                        HostError::new(HostErrorCode::UnknownApproval, format!("no approval {id}"))
                    }
                })?;
            state.approvals.remove(at);
            state.answered.push(id);
        }
        state.intents.push(intent);
        Ok(())
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        self.find(id)?;
        self.state().interrupts.push(id.to_string());
        Ok(())
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        self.find(id)?;
        let mut state = self.state();
        if let Some(s) = state.sessions.iter_mut().find(|s| s.id == id) {
            s.status = SessionStatus::Interrupted;
        }
        Ok(())
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        match session {
            Some(id) => {
                self.find(id)?;
                let mut state = self.state();
                if let Some(s) = state.sessions.iter_mut().find(|s| s.id == id) {
                    s.autonomy = level;
                }
            }
            None => self.state().settings_autonomy = Some(level),
        }
        Ok(())
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        Ok(Settings {
            default_autonomy: self
                .state()
                .settings_autonomy
                .unwrap_or(AutonomyLevel::Medium),
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
            self.state().settings_autonomy = Some(level);
        }
        self.settings().await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        if let Some(id) = session {
            self.find(id)?;
        }
        let mut state = self.state();
        let history: Vec<Envelope> = match after {
            None => Vec::new(),
            Some(after) => state
                .log
                .iter()
                .filter(|e| e.seq > after && session.is_none_or(|s| s == e.session_id))
                .cloned()
                .collect(),
        };
        let history_end = history.last().map_or(0, |e| e.seq);
        let (tx, rx) = mpsc::channel(SUBSCRIBER_CAPACITY + history.len());
        for envelope in history {
            tx.try_send(StreamItem::Event(envelope)).unwrap();
        }
        state.subscribers.push((session.map(str::to_string), tx));
        Ok(EventStream::new(rx, history_end))
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        self.find(id)?;
        Ok(PathBuf::from("/logs").join(id))
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        let mut state = self.state();
        state.shut_down = true;
        state.subscribers.clear();
        Ok(())
    }
}

//! An in-test [`SessionHost`]: sessions that follow a small script, with a real daemon-wide
//! seq, replay from a seq, live subscribers and the approval queue, so the MCP tool layer is
//! exercised against the trait's contract.
//!
//! A task containing `needs approval` asks for one approval (`$ touch out.txt`) and finishes
//! once approved; any other task finishes its first round at once. A task containing `ask`
//! asks a question instead.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use intendant_core::host::{EventStream, SessionHost};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{
    Backend, Envelope, HostError, HostErrorCode, PendingApproval, SessionIntent, SessionStatus,
    SessionSummary, Settings, SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::events::{
    ActionCategory, AppEvent, ControlMsg, EndStatus, RoundEnd, Verdict,
};
use tokio::sync::mpsc;

#[derive(Default)]
struct State {
    seq: u64,
    sessions: Vec<SessionSummary>,
    log: Vec<Envelope>,
    approvals: Vec<PendingApproval>,
    answered: HashSet<u64>,
    questions: Vec<(String, u64)>,
    next_id: u64,
    subscribers: Vec<(Option<String>, mpsc::Sender<StreamItem>)>,
    default_autonomy: AutonomyLevel,
    /// Every intent and call the host took, for assertions.
    calls: Vec<String>,
}

/// The double.
#[derive(Default)]
pub struct FakeHost {
    state: Mutex<State>,
}

fn err(code: HostErrorCode, message: impl Into<String>) -> HostError {
    HostError::new(code, message)
}

impl State {
    fn publish(&mut self, session: &str, event: AppEvent) {
        self.seq += 1;
        let env = Envelope {
            seq: self.seq,
            session_id: session.to_owned(),
            ts: "2026-12-01T10:00:00.000Z".into(),
            event,
        };
        self.log.push(env.clone());
        self.subscribers.retain(|(filter, tx)| {
            if filter.as_deref().is_some_and(|f| f != session) {
                return !tx.is_closed();
            }
            tx.try_send(StreamItem::Event(env.clone())).is_ok()
        });
    }

    fn session_mut(&mut self, id: &str) -> Result<&mut SessionSummary, HostError> {
        self.sessions
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or_else(|| err(HostErrorCode::UnknownSession, format!("no session {id}")))
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
}

impl FakeHost {
    /// What the host was asked, in order.
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Publishes `event` for session `id` (a test driving a session by hand).
    pub fn publish(&self, id: &str, event: AppEvent) {
        self.state.lock().unwrap().publish(id, event);
    }
}

#[async_trait::async_trait]
impl SessionHost for FakeHost {
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        let mut st = self.state.lock().unwrap();
        st.calls
            .push(format!("start {} in {}", request.task, request.project));
        st.next_id += 1;
        let id = format!("s{}", st.next_id);
        let summary = SessionSummary {
            id: id.clone(),
            parent: None,
            project: request.project.clone(),
            task: request.task.clone(),
            backend: request.backend.clone().unwrap_or(Backend::Native),
            provider: request.provider.clone().unwrap_or_else(|| "mock".into()),
            model: request.model.clone().unwrap_or_else(|| "scripted".into()),
            status: SessionStatus::Running,
            autonomy: request.autonomy.unwrap_or(st.default_autonomy),
            created: "2026-12-01T10:00:00Z".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            final_text: None,
            result: None,
            worktree: None,
        };
        st.sessions.push(summary.clone());
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
        st.publish(&id, AppEvent::TurnStarted { turn: 1 });
        if request.task.contains("needs approval") {
            st.next_id += 1;
            let approval = st.next_id;
            st.publish(
                &id,
                AppEvent::ApprovalRequired {
                    id: approval,
                    session_id: id.clone(),
                    command_preview: "$ touch out.txt".into(),
                    detail: None,
                    category: ActionCategory::CommandExec,
                },
            );
            let seq = st.seq;
            st.approvals.push(PendingApproval {
                id: approval,
                session_id: id.clone(),
                project: request.project.clone(),
                command_preview: "$ touch out.txt".into(),
                detail: None,
                category: ActionCategory::CommandExec,
                seq,
                requested: "2026-12-01T10:00:00Z".into(),
            });
            let s = st.session_mut(&id)?;
            s.status = SessionStatus::WaitingForHuman;
            s.pending_approvals = 1;
        } else if request.task.contains("ask") {
            st.next_id += 1;
            let q = st.next_id;
            st.publish(
                &id,
                AppEvent::HumanQuestion {
                    id: q,
                    question: "which file?".into(),
                },
            );
            st.questions.push((id.clone(), q));
            st.session_mut(&id)?.status = SessionStatus::WaitingForHuman;
        } else {
            let message = format!("finished: {}", request.task);
            st.finish_round(&id, &message);
        }
        let summary = st.session_mut(&id)?.clone();
        Ok(summary)
    }

    async fn sessions(&self) -> Result<Vec<SessionSummary>, HostError> {
        Ok(self.state.lock().unwrap().sessions.clone())
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.state
            .lock()
            .unwrap()
            .session_mut(id)
            .map(|s| s.clone())
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        Ok(self.state.lock().unwrap().approvals.clone())
    }

    async fn send(&self, intent: SessionIntent) -> Result<(), HostError> {
        let mut st = self.state.lock().unwrap();
        st.calls.push(format!(
            "send {} {}",
            intent.session_id,
            serde_json::to_string(&intent.msg).unwrap()
        ));
        let id = intent.session_id.clone();
        let status = st.session_mut(&id)?.status;
        if status.is_finished() {
            return Err(err(
                HostErrorCode::SessionFinished,
                format!("session {id} has ended"),
            ));
        }
        let verdict = match &intent.msg {
            ControlMsg::Approve { id: a } | ControlMsg::ApproveAll { id: a } => {
                Some((*a, Verdict::Approve))
            }
            ControlMsg::Skip { id: a } => Some((*a, Verdict::Skip)),
            ControlMsg::Deny { id: a } => Some((*a, Verdict::Deny)),
            ControlMsg::Input { .. } | ControlMsg::FollowUp { .. } => None,
        };
        if let Some((approval, verdict)) = verdict {
            if st.answered.contains(&approval) {
                return Err(err(
                    HostErrorCode::AlreadyAnswered,
                    format!("approval {approval} was already answered"),
                ));
            }
            let Some(pos) = st
                .approvals
                .iter()
                .position(|p| p.id == approval && p.session_id == id)
            else {
                return Err(err(
                    HostErrorCode::UnknownApproval,
                    format!("session {id} has no approval {approval}"),
                ));
            };
            st.approvals.remove(pos);
            st.answered.insert(approval);
            st.session_mut(&id)?.pending_approvals = 0;
            st.publish(
                &id,
                AppEvent::ApprovalResolved {
                    id: approval,
                    verdict,
                },
            );
            if verdict == Verdict::Deny {
                st.publish(
                    &id,
                    AppEvent::SessionEnded {
                        session_id: id.clone(),
                        status: EndStatus::Denied,
                        reason: "denied".into(),
                    },
                );
                st.session_mut(&id)?.status = SessionStatus::Done;
            } else {
                st.finish_round(&id, "approved and done: wrote out.txt");
            }
            return Ok(());
        }
        match intent.msg {
            ControlMsg::Input { text } => {
                let Some(pos) = st.questions.iter().position(|(s, _)| s == &id) else {
                    return Err(err(
                        HostErrorCode::UnknownApproval,
                        format!("session {id} asked no question"),
                    ));
                };
                let (_, q) = st.questions.remove(pos);
                st.publish(
                    &id,
                    AppEvent::HumanAnswer {
                        id: q,
                        text: text.clone(),
                    },
                );
                st.finish_round(&id, &format!("answered: {text}"));
            }
            ControlMsg::FollowUp { text } => {
                st.session_mut(&id)?.status = SessionStatus::Running;
                st.publish(&id, AppEvent::TurnStarted { turn: 2 });
                st.finish_round(&id, &format!("follow-up done: {text}"));
            }
            ControlMsg::Approve { .. }
            | ControlMsg::Deny { .. }
            | ControlMsg::Skip { .. }
            | ControlMsg::ApproveAll { .. } => {}
        }
        Ok(())
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        let mut st = self.state.lock().unwrap();
        st.calls.push(format!("interrupt {id}"));
        st.session_mut(id)?.status = SessionStatus::Idle;
        Ok(())
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        let mut st = self.state.lock().unwrap();
        st.calls.push(format!("stop {id}"));
        st.session_mut(id)?.status = SessionStatus::Interrupted;
        st.publish(
            id,
            AppEvent::SessionEnded {
                session_id: id.to_owned(),
                status: EndStatus::Failed,
                reason: "stopped".into(),
            },
        );
        Ok(())
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        let mut st = self.state.lock().unwrap();
        st.calls
            .push(format!("set_autonomy {session:?} {}", level.name()));
        match session {
            Some(id) => st.session_mut(id)?.autonomy = level,
            None => st.default_autonomy = level,
        }
        Ok(())
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        let st = self.state.lock().unwrap();
        Ok(Settings {
            default_autonomy: st.default_autonomy,
            default_backend: Backend::Native,
            max_running: 4,
            max_autonomy: AutonomyLevel::Full,
        })
    }

    async fn update_settings(&self, _change: SettingsChange) -> Result<Settings, HostError> {
        Err(err(HostErrorCode::InvalidRequest, "not in the double"))
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        let mut st = self.state.lock().unwrap();
        if let Some(id) = session {
            st.session_mut(id)?;
        }
        let (tx, rx) = mpsc::channel(1024);
        let mut history_end = 0;
        if let Some(after) = after {
            for env in &st.log {
                if env.seq > after && session.is_none_or(|s| s == env.session_id) {
                    history_end = env.seq;
                    let _ = tx.try_send(StreamItem::Event(env.clone()));
                }
            }
        }
        st.subscribers.push((session.map(str::to_owned), tx));
        Ok(EventStream::new(rx, history_end))
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        self.state.lock().unwrap().session_mut(id)?;
        Ok(PathBuf::from("/nonexistent"))
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        Ok(())
    }
}

//! The daemon's agenda (`docs/agenda.md`): the operations every surface sends
//! ([`AgendaOp`]), pending schedules shown in the approval queue as category `schedule` under
//! the pseudo-session [`AGENDA_SESSION`], and the timer that fires reminders and starts
//! approved schedules, each once, as [`AppEvent::Agenda`] events.
//!
//! The ledger and its once-only decisions are `intendant_store::agenda` (write transactions
//! that take the lock first, so two daemons on one database never both fire a reminder or
//! start a schedule). Database calls run on a blocking thread.

use std::sync::{Arc, Weak};
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_protocol::agenda::{
    AGENDA_SESSION, AgendaItem, AgendaKind, AgendaNotice, AgendaOp, AgendaState, rfc3339,
};
use intendant_protocol::daemon::{HostError, HostErrorCode, PendingApproval, StartRequest};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, Verdict};
use intendant_protocol::utc::UtcTime;
use intendant_store::agenda::{self as ledger, AgendaError, Entry, Kind};
use intendant_store::{Store, StoreError};

use super::{Inner, Supervisor, serving};
use crate::when::parse_when;

/// How late (seconds) an approved schedule may still be started: later than this, the daemon
/// was not running at its time and it is `missed`. Also how long a claim may go without a
/// recorded session before it is `missed` as uncertain.
pub const SCHEDULE_GRACE_SECS: i64 = 120;
/// How often the daemon looks at the agenda.
pub const AGENDA_TICK: Duration = Duration::from_secs(1);

fn now() -> i64 {
    UtcTime::now().unix_seconds()
}

fn store_error(e: StoreError) -> HostError {
    let code = match e {
        StoreError::Locked { .. } => HostErrorCode::Busy,
        _ => HostErrorCode::Internal,
    };
    HostError::new(code, e.to_string())
}

fn agenda_error(e: AgendaError) -> HostError {
    match e {
        AgendaError::Store(e) => store_error(e),
        AgendaError::Unknown(_) | AgendaError::WrongState { .. } | AgendaError::Invalid(_) => {
            HostError::new(HostErrorCode::InvalidRequest, e.to_string())
        }
        AgendaError::Full(_) => HostError::new(HostErrorCode::Busy, e.to_string()),
    }
}

/// An entry as every surface shows it.
fn item(e: &Entry) -> AgendaItem {
    AgendaItem {
        id: u64::try_from(e.id).unwrap_or(0),
        kind: match e.kind {
            Kind::Item => AgendaKind::Item,
            Kind::Schedule => AgendaKind::Schedule,
        },
        text: e.text.clone(),
        state: AgendaState::from_name(e.state.as_str()).unwrap_or(AgendaState::Failed),
        created: rfc3339(e.created),
        at: e.at.map(rfc3339),
        request: e
            .request
            .as_deref()
            .and_then(|r| serde_json::from_str::<StartRequest>(r).ok()),
        digest: e.digest.clone(),
        session_id: e.session_id.clone(),
        note: e.note.clone(),
    }
}

fn id_of(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// Runs `op` on the database (blocking).
fn apply(store: &Store, op: AgendaOp, now: i64) -> Result<Vec<Entry>, HostError> {
    let when = |text: &str| parse_when(text, now).map_err(invalid);
    let one = |r: Result<Entry, AgendaError>| r.map(|e| vec![e]).map_err(agenda_error);
    match op {
        AgendaOp::List => ledger::list(store).map_err(store_error),
        AgendaOp::Add { text, remind_at } => {
            let at = remind_at.as_deref().map(when).transpose()?;
            one(ledger::add_item(store, &text, at, now))
        }
        AgendaOp::Done { id } => one(ledger::done(store, id_of(id))),
        AgendaOp::Snooze { id, until } => one(ledger::snooze(store, id_of(id), when(&until)?, now)),
        AgendaOp::Schedule { at, request } => {
            check_request(&request)?;
            let json = serde_json::to_string(&*request)
                .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
            one(ledger::add_schedule(
                store,
                &request.task,
                when(&at)?,
                &json,
                now,
            ))
        }
        AgendaOp::Approve { id } => one(ledger::approve(store, id_of(id), now)),
        AgendaOp::Reject { id } => one(ledger::reject(store, id_of(id))),
    }
}

fn invalid(message: String) -> HostError {
    HostError::new(HostErrorCode::InvalidRequest, message)
}

/// What a scheduled request must be: a fresh top-level task in an absolute project.
fn check_request(request: &StartRequest) -> Result<(), HostError> {
    if request.task.trim().is_empty() {
        return Err(invalid("a scheduled session needs a task".to_owned()));
    }
    if !std::path::Path::new(&request.project).is_absolute() {
        return Err(invalid(format!(
            "the project {:?} is not an absolute path",
            request.project
        )));
    }
    if request.parent.is_some() || request.isolation.is_some() || request.role.is_some() {
        return Err(invalid(
            "a scheduled session is a top-level session: no parent, isolation or role".to_owned(),
        ));
    }
    if request.resume.is_some() {
        return Err(invalid(
            "a scheduled session starts fresh; resuming is not scheduled".to_owned(),
        ));
    }
    Ok(())
}

/// A pending schedule as the approval queue shows it: the whole request and its digest.
fn pending_approval(e: &Entry) -> PendingApproval {
    let shown = item(e);
    let request = shown.request.clone().unwrap_or_default();
    let at = shown.at.clone().unwrap_or_default();
    let mut options = Vec::new();
    if let Some(level) = request.autonomy {
        options.push(format!("autonomy {level}"));
    }
    if let Some(backend) = &request.backend {
        options.push(format!("backend {}", backend.name()));
    }
    if let Some(provider) = &request.provider {
        options.push(format!("provider {provider}"));
    }
    if let Some(model) = &request.model {
        options.push(format!("model {model}"));
    }
    if let Some(budget) = request.token_budget {
        options.push(format!("budget {budget} tokens"));
    }
    let options = if options.is_empty() {
        String::new()
    } else {
        format!(" ({})", options.join(", "))
    };
    PendingApproval {
        id: shown.id,
        session_id: AGENDA_SESSION.to_owned(),
        project: request.project.clone(),
        command_preview: format!("at {at} start a session{options}: {}", request.task),
        detail: Some(format!(
            "request: {}\nsha256: {}",
            e.request.as_deref().unwrap_or_default(),
            shown.digest.unwrap_or_default()
        )),
        category: ActionCategory::Schedule,
        seq: 0,
        requested: shown.created,
    }
}

/// Runs `f` with the database on a blocking thread.
async fn blocking<T: Send + 'static>(
    inner: &Arc<Inner>,
    f: impl FnOnce(&Store) -> Result<T, HostError> + Send + 'static,
) -> Result<T, HostError> {
    let shared = inner.env.store.clone();
    tokio::task::spawn_blocking(move || f(&shared.get().map_err(store_error)?))
        .await
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?
}

/// What followers of the approval queue are told of an agenda change, under the pseudo-session
/// `agenda`: a schedule now waiting for its owner, or one that no longer waits (approved,
/// rejected, cancelled). Without it an open dashboard showed a schedule made or answered
/// elsewhere (`ctl`, MCP) only once some other event had it read the queue again.
fn queue_event(op: &QueueChange, entries: &[Entry]) -> Option<AppEvent> {
    let e = entries.first().filter(|e| e.kind == Kind::Schedule)?;
    let id = u64::try_from(e.id).ok()?;
    match op {
        QueueChange::Asked => {
            let shown = pending_approval(e);
            Some(AppEvent::ApprovalRequired {
                id,
                session_id: AGENDA_SESSION.to_owned(),
                command_preview: shown.command_preview,
                detail: shown.detail,
                category: shown.category,
            })
        }
        QueueChange::Answered(verdict) => Some(AppEvent::ApprovalResolved {
            id,
            verdict: *verdict,
        }),
    }
}

/// How an agenda operation changes the approval queue, if it does.
enum QueueChange {
    /// A schedule was made: it waits for its owner.
    Asked,
    /// A schedule was approved, rejected or cancelled.
    Answered(Verdict),
}

impl QueueChange {
    fn of(op: &AgendaOp) -> Option<QueueChange> {
        match op {
            AgendaOp::Schedule { .. } => Some(QueueChange::Asked),
            AgendaOp::Approve { .. } => Some(QueueChange::Answered(Verdict::Approve)),
            AgendaOp::Reject { .. } | AgendaOp::Done { .. } => {
                Some(QueueChange::Answered(Verdict::Deny))
            }
            AgendaOp::List | AgendaOp::Add { .. } | AgendaOp::Snooze { .. } => None,
        }
    }
}

impl Supervisor {
    /// One agenda operation from any surface.
    pub(super) async fn agenda_op(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        let change = QueueChange::of(&op);
        let (entries, waited) = blocking(&self.inner, move |store| {
            // A schedule marked done leaves the queue only if it waited there.
            let waited = match &op {
                AgendaOp::Done { id } => {
                    ledger::get(store, id_of(*id)).is_ok_and(|e| e.state == ledger::State::Pending)
                }
                _ => true,
            };
            apply(store, op, now()).map(|entries| (entries, waited))
        })
        .await?;
        self.tell_queue(change.filter(|_| waited), &entries);
        Ok(entries.iter().map(item).collect())
    }

    /// Publishes [`queue_event`] of a change done.
    fn tell_queue(&self, change: Option<QueueChange>, entries: &[Entry]) {
        if let Some(event) = change.and_then(|change| queue_event(&change, entries)) {
            self.inner.publish(AGENDA_SESSION, &event);
        }
    }

    /// The schedules waiting for the owner, as approvals (none when the database cannot be
    /// read: the sessions' approvals are still listed).
    pub(super) async fn pending_schedules(&self) -> Vec<PendingApproval> {
        blocking(&self.inner, |store| {
            ledger::pending(store).map_err(store_error)
        })
        .await
        .map(|entries| entries.iter().map(pending_approval).collect())
        .unwrap_or_default()
    }

    /// An answer to a pending schedule (`approve` or `deny`, addressed to the pseudo-session
    /// `agenda`); any other intent for it is refused.
    pub(super) async fn answer_schedule(&self, msg: ControlMsg) -> Result<(), HostError> {
        let op = match msg {
            ControlMsg::Approve { id } => AgendaOp::Approve { id },
            ControlMsg::Deny { id } => AgendaOp::Reject { id },
            other => {
                return Err(invalid(format!(
                    "a scheduled session is approved or denied, not answered with {}",
                    other.name()
                )));
            }
        };
        let id = match op {
            AgendaOp::Approve { id } | AgendaOp::Reject { id } => id,
            _ => return Err(invalid("not an answer".to_owned())),
        };
        let change = QueueChange::of(&op);
        blocking(&self.inner, move |store| {
            let unknown = || {
                HostError::new(
                    HostErrorCode::UnknownApproval,
                    format!("no scheduled session {id} waits for approval"),
                )
            };
            let entry = match ledger::get(store, id_of(id)) {
                Ok(e) if e.kind == Kind::Schedule => e,
                Ok(_) | Err(AgendaError::Unknown(_)) => return Err(unknown()),
                Err(e) => return Err(agenda_error(e)),
            };
            if entry.state != ledger::State::Pending {
                return Err(HostError::new(
                    HostErrorCode::AlreadyAnswered,
                    format!(
                        "scheduled session {id} was already answered (it is {})",
                        entry.state.as_str()
                    ),
                ));
            }
            apply(store, op, now())
        })
        .await
        .map(|entries| self.tell_queue(change, &entries))
    }

    /// Starts the daemon's agenda timer: every [`AGENDA_TICK`] it fires the due reminders and
    /// starts the due approved schedules ([`Supervisor::agenda_tick`]). It ends with the
    /// supervisor.
    pub fn start_agenda(&self) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(AGENDA_TICK).await;
                let Some(inner) = serving(&weak) else {
                    return;
                };
                Supervisor { inner }.agenda_tick(now()).await;
            }
        })
    }

    /// One look at the agenda at `now` (Unix seconds): each due reminder is published once, each
    /// due approved schedule this daemon claims is started (exactly its stored request), and
    /// what was missed is published. A database fault is published as a warning and tried
    /// again at the next tick.
    pub async fn agenda_tick(&self, now: i64) {
        let claimer = format!("daemon pid {}", std::process::id());
        let looked = blocking(&self.inner, move |store| {
            let reminders = ledger::take_due_reminders(store, now).map_err(store_error)?;
            let due = ledger::claim_due(store, now, SCHEDULE_GRACE_SECS, &claimer)
                .map_err(store_error)?;
            Ok((reminders, due))
        })
        .await;
        let (reminders, due) = match looked {
            Ok(found) => found,
            Err(e) => {
                self.inner.publish(
                    AGENDA_SESSION,
                    &AppEvent::Warning {
                        message: format!("the agenda could not be read: {}", e.message),
                    },
                );
                return;
            }
        };
        for e in &reminders {
            self.notice(e, AgendaNotice::Reminder, String::new());
        }
        for e in &due.not_run {
            let notice = match e.state {
                ledger::State::Failed => AgendaNotice::Failed,
                _ => AgendaNotice::Missed,
            };
            if due.unanswered.contains(&e.id) {
                self.tell_queue(
                    Some(QueueChange::Answered(Verdict::Deny)),
                    std::slice::from_ref(e),
                );
            }
            self.notice(e, notice, e.note.clone().unwrap_or_default());
        }
        for e in due.to_start {
            self.start_scheduled(e).await;
        }
    }

    /// Starts a claimed schedule's request and records what came of it.
    async fn start_scheduled(&self, e: Entry) {
        let id = e.id;
        let request = e
            .request
            .as_deref()
            .map(serde_json::from_str::<StartRequest>);
        let started = match request {
            Some(Ok(request)) => self.start(request).await.map_err(|e| e.message),
            Some(Err(err)) => Err(format!("its stored request cannot be read: {err}")),
            None => Err("it has no stored request".to_owned()),
        };
        if let Ok(summary) = &started {
            // The session's own log says what started it: the agenda entry, its time and the
            // digest its owner approved.
            self.inner.publish(
                &summary.id,
                &AppEvent::Agenda {
                    id: u64::try_from(id).unwrap_or(0),
                    notice: AgendaNotice::Started,
                    text: e.text.clone(),
                    detail: format!(
                        "this session was started by agenda entry {id}, scheduled for {}, as its \
                         owner approved it (sha256 {})",
                        e.at.map(rfc3339).unwrap_or_default(),
                        e.digest.as_deref().unwrap_or_default()
                    ),
                },
            );
        }
        let recorded = match &started {
            Ok(summary) => {
                let session = summary.id.clone();
                blocking(&self.inner, move |store| {
                    ledger::record_started(store, id, &session).map_err(agenda_error)
                })
                .await
            }
            Err(why) => {
                let why = why.clone();
                blocking(&self.inner, move |store| {
                    ledger::record_failed(store, id, &why).map_err(agenda_error)
                })
                .await
            }
        };
        let (notice, mut detail) = match started {
            Ok(summary) => (AgendaNotice::Started, format!("session {}", summary.id)),
            Err(why) => (AgendaNotice::Failed, why),
        };
        if let Err(e) = recorded {
            detail.push_str(&format!(
                " (not recorded on the agenda: {}; it will show as missed, and is not run again)",
                e.message
            ));
        }
        self.notice(&e, notice, detail);
    }

    fn notice(&self, e: &Entry, notice: AgendaNotice, detail: String) {
        self.inner.publish(
            AGENDA_SESSION,
            &AppEvent::Agenda {
                id: u64::try_from(e.id).unwrap_or(0),
                notice,
                text: e.text.clone(),
                detail,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_request_must_be_a_fresh_top_level_task() {
        let ok = StartRequest {
            task: "review".into(),
            project: "/p".into(),
            ..StartRequest::default()
        };
        assert!(check_request(&ok).is_ok());
        for bad in [
            StartRequest {
                task: " ".into(),
                ..ok.clone()
            },
            StartRequest {
                project: "rel".into(),
                ..ok.clone()
            },
            StartRequest {
                parent: Some("x".into()),
                ..ok.clone()
            },
            StartRequest {
                resume: Some("x".into()),
                ..ok.clone()
            },
        ] {
            assert_eq!(
                check_request(&bad).unwrap_err().code,
                HostErrorCode::InvalidRequest
            );
        }
    }
}

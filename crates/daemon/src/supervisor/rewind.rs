//! A session's rewind, from whichever surface asked (the control socket, the dashboard, MCP):
//! refused while a turn of the session runs, waits for a human or a follow-up queues; done by
//! core's one entry point ([`rewind_recorded`]); and recorded on the session's stream, numbered
//! like every event. A follow-up or resume of the session is refused while the rewind runs, so
//! no turn changes the project under it; the conversation cut reaches a session waiting for a
//! follow-up when that follow-up arrives (the agent loop rebuilds its conversation then).

use std::sync::Arc;

use intendant_core::rewind::rewind_recorded;
use intendant_core::session_log::OfflineRecord;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{HostError, HostErrorCode, SessionStatus};
use intendant_protocol::events::AppEvent;

use super::{Inner, Supervisor, host_error, unknown_session};

/// Clears a session's `rewinding` however the rewind ends (a client that goes away drops it).
struct Rewinding {
    inner: Arc<Inner>,
    id: String,
}

impl Drop for Rewinding {
    fn drop(&mut self) {
        if let Some(entry) = self.inner.lock().sessions.get_mut(&self.id) {
            entry.rewinding = false;
        }
    }
}

impl Supervisor {
    /// [`intendant_core::host::SessionHost::rewind`].
    pub(super) async fn rewind_session(
        &self,
        request: RewindRequest,
    ) -> Result<RewindReport, HostError> {
        request
            .check()
            .map_err(|m| host_error(HostErrorCode::InvalidRequest, m))?;
        let id = request.session_id.clone();
        // A session that just ended still closes its record: its rewind is recorded offline.
        self.wound_down(&id).await;
        let (dir, claim, offline) = {
            let mut guard = self.inner.lock();
            let state = &mut *guard;
            // The status as listed: a pending approval makes a running session waiting.
            let listed = state.view(&id).ok_or_else(|| unknown_session(&id))?.status;
            let entry = state
                .sessions
                .get_mut(&id)
                .ok_or_else(|| unknown_session(&id))?;
            if entry.rewinding {
                return Err(host_error(
                    HostErrorCode::InvalidRequest,
                    format!("a rewind of session {id} is under way; try again once it is done"),
                ));
            }
            if state.resuming.contains(&id) {
                return Err(host_error(
                    HostErrorCode::InvalidRequest,
                    format!("session {id} is being resumed: a rewind waits until its turn ends"),
                ));
            }
            let status = listed;
            match status {
                SessionStatus::Running | SessionStatus::WaitingForHuman | SessionStatus::Queued => {
                    return Err(host_error(
                        HostErrorCode::InvalidRequest,
                        format!(
                            "session {id} is {}: a rewind waits until its turn ends (`intendant ctl interrupt {id}` ends the turn now)",
                            status.name().replace('_', " ")
                        ),
                    ));
                }
                SessionStatus::Idle
                | SessionStatus::Done
                | SessionStatus::Failed
                | SessionStatus::Interrupted => {}
            }
            let claim = (!request.preview).then(|| {
                entry.rewinding = true;
                Rewinding {
                    inner: Arc::clone(&self.inner),
                    id: id.clone(),
                }
            });
            let offline = !request.preview && !entry.runs_here();
            (entry.log_dir.clone(), claim, offline)
        };
        // An ended session's record is held while it is rewound: no resume reopens it
        // meanwhile, and one another process runs now refuses the rewind before it changes
        // anything.
        let mut record = if offline {
            let claimed = tokio::task::spawn_blocking({
                let dir = dir.clone();
                move || OfflineRecord::claim(&dir)
            })
            .await
            .map_err(|e| host_error(HostErrorCode::Internal, format!("rewind: {e}")))?;
            Some(claimed.map_err(|e| host_error(HostErrorCode::InvalidRequest, e.to_string()))?)
        } else {
            None
        };
        let rewound = rewind_recorded(&self.inner.env.home, &dir, &request)
            .await
            .map_err(|e| {
                let code = if e.is_refusal() {
                    HostErrorCode::InvalidRequest
                } else {
                    HostErrorCode::Internal
                };
                host_error(code, e.to_string())
            })?;
        if let Some(event) = &rewound.event {
            self.record(&id, &dir, event, record.as_mut());
        }
        drop(record);
        for child in &rewound.children {
            if let Some(event) = &child.event {
                self.record(&child.session_id, &child.dir, event, None);
            }
        }
        drop(claim);
        Ok(rewound.report)
    }

    /// Publishes `event` of session `id`: on its bus while it waits for a follow-up (the
    /// publish writes it to its log), else numbered here and appended to its log at `dir`
    /// through `held`, or its record taken now (its log is no longer held).
    fn record(
        &self,
        id: &str,
        dir: &std::path::Path,
        event: &AppEvent,
        held: Option<&mut OfflineRecord>,
    ) {
        let bus = {
            let state = self.inner.lock();
            state
                .sessions
                .get(id)
                .filter(|entry| entry.runs_here())
                .and_then(|entry| entry.live.as_ref().map(|live| live.bus.clone()))
        };
        match bus {
            Some(bus) => bus.emit(event.clone()),
            None => {
                let (seq, ts) = self.inner.publish(id, event);
                let recorded = match held {
                    Some(record) => record.record_published(event, seq, &ts),
                    None => OfflineRecord::claim(dir)
                        .and_then(|mut record| record.record_published(event, seq, &ts)),
                };
                if let Err(e) = recorded {
                    self.inner.publish(
                        id,
                        &AppEvent::Warning {
                            message: format!(
                                "the rewind is done but the session log could not record it: {e}"
                            ),
                        },
                    );
                }
            }
        }
    }
}

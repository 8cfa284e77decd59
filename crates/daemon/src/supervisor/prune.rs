//! Pruning a daemon's state root of sessions that ended long ago (`intendant sessions prune`
//! through the socket, `[daemon] session_retention_days`): core's [`prune`] chooses and removes,
//! with a worktree still there holding its session ([`worktree::still_there`]); the daemon
//! keeps whatever it runs now and takes each chosen session out of its listing before its
//! files go, so nothing resumes, reads or rewinds a session half removed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use intendant_core::session_log::{human_age, logs_dir, prune, read_meta};
use intendant_protocol::daemon::{
    DAEMON_SESSION, HostError, HostErrorCode, KeptSession, PruneReport, PruneRequest, SessionsPage,
};
use intendant_protocol::events::AppEvent;

use super::{Inner, Supervisor, host_error, read_records, recorded_entry};
use crate::worktree;

impl Supervisor {
    /// [`intendant_core::host::SessionHost::prune`].
    pub(super) async fn prune_records(
        &self,
        request: PruneRequest,
    ) -> Result<PruneReport, HostError> {
        let _one = self.inner.pruning.lock().await;
        let home = self.inner.env.home.clone();
        let mut report = read_records(move || {
            prune::plan(&home, &request, &|meta| worktree::still_there(&home, meta))
        })
        .await
        .map_err(|e| host_error(HostErrorCode::Internal, e))?;
        let taken: Vec<String> = {
            let mut state = self.inner.lock();
            // Its record said ended when the plan read it; what the daemon does with it now
            // decides (resumed since, or a rewind under way).
            let (idle, busy): (Vec<_>, Vec<_>) = std::mem::take(&mut report.removed)
                .into_iter()
                .partition(|s| {
                    state.sessions.get(&s.id).is_none_or(|e| {
                        e.live.is_none()
                            && e.outside.is_none()
                            && !e.rewinding
                            && e.tracked.summary.status.is_finished()
                    })
                });
            for session in busy {
                report.bytes -= session.bytes;
                report.kept.push(KeptSession {
                    id: session.id,
                    why: "it is running".to_owned(),
                });
            }
            report.removed = idle;
            if request.dry_run {
                Vec::new()
            } else {
                report
                    .removed
                    .iter()
                    .filter(|s| state.sessions.remove(&s.id).is_some())
                    .map(|s| s.id.clone())
                    .collect()
            }
        };
        if request.dry_run {
            return Ok(report);
        }
        let home = self.inner.env.home.clone();
        let inner = Arc::clone(&self.inner);
        let report = read_records(move || {
            let mut told = Told::new(inner);
            let report = prune::carry_out(&home, report, &request, &mut |s| told.removed(&s.id));
            told.tell();
            Ok(report)
        })
        .await
        .map_err(|e| host_error(HostErrorCode::Internal, e))?;
        self.relist(taken, &report).await;
        if !report.removed.is_empty() || report.schedules > 0 {
            self.inner.log.say(&format!(
                "pruned {} session(s) last written more than {} ago ({} bytes of records) and {} ended scheduled session(s) of the agenda",
                report.removed.len(),
                human_age(i64::try_from(request.older_than_secs).unwrap_or(i64::MAX)),
                report.bytes,
                report.schedules
            ));
        }
        if let Some(why) = &report.schedules_error {
            self.inner.log.say(&format!(
                "the agenda's ended schedules were not pruned: {why}"
            ));
        }
        Ok(report)
    }

    /// Lists again the sessions of `taken` (out of the listing for the prune) that the prune
    /// then could not remove: their records are whole, for the removal starts with a rename.
    async fn relist(&self, taken: Vec<String>, report: &PruneReport) {
        let removed: std::collections::HashSet<&str> =
            report.removed.iter().map(|s| s.id.as_str()).collect();
        let back: Vec<String> = taken
            .into_iter()
            .filter(|id| !removed.contains(id.as_str()))
            .collect();
        if back.is_empty() {
            return;
        }
        let logs = logs_dir(&self.inner.env.home);
        let Ok(metas) = read_records(move || {
            Ok(back
                .iter()
                .filter_map(|id| {
                    read_meta(&logs.join(id))
                        .ok()
                        .map(|meta| (logs.join(id), meta))
                })
                .collect::<Vec<_>>())
        })
        .await
        else {
            return;
        };
        let mut state = self.inner.lock();
        for (dir, meta) in metas {
            state
                .sessions
                .entry(meta.id.clone())
                .or_insert_with(|| recorded_entry(&meta, dir));
        }
    }
}

/// How often a prune under way tells what it removed since.
const TOLD_EVERY: Duration = Duration::from_secs(2);

/// The sessions a prune under way removed and has not told yet: frontends holding a listing
/// (the dashboard) drop their rows as they are told, and `intendant sessions prune` says how
/// far it is, in `sessions_pruned` events of at most a page of ids, every [`TOLD_EVERY`] while
/// it goes (a prune of thousands takes as long as the disk does) and once at its end.
struct Told {
    inner: Arc<Inner>,
    ids: Vec<String>,
    since: Instant,
}

impl Told {
    fn new(inner: Arc<Inner>) -> Told {
        Told {
            inner,
            ids: Vec::new(),
            since: Instant::now(),
        }
    }

    fn removed(&mut self, id: &str) {
        self.ids.push(id.to_owned());
        if self.since.elapsed() >= TOLD_EVERY {
            self.tell();
        }
    }

    fn tell(&mut self) {
        for ids in self.ids.chunks(SessionsPage::SIZE as usize) {
            self.inner.publish(
                DAEMON_SESSION,
                &AppEvent::SessionsPruned { ids: ids.to_vec() },
            );
        }
        self.ids.clear();
        self.since = Instant::now();
    }
}

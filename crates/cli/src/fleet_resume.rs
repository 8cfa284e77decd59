//! A fleet member's host: the daemon's supervisor, with one thing added: `start --resume ID`
//! of a session this member has no record of takes the record the fleet mirrored
//! (`docs/fleet.md`, "Failover"). The record is written beneath this member's state root, the
//! placed session's repository cloned (its pushed branch `intendant/<id>` when there is one,
//! else the ref it was placed at), and the session resumed there through the supervisor's own
//! start: this member's trust records and autonomy ceiling apply. Everything else is the
//! supervisor's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use intendant_core::child::own::running_own;
use intendant_core::host::{EventStream, SessionHost};
use intendant_core::session_log::SessionMeta;
use intendant_fleet::Member;
use intendant_fleet::mirror::{Mirror, MirroredRecord, RecordOrigin};
use intendant_protocol::agenda::{AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    Backend, HostError, HostErrorCode, PendingApproval, PruneReport, PruneRequest, Sent,
    SessionCounts, SessionIntent, SessionSummary, SessionsPage, Settings, SettingsChange,
    StartRequest,
};
use intendant_protocol::events::{EndStatus, RecordedStatus};
use intendant_protocol::memory::{MemoryAnswer, MemoryOp};

/// The supervisor `inner` of a member, resuming mirrored sessions.
pub(crate) struct ResumingHost {
    inner: Arc<dyn SessionHost>,
    member: Arc<Member>,
    mirror: Mirror,
    home: PathBuf,
}

impl ResumingHost {
    /// `inner` as the host of `member`, whose state root is `home`.
    pub(crate) fn new(
        inner: Arc<dyn SessionHost>,
        member: Arc<Member>,
        mirror: Mirror,
        home: PathBuf,
    ) -> ResumingHost {
        ResumingHost {
            inner,
            member,
            mirror,
            home,
        }
    }

    /// Makes session `id` resumable here from the fleet's mirror when this member has no
    /// record of it: its clone, or `None` when it is this member's own (or the fleet has none:
    /// the supervisor then says it is unknown).
    async fn adopt(
        &self,
        id: &str,
        request: &mut StartRequest,
    ) -> Result<Option<(PathBuf, RecordOrigin)>, HostError> {
        let invalid = |m: String| HostError::new(HostErrorCode::InvalidRequest, m);
        if !intendant_fleet::mirror::usable_id(id)
            || intendant_core::session_log::logs_dir(&self.home)
                .join(id)
                .exists()
        {
            return Ok(None);
        }
        // A live member still running it keeps it, whether or not the mirror has caught up
        // with its record yet (it publishes once a second).
        let listed = self.member.fleet_sessions(Vec::new()).await;
        if let Some(owner) = listed.members.iter().find(|m| {
            !m.lost
                && m.member != self.member.name()
                && m.sessions
                    .iter()
                    .any(|s| s.id == id && !s.status.is_finished())
        }) {
            return Err(invalid(format!(
                "session {id} is still member {}'s, which is alive: stop it there first",
                owner.member
            )));
        }
        let record = self.mirror.read(id).await.map_err(|e| {
            HostError::new(HostErrorCode::Unavailable, format!("session {id}: {e}"))
        })?;
        let Some(record) = record else {
            return Ok(None);
        };
        let mut meta: SessionMeta = serde_json::from_slice(&record.meta).map_err(|e| {
            invalid(format!(
                "session {id}: its mirrored record does not read: {e}"
            ))
        })?;
        let Some(origin) = record.origin.clone() else {
            return Err(invalid(format!(
                "session {id} works in a directory of another member ({}); only a session \
                 placed with `ctl start --fleet` can be resumed on another member",
                meta.project_root.display()
            )));
        };
        if meta.status == RecordedStatus::Running {
            let view = self.member.view().await.map_err(|e| {
                HostError::new(HostErrorCode::Unavailable, format!("session {id}: {e}"))
            })?;
            if view.members.iter().any(|m| m.name == origin.member) {
                return Err(invalid(format!(
                    "session {id} is still member {}'s, which is alive: stop it there first",
                    origin.member
                )));
            }
        }
        let dir = self.home.join("fleet").join("work").join(format!("r-{id}"));
        let (repo, git_ref, target) = (origin.repo.clone(), origin.git_ref.clone(), dir.clone());
        let branch = format!("intendant/{id}");
        tokio::task::spawn_blocking(move || {
            clone_for_resume(&repo, &branch, git_ref.as_deref(), &target)
        })
        .await
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?
        .map_err(|e| invalid(format!("session {id}: {e}")))?;
        // Nothing runs it any more where it ran: here it continues from its last recorded turn.
        if meta.status == RecordedStatus::Running {
            meta.status = RecordedStatus::Ended(EndStatus::Interrupted);
        }
        meta.project_root = dir.clone();
        let settings = self.inner.settings().await?;
        inherit(request, &meta, &settings);
        write_record(&self.home, id, &meta, &record)
            .map_err(|e| HostError::new(HostErrorCode::Internal, format!("session {id}: {e}")))?;
        request.project = dir.display().to_string();
        Ok(Some((dir, origin)))
    }
}

/// A resume naming no provider, model or autonomy continues as the record says: its level
/// held to this member's ceiling.
fn inherit(request: &mut StartRequest, meta: &SessionMeta, settings: &Settings) {
    if request.autonomy.is_none()
        && let Some(level) = meta.autonomy
    {
        request.autonomy = Some(level.min(settings.max_autonomy));
    }
    let native = meta.recorded_backend().is_none_or(|b| b == Backend::Native)
        && request
            .backend
            .as_ref()
            .is_none_or(|b| *b == Backend::Native);
    if native && request.provider.is_none() && !meta.provider.is_empty() {
        request.provider = Some(meta.provider.clone());
        if request.model.is_none() && !meta.model.is_empty() {
            request.model = Some(meta.model.clone());
        }
    }
}

/// Clones `repo` into `dir`: its branch `branch` when the session pushed one, else `git_ref`.
fn clone_for_resume(
    repo: &str,
    branch: &str,
    git_ref: Option<&str>,
    dir: &Path,
) -> Result<(), String> {
    // A clone left by an earlier attempt that failed is this member's own to replace.
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    // The fleet's git waits for its own children: none is reaped from under it meanwhile.
    running_own(|| {
        if intendant_fleet::git::clone(repo, Some(branch), dir).is_ok() {
            return Ok(());
        }
        let _ = std::fs::remove_dir_all(dir);
        intendant_fleet::git::clone(repo, git_ref, dir)
    })
}

/// Writes the mirrored `record` of session `id` as its records beneath `home` (a directory of
/// its own, made here: an existing one is never written into).
fn write_record(
    home: &Path,
    id: &str,
    meta: &SessionMeta,
    record: &MirroredRecord,
) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let logs = intendant_core::session_log::logs_dir(home);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&logs)
        .map_err(|e| format!("{}: {e}", logs.display()))?;
    let dir = logs.join(id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let meta = serde_json::to_vec_pretty(meta).map_err(|e| e.to_string())?;
    // The metadata last: a record without it is not listed.
    for (name, bytes) in [
        ("session.jsonl", record.log.as_slice()),
        ("conversation.jsonl", record.conversation.as_slice()),
        ("session_meta.json", meta.as_slice()),
    ] {
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl SessionHost for ResumingHost {
    async fn start(&self, mut request: StartRequest) -> Result<SessionSummary, HostError> {
        let adopted = match request.resume.clone() {
            Some(id) => self.adopt(&id, &mut request).await?,
            None => None,
        };
        let summary = self.inner.start(request).await?;
        if let Some((dir, origin)) = adopted {
            // This member's now: its origin says so, and its branch is pushed from here.
            let origin = RecordOrigin {
                member: self.member.name().to_owned(),
                ..origin
            };
            let _ = crate::fleet_mirror::write_origin(&self.home, &summary.id, &origin);
            tokio::spawn(crate::fleet_worker::push_when_done(
                Arc::clone(&self.inner),
                summary.id.clone(),
                dir,
                origin.repo,
                self.home.clone(),
            ));
        }
        Ok(summary)
    }

    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        self.inner.sessions_page(page).await
    }

    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        self.inner.sessions_count(page).await
    }

    async fn session_counts(&self) -> Result<SessionCounts, HostError> {
        self.inner.session_counts().await
    }

    async fn children(&self, parent: &str) -> Result<Vec<SessionSummary>, HostError> {
        self.inner.children(parent).await
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.inner.session(id).await
    }

    async fn session_listed(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.inner.session_listed(id).await
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        self.inner.approvals().await
    }

    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError> {
        self.inner.send(intent).await
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        self.inner.interrupt(id).await
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        self.inner.stop(id).await
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        self.inner.set_autonomy(session, level).await
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        self.inner.settings().await
    }

    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        self.inner.update_settings(change).await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        self.inner.subscribe(session, after).await
    }

    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError> {
        self.inner.rewind(request).await
    }

    async fn agenda(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        self.inner.agenda(op).await
    }

    async fn memory(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        self.inner.memory(op).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneReport, HostError> {
        self.inner.prune(request).await
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        self.inner.log_dir(id).await
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        self.inner.shutdown().await
    }
}

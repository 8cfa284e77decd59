//! [`Supervisor`]: the daemon's session supervisor, the [`SessionHost`] every frontend in the
//! daemon's process holds. It creates sessions through [`assemble`] (headless: untrusted
//! project settings are refused), runs each on its own bus and task, queues them beyond
//! `[daemon] max_running`, and is the one writer of what frontends read: session listings, the
//! daemon-wide approval queue and the numbered event stream.
//!
//! The design decision to know: every event of every session is numbered at its emit point
//! (a tap on the session's bus) under one lock, so `seq` is gapless and its order is publish
//! order daemon-wide; under the same lock the event is folded into the session's status,
//! written to the session's log with its `seq` if it is a lifecycle event, and only then handed to
//! every subscriber's bounded queue: what any client saw is in the log, whenever the daemon is
//! killed. A subscriber asking for history gets it from the ring, or from the sessions'
//! `session.jsonl` for what the ring no longer holds.
//!
//! A sub-agent follows its parent: when the parent's turn is interrupted or the parent is
//! stopped, the child is stopped (and its own children with it); its autonomy level is held
//! under its parent's live level, so it is never above it and a parent lowered is a child
//! lowered.
//!
//! The one-shot CLI supervises its sub-agents with the same supervisor, made
//! [`Supervisor::in_process`]: it lists only what it starts, and the run's own session is
//! [`Supervisor::adopt`]ed so its children can name it as their parent.
//!
//! # Layout
//! - `agenda`: the agenda's operations, pending schedules in the approval queue (category
//!   `schedule`, pseudo-session `agenda`), and the timer firing reminders and starting approved
//!   schedules once.
//! - `memory`: the memories as a human's surface (the dashboard) lists, searches and changes
//!   them.
//! - `hub`: the counter, the ring and the subscribers.
//! - `levels`: a running session's autonomy changed by a human, and its sub-agents with it.
//! - `records`: the sessions other processes (one-shot runs) record under the state root,
//!   listed once found and as they end.
//! - `replay`: a catching-up subscriber's history from the session logs, merged in seq order
//!   a record at a time.
//! - `rewind`: a session's rewind from any surface, refused while a turn of it runs, recorded
//!   on its stream.
//! - `status`: session status and usage folded from events; the approval queue.
//! - `slots`: `[daemon] max_running` held by the sessions doing work, not the idle ones nor
//!   those waiting for an approval, and `[daemon] idle_timeout`.
//! - `start_rules`: what every start and autonomy change is held to, from any surface: the
//!   owner's autonomy ceiling, ACP command lines only from trusted configuration.

mod agenda;
mod hub;
mod levels;
mod memory;
mod prune;
mod records;
mod replay;
mod rewind;
mod slots;
mod start_rules;
mod status;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use intendant_core::autonomy::SharedLevel;
use intendant_core::bus::{EventBus, Tap};
use intendant_core::cancel::SessionCancel;
use intendant_core::host::{EventStream, SessionHost};
use intendant_core::intents::IntentInbox;
use intendant_core::network::NetworkMode;
use intendant_core::session::assemble::{
    AssembleError, AssembledSession, AssemblyEnv, ResumeFrom, SessionSpec, SubAgentPlace,
    TrustCheck, assemble,
};
use intendant_core::session::{SessionStart, WorkerFactory, run_session};
use intendant_core::session_log::{
    SessionLog, SessionMeta, last_seq, logs_dir, read_listing, resolve_session_id,
};
use intendant_protocol::agenda::{AGENDA_SESSION, AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    Backend, DAEMON_SESSION, Envelope, HostError, HostErrorCode, Isolation, PendingApproval,
    PruneReport, PruneRequest, Sent, SessionCounts, SessionIntent, SessionStatus, SessionSummary,
    SessionsPage, Settings, SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, ControlMsg, RecordedStatus};
use intendant_protocol::memory::{MEMORY_SESSION, MemoryAnswer, MemoryOp};
use intendant_protocol::utc::UtcTime;
use tokio::sync::{Notify, mpsc, watch};

use crate::control_plane;
use crate::log::DaemonLog;
use crate::memory::Releaser;
use crate::worktree::{self, Prepared, Worktree};
use hub::{Drain, Hub, send_keeping_a_slot, send_when_drained};
use replay::LogReplay;
use slots::{Delivery, IdleTimer, Routed, Work, idle_timer};
use status::{AnswerRefused, ApprovalQueue, Ending, Tracked, Whole};

pub use agenda::{AGENDA_TICK, SCHEDULE_GRACE_SECS};
pub use hub::{RING_CAPACITY, SUBSCRIBER_CAPACITY};
pub use slots::Load;

/// What a supervisor is built with: the sizes of its bounded buffers, and its operator's log.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// Envelopes kept in memory for replay (older ones are read from the logs).
    pub ring_capacity: usize,
    /// Items one subscriber may have queued before it lags.
    pub subscriber_capacity: usize,
    /// Where the operator is told what no client asked about (a session stopped because its
    /// record could not be written).
    pub log: DaemonLog,
}

impl Default for SupervisorOptions {
    fn default() -> SupervisorOptions {
        SupervisorOptions {
            ring_capacity: RING_CAPACITY,
            subscriber_capacity: SUBSCRIBER_CAPACITY,
            log: DaemonLog::discard(),
        }
    }
}

/// The daemon's session supervisor. Cheap to clone; clones are the same supervisor.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

struct Inner {
    env: AssemblyEnv,
    workers: Option<Arc<dyn WorkerFactory>>,
    placement: Placement,
    state: Mutex<State>,
    /// Held while settings are changed and persisted, so the file and memory change together
    /// and in order.
    settings_writer: tokio::sync::Mutex<()>,
    /// Held by a prune from its plan to its end, so two (the retention's and a human's) never
    /// remove the same records at once.
    pruning: tokio::sync::Mutex<()>,
    /// A slot freed, a session queued, or `max_running` changed.
    admission: Notify,
    /// A session task ended.
    ended: Notify,
    /// Numbers sub-agent worktrees (`<parent>-<n>`).
    worktrees: std::sync::atomic::AtomicU64,
    /// Gives what ended sessions freed back to the system.
    releaser: Arc<Releaser>,
    /// The operator's log.
    log: DaemonLog,
}

struct State {
    hub: Hub,
    sessions: BTreeMap<String, Entry>,
    approvals: ApprovalQueue,
    settings: Settings,
    /// Sessions (new, or idle with a follow-up) waiting for a slot, first come first served.
    queue: VecDeque<String>,
    /// Sessions holding a slot.
    running: u32,
    live_tasks: usize,
    shutting_down: bool,
    /// How long a session waits for a follow-up before it ends (`[daemon] idle_timeout`, put
    /// in force again by a reload for the sessions that go idle from then on).
    idle_timeout: std::time::Duration,
    /// Sessions a resume is starting (checked, its record being reopened, not running yet):
    /// a second resume of one is refused rather than run beside the first on the same record.
    resuming: BTreeSet<String>,
}

/// Whose sessions a supervisor runs.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// The daemon's: every session is interactive (answered through the daemon) and its log
    /// records the daemon's `seq`.
    Daemon,
    /// A one-shot run's sub-agents: they ask a human only when the run can, and their logs carry
    /// no `seq` (the numbering is this process's, not a daemon's stream).
    InProcess { interactive: bool },
}

impl Placement {
    fn interactive(self) -> bool {
        match self {
            Placement::Daemon => true,
            Placement::InProcess { interactive } => interactive,
        }
    }
}

/// One session the daemon knows.
struct Entry {
    tracked: Tracked,
    log_dir: PathBuf,
    /// Place among sub-agents: 0 for a top session.
    depth: u32,
    /// The scripted model's scenario file it was started with (its sub-agents inherit it).
    scenario: Option<String>,
    /// Present while the session's task runs.
    live: Option<Live>,
    /// For a session running outside the supervisor ([`Supervisor::adopt`]): what its sub-agents
    /// follow.
    outside: Option<Outside>,
    /// Its repository as resolved at its start: its sub-agents' worktrees are made from it.
    git: Option<intendant_core::git::GitRepo>,
    /// The network mode its commands got (`None` for a session known only from its records):
    /// its sub-agents' are held within it.
    network: Option<NetworkMode>,
    /// A rewind of it is under way: follow-ups and resumes wait for its end.
    rewinding: bool,
}

/// What a session running outside the supervisor shares with its sub-agents.
struct Outside {
    /// Its cancel handle: its sub-agents stop with it.
    cancel: SessionCancel,
    /// Its autonomy level as its gate reads it: its sub-agents' levels are held under it.
    autonomy: SharedLevel,
}

impl Entry {
    /// Listed running while neither this supervisor nor a run it adopted runs it: another
    /// process (a one-shot run) was writing its record when the daemon read it.
    fn running_elsewhere(&self) -> bool {
        self.live.is_none()
            && self.outside.is_none()
            && self.tracked.summary.status == SessionStatus::Running
    }

    /// Runs here now (working, waiting or idle): its own writer records its events.
    fn runs_here(&self) -> bool {
        self.live.is_some() && !self.tracked.summary.status.is_finished()
    }

    /// Its end is listed while its task still winds down here (its containment ending, its
    /// record still open).
    fn winding_down(&self) -> bool {
        self.live.is_some() && self.tracked.summary.status.is_finished()
    }

    /// Listed as ended: run neither here (nor by a run it adopted) nor by another process.
    fn listed_ended(&self) -> bool {
        self.live.is_none() && self.outside.is_none() && !self.running_elsewhere()
    }

    /// The cancel handle of the session while it runs (here or outside).
    fn cancel(&self) -> Option<&SessionCancel> {
        self.live
            .as_ref()
            .map(|live| &live.cancel)
            .or(self.outside.as_ref().map(|o| &o.cancel))
    }

    /// The live autonomy level of the session while it runs (here or outside).
    fn level(&self) -> Option<&SharedLevel> {
        self.live
            .as_ref()
            .map(|live| &live.autonomy)
            .or(self.outside.as_ref().map(|o| &o.autonomy))
    }

    /// Why what only a session running here takes (an answer, a follow-up, an interrupt, a
    /// stop, a change of level) is refused for this one, which does not run here: another
    /// process runs it, or it has ended.
    fn not_running_here(&self, id: &str) -> HostError {
        if !self.running_elsewhere() {
            return host_error(
                HostErrorCode::SessionFinished,
                format!("session {id} has ended"),
            );
        }
        let (pid, interrupt) = match self.tracked.summary.run_by {
            Some(pid) => (
                format!(", pid {pid}"),
                format!(" (`kill -INT {pid}` interrupts it)"),
            ),
            None => (String::new(), String::new()),
        };
        host_error(
            HostErrorCode::InvalidRequest,
            format!(
                "session {id} is run by another process (a one-shot `intendant` run{pid}): \
                 answer, interrupt or stop it where it runs{interrupt}; the daemon only relays \
                 its events"
            ),
        )
    }
}

/// What a running session's entry holds.
struct Live {
    bus: EventBus,
    autonomy: SharedLevel,
    /// Interrupts the session's turn (`ctl interrupt`).
    cancel: SessionCancel,
    /// Its record, written as each lifecycle event is published and before any subscriber
    /// sees it; `None` once its `session_ended` is written.
    log: Option<SessionLog>,
    /// Where it stands with respect to the running slots.
    work: Work,
    /// Its cgroup directories, read for what its processes use as it is listed.
    groups: Arc<[PathBuf]>,
}

impl Live {
    /// Writes a lifecycle event of this session to its log (with its seq when `numbered`),
    /// until its `session_ended`. A failed write is kept on the log, which stops the session
    /// and tells the operator (see [`SessionLog::keep_write_error`]); later events are still
    /// offered to the log.
    fn record(&mut self, env: &Envelope, numbered: bool) {
        let Some(log) = &self.log else {
            return;
        };
        let recorded = if numbered {
            log.record_published(&env.event, env.seq, &env.ts)
        } else {
            log.record_event(&env.event)
        };
        if let Err(e) = recorded {
            log.keep_write_error(e);
        }
        if let AppEvent::SessionEnded { session_id, .. } = &env.event
            && session_id == log.id()
        {
            self.log = None;
        }
    }
}

/// Ring size of a daemon session's own bus (nothing in the daemon renders from it).
const SESSION_RING_CAPACITY: usize = 16;

/// How long a stopped session has to end itself before it is dropped.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The supervisor behind `weak` while it serves: `None` once it is dropped or shuts down (the
/// daemon's background tasks end then).
/// The pseudo-sessions the daemon files its own events under, none of them a session: the
/// agenda's, the memory proposals', and its own ([`DAEMON_SESSION`]). A client may follow
/// each alone.
const PSEUDO_SESSIONS: [&str; 3] = [AGENDA_SESSION, MEMORY_SESSION, DAEMON_SESSION];

fn serving(weak: &Weak<Inner>) -> Option<Arc<Inner>> {
    let inner = weak.upgrade()?;
    let shutting_down = inner.lock().shutting_down;
    (!shutting_down).then_some(inner)
}

fn host_error(code: HostErrorCode, message: impl Into<String>) -> HostError {
    HostError::new(code, message)
}

fn unknown_session(id: &str) -> HostError {
    host_error(HostErrorCode::UnknownSession, format!("no session {id}"))
}

/// A session that could not be assembled, as a frontend is told: a bad request, or the
/// daemon's failure.
fn assembly_error(e: AssembleError) -> HostError {
    match e {
        AssembleError::Config(m) => host_error(HostErrorCode::InvalidRequest, m),
        AssembleError::Failed(m) => host_error(HostErrorCode::Internal, m),
    }
}

impl Supervisor {
    /// A supervisor assembling sessions in `env`, agent backends built by `workers`. It lists
    /// every session recorded in the state root: a log without `session_ended` whose writer is
    /// gone is `interrupted` (resumable), a finished one has its status; event numbering goes
    /// on after the highest `seq` any log holds.
    ///
    /// The settings are the state root's `[daemon]` table ([`crate::control_plane`]); an invalid
    /// one is an error naming the file.
    pub fn new(
        env: AssemblyEnv,
        workers: Option<Arc<dyn WorkerFactory>>,
        options: SupervisorOptions,
    ) -> Result<Supervisor, HostError> {
        let settings = control_plane::load(&env.home)
            .map_err(|e| host_error(HostErrorCode::InvalidRequest, e.to_string()))?;
        let idle_timeout = control_plane::idle_timeout(&env.home)
            .map_err(|e| host_error(HostErrorCode::InvalidRequest, e.to_string()))?;
        let Recorded {
            sessions,
            last_seq,
            unreadable,
        } = recorded_sessions(&env.home)?;
        for line in unreadable {
            options.log.say(&line);
        }
        Ok(Supervisor::with_sessions(
            env,
            workers,
            (settings, idle_timeout),
            options,
            Placement::Daemon,
            (sessions, last_seq),
        ))
    }

    /// A supervisor for the sub-agents of one one-shot run (`intendant TASK`), in its process:
    /// it lists only the sessions it starts (and the run's own, once [adopted](Self::adopt)),
    /// its sessions ask a human only when `interactive` (the run's frontend answers them), and
    /// their logs carry no `seq`.
    pub fn in_process(
        env: AssemblyEnv,
        workers: Option<Arc<dyn WorkerFactory>>,
        settings: Settings,
        interactive: bool,
    ) -> Supervisor {
        Supervisor::with_sessions(
            env,
            workers,
            (settings, control_plane::DEFAULT_IDLE_TIMEOUT),
            SupervisorOptions::default(),
            Placement::InProcess { interactive },
            (BTreeMap::new(), 0),
        )
    }

    fn with_sessions(
        env: AssemblyEnv,
        workers: Option<Arc<dyn WorkerFactory>>,
        (settings, idle_timeout): (Settings, std::time::Duration),
        options: SupervisorOptions,
        placement: Placement,
        (sessions, last_seq): (BTreeMap<String, Entry>, u64),
    ) -> Supervisor {
        let state = State {
            hub: Hub::new(
                last_seq + 1,
                options.ring_capacity,
                options.subscriber_capacity,
            ),
            sessions,
            approvals: ApprovalQueue::default(),
            settings,
            queue: VecDeque::new(),
            running: 0,
            live_tasks: 0,
            shutting_down: false,
            idle_timeout,
            resuming: BTreeSet::new(),
        };
        Supervisor {
            inner: Arc::new(Inner {
                env,
                workers,
                placement,
                state: Mutex::new(state),
                settings_writer: tokio::sync::Mutex::new(()),
                pruning: tokio::sync::Mutex::new(()),
                admission: Notify::new(),
                ended: Notify::new(),
                worktrees: std::sync::atomic::AtomicU64::new(1),
                releaser: Arc::default(),
                log: options.log,
            }),
        }
    }

    /// Registers a session that runs outside this supervisor (the one-shot run's own, written
    /// to `log`), so that sub-agents can name it as their parent: they inherit its provider,
    /// model and `scenario`, follow its `cancel`, and are held under its `autonomy` (its gate's
    /// live level).
    pub fn adopt(
        &self,
        start: &SessionStart,
        log: &SessionLog,
        scenario: Option<String>,
        cancel: SessionCancel,
        autonomy: SharedLevel,
    ) {
        let summary = started_summary(
            start,
            Backend::Native,
            SessionStatus::Running,
            autonomy.get(),
        );
        let id = summary.id.clone();
        self.inner.lock().sessions.insert(
            id,
            Entry {
                tracked: Tracked::new(summary),
                log_dir: log.dir().to_path_buf(),
                // A resumed sub-agent's children are as deep as they were.
                depth: log.meta().sub_agent_depth(),
                scenario,
                live: None,
                outside: Some(Outside { cancel, autonomy }),
                git: start.git.clone(),
                network: Some(start.network),
                rewinding: false,
            },
        );
    }

    /// Resolves once a shutdown was asked for and every session task has ended.
    pub async fn closed(&self) {
        loop {
            let notified = self.inner.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.lock().closed() {
                return;
            }
            notified.await;
        }
    }

    /// Reads back what each session known only from its records ended with (its last answer
    /// and, a sub-agent's, its report), the newest first, one log at a time and off the lock:
    /// a restarted daemon soon lists them as it did before ([`SessionHost::session`] reads one
    /// asked for first). It ends once every one is read, or with the supervisor.
    pub fn read_endings(&self) -> tokio::task::JoinHandle<()> {
        let unread: Vec<String> = {
            let state = self.inner.lock();
            state
                .sessions
                .iter()
                .rev()
                .filter(|(_, entry)| entry.tracked.ending_unread)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            for id in unread {
                let Some(inner) = serving(&weak) else {
                    return;
                };
                Supervisor { inner }.read_ending(&id).await;
            }
        })
    }

    /// Reads what session `id` ended with from its log, if it is known only from its records
    /// and that is not read yet (for [`Self::read_endings`]; [`SessionHost::session`] reads it
    /// with the rest). A log that cannot be read is said on the operator's log, and the
    /// session listed without it.
    async fn read_ending(&self, id: &str) {
        let (dir, child) = {
            let state = self.inner.lock();
            match state.sessions.get(id) {
                Some(entry) if entry.tracked.ending_unread => (
                    entry.log_dir.clone(),
                    entry.tracked.summary.parent.is_some(),
                ),
                _ => return,
            }
        };
        let read = read_records(move || Ending::read(&dir, child)).await;
        let failed = {
            let mut state = self.inner.lock();
            // Pruned meanwhile: nothing to say about a log that is gone on purpose.
            let Some(entry) = state.sessions.get_mut(id) else {
                return;
            };
            let (ending, failed) = match read {
                Ok(ending) => (ending, None),
                Err(e) => (Ending::default(), Some(e)),
            };
            entry.tracked.settle(ending);
            failed
        };
        if let Some(e) = failed {
            self.inner.log.say(&format!(
                "session {id}: what it ended with could not be read back: {e}"
            ));
        }
    }

    /// The seq the next published event will get.
    pub fn next_seq(&self) -> u64 {
        self.inner.lock().hub.next_seq()
    }

    /// How many sessions hold a running slot, wait idle for a follow-up, and queue for a slot.
    pub fn load(&self) -> Load {
        self.inner.lock().load()
    }

    /// How many times what ended sessions freed was given back to the system
    /// ([`crate::memory`]): once per burst of ends, [`crate::memory::RELEASE_DELAY`] after it.
    pub fn memory_releases(&self) -> u64 {
        self.inner.releaser.releases()
    }

    /// Resolves at the next change of the running slots: one freed (a session's round ended, or
    /// its task did), a session started or queued, `max_running` changed. It counts from when it
    /// is made, not first polled: made before a look at [`Supervisor::load`], it misses no change
    /// after that look (a fleet member waits on it for a free slot).
    pub fn slots_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.admission.notified()
    }

    /// `[daemon] max_running` as in force.
    pub fn max_running(&self) -> u32 {
        self.inner.lock().settings.max_running
    }

    fn spec(
        &self,
        request: &StartRequest,
        settings: &Settings,
        depth: u32,
    ) -> Result<SessionSpec, HostError> {
        // A sub-agent's level is held under its parent's live level, whoever asked for it, and
        // its network within its parent's.
        let (parent_level, parent_network) = match &request.parent {
            Some(parent) => {
                let state = self.inner.lock();
                let entry = state.entry(parent)?;
                (entry.level().cloned(), entry.network)
            }
            None => (None, None),
        };
        let network = start_rules::network_choice(request.network, parent_network)?;
        let cwd = PathBuf::from(&request.project);
        if let Some(id) = request.resume.as_deref().filter(|_| !cwd.is_dir()) {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                format!(
                    "session {id} worked in {:?}, which is not a directory now: name where it \
                     goes on (`intendant ctl start --resume {id} --project DIR`)",
                    request.project
                ),
            ));
        }
        if !cwd.is_absolute() || !cwd.is_dir() {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                format!(
                    "project {:?} is not an absolute path to a directory",
                    request.project
                ),
            ));
        }
        Ok(SessionSpec {
            task: Some(request.task.clone()),
            cwd,
            autonomy: request.autonomy.unwrap_or(settings.default_autonomy),
            provider: request.provider.clone(),
            model: request.model.clone(),
            scenario: request.scenario.as_ref().map(PathBuf::from),
            sandbox: None,
            max_tokens: request.token_budget,
            max_turns: intendant_core::agent_loop::MAX_TURNS,
            resume: request.resume.clone().map(ResumeFrom::Id),
            interactive: self.inner.placement.interactive(),
            wait_for_follow_ups: true,
            // The daemon's approval queue outlives the session: an unanswered proposal waits
            // there (and across restarts) under the pseudo-session `memory`.
            keep_memory_proposals: matches!(self.inner.placement, Placement::Daemon),
            backend: request.backend.clone(),
            default_backend: Some(settings.default_backend.clone()),
            // The daemon's automatic choice: a top session whose task does not look simple.
            orchestrate: depth == 0
                && request.resume.is_none()
                && intendant_core::prompts::wants_orchestration(&request.task),
            sub_agents: Some(SubAgentPlace {
                host: Arc::new(self.clone()),
                depth,
                role: request.role.clone(),
                parent: request.parent.clone(),
                parent_level,
            }),
            extra_write_paths: Vec::new(),
            network,
        })
    }

    /// `request`'s spec ([`Supervisor::spec`]), checked against the ceiling, with its ACP
    /// agent's command line from the project's settings.
    fn checked_spec(
        &self,
        request: &mut StartRequest,
        settings: &Settings,
        depth: u32,
    ) -> Result<SessionSpec, HostError> {
        let mut spec = self.spec(request, settings, depth)?;
        start_rules::within_ceiling(settings, spec.autonomy)?;
        start_rules::acp_from_config(request, &spec.cwd)?;
        spec.backend = request.backend.clone();
        Ok(spec)
    }

    /// A sub-agent asked for without a provider, model or scenario runs on its parent's.
    fn inherit_from_parent(&self, mut request: StartRequest) -> Result<StartRequest, HostError> {
        let Some(parent) = request.parent.clone() else {
            return Ok(request);
        };
        let state = self.inner.lock();
        let entry = state.entry(&parent)?;
        let summary = &entry.tracked.summary;
        if request.provider.is_none() && summary.backend == Backend::Native {
            request.provider = Some(summary.provider.clone());
            if request.model.is_none() {
                request.model = Some(summary.model.clone());
            }
            if request.scenario.is_none() {
                request.scenario = entry.scenario.clone();
            }
        }
        Ok(request)
    }

    /// A sub-agent in `worktree` isolation gets its own worktree from the HEAD of the repository
    /// holding `project` (none outside a git repository: it shares the directory).
    async fn isolate(
        &self,
        request: &StartRequest,
        project: &std::path::Path,
    ) -> Result<Option<Worktree>, HostError> {
        if request.parent.is_none() || request.isolation != Some(Isolation::Worktree) {
            return Ok(None);
        }
        let parent = request.parent.as_deref().unwrap_or_default();
        let n = self
            .inner
            .worktrees
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{parent}-{n}");
        // The parent's repository as it was resolved at the parent's start, never as its
        // commands may have left the pointers since.
        let repo = self.inner.lock().entry(parent)?.git.clone();
        match worktree::prepare(repo.as_ref(), project, &self.inner.env.home, &name).await {
            Ok(Prepared::Worktree(w)) => Ok(Some(*w)),
            Ok(Prepared::Shared { .. }) => Ok(None),
            Err(e) => Err(host_error(
                HostErrorCode::Internal,
                format!("cannot make the sub-agent's worktree: {e}"),
            )),
        }
    }

    /// The worktree a sub-agent `id` being resumed in it worked in: taken up again, or made
    /// again on its branch when it was removed at its end ([`worktree::reopen`]), so its sandbox
    /// may commit on its branch as in its first run, and it is ended as a new one is when the
    /// resume ends. `None` for a session that had none, a resume elsewhere, or one whose
    /// parent's record is gone.
    async fn reopen(
        &self,
        id: &str,
        request: &StartRequest,
    ) -> Result<Option<Worktree>, HostError> {
        let (info, repo, parent_project) = {
            let state = self.inner.lock();
            let Some(entry) = state.sessions.get(id) else {
                return Ok(None);
            };
            let summary = &entry.tracked.summary;
            let (Some(info), Some(parent)) = (&summary.worktree, &summary.parent) else {
                return Ok(None);
            };
            let Some(parent) = state.sessions.get(parent) else {
                return Ok(None);
            };
            let project = PathBuf::from(&parent.tracked.summary.project);
            (info.clone(), parent.git.clone(), project)
        };
        let canonical = |p: &str| std::fs::canonicalize(p).ok();
        let there = match (canonical(&info.path), canonical(&request.project)) {
            (Some(worktree), Some(project)) => worktree == project,
            _ => info.path == request.project,
        };
        if !there {
            return Ok(None);
        }
        // The parent's repository as it was resolved at its start, else (its record alone
        // listed) as it resolves now from its project, which its child could never write.
        let repo = match repo {
            Some(repo) => repo,
            None => match intendant_core::git::GitRepo::discover(&parent_project) {
                Ok(Some(repo)) => repo,
                Ok(None) | Err(_) => return Ok(None),
            },
        };
        worktree::reopen(&info, &repo, &self.inner.env.home)
            .await
            .map_err(|e| {
                host_error(
                    HostErrorCode::InvalidRequest,
                    format!("session {id}'s worktree cannot be taken up again: {e}"),
                )
            })
    }

    /// Applies `change`, persists the result atomically, and only then makes it current; a
    /// failed write changes nothing.
    async fn change_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        if change.reload {
            return self.reload_settings(&change).await;
        }
        let _writer = self.inner.settings_writer.lock().await;
        let current = self.inner.lock().settings.clone();
        if let Some(level) = change.default_autonomy {
            start_rules::within_ceiling(&current, level)?;
        }
        let next = control_plane::apply(&current, &change)
            .map_err(|m| host_error(HostErrorCode::InvalidRequest, m))?;
        let home = self.inner.env.home.clone();
        let saved = next.clone();
        tokio::task::spawn_blocking(move || control_plane::save(&home, &saved))
            .await
            .map_err(|e| host_error(HostErrorCode::Internal, format!("settings: {e}")))?
            .map_err(|e| host_error(HostErrorCode::Internal, e.to_string()))?;
        self.put_in_force(&next);
        Ok(next)
    }

    /// Makes `next` the settings in force, and starts what a grown `max_running` admits.
    fn put_in_force(&self, next: &Settings) {
        let due = {
            let mut state = self.inner.lock();
            state.settings = next.clone();
            state.admit()
        };
        self.inner.admitted(due);
    }

    /// `[daemon]` read again from the state root's file and put in force (`ctl reload`): what
    /// a running daemon can change (`default_autonomy`, `default_backend`, `max_running`,
    /// `max_autonomy`, `idle_timeout` for the sessions that go idle from then on, and the
    /// sessions' bounds `sessions_pids_max` and `sessions_memory_max_mib`), the file
    /// checked whole as at start. A live session above a lowered
    /// `max_autonomy` is lowered to it (its sub-agents follow). A file that does not read, or a
    /// change given with the reload, changes nothing.
    async fn reload_settings(&self, change: &SettingsChange) -> Result<Settings, HostError> {
        let alone = SettingsChange {
            reload: true,
            ..SettingsChange::default()
        };
        if *change != alone {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                "a reload reads the settings from the file: give no other change with it",
            ));
        }
        let _writer = self.inner.settings_writer.lock().await;
        let home = self.inner.env.home.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let checked = control_plane::load_checked(&home)?;
            // What could not be bounded was said at the start, and stays so.
            let _ = intendant_core::containment::bound_sessions(&checked.sessions);
            Ok::<_, control_plane::SettingsError>(checked)
        })
        .await
        .map_err(|e| host_error(HostErrorCode::Internal, format!("settings: {e}")))?
        .map_err(|e| host_error(HostErrorCode::InvalidRequest, e.to_string()))?;
        let next = checked.settings;
        self.inner.lock().idle_timeout = checked.idle_timeout;
        self.put_in_force(&next);
        self.hold_to_ceiling(next.max_autonomy);
        Ok(next)
    }

    /// Sends a follow-up to session `id` now if it holds or awaits a slot, else queues it for
    /// one (the session is listed `queued` until it runs).
    fn follow_up(&self, id: &str, text: String) -> Result<Sent, HostError> {
        let (routed, sent) = self
            .inner
            .lock()
            .route_follow_up(id, text, self.inner.placement)?;
        self.inner.deliver(routed);
        Ok(sent)
    }

    /// A new session's depth among sub-agents: 0, or its parent's + 1.
    fn depth(&self, request: &StartRequest) -> Result<u32, HostError> {
        match &request.parent {
            None => Ok(0),
            Some(parent) => {
                let state = self.inner.lock();
                Ok(state.entry(parent)?.depth + 1)
            }
        }
    }

    /// A resumed session must not be running here already, nor being resumed; returns its full
    /// id, claimed for this resume until the claim is dropped (once the session is listed
    /// running, or its start failed). One that has ended (its end is listed) while its task
    /// still winds down (its containment ended, its slot freed) is waited for, at most
    /// [`STOP_GRACE`], rather than refused.
    async fn check_resumable(&self, id: &str) -> Result<(String, ResumeClaim), HostError> {
        let dir = resolve_session_id(&self.inner.env.home, id)
            .map_err(|e| host_error(HostErrorCode::UnknownSession, e.to_string()))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| unknown_session(id))?;
        self.wound_down(&name).await;
        let mut state = self.inner.lock();
        match state.sessions.get(&name) {
            Some(entry) if entry.live.is_some() => {
                return Err(host_error(
                    HostErrorCode::InvalidRequest,
                    match entry.tracked.summary.status {
                        SessionStatus::Idle => format!(
                            "session {id} is idle, waiting for a follow-up: send it one \
                             (`intendant ctl send {id} \"...\"`), or stop it before resuming"
                        ),
                        _ => format!("session {id} is still running; stop it before resuming"),
                    },
                ));
            }
            Some(entry) if entry.rewinding => {
                return Err(host_error(
                    HostErrorCode::InvalidRequest,
                    format!("session {id} is being rewound; resume it once the rewind is done"),
                ));
            }
            Some(_) | None => {}
        }
        if !state.resuming.insert(name.clone()) {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                format!("session {id} is being resumed already"),
            ));
        }
        Ok((
            name.clone(),
            ResumeClaim {
                inner: Arc::downgrade(&self.inner),
                name,
            },
        ))
    }

    /// Returns once session `name` is not one that has ended (its end is listed) while its task
    /// still winds down (its containment ending, its record still open), or after
    /// [`STOP_GRACE`].
    async fn wound_down(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        loop {
            let ended = self.inner.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let winding_down = self
                .inner
                .lock()
                .sessions
                .get(name)
                .is_some_and(Entry::winding_down);
            if !winding_down || tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }

    /// A resume that names no project, autonomy, provider or model continues as session `id`
    /// was recorded: in its project, at its level held to the ceiling `[daemon] max_autonomy`,
    /// and (on the native backend) on its provider and model, the scripted model on its scenario
    /// while this daemon knows it. (Its backend is restored by the assembly.) A
    /// sub-agent whose parent still runs is resumed as that parent's child again: held under
    /// its level and network (keeping a narrower network it ran with), stopped with it, among
    /// its children. (Its depth and role are restored by the assembly, parent alive or not.)
    fn inherit_from_record(
        &self,
        mut request: StartRequest,
        id: &str,
        settings: &Settings,
    ) -> StartRequest {
        let state = self.inner.lock();
        let Some(entry) = state.sessions.get(id) else {
            return request;
        };
        let recorded = &entry.tracked.summary;
        if request.project.is_empty() {
            request.project = recorded.project.clone();
        }
        if request.autonomy.is_none() {
            request.autonomy = Some(if recorded.autonomy > settings.max_autonomy {
                settings.max_autonomy
            } else {
                recorded.autonomy
            });
        }
        let native = recorded.backend == Backend::Native
            && request
                .backend
                .as_ref()
                .is_none_or(|b| *b == Backend::Native);
        if native && request.provider.is_none() && !recorded.provider.is_empty() {
            request.provider = Some(recorded.provider.clone());
            if request.model.is_none() && !recorded.model.is_empty() {
                request.model = Some(recorded.model.clone());
            }
            // The scripted model's scenario, while this daemon knows it.
            if request.scenario.is_none() {
                request.scenario = entry.scenario.clone();
            }
        }
        let parent = recorded
            .parent
            .as_ref()
            .filter(|_| request.parent.is_none())
            .and_then(|p| Some((p, state.sessions.get(p)?)))
            .filter(|(_, parent)| parent.runs_here() || parent.outside.is_some());
        if let Some((id, parent)) = parent {
            request.parent = Some(id.clone());
            if request.network.is_none() {
                request.network = start_rules::resumed_network(recorded.network, parent.network);
            }
        }
        request
    }

    /// Lists the session `id` as queued, unless the daemon is shutting down, and counts its
    /// tasks (with one more for ending its worktree); returns its parent's cancellations, which
    /// a sub-agent follows, and the follow-ups its admission made due.
    fn register(
        &self,
        id: &str,
        (parent, resumed): (Option<&str>, bool),
        entry: Entry,
        has_worktree: bool,
    ) -> Result<(Option<watch::Receiver<u64>>, Vec<Delivery>), HostError> {
        let mut state = self.inner.lock();
        if state.shutting_down {
            return Err(host_error(
                HostErrorCode::ShuttingDown,
                "the daemon is shutting down",
            ));
        }
        // A new sub-agent of a parent being stopped, or gone: the stop listed the children it
        // had, and one registered after would follow no cancellation of it (a parent stopped
        // in the very batch that spawned four left three running).
        if let Some(parent) = parent.filter(|_| !resumed)
            && let Some(entry) = state.sessions.get(parent)
            && entry.cancel().is_none_or(SessionCancel::is_stopped)
        {
            return Err(host_error(
                HostErrorCode::SessionFinished,
                format!(
                    "session {parent}, its parent, is stopping or has ended: no sub-agent of it starts"
                ),
            ));
        }
        let parent_cancellations = parent
            .and_then(|p| state.sessions.get(p))
            .and_then(Entry::cancel)
            .map(SessionCancel::cancellations);
        state.sessions.insert(id.to_owned(), entry);
        state.queue.push_back(id.to_owned());
        // The session's task, and the ending of its worktree.
        state.live_tasks += if has_worktree { 2 } else { 1 };
        Ok((parent_cancellations, state.admit()))
    }

    /// A resume that waits for a slot holds its words as a follow-up waiting for one does,
    /// recorded so: a daemon that stops before its run starts leaves them for the next resume
    /// (they went with it). The run's start takes them in its task.
    fn hold_if_queued(&self, id: &str, request: &StartRequest) {
        if request.resume.is_none() || request.task.trim().is_empty() {
            return;
        }
        let mut state = self.inner.lock();
        if state.queue.iter().any(|queued| queued == id) {
            let held = AppEvent::FollowUpHeld {
                text: request.task.clone(),
            };
            state.number(id, &held, self.inner.placement);
        }
    }

    fn launch(
        &self,
        request: &StartRequest,
        depth: u32,
        assembled: AssembledSession,
        worktree: Option<Worktree>,
    ) -> Result<SessionSummary, HostError> {
        let AssembledSession {
            start,
            backend: session_backend,
            chosen_backend,
            log,
            containment,
            human_available,
            autonomy,
            notes: _,
            checkpoints: _,
            cancel,
        } = assembled;
        // Frontends answer questions through the daemon for as long as the session runs.
        human_available.store(
            self.inner.placement.interactive(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let own_cancel = cancel.clone();
        let id = start.session_id.clone();
        let (operator, named) = (self.inner.log.clone(), id.clone());
        log.tell_on_write_error(move |e| {
            operator.say(&format!(
                "session {named}: {e}; the session is stopped (free space or mend the state \
                 root, then resume it)"
            ));
        });
        // Frontends read the supervisor's hub, never this bus's ring: a small one saves its
        // allocation per session.
        let bus = EventBus::with_capacity(SESSION_RING_CAPACITY);
        bus.tap(tap(Arc::downgrade(&self.inner), id.clone()));
        let inbox = IntentInbox::new(&bus);
        let live = Live {
            bus: bus.clone(),
            autonomy,
            cancel,
            log: Some(log.clone()),
            work: Work::Starting { waiting: 0 },
            groups: containment.group_dirs().into(),
        };
        let entry = queued_entry(
            request,
            &start,
            chosen_backend,
            &log,
            worktree.as_ref(),
            depth,
            live,
        );
        let (parent_cancellations, due) = self.register(
            &id,
            (request.parent.as_deref(), request.resume.is_some()),
            entry,
            worktree.is_some(),
        )?;
        self.hold_if_queued(&id, request);
        let slot = Slot {
            inner: Arc::clone(&self.inner),
            id: id.clone(),
        };
        // Ends the worktree however the task ends.
        let worktree_guard = worktree.map(|w| WorktreeGuard::new(&self.inner, &id, w, &log));
        tokio::spawn(async move {
            let _worktree_guard = worktree_guard;
            let mut slot = slot;
            let mut containment = containment;
            // A session stopped while it queues still runs, to end itself at once (no model
            // request) with `session_ended` in its log.
            tokio::select! {
                () = slot.admit() => {}
                () = own_cancel.stopped() => {}
            }
            supervise(
                run_session(start, session_backend, bus, inbox),
                parent_cancellations,
                own_cancel,
            )
            .await;
            for message in containment.end() {
                slot.inner.publish(&slot.id, &AppEvent::Warning { message });
            }
            drop(slot);
        });
        let view = self
            .inner
            .lock()
            .view(&id)
            .ok_or_else(|| unknown_session(&id));
        self.inner.admitted(due);
        view
    }
}

/// Runs a session until it ends. A stopped one (`ctl stop`, shutdown, or, for a sub-agent whose
/// `parent` cancellations are given, its parent interrupted or stopped) has [`STOP_GRACE`] to end
/// itself (its batch killed, `session_ended` interrupted in its log); a backend that does not wind
/// down by then is dropped, and the caller's containment kills what it started. Nothing outlives
/// the session: the grace is waited here, not by a timer of its own.
async fn supervise<F: std::future::Future>(
    run: F,
    parent: Option<watch::Receiver<u64>>,
    cancel: SessionCancel,
) {
    tokio::pin!(run);
    let stopped = async {
        let Some(mut parent) = parent else {
            return cancel.stopped().await;
        };
        tokio::select! {
            () = cancel.stopped() => {}
            Ok(()) = parent.changed() => cancel.stop(),
        }
    };
    tokio::select! {
        _ = &mut run => return,
        () = stopped => {}
    }
    let _ = tokio::time::timeout(STOP_GRACE, run).await;
}

/// Ends a sub-agent's worktree when its session task ends, however it ends (a panic included):
/// removed when clean (the branch kept if it has commits), kept when dirty; the outcome is
/// recorded in the session's listing and its record (`log`, whose writer's lock it holds until
/// then). The ending counts among the supervisor's live tasks.
struct WorktreeGuard {
    inner: Weak<Inner>,
    id: String,
    worktree: Option<Worktree>,
    log: SessionLog,
}

impl WorktreeGuard {
    /// Guards session `id`'s `worktree`, kept in its record too, so a restarted daemon still
    /// lists where it works (a failed write stops the session and tells the operator:
    /// `tell_on_write_error`).
    fn new(inner: &Arc<Inner>, id: &str, worktree: Worktree, log: &SessionLog) -> WorktreeGuard {
        let _ = log.update_meta(|m| m.worktree = Some(worktree.info()));
        WorktreeGuard {
            inner: Arc::downgrade(inner),
            id: id.to_owned(),
            worktree: Some(worktree),
            log: log.clone(),
        }
    }
}

impl Drop for WorktreeGuard {
    fn drop(&mut self) {
        let (Some(worktree), Ok(runtime)) =
            (self.worktree.take(), tokio::runtime::Handle::try_current())
        else {
            if let Some(inner) = self.inner.upgrade() {
                inner.task_ended();
            }
            return;
        };
        let inner = self.inner.clone();
        let id = std::mem::take(&mut self.id);
        let log = self.log.clone();
        runtime.spawn(async move {
            let outcome = worktree.end_recorded(&log).await;
            drop(log);
            if let Some(inner) = inner.upgrade() {
                if let Some(entry) = inner.lock().sessions.get_mut(&id)
                    && let Some(info) = &mut entry.tracked.summary.worktree
                {
                    info.outcome = Some(outcome);
                }
                inner.task_ended();
            }
        });
    }
}

/// A resume's claim on its session ([`Supervisor::check_resumable`]), given up when dropped.
struct ResumeClaim {
    inner: Weak<Inner>,
    name: String,
}

impl Drop for ResumeClaim {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.lock().resuming.remove(&self.name);
        }
    }
}

/// Removes a worktree made for a session that could not start.
async fn discard(worktree: Option<Worktree>) {
    if let Some(w) = worktree {
        let _ = w.finish().await;
    }
}

/// The bus tap numbering and publishing every event of session `id`.
fn tap(inner: Weak<Inner>, id: String) -> Tap {
    Arc::new(move |event: &AppEvent| {
        if let Some(inner) = inner.upgrade() {
            inner.publish(&id, event);
        }
    })
}

/// A session task's claim on the running slots; dropping it (the task ended, or panicked)
/// frees the slot it holds, its place in the queue, and retires the session's live state
/// (what it freed is given back to the system shortly after: [`crate::memory`]).
struct Slot {
    inner: Arc<Inner>,
    id: String,
}

impl Slot {
    /// Waits until this session is admitted to its first slot ([`State::admit`]).
    async fn admit(&mut self) {
        self.inner
            .until_admitted(|state| state.starting(&self.id))
            .await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        state.release(&self.id);
        if let Some(entry) = state.sessions.get_mut(&self.id) {
            entry.live = None;
            if !entry.tracked.summary.status.is_finished() {
                entry.tracked.summary.status = SessionStatus::Interrupted;
            }
        }
        let due = state.admit();
        drop(state);
        self.inner.admitted(due);
        self.inner.task_ended();
        self.inner.releaser.request();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state whole; a panic elsewhere cannot tear it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a routed intent over, outside the lock: the intent is itself an event, numbered by
    /// the tap.
    fn deliver(&self, routed: Routed) {
        match routed {
            Routed::Now(bus, msg) => bus.send_intent(msg),
            Routed::Queued(due) => self.admitted(due),
        }
    }

    /// Waits while `waiting` holds of the state (a session queued for a slot), looking again at
    /// each admission.
    async fn until_admitted(&self, waiting: impl Fn(&State) -> bool) {
        loop {
            let notified = self.admission.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !waiting(&self.lock()) {
                return;
            }
            notified.await;
        }
    }

    /// Hands admitted sessions their follow-ups and wakes the starting ones to look again.
    fn admitted(&self, due: Vec<Delivery>) {
        for delivery in due {
            delivery.send();
        }
        self.admission.notify_waiters();
    }

    /// One of the daemon's live tasks (a session's, or its worktree's ending) ended.
    fn task_ended(&self) {
        {
            let mut state = self.lock();
            state.live_tasks = state.live_tasks.saturating_sub(1);
            if state.closed() {
                state.hub.close();
            }
        }
        self.ended.notify_waiters();
    }

    /// Numbers `event` of session `id`, writes it to the session's log (a lifecycle event of a
    /// running session), folds it into the session and hands it to subscribers; a round's end,
    /// or its wait for an approval, gives its slot back. Its `seq` and `ts`.
    fn publish(self: &Arc<Self>, id: &str, event: &AppEvent) -> (u64, String) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let numbered = state.number(id, event, self.placement);
        let due = if matches!(event, AppEvent::RoundComplete { .. }) {
            let runtime = tokio::runtime::Handle::try_current().ok();
            let idle_timeout = state.idle_timeout;
            state.round_complete(id, || {
                IdleTimer::new(runtime.as_ref().map(|runtime| {
                    let timer = idle_timer(Arc::downgrade(self), id.to_owned(), idle_timeout);
                    runtime.spawn(timer).abort_handle()
                }))
            });
            state.admit()
        } else {
            match state.follow_waits(id, event) {
                Some(due) => due,
                None => return numbered,
            }
        };
        drop(guard);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return numbered;
        };
        // Not from here: this runs in a bus's tap, under that bus's lock, and a follow-up sent
        // to another session publishes through its own tap.
        let inner = Arc::clone(self);
        runtime.spawn(async move { inner.admitted(due) });
        numbered
    }
}

impl State {
    /// Numbers `event` of session `id` (placed `placement`), writes it to the session's log (a
    /// lifecycle event of a running session), folds it into the session and hands it to
    /// subscribers. Its `seq` and `ts`.
    fn number(&mut self, id: &str, event: &AppEvent, placement: Placement) -> (u64, String) {
        let ts = UtcTime::now().rfc3339();
        let numbered_log = matches!(placement, Placement::Daemon);
        let sessions = &mut self.sessions;
        let env = self.hub.publish(|seq| {
            let env = Envelope {
                member: None,
                record_end: None,
                seq,
                session_id: id.to_owned(),
                ts,
                event: event.clone(),
            };
            if env.event.is_lifecycle()
                && let Some(live) = sessions.get_mut(id).and_then(|e| e.live.as_mut())
            {
                live.record(&env, numbered_log);
            }
            env
        });
        let numbered = (env.seq, env.ts.clone());
        if let Some(entry) = self.sessions.get_mut(id) {
            entry.tracked.absorb(&env, &mut self.approvals);
        }
        numbered
    }

    /// The running children of session `id`.
    fn live_children(&self, id: &str) -> Vec<String> {
        self.sessions
            .iter()
            .filter(|(_, e)| e.live.is_some() && e.tracked.summary.parent.as_deref() == Some(id))
            .map(|(child, _)| child.clone())
            .collect()
    }

    /// The ids of the sessions `page` admits (its bounds and status; its limit aside), in
    /// order.
    fn admitted<'a>(
        &'a self,
        page: &'a SessionsPage,
    ) -> impl DoubleEndedIterator<Item = &'a String> + 'a {
        use std::ops::Bound;
        let bound = |id: Option<&'a str>| id.map_or(Bound::Unbounded, Bound::Excluded);
        // `range` refuses a range that ends before it starts (or where it starts, both ends
        // left out): that page is empty.
        let empty = matches!((&page.after, &page.before), (Some(a), Some(b)) if a >= b);
        let range = if empty {
            None
        } else {
            Some(
                self.sessions
                    .range::<str, _>((bound(page.after.as_deref()), bound(page.before.as_deref()))),
            )
        };
        range
            .into_iter()
            .flatten()
            .filter(|(_, entry)| {
                page.status
                    .is_none_or(|wanted| entry.tracked.status(&self.approvals) == wanted)
            })
            .map(|(id, _)| id)
    }

    fn view(&self, id: &str) -> Option<SessionSummary> {
        let entry = self.sessions.get(id)?;
        let mut view = entry.tracked.view(&self.approvals);
        if let Some(level) = entry.level() {
            view.autonomy = level.get();
        }
        Some(view)
    }

    /// [`Self::view`], and the cgroups of a session running here, to read what it uses once
    /// the lock is released ([`with_usage`]).
    fn view_unread(&self, id: &str) -> Option<(SessionSummary, Option<Arc<[PathBuf]>>)> {
        let view = self.view(id)?;
        let groups = self
            .sessions
            .get(id)
            .filter(|entry| entry.runs_here())
            .and_then(|entry| entry.live.as_ref())
            .map(|live| Arc::clone(&live.groups));
        Some((view, groups))
    }

    fn entry(&self, id: &str) -> Result<&Entry, HostError> {
        self.sessions.get(id).ok_or_else(|| unknown_session(id))
    }

    fn closed(&self) -> bool {
        self.shutting_down && self.live_tasks == 0
    }

    /// Registers a subscriber; with `after`, also what its replay needs.
    fn subscribe(
        &mut self,
        filter: Option<String>,
        after: Option<u64>,
    ) -> Result<(mpsc::Receiver<StreamItem>, Option<Replay>), HostError> {
        // The daemon's own events are filed under pseudo-sessions, which have no entry. A
        // session another process runs is followed too: its events are relayed from its
        // record (`records`).
        if let Some(id) = filter
            .as_ref()
            .filter(|id| !PSEUDO_SESSIONS.contains(&id.as_str()))
        {
            self.entry(id)?;
        }
        let (tx, rx) = self.hub.channel();
        let Some(after) = after else {
            self.hub.subscribe_live(filter, tx);
            return Ok((rx, None));
        };
        let catchup = self.hub.subscribe_from(filter.clone(), after, tx.clone());
        let mut dirs = Vec::new();
        if after + 1 < catchup.ring_first {
            for (id, entry) in &self.sessions {
                if filter.as_ref().is_some_and(|f| f != id) {
                    continue;
                }
                dirs.push(entry.log_dir.clone());
            }
        }
        let replay = Replay {
            tx,
            catchup,
            after,
            dirs,
        };
        Ok((rx, Some(replay)))
    }
}

/// `view` with what its session's processes use now, read from its cgroups `groups` (a few
/// small files of the kernel's counters; never under the lock).
fn with_usage((mut view, groups): (SessionSummary, Option<Arc<[PathBuf]>>)) -> SessionSummary {
    view.usage = groups.and_then(|groups| intendant_core::containment::usage(&groups));
    view
}

/// Runs `read`, a read of a session's records, on the blocking pool (never under the lock); its
/// error, or the pool's, as text.
async fn read_records<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, intendant_core::session_log::SessionLogError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(read).await {
        Ok(read) => read.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// What a catching-up subscriber's replay needs once the lock is released.
struct Replay {
    tx: mpsc::Sender<StreamItem>,
    catchup: hub::Catchup,
    after: u64,
    /// Session directories whose logs hold part of the history.
    dirs: Vec<PathBuf>,
}

/// What a state root records, as a starting daemon reads it.
struct Recorded {
    /// Every session, as the daemon lists it.
    sessions: BTreeMap<String, Entry>,
    /// The highest `seq` in their logs (0 when none has one) or of the logs pruned from it.
    last_seq: u64,
    /// What its operator is told of the directories whose metadata does not read.
    unreadable: Vec<String>,
}

/// What `home` records ([`Recorded`]). A torn last line (a writer killed mid-write) is skipped.
fn recorded_sessions(home: &std::path::Path) -> Result<Recorded, HostError> {
    let listing =
        read_listing(home).map_err(|e| host_error(HostErrorCode::Internal, e.to_string()))?;
    let mut sessions = BTreeMap::new();
    let mut highest = intendant_core::session_log::prune::seq_floor(home);
    let unreadable = listing.unreadable_lines();
    // One left out still numbered its records: new ones are numbered past them too.
    for left_out in &listing.unreadable {
        if let Ok(Some(top)) = last_seq(&left_out.dir) {
            highest = highest.max(top);
        }
    }
    for meta in listing.sessions {
        let dir = logs_dir(home).join(&meta.id);
        if let Ok(Some(top)) = last_seq(&dir) {
            highest = highest.max(top);
        }
        let mut entry = recorded_entry(&meta, dir);
        // Left by a daemon that stopped while it ran, or was queued, or held its follow-ups.
        if entry.listed_ended() && meta.status == RecordedStatus::Running {
            entry.tracked.summary.reason = Some(meta.left_behind(&entry.log_dir));
        }
        sessions.insert(meta.id.clone(), entry);
    }
    Ok(Recorded {
        sessions,
        last_seq: highest,
        unreadable,
    })
}

/// The entry of a session known only from its records (`meta`, in `dir`).
fn recorded_entry(meta: &SessionMeta, dir: PathBuf) -> Entry {
    let elsewhere = meta.pid.is_some_and(|pid| pid != std::process::id());
    let status = if meta.status == RecordedStatus::Running && elsewhere && meta.writer_alive() {
        // A one-shot run of another process, still going.
        SessionStatus::Running
    } else {
        status::recorded_status(meta.status)
    };
    let reason = match (status, &meta.status) {
        (SessionStatus::Running, _) => None,
        (_, RecordedStatus::Running) => Some(meta.left_unfinished()),
        (_, RecordedStatus::Ended(_)) => meta.reason.clone(),
    };
    let summary = SessionSummary {
        id: meta.id.clone(),
        parent: meta.parent.clone(),
        project: meta.project_root.display().to_string(),
        task: meta.task.clone(),
        backend: meta.recorded_backend().unwrap_or(Backend::Native),
        provider: meta.provider.clone(),
        model: meta.model.clone(),
        status,
        reason,
        // Records older than the field knew no other.
        autonomy: meta.autonomy.unwrap_or(AutonomyLevel::Medium),
        created: meta.created.clone(),
        input_tokens: meta.usage.input_tokens,
        output_tokens: meta.usage.output_tokens,
        cost_usd: meta.cost_usd,
        pending_approvals: 0,
        skills: meta.skills.clone(),
        final_text: None,
        result: None,
        worktree: meta.worktree.clone(),
        usage: None,
        run_by: meta.pid.filter(|_| status == SessionStatus::Running),
        network: meta.network,
    };
    Entry {
        // What it ended with is in its log, read when first wanted or by
        // `Supervisor::read_endings` (reading every log here would make a start as slow
        // as the logs are long).
        tracked: Tracked::recorded(summary),
        log_dir: dir,
        depth: 0,
        scenario: None,
        live: None,
        outside: None,
        git: None,
        network: None,
        rewinding: false,
    }
}

/// Feeds a catching-up subscriber its history (what the logs hold, then the ring's part), then
/// what was published meanwhile, then makes it live.
async fn feed(
    inner: Arc<Inner>,
    subscriber: u64,
    tx: mpsc::Sender<StreamItem>,
    logs: Option<LogReplay>,
    ring: Vec<Arc<Envelope>>,
) {
    let gone = || inner.lock().hub.unsubscribe(subscriber);
    // A step at a time, read on the blocking pool, the next read while this one is sent.
    let read = |mut replay: LogReplay| {
        tokio::task::spawn_blocking(move || {
            let batch = replay.next_batch(replay::BATCH, replay::BATCH_BYTES);
            (replay, batch)
        })
    };
    let mut reading = logs.map(read);
    while let Some(step) = reading.take() {
        let Ok((replay, batch)) = step.await else {
            gone();
            return;
        };
        if batch.is_empty() {
            break;
        }
        reading = Some(read(replay));
        if !send_when_drained(&tx, batch.into_iter().map(Arc::new)).await {
            gone();
            return;
        }
    }
    if !send_when_drained(&tx, ring).await {
        gone();
        return;
    }
    loop {
        let step = inner.lock().hub.drain(subscriber);
        match step {
            Drain::Deliver(env) => {
                if !send_keeping_a_slot(&tx, StreamItem::Event(env)).await {
                    gone();
                    return;
                }
            }
            Drain::Lagged(next_seq) => {
                // A slot was kept free for exactly this.
                let _ = tx.try_send(StreamItem::Lagged { next_seq });
                return;
            }
            Drain::Live | Drain::Gone => return,
        }
    }
}

#[async_trait::async_trait]
impl SessionHost for Supervisor {
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        let settings = {
            let state = self.inner.lock();
            if state.shutting_down {
                return Err(host_error(
                    HostErrorCode::ShuttingDown,
                    "the daemon is shutting down",
                ));
            }
            state.settings.clone()
        };
        start_rules::text_within_bound(&request.task, "the task")?;
        start_rules::room_for_a_start(&settings)?;
        let (request, claim) = match &request.resume {
            Some(id) => {
                let (id, claim) = self.check_resumable(id).await?;
                (
                    self.inherit_from_record(request, &id, &settings),
                    Some((id, claim)),
                )
            }
            None => (request, None),
        };
        let resumed = claim.as_ref().map(|(id, _)| id.as_str());
        let depth = self.depth(&request)?;
        let mut request = self.inherit_from_parent(request)?;
        // A resumed sub-agent's worktree is taken up (made again, when it was removed) before
        // its directory is checked.
        let reopened = match resumed {
            Some(id) => self.reopen(id, &request).await?,
            None => None,
        };
        let mut spec = match self.checked_spec(&mut request, &settings, depth) {
            Ok(spec) => spec,
            Err(e) => {
                discard(reopened).await;
                return Err(e);
            }
        };
        let worktree = match reopened {
            Some(w) => Some(w),
            None => self.isolate(&request, &spec.cwd).await?,
        };
        if let Some(w) = &worktree {
            spec.cwd = w.path.clone();
            spec.extra_write_paths.extend(w.write_roots());
        }
        let env = self.inner.env.clone();
        let workers = self.inner.workers.clone();
        let assembled = tokio::task::spawn_blocking(move || {
            assemble(spec, &env, TrustCheck::Refuse, workers.as_deref())
        })
        .await
        .map_err(|e| host_error(HostErrorCode::Internal, format!("session assembly: {e}")));
        let assembled = match assembled {
            Ok(Ok(assembled)) => assembled,
            Ok(Err(e)) => {
                discard(worktree).await;
                return Err(assembly_error(e));
            }
            Err(e) => {
                discard(worktree).await;
                return Err(e);
            }
        };
        self.launch(&request, depth, assembled, worktree)
    }

    /// Read under the lock, only the page's sessions copied.
    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        let state = self.inner.lock();
        let ids = state.admitted(page);
        let ids: Vec<&String> = if page.last {
            let mut newest: Vec<&String> = ids.rev().take(page.most()).collect();
            newest.reverse();
            newest
        } else {
            ids.take(page.most()).collect()
        };
        let unread: Vec<_> = ids
            .into_iter()
            .filter_map(|id| state.view_unread(id))
            .collect();
        drop(state);
        Ok(unread
            .into_iter()
            .map(|unread| with_usage(unread).listed())
            .collect())
    }

    /// Counted under the lock, nothing copied.
    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        let state = self.inner.lock();
        Ok(state.admitted(page).count() as u64)
    }

    /// Found under the lock, only the children copied.
    async fn children(&self, parent: &str) -> Result<Vec<SessionSummary>, HostError> {
        let state = self.inner.lock();
        let unread: Vec<_> = state
            .sessions
            .iter()
            .filter(|(_, entry)| entry.tracked.summary.parent.as_deref() == Some(parent))
            .filter_map(|(id, _)| state.view_unread(id))
            .collect();
        drop(state);
        Ok(unread
            .into_iter()
            .map(|unread| with_usage(unread).listed())
            .collect())
    }

    /// Counted under the lock, nothing copied.
    async fn session_counts(&self) -> Result<SessionCounts, HostError> {
        let state = self.inner.lock();
        let mut elsewhere = 0;
        let mut counts = SessionCounts::of(state.sessions.values().map(|entry| {
            elsewhere += u64::from(entry.running_elsewhere());
            entry.tracked.status(&state.approvals)
        }));
        counts.run_elsewhere = elsewhere;
        Ok(counts)
    }

    /// One session, its texts whole. Its records are read once when they hold what memory
    /// does not: what a session known only from them ended with (not read back yet), an
    /// ended one's whole texts.
    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        let (dir, child, unread, cut) = {
            let state = self.inner.lock();
            let entry = state.entry(id)?;
            let tracked = &entry.tracked;
            let child = tracked.summary.parent.is_some();
            (
                entry.log_dir.clone(),
                child,
                tracked.ending_unread,
                tracked.cut,
            )
        };
        let whole = if unread || cut {
            match read_records(move || Whole::read(&dir, child)).await {
                Ok(whole) => Some(whole),
                Err(e) => {
                    self.inner.log.say(&if unread {
                        format!("session {id}: what it ended with could not be read back: {e}")
                    } else {
                        format!(
                            "session {id}: its whole texts could not be read back (it is \
                             shown as a listing cuts them): {e}"
                        )
                    });
                    None
                }
            }
        } else {
            None
        };
        let (view, cut) = {
            let mut state = self.inner.lock();
            if unread && let Some(entry) = state.sessions.get_mut(id) {
                let ending = whole.as_ref().map(|w| w.ending.clone());
                entry.tracked.settle(ending.unwrap_or_default());
            }
            let view = state.view_unread(id).ok_or_else(|| unknown_session(id))?;
            let cut = state.sessions.get(id).is_some_and(|e| e.tracked.cut);
            (view, cut)
        };
        let mut view = with_usage(view);
        if let Some(whole) = whole.filter(|_| cut) {
            whole.restore(&mut view);
        }
        Ok(view)
    }

    /// From memory, as a listing reads it, unless what the session ended with is not read
    /// back yet ([`Self::session`] reads and keeps it).
    async fn session_listed(&self, id: &str) -> Result<SessionSummary, HostError> {
        let row = {
            let state = self.inner.lock();
            if state.entry(id)?.tracked.ending_unread {
                None
            } else {
                state.view_unread(id)
            }
        };
        match row {
            Some(unread) => Ok(with_usage(unread).listed()),
            None => Ok(self.session(id).await?.listed()),
        }
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        let mut list = self.inner.lock().approvals.list();
        if matches!(self.inner.placement, Placement::Daemon) {
            list.extend(self.pending_schedules().await);
            list.extend(self.pending_proposals().await);
        }
        Ok(list)
    }

    async fn agenda(&self, op: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        if !matches!(self.inner.placement, Placement::Daemon) {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                "the agenda is the daemon's (intendant serve)".to_owned(),
            ));
        }
        self.agenda_op(op).await
    }

    async fn memory(&self, op: MemoryOp) -> Result<MemoryAnswer, HostError> {
        if !matches!(self.inner.placement, Placement::Daemon) {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                "the memories are kept by intendant memory here; the daemon serves them to its \
                 dashboard"
                    .to_owned(),
            ));
        }
        self.memory_op(op).await
    }

    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError> {
        let SessionIntent { session_id, msg } = intent;
        if session_id == AGENDA_SESSION && matches!(self.inner.placement, Placement::Daemon) {
            return self.answer_schedule(msg).await.map(|()| Sent::Now);
        }
        if session_id == MEMORY_SESSION && matches!(self.inner.placement, Placement::Daemon) {
            return self.answer_proposal(msg).await.map(|()| Sent::Now);
        }
        match &msg {
            ControlMsg::FollowUp { text } => start_rules::text_within_bound(text, "the follow-up")?,
            ControlMsg::Input { text } => start_rules::text_within_bound(text, "the answer")?,
            _ => {}
        }
        if let ControlMsg::FollowUp { text } = msg {
            return self.follow_up(&session_id, text);
        }
        let (routed, sent) = {
            let mut guard = self.inner.lock();
            let state = &mut *guard;
            if matches!(msg, ControlMsg::ApproveAll { .. }) {
                // Every later command of the session approved: what `full` does.
                start_rules::within_ceiling(&state.settings, AutonomyLevel::Full)?;
            }
            let entry = state
                .sessions
                .get_mut(&session_id)
                .ok_or_else(|| unknown_session(&session_id))?;
            if entry.live.is_none() || entry.tracked.summary.status.is_finished() {
                return Err(entry.not_running_here(&session_id));
            }
            let category = match &msg {
                ControlMsg::Approve { id }
                | ControlMsg::Deny { id }
                | ControlMsg::Skip { id }
                | ControlMsg::ApproveAll { id }
                | ControlMsg::AllowHost { id } => {
                    let network_only = matches!(msg, ControlMsg::AllowHost { .. });
                    let category = state
                        .approvals
                        .answer(&session_id, *id, network_only)
                        .map_err(|refused| match refused {
                            AnswerRefused::Unknown => host_error(
                                HostErrorCode::UnknownApproval,
                                format!("no approval {id} is pending in session {session_id}"),
                            ),
                            AnswerRefused::AlreadyAnswered => host_error(
                                HostErrorCode::AlreadyAnswered,
                                format!("approval {id} was already answered"),
                            ),
                            AnswerRefused::NotNetwork(category) => host_error(
                                HostErrorCode::InvalidRequest,
                                format!(
                                    "allow_host answers only a network approval (a host to allow for good); approval {id} is of category {category}"
                                ),
                            ),
                        })?;
                    Some(category)
                }
                ControlMsg::Input { .. } => {
                    if entry.tracked.question.take().is_none() {
                        return Err(host_error(
                            HostErrorCode::UnknownApproval,
                            format!("no question is pending in session {session_id}"),
                        ));
                    }
                    None
                }
                // Routed by `follow_up` (it may wait for a slot).
                ControlMsg::FollowUp { .. } => None,
            };
            // A session whose round waits for this answer holding no slot waits for one.
            state.route_answer(&session_id, msg, category)?
        };
        self.inner.deliver(routed);
        Ok(sent)
    }

    async fn set_aside(&self, id: &str) {
        let due = self.inner.lock().set_aside(id);
        if let Some(due) = due {
            self.inner.admitted(due);
        }
    }

    async fn rejoin(&self, id: &str) {
        let due = self.inner.lock().rejoin(id);
        self.inner.admitted(due);
        self.inner.until_admitted(|state| state.rejoining(id)).await;
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        let state = self.inner.lock();
        let entry = state.entry(id)?;
        match &entry.live {
            Some(live) if live.cancel.interrupt() => Ok(()),
            Some(_) => {
                // Nothing runs yet: it waits for its first slot (or a follow-up for one).
                let why = match entry.tracked.summary.status {
                    SessionStatus::Queued => "it is queued for a running slot",
                    _ => "it waits for a follow-up",
                };
                Err(host_error(
                    HostErrorCode::InvalidRequest,
                    format!(
                        "session {id} runs no turn to interrupt ({why}; `intendant ctl stop {id}` \
                         ends it)"
                    ),
                ))
            }
            None => Err(entry.not_running_here(id)),
        }
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        // Stopping a parent stops its children first (theirs, recursively).
        let children = self.inner.lock().live_children(id);
        for child in children {
            let _ = Box::pin(self.stop(&child)).await;
        }
        let cancel = {
            let state = self.inner.lock();
            let entry = state.entry(id)?;
            match &entry.live {
                Some(live) => live.cancel.clone(),
                None => return Err(entry.not_running_here(id)),
            }
        };
        // The one way, shutdown's too: the session ends itself within the grace `supervise` gives.
        cancel.stop();
        Ok(())
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        match session {
            Some(id) => {
                start_rules::within_ceiling(&self.inner.lock().settings, level)?;
                self.set_session_autonomy(id, level)
            }
            None => {
                let change = SettingsChange {
                    default_autonomy: Some(level),
                    ..SettingsChange::default()
                };
                self.change_settings(change).await.map(|_| ())
            }
        }
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        Ok(self.inner.lock().settings.clone())
    }

    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        self.change_settings(change).await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        let filter = session.map(str::to_owned);
        let (rx, replay) = self.inner.lock().subscribe(filter, after)?;
        let Some(Replay {
            tx,
            catchup,
            after,
            dirs,
        }) = replay
        else {
            return Ok(EventStream::new(rx, 0));
        };
        // What the ring evicted is in the logs: each event is written before it is published.
        let below = catchup.ring_first;
        let logs = if dirs.is_empty() {
            None
        } else {
            let opened =
                tokio::task::spawn_blocking(move || LogReplay::open(&dirs, after, below)).await;
            match opened {
                Ok(logs) => Some(logs),
                Err(e) => {
                    self.inner.lock().hub.unsubscribe(catchup.subscriber);
                    return Err(host_error(
                        HostErrorCode::Internal,
                        format!("log replay: {e}"),
                    ));
                }
            }
        };
        // The ring's part comes last; without one, the logs' last record ends the history.
        let history_end = match catchup.ring.last() {
            Some(env) => env.seq,
            None => logs.as_ref().map_or(0, LogReplay::last),
        };
        tokio::spawn(feed(
            Arc::clone(&self.inner),
            catchup.subscriber,
            tx,
            logs,
            catchup.ring,
        ));
        Ok(EventStream::new(rx, history_end))
    }

    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError> {
        self.rewind_session(request).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneReport, HostError> {
        self.prune_records(request).await
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        Ok(self.inner.lock().entry(id)?.log_dir.clone())
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        let live: Vec<SessionCancel> = {
            let mut state = self.inner.lock();
            state.shutting_down = true;
            if state.closed() {
                state.hub.close();
            }
            state
                .sessions
                .values()
                .filter_map(|e| e.live.as_ref())
                .map(|l| l.cancel.clone())
                .collect()
        };
        // The same way as `stop`: every session ends itself and is logged `interrupted`.
        for cancel in live {
            cancel.stop();
        }
        self.inner.ended.notify_waiters();
        Ok(())
    }
}

/// The entry of a session `request` started, queued and running as `live`: listed with what
/// its log records so far (a resumed session's task, creation and usage) and its worktree.
fn queued_entry(
    request: &StartRequest,
    start: &SessionStart,
    backend: Backend,
    log: &SessionLog,
    worktree: Option<&Worktree>,
    depth: u32,
    live: Live,
) -> Entry {
    let meta = log.meta();
    let summary = SessionSummary {
        // A sub-agent resumed on its own is still its parent's.
        parent: request.parent.clone().or_else(|| meta.parent.clone()),
        // A resumed session is still the task it was started with (its record's), not the
        // resume's instruction: listed the same before and after a restart.
        task: meta.task.clone(),
        created: meta.created.clone(),
        input_tokens: meta.usage.input_tokens,
        output_tokens: meta.usage.output_tokens,
        cost_usd: meta.cost_usd,
        // A resumed session keeps what it invoked before.
        skills: meta.skills.clone(),
        // A resumed sub-agent is listed with the worktree it had.
        worktree: worktree
            .map(Worktree::info)
            .or_else(|| meta.worktree.clone()),
        ..started_summary(start, backend, SessionStatus::Queued, live.autonomy.get())
    };
    Entry {
        tracked: Tracked::new(summary),
        log_dir: log.dir().to_path_buf(),
        // As the assembly placed it ([`SubAgentPlace::resumed`]).
        depth: depth.max(meta.sub_agent_depth()),
        scenario: request.scenario.clone(),
        live: Some(live),
        outside: None,
        git: start.git.clone(),
        network: Some(start.network),
        rewinding: false,
    }
}

/// The listing of a session just started from `start`: no parent, nothing used yet, nothing
/// waiting, no result.
fn started_summary(
    start: &SessionStart,
    backend: Backend,
    status: SessionStatus,
    autonomy: AutonomyLevel,
) -> SessionSummary {
    SessionSummary {
        id: start.session_id.clone(),
        parent: None,
        project: start.project_root.display().to_string(),
        task: start.task.clone(),
        backend,
        provider: start.provider.clone(),
        model: start.model.clone(),
        status,
        reason: None,
        autonomy,
        created: String::new(),
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
        network: Some(start.network),
    }
}

//! The daemon's vocabulary, shared by every frontend that drives it (the control socket and
//! `intendant ctl`, the web dashboard, MCP): what a session looks like from outside
//! ([`SessionSummary`]), what is waiting for a human ([`PendingApproval`]), how a session is
//! asked for ([`StartRequest`]), the control-plane settings ([`Settings`]), and how events travel
//! ([`Envelope`], [`StreamItem`]).
//!
//! Every event the daemon publishes is an [`Envelope`] carrying a daemon-wide, gapless `seq`; a
//! frontend that reconnects asks for everything after the last `seq` it saw and gets no gap and
//! no duplicate. Streamed deltas (`model_response_delta`) are numbered like every other event but
//! are never written to a session log, so a replay served from the logs (older than the daemon's
//! in-memory ring) skips their numbers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::autonomy::AutonomyLevel;
use crate::closed_set::closed_set;
use crate::events::{ActionCategory, AppEvent, ControlMsg};

/// Version of the daemon protocol, sent in both hellos of the control socket.
pub const DAEMON_PROTOCOL_VERSION: u32 = 1;

/// One event as the daemon publishes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Daemon-wide sequence number: 1, 2, 3, ... with no gap, across every session.
    pub seq: u64,
    /// The session the event belongs to.
    pub session_id: String,
    /// When the daemon published it (UTC, RFC 3339 with milliseconds).
    pub ts: String,
    /// The event.
    pub event: AppEvent,
    /// The fleet member whose event it is, set only on another member's event passed on by a
    /// fleet member's stream of every session (`docs/fleet.md`); its `seq` is then that
    /// member's. `None` (and absent in JSON) for this daemon's own events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Where the line this event was read from ends in its session's `session.jsonl` (the
    /// offset just past its newline), set only on the events the daemon relays from the log of
    /// a session another process runs. A reader that read that log up to an offset has shown
    /// exactly the relayed events that end at or before it (see [`Envelope::in_record`]).
    /// `None` (and absent in JSON) for every other event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_end: Option<u64>,
}

/// How far a reader read a session's `session.jsonl`: where the last line it read ends, and
/// the highest daemon `seq` a record it read carries (the records a daemon wrote carry theirs;
/// a one-shot run's carry none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordRead {
    /// The offset just past the last line read.
    pub end: u64,
    /// The highest `seq` read, when a record read had one.
    pub seq: Option<u64>,
}

impl Envelope {
    /// Whether a reader that read this event's session's log as far as `read` has read this
    /// event already: a relayed one whose line ends there or before, or one the daemon
    /// numbered as it recorded it, up to the highest `seq` read.
    pub fn in_record(&self, read: RecordRead) -> bool {
        match self.record_end {
            Some(end) => end <= read.end,
            None => read.seq.is_some_and(|seq| self.seq <= seq),
        }
    }

    /// Whether a history of its session that begins with this event holds the session whole:
    /// the session's first start (not a resumed run's), which the daemon ran. A history that
    /// begins otherwise (with a relayed event, a resumed run's start, or a later event) lacks
    /// what only the session's record holds: the runs a one-shot process recorded, with no
    /// `seq`, or a start the daemon no longer holds.
    pub fn begins_session(&self) -> bool {
        self.record_end.is_none()
            && matches!(
                self.event,
                crate::events::AppEvent::SessionStarted { resumed: false, .. }
            )
    }

    /// The `seq` a stream of this daemon can be read again from at this event: its own; `None`
    /// for another fleet member's event, whose `seq` is that member's (such an event is live
    /// only: a consumer that has no room for it leaves it out, and a browser does not resume
    /// after it).
    pub fn resume_seq(&self) -> Option<u64> {
        self.member.is_none().then_some(self.seq)
    }

    /// How many bytes this envelope is as JSON, counted without building it: what the bounds
    /// on events held and sent (the daemon's ring, a page of history) measure.
    pub fn json_bytes(&self) -> usize {
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        // An envelope always serializes; were it not to, it would count as nothing.
        let _ = serde_json::to_writer(&mut count, self);
        count.0
    }
}

/// What an event subscription yields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamItem {
    /// The next event, shared by every subscriber it is handed to (one copy, however many
    /// streams carry it).
    Event(Arc<Envelope>),
    /// The subscriber fell behind and its bounded queue overflowed: events from `next_seq` on
    /// were not delivered to it. Subscribe again with `after = next_seq - 1` to read them; the
    /// stream ends after this item.
    Lagged {
        /// The first sequence number not delivered.
        next_seq: u64,
    },
}

impl StreamItem {
    /// Where a consumer with no room for this item reads its stream again from: this daemon's
    /// event's `seq` or a `Lagged`'s `next_seq`; `None` for another fleet member's event (see
    /// [`Envelope::resume_seq`]).
    pub fn resume_seq(&self) -> Option<u64> {
        match self {
            StreamItem::Event(envelope) => envelope.resume_seq(),
            StreamItem::Lagged { next_seq } => Some(*next_seq),
        }
    }
}

closed_set! {
    /// Where a session is in its life.
    pub enum SessionStatus ("session status") {
        /// Accepted, waiting for a free slot (`[daemon] max_running`).
        Queued = "queued",
        /// Working: the model or a command is running.
        Running = "running",
        /// Blocked on a human: an approval or a question is pending.
        WaitingForHuman = "waiting_for_human",
        /// A round ended; the session waits for a follow-up.
        Idle = "idle",
        /// Ended normally (the model finished, or a budget or turn cap stopped it).
        Done = "done",
        /// Ended by a provider, runtime or worker failure.
        Failed = "failed",
        /// Ended by an interrupt, a stop, a shutdown or a crash of the daemon; resumable.
        Interrupted = "interrupted",
    }
}

impl SessionStatus {
    /// Whether the session has ended (no further events will come).
    pub fn is_finished(self) -> bool {
        match self {
            SessionStatus::Done | SessionStatus::Failed | SessionStatus::Interrupted => true,
            SessionStatus::Queued
            | SessionStatus::Running
            | SessionStatus::WaitingForHuman
            | SessionStatus::Idle => false,
        }
    }
}

/// What runs a session's turns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// Intendant's own agent loop with a model provider.
    Native,
    /// An external agent CLI supervised as a worker (`codex`, `claude-code`, `kimi`, or a
    /// named ACP agent from `intendant.toml`).
    Agent {
        /// The profile name.
        name: String,
        /// For `acp`, the agent's command line (`--agent acp -- COMMAND ARGS...`); empty for
        /// every other agent (a command line there is refused).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        command: Vec<String>,
    },
}

impl Backend {
    /// The backend a user names: `native`, else the agent of that name (`codex`, `claude-code`,
    /// `kimi`, `acp`, or an `[agent.acp.NAME]` entry; an unknown name is refused when the
    /// session is assembled).
    pub fn named(name: &str) -> Backend {
        match name {
            "native" => Backend::Native,
            _ => Backend::Agent {
                name: name.to_owned(),
                command: Vec::new(),
            },
        }
    }

    /// The name users select it with (`native`, or the agent's).
    pub fn name(&self) -> &str {
        match self {
            Backend::Native => "native",
            Backend::Agent { name, .. } => name,
        }
    }

    /// The ACP agent's command line (empty for every other backend).
    pub fn command(&self) -> &[String] {
        match self {
            Backend::Native => &[],
            Backend::Agent { command, .. } => command,
        }
    }
}

/// A session as every frontend lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Session id (also its log directory name).
    pub id: String,
    /// The session that spawned this one, for sub-agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Project root.
    pub project: String,
    /// The task text.
    pub task: String,
    /// What runs it.
    pub backend: Backend,
    /// Provider name (`openai`, `mock`, ...; the worker's name for an external agent).
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Current status.
    pub status: SessionStatus,
    /// Why it ended, once it did (its `session_ended` reason, as recorded), or that it was left
    /// unfinished when what ran it died first; none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The session's autonomy level.
    pub autonomy: AutonomyLevel,
    /// When it was created (UTC, RFC 3339).
    pub created: String,
    /// Input tokens so far.
    pub input_tokens: u64,
    /// Output tokens so far.
    pub output_tokens: u64,
    /// Cost so far in USD.
    pub cost_usd: f64,
    /// Approvals of this session waiting for a human.
    pub pending_approvals: u32,
    /// The last round's final text, once a round has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_text: Option<String>,
    /// For a sub-agent: what it submitted, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<SubmittedResult>,
    /// For a sub-agent in `worktree` isolation: its worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeInfo>,
    /// The skills the session invoked (`invoke_skill`), each once, in the order first invoked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// What its processes use now, read from its cgroups as it is listed: only while it lives
    /// and has them (none for an ended session, or where no cgroup could be made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<SessionUsage>,
    /// While another process runs it (a one-shot `intendant` run beside the daemon): that
    /// process's id. It asks its own human; the daemon lists the session and relays its
    /// events, and refuses what only a session it runs takes (an answer, a follow-up, an
    /// interrupt, a stop, a level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_by: Option<u32>,
    /// What network its commands get (`none`, `proxy`, `host`), as its last run began; absent
    /// where that is not known (a record older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkMode>,
}

/// What a live session's processes use, from its cgroups: which session is busy, or holds the
/// memory, is read here as `systemd-cgtop` reads a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUsage {
    /// Its processes (and their threads) now: the kernel's count, as `pids_max` bounds it.
    pub processes: u64,
    /// The memory they are charged now less the page cache counted inactive (as `docker stats`
    /// counts it), in bytes, where a memory group holds them (cgroup v2's with its controller,
    /// or v1's, which every session gets where that hierarchy is mounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// The CPU time they (and those that ended) used since the session started, in
    /// milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
}

impl SessionSummary {
    /// The most bytes of a session's task, final text and submitted summary a listing of
    /// sessions carries (one session asked for by its id carries them whole).
    pub const LISTED_TEXT_BYTES: usize = 4096;

    /// This session as a listing of many carries it: its task, final text, submitted summary
    /// and end reason cut to [`Self::LISTED_TEXT_BYTES`] (ending in `…`), so a listing's size
    /// grows with the sessions, not with what their models (or their errors) wrote.
    pub fn listed(mut self) -> SessionSummary {
        self.cut_to_listing();
        self
    }

    /// Cuts its texts as [`Self::listed`] does, in place; whether any was longer.
    pub fn cut_to_listing(&mut self) -> bool {
        let mut cut = Self::cut_text(&mut self.task);
        for text in [&mut self.final_text, &mut self.reason]
            .into_iter()
            .flatten()
        {
            cut |= Self::cut_text(text);
        }
        if let Some(result) = &mut self.result {
            cut |= Self::cut_text(&mut result.summary);
        }
        cut
    }

    /// Cuts `text` as a listing carries it ([`Self::listed_text`]); whether it was longer.
    fn cut_text(text: &mut String) -> bool {
        match Self::listed_text(text) {
            Some(cut) => {
                *text = cut;
                true
            }
            None => false,
        }
    }

    /// `text` as a listing carries it when it is longer than [`Self::LISTED_TEXT_BYTES`]: cut
    /// to that, ending in `…`.
    pub fn listed_text(text: &str) -> Option<String> {
        (text.len() > Self::LISTED_TEXT_BYTES)
            .then(|| crate::text::clip(text, Self::LISTED_TEXT_BYTES))
    }
}

/// What `prune` removes: the records (log directory and artifacts) of sessions that ended and
/// were last written more than `older_than_secs` ago (`intendant sessions prune`,
/// `[daemon] session_retention_days`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// How long ago a session must have been last written.
    pub older_than_secs: u64,
    /// Only say what would be removed.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a `prune` removed (or, a dry run, would remove) and which old sessions it kept, why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Nothing was removed: `removed` is what would be.
    pub dry_run: bool,
    /// The sessions whose records are gone, oldest first.
    pub removed: Vec<PrunedSession>,
    /// Sessions old enough that were kept, each with the reason.
    pub kept: Vec<KeptSession>,
    /// Bytes the removed records held.
    pub bytes: u64,
    /// Scheduled sessions of the agenda that ended, made and due before the same cut: removed
    /// with the sessions (or, a dry run, that would be). Work items stay.
    #[serde(default)]
    pub schedules: u64,
    /// Why the agenda's ended schedules could not be counted or removed, if so (the sessions'
    /// prune went on without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedules_error: Option<String>,
}

/// One session a `prune` removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedSession {
    /// Its id.
    pub id: String,
    /// When its record was last written (RFC 3339 UTC).
    pub updated: String,
    /// Bytes its log directory and artifacts held.
    pub bytes: u64,
}

/// One old session a `prune` kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptSession {
    /// Its id.
    pub id: String,
    /// Why it was kept.
    pub why: String,
}

/// How many sessions a daemon knows, by what they are doing: what `ctl status` shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCounts {
    /// Every session it knows.
    pub total: u64,
    /// Not finished: running, waiting for a human, idle or queued.
    pub active: u64,
    /// Holding a running slot: a round in flight.
    pub running: u64,
    /// Waiting for a follow-up (no slot).
    pub idle: u64,
    /// Waiting for a slot.
    pub queued: u64,
    /// Waiting for a human (an approval or a question); most hold no slot (see the daemon's
    /// slots).
    #[serde(default)]
    pub waiting_for_human: u64,
    /// Ended normally.
    #[serde(default)]
    pub done: u64,
    /// Ended by a failure.
    #[serde(default)]
    pub failed: u64,
    /// Ended by an interrupt, a stop or a crash; resumable.
    #[serde(default)]
    pub interrupted: u64,
    /// Of `running`, those another process runs (a one-shot run beside the daemon): listed and
    /// relayed, holding none of the daemon's slots.
    #[serde(default)]
    pub run_elsewhere: u64,
}

impl SessionCounts {
    /// The counts of sessions with these statuses.
    pub fn of(statuses: impl IntoIterator<Item = SessionStatus>) -> SessionCounts {
        let mut counts = SessionCounts::default();
        for status in statuses {
            counts.total += 1;
            counts.active += u64::from(!status.is_finished());
            let count = match status {
                SessionStatus::Running => &mut counts.running,
                SessionStatus::WaitingForHuman => &mut counts.waiting_for_human,
                SessionStatus::Idle => &mut counts.idle,
                SessionStatus::Queued => &mut counts.queued,
                SessionStatus::Done => &mut counts.done,
                SessionStatus::Failed => &mut counts.failed,
                SessionStatus::Interrupted => &mut counts.interrupted,
            };
            *count += 1;
        }
        counts
    }
}

/// The session id the daemon's own events are published under (a prune's
/// [`AppEvent::SessionsPruned`](crate::events::AppEvent)): never a real session's, whose ids are
/// timestamps with a random suffix.
pub const DAEMON_SESSION: &str = "daemon";

/// A part of the session listing: the sessions whose ids sort after `after` and before
/// `before` (an id starts with its UTC creation time, so that is the order they were created
/// in), of one `status` if it names one, at most `limit` of them, the first ones or with `last`
/// the newest (oldest first either way); by default the whole listing. A client reads a long
/// listing a page at a time: each page's reply is then bounded, where one reply of everything
/// grows with every session a daemon ever ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionsPage {
    /// Only sessions whose ids sort after this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Only sessions whose ids sort before this one (MCP's `list_sessions` reads back from the
    /// newest with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Only sessions in this status (as listed: a session waiting on an approval is
    /// `waiting_for_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SessionStatus>,
    /// At most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The last `limit` of them (the newest), not the first: what a fleet member publishes,
    /// without a copy of every session it ever ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last: bool,
}

impl SessionsPage {
    /// The whole listing.
    pub const ALL: SessionsPage = SessionsPage {
        after: None,
        before: None,
        status: None,
        limit: None,
        last: false,
    };

    /// How many sessions a client reads at a time (`ctl`, `intendant mcp`, the dashboard): a
    /// page of about 3 MiB at most, with every listed text at its longest.
    pub const SIZE: u32 = 256;

    /// The page of [`Self::SIZE`] after `after`.
    pub fn after(after: Option<String>) -> SessionsPage {
        SessionsPage {
            after,
            limit: Some(Self::SIZE),
            ..SessionsPage::ALL
        }
    }

    /// The newest `limit` sessions.
    pub fn newest(limit: u32) -> SessionsPage {
        SessionsPage {
            limit: Some(limit),
            last: true,
            ..SessionsPage::ALL
        }
    }

    /// The page of `items`, a listing in id order (`id_of` giving each one's id) of sessions
    /// of its [`Self::status`] (filtered first by the caller, with [`Self::admits_status`]).
    pub fn of<T>(&self, mut items: Vec<T>, id_of: impl Fn(&T) -> &str) -> Vec<T> {
        items.retain(|item| self.admits(id_of(item)));
        let most = self.most();
        if self.last {
            items.drain(..items.len().saturating_sub(most));
        } else {
            items.truncate(most);
        }
        items
    }

    /// Whether session `id` sorts after [`Self::after`] and before [`Self::before`].
    pub fn admits(&self, id: &str) -> bool {
        self.after.as_deref().is_none_or(|after| id > after)
            && self.before.as_deref().is_none_or(|before| id < before)
    }

    /// Whether a session in `status` is of [`Self::status`].
    pub fn admits_status(&self, status: SessionStatus) -> bool {
        self.status.is_none_or(|wanted| status == wanted)
    }

    /// This page without its limit: every session it admits (what [`crate::socket`]'s
    /// `sessions_count` counts).
    pub fn unlimited(&self) -> SessionsPage {
        SessionsPage {
            limit: None,
            last: false,
            ..self.clone()
        }
    }

    /// The most sessions the page holds.
    pub fn most(&self) -> usize {
        self.limit.map_or(usize::MAX, |limit| limit as usize)
    }

    /// The page a surface reads to answer this one in one reply of at most [`Self::SIZE`]
    /// sessions (the socket's `sessions` and `fleet_sessions`, the dashboard's
    /// `/api/sessions`): this one, or with no limit one session past a reply's most, so that
    /// [`Self::answered`] refuses a listing longer than a reply instead of cutting it. A limit
    /// past a reply's most is refused. One reply then costs the daemon about 3 MiB at most
    /// however many sessions it keeps, where a reply of everything grew with every session.
    pub fn asked(&self) -> Result<SessionsPage, String> {
        match self.limit {
            Some(limit) if limit > Self::SIZE => Err(format!(
                "a page holds at most {} sessions, not {limit}: read the listing a page at a \
                 time (`after` the last id read)",
                Self::SIZE
            )),
            Some(_) => Ok(self.clone()),
            None => Ok(SessionsPage {
                limit: Some(Self::SIZE + 1),
                ..self.clone()
            }),
        }
    }

    /// Whether `count` sessions, read with [`Self::asked`], are the whole answer to this page.
    pub fn answered(&self, count: usize) -> Result<(), String> {
        if self.limit.is_none() && count > Self::SIZE as usize {
            return Err(format!(
                "the listing holds more than {size} sessions, more than one reply carries: read \
                 it a page at a time (`limit` at most {size}, `after` the last id read)",
                size = Self::SIZE
            ));
        }
        Ok(())
    }
}

/// A listing read from its start a page of [`SessionsPage::SIZE`] at a time (this daemon's
/// sessions, a fleet's): each page asked for after the last id read, until a short page, or one
/// that gives again an id already read (a daemon older than pages gives every session every
/// time).
#[derive(Debug, Default)]
pub struct Pages {
    seen: std::collections::HashSet<String>,
    after: Option<String>,
    done: bool,
}

impl Pages {
    /// The page to ask for next; `None` once the listing is read.
    pub fn next(&self) -> Option<SessionsPage> {
        (!self.done).then(|| SessionsPage::after(self.after.clone()))
    }

    /// Takes the ids of the page just read, in the listing's order: how many of them are new,
    /// those before the first given again (which ends the listing, as a short page does).
    pub fn took<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> usize {
        let mut count = 0;
        let mut new = 0;
        for id in ids {
            count += 1;
            if self.done {
                continue;
            }
            if self.seen.insert(id.to_owned()) {
                new += 1;
                self.after = Some(id.to_owned());
            } else {
                self.done = true;
            }
        }
        self.done |= count < SessionsPage::SIZE as usize;
        new
    }
}

/// One approval waiting for a human, in the daemon-wide queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// Approval id, unique daemon-wide.
    pub id: u64,
    /// The session asking.
    pub session_id: String,
    /// That session's project root.
    pub project: String,
    /// The whole command, escaped (see `AppEvent::ApprovalRequired`).
    pub command_preview: String,
    /// For an edit, what it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The category that needs approval.
    pub category: ActionCategory,
    /// `seq` of the `approval_required` event.
    pub seq: u64,
    /// When it was asked (UTC, RFC 3339).
    pub requested: String,
}

/// A request for a new session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    /// The task text (may be empty only when resuming).
    pub task: String,
    /// Project directory (absolute); the project root is detected from it. Empty for a resume:
    /// the project the session worked in.
    #[serde(default)]
    pub project: String,
    /// Autonomy level; the control plane's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomy: Option<AutonomyLevel>,
    /// Provider name; the usual selection when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Scenario file (absolute) of the `mock` provider, the in-process fake model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Backend; the control plane's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// Resume this earlier session (same conversation) instead of starting fresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// Parent session, for a sub-agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// For a sub-agent: where it works (default `shared`: the parent's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// For a sub-agent: its role (`research`, `implementation`, `review`, ...), whose prompt is
    /// appended to the system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Session token budget (input + output tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// What network the session's commands get; the project's settings when absent. A request
    /// may only narrow them (`none` ⊂ `proxy` ⊂ `host`): `host` only where the project's trusted
    /// `[sandbox] network` already is `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkMode>,
}

closed_set! {
    /// Where a sub-agent works.
    pub enum Isolation ("isolation") {
        /// Its own git worktree on a new branch from the parent's `HEAD` (falls back to
        /// `shared`, with a warning, outside a git repository).
        Worktree = "worktree",
        /// The parent's directory.
        Shared = "shared",
    }
}

/// What a sub-agent reported back with `submit_result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmittedResult {
    /// The child's summary of what it did.
    pub summary: String,
    /// Structured fields (any JSON object the child gave).
    #[serde(default)]
    pub fields: serde_json::Value,
}

/// A sub-agent's worktree and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeInfo {
    /// The checkout.
    pub path: String,
    /// Its branch.
    pub branch: String,
    /// Once the session ended: `removed`, `removed; branch kept with N commits` or
    /// `kept: uncommitted changes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// The control plane's settings (persisted in the state root's `intendant.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Autonomy level of new sessions.
    pub default_autonomy: AutonomyLevel,
    /// Backend of new sessions.
    pub default_backend: Backend,
    /// Sessions running at once; more queue.
    pub max_running: u32,
    /// The most autonomy any start or autonomy change may ask for, from any surface: `[daemon]
    /// max_autonomy`, set by the owner in the file, never through a request.
    #[serde(default = "full_autonomy")]
    pub max_autonomy: AutonomyLevel,
}

fn full_autonomy() -> AutonomyLevel {
    AutonomyLevel::Full
}

/// A change to the settings: each field present replaces the current value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsChange {
    /// New default autonomy level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_autonomy: Option<AutonomyLevel>,
    /// New default backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_backend: Option<Backend>,
    /// New cap on running sessions (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Instead of the fields above (which must then be absent): `[daemon]` read again from the
    /// state root's `intendant.toml` and put in force, `max_autonomy` included (`intendant ctl
    /// reload`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reload: bool,
}

/// An intent addressed to one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIntent {
    /// The session it targets.
    pub session_id: String,
    /// The intent (approval answer, question answer, follow-up).
    #[serde(flatten)]
    pub msg: ControlMsg,
}

closed_set! {
    /// Where a sent intent went: the `send` operation's answer, decided where the session's
    /// slot is, so a client need not ask the session's status around it (which could change
    /// between the asking and the sending).
    pub enum Sent ("where an intent went") {
        /// It reached the session, which acts on it now: an answer goes to the round that
        /// waits for it, a follow-up begins a round.
        Now = "now",
        /// The session waits for a running slot (`[daemon] max_running` are working) and
        /// acts on it once one frees.
        Queued = "queued",
        /// A follow-up to a session whose round goes on: its next round, once this one ends.
        AfterRound = "after_round",
        /// A follow-up to a session whose round waits for a human (an approval, or a
        /// question): its next round, once they answered and that round ended.
        AfterAnswer = "after_answer",
        /// A follow-up to a session whose round waits for a running slot, to begin (its first)
        /// or to go on (its approvals answered): its next round, once that one ends.
        AfterQueuedRound = "after_queued_round",
    }
}

impl Sent {
    /// The `send` reply `value` as a `Sent`. The reply says the intent was delivered, so one
    /// that names no place this build knows (`null` from a daemon that did not say, such as an
    /// older fleet member, or a place a newer one added) is `Now`: it reached the session.
    pub fn from_reply(value: serde_json::Value) -> Sent {
        serde_json::from_value(value).unwrap_or(Sent::Now)
    }

    /// Whether a round goes on in the session: the follow-up is taken by the next one.
    pub fn after_a_round(self) -> bool {
        matches!(
            self,
            Sent::AfterRound | Sent::AfterAnswer | Sent::AfterQueuedRound
        )
    }
}

/// Why the daemon refused a request: a stable code plus a message for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostError {
    /// What kind of refusal.
    pub code: HostErrorCode,
    /// What went wrong, for a human (never a secret).
    pub message: String,
}

impl HostError {
    /// An error of `code` saying `message`.
    pub fn new(code: HostErrorCode, message: impl Into<String>) -> HostError {
        HostError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostError {}

closed_set! {
    /// The stable codes of [`HostError`].
    pub enum HostErrorCode ("host error code") {
        /// No session has that id.
        UnknownSession = "unknown_session",
        /// No approval (or question) has that id in that session.
        UnknownApproval = "unknown_approval",
        /// The approval or question was already answered (by any frontend).
        AlreadyAnswered = "already_answered",
        /// The session has ended and takes no more intents.
        SessionFinished = "session_finished",
        /// The request is malformed or names something invalid (a project that does not exist,
        /// an unknown provider, a bad setting).
        InvalidRequest = "invalid_request",
        /// The daemon is shutting down and starts nothing new.
        ShuttingDown = "shutting_down",
        /// The daemon cannot be reached (no daemon runs, or the connection was lost).
        Unavailable = "unavailable",
        /// Refused by a rule, not by the request's shape: the caller is a session's process (a
        /// session cannot drive the daemon), or the request asks for more than a ceiling the
        /// owner set (`[daemon] max_autonomy`, `[mcp] max_autonomy`) or than its surface may give
        /// (an ACP command line not in trusted configuration, a project the MCP server may not
        /// use).
        Forbidden = "forbidden",
        /// A limit was reached: on clients (`[daemon] max_clients`, `max_streams_per_client`,
        /// the MCP sessions or dashboard streams), on what waits for the owner (the agenda's
        /// schedules and entries still to come), on the follow-ups waiting for a session to
        /// take them, or on the daemon's descriptors (a start that would leave too few free):
        /// nothing was done; try again once a client left, the owner answered, the session
        /// began its next round or a session ended.
        Busy = "busy",
        /// Anything else (an I/O failure writing settings, ...).
        Internal = "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_go_on_after_the_last_id_read_until_a_short_page_or_one_given_again() {
        let ids: Vec<String> = (0..SessionsPage::SIZE)
            .map(|n| format!("s{n:04}"))
            .collect();
        let mut pages = Pages::default();
        assert_eq!(pages.next(), Some(SessionsPage::after(None)));
        assert_eq!(pages.took(ids.iter().map(String::as_str)), ids.len());
        assert_eq!(pages.next(), Some(SessionsPage::after(ids.last().cloned())));
        // A daemon older than pages gives the first ones again: nothing new, and the end.
        let again = ["s9999", "s0000", "s0001"];
        assert_eq!(
            pages.took(again),
            1,
            "the ones before the first given again are new"
        );
        assert_eq!(pages.next(), None);
        // A short page is the last.
        let mut pages = Pages::default();
        assert_eq!(pages.took(["a", "b"]), 2);
        assert_eq!(pages.next(), None);
    }

    #[test]
    fn sessions_are_counted_by_status_and_an_older_daemons_counts_still_read() {
        use SessionStatus::*;
        let counts = SessionCounts::of([
            Running,
            WaitingForHuman,
            Idle,
            Queued,
            Queued,
            Done,
            Done,
            Done,
            Failed,
            Interrupted,
        ]);
        assert_eq!(
            counts,
            SessionCounts {
                total: 10,
                active: 5,
                running: 1,
                idle: 1,
                queued: 2,
                waiting_for_human: 1,
                done: 3,
                failed: 1,
                interrupted: 1,
                run_elsewhere: 0,
            }
        );
        // A daemon before the finished ones were counted sent only the first five.
        let older: SessionCounts =
            serde_json::from_str(r#"{"total":4,"active":1,"running":1,"idle":0,"queued":0}"#)
                .unwrap();
        assert_eq!((older.total, older.done, older.failed), (4, 0, 0));
    }

    #[test]
    fn a_reply_holds_one_page_and_a_longer_listing_is_refused_never_cut() {
        let size = SessionsPage::SIZE as usize;
        // A page within a reply's most is read as asked, and answered whatever it holds.
        let page = SessionsPage::after(Some("a".into()));
        assert_eq!(page.asked().unwrap(), page);
        assert!(page.answered(size).is_ok());
        // Without a limit: one past the most is read, which tells a listing too long for one.
        for last in [false, true] {
            let whole = SessionsPage {
                last,
                ..SessionsPage::ALL
            };
            let asked = whole.asked().unwrap();
            assert_eq!(asked.limit, Some(SessionsPage::SIZE + 1));
            assert_eq!(asked.last, last);
            assert!(whole.answered(size).is_ok());
            let refused = whole.answered(size + 1).unwrap_err();
            assert!(refused.contains("a page at a time"), "{refused}");
        }
        // A larger page is refused before anything is read.
        let refused = SessionsPage::newest(SessionsPage::SIZE + 1)
            .asked()
            .unwrap_err();
        assert!(
            refused.contains("at most 256 sessions, not 257"),
            "{refused}"
        );
    }

    #[test]
    fn a_page_is_the_first_or_the_last_of_what_sorts_between_its_ends() {
        let ids = || vec!["a", "b", "c", "d", "e"];
        let page = |after: Option<&str>, limit: Option<u32>, last: bool| SessionsPage {
            after: after.map(str::to_owned),
            limit,
            last,
            ..SessionsPage::ALL
        };
        let of = |p: SessionsPage| p.of(ids(), |id| id);
        assert_eq!(of(SessionsPage::ALL), ids());
        assert_eq!(of(page(None, Some(2), false)), ["a", "b"]);
        assert_eq!(of(SessionsPage::newest(2)), ["d", "e"]);
        assert_eq!(of(page(Some("b"), Some(2), false)), ["c", "d"]);
        assert_eq!(of(page(Some("b"), Some(2), true)), ["d", "e"]);
        assert_eq!(of(page(Some("b"), None, true)), ["c", "d", "e"]);
        assert_eq!(of(SessionsPage::newest(9)), ids());
        assert!(of(page(Some("e"), Some(2), true)).is_empty());
        // `before` ends it where `after` starts it; with both, what lies between.
        let before = |before: &str, after: Option<&str>| SessionsPage {
            before: Some(before.to_owned()),
            after: after.map(str::to_owned),
            ..SessionsPage::newest(2)
        };
        assert_eq!(of(before("d", None)), ["b", "c"]);
        assert_eq!(of(before("d", Some("b"))), ["c"]);
        assert_eq!(of(before("b", None)), ["a"]);
        assert!(of(before("a", None)).is_empty());
        assert!(of(before("c", Some("c"))).is_empty());
        assert!(of(before("b", Some("d"))).is_empty());
        assert_eq!(of(before("bb", None)), ["a", "b"], "an id no longer listed");
        // The status is the caller's to filter by; the page says which it admits.
        let failed = SessionsPage {
            status: Some(SessionStatus::Failed),
            ..SessionsPage::ALL
        };
        assert!(failed.admits_status(SessionStatus::Failed));
        assert!(!failed.admits_status(SessionStatus::Done));
        assert!(SessionsPage::ALL.admits_status(SessionStatus::Done));
        assert_eq!(
            SessionsPage {
                before: Some("d".into()),
                ..failed.clone()
            }
            .unlimited(),
            SessionsPage {
                before: Some("d".into()),
                ..failed
            }
        );
        assert_eq!(SessionsPage::newest(3).unlimited(), SessionsPage::ALL);
    }

    #[test]
    fn a_listing_cuts_long_texts_and_keeps_short_ones() {
        let long = "é".repeat(SessionSummary::LISTED_TEXT_BYTES);
        let summary = SessionSummary {
            id: "s1".into(),
            parent: None,
            project: "/p".into(),
            task: long.clone(),
            backend: Backend::Native,
            provider: "mock".into(),
            model: "m".into(),
            status: SessionStatus::Idle,
            reason: Some(long.clone()),
            autonomy: AutonomyLevel::Medium,
            created: "2026-12-05T07:00:00Z".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            final_text: Some(long.clone()),
            result: Some(SubmittedResult {
                summary: "done".into(),
                fields: serde_json::Value::Null,
            }),
            worktree: None,
            skills: Vec::new(),
            usage: None,
            run_by: None,
            network: None,
        };
        let listed = summary.clone().listed();
        let cut = [
            &listed.task,
            listed.final_text.as_ref().unwrap(),
            listed.reason.as_ref().unwrap(),
        ];
        for text in cut {
            assert!(text.ends_with('…'), "{text}");
            assert!(
                text.len() <= SessionSummary::LISTED_TEXT_BYTES + '…'.len_utf8(),
                "{}",
                text.len()
            );
            assert!(long.starts_with(text.trim_end_matches('…')));
        }
        assert_eq!(listed.result, summary.result, "a short text is kept whole");
        assert_eq!(
            SessionSummary {
                task: "t".into(),
                ..listed.clone()
            }
            .listed()
            .task,
            "t"
        );
    }

    #[test]
    fn which_events_a_stream_resumes_at_and_which_a_read_of_the_log_covers() {
        let mut envelope = Envelope {
            seq: 7,
            session_id: "s1".into(),
            ts: "2026-12-01T10:00:00.000Z".into(),
            event: crate::events::AppEvent::TurnStarted { turn: 1 },
            member: None,
            record_end: None,
        };
        assert_eq!(envelope.resume_seq(), Some(7));
        assert_eq!(
            StreamItem::Event(Arc::new(envelope.clone())).resume_seq(),
            Some(7)
        );
        let read = |end, seq| RecordRead { end, seq };
        assert!(
            !envelope.in_record(read(u64::MAX, None)),
            "not relayed, and no record read was numbered"
        );
        assert!(envelope.in_record(read(0, Some(7))) && envelope.in_record(read(0, Some(8))));
        assert!(
            !envelope.in_record(read(u64::MAX, Some(6))),
            "numbered after what was read"
        );
        envelope.record_end = Some(120);
        assert!(envelope.in_record(read(120, None)) && envelope.in_record(read(121, None)));
        assert!(
            !envelope.in_record(read(119, Some(u64::MAX))),
            "its line ends after what was read (a relayed event's seq is not its record's)"
        );
        envelope.member = Some("beta".into());
        assert_eq!(envelope.resume_seq(), None, "beta's seq is not ours");
        assert_eq!(StreamItem::Event(Arc::new(envelope)).resume_seq(), None);
        assert_eq!(StreamItem::Lagged { next_seq: 9 }.resume_seq(), Some(9));
    }

    #[test]
    fn a_history_holds_its_session_whole_when_it_begins_with_its_first_start() {
        let started = |resumed| crate::events::AppEvent::SessionStarted {
            session_id: "s1".into(),
            task: "t".into(),
            model: "m".into(),
            provider: "p".into(),
            project_root: "/p".into(),
            resumed,
        };
        let mut envelope = Envelope {
            seq: 7,
            session_id: "s1".into(),
            ts: "2026-12-01T10:00:00.000Z".into(),
            event: started(false),
            member: None,
            record_end: None,
        };
        assert!(envelope.begins_session());
        envelope.event = started(true);
        assert!(
            !envelope.begins_session(),
            "a resumed run: earlier runs may be unnumbered"
        );
        envelope.event = started(false);
        envelope.record_end = Some(100);
        assert!(
            !envelope.begins_session(),
            "relayed: another process records it"
        );
        envelope.record_end = None;
        envelope.event = crate::events::AppEvent::TurnStarted { turn: 1 };
        assert!(!envelope.begins_session(), "its start is no longer held");
    }

    #[test]
    fn error_codes_have_pinned_wire_names() {
        let codes = [
            (HostErrorCode::UnknownSession, "unknown_session"),
            (HostErrorCode::UnknownApproval, "unknown_approval"),
            (HostErrorCode::AlreadyAnswered, "already_answered"),
            (HostErrorCode::SessionFinished, "session_finished"),
            (HostErrorCode::InvalidRequest, "invalid_request"),
            (HostErrorCode::ShuttingDown, "shutting_down"),
            (HostErrorCode::Unavailable, "unavailable"),
            (HostErrorCode::Forbidden, "forbidden"),
            (HostErrorCode::Busy, "busy"),
            (HostErrorCode::Internal, "internal"),
        ];
        assert_eq!(codes.map(|(code, _)| code), HostErrorCode::ALL);
        for (code, name) in codes {
            assert_eq!(serde_json::to_value(code).unwrap(), name);
            assert_eq!(code.name(), name);
        }
        // A daemon of before the ceiling reports none: `full`.
        let old: Settings = serde_json::from_str(
            r#"{"default_autonomy":"medium","default_backend":{"kind":"native"},"max_running":2}"#,
        )
        .unwrap();
        assert_eq!(old.max_autonomy, AutonomyLevel::Full);
    }

    #[test]
    fn envelope_and_items_round_trip() {
        let env = Envelope {
            member: None,
            record_end: None,
            seq: 7,
            session_id: "s1".into(),
            ts: "2026-12-01T10:00:00.000Z".into(),
            event: AppEvent::TurnStarted { turn: 1 },
        };
        let line = serde_json::to_string(&StreamItem::Event(Arc::new(env.clone()))).unwrap();
        assert_eq!(
            line,
            r#"{"kind":"event","seq":7,"session_id":"s1","ts":"2026-12-01T10:00:00.000Z","event":{"type":"turn_started","turn":1}}"#
        );
        let back: StreamItem = serde_json::from_str(&line).unwrap();
        assert_eq!(back, StreamItem::Event(Arc::new(env)));
        let lagged = serde_json::to_string(&StreamItem::Lagged { next_seq: 3 }).unwrap();
        assert_eq!(lagged, r#"{"kind":"lagged","next_seq":3}"#);
    }

    #[test]
    fn session_status_and_isolation_wire_names_are_pinned() {
        let statuses = [
            (SessionStatus::Queued, "queued", false),
            (SessionStatus::Running, "running", false),
            (SessionStatus::WaitingForHuman, "waiting_for_human", false),
            (SessionStatus::Idle, "idle", false),
            (SessionStatus::Done, "done", true),
            (SessionStatus::Failed, "failed", true),
            (SessionStatus::Interrupted, "interrupted", true),
        ];
        assert_eq!(statuses.map(|(s, _, _)| s), SessionStatus::ALL);
        for (status, name, finished) in statuses {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(name.parse::<SessionStatus>(), Ok(status));
            assert_eq!(status.is_finished(), finished, "{name}");
        }
        let isolations = [
            (Isolation::Worktree, "worktree"),
            (Isolation::Shared, "shared"),
        ];
        assert_eq!(isolations.map(|(i, _)| i), Isolation::ALL);
        for (isolation, name) in isolations {
            assert_eq!(
                serde_json::to_string(&isolation).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(Isolation::from_name(name), Some(isolation));
        }
        assert_eq!(Isolation::from_name("vm"), None);
    }

    #[test]
    fn wire_names() {
        let intent = SessionIntent {
            session_id: "s".into(),
            msg: ControlMsg::Approve { id: 3 },
        };
        assert_eq!(
            serde_json::to_string(&intent).unwrap(),
            r#"{"session_id":"s","action":"approve","id":3}"#
        );
        let b: Backend = serde_json::from_str(r#"{"kind":"agent","name":"codex"}"#).unwrap();
        assert_eq!(b, Backend::named("codex"));
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"kind":"agent","name":"codex"}"#
        );
        assert_eq!(Backend::named("native"), Backend::Native);
        assert_eq!(Backend::Native.name(), "native");
        assert_eq!(Backend::named("kimi").name(), "kimi");
        assert_eq!(
            Backend::named("kimi"),
            Backend::Agent {
                name: "kimi".into(),
                command: Vec::new(),
            }
        );
        let acp = r#"{"kind":"agent","name":"acp","command":["agent","--acp"]}"#;
        let b: Backend = serde_json::from_str(acp).unwrap();
        assert_eq!(b.command(), ["agent", "--acp"]);
        assert_eq!(serde_json::to_string(&b).unwrap(), acp);
        let e = HostError::new(HostErrorCode::UnknownSession, "no session x");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":"unknown_session","message":"no session x"}"#
        );
    }
}

//! The durable record of a session: one directory per session under
//! `$INTENDANT_HOME/logs/<session-id>/`, from which any session can be read back or resumed.
//!
//! The records are the controller's alone: the runtime of a session writes only its artifacts
//! directory `$INTENDANT_HOME/artifacts/<session-id>/` (its `INTENDANT_LOG_DIR` and its one
//! sandbox write root in the state root). Every write here goes through a [`RecordDir`]
//! descriptor (create-new, no-follow, replace by rename), and an append to a file that something
//! else replaced or removed is reported as [`SessionLogError::Replaced`].
//!
//! # Layout
//! - `session_meta.json`: [`SessionMeta`], rewritten atomically ([`RecordDir::rewrite`]); a
//!   turn's start is written with the turn's usage or before its first file (see `meta::Fold`).
//! - `session.jsonl`: lifecycle events from the bus's lossless lane, one [`SessionLogRecord`]
//!   per line: `{"ts": "<RFC 3339 UTC>", "event": "<AppEvent name>", ...the event's fields}`
//!   (plus the daemon-wide `"seq"` for a session the daemon runs).
//! - `conversation.jsonl`: one [`ConversationItem`] per line, enough to rebuild the request.
//! - `turns/turn_NNN_<name>`: per-turn artifacts, all written here from the events:
//!   `model.txt` and `reasoning.txt` (from `model_response`), `batch_input.json` (`tool_batch`)
//!   and `batch_result.json` (`tool_batch_result`). `NNN` counts across the whole session: a
//!   resumed run's turn 1 gets the next free number. Written in place ([`RecordDir::write_new`]).
//! - The runtime's own artifacts (exec logs, screenshots, question files) are not here: they
//!   are in `$INTENDANT_HOME/artifacts/<session-id>/` ([`SessionLog::artifacts_dir`]).
//!
//! Every JSON Lines write is a single `write` of a whole line on an unbuffered append-mode file,
//! so a process killed at any point loses at most the line being written, and readers skip such
//! a torn last line (see [`jsonl`]). There is no fsync per event: the record survives a crash of
//! the process, not a power cut.
//!
//! Module files: `jsonl` (line I/O), `meta` (the metadata record),
//! `read` (listing and readers), `numbered` (a daemon session's numbered records, read from
//! either end without holding the log), `follow` (the records another process appends, read as
//! they are written), `prune` (removing the records of sessions that ended long
//! ago).

mod follow;
pub mod jsonl;
mod meta;
mod numbered;
pub mod prune;
mod read;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_protocol::events::{AppEvent, RecordedStatus, SessionLogRecord};
use intendant_providers::ConversationItem;
use thiserror::Error;
use tokio::sync::mpsc;

pub use follow::{
    Appended, LogTail, Logged, RECORD_READ_BYTES, each_record, has_started, unsent_follow_ups,
};
pub use intendant_protocol::utc::{age_seconds, human_age};
pub use jsonl::{JsonlRead, SkippedLine, TornTail, read_jsonl};
use meta::Fold;
pub use meta::{SessionMeta, process_running};
pub use numbered::{NumberedRecords, last_seq, rev_records};
pub use read::{
    EventRecord, Listing, Unreadable, list_sessions, read_conversation, read_events,
    read_events_leniently, read_listing, read_meta, resolve_session_id,
};

use crate::cancel::SessionCancel;
use crate::record_dir::{FileId, RecordDir};
use intendant_protocol::utc::UtcTime;

/// Directory under `$INTENDANT_HOME` holding one directory per session.
pub const LOGS_DIR: &str = "logs";
/// Directory under `$INTENDANT_HOME` holding each session's runtime artifacts directory.
pub const ARTIFACTS_DIR: &str = "artifacts";
/// Session metadata file name.
pub const META_FILE: &str = "session_meta.json";
/// Lifecycle event log file name.
pub const EVENTS_FILE: &str = "session.jsonl";
/// Conversation log file name.
pub const CONVERSATION_FILE: &str = "conversation.jsonl";
/// Per-turn artifact directory name.
pub const TURNS_DIR: &str = "turns";

/// Why the session log could not be written or read.
#[derive(Debug, Error)]
pub enum SessionLogError {
    /// A file system operation failed.
    #[error("session log: {}", named(path, source))]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A record could not be serialized.
    #[error("session log: cannot encode a record for {path}: {message}")]
    Encode {
        /// The file.
        path: PathBuf,
        /// Cause.
        message: String,
    },
    /// A line other than the last one is not a valid record.
    #[error("session log: {path} line {line} is corrupt: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Parse error.
        message: String,
    },
    /// `session_meta.json` is missing or invalid.
    #[error("session log: invalid session metadata {path}: {message}")]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Neither `INTENDANT_HOME` nor `HOME` is set.
    #[error("cannot locate the Intendant home: set INTENDANT_HOME (or HOME for ~/.intendant)")]
    NoHome,
    /// No session has this id.
    #[error("no session {id} in {logs_dir} (list them with `intendant sessions`)")]
    UnknownSession {
        /// The id asked for.
        id: String,
        /// Where sessions were looked for.
        logs_dir: PathBuf,
    },
    /// The id prefix matches more than one session.
    #[error("session id {id} is ambiguous: it matches {}", matches.join(", "))]
    AmbiguousSession {
        /// The prefix asked for.
        id: String,
        /// The sessions it matches.
        matches: Vec<String>,
    },
    /// A session id with characters a session id never has.
    #[error("invalid session id {id:?}: expected letters, digits and '-' only")]
    InvalidSessionId {
        /// The id given.
        id: String,
    },
    /// A turn file name that is not a plain file name.
    #[error("invalid turn file name {name:?}: expected letters, digits, '.', '_' and '-' only")]
    InvalidTurnFileName {
        /// The name given.
        name: String,
    },
    /// A record file was removed or replaced by something other than this session's writer
    /// (the lines since went to the original file, never to the replacement).
    #[error(
        "session log: {path} was removed or replaced by another process; the record at that \
         path is not this session's (refusing to write through it)"
    )]
    Replaced {
        /// The file.
        path: PathBuf,
    },
    /// The session is still being written by a live process.
    #[error("session {id} is still running (pid {pid}); stop it before resuming")]
    StillRunning {
        /// The session.
        id: String,
        /// The process writing it.
        pid: u32,
    },
    /// Another writer holds the session's record: a resume of it under way elsewhere.
    #[error(
        "session {id} is being resumed by another process or client; wait for that run, or \
         stop it, before resuming"
    )]
    Claimed {
        /// The session.
        id: String,
    },
    /// No session of this project to continue.
    #[error("no earlier session for project {project_root} (start one without --continue)")]
    NoSessionForProject {
        /// The project asked for.
        project_root: PathBuf,
    },
}

/// `source` with `path` before it, unless it names the path already (the record directory's
/// errors do).
fn named(path: &Path, source: &std::io::Error) -> String {
    let text = source.to_string();
    let shown = path.display().to_string();
    if text.starts_with(&shown) {
        text
    } else {
        format!("{shown}: {text}")
    }
}

impl SessionLogError {
    fn io(path: &Path, source: std::io::Error) -> SessionLogError {
        SessionLogError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// What went wrong, without the path: the system's words for an I/O error.
    fn cause(&self) -> String {
        match self {
            SessionLogError::Io { path, source } => {
                // The record directory's errors name the path already.
                let text = source.to_string();
                let named = format!("{}: ", path.display());
                match text.strip_prefix(&named) {
                    Some(rest) => rest.to_owned(),
                    None => text,
                }
            }
            SessionLogError::Replaced { .. } => {
                "a record file was removed or replaced by another process".to_owned()
            }
            other => other.to_string(),
        }
    }

    /// The same error again (one kept for the log's reader, one for the caller): an I/O error
    /// keeps its OS error number, or else its kind and text.
    fn duplicate(&self) -> SessionLogError {
        use SessionLogError as E;
        match self {
            E::Io { path, source } => E::Io {
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            E::Encode { path, message } => E::Encode {
                path: path.clone(),
                message: message.clone(),
            },
            E::Corrupt {
                path,
                line,
                message,
            } => E::Corrupt {
                path: path.clone(),
                line: *line,
                message: message.clone(),
            },
            E::Meta { path, message } => E::Meta {
                path: path.clone(),
                message: message.clone(),
            },
            E::NoHome => E::NoHome,
            E::UnknownSession { id, logs_dir } => E::UnknownSession {
                id: id.clone(),
                logs_dir: logs_dir.clone(),
            },
            E::AmbiguousSession { id, matches } => E::AmbiguousSession {
                id: id.clone(),
                matches: matches.clone(),
            },
            E::InvalidSessionId { id } => E::InvalidSessionId { id: id.clone() },
            E::InvalidTurnFileName { name } => E::InvalidTurnFileName { name: name.clone() },
            E::Replaced { path } => E::Replaced { path: path.clone() },
            E::StillRunning { id, pid } => E::StillRunning {
                id: id.clone(),
                pid: *pid,
            },
            E::Claimed { id } => E::Claimed { id: id.clone() },
            E::NoSessionForProject { project_root } => E::NoSessionForProject {
                project_root: project_root.clone(),
            },
        }
    }
}

/// `$INTENDANT_HOME`, else `$HOME/.intendant`.
pub fn intendant_home() -> Result<PathBuf, SessionLogError> {
    let from = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = match from("INTENDANT_HOME") {
        Some(h) => h,
        None => from("HOME")
            .ok_or(SessionLogError::NoHome)?
            .join(".intendant"),
    };
    if home.is_absolute() {
        Ok(home)
    } else {
        let cwd = std::env::current_dir().map_err(|source| SessionLogError::io(&home, source))?;
        Ok(cwd.join(home))
    }
}

/// `<home>/logs`.
pub fn logs_dir(home: &Path) -> PathBuf {
    home.join(LOGS_DIR)
}

/// Marks `<home>/logs` changed, once a resumed session's record says who writes it now. A
/// resume adds no name there, and a daemon serving this state root looks only at what changed
/// under `logs/` (its `supervisor::records`): on a change it reads again the records written
/// since its last look, so a session it lists as ended and another process resumed is listed
/// running, then as it ends. Best effort: a daemon not told lists it as it was until its next
/// start.
fn mark_logs_changed(home: &Path) {
    let _ =
        File::open(logs_dir(home)).and_then(|dir| dir.set_modified(std::time::SystemTime::now()));
}

/// Takes the writer's lock of session `id`'s `session.jsonl`, opened as `events`: an exclusive
/// `flock` on this open file, held while the writer keeps it open and let go by the kernel
/// when it closes it or dies. One writer per record, whatever process it is in: two resumes of
/// one session started at the same moment would otherwise both pass the check of its record's
/// writer and append two runs to one log. A lock held for a moment only (a child forked
/// between its start and its `exec` holds a copy of every descriptor) is waited for, at most
/// [`CLAIM_WAIT`].
fn claim_writer(events: &File, path: &Path, id: &str) -> Result<(), SessionLogError> {
    use rustix::fs::{FlockOperation, flock};
    let deadline = std::time::Instant::now() + CLAIM_WAIT;
    loop {
        match flock(events, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(SessionLogError::Claimed { id: id.to_owned() });
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(SessionLogError::io(path, e.into())),
        }
    }
}

/// The writer's lock of the session recorded in `dir`, taken on its `session.jsonl` opened for
/// reading (a prune holds it while it removes the session); `None` when it has no log.
fn hold_record(dir: &Path) -> Result<Option<File>, SessionLogError> {
    match locked_record(dir, |records| records.open_read(EVENTS_FILE)) {
        Ok((file, _)) => Ok(Some(file)),
        Err(SessionLogError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `session.jsonl` of the session directory `dir` (by descriptor, a link refused) as `open`
/// opens it, its writer's lock taken ([`claim_writer`]); with its path.
fn locked_record(
    dir: &Path,
    open: impl FnOnce(&RecordDir) -> std::io::Result<File>,
) -> Result<(File, PathBuf), SessionLogError> {
    let records = RecordDir::open(dir).map_err(|source| SessionLogError::io(dir, source))?;
    let path = records.join(EVENTS_FILE);
    let file = open(&records).map_err(|source| SessionLogError::io(&path, source))?;
    let id = dir
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    claim_writer(&file, &path, &id)?;
    Ok((file, path))
}

/// How long [`claim_writer`] waits for a lock held by another writer before refusing.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// `<home>/artifacts`.
pub fn artifacts_root(home: &Path) -> PathBuf {
    home.join(ARTIFACTS_DIR)
}

/// An open session directory. Cheap to clone; clones write to the same files.
#[derive(Clone)]
pub struct SessionLog {
    inner: Arc<Inner>,
}

struct Inner {
    dir: RecordDir,
    turns: RecordDir,
    artifacts: PathBuf,
    id: String,
    /// Turns recorded before this process opened the session; turn files of this run are
    /// numbered after them so a resume never overwrites an earlier turn's files.
    turn_base: u32,
    /// Items in `conversation.jsonl` (what a conversation rewind cuts by).
    conversation_items: std::sync::atomic::AtomicU64,
    meta: Mutex<Meta>,
    events: Mutex<OpenRecord>,
    conversation: Mutex<OpenRecord>,
    write_error: Mutex<WriteError>,
}

/// Who is told of the first failed write besides the session (the daemon's operator).
type Tell = Box<dyn Fn(&SessionLogError) + Send + Sync>;

/// The first write that failed, the session to stop when one does, and who else to tell.
#[derive(Default)]
struct WriteError {
    first: Option<SessionLogError>,
    stop: Option<SessionCancel>,
    tell: Option<Tell>,
}

impl WriteError {
    /// Tells whoever is told (once both a failure and they are known).
    fn tell_if_failed(&self) {
        if let (Some(e), Some(tell)) = (&self.first, &self.tell) {
            tell(e);
        }
    }

    /// Stops the session (once both a failure and the session are known): nothing it does
    /// afterwards could be recorded.
    fn stop_if_failed(&self) {
        if let (Some(e), Some(cancel)) = (&self.first, &self.stop) {
            // The cause first: a terminal shows the reason's start, clipped to its width.
            cancel.stop_because(format!(
                "the session was stopped: its log could not be written ({}); nothing runs \
                 unrecorded: free space (or mend the state root), then resume it [{e}]",
                e.cause()
            ));
        }
    }
}

/// The metadata, and whether it holds a change `session_meta.json` does not show yet
/// ([`Fold::Soon`]).
struct Meta {
    meta: SessionMeta,
    unwritten: bool,
}

/// An open JSON Lines record and which file it was opened on, so that each append checks the
/// name still is that file with one `stat` of the name.
struct OpenRecord {
    file: File,
    id: FileId,
    /// A write failed part-way and cutting its part off failed too: the next append cuts it
    /// first, so the torn bytes never end up mid-file.
    torn: bool,
}

impl OpenRecord {
    fn new(file: File, path: &Path) -> Result<OpenRecord, SessionLogError> {
        let id = FileId::of(&file).map_err(|source| SessionLogError::io(path, source))?;
        Ok(OpenRecord {
            file,
            id,
            torn: false,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the guarded value whole; a panic elsewhere cannot tear it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionLog {
    /// Creates a new session directory under `<home>/logs/` and writes its metadata. The id,
    /// times, status and pid of `meta` are set here.
    pub fn create(home: &Path, mut meta: SessionMeta) -> Result<SessionLog, SessionLogError> {
        let logs = RecordDir::create_all(home)
            .and_then(|h| h.ensure_dir(LOGS_DIR))
            .map_err(|source| SessionLogError::io(&logs_dir(home), source))?;
        let now = UtcTime::now();
        let mut attempt = 0;
        let (id, dir) = loop {
            let id = format!("{}-{}", now.compact(), id_suffix(now.millis)?);
            match logs.create_dir(&id) {
                Ok(dir) => break (id, dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(source) => return Err(SessionLogError::io(&logs.join(&id), source)),
            }
        };
        let made = (|| {
            let io = |name: &str| {
                let path = dir.join(name);
                move |source| SessionLogError::io(&path, source)
            };
            let events = dir.create_append(EVENTS_FILE).map_err(io(EVENTS_FILE))?;
            claim_writer(&events, &dir.join(EVENTS_FILE), &id)?;
            let conversation = dir
                .create_append(CONVERSATION_FILE)
                .map_err(io(CONVERSATION_FILE))?;
            let turns = dir.create_dir(TURNS_DIR).map_err(io(TURNS_DIR))?;
            meta.id.clone_from(&id);
            meta.created = now.rfc3339();
            meta.status = RecordedStatus::Running;
            meta.reason = None;
            meta.claim_writer();
            SessionLog::assemble(home, dir, turns, (events, conversation, 0), meta)
        })();
        if made.is_err() {
            // Nothing was recorded: a half-made session is not kept (a start refused for want
            // of descriptors left an empty directory each time).
            let _ = std::fs::remove_dir_all(logs.join(&id));
            let _ = std::fs::remove_dir(artifacts_root(home).join(&id));
        }
        made
    }

    /// Opens an existing session directory for appends (used by resume): torn tails are cut so
    /// new lines start on a line boundary; the metadata is marked running again.
    /// A record that is a link, or not a regular file, is refused.
    pub(crate) fn reopen(
        home: &Path,
        dir: &Path,
        mut meta: SessionMeta,
    ) -> Result<SessionLog, SessionLogError> {
        let dir = RecordDir::open(dir).map_err(|source| SessionLogError::io(dir, source))?;
        let open_jsonl = |name: &str| {
            match dir.open_append(name) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => dir.create_append(name),
                other => other,
            }
            .map_err(|source| SessionLogError::io(&dir.join(name), source))
        };
        let events = open_jsonl(EVENTS_FILE)?;
        // Claimed before anything is cut or written: a second writer (a resume of it at the
        // same moment, here or in another process) is refused, not run beside this one.
        claim_writer(&events, &dir.join(EVENTS_FILE), &meta.id)?;
        let conversation = open_jsonl(CONVERSATION_FILE)?;
        for (file, name) in [(&events, EVENTS_FILE), (&conversation, CONVERSATION_FILE)] {
            jsonl::repair_tail(file, &dir.join(name))?;
        }
        let turns = dir
            .ensure_dir(TURNS_DIR)
            .map_err(|source| SessionLogError::io(&dir.join(TURNS_DIR), source))?;
        meta.status = RecordedStatus::Running;
        meta.reason = None;
        meta.claim_writer();
        meta.resumes += 1;
        let items = jsonl::count_lines(&conversation)
            .map_err(|source| SessionLogError::io(&dir.join(CONVERSATION_FILE), source))?;
        let log = SessionLog::assemble(home, dir, turns, (events, conversation, items), meta)?;
        mark_logs_changed(home);
        Ok(log)
    }

    /// The open records plus the session's artifacts directory (created when missing), with
    /// the metadata written.
    fn assemble(
        home: &Path,
        dir: RecordDir,
        turns: RecordDir,
        (events, conversation, conversation_items): (File, File, u64),
        meta: SessionMeta,
    ) -> Result<SessionLog, SessionLogError> {
        let artifacts_root = artifacts_root(home);
        let artifacts = RecordDir::create_all(&artifacts_root)
            .and_then(|root| root.ensure_dir(&meta.id))
            .map_err(|source| SessionLogError::io(&artifacts_root.join(&meta.id), source))?
            .path()
            .to_path_buf();
        let events = OpenRecord::new(events, &dir.join(EVENTS_FILE))?;
        let conversation = OpenRecord::new(conversation, &dir.join(CONVERSATION_FILE))?;
        let log = SessionLog {
            inner: Arc::new(Inner {
                id: meta.id.clone(),
                turn_base: meta.turns,
                conversation_items: std::sync::atomic::AtomicU64::new(conversation_items),
                dir,
                turns,
                artifacts,
                meta: Mutex::new(Meta {
                    meta,
                    unwritten: false,
                }),
                events: Mutex::new(events),
                conversation: Mutex::new(conversation),
                write_error: Mutex::new(WriteError::default()),
            }),
        };
        log.update_meta(|_| {})?;
        Ok(log)
    }

    /// The session directory: the controller's records, which no runtime may write.
    pub fn dir(&self) -> &Path {
        self.inner.dir.path()
    }

    /// The session's artifacts directory `$INTENDANT_HOME/artifacts/<id>/`: the runtime's
    /// `INTENDANT_LOG_DIR` and the only sandbox write root inside the state root.
    pub fn artifacts_dir(&self) -> &Path {
        &self.inner.artifacts
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// A copy of the current metadata.
    pub fn meta(&self) -> SessionMeta {
        lock(&self.inner.meta).meta.clone()
    }

    /// Changes the metadata and rewrites `session_meta.json` atomically.
    pub fn update_meta(&self, f: impl FnOnce(&mut SessionMeta)) -> Result<(), SessionLogError> {
        let mut meta = lock(&self.inner.meta);
        f(&mut meta.meta);
        self.write_meta(&mut meta)
    }

    /// Rewrites `session_meta.json` when it does not show a change yet.
    fn write_pending_meta(&self) -> Result<(), SessionLogError> {
        let mut meta = lock(&self.inner.meta);
        if meta.unwritten {
            self.write_meta(&mut meta)?;
        }
        Ok(())
    }

    fn write_meta(&self, meta: &mut Meta) -> Result<(), SessionLogError> {
        meta.meta.updated = UtcTime::now().rfc3339();
        write_meta_atomic(&self.inner.dir, &meta.meta)?;
        meta.unwritten = false;
        Ok(())
    }

    /// Appends one conversation item to `conversation.jsonl`.
    pub fn append_conversation(&self, item: &ConversationItem) -> Result<(), SessionLogError> {
        self.append(&self.inner.conversation, CONVERSATION_FILE, item)?;
        self.inner
            .conversation_items
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// How many items `conversation.jsonl` holds (resumes included): where a conversation
    /// rewind to the turn starting now would cut.
    pub fn conversation_items(&self) -> u64 {
        self.inner
            .conversation_items
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The session-wide number of this run's turn `turn` (a resumed run's turn 1 follows the
    /// turns recorded before it), as turn files and checkpoints number it.
    pub fn session_turn(&self, turn: u32) -> u32 {
        self.inner.turn_base + turn
    }

    /// Appends one line to the open record `name`, then checks that the name still is that
    /// file: a record removed or replaced behind the writer's back is an error, not a success.
    fn append(
        &self,
        record: &Mutex<OpenRecord>,
        name: &str,
        value: &impl serde::Serialize,
    ) -> Result<(), SessionLogError> {
        let path = self.inner.dir.join(name);
        let record = &mut *lock(record);
        let appended = Self::append_whole(record, &path, value).and_then(|()| {
            match self.inner.dir.still_names(name, record.id) {
                Ok(true) => Ok(()),
                Ok(false) => Err(SessionLogError::Replaced { path: path.clone() }),
                Err(source) => Err(SessionLogError::io(&path, source)),
            }
        });
        // Kept here as well: callers that treat a record write as best effort must not lose it.
        if let Err(e) = &appended {
            self.keep_write_error(e.duplicate());
        }
        appended
    }

    /// Appends one line to `record` so that the file ends at a line boundary whatever happens:
    /// a write that fails part-way (a full disk) has its part cut off again, now or, if even
    /// that fails, before the next line.
    fn append_whole(
        record: &mut OpenRecord,
        path: &Path,
        value: &impl serde::Serialize,
    ) -> Result<(), SessionLogError> {
        if record.torn {
            jsonl::repair_tail(&record.file, path)?;
            record.torn = false;
        }
        let appended = jsonl::append_line(&mut record.file, path, value);
        if appended.is_err() {
            record.torn = jsonl::repair_tail(&record.file, path).is_err();
        }
        appended
    }

    /// Writes `turns/turn_NNN_<name>` (replacing an earlier file of that name). `turn` counts
    /// from 1 in this run; `NNN` counts across the whole session, resumes included. A turn's
    /// start not yet in `session_meta.json` is written there first, so that the file's turn
    /// count always covers the turns that have files.
    ///
    /// The file is new in the usual case and is then written in place, not through a temporary
    /// file (see [`RecordDir::write_new`]): a reader may see it short while it is written, and
    /// a crash can leave it so; `session.jsonl` holds the same content whole.
    pub fn write_turn_file(
        &self,
        turn: u32,
        name: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, SessionLogError> {
        let valid = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(SessionLogError::InvalidTurnFileName {
                name: name.to_owned(),
            });
        }
        self.write_pending_meta()?;
        let file = format!("turn_{:03}_{name}", self.inner.turn_base + turn);
        let path = self.inner.turns.join(&file);
        self.inner
            .turns
            .write_new(&file, bytes)
            .map_err(|source| SessionLogError::io(&path, source))?;
        Ok(path)
    }

    /// Appends one event to `session.jsonl` and folds it into the metadata (turns, usage,
    /// status). Deltas are not lifecycle events and are ignored.
    pub fn record_event(&self, event: &AppEvent) -> Result<(), SessionLogError> {
        self.record(event, UtcTime::now().rfc3339(), None)
    }

    /// [`SessionLog::record_event`] for an event the daemon published as `seq` at `ts`: the
    /// record keeps both, so a replay from the log matches the live stream.
    pub fn record_published(
        &self,
        event: &AppEvent,
        seq: u64,
        ts: &str,
    ) -> Result<(), SessionLogError> {
        self.record(event, ts.to_owned(), Some(seq))
    }

    fn record(
        &self,
        event: &AppEvent,
        ts: String,
        seq: Option<u64>,
    ) -> Result<(), SessionLogError> {
        if !event.is_lifecycle() {
            return Ok(());
        }
        let record = SessionLogRecord {
            ts,
            seq,
            event: event.clone(),
        };
        // A replaced events file does not stop the other records of this event.
        let appended = match self.append(&self.inner.events, EVENTS_FILE, &record) {
            Err(e @ SessionLogError::Replaced { .. }) => Err(e),
            other => {
                other?;
                Ok(())
            }
        };
        self.write_event_turn_file(event)?;
        let mut meta = lock(&self.inner.meta);
        match meta.meta.absorb(event, self.inner.turn_base) {
            Fold::Unchanged => {}
            Fold::Soon => meta.unwritten = true,
            Fold::Now => self.write_meta(&mut meta)?,
            Fold::Settled if meta.unwritten => self.write_meta(&mut meta)?,
            Fold::Settled => {}
        }
        appended
    }

    /// The per-turn files derived from events: the model's visible text and reasoning, and the
    /// runtime input and result summary of the turn's batch. Nothing else writes them.
    fn write_event_turn_file(&self, event: &AppEvent) -> Result<(), SessionLogError> {
        match event {
            AppEvent::ModelResponse {
                turn,
                text,
                reasoning,
                ..
            } => {
                if !text.is_empty() {
                    self.write_turn_file(*turn, "model.txt", text.as_bytes())?;
                }
                if !reasoning.is_empty() {
                    self.write_turn_file(*turn, "reasoning.txt", reasoning.as_bytes())?;
                }
            }
            AppEvent::ToolBatch { turn, input } => {
                let bytes =
                    serde_json::to_vec_pretty(input).map_err(|e| SessionLogError::Encode {
                        path: self.inner.dir.join(TURNS_DIR),
                        message: e.to_string(),
                    })?;
                self.write_turn_file(*turn, "batch_input.json", &bytes)?;
            }
            AppEvent::ToolBatchResult { turn, output } => {
                self.write_turn_file(*turn, "batch_result.json", output.to_string().as_bytes())?;
            }
            AppEvent::SessionStarted { .. }
            | AppEvent::SessionEnded { .. }
            | AppEvent::TurnStarted { .. }
            | AppEvent::ModelResponseDelta { .. }
            | AppEvent::Refusal { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolCall { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::ApprovalRequired { .. }
            | AppEvent::ApprovalResolved { .. }
            | AppEvent::HumanQuestion { .. }
            | AppEvent::HumanAnswer { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Usage { .. }
            | AppEvent::RoundComplete { .. }
            | AppEvent::Done { .. }
            | AppEvent::Error { .. }
            | AppEvent::Warning { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::AutonomyChanged { .. }
            | AppEvent::Egress { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. }
            | AppEvent::ControlCommand(_) => {}
        }
        Ok(())
    }

    /// Writes every event arriving on `lane` (the bus's lossless session-log lane) until the lane
    /// closes or this session's `session_ended` has been written. Await the handle to know the
    /// record is complete. A write failure does not stop the writer (later events may still
    /// land); the first failure is kept for [`SessionLog::take_write_error`].
    pub fn spawn_event_writer(
        &self,
        mut lane: mpsc::UnboundedReceiver<AppEvent>,
    ) -> tokio::task::JoinHandle<()> {
        let log = self.clone();
        tokio::spawn(async move {
            while let Some(event) = lane.recv().await {
                if let Err(e) = log.record_event(&event) {
                    log.keep_write_error(e);
                }
                if let AppEvent::SessionEnded { session_id, .. } = &event
                    && session_id == log.id()
                {
                    break;
                }
            }
        })
    }

    /// The first error the event writer met, if any.
    pub fn take_write_error(&self) -> Option<SessionLogError> {
        lock(&self.inner.write_error).first.take()
    }

    /// Keeps `e` as the writer's first error (for [`SessionLog::take_write_error`]); the first
    /// one stops the session given to [`SessionLog::stop_on_write_error`] and is told to
    /// [`SessionLog::tell_on_write_error`]'s listener.
    pub fn keep_write_error(&self, e: SessionLogError) {
        let mut kept = lock(&self.inner.write_error);
        if kept.first.is_none() {
            kept.first = Some(e);
            kept.stop_if_failed();
            kept.tell_if_failed();
        }
    }

    /// Tells `tell` the first write of this log that fails (at once if one has), whichever
    /// record it was for: the daemon says it to its operator.
    pub fn tell_on_write_error(&self, tell: impl Fn(&SessionLogError) + Send + Sync + 'static) {
        let mut kept = lock(&self.inner.write_error);
        kept.tell = Some(Box::new(tell));
        kept.tell_if_failed();
    }

    /// Stops `session` (saying why) when a write of this log fails, or at once if one has: a
    /// session must not go on doing what its record can no longer show.
    pub fn stop_on_write_error(&self, session: &SessionCancel) {
        let mut kept = lock(&self.inner.write_error);
        kept.stop = Some(session.clone());
        kept.stop_if_failed();
    }
}

/// The record of a session no process is writing, held for a note appended to it (a rewind of
/// an ended session, from the daemon or the command line). Holding it holds the writer's lock
/// ([`claim_writer`]): while it is held no resume reopens the session, and it is refused while
/// a writer (a run, a resume under way) holds it, so the note is never appended beside a live
/// writer's lines nor cuts one of them. Opened by descriptor, a link refused; a torn tail is
/// cut once the lock is held.
pub struct OfflineRecord {
    file: File,
    path: PathBuf,
}

impl OfflineRecord {
    /// Takes the record of the session directory `dir`.
    pub fn claim(dir: &Path) -> Result<OfflineRecord, SessionLogError> {
        let (file, path) = locked_record(dir, |records| records.open_append(EVENTS_FILE))?;
        jsonl::repair_tail(&file, &path)?;
        Ok(OfflineRecord { file, path })
    }

    /// Appends `event`, stamped now.
    pub fn record(&mut self, event: &AppEvent) -> Result<(), SessionLogError> {
        self.append(&SessionLogRecord {
            ts: UtcTime::now().rfc3339(),
            seq: None,
            event: event.clone(),
        })
    }

    /// Appends `event` as the daemon published it (numbered `seq` at `ts`).
    pub fn record_published(
        &mut self,
        event: &AppEvent,
        seq: u64,
        ts: &str,
    ) -> Result<(), SessionLogError> {
        self.append(&SessionLogRecord {
            ts: ts.to_owned(),
            seq: Some(seq),
            event: event.clone(),
        })
    }

    fn append(&mut self, record: &SessionLogRecord) -> Result<(), SessionLogError> {
        jsonl::append_line(&mut self.file, &self.path, record)
    }
}

fn write_meta_atomic(dir: &RecordDir, meta: &SessionMeta) -> Result<(), SessionLogError> {
    let path = dir.join(META_FILE);
    let mut text = serde_json::to_vec_pretty(meta).map_err(|e| SessionLogError::Encode {
        path: path.clone(),
        message: e.to_string(),
    })?;
    text.push(b'\n');
    dir.rewrite(META_FILE, &text)
        .map_err(|source| SessionLogError::io(&path, source))
}

/// A session id's six hex digits after its second: the millisecond it started in (0-999, the
/// high 10 bits) then 14 random bits, so ids of sessions started within one second sort in
/// the order they started, and two started in the same millisecond still differ (a clash is
/// retried by [`SessionLog::create`]).
fn id_suffix(millis: u32) -> Result<String, SessionLogError> {
    let mut bytes = [0u8; 2];
    getrandom::fill(&mut bytes).map_err(|e| {
        SessionLogError::io(Path::new("getrandom"), std::io::Error::other(e.to_string()))
    })?;
    let random = u32::from(u16::from_le_bytes(bytes)) & 0x3fff;
    Ok(format!("{:06x}", (millis.min(999) << 14) | random))
}

#[cfg(test)]
mod tests;

//! Reading sessions back: listing, id resolution, and the three record files.

use std::path::{Path, PathBuf};

use intendant_protocol::events::SessionLogRecord;
use intendant_providers::ConversationItem;
use serde::{Deserialize, Serialize};

use super::jsonl::{JsonlRead, read_jsonl, read_jsonl_leniently};
use super::{CONVERSATION_FILE, EVENTS_FILE, META_FILE, SessionLogError, SessionMeta, logs_dir};

/// One line of `session.jsonl` as read, whatever event it holds: a log may hold events of a
/// newer or older build. [`EventRecord::typed`] reads it as the [`SessionLogRecord`] it was
/// written as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When the event was written (RFC 3339 UTC).
    pub ts: String,
    /// The daemon-wide sequence number, for a session a daemon ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The event name, e.g. `approval_required`.
    pub event: String,
    /// The event's own fields.
    #[serde(flatten)]
    pub data: serde_json::Map<String, serde_json::Value>,
}

impl EventRecord {
    /// The record as this build's [`SessionLogRecord`]; an error for an event this build does
    /// not know (or one recorded with other fields).
    pub fn typed(&self) -> Result<SessionLogRecord, serde_json::Error> {
        SessionLogRecord::from_parts(self.ts.clone(), self.seq, &self.event, self.data.clone())
    }
}

/// Reads `session_meta.json` of the session directory `dir` (a link there is refused).
pub fn read_meta(dir: &Path) -> Result<SessionMeta, SessionLogError> {
    let path = dir.join(META_FILE);
    let mut text = Vec::new();
    crate::record_dir::open_read_nofollow(&path)
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut text))
        .map_err(|source| SessionLogError::Io {
            path: path.clone(),
            source,
        })?;
    serde_json::from_slice(&text).map_err(|e| SessionLogError::Meta {
        path,
        message: e.to_string(),
    })
}

/// Reads `session.jsonl` of the session directory `dir`, skipping a torn last line.
pub fn read_events(dir: &Path) -> Result<JsonlRead<EventRecord>, SessionLogError> {
    read_jsonl(&dir.join(EVENTS_FILE))
}

/// Reads `session.jsonl` of the session directory `dir` to show it: a line that does not read
/// (damaged) is passed over and named ([`read_jsonl_leniently`]); an event a newer build wrote
/// reads, by its name.
pub fn read_events_leniently(dir: &Path) -> Result<JsonlRead<EventRecord>, SessionLogError> {
    read_jsonl_leniently(&dir.join(EVENTS_FILE))
}

/// Reads `conversation.jsonl` of the session directory `dir`, skipping a torn last line.
pub fn read_conversation(dir: &Path) -> Result<JsonlRead<ConversationItem>, SessionLogError> {
    read_jsonl(&dir.join(CONVERSATION_FILE))
}

/// Every session under `<home>/logs`, newest first ([`read_listing`] without the directories
/// it could not read).
pub fn list_sessions(home: &Path) -> Result<Vec<SessionMeta>, SessionLogError> {
    read_listing(home).map(|listing| listing.sessions)
}

/// What [`read_listing`] found under `<home>/logs`.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every session, newest first.
    pub sessions: Vec<SessionMeta>,
    /// Each directory whose `session_meta.json` is there but does not read (damaged, or
    /// written by a build whose records this one cannot read), by name: left out, its files
    /// kept, and worth saying (a listing that left it out silently would lose a session from
    /// sight).
    pub unreadable: Vec<Unreadable>,
}

/// A session directory [`read_listing`] left out.
#[derive(Debug)]
pub struct Unreadable {
    /// The directory.
    pub dir: PathBuf,
    /// Why its metadata does not read.
    pub error: SessionLogError,
}

/// Most directories [`Listing::unreadable_lines`] names one by one.
const UNREADABLE_NAMED: usize = 5;

/// Most bytes of one such line (a parse error quotes what it could not read, which may be
/// long).
const UNREADABLE_LINE_BYTES: usize = 1024;

impl Listing {
    /// What an operator is told of the directories left out, a line each (at most five, then
    /// how many more); none when every one read.
    pub fn unreadable_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .unreadable
            .iter()
            .take(UNREADABLE_NAMED)
            .map(|u| {
                intendant_protocol::text::clip(
                    &format!("not listed, its files kept: {}", u.error),
                    UNREADABLE_LINE_BYTES,
                )
            })
            .collect();
        let more = self.unreadable.len().saturating_sub(UNREADABLE_NAMED);
        if more > 0 {
            lines.push(format!(
                "and {more} more session directories whose metadata does not read"
            ));
        }
        lines
    }
}

/// Every session under `<home>/logs`, and each directory that holds a `session_meta.json` this
/// build cannot read. A directory without one is no session (or one being created) and is
/// passed over, as is a name starting with a dot (a prune's leftover, `prune::carry_out`).
pub fn read_listing(home: &Path) -> Result<Listing, SessionLogError> {
    let logs = logs_dir(home);
    let mut listing = Listing::default();
    let entries = match std::fs::read_dir(&logs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
        Err(source) => return Err(SessionLogError::Io { path: logs, source }),
    };
    for entry in entries {
        let entry = entry.map_err(|source| SessionLogError::Io {
            path: logs.clone(),
            source,
        })?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        match read_meta(&entry.path()) {
            Ok(meta) => listing.sessions.push(meta),
            Err(SessionLogError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(error) => listing.unreadable.push(Unreadable {
                dir: entry.path(),
                error,
            }),
        }
    }
    // Ids start with a UTC timestamp, so the lexical order is the time order.
    listing.sessions.sort_by(|a, b| b.id.cmp(&a.id));
    listing.unreadable.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(listing)
}

/// The directory of the session `id`: an exact id, or a prefix matching exactly one session.
pub fn resolve_session_id(home: &Path, id: &str) -> Result<PathBuf, SessionLogError> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(SessionLogError::InvalidSessionId { id: id.to_owned() });
    }
    let logs = logs_dir(home);
    let exact = logs.join(id);
    if exact.join(META_FILE).is_file() {
        return Ok(exact);
    }
    let matches: Vec<String> = list_sessions(home)?
        .into_iter()
        .map(|m| m.id)
        .filter(|sid| sid.starts_with(id))
        .collect();
    match matches.as_slice() {
        [] => Err(SessionLogError::UnknownSession {
            id: id.to_owned(),
            logs_dir: logs,
        }),
        [one] => Ok(logs.join(one)),
        _ => Err(SessionLogError::AmbiguousSession {
            id: id.to_owned(),
            matches,
        }),
    }
}

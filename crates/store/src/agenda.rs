//! The agenda: parked work items with an optional reminder, and one-shot scheduled sessions.
//!
//! It is a ledger: an entry moves along its states and is deleted only by a prune of old
//! sessions, which takes the scheduled sessions that ended long before
//! ([`prune_ended_schedules`]). A work item is
//! `open` until `done`; its reminder fires once (snoozing sets a new time and arms it again). A
//! scheduled session stores the whole start request as JSON with its sha256 `digest` and waits
//! `pending` until the owner approves it (`approved`, the digest approved recorded); at its time
//! one daemon claims it in a write transaction (`claimed`), starts exactly that request and
//! records the session (`started`), or why it could not (`failed`). An approved entry whose time
//! passed more than the grace ago (the daemon was not running), a pending one whose time passed
//! unapproved, and a claim with no session recorded after the grace (a daemon died between
//! claiming and starting: it cannot be told whether it ran) all become `missed`, which nothing
//! ever runs on its own. There is no recurrence.
//!
//! Times are Unix seconds (UTC); the request is opaque JSON text to this module.

use rusqlite::{OptionalExtension, Row};
use thiserror::Error;

use crate::{Store, StoreError};

/// Longest item text, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Largest stored start request, in bytes of JSON.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// The most scheduled sessions waiting for the owner's approval: each is in the approval queue
/// every surface lists, so a client that schedules in a loop (an MCP client's model) cannot grow
/// the queue, and each read of it, without end.
pub const MAX_PENDING: usize = 100;
/// The most entries still to come (open items, schedules not yet run): a bound on what every
/// listing of the agenda carries besides its history.
pub const MAX_LIVE: usize = 1000;
/// The most ended entries a listing carries (the newest): the ledger keeps them until a prune
/// of old sessions, and a schedule missed at once frees its place among those waiting, so a
/// client scheduling in a loop would otherwise grow every listing without end.
pub const LISTED_HISTORY: usize = 200;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A parked work item.
    Item,
    /// A one-shot scheduled session.
    Schedule,
}

impl Kind {
    /// Its name in the database and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Item => "item",
            Kind::Schedule => "schedule",
        }
    }
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// An item not yet done.
    Open,
    /// An item done, or a schedule cancelled before it ran.
    Done,
    /// A schedule waiting for the owner's approval.
    Pending,
    /// A schedule approved, waiting for its time.
    Approved,
    /// A schedule the owner refused.
    Rejected,
    /// A schedule a daemon took to start (no session recorded yet).
    Claimed,
    /// A schedule whose session was started.
    Started,
    /// A schedule whose session could not be started.
    Failed,
    /// A schedule not run at its time (daemon down, never approved, or uncertain); never run on
    /// its own.
    Missed,
}

const STATES: [State; 9] = [
    State::Open,
    State::Done,
    State::Pending,
    State::Approved,
    State::Rejected,
    State::Claimed,
    State::Started,
    State::Failed,
    State::Missed,
];

impl State {
    /// Its name in the database and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Done => "done",
            State::Pending => "pending",
            State::Approved => "approved",
            State::Rejected => "rejected",
            State::Claimed => "claimed",
            State::Started => "started",
            State::Failed => "failed",
            State::Missed => "missed",
        }
    }

    fn parse(s: &str) -> Option<State> {
        STATES.into_iter().find(|st| st.as_str() == s)
    }
}

/// One agenda entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub id: i64,
    /// Item or schedule.
    pub kind: Kind,
    /// The item's text, or the scheduled task.
    pub text: String,
    /// When it was added.
    pub created: i64,
    /// The item's reminder, or the schedule's time.
    pub at: Option<i64>,
    /// Where it stands.
    pub state: State,
    /// For an item: whether its reminder fired.
    pub reminded: bool,
    /// For a schedule: the start request, JSON.
    pub request: Option<String>,
    /// For a schedule: sha256 (hex) of `request`.
    pub digest: Option<String>,
    /// For a started schedule: its session.
    pub session_id: Option<String>,
    /// Why it is failed or missed.
    pub note: Option<String>,
}

/// Why an agenda change was refused; nothing was changed.
#[derive(Debug, Error)]
pub enum AgendaError {
    /// No entry with that id.
    #[error("no agenda entry {0}")]
    Unknown(i64),
    /// The change does not apply to the entry as it stands.
    #[error("agenda entry {id} is {state} ({kind}): {what}")]
    WrongState {
        /// The entry.
        id: i64,
        /// Its kind.
        kind: &'static str,
        /// Its state.
        state: &'static str,
        /// What cannot be done.
        what: String,
    },
    /// Bad input (empty text, too long, a time in the past).
    #[error("{0}")]
    Invalid(String),
    /// The agenda holds as many entries of the kind as it keeps ([`MAX_PENDING`], [`MAX_LIVE`]).
    #[error("{0}")]
    Full(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

const COLUMNS: &str =
    "id, kind, text, created, at, state, reminded, request, digest, session_id, note";

fn entry(row: &Row<'_>) -> rusqlite::Result<Entry> {
    let kind: String = row.get(1)?;
    let state: String = row.get(5)?;
    let bad = |what: &str, v: String| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown agenda {what} {v:?}").into(),
        )
    };
    Ok(Entry {
        id: row.get(0)?,
        kind: match kind.as_str() {
            "item" => Kind::Item,
            "schedule" => Kind::Schedule,
            _ => return Err(bad("kind", kind)),
        },
        text: row.get(2)?,
        created: row.get(3)?,
        at: row.get(4)?,
        state: State::parse(&state).ok_or_else(|| bad("state", state.clone()))?,
        reminded: row.get::<_, i64>(6)? != 0,
        request: row.get(7)?,
        digest: row.get(8)?,
        session_id: row.get(9)?,
        note: row.get(10)?,
    })
}

fn fetch(c: &rusqlite::Connection, id: i64) -> rusqlite::Result<Option<Entry>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM agenda WHERE id = ?1"),
        [id],
        entry,
    )
    .optional()
}

/// sha256 of `text`, lowercase hex.
pub fn digest(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn check_text(text: &str) -> Result<(), AgendaError> {
    if text.trim().is_empty() {
        return Err(AgendaError::Invalid("the text is empty".to_owned()));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(AgendaError::Invalid(format!(
            "the text is {} bytes, over the {MAX_TEXT_BYTES}-byte limit",
            text.len()
        )));
    }
    Ok(())
}

/// Why one more entry of `kind` does not fit, counted in the write transaction that would add
/// it (so two daemons adding at once never pass a bound).
fn full(tx: &rusqlite::Transaction<'_>, kind: Kind) -> rusqlite::Result<Option<String>> {
    let count = |sql: &str| -> rusqlite::Result<usize> {
        let n: i64 = tx.query_row(sql, [], |row| row.get(0))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    };
    if count("SELECT COUNT(*) FROM agenda WHERE state IN ('open', 'pending', 'approved')")?
        >= MAX_LIVE
    {
        return Ok(Some(format!(
            "the agenda already holds {MAX_LIVE} open items and schedules not yet run: mark some \
             done or cancel them first"
        )));
    }
    if kind == Kind::Schedule
        && count("SELECT COUNT(*) FROM agenda WHERE state = 'pending'")? >= MAX_PENDING
    {
        return Ok(Some(format!(
            "{MAX_PENDING} scheduled sessions already wait for the owner's approval: approve or \
             reject them first"
        )));
    }
    Ok(None)
}

fn check_future(at: i64, now: i64) -> Result<(), AgendaError> {
    if at <= now {
        return Err(AgendaError::Invalid(format!(
            "the time is {} s in the past: give a future time",
            now - at
        )));
    }
    Ok(())
}

/// Adds a work item, with a reminder at `remind_at` (which must be in the future).
pub fn add_item(
    store: &Store,
    text: &str,
    remind_at: Option<i64>,
    now: i64,
) -> Result<Entry, AgendaError> {
    check_text(text)?;
    if let Some(at) = remind_at {
        check_future(at, now)?;
    }
    let entry = store.write(|tx| {
        if let Some(why) = full(tx, Kind::Item)? {
            return Ok(Err(why));
        }
        tx.execute(
            "INSERT INTO agenda (kind, text, created, at, state) VALUES ('item', ?1, ?2, ?3, 'open')",
            (text, now, remind_at),
        )?;
        fetch(tx, tx.last_insert_rowid()).map(Ok)
    })?;
    entry
        .map_err(AgendaError::Full)?
        .ok_or(AgendaError::Unknown(0))
}

/// Adds a scheduled session at `at` (in the future) for `request` (JSON), `pending` the owner's
/// approval; `text` is the task as listed.
pub fn add_schedule(
    store: &Store,
    text: &str,
    at: i64,
    request: &str,
    now: i64,
) -> Result<Entry, AgendaError> {
    check_text(text)?;
    check_future(at, now)?;
    if request.len() > MAX_REQUEST_BYTES {
        return Err(AgendaError::Invalid(format!(
            "the start request is {} bytes, over the {MAX_REQUEST_BYTES}-byte limit",
            request.len()
        )));
    }
    let digest = digest(request);
    let entry = store.write(|tx| {
        if let Some(why) = full(tx, Kind::Schedule)? {
            return Ok(Err(why));
        }
        tx.execute(
            "INSERT INTO agenda (kind, text, created, at, state, request, digest)
             VALUES ('schedule', ?1, ?2, ?3, 'pending', ?4, ?5)",
            (text, now, at, request, &digest),
        )?;
        fetch(tx, tx.last_insert_rowid()).map(Ok)
    })?;
    entry
        .map_err(AgendaError::Full)?
        .ok_or(AgendaError::Unknown(0))
}

/// Every entry still to come or under way (open, pending, approved, claimed) and the newest
/// [`LISTED_HISTORY`] of those that ended, oldest first.
pub fn list(store: &Store) -> Result<Vec<Entry>, StoreError> {
    store.with(|c| {
        let mut stmt = c.prepare(&format!(
            "SELECT {COLUMNS} FROM agenda WHERE state IN {UNDER_WAY}
             UNION ALL
             SELECT * FROM (SELECT {COLUMNS} FROM agenda WHERE state NOT IN {UNDER_WAY}
                            ORDER BY id DESC LIMIT ?1)
             ORDER BY id"
        ))?;
        let rows = stmt.query_map([LISTED_HISTORY as i64], entry)?;
        rows.collect()
    })
}

/// The states of an entry that has not ended, as SQL.
const UNDER_WAY: &str = "('open', 'pending', 'approved', 'claimed')";

/// The scheduled sessions that ended (started, failed, missed, rejected or cancelled) and were
/// made and due before `before` (Unix seconds): how many, removed unless `dry_run`. What
/// `intendant sessions prune` and `[daemon] session_retention_days` take of the ledger with the
/// sessions they remove; work items stay (they are the owner's own list).
pub fn prune_ended_schedules(store: &Store, before: i64, dry_run: bool) -> Result<u64, StoreError> {
    let chosen = format!(
        "FROM agenda WHERE kind = 'schedule' AND state NOT IN {UNDER_WAY}
         AND created < ?1 AND (at IS NULL OR at < ?1)"
    );
    if dry_run {
        return store.with(|c| {
            c.query_row(&format!("SELECT COUNT(*) {chosen}"), [before], |row| {
                row.get::<_, i64>(0)
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
        });
    }
    store.write(|tx| {
        tx.execute(&format!("DELETE {chosen}"), [before])
            .map(|n| n as u64)
    })
}

/// The schedules waiting for the owner's approval, oldest first.
pub fn pending(store: &Store) -> Result<Vec<Entry>, StoreError> {
    store.with(|c| {
        let mut stmt = c.prepare(&format!(
            "SELECT {COLUMNS} FROM agenda WHERE state = 'pending' ORDER BY id"
        ))?;
        let rows = stmt.query_map([], entry)?;
        rows.collect()
    })
}

/// One entry.
pub fn get(store: &Store, id: i64) -> Result<Entry, AgendaError> {
    store
        .with(|c| fetch(c, id))?
        .ok_or(AgendaError::Unknown(id))
}

/// Applies `change` to entry `id` under the write lock, if `allowed` says it applies; returns
/// the entry after.
fn change(
    store: &Store,
    id: i64,
    allowed: impl FnOnce(&Entry) -> Result<(), String>,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Entry, AgendaError> {
    store.write(|tx| {
        let Some(before) = fetch(tx, id)? else {
            return Ok(Err(AgendaError::Unknown(id)));
        };
        if let Err(what) = allowed(&before) {
            return Ok(Err(AgendaError::WrongState {
                id,
                kind: before.kind.as_str(),
                state: before.state.as_str(),
                what,
            }));
        }
        tx.execute(sql, params)?;
        Ok(fetch(tx, id)?.ok_or(AgendaError::Unknown(id)))
    })?
}

/// Marks an open item done, or cancels a schedule that has not run (pending or approved).
pub fn done(store: &Store, id: i64) -> Result<Entry, AgendaError> {
    change(
        store,
        id,
        |e| match (e.kind, e.state) {
            (Kind::Item, State::Open) | (Kind::Schedule, State::Pending | State::Approved) => {
                Ok(())
            }
            _ => Err("only an open item, or a schedule that has not run, can be done".to_owned()),
        },
        "UPDATE agenda SET state = 'done' WHERE id = ?1",
        [id],
    )
}

/// Moves an open item's reminder to `until` (in the future) and arms it again.
pub fn snooze(store: &Store, id: i64, until: i64, now: i64) -> Result<Entry, AgendaError> {
    check_future(until, now)?;
    change(
        store,
        id,
        |e| match (e.kind, e.state) {
            (Kind::Item, State::Open) => Ok(()),
            _ => Err(
                "only an open item can be snoozed (a schedule's time is what was approved)"
                    .to_owned(),
            ),
        },
        "UPDATE agenda SET at = ?1, reminded = 0 WHERE id = ?2",
        (until, id),
    )
}

/// The owner approves pending schedule `id` (its time still ahead): the digest shown is the
/// one recorded as approved.
pub fn approve(store: &Store, id: i64, now: i64) -> Result<Entry, AgendaError> {
    change(
        store,
        id,
        |e| match (e.kind, e.state, e.at) {
            (Kind::Schedule, State::Pending, Some(at)) if at > now => Ok(()),
            (Kind::Schedule, State::Pending, _) => {
                Err("its time has passed; schedule it again".to_owned())
            }
            _ => Err("only a pending schedule can be approved".to_owned()),
        },
        "UPDATE agenda SET state = 'approved', approved_digest = digest WHERE id = ?1",
        [id],
    )
}

/// The owner refuses pending schedule `id`.
pub fn reject(store: &Store, id: i64) -> Result<Entry, AgendaError> {
    change(
        store,
        id,
        |e| match (e.kind, e.state) {
            (Kind::Schedule, State::Pending) => Ok(()),
            _ => Err("only a pending schedule can be rejected".to_owned()),
        },
        "UPDATE agenda SET state = 'rejected' WHERE id = ?1",
        [id],
    )
}

/// Open items whose reminder is due at `now` and has not fired, marked fired in the same write
/// transaction: each is returned once, to one caller, whichever process asks.
pub fn take_due_reminders(store: &Store, now: i64) -> Result<Vec<Entry>, StoreError> {
    store.write(|tx| {
        let mut stmt = tx.prepare(&format!(
            "UPDATE agenda SET reminded = 1
             WHERE kind = 'item' AND state = 'open' AND reminded = 0 AND at IS NOT NULL AND at <= ?1
             RETURNING {COLUMNS}"
        ))?;
        let rows = stmt.query_map([now], entry)?;
        rows.collect()
    })
}

/// What one look at the schedule decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Due {
    /// Claimed by this caller: start each (exactly its `request`), then [`record_started`] or
    /// [`record_failed`].
    pub to_start: Vec<Entry>,
    /// Moved to `missed` (or `failed`, for a request no longer matching its approved digest)
    /// by this look.
    pub not_run: Vec<Entry>,
    /// Those of `not_run` that were waiting for the owner's approval (they leave its queue).
    pub unanswered: Vec<i64>,
}

/// Claims the approved schedules due at `now` for `claimer` (a daemon's name), in one write
/// transaction so that of two daemons on one database only one gets each. In the same
/// transaction: an approved schedule more than `grace` seconds late, a pending one whose time
/// came, and a claim older than `grace` with no session recorded become `missed`; a request
/// whose digest no longer matches the approved one becomes `failed`.
pub fn claim_due(store: &Store, now: i64, grace: i64, claimer: &str) -> Result<Due, StoreError> {
    store.write(|tx| {
        let mut due = Due::default();
        let candidates: Vec<(Entry, Option<String>)> = {
            let mut stmt = tx.prepare(&format!(
                "SELECT {COLUMNS}, approved_digest, claimed_at FROM agenda
                 WHERE kind = 'schedule' AND at <= ?1 AND state IN ('pending', 'approved', 'claimed')
                 ORDER BY at, id"
            ))?;
            let rows = stmt.query_map([now], |row| {
                let claimed_at: Option<i64> = row.get(12)?;
                Ok((entry(row)?, row.get::<_, Option<String>>(11)?, claimed_at))
            })?;
            rows.filter_map(|r| match r {
                // A claim still within its grace belongs to the daemon starting it.
                Ok((e, _, Some(at))) if e.state == State::Claimed && now - at <= grace => None,
                Ok((e, approved, _)) => Some(Ok((e, approved))),
                Err(err) => Some(Err(err)),
            })
            .collect::<rusqlite::Result<_>>()?
        };
        for (e, approved) in candidates {
            let late = e.at.map_or(0, |at| now - at);
            if e.state == State::Pending {
                due.unanswered.push(e.id);
            }
            let (state, note): (&str, Option<String>) = match e.state {
                State::Pending => (
                    "missed",
                    Some("its time came before the owner approved it".to_owned()),
                ),
                State::Claimed => (
                    "missed",
                    Some(
                        "a daemon claimed it but recorded no session: whether it started is unknown, so it is not run again"
                            .to_owned(),
                    ),
                ),
                _ if late > grace => (
                    "missed",
                    Some(format!(
                        "no daemon was running at its time (looked {late} s late); it is not run on its own"
                    )),
                ),
                _ if e.digest.as_deref() != approved.as_deref()
                    || e.request.as_deref().map(digest) != e.digest =>
                {
                    (
                        "failed",
                        Some("its request no longer matches the digest the owner approved".to_owned()),
                    )
                }
                _ => {
                    tx.execute(
                        "UPDATE agenda SET state = 'claimed', claimed_at = ?1, claimed_by = ?2 WHERE id = ?3",
                        (now, claimer, e.id),
                    )?;
                    due.to_start.extend(fetch(tx, e.id)?);
                    continue;
                }
            };
            tx.execute(
                "UPDATE agenda SET state = ?1, note = ?2 WHERE id = ?3",
                (state, &note, e.id),
            )?;
            due.not_run.extend(fetch(tx, e.id)?);
        }
        Ok(due)
    })
}

/// Records the session a claimed schedule started.
pub fn record_started(store: &Store, id: i64, session_id: &str) -> Result<Entry, AgendaError> {
    change(
        store,
        id,
        |e| match e.state {
            State::Claimed => Ok(()),
            _ => Err("only a claimed schedule can be recorded as started".to_owned()),
        },
        "UPDATE agenda SET state = 'started', session_id = ?1 WHERE id = ?2",
        (session_id, id),
    )
}

/// Records why a claimed schedule could not be started.
pub fn record_failed(store: &Store, id: i64, why: &str) -> Result<Entry, AgendaError> {
    change(
        store,
        id,
        |e| match e.state {
            State::Claimed => Ok(()),
            _ => Err("only a claimed schedule can be recorded as failed".to_owned()),
        },
        "UPDATE agenda SET state = 'failed', note = ?1 WHERE id = ?2",
        (why, id),
    )
}

#[cfg(test)]
mod tests;

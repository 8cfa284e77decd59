//! Sessions other processes record under the state root (a one-shot `intendant TASK` run while
//! the daemon serves, or an `intendant --resume` of a session listed ended): found once their
//! record appears or names a new writer, listed as it says once the process writing it is
//! gone, and each change told to subscribers in a `sessions_changed` event, so a dashboard's
//! listing shows them without a reload. While such a session runs, what its log gains is
//! relayed to subscribers as its events ([`Relay`]).
//!
//! The design decision to know: it looks once a [`POLL`] (a [`RELAY_POLL`] while a session
//! another process runs is listed, so its followers see what it does soon) rather than
//! watching the directory. A look costs one `stat` of `logs/` while nothing changed there (its
//! modification time is unchanged; a resume marks it changed), a read of the directory's names
//! and a `stat` of each ended session's record when something did, and a read of the record
//! and of what the log gained of each session whose writer still runs elsewhere; a daemon whose
//! sessions are all its own reads nothing more than what its own starts change. A look and a
//! prune never overlap (the prune's lock): a session a prune took out of the listing is not
//! found again half removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use intendant_core::session_log::{
    Appended, LogTail, Logged, META_FILE, SessionLogError, SessionMeta, logs_dir, read_meta,
};
use intendant_protocol::daemon::{DAEMON_SESSION, Envelope, SessionSummary, SessionsPage};
use intendant_protocol::events::{AppEvent, EndStatus, RecordedStatus};
use intendant_protocol::utc::UtcTime;

use super::{Entry, Inner, State, Supervisor, read_records, recorded_entry, serving};

/// How often the state root's records are looked at...
pub(super) const POLL: Duration = Duration::from_secs(1);
/// ...and while a session another process runs is listed: what its log gains reaches its
/// followers within this.
const RELAY_POLL: Duration = Duration::from_millis(250);

/// The most bytes of a session's log a look reads to relay (what is left is read at the next).
const RELAY_BUDGET: usize = 4 << 20;

/// How many looks a new session directory whose record does not read yet (its writer is still
/// making it) is tried again before it is passed over.
const TRIES: u8 = 10;

/// What the looks remember from one to the next.
struct Looks {
    home: PathBuf,
    /// `logs/`'s modification time when its names were last read (`None`: never read).
    names_read: Option<SystemTime>,
    /// Sessions listed running elsewhere (the listing says which) whose record failed to read
    /// and was said so: said once, and tried again each look.
    unreadable: BTreeSet<String>,
    /// Sessions listed running elsewhere whose log failed to read for relaying, said once.
    unrelayed: BTreeSet<String>,
    /// What is relayed of each session listed running elsewhere.
    relays: BTreeMap<String, Relay>,
    /// New directories whose record did not read yet, with the tries left.
    unread: BTreeMap<String, u8>,
    /// When the records of the sessions listed ended were last looked at for a new writer.
    ended_read: SystemTime,
}

impl Supervisor {
    /// Keeps the listing in step with the sessions other processes record under the state root
    /// (see the module's doc): runs until the supervisor shuts down or is dropped. `serve`
    /// starts it.
    pub fn follow_records(&self) -> tokio::task::JoinHandle<()> {
        let mut looks = Looks {
            home: self.inner.env.home.clone(),
            names_read: None,
            unreadable: BTreeSet::new(),
            unrelayed: BTreeSet::new(),
            relays: BTreeMap::new(),
            unread: BTreeMap::new(),
            ended_read: SystemTime::now(),
        };
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let relaying = !looks.relays.is_empty();
                tokio::time::sleep(if relaying { RELAY_POLL } else { POLL }).await;
                let Some(inner) = serving(&weak) else {
                    return;
                };
                let mut changed = looks.find_new(&inner).await;
                changed.extend(looks.follow_writers(&inner).await);
                changed.sort();
                for ids in changed.chunks(SessionsPage::SIZE as usize) {
                    inner.publish(
                        DAEMON_SESSION,
                        &AppEvent::SessionsChanged { ids: ids.to_vec() },
                    );
                }
            }
        })
    }
}

impl Looks {
    /// Lists the sessions recorded by other processes since the last look; their ids.
    async fn find_new(&mut self, inner: &Inner) -> Vec<String> {
        let logs = logs_dir(&self.home);
        let modified = read_records({
            let logs = logs.clone();
            move || Ok(std::fs::metadata(&logs).and_then(|m| m.modified()).ok())
        })
        .await
        .ok()
        .flatten();
        let names_changed = modified.is_some() && modified != self.names_read;
        if !names_changed && self.unread.is_empty() {
            return Vec::new();
        }
        let _no_prune = inner.pruning.lock().await;
        let mut names = Vec::new();
        let mut found = Vec::new();
        if names_changed {
            // A name added within the same tick of the clock as a look leaves the time as the
            // look saw it: a time that recent is read again at the next look.
            let now = SystemTime::now();
            self.names_read =
                modified.filter(|m| now.duration_since(*m).is_ok_and(|age| age > POLL));
            names = read_records({
                let logs = logs.clone();
                move || Ok(names_in(&logs))
            })
            .await
            .unwrap_or_default();
            found = self.find_resumed(inner).await;
        }
        {
            // Only what is not listed (a name tried before may have been listed since).
            let state = inner.lock();
            for name in names {
                if !state.sessions.contains_key(&name) {
                    self.unread.entry(name).or_insert(TRIES);
                }
            }
            self.unread
                .retain(|name, _| !state.sessions.contains_key(name));
        }
        let wanted: Vec<String> = self.unread.keys().cloned().collect();
        let read = read_records(move || {
            Ok(wanted
                .into_iter()
                .map(|name| {
                    let meta = read_meta(&logs.join(&name));
                    (name, meta)
                })
                .collect::<Vec<_>>())
        })
        .await
        .unwrap_or_default();
        for (name, meta) in read {
            match meta {
                // Another process's: listed. This daemon's own is listed by its start, which
                // is under way (until it is, the name is tried again).
                Ok(meta) if meta.pid != Some(std::process::id()) => {
                    self.unread.remove(&name);
                    if let Some(id) = self.list(inner, &meta) {
                        found.push(id);
                    }
                }
                Ok(_) | Err(_) => {
                    if let Some(tries) = self.unread.get_mut(&name) {
                        *tries -= 1;
                        if *tries == 0 {
                            self.unread.remove(&name);
                        }
                    }
                }
            }
        }
        found
    }

    /// Reads again the records of the sessions listed ended that were written since the last
    /// time they were looked at: another process resumed one (a resume marks `logs/` changed,
    /// as a new name does; see `intendant_core::session_log`). Each is listed as its record now
    /// says, running and followed while its writer runs, with what it used. A look reads the
    /// modification time of each ended session's record, only when `logs/` changed. The ids
    /// of those whose listing changed.
    async fn find_resumed(&mut self, inner: &Inner) -> Vec<String> {
        let since = std::mem::replace(&mut self.ended_read, SystemTime::now())
            .checked_sub(POLL)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let ended = records_of(inner, Entry::listed_ended);
        let own = std::process::id();
        let read = read_records(move || {
            Ok(ended
                .into_iter()
                .filter(|(_, dir)| {
                    std::fs::metadata(dir.join(META_FILE))
                        .and_then(|m| m.modified())
                        .is_ok_and(|written| written >= since)
                })
                .filter_map(|(id, dir)| {
                    let meta = read_meta(&dir).ok()?;
                    (meta.pid != Some(own)).then_some((id, dir, meta))
                })
                .collect::<Vec<_>>())
        })
        .await
        .unwrap_or_default();
        let mut changed = Vec::new();
        let mut state = inner.lock();
        for (id, dir, meta) in read {
            // Resumed here meanwhile, or pruned: the daemon's own view stands.
            let Some(entry) = state.sessions.get_mut(&id).filter(|e| e.listed_ended()) else {
                continue;
            };
            let now = recorded_entry(&meta, dir);
            if !record_moved(&entry.tracked.summary, &now.tracked.summary) {
                continue;
            }
            *entry = now;
            changed.push(id);
        }
        changed
    }

    /// Lists the session `meta` records, unless it is known here; its id when it is listed now.
    fn list(&mut self, inner: &Inner, meta: &SessionMeta) -> Option<String> {
        let mut state = inner.lock();
        if state.sessions.contains_key(&meta.id) {
            return None;
        }
        let entry = recorded_entry(meta, logs_dir(&self.home).join(&meta.id));
        state.sessions.insert(meta.id.clone(), entry);
        Some(meta.id.clone())
    }

    /// Reads again the record of each session listed running while another process writes
    /// it (however it came to be listed so: found, read again, or listed again by a prune that
    /// could not remove it): it is listed as its record now says (its level, its use so far),
    /// and once its writer is gone (ended, or killed) with its end, or interrupted, rather than
    /// running for good. What its log gained meanwhile is relayed to subscribers first (see
    /// [`Relay`]). The ids of those whose listing changed.
    async fn follow_writers(&mut self, inner: &Arc<Inner>) -> Vec<String> {
        let elsewhere = records_of(inner, Entry::running_elsewhere);
        let listed = |id: &String| elsewhere.iter().any(|(listed, _)| listed == id);
        self.unreadable.retain(listed);
        self.unrelayed.retain(listed);
        self.relays.retain(|id, _| listed(id));
        let mut changed = Vec::new();
        for (id, dir) in elsewhere {
            let relay = self.relays.remove(&id);
            let read = read_records({
                let dir = dir.clone();
                // The record first: once it says the session ended, its log holds the end (a
                // writer appends each event before it records what the event changes).
                move || Ok((read_meta(&dir), Relay::read(relay, &dir)))
            })
            .await;
            let Ok((meta, relayed)) = read else {
                continue;
            };
            let relay = match relayed {
                Ok(read) => Some(read),
                Err(e) => {
                    if self.unrelayed.insert(id.clone()) {
                        inner.log.say(&format!(
                            "session {id}: its log could not be read to relay its events (it \
                             is read again at each look): {e}"
                        ));
                    }
                    None
                }
            };
            let meta = match meta {
                Ok(meta) => {
                    self.unreadable.remove(&id);
                    Some(meta)
                }
                Err(e) => {
                    if self.unreadable.insert(id.clone()) {
                        inner.log.say(&format!(
                            "session {id}: its record could not be read again to see whether \
                             the process writing it still runs (it stays listed running, and \
                             is read again at each look): {e}"
                        ));
                    }
                    None
                }
            };
            let mut state = inner.lock();
            // Resumed here meanwhile, or pruned: the daemon's own view stands.
            let Some(entry) = state
                .sessions
                .get_mut(&id)
                .filter(|entry| entry.running_elsewhere())
            else {
                continue;
            };
            // How its run ended, once its record says it did (or its writer is gone).
            let mut ended = None;
            if let Some(meta) = meta {
                // While it runs, what its record says of it now (its level, its use so far).
                let now = recorded_entry(&meta, dir);
                if !now.running_elsewhere() {
                    ended = Some(match meta.effective_status() {
                        RecordedStatus::Ended(end) => end,
                        RecordedStatus::Running => EndStatus::Interrupted,
                    });
                }
                if record_moved(&entry.tracked.summary, &now.tracked.summary) {
                    *entry = now;
                    changed.push(id.clone());
                }
            }
            if let Some((mut relay, appended)) = relay {
                self.unrelayed.remove(&id);
                relay.publish(&mut state, &id, appended);
                match ended {
                    Some(status) => relay.end(&mut state, &id, status),
                    None => {
                        self.relays.insert(id, relay);
                    }
                }
            }
        }
        changed
    }
}

/// What the daemon relays of a session another process runs: the records its log gains, each
/// published as it was recorded (its time, its event) under a daemon `seq`, so `ctl attach`, the
/// dashboard's session page and MCP follow it as they follow a session the daemon runs. Read
/// from where its run going on now starts ([`LogTail::of_current_run`]: a session found while
/// another process runs it shows that run whole), at most [`RELAY_BUDGET`] a look. Only
/// published: nothing here is an approval or a question the daemon could answer (the process
/// running the session asks its own human), nor changes what the daemon lists of it, which its
/// record decides. Its log holds no `seq`, so what the ring no longer holds is not replayed:
/// `intendant sessions show` prints the record.
struct Relay {
    tail: LogTail,
    /// The run's `session_ended` was relayed.
    ended: bool,
}

impl Relay {
    /// `relay`'s tail (a new one for a session just listed running elsewhere) read on: the
    /// records its log gained.
    fn read(relay: Option<Relay>, dir: &Path) -> Result<(Relay, Appended), SessionLogError> {
        let mut relay = match relay {
            Some(relay) => relay,
            None => Relay {
                tail: LogTail::of_current_run(dir)?,
                ended: false,
            },
        };
        let appended = relay.tail.read(RELAY_BUDGET)?;
        Ok((relay, appended))
    }

    /// Publishes `appended` under session `id`.
    fn publish(&mut self, state: &mut State, id: &str, appended: Appended) {
        for Logged { record, end } in appended.records {
            self.ended |= matches!(record.event, AppEvent::SessionEnded { .. });
            state.hub.publish(|seq| Envelope {
                member: None,
                record_end: Some(end),
                seq,
                session_id: id.to_owned(),
                ts: record.ts,
                event: record.event,
            });
        }
    }

    /// Its session ended with `status`, as its record says: a follower that got no
    /// `session_ended` (its writer was killed before it wrote one) gets that end with the reason
    /// the listing gives, so none waits for good.
    fn end(self, state: &mut State, id: &str, status: EndStatus) {
        if self.ended {
            return;
        }
        let Some(entry) = state.sessions.get(id) else {
            return;
        };
        let event = AppEvent::SessionEnded {
            session_id: id.to_owned(),
            status,
            reason: entry.tracked.summary.reason.clone().unwrap_or_default(),
        };
        state.hub.publish(|seq| Envelope {
            member: None,
            record_end: None,
            seq,
            session_id: id.to_owned(),
            ts: UtcTime::now().rfc3339(),
            event,
        });
    }
}

/// The ids and record directories of the listed sessions `pick` picks.
fn records_of(inner: &Inner, pick: fn(&Entry) -> bool) -> Vec<(String, PathBuf)> {
    inner
        .lock()
        .sessions
        .iter()
        .filter(|(_, entry)| pick(entry))
        .map(|(id, entry)| (id.clone(), entry.log_dir.clone()))
        .collect()
}

/// Whether a record read now lists a session otherwise than `was` does (`is`: its listing from
/// the record), leaving out what a listing reads from the session's log later, when first
/// wanted (its answer and result).
fn record_moved(was: &SessionSummary, is: &SessionSummary) -> bool {
    *is != SessionSummary {
        final_text: is.final_text.clone(),
        result: is.result.clone(),
        ..was.clone()
    }
}

/// The session directories' names in `logs` (a name with a dot is a prune's leftover, not a
/// session's); none when it cannot be read.
fn names_in(logs: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect()
}

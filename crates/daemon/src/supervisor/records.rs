//! Sessions other processes record under the state root (a one-shot `intendant TASK` run while
//! the daemon serves, or an `intendant --resume` of a session listed ended): found once their
//! record appears or names a new writer, listed as it says once the process writing it is
//! gone, and each change told to subscribers in a `sessions_changed` event, so a dashboard's
//! listing shows them without a reload.
//!
//! The design decision to know: it looks once a [`POLL`] rather than watching the directory. A
//! look costs one `stat` of `logs/` while nothing changed there (its modification time is
//! unchanged; a resume marks it changed), a read of the directory's names and a `stat` of each
//! ended session's record when something did, and a read of the record of each session whose
//! writer still runs elsewhere; a daemon whose sessions are all its own reads nothing more
//! than what its own starts change. A look and a prune never overlap (the
//! prune's lock): a session a prune took out of the listing is not found again half removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use intendant_core::session_log::{META_FILE, SessionMeta, logs_dir, read_meta};
use intendant_protocol::daemon::{DAEMON_SESSION, SessionSummary, SessionsPage};
use intendant_protocol::events::AppEvent;

use super::{Entry, Inner, Supervisor, read_records, recorded_entry, serving};

/// How often the state root's records are looked at.
pub(super) const POLL: Duration = Duration::from_secs(1);

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
            unread: BTreeMap::new(),
            ended_read: SystemTime::now(),
        };
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
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
    /// running for good. The ids of those whose listing changed.
    async fn follow_writers(&mut self, inner: &Arc<Inner>) -> Vec<String> {
        let elsewhere = records_of(inner, Entry::running_elsewhere);
        self.unreadable
            .retain(|id| elsewhere.iter().any(|(listed, _)| listed == id));
        let mut changed = Vec::new();
        for (id, dir) in elsewhere {
            let read = read_records({
                let dir = dir.clone();
                move || read_meta(&dir)
            })
            .await;
            let meta = match read {
                Ok(meta) => meta,
                Err(e) => {
                    if self.unreadable.insert(id.clone()) {
                        inner.log.say(&format!(
                            "session {id}: its record could not be read again to see whether \
                             the process writing it still runs (it stays listed running, and \
                             is read again each second): {e}"
                        ));
                    }
                    continue;
                }
            };
            self.unreadable.remove(&id);
            let mut state = inner.lock();
            // Resumed here meanwhile, or pruned: the daemon's own view stands.
            let Some(entry) = state
                .sessions
                .get_mut(&id)
                .filter(|entry| entry.running_elsewhere())
            else {
                continue;
            };
            // While it runs, what its record says of it now (its level, its use so far).
            let now = recorded_entry(&meta, dir);
            if record_moved(&entry.tracked.summary, &now.tracked.summary) {
                *entry = now;
                changed.push(id);
            }
        }
        changed
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

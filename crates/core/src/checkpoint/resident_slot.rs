//! A session's resident git ([`ResidentGit`]) as its captures use it: started by the first
//! capture that can use it, put back after each, dropped (and started again at the next) when a
//! process fails, given up after [`MOST_FAILURES`]; each failure leaves a notice the session
//! reports as a warning. [`CheckpointStore::resident_tree`] is the capture's side: which changed
//! paths it can take (files and removals; a link would be hashed as what it points to) and the
//! check that what git hashed is the file the walk saw.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::CheckpointStore;
use super::modes::{FileStamp, Listed};
use super::resident_git::{ANSWER_DEADLINE, PathUpdate, ResidentError, ResidentGit};
use super::store_git::StoreGit;

/// Failures of a session's helpers after which it starts them no more.
const MOST_FAILURES: u32 = 3;

/// A session's resident helpers: started by its first capture that can use them, put back
/// after each, dropped (and started again at the next) when one fails, and given up after
/// [`MOST_FAILURES`]. Each failure leaves a notice for the session to report.
#[derive(Debug, Default)]
pub(super) struct ResidentSlot {
    state: Mutex<SlotState>,
    failures: AtomicU32,
    notices: Mutex<Vec<String>>,
    /// A shorter [`ANSWER_DEADLINE`] (tests).
    deadline: Mutex<Option<Duration>>,
}

#[derive(Debug, Default)]
enum SlotState {
    /// Not running: started when next needed.
    #[default]
    Idle,
    /// Running, between two captures.
    Up(Box<ResidentGit>),
    /// Given up on: every capture starts git per command.
    Off,
}

impl ResidentSlot {
    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The helpers for one capture (started when idle; `None` when given up on, or when they
    /// cannot start, which is a failure).
    async fn take(&self, git: &StoreGit) -> Option<ResidentGit> {
        {
            let mut state = Self::lock(&self.state);
            match std::mem::replace(&mut *state, SlotState::Idle) {
                SlotState::Up(resident) => return Some(*resident),
                SlotState::Off => {
                    *state = SlotState::Off;
                    return None;
                }
                SlotState::Idle => {}
            }
        }
        let deadline = Self::lock(&self.deadline).unwrap_or(ANSWER_DEADLINE);
        match ResidentGit::start(git, deadline).await {
            Ok(resident) => Some(resident),
            Err(e) => {
                self.failed(None, &e.to_string());
                None
            }
        }
    }

    fn put(&self, resident: ResidentGit) {
        *Self::lock(&self.state) = SlotState::Up(Box::new(resident));
    }

    /// Drops `resident` after a failure told in `message`, with a notice.
    fn failed(&self, resident: Option<ResidentGit>, message: &str) {
        if let Some(resident) = resident {
            close_soon(resident);
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let next = if failures >= MOST_FAILURES {
            *Self::lock(&self.state) = SlotState::Off;
            format!(
                "after {failures} failures this session's checkpoints start git for every capture from now on"
            )
        } else {
            "this checkpoint started git per command instead, and the next one starts it again"
                .to_owned()
        };
        Self::lock(&self.notices).push(format!(
            "checkpoints: the store's resident git failed ({message}); {next}"
        ));
    }

    /// Ends the helpers while the session rests (they start again at its next capture that can
    /// use them): an idle session holds no process.
    pub(super) fn rest(&self) {
        let mut state = Self::lock(&self.state);
        if matches!(*state, SlotState::Up(_))
            && let SlotState::Up(resident) = std::mem::replace(&mut *state, SlotState::Idle)
        {
            drop(state);
            close_soon(*resident);
        }
    }

    /// Leaves `line` for the session to report: a capture's other shortcut that failed (the
    /// capture went on without it).
    pub(super) fn notice(&self, line: String) {
        Self::lock(&self.notices).push(line);
    }

    /// What went wrong since last asked, for the session to report (each a line).
    pub(super) fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *Self::lock(&self.notices))
    }

    /// The running helpers' process ids (none when not running).
    #[cfg(test)]
    pub(super) fn pids(&self) -> Vec<u32> {
        match &*Self::lock(&self.state) {
            SlotState::Up(resident) => resident.pids(),
            SlotState::Idle | SlotState::Off => Vec::new(),
        }
    }

    /// Makes the helpers count as hung after `deadline` (from their next start).
    #[cfg(test)]
    pub(super) fn set_deadline(&self, deadline: Duration) {
        *Self::lock(&self.deadline) = Some(deadline);
    }
}

impl Drop for ResidentSlot {
    fn drop(&mut self) {
        self.rest();
    }
}

/// Closes `resident` on the runtime (dropped, which kills the helpers, when there is none).
fn close_soon(resident: ResidentGit) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(resident.close());
    }
}

impl CheckpointStore {
    /// The tree `base` with the files of `changed` (each with its stamp read just before, `None`
    /// for a path that is not a regular file now) as they are now, made by the session's
    /// resident git in `slot`. `None` when this capture cannot go that way: a path that is a
    /// link or anything but a file or nothing, a file replaced while git hashed it, a helper
    /// that failed (with a notice).
    pub(super) async fn resident_tree(
        &self,
        slot: &ResidentSlot,
        base: &str,
        changed: &[Listed],
    ) -> Option<String> {
        let root = &self.git.work_tree;
        let mut files = Vec::new();
        let mut removed = Vec::new();
        for (path, stamp) in changed {
            match stamp {
                Some(stamp) => files.push((path.as_str(), root.join(path), *stamp)),
                None => match std::fs::symlink_metadata(root.join(path)) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => removed.push(path),
                    // A link: `hash-object` would hash what it points to.
                    Ok(_) | Err(_) => return None,
                },
            }
        }
        let mut resident = slot.take(&self.git).await?;
        let absolute: Vec<String> = files
            .iter()
            .map(|(_, abs, _)| abs.to_string_lossy().into_owned())
            .collect();
        let names: Vec<&str> = absolute.iter().map(String::as_str).collect();
        let (ids, root) = match resident.hash_with_base(&names, base).await {
            Ok(done) => done,
            Err(ResidentError::Declined) => {
                slot.put(resident);
                return None;
            }
            Err(ResidentError::Failed(message)) => {
                if files.iter().all(|(_, abs, stamp)| still(abs, stamp)) {
                    slot.failed(Some(resident), &message);
                } else {
                    // A file went while git hashed it, which ends `hash-object`: the next
                    // capture starts it again, and this one lists what changed.
                    close_soon(resident);
                }
                return None;
            }
        };
        // What git read must be the file the stamp is of: one swapped for a link meanwhile
        // would have been followed.
        if !files.iter().all(|(_, abs, stamp)| still(abs, stamp)) {
            slot.put(resident);
            return None;
        }
        // Nor may it be another file put there and back (the stamp is the same inode's): each
        // blob must be what the project holds, read here with no link followed.
        let taken: Vec<(String, String)> = files
            .iter()
            .zip(&ids)
            .map(|((path, _, _), id)| ((*path).to_owned(), id.clone()))
            .collect();
        let (project, max) = (self.git.work_tree.clone(), self.max_file_bytes);
        let held =
            tokio::task::spawn_blocking(move || super::taken::all_held(&project, &taken, max));
        if !held.await.unwrap_or(false) {
            slot.put(resident);
            return None;
        }
        let mut updates: Vec<(&str, PathUpdate)> = files
            .iter()
            .zip(ids)
            .map(|((path, _, stamp), id)| {
                let exec = stamp.executable();
                (*path, PathUpdate::Blob { id, exec })
            })
            .collect();
        updates.extend(
            removed
                .into_iter()
                .map(|p| (p.as_str(), PathUpdate::Removed)),
        );
        match resident.tree_with(&root, &updates).await {
            Ok(tree) => {
                slot.put(resident);
                Some(tree)
            }
            Err(ResidentError::Declined) => {
                slot.put(resident);
                None
            }
            Err(ResidentError::Failed(message)) => {
                slot.failed(Some(resident), &message);
                None
            }
        }
    }
}

/// Whether the file at `abs` is still the regular file `stamp` was read from.
fn still(abs: &Path, stamp: &FileStamp) -> bool {
    std::fs::symlink_metadata(abs).is_ok_and(|meta| stamp.same_file(&FileStamp::of(&meta)))
}

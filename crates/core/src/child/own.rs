//! The controller's own children, told apart from what its sessions leave it: a session host is
//! their child subreaper ([`crate::containment`]), so a process a session's command orphaned
//! (`(sleep 1 &)`, a daemon's double fork) becomes the controller's child, and when it exits, a
//! zombie of the controller's. Nothing waits for such a child, and each zombie keeps its pid
//! (and its place in the sessions' pids count, where the pids controller counts them) until it
//! is reaped: 4,093 were left by one loop of short-lived background jobs, held against every
//! session's forks for the daemon's life.
//!
//! The design decision to know: every child the controller starts itself is recorded here as it
//! is started ([`spawned`], under a read lock), and [`reap_orphans`] (under the write lock, so
//! no start is half done) reaps every exited child that is not recorded, never one whose code
//! waits for it (that wait would fail with `ECHILD`). Records of children gone are dropped by
//! the next reaping; a child the controller started that is recorded nowhere would be reaped
//! from under its waiter, so every start of the controller goes through here: [`super`]'s, the
//! network holder's ([`crate::network`]), and, for the fleet's git, a [`running_own`] scope.

use std::collections::BTreeSet;
use std::io;
use std::sync::{Mutex, Once, PoisonError, RwLock};
use std::time::Duration;

/// Held for reading by every start (and by a [`running_own`] scope), taken for writing by a
/// reaping, which skips its round rather than wait (so starts never queue behind it).
static STARTING: RwLock<()> = RwLock::new(());
/// The pids of the children the controller started and has not seen gone.
static OWN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
/// How often the reaper looks for exited orphans.
const REAP_EVERY: Duration = Duration::from_millis(500);

/// Starts one child with `spawn` and records its pid (`pid`) as the controller's own before any
/// reaping can look at it.
pub(crate) fn spawned<T>(
    spawn: impl FnOnce() -> io::Result<T>,
    pid: impl Fn(&T) -> Option<u32>,
) -> io::Result<T> {
    let _starting = STARTING.read().unwrap_or_else(PoisonError::into_inner);
    let child = spawn()?;
    if let Some(pid) = pid(&child) {
        OWN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pid);
    }
    Ok(child)
}

/// Runs `work`, which starts and waits for children of its own without [`spawned`] (a library's
/// `Command::output`), with no reaping meanwhile.
pub fn running_own<T>(work: impl FnOnce() -> T) -> T {
    let _starting = STARTING.read().unwrap_or_else(PoisonError::into_inner);
    work()
}

/// Starts, once per process, the thread that reaps what the sessions leave this process as
/// their subreaper ([`reap_orphans`] every half second).
pub fn start_reaper() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("orphan-reaper".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(REAP_EVERY);
                    reap_orphans();
                }
            });
    });
}

/// Reaps every exited child of this process that it did not start itself; how many. Skipped
/// (0) while a start is under way.
pub fn reap_orphans() -> usize {
    let Ok(_quiet) = STARTING.try_write() else {
        return 0;
    };
    let children = children();
    let mut own = OWN.lock().unwrap_or_else(PoisonError::into_inner);
    // A recorded child that is no longer ours was reaped by its waiter.
    own.retain(|pid| children.contains(pid));
    let mut reaped = 0;
    for &pid in children.difference(&own) {
        if exited(pid)
            && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
            && let Ok(Some(_)) =
                rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG)
        {
            reaped += 1;
        }
    }
    reaped
}

/// This process's children: each of its threads' (`/proc/self/task/*/children`).
fn children() -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(listed) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                listed
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Whether `pid` has exited and waits to be reaped (a zombie).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphaned_zombie_is_reaped_and_an_own_exited_child_is_left_to_its_waiter() {
        // This test process stands for the controller: a subreaper, whose child `sh` leaves
        // an orphan that exits at once, and an own child that has exited but not been waited.
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
        let own = spawned(
            || std::process::Command::new("true").spawn(),
            |c| Some(c.id()),
        )
        .unwrap();
        let left = std::process::Command::new("sh")
            .args(["-c", "sleep 0.1 & echo $!"])
            .output()
            .unwrap();
        let orphan: u32 = String::from_utf8_lossy(&left.stdout)
            .trim()
            .parse()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !(exited(orphan) && exited(own.id())) {
            assert!(std::time::Instant::now() < deadline, "neither exited");
            std::thread::sleep(Duration::from_millis(20));
        }
        let before = reap_orphans();
        assert!(before >= 1, "the orphan was not reaped");
        assert!(!exited(orphan), "the orphan is still a zombie");
        // The own child is still there for its waiter, which gets its status.
        assert!(exited(own.id()));
        let mut own = own;
        assert!(own.wait().unwrap().success());
        rustix::process::set_child_subreaper(None).unwrap();
    }
}

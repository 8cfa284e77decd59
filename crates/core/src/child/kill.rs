//! Finding and signalling a child's whole process tree.
//!
//! A child may put its own children in process groups of their own (the runtime does, for every
//! command), so signalling the child's group alone would leave them running. On Linux the
//! descendants are found through `/proc` (one snapshot, taken while the leader lives) and
//! signalled group by group; elsewhere only the child's own group is reached. The caller's own
//! process group is never signalled.

use std::collections::{BTreeMap, BTreeSet};

/// The two signals a stop uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Asks the process to exit.
    Term,
    /// Ends it.
    Kill,
}

impl Signal {
    fn raw(self) -> i32 {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }
}

/// Sends `signal` to process group `pgid`, unless it is the caller's own or not a real group.
pub(super) fn signal_group(pgid: i32, signal: Signal) {
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    if pgid <= 1 || pgid == own_group {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory.
    unsafe {
        libc::kill(-pgid, signal.raw());
    }
}

/// A snapshot of a process tree: the root's group, every descendant's group, and the
/// descendants themselves (a group member that changed groups meanwhile).
#[derive(Debug, Default)]
pub(crate) struct Tree {
    groups: BTreeSet<i32>,
    pids: BTreeSet<i32>,
}

impl Tree {
    /// The tree under `root`, which leads its own group.
    pub(crate) fn of(root: i32) -> Tree {
        let pids: BTreeSet<i32> = descendants_of(root).into_iter().collect();
        let mut groups = BTreeSet::from([root]);
        for &pid in &pids {
            // SAFETY: getpgid only reads the process table; a vanished pid returns -1.
            let group = unsafe { libc::getpgid(pid) };
            if group > 0 {
                groups.insert(group);
            }
        }
        Tree { groups, pids }
    }

    /// Adds what a later snapshot found.
    pub(super) fn extend(&mut self, other: Tree) {
        self.groups.extend(other.groups);
        self.pids.extend(other.pids);
    }

    /// The descendants found.
    pub(crate) fn pids(&self) -> Vec<i32> {
        self.pids.iter().copied().collect()
    }

    /// Sends `signal` to every group, then to every descendant.
    pub(crate) fn signal(&self, signal: Signal) {
        for &group in &self.groups {
            signal_group(group, signal);
        }
        for &pid in &self.pids {
            if pid > 1 {
                // SAFETY: as above, for one process.
                unsafe {
                    libc::kill(pid, signal.raw());
                }
            }
        }
    }
}

/// Every live descendant of `root` (not `root` itself), from one snapshot of `/proc`.
#[cfg(target_os = "linux")]
pub(crate) fn descendants_of(root: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = parent_from_stat(&stat) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if !out.contains(&child) {
                out.push(child);
                queue.push(child);
            }
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn descendants_of(_root: i32) -> Vec<i32> {
    Vec::new()
}

/// The parent pid in `/proc/<pid>/stat`: the field after the state, which follows the last `)`
/// (the command name may itself contain spaces and parentheses).
pub fn parent_from_stat(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pid_survives_odd_command_names() {
        assert_eq!(parent_from_stat("42 (a b) c)) S 7 42 42 0"), Some(7));
        assert_eq!(parent_from_stat("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_grandchild_in_its_own_group_is_killed() {
        use std::os::unix::process::CommandExt;
        // sh (own group) starts sleep in yet another group, prints its pid, then waits.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 60 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let root = i32::try_from(child.id()).unwrap();
        assert!(descendants_of(root).contains(&grandchild));
        Tree::of(root).signal(Signal::Kill);
        child.wait().unwrap();
        assert!(
            super::super::tests::gone(grandchild),
            "the grandchild survived"
        );
    }
}

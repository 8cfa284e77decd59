//! Whether a process is one of a session's: the daemon's surfaces (the control socket, the
//! dashboard, MCP over HTTP) refuse what a session's processes send them, a wall of their own
//! that holds with the sandbox off.
//!
//! The design decision to know: a process is a session's when one of its cgroups (any
//! hierarchy, at any level of the path) is a session group, `intendant-<session>-<pid>`
//! ([`crate::containment`], whoever's session it is), or when it descends from this process:
//! the daemon is the child subreaper of everything its sessions start (it becomes one with its
//! first session, [`crate::containment`]), so a double-forked or `setsid` process stays below
//! it even where no cgroup could be made. A process that is no subreaper runs no session, and
//! its children are not counted. The legitimate clients (`intendant ctl`, `intendant mcp`, a
//! browser, a script) are started by the user, never by the daemon, and this process itself (a
//! frontend in the daemon's process) is not a session's. Whatever cannot be read is an error,
//! for the caller to refuse.

use std::io;
use std::path::{Path, PathBuf};

use crate::child::kill::{descendants_of, parent_from_stat};
use crate::containment::session_group_owner;

/// Most ancestors walked before giving up (a pid chain is far shorter; this bounds a race with
/// a changing process table).
const MAX_ANCESTORS: usize = 4096;
/// Most cgroup directories looked at when resolving a cgroup id.
const MAX_GROUPS: usize = 100_000;

/// Why a process counts as a session's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionProcess {
    /// It is in a session's cgroup (the cgroup path).
    Group(String),
    /// It descends from this process, which reaps a session's processes as child subreaper.
    Descendant,
}

impl std::fmt::Display for SessionProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionProcess::Group(path) => write!(f, "it is in the session cgroup {path}"),
            SessionProcess::Descendant => f.write_str("it was started by a session of this daemon"),
        }
    }
}

/// Whether process `pid` is a session's (`None`: it is not); an error when its `/proc` entry
/// cannot be read (it is gone, or belongs to a namespace we do not see).
pub fn session_process(pid: u32) -> io::Result<Option<SessionProcess>> {
    let own = std::process::id();
    if pid == own {
        return Ok(None);
    }
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    if let Some(path) = session_group_in(&cgroups) {
        return Ok(Some(SessionProcess::Group(path)));
    }
    if !reaps_sessions() {
        return Ok(None);
    }
    Ok(descends_from(pid, own)?.then_some(SessionProcess::Descendant))
}

/// Whether this process is a child subreaper, as every session host makes itself.
#[cfg(target_os = "linux")]
fn reaps_sessions() -> bool {
    rustix::process::child_subreaper().is_ok_and(|reaper| reaper.is_some())
}

/// No subreaper off Linux.
#[cfg(not(target_os = "linux"))]
fn reaps_sessions() -> bool {
    false
}

/// The first cgroup path of a `/proc/<pid>/cgroup` text that is, or lies inside, a session
/// group.
pub fn session_group_in(cgroup_file: &str) -> Option<String> {
    cgroup_file.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/')
            .any(|part| session_group_owner(part).is_some())
            .then(|| path.to_owned())
    })
}

/// Whether `ancestor` is a (strict) ancestor of `pid`, walking the parent pids in `/proc`.
pub fn descends_from(pid: u32, ancestor: u32) -> io::Result<bool> {
    let mut current = pid;
    for _ in 0..MAX_ANCESTORS {
        let stat = std::fs::read_to_string(format!("/proc/{current}/stat"))?;
        let parent = parent_from_stat(&stat)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| io::Error::other(format!("/proc/{current}/stat has no parent pid")))?;
        if parent == ancestor {
            return Ok(true);
        }
        if parent <= 1 {
            return Ok(false);
        }
        current = parent;
    }
    Err(io::Error::other(format!(
        "more than {MAX_ANCESTORS} ancestors above pid {pid}"
    )))
}

/// Whether the cgroup v2 group of id `id` (the inode number of its directory, as
/// `INET_DIAG_CGROUP_ID` reports a socket's) is a session group or lies inside one. `None` when
/// no cgroup v2 hierarchy is mounted here.
pub fn is_session_group_id(id: u64) -> Option<bool> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let roots = cgroup2_mounts(&mounts);
    if roots.is_empty() {
        return None;
    }
    let mut budget = MAX_GROUPS;
    Some(
        roots
            .iter()
            .any(|root| group_with_id(root, id, false, &mut budget)),
    )
}

/// Whether a directory under `dir` (itself included) has inode `id` and is a session group or
/// inside one (`inside`: `dir` is already inside one).
fn group_with_id(dir: &Path, id: u64, inside: bool, budget: &mut usize) -> bool {
    use std::os::unix::fs::MetadataExt;
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let inside = inside
        || dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| session_group_owner(n).is_some());
    if inside && std::fs::metadata(dir).is_ok_and(|m| m.ino() == id) {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry.file_type().is_ok_and(|t| t.is_dir())
            && group_with_id(&entry.path(), id, inside, budget)
    })
}

/// The mount points of cgroup v2 hierarchies in a `/proc/self/mountinfo` text.
fn cgroup2_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .collect()
}

/// A descendant of this process that holds the socket of inode `inode` open, from its
/// `/proc/<pid>/fd` (a descendant whose descriptors cannot be read is not found).
pub fn descendant_holding_socket(inode: u64) -> Option<u32> {
    if !reaps_sessions() {
        return None;
    }
    let own = i32::try_from(std::process::id()).ok()?;
    let wanted = format!("socket:[{inode}]");
    descendants_of(own).into_iter().find_map(|pid| {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()))
            .then(|| u32::try_from(pid).ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_groups_are_found_at_any_level_of_any_hierarchy() {
        let v2 = "0::/user.slice/intendant-20261201T101500Z-1a2b3c-4242\n";
        assert_eq!(
            session_group_in(v2).as_deref(),
            Some("/user.slice/intendant-20261201T101500Z-1a2b3c-4242")
        );
        let nested = "8:pids:/intendant-s-1/made-by-the-command\n0::/\n";
        assert!(session_group_in(nested).is_some());
        for other in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/intendant-nopid\n",
            "0::/intendant--42\n",
            "0::/intendant-s-4x2\n",
            "4:memory:/process_api/0c5b\n",
            "",
        ] {
            assert_eq!(session_group_in(other), None, "{other}");
        }
    }

    #[test]
    fn cgroup2_mounts_are_read_from_mountinfo() {
        let mounts = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
";
        assert_eq!(
            cgroup2_mounts(mounts),
            [PathBuf::from("/sys/fs/cgroup/unified")]
        );
        assert!(cgroup2_mounts("").is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_descends_from_this_process_and_this_process_is_no_session() {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let own = std::process::id();
        assert!(descends_from(child.id(), own).unwrap());
        assert!(session_process(child.id()).unwrap().is_some());
        assert_eq!(session_process(own).unwrap(), None, "the daemon itself");
        let parent = std::os::unix::process::parent_id();
        assert!(
            !descends_from(parent, own).unwrap(),
            "an ancestor is not below"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            session_process(child.id()).is_err(),
            "a gone pid is an error"
        );
    }
}

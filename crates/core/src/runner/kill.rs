//! Killing a timed-out runtime together with everything it started.
//!
//! The runtime puts each command in a process group of its own, so signalling the runtime's
//! group alone would leave a runaway command running after the controller gave up on it. On
//! Linux the descendants are found through `/proc` (snapshot first, then killed group by group);
//! elsewhere only the runtime's own group is signalled.

use std::collections::{BTreeMap, BTreeSet};

/// Kills process `root`'s group, then every descendant's group and the descendants themselves.
/// Never signals the caller's own process group.
pub(super) fn kill_tree(root: i32) {
    let descendants = descendants_of(root);
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    let mut groups = BTreeSet::new();
    groups.insert(root);
    for &pid in &descendants {
        // SAFETY: getpgid only reads the process table; a vanished pid returns -1.
        let group = unsafe { libc::getpgid(pid) };
        if group > 0 {
            groups.insert(group);
        }
    }
    groups.remove(&own_group);
    for group in groups {
        // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    for pid in descendants {
        // SAFETY: as above, for one process (a group member that changed groups meanwhile).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Every live descendant of `root` (not `root` itself), from one snapshot of `/proc`.
#[cfg(target_os = "linux")]
fn descendants_of(root: i32) -> Vec<i32> {
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
fn descendants_of(_root: i32) -> Vec<i32> {
    Vec::new()
}

/// The parent pid in `/proc/<pid>/stat`: the field after the state, which follows the last `)`
/// (the command name may itself contain spaces and parentheses).
fn parent_from_stat(stat: &str) -> Option<i32> {
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
        kill_tree(root);
        child.wait().unwrap();
        // The grandchild is reparented and reaped by init; wait until it is gone.
        let gone = (0..200).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            if alive {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            !alive
        });
        assert!(gone, "the grandchild survived");
    }
}

//! What a session's processes use now, read from its cgroups ([`usage`]): the counters the
//! kernel keeps for each group, so a listing reads a few small files per live session and walks
//! no process.

use std::path::{Path, PathBuf};

use intendant_protocol::daemon::SessionUsage;

use super::{keyed_count, read_count};

/// What the processes in `dirs`, one session's groups ([`super::SessionContainment::group_dirs`]),
/// use now; `None` when none of them can be read (the session ended and its groups went, or it
/// has none). Processes come from a `pids` group (`pids.current`, threads counted, as
/// `pids_max` counts them), else from the processes listed in the first group; memory from a
/// memory group (v2's `memory.current`, v1's `memory.usage_in_bytes`) less the page cache the
/// kernel counts inactive there (`memory.stat`'s `inactive_file`, v1's `total_inactive_file`),
/// as `docker stats` counts it: what the session's processes read stays charged to it after
/// they are gone (a waiting agent CLI worker let go left up to 125 MiB, `idle_workers`); CPU
/// time from v2's `cpu.stat` (kept in every v2 group) or v1's `cpuacct.usage`.
pub fn usage(dirs: &[PathBuf]) -> Option<SessionUsage> {
    let processes = dirs
        .iter()
        .find_map(|dir| read_count(&dir.join("pids.current")))
        .or_else(|| listed_processes(dirs.first()?))?;
    let memory_bytes = dirs.iter().find_map(|dir| {
        let (charged, inactive) = match read_count(&dir.join("memory.current")) {
            Some(charged) => (charged, "inactive_file"),
            None => (
                read_count(&dir.join("memory.usage_in_bytes"))?,
                "total_inactive_file",
            ),
        };
        let cache = keyed_count(&dir.join("memory.stat"), inactive).unwrap_or(0);
        Some(charged.saturating_sub(cache))
    });
    let cpu_ms = dirs.iter().find_map(|dir| {
        // v1's `cpu.stat` has no `usage_usec`.
        keyed_count(&dir.join("cpu.stat"), "usage_usec")
            .map(|micros| micros / 1000)
            .or_else(|| read_count(&dir.join("cpuacct.usage")).map(|nanos| nanos / 1_000_000))
    });
    Some(SessionUsage {
        processes,
        memory_bytes,
        cpu_ms,
    })
}

/// How many processes the group `dir` lists; `None` when it cannot be read.
fn listed_processes(dir: &Path) -> Option<u64> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    Some(procs.lines().filter(|line| !line.trim().is_empty()).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_figure_comes_from_the_first_group_that_keeps_it() {
        let root = tempfile::tempdir().unwrap();
        let (v2, pids, cpu) = (
            root.path().join("unified"),
            root.path().join("pids"),
            root.path().join("cpu"),
        );
        for dir in [&v2, &pids, &cpu] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // A v2 group without controllers: its processes listed, its CPU kept.
        std::fs::write(v2.join("cgroup.procs"), "10\n11\n").unwrap();
        std::fs::write(
            v2.join("cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
        )
        .unwrap();
        // v1's pids counts threads too; v1's cpu keeps no usage.
        std::fs::write(pids.join("pids.current"), "7\n").unwrap();
        std::fs::write(cpu.join("cpu.stat"), "nr_periods 0\nnr_throttled 0\n").unwrap();
        let dirs = [v2.clone(), pids.clone(), cpu.clone()];
        let got = usage(&dirs).unwrap();
        assert_eq!(
            got,
            SessionUsage {
                processes: 7,
                memory_bytes: None,
                cpu_ms: Some(2500),
            }
        );
        // Without a pids group, the listed processes; a v1 memory group's charge, less the
        // page cache it counts inactive.
        std::fs::write(cpu.join("memory.usage_in_bytes"), "4096\n").unwrap();
        let got = usage(&[v2.clone(), cpu.clone()]).unwrap();
        assert_eq!((got.processes, got.memory_bytes), (2, Some(4096)));
        std::fs::write(
            cpu.join("memory.stat"),
            "cache 2048\ninactive_file 1024\ntotal_inactive_file 1024\n",
        )
        .unwrap();
        let got = usage(&[v2.clone(), cpu.clone()]).unwrap();
        assert_eq!(got.memory_bytes, Some(3072));
        // v2's keys: `inactive_file` beside `memory.current`.
        std::fs::write(v2.join("memory.current"), "10000\n").unwrap();
        std::fs::write(v2.join("memory.stat"), "anon 1000\ninactive_file 4000\n").unwrap();
        assert_eq!(
            usage(std::slice::from_ref(&v2)).unwrap().memory_bytes,
            Some(6000)
        );
        std::fs::remove_file(v2.join("memory.current")).unwrap();
        // v1 only, with cpuacct beside cpu.
        std::fs::write(cpu.join("cpuacct.usage"), "3000000000\n").unwrap();
        assert_eq!(usage(&[pids, cpu]).unwrap().cpu_ms, Some(3000));
        // Groups that went: nothing to say.
        assert_eq!(usage(&[root.path().join("gone")]), None);
        assert_eq!(usage(&[]), None);
    }
}

//! When a session's bounds stopped its processes: the kernel's event counters of its groups,
//! read after each batch, so the model and the human are told which bound a command ran into
//! instead of being left with `Resource temporarily unavailable` or `Killed`.

use std::path::{Path, PathBuf};

use super::all_sessions::SESSIONS_GROUP_PREFIX;
use super::{keyed_count, read_count};

/// How often the session's bounds refused or killed its processes so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitHits {
    /// Forks of the session's processes refused by a pids bound (its own, or the sessions'
    /// together where the kernel counts those per group: `pids.events.local`, v1's
    /// `pids.events`).
    pub forks_refused: u64,
    /// The session's processes the kernel killed for a memory bound (where a memory group
    /// holds them).
    pub oom_kills: u64,
}

/// Where a session's groups keep the counters [`LimitHits`] reads: found once, when its
/// placement is made, so a batch's end reads one or two small files.
#[derive(Debug, Clone, Default)]
pub(super) struct Counters {
    /// The file counting refused forks and its key.
    forks: Option<(PathBuf, &'static str)>,
    /// The file counting the kernel's memory kills and its key.
    kills: Option<(PathBuf, &'static str)>,
}

impl Counters {
    /// The counter files of the session's groups `dirs`: per group, the local one where the
    /// kernel keeps it, else the hierarchical one (a v1 group's are its own).
    pub(super) fn find(dirs: &[PathBuf]) -> Counters {
        let first = |candidates: &[(&str, &'static str)]| {
            dirs.iter().find_map(|dir| {
                candidates.iter().find_map(|(file, key)| {
                    let path = dir.join(file);
                    path.exists().then_some((path, *key))
                })
            })
        };
        Counters {
            forks: first(&[("pids.events.local", "max"), ("pids.events", "max")]),
            kills: first(&[
                ("memory.events.local", "oom_kill"),
                ("memory.events", "oom_kill"),
                ("memory.oom_control", "oom_kill"),
            ]),
        }
    }

    /// The counters now (0 where a group keeps none).
    pub(super) fn read(&self) -> LimitHits {
        let count = |counter: &Option<(PathBuf, &str)>| {
            counter
                .as_ref()
                .and_then(|(file, key)| keyed_count(file, key))
                .unwrap_or(0)
        };
        LimitHits {
            forks_refused: count(&self.forks),
            oom_kills: count(&self.kills),
        }
    }
}

impl LimitHits {
    /// What the session's processes ran into since `earlier`, one note per bound, naming the
    /// bounds of `dirs` and what sets them.
    pub(super) fn notes_since(&self, earlier: &LimitHits, dirs: &[PathBuf]) -> Vec<String> {
        let mut notes = Vec::new();
        let forks = self.forks_refused.saturating_sub(earlier.forks_refused);
        if forks > 0 {
            let bound = said(
                bounds(dirs, &["pids.max"]),
                "have",
                |n| format!("{n} processes and threads at once"),
                ("[limits] pids_max", "[daemon] sessions_pids_max"),
            );
            notes.push(format!(
                "limits: the kernel refused {forks} {} of this session's processes: {bound}; \
                 end the background processes it no longer needs, or ask the human to raise \
                 the bound",
                if forks == 1 { "fork" } else { "forks" }
            ));
        }
        let kills = self.oom_kills.saturating_sub(earlier.oom_kills);
        let memory = bounds(dirs, MEMORY_BOUNDS);
        if kills > 0 && memory == (None, None) {
            // A group counts every kill of its processes, the machine's too (cgroup v2).
            notes.push(unbounded_kill_note(kills, bound_above(dirs)));
        } else if kills > 0 {
            let bound = said(
                memory,
                "hold",
                |bytes| format!("{} MiB", bytes / (1024 * 1024)),
                (
                    "[limits] memory_max_mib",
                    "[daemon] sessions_memory_max_mib",
                ),
            );
            notes.push(format!(
                "limits: the kernel killed {kills} of this session's processes for memory \
                 (`Killed`, exit 137): {bound}; use less memory at once, or ask the human to \
                 raise the bound"
            ));
        }
        notes
    }
}

/// The bounds `(own, together)`, each an `amount` the session (or the daemon's sessions
/// together) may `verb`, with the setting that sets it.
fn said(
    (own, together): (Option<u64>, Option<u64>),
    verb: &str,
    amount: impl Fn(u64) -> String,
    (own_key, together_key): (&str, &str),
) -> String {
    let own = own.map(|n| format!("the session may {verb} at most {} (`{own_key}`)", amount(n)));
    match (own, together) {
        (Some(own), Some(n)) => format!(
            "{own}, and the daemon's sessions together {} (`{together_key}`)",
            amount(n)
        ),
        (Some(own), None) => own,
        (None, Some(n)) => format!(
            "the daemon's sessions together may {verb} at most {} (`{together_key}`)",
            amount(n)
        ),
        (None, None) => "a bound of its cgroups was reached".to_owned(),
    }
}

/// The files a memory group's bound is in (v2's, v1's).
const MEMORY_BOUNDS: &[&str] = &["memory.max", "memory.limit_in_bytes"];

/// What the model is told when the out-of-memory killer killed `kills` of the session's
/// processes (its groups counted them) while no bound of the session's own, nor the daemon's
/// sessions' together, was set: the group `above` (a systemd unit's `MemoryMax`, a
/// container's limit) with its bound in bytes, else the machine, ran out.
fn unbounded_kill_note(kills: u64, above: Option<(PathBuf, u64)>) -> String {
    let ran_out = match above {
        Some((dir, bytes)) => format!(
            "the group {} above the controller (a service's `MemoryMax`, a container's limit), \
             which may hold at most {} MiB, ran out of memory",
            dir.display(),
            bytes / (1024 * 1024)
        ),
        None => "the machine ran out of memory".to_owned(),
    };
    format!(
        "limits: the kernel's out-of-memory killer killed {kills} of this session's processes \
         (`Killed`, exit 137), which had no memory bound of their own: {ran_out} (a session's \
         processes go before the controller's); use less memory at once, or ask the human to \
         set `[limits] memory_max_mib`, which bounds this session's own"
    )
}

/// The nearest group above the session's memory group (among `dirs`) with a memory bound, and
/// the bound in bytes.
fn bound_above(dirs: &[PathBuf]) -> Option<(PathBuf, u64)> {
    let group = dirs
        .iter()
        .find(|dir| MEMORY_BOUNDS.iter().any(|file| dir.join(file).exists()))?;
    let mut at = group.parent();
    while let Some(dir) = at {
        let file = MEMORY_BOUNDS
            .iter()
            .map(|f| dir.join(f))
            .find(|f| f.exists())?;
        if let Some(bytes) = read_count(&file).filter(|n| *n < 1 << 62) {
            return Some((dir.to_path_buf(), bytes));
        }
        at = dir.parent();
    }
    None
}

/// How many processes the kernel's out-of-memory killer has killed on this machine since it
/// started (`/proc/vmstat`'s `oom_kill`, Linux 4.13+; a cgroup's kills count too); `None`
/// where the kernel does not say.
pub fn machine_oom_kills() -> Option<u64> {
    keyed_count(Path::new("/proc/vmstat"), "oom_kill")
}

/// What the model is told when a command of its batch was `Killed` while the machine's
/// out-of-memory killer killed `kills` processes, and no group of the session's was the one
/// that ran out (a session without a memory bound of its own).
pub fn machine_kill_note(kills: u64) -> String {
    format!(
        "limits: a command of this batch was `Killed` while the kernel's out-of-memory killer \
         killed {kills} {} on this machine: the machine most likely ran out of memory (a \
         session's processes go before the controller's); use less memory at once, or ask the \
         human to set `[limits] memory_max_mib`, which bounds this session's own",
        if kills == 1 { "process" } else { "processes" }
    )
}

/// The bound in the first of `files` one of the groups `dirs` keeps, and the same of the
/// daemon's sessions' group above it; `None` for one unbounded (`max`, or v1's near-`i64::MAX`
/// for no memory limit) or not there.
fn bounds(dirs: &[PathBuf], files: &[&str]) -> (Option<u64>, Option<u64>) {
    let bound_in = |dir: &Path| {
        files
            .iter()
            .find_map(|file| read_count(&dir.join(file)))
            .filter(|n| *n < 1 << 62)
    };
    let Some(dir) = dirs
        .iter()
        .find(|dir| files.iter().any(|file| dir.join(file).exists()))
    else {
        return (None, None);
    };
    let together = dir
        .parent()
        .filter(|parent| {
            parent
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(SESSIONS_GROUP_PREFIX))
        })
        .and_then(bound_in);
    (bound_in(dir), together)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_fork_and_a_memory_kill_are_each_named_with_their_bounds() {
        let root = tempfile::tempdir().unwrap();
        let sessions = root.path().join("intendant-sessions-7");
        let (pids, memory) = (sessions.join("intendant-s-7"), root.path().join("mem/g"));
        std::fs::create_dir_all(&pids).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::write(sessions.join("pids.max"), "60\n").unwrap();
        std::fs::write(pids.join("pids.max"), "40\n").unwrap();
        std::fs::write(pids.join("pids.events"), "max 0\n").unwrap();
        std::fs::write(memory.join("memory.limit_in_bytes"), "134217728\n").unwrap();
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        let dirs = [pids.clone(), memory.clone()];
        let start = Counters::find(&dirs).read();
        assert_eq!(start, LimitHits::default());
        assert!(start.notes_since(&start, &dirs).is_empty());

        std::fs::write(pids.join("pids.events"), "max 3\n").unwrap();
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        let now = Counters::find(&dirs).read();
        assert_eq!(
            now,
            LimitHits {
                forks_refused: 3,
                oom_kills: 1
            }
        );
        let notes = now.notes_since(&start, &dirs);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("limits: the kernel refused 3 forks of this session's"),
            "{notes:?}"
        );
        assert!(
            notes[0].contains("at most 40 processes") && notes[0].contains("sessions together 60"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("killed 1 of this session's processes for memory")
                && notes[1].contains("at most 128 MiB")
                && !notes[1].contains("together"),
            "{notes:?}"
        );
        // Told once: the next batch's reading is compared with this one.
        assert!(now.notes_since(&now, &dirs).is_empty());

        // v2's local counter is preferred to the hierarchical one; no bound is said as such.
        std::fs::write(pids.join("pids.events.local"), "max 5\n").unwrap();
        std::fs::write(pids.join("pids.max"), "max\n").unwrap();
        let later = Counters::find(&dirs).read();
        assert_eq!(later.forks_refused, 5);
        let notes = later.notes_since(&now, &dirs);
        assert!(
            notes[0].contains("refused 2 forks")
                && notes[0].contains("the daemon's sessions together may have at most 60"),
            "{notes:?}"
        );

        // A kill counted in a group with no bound (v2 counts the machine's kills too): the
        // machine ran out, or the nearest group above with a bound (a unit's `MemoryMax`).
        let unit = root.path().join("unit");
        let unbounded = unit.join("intendant-sessions-8/intendant-s-8");
        std::fs::create_dir_all(&unbounded).unwrap();
        for dir in [&unbounded, &unit.join("intendant-sessions-8")] {
            std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        }
        std::fs::write(unbounded.join("memory.events"), "oom 0\noom_kill 0\n").unwrap();
        let alone = [unbounded.clone()];
        let before = Counters::find(&alone).read();
        std::fs::write(unbounded.join("memory.events"), "oom 0\noom_kill 2\n").unwrap();
        let after = Counters::find(&alone).read();
        let notes = after.notes_since(&before, &alone);
        assert!(
            notes[0].contains("killed 2 of this session's processes")
                && notes[0].contains("the machine ran out of memory")
                && notes[0].contains("`[limits] memory_max_mib`")
                && !notes[0].contains("a bound of its cgroups"),
            "{notes:?}"
        );
        std::fs::write(unit.join("memory.max"), "536870912\n").unwrap();
        let notes = after.notes_since(&before, &alone);
        assert!(
            notes[0].contains(&format!(
                "the group {} above the controller",
                unit.display()
            )) && notes[0].contains("at most 512 MiB"),
            "{notes:?}"
        );
    }
}

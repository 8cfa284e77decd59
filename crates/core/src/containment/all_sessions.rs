//! The group all of a host's sessions are made in: what bounds them together.
//!
//! Each session's group bounds that session (`[limits] pids_max`, default 4,096); a daemon holds
//! many, and eight at the default could take every pid of a machine whose kernel allows 32,768,
//! leaving the daemon (and everything else there) unable to fork. [`bound_sessions`] makes one
//! group, `intendant-sessions-<pid>`, under the controller's own cgroup in each hierarchy, with
//! `[daemon] sessions_pids_max` (default: half of what the controller itself may have) and
//! `[daemon] sessions_memory_max_mib` (default: none); every session group of the process is
//! made inside it from then on. The kernel counts a group's descendants against its limits, so
//! the sessions together stay within them whatever each may. In the `cpu` hierarchy it weighs
//! as one against the controller, each session's own `cpu` group inside it as one against the
//! others, however many processes each runs.
//!
//! The group is named as a session group is (`intendant-<name>-<pid>`): what is inside it is a
//! session's (the control socket refuses it as such), and a group left behind by a controller
//! that died is removed, with the sessions' groups inside it, by the next one.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::hand_down::{SESSION_CONTROLLERS, hand_down};
use super::{
    CPU_PERIOD_US, Hierarchies, cpu_quota_us, make_group_dir, read_count, remove_stale_groups,
    write_file,
};

/// How the name of a host's sessions' group starts (a session group's prefix, then
/// `sessions-`); the host's pid follows.
pub(super) const SESSIONS_GROUP_PREFIX: &str = "intendant-sessions-";

/// `[daemon] sessions_pids_max`, `sessions_memory_max_mib` and `sessions_cpu_max_percent`:
/// bounds of all of a host's sessions together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionsBound {
    /// Processes and threads of all sessions at once; `None`: half of what the controller may
    /// have (the least of the kernel's limits and its own groups' `pids.max`).
    pub pids_max: Option<u64>,
    /// Memory of all sessions together in MiB; `None`: no bound of its own.
    pub memory_max_mib: Option<u64>,
    /// CPU time of all sessions together, in percent of one CPU (`150`: one and a half CPUs'
    /// worth); `None`: not capped, only weighed as one against the controller.
    pub cpu_max_percent: Option<u32>,
}

/// The group this process makes its sessions in, once [`bound_sessions`] made it.
static SESSIONS_GROUP: Mutex<Option<SessionsGroup>> = Mutex::new(None);

/// The directories of the sessions' group in each hierarchy.
#[derive(Debug)]
struct SessionsGroup {
    /// The controller's own groups, the sessions' group's parents (read once, at its making).
    own: Hierarchies,
    /// Where session groups are made: the sessions' group where it could be made, else the
    /// controller's own group.
    parents: Hierarchies,
    /// The directories made (removed again by [`release_sessions_bound`]).
    made: Vec<PathBuf>,
    /// Whether its v1 `memory` group has a bound: every session then joins that hierarchy,
    /// whether or not it has a memory limit of its own.
    v1_memory_bound: bool,
    /// Why the controller's own v2 group could not hand its controllers down, if it could not.
    v2_refused: Option<String>,
}

/// Where a session's groups are made, as [`session_parents`] finds it.
pub(super) struct SessionParents {
    /// The parents of its groups.
    pub dirs: Hierarchies,
    /// The controller's own groups (the same as `dirs` without a sessions' group).
    pub own: Hierarchies,
    /// Whether the session must join the v1 `memory` hierarchy for the sessions' bound to
    /// count it.
    pub join_memory: bool,
}

/// Where this process makes a session's groups: inside the sessions' group once
/// [`bound_sessions`] made it, else in the controller's own groups (read from `/proc/self`).
pub(super) fn session_parents() -> SessionParents {
    let group = SESSIONS_GROUP
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match &*group {
        Some(group) => SessionParents {
            dirs: group.parents.clone(),
            own: group.own.clone(),
            join_memory: group.v1_memory_bound,
        },
        None => {
            let own = super::own_hierarchies();
            SessionParents {
                dirs: own.clone(),
                own,
                join_memory: false,
            }
        }
    }
}

/// Makes the group every later session of this process is made in, bounded by `bound`, or
/// puts `bound` in force on the one already made (a reload). Never fails: what could not be
/// bounded is said in the returned notes, one line each.
pub fn bound_sessions(bound: &SessionsBound) -> Vec<String> {
    let mut group = SESSIONS_GROUP
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let made = group.get_or_insert_with(|| make(super::own_hierarchies()));
    let (notes, v1_memory_bound) = apply(made, bound);
    made.v1_memory_bound = v1_memory_bound;
    notes
}

/// Removes the sessions' group (once its sessions have ended, as a daemon's shutdown leaves
/// them); later sessions are made in the controller's own groups again. A group still holding a
/// process stays, for the next controller to remove.
pub fn release_sessions_bound() {
    let mut group = SESSIONS_GROUP
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(made) = group.take() {
        for dir in made.made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The processes and threads all sessions have now, and the most they may have together
/// (`None`: unbounded), from the sessions' group; `None` before [`bound_sessions`] or where no
/// pids controller counts them.
pub fn sessions_processes() -> Option<(u64, Option<u64>)> {
    let group = SESSIONS_GROUP
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    group.as_ref()?.made.iter().find_map(|dir| {
        let now = read_count(&dir.join("pids.current"))?;
        Some((now, read_count(&dir.join("pids.max"))))
    })
}

/// Makes the sessions' group under each of the controller's own groups `own` (groups left by a
/// controller that died removed first).
fn make(own: Hierarchies) -> SessionsGroup {
    let name = format!("{SESSIONS_GROUP_PREFIX}{}", std::process::id());
    let mut made = Vec::new();
    let mut v2_refused = None;
    let mut under = |parent: &Option<PathBuf>, v2: bool| {
        let parent = parent.as_deref()?;
        remove_stale_groups(parent);
        if v2 {
            v2_refused = hand_down(parent, &SESSION_CONTROLLERS).err();
        }
        let dir = make_group_dir(parent, &name).ok()?;
        made.push(dir.clone());
        Some(dir)
    };
    let parents = Hierarchies {
        v2: under(&own.v2, true).or_else(|| own.v2.clone()),
        v1_pids: under(&own.v1_pids, false).or_else(|| own.v1_pids.clone()),
        v1_memory: under(&own.v1_memory, false).or_else(|| own.v1_memory.clone()),
        v1_cpu: under(&own.v1_cpu, false).or_else(|| own.v1_cpu.clone()),
    };
    SessionsGroup {
        own,
        parents,
        made,
        v1_memory_bound: false,
        v2_refused,
    }
}

/// Writes `bound`'s limits into the sessions' group, in v2 where it has the controller and in
/// its v1 hierarchy: a note for each limit no group could take, and whether a memory bound is
/// in its v1 group.
fn apply(group: &SessionsGroup, bound: &SessionsBound) -> (Vec<String>, bool) {
    let made = |dir: &Option<PathBuf>| dir.clone().filter(|d| group.made.contains(d));
    let write = |dir: Option<PathBuf>, file: &str, value: &str| {
        dir.is_some_and(|dir| write_file(&dir.join(file), value).is_ok())
    };
    let (v2, v1_pids, v1_memory, v1_cpu) = (
        made(&group.parents.v2),
        made(&group.parents.v1_pids),
        made(&group.parents.v1_memory),
        made(&group.parents.v1_cpu),
    );
    let mut notes = Vec::new();
    let pids_max = bound
        .pids_max
        .unwrap_or_else(|| default_sessions_pids_max(&group.own))
        .to_string();
    // Both written where both exist (`|`, not `||`): either bounds the sessions.
    if !(write(v2.clone(), "pids.max", &pids_max) | write(v1_pids, "pids.max", &pids_max)) {
        notes.push(format!(
            "no pids controller for the sessions together: [daemon] sessions_pids_max = \
             {pids_max} is not applied (each session keeps its own [limits] pids_max)"
        ));
    }
    // No bound of its own lifts one a reload finds written before.
    let (v2_memory, v1_memory_value) = match bound.memory_max_mib {
        Some(mib) => {
            let bytes = mib.saturating_mul(1024 * 1024).to_string();
            (bytes.clone(), bytes)
        }
        None => ("max".to_owned(), "-1".to_owned()),
    };
    let in_v1 = write(v1_memory, "memory.limit_in_bytes", &v1_memory_value);
    let memory = write(v2.clone(), "memory.max", &v2_memory) | in_v1;
    if bound.memory_max_mib.is_some() && !memory {
        notes.push(
            "no memory controller for the sessions together: [daemon] sessions_memory_max_mib \
             is not applied"
                .to_owned(),
        );
    }
    // The same for the CPU: none lifts a cap written before.
    let (v2_cpu, v1_quota) = match bound.cpu_max_percent {
        Some(percent) => {
            let quota = cpu_quota_us(percent);
            (format!("{quota} {CPU_PERIOD_US}"), quota.to_string())
        }
        None => (format!("max {CPU_PERIOD_US}"), "-1".to_owned()),
    };
    let v1_cpu_capped = v1_cpu.map(|dir| {
        write_file(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())
            .and_then(|()| write_file(&dir.join("cpu.cfs_quota_us"), &v1_quota))
    });
    let in_v2 = write(v2, "cpu.max", &v2_cpu);
    match (bound.cpu_max_percent, in_v2, v1_cpu_capped) {
        (None, _, _) | (Some(_), true, _) | (Some(_), false, Some(Ok(()))) => {}
        (Some(percent), false, Some(Err(e))) => notes.push(format!(
            "[daemon] sessions_cpu_max_percent = {percent} is not applied: {e} (cgroup v1 \
             refuses a cap below one a running session's [limits] cpu_max_percent set; `ctl \
             reload` once it ended)"
        )),
        (Some(_), false, None) => notes.push(
            "no cpu controller for the sessions together: [daemon] sessions_cpu_max_percent \
             is not applied"
                .to_owned(),
        ),
    }
    if !notes.is_empty() {
        notes.extend(group.v2_refused.clone());
    }
    (notes, in_v1 && bound.memory_max_mib.is_some())
}

/// The default of `[daemon] sessions_pids_max`: half of what the controller may have, the least
/// of the kernel's `pid_max` and `threads-max` and the `pids.max` of every group it is in (a
/// systemd unit's `TasksMax`), so the other half stays for the controller and the rest of the
/// machine.
fn default_sessions_pids_max(own: &Hierarchies) -> u64 {
    let kernel = ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .into_iter()
        .filter_map(|file| read_count(Path::new(file)))
        .min()
        .unwrap_or(32_768);
    let groups = [own.v2.as_deref(), own.v1_pids.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(least_pids_max)
        .min();
    (groups.map_or(kernel, |g| g.min(kernel)) / 2).max(1)
}

/// The least `pids.max` of `dir` and the groups above it (a hierarchy's root has none).
fn least_pids_max(dir: &Path) -> Option<u64> {
    let mut least = None;
    let mut at = Some(dir);
    while let Some(dir) = at {
        let file = dir.join("pids.max");
        if !file.exists() {
            break;
        }
        if let Some(n) = read_count(&file) {
            least = Some(least.map_or(n, |l: u64| l.min(n)));
        }
        at = dir.parent();
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containment::{LimitsConfig, SessionContainment};

    #[test]
    fn the_default_is_half_the_least_limit_above_the_controller() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("unit/service");
        std::fs::create_dir_all(&own).unwrap();
        // The hierarchy's root has no `pids.max`; the walk stops there.
        std::fs::write(root.path().join("unit/pids.max"), "500\n").unwrap();
        std::fs::write(own.join("pids.max"), "max\n").unwrap();
        assert_eq!(least_pids_max(&own), Some(500));
        let hierarchies = Hierarchies {
            v1_pids: Some(own.clone()),
            ..Hierarchies::default()
        };
        assert_eq!(default_sessions_pids_max(&hierarchies), 250);
        std::fs::write(own.join("pids.max"), "max\n").unwrap();
        std::fs::write(root.path().join("unit/pids.max"), "max\n").unwrap();
        assert_eq!(least_pids_max(&own), None);
        let kernel = read_count(Path::new("/proc/sys/kernel/pid_max")).unwrap_or(32_768);
        assert!(default_sessions_pids_max(&hierarchies) <= kernel / 2);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sessions_are_made_in_one_bounded_group_that_a_dead_controllers_leftovers_make_way_for() {
        let own = crate::containment::own_hierarchies();
        let Some(pids) = own
            .v1_pids
            .clone()
            .or_else(|| own.v2.clone())
            .filter(|dir| std::fs::create_dir(dir.join("intendant-probe-4000000")).is_ok())
        else {
            let why = "no writable cgroup here (it needs root)";
            assert!(std::env::var_os("CI").is_none(), "{why}; CI is set");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("note: skipping: {why}");
            }
            return;
        };
        // Left by a controller that died (no process 4,000,000 runs: above any pid_max): a
        // sessions' group with a session's group inside.
        let stale = pids.join("intendant-sessions-4000000");
        std::fs::create_dir_all(stale.join("intendant-s-4000000")).unwrap();
        let notes = bound_sessions(&SessionsBound {
            pids_max: Some(50),
            memory_max_mib: None,
            cpu_max_percent: Some(50),
        });
        assert!(!pids.join("intendant-probe-4000000").exists(), "{notes:?}");
        assert!(!stale.exists(), "the dead controller's group is removed");
        let group = pids.join(format!("intendant-sessions-{}", std::process::id()));
        let limit = || std::fs::read_to_string(group.join("pids.max")).unwrap_or_default();
        if own.v1_pids.is_some() || group.join("pids.max").exists() {
            assert_eq!(limit().trim(), "50", "{notes:?}");
        }
        // A controller that died after the daemon started left a group beside the daemon's: the
        // next session's start removes it.
        let later = pids.join("intendant-late-4000000");
        std::fs::create_dir(&later).unwrap();
        // A session's own cap above the sessions' is held to theirs (cgroup v1 refuses more).
        let mut session = SessionContainment::create(
            "bounded",
            &LimitsConfig {
                cpu_max_percent: Some(200),
                ..LimitsConfig::default()
            },
        );
        assert!(!later.exists(), "a later leftover is removed at a start");
        let quota = |dir: &Path| {
            std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).map(|q| q.trim().to_owned())
        };
        if let Some(cpu) = &own.v1_cpu {
            let sessions_cpu = cpu.join(format!("intendant-sessions-{}", std::process::id()));
            assert_eq!(quota(&sessions_cpu).unwrap(), "50000", "{notes:?}");
            let mine = session
                .group_dirs()
                .into_iter()
                .find(|d| d.parent() == Some(sessions_cpu.as_path()))
                .unwrap();
            assert_eq!(quota(&mine).unwrap(), "50000");
        }
        let dirs = session.group_dirs();
        assert!(
            dirs.iter().any(|d| d.parent() == Some(group.as_path())),
            "{dirs:?} inside {}",
            group.display()
        );
        // A reload puts a new bound in force on the same group.
        bound_sessions(&SessionsBound {
            pids_max: Some(70),
            memory_max_mib: None,
            cpu_max_percent: None,
        });
        if own.v1_pids.is_some() || group.join("pids.max").exists() {
            assert_eq!(limit().trim(), "70");
        }
        if let Some(cpu) = &own.v1_cpu {
            let sessions_cpu = cpu.join(format!("intendant-sessions-{}", std::process::id()));
            assert_eq!(quota(&sessions_cpu).unwrap(), "-1", "the cap lifted");
        }
        session.end();
        assert!(dirs.iter().all(|d| !d.exists()));
        release_sessions_bound();
        assert!(!group.exists(), "removed once released");
        let mut after = SessionContainment::create("unbounded", &LimitsConfig::default());
        assert!(
            after.group_dirs().iter().all(|d| d
                .parent()
                .is_some_and(|p| !p.ends_with(group.file_name().unwrap_or_default()))),
            "made in the controller's own groups again"
        );
        after.end();
    }
}

//! [`SessionContainment`]: nothing a session started outlives the session.
//!
//! The design decision to know: every runtime of a session is placed, right after its spawn and
//! before it gets its batch (so before it runs anything), in a cgroup of the session's own,
//! `intendant-<session>-<pid>`, created under the controller's own cgroup; whatever its commands
//! start (`nohup`, `setsid`, double forks, a fork bomb) stays in it, bounded by `pids.max` and
//! `memory.max`, and `cgroup.kill` ends all of it when the session ends. cgroup v2 is used where it
//! is mounted and writable; the `pids` and `memory` limits come from v2 where its controllers are
//! delegated (a controller alone in its v2 group moves into a leaf below it to hand them down:
//! `hand_down`), else from the v1 `pids` / `memory` hierarchies (hybrid machines). The controller
//! is also a child subreaper, so orphaned descendants reparent to it: where no cgroup can be made,
//! every remaining descendant is killed at the end instead (and there is no pids or memory limit,
//! which is said once at run time). A group left behind by a controller that died is removed by the
//! next controller's [`SessionContainment::create`] (its members killed first). A host of many
//! sessions (the daemon) first makes one group they are all made in, bounding them together
//! ([`bound_sessions`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

mod all_sessions;
mod hand_down;
mod hits;
mod usage;

pub use all_sessions::{SessionsBound, bound_sessions, release_sessions_bound, sessions_processes};
pub use hand_down::ready_own_group;
pub use hits::{LimitHits, machine_kill_note, machine_oom_kills};
pub use usage::usage;

/// Default `pids.max` of a session: ample for builds and test runners, fatal to a fork bomb.
pub const DEFAULT_PIDS_MAX: u64 = 4096;
/// Prefix of every session cgroup's name.
const GROUP_PREFIX: &str = "intendant-";
/// How long [`SessionContainment::end`] waits for the killed members to be gone.
const END_WAIT: Duration = Duration::from_secs(5);
/// Poll interval of that wait.
const END_POLL: Duration = Duration::from_millis(10);

/// `[limits]` of `intendant.toml`: bounds of everything one session runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most processes (and threads) of the session at once; default [`DEFAULT_PIDS_MAX`].
    pub pids_max: Option<u64>,
    /// Most memory of the session in MiB; default: no limit.
    pub memory_max_mib: Option<u64>,
    /// Everything one model reply streams (text, reasoning, tool-call arguments), in bytes;
    /// default 16 MiB.
    pub max_reply_bytes: Option<usize>,
    /// One tool call's arguments, in bytes; default 8 MiB.
    pub max_tool_call_bytes: Option<usize>,
    /// Most CPU time of the session, in percent of one CPU per period (`200`: two CPUs' worth);
    /// default: none, its share weighed against the others, not capped.
    pub cpu_max_percent: Option<u32>,
}

impl LimitsConfig {
    /// The `pids.max` to apply.
    pub fn pids_max(&self) -> u64 {
        self.pids_max.unwrap_or(DEFAULT_PIDS_MAX)
    }

    /// The caps the loop enforces on one model reply: these values over the defaults.
    pub fn reply_limits(&self) -> intendant_providers::ReplyLimits {
        let defaults = intendant_providers::ReplyLimits::default();
        intendant_providers::ReplyLimits {
            max_reply_bytes: self.max_reply_bytes.unwrap_or(defaults.max_reply_bytes),
            max_tool_call_bytes: self
                .max_tool_call_bytes
                .unwrap_or(defaults.max_tool_call_bytes),
        }
    }
}

/// One cgroup directory of the session and the open `cgroup.procs` a spawned child is moved into
/// (shared with the session's [`Placement`], not duplicated: every descriptor the daemon holds
/// is copied into each child it starts and closed again at its `exec`).
#[derive(Debug)]
struct Group {
    dir: PathBuf,
    procs: Arc<File>,
    /// Whether `cgroup.kill` exists (v2, Linux 5.14+).
    killable: bool,
}

/// What a spawn needs to place its child: the open `cgroup.procs` files, and the groups'
/// directories, whose counters say when a bound stopped a process. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    procs: Vec<Arc<File>>,
    dirs: Arc<[PathBuf]>,
    counters: Arc<hits::Counters>,
}

impl Placement {
    /// How often the session's bounds refused or killed its processes so far.
    pub fn limit_hits(&self) -> LimitHits {
        self.counters.read()
    }

    /// What the session's processes ran into between `earlier` and `now` (two
    /// [`Placement::limit_hits`]), one note per bound, naming it and what sets it.
    pub fn limit_notes(&self, earlier: &LimitHits, now: &LimitHits) -> Vec<String> {
        now.notes_since(earlier, &self.dirs)
    }

    /// Moves the child `pid` into every group. Call it after the spawn and before the child
    /// gets any input: our own programs (the runtime, the network's holder) do nothing before
    /// their first read that could escape the groups. Placing from the parent keeps the spawn
    /// free of `pre_exec` hooks, so std spawns with `posix_spawn` (vfork): a `fork` of a large
    /// controller (the daemon) copies its page tables and makes every page it writes afterwards
    /// fault. A refusal is an error.
    #[cfg(target_os = "linux")]
    pub fn place(&self, pid: u32) -> io::Result<()> {
        write_pid(self.procs.iter().map(AsRef::as_ref), pid)
    }

    /// No cgroups off Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn place(&self, _pid: u32) -> io::Result<()> {
        Ok(())
    }

    /// What a program the controller does not write (an agent CLI worker) enters between its
    /// fork and its `exec` ([`crate::child::Entry`]): every group, and the sessions' nice value
    /// ([`SESSION_NICE`](intendant_protocol::runtime::SESSION_NICE)), so it and whatever it
    /// starts before reading anything are the session's from the start ([`Placement::place`] is
    /// for our own programs).
    pub fn entry(&self) -> crate::child::Entry {
        crate::child::Entry {
            groups: self.procs.clone(),
            nice: Some(intendant_protocol::runtime::SESSION_NICE),
        }
    }

    /// The placement for a spawn from a lasting thread, which has a descriptor table of its own
    /// ([`crate::child::lasting`]): the open `cgroup.procs` files lent to it, and
    /// [`Placement::place_with`] writing through their copies.
    pub fn lent(&self) -> crate::child::LentPlacement {
        crate::child::LentPlacement {
            files: self
                .procs
                .iter()
                .map(|procs| Arc::clone(procs) as crate::child::lasting::Lent)
                .collect(),
            place: Placement::place_with,
        }
    }

    /// [`Placement::place`] through `files`, copies of the open `cgroup.procs` files.
    #[cfg(target_os = "linux")]
    pub fn place_with(files: Vec<std::os::fd::OwnedFd>, pid: u32) -> io::Result<()> {
        let files: Vec<File> = files.into_iter().map(File::from).collect();
        write_pid(files.iter(), pid)
    }

    /// No cgroups off Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn place_with(_files: Vec<std::os::fd::OwnedFd>, _pid: u32) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `pid` into each group's `cgroup.procs`: one write each, as the kernel wants.
#[cfg(target_os = "linux")]
fn write_pid<'a>(files: impl Iterator<Item = &'a File>, pid: u32) -> io::Result<()> {
    let pid = pid.to_string();
    for mut procs in files {
        procs.write_all(pid.as_bytes())?;
    }
    Ok(())
}

/// The containment of one session; [`SessionContainment::end`] (or dropping it) kills
/// everything the session started.
#[derive(Debug)]
pub struct SessionContainment {
    groups: Vec<Group>,
    /// Whether a pids limit and a memory limit (when one was asked for) are in place.
    limited: (bool, bool),
    subreaper: bool,
    notes: Vec<String>,
    ended: bool,
    /// The project's repository: its pointers are put back once the processes are gone.
    git: Option<crate::git::GitRepo>,
    /// The session's own network, ended with the session.
    network: Option<crate::network::SessionNetwork>,
    /// The egress proxy of a session without a network of its own (the Landlock fallback),
    /// ended with the session.
    egress: Option<crate::egress::EgressProxy>,
}

impl SessionContainment {
    /// Sets up the containment of session `session_id` under `limits`. Never fails: what
    /// cannot be had is listed in [`SessionContainment::notes`].
    pub fn create(session_id: &str, limits: &LimitsConfig) -> SessionContainment {
        let mut notes = Vec::new();
        let subreaper = become_subreaper();
        if !subreaper {
            notes.push("cannot make the controller a child subreaper".to_owned());
        }
        #[cfg(target_os = "linux")]
        let (groups, limited) = make_session_groups(session_id, limits, &mut notes);
        #[cfg(not(target_os = "linux"))]
        let (groups, limited) = {
            let _ = (session_id, limits);
            notes.push("no cgroups on this platform: no pids or memory limit".to_owned());
            (Vec::new(), (false, false))
        };
        SessionContainment {
            groups,
            limited,
            subreaper,
            notes,
            ended: false,
            git: None,
            network: None,
            egress: None,
        }
    }

    /// Has [`SessionContainment::end`] put `git`'s pointers back once the session's processes
    /// are gone (none is left to change them again).
    pub fn guard_git(&mut self, git: Option<crate::git::GitRepo>) {
        self.git = git;
    }

    /// Has [`SessionContainment::end`] end the session's network namespace with its processes.
    pub fn hold_network(&mut self, network: crate::network::SessionNetwork) {
        self.network = Some(network);
    }

    /// Has [`SessionContainment::end`] shut the session's egress proxy down (a session without
    /// a network of its own; with one, its namespace holds the proxy).
    pub fn hold_egress(&mut self, proxy: crate::egress::EgressProxy) {
        self.egress = Some(proxy);
    }

    /// What this containment could not set up, to be said once at run time.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether `pids.max`, and `memory.max` where `[limits] memory_max_mib` asked for one, are
    /// applied to the session's groups (`intendant doctor` reports them).
    pub fn limits_applied(&self) -> (bool, bool) {
        self.limited
    }

    /// Whether a `cpu` group of the session's own weighs it as one process against the
    /// controller, however many it runs (`intendant doctor` reports it).
    pub fn weighs_as_one(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.dir.join("cpu.shares").exists() || g.dir.join("cpu.weight").exists())
    }

    /// The cgroup directories of the session (empty when none could be made).
    pub fn group_dirs(&self) -> Vec<PathBuf> {
        self.groups.iter().map(|g| g.dir.clone()).collect()
    }

    /// What a spawn of this session needs to place its child in the session's groups.
    pub fn placement(&self) -> Placement {
        let dirs = self.group_dirs();
        Placement {
            procs: self.groups.iter().map(|g| Arc::clone(&g.procs)).collect(),
            counters: Arc::new(hits::Counters::find(&dirs)),
            dirs: dirs.into(),
        }
    }

    /// Kills everything the session started and removes its groups, then puts the project's
    /// repository pointers back; one warning per pointer a command had changed. Idempotent.
    pub fn end(&mut self) -> Vec<String> {
        if self.ended {
            return Vec::new();
        }
        self.ended = true;
        if self.groups.is_empty() {
            if self.subreaper {
                kill_descendants();
            }
        } else {
            for group in &self.groups {
                group.kill_all();
            }
            for group in &self.groups {
                let _ = std::fs::remove_dir(&group.dir);
            }
        }
        if let Some(mut proxy) = self.egress.take() {
            proxy.shutdown();
        }
        if let Some(mut network) = self.network.take() {
            network.end();
        }
        self.git.as_ref().map(|g| g.restore()).unwrap_or_default()
    }
}

/// The groups of session `session_id` under `limits`, and whether its pids and memory limits
/// are applied; what cannot be had is added to `notes`.
#[cfg(target_os = "linux")]
fn make_session_groups(
    session_id: &str,
    limits: &LimitsConfig,
    notes: &mut Vec<String>,
) -> (Vec<Group>, (bool, bool)) {
    let mut groups = Vec::new();
    let mut limited = (false, false);
    let name = format!("{GROUP_PREFIX}{session_id}-{}", std::process::id());
    let all_sessions::SessionParents {
        dirs: hierarchies,
        own,
        join_memory,
    } = all_sessions::session_parents();
    let mut need_pids = true;
    let mut need_memory = limits.memory_max_mib.is_some();
    let mut need_cpu = limits.cpu_max_percent.is_some();
    let mut v2_refused = None;
    // Dead controllers' groups are found beside this controller's own, where they made
    // them, never in its sessions' group.
    if let Some(parent) = hierarchies.v2.as_deref() {
        if let Some(own) = own.v2.as_deref() {
            remove_stale_groups(own);
        }
        match Group::create_v2(parent, &name, limits) {
            Ok((group, applied)) => {
                need_pids &= !applied.pids;
                need_memory &= !applied.memory;
                need_cpu &= !applied.cpu;
                v2_refused = applied.refused;
                groups.push(group);
            }
            Err(e) => notes.push(format!(
                "cannot create a cgroup under {}: {e}",
                parent.display()
            )),
        }
    }
    // Whether a group already counts the session's memory (v2's, given the controller).
    let counted = groups.iter().any(|g| g.dir.join("memory.current").exists());
    // Each v1 group: whether it is made, and whether failing to is said (what nothing asked
    // for is not).
    let v1 = [
        (
            (need_pids, true),
            &hierarchies.v1_pids,
            &own.v1_pids,
            "pids",
        ),
        // A `cpu` group of its own: the session weighs as one against the controller
        // (and, inside a daemon's sessions' group, against the other sessions, and all
        // of them as one against the daemon), however many processes it runs.
        ((true, true), &hierarchies.v1_cpu, &own.v1_cpu, "cpu"),
        // The sessions' group bounding their memory in v1 counts only its members. Without
        // any bound, a group of its own still counts what the session's processes hold
        // (listed with it) and which of them the out-of-memory killer took, so a `Killed`
        // command is set against the session's own count, not only the machine's.
        (
            (
                need_memory || join_memory || !counted,
                need_memory || join_memory,
            ),
            &hierarchies.v1_memory,
            &own.v1_memory,
            "memory",
        ),
    ];
    for ((needed, said), parent, own, controller) in v1 {
        let Some(parent) = parent.as_deref().filter(|_| needed) else {
            continue;
        };
        let notes = said.then_some(&mut *notes);
        if let Some(group) = v1_group(parent, own.as_deref(), &name, controller, limits, notes) {
            match controller {
                "pids" => need_pids = false,
                "memory" => need_memory = false,
                _ => need_cpu = false,
            }
            groups.push(group);
        }
    }
    if groups.is_empty() {
        notes.push(
            "no writable cgroup: a session's processes are contained by the controller \
             as child subreaper only, with no pids or memory limit"
                .to_owned(),
        );
    } else {
        note_missing(
            notes,
            limits,
            [need_pids, need_memory, need_cpu],
            v2_refused,
        );
        limited = (!need_pids, !need_memory);
    }
    (groups, limited)
}

/// The session's group `name` of the v1 `controller` under `parent` (the groups dead
/// controllers left beside this one's `own` removed first); why it could not be made is added
/// to `notes` when given.
#[cfg(target_os = "linux")]
fn v1_group(
    parent: &Path,
    own: Option<&Path>,
    name: &str,
    controller: &str,
    limits: &LimitsConfig,
    notes: Option<&mut Vec<String>>,
) -> Option<Group> {
    if let Some(own) = own {
        remove_stale_groups(own);
    }
    match Group::create_v1(parent, name, controller, limits) {
        Ok(group) => Some(group),
        Err(e) => {
            if let Some(notes) = notes {
                notes.push(format!(
                    "cannot create a {controller} cgroup under {}: {e}",
                    parent.display()
                ));
            }
            None
        }
    }
}

/// Adds to `notes` a line for each of a session's `[limits]` no group took (`needed`: pids,
/// memory, cpu), and why its v2 parent could not hand the controllers down (`refused`).
#[cfg(target_os = "linux")]
fn note_missing(
    notes: &mut Vec<String>,
    limits: &LimitsConfig,
    needed: [bool; 3],
    refused: Option<String>,
) {
    let settings = [
        ("pids", format!("pids_max = {}", limits.pids_max())),
        ("memory", "memory_max_mib".to_owned()),
        ("cpu", "cpu_max_percent".to_owned()),
    ];
    for ((controller, setting), _) in settings.iter().zip(needed).filter(|(_, n)| *n) {
        notes.push(format!(
            "no {controller} controller available: [limits] {setting} is not applied"
        ));
    }
    if needed.contains(&true) {
        notes.extend(refused);
    }
}

impl Drop for SessionContainment {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

impl Group {
    /// A v2 group under `parent` with whichever of `pids.max` / `memory.max` / `cpu.max` the
    /// parent delegates; returns which limits were applied.
    #[cfg(target_os = "linux")]
    fn create_v2(parent: &Path, name: &str, limits: &LimitsConfig) -> io::Result<(Group, Applied)> {
        let refused = hand_down::hand_down(parent, &hand_down::SESSION_CONTROLLERS).err();
        let dir = make_group_dir(parent, name)?;
        let pids = write_file(&dir.join("pids.max"), &limits.pids_max().to_string()).is_ok();
        let memory = match limits.memory_max_mib {
            Some(mib) => {
                write_file(&dir.join("memory.max"), &(mib * 1024 * 1024).to_string()).is_ok()
            }
            None => false,
        };
        let cpu = match limits.cpu_max_percent {
            Some(percent) => write_file(
                &dir.join("cpu.max"),
                &format!("{} {CPU_PERIOD_US}", cpu_quota_us(percent)),
            )
            .is_ok(),
            None => false,
        };
        let group = Group::open(dir, true)?;
        Ok((
            group,
            Applied {
                pids,
                memory,
                cpu,
                refused,
            },
        ))
    }

    /// A v1 group of `controller` under `parent` with its limit.
    #[cfg(target_os = "linux")]
    fn create_v1(
        parent: &Path,
        name: &str,
        controller: &str,
        limits: &LimitsConfig,
    ) -> io::Result<Group> {
        let dir = make_group_dir(parent, name)?;
        let applied = match (controller, limits.memory_max_mib, limits.cpu_max_percent) {
            ("pids", _, _) => write_file(&dir.join("pids.max"), &limits.pids_max().to_string()),
            ("memory", Some(mib), _) => write_file(
                &dir.join("memory.limit_in_bytes"),
                &(mib * 1024 * 1024).to_string(),
            ),
            ("cpu", _, Some(percent)) => {
                // v1 refuses a group's quota above its parent's (a daemon's sessions' cap),
                // which caps it as much anyway.
                let parent_quota = std::fs::read_to_string(parent.join("cpu.cfs_quota_us"))
                    .ok()
                    .and_then(|q| q.trim().parse::<u64>().ok());
                let quota = parent_quota.map_or(cpu_quota_us(percent), |parent| {
                    parent.min(cpu_quota_us(percent))
                });
                write_file(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())
                    .and_then(|()| write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string()))
            }
            _ => Ok(()),
        };
        if let Err(e) = applied {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Group::open(dir, false)
    }

    #[cfg(target_os = "linux")]
    fn open(dir: PathBuf, v2: bool) -> io::Result<Group> {
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"));
        let procs = match procs {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let killable = v2 && dir.join("cgroup.kill").exists();
        Ok(Group {
            dir,
            procs: Arc::new(procs),
            killable,
        })
    }

    /// Kills every member (`cgroup.kill`, else each listed pid until none is left: a fork bomb
    /// racing the kill is bounded by `pids.max`) and reaps those that were reparented here.
    fn kill_all(&self) {
        let deadline = std::time::Instant::now() + END_WAIT;
        let mut seen = Vec::new();
        if self.killable {
            seen.extend(members(&self.dir));
            let _ = write_file(&self.dir.join("cgroup.kill"), "1");
        }
        loop {
            let now = members(&self.dir);
            if now.is_empty() || std::time::Instant::now() >= deadline {
                break;
            }
            for &pid in &now {
                signal_kill(pid);
            }
            seen.extend(now);
            reap(&seen);
            std::thread::sleep(END_POLL);
        }
        reap(&seen);
    }
}

/// The controller's own cgroup directories, read from `/proc/self`.
fn own_hierarchies() -> Hierarchies {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    cgroup_hierarchies(&mounts, &own)
}

/// The session cgroup parents found on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Hierarchies {
    /// The controller's own v2 cgroup directory.
    v2: Option<PathBuf>,
    /// Its own v1 `pids` cgroup directory.
    v1_pids: Option<PathBuf>,
    /// Its own v1 `memory` cgroup directory.
    v1_memory: Option<PathBuf>,
    /// Its own v1 `cpu` cgroup directory.
    v1_cpu: Option<PathBuf>,
}

/// Finds the controller's own cgroup directories from `/proc/self/mountinfo` and
/// `/proc/self/cgroup`.
fn cgroup_hierarchies(mountinfo: &str, own_cgroups: &str) -> Hierarchies {
    let mut out = Hierarchies::default();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (Some(root), Some(mount_point), Some(fstype)) =
            (left.get(3), left.get(4), right.first())
        else {
            continue;
        };
        let options = right.get(2).copied().unwrap_or_default();
        let own_path = |wanted: &dyn Fn(&str, &str) -> bool| {
            own_cgroups.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                wanted(id, controllers).then(|| path.to_owned())
            })
        };
        let dir = |path: String| {
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .trim_start_matches('/')
                .to_owned();
            Path::new(mount_point).join(relative)
        };
        match *fstype {
            "cgroup2" if out.v2.is_none() => {
                // A controller that moved into its leaf makes its groups beside it.
                out.v2 = own_path(&|id, c| id == "0" && c.is_empty())
                    .map(dir)
                    .map(|d| match (d.file_name(), d.parent()) {
                        (Some(leaf), Some(parent)) if leaf == hand_down::CONTROLLER_LEAF => {
                            parent.to_path_buf()
                        }
                        _ => d,
                    });
            }
            "cgroup" => {
                for controller in ["pids", "memory", "cpu"] {
                    if !options.split(',').any(|o| o == controller) {
                        continue;
                    }
                    let found = own_path(&|_, c| c.split(',').any(|x| x == controller)).map(dir);
                    match controller {
                        "pids" if out.v1_pids.is_none() => out.v1_pids = found,
                        "memory" if out.v1_memory.is_none() => out.v1_memory = found,
                        "cpu" if out.v1_cpu.is_none() => out.v1_cpu = found,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Creates the group directory (a leftover of the same name is removed first).
fn make_group_dir(parent: &Path, name: &str) -> io::Result<PathBuf> {
    let dir = parent.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
    }
}

/// Removes the session groups under `parent` whose controller is gone, killing what is left in
/// them: a controller killed outright leaves its group behind (and the sessions' group, with
/// the session groups inside it).
fn remove_stale_groups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = session_group_owner(&name) else {
            continue;
        };
        // This process's own groups (a daemon's other sessions) are live without a look.
        if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        remove_group(&entry.path(), STALE_DEPTH);
    }
}

/// How deep [`remove_stale_groups`] goes below a stale group: the session groups inside the
/// sessions' group.
const STALE_DEPTH: usize = 1;

/// Kills every member of the group `dir` and of the groups below it (at most `depth` levels;
/// the controller makes no deeper ones) and removes them, deepest first.
fn remove_group(dir: &Path, depth: usize) {
    if depth > 0 {
        let below = std::fs::read_dir(dir).into_iter().flatten().flatten();
        for entry in below.filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            remove_group(&entry.path(), depth - 1);
        }
    }
    let killable = dir.join("cgroup.kill").exists();
    let Ok(procs) = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
    else {
        return;
    };
    let stale = Group {
        dir: dir.to_path_buf(),
        procs: Arc::new(procs),
        killable,
    };
    stale.kill_all();
    let _ = std::fs::remove_dir(&stale.dir);
}

/// The controller's pid when `name` is a session group's (`intendant-<session>-<pid>`).
pub(crate) fn session_group_owner(name: &str) -> Option<u32> {
    let (session, pid) = name.strip_prefix(GROUP_PREFIX)?.rsplit_once('-')?;
    if session.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// A count in a one-line file (`max` and anything else unreadable: none).
fn read_count(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The count of `key` in a flat keyed file (`max 3`, `usage_usec 2500`); `None` when the file
/// or the key is not there.
fn keyed_count(file: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse().ok())?
        })
}

/// The period a session's CPU quota is counted over, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// The CPU time a session may have per [`CPU_PERIOD_US`] at `percent` of one CPU: at least the
/// kernel's least quota (1 ms).
fn cpu_quota_us(percent: u32) -> u64 {
    (u64::from(percent) * CPU_PERIOD_US / 100).max(1000)
}

/// Which of a v2 group's limits were applied.
struct Applied {
    pids: bool,
    memory: bool,
    cpu: bool,
    /// Why its parent could not hand the controllers down, if it could not.
    refused: Option<String>,
}

/// The pids listed in the group's `cgroup.procs`.
fn members(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn signal_kill(pid: i32) {
    if pid > 1 && u32::try_from(pid).is_ok_and(|p| p != std::process::id()) {
        // SAFETY: kill(2) on one pid touches no memory.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Reaps those of `pids` that became zombies of this process (orphans reparented to the
/// subreaper); other processes' children are left alone.
fn reap(pids: &[i32]) {
    for &pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
        }
    }
}

/// Subreaper mode without a cgroup: every remaining descendant of the controller is the
/// session's (the one-shot controller runs one session).
fn kill_descendants() {
    let own = i32::try_from(std::process::id()).unwrap_or(0);
    let deadline = std::time::Instant::now() + END_WAIT;
    let mut seen = Vec::new();
    loop {
        let tree = crate::child::kill::Tree::of(own);
        let pids = tree.pids();
        if pids.is_empty() || std::time::Instant::now() >= deadline {
            break;
        }
        tree.signal(crate::child::kill::Signal::Kill);
        seen.extend(pids);
        reap(&seen);
        std::thread::sleep(END_POLL);
    }
}

#[cfg(target_os = "linux")]
fn become_subreaper() -> bool {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ending_puts_the_repository_pointers_back_and_says_so() {
        let project = crate::git::tests::repo();
        let repo = crate::git::GitRepo::discover(project.path()).unwrap();
        // No group and no subreaper: ending kills nothing of this test process.
        let mut containment = SessionContainment {
            groups: Vec::new(),
            subreaper: false,
            notes: Vec::new(),
            ended: false,
            limited: (false, false),
            git: None,
            network: None,
            egress: None,
        };
        containment.guard_git(repo);
        let planted = project.path().join(".git/commondir");
        std::fs::write(&planted, "/tmp/elsewhere\n").unwrap();
        let warnings = containment.end();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("commondir"), "{warnings:?}");
        assert!(!planted.exists());
        assert!(containment.end().is_empty(), "ending twice does nothing");
    }

    #[test]
    fn hierarchies_of_a_hybrid_machine() {
        let mounts = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
32 25 0:28 /ctr /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
33 25 0:29 / /proc rw - proc proc rw
";
        let own = "8:pids:/a/b\n4:memory:/ctr/x\n0::/user/s\n";
        let h = cgroup_hierarchies(mounts, own);
        assert_eq!(
            h,
            Hierarchies {
                v2: Some("/sys/fs/cgroup/unified/user/s".into()),
                v1_pids: Some("/sys/fs/cgroup/pids/a/b".into()),
                v1_memory: Some("/sys/fs/cgroup/memory/x".into()),
                v1_cpu: None,
            }
        );
        let pure_v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_hierarchies(pure_v2, "0::/\n").v2,
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        // One that moved into its leaf (alone in a delegated unit) makes its groups beside it.
        let moved = "0::/user.slice/intendant.service/intendant.controller\n";
        assert_eq!(
            cgroup_hierarchies(pure_v2, moved).v2,
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/intendant.service"))
        );
        assert_eq!(cgroup_hierarchies("", ""), Hierarchies::default());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn without_a_cgroup_the_subreaper_kills_and_reaps_every_orphan() {
        assert!(become_subreaper());
        let out = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"])
            .output()
            .unwrap();
        let orphan: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let parent = || {
            let stat = std::fs::read_to_string(format!("/proc/{orphan}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(1)?.parse::<u32>().ok()
        };
        // Reparented to this process, not to init.
        let deadline = std::time::Instant::now() + END_WAIT;
        while parent() != Some(std::process::id()) && std::time::Instant::now() < deadline {
            std::thread::sleep(END_POLL);
        }
        assert_eq!(parent(), Some(std::process::id()));
        let mut fallback = SessionContainment {
            groups: Vec::new(),
            limited: (false, false),
            subreaper: true,
            notes: Vec::new(),
            ended: false,
            git: None,
            network: None,
            egress: None,
        };
        fallback.end();
        assert!(
            !Path::new(&format!("/proc/{orphan}")).exists(),
            "the orphan was killed and reaped"
        );
    }

    #[test]
    fn limits_default_and_parse() {
        assert_eq!(LimitsConfig::default().pids_max(), DEFAULT_PIDS_MAX);
        let l: LimitsConfig = toml::from_str("pids_max = 64\nmemory_max_mib = 512\n").unwrap();
        assert_eq!((l.pids_max(), l.memory_max_mib), (64, Some(512)));
        assert!(toml::from_str::<LimitsConfig>("pid_max = 1\n").is_err());
    }
}

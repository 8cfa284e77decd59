//! Handing the controllers down in cgroup v2, so a session's group can be limited.
//!
//! A v2 group's `pids`, `memory` and `cpu` reach the groups below it only while it holds no
//! process itself (the kernel's no-internal-process rule), and the group a controller runs in
//! usually holds it: a systemd unit's group delegated to its service (`Delegate=yes`) holds the
//! service's main process, a `systemd-run --scope` group the command. A controller alone in its
//! group moves itself into a leaf below it, [`CONTROLLER_LEAF`] (where systemd's
//! `DelegateSubgroup=` would have put it), hands the controllers down, and makes its groups
//! beside that leaf: its own group, read from `/proc/self`, is taken to be the leaf's parent
//! from then on (`own_hierarchies`). One that shares its group (a terminal's scope, with the
//! shell in it) moves nobody: its session groups are made without those limits, and why is
//! said.

use std::io;
use std::path::Path;

use super::{members, own_hierarchies, write_file};

/// The leaf a controller alone in its v2 group moves itself into. Not named as a session's
/// group is (`intendant-<name>-<pid>`): what runs in it is the controller's own.
pub(super) const CONTROLLER_LEAF: &str = "intendant.controller";

/// The v2 controllers a session's groups are limited by.
pub(super) const SESSION_CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

/// Readies the controller's own v2 group to hand `pids`, `memory` and `cpu` down to the groups
/// made below it, as a daemon's start does before its sessions' group: moves this process into
/// [`CONTROLLER_LEAF`] when it is alone there. Ok where there is nothing to hand down (no v2
/// group, or none of them in it); Err says why one stays out of reach.
pub fn ready_own_group() -> Result<(), String> {
    match own_hierarchies().v2 {
        Some(dir) => hand_down(&dir, &SESSION_CONTROLLERS),
        None => Ok(()),
    }
}

/// Hands those of `wanted` the v2 group `dir` has down to the groups below it, moving this
/// process into [`CONTROLLER_LEAF`] first when the kernel refuses because `dir` holds it, alone.
/// Err says why one of them stays out of reach of the groups below.
pub(super) fn hand_down(dir: &Path, wanted: &[&str]) -> Result<(), String> {
    let listed = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let available = listed("cgroup.controllers");
    let enabled = listed("cgroup.subtree_control");
    let has = |list: &str, c: &str| list.split_whitespace().any(|x| x == c);
    let todo: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| has(&available, c) && !has(&enabled, c))
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    let names = todo.join(", ");
    let refused = |e: io::Error| {
        format!(
            "cgroup v2: {} cannot hand {names} down to the groups below it: {e}",
            dir.display()
        )
    };
    match enable(dir, &todo) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        Err(e) => return Err(refused(e)),
    }
    // Refused because `dir` holds processes. Only this one: it makes way.
    let me = std::process::id();
    if members(dir)
        .into_iter()
        .any(|pid| u32::try_from(pid).ok() != Some(me))
    {
        return Err(format!(
            "cgroup v2 hands {names} only to the groups below a group that holds no process, \
             and {} holds others besides this one (run intendant alone in a delegated unit, \
             such as `systemd-run --user --scope -p Delegate=yes intendant ...`, and it moves \
             itself below it)",
            dir.display()
        ));
    }
    let leaf = dir.join(CONTROLLER_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refused(e)),
    }
    write_file(&leaf.join("cgroup.procs"), &me.to_string()).map_err(|e| {
        format!(
            "cgroup v2: cannot move into {} to hand {names} down: {e}",
            leaf.display()
        )
    })?;
    enable(dir, &todo).map_err(refused)
}

/// Writes each of `controllers` into `dir`'s `cgroup.subtree_control`; the first refusal.
fn enable(dir: &Path, controllers: &[&str]) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let mut first = Ok(());
    for c in controllers {
        if let Err(e) = write_file(&file, &format!("+{c}")) {
            first = first.and(Err(e));
        }
    }
    first
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A group of the v2 hierarchy's root this test made, with a domain controller it may hand
    /// down; leaves the hierarchy as it found it (this process back in its group).
    struct Bench {
        unit: PathBuf,
        root: PathBuf,
        controller: &'static str,
        home: PathBuf,
        we_enabled: bool,
        other: Option<std::process::Child>,
    }

    impl Bench {
        /// `None` where no v2 hierarchy here has a controller this test may enable (it needs
        /// root, and a hierarchy whose root takes one).
        fn new() -> Option<Bench> {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            let root = mounts.lines().find_map(|l| {
                let (left, right) = l.split_once(" - ")?;
                let point = left.split_whitespace().nth(4)?;
                right.starts_with("cgroup2 ").then(|| PathBuf::from(point))
            })?;
            let available = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
            // Any domain controller shows the rule: a hybrid machine's v2 has hugetlb.
            let controller = ["pids", "memory", "cpu", "hugetlb"]
                .into_iter()
                .find(|c| available.split_whitespace().any(|a| a == *c))?;
            let home = own_hierarchies().v2?;
            let at_root = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            let we_enabled = !at_root.split_whitespace().any(|c| c == controller);
            if we_enabled
                && write_file(
                    &root.join("cgroup.subtree_control"),
                    &format!("+{controller}"),
                )
                .is_err()
            {
                return None;
            }
            let unit = root.join(format!("unit.test-{}", std::process::id()));
            let bench = Bench {
                unit: unit.clone(),
                root,
                controller,
                home,
                we_enabled,
                other: None,
            };
            std::fs::create_dir(&unit).ok()?;
            write_file(&unit.join("cgroup.procs"), &std::process::id().to_string()).ok()?;
            Some(bench)
        }
    }

    impl Drop for Bench {
        fn drop(&mut self) {
            if let Some(mut other) = self.other.take() {
                let _ = other.kill();
                let _ = other.wait();
            }
            let _ = write_file(
                &self.home.join("cgroup.procs"),
                &std::process::id().to_string(),
            );
            let _ = std::fs::remove_dir(self.unit.join("made.beside"));
            let _ = std::fs::remove_dir(self.unit.join(CONTROLLER_LEAF));
            let _ = std::fs::remove_dir(&self.unit);
            if self.we_enabled {
                let _ = write_file(
                    &self.root.join("cgroup.subtree_control"),
                    &format!("-{}", self.controller),
                );
            }
        }
    }

    fn own_v2_line() -> String {
        std::fs::read_to_string("/proc/self/cgroup")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
            .unwrap_or_default()
    }

    #[test]
    fn a_controller_alone_in_its_group_moves_into_a_leaf_and_hands_the_controllers_down() {
        let Some(mut bench) = Bench::new() else {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("note: skipping: no cgroup v2 hierarchy here takes a controller");
            }
            return;
        };
        let unit = bench.unit.clone();
        let name = unit.file_name().unwrap().to_string_lossy().into_owned();
        let wanted = [bench.controller];
        let subtree = || std::fs::read_to_string(unit.join("cgroup.subtree_control")).unwrap();

        // Another process in the group (a shell's scope): nobody moves, and why is said.
        let other = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        write_file(&unit.join("cgroup.procs"), &other.id().to_string()).unwrap();
        bench.other = Some(other);
        let why = hand_down(&unit, &wanted).unwrap_err();
        assert!(why.contains("holds others besides this one"), "{why}");
        assert!(why.contains(bench.controller), "{why}");
        assert!(own_v2_line().ends_with(&name), "{}", own_v2_line());
        assert!(!unit.join(CONTROLLER_LEAF).exists());
        assert!(!subtree().contains(bench.controller));

        // Alone (a delegated unit's service): it moves into the leaf and hands it down.
        if let Some(mut other) = bench.other.take() {
            other.kill().unwrap();
            other.wait().unwrap();
        }
        hand_down(&unit, &wanted).unwrap();
        assert!(
            own_v2_line().ends_with(&format!("{name}/{CONTROLLER_LEAF}")),
            "{}",
            own_v2_line()
        );
        assert!(subtree().contains(bench.controller), "{}", subtree());
        // Its groups are made beside the leaf, where they get the controller.
        assert_eq!(own_hierarchies().v2.as_deref(), Some(unit.as_path()));
        let beside = unit.join("made.beside");
        std::fs::create_dir(&beside).unwrap();
        let theirs = std::fs::read_to_string(beside.join("cgroup.controllers")).unwrap();
        assert!(theirs.contains(bench.controller), "{theirs}");
        // Done once: asked again, nothing moves.
        hand_down(&unit, &wanted).unwrap();
        assert!(own_v2_line().ends_with(CONTROLLER_LEAF));
    }
}

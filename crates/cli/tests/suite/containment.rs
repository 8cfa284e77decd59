//! Nothing a session started outlives the session, through the built binary: `nohup`, `setsid`
//! and double-forked jobs, a bounded fork bomb under `[limits] pids_max`, and a background
//! server that lives from one batch to the next but not past the session. Liveness is read from
//! `/proc` with a bounded wait.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::controller::harness::assert_success;
use super::sessions::{Env, exec_turn, text_turn, tool_outputs};

/// How long the test waits for a killed process to disappear before it counts as surviving.
const GONE_WAIT: Duration = Duration::from_secs(10);

/// Whether `pid` runs (a zombie does not count).
pub(super) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// The pids written, one per line, to `file` in the project.
pub(super) fn pids_in(project: &Path, file: &str) -> Vec<i32> {
    std::fs::read_to_string(project.join(file))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Asserts every pid is gone within [`GONE_WAIT`]; kills the survivors either way, so a failing
/// run leaves nothing behind.
pub(super) fn assert_all_gone(pids: &[i32], what: &str) {
    let deadline = Instant::now() + GONE_WAIT;
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survivors: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &pid in &survivors {
        // SAFETY: kill(2) on one pid touches no memory.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    assert!(
        survivors.is_empty(),
        "{what} outlived the session: {survivors:?}"
    );
}

/// Starts `sh -c` jobs that record their pid in `<name>.pid` and sleep, in the ways a command
/// escapes its batch, then waits until every pid file is written.
const ESCAPES: &str = "\
nohup sh -c 'echo $$ > nohup.pid; exec sleep 1000' >/dev/null 2>&1 &
setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' >/dev/null 2>&1 &
sh -c 'sh -c \"echo \\$\\$ > daemon.pid; exec sleep 1000\" </dev/null >/dev/null 2>&1 & exit 0'
for f in nohup.pid setsid.pid daemon.pid; do while [ ! -s $f ]; do sleep 0.05; done; done
echo started";

#[test]
fn nohup_setsid_and_double_forked_jobs_die_with_the_session() {
    let env = Env::new(json!([exec_turn(ESCAPES), text_turn("left them running")]));
    let out = env.run_headless("start background jobs", &["--autonomy", "full"]);
    assert_success(&out);
    let outputs = tool_outputs(&env.turn_bodies()[1]).join("\n");
    assert!(outputs.contains("started"), "{outputs}");
    let mut pids = Vec::new();
    for file in ["nohup.pid", "setsid.pid", "daemon.pid"] {
        let found = pids_in(env.project.path(), file);
        assert_eq!(found.len(), 1, "{file}: {found:?}");
        pids.extend(found);
    }
    assert_all_gone(&pids, "a nohup, setsid or double-forked job");
}

#[test]
fn a_background_server_lives_across_batches_but_not_past_the_session() {
    let env = Env::new(json!([
        exec_turn(
            "sh -c 'echo $$ > server.pid; exec sleep 1000' >/dev/null 2>&1 & \
             while [ ! -s server.pid ]; do sleep 0.05; done; echo serving"
        ),
        exec_turn("kill -0 $(cat server.pid) && echo alive-in-batch-2"),
        text_turn("done")
    ]));
    let out = env.run_headless("run a server", &["--autonomy", "full"]);
    assert_success(&out);
    let second = tool_outputs(&env.turn_bodies()[2]).join("\n");
    assert!(second.contains("alive-in-batch-2"), "{second}");
    let pids = pids_in(env.project.path(), "server.pid");
    assert_eq!(pids.len(), 1);
    assert_all_gone(&pids, "the background server");
}

#[test]
fn security_a_command_cannot_move_itself_out_of_its_sessions_groups() {
    // Every hierarchy's `cgroup.procs` in reach (the roots, the controller's own groups, the
    // groups beside them) and a new group made beside its own: each would take the command out
    // of its session's bounds and out of what the session's end kills.
    let attack = r#"before=$(cat /proc/self/cgroup)
tried=0
for f in $(find /sys/fs/cgroup -maxdepth 3 -name cgroup.procs 2>/dev/null | grep -v /intendant-); do
  tried=$((tried + 1))
  if (echo $$ > "$f") 2>/dev/null; then echo "moved through $f"; fi
done
echo "tried $tried"
for d in /sys/fs/cgroup /sys/fs/cgroup/*; do
  if mkdir "$d/escape-$$" 2>/dev/null; then echo "made $d/escape-$$"; rmdir "$d/escape-$$"; fi
done
[ "$(cat /proc/self/cgroup)" = "$before" ] && echo "still in its groups"
echo "session groups $(grep -c /intendant- /proc/self/cgroup)""#;
    let env = Env::new(json!([exec_turn(attack), text_turn("tried")]));
    // The sandbox on, as a session runs by default.
    let out = env
        .model_command(
            "leave the session's cgroups",
            &["--json", "--autonomy", "full"],
        )
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
    let told = tool_outputs(&env.turn_bodies()[1]).join("\n");
    assert!(!told.contains("moved through"), "{told}");
    assert!(!told.contains("made /"), "{told}");
    assert!(told.contains("still in its groups"), "{told}");
    assert!(!told.contains("tried 0"), "the groups are in sight: {told}");
    // The walls were tried from inside the session's groups (as root here, so in every
    // hierarchy the controller could write).
    assert!(!told.contains("session groups 0"), "{told}");
}

/// Forks sleeping children until a fork is refused (at most `most`), writing each child's pid to
/// `NAME.pids` and the verdict to `NAME.out`, then prints the verdict.
pub(super) fn fork_bomb(name: &str, most: u32) -> String {
    format!(
        r#"python3 -c '
import os, time
n = 0
out = open("{name}.out", "w")
pids = open("{name}.pids", "w")
try:
    while n < {most}:
        pid = os.fork()
        if pid == 0:
            time.sleep(1000)
            os._exit(0)
        pids.write("%d\n" % pid)
        pids.flush()
        n += 1
    out.write("no limit: %d children\n" % n)
except OSError as e:
    out.write("fork refused after %d children: %s\n" % (n, e))
' </dev/null >/dev/null 2>&1; cat {name}.out"#
    )
}

#[test]
fn a_bounded_fork_bomb_hits_pids_max_and_dies_with_the_session() {
    let (env, out, told) = run_limited(&fork_bomb("bomb", 300), "pids_max = 40");
    let pids = pids_in(env.project.path(), "bomb.pids");
    let verdict = std::fs::read_to_string(env.project.path().join("bomb.out")).unwrap_or_default();
    assert_all_gone(&pids, "a fork bomb child");
    assert_success(&out);
    assert!(
        verdict.contains("fork refused after")
            && verdict.contains("Resource temporarily unavailable"),
        "the command is told the limit was hit: {verdict}"
    );
    assert!(
        !pids.is_empty() && pids.len() < 40,
        "pids_max = 40 bounds the children: {}",
        pids.len()
    );
    // The model is told which bound it ran into, not only `Resource temporarily unavailable`.
    assert!(
        told.contains("[limits: the kernel refused ")
            && told.contains("the session may have at most 40 processes and threads at once (`[limits] pids_max`)"),
        "{told}"
    );
}

#[test]
fn a_command_past_memory_max_mib_is_killed_and_the_model_is_told_which_bound() {
    // The command sees only `Killed` (status 137); the model is told it was the session's
    // memory bound, and what sets it.
    let grab = "python3 -c 'x = b\"x\" * (160 << 20); print(\"grabbed\")'; echo \"status $?\"";
    let (_env, out, told) = run_limited(grab, "memory_max_mib = 64");
    assert_success(&out);
    if !told.contains("status 137") {
        // No memory controller gives the session its bound here; the run said so.
        let why = "no memory controller for the session's bound";
        assert!(std::env::var_os("CI").is_none(), "{why}; CI is set: {told}");
        return;
    }
    assert!(
        told.contains("[limits: the kernel killed 1 of this session's processes for memory")
            && told.contains("the session may hold at most 64 MiB (`[limits] memory_max_mib`)"),
        "{told}"
    );
}

/// Git run for a session's checkpoints runs in the session's groups: a sparse `.gitignore` of
/// 512 MiB (no disk used; below the 1 GiB a git of the controller's own may hold) that a command
/// of a session bounded to 64 MiB left is read by a git the kernel kills for that bound, and the
/// checkpoint says so, naming it. In the controller's groups git read it whole and the
/// checkpoint was taken.
#[test]
fn a_checkpoints_git_is_held_to_the_sessions_memory_bound() {
    let make = "mkdir -p sub && truncate -s 512M sub/.gitignore && echo made";
    let (_env, out, told) = run_limited(make, "memory_max_mib = 64");
    assert_success(&out);
    assert!(told.contains("made"), "{told}");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("memory_max_mib is not applied") {
        let why = "no memory controller for the session's bound";
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}; CI is set: {stderr}"
        );
        return;
    }
    assert!(
        said.contains("turn 1 could not be checkpointed")
            && said.contains("the kernel killed 1 of this session's processes for memory")
            && said.contains("the session may hold at most 64 MiB (`[limits] memory_max_mib`)"),
        "{said}"
    );
}

#[test]
fn cpu_max_percent_caps_what_a_sessions_busy_loop_gets() {
    // A busy loop of one second, capped at a fifth of one CPU, gets at most about a fifth of a
    // second of CPU time (uncapped, as much as the machine gives it: close to the whole second).
    let (_env, out, told) = run_limited(SPIN_ONE_SECOND, "cpu_max_percent = 20");
    assert_success(&out);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    if said.contains("cpu_max_percent is not applied") {
        let why = "no cpu controller for the session's cap";
        assert!(std::env::var_os("CI").is_none(), "{why}; CI is set: {said}");
        return;
    }
    let cpu = spun_cpu(&told);
    assert!(
        cpu < 0.45,
        "capped at 20% of a CPU, the loop had {cpu} s of 1 s: {told}"
    );
}

/// Runs one session whose model runs `command` in one shell turn, under the project's
/// `[limits]` line `limits`, to its end: the run's output and what the model was told of the
/// command.
fn run_limited(command: &str, limits: &str) -> (Env, std::process::Output, String) {
    let env = Env::new(json!([exec_turn(command), text_turn("ran")]));
    std::fs::write(
        env.project.path().join("intendant.toml"),
        format!("[limits]\n{limits}\n"),
    )
    .unwrap();
    let out = env.run_headless("run it", &["--autonomy", "full"]);
    let told = tool_outputs(&env.turn_bodies()[1]).join("\n");
    (env, out, told)
}

/// A command that spins for one second of wall time and prints the CPU seconds it had
/// (`cpu 0.987`; [`spun_cpu`] reads it).
pub(super) const SPIN_ONE_SECOND: &str = "python3 -c 'import time\nwall, cpu = time.time(), time.process_time()\nwhile time.time() - wall < 1:\n    pass\nprint(\"cpu %.3f\" % (time.process_time() - cpu))'";

/// The CPU seconds [`SPIN_ONE_SECOND`] reported in `told`.
pub(super) fn spun_cpu(told: &str) -> f64 {
    told.split("cpu ")
        .nth(1)
        .and_then(|t| t.get(..5))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the loop did not report: {told}"))
}

/// Polls until `file` in the project holds a pid; fails after [`GONE_WAIT`] times six.
fn wait_for_pid(project: &Path, file: &str) -> i32 {
    let deadline = Instant::now() + GONE_WAIT * 6;
    loop {
        if let Some(&pid) = pids_in(project, file).first() {
            return pid;
        }
        assert!(Instant::now() < deadline, "{file} never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The session cgroup directories (`intendant-<session>-<pid>`) that hold `pid`, in every
/// hierarchy mounted under `/sys/fs/cgroup` (v2 alone, or v2 beside v1's).
pub(super) fn session_groups_of(pid: i32) -> Vec<std::path::PathBuf> {
    let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mounts: Vec<std::path::PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut groups = Vec::new();
    for line in lines.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        if !path
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with("intendant-"))
        {
            continue;
        }
        let relative = path.trim_start_matches('/');
        let candidates = std::iter::once(Path::new("/sys/fs/cgroup").join(relative))
            .chain(mounts.iter().map(|m| m.join(relative)));
        groups.extend(candidates.filter(|dir| dir.is_dir()));
    }
    groups.sort();
    groups.dedup();
    groups
}

/// Whether every directory in `dirs` is gone within `wait`.
fn all_removed_within(dirs: &[std::path::PathBuf], wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while dirs.iter().any(|d| d.exists()) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn what_a_killed_controller_left_behind_dies_when_the_next_one_starts() {
    let env = Env::new(json!([
        exec_turn(
            "echo $PPID > runtime.pid; \
             setsid sh -c 'sh -c \"echo \\$\\$ > orphan.pid; exec sleep 1000\" </dev/null >/dev/null 2>&1 &' ; \
             exec sleep 1000"
        ),
        text_turn("next session")
    ]));
    let session = env.start_json("leave an orphan", &["--autonomy", "full"]);
    let runtime = wait_for_pid(env.project.path(), "runtime.pid");
    let orphan = wait_for_pid(env.project.path(), "orphan.pid");
    let groups = session_groups_of(orphan);
    assert!(
        !groups.is_empty(),
        "the orphan is in no session cgroup: {:?}",
        std::fs::read_to_string(format!("/proc/{orphan}/cgroup"))
    );
    session.kill_9();
    // The runtime dies with its controller; the double-forked orphan in a session of its own
    // is out of the runtime's reach and survives it.
    assert_all_gone(&[runtime], "the runtime of a killed controller");
    if !alive(orphan) {
        // Tests run side by side: any controller that starts meanwhile removes a dead
        // controller's stale groups (they are the machine's, not one state root's), which is
        // what this test shows, done by another test's start. The orphan must then have died
        // with its group, not with the controller.
        assert!(
            all_removed_within(&groups, GONE_WAIT),
            "the orphan died with the killed controller, not with its stale group: {groups:?}"
        );
        return;
    }

    let out = env.run_headless("a later session", &["--autonomy", "full"]);
    assert_success(&out);
    assert_all_gone(&[orphan], "the orphan of a killed controller");
}

/// A memory cgroup of the test's own in which a supervisor (a controller, a daemon) runs, with
/// the limit set once the supervisor's size is known; removed (its members killed first) when
/// dropped.
pub(super) struct MemoryArena {
    dir: std::path::PathBuf,
    /// `memory.limit_in_bytes` (cgroup v1) or `memory.max` (v2).
    limit: &'static str,
}

impl MemoryArena {
    /// A fresh group in the v1 memory hierarchy, else under the v2 root where it delegates the
    /// memory controller; None (said on stderr, the test skipped; under `CI` it panics instead)
    /// where neither can be made (not root, no memory controller).
    pub(super) fn new(test: &str) -> Option<MemoryArena> {
        let name = format!("oom-arena-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let found = if v1.join("memory.limit_in_bytes").exists() {
            Some((v1, "memory.limit_in_bytes", ("memory.swappiness", "0")))
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            Some((v2, "memory.max", ("memory.swap.max", "0")))
        } else {
            None
        };
        let made = found.and_then(|(parent, limit, swap)| {
            let dir = parent.join(name);
            std::fs::create_dir(&dir).ok()?;
            // Out of memory means out of it here: no swap to page the children out to.
            let _ = std::fs::write(dir.join(swap.0), swap.1);
            Some(MemoryArena { dir, limit })
        });
        if made.is_none() {
            let why = "no memory cgroup can be made here (it needs root and a memory controller)";
            assert!(std::env::var_os("CI").is_none(), "{test}: {why}; CI is set");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("note: skipping {test}: {why}");
            }
        }
        made
    }

    /// `cmd`, moved into the group between its fork and its exec (what it starts is in it too).
    pub(super) fn enter(&self, cmd: &mut std::process::Command) {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let procs =
            std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
        // SAFETY: open, write and close are async-signal-safe; the path was made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Once [`HOG_COMMAND`] waits in `project`, limits the group to 2.5 times `supervisor`'s
    /// resident size beyond what it is charged now, and has the command fill that with children
    /// of 0.6 times the supervisor's size each, more than fit: the out-of-memory killer, weighing
    /// size alone, would take the supervisor first. What was set up, for a failure's message.
    pub(super) fn squeeze(&self, project: &Path, supervisor: u32) -> String {
        let deadline = Instant::now() + GONE_WAIT * 6;
        while !project.join("waiting").exists() {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let size = memory_figure(supervisor, "VmRSS");
        let child = size * 6 / 10;
        let room = size * 5 / 2;
        self.set_limit(self.usage() + room);
        let count = room / child + 5;
        std::fs::write(project.join("hog.args"), format!("{child} {count}")).unwrap();
        format!("{count} children of {child} bytes, a supervisor of {size}")
    }

    /// Once the command waits in `project` (it made `waiting`), leaves the group `room` bytes
    /// beyond what it is charged now and lets the command go on (`go`).
    pub(super) fn leave_room(&self, project: &Path, room: u64) {
        let deadline = Instant::now() + GONE_WAIT * 6;
        while !project.join("waiting").exists() {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.set_limit(self.usage() + room);
        std::fs::write(project.join("go"), "").unwrap();
    }

    /// Bytes the group is charged now.
    fn usage(&self) -> u64 {
        let file = if self.limit == "memory.max" {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn set_limit(&self, bytes: u64) {
        std::fs::write(self.dir.join(self.limit), bytes.to_string()).unwrap();
    }
}

impl Drop for MemoryArena {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on one pid touches no memory.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + GONE_WAIT;
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A memory figure of process `pid`'s status (`VmRSS`, `VmHWM`: the peak since it was last
/// reset), in bytes.
pub(super) fn memory_figure(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap();
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().unwrap();
    kib * 1024
}

/// The command of a session that fills its memory: it waits for [`MemoryArena::squeeze`], then
/// runs [`HOG`] (written to `hog.py` in the project by [`write_hog`]).
pub(super) const HOG_COMMAND: &str = "touch waiting; while [ ! -s hog.args ]; do sleep 0.05; done; \
                                      python3 hog.py $(cat hog.args)";

/// Starts children one at a time, each filling `argv[1]` bytes and then sleeping, until
/// `argv[2]` have started; prints how many the kernel killed (SIGKILL) on the way.
const HOG: &str = r#"
import os, signal, sys, time
size, count = int(sys.argv[1]), int(sys.argv[2])
children, killed = [], 0
for _ in range(count):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        block = bytearray(size)
        for i in range(0, size, 4096):
            block[i] = 1
        os.write(w, b"x")
        time.sleep(1000)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    children.append(pid)
    time.sleep(0.1)
for pid in children:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        killed += 1
    elif not done:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
print("killed %d of %d" % (killed, count))
"#;

/// Writes [`HOG`] to `hog.py` in `project`.
pub(super) fn write_hog(project: &Path) {
    std::fs::write(project.join("hog.py"), HOG).unwrap();
}

/// Asserts the hog's output says the kernel killed some of its children (else the memory never
/// ran out, and the test proved nothing).
pub(super) fn assert_memory_ran_out(outputs: &str, setup: &str) {
    let killed: u64 = outputs
        .split("killed ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the command did not finish ({setup}): {outputs}"));
    assert!(
        killed >= 1,
        "the memory never ran out, so this proves nothing ({setup}): {outputs}"
    );
}

#[test]
fn a_command_killed_as_the_machine_runs_out_of_memory_is_told_the_model() {
    // Without a memory bound of its own, a session's command that wants more than the machine
    // has left is the out-of-memory killer's (before the controller): the command sees only
    // `Killed`, and the model is told the machine ran out, and what would bound the session.
    let Some(arena) =
        MemoryArena::new("a_command_killed_as_the_machine_runs_out_of_memory_is_told_the_model")
    else {
        return;
    };
    let grab = "touch waiting; while [ ! -e go ]; do sleep 0.05; done; \
                exec python3 -c 'x = b\"x\" * (400 << 20)'";
    let env = Env::new(json!([exec_turn(grab), text_turn("told")]));
    let mut cmd = env.task_command("grab memory", &["--json", "--autonomy", "full"]);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    arena.enter(&mut cmd);
    let controller = cmd.spawn().unwrap();
    arena.leave_room(env.project.path(), 64 << 20);
    let out = controller.wait_with_output().unwrap();
    assert_success(&out);
    let told = tool_outputs(&env.turn_bodies()[1]).join("\n");
    assert!(
        told.contains("\"exit_code\":137"),
        "the command was killed: {told}"
    );
    // Said from the session's own group where one counts its kills (a v1 memory group is
    // made for every session, bound or not; a v2 group where the controller is handed down),
    // naming the group that ran out; else from the machine's count.
    let own_group = told.contains(&format!(
        "[limits: the kernel's out-of-memory killer killed 1 of this session's processes \
         (`Killed`, exit 137), which had no memory bound of their own: the group {} above the \
         controller",
        arena.dir.display()
    ));
    let machine = told.contains(
        "[limits: a command of this batch was `Killed` while the kernel's out-of-memory killer \
         killed ",
    );
    assert!(
        (own_group || (arena.limit == "memory.max" && machine))
            && told.contains("`[limits] memory_max_mib`"),
        "{told}"
    );
}

#[test]
fn a_command_that_exhausts_memory_loses_its_own_processes_not_the_controller() {
    // Children each smaller than the controller fill the memory its group allows: the kernel's
    // out-of-memory killer, weighing size alone, would take the controller first (and, in a
    // daemon, every session it holds; the daemon's own test is in daemon/limits.rs). A
    // session's processes carry the larger mark instead.
    let Some(arena) = MemoryArena::new(
        "a_command_that_exhausts_memory_loses_its_own_processes_not_the_controller",
    ) else {
        return;
    };
    let env = Env::new(json!([exec_turn(HOG_COMMAND), text_turn("survived")]));
    write_hog(env.project.path());
    let mut cmd = env.task_command("fill the memory", &["--json", "--autonomy", "full"]);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    arena.enter(&mut cmd);
    let controller = cmd.spawn().unwrap();
    let setup = arena.squeeze(env.project.path(), controller.id());
    let out = controller.wait_with_output().unwrap();
    assert_success(&out);
    assert_memory_ran_out(&tool_outputs(&env.turn_bodies()[1]).join("\n"), &setup);
}

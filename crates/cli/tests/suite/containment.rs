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
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// The pids written, one per line, to `file` in the project.
fn pids_in(project: &Path, file: &str) -> Vec<i32> {
    std::fs::read_to_string(project.join(file))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Asserts every pid is gone within [`GONE_WAIT`]; kills the survivors either way, so a failing
/// run leaves nothing behind.
fn assert_all_gone(pids: &[i32], what: &str) {
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

/// Forks sleeping children until a fork is refused (at most 300), writing each child's pid to
/// `bomb.pids` and the verdict to `bomb.out`.
const FORK_BOMB: &str = r#"python3 -c '
import os, time
n = 0
out = open("bomb.out", "w")
pids = open("bomb.pids", "w")
try:
    while n < 300:
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
' </dev/null >/dev/null 2>&1; cat bomb.out"#;

#[test]
fn a_bounded_fork_bomb_hits_pids_max_and_dies_with_the_session() {
    let env = Env::new(json!([exec_turn(FORK_BOMB), text_turn("bombed")]));
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[limits]\npids_max = 40\n",
    )
    .unwrap();
    let out = env.run_headless("fork a lot", &["--autonomy", "full"]);
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
fn session_groups_of(pid: i32) -> Vec<std::path::PathBuf> {
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

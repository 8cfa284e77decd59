//! Supervisor tests against `sh` scripts: whole-tree stops, cancellation, the bounds, the tail.

use std::path::Path;

use super::*;

fn sh(script: &str) -> ChildSpec {
    ChildSpec {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: std::env::temp_dir(),
        stdin: Vec::new(),
        passed: None,
    }
}

fn limits() -> Limits {
    Limits {
        max_stdout: 1 << 20,
        stdout_overflow: Overflow::Drain,
        max_stderr: 1 << 20,
        stderr_tail: 64,
        deadline: Some(Duration::from_secs(60)),
        grace: Duration::from_millis(500),
        drain: Duration::from_millis(500),
    }
}

/// Whether process `pid` is gone (or a zombie waiting for init), polling for up to ~10 s.
pub(crate) fn gone(pid: i32) -> bool {
    (0..1000).any(|_| {
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
        if alive {
            std::thread::sleep(Duration::from_millis(10));
        }
        !alive
    })
}

/// Waits until `path` holds one pid per line, then returns them.
pub(crate) async fn pids_in(path: &Path, count: usize) -> Vec<i32> {
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= count {
                return pids;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` is gone and reaped (no zombie left), polling for up to ~10 s while
/// the runtime runs on (a dropped leader is reaped by a task).
async fn reaped(pid: u32) -> bool {
    for _ in 0..1000 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The two ways a child is started: by tokio on the calling thread, and from a lasting thread
/// with a descriptor table of its own (the runtime's way).
#[derive(Debug, Clone, Copy)]
enum Via {
    CallingThread,
    Lasting,
}

const BOTH: [Via; 2] = [Via::CallingThread, Via::Lasting];

impl Via {
    async fn spawn(self, spec: ChildSpec, limits: Limits) -> std::io::Result<Running> {
        match self {
            Via::CallingThread => spawn(spec, limits),
            Via::Lasting => spawn_lasting(spec, limits, None).await,
        }
    }

    async fn run(self, spec: ChildSpec, limits: Limits) -> ChildReport {
        let running = self.spawn(spec, limits).await.unwrap();
        let leader = running.id().unwrap();
        let report = running.finish(std::future::pending()).await.unwrap();
        assert!(
            reaped(leader).await,
            "{self:?}: the leader {leader} was left a zombie"
        );
        report
    }
}

#[tokio::test]
async fn the_deadline_stops_the_whole_tree() {
    for via in BOTH {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pids");
        // One sleeper in the child's group, one in a session (and group) of its own.
        let script = format!(
            "sleep 60 & echo $! >> {f}; setsid sleep 60 & echo $! >> {f}; wait",
            f = file.display()
        );
        let mut lim = limits();
        lim.deadline = Some(Duration::from_millis(300));
        let report = via.run(sh(&script), lim).await;
        assert_eq!(report.ending, Ending::TimedOut, "{via:?}");
        for pid in pids_in(&file, 2).await {
            assert!(gone(pid), "{via:?}: process {pid} outlived the deadline");
        }
    }
}

#[tokio::test]
async fn cancel_stops_the_tree_and_kills_what_ignores_term() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    // The leader and its helper ignore TERM, so only the KILL after the grace period ends them.
    let script = format!(
        "trap '' TERM; sh -c \"trap '' TERM; sleep 60\" & echo $! >> {f}; echo $$ >> {f}; wait",
        f = file.display()
    );
    let token = CancelToken::new();
    let running = spawn(sh(&script), limits()).unwrap();
    let stopper = async {
        let pids = pids_in(&file, 2).await;
        token.cancel();
        pids
    };
    let (report, pids) = tokio::join!(running.finish(token.cancelled()), stopper);
    let report = report.unwrap();
    assert_eq!(report.ending, Ending::Cancelled);
    for pid in pids {
        assert!(gone(pid), "process {pid} outlived the cancel");
    }
}

#[tokio::test]
async fn a_cancelled_token_resolves_at_once_and_stays_cancelled() {
    let token = CancelToken::new();
    assert!(!token.is_cancelled());
    let clone = token.clone();
    clone.cancel();
    assert!(token.is_cancelled());
    token.cancelled().await;
    let report = run(sh("sleep 60"), limits(), token.cancelled())
        .await
        .unwrap();
    assert_eq!(report.ending, Ending::Cancelled);
}

#[tokio::test]
async fn output_is_bounded_and_drained() {
    let script = "head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2; exit 4";
    let mut lim = limits();
    lim.max_stdout = 1000;
    lim.max_stderr = 2000;
    let report = run(sh(script), lim, std::future::pending()).await.unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(4)));
    assert_eq!(report.stdout.bytes.len(), 1000);
    assert_eq!(report.stdout.dropped, 999_000);
    assert!(report.stdout.complete && report.stdout.truncated());
    assert_eq!(report.stderr.bytes.len(), 2000);
    assert_eq!(report.stderr.dropped, 298_000);
}

#[tokio::test]
async fn overflow_under_stop_ends_the_run() {
    let mut lim = limits();
    lim.max_stdout = 1000;
    lim.stdout_overflow = Overflow::Stop;
    let report = run(
        sh("head -c 100000 /dev/zero; sleep 60"),
        lim,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(report.ending, Ending::OutputTooLarge);
    assert_eq!(report.stdout.bytes.len(), 1000);
}

#[tokio::test]
async fn the_stderr_tail_is_the_end_of_the_stream_past_the_cap() {
    let script = "echo first >&2; head -c 100000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'the last line' >&2";
    let mut lim = limits();
    lim.max_stderr = 100;
    lim.stderr_tail = 16;
    let report = run(sh(script), lim, std::future::pending()).await.unwrap();
    assert!(report.stderr.bytes.starts_with(b"first\n"));
    assert!(report.stderr.truncated());
    assert_eq!(report.stderr_tail, "x\nthe last line\n");
}

#[tokio::test]
async fn a_child_that_closes_stdout_early_is_still_timed() {
    let mut lim = limits();
    lim.deadline = Some(Duration::from_millis(300));
    let report = run(
        sh("echo early; exec >&-; sleep 60"),
        lim,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(report.ending, Ending::TimedOut);
    assert_eq!(report.stdout.bytes, b"early\n");
    assert!(report.stdout.complete);
    // And one that closes it early and then exits by itself reports its own status.
    let report = run(
        sh("exec >&-; sleep 0.2; exit 3"),
        limits(),
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(3)));
}

#[tokio::test]
async fn a_descendant_holding_the_pipes_is_killed_after_the_drain_bound() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!("sleep 60 & echo $! >> {}; echo done", file.display());
    let report = run(sh(&script), limits(), std::future::pending())
        .await
        .unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(0)));
    assert_eq!(report.stdout.bytes, b"done\n");
    for pid in pids_in(&file, 1).await {
        assert!(gone(pid), "the leftover {pid} outlived the run");
    }
}

#[tokio::test]
async fn stdin_is_fed_and_closed_and_the_run_leaves_no_descriptor() {
    for via in BOTH {
        // The first spawn of each way may open what lasts (tokio's child signal).
        via.run(sh("true"), limits()).await;
        let before = open_descriptors();
        let mut spec = sh("cat; echo oops >&2; exit 3");
        spec.stdin = b"hello\n".to_vec();
        let report = via.run(spec, limits()).await;
        assert_eq!(report.ending, Ending::Exited(Some(3)), "{via:?}");
        assert_eq!(report.stdout.bytes, b"hello\n", "{via:?}");
        assert!(report.stdout.complete, "{via:?}");
        assert_eq!(report.stderr_tail, "oops\n", "{via:?}");
        assert_eq!(
            open_descriptors(),
            before,
            "{via:?}: a descriptor outlived the run"
        );
    }
}

#[tokio::test]
async fn a_child_killed_by_a_signal_has_no_code() {
    for via in BOTH {
        let report = via.run(sh("kill -9 $$"), limits()).await;
        assert_eq!(report.ending, Ending::Exited(None), "{via:?}");
    }
}

#[tokio::test]
async fn dropping_a_running_child_kills_its_tree_and_reaps_the_leader() {
    for via in BOTH {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pids");
        let script = format!(
            "setsid sleep 60 & echo $! >> {f}; echo $$ >> {f}; wait",
            f = file.display()
        );
        let running = via.spawn(sh(&script), limits()).await.unwrap();
        let leader = running.id().unwrap();
        let pids = pids_in(&file, 2).await;
        drop(running);
        for pid in pids {
            assert!(gone(pid), "{via:?}: process {pid} outlived the drop");
        }
        assert!(
            reaped(leader).await,
            "{via:?}: the leader {leader} was left a zombie"
        );
    }
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_and_leaks_nothing() {
    for via in BOTH {
        via.run(sh("true"), limits()).await;
        let before = open_descriptors();
        let mut spec = sh("true");
        spec.program = PathBuf::from("/nonexistent/program");
        let err = via.spawn(spec, limits()).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{via:?}");
        assert_eq!(open_descriptors(), before, "{via:?}");
    }
}

#[tokio::test]
async fn an_interactive_child_converses_then_stops_with_its_stderr_tail() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut spec = sh("echo starting >&2; while read l; do echo \"got $l\"; done; sleep 60");
    spec.stdin = b"ignored".to_vec();
    let mut lims = limits();
    lims.deadline = None;
    let (running, pipes) = spawn_interactive(spec, lims).unwrap();
    let pid = i32::try_from(running.id().unwrap()).unwrap();
    let mut stdin = pipes.stdin;
    let mut lines = BufReader::new(pipes.stdout).lines();
    stdin.write_all(b"one\n").await.unwrap();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("got one"));
    stdin.write_all(b"two\n").await.unwrap();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("got two"));
    // Closing stdin ends the loop; the child then sleeps until it is stopped.
    drop(stdin);
    let cancel = CancelToken::new();
    cancel.cancel();
    let report = running.finish(cancel.cancelled()).await.unwrap();
    assert_eq!(report.ending, Ending::Cancelled);
    assert_eq!(report.stderr_tail, "starting\n");
    assert!(
        report.stdout.bytes.is_empty(),
        "stdout belongs to the caller"
    );
    assert!(gone(pid));
}

#[tokio::test]
async fn an_interactive_child_that_exits_reports_its_code() {
    let (running, pipes) = spawn_interactive(sh("echo boom >&2; exit 7"), limits()).unwrap();
    drop(pipes);
    let report = running.finish(std::future::pending()).await.unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(7)));
    assert_eq!(report.stderr_tail, "boom\n");
}

#[test]
fn a_bare_name_is_found_in_the_childs_path_and_anything_else_is_left_to_the_child() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(a.join("dirtool")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for (path, mode) in [
        (a.join("tool"), 0o644),
        (b.join("tool"), 0o755),
        (b.join("dirtool"), 0o755),
    ] {
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let env = |path: &str| vec![(OsString::from("PATH"), OsString::from(path))];
    let ab = format!("{}:{}", a.display(), b.display());
    let found = |name: &str, env: &[(OsString, OsString)]| program_path(Path::new(name), env);
    assert_eq!(
        found("tool", &env(&ab)),
        b.join("tool"),
        "the first executable file"
    );
    assert_eq!(
        found("dirtool", &env(&ab)),
        b.join("dirtool"),
        "not a directory"
    );
    assert_eq!(found("missing", &env(&ab)), Path::new("missing"));
    assert_eq!(
        found("tool", &env(&format!("rel:{ab}"))),
        Path::new("tool"),
        "a relative entry: the child's working directory decides"
    );
    assert_eq!(
        found("tool", &env(&format!(":{ab}"))),
        Path::new("tool"),
        "an empty entry is the working directory too"
    );
    assert_eq!(found("tool", &[]), Path::new("tool"), "no PATH");
    assert_eq!(found("./tool", &env(&ab)), Path::new("./tool"));
}

#[tokio::test]
async fn a_bare_program_name_runs_from_the_childs_own_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("intendant-test-tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"found $1\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = sh("");
    spec.program = PathBuf::from("intendant-test-tool");
    spec.args = vec!["it".into()];
    spec.env = vec![(
        "PATH".into(),
        format!("{}:/usr/bin:/bin", dir.path().display()).into(),
    )];
    let report = run(spec, limits(), std::future::pending()).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&report.stdout.bytes), "found it\n");
    let mut elsewhere = sh("");
    elsewhere.program = PathBuf::from("intendant-test-tool");
    let err = spawn(elsewhere, limits()).unwrap_err();
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::NotFound,
        "the controller's own PATH is not searched"
    );
}

/// A descriptor passed to a child is open there at the number its variable names, whichever
/// way the child is started, and stays close-on-exec in the controller's table, so a spawn
/// that was not given it (here one started meanwhile from this thread) never inherits it.
#[tokio::test]
async fn a_passed_descriptor_reaches_its_child_alone_at_the_number_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let marked = dir.path().join("marked");
    std::fs::write(&marked, "").unwrap();
    let file = Arc::new(OwnedFd::from(std::fs::File::open(&marked).unwrap()));
    let show = "readlink /proc/self/fd/$PASSED_FD || echo none";
    for via in BOTH {
        let passed = Passed {
            files: vec![Arc::clone(&file)],
            announce: Arc::new(|fds: &[RawFd]| ("PASSED_FD".into(), fds[0].to_string().into())),
        };
        let spec = ChildSpec {
            passed: Some(passed),
            ..sh(show)
        };
        let report = via.run(spec, limits()).await;
        let said = String::from_utf8_lossy(&report.stdout.bytes);
        assert_eq!(said.trim(), marked.display().to_string(), "{via:?}");
        // SAFETY: F_GETFD reads a descriptor's flags.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "{via:?}");
        // Another child, told the number but not given the descriptor, finds nothing there.
        let number = file.as_raw_fd().to_string();
        let mut other = sh(show);
        other.env.push(("PASSED_FD".into(), number.into()));
        let report = via.run(other, limits()).await;
        let said = String::from_utf8_lossy(&report.stdout.bytes);
        assert_eq!(said.trim(), "none", "{via:?}");
    }
}

#[tokio::test]
async fn a_missing_working_directory_is_named_not_taken_for_a_missing_program() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("project");
    for via in BOTH {
        let spec = ChildSpec {
            cwd: gone.clone(),
            ..sh("true")
        };
        let e = via.spawn(spec, limits()).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{via:?}: {e}");
        let said = e.to_string();
        assert!(
            said.contains(&format!(
                "its working directory {} does not exist",
                gone.display()
            )),
            "{via:?}: {said}"
        );
        // A missing program in an existing directory is still the system's word alone.
        let spec = ChildSpec {
            program: dir.path().join("no-such-program"),
            ..sh("true")
        };
        let e = via.spawn(spec, limits()).await.unwrap_err();
        assert!(!e.to_string().contains("working directory"), "{via:?}: {e}");
    }
}

/// A spawn on a lasting thread whose caller leaves before its job runs (a daemon shutting down,
/// a session stopped mid-spawn) leaves the job holding none of the process's descriptors: the
/// passed one closes here with the caller, never on the job's thread, whose table is its own
/// (closing its number there closed whatever that number was in it; a debug build aborts the
/// whole process on it, as a daemon test run did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_spawn_left_before_its_job_ran_closes_its_passed_descriptor_here() {
    // Every lasting thread busy, so the spawn's job waits in the queue.
    let started = Arc::new(std::sync::Barrier::new(lasting::MAX_THREADS + 1));
    let release = Arc::new(std::sync::Barrier::new(lasting::MAX_THREADS + 1));
    let busy: Vec<_> = (0..lasting::MAX_THREADS)
        .map(|_| {
            let (started, release) = (Arc::clone(&started), Arc::clone(&release));
            tokio::spawn(lasting::lend(Vec::new(), move |_| {
                started.wait();
                release.wait();
                Ok(())
            }))
        })
        .collect();
    let all_busy = Arc::clone(&started);
    tokio::task::spawn_blocking(move || all_busy.wait())
        .await
        .unwrap();
    let (mut reader, writer) = std::io::pipe().unwrap();
    let spec = ChildSpec {
        passed: Some(Passed {
            files: vec![Arc::new(OwnedFd::from(writer))],
            announce: Arc::new(|fds: &[RawFd]| ("PASSED_FD".into(), fds[0].to_string().into())),
        }),
        ..sh("true")
    };
    let mut spawn = Box::pin(spawn_lasting(spec, limits(), None));
    let waited = tokio::time::timeout(Duration::from_millis(200), spawn.as_mut()).await;
    assert!(waited.is_err(), "the job waits for a thread");
    // The caller leaves; the queued job is then taken and dropped unrun.
    drop(spawn);
    tokio::task::spawn_blocking(move || release.wait())
        .await
        .unwrap();
    for job in busy {
        job.await.unwrap().unwrap();
    }
    // The write end is closed (here, with the caller): its reader sees the end at once.
    let read = tokio::task::spawn_blocking(move || {
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut rest).map(|_| rest)
    });
    let rest = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the passed descriptor was closed")
        .unwrap()
        .unwrap();
    assert!(rest.is_empty());
    // The threads still spawn (none lost a descriptor of its own table to a stray close).
    for _ in 0..lasting::MAX_THREADS {
        let report = Via::Lasting.run(sh("echo fine"), limits()).await;
        assert_eq!(String::from_utf8_lossy(&report.stdout.bytes), "fine\n");
    }
}

/// What an interactive child reads as its `oom_score_adj` once it is sent a line (it is marked
/// before it is sent anything), and what a child of its own inherits.
async fn oom_marks_of_a_child() -> String {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let script =
        "read l; echo \"$(cat /proc/self/oom_score_adj) $(sh -c 'cat /proc/self/oom_score_adj')\"";
    let (running, pipes) = spawn_interactive(sh(script), limits()).unwrap();
    let mut stdin = pipes.stdin;
    stdin.write_all(b"go\n").await.unwrap();
    let line = BufReader::new(pipes.stdout).lines().next_line().await;
    drop(running.finish(std::future::pending()).await);
    line.unwrap().unwrap_or_default()
}

#[tokio::test]
async fn a_child_goes_before_the_controller_when_memory_runs_out_and_a_higher_mark_stays() {
    let own = || std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
    let controller = own();
    let marked = controller.trim().parse::<i32>().unwrap().max(500);
    assert_eq!(oom_marks_of_a_child().await, format!("{marked} {marked}"));
    assert_eq!(own(), controller, "the controller's own mark is unchanged");
    // A controller marked above it (this test's process alone: nextest runs each test in a
    // process of its own, and raising is always allowed) gives its children its own.
    std::fs::write("/proc/self/oom_score_adj", "900").unwrap();
    assert_eq!(oom_marks_of_a_child().await, "900 900");
}

/// The priority this process runs at.
fn own_nice() -> i32 {
    rustix::process::getpriority_process(None).unwrap()
}

#[tokio::test]
async fn an_entered_child_writes_itself_into_its_groups_and_lowers_its_priority_before_its_exec() {
    use std::io::{Read, Write};
    // The one group is a pipe kept full: the child's write of itself waits there until the
    // drainer reads, and the program, which leaves a marker, must not have run meanwhile.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let (mut reader, mut writer) = std::io::pipe().unwrap();
    rustix::io::ioctl_fionbio(&writer, true).unwrap();
    let mut filled = 0;
    while let Ok(n) = writer.write(&[b'x'; 4096]) {
        filled += n;
    }
    rustix::io::ioctl_fionbio(&writer, false).unwrap();
    let seen = marker.clone();
    let drainer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let ran_early = seen.exists();
        // To its end: the test closes its end once the spawn returned.
        let mut read = Vec::new();
        reader.read_to_end(&mut read).unwrap();
        (ran_early, read.split_off(filled))
    });
    let entry = Entry {
        groups: vec![Arc::new(std::fs::File::from(OwnedFd::from(writer)))],
        nice: Some(10),
    };
    let script = format!("touch {}; cut -d' ' -f19 /proc/$$/stat", marker.display());
    let (running, pipes) = spawn_interactive_entered(sh(&script), limits(), &entry).unwrap();
    drop(entry);
    let (ran_early, written) = drainer.join().unwrap();
    assert!(
        !ran_early,
        "the program ran before the child entered its group"
    );
    assert_eq!(
        written, b"0",
        "the child names itself, as a cgroup.procs write"
    );
    let mut out = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut { pipes.stdout }, &mut out)
        .await
        .unwrap();
    assert_eq!(out.trim(), own_nice().max(10).to_string(), "its nice value");
    let report = running.finish(std::future::pending()).await.unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(0)));
    assert!(marker.exists());
}

#[tokio::test]
async fn an_entry_refused_fails_the_spawn_and_runs_nothing() {
    // A group that refuses the write (here a file open only for reading) fails the start, as a
    // cgroup refusing the child would, and the program never runs.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let before = open_descriptors();
    let entry = Entry {
        groups: vec![Arc::new(std::fs::File::open("/dev/null").unwrap())],
        nice: None,
    };
    let script = format!("touch {}", marker.display());
    let err = spawn_interactive_entered(sh(&script), limits(), &entry).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
    drop(entry);
    assert!(!marker.exists());
    assert_eq!(open_descriptors(), before);
}

#[test]
fn a_guarded_start_names_the_controller_and_the_program_found_and_refuses_what_cannot_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec = |program: &str| ChildSpec {
        program: program.into(),
        args: vec!["--flag".into()],
        env: vec![("PATH".into(), bin.clone().into_os_string())],
        cwd: dir.path().to_path_buf(),
        ..ChildSpec::default()
    };
    let missing = guarded(spec("tool"), Path::new("/no/intendant-runtime")).unwrap_err();
    assert!(
        missing.to_string().contains("/no/intendant-runtime"),
        "{missing}"
    );
    let runtime = &dir.path().join("intendant-runtime");
    std::fs::write(runtime, "").unwrap();
    let guarded_spec = guarded(spec("tool"), runtime).unwrap();
    assert_eq!(&guarded_spec.program, runtime);
    assert_eq!(
        guarded_spec.args,
        vec![
            OsString::from("--guard"),
            std::process::id().to_string().into(),
            "--".into(),
            tool.clone().into_os_string(),
            "--flag".into(),
        ]
    );
    assert_eq!(guarded_spec.cwd, dir.path());
    // Relative to the child's directory, as its own start would look.
    assert_eq!(
        guarded(spec("bin/tool"), runtime).unwrap().args[3],
        "bin/tool"
    );
    // A bare name not found here is the guard's to look up (and to fail on, exit 127).
    assert_eq!(
        guarded(spec("elsewhere"), runtime).unwrap().args[3],
        "elsewhere"
    );
    let err = guarded(spec("/no/such/program"), runtime).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = guarded(spec(&tool.display().to_string()), runtime).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
}

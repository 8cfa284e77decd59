//! What one `intendant-runtime` invocation costs as a session turn pays it: the runtime started
//! as the controller starts it (`core::runner`), sandboxed with both layers required, in a
//! project root with the controller's default write set, measured as wall time and the CPU time
//! of the reaped children. `runtime_invocation` reports it against a plain spawn;
//! `daemon_sessions` divides it by the cores to get the floor a daemon's turns cannot beat.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_protocol::runtime::{
    LOG_DIR_ENV, SANDBOX_READ_MASKS_ENV, SANDBOX_REQUIRE_FULL_ENV, SANDBOX_WRITE_PATHS_ENV,
};

/// The batch every measured invocation runs: one `execAsAgent` of `true`.
pub const TRUE_BATCH: &[u8] =
    br#"{"commands":[{"function":"execAsAgent","nonce":1,"command":"true"}]}"#;

/// A side's round: wall time and the children's CPU time, both over all its invocations.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// Elapsed time of the round.
    pub wall: Duration,
    /// User + system time of the children reaped during the round.
    pub cpu: Duration,
}

impl Cost {
    /// A cost every measured one beats, to start a `best` fold with.
    pub const WORST: Cost = Cost {
        wall: Duration::MAX,
        cpu: Duration::MAX,
    };

    /// The better of the two, figure by figure.
    pub fn best(self, other: Cost) -> Cost {
        Cost {
            wall: self.wall.min(other.wall),
            cpu: self.cpu.min(other.cpu),
        }
    }
}

/// Runs `one` `n` times; the wall time and the CPU time of the children reaped meanwhile.
pub fn measure(n: usize, mut one: impl FnMut() -> Result<()>) -> Result<Cost> {
    let cpu_before = children_cpu();
    let start = Instant::now();
    for _ in 0..n {
        one()?;
    }
    let wall = start.elapsed();
    Ok(Cost {
        wall,
        cpu: children_cpu().saturating_sub(cpu_before),
    })
}

/// What starting the two programs each turn starts costs by itself on this host, `n` of each,
/// one at a time: `runtime` given no batch (it starts, finds its input empty and exits 2) and
/// `bash -c true` (the shell it runs a command in). The floor counts this start-up, but it is
/// the host's, not the runtime's work nor the daemon's: a C library's start probes the CPU
/// with `cpuid` about fifty times, which a virtual machine traps (8 microseconds each on the VM
/// of docs/benchmarks.md, 0.4 ms a start), so what a bare start costs is the host's to say.
pub fn process_starts(n: usize, runtime: &Path) -> Result<Cost> {
    let bash = intendant_testkit::optional::on_path("bash").context("no bash on PATH")?;
    let quiet = |program: &Path| {
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    measure(n, || {
        let status = quiet(runtime).status()?;
        if status.code() != Some(2) {
            bail!("{} with no batch ended {status}, not 2", runtime.display());
        }
        let status = quiet(&bash).args(["-c", "true"]).status()?;
        if !status.success() {
            bail!("{} -c true failed: {status}", bash.display());
        }
        Ok(())
    })
}

/// Runs `n` invocations of `runtime` from `lanes` threads at once, each with a project of its
/// own under `dir` (as a daemon's running sessions each have theirs): what a supervisor that
/// costs nothing would take for the same turns, and the children's CPU meanwhile.
pub fn measure_parallel(n: usize, lanes: usize, dir: &Path, runtime: &Path) -> Result<Cost> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut projects = (0..lanes.max(1))
        .map(|lane| Project::create(&dir.join(format!("lane-{lane}"))))
        .collect::<Result<Vec<_>>>()?;
    let next = AtomicUsize::new(0);
    let cpu_before = children_cpu();
    let start = Instant::now();
    std::thread::scope(|scope| {
        let lanes: Vec<_> = projects
            .iter_mut()
            .map(|project| {
                let next = &next;
                scope.spawn(move || -> Result<()> {
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        project.invoke(runtime)?;
                    }
                    Ok(())
                })
            })
            .collect();
        lanes.into_iter().try_for_each(|lane| {
            lane.join()
                .map_err(|_| anyhow::anyhow!("a lane panicked"))?
        })
    })?;
    let wall = start.elapsed();
    Ok(Cost {
        wall,
        cpu: children_cpu().saturating_sub(cpu_before),
    })
}

/// User + system time of every reaped child of this process so far (and, through them, of
/// every descendant they reaped).
pub fn children_cpu() -> Duration {
    rusage_cpu(&rusage(libc::RUSAGE_CHILDREN))
}

/// `getrusage(who)` (`RUSAGE_SELF` or `RUSAGE_CHILDREN`, which cannot fail).
pub fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero `rusage` is valid, and getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable `rusage`.
    unsafe { libc::getrusage(who, &mut usage) };
    usage
}

/// The user + system time `usage` holds.
pub fn rusage_cpu(usage: &libc::rusage) -> Duration {
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The CPU time of process `pid` so far, from `/proc/PID/stat`: its own (every thread, user +
/// system) and that of the children it reaped (their descendants' included as they reaped
/// them), at the kernel's clock-tick resolution (10 ms at the usual 100 Hz).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcCpu {
    /// The process's own threads.
    pub own: Duration,
    /// The children it waited for.
    pub reaped: Duration,
}

impl ProcCpu {
    /// Reads `pid`'s figures.
    pub fn of(pid: u32) -> Result<ProcCpu> {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // The command name (field 2) may hold spaces: count fields after its closing paren.
        let after = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .with_context(|| format!("{path}: no command name"))?;
        let fields: Vec<&str> = after.split_whitespace().collect();
        // After the name: state is field 3, so utime (14) .. cstime (17) are at 11 .. 14.
        let tick = |i: usize| -> Result<u64> {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .with_context(|| format!("{path}: field {} is not a tick count", i + 3))
        };
        // SAFETY: sysconf reads a constant and touches no memory of ours.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
            .ok()
            .filter(|hz| *hz > 0)
            .context("sysconf(_SC_CLK_TCK) failed")?;
        let time = |ticks: u64| Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz);
        Ok(ProcCpu {
            own: time(tick(11)? + tick(12)?),
            reaped: time(tick(13)? + tick(14)?),
        })
    }

    /// What was spent between `earlier` and `self`.
    pub fn since(self, earlier: ProcCpu) -> ProcCpu {
        ProcCpu {
            own: self.own.saturating_sub(earlier.own),
            reaped: self.reaped.saturating_sub(earlier.reaped),
        }
    }
}

/// This process's own CPU time so far (every thread, user + system).
pub fn own_cpu() -> Duration {
    rusage_cpu(&rusage(libc::RUSAGE_SELF))
}

/// A project for the measured invocations: a fresh git repository at `dir/project`, and
/// `dir/artifacts` for their log directories.
pub struct Project {
    root: PathBuf,
    artifacts: PathBuf,
    next: usize,
}

impl Project {
    /// Makes the repository and the artifacts directory under `dir` (made if missing).
    pub fn create(dir: &Path) -> Result<Project> {
        let root = dir.join("project");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::create_dir(&root)?;
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .status()
            .context("git init")?;
        if !git.success() {
            bail!("git init failed: {git}");
        }
        let artifacts = dir.join("artifacts");
        std::fs::create_dir(&artifacts)?;
        Ok(Project {
            root,
            artifacts,
            next: 0,
        })
    }

    /// One invocation of `runtime` running [`TRUE_BATCH`], with a log directory of its own as a
    /// session's artifacts directory would be; an error unless it exits 0 with one result line.
    pub fn invoke(&mut self, runtime: &Path) -> Result<()> {
        use std::io::Write;
        self.next += 1;
        let log_dir = self.artifacts.join(self.next.to_string());
        std::fs::create_dir(&log_dir)?;
        let roots = write_paths(&self.root, &log_dir);
        let paths = std::env::join_paths(&roots)?;
        // The artifacts directory plays the state root: hidden but for this invocation's logs.
        let masks = crate::read_masks(&self.artifacts, &self.root, &roots)?;
        let mut child = Command::new(runtime)
            .current_dir(&self.root)
            .env(LOG_DIR_ENV, &log_dir)
            .env(SANDBOX_WRITE_PATHS_ENV, paths)
            .env(SANDBOX_READ_MASKS_ENV, masks)
            .env(SANDBOX_REQUIRE_FULL_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        child
            .stdin
            .take()
            .context("no stdin")?
            .write_all(TRUE_BATCH)?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("{} failed: {}", runtime.display(), out.status);
        }
        if out.stdout.iter().filter(|b| **b == b'\n').count() != 1 {
            bail!(
                "expected one result line, got {:?}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(())
    }
}

/// The controller's default write set (`core::runtime_env::WriteRoots`) for `project`.
fn write_paths(project: &Path, log_dir: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |name: &str, sub: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(sub)))
    };
    let mut paths = vec![project.to_path_buf(), PathBuf::from("/tmp")];
    if let Some(tmp) = std::env::var_os("TMPDIR").filter(|v| !v.is_empty()) {
        paths.push(tmp.into());
    }
    paths.push(log_dir.to_path_buf());
    paths.extend(var("CARGO_HOME", ".cargo"));
    paths.extend(var("RUSTUP_HOME", ".rustup"));
    paths.extend(var("XDG_CACHE_HOME", ".cache"));
    paths
}

//! Threads that live as long as the process, to start children that are bound to the thread
//! that started them, each thread with a descriptor table of its own.
//!
//! The design decisions to know:
//! - The runtime asks the kernel for `SIGTERM` when its parent dies (`PR_SET_PDEATHSIG`,
//!   `intendant_runtime::child::bind_to_parent`), and the kernel means the parent *thread*.
//!   Started from tokio's blocking pool (which keeps `posix_spawn`'s wait for the child's `exec`
//!   off the async workers), a runtime was killed as soon as the thread that had started it sat
//!   idle for the pool's keep-alive, 10 s: in a quiet controller every batch that ran longer
//!   ended with no result. These threads never end, so a child started on one lives as long as
//!   its controller. When more jobs wait than threads do, a job starts another (up to
//!   [`MAX_THREADS`]), so spawns still run side by side, and none waits on an async worker.
//! - A spawn copies the spawning thread's descriptor table into the child (a reference taken on
//!   every open file) and the child's `exec` closes them all again. A daemon holds about a dozen
//!   for each session, idle ones too, so every spawn grew dearer with every session (on the
//!   benchmark VM about 0.13 ms a spawn at 1,300 descriptors, 0.5 ms at 5,000). Each thread
//!   here therefore unshares its table when it starts and closes all but stdin, stdout and
//!   stderr; a job gets the few descriptors it needs *lent*: copied from the process's table
//!   (`pidfd_getfd`) while the caller keeps them open, and a child started here copies only
//!   those.
//! - So a job never uses a descriptor of the process's table by number: not its caller's and
//!   not the async runtime's (a tokio waker writes to the I/O driver's eventfd by number). A job
//!   leaves its outcome in its [`Loan`] and wakes its caller through a pipe lent like the rest;
//!   its outcome must hold no descriptor, as either side may drop it.
//!
//! Where the kernel lacks any of this (`pidfd_getfd`: Linux 5.6; `close_range` unsharing: 5.9),
//! a thread keeps the process's table and a job gets duplicates instead: the same protocol,
//! the old cost.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use super::leader::{pidfd_getfd, pidfd_open};

/// Most lasting threads; past it, jobs wait for one.
pub(crate) const MAX_THREADS: usize = 32;

/// How often a caller looks at its loan without being woken (a job that could not copy the
/// wake pipe cannot wake it).
const RECHECK: Duration = Duration::from_secs(1);

type Job = Box<dyn FnOnce(&Table) + Send>;

/// A descriptor of the process's table lent to a job: the caller keeps it open until the job
/// has its copy or the caller leaves.
pub type Lent = Arc<dyn AsFd + Send + Sync>;

/// A child a job started: killed and reaped when dropped before the caller took its pid
/// ([`Started::into_pid`]), as when the caller left meanwhile.
#[derive(Debug)]
pub struct Started {
    pid: u32,
    armed: bool,
}

impl Started {
    /// Takes charge of child `pid`.
    pub fn new(pid: u32) -> Started {
        Started { pid, armed: true }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The pid; the caller now reaps it.
    pub fn into_pid(mut self) -> u32 {
        self.armed = false;
        self.pid
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        if !self.armed {
            return;
        }
        // SAFETY: kill and waitpid on our own unreaped child; no memory is passed but the
        // status word, which outlives the call.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
    }
}

/// Runs `job` on one of the lasting threads with copies of `lent`, in that thread's table and
/// in order, and gives back its outcome. The copies are the job's to close; the originals stay
/// open here until it has them. Leaving (dropping the future) before the job has run means it
/// never runs; after, its outcome is dropped when it comes, on the job's thread or here, so `T`
/// must hold no descriptor (a job's descriptors are numbers in its own table). Nor may `job`
/// hold one of the process's: it runs, or is dropped unrun, on the job's thread, where closing
/// one closes whatever that number is there (what it needs it is lent).
pub async fn lend<T: Send + 'static>(
    lent: Vec<Lent>,
    job: impl FnOnce(Vec<OwnedFd>) -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let (wake_rx, wake_tx) = io::pipe()?;
    let mut numbers: Vec<RawFd> = lent.iter().map(|fd| fd.as_fd().as_raw_fd()).collect();
    numbers.push(wake_tx.as_raw_fd());
    let loan = Arc::new(Loan {
        state: Mutex::new(LoanState {
            lent: Some(numbers),
            outcome: None,
        }),
    });
    let lender = Lender {
        loan: Arc::clone(&loan),
        _lent: (lent, wake_tx),
    };
    let wake = tokio::net::unix::pipe::Receiver::from_owned_fd(wake_rx.into())?;
    pool().submit(Box::new(move |table| loan.serve(table, job)))?;
    loop {
        if let Some(outcome) = lender.loan.lock().outcome.take() {
            return outcome;
        }
        tokio::select! {
            ready = wake.readable() => {
                ready?;
                let _ = wake.try_read(&mut [0u8; 8]);
            }
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// What a caller and its job share.
struct Loan<T> {
    state: Mutex<LoanState<T>>,
}

struct LoanState<T> {
    /// The lent descriptors' numbers in the process's table, the wake pipe's last; `None`
    /// once the caller left (and closed them).
    lent: Option<Vec<RawFd>>,
    outcome: Option<io::Result<T>>,
}

impl<T> Loan<T> {
    fn lock(&self) -> MutexGuard<'_, LoanState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The job's side: copies under the lock (so the caller cannot close an original
    /// meanwhile), runs `job` without it, leaves the outcome and wakes the caller.
    fn serve(&self, table: &Table, job: impl FnOnce(Vec<OwnedFd>) -> io::Result<T>) {
        let (copies, wake) = {
            let state = self.lock();
            let Some((wake, lent)) = state.lent.as_deref().and_then(<[RawFd]>::split_last) else {
                return;
            };
            // The wake pipe first, so a failed copy of another is still told.
            let wake = table.copy(*wake).ok();
            let copies = lent
                .iter()
                .map(|fd| table.copy(*fd))
                .collect::<io::Result<Vec<_>>>();
            (copies, wake)
        };
        let outcome = match copies {
            Ok(fds) => std::panic::catch_unwind(AssertUnwindSafe(|| job(fds)))
                .unwrap_or_else(|_| Err(io::Error::other("a spawning thread's job panicked"))),
            Err(e) => Err(io::Error::other(format!(
                "a spawning thread cannot copy a lent descriptor: {e}"
            ))),
        };
        let abandoned = {
            let mut state = self.lock();
            if state.lent.is_some() {
                state.outcome = Some(outcome);
                None
            } else {
                Some(outcome)
            }
        };
        // The caller left: the outcome (no descriptor in it) ends here, outside the lock.
        drop(abandoned);
        if let Some(wake) = wake {
            let _ = File::from(wake).write(&[1]);
        }
    }
}

/// The caller's side of a loan: the originals, closed only after the loan is marked left.
struct Lender<T> {
    loan: Arc<Loan<T>>,
    _lent: (Vec<Lent>, io::PipeWriter),
}

impl<T> Drop for Lender<T> {
    fn drop(&mut self) {
        let outcome = {
            let mut state = self.loan.lock();
            state.lent = None;
            state.outcome.take()
        };
        drop(outcome);
    }
}

thread_local! {
    /// Whether this thread is a lasting one whose table is its own.
    static OWN_TABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread has a descriptor table of its own (a lasting thread's, on a
/// kernel that allows it): what a job may change in it, no other thread's spawn sees.
pub fn table_is_own() -> bool {
    OWN_TABLE.get()
}

/// How a lasting thread reaches the process's descriptors.
#[derive(Debug)]
enum Table {
    /// A table of its own; `process` (in it) is a pidfd of this process, whose table every
    /// other thread shares.
    Own { process: OwnedFd },
    /// The process's table (an older kernel, or not Linux).
    Shared,
    /// A table of its own and no way to the process's: every job fails with this.
    Cut(String),
}

impl Table {
    /// Gives the calling thread a table of its own holding stdin, stdout and stderr only, when
    /// the kernel can also copy descriptors into it from the process's; else leaves it shared.
    #[cfg(target_os = "linux")]
    fn own() -> Table {
        let Ok(probe) = pidfd_open(std::process::id()) else {
            return Table::Shared;
        };
        if pidfd_getfd(&probe, probe.as_raw_fd()).is_err() {
            return Table::Shared;
        }
        drop(probe);
        // SAFETY: close_range with CLOSE_RANGE_UNSHARE first gives this thread a table of its
        // own, then closes in that one only; it reads no memory of ours.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_UNSHARE,
            )
        };
        if rc != 0 {
            return Table::Shared;
        }
        // A process whose stdin, stdout or stderr is closed would leave 0-2 free here (a Rust
        // binary's start-up opens /dev/null there, a host embedding this crate may not), and a
        // copy landing on one would be overwritten by the child's own set-up of 0-2.
        for fd in 0..3 {
            // SAFETY: F_GETFD reads a descriptor's flags and touches no memory.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0
                && let Ok(null) = File::open("/dev/null")
            {
                // Kept open for the thread's life, in the lowest free place (`fd` or below).
                let _ = std::os::fd::IntoRawFd::into_raw_fd(null);
            }
        }
        match pidfd_open(std::process::id()) {
            Ok(process) => Table::Own { process },
            Err(e) => Table::Cut(format!(
                "a spawning thread has no way to the process's descriptors: {e}"
            )),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn own() -> Table {
        Table::Shared
    }

    /// A copy in this thread's table of `fd` of the process's table.
    fn copy(&self, fd: RawFd) -> io::Result<OwnedFd> {
        match self {
            Table::Own { process } => pidfd_getfd(process, fd),
            // SAFETY: `fd` is open in this (the process's) table: its lender keeps it open
            // until the copy is made, which the loan's lock orders.
            Table::Shared => unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned(),
            Table::Cut(why) => Err(io::Error::other(why.clone())),
        }
    }
}

/// The lasting threads and their queue.
struct Pool {
    jobs: mpsc::Sender<Job>,
    queue: Mutex<mpsc::Receiver<Job>>,
    /// Threads started.
    threads: AtomicUsize,
    /// Threads waiting for a job.
    idle: AtomicUsize,
    /// Jobs sent and not yet taken.
    queued: AtomicUsize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (jobs, queue) = mpsc::channel();
        Pool {
            jobs,
            queue: Mutex::new(queue),
            threads: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
        }
    })
}

impl Pool {
    /// Queues `job`, starting a thread for it when the idle ones are too few.
    fn submit(&'static self, job: Job) -> io::Result<()> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.grow_if_busy() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        self.jobs
            .send(job)
            .map_err(|_| io::Error::other("the spawning threads are gone"))
    }

    /// Starts another thread when more jobs wait than threads do, below [`MAX_THREADS`]. A
    /// thread counts itself busy before it counts its job taken, so a race errs towards one
    /// thread too many, never a job left waiting behind a busy one. Fails only when there is no
    /// thread at all and none can be started.
    fn grow_if_busy(&'static self) -> io::Result<()> {
        if self.queued.load(Ordering::SeqCst) <= self.idle.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Ok(started) = self
            .threads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_THREADS).then_some(n + 1)
            })
        else {
            // Full: the job waits for a thread to finish.
            return Ok(());
        };
        let spawned = std::thread::Builder::new()
            .name(format!("spawner-{started}"))
            .spawn(move || self.serve());
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                self.threads.fetch_sub(1, Ordering::SeqCst);
                if started == 0 {
                    Err(io::Error::other(format!(
                        "cannot start a spawning thread: {e}"
                    )))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// One lasting thread: makes its table its own, then runs jobs for the life of the process.
    fn serve(&self) {
        let table = Table::own();
        OWN_TABLE.set(matches!(table, Table::Own { .. }));
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            let job = self
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv();
            self.idle.fetch_sub(1, Ordering::SeqCst);
            let Ok(job) = job else {
                return;
            };
            self.queued.fetch_sub(1, Ordering::SeqCst);
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&table)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// The lasting threads of this process (each test runs in a process of its own).
    fn spawner_threads() -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|comm| comm.starts_with("spawner-"))
            })
            .map(|t| t.path())
            .collect()
    }

    /// The descriptors open in the calling thread's table.
    fn own_descriptors() -> usize {
        // One more than listed while listing: read_dir's own.
        std::fs::read_dir("/proc/thread-self/fd").unwrap().count() - 1
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_threads_get_company_and_a_panicking_job_ends_none() {
        let name = lend(Vec::new(), |_| {
            Ok(std::thread::current().name().map(str::to_owned))
        })
        .await
        .unwrap()
        .unwrap();
        assert!(name.starts_with("spawner-"), "{name}");
        // Four jobs that wait for each other can only finish on four threads at once.
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let jobs: Vec<_> = (0..4)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(lend(Vec::new(), move |_| Ok(barrier.wait().is_leader())))
            })
            .collect();
        let mut leaders = 0;
        for job in jobs {
            leaders += usize::from(job.await.unwrap().unwrap());
        }
        assert_eq!(leaders, 1);
        let threads = spawner_threads().len();
        assert!((4..=MAX_THREADS).contains(&threads), "{threads}");
        for _ in 0..=threads {
            #[allow(clippy::panic)]
            let failed = lend(Vec::new(), |_| -> io::Result<u32> {
                panic!("a job that panics")
            })
            .await;
            assert!(failed.unwrap_err().to_string().contains("panicked"));
        }
        // The panics ended no thread, and the idle ones took the jobs.
        assert_eq!(spawner_threads().len(), threads);
        assert_eq!(lend(Vec::new(), |_| Ok(7)).await.unwrap(), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_sees_only_what_it_was_lent_in_a_table_of_its_own() {
        let many: Vec<File> = (0..500).map(|_| File::open("/dev/null").unwrap()).collect();
        let (mut reader, writer) = io::pipe().unwrap();
        let lent: Vec<Lent> = vec![Arc::new(OwnedFd::from(writer))];
        let seen = lend(lent, |fds| {
            let seen = own_descriptors();
            for fd in fds {
                File::from(fd).write_all(b"through the copy")?;
            }
            Ok(seen)
        })
        .await
        .unwrap();
        // stdin, stdout, stderr, the pidfd of the process, the lent pipe and the wake pipe.
        assert!(seen <= 6, "the job's table holds {seen} descriptors");
        assert!(own_descriptors() > 500);
        // Both copies of the write end are closed: the job's with it, the caller's on return.
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through the copy");
        // The threads' tables stay small while the process's grows (once idle: a job's thread
        // closes its copy of the wake pipe just after its caller may have gone on).
        let most_held = || {
            spawner_threads()
                .iter()
                .filter_map(|thread| std::fs::read_dir(thread.join("fd")).ok())
                .map(Iterator::count)
                .max()
                .unwrap_or(0)
        };
        let mut held = most_held();
        for _ in 0..200 {
            if held <= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            held = most_held();
        }
        assert!(
            held <= 4,
            "an idle spawning thread holds {held} descriptors"
        );
        drop(many);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_leaves_closes_its_lent_descriptors_and_the_outcome_is_dropped() {
        /// Sets its flag when dropped.
        #[derive(Debug)]
        struct Outcome(Arc<AtomicBool>);
        impl Drop for Outcome {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (mut reader, writer) = io::pipe().unwrap();
        let lent: Vec<Lent> = vec![Arc::new(OwnedFd::from(writer))];
        let flag = Arc::clone(&dropped);
        let caller = tokio::spawn(lend(lent, move |fds| {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            drop(fds);
            Ok(Outcome(flag))
        }));
        tokio::task::spawn_blocking(move || started_rx.recv().unwrap())
            .await
            .unwrap();
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        assert!(!dropped.load(Ordering::SeqCst));
        release_tx.send(()).unwrap();
        // The pipe's end: the caller's original closed when it left, the copy with the job.
        let mut rest = Vec::new();
        tokio::task::spawn_blocking(move || reader.read_to_end(&mut rest).unwrap())
            .await
            .unwrap();
        for _ in 0..200 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the outcome of a job whose caller left was never dropped");
    }

    #[test]
    fn a_table_of_its_own_fills_a_closed_stdin_so_no_copy_lands_there() {
        let (table, stdin_open, process) = std::thread::spawn(|| {
            // This thread's own table first, so closing stdin leaves the process's alone.
            // SAFETY: unshare and close touch only this thread's descriptor table.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_FILES), 0);
                libc::close(0);
            }
            let table = Table::own();
            // SAFETY: F_GETFD reads a descriptor's flags and touches no memory.
            let stdin_open = unsafe { libc::fcntl(0, libc::F_GETFD) } >= 0;
            let process = match &table {
                Table::Own { process } => process.as_raw_fd(),
                Table::Shared | Table::Cut(_) => -1,
            };
            (format!("{table:?}"), stdin_open, process)
        })
        .join()
        .unwrap();
        assert!(stdin_open, "{table}");
        assert!(
            process > 2,
            "the process's pidfd took a standard place: {table}"
        );
    }

    /// A loan served on this thread with `table`: the outcome left for the caller, and whether
    /// the job woke it.
    fn serve_here(table: &Table, lent: &[RawFd]) -> (io::Result<Vec<u8>>, bool) {
        let (wake_rx, wake_tx) = io::pipe().unwrap();
        let mut numbers = lent.to_vec();
        numbers.push(wake_tx.as_raw_fd());
        let loan = Loan {
            state: Mutex::new(LoanState {
                lent: Some(numbers),
                outcome: None,
            }),
        };
        loan.serve(table, |fds| {
            let mut read = Vec::new();
            for fd in fds {
                File::from(fd).read_to_end(&mut read)?;
            }
            Ok(read)
        });
        drop(wake_tx);
        // The job's copy of the wake pipe is closed either way; a wake is one byte.
        let mut woke = Vec::new();
        let mut wake_rx = wake_rx;
        wake_rx.read_to_end(&mut woke).unwrap();
        let outcome = loan.lock().outcome.take();
        (outcome.unwrap(), woke == [1])
    }

    #[test]
    fn a_shared_table_lends_duplicates_a_bad_loan_fails_and_a_cut_table_fails_every_job() {
        let (reader, mut writer) = io::pipe().unwrap();
        writer.write_all(b"lent").unwrap();
        drop(writer);
        let (read, woke) = serve_here(&Table::Shared, &[reader.as_raw_fd()]);
        assert_eq!(read.unwrap(), b"lent");
        assert!(woke);
        // The caller's original is still its own: the job closed only its duplicate.
        // SAFETY: F_GETFD reads a descriptor's flags and touches no memory.
        assert!(unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_GETFD) } >= 0);
        // A descriptor that cannot be copied fails the job, and the caller is still woken.
        let (outcome, woke) = serve_here(&Table::Shared, &[1 << 20]);
        let err = outcome.unwrap_err();
        assert!(
            err.to_string().contains("cannot copy a lent descriptor"),
            "{err}"
        );
        assert!(woke);
        let cut = Table::Cut("no way to the process's descriptors".into());
        let (other, _keep) = io::pipe().unwrap();
        let (outcome, woke) = serve_here(&cut, &[other.as_raw_fd()]);
        let err = outcome.unwrap_err();
        assert!(
            err.to_string()
                .contains("no way to the process's descriptors"),
            "{err}"
        );
        // No copy of the wake pipe either: the caller finds the outcome at its next look.
        assert!(!woke);
    }
}

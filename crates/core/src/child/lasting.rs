//! Threads that live as long as the process, to start children that are bound to the thread
//! that started them.
//!
//! The design decision to know: the runtime asks the kernel for `SIGTERM` when its parent dies
//! (`PR_SET_PDEATHSIG`, `intendant_runtime::child::bind_to_parent`), and the kernel means the
//! parent *thread*. Started from tokio's blocking pool (which keeps `posix_spawn`'s wait for the
//! child's `exec` off the async workers), a runtime was killed as soon as the thread that had
//! started it sat idle for the pool's keep-alive, 10 s: in a quiet controller every batch that
//! ran longer ended with no result. These threads never end, so a child started on one lives as
//! long as its controller. When more jobs wait than threads do, a job starts another (up to
//! [`MAX_THREADS`]), so spawns still run side by side, as they did on the pool, and none waits on
//! an async worker.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, mpsc};

/// Most lasting threads; past it, jobs wait for one.
const MAX_THREADS: usize = 32;

type Job = Box<dyn FnOnce() + Send>;

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

/// Runs `f` on one of the lasting threads and gives back what it returned. A panic in `f` is
/// an error here and leaves the thread running.
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    let pool = pool();
    pool.queued.fetch_add(1, Ordering::SeqCst);
    if let Err(e) = pool.grow_if_busy() {
        pool.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(e);
    }
    pool.jobs
        .send(job)
        .map_err(|_| io::Error::other("the spawning threads are gone"))?;
    rx.await
        .map_err(|_| io::Error::other("a spawning thread failed its job (it panicked)"))
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

    /// One lasting thread: runs jobs for the life of the process.
    fn serve(&self) {
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
            // The job's sender is dropped with it, which its caller reports.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lasting threads of this process (each test runs in a process of its own).
    fn spawner_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|comm| comm.starts_with("spawner-"))
            })
            .count()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_threads_get_company_and_a_panicking_job_ends_none() {
        let name = run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap()
            .unwrap();
        assert!(name.starts_with("spawner-"), "{name}");
        // Four jobs that wait for each other can only finish on four threads at once.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let jobs: Vec<_> = (0..4)
            .map(|_| {
                let barrier = std::sync::Arc::clone(&barrier);
                tokio::spawn(run(move || barrier.wait().is_leader()))
            })
            .collect();
        let mut leaders = 0;
        for job in jobs {
            leaders += usize::from(job.await.unwrap().unwrap());
        }
        assert_eq!(leaders, 1);
        let threads = spawner_threads();
        assert!((4..=MAX_THREADS).contains(&threads), "{threads}");
        for _ in 0..=threads {
            #[allow(clippy::panic)]
            let failed = run(|| -> u32 { panic!("a job that panics") }).await;
            assert!(failed.is_err());
        }
        // The panics ended no thread, and the idle ones took the jobs.
        assert_eq!(spawner_threads(), threads);
        assert_eq!(run(|| 7).await.unwrap(), 7);
    }
}

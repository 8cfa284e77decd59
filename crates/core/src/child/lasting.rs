//! Threads that live as long as the process, to start children that are bound to the thread
//! that started them.
//!
//! The design decision to know: the runtime asks the kernel for `SIGTERM` when its parent dies
//! (`PR_SET_PDEATHSIG`, `intendant_runtime::child::bind_to_parent`), and the kernel means the
//! parent *thread*. Started from tokio's blocking pool (which keeps `posix_spawn`'s wait for the
//! child's `exec` off the async workers), a runtime was killed as soon as the thread that had
//! started it sat idle for the pool's keep-alive, 10 s: in a quiet controller every batch that
//! ran longer ended with no result. These threads never end, so a child started on one lives as
//! long as its controller. There are as many as the machine has cores (2 to 8), so spawns still
//! run side by side and none waits on an async worker.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};

/// Most lasting threads.
const MAX_THREADS: usize = 8;

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on one of the lasting threads and gives back what it returned. A panic in `f` is
/// an error here and leaves the thread running.
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    queue()?
        .send(job)
        .map_err(|_| io::Error::other("the spawning threads are gone"))?;
    rx.await
        .map_err(|_| io::Error::other("a spawning thread failed its job (it panicked)"))
}

/// The lasting threads' queue, the threads started on first use.
fn queue() -> io::Result<&'static mpsc::Sender<Job>> {
    static QUEUE: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    QUEUE
        .get_or_init(start)
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))
}

fn start() -> Result<mpsc::Sender<Job>, String> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let count = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .clamp(2, MAX_THREADS);
    for n in 0..count {
        let rx = Arc::clone(&rx);
        std::thread::Builder::new()
            .name(format!("spawner-{n}"))
            .spawn(move || serve(&rx))
            .map_err(|e| format!("cannot start a spawning thread: {e}"))?;
    }
    Ok(tx)
}

/// One lasting thread: runs jobs until the queue is gone (never, in a running process).
fn serve(jobs: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else {
            return;
        };
        // The job's sender is dropped with it, which its caller reports.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
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

    #[tokio::test]
    async fn jobs_run_on_lasting_threads_and_a_panicking_job_ends_none() {
        let name = run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap()
            .unwrap();
        assert!(name.starts_with("spawner-"), "{name}");
        let threads = spawner_threads();
        assert!((2..=MAX_THREADS).contains(&threads), "{threads}");
        for _ in 0..=threads {
            #[allow(clippy::panic)]
            let failed = run(|| -> u32 { panic!("a job that panics") }).await;
            assert!(failed.is_err());
        }
        assert_eq!(spawner_threads(), threads);
        assert_eq!(run(|| 7).await.unwrap(), 7);
    }
}

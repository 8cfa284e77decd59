//! Freed memory given back to the system once sessions end.
//!
//! The design decision to know: a session's turns allocate and free many small blocks (events,
//! JSON, buffers), and glibc's allocator keeps what was freed inside its arenas, returning only
//! the free space at the very top of each. Measured on the soak (`bench/src/bin/soak.rs`), the
//! daemon's live heap stayed under 10 MiB while its RSS grew by about 130 KiB with every session
//! that came and went: freed, not leaked (heaptrack), but never given back. So when sessions
//! end, the daemon asks glibc's allocator to hand back every whole free page (`malloc_trim`), at
//! most once per [`RELEASE_DELAY`] however many end together, on a blocking thread. The
//! `intendant` binary's own Rust heap is jemalloc's, which returns its pages by itself
//! (`crates/cli/src/alloc.rs`); what still comes from glibc is what C libraries allocate (the
//! bundled SQLite) and the heap of any other program that embeds the daemon (its tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long after a session ends its freed memory is given back: ends within this time share
/// one release.
pub const RELEASE_DELAY: Duration = Duration::from_secs(1);

/// Gives freed memory back to the system a little after it is asked to, once for every burst
/// of asks.
#[derive(Default)]
pub(crate) struct Releaser {
    /// A release is scheduled and has not started yet.
    scheduled: AtomicBool,
    /// Releases done.
    done: AtomicU64,
}

impl Releaser {
    /// Asks for freed memory to be given back within [`RELEASE_DELAY`]; asks made while a release
    /// is scheduled join it. Outside a Tokio runtime nothing is scheduled.
    pub(crate) fn request(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let releaser = Arc::clone(self);
        runtime.spawn(async move {
            tokio::time::sleep(RELEASE_DELAY).await;
            // An ask from here on needs a release of its own: this one may have passed its frees.
            releaser.scheduled.store(false, Ordering::Release);
            let _ = tokio::task::spawn_blocking(release_freed_memory).await;
            releaser.done.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// How many releases were done.
    pub(crate) fn releases(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// Hands every whole free page of the allocator's arenas back to the system. Only glibc keeps
/// them (musl and others return freed memory themselves): elsewhere it does nothing.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists under their locks; it
    // frees nothing in use and any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (bounded) until `releaser` has done more than `n` releases.
    async fn past(releaser: &Releaser, n: u64) {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while releaser.releases() <= n && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn asks_within_the_delay_share_one_release_and_a_later_ask_gets_its_own() {
        let releaser = Arc::new(Releaser::default());
        for _ in 0..50 {
            releaser.request();
        }
        assert_eq!(releaser.releases(), 0, "nothing before the delay");
        past(&releaser, 0).await;
        assert_eq!(releaser.releases(), 1, "one release for the burst");
        tokio::time::sleep(RELEASE_DELAY * 2).await;
        assert_eq!(releaser.releases(), 1, "the burst's asks made no other");
        releaser.request();
        past(&releaser, 1).await;
        assert_eq!(releaser.releases(), 2, "a later ask is not lost");
    }

    #[test]
    fn outside_a_runtime_an_ask_does_nothing() {
        let releaser = Arc::new(Releaser::default());
        releaser.request();
        assert!(!releaser.scheduled.load(Ordering::Acquire));
        assert_eq!(releaser.releases(), 0);
    }

    /// The anonymous memory this process has resident, in KiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// What the daemon's sessions leave: many small blocks freed, a few kept here and there, so
    /// no free space sits at the top of the heap for the allocator to return by itself.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_release_gives_back_freed_blocks_the_allocator_kept() {
        let blocks: Vec<Vec<u8>> = (0..64 * 1024).map(|i| vec![i as u8; 1000]).collect();
        let kept: Vec<Vec<u8>> = blocks
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 256 == 0)
            .map(|(_, b)| b)
            .collect();
        // The last block allocated stays, so the heap's top is in use.
        let top = vec![1u8; 1000];
        let before = rss_anon_kib();
        release_freed_memory();
        let after = rss_anon_kib();
        assert_eq!(kept.len(), 256);
        assert_eq!(top.len(), 1000);
        // About 64 MiB were freed; most of it is whole pages between the kept blocks.
        assert!(
            before.saturating_sub(after) > 32 * 1024,
            "RssAnon {before} KiB -> {after} KiB"
        );
    }
}

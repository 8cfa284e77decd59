//! The idle timeout of a proxy's tunnels, watched by one sweeper per proxy instead of a timer
//! per tunnel.
//!
//! The design decision to know: a timer registered per connection made every small request
//! wake the runtime's I/O driver (its sleep had to become shorter than the new deadline: an
//! `eventfd` write, a second worker woken, a lock taken by both; `strace` of 1,000 proxied
//! requests counted about one such write each), though no change beyond the noise showed in
//! the requests' wall time or CPU (docs/benchmarks.md). Here a tunnel only stores the
//! time its bytes last moved; the sweeper ticks every [`IdleWatch::tick`] while any tunnel is
//! open (it sleeps on a [`Notify`] while none is) and ends the tunnels idle for the timeout or
//! longer. So a tunnel is closed between `idle` and `idle` plus one tick after its last byte.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The longest tick: how late past its timeout an idle tunnel may be closed at most.
const MAX_TICK: Duration = Duration::from_secs(1);
/// The shortest tick (a test's timeout of a few hundred milliseconds).
const MIN_TICK: Duration = Duration::from_millis(10);
/// Entries kept (live or ended tunnels) before a registration sweeps out the ended ones, so
/// the list stays bounded however fast tunnels come and go between ticks.
const PRUNE_AT: usize = 256;

/// One proxy's tunnels and their idle timeout.
pub(super) struct IdleWatch {
    epoch: Instant,
    idle: Duration,
    /// The tunnels entered and not yet found gone or idle: the sweeper ticks while there are
    /// any (some may be dropped already).
    tunnels: Mutex<Vec<Weak<Tunnel>>>,
    /// Wakes the sweeper when a tunnel opens while it sleeps with none to watch.
    armed: Notify,
}

/// One tunnel's side of the watch: when its bytes last moved, and the signal that it idled out.
pub(super) struct Tunnel {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last movement.
    last: AtomicU64,
    idled: Notify,
}

impl Tunnel {
    /// Notes that bytes moved now.
    pub(super) fn touch(&self) {
        self.last.store(millis_since(self.epoch), Ordering::Relaxed);
    }

    /// Returns once the sweeper found the tunnel idle for the timeout.
    pub(super) async fn idled_out(&self) {
        self.idled.notified().await;
    }
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl IdleWatch {
    /// A watch closing tunnels idle for `idle`; [`IdleWatch::sweep`] must run for it to act.
    pub(super) fn new(idle: Duration) -> IdleWatch {
        IdleWatch {
            epoch: Instant::now(),
            idle,
            tunnels: Mutex::new(Vec::new()),
            armed: Notify::new(),
        }
    }

    /// How often the sweeper looks: an eighth of the timeout, within [`MIN_TICK`] and
    /// [`MAX_TICK`].
    pub(super) fn tick(&self) -> Duration {
        (self.idle / 8).clamp(MIN_TICK, MAX_TICK)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Weak<Tunnel>>> {
        // A panic elsewhere under the lock leaves a list of weak references, still consistent.
        self.tunnels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A tunnel to watch from now, its bytes moved just now; it is forgotten once dropped.
    pub(super) fn enter(&self) -> Arc<Tunnel> {
        let tunnel = Arc::new(Tunnel {
            epoch: self.epoch,
            last: AtomicU64::new(millis_since(self.epoch)),
            idled: Notify::new(),
        });
        let wake = {
            let mut tunnels = self.lock();
            // None to watch: the sweeper is asleep.
            let wake = tunnels.is_empty();
            if tunnels.len() >= PRUNE_AT {
                tunnels.retain(|t| t.strong_count() > 0);
            }
            tunnels.push(Arc::downgrade(&tunnel));
            wake
        };
        if wake {
            // A permit is kept if the sweeper is not waiting yet, so this wake is never lost.
            self.armed.notify_one();
        }
        tunnel
    }

    /// The sweeper: runs for the proxy's life, ending the tunnels idle for the timeout.
    pub(super) async fn sweep(&self) {
        let tick = self.tick();
        let idle = u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX);
        loop {
            let ticking = !self.lock().is_empty();
            if ticking {
                tokio::time::sleep(tick).await;
            } else {
                self.armed.notified().await;
                continue;
            }
            let now = millis_since(self.epoch);
            self.lock().retain(|weak| {
                let Some(tunnel) = weak.upgrade() else {
                    return false;
                };
                if now.saturating_sub(tunnel.last.load(Ordering::Relaxed)) >= idle {
                    // Stored as a permit when the tunnel is between polls; it ends either way.
                    tunnel.idled.notify_one();
                    return false;
                }
                true
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_tunnel_ends_within_a_tick_and_a_busy_one_does_not() {
        let watch = Arc::new(IdleWatch::new(Duration::from_millis(500)));
        let sweeper = tokio::spawn({
            let watch = Arc::clone(&watch);
            async move { watch.sweep().await }
        });
        let started = Instant::now();
        let quiet = watch.enter();
        let busy = watch.enter();
        let busy_until_idle = {
            let busy = Arc::clone(&busy);
            tokio::spawn(async move {
                for _ in 0..50 {
                    busy.touch();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(5), quiet.idled_out())
            .await
            .expect("the quiet tunnel idled out");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(500),
            "closed before its timeout: {waited:?}"
        );
        // Touched every 20 ms for a second: still open when the quiet one ended.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), busy.idled_out())
                .await
                .is_err(),
            "a tunnel moving bytes was ended"
        );
        busy_until_idle.await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), busy.idled_out())
            .await
            .expect("the busy tunnel idled out once it stopped");
        sweeper.abort();
    }

    #[tokio::test]
    async fn the_sweeper_sleeps_with_nothing_open_and_wakes_for_a_new_tunnel() {
        let watch = Arc::new(IdleWatch::new(Duration::from_millis(100)));
        let sweeper = tokio::spawn({
            let watch = Arc::clone(&watch);
            async move { watch.sweep().await }
        });
        let first = watch.enter();
        tokio::time::timeout(Duration::from_secs(5), first.idled_out())
            .await
            .expect("the first tunnel idled out");
        // Let the sweeper find the list empty and go to sleep.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(watch.lock().is_empty(), "ticking with nothing to watch");
        let second = watch.enter();
        tokio::time::timeout(Duration::from_secs(5), second.idled_out())
            .await
            .expect("a tunnel opened after the sweeper slept idled out too");
        sweeper.abort();
    }

    #[test]
    fn ended_tunnels_do_not_pile_up_between_ticks() {
        let watch = IdleWatch::new(Duration::from_secs(300));
        for _ in 0..10_000 {
            drop(watch.enter());
        }
        assert!(watch.lock().len() <= PRUNE_AT);
    }
}

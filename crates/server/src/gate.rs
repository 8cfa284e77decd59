//! How many connections a surface serves at once, and which one makes room: each connection
//! holds a place from accept to close; when every place is taken, a newcomer takes the place of
//! the oldest connection doing nothing for a client (before the control socket's hello, between
//! or before the dashboard's requests), which is told to close. Connections that never say
//! anything therefore cannot lock out a client that does; only connections at work can fill
//! the gate.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// The places of one surface (`max` of them).
#[derive(Debug)]
pub(crate) struct Gate {
    max: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The connections holding a place, by age.
    places: BTreeMap<u64, Place>,
    /// The next connection's id (they only grow, so the first place is the oldest).
    next_id: u64,
}

#[derive(Debug)]
struct Place {
    /// Fired when another connection takes this place.
    evict: oneshot::Sender<()>,
    /// Work under way on the connection ([`Slot::begin`]); a place with none can be taken.
    working: usize,
}

/// A connection's place in its [`Gate`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    gate: Arc<Gate>,
    id: u64,
}

/// Work under way on a connection (a request being answered, a client past its hello); its
/// place cannot be taken while this is held.
#[derive(Debug)]
pub(crate) struct Working {
    gate: Arc<Gate>,
    id: u64,
}

impl Gate {
    /// A gate of `max` places (at least one).
    pub(crate) fn new(max: usize) -> Arc<Gate> {
        Arc::new(Gate {
            max: max.max(1),
            state: Mutex::new(State::default()),
        })
    }

    /// The most connections it lets in.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place for a new connection, and the signal that another took it (`Ok(())`); `None`
    /// when every place is at work.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut state = lock(&self.state);
        if state.places.len() >= self.max {
            let idle = state
                .places
                .iter()
                .find(|(_, place)| place.working == 0)
                .map(|(id, _)| *id)?;
            // Its slot's drop finds the place gone.
            if let Some(place) = state.places.remove(&idle) {
                let _ = place.evict.send(());
            }
        }
        let id = state.next_id;
        state.next_id += 1;
        let (evict, evicted) = oneshot::channel();
        state.places.insert(id, Place { evict, working: 0 });
        Some((
            Slot {
                gate: self.clone(),
                id,
            },
            evicted,
        ))
    }

    /// Connections holding a place now.
    pub(crate) fn held(&self) -> usize {
        lock(&self.state).places.len()
    }

    /// Connections at work now (for the control socket: clients past their hello).
    pub(crate) fn working(&self) -> usize {
        lock(&self.state)
            .places
            .values()
            .filter(|place| place.working > 0)
            .count()
    }
}

impl Slot {
    /// Marks work under way until the returned guard is dropped.
    pub(crate) fn begin(&self) -> Working {
        if let Some(place) = lock(&self.gate.state).places.get_mut(&self.id) {
            place.working += 1;
        }
        Working {
            gate: self.gate.clone(),
            id: self.id,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.gate.state).places.remove(&self.id);
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        if let Some(place) = lock(&self.gate.state).places.get_mut(&self.id) {
            place.working = place.working.saturating_sub(1);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is a single map operation; a panic cannot leave the map torn.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Longest pause between two accepts that failed (descriptors exhausted).
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The pauses of an accept loop whose accepts fail (descriptors exhausted, a client gone
/// before it was accepted): from 10 ms, doubling up to [`ACCEPT_BACKOFF_MAX`], so the loop
/// never spins and the connections it serves can end and free descriptors meanwhile.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff(Option<Duration>);

impl AcceptBackoff {
    /// The pause to take before the next accept, if the last one failed.
    pub(crate) fn pause(&self) -> Option<Duration> {
        self.0
    }

    /// An accept succeeded.
    pub(crate) fn reset(&mut self) {
        self.0 = None;
    }

    /// An accept failed: the pause to take now, and whether it is the first failure in a row
    /// (the one worth a line in the log).
    pub(crate) fn failed(&mut self) -> (Duration, bool) {
        let first = self.0.is_none();
        let next = self
            .0
            .map_or(Duration::from_millis(10), |d| d * 2)
            .min(ACCEPT_BACKOFF_MAX);
        self.0 = Some(next);
        (next, first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_takes_the_oldest_idle_place_and_working_places_are_kept() {
        let gate = Gate::new(2);
        let (first, mut first_evicted) = gate.enter().unwrap();
        let (second, mut second_evicted) = gate.enter().unwrap();
        let working = first.begin();
        // The first is at work: the second, idle, makes room.
        let (third, mut third_evicted) = gate.enter().unwrap();
        assert_eq!(second_evicted.try_recv(), Ok(()));
        assert!(first_evicted.try_recv().is_err());
        // The evicted slot's drop gives back no place: the gate is still full.
        drop(second);
        let third_working = third.begin();
        assert!(gate.enter().is_none(), "every place is at work");
        assert_eq!(gate.working(), 2);
        // Work that ends makes the place idle again, and it goes to a newcomer.
        drop(working);
        let (_fourth, _) = gate.enter().unwrap();
        assert_eq!(first_evicted.try_recv(), Ok(()));
        drop(first);
        assert!(third_evicted.try_recv().is_err());
        // A slot that ends frees its place without evicting anyone.
        drop(third_working);
        drop(third);
        let (_fifth, _) = gate.enter().unwrap();
        assert_eq!(gate.working(), 0);
    }

    #[test]
    fn the_back_off_doubles_to_its_bound_and_resets() {
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.pause(), None);
        assert_eq!(backoff.failed(), (Duration::from_millis(10), true));
        assert_eq!(backoff.failed(), (Duration::from_millis(20), false));
        for _ in 0..20 {
            backoff.failed();
        }
        assert_eq!(backoff.pause(), Some(ACCEPT_BACKOFF_MAX));
        backoff.reset();
        assert_eq!(backoff.pause(), None);
    }
}

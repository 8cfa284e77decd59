//! Autonomy levels: how much a session may do before it asks a human.
//!
//! The level picks the default rule of each action category and relaxes `ask` rules at the top
//! end; the full table lives in [`crate::approval`]. The level itself is a wire value, defined in
//! `intendant_protocol::autonomy`.

pub use intendant_protocol::autonomy::{AutonomyLevel, UnknownAutonomyLevel};

use std::sync::{Arc, Mutex, PoisonError};

/// A session's autonomy level, shared between its approval gate and whoever may change it
/// while it runs (the daemon's control plane): every clone is the same level, so a change is
/// in force for the next command the gate reviews.
#[derive(Debug, Clone)]
pub struct SharedLevel(Arc<Mutex<AutonomyLevel>>);

impl SharedLevel {
    /// A new shared level.
    pub fn new(level: AutonomyLevel) -> SharedLevel {
        SharedLevel(Arc::new(Mutex::new(level)))
    }

    /// The level now.
    pub fn get(&self) -> AutonomyLevel {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the level for every holder.
    pub fn set(&self, level: AutonomyLevel) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = level;
    }
}

impl PartialEq for SharedLevel {
    fn eq(&self, other: &SharedLevel) -> bool {
        self.get() == other.get()
    }
}

impl Eq for SharedLevel {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clone_is_the_same_level() {
        let level = SharedLevel::new(AutonomyLevel::Low);
        let held = level.clone();
        level.set(AutonomyLevel::High);
        assert_eq!(held.get(), AutonomyLevel::High);
    }
}

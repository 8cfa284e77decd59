//! Autonomy levels: how much a session may do before it asks a human.
//!
//! The level picks the default rule of each action category and relaxes `ask` rules at the top
//! end; the full table lives in [`crate::approval`]. The level itself is a wire value, defined in
//! `intendant_protocol::autonomy`.

pub use intendant_protocol::autonomy::{AutonomyLevel, UnknownAutonomyLevel};

use std::sync::{Arc, Mutex, PoisonError};

/// A session's autonomy level, shared between its approval gate and whoever may change it
/// while it runs (the daemon's control plane): every clone is the same level, so a change is
/// in force for the next decision the gate makes.
///
/// A sub-agent's level is held [under](SharedLevel::under) its parent's: what it reads is the
/// lower of its own level and its parent's level now, so a child never exceeds its parent, and
/// lowering a parent lowers every live descendant at once. Raising the parent again gives a
/// child back at most its own level (what it was started with, or what a human set on it), never
/// more.
#[derive(Debug, Clone)]
pub struct SharedLevel {
    own: Arc<Mutex<AutonomyLevel>>,
    /// The parent's level (itself possibly under its own parent's).
    parent: Option<Arc<SharedLevel>>,
}

impl SharedLevel {
    /// A new shared level of a top session.
    pub fn new(level: AutonomyLevel) -> SharedLevel {
        SharedLevel {
            own: Arc::new(Mutex::new(level)),
            parent: None,
        }
    }

    /// A new shared level of a sub-agent started at `level` under `parent`.
    pub fn under(parent: &SharedLevel, level: AutonomyLevel) -> SharedLevel {
        SharedLevel {
            own: Arc::new(Mutex::new(level)),
            parent: Some(Arc::new(parent.clone())),
        }
    }

    /// The level in force now: this session's own, capped by its parent's level now.
    pub fn get(&self) -> AutonomyLevel {
        let own = self.own();
        match &self.parent {
            Some(parent) => own.min(parent.get()),
            None => own,
        }
    }

    /// This session's own level, before its parent's cap.
    pub fn own(&self) -> AutonomyLevel {
        *self.own.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The parent's level now (`None` for a top session): the most this session can be at.
    pub fn cap(&self) -> Option<AutonomyLevel> {
        self.parent.as_ref().map(|p| p.get())
    }

    /// Changes this session's own level for every holder (still capped by the parent's).
    pub fn set(&self, level: AutonomyLevel) {
        *self.own.lock().unwrap_or_else(PoisonError::into_inner) = level;
    }
}

impl From<AutonomyLevel> for SharedLevel {
    fn from(level: AutonomyLevel) -> SharedLevel {
        SharedLevel::new(level)
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

    #[test]
    fn a_child_reads_the_lower_of_its_own_and_its_parents_level_now() {
        use AutonomyLevel::*;
        let parent = SharedLevel::new(High);
        let child = SharedLevel::under(&parent, High);
        let grandchild = SharedLevel::under(&child, Full);
        assert_eq!(
            grandchild.get(),
            High,
            "never above its parent at the start"
        );
        parent.set(Low);
        assert_eq!(child.get(), Low, "lowering the parent lowers the child");
        assert_eq!(grandchild.get(), Low, "and every descendant");
        assert_eq!(child.cap(), Some(Low));
        // A child raised by itself (approve-all, a human) stays capped by its parent.
        child.set(Full);
        assert_eq!(child.get(), Low);
        // Raising the parent gives a child back at most its own level.
        parent.set(Medium);
        assert_eq!(child.get(), Medium);
        child.set(Medium);
        parent.set(Full);
        assert_eq!(child.get(), Medium, "not raised above its own");
        assert_eq!(grandchild.get(), Medium);
        assert_eq!(grandchild.own(), Full);
        assert_eq!(parent.cap(), None);
    }
}

//! Autonomy levels: how much a session may do before it asks a human.
//!
//! The level picks the default rule of each action category and relaxes `ask` rules at the top
//! end; the full table lives in [`crate::approval`]. The level itself is a wire value, defined in
//! `intendant_protocol::autonomy`.

pub use intendant_protocol::autonomy::{AutonomyLevel, UnknownAutonomyLevel};

//! How a session ended, whatever ran it (the native loop or an external agent CLI): the
//! outcome every backend returns and the failure that ends one. A leaf: it names no other
//! module of this crate, so a backend uses it without reaching into the loop.

use intendant_protocol::events::EndStatus;
use thiserror::Error;

/// The result of a whole session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOutcome {
    /// How it ended.
    pub status: EndStatus,
    /// Why, in words (the final message when completed).
    pub reason: String,
    /// Turns taken.
    pub turns: u32,
}

/// A failure that ends the session.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The model API failed.
    #[error("{0}")]
    Provider(String),
    /// The runtime could not be run (a `runner::RunnerError`).
    #[error(transparent)]
    Runner(Box<dyn std::error::Error + Send + Sync>),
    /// The external agent CLI's worker failed, in its own words.
    #[error("{0}")]
    Worker(String),
}

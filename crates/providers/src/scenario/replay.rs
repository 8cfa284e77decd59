//! A replayed turn: a recorded response the fake model server serves byte for byte.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A recorded response: a file whose bytes are the whole response body, as a real service sent
/// it. The server knows nothing of what it holds, so its tool calls are not in the ledger the
/// echo checks use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// The body's file; a relative path is resolved against the scenario file's directory
    /// ([`Scenario::load`](super::Scenario::load)), or the working directory for a scenario
    /// given as JSON.
    pub file: PathBuf,
    /// The HTTP status.
    #[serde(default = "ok_status")]
    pub status: u16,
    /// The `content-type`; default `text/event-stream` for a 2xx status, else
    /// `application/json`.
    #[serde(default)]
    pub content_type: Option<String>,
}

fn ok_status() -> u16 {
    200
}

impl Replay {
    /// The content type the response is served with.
    pub fn content_type(&self) -> &str {
        match &self.content_type {
            Some(kind) => kind,
            None if (200..300).contains(&self.status) => "text/event-stream",
            None => "application/json",
        }
    }
}

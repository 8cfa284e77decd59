//! External agent CLIs as supervised workers of a session: the CLI runs the turns, Intendant
//! keeps the approvals, the events, the log and the process.
//!
//! The design decision to know: the worker is a long-lived child of core's one supervisor
//! (`intendant_core::child::spawn_interactive`), and a turn ends only when the worker's protocol
//! says so; silence is a warning (the wedge probe), never an ending.
//!
//! # Layout
//! - [`framing`]: one JSON object per line, each line bounded; a malformed line is an error.
//! - [`process`]: the worker child (stdin kept open, stderr tail kept, stopped as a tree).
//! - [`rpc`]: a JSON-RPC peer over the lines (codex app-server, ACP).
//! - [`approvals`]: the worker's approval requests through the session's `ApprovalGate`.
//! - [`events`]: worker output as our `AppEvent`s, usage priced.
//! - [`driver`]: the session loop ([`driver::Protocol`] is what each CLI implements); it
//!   checkpoints the project around each round (`core::checkpoint::TurnRecorder`).
//! - [`start`]: the start every worker shares: its command, spawn, handshake
//!   ([`start::Opening`], what each CLI implements), then the session loop.
//! - [`factory`]: `core::session::WorkerFactory` for the agents crate, by name.
//! - [`codex`]: `codex app-server`.
//! - [`actions`]: the line-by-line codecs' steps, and tool requests as approval questions.
//! - [`claude`]: claude-code's stream-json (`claude -p --input-format stream-json`).
//! - [`acp`]: the Agent Client Protocol (`kimi acp`, any ACP agent).

pub mod acp;
pub mod actions;
pub mod approvals;
pub mod claude;
pub mod codex;
pub mod driver;
pub mod events;
pub mod factory;
pub mod framing;
pub mod process;
pub mod rpc;
pub mod start;

use intendant_core::outcome::SessionError;
use thiserror::Error;

pub use factory::AgentWorkers;
pub use start::WorkerSetup;

/// Why a worker session failed.
#[derive(Debug, Error)]
pub enum WorkerError {
    /// The worker could not be started.
    #[error("{0}")]
    Spawn(String),
    /// Its output broke the framing.
    #[error(transparent)]
    Frame(#[from] framing::FrameError),
    /// It broke its protocol (an unexpected answer, a missing field).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A request of ours was refused.
    #[error("`{method}` failed: {error}")]
    Rpc {
        /// The method.
        method: String,
        /// The worker's error.
        error: rpc::RpcError,
    },
    /// The worker's pipes closed (the session loop turns this into [`WorkerError::Exited`]).
    #[error("the worker closed its pipes")]
    Closed,
    /// The worker exited while it was needed: how, with its last stderr lines.
    #[error("{0}")]
    Exited(String),
    /// The worker said the turn failed.
    #[error("the worker's turn failed: {0}")]
    TurnFailed(String),
    /// The session was stopped while the worker was starting (it was stopped too).
    #[error("the session was stopped while its worker started")]
    Stopped,
}

impl From<WorkerError> for SessionError {
    fn from(e: WorkerError) -> SessionError {
        SessionError::Worker(e.to_string())
    }
}

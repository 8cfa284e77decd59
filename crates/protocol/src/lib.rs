//! Wire types shared by every Intendant binary.
//!
//! This crate is vocabulary only: serde types and constants, no I/O, no async runtime. Every
//! binary and every test speaks through these types, so a change here is a protocol change.
//!
//! # Layout
//! - [`runtime`]: the `intendant-runtime` stdin/stdout protocol (`docs/runtime-protocol.md`):
//!   `AgentInput`, `Command`, the result envelope and the per-function result objects.
//! - [`agenda`]: the daemon's agenda (work items, reminders, owner-approved one-shot scheduled
//!   sessions), its operation and the time forms users give.
//! - [`autonomy`]: the four autonomy levels (their rules live in the controller).
//! - [`daemon`]: the daemon's vocabulary for its frontends: session summaries, the approval
//!   queue, start requests, settings, event envelopes with their daemon-wide `seq`.
//! - [`checkpoints`]: a rewind as every surface asks for it and is answered (or shown it first).
//! - [`delegation`]: the delegation contract's stable error codes.
//! - [`fleet`]: the daemons of a fleet as a member reports them.
//! - [`mcp`]: the codes of a failed MCP tool call.
//! - [`memory`]: the memories as the daemon's human surfaces (the dashboard) list, search and
//!   change them.
//! - [`socket`]: the lines of the daemon's control socket (hellos, requests, replies, streams).
//! - [`events`]: the frontend vocabulary, `AppEvent` and `ControlMsg`, the closed sets their
//!   fields take, and `SessionLogRecord` (one line of a session log).
//! - [`hooks`]: the events a hook is bound to, its verdicts, the JSON it reads and answers.
//! - [`network`]: what network a session's commands get (`[sandbox] network`) and the
//!   session network holder's report.
//! - [`env_policy`]: which environment variables a model-driven command may see (pure).
//! - [`dotenv`]: `.env` entries as the controller reads them and commands are shown them (pure).
//! - [`tools`]: the model-facing tool names ([`tools::ToolName`]), which worker codecs and
//!   frontends match instead of strings.
//! - [`closed_set`]: the one definition of a closed set's wire names, and the error for a string
//!   outside one.
//! - [`text`]: text cut to a size.
//! - [`utc`]: UTC calendar timestamps (session ids, log records, runtime log-dir names).

pub mod agenda;
pub mod autonomy;
pub mod checkpoints;
pub mod closed_set;
pub mod daemon;
pub mod delegation;
pub mod dotenv;
pub mod env_policy;
pub mod events;
pub mod fleet;
pub mod hooks;
pub mod mcp;
pub mod memory;
pub mod network;
pub mod runtime;
pub mod socket;
pub mod text;
pub mod tools;
pub mod utc;

//! The controller's brain: conversation, agent loop, runtime runner, approvals, session log,
//! EventBus.
//!
//! # Layout
//! - `config`: `intendant.toml` (project config), parsed once into plain structs.
//! - Controller work: `bus`, `runner`, `agent_loop`, `tools`, `prompts`, `conversation`,
//!   `usage`, `dotenv`, `provider_select` (added by that work).
//! - Approval and session-log work: `autonomy`, `approval`, `classify`, `session_log`,
//!   `resume` (added by that work).

pub mod approval;
pub mod autonomy;
pub mod agent_loop;
pub mod ask_human;
pub mod bus;
pub mod classify;
pub mod config;
pub mod conversation;
pub mod dotenv;
pub mod intents;
pub mod prompts;
pub mod provider_select;
pub mod runner;
pub mod runtime_env;
pub mod tools;
pub mod usage;
pub mod resume;
pub mod session_log;

//! External agent CLIs: one profile per CLI, readiness, and the bounded delegation contract
//! (`docs/agents.md`).
//!
//! Every CLI child runs under core's one child supervisor (`intendant_core::child`).
//!
//! The one design decision to know: everything CLI-specific lives in a plain [`AgentProfile`]
//! value, one file per CLI under `profiles/`, selected by name. Completion is the CLI's own
//! terminal event (`turn.completed`, `result`), never liveness.
//!
//! # Layout
//! - [`profile`]: the profile type (versions, flag spellings, env policy, protocol hooks).
//! - [`profiles`]: `codex`, `claude-code`, `kimi`, registered in one list.
//! - [`auth`]: auth and billing classes, `allowed_auth` narrowing.
//! - [`config`]: `[agent.<name>]` of `intendant.toml`.
//! - [`env`]: the caller's environment and the minimal child environment.
//! - [`discover`]: executable discovery, the version probe, auth choice.
//! - [`readiness`]: the schema-version-1 readiness object.
//! - [`delegate`]: request, response and the delegation itself.
//! - [`workspace`]: the private temporary workspace.
//! - [`schema`]: Draft 2020-12 validation with remote `$ref` refused.
//! - [`error`]: the 18 stable codes and the sanitized error object.
//! - [`jsonl`]: transcript helpers shared by the profiles.
//! - [`worker`]: CLIs as supervised session workers (framing, child, JSON-RPC, approvals, the
//!   session loop, the `WorkerFactory`), and the codex app-server worker; a worker's session
//!   ends in core's shared `intendant_core::outcome` types, as the native loop's does.

pub mod auth;
pub mod config;
pub mod delegate;
pub mod discover;
pub mod env;
pub mod error;
pub mod jsonl;
pub mod profile;
pub mod profiles;
pub mod readiness;
pub mod schema;
pub mod worker;
pub mod workspace;

pub use auth::{AuthClass, BillingClass};
pub use config::AgentConfig;
pub use delegate::{ApplicationValidator, CliResponse, DelegationRequest, Monetary, delegate};
pub use env::HostEnv;
pub use error::{CliError, ErrorCode};
pub use profile::AgentProfile;
pub use readiness::Readiness;

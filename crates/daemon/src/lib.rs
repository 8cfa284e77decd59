//! The daemon's layer above the session: the supervisor that runs many sessions at once and
//! every frontend's [`SessionHost`](intendant_core::host::SessionHost), the persisted
//! settings it runs under, and the git worktrees sub-agents work in.
//!
//! The one design decision to know: this crate sits above `intendant-core` and nothing below
//! it names its types. A session (the loop, its tools, the sub-agent tools) asks only for
//! core's `SessionHost`; the supervisor here is the daemon's implementation of it, and the
//! one-shot CLI uses the same supervisor in process.
//!
//! # Layout
//! - `supervisor`: the daemon's sessions (started through core's `session::assemble`, each on
//!   its own bus and task), the numbered event stream with its replay ring, the approval
//!   queue, `max_running`, restart; `supervisor::{hub, status, levels, start_rules}`: the
//!   stream's counter and subscribers, status folded from events, autonomy changed live, and
//!   what every start is held to.
//! - `control_plane`: the state root's persisted `[daemon]` and `[mcp]` settings and the owner's
//!   autonomy ceilings.
//! - `descriptors`: the descriptors the daemon may open and has open, and the ones a new
//!   session must leave free.
//! - `log`: the daemon's log for its operator (its stderr under `serve`).
//! - `memory`: what ended sessions freed, given back to the system (glibc keeps it otherwise).
//! - `worktree`: git worktrees for sub-agent sessions (made from the parent's HEAD under the
//!   state root; removed when clean, kept when dirty).
//! - `when`: how a user writes a time for the agenda (RFC 3339, a date and time in a named
//!   IANA zone, `+10m`), read into one instant by every surface.

pub mod control_plane;
pub mod descriptors;
pub mod log;
pub mod memory;
pub mod supervisor;
pub mod when;
pub mod worktree;

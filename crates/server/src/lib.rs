//! The daemon's long-lived frontends: everything that lets other processes reach the sessions
//! one `intendant serve` hosts.
//!
//! The one design decision to know: a frontend holds an `Arc<dyn SessionHost>`
//! (`intendant_core::host`) and nothing else, so it only renders events and forwards intents;
//! the session supervisor behind that trait (`intendant_daemon::supervisor`) is the one writer
//! of session state, and the owner's settings (the `[mcp]` policy, the web address) are read
//! from `intendant_daemon::control_plane`. The same trait is implemented on the far side of the
//! control socket ([`socket::RemoteHost`]), so a frontend in another process (`intendant ctl`,
//! `intendant mcp`) is written exactly like one inside the daemon.
//!
//! # Layout
//! - [`socket`]: the control socket `$INTENDANT_HOME/daemon.sock` (one daemon per state root,
//!   JSON lines, `intendant_protocol::socket`) and [`socket::RemoteHost`], its client.
//! - [`web`]: the web dashboard (HTTP JSON API, live events over SSE, embedded page), with its
//!   login token, Host/Origin checks and bounded bodies.
//! - [`mcp`]: the MCP server (tools, session resources, approval elicitation), served on stdio
//!   by `intendant mcp`.
//! - [`fleet`]: one host, any door: [`fleet::FleetHost`] routes what names another fleet
//!   member's session to that member, and answers and publishes for the others.
//! - [`peer`]: who is connecting; every surface refuses a session's processes.
//! - [`limits`]: the owner's client limits fitted to the descriptors the daemon may open;
//!   `listing`: a page of the session listing in one bounded reply, for every surface.
//! - [`systemd`]: telling the service manager the daemon is ready, alive and stopping.

pub mod fleet;
mod gate;
pub mod limits;
mod listing;
pub mod mcp;
mod outbox;
pub mod peer;
pub mod socket;
pub mod systemd;
pub mod web;

//! The control socket: how processes other than the daemon reach its [`SessionHost`].
//!
//! One daemon serves one state root (`$INTENDANT_HOME`): it holds `daemon.lock` there (an
//! `flock`, so a crashed daemon never leaves it held) and listens on `daemon.sock`, mode 0600
//! in a 0700 directory. The lines on it are `intendant_protocol::socket`'s: a hello both ways,
//! then requests with ids, replies, and event streams.
//!
//! The decision to know: the daemon never waits on a client, and no client can make it hold
//! more than the owner's limits (`[daemon]`, [`ClientLimits`]). Each connection has an outgoing
//! queue bounded in bytes; a stream whose items do not fit is told it lagged (with the `seq` to
//! re-read from) and ends, while requests, and so intents, are read and applied in order and
//! never dropped. Connections past `max_clients`, or silent past the handshake timeout, are
//! refused with `busy` (or closed); accept failures back off instead of spinning.
//!
//! [`ClientLimits`]: intendant_daemon::control_plane::ClientLimits
//!
//! # Layout
//! - `state_root`: [`DaemonLock`] (one daemon per state root) and [`ControlSocket::bind`]
//!   (stale socket replaced, live one never stolen).
//! - `server`: [`ControlSocket::serve`], one task per connection.
//! - `client`: [`RemoteHost`], the `SessionHost` on the client's side.
//! - `lines`: reading bounded JSON lines, for both sides.
//!
//! [`SessionHost`]: intendant_core::host::SessionHost

mod client;
mod lines;
mod server;
mod state_root;

pub use client::RemoteHost;

/// How `intendant mcp` names itself in its hello (followed by its version): a connection of an
/// MCP server, whose client is a model ([`ControlSocket::with_model_host`]).
pub const MCP_CLIENT: &str = "intendant-mcp";
pub use state_root::{
    ControlSocket, DaemonLock, LOCK_FILE, SOCKET_FILE, StateRootError, socket_path,
};

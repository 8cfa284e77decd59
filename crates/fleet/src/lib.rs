//! The fleet: daemons on many machines joined through one NATS server with JetStream, so that
//! each can see the others (`docs/fleet.md`). Without a fleet configured nothing here runs and
//! the daemon is the single embedded host it always was.
//!
//! What is built: `[fleet]` in the state root's `intendant.toml` (read strictly: an unknown key is
//! an error), joining (a clear error when the server is unreachable, refuses the credentials, or
//! another live daemon holds the name), a heartbeat carrying the member's load and labels into
//! the JetStream key-value bucket [`MEMBERS_BUCKET`], the fleet's view as `ctl status` shows it,
//! each member's sessions in [`SESSIONS_BUCKET`] (`ctl sessions` on any member lists all), and
//! placement (a request on the work queue [`WORK_STREAM`], taken by a member with a free slot,
//! which clones the repository and pushes the session's branch back; its outcome kept in
//! [`PLACEMENTS_BUCKET`]), control routed to a
//! session's owner and a session's events followed from another member ([`route`]), sessions'
//! records mirrored to [`RECORDS_STREAM`] so that another member resumes a lost member's
//! session ([`mirror`]), and leaving.
//!
//! The design decisions to know:
//! - **A member is alive while its record is fresh**: it rewrites its record every
//!   `heartbeat_sec`; a record older than three heartbeats is a member gone (killed, or cut off
//!   from the server), whatever the bucket still holds. Each member states its own heartbeat, so
//!   members with different settings judge each other correctly. Freshness compares a record's
//!   time with the reader's clock: members' clocks are assumed synchronised (NTP).
//! - **One name, one daemon**: a name held by a fresh record of another instance refuses the
//!   join; a stale one (a daemon killed) is taken over.
//! - **Credentials stay with the daemon**: the NATS URL's password and the credentials file are
//!   read by the daemon alone (the state root is hidden from commands); what any surface shows
//!   of the server is its URL without them.
//!
//! # Layout
//! - `config`: `[fleet]` as written, resolved with `serve --fleet` into a [`FleetConfig`].
//! - `member`: joining, the heartbeat, the view, publishing this daemon's sessions and reading
//!   the fleet's, leaving.
//! - `work`: placement: the work-queue stream [`WORK_STREAM`], its subjects and consumers, and
//!   the signals that wake a member when a request it may take was queued.
//! - `buckets`: the key-value buckets (members, sessions, placements), made in fields a 2.9
//!   server knows, bounded by age and, where asked, by count; their keys as the server counts
//!   them (not the client library's listing, which loses keys while others are rewritten).
//! - `git`: the daemon's hardened git for a placed session: the clone, and the push back.
//! - [`route`]: control routed to a session's owner (request and reply on the owner's control
//!   subject, applied once per request id) and each session's events published for followers
//!   on other members.
//! - [`doctor`]: `intendant doctor`'s read-only look at the fleet (server, JetStream, streams,
//!   this member's record).
//! - [`placements`]: each placement's outcome (pending, taken, started as a session, failed
//!   with the reason) in [`PLACEMENTS_BUCKET`].
//! - `mirror`: sessions' records mirrored in [`RECORDS_STREAM`] (chunks of the growing files,
//!   the newest metadata), and read back whole for a resume on another member.
//! - `sessions`: a member's sessions as one bounded record of [`SESSIONS_BUCKET`], and reading
//!   every member's (a lost member's unfinished sessions read `interrupted`).

mod buckets;
mod config;
pub mod doctor;
pub mod git;
mod member;
pub mod mirror;
pub mod placements;
pub mod route;
mod sessions;
mod work;

pub use config::{FleetConfig, FleetSettings, HEARTBEAT_DEFAULT, default_name};
pub use member::{LoadFn, Member, MemberLoad};
pub use work::{LOOK_EVERY, PlacementSignals};

use thiserror::Error;

/// The JetStream key-value bucket of members' records, one key per member name.
pub const MEMBERS_BUCKET: &str = "intendant_fleet_members";
/// The JetStream work-queue stream placed sessions wait on (`ctl start --fleet`).
pub const WORK_STREAM: &str = "intendant_fleet_work";
/// The JetStream key-value bucket of each member's sessions, one key per member name.
pub const SESSIONS_BUCKET: &str = "intendant_fleet_sessions";
/// The JetStream stream of sessions' records mirrored for failover ([`mirror`]).
pub const RECORDS_STREAM: &str = "intendant_fleet_records";
/// The JetStream key-value bucket of placements' outcomes, one key per placement id
/// ([`placements`]).
pub const PLACEMENTS_BUCKET: &str = "intendant_fleet_placements";

/// Why the daemon could not be (or stay) a member.
#[derive(Debug, Error)]
pub enum FleetError {
    /// `[fleet]` or `--fleet` is not a valid setting.
    #[error("[fleet]: {0}")]
    Config(String),
    /// The server could not be reached.
    #[error("cannot reach the fleet's NATS server at {server}: {detail}")]
    Unreachable {
        /// The server, without credentials.
        server: String,
        /// What failed.
        detail: String,
    },
    /// The server refused the credentials.
    #[error(
        "the fleet's NATS server at {server} refused this daemon's credentials ({detail}); check the URL's user and password or `[fleet] credentials`"
    )]
    Refused {
        /// The server, without credentials.
        server: String,
        /// What the server said.
        detail: String,
    },
    /// The server has no JetStream, or a JetStream request failed.
    #[error(
        "the fleet's NATS server at {server}: {detail} (the server must run with JetStream: `nats-server -js`)"
    )]
    JetStream {
        /// The server, without credentials.
        server: String,
        /// What failed.
        detail: String,
    },
    /// Another live daemon is a member under this name.
    #[error(
        "another daemon (pid {pid} on {host}) is a fleet member named {name:?}; set another `[fleet] name`, or stop that daemon"
    )]
    NameTaken {
        /// The name.
        name: String,
        /// Where the other one runs.
        host: String,
        /// Its pid there.
        pid: u32,
    },
}

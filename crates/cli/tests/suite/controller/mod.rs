//! The controller end to end: the built `intendant` against the fake model server on every
//! wire, the runtime runner's guards, provider faults, `.env` discovery, compaction, and the
//! `--json` frontend, and the replay suite (recorded streams of the real services, byte for
//! byte).

mod compaction;
mod dotenv;
mod faults;
pub mod harness;
mod json_mode;
mod limits;
mod replay;
mod runner_guard;
mod wires;

//! Integration tests of the fake model server: each wire's event sequence, faults, recording,
//! invariants, the binary, and acceptance by the real Codex and Claude Code CLIs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

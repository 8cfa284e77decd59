//! Integration tests of intendant-agents: fake CLIs replaying transcripts, and the real CLIs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

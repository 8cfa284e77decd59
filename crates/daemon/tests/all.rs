//! Integration tests of `intendant-daemon`: the session supervisor driven through
//! `SessionHost` with real sessions (the fake model server on 127.0.0.1, or the scripted model,
//! and a real `intendant-runtime`), sub-agents included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

//! Integration tests of `intendant-core`: the agent loop driven end to end against the fake
//! model server on 127.0.0.1 and a real `intendant-runtime`, asserting on the `AppEvent`s it
//! emits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

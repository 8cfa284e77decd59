//! Integration tests of the providers crate, all against loopback servers on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

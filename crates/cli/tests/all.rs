#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of the `intendant` binary.

mod suite;

//! The runtime's one integration test binary: every test drives the built `intendant-runtime`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;

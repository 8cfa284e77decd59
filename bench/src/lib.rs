//! Shared helpers for the benchmark binaries under `src/bin/`.
//!
//! Every benchmark measures the thing and its baseline in the same run and reports the ratio,
//! so results compare across machines. Run one with
//! `cargo run --release -p intendant-bench --bin <name>`.

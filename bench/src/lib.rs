//! Shared helpers for the benchmark binaries under `src/bin/`.
//!
//! Every benchmark measures the thing and its baseline in the same run and reports the ratio,
//! so results compare across machines. Run one with
//! `cargo run --release -p intendant-bench --bin <name>`.

pub mod report;

use std::path::PathBuf;

/// The workspace binary `name` next to the running benchmark (both live in `target/<profile>/`),
/// or an error saying how to build it.
pub fn sibling_binary(name: &str) -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .ok_or_else(|| std::io::Error::other("benchmark binary has no directory"))?
        .join(name);
    if !path.is_file() {
        return Err(std::io::Error::other(format!(
            "{} not found; build it first: cargo build --release --bin {name}",
            path.display()
        )));
    }
    Ok(path)
}

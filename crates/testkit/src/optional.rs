//! Tests that need something a fresh machine may lack (a system package such as Xvfb, or the
//! pinned CLIs of `scripts/install-clis.sh`): outside CI they skip with a note naming what is
//! missing and what installs it; when `CI` is set they fail, so CI never passes a test that did
//! not run. Every such test goes through [`require`].

use std::path::PathBuf;

/// `found`, or `None` after a note on stderr when it is missing outside CI: the caller then
/// returns early (the test passes having checked nothing, and the note says so). `missing`
/// names what is absent, `unlock` what installs it. With `CI` set, a missing dependency
/// panics with the same text.
#[allow(clippy::print_stderr)]
pub fn require<T>(found: Option<T>, missing: &str, unlock: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let hint = format!("{missing}; install it with `{unlock}`");
    assert!(
        std::env::var_os("CI").is_none(),
        "{hint} (CI is set, so this fails)"
    );
    eprintln!("note: skipping: {hint}");
    None
}

/// The first `program` on `PATH` that is a file, as a command spawned by name would find it.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

//! `intendant-runtime-browse URL`: the `browse` function of `intendant-runtime`, run by it in a
//! process of its own (see `browse::helper`). Not meant to be run by hand.

use std::process::ExitCode;

use intendant_runtime::{browse, hardening};

#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr
fn main() -> ExitCode {
    if let Err(e) = hardening::harden_process() {
        eprintln!(
            "{}: process hardening failed: {e}",
            browse::helper::HELPER_NAME
        );
        return ExitCode::from(3);
    }
    browse::helper::helper_main()
}

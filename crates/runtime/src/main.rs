//! `intendant-runtime`: see the library docs and spec 000.

fn main() -> std::process::ExitCode {
    // Order matters: harden and sandbox before reading a byte of input or running anything.
    // TODO(runtime issue): input, log dir, batch.
    std::process::ExitCode::SUCCESS
}

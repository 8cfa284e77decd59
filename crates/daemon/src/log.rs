//! [`DaemonLog`]: where the daemon tells its operator what they should know and no client was
//! asked about (a refused peer, a session stopped because its record could not be written).
//! `intendant serve` writes it to its stderr, which is the journal under systemd; tests collect
//! it or drop it.

use std::sync::Arc;

/// The daemon's log for its operator, one line at a time. Cheap to clone.
#[derive(Clone)]
pub struct DaemonLog(Arc<dyn Fn(&str) + Send + Sync>);

impl DaemonLog {
    /// A log handing each line to `write`.
    pub fn new(write: impl Fn(&str) + Send + Sync + 'static) -> DaemonLog {
        DaemonLog(Arc::new(write))
    }

    /// A log that drops every line (a part nobody gave one).
    pub fn discard() -> DaemonLog {
        DaemonLog::new(|_| {})
    }

    /// Says one line.
    pub fn say(&self, line: &str) {
        (self.0)(line);
    }
}

impl std::fmt::Debug for DaemonLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonLog")
    }
}

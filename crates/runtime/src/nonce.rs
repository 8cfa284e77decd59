//! `$NONCE[id]` substitution: the pid of the process that command `id` started earlier in this
//! runtime process. An unknown id is an error, never an empty string, so `kill $NONCE[9]` cannot
//! silently become `kill `.

use std::collections::HashMap;
use std::sync::LazyLock;
use thiserror::Error;

/// The literal every reference starts with.
const NONCE_PREFIX: &str = "$NONCE[";

/// A reference to an earlier command's process. Compiled only for a command that holds
/// [`NONCE_PREFIX`]: building it costs more CPU than the rest of a one-command runtime's start.
static NONCE_REF: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"\$NONCE\[(\d+)\]").ok());

/// Why a command string could not be resolved.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NonceError {
    /// No command with that nonce started a process in this runtime process.
    #[error("$NONCE[{0}] does not name a process started earlier in this batch")]
    Unknown(String),
    /// The pattern failed to compile (cannot happen with the fixed pattern).
    #[error("internal error: $NONCE pattern unavailable")]
    Pattern,
}

/// Pids of the processes started by `execAsAgent`, keyed by nonce; lives as long as the runtime.
#[derive(Debug, Default)]
pub struct ProcessTable {
    pids: HashMap<u64, u32>,
}

impl ProcessTable {
    /// Records that command `nonce` started process `pid` (a later command with the same nonce
    /// replaces the entry).
    pub fn record(&mut self, nonce: u64, pid: u32) {
        self.pids.insert(nonce, pid);
    }

    /// The pid started by `nonce`.
    pub fn pid(&self, nonce: u64) -> Option<u32> {
        self.pids.get(&nonce).copied()
    }

    /// Replaces every `$NONCE[id]` in `command` with the recorded pid.
    pub fn substitute(&self, command: &str) -> Result<String, NonceError> {
        if !command.contains(NONCE_PREFIX) {
            return Ok(command.to_owned());
        }
        let re = NONCE_REF.as_ref().ok_or(NonceError::Pattern)?;
        let mut out = String::with_capacity(command.len());
        let mut last = 0;
        for caps in re.captures_iter(command) {
            let (Some(whole), Some(id)) = (caps.get(0), caps.get(1)) else {
                continue;
            };
            let pid = id
                .as_str()
                .parse::<u64>()
                .ok()
                .and_then(|n| self.pid(n))
                .ok_or_else(|| NonceError::Unknown(id.as_str().to_owned()))?;
            out.push_str(&command[last..whole.start()]);
            out.push_str(&pid.to_string());
            last = whole.end();
        }
        out.push_str(&command[last..]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_known_and_rejects_unknown() {
        let mut t = ProcessTable::default();
        t.record(10, 4242);
        t.record(2, 7);
        assert_eq!(
            t.substitute("kill -9 $NONCE[10]; echo $NONCE[2]$NONCE[10]")
                .unwrap(),
            "kill -9 4242; echo 74242"
        );
        assert_eq!(t.substitute("true").unwrap(), "true");
        assert_eq!(
            t.substitute("echo $NONCE[x] $HOME").unwrap(),
            "echo $NONCE[x] $HOME"
        );
        assert_eq!(
            t.substitute("kill $NONCE[3]"),
            Err(NonceError::Unknown("3".into()))
        );
        assert_eq!(
            t.substitute("kill $NONCE[99999999999999999999999]"),
            Err(NonceError::Unknown("99999999999999999999999".into()))
        );
    }
}

//! The controller's credentials, held in its own memory only.
//!
//! Commands the controller supervises run as the same user, and `/proc/<controller>/environ`
//! is readable by anything that may ptrace it (root always, sandboxed or not). So at start,
//! before any thread or child exists, [`seclude`] moves every credential variable (each name
//! `env_policy::deny_reason` refuses: provider keys and ambient credentials) out of the process
//! environment into a process-wide store, and overwrites those entries in the inherited
//! environment block on the initial stack: `remove_var` only unlinks them from `environ`, while
//! `/proc/<pid>/environ` reads the original bytes between `env_start` and `env_end`.
//!
//! Every key look-up goes through [`vars_os`], the environment as it was at start. Children
//! inherit the secluded environment, so a key reaches a child only when it is passed on
//! explicitly (an external CLI's admitted variables).

use std::ffi::OsString;
use std::sync::OnceLock;

use intendant_protocol::env_policy::deny_reason;

/// The credential variables taken out of the environment at start.
static SECLUDED: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Whether `name` is a credential variable that lives only in the store.
pub fn is_secret_name(name: &str) -> bool {
    deny_reason(name).is_some()
}

/// Moves the credential variables out of the process environment and overwrites their bytes in
/// the inherited environment block; returns how many variables were secluded. Idempotent: a
/// second call finds nothing left to move.
///
/// # Safety
/// No other thread may exist (it edits the process environment and the initial stack); call
/// it as the first thing in `main`.
pub unsafe fn seclude() -> std::io::Result<usize> {
    let secret: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(is_secret_name))
        .collect();
    for (name, _) in &secret {
        // SAFETY: the caller guarantees this process is single-threaded.
        unsafe { std::env::remove_var(name) };
    }
    let count = secret.len();
    // A second call (tests) keeps the first capture: it already holds everything moved then.
    let _ = SECLUDED.set(secret);
    // SAFETY: single-threaded, per the caller.
    unsafe { env_block::overwrite_secrets() }?;
    Ok(count)
}

/// The process environment as it was at start, secluded credentials included.
pub fn vars_os() -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (name, value) in SECLUDED.get().into_iter().flatten() {
        if !vars.iter().any(|(k, _)| k == name) {
            vars.push((name.clone(), value.clone()));
        }
    }
    vars
}

/// `vars_os` as UTF-8 pairs (entries that are not UTF-8 are dropped).
pub fn vars() -> Vec<(String, String)> {
    vars_os()
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// The initial environment block, as `/proc/<pid>/environ` shows it.
#[cfg(target_os = "linux")]
mod env_block {
    use super::is_secret_name;

    /// Zero-fills every `NAME=value` entry of the block whose name is a credential. (Reading
    /// `/proc/self/environ` back is not possible: once non-dumpable, it belongs to root.)
    ///
    /// # Safety
    /// Single-threaded only: it writes the initial stack region the kernel reports for this
    /// process, which other threads' `getenv` could be reading.
    pub(super) unsafe fn overwrite_secrets() -> std::io::Result<()> {
        let stat = match std::fs::read("/proc/self/stat") {
            Ok(s) => s,
            // No /proc: nothing can read the block through it either.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let (start, end) = bounds(&stat)?;
        let base = start as *mut u8;
        let len = end - start;
        let mut at = 0;
        while at < len {
            let mut stop = at;
            // SAFETY: [start, end) is this process's environment block, mapped read-write on
            // its own initial stack for the life of the process; every offset is below `len`.
            while stop < len && unsafe { base.add(stop).read_volatile() } != 0 {
                stop += 1;
            }
            let entry: Vec<u8> = (at..stop)
                // SAFETY: as above, offsets are inside the block.
                .map(|i| unsafe { base.add(i).read_volatile() })
                .collect();
            if entry_is_secret(&entry) {
                for i in at..stop {
                    // SAFETY: as above; the entry is no longer referenced by `environ` (the
                    // variable was removed first), so nothing reads it afterwards.
                    unsafe { base.add(i).write_volatile(0) };
                }
            }
            at = stop + 1;
        }
        Ok(())
    }

    fn entry_is_secret(entry: &[u8]) -> bool {
        let name = entry.split(|b| *b == b'=').next().unwrap_or_default();
        std::str::from_utf8(name).is_ok_and(is_secret_name)
    }

    /// `env_start` and `env_end` (fields 50 and 51 of `/proc/self/stat`).
    pub(super) fn bounds(stat: &[u8]) -> std::io::Result<(usize, usize)> {
        let bad = || std::io::Error::other("unexpected /proc/self/stat format");
        // The command name (field 2) may hold spaces and parentheses; fields resume after the
        // last `)`, starting with field 3.
        let close = stat.iter().rposition(|b| *b == b')').ok_or_else(bad)?;
        let rest = std::str::from_utf8(&stat[close + 1..]).map_err(|_| bad())?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> std::io::Result<usize> {
            fields
                .get(n - 3)
                .and_then(|f| f.parse().ok())
                .ok_or_else(bad)
        };
        let (start, end) = (field(50)?, field(51)?);
        if start == 0 || end < start {
            return Err(bad());
        }
        Ok((start, end))
    }
}

/// Other platforms have no `/proc/<pid>/environ`.
#[cfg(not(target_os = "linux"))]
mod env_block {
    pub(super) unsafe fn overwrite_secrets() -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_secret_and_others_are_not() {
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GH_TOKEN",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "OPENAI_BASE_URL", "INTENDANT_MAX_TOKENS"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stat_bounds_skip_a_command_name_with_spaces_and_parens() {
        let mut stat = String::from("42 (a b) c) S");
        for n in 4..=52 {
            stat.push_str(&format!(" {n}"));
        }
        assert_eq!(env_block::bounds(stat.as_bytes()).unwrap(), (50, 51));
        assert!(env_block::bounds(b"42 (x) S 1 2").is_err());
    }
}

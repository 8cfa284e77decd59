//! The descriptors this process may open and has open, and what a new session must leave
//! free of them.
//!
//! A daemon near its limit (`ulimit -n`) fails anything that opens a file: a running session's
//! next runtime, its log, the check of a client connecting to ask what is wrong. So a start is
//! refused while fewer than [`reserve`] are free ([`room_for_a_start`]): the sessions already
//! running finish their turns and the owner can still reach the daemon to end some.

use rustix::process::{Resource, getrlimit};

/// The soft limit on open descriptors now in force, `None` when unlimited.
pub fn limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// How many descriptors this process has open (`/proc/self/fd`, less the one reading it),
/// `None` when the system does not say.
pub fn open() -> Option<u64> {
    let listed = std::fs::read_dir("/proc/self/fd").ok()?.count();
    u64::try_from(listed.saturating_sub(1)).ok()
}

/// The descriptors a start leaves free with `max_running` sessions at work: 8 for each (a
/// turn holds 3 more than a waiting session, its runtime's pipes, and a start under way opens
/// up to about 8 at once before it lets some go) and 64 for everything else (clients being
/// identified and answered, the settings file, the agenda, a prune).
pub fn reserve(max_running: u32) -> u64 {
    64 + 8 * u64::from(max_running)
}

/// `Err` with the sentence saying why when `max_running` keeps more descriptors free
/// ([`reserve`], and 64 for the daemon itself) than this process may ever open (its hard limit,
/// which `serve` raises the soft one to): no session could start, each refused with advice to
/// end sessions there are none of.
pub fn max_running_fits(max_running: u32) -> Result<(), String> {
    match getrlimit(Resource::Nofile).maximum {
        Some(hard) => fits(max_running, hard),
        None => Ok(()),
    }
}

fn fits(max_running: u32, hard: u64) -> Result<(), String> {
    let wanted = reserve(max_running) + 64;
    if wanted <= hard {
        return Ok(());
    }
    let most = hard.saturating_sub(128) / 8;
    Err(format!(
        "max_running = {max_running} keeps {wanted} descriptors free for the running sessions' \
         turns, its clients and itself, more than the {hard} the daemon may open (ulimit -Hn): \
         no session could start; at most {most} fit, or raise the limit"
    ))
}

/// How many descriptors this process's table has room for now (`FDSize` in
/// `/proc/self/status`, grown by the kernel as numbers are taken): at least as many as are
/// open, and read in constant time where counting them takes a read of each.
fn table_size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("FDSize:"))?
        .trim()
        .parse()
        .ok()
}

/// `Err` with the sentence saying why when a new session would leave fewer than
/// [`reserve`]`(max_running)` descriptors free; `Ok` when there is room or nothing is known.
/// Counted only when the table's size says the limit may be near: a daemon holding a thousand
/// sessions (11,000 descriptors) would read each of them at every start.
pub fn room_for_a_start(max_running: u32) -> Result<(), String> {
    let Some(limit) = limit() else {
        return Ok(());
    };
    let reserve = reserve(max_running);
    if table_size().is_some_and(|size| size.saturating_add(reserve) <= limit) {
        return Ok(());
    }
    match open() {
        Some(open) => check(open, limit, reserve),
        None => Ok(()),
    }
}

fn check(open: u64, limit: u64, reserve: u64) -> Result<(), String> {
    if open.saturating_add(reserve) <= limit {
        return Ok(());
    }
    Err(format!(
        "the daemon has {open} of the {limit} descriptors it may open in use (ulimit -n); a \
         session starts only while {reserve} stay free for the running sessions' turns and for \
         clients: end sessions that wait (`intendant ctl stop ID` on a daemon), or raise the \
         limit"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_needs_the_reserve_free_and_says_how_to_make_room() {
        assert_eq!(reserve(8), 128);
        assert!(check(100, 1024, 128).is_ok());
        assert!(check(896, 1024, 128).is_ok());
        let refused = check(897, 1024, 128).unwrap_err();
        assert!(refused.contains("897 of the 1024"), "{refused}");
        assert!(refused.contains("ulimit -n"), "{refused}");
        // This process: open and limited as the system says, and a start fits.
        let open = open().unwrap();
        assert!(open >= 3, "{open}");
        assert!(table_size().unwrap() >= open, "{:?}", table_size());
        assert!(room_for_a_start(8).is_ok());
    }

    #[test]
    fn a_max_running_no_descriptor_limit_can_keep_free_is_named_with_what_fits() {
        assert!(fits(8, 1024).is_ok());
        assert!(fits(112, 1024).is_ok(), "64 + 8 x 112 + 64 = 1024");
        let refused = fits(113, 1024).unwrap_err();
        assert!(
            refused.contains("max_running = 113 keeps 1032 descriptors free")
                && refused.contains("the 1024 the daemon may open")
                && refused.contains("at most 112 fit"),
            "{refused}"
        );
        assert!(fits(3000, 20_000).unwrap_err().contains("at most 2484 fit"));
    }
}

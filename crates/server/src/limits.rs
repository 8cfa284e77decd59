//! Fitting the owner's client limits (`[daemon]`, [`ClientLimits`]) to the descriptors this
//! process may open: every connection holds one, and the sessions need theirs.

use intendant_daemon::control_plane::ClientLimits;
use intendant_daemon::descriptors;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept free of clients for the daemon's own work (sessions' logs, pipes and
/// runtimes, the settings file, a `busy` refusal in flight).
pub const FD_HEADROOM: u64 = 256;

/// Raises this process's soft limit on open descriptors to its hard limit (what `serve` does
/// when it starts); the soft limit now in force, `None` when unlimited.
pub fn raise_fd_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        // Refused (a hard limit the kernel caps lower): the old soft limit stays, and the
        // limits are fitted to it below.
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    descriptors::limit()
}

/// `limits` lowered so the control socket's and the dashboard's connections together stay
/// [`FD_HEADROOM`] below `soft` descriptors, and why, when they had to be.
pub fn fit(limits: ClientLimits, soft: Option<u64>) -> (ClientLimits, Option<String>) {
    let Some(soft) = soft else {
        return (limits, None);
    };
    let room = usize::try_from(soft.saturating_sub(FD_HEADROOM)).unwrap_or(usize::MAX);
    let wanted = limits
        .max_clients
        .saturating_add(limits.max_web_connections);
    if wanted <= room {
        return (limits, None);
    }
    // Shared in proportion, at least one each: a daemon nobody can reach is no use.
    let max_clients = (room.saturating_mul(limits.max_clients) / wanted.max(1)).max(1);
    let max_web_connections = room.saturating_sub(max_clients).max(1);
    let fitted = ClientLimits {
        max_clients: max_clients.min(limits.max_clients),
        max_web_connections: max_web_connections.min(limits.max_web_connections),
        ..limits
    };
    let why = format!(
        "only {soft} descriptors may be open (ulimit -n); serving at most {} control-socket \
         clients and {} dashboard connections (max_clients = {}, max_web_connections = {} \
         wanted {} with {FD_HEADROOM} to spare)",
        fitted.max_clients,
        fitted.max_web_connections,
        limits.max_clients,
        limits.max_web_connections,
        wanted as u64 + FD_HEADROOM,
    );
    (fitted, Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_fit_below_the_descriptor_limit_with_headroom() {
        let limits = ClientLimits::default();
        assert_eq!(fit(limits, None), (limits, None));
        assert_eq!(fit(limits, Some(1 << 20)), (limits, None));
        let (fitted, why) = fit(limits, Some(512));
        assert!(fitted.max_clients + fitted.max_web_connections <= 512 - 256);
        assert!(fitted.max_clients >= 1 && fitted.max_web_connections >= 1);
        assert!(why.unwrap().contains("ulimit -n"));
        let (tiny, _) = fit(limits, Some(10));
        assert_eq!((tiny.max_clients, tiny.max_web_connections), (1, 1));
    }
}

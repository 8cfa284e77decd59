//! What network a session's commands get, and the two small wires that carry it: the line a
//! session's network holder (`intendant-runtime --hold-network`) answers the controller with,
//! and the variable through which each runtime of the session finds the namespace to join.
//!
//! The holder is a process of its own, one per session, that makes the session's network
//! namespace (its own loopback, nothing else) and reports it; the controller then opens the
//! namespace through `/proc/<holder>/ns/`, checks it is the one reported, holds it by that
//! descriptor for the session's life and lets the holder go. Every runtime of the session is
//! started with the descriptors and joins through them before it applies its sandbox. The
//! holder holds no key and runs no command.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::closed_set::closed_set;

/// The argument that starts `intendant-runtime` as a session's network holder instead of a batch.
pub const HOLD_NETWORK_ARG: &str = "--hold-network";

/// Environment variable (set by the controller for each runtime of a session with a network of
/// its own): the namespace descriptors the runtime was started with and what each must be,
/// [`NetnsTarget`] as `net=FD@INODE` or `user=FD@INODE,net=FD@INODE`.
pub const SESSION_NETNS_ENV: &str = "INTENDANT_SESSION_NETNS";

/// Environment variable (set by the controller for each runtime of a `proxy` session; a control
/// variable, so never a command's): the loopback port inside the session's namespace that leads
/// to the session's egress proxy, through which `browse` fetches (it has no other way out).
pub const EGRESS_PROXY_PORT_ENV: &str = "INTENDANT_EGRESS_PROXY_PORT";

/// Environment variable (a control variable the controller sets where a session's network
/// namespace cannot be made): the only TCP ports the runtime's commands may connect to, as
/// decimal numbers separated by commas (empty: none at all). The runtime adds them to its
/// Landlock ruleset as `NetPort` rules (ABI 4+); Landlock limits ports, not addresses.
pub const SANDBOX_CONNECT_PORTS_ENV: &str = "INTENDANT_SANDBOX_CONNECT_PORTS";

/// Environment variable that makes the holder report network namespaces as unavailable without
/// trying (test hook; it can only take the session's own network away, which the run then says,
/// or, with `[sandbox] require_full`, refuses).
pub const SIMULATE_NO_NETNS_ENV: &str = "INTENDANT_SANDBOX_SIMULATE_NO_NETNS";

closed_set! {
    /// `[sandbox] network`, `--network`: what network a session's commands get.
    pub enum NetworkMode ("network mode") {
        /// The session's own network namespace; egress only through the controller's policy
        /// proxy.
        Proxy = "proxy",
        /// The session's own network namespace and nothing else: its own loopback only.
        None = "none",
        /// The host's network, as without a sandbox (a trusted opt-out).
        Host = "host",
    }
}

closed_set! {
    /// What the egress proxy did with one connection (`egress.verdict`).
    pub enum EgressVerdict ("egress verdict") {
        /// Let through: an allow rule, a human's approval, or the autonomy level.
        Allowed = "allowed",
        /// Refused with a 403 naming the rule: a deny rule, the address guard, a human's
        /// `skip` or `deny`, or nobody to ask.
        Refused = "refused",
        /// Allowed, but the host could not be resolved or reached (a 502).
        Failed = "failed",
    }
}

/// The environment variables a command of a `proxy` session gets, each set to the proxy's
/// URL (`http://127.0.0.1:PORT`), so `curl`, `git`, `cargo`, `npm` and `pip` use it.
pub const PROXY_ENV_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// What bypasses the proxy: the session's own loopback (servers a command started).
pub const NO_PROXY_VALUE: &str = "localhost,127.0.0.1,::1";

impl NetworkMode {
    /// Whether commands run in the session's own network namespace.
    pub fn own_namespace(self) -> bool {
        match self {
            NetworkMode::Proxy | NetworkMode::None => true,
            NetworkMode::Host => false,
        }
    }

    /// Whether this mode opens no more than `limit` does (`none` ⊂ `proxy` ⊂ `host`): what a
    /// request may ask for where the owner's settings give `limit`.
    pub fn within(self, limit: NetworkMode) -> bool {
        self.openness() <= limit.openness()
    }

    fn openness(self) -> u8 {
        match self {
            NetworkMode::None => 0,
            NetworkMode::Proxy => 1,
            NetworkMode::Host => 2,
        }
    }
}

/// The one line the holder writes on its stdout once set up (or once it gave up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HolderReport {
    /// The namespace exists, its loopback is up; the holder now waits for its stdin to close.
    Ready {
        /// The holder's process id.
        pid: u32,
        /// Inode of the user namespace the holder made (0: none was needed, as root).
        user_ns: u64,
        /// Inode of the network namespace.
        net_ns: u64,
        /// The loopback port inside the namespace whose connections are handed to the
        /// controller's proxy, if asked.
        relay_port: Option<u16>,
        /// Why the relay asked for could not be made (the namespace then has no way out, as
        /// with `none`); absent when it was made or not asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay_error: Option<String>,
    },
    /// No namespace could be made; the holder exits.
    Unavailable {
        /// Why, in one line.
        reason: String,
    },
}

/// One namespace a runtime is handed: the descriptor it inherited and the inode it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsRef {
    /// The descriptor's number in the runtime (3 or above: 0-2 are its stdio).
    pub fd: i32,
    /// The namespace's inode, as the holder reported it.
    pub inode: u64,
}

/// The namespace a runtime joins: the descriptors it was started with and the inodes the
/// holder reported, so a descriptor that is anything else is never joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetnsTarget {
    /// The user namespace the holder made (none as root), joined first.
    pub user: Option<NsRef>,
    /// The network namespace.
    pub net: NsRef,
}

impl fmt::Display for NetnsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = self.user {
            write!(f, "user={}@{},", user.fd, user.inode)?;
        }
        write!(f, "net={}@{}", self.net.fd, self.net.inode)
    }
}

impl FromStr for NetnsTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<NetnsTarget, String> {
        let bad = || {
            format!(
                "{SESSION_NETNS_ENV} must be net=FD@INODE or user=FD@INODE,net=FD@INODE, not {s:?}"
            )
        };
        let one = |part: &str, key: &str| -> Result<NsRef, String> {
            let (fd, inode) = part
                .strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('='))
                .and_then(|rest| rest.split_once('@'))
                .ok_or_else(bad)?;
            let fd: i32 = fd.parse().map_err(|_| bad())?;
            let inode: u64 = inode.parse().map_err(|_| bad())?;
            if fd < 3 || inode == 0 {
                return Err(bad());
            }
            Ok(NsRef { fd, inode })
        };
        let target = match s.split_once(',') {
            None => NetnsTarget {
                user: None,
                net: one(s, "net")?,
            },
            Some((user, net)) => NetnsTarget {
                user: Some(one(user, "user")?),
                net: one(net, "net")?,
            },
        };
        if target.user.is_some_and(|user| user.fd == target.net.fd) {
            return Err(bad());
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_have_pinned_wire_names_and_refuse_others() {
        for (mode, name) in [
            (NetworkMode::Proxy, "\"proxy\""),
            (NetworkMode::None, "\"none\""),
            (NetworkMode::Host, "\"host\""),
        ] {
            assert_eq!(serde_json::to_string(&mode).unwrap(), name);
            assert_eq!(name.trim_matches('"').parse::<NetworkMode>(), Ok(mode));
        }
        for (mode, limit, within) in [
            (NetworkMode::None, NetworkMode::Proxy, true),
            (NetworkMode::Proxy, NetworkMode::Proxy, true),
            (NetworkMode::Host, NetworkMode::Proxy, false),
            (NetworkMode::Proxy, NetworkMode::None, false),
            (NetworkMode::Host, NetworkMode::Host, true),
        ] {
            assert_eq!(mode.within(limit), within, "{mode} within {limit}");
        }
        let err = "open".parse::<NetworkMode>().unwrap_err();
        assert!(err.to_string().contains("proxy, none, host"), "{err}");
        assert!(serde_json::from_str::<NetworkMode>("\"Proxy\"").is_err());
    }

    #[test]
    fn egress_verdicts_have_pinned_wire_names() {
        for (verdict, name) in [
            (EgressVerdict::Allowed, "\"allowed\""),
            (EgressVerdict::Refused, "\"refused\""),
            (EgressVerdict::Failed, "\"failed\""),
        ] {
            assert_eq!(serde_json::to_string(&verdict).unwrap(), name);
        }
        assert!("ok".parse::<EgressVerdict>().is_err());
    }

    #[test]
    fn a_target_round_trips_and_garbage_is_refused() {
        let net = NsRef {
            fd: 4,
            inode: 4026532000,
        };
        let alone = NetnsTarget { user: None, net };
        assert_eq!(alone.to_string(), "net=4@4026532000");
        let both = NetnsTarget {
            user: Some(NsRef {
                fd: 3,
                inode: 4026531999,
            }),
            net,
        };
        assert_eq!(both.to_string(), "user=3@4026531999,net=4@4026532000");
        for t in [alone, both] {
            assert_eq!(t.to_string().parse::<NetnsTarget>(), Ok(t));
        }
        for bad in [
            "",
            "42:0:1",
            "net=4",
            "net=4@",
            "net=@7",
            "net=2@7",
            "net=-1@7",
            "net=4@0",
            "net=x@7",
            "user=3@5",
            "net=4@7,user=3@5",
            "user=3@5,net=3@7",
            "user=3@5,net=4@7,net=5@8",
            "user=3@5;net=4@7",
            " net=4@7",
        ] {
            let err = bad.parse::<NetnsTarget>().unwrap_err();
            assert!(err.contains(SESSION_NETNS_ENV), "{bad}: {err}");
        }
    }

    #[test]
    fn holder_reports_have_pinned_shapes() {
        let ready = HolderReport::Ready {
            pid: 7,
            user_ns: 1,
            net_ns: 2,
            relay_port: Some(3128),
            relay_error: None,
        };
        assert_eq!(
            serde_json::to_string(&ready).unwrap(),
            r#"{"type":"ready","pid":7,"user_ns":1,"net_ns":2,"relay_port":3128}"#
        );
        let gone: HolderReport =
            serde_json::from_str(r#"{"type":"unavailable","reason":"no"}"#).unwrap();
        assert_eq!(
            gone,
            HolderReport::Unavailable {
                reason: "no".into()
            }
        );
    }
}

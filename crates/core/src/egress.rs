//! The egress proxy of a `proxy` session (`[sandbox] network = "proxy"`): the only way out of
//! the session's network namespace. The session's network holder listens on a loopback port
//! inside the namespace and hands each connection to it over to this proxy (the socket itself,
//! on the proxy's handoff socket), and every command gets `HTTP_PROXY`, `HTTPS_PROXY`,
//! `ALL_PROXY` (and their lower-case forms) pointing at that port.
//!
//! The design decision to know: the proxy decides on the host name exactly as the client asked
//! for it, before any lookup (a refused or unlisted name is never resolved), and then connects
//! only to the addresses it judged (`intendant-netguard`'s address guard, the one `browse`
//! uses): a name cannot be re-pointed between the check and the connect, and no answer reaches
//! loopback, private, link-local or metadata space unless a trusted `allow_addresses` range
//! names it.
//!
//! # Layout
//! - `policy`: host patterns, the default allow list, the verdict on a name, the address guard
//!   with its trusted ranges and `hosts` map.
//! - `http`: the request head (`CONNECT host:port`, absolute-URI `http://`), the proxy's own
//!   short answers.
//! - `proxy`: the handoff socket, the relay ports and one connection's life, bounded
//!   (connection cap, head, lookup, connect and idle timeouts).
//! - `handoff`: the connections the holder hands over, received as sockets (`SCM_RIGHTS`).
//! - `pump`: a connected tunnel's bytes both ways, `splice(2)`d through a pipe per direction
//!   (a fixed buffer where no pipe can be had).
//! - `idle`: the tunnels' idle timeout, one sweeper per proxy instead of a timer per tunnel
//!   (a timer per connection woke the runtime's I/O driver on every small request).
//! - `approvals`: [`SessionEgress`], the session's side: a host in neither list is an approval
//!   of category `network`; every connection becomes an `egress` event.
//! - `allow_list`: [`ProjectAllowList`], a host a human allowed for good (`allow_host`) added
//!   to the project's `[sandbox.network] allow`, the file kept trusted only where it counted.

mod allow_list;
mod approvals;
mod handoff;
mod http;
mod idle;
mod policy;
mod proxy;
mod pump;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use allow_list::{AllowListChange, ProjectAllowList};
pub use approvals::SessionEgress;
pub use http::{MAX_HEAD_BYTES, ProxyRequest, parse_head};
pub use intendant_protocol::network::{NO_PROXY_VALUE, PROXY_ENV_VARS};
pub use policy::{
    DEFAULT_ALLOW, EgressPolicy, EgressSettings, HostPattern, HostVerdict, normalize_host,
};
pub use proxy::{AskOutcome, EgressHooks, EgressProxy, EgressRecord, Lookup, ProxyLimits};
pub use pump::BUFFER_BYTES;

/// The proxy's handoff socket, in the session's log directory: the session's network holder
/// passes the listening socket of its loopback relay port over it, as the socket itself.
pub const HANDOFF_NAME: &str = "egress.fd";

/// The longest socket path the kernel takes (`sun_path` less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Where session `log_dir`'s proxy takes its relay port; an error when the path is too long
/// for a Unix socket (a deep `INTENDANT_HOME`).
pub fn handoff_path(log_dir: &Path) -> Result<PathBuf, String> {
    let path = log_dir.join(HANDOFF_NAME);
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "the egress proxy's socket {} is longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have; set INTENDANT_HOME to a shorter directory",
            path.display()
        ));
    }
    Ok(path)
}

/// `env` with every proxy variable it had replaced by the ones leading to the relay `port`
/// inside the session's namespace, and `NO_PROXY` (both cases) keeping the session's own
/// loopback direct.
pub fn with_proxy_env(mut env: Vec<(OsString, OsString)>, port: u16) -> Vec<(OsString, OsString)> {
    let ours = |name: &OsString| {
        name.to_str()
            .is_some_and(|n| PROXY_ENV_VARS.contains(&n) || n.eq_ignore_ascii_case("no_proxy"))
    };
    env.retain(|(name, _)| !ours(name));
    let url = format!("http://127.0.0.1:{port}");
    env.extend(
        PROXY_ENV_VARS
            .iter()
            .map(|name| (OsString::from(name), OsString::from(&url))),
    );
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.into(), NO_PROXY_VALUE.into()));
    }
    env
}

#[cfg(test)]
mod tests;

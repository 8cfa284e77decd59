//! A session's own network: the holder process (`intendant-runtime --hold-network`) the
//! controller starts once per session and keeps until the session ends. Every runtime of the
//! session joins its namespace (its own loopback and nothing else) before the sandbox, so a
//! server one batch starts is reachable from the next and no listener of the host is.
//!
//! The design decision to know: the namespace is held by a process of its own rather than by
//! the controller (which must stay in the host's network to reach model APIs) or by a runtime
//! (which lives one batch). The holder holds no key, runs no command, sits in the session's
//! cgroup and ends when its stdin (held here) closes: with [`SessionNetwork::end`], the
//! containment's end, or the controller's death.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use intendant_protocol::network::{HOLD_NETWORK_ARG, HolderReport, NetnsTarget};
use thiserror::Error;

pub use intendant_protocol::network::{
    EGRESS_PROXY_PORT_ENV, NetworkMode, SANDBOX_CONNECT_PORTS_ENV, SESSION_NETNS_ENV,
    SIMULATE_NO_NETNS_ENV,
};

/// What network a session's commands get when neither the owner nor the project says: their
/// own namespace, out only through the egress proxy.
pub const DEFAULT_NETWORK: NetworkMode = NetworkMode::Proxy;

/// Who chose a session's network, which bounds how open it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkChoice {
    /// The owner at the terminal (`intendant --network`), or a sub-agent held within its
    /// parent's mode: any mode.
    Owner(NetworkMode),
    /// A request from a daemon surface (`ctl start`, the dashboard's form, MCP `run_task`): no
    /// more open than the project's settings give ([`NetworkMode::within`]), so a request never
    /// widens the walls the owner set.
    Requested(NetworkMode),
}

/// The mode a session runs with: `choice` where it may have it, else the project's
/// `configured` mode, else [`DEFAULT_NETWORK`]; an error when a request asks for more than the
/// settings give.
pub fn decide_mode(
    choice: Option<NetworkChoice>,
    configured: Option<NetworkMode>,
) -> Result<NetworkMode, String> {
    let settings = configured.unwrap_or(DEFAULT_NETWORK);
    match choice {
        None => Ok(settings),
        Some(NetworkChoice::Owner(mode)) => Ok(mode),
        Some(NetworkChoice::Requested(mode)) if mode.within(settings) => Ok(mode),
        Some(NetworkChoice::Requested(mode)) => Err(format!(
            "network \"{mode}\" was asked for, but the project's settings give \"{settings}\" and a request may only narrow them (none, then proxy, then host); to allow it, set `[sandbox] network = \"{mode}\"` in the project's intendant.toml and trust it (`intendant trust`)"
        )),
    }
}

/// How long a holder may take to report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the report line read at most.
const REPORT_MAX_BYTES: u64 = 4096;

/// Why a session could not have its own network.
#[derive(Debug, Error)]
pub enum NetworkError {
    /// The kernel (or its policy) refuses the namespace.
    #[error("the kernel refuses a network namespace: {reason}")]
    Unavailable {
        /// The holder's reason.
        reason: String,
    },
    /// The holder could not be started, placed or understood.
    #[error("the session's network holder failed: {0}")]
    Holder(String),
}

/// What the holder is started with.
#[derive(Debug, Clone)]
pub struct HolderSpec {
    /// The runtime executable (the holder is one of its modes).
    pub runtime_path: PathBuf,
    /// The handoff socket of the controller's egress proxy, which the holder passes every
    /// connection to its loopback relay port to.
    pub relay: Option<PathBuf>,
    /// Report namespaces as unavailable without trying ([`SIMULATE_NO_NETNS_ENV`] of the
    /// controller's own environment: a test hook that can only take the namespace away).
    pub simulate_unavailable: bool,
}

/// The holder of a session's network namespace; ends it when dropped.
#[derive(Debug)]
pub struct SessionNetwork {
    child: Option<Child>,
    target: NetnsTarget,
    relay_port: Option<u16>,
    relay_error: Option<String>,
    /// The egress proxy the relay leads to, ended with the namespace.
    egress: Option<crate::egress::EgressProxy>,
}

impl SessionNetwork {
    /// Starts the holder, places it with `place` (the session's cgroups) and waits for its
    /// report.
    pub fn start(
        spec: &HolderSpec,
        place: impl FnOnce(u32) -> std::io::Result<()>,
    ) -> Result<SessionNetwork, NetworkError> {
        let mut command = Command::new(&spec.runtime_path);
        command
            .arg(HOLD_NETWORK_ARG)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(relay) = &spec.relay {
            command.arg("--relay").arg(relay);
        }
        if spec.simulate_unavailable {
            command.env(SIMULATE_NO_NETNS_ENV, "1");
        }
        let mut child = command.spawn().map_err(|e| {
            NetworkError::Holder(format!(
                "cannot start {} {HOLD_NETWORK_ARG}: {e}",
                spec.runtime_path.display()
            ))
        })?;
        let mut holder = SessionNetwork {
            target: NetnsTarget {
                pid: child.id(),
                user_ns: 0,
                net_ns: 0,
            },
            relay_port: None,
            relay_error: None,
            child: None,
            egress: None,
        };
        let stdout = child.stdout.take();
        holder.child = Some(child);
        place(holder.target.pid)
            .map_err(|e| NetworkError::Holder(format!("cannot place the holder: {e}")))?;
        let stdout =
            stdout.ok_or_else(|| NetworkError::Holder("the holder has no stdout".into()))?;
        match read_report(stdout)? {
            HolderReport::Ready {
                pid,
                user_ns,
                net_ns,
                relay_port,
                relay_error,
            } if pid == holder.target.pid && net_ns != 0 => {
                holder.target = NetnsTarget {
                    pid,
                    user_ns,
                    net_ns,
                };
                holder.relay_port = relay_port;
                holder.relay_error = relay_error;
                Ok(holder)
            }
            HolderReport::Ready { pid, .. } => Err(NetworkError::Holder(format!(
                "the holder reported pid {pid} and no namespace"
            ))),
            HolderReport::Unavailable { reason } => Err(NetworkError::Unavailable { reason }),
        }
    }

    /// What each runtime of the session joins (the value of [`SESSION_NETNS_ENV`]).
    pub fn target(&self) -> NetnsTarget {
        self.target
    }

    /// The loopback port inside the namespace that leads to the egress proxy, if one is relayed.
    pub fn relay_port(&self) -> Option<u16> {
        self.relay_port
    }

    /// Why the relay asked for could not be made (the namespace then has no way out).
    pub fn relay_error(&self) -> Option<&str> {
        self.relay_error.as_deref()
    }

    /// Has [`SessionNetwork::end`] shut `proxy` down (every connection it carries closed) with
    /// the namespace.
    pub fn hold_egress(&mut self, proxy: crate::egress::EgressProxy) {
        self.egress = Some(proxy);
    }

    /// Ends the namespace: the egress proxy's connections close, the holder's stdin closes and
    /// it is killed and reaped. Idempotent.
    pub fn end(&mut self) {
        if let Some(mut proxy) = self.egress.take() {
            proxy.shutdown();
        }
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SessionNetwork {
    fn drop(&mut self) {
        self.end();
    }
}

/// The holder's one report line, bounded in size and time.
fn read_report(stdout: std::process::ChildStdout) -> Result<HolderReport, NetworkError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("netns-report".into())
        .spawn(move || {
            let mut line = String::new();
            let read =
                BufReader::new(std::io::Read::take(stdout, REPORT_MAX_BYTES)).read_line(&mut line);
            let _ = tx.send(read.map(|_| line));
        })
        .map_err(|e| NetworkError::Holder(format!("cannot read the holder's report: {e}")))?;
    let line = match rx.recv_timeout(REPORT_TIMEOUT) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => {
            return Err(NetworkError::Holder(format!("cannot read its report: {e}")));
        }
        Err(_) => {
            return Err(NetworkError::Holder(format!(
                "no report within {} s",
                REPORT_TIMEOUT.as_secs()
            )));
        }
    };
    if line.trim().is_empty() {
        return Err(NetworkError::Holder("it exited without a report".into()));
    }
    serde_json::from_str(line.trim())
        .map_err(|e| NetworkError::Holder(format!("unreadable report {:?}: {e}", line.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_only_narrows_the_projects_network_and_the_owner_chooses_any() {
        use NetworkChoice::{Owner, Requested};
        use NetworkMode::{Host, None as Closed, Proxy};
        // Nothing said: the project's mode, else the default.
        assert_eq!(decide_mode(None, None), Ok(Proxy));
        assert_eq!(decide_mode(None, Some(Host)), Ok(Host));
        // The owner's flag goes either way.
        assert_eq!(decide_mode(Some(Owner(Host)), None), Ok(Host));
        assert_eq!(decide_mode(Some(Owner(Proxy)), Some(Closed)), Ok(Proxy));
        // A request narrows, or matches a trusted `host`.
        assert_eq!(decide_mode(Some(Requested(Closed)), None), Ok(Closed));
        assert_eq!(decide_mode(Some(Requested(Proxy)), Some(Host)), Ok(Proxy));
        assert_eq!(decide_mode(Some(Requested(Host)), Some(Host)), Ok(Host));
        for (asked, settings) in [(Host, None), (Host, Some(Proxy)), (Proxy, Some(Closed))] {
            let err = decide_mode(Some(Requested(asked)), settings).unwrap_err();
            assert!(
                err.contains(&format!("network \"{asked}\" was asked"))
                    && err.contains("may only narrow")
                    && err.contains("intendant trust"),
                "{err}"
            );
        }
    }
}

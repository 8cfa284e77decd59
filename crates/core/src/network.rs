//! A session's own network: the namespace (its own loopback and nothing else) that a holder
//! process (`intendant-runtime --hold-network`) makes once per session, and that the controller
//! then holds by descriptor until the session ends. Every runtime of the session (and every
//! program run inside its walls) is started with those descriptors and joins the namespace
//! before its sandbox, so a server one batch starts is reachable from the next and no listener
//! of the host is.
//!
//! The design decisions to know:
//! - The namespace is made by a process of its own: the controller must stay in the host's
//!   network to reach model APIs, and `unshare` of a user namespace needs a single-threaded
//!   process. The holder holds no key, runs no command and sits in the session's cgroup.
//! - It is then held by descriptor, not by the holder: the controller opens the holder's
//!   `/proc/<pid>/ns/` entries while the holder is its unreaped child (so the pid is its own),
//!   checks they are the namespaces the holder reported, and lets the holder go. A waiting
//!   session so keeps one descriptor (two with a user namespace) instead of a process and its
//!   pipe (about 400 KiB of memory, most of it the runtime binary's relocated data). The
//!   namespace ends when the last
//!   descriptor closes and the last process in it is gone: [`SessionNetwork::end`] (the
//!   containment's end, whose cgroup kill takes the processes) or the controller's death.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use intendant_protocol::network::{HOLD_NETWORK_ARG, HolderReport, NetnsTarget, NsRef};
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
    /// What a resumed session's commands ran with, as its record keeps it, where nothing else
    /// says: kept where the project's settings still give it, else narrowed to them, so a
    /// resume neither drops a narrowing the session was started with nor widens past the
    /// owner's settings.
    Recorded(NetworkMode),
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
        Some(NetworkChoice::Requested(mode) | NetworkChoice::Recorded(mode))
            if mode.within(settings) =>
        {
            Ok(mode)
        }
        Some(NetworkChoice::Recorded(_)) => Ok(settings),
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

/// A session's network namespace as the controller holds it; ends it when dropped.
#[derive(Debug)]
pub struct SessionNetwork {
    netns: SessionNetns,
    relay_port: Option<u16>,
    relay_error: Option<String>,
    /// The egress proxy the relay leads to, ended with the namespace.
    egress: Option<crate::egress::EgressProxy>,
}

/// The namespaces' descriptors, shared by everything that starts a program for the session
/// (its runner, its hooks' and MCP servers' walls), each clone reaching the one hold, so the
/// namespace ends when [`SessionNetwork::end`] lets it go, however many clones are about.
#[derive(Debug, Clone)]
pub struct SessionNetns {
    held: Arc<Mutex<Option<HeldNs>>>,
}

#[derive(Debug)]
struct HeldNs {
    /// The user namespace the holder made (none as root) and its inode.
    user: Option<(Arc<OwnedFd>, u64)>,
    /// The network namespace and its inode.
    net: (Arc<OwnedFd>, u64),
}

impl SessionNetns {
    /// What a program of the session is started with: the descriptors, and
    /// [`SESSION_NETNS_ENV`] naming them; an error once the session's network has ended (its
    /// program is then not started: never with the host's network instead).
    pub fn passed(&self) -> Result<crate::child::Passed, String> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = held.as_ref() else {
            return Err("the session's network namespace has ended".into());
        };
        let user_inode = held.user.as_ref().map(|(_, inode)| *inode);
        let net_inode = held.net.1;
        let mut files: Vec<Arc<OwnedFd>> = Vec::new();
        if let Some((fd, _)) = &held.user {
            files.push(Arc::clone(fd));
        }
        files.push(Arc::clone(&held.net.0));
        let announce = move |fds: &[RawFd]| -> (OsString, OsString) {
            let (user, net) = match (user_inode, fds) {
                (Some(inode), [user, net, ..]) => (Some(NsRef { fd: *user, inode }), *net),
                (_, [net, ..]) => (None, *net),
                // Never: `files` holds one or two. An unreadable value makes the runtime refuse.
                (_, []) => (None, -1),
            };
            let target = NetnsTarget {
                user,
                net: NsRef {
                    fd: net,
                    inode: net_inode,
                },
            };
            (SESSION_NETNS_ENV.into(), target.to_string().into())
        };
        Ok(crate::child::Passed {
            files,
            announce: Arc::new(announce),
        })
    }

    /// Lets the descriptors go (an ended session).
    fn end(&self) {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(held);
    }
}

impl SessionNetwork {
    /// Starts the holder, places it with `place` (the session's cgroups), waits for its
    /// report, takes hold of the namespace it made and lets it go.
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
        let child =
            crate::child::own::spawned(|| command.spawn(), |c| Some(c.id())).map_err(|e| {
                NetworkError::Holder(format!(
                    "cannot start {} {HOLD_NETWORK_ARG}: {e}",
                    spec.runtime_path.display()
                ))
            })?;
        // Killed and reaped on every way out, once the namespace is held or not.
        let mut holder = Reaped(child);
        let pid = holder.0.id();
        let stdout = holder.0.stdout.take();
        place(pid).map_err(|e| NetworkError::Holder(format!("cannot place the holder: {e}")))?;
        let stdout =
            stdout.ok_or_else(|| NetworkError::Holder("the holder has no stdout".into()))?;
        match read_report(stdout)? {
            HolderReport::Ready {
                pid: reported,
                user_ns,
                net_ns,
                relay_port,
                relay_error,
            } if reported == pid && net_ns != 0 => {
                // The holder is our child and not yet reaped: `pid` is still it.
                let user = match user_ns {
                    0 => None,
                    inode => Some((Arc::new(open_ns(pid, "user", inode)?), inode)),
                };
                let net = (Arc::new(open_ns(pid, "net", net_ns)?), net_ns);
                drop(holder);
                Ok(SessionNetwork {
                    netns: SessionNetns {
                        held: Arc::new(Mutex::new(Some(HeldNs { user, net }))),
                    },
                    relay_port,
                    relay_error,
                    egress: None,
                })
            }
            HolderReport::Ready { pid, .. } => Err(NetworkError::Holder(format!(
                "the holder reported pid {pid} and no namespace"
            ))),
            HolderReport::Unavailable { reason } => Err(NetworkError::Unavailable { reason }),
        }
    }

    /// What every program of the session is started with.
    pub fn netns(&self) -> SessionNetns {
        self.netns.clone()
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

    /// Ends the namespace: the egress proxy's connections close and its descriptors are let go
    /// (no program of the session starts after; the processes still in it go with the
    /// session's cgroup). Idempotent.
    pub fn end(&mut self) {
        if let Some(mut proxy) = self.egress.take() {
            proxy.shutdown();
        }
        self.netns.end();
    }
}

impl Drop for SessionNetwork {
    fn drop(&mut self) {
        self.end();
    }
}

/// The holder, killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Opens `/proc/<pid>/ns/<kind>` and checks it is the namespace `inode` the holder reported.
fn open_ns(pid: u32, kind: &str, inode: u64) -> Result<OwnedFd, NetworkError> {
    let path = format!("/proc/{pid}/ns/{kind}");
    let file = std::fs::File::open(&path)
        .map_err(|e| NetworkError::Holder(format!("cannot open {path}: {e}")))?;
    let found = file
        .metadata()
        .map_err(|e| NetworkError::Holder(format!("cannot stat {path}: {e}")))?
        .ino();
    if found != inode {
        return Err(NetworkError::Holder(format!(
            "{path} is namespace {found}, not the {inode} the holder reported"
        )));
    }
    Ok(OwnedFd::from(file))
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

    #[test]
    fn a_resume_keeps_the_network_it_ran_with_within_the_projects_settings_now() {
        use NetworkChoice::Recorded;
        use NetworkMode::{Host, None as Closed, Proxy};
        // A narrowing it was started with stays.
        assert_eq!(decide_mode(Some(Recorded(Closed)), None), Ok(Closed));
        assert_eq!(decide_mode(Some(Recorded(Proxy)), Some(Host)), Ok(Proxy));
        // Settings narrowed since narrow it; a mode the owner once chose past them is not kept.
        assert_eq!(decide_mode(Some(Recorded(Host)), Some(Proxy)), Ok(Proxy));
        assert_eq!(decide_mode(Some(Recorded(Proxy)), Some(Closed)), Ok(Closed));
        assert_eq!(decide_mode(Some(Recorded(Host)), None), Ok(Proxy));
    }
}

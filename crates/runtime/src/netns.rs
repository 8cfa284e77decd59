//! A session's own network: the holder that makes it, and the join every runtime of the session
//! makes before its sandbox.
//!
//! The holder (`intendant-runtime --hold-network`, one per session, started by the controller)
//! makes a network namespace with only a loopback (directly as root, else inside a user
//! namespace that maps only the user's own ids), brings `lo` up, optionally listens on one
//! loopback port inside it and hands that listening socket itself to a Unix socket of the
//! controller (its egress proxy's handoff socket, which accepts the commands' connections
//! there), reports one
//! [`HolderReport`] line and then waits for its stdin to close. The controller opens the
//! namespace through `/proc/<holder>/ns/` meanwhile and holds it by descriptor for the
//! session's life, so a server a command starts in one batch is reachable from the next while
//! no listener of the host is. The design decision to know: a runtime joins through the
//! descriptors it was started with ([`NetnsTarget`] names their numbers) and checks each is
//! the namespace of the inode the holder reported, so a descriptor that is anything else is
//! never joined: the runtime refuses to run instead (fail closed). It closes them once joined:
//! no command inherits a way back to a namespace.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use intendant_protocol::network::{
    HOLD_NETWORK_ARG, HolderReport, NetnsTarget, NsRef, SESSION_NETNS_ENV, SIMULATE_NO_NETNS_ENV,
};

/// The argument naming the Unix socket the holder hands its loopback relay port to.
pub const RELAY_ARG: &str = "--relay";

/// The holder's command line after [`HOLD_NETWORK_ARG`]: `[--relay SOCKET]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderArgs {
    /// The controller's Unix socket the relay port is handed to.
    pub relay: Option<PathBuf>,
}

impl HolderArgs {
    /// Parses the arguments after [`HOLD_NETWORK_ARG`]; anything else is an error.
    pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<HolderArgs, String> {
        let mut out = HolderArgs::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some(RELAY_ARG) if out.relay.is_none() => {
                    let path = args
                        .next()
                        .ok_or_else(|| format!("{RELAY_ARG} needs a socket path"))?;
                    out.relay = Some(PathBuf::from(path));
                }
                Some(_) | None => {
                    return Err(format!(
                        "unexpected argument {arg:?}: usage {HOLD_NETWORK_ARG} [{RELAY_ARG} SOCKET]"
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// Runs the holder: sets the namespace up, reports on `out`, then holds it until `stdin`
/// closes. Returns once it may exit (`Err` when nothing could be made; the report says why).
pub fn hold(args: &HolderArgs, out: &mut impl Write, stdin: &mut impl Read) -> Result<(), String> {
    let report = match set_up(args) {
        Ok(report) => report,
        Err(reason) => {
            let report = HolderReport::Unavailable {
                reason: reason.clone(),
            };
            let _ = write_report(out, &report);
            return Err(reason);
        }
    };
    write_report(out, &report)?;
    // The controller keeps our stdin open for the session's life; its end (or the controller's
    // death) closes it, and the namespace goes with this process.
    let mut sink = [0u8; 256];
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(()),
        }
    }
}

fn write_report(out: &mut impl Write, report: &HolderReport) -> Result<(), String> {
    let line = serde_json::to_string(report).map_err(|e| e.to_string())?;
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot report to the controller: {e}"))
}

/// The namespace, its loopback and the relay; the report to send.
#[cfg(target_os = "linux")]
fn set_up(args: &HolderArgs) -> Result<HolderReport, String> {
    if std::env::var_os(SIMULATE_NO_NETNS_ENV).is_some_and(|v| !v.is_empty()) {
        return Err("network namespaces are unavailable (simulated)".into());
    }
    let own_user_ns = enter_namespace()?;
    loopback_up().map_err(|e| format!("cannot bring up the namespace's loopback: {e}"))?;
    let inode = |kind: &str| {
        std::fs::metadata(format!("/proc/self/ns/{kind}"))
            .map(|m| m.ino())
            .map_err(|e| format!("cannot read /proc/self/ns/{kind}: {e}"))
    };
    let user_ns = if own_user_ns { inode("user")? } else { 0 };
    let net_ns = inode("net")?;
    // A relay that cannot be made leaves the namespace without a way out (fail closed, as
    // `none`), never the host's network: the controller is told why.
    let (relay_port, relay_error) = match args.relay.as_deref().map(start_relay) {
        None => (None, None),
        Some(Ok(port)) => (Some(port), None),
        Some(Err(why)) => (None, Some(why)),
    };
    Ok(HolderReport::Ready {
        pid: std::process::id(),
        user_ns,
        net_ns,
        relay_port,
        relay_error,
    })
}

#[cfg(not(target_os = "linux"))]
fn set_up(args: &HolderArgs) -> Result<HolderReport, String> {
    let _ = args;
    Err("network namespaces are Linux-only".into())
}

/// A new network namespace: directly with `CAP_SYS_ADMIN`, else inside a user namespace that
/// maps only this process's own uid and gid. Returns whether a user namespace was made.
#[cfg(target_os = "linux")]
fn enter_namespace() -> Result<bool, String> {
    // SAFETY: unshare takes flags only; the holder has started no thread yet.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
        return Ok(false);
    }
    let direct = std::io::Error::last_os_error();
    // SAFETY: geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: as above.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(format!(
            "no network namespace ({direct}) and no user namespace for uid {uid} ({err}); the kernel or its policy refuses unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or AppArmor's kernel.apparmor_restrict_unprivileged_userns)"
        ));
    }
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(true)
}

/// `ip link set lo up`, by `SIOCSIFFLAGS`.
#[cfg(target_os = "linux")]
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket takes plain integers; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socket just returned this fd; nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq naming `lo`; SIOCGIFFLAGS fills its flags.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS set the flags member of the union, read and written here.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS reads the ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Listens on an ephemeral port of the namespace's loopback and hands the listening socket
/// itself to `socket` (the proxy then accepts every command's connection there: the holder
/// keeps no connection and copies no byte); returns the port.
#[cfg(target_os = "linux")]
fn start_relay(socket: &Path) -> Result<u16, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| format!("cannot listen on the namespace's loopback: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the relay's port: {e}"))?
        .port();
    let link = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach the egress proxy's handoff socket {}: {e}",
            socket.display()
        )
    })?;
    send_fd(&link, listener.as_raw_fd())
        .map_err(|e| format!("cannot hand the relay port to the egress proxy: {e}"))?;
    Ok(port)
}

/// Sends `fd` over `link` as one byte with `SCM_RIGHTS`.
#[cfg(target_os = "linux")]
fn send_fd(link: &std::os::unix::net::UnixStream, fd: std::os::fd::RawFd) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // u64s keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 4];
    let fd_len = std::mem::size_of::<libc::c_int>() as u32;
    // SAFETY: an all-zero msghdr is valid; every pointer set below outlives the sendmsg, and the
    // control buffer (32 bytes) holds CMSG_SPACE of one int.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(fd_len) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_len) as _;
        libc::CMSG_DATA(cmsg)
            .cast::<libc::c_int>()
            .write_unaligned(fd);
        loop {
            let sent = libc::sendmsg(link.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if sent >= 0
                || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                break sent;
            }
        }
    };
    if sent == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Why a runtime could not join its session's network.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot join the session's network namespace ({target}): {reason}; refusing to run with the host's network"
)]
pub struct JoinError {
    /// The value of [`SESSION_NETNS_ENV`].
    pub target: String,
    /// What failed.
    pub reason: String,
}

/// Joins the namespace named by [`SESSION_NETNS_ENV`], if set: its user namespace first (when
/// the holder made one), then its network namespace, each through the descriptor the variable
/// names, which is closed once joined. Must run before any thread exists and before the
/// sandbox (which forbids `setns`). Returns the target joined.
pub fn join_from_env() -> Result<Option<NetnsTarget>, JoinError> {
    let Some(value) = std::env::var_os(SESSION_NETNS_ENV).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let text = value.to_string_lossy().into_owned();
    let fail = |reason: String| JoinError {
        target: text.clone(),
        reason,
    };
    let target: NetnsTarget = text.parse().map_err(fail)?;
    join(&target).map_err(fail)?;
    Ok(Some(target))
}

#[cfg(target_os = "linux")]
fn join(target: &NetnsTarget) -> Result<(), String> {
    // Both are taken first, so neither outlives a failure of the other.
    let user = target
        .user
        .map(|ns| take(ns, "user").map(|fd| (fd, ns)))
        .transpose()?;
    let net = take(target.net, "net")?;
    if let Some((fd, ns)) = &user {
        enter(fd, *ns, "user", libc::CLONE_NEWUSER)?;
    }
    enter(&net, target.net, "net", libc::CLONE_NEWNET)
}

#[cfg(not(target_os = "linux"))]
fn join(target: &NetnsTarget) -> Result<(), String> {
    let _ = target;
    Err("network namespaces are Linux-only".into())
}

/// The inherited descriptor `ns.fd`, owned from here on (closed when dropped).
#[cfg(target_os = "linux")]
fn take(ns: NsRef, kind: &str) -> Result<OwnedFd, String> {
    // SAFETY: F_GETFD reads a descriptor's flags and touches no memory.
    if unsafe { libc::fcntl(ns.fd, libc::F_GETFD) } < 0 {
        return Err(format!(
            "descriptor {} (the {kind} namespace) is not open: {}",
            ns.fd,
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the descriptor is open (checked above), was inherited for this use alone (the
    // variable names it; nothing else of this single-threaded process knows its number) and
    // is owned, and closed, here only.
    Ok(unsafe { OwnedFd::from_raw_fd(ns.fd) })
}

/// Checks `fd` is the namespace `ns.inode` and enters it.
#[cfg(target_os = "linux")]
fn enter(fd: &OwnedFd, ns: NsRef, kind: &str, flag: libc::c_int) -> Result<(), String> {
    let found = rustix::fs::fstat(fd)
        .map_err(|e| format!("cannot stat descriptor {}: {e}", ns.fd))?
        .st_ino;
    if found != ns.inode {
        return Err(format!(
            "descriptor {} is inode {found}, not the session's {kind} namespace {}",
            ns.fd, ns.inode
        ));
    }
    // SAFETY: setns takes a descriptor we own and a flag (the kernel refuses one that is not a
    // namespace of that kind); the process is single-threaded.
    if unsafe { libc::setns(fd.as_raw_fd(), flag) } != 0 {
        return Err(format!(
            "setns(descriptor {}, {kind}): {}",
            ns.fd,
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_arguments_are_parsed_and_others_refused() {
        let parse = |args: &[&str]| HolderArgs::parse(args.iter().map(std::ffi::OsString::from));
        assert_eq!(parse(&[]), Ok(HolderArgs::default()));
        assert_eq!(
            parse(&["--relay", "/run/p.sock"]),
            Ok(HolderArgs {
                relay: Some("/run/p.sock".into())
            })
        );
        assert!(parse(&["--relay"]).unwrap_err().contains("socket path"));
        assert!(parse(&["--relay", "a", "--relay", "b"]).is_err());
        assert!(parse(&["--net"]).unwrap_err().contains("usage"));
    }

    #[test]
    fn a_report_is_one_json_line() {
        let mut out = Vec::new();
        write_report(&mut out, &HolderReport::Unavailable { reason: "x".into() }).unwrap();
        assert_eq!(out, b"{\"type\":\"unavailable\",\"reason\":\"x\"}\n");
    }
}

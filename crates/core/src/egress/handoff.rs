//! The relay port the session's network holder hands over: the holder binds a port on the
//! namespace's loopback and passes the listening socket itself over the proxy's handoff socket
//! (`SCM_RIGHTS`), so the proxy accepts the commands' connections in the namespace directly and
//! nothing else sits between a command and the proxy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinSet;

/// Descriptors taken from one message at most (the holder sends one; more are closed).
const MAX_FDS: usize = 4;

/// Takes the listening sockets `link` hands over until it closes or fails, giving each to
/// `serve` with the task set to serve it in (dropped, so aborted, with this future); a
/// descriptor that is not a listening TCP socket is closed.
pub(super) async fn receive(
    link: UnixStream,
    mut serve: impl FnMut(TcpListener, &mut JoinSet<()>) + Send,
) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            ready = link.readable() => {
                if ready.is_err() {
                    break;
                }
                let fds = match link.try_io(Interest::READABLE, || recv_fds(link.as_raw_fd())) {
                    Ok(Some(fds)) => fds,
                    Ok(None) => break,
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::Interrupted =>
                    {
                        continue;
                    }
                    Err(_) => break,
                };
                for listener in fds.into_iter().filter_map(adopt) {
                    serve(listener, &mut tasks);
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // The link closed (the holder keeps none open): what it handed over is served on.
    while tasks.join_next().await.is_some() {}
}

/// One message's descriptors (none when it carried only bytes); `None` at the link's end.
fn recv_fds(link: RawFd) -> io::Result<Option<Vec<OwnedFd>>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // u64s keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg fills the buffers `msg` points to, all live and of the lengths given.
    let n = unsafe { libc::recvmsg(link, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the CMSG_* walk stays within the control buffer recvmsg filled, as it reported.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    // Each descriptor the kernel installed is ours to close, kept or not.
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    fds.truncate(MAX_FDS);
    Ok(Some(fds))
}

/// `fd` as a tokio listener when it is a listening TCP socket; else closed.
fn adopt(fd: OwnedFd) -> Option<TcpListener> {
    let int_opt = |name| {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes one int into `value`, whose size `len` gives.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    };
    let listening = int_opt(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && int_opt(libc::SO_ACCEPTCONN) == Some(1)
        && matches!(
            int_opt(libc::SO_DOMAIN),
            Some(libc::AF_INET | libc::AF_INET6)
        );
    if !listening {
        return None;
    }
    let listener = std::net::TcpListener::from(fd);
    listener.set_nonblocking(true).ok()?;
    TcpListener::from_std(listener).ok()
}

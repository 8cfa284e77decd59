//! Connections the session's network holder hands over: the holder accepts each command's TCP
//! connection on the namespace's loopback and passes the socket itself over the proxy's handoff
//! socket (`SCM_RIGHTS`, one descriptor a message), so the proxy reads and writes the command's
//! connection directly and no byte is copied through the holder.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;

/// Descriptors taken from one message at most (the holder sends one; more are closed unread).
const MAX_FDS: usize = 4;

/// Takes the connections `link` hands over until it closes or fails, passing each on `into`;
/// anything that is not a connected TCP socket is closed.
pub(super) async fn receive(link: UnixStream, into: mpsc::Sender<TcpStream>) {
    loop {
        if link.readable().await.is_err() {
            return;
        }
        let fds = match link.try_io(Interest::READABLE, || recv_fds(link.as_raw_fd())) {
            Ok(Some(fds)) => fds,
            Ok(None) => return,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                continue;
            }
            Err(_) => return,
        };
        for fd in fds {
            if let Some(stream) = adopt(fd)
                && into.send(stream).await.is_err()
            {
                return;
            }
        }
    }
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

/// `fd` as a tokio connection when it is a connected TCP stream socket; else closed.
fn adopt(fd: OwnedFd) -> Option<TcpStream> {
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
    let tcp = int_opt(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && matches!(
            int_opt(libc::SO_DOMAIN),
            Some(libc::AF_INET | libc::AF_INET6)
        );
    if !tcp {
        return None;
    }
    let stream = std::net::TcpStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    let _ = stream.set_nodelay(true);
    TcpStream::from_std(stream).ok()
}

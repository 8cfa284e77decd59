//! Carrying a tunnel's bytes both ways once the proxy has connected it: both directions at once,
//! each starting with a small buffer (a short request or answer costs no pipe) and, once a read
//! fills it, `splice(2)`d through a pipe of its own (the bytes never enter the proxy's memory),
//! or, where no pipe can be had (out of descriptors, or not Linux), read into and written from a
//! fixed buffer. Either way at most [`BUFFER_BYTES`] wait per direction; the idle timeout is
//! the proxy's sweeper's ([`super::idle`]), not a timer per chunk or per tunnel.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::idle::{IdleWatch, Tunnel};

use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::TcpStream;

/// Bytes waiting per direction of one connection (a pipe's capacity, or a buffer where no pipe
/// can be had): a session's proxy holds at most `2 × BUFFER_BYTES × max_connections` of
/// payload, whatever its commands send.
pub const BUFFER_BYTES: usize = 256 * 1024;

/// The buffer a direction starts with; a read that fills it moves the direction to a pipe.
const FIRST_BYTES: usize = 16 * 1024;

/// Tests take the buffer path as where no pipe can be had.
#[cfg(test)]
pub(super) static FORCE_BUFFER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A connected stream the proxy serves or opens: tokio's readiness on a socket descriptor.
pub(super) trait Conn:
    AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + Sync + 'static
{
    /// Waits until `interest` may be ready.
    fn wait(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs a non-blocking `op` on the descriptor, clearing the readiness when it would block.
    fn attempt<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! conn_for {
    ($stream:ty) => {
        impl Conn for $stream {
            async fn wait(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(|_| ())
            }

            fn attempt<R>(
                &self,
                interest: Interest,
                op: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, op)
            }
        }
    };
}

conn_for!(TcpStream);

/// Carries bytes between `client` and `upstream` until both directions have ended (each end
/// passed on as a half-close), either side fails, or `idle` finds nothing moved for its
/// timeout; returns the bytes carried up (client to host) and down.
pub(super) async fn carry(
    client: &impl Conn,
    upstream: &impl Conn,
    idle: &IdleWatch,
) -> (u64, u64) {
    let tunnel = idle.enter();
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let both = async {
        tokio::join!(
            one_way(client, upstream, &up, &tunnel),
            one_way(upstream, client, &down, &tunnel)
        )
    };
    tokio::select! {
        _ = both => {}
        () = tunnel.idled_out() => {}
    }
    (up.into_inner(), down.into_inner())
}

/// One direction: `from` to `to` until `from` ends or either fails; then `to`'s write side is
/// shut so the far end sees the end too.
async fn one_way(from: &impl Conn, to: &impl Conn, moved: &AtomicU64, tunnel: &Tunnel) {
    let mut way = Way::new();
    loop {
        let n = match way.fill(from).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tunnel.touch();
        let mut left = n;
        while left > 0 {
            match way.drain(to, left).await {
                Ok(0) | Err(_) => {
                    shut_write(to);
                    return;
                }
                Ok(sent) => {
                    left -= sent;
                    moved.fetch_add(sent as u64, Ordering::Relaxed);
                    tunnel.touch();
                }
            }
        }
        way.grow_if_filled(n);
    }
    shut_write(to);
}

fn shut_write(to: &impl Conn) {
    // SAFETY: shutdown takes a descriptor `to` keeps open and a flag; a failure (already shut,
    // peer gone) changes nothing.
    unsafe {
        libc::shutdown(to.as_raw_fd(), libc::SHUT_WR);
    }
}

/// What holds one direction's bytes between the read and the write.
enum Way {
    /// A pipe: `splice(2)` moves page references, no copy through the proxy.
    Pipe { read: OwnedFd, write: OwnedFd },
    /// A buffer and how far into it the write has got; `grow`: whether a read that fills it
    /// moves the direction to a pipe.
    Buffer { buf: Vec<u8>, at: usize, grow: bool },
}

impl Way {
    fn new() -> Way {
        Way::Buffer {
            buf: vec![0u8; FIRST_BYTES],
            at: 0,
            grow: true,
        }
    }

    /// After a fill of `n` bytes was passed on: a direction whose small buffer came back full
    /// carries a stream, which a pipe moves without copying (or, without a pipe, a full-sized
    /// buffer).
    fn grow_if_filled(&mut self, n: usize) {
        let Way::Buffer {
            buf, grow: true, ..
        } = self
        else {
            return;
        };
        if n < buf.len() {
            return;
        }
        #[cfg(test)]
        let piped = if FORCE_BUFFER.load(Ordering::Relaxed) {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        } else {
            pipe()
        };
        #[cfg(not(test))]
        let piped = pipe();
        *self = match piped {
            Ok((read, write)) => Way::Pipe { read, write },
            Err(_) => Way::Buffer {
                buf: vec![0u8; BUFFER_BYTES],
                at: 0,
                grow: false,
            },
        };
    }

    /// Takes what `from` has (waiting for some); 0 at its end. Called only once the last fill
    /// is drained, so the pipe or buffer is empty.
    async fn fill(&mut self, from: &impl Conn) -> io::Result<usize> {
        let fd = from.as_raw_fd();
        loop {
            from.wait(Interest::READABLE).await?;
            let got = match self {
                Way::Pipe { write, .. } => from.attempt(Interest::READABLE, || {
                    splice(fd, write.as_raw_fd(), BUFFER_BYTES)
                }),
                Way::Buffer { buf, at, .. } => {
                    *at = 0;
                    from.attempt(Interest::READABLE, || sys_read(fd, buf))
                }
            };
            match got {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                got => return got,
            }
        }
    }

    /// Passes up to `left` of the filled bytes to `to` (waiting until it takes some); the bytes
    /// taken.
    async fn drain(&mut self, to: &impl Conn, left: usize) -> io::Result<usize> {
        let fd = to.as_raw_fd();
        loop {
            to.wait(Interest::WRITABLE).await?;
            let sent = match self {
                Way::Pipe { read, .. } => {
                    to.attempt(Interest::WRITABLE, || splice(read.as_raw_fd(), fd, left))
                }
                Way::Buffer { buf, at, .. } => {
                    let start = *at;
                    let sent = to.attempt(Interest::WRITABLE, || {
                        sys_write(fd, &buf[start..start + left])
                    });
                    if let Ok(n) = sent {
                        *at += n;
                    }
                    sent
                }
            };
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                sent => return sent,
            }
        }
    }
}

/// A non-blocking pipe of [`BUFFER_BYTES`] (or the kernel's default where it refuses that size).
#[cfg(target_os = "linux")]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let size = libc::c_int::try_from(BUFFER_BYTES).unwrap_or(libc::c_int::MAX);
    // SAFETY: F_SETPIPE_SZ takes an int; a refusal (over the user's pipe budget) leaves the
    // default size, which only makes each splice smaller.
    unsafe {
        libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, size);
    }
    Ok((read, write))
}

#[cfg(not(target_os = "linux"))]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(target_os = "linux")]
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: splice between two descriptors the caller keeps open, no offsets (both are a
    // socket or a pipe). Splicing into a socket whose peer left may raise SIGPIPE, which a Rust
    // program ignores from its start (and the error then ends this direction).
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(not(target_os = "linux"))]
fn splice(_from: RawFd, _to: RawFd, _len: usize) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

fn sys_read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv into a live buffer of the length given, on a socket the caller keeps open.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

fn sys_write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: send from a live buffer of the length given, on a socket the caller keeps open;
    // MSG_NOSIGNAL: a peer that left is an error here, never a signal.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

//! Who is connecting: every surface of the daemon refuses a process of a session
//! ([`intendant_core::peer`]), a wall of its own that holds with the sandbox off, in front of
//! the token and everything else.
//!
//! - The control socket asks the kernel for the peer's pid (`SO_PEERCRED`), then looks at that
//!   process: its cgroups against the session groups, else whether it descends from the daemon
//!   (which reaps whatever a session starts as child subreaper).
//! - A TCP connection (the dashboard, MCP over HTTP) has no peer credentials, so the client's
//!   socket is looked up by its four addresses through `NETLINK_SOCK_DIAG`
//!   ([`sock_diag`]): `INET_DIAG_CGROUP_ID` is the cgroup v2 group the client's socket was
//!   created in (the inode number of its directory), compared with the session groups; and the
//!   socket's inode, looked for among the daemon's descendants' descriptors, covers sessions
//!   without a cgroup v2 group (no v2 hierarchy, or a v1-only machine).
//!
//! A refusal is a sentence for the client and for the daemon's log ([`DaemonLog`]). Whatever
//! cannot be established (the peer is gone, the socket cannot be found) is refused too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use intendant_core::peer::{self, SessionProcess};
use intendant_daemon::log::DaemonLog;

use crate::gate::{AcceptBackoff, Gate, Slot};

mod sock_diag;

fn refusal(pid: u32, why: &SessionProcess) -> String {
    format!(
        "refused: pid {pid} belongs to a session ({why}); a session's processes cannot drive \
         the daemon"
    )
}

/// Whether the process `pid` at the other end of the control socket may use it; the refusal
/// otherwise.
pub fn check_pid(pid: Option<i32>) -> Result<(), String> {
    let pid = pid
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| "refused: the kernel names no process for this connection".to_owned())?;
    match peer::session_process(pid) {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(refusal(pid, &why)),
        Err(e) => Err(format!(
            "refused: cannot tell whether pid {pid} belongs to a session: {e}"
        )),
    }
}

/// Whether the TCP client at `client`, connected to our `local` address, may use the
/// dashboard; the refusal otherwise. Blocking (netlink and `/proc`): call it off the runtime's
/// worker threads.
pub fn check_tcp(client: SocketAddr, local: SocketAddr) -> Result<(), String> {
    // A dual-stack listener sees an IPv4 client as `::ffff:a.b.c.d`; its socket is IPv4.
    let (client, local) = (unmapped(client), unmapped(local));
    let found = sock_diag::client_socket(client, local)
        .or_else(|_| sock_diag::client_socket_from_proc(client, local));
    let socket = match found {
        Ok(socket) => socket,
        // Not a socket of this machine: a remote client (`--web-allow-remote`), no session's.
        Err(_) if !client.ip().is_loopback() => return Ok(()),
        Err(e) => {
            return Err(format!(
                "refused: cannot find the connecting process of {client}: {e}"
            ));
        }
    };
    if let Some(id) = socket.cgroup_id
        && peer::is_session_group_id(id) == Some(true)
    {
        return Err(format!(
            "refused: the connection from {client} was made in a session's cgroup; a session's \
             processes cannot drive the daemon"
        ));
    }
    if socket.inode == 0 {
        // Closed already (the kernel keeps the connection, no process holds it): nobody can
        // be asked, and nobody is left to read an answer.
        return Err(format!(
            "refused: the client at {client} closed its socket before it could be identified"
        ));
    }
    if let Some(pid) = peer::descendant_holding_socket(socket.inode) {
        return Err(refusal(pid, &SessionProcess::Descendant));
    }
    Ok(())
}

/// `addr` with an IPv4-mapped IPv6 address as the IPv4 address it carries.
fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), addr.port()),
            None => addr,
        },
        std::net::IpAddr::V4(_) => addr,
    }
}

/// A TCP listener that hands on only connections whose client passes [`check_tcp`]; a refused
/// one gets `403 Forbidden` with the refusal as plain text (also logged) and is closed.
///
/// Checks run side by side (at most [`CHECKS_CAPACITY`] at once): one slow lookup (a large
/// cgroup tree, many session processes) does not hold up the connections behind it. Each
/// connection holds a place in its [`Gate`] from accept (its check included) to close.
#[derive(Debug)]
pub struct CheckedListener {
    inner: tokio::net::TcpListener,
    local: SocketAddr,
    refusals: DaemonLog,
    /// The checks under way, each ending with its connection when it was let in.
    checking: tokio::task::JoinSet<Option<Admitted>>,
    /// The connections open now (checking or served).
    gate: Arc<Gate>,
    /// `busy` answers being written now; past [`CHECKS_CAPACITY`] a refused connection is
    /// closed without one, so a flood cannot hold descriptors through them.
    refusing: Arc<AtomicUsize>,
    backoff: AcceptBackoff,
}

/// A connection [`CheckedListener`] let in.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) stream: tokio::net::TcpStream,
    /// Its place, given back when dropped; [`Slot::begin`] while a request is answered.
    pub(crate) slot: Slot,
    /// Fires when a newer connection took its place (it was between requests): close it.
    pub(crate) evicted: tokio::sync::oneshot::Receiver<()>,
}

/// One `busy` answer being written, counted until it is dropped.
#[derive(Debug)]
struct Refusing(Arc<AtomicUsize>);

impl Drop for Refusing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Most connections checked at once; more wait in the listener's backlog.
const CHECKS_CAPACITY: usize = 64;
/// Most refusals (of a peer, of an accept) a listener says a second; the rest are counted.
pub(crate) const REFUSALS_A_SECOND: u32 = 20;

impl CheckedListener {
    /// Checks the clients of `inner`, which listens on `local`, each given a place in `gate`
    /// (a newcomer with none is a 503 `busy`).
    pub(crate) fn new(
        inner: tokio::net::TcpListener,
        local: SocketAddr,
        refusals: DaemonLog,
        gate: Arc<Gate>,
    ) -> Self {
        CheckedListener {
            inner,
            local,
            refusals,
            checking: tokio::task::JoinSet::new(),
            gate,
            refusing: Arc::new(AtomicUsize::new(0)),
            backoff: AcceptBackoff::default(),
        }
    }

    /// Answers `stream` with a 503 saying the dashboard is busy, unless too many such answers
    /// are in flight (then it is just closed).
    fn refuse_busy(&self, stream: tokio::net::TcpStream) {
        if self.refusing.fetch_add(1, Ordering::SeqCst) >= CHECKS_CAPACITY {
            self.refusing.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let refusing = Refusing(self.refusing.clone());
        let body = format!(
            "busy: {} connections are answering requests, the most [daemon] \
             max_web_connections allows\n",
            self.gate.max()
        );
        tokio::spawn(async move {
            let mut stream = stream;
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
                 content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            refuse(&mut stream, response.as_bytes()).await;
            drop(refusing);
        });
    }

    /// Starts checking the connection `stream` from `client`.
    fn check(&mut self, stream: tokio::net::TcpStream, client: SocketAddr) {
        let Some((slot, evicted)) = self.gate.enter() else {
            self.refuse_busy(stream);
            return;
        };
        // The connection's own address (the listener's may be unspecified, 0.0.0.0).
        let local = stream.local_addr().unwrap_or(self.local);
        let refusals = self.refusals.clone();
        self.checking.spawn(async move {
            match off_runtime(move || check_tcp(client, local)).await {
                Ok(()) => Some(Admitted {
                    stream,
                    slot,
                    evicted,
                }),
                Err(refusal) => {
                    refusals.say(&format!("dashboard: {refusal}"));
                    tokio::spawn(forbid(stream, refusal));
                    None
                }
            }
        });
    }

    /// The next connection let in.
    pub(crate) async fn accept(&mut self) -> Admitted {
        loop {
            let room = self.checking.len() < CHECKS_CAPACITY;
            tokio::select! {
                accepted = self.inner.accept(), if room => match accepted {
                    Ok((stream, client)) => {
                        self.backoff.reset();
                        self.check(stream, client);
                    }
                    Err(e) => {
                        let (pause, first) = self.backoff.failed();
                        if first {
                            self.refusals
                                .say(&format!("dashboard: accept failed: {e}; backing off"));
                        }
                        tokio::time::sleep(pause).await;
                    }
                },
                Some(checked) = self.checking.join_next() => {
                    if let Ok(Some(admitted)) = checked {
                        return admitted;
                    }
                }
            }
        }
    }
}

/// Runs a blocking peer `check` (netlink, `/proc`) off the runtime's worker threads; a check
/// that could not finish refuses.
pub(crate) async fn off_runtime(
    check: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    tokio::task::spawn_blocking(check)
        .await
        .unwrap_or_else(|e| Err(format!("refused: the peer check failed: {e}")))
}

/// Answers a refused connection with a plain 403 and closes it.
async fn forbid(mut stream: tokio::net::TcpStream, refusal: String) {
    let body = format!("{refusal}\n");
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    refuse(&mut stream, response.as_bytes()).await;
}

/// Sends a refused client `answer` and closes the connection, within [`REFUSAL_WAIT`].
pub(crate) async fn refuse(
    stream: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    answer: &[u8],
) {
    use tokio::io::AsyncWriteExt;
    let _ = tokio::time::timeout(REFUSAL_WAIT, async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
        drain(stream).await;
    })
    .await;
}

/// Longest a refused client is given to read its answer.
const REFUSAL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads what the refused client sent until it hangs up (bounded by [`REFUSAL_WAIT`] and
/// [`DRAIN_LIMIT`]): closing a socket with unread input resets the connection, and the client
/// could lose the answer that says why.
async fn drain(stream: &mut (impl tokio::io::AsyncRead + Unpin)) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let mut left = DRAIN_LIMIT;
    while left > 0 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Most bytes read from a refused client before it is closed anyway.
const DRAIN_LIMIT: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_are_looked_up_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:4242".parse().unwrap();
        assert_eq!(unmapped(mapped), "127.0.0.1:4242".parse().unwrap());
        let v6: SocketAddr = "[::1]:4242".parse().unwrap();
        assert_eq!(unmapped(v6), v6);
    }

    /// Connections made at once are each checked and handed on, whatever order their checks
    /// end in.
    #[tokio::test]
    async fn the_listener_hands_on_every_connection_it_lets_in() {
        let inner = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = inner.local_addr().unwrap();
        let mut listener =
            CheckedListener::new(inner, local, DaemonLog::discard(), Gate::new(usize::MAX));
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(tokio::net::TcpStream::connect(local).await.unwrap());
        }
        let mut wanted: Vec<SocketAddr> = clients.iter().map(|c| c.local_addr().unwrap()).collect();
        let mut admitted = Vec::new();
        for _ in 0..3 {
            let accepted = listener.accept().await;
            admitted.push(accepted.stream.peer_addr().unwrap());
        }
        wanted.sort();
        admitted.sort();
        assert_eq!(admitted, wanted);
    }

    /// A client of a dual-stack listener that connected over IPv4 is found like any other:
    /// this process is no session, so it is let in (a session's is the cli's
    /// `security_daemon` tests).
    #[test]
    fn a_dual_stack_client_is_found_and_this_process_let_in() {
        let Ok(listener) = std::net::TcpListener::bind("[::]:0") else {
            return; // no IPv6 here
        };
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        assert!(peer.is_ipv6(), "{peer}");
        assert_eq!(check_tcp(peer, accepted.local_addr().unwrap()), Ok(()));
        // A loopback client that is gone is refused, not let in.
        let gone: SocketAddr = "[::ffff:127.0.0.1]:1".parse().unwrap();
        assert!(check_tcp(gone, accepted.local_addr().unwrap()).is_err());
    }
}

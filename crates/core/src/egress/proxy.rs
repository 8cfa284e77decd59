//! The listeners on the session's proxy sockets (byte streams on one, the holder's handed-over
//! connections on the other) and the life of one connection: read the head, decide on the host
//! as asked, resolve, guard the addresses, connect to exactly those, then carry bytes both ways
//! with bounded buffers until both sides close or it idles out.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use intendant_protocol::network::EgressVerdict;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::http::{self, CONNECT_OK, MAX_HEAD_BYTES, ProxyRequest};
use super::idle::IdleWatch;
use super::policy::{EgressPolicy, HostVerdict, normalize_host};
use super::pump::{self, Conn};
/// Connections past the cap answered 503 at once; past these too, one is closed unanswered.
const BUSY_ANSWERS: usize = 32;
/// Time a connection past the cap has to send its head before its 503.
const BUSY_READ: Duration = Duration::from_secs(2);
/// Addresses of one lookup tried at most.
const MAX_ADDRESSES: usize = 16;

/// The bounds of one session's proxy.
#[derive(Debug, Clone, Copy)]
pub struct ProxyLimits {
    /// Connections open at once; one more is answered 503 and closed at once.
    pub max_connections: usize,
    /// Time for a client to send its request head.
    pub head_timeout: Duration,
    /// Time for the lookup of a host.
    pub lookup_timeout: Duration,
    /// Time to connect to the host.
    pub connect_timeout: Duration,
    /// A connection carrying nothing either way this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> ProxyLimits {
        ProxyLimits {
            max_connections: 128,
            head_timeout: Duration::from_secs(10),
            lookup_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// A human's (or the autonomy level's) answer about a host in neither list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskOutcome {
    /// Let through; why, for the record.
    Allowed(String),
    /// Refused; why, for the 403 and the record.
    Refused(String),
}

/// One connection's record, handed to [`EgressHooks::record`] once it is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord {
    /// The host as asked (normalized).
    pub host: String,
    /// The port.
    pub port: u16,
    /// What happened.
    pub verdict: EgressVerdict,
    /// The rule or answer that decided it, or why it failed.
    pub rule: String,
    /// Bytes from the command to the host.
    pub bytes_up: u64,
    /// Bytes from the host to the command.
    pub bytes_down: u64,
    /// From the request to the end.
    pub duration: Duration,
}

/// What the proxy asks of the session it serves.
pub trait EgressHooks: Send + Sync + 'static {
    /// Decides about a host in neither list (an approval of category `network`).
    fn ask(self: Arc<Self>, host: String, port: u16) -> BoxFuture<'static, AskOutcome>;
    /// Takes the record of one connection.
    fn record(&self, record: EgressRecord);
}

/// How names are looked up: the system's resolver, or (in tests) a fixed table, so no test
/// ever asks a name server.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// `getaddrinfo`, through tokio.
    System,
    /// Names to addresses; a name not in it does not resolve.
    Table(std::collections::BTreeMap<String, Vec<IpAddr>>),
}

struct Ctx {
    /// The tunnels' idle timeout, its sweeper run by the accept loop.
    idle: IdleWatch,
    policy: EgressPolicy,
    hooks: Arc<dyn EgressHooks>,
    limits: ProxyLimits,
    lookup: Lookup,
    slots: Arc<Semaphore>,
}

/// A session's egress proxy: a task serving the relay ports handed over on its handoff socket.
/// Dropping it (or [`EgressProxy::shutdown`]) closes every connection it carries and removes
/// the socket.
pub struct EgressProxy {
    accept: Option<tokio::task::JoinHandle<()>>,
    /// Serving the relay port on the host's loopback, where there is one (the Landlock
    /// fallback of a session without a network of its own).
    host_relay: Option<tokio::task::JoinHandle<()>>,
    ctx: Arc<Ctx>,
    busy: Arc<Semaphore>,
    handoff: PathBuf,
    slots: Arc<Semaphore>,
    max_connections: usize,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("handoff", &self.handoff)
            .finish_non_exhaustive()
    }
}

/// Binds `socket`, first removing one a dead proxy left behind (its controller was killed, and
/// the session is now resumed in the same directory); a socket something still answers on is
/// in use, and anything else at the path is never touched.
fn bind_fresh(socket: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    match UnixListener::bind(socket) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let stale = std::fs::symlink_metadata(socket)?.file_type().is_socket()
                && std::os::unix::net::UnixStream::connect(socket)
                    .is_err_and(|c| c.kind() == std::io::ErrorKind::ConnectionRefused);
            if !stale {
                return Err(e);
            }
            std::fs::remove_file(socket)?;
            UnixListener::bind(socket)
        }
        bound => bound,
    }
}

impl EgressProxy {
    /// Listens on `handoff` (created here, owner-only) on `runtime` for the holder's one link,
    /// and serves every relay port handed over on it until shut down.
    pub fn start(
        handoff: &Path,
        policy: EgressPolicy,
        hooks: Arc<dyn EgressHooks>,
        limits: ProxyLimits,
        lookup: Lookup,
        runtime: &tokio::runtime::Handle,
    ) -> std::io::Result<EgressProxy> {
        let handoff_listener = {
            let _entered = runtime.enter();
            bind_fresh(handoff)?
        };
        std::fs::set_permissions(handoff, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let ctx = Arc::new(Ctx {
            idle: IdleWatch::new(limits.idle_timeout),
            policy,
            hooks,
            limits,
            lookup,
            slots: Arc::clone(&slots),
        });
        let busy = Arc::new(Semaphore::new(BUSY_ANSWERS));
        let accept = runtime.spawn(accept_loop(
            handoff_listener,
            handoff.to_path_buf(),
            Arc::clone(&ctx),
            Arc::clone(&busy),
        ));
        Ok(EgressProxy {
            accept: Some(accept),
            host_relay: None,
            ctx,
            busy,
            handoff: handoff.to_path_buf(),
            slots,
            max_connections: limits.max_connections,
        })
    }

    /// The socket the session's network holder hands its relay port over on.
    pub fn handoff_socket(&self) -> &Path {
        &self.handoff
    }

    /// Listens on an ephemeral port of the host's loopback and serves it as the relay port of a
    /// session without a network of its own (the Landlock fallback: its commands may connect to
    /// this port only); returns the port. Any local process can reach it; what it reaches is
    /// decided as for the session's commands. Replaces an earlier one.
    pub fn serve_host_relay(&mut self, runtime: &tokio::runtime::Handle) -> std::io::Result<u16> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let task = runtime.spawn(serve_listener(
            listener,
            Arc::clone(&self.ctx),
            Arc::clone(&self.busy),
        ));
        if let Some(old) = self.host_relay.replace(task) {
            old.abort();
        }
        Ok(port)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.max_connections
            .saturating_sub(self.slots.available_permits())
    }

    /// Stops serving: every connection is closed and the socket removed. Idempotent.
    pub fn shutdown(&mut self) {
        if let Some(relay) = self.host_relay.take() {
            relay.abort();
        }
        if let Some(accept) = self.accept.take() {
            // Aborting the accept task drops its JoinSet, which aborts every connection task.
            accept.abort();
            let _ = std::fs::remove_file(&self.handoff);
        }
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Takes the one link the session's holder hands its relay port over on, then closes the
/// handoff socket and removes it (`path`): nothing else is ever handed over. Serves what it
/// received, and sweeps idle tunnels, until aborted.
async fn accept_loop(handoff: UnixListener, path: PathBuf, ctx: Arc<Ctx>, busy: Arc<Semaphore>) {
    let mut tasks = JoinSet::new();
    let sweeper = Arc::clone(&ctx);
    tasks.spawn(async move { sweeper.idle.sweep().await });
    let link = loop {
        match handoff.accept().await {
            Ok((link, _)) => break link,
            // Out of descriptors (or a transient error): back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    drop(handoff);
    let _ = std::fs::remove_file(&path);
    tasks.spawn(super::handoff::receive(link, move |listener, tasks| {
        tasks.spawn(serve_listener(
            listener,
            Arc::clone(&ctx),
            Arc::clone(&busy),
        ));
    }));
    while tasks.join_next().await.is_some() {}
}

/// Admits every connection `listener` accepts (the relay port inside a session's namespace
/// that the holder handed over, or the one on the host's loopback of the Landlock fallback);
/// the connections end with this future.
async fn serve_listener(listener: tokio::net::TcpListener, ctx: Arc<Ctx>, busy: Arc<Semaphore>) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    // A short answer goes out at once, not after the client's ACK.
                    let _ = conn.set_nodelay(true);
                    admit(conn, &ctx, &busy, &mut tasks);
                }
                // Out of descriptors (or a transient error): back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// Serves `conn` in a slot of its own, or answers 503 when the session has none free.
fn admit(conn: impl Conn, ctx: &Arc<Ctx>, busy: &Arc<Semaphore>, tasks: &mut JoinSet<()>) {
    match Arc::clone(&ctx.slots).try_acquire_owned() {
        Ok(permit) => {
            let ctx = Arc::clone(ctx);
            tasks.spawn(async move {
                serve(conn, &ctx).await;
                drop(permit);
            });
        }
        Err(_) => match Arc::clone(busy).try_acquire_owned() {
            Ok(permit) => {
                let body = format!(
                    "intendant egress proxy: this session already has {} connections open (the cap); close some and retry\n",
                    ctx.limits.max_connections
                );
                tasks.spawn(async move {
                    refuse_busy(conn, &body).await;
                    drop(permit);
                });
            }
            // Past the cap and the busy answers too: closed unanswered.
            Err(_) => drop(conn),
        },
    }
}

/// Why a head could not be read.
enum HeadError {
    /// Not the start of an HTTP request, or longer than [`MAX_HEAD_BYTES`]: a 400.
    Garbage(String),
    /// The client went away first.
    Closed,
}

/// The request head and whatever the client sent after it.
async fn read_head(client: &mut impl Conn) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = http::head_end(&buf) {
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if !plausible_start(&buf) {
            return Err(HeadError::Garbage(
                "not an HTTP request (a proxy request starts with a method such as CONNECT or GET)"
                    .into(),
            ));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::Garbage(format!(
                "the request head is longer than {MAX_HEAD_BYTES} bytes"
            )));
        }
    }
}

/// Whether `buf` can still become a request line: an upper-case method of at most 16 letters,
/// then a space.
fn plausible_start(buf: &[u8]) -> bool {
    let (method, complete) = match buf.iter().position(|b| *b == b' ') {
        Some(i) => (&buf[..i], true),
        None => (buf, false),
    };
    method.len() <= 16
        && method.iter().all(u8::is_ascii_uppercase)
        && (!complete || !method.is_empty())
}

/// Takes in what a client past the cap sent (so closing does not reset the connection under
/// the answer), then answers 503.
async fn refuse_busy(mut client: impl Conn, body: &str) {
    let _ = tokio::time::timeout(BUSY_READ, read_head(&mut client)).await;
    answer(&mut client, 503, "Service Unavailable", body).await;
}

/// How to open an address the guard refuses.
const ADDRESS_HINT: &str =
    "if it is an internal host you trust, add its range to [sandbox.network] allow_addresses";

/// A refusal: the rule, and how to allow the host.
struct Refusal {
    rule: String,
    hint: String,
}

async fn serve(mut client: impl Conn, ctx: &Ctx) {
    let started = Instant::now();
    let (head, rest) =
        match tokio::time::timeout(ctx.limits.head_timeout, read_head(&mut client)).await {
            Ok(Ok(parts)) => parts,
            Ok(Err(HeadError::Garbage(why))) => return bad_request(&mut client, &why).await,
            Ok(Err(HeadError::Closed)) => return,
            Err(_) => {
                let body = "intendant egress proxy: no complete request head in time\n";
                return answer(&mut client, 408, "Request Timeout", body).await;
            }
        };
    let request = match http::parse_head(&head) {
        Ok(request) => request,
        Err(why) => return bad_request(&mut client, &why).await,
    };
    let (raw_host, port) = request.destination();
    let host = match normalize_host(raw_host) {
        Ok(host) => host,
        Err(why) => {
            return bad_request(&mut client, &format!("bad host {raw_host:?}: {why}")).await;
        }
    };
    let record = |verdict, rule: String, up, down| EgressRecord {
        host: host.clone(),
        port,
        verdict,
        rule,
        bytes_up: up,
        bytes_down: down,
        duration: started.elapsed(),
    };
    let rule = match decide(ctx, &host, port).await {
        Ok(rule) => rule,
        Err(refusal) => {
            refuse(&mut client, &host, port, &refusal).await;
            ctx.hooks
                .record(record(EgressVerdict::Refused, refusal.rule, 0, 0));
            return;
        }
    };
    let addrs = match resolve(ctx, &host, port).await {
        Ok(addrs) => addrs,
        Err(why) => {
            let body =
                format!("intendant egress proxy: {host}:{port} was allowed ({rule}) but {why}\n");
            answer(&mut client, 502, "Bad Gateway", &body).await;
            ctx.hooks.record(record(EgressVerdict::Failed, why, 0, 0));
            return;
        }
    };
    // The whole answer is judged, and only the addresses judged are connected to: a name
    // that resolves differently a moment later (DNS rebinding) is never looked up again.
    if let Some(why) = addrs
        .iter()
        .find_map(|a| ctx.policy.check_address(&host, a.ip()).err())
    {
        let refusal = Refusal {
            rule: why,
            hint: ADDRESS_HINT.into(),
        };
        refuse(&mut client, &host, port, &refusal).await;
        ctx.hooks
            .record(record(EgressVerdict::Refused, refusal.rule, 0, 0));
        return;
    }
    let mut upstream = match connect(&addrs, ctx.limits.connect_timeout).await {
        Ok(stream) => stream,
        Err(why) => {
            let body =
                format!("intendant egress proxy: {host}:{port} was allowed ({rule}) but {why}\n");
            answer(&mut client, 502, "Bad Gateway", &body).await;
            ctx.hooks.record(record(EgressVerdict::Failed, why, 0, 0));
            return;
        }
    };
    let sent = match &request {
        ProxyRequest::Connect { .. } => client.write_all(CONNECT_OK).await.map(|()| 0),
        ProxyRequest::Forward { head, .. } => upstream.write_all(head).await.map(|()| head.len()),
    };
    let Ok(sent) = sent else {
        ctx.hooks.record(record(EgressVerdict::Allowed, rule, 0, 0));
        return;
    };
    let pipelined = if rest.is_empty() {
        Ok(())
    } else {
        upstream.write_all(&rest).await
    };
    let (up, down) = if pipelined.is_ok() {
        pump::carry(&client, &upstream, &ctx.idle).await
    } else {
        (0, 0)
    };
    let up = up + (sent + rest.len()) as u64;
    ctx.hooks
        .record(record(EgressVerdict::Allowed, rule, up, down));
}

/// The lists' verdict, else the session's answer (a local-only name is refused unasked).
async fn decide(ctx: &Ctx, host: &str, port: u16) -> Result<String, Refusal> {
    let allow_hint = format!(
        "to allow it, add \"{host}\" to [sandbox.network] allow in intendant.toml (a trusted setting), or approve it when asked"
    );
    match ctx.policy.verdict(host) {
        HostVerdict::Allowed(rule) => Ok(rule),
        HostVerdict::Denied(rule) => Err(Refusal {
            rule,
            hint: "to allow it, remove the pattern from [sandbox.network] deny".into(),
        }),
        HostVerdict::Unlisted => {
            // An address literal the guard refuses anyway is not worth a human's question.
            if let Some(Err(why)) = host
                .parse::<IpAddr>()
                .ok()
                .map(|ip| ctx.policy.check_address(host, ip))
            {
                return Err(Refusal {
                    rule: why,
                    hint: ADDRESS_HINT.into(),
                });
            }
            if let Some(why) = ctx.policy.local_name(host) {
                return Err(Refusal {
                    rule: why,
                    hint: "a name only a local network resolves; name it in [sandbox.network] hosts (trusted) to reach it".into(),
                });
            }
            match Arc::clone(&ctx.hooks).ask(host.to_owned(), port).await {
                AskOutcome::Allowed(rule) => Ok(rule),
                AskOutcome::Refused(rule) => Err(Refusal {
                    rule,
                    hint: allow_hint,
                }),
            }
        }
    }
}

async fn resolve(ctx: &Ctx, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Some(ip) = ctx.policy.mapped(host) {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = match &ctx.lookup {
        Lookup::System => {
            match tokio::time::timeout(
                ctx.limits.lookup_timeout,
                tokio::net::lookup_host((host, port)),
            )
            .await
            {
                Ok(Ok(addrs)) => addrs.take(MAX_ADDRESSES).collect(),
                Ok(Err(e)) => return Err(format!("{host} does not resolve: {e}")),
                Err(_) => {
                    return Err(format!(
                        "the lookup of {host} took more than {} s",
                        ctx.limits.lookup_timeout.as_secs()
                    ));
                }
            }
        }
        Lookup::Table(table) => table
            .get(host)
            .into_iter()
            .flatten()
            .take(MAX_ADDRESSES)
            .map(|ip| SocketAddr::new(*ip, port))
            .collect(),
    };
    if found.is_empty() {
        return Err(format!("{host} does not resolve to any address"));
    }
    Ok(found)
}

async fn connect(addrs: &[SocketAddr], limit: Duration) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for addr in addrs {
        match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // The head and what was pipelined after it go out at once, not after an ACK.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {addr} failed: {e}"),
            Err(_) => last = format!("connecting to {addr} took more than {} s", limit.as_secs()),
        }
    }
    Err(last)
}

async fn refuse(client: &mut impl Conn, host: &str, port: u16, refusal: &Refusal) {
    let body = format!(
        "intendant egress proxy: refused {host}:{port}: {}.\n{}.\n",
        refusal.rule, refusal.hint
    );
    answer(client, 403, "Forbidden", &body).await;
}

async fn bad_request(client: &mut impl Conn, why: &str) {
    let body = format!("intendant egress proxy: bad request: {why}\n");
    answer(client, 400, "Bad Request", &body).await;
}

async fn answer(client: &mut impl Conn, status: u16, reason: &str, body: &str) {
    let response = http::response(status, reason, body);
    let _ = tokio::time::timeout(Duration::from_secs(5), client.write_all(&response)).await;
    let _ = client.shutdown().await;
}

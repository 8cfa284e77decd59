//! Serving the control socket: one task per connection, reading requests in order and writing
//! replies and stream items through one queue bounded in bytes; the [`Gate`] bounds how many
//! connections are served at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_core::host::SessionHost;
use intendant_daemon::control_plane::ClientLimits;
use intendant_protocol::daemon::{DAEMON_PROTOCOL_VERSION, HostError, HostErrorCode};
use intendant_protocol::socket::{
    ClientHello, Load, LogDirPath, MAX_REQUEST_LINE, Op, Outcome, Reply, Request, ServerHello,
    StreamLine, Subscribed,
};
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use super::ControlSocket;
use super::lines::{Line, LineReader, leading_id};
use crate::gate::{AcceptBackoff, Gate, Slot};
use crate::listing::in_one_reply;
use crate::outbox::{self, Outbox, Queued};

/// Queued in place of a line: the writer answers it once everything before it is written (every
/// real line is a JSON value, never empty).
const FLUSH: &str = "";

impl ControlSocket {
    /// Serves clients until `until` completes or a client asks for a shutdown (after the
    /// host accepted it), then stops accepting and removes the socket file. Connections still
    /// open keep being served until their client hangs up or the runtime ends.
    pub async fn serve(self, host: Arc<dyn SessionHost>, until: impl Future<Output = ()>) {
        let hello = ServerHello {
            hello: DAEMON_PROTOCOL_VERSION,
            server: format!("intendant {}", env!("CARGO_PKG_VERSION")),
            pid: std::process::id(),
            home: self.home.display().to_string(),
            started_at: Some(intendant_protocol::utc::UtcTime::now().rfc3339()),
        };
        let stop = Arc::new(Notify::new());
        let limits = self.limits;
        let gate = Gate::new(limits.max_clients);
        let mut backoff = AcceptBackoff::default();
        tokio::pin!(until);
        loop {
            if let Some(pause) = backoff.pause() {
                tokio::select! {
                    () = &mut until => break,
                    () = stop.notified() => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            tokio::select! {
                () = &mut until => break,
                () = stop.notified() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        backoff.reset();
                        let Some((slot, evicted)) = gate.enter() else {
                            busy(&stream, &full(&gate));
                            continue;
                        };
                        let conn = Connection::new(
                            host.clone(),
                            self.model_host.clone().map(|m| m.0),
                            stop.clone(),
                            gate.clone(),
                            limits,
                            self.fleet.clone(),
                            self.web.clone(),
                        );
                        let refusals = self.refusals.clone();
                        tokio::spawn(admit(stream, conn, slot, evicted, hello.clone(), refusals));
                    }
                    Err(e) => {
                        // Descriptors exhausted (EMFILE), or a client gone before it was
                        // accepted: retrying at once would spin; pausing lets connections end
                        // and free descriptors, and the open ones are served meanwhile.
                        if backoff.failed().1 {
                            self.refusals.say(&format!(
                                "control socket: accept failed: {e}; backing off"
                            ));
                        }
                    }
                },
            }
        }
    }
}

/// Refuses a connection the [`Gate`] has no room for: one error line in place of the hello.
/// Written without waiting (the socket's buffer is empty, so it fits) and the descriptor is
/// closed at once, so a flood of connections never holds descriptors here.
fn busy(stream: &UnixStream, message: &str) {
    let mut line = error_reply(None, HostErrorCode::Busy, message);
    line.push('\n');
    let _ = stream.try_write(line.as_bytes());
}

/// The message of a `busy` refusal: every place of the socket's [`Gate`] is held by a client
/// past its hello.
fn full(gate: &Gate) -> String {
    format!(
        "busy: {} clients are connected, the most [daemon] max_clients allows; try again once \
         one has left",
        gate.max()
    )
}

/// Serves `stream` unless its peer is a process of a session: that one gets one error line in
/// place of the hello (the refusal, also logged) and the connection is closed.
async fn admit(
    mut stream: UnixStream,
    conn: Connection,
    slot: Slot,
    evicted: oneshot::Receiver<()>,
    hello: ServerHello,
    refusals: intendant_daemon::log::DaemonLog,
) {
    let pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
    match crate::peer::off_runtime(move || crate::peer::check_pid(pid)).await {
        Ok(()) => conn.run(stream, hello, slot, evicted).await,
        Err(refusal) => {
            refusals.say(&format!("control socket: {refusal}"));
            let mut line = error_reply(None, HostErrorCode::Forbidden, refusal);
            line.push('\n');
            crate::peer::refuse(&mut stream, line.as_bytes()).await;
        }
    }
}

struct Connection {
    host: Arc<dyn SessionHost>,
    /// What an MCP server's connection is served by instead of `host`, if set (a fleet
    /// member's door for a model: its routed answers stay a model's at their owner).
    model_host: Option<Arc<dyn SessionHost>>,
    stop: Arc<Notify>,
    gate: Arc<Gate>,
    limits: ClientLimits,
    fleet: Option<Arc<intendant_fleet::Member>>,
    /// The dashboard beside the socket, if any.
    web: Option<crate::web::WebLoad>,
    /// Open streams: their cancel signal, removed by the stream's task when it ends.
    streams: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    /// Told by the writer when a [`FLUSH`] was reached.
    flushed: Arc<Notify>,
}

/// Whether the client on `stream` hung up altogether (closed its socket, or its process
/// ended), which the kernel says with `POLLHUP` at once; a client that only shut its writing
/// side down still reads its replies.
fn hung_up(stream: &UnixStream) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&now))
        .is_ok_and(|_| fds[0].revents().contains(PollFlags::HUP))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is a single map operation; a panic cannot leave the map torn.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn line_of(value: &impl Serialize) -> String {
    // Our own wire types always serialize (string keys, no non-finite floats).
    serde_json::to_string(value).unwrap_or_default()
}

fn error_reply(id: Option<u64>, code: HostErrorCode, message: impl Into<String>) -> String {
    line_of(&Reply {
        id,
        outcome: Outcome::Error(HostError::new(code, message)),
    })
}

impl Connection {
    fn new(
        host: Arc<dyn SessionHost>,
        model_host: Option<Arc<dyn SessionHost>>,
        stop: Arc<Notify>,
        gate: Arc<Gate>,
        limits: ClientLimits,
        fleet: Option<Arc<intendant_fleet::Member>>,
        web: Option<crate::web::WebLoad>,
    ) -> Connection {
        Connection {
            host,
            model_host,
            stop,
            gate,
            limits,
            fleet,
            web,
            streams: Arc::new(Mutex::new(HashMap::new())),
            flushed: Arc::new(Notify::new()),
        }
    }

    async fn run(
        mut self,
        stream: UnixStream,
        hello: ServerHello,
        slot: Slot,
        evicted: oneshot::Receiver<()>,
    ) {
        let (read, write) = stream.into_split();
        let (out, rx) = Out::new(self.limits.client_buffer);
        let writer = tokio::spawn(write_lines(
            write,
            rx,
            out.room().clone(),
            self.flushed.clone(),
        ));
        let mut reader = LineReader::new(read, MAX_REQUEST_LINE);
        let mut buf = Vec::new();
        if out.send_line(line_of(&hello)).await.is_err() {
            return;
        }
        let timeout = self.limits.handshake_timeout;
        let greeted = tokio::select! {
            greeted = self.handshake(&mut reader, &mut buf, &out) => greeted,
            () = tokio::time::sleep(timeout) => {
                let within = if timeout.subsec_millis() == 0 {
                    format!("{} s", timeout.as_secs())
                } else {
                    format!("{} ms", timeout.as_millis())
                };
                let why = format!("no hello within {within} ([daemon] handshake_timeout_secs); closing");
                let _ = out.send_line(error_reply(None, HostErrorCode::InvalidRequest, why)).await;
                None
            }
            Ok(()) = evicted => {
                let _ = out.send_line(error_reply(None, HostErrorCode::Busy, full(&self.gate))).await;
                None
            }
        };
        if let Some(client) = greeted {
            if client.starts_with(super::MCP_CLIENT)
                && let Some(model) = self.model_host.take()
            {
                self.host = model;
            }
            // Past its hello: its place can no longer be taken.
            let _established = slot.begin();
            loop {
                match reader.next_line(&mut buf).await {
                    // What a client that is gone sent before it went (a burst of subscribes,
                    // each replaying the history) is not worth answering.
                    Ok(Line::Complete | Line::TooLong) if hung_up(reader.get_ref().as_ref()) => {
                        break;
                    }
                    Ok(Line::Complete) => {
                        if let Some(reply) = self.request(&buf, &out).await
                            && out.send_line(reply).await.is_err()
                        {
                            break;
                        }
                    }
                    Ok(Line::TooLong) => {
                        // Answered under the id its head names, so a client waiting for that
                        // reply gets one.
                        let reply = error_reply(
                            leading_id(&buf),
                            HostErrorCode::InvalidRequest,
                            format!("line longer than {MAX_REQUEST_LINE} bytes; skipped"),
                        );
                        if out.send_line(reply).await.is_err() {
                            break;
                        }
                    }
                    Ok(Line::Eof) | Err(_) => break,
                }
            }
        }
        // The client hung up (or broke the protocol): its streams end, nothing else does. Its
        // pending approvals belong to the sessions and stay pending.
        for (_, cancel) in lock(&self.streams).drain() {
            let _ = cancel.send(());
        }
        drop(out);
        let _ = writer.await;
        drop(slot);
    }

    /// Reads the client's hello; false (after telling it why) when it is not one of ours.
    async fn handshake(
        &self,
        reader: &mut LineReader<tokio::net::unix::OwnedReadHalf>,
        buf: &mut Vec<u8>,
        out: &Out,
    ) -> Option<String> {
        let refusal = match reader.next_line(buf).await {
            Ok(Line::Complete) => match serde_json::from_slice::<ClientHello>(buf) {
                Ok(h) if h.hello == DAEMON_PROTOCOL_VERSION => return Some(h.client),
                Ok(h) => format!(
                    "this daemon speaks protocol version {DAEMON_PROTOCOL_VERSION}, the client {}",
                    h.hello
                ),
                Err(_) => format!(
                    "expected a hello first: {{\"hello\":{DAEMON_PROTOCOL_VERSION},\"client\":\"...\"}}"
                ),
            },
            Ok(Line::TooLong) => format!("line longer than {MAX_REQUEST_LINE} bytes"),
            Ok(Line::Eof) | Err(_) => return None,
        };
        let _ = out
            .send_line(error_reply(None, HostErrorCode::InvalidRequest, refusal))
            .await;
        None
    }

    // Long because it is the one dispatch of every op of the protocol, an arm each.
    /// Handles one request line; the reply to queue, if any is due now.
    async fn request(&self, line: &[u8], out: &Out) -> Option<String> {
        let request: Request = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                // Echo the id when the line has a readable one, so the client can match it.
                let id = serde_json::from_slice::<Value>(line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(Value::as_u64));
                return Some(error_reply(
                    id,
                    HostErrorCode::InvalidRequest,
                    format!("not a request: {e}"),
                ));
            }
        };
        let id = request.id;
        let host = self.host.as_ref();
        let outcome = match request.op {
            Op::Subscribe { session_id, after } => {
                return self.subscribe(id, session_id.as_deref(), after, out).await;
            }
            Op::Unsubscribe { stream } => match lock(&self.streams).remove(&stream) {
                Some(cancel) => {
                    let _ = cancel.send(());
                    Ok(Value::Null)
                }
                None => Err(HostError::new(
                    HostErrorCode::InvalidRequest,
                    format!("no open stream {stream} on this connection"),
                )),
            },
            Op::Shutdown => {
                let result = host.shutdown().await;
                if result.is_ok() {
                    // The reply is queued before the server stops, so the client hears it.
                    let ok = line_of(&Reply {
                        id: Some(id),
                        outcome: Outcome::Ok(Value::Null),
                    });
                    // Written before the server stops: the daemon may exit right after.
                    if out.send_line(ok).await.is_ok()
                        && out.send_line(FLUSH.to_owned()).await.is_ok()
                    {
                        self.flushed.notified().await;
                    }
                    self.stop.notify_one();
                    return None;
                }
                result.map(|()| Value::Null)
            }
            Op::Start { request } => json(host.start(request).await),
            Op::Sessions { page } => json(
                in_one_reply(
                    &page,
                    |asked| async move { host.sessions_page(&asked).await },
                    Vec::len,
                )
                .await,
            ),
            Op::SessionsCount { page } => json(host.sessions_count(&page).await),
            Op::Session { session_id } => json(host.session(&session_id).await),
            Op::Approvals => json(host.approvals().await),
            Op::Send { intent } => json(host.send(intent).await),
            Op::Interrupt { session_id } => json(host.interrupt(&session_id).await),
            Op::Stop { session_id } => json(host.stop(&session_id).await),
            Op::SetAutonomy { session_id, level } => {
                json(host.set_autonomy(session_id.as_deref(), level).await)
            }
            Op::Settings => json(host.settings().await),
            Op::UpdateSettings { change } => json(host.update_settings(change).await),
            Op::Rewind { request } => json(host.rewind(request).await),
            Op::Agenda { agenda } => json(host.agenda(agenda).await),
            Op::Load => {
                let fleet = match &self.fleet {
                    Some(member) => Some(member.view_or_error().await),
                    None => None,
                };
                let processes = intendant_core::containment::sessions_processes();
                json(Ok::<_, HostError>(Load {
                    clients: self.gate.working() as u64,
                    max_clients: self.gate.max() as u64,
                    rss_bytes: rss_bytes(),
                    descriptors: intendant_daemon::descriptors::open(),
                    max_descriptors: intendant_daemon::descriptors::limit(),
                    session_processes: processes.map(|(now, _)| now),
                    max_session_processes: processes.and_then(|(_, max)| max),
                    web_connections: self.web.as_ref().map(|w| w.connections() as u64),
                    max_web_connections: self.web.as_ref().map(|w| w.max() as u64),
                    fleet,
                    sessions: host.session_counts().await.ok(),
                }))
            }
            Op::FleetStart { request } => match &self.fleet {
                Some(member) => json(
                    member
                        .place(request)
                        .await
                        .map_err(|e| HostError::new(HostErrorCode::Unavailable, e.to_string())),
                ),
                None => Err(no_fleet()),
            },
            Op::FleetPlacement { placement: id } => match &self.fleet {
                Some(member) => match member.placement(&id).await {
                    Ok(Some(status)) => json(Ok::<_, HostError>(status)),
                    Ok(None) => Err(HostError::new(
                        HostErrorCode::UnknownSession,
                        format!(
                            "the fleet keeps no placement {id:?} (its record is kept a day \
                             after it was last written)"
                        ),
                    )),
                    Err(e) => Err(HostError::new(HostErrorCode::Unavailable, e.to_string())),
                },
                None => Err(no_fleet()),
            },
            // A fleet member's door is its fleet host, which merges the others' sessions into
            // its own page.
            Op::FleetSessions { page } if self.fleet.is_some() => {
                let fleet = in_one_reply(
                    &page,
                    |asked| async move { host.fleet_sessions_page(&asked).await },
                    |fleet| fleet.as_ref().map_or(0, |fleet| fleet.ids().len()),
                )
                .await;
                json(fleet.and_then(|fleet| fleet.ok_or_else(no_fleet)))
            }
            Op::FleetSessions { .. } => Err(no_fleet()),
            Op::FleetSessionsCount { page } if self.fleet.is_some() => json(
                host.fleet_sessions_count(&page)
                    .await
                    .and_then(|count| count.ok_or_else(no_fleet)),
            ),
            Op::FleetSessionsCount { .. } => Err(no_fleet()),
            Op::Prune { request } => json(host.prune(request).await),
            Op::LogDir { session_id } => {
                json(host.log_dir(&session_id).await.map(|path| LogDirPath {
                    path: path.display().to_string(),
                }))
            }
        };
        Some(line_of(&Reply {
            id: Some(id),
            outcome: match outcome {
                Ok(v) => Outcome::Ok(v),
                Err(e) => Outcome::Error(e),
            },
        }))
    }

    /// Opens stream `id`: queues the reply itself (before any item of the stream).
    async fn subscribe(
        &self,
        id: u64,
        session: Option<&str>,
        after: Option<u64>,
        out: &Out,
    ) -> Option<String> {
        let open = lock(&self.streams).len();
        if lock(&self.streams).contains_key(&id) {
            return Some(error_reply(
                Some(id),
                HostErrorCode::InvalidRequest,
                format!("stream {id} is already open on this connection"),
            ));
        }
        if open >= self.limits.max_streams_per_client {
            return Some(error_reply(
                Some(id),
                HostErrorCode::Busy,
                format!(
                    "busy: this connection has {open} streams open, the most [daemon] \
                     max_streams_per_client allows; unsubscribe one first"
                ),
            ));
        }
        let events = match self.host.subscribe(session, after).await {
            Ok(s) => s,
            Err(e) => {
                return Some(line_of(&Reply {
                    id: Some(id),
                    outcome: Outcome::Error(e),
                }));
            }
        };
        let ok = line_of(&Reply {
            id: Some(id),
            outcome: Outcome::Ok(
                serde_json::to_value(Subscribed {
                    stream: id,
                    history_end: events.history_end(),
                })
                .ok()?,
            ),
        });
        out.send_line(ok).await.ok()?;
        let (cancel, cancelled) = oneshot::channel();
        lock(&self.streams).insert(id, cancel);
        let streams = self.streams.clone();
        let out = out.clone();
        tokio::spawn(async move {
            // The host's stream is dropped when `forward` returns: a lagging client's items
            // stop piling up behind it while its last lines wait for room.
            let cancelled = async {
                let _ = cancelled.await;
            };
            let (end, last) = outbox::forward(events, &out, cancelled, |item| {
                let line = line_of(&StreamLine::Item { stream: id, item });
                let bytes = line.len() + 1;
                (line, bytes)
            })
            .await;
            lock(&streams).remove(&id);
            if let Some((line, _)) = last {
                let _ = out.send_line(line).await;
            }
            let _ = out
                .send_line(line_of(&StreamLine::End { stream: id, end }))
                .await;
        });
        None
    }
}

/// A connection's outgoing lines, bounded in bytes (`[daemon] client_buffer_kib`): a line
/// takes room until the writer has written it. Replies wait for room (the client's own
/// requests wait behind them, never dropped); stream items that find none make the stream lag.
type Out = Outbox<String>;

impl Outbox<String> {
    /// Queues `line` (and its newline) once there is room for it; `Err` when the connection is
    /// gone.
    async fn send_line(&self, line: String) -> Result<(), ()> {
        let bytes = line.len() + 1;
        self.send(line, bytes).await
    }
}

/// The resident memory of this process (`VmRSS` of `/proc/self/status`), in bytes.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The answer to a fleet op on a daemon that joined no fleet.
fn no_fleet() -> HostError {
    HostError::new(
        HostErrorCode::InvalidRequest,
        "this daemon is in no fleet (`intendant serve --fleet URL`)",
    )
}

/// A host call's result as a reply value.
fn json<T: Serialize>(result: Result<T, HostError>) -> Result<Value, HostError> {
    serde_json::to_value(result?)
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))
}

/// Writes the connection's queued lines, giving back their room once written; [`FLUSH`] is not
/// written but answered on `flushed` once every line before it is (and when the writer ends,
/// so nobody waits on a dead one).
async fn write_lines(
    mut write: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Queued<String>>,
    room: Arc<Semaphore>,
    flushed: Arc<Notify>,
) {
    struct Ended(Arc<Notify>, Arc<Semaphore>);
    impl Drop for Ended {
        fn drop(&mut self) {
            // Whoever waits for room on a dead connection gives up.
            self.1.close();
            self.0.notify_one();
        }
    }
    let _ended = Ended(flushed.clone(), room.clone());
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.clear();
        let mut taken = first.room as usize;
        let mut flush = first.item == FLUSH;
        if !flush {
            batch.extend_from_slice(first.item.as_bytes());
            batch.push(b'\n');
        }
        drop(first);
        // Whatever else is already queued goes out in the same write.
        while !flush && batch.len() <= 64 * 1024 {
            let Ok(more) = rx.try_recv() else { break };
            taken += more.room as usize;
            if more.item == FLUSH {
                flush = true;
            } else {
                batch.extend_from_slice(more.item.as_bytes());
                batch.push(b'\n');
            }
        }
        if write.write_all(&batch).await.is_err() {
            return;
        }
        room.add_permits(taken);
        if flush {
            flushed.notify_one();
        }
    }
}

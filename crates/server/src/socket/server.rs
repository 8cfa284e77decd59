//! Serving the control socket: one task per connection, reading requests in order and writing
//! replies and stream items through one bounded queue.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_core::host::{EventStream, SessionHost};
use intendant_protocol::daemon::{DAEMON_PROTOCOL_VERSION, HostError, HostErrorCode, StreamItem};
use intendant_protocol::socket::{
    ClientHello, LogDirPath, MAX_REQUEST_LINE, Op, Outcome, Reply, Request, ServerHello, StreamEnd,
    StreamLine, Subscribed,
};
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{Notify, mpsc, oneshot};

use super::ControlSocket;
use super::lines::{Line, LineReader};

/// Lines a connection may have queued for writing before its streams count as lagging.
pub const OUTGOING_CAPACITY: usize = 512;

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
        };
        let stop = Arc::new(Notify::new());
        tokio::pin!(until);
        loop {
            tokio::select! {
                () = &mut until => break,
                () = stop.notified() => break,
                accepted = self.listener.accept() => {
                    // A failed accept (a client gone before it was accepted, fd exhaustion)
                    // concerns that one client, not the daemon.
                    if let Ok((stream, _)) = accepted {
                        let conn = Connection::new(host.clone(), stop.clone());
                        tokio::spawn(admit(stream, conn, hello.clone(), self.refusals.clone()));
                    }
                }
            }
        }
    }
}

/// Serves `stream` unless its peer is a process of a session: that one gets one error line in
/// place of the hello (the refusal, also logged) and the connection is closed.
async fn admit(
    mut stream: UnixStream,
    conn: Connection,
    hello: ServerHello,
    refusals: crate::peer::RefusalLog,
) {
    let pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
    match crate::peer::off_runtime(move || crate::peer::check_pid(pid)).await {
        Ok(()) => conn.run(stream, hello).await,
        Err(refusal) => {
            refusals.refused(&format!("control socket: {refusal}"));
            let mut line = error_reply(None, HostErrorCode::Forbidden, refusal);
            line.push('\n');
            crate::peer::refuse(&mut stream, line.as_bytes()).await;
        }
    }
}

struct Connection {
    host: Arc<dyn SessionHost>,
    stop: Arc<Notify>,
    /// Open streams: their cancel signal, removed by the stream's task when it ends.
    streams: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    /// Told by the writer when a [`FLUSH`] was reached.
    flushed: Arc<Notify>,
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
    fn new(host: Arc<dyn SessionHost>, stop: Arc<Notify>) -> Connection {
        Connection {
            host,
            stop,
            streams: Arc::new(Mutex::new(HashMap::new())),
            flushed: Arc::new(Notify::new()),
        }
    }

    async fn run(self, stream: UnixStream, hello: ServerHello) {
        let (read, write) = stream.into_split();
        let (out, rx) = mpsc::channel::<String>(OUTGOING_CAPACITY);
        let writer = tokio::spawn(write_lines(write, rx, self.flushed.clone()));
        let mut reader = LineReader::new(read, MAX_REQUEST_LINE);
        let mut buf = Vec::new();
        if out.send(line_of(&hello)).await.is_err() {
            return;
        }
        if self.handshake(&mut reader, &mut buf, &out).await {
            loop {
                match reader.next_line(&mut buf).await {
                    Ok(Line::Complete) => {
                        if let Some(reply) = self.request(&buf, &out).await
                            && out.send(reply).await.is_err()
                        {
                            break;
                        }
                    }
                    Ok(Line::TooLong) => {
                        let reply = error_reply(
                            None,
                            HostErrorCode::InvalidRequest,
                            format!("line longer than {MAX_REQUEST_LINE} bytes; skipped"),
                        );
                        if out.send(reply).await.is_err() {
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
    }

    /// Reads the client's hello; false (after telling it why) when it is not one of ours.
    async fn handshake(
        &self,
        reader: &mut LineReader<tokio::net::unix::OwnedReadHalf>,
        buf: &mut Vec<u8>,
        out: &mpsc::Sender<String>,
    ) -> bool {
        let refusal = match reader.next_line(buf).await {
            Ok(Line::Complete) => match serde_json::from_slice::<ClientHello>(buf) {
                Ok(h) if h.hello == DAEMON_PROTOCOL_VERSION => return true,
                Ok(h) => format!(
                    "this daemon speaks protocol version {DAEMON_PROTOCOL_VERSION}, the client {}",
                    h.hello
                ),
                Err(_) => format!(
                    "expected a hello first: {{\"hello\":{DAEMON_PROTOCOL_VERSION},\"client\":\"...\"}}"
                ),
            },
            Ok(Line::TooLong) => format!("line longer than {MAX_REQUEST_LINE} bytes"),
            Ok(Line::Eof) | Err(_) => return false,
        };
        let _ = out
            .send(error_reply(None, HostErrorCode::InvalidRequest, refusal))
            .await;
        false
    }

    /// Handles one request line; the reply to queue, if any is due now.
    async fn request(&self, line: &[u8], out: &mpsc::Sender<String>) -> Option<String> {
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
                    if out.send(ok).await.is_ok() && out.send(FLUSH.to_owned()).await.is_ok() {
                        self.flushed.notified().await;
                    }
                    self.stop.notify_one();
                    return None;
                }
                result.map(|()| Value::Null)
            }
            Op::Start { request } => json(host.start(request).await),
            Op::Sessions => json(host.sessions().await),
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
        out: &mpsc::Sender<String>,
    ) -> Option<String> {
        if lock(&self.streams).contains_key(&id) {
            return Some(error_reply(
                Some(id),
                HostErrorCode::InvalidRequest,
                format!("stream {id} is already open on this connection"),
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
        out.send(ok).await.ok()?;
        let (cancel, cancelled) = oneshot::channel();
        lock(&self.streams).insert(id, cancel);
        let streams = self.streams.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let end = forward(id, events, &out, cancelled).await;
            lock(&streams).remove(&id);
            let _ = out
                .send(line_of(&StreamLine::End { stream: id, end }))
                .await;
        });
        None
    }
}

/// Copies stream `id`'s items into the connection's queue until the host ends it, the client
/// unsubscribes, or the queue is full (then the client is told from which seq to re-read).
async fn forward(
    id: u64,
    mut events: EventStream,
    out: &mpsc::Sender<String>,
    mut cancelled: oneshot::Receiver<()>,
) -> StreamEnd {
    loop {
        let item = tokio::select! {
            _ = &mut cancelled => return StreamEnd::Unsubscribed,
            item = events.next() => item,
        };
        let Some(item) = item else {
            return StreamEnd::Closed;
        };
        let next_seq = match &item {
            StreamItem::Event(envelope) => envelope.seq,
            StreamItem::Lagged { next_seq } => *next_seq,
        };
        let lagged = matches!(item, StreamItem::Lagged { .. });
        let line = line_of(&StreamLine::Item { stream: id, item });
        if lagged {
            let _ = out.send(line).await;
            return StreamEnd::Lagged;
        }
        match out.try_send(line) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Waiting for room here waits only on this client, never on the daemon: the
                // host's own stream behind us is dropped once we return.
                let lag = StreamItem::Lagged { next_seq };
                let _ = out
                    .send(line_of(&StreamLine::Item {
                        stream: id,
                        item: lag,
                    }))
                    .await;
                return StreamEnd::Lagged;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return StreamEnd::Closed,
        }
    }
}

/// A host call's result as a reply value.
fn json<T: Serialize>(result: Result<T, HostError>) -> Result<Value, HostError> {
    serde_json::to_value(result?)
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))
}

/// Writes the connection's queued lines; [`FLUSH`] is not written but answered on `flushed`
/// once every line before it is (and when the writer ends, so nobody waits on a dead one).
async fn write_lines(
    mut write: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<String>,
    flushed: Arc<Notify>,
) {
    struct Ended(Arc<Notify>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }
    let _ended = Ended(flushed.clone());
    let mut batch = Vec::new();
    while let Some(line) = rx.recv().await {
        batch.clear();
        let mut flush = line == FLUSH;
        if !flush {
            batch.extend_from_slice(line.as_bytes());
            batch.push(b'\n');
        }
        // Whatever else is already queued goes out in the same write.
        while !flush && batch.len() <= 64 * 1024 {
            let Ok(more) = rx.try_recv() else { break };
            if more == FLUSH {
                flush = true;
            } else {
                batch.extend_from_slice(more.as_bytes());
                batch.push(b'\n');
            }
        }
        if write.write_all(&batch).await.is_err() {
            return;
        }
        if flush {
            flushed.notify_one();
        }
    }
}

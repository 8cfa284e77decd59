//! [`RemoteHost`]: the daemon's [`SessionHost`] as seen from another process, over its control
//! socket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use intendant_core::host::{EventStream, SessionHost};
use intendant_protocol::agenda::{AgendaItem, AgendaOp};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::{RewindReport, RewindRequest};
use intendant_protocol::daemon::{
    DAEMON_PROTOCOL_VERSION, HostError, HostErrorCode, Pages, PendingApproval, PruneReport,
    PruneRequest, Sent, SessionCounts, SessionIntent, SessionSummary, SessionsPage, Settings,
    SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::socket::{
    ClientHello, Load, LogDirPath, MAX_REQUEST_LINE, Op, Outcome, Reply, Request, ServerHello,
    ServerLine, StreamLine, Subscribed,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::lines::{Line, LineReader};
use super::socket_path;

/// Longest line read from the daemon: a reply or an event, whose longest text is a model's
/// reply (`[limits] max_reply_bytes`, 16 MiB by default), escaped. A longer one ends the
/// connection saying so: skipped, a reply would be waited for forever, and an event missed.
const MAX_SERVER_LINE: usize = 64 * 1024 * 1024;

/// Items a subscriber may leave unread before its stream counts as lagging here.
const STREAM_CAPACITY: usize = 1024;

/// A connection to the daemon's control socket, implementing [`SessionHost`] by sending one
/// request per call. Every call fails with `HostErrorCode::Unavailable` once the connection
/// is lost.
pub struct RemoteHost {
    shared: Arc<Shared>,
    server: ServerHello,
}

struct Shared {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    next_id: AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Set once the connection is lost; every later call fails with it (the daemon's refusal,
    /// when it said one before closing).
    lost: Option<HostError>,
    replies: HashMap<u64, oneshot::Sender<Outcome>>,
    streams: HashMap<u64, mpsc::Sender<StreamItem>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is a few map operations; a panic cannot leave them torn.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unavailable(message: impl Into<String>) -> HostError {
    HostError::new(HostErrorCode::Unavailable, message)
}

/// How long a call whose request could not be written waits for the reader to meet the
/// daemon's refusal and the connection's end (both already sent when the write fails).
const REFUSAL_WAIT: Duration = Duration::from_secs(1);

/// The daemon's refusal of this connection, if `line` is one (an error answering no request).
fn refusal(line: &[u8]) -> Option<HostError> {
    match serde_json::from_slice::<ServerLine>(line) {
        Ok(ServerLine::Reply(Reply {
            id: None,
            outcome: Outcome::Error(refused),
        })) => Some(refused),
        _ => None,
    }
}

impl RemoteHost {
    /// Connects to the daemon of state root `home` (its `daemon.sock`) as `client` (a name for
    /// the daemon's log). `Unavailable` when no daemon runs there.
    pub async fn connect(home: &Path, client: &str) -> Result<RemoteHost, HostError> {
        RemoteHost::connect_path(&socket_path(home), client).await
    }

    /// Connects to the control socket at `path`.
    pub async fn connect_path(path: &Path, client: &str) -> Result<RemoteHost, HostError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    unavailable(format!(
                        "no daemon is running (nothing listens on {})",
                        path.display()
                    ))
                }
                _ => unavailable(format!("cannot connect to {}: {e}", path.display())),
            })?;
        let (read, mut write) = stream.into_split();
        let mut hello = serde_json::to_vec(&ClientHello::new(client))
            .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
        hello.push(b'\n');
        let lost = |e: std::io::Error| unavailable(format!("connection to the daemon lost: {e}"));
        // A daemon refusing this client may have closed already; its first line says why.
        let sent = write.write_all(&hello).await;
        let mut reader = LineReader::new(read, MAX_SERVER_LINE);
        let mut buf = Vec::new();
        let server = match reader.next_line(&mut buf).await.map_err(lost)? {
            Line::Complete => match serde_json::from_slice::<ServerLine>(&buf) {
                Ok(ServerLine::Hello(h)) => h,
                // A daemon that refuses this client says why in place of its hello.
                _ => {
                    return Err(refusal(&buf).unwrap_or_else(|| {
                        unavailable(format!("{} is not a daemon's socket", path.display()))
                    }));
                }
            },
            Line::TooLong | Line::Eof => {
                return Err(unavailable(format!(
                    "{} closed before its hello",
                    path.display()
                )));
            }
        };
        if let Err(e) = sent {
            // Its place was given to a newer connection before this one's hello reached it (a
            // crowd of clients at `max_clients`): the line after its hello says so, `busy`.
            return Err(match reader.next_line(&mut buf).await {
                Ok(Line::Complete) => refusal(&buf).unwrap_or_else(|| lost(e)),
                _ => lost(e),
            });
        }
        if server.hello != DAEMON_PROTOCOL_VERSION {
            return Err(unavailable(format!(
                "the daemon speaks protocol version {}, this client {DAEMON_PROTOCOL_VERSION}",
                server.hello
            )));
        }
        let shared = Arc::new(Shared {
            writer: tokio::sync::Mutex::new(write),
            next_id: AtomicU64::new(1),
            state: Mutex::new(State::default()),
        });
        tokio::spawn(read_lines(reader, buf, shared.clone()));
        Ok(RemoteHost { shared, server })
    }

    /// The daemon's hello (its pid, version and state root).
    pub fn server(&self) -> &ServerHello {
        &self.server
    }

    /// The state root the daemon serves.
    pub fn home(&self) -> PathBuf {
        PathBuf::from(&self.server.home)
    }

    /// The daemon's load as its socket sees it: clients connected, and its memory.
    pub async fn load(&self) -> Result<Load, HostError> {
        self.typed(Op::Load).await
    }

    /// Every fleet member's sessions (an `invalid_request` error from a daemon in no fleet),
    /// read a page of [`SessionsPage::SIZE`] at a time, so no one reply holds them all.
    pub async fn fleet_sessions(
        &self,
    ) -> Result<intendant_protocol::fleet::FleetSessions, HostError> {
        let mut pages = Pages::default();
        let mut all = self.fleet_page(&SessionsPage::after(None)).await?;
        pages.took(all.ids().iter().map(String::as_str));
        while let Some(page) = pages.next() {
            let next = self.fleet_page(&page).await?;
            let ids = next.ids();
            // A page that gives a session again is no part of the listing.
            if pages.took(ids.iter().map(String::as_str)) < ids.len() {
                break;
            }
            all.extend(next);
        }
        Ok(all)
    }

    /// One page of every fleet member's sessions, by id over every member.
    pub async fn fleet_page(
        &self,
        page: &SessionsPage,
    ) -> Result<intendant_protocol::fleet::FleetSessions, HostError> {
        self.typed(Op::FleetSessions { page: page.clone() }).await
    }

    /// Queues a session for a fleet member (`ctl start --fleet`).
    pub async fn fleet_start(
        &self,
        request: intendant_protocol::fleet::FleetStartRequest,
    ) -> Result<intendant_protocol::fleet::FleetPlacement, HostError> {
        self.typed(Op::FleetStart { request }).await
    }

    /// A placement's outcome as the fleet keeps it (`ctl placement ID`).
    pub async fn fleet_placement(
        &self,
        id: &str,
    ) -> Result<intendant_protocol::fleet::PlacementStatus, HostError> {
        self.typed(Op::FleetPlacement {
            placement: id.to_owned(),
        })
        .await
    }

    /// Sends `op` and waits for its reply's value.
    async fn call(&self, op: Op) -> Result<Value, HostError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.call_with_id(id, op).await
    }

    async fn call_with_id(&self, id: u64, op: Op) -> Result<Value, HostError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = lock(&self.shared.state);
            if let Some(why) = &state.lost {
                return Err(why.clone());
            }
            state.replies.insert(id, tx);
        }
        if let Err(e) = self.shared.write(&Request { id, op }).await {
            // A daemon that refused this connection said why before it closed; the reader
            // meets that line and the end at once (and ends the wait), and says it rather
            // than the write's error.
            let _ = tokio::time::timeout(REFUSAL_WAIT, rx).await;
            let mut state = lock(&self.shared.state);
            state.replies.remove(&id);
            return Err(state.lost.clone().unwrap_or(e));
        }
        match rx.await {
            Ok(Outcome::Ok(value)) => Ok(value),
            Ok(Outcome::Error(e)) => Err(e),
            Err(_) => Err(lock(&self.shared.state)
                .lost
                .clone()
                .unwrap_or_else(|| unavailable("connection to the daemon lost"))),
        }
    }

    async fn typed<T: DeserializeOwned>(&self, op: Op) -> Result<T, HostError> {
        let name = op.name();
        decode(name, self.call(op).await?)
    }

    async fn unit(&self, op: Op) -> Result<(), HostError> {
        self.call(op).await.map(drop)
    }
}

/// A reply's value as the type its operation promises.
fn decode<T: DeserializeOwned>(op: &str, value: Value) -> Result<T, HostError> {
    serde_json::from_value(value).map_err(|e| {
        HostError::new(
            HostErrorCode::Internal,
            format!("unexpected reply to {op}: {e}"),
        )
    })
}

impl Shared {
    async fn write(&self, request: &Request) -> Result<(), HostError> {
        let mut line = serde_json::to_vec(request)
            .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
        // The daemon would skip it, answering no id this call waits for.
        if line.len() > MAX_REQUEST_LINE {
            return Err(HostError::new(
                HostErrorCode::InvalidRequest,
                format!(
                    "this request is {} bytes, over the {MAX_REQUEST_LINE} the daemon reads in \
                     one: nothing was sent (a long task or follow-up: put it in a file of the \
                     project and name the file)",
                    line.len()
                ),
            ));
        }
        line.push(b'\n');
        let mut writer = self.writer.lock().await;
        // The reader marks the connection lost: it meets the end too, after whatever the
        // daemon said last (a refusal), which then stands for this error.
        writer
            .write_all(&line)
            .await
            .map_err(|e| unavailable(format!("connection to the daemon lost: {e}")))
    }

    /// Marks the connection lost (its reader met the end): waiting calls fail, streams end.
    fn lose(&self, why: HostError) {
        let mut state = lock(&self.state);
        state.lost.get_or_insert(why);
        state.replies.clear();
        state.streams.clear();
    }

    /// Ends stream `id` here and tells the daemon to stop sending it (best effort: its reply
    /// is not waited for).
    fn drop_stream(self: &Arc<Self>, id: u64, lagged_at: Option<u64>) {
        let Some(tx) = lock(&self.state).streams.remove(&id) else {
            return;
        };
        let shared = self.clone();
        tokio::spawn(async move {
            if let Some(next_seq) = lagged_at {
                let _ = tx.send(StreamItem::Lagged { next_seq }).await;
            }
            drop(tx);
            let stream_id = shared.next_id.fetch_add(1, Ordering::Relaxed);
            let _ = shared
                .write(&Request {
                    id: stream_id,
                    op: Op::Unsubscribe { stream: id },
                })
                .await;
        });
    }
}

async fn read_lines(mut reader: LineReader<OwnedReadHalf>, mut buf: Vec<u8>, shared: Arc<Shared>) {
    // A line answering no request: the daemon ends this connection and says why.
    let mut refused = None;
    let why = loop {
        match reader.next_line(&mut buf).await {
            Ok(Line::Complete) => {}
            Ok(Line::TooLong) => {
                break format!(
                    "the daemon sent a line of more than {} MiB, more than this client takes; \
                     the connection is closed",
                    MAX_SERVER_LINE >> 20
                );
            }
            Ok(Line::Eof) => break "the daemon closed the connection".to_string(),
            Err(e) => break format!("connection to the daemon lost: {e}"),
        }
        // A line we cannot read is skipped: the daemon may be newer and say more.
        let Ok(line) = serde_json::from_slice::<ServerLine>(&buf) else {
            continue;
        };
        match line {
            ServerLine::Hello(_) => {}
            ServerLine::Reply(Reply {
                id: None,
                outcome: Outcome::Error(e),
            }) => refused = Some(e),
            ServerLine::Reply(Reply { id, outcome }) => {
                let waiter = id.and_then(|id| lock(&shared.state).replies.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(outcome);
                }
            }
            ServerLine::Stream(StreamLine::Item { stream, item }) => {
                let tx = lock(&shared.state).streams.get(&stream).cloned();
                let Some(tx) = tx else { continue };
                // Where a consumer whose queue is full must read again from: this item's seq,
                // or the daemon's own `lagged` item's (which ends the stream either way).
                let resume = item.resume_seq();
                match (tx.try_send(item), resume) {
                    (Ok(()), _) => {}
                    // Another fleet member's event is live only, as the daemon sends it: its
                    // `seq` is that member's, not one to read this stream again from.
                    (Err(mpsc::error::TrySendError::Full(_)), None) => {}
                    (Err(mpsc::error::TrySendError::Full(_)), Some(next_seq)) => {
                        shared.drop_stream(stream, Some(next_seq));
                    }
                    (Err(mpsc::error::TrySendError::Closed(_)), _) => {
                        shared.drop_stream(stream, None)
                    }
                }
            }
            ServerLine::Stream(StreamLine::End { stream, .. }) => {
                lock(&shared.state).streams.remove(&stream);
            }
        }
    };
    shared.lose(refused.unwrap_or_else(|| unavailable(why)));
}

/// The answer to what only a fleet member gives (its listing, its count), `None` from a daemon
/// in no fleet (which says so: its own list is all there is).
fn in_a_fleet<T>(answer: Result<T, HostError>) -> Result<Option<T>, HostError> {
    match answer {
        Ok(fleet) => Ok(Some(fleet)),
        Err(e) if e.code == HostErrorCode::InvalidRequest => Ok(None),
        Err(e) => Err(e),
    }
}

#[async_trait::async_trait]
impl SessionHost for RemoteHost {
    async fn start(&self, request: StartRequest) -> Result<SessionSummary, HostError> {
        self.typed(Op::Start { request }).await
    }

    async fn sessions_page(&self, page: &SessionsPage) -> Result<Vec<SessionSummary>, HostError> {
        self.typed(Op::Sessions { page: page.clone() }).await
    }

    /// Counted by the daemon.
    async fn sessions_count(&self, page: &SessionsPage) -> Result<u64, HostError> {
        self.typed(Op::SessionsCount { page: page.clone() }).await
    }

    /// Counted by the daemon (its `load`); one older than the counts is listed and counted here.
    async fn session_counts(&self) -> Result<SessionCounts, HostError> {
        match self.load().await?.sessions {
            Some(counts) => Ok(counts),
            None => Ok(SessionCounts::of(
                self.sessions().await?.iter().map(|s| s.status),
            )),
        }
    }

    async fn session(&self, id: &str) -> Result<SessionSummary, HostError> {
        self.typed(Op::Session {
            session_id: id.to_string(),
        })
        .await
    }

    async fn fleet_sessions(
        &self,
    ) -> Result<Option<intendant_protocol::fleet::FleetSessions>, HostError> {
        in_a_fleet(RemoteHost::fleet_sessions(self).await)
    }

    async fn fleet_sessions_page(
        &self,
        page: &SessionsPage,
    ) -> Result<Option<intendant_protocol::fleet::FleetSessions>, HostError> {
        in_a_fleet(self.fleet_page(page).await)
    }

    /// Counted by the daemon.
    async fn fleet_sessions_count(&self, page: &SessionsPage) -> Result<Option<u64>, HostError> {
        in_a_fleet(
            self.typed(Op::FleetSessionsCount { page: page.clone() })
                .await,
        )
    }

    async fn approvals(&self) -> Result<Vec<PendingApproval>, HostError> {
        self.typed(Op::Approvals).await
    }

    async fn send(&self, intent: SessionIntent) -> Result<Sent, HostError> {
        self.call(Op::Send { intent }).await.map(Sent::from_reply)
    }

    async fn interrupt(&self, id: &str) -> Result<(), HostError> {
        self.unit(Op::Interrupt {
            session_id: id.to_string(),
        })
        .await
    }

    async fn stop(&self, id: &str) -> Result<(), HostError> {
        self.unit(Op::Stop {
            session_id: id.to_string(),
        })
        .await
    }

    async fn set_autonomy(
        &self,
        session: Option<&str>,
        level: AutonomyLevel,
    ) -> Result<(), HostError> {
        self.unit(Op::SetAutonomy {
            session_id: session.map(str::to_string),
            level,
        })
        .await
    }

    async fn settings(&self) -> Result<Settings, HostError> {
        self.typed(Op::Settings).await
    }

    async fn update_settings(&self, change: SettingsChange) -> Result<Settings, HostError> {
        self.typed(Op::UpdateSettings { change }).await
    }

    async fn subscribe(
        &self,
        session: Option<&str>,
        after: Option<u64>,
    ) -> Result<EventStream, HostError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(STREAM_CAPACITY);
        // Registered before the request goes out: the stream's first items may follow its
        // reply at once.
        lock(&self.shared.state).streams.insert(id, tx);
        let result = self
            .call_with_id(
                id,
                Op::Subscribe {
                    session_id: session.map(str::to_string),
                    after,
                },
            )
            .await;
        match result.and_then(|v| decode::<Subscribed>("subscribe", v)) {
            Ok(subscribed) => Ok(EventStream::new(rx, subscribed.history_end)),
            Err(e) => {
                lock(&self.shared.state).streams.remove(&id);
                Err(e)
            }
        }
    }

    async fn rewind(&self, request: RewindRequest) -> Result<RewindReport, HostError> {
        self.typed(Op::Rewind { request }).await
    }

    async fn agenda(&self, agenda: AgendaOp) -> Result<Vec<AgendaItem>, HostError> {
        self.typed(Op::Agenda { agenda }).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneReport, HostError> {
        self.typed(Op::Prune { request }).await
    }

    async fn log_dir(&self, id: &str) -> Result<PathBuf, HostError> {
        let dir: LogDirPath = self
            .typed(Op::LogDir {
                session_id: id.to_string(),
            })
            .await?;
        Ok(PathBuf::from(dir.path))
    }

    async fn shutdown(&self) -> Result<(), HostError> {
        self.unit(Op::Shutdown).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::daemon::Envelope;
    use intendant_protocol::events::AppEvent;
    use tokio::io::{AsyncBufReadExt, BufReader};

    fn event(seq: u64, member: Option<&str>) -> StreamItem {
        StreamItem::Event(std::sync::Arc::new(Envelope {
            member: member.map(str::to_owned),
            record_end: None,
            seq,
            session_id: "s1".into(),
            ts: "2026-12-03T12:00:00.000Z".into(),
            event: AppEvent::TurnStarted { turn: 1 },
        }))
    }

    /// A client whose stream 7 has a queue of `capacity`, fed by `read_lines` from the far end
    /// of a socket pair (returned: the test plays the daemon on it).
    fn client(capacity: usize) -> (mpsc::Receiver<StreamItem>, UnixStream) {
        let (ours, daemon) = UnixStream::pair().unwrap();
        let (read, write) = ours.into_split();
        let shared = Arc::new(Shared {
            writer: tokio::sync::Mutex::new(write),
            next_id: AtomicU64::new(100),
            state: Mutex::new(State::default()),
        });
        let (tx, rx) = mpsc::channel(capacity);
        lock(&shared.state).streams.insert(7, tx);
        let reader = LineReader::new(read, MAX_SERVER_LINE);
        tokio::spawn(read_lines(reader, Vec::new(), shared));
        (rx, daemon)
    }

    async fn send_items(daemon: &mut UnixStream, items: Vec<StreamItem>) {
        for item in items {
            let mut line =
                serde_json::to_vec(&ServerLine::Stream(StreamLine::Item { stream: 7, item }))
                    .unwrap();
            line.push(b'\n');
            daemon.write_all(&line).await.unwrap();
        }
    }

    /// The daemon's `unsubscribe` request for stream 7, as the client sent it.
    async fn unsubscribed(daemon: UnixStream) {
        let mut lines = BufReader::new(daemon).lines();
        let line = lines.next_line().await.unwrap().unwrap();
        let request: Request = serde_json::from_str(&line).unwrap();
        assert!(
            matches!(request.op, Op::Unsubscribe { stream: 7 }),
            "{line}"
        );
    }

    #[tokio::test]
    async fn the_daemons_lagged_item_finding_the_queue_full_still_ends_the_stream_with_it() {
        let (mut rx, mut daemon) = client(2);
        // The consumer reads nothing until the daemon's own `lagged` has come.
        send_items(
            &mut daemon,
            vec![
                event(1, None),
                event(2, None),
                StreamItem::Lagged { next_seq: 3 },
            ],
        )
        .await;
        assert_eq!(rx.recv().await.map(|i| seq_of(&i)), Some(1));
        assert_eq!(rx.recv().await.map(|i| seq_of(&i)), Some(2));
        assert_eq!(
            rx.recv().await,
            Some(StreamItem::Lagged { next_seq: 3 }),
            "the consumer learns where to read again from"
        );
        assert_eq!(rx.recv().await, None);
        unsubscribed(daemon).await;
    }

    #[tokio::test]
    async fn an_event_finding_the_queue_full_ends_the_stream_with_its_seq() {
        let (mut rx, mut daemon) = client(2);
        // Another member's event without room is left out; this daemon's is not.
        send_items(
            &mut daemon,
            vec![
                event(1, None),
                event(2, None),
                event(90, Some("m2")),
                event(3, None),
                event(4, None),
            ],
        )
        .await;
        assert_eq!(rx.recv().await.map(|i| seq_of(&i)), Some(1));
        assert_eq!(rx.recv().await.map(|i| seq_of(&i)), Some(2));
        assert_eq!(rx.recv().await, Some(StreamItem::Lagged { next_seq: 3 }));
        assert_eq!(rx.recv().await, None);
        unsubscribed(daemon).await;
    }

    fn seq_of(item: &StreamItem) -> u64 {
        match item {
            StreamItem::Event(e) => e.seq,
            StreamItem::Lagged { next_seq } => 1000 + next_seq,
        }
    }
}

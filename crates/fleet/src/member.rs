//! One daemon's membership: joining, its heartbeat, the fleet's view, leaving.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use intendant_protocol::daemon::SessionSummary;
use intendant_protocol::fleet::{
    FleetMember, FleetPlacement, FleetSessions, FleetStartRequest, FleetView, MemberSessions,
    PlacementState, PlacementStatus,
};
use intendant_protocol::utc::{UtcTime, age_seconds};

use crate::config::host_name;
use crate::{
    FleetConfig, FleetError, MEMBERS_BUCKET, SESSIONS_BUCKET, buckets, placements, sessions, work,
};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the bucket keeps a record nobody rewrites (a member that left without deleting it).
const RECORD_MAX_AGE: Duration = Duration::from_secs(3600);
/// Heartbeats a member may miss before it counts as gone.
const MISSED_HEARTBEATS: u64 = 3;
/// How often a member's sessions are published even when unchanged (well within
/// [`RECORD_MAX_AGE`], so the bucket never drops a live member's record).
const REPUBLISH: Duration = Duration::from_secs(600);

/// A member's load as its heartbeat reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberLoad {
    /// Sessions holding a running slot.
    pub running: u64,
    /// Sessions waiting for a follow-up.
    pub idle: u64,
    /// Sessions waiting for a slot.
    pub queued: u64,
    /// Its `max_running`.
    pub max_running: u64,
}

/// What the heartbeat asks for the member's load.
pub type LoadFn = Arc<dyn Fn() -> MemberLoad + Send + Sync>;

/// This daemon as a member of the fleet; [`Member::leave`] ends it (dropping it stops the
/// heartbeat, and the others see it gone after three heartbeats).
pub struct Member {
    name: String,
    server: String,
    store: kv::Store,
    sessions: kv::Store,
    /// Placements' outcomes ([`crate::PLACEMENTS_BUCKET`]).
    placements: kv::Store,
    jetstream: jetstream::Context,
    /// The work queue's consumers this member takes placed sessions from.
    consumers: Vec<jetstream::consumer::PullConsumer>,
    /// The sessions last published, when, and on which connection (the count of connects).
    published: tokio::sync::Mutex<Option<(Vec<u8>, std::time::Instant, u64)>>,
    record: Arc<Mutex<FleetMember>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.name)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// Joins the fleet `config` names: connects, writes this daemon's record (refused while
    /// another live daemon holds the name) and starts its heartbeat, which reports `load`.
    pub async fn join(config: &FleetConfig, load: LoadFn) -> Result<Member, FleetError> {
        let server = config.server.clone();
        let client = connect(config).await?;
        let jetstream = jetstream::new(client);
        let consumers = match work::stream(&jetstream).await {
            Ok(stream) => work::consumers(&stream, &config.name, &config.labels).await,
            Err(e) => Err(e),
        }
        .map_err(|detail| FleetError::JetStream {
            server: server.clone(),
            detail,
        })?;
        let js_error = |detail: String| FleetError::JetStream {
            server: server.clone(),
            detail,
        };
        let store = crate::buckets::bucket(
            &jetstream,
            MEMBERS_BUCKET,
            "intendant: the fleet's members, one record each",
            RECORD_MAX_AGE,
            None,
        )
        .await
        .map_err(js_error)?;
        let sessions = crate::buckets::bucket(
            &jetstream,
            SESSIONS_BUCKET,
            "intendant: each fleet member's sessions, one record each",
            RECORD_MAX_AGE,
            None,
        )
        .await
        .map_err(js_error)?;
        let placements = placements::bucket(&jetstream).await.map_err(js_error)?;
        if let Some(other) = read(&store, &config.name)
            .await
            .map_err(js_error)?
            .filter(alive)
        {
            return Err(FleetError::NameTaken {
                name: config.name.clone(),
                host: other.host,
                pid: other.pid,
            });
        }
        let now = UtcTime::now().rfc3339();
        let record = Arc::new(Mutex::new(FleetMember {
            name: config.name.clone(),
            host: host_name(),
            labels: config.labels.clone(),
            pid: std::process::id(),
            instance: instance_id(),
            running: 0,
            idle: 0,
            queued: 0,
            max_running: 0,
            joined: now.clone(),
            seen: now,
            heartbeat_ms: u64::try_from(config.heartbeat.as_millis()).unwrap_or(u64::MAX),
        }));
        report(&store, &record, &load).await.map_err(js_error)?;
        let heartbeat = tokio::spawn(beat(
            store.clone(),
            Arc::clone(&record),
            load,
            config.heartbeat,
        ));
        Ok(Member {
            name: config.name.clone(),
            server,
            store,
            sessions,
            placements,
            jetstream,
            consumers,
            published: tokio::sync::Mutex::new(None),
            record,
            heartbeat,
        })
    }

    /// This daemon's name in the fleet.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The connection to the server (core NATS: routed control and followed events).
    pub(crate) fn nats(&self) -> async_nats::Client {
        self.jetstream.client()
    }

    /// How many times this member's connection to the server was made (the first included).
    pub(crate) fn connects(&self) -> u64 {
        crate::buckets::connects(&self.jetstream)
    }

    /// The server as shown (without credentials).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The JetStream context of this member's connection (for the fleet's other streams).
    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The fleet now: every member whose record is fresh, by name; an error when the server
    /// does not answer within [`CONNECT_TIMEOUT`] (a listing is never held up longer).
    pub async fn view(&self) -> Result<FleetView, FleetError> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.read_view())
            .await
            .unwrap_or_else(|_| {
                Err(FleetError::Unreachable {
                    server: self.server.clone(),
                    detail: "no answer while reading the members".to_owned(),
                })
            })
    }

    async fn read_view(&self) -> Result<FleetView, FleetError> {
        let js_error = |detail: String| FleetError::JetStream {
            server: self.server.clone(),
            detail,
        };
        let keys = buckets::keys(&self.store).await.map_err(js_error)?;
        let mut members = Vec::new();
        for key in keys {
            if let Some(member) = read(&self.store, &key).await.map_err(js_error)?
                && alive(&member)
            {
                members.push(member);
            }
        }
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(FleetView {
            member: self.name.clone(),
            server: self.server.clone(),
            members,
            error: None,
        })
    }

    /// [`Member::view`], or a view saying why the members cannot be read now.
    pub async fn view_or_error(&self) -> FleetView {
        match self.view().await {
            Ok(view) => view,
            Err(e) => FleetView {
                member: self.name.clone(),
                server: self.server.clone(),
                members: Vec::new(),
                error: Some(e.to_string()),
            },
        }
    }

    /// Publishes this daemon's sessions to the fleet when they changed since the last time, or
    /// that was long ago: `newest`, its newest ones (at least [`MemberSessions::LIMIT`], or all;
    /// [`intendant_protocol::daemon::SessionsPage::newest`]) out of `total`, bounded as
    /// [`MemberSessions::LIMIT`] says.
    pub async fn publish_sessions(
        &self,
        newest: Vec<SessionSummary>,
        total: u64,
    ) -> Result<(), FleetError> {
        let js_error = |detail: String| FleetError::JetStream {
            server: self.server.clone(),
            detail,
        };
        // What is published, compared with what was: its newest sessions, not every one it
        // ever ran.
        let published = sessions::newest(newest, usize::try_from(total).unwrap_or(usize::MAX));
        let now = serde_json::to_vec(&published).map_err(|e| js_error(e.to_string()))?;
        let mut last = self.published.lock().await;
        // Connected again since: published again, for the server may have restarted without
        // what it acknowledged last.
        let connects = self.connects();
        if let Some((bytes, at, on)) = &*last
            && *bytes == now
            && at.elapsed() < REPUBLISH
            && *on == connects
        {
            return Ok(());
        }
        let record = sessions::record(&self.name, published).map_err(js_error)?;
        sessions::publish(&self.sessions, &self.name, record)
            .await
            .map_err(js_error)?;
        *last = Some((now, std::time::Instant::now(), connects));
        Ok(())
    }

    /// Puts `request` on the fleet's work queue for a member with a free slot (the one it
    /// names, one with its label, or any), refused when the server does not acknowledge it.
    pub async fn place(
        &self,
        mut request: FleetStartRequest,
    ) -> Result<FleetPlacement, FleetError> {
        let js_error = |detail: String| FleetError::JetStream {
            server: self.server.clone(),
            detail,
        };
        request.id = format!("p{}", instance_id());
        request.by = self.name.clone();
        let subject = work::subject(&request);
        let bytes = serde_json::to_vec(&request).map_err(|e| js_error(e.to_string()))?;
        let mut status = placements::status(&request.id, &self.name, PlacementState::Pending);
        let queued = async {
            // Its status first: a member that takes it finds it, and a requester that looks
            // it up finds it pending rather than unknown.
            placements::write(&self.placements, &status).await?;
            self.jetstream
                .publish(subject.clone(), bytes.into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        };
        let result = match tokio::time::timeout(CONNECT_TIMEOUT, queued).await {
            Ok(Ok(_)) => {
                // Stored now: wake the members that may take it. A signal lost (the connection
                // dropped just now) delays the taking until a member's next look, no more.
                let signal = work::signal_subject(&request);
                let _ = self.nats().publish(signal, request.id.clone().into()).await;
                Ok(FleetPlacement {
                    id: request.id,
                    subject,
                })
            }
            Ok(Err(e)) => Err(js_error(format!("the session could not be queued: {e}"))),
            Err(_) => Err(FleetError::Unreachable {
                server: self.server.clone(),
                detail: "the session could not be queued: no answer from the server".to_owned(),
            }),
        };
        if let Err(e) = &result {
            // Refused: a status already written says so, never `pending` for a request that
            // waits nowhere (best effort: the server may be the reason).
            status.state = PlacementState::Failed;
            status.reason = Some(placements::redact_urls(&e.to_string()));
            let store = self.placements.clone();
            let status = status.clone();
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(CONNECT_TIMEOUT, placements::write(&store, &status)).await;
            });
        }
        result
    }

    /// Placement `id`'s outcome as the fleet keeps it (`None`: it keeps none of that id: never
    /// placed, or its record expired).
    pub async fn placement(&self, id: &str) -> Result<Option<PlacementStatus>, FleetError> {
        self.bounded(
            "reading the placement",
            placements::read(&self.placements, id),
        )
        .await
    }

    /// `work` within [`CONNECT_TIMEOUT`]: its error is the server's, no answer in time is an
    /// unreachable server (`doing` says what was being done).
    async fn bounded<T>(
        &self,
        doing: &str,
        work: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, FleetError> {
        match tokio::time::timeout(CONNECT_TIMEOUT, work).await {
            Ok(result) => result.map_err(|detail| FleetError::JetStream {
                server: self.server.clone(),
                detail,
            }),
            Err(_) => Err(FleetError::Unreachable {
                server: self.server.clone(),
                detail: format!("no answer while {doing}"),
            }),
        }
    }

    /// Records where `request`, taken by this member, stands: `taken` (preparing), `started`
    /// as `session`, or `failed` for `reason` (a URL's user and password left out).
    pub async fn placement_outcome(
        &self,
        request: &FleetStartRequest,
        state: PlacementState,
        session: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), FleetError> {
        let mut status = placements::status(&request.id, &request.by, state);
        status.member = Some(self.name.clone());
        status.session = session.map(str::to_owned);
        status.reason = reason.map(placements::redact_urls);
        self.bounded(
            "writing the placement's status",
            placements::write(&self.placements, &status),
        )
        .await
    }

    /// The signals that a request this member may take was queued: it waits on them instead
    /// of looking at the queue again and again.
    pub async fn placement_signals(&self) -> Result<work::PlacementSignals, FleetError> {
        let labels = lock(&self.record).labels.clone();
        work::PlacementSignals::subscribe(&self.nats(), work::signal_subjects(&self.name, &labels))
            .await
            .map_err(|detail| FleetError::JetStream {
                server: self.server.clone(),
                detail,
            })
    }

    /// Takes one placed session this member may run, if one waits; it is this member's from
    /// then on.
    pub async fn take(&self) -> Result<Option<FleetStartRequest>, FleetError> {
        work::take(&self.consumers)
            .await
            .map_err(|detail| FleetError::JetStream {
                server: self.server.clone(),
                detail,
            })
    }

    /// Every member's sessions: this daemon's `local` ones as they are now, the others' as
    /// they last published them (a lost member's unfinished ones shown `interrupted`), or this
    /// daemon's alone with the reason when the server cannot be read.
    pub async fn fleet_sessions(&self, local: Vec<SessionSummary>) -> FleetSessions {
        let own = MemberSessions {
            member: self.name.clone(),
            published: UtcTime::now().rfc3339(),
            sessions: local,
            omitted: 0,
            lost: false,
        };
        let others = match self.view().await {
            Ok(view) => {
                let alive: Vec<String> = view.members.into_iter().map(|m| m.name).collect();
                let read = sessions::read_all(&self.sessions, &self.name, &alive);
                tokio::time::timeout(CONNECT_TIMEOUT, read)
                    .await
                    .unwrap_or_else(|_| Err("no answer while reading the sessions".to_owned()))
            }
            Err(e) => Err(e.to_string()),
        };
        let (mut members, error) = match others {
            Ok(members) => (members, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        members.push(own);
        sessions::drop_taken_over(&mut members);
        members.sort_by(|a, b| a.member.cmp(&b.member));
        FleetSessions {
            member: self.name.clone(),
            members,
            error,
        }
    }

    /// Stops the heartbeat and removes this daemon's record (the others see it gone at once).
    /// Held elsewhere too (the control socket's answers), it is left through a shared reference;
    /// nothing is written for it afterwards.
    pub async fn leave(&self) {
        self.heartbeat.abort();
        let instance = lock(&self.record).instance.clone();
        let remove = async {
            // Only our own record: a daemon that took the name over keeps it.
            if let Ok(Some(current)) = read(&self.store, &self.name).await
                && current.instance == instance
            {
                let _ = self.store.delete(&self.name).await;
                let _ = self.sessions.delete(&self.name).await;
            }
        };
        // With the server away the records go stale instead: the daemon's stop is not held up.
        let _ = tokio::time::timeout(CONNECT_TIMEOUT, remove).await;
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Connects to the server of `config`, or says clearly why not (no retry: a daemon that cannot
/// join says so at start).
pub(crate) async fn connect(config: &FleetConfig) -> Result<async_nats::Client, FleetError> {
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("intendant {}", config.name))
        .connection_timeout(CONNECT_TIMEOUT);
    if let Some(path) = &config.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| FleetError::Config(format!("credentials {}: {e}", path.display())))?;
    }
    // async-nats does not send a URL's user and password itself: they are given as options, and
    // the server is reached by its URL without them.
    if let Some((user, password)) = url_credentials(&config.url) {
        options = options.user_and_password(user, password);
    }
    options.connect(config.server.as_str()).await.map_err(|e| {
        use async_nats::ConnectErrorKind as Kind;
        let server = config.server.clone();
        // The error's words never carry the URL's password: only its kind and cause are shown.
        let detail = e.kind().to_string();
        match e.kind() {
            Kind::AuthorizationViolation | Kind::Authentication => {
                FleetError::Refused { server, detail }
            }
            Kind::ServerParse => FleetError::Config(format!("url: {detail}")),
            _ => FleetError::Unreachable { server, detail },
        }
    })
}

/// The user and password `url` carries (`nats://user:password@host`), percent-decoded.
fn url_credentials(url: &str) -> Option<(String, String)> {
    let parsed = url::Url::parse(url).ok()?;
    if parsed.username().is_empty() {
        return None;
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8_lossy()
            .into_owned()
    };
    Some((
        decode(parsed.username()),
        decode(parsed.password().unwrap_or_default()),
    ))
}

/// Rewrites the record every `every` with the load of the moment; a failed write (the server
/// away) is tried again at the next beat.
async fn beat(store: kv::Store, record: Arc<Mutex<FleetMember>>, load: LoadFn, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let _ = report(&store, &record, &load).await;
    }
}

/// Writes the record with the load and time of now.
async fn report(
    store: &kv::Store,
    record: &Mutex<FleetMember>,
    load: &LoadFn,
) -> Result<(), String> {
    let now = load();
    let (key, bytes) = {
        let mut record = lock(record);
        record.running = now.running;
        record.idle = now.idle;
        record.queued = now.queued;
        record.max_running = now.max_running;
        record.seen = UtcTime::now().rfc3339();
        let bytes = serde_json::to_vec(&*record).map_err(|e| e.to_string())?;
        (record.name.clone(), bytes)
    };
    store
        .put(key, bytes.into())
        .await
        .map(drop)
        .map_err(|e| format!("the member's record cannot be written: {e}"))
}

/// The record under `key`, if there is one that reads as a member.
pub(crate) async fn read(store: &kv::Store, key: &str) -> Result<Option<FleetMember>, String> {
    let value = store
        .get(key)
        .await
        .map_err(|e| format!("the members' bucket cannot be read: {e}"))?;
    Ok(value.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
}

/// Whether `member` reported within its last three heartbeats.
pub(crate) fn alive(member: &FleetMember) -> bool {
    let limit = (member.heartbeat_ms.saturating_mul(MISSED_HEARTBEATS) / 1000).max(1);
    age_seconds(&member.seen).is_some_and(|age| age <= i64::try_from(limit).unwrap_or(i64::MAX))
}

/// A random id for this run of the daemon (also of a routed request).
pub(crate) fn instance_id() -> String {
    let mut bytes = [0_u8; 8];
    // Without randomness the pid and time still tell runs apart well enough.
    if getrandom::fill(&mut bytes).is_err() {
        let fallback = u64::from(std::process::id()) ^ UtcTime::now().unix_seconds().unsigned_abs();
        bytes = fallback.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn lock(record: &Mutex<FleetMember>) -> std::sync::MutexGuard<'_, FleetMember> {
    record.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_user_and_password_are_decoded_and_none_without_a_user() {
        assert_eq!(
            url_credentials("nats://fleet:p%40ss+w@127.0.0.1:4222"),
            Some(("fleet".to_owned(), "p@ss+w".to_owned()))
        );
        assert_eq!(url_credentials("nats://127.0.0.1:4222"), None);
    }
}

//! The JSON API: snapshots (`GET /api/sessions`, `/api/sessions/{id}`,
//! `/api/sessions/{id}/events`, `/api/sessions/{id}/record`, `/api/approvals`, `/api/agenda`,
//! `/api/memories`, `/api/memories/{id}`, `/api/settings`) and the one way to change
//! anything, `POST /api/intents`, whose body names a [`WebIntent`] that becomes exactly one
//! `SessionHost` call. Every refusal is an [`ApiError`]: a status and a JSON body
//! `{"error": CODE, "message": TEXT}`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use intendant_core::host::SessionHost;
use intendant_protocol::agenda::AgendaOp;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::RewindRequest;
use intendant_protocol::daemon::{
    Envelope, HostError, HostErrorCode, SessionIntent, SessionSummary, SessionsPage,
    SettingsChange, StartRequest, StreamItem,
};
use intendant_protocol::events::{AppEvent, SessionLogRecord};
use intendant_protocol::memory::MemoryOp;
use serde::{Deserialize, Serialize};

use crate::listing::in_one_reply;

/// Most events one `GET /api/sessions/{id}/events` returns; `more` says when to ask again.
pub const EVENTS_PAGE_LIMIT: usize = 2000;
/// Most bytes of events (as JSON) one page holds, but for a first event larger than that.
pub const EVENTS_PAGE_BYTES: usize = 4 << 20;

/// The host every handler talks to.
pub type Host = Arc<dyn SessionHost>;

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
}

impl ApiError {
    /// 400 `bad_request`: the request names something wrong, said in `message`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "log in with the URL `intendant serve --web` printed, or send Authorization: Bearer TOKEN",
        )
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 503 `busy`: a limit on clients was reached, said in `message`.
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 500 `internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> ApiError {
        let status = match e.code {
            HostErrorCode::UnknownSession | HostErrorCode::UnknownApproval => StatusCode::NOT_FOUND,
            HostErrorCode::AlreadyAnswered | HostErrorCode::SessionFinished => StatusCode::CONFLICT,
            HostErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            HostErrorCode::ShuttingDown | HostErrorCode::Unavailable | HostErrorCode::Busy => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            HostErrorCode::Forbidden => StatusCode::FORBIDDEN,
            HostErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.code.name(), e.message)
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> ApiError {
        let status = r.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "payload_too_large"
        } else {
            "bad_request"
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.code,
            message: &self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// What `POST /api/intents` accepts: `{"intent": NAME, ...fields}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "intent", rename_all = "snake_case")]
pub enum WebIntent {
    /// An intent for one session's loop: `{"intent": "session", "session_id": ..., "action":
    /// "approve" | "deny" | "skip" | "approve_all" | "allow_host" (a network approval's host
    /// for good) | "input" | "follow_up", ...}`.
    Session(SessionIntent),
    /// End the session's current turn.
    Interrupt {
        /// The session.
        session_id: String,
    },
    /// End the session.
    Stop {
        /// The session.
        session_id: String,
    },
    /// Set one session's autonomy, or the default of new sessions without `session_id`.
    Autonomy {
        /// The session (`None`: the default).
        #[serde(default)]
        session_id: Option<String>,
        /// The new level.
        level: AutonomyLevel,
    },
    /// Rewind a session (or undo its last rewind, or with `preview` say what either would
    /// change); answered with the `RewindReport`.
    Rewind(RewindRequest),
    /// Start a session.
    Start(StartRequest),
    /// Change settings.
    Settings(SettingsChange),
    /// One agenda operation (`{"intent": "agenda", "action": "add" | "done" | "snooze" |
    /// "schedule" | "approve" | "reject" | "list", ...}`); answered with the entries it listed
    /// or changed.
    Agenda(AgendaOp),
    /// A human's change to the memories (`{"intent": "memory", "action": "add" | "edit" |
    /// "remove", ...}`, or a listing); answered with the memories it changed or listed.
    Memory(MemoryOp),
}

/// `POST /api/intents`.
pub async fn post_intent(
    State(host): State<Host>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let intent: WebIntent = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("not an intent: {e}")))?;
    let response = match intent {
        WebIntent::Session(intent) => {
            let sent = host.send(intent).await?;
            Json(serde_json::json!({"ok": true, "sent": sent})).into_response()
        }
        WebIntent::Interrupt { session_id } => {
            host.interrupt(&session_id).await?;
            ok()
        }
        WebIntent::Stop { session_id } => {
            host.stop(&session_id).await?;
            ok()
        }
        WebIntent::Autonomy { session_id, level } => {
            host.set_autonomy(session_id.as_deref(), level).await?;
            ok()
        }
        WebIntent::Rewind(request) => Json(host.rewind(request).await?).into_response(),
        WebIntent::Start(request) => Json(host.start(request).await?).into_response(),
        WebIntent::Settings(change) => Json(host.update_settings(change).await?).into_response(),
        WebIntent::Agenda(op) => Json(host.agenda(op).await?).into_response(),
        WebIntent::Memory(op) => Json(host.memory(op).await?).into_response(),
    };
    Ok(response)
}

fn ok() -> Response {
    Json(serde_json::json!({"ok": true})).into_response()
}

/// `?after=ID&limit=N&last=true` of `GET /api/sessions` (a [`SessionsPage`]), or `?ids=ID,ID`.
#[derive(Debug, Deserialize)]
pub struct SessionsQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    last: bool,
    /// Sessions by id, comma-separated: their rows, not a page of the listing.
    #[serde(default)]
    ids: Option<String>,
}

/// `GET /api/sessions`: this daemon's sessions, oldest first; in a fleet every member's, each
/// with its `member` (and `member_lost` when that member is gone), oldest first.
/// `?after=ID&limit=N` gives a page of them: at most N whose ids sort after ID (the dashboard
/// reads a page of [`SessionsPage::SIZE`] at a time; a fleet's page is in id order), and
/// `&last=true` the newest N of those. `?ids=ID,ID` gives those sessions' rows (at most
/// [`SessionsPage::SIZE`], as a listing carries them, in the order asked; an id that names no
/// session is left out): what the dashboard reads again of the sessions whose events came.
pub async fn sessions(
    State(host): State<Host>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let host = host.as_ref();
    let page = SessionsPage {
        after: query.after,
        limit: query.limit,
        last: query.last,
        ..SessionsPage::ALL
    };
    if let Some(ids) = query.ids {
        if page != SessionsPage::ALL {
            return Err(HostError::new(
                HostErrorCode::InvalidRequest,
                "`ids` names sessions: it takes no `after`, `limit` or `last`",
            )
            .into());
        }
        return Ok(Json(rows(host, &ids).await?).into_response());
    }
    let fleet = in_one_reply(
        &page,
        |asked| async move { host.fleet_sessions_page(&asked).await },
        |fleet| fleet.as_ref().map_or(0, |fleet| fleet.ids().len()),
    )
    .await?;
    let Some(fleet) = fleet else {
        let got = in_one_reply(
            &page,
            |asked| async move { host.sessions_page(&asked).await },
            Vec::len,
        )
        .await?;
        return Ok(Json(got).into_response());
    };
    let mut rows = fleet.rows();
    // A page is in id order, as its next page starts.
    if page != SessionsPage::ALL {
        rows.sort_by(|a, b| a.session.id.cmp(&b.session.id));
    }
    Ok(Json(rows).into_response())
}

/// The rows of sessions `ids` (comma-separated), in that order, as a listing carries them.
async fn rows(host: &dyn SessionHost, ids: &str) -> Result<Vec<SessionSummary>, HostError> {
    let ids: Vec<&str> = ids.split(',').filter(|id| !id.is_empty()).collect();
    if ids.len() > SessionsPage::SIZE as usize {
        return Err(HostError::new(
            HostErrorCode::InvalidRequest,
            format!(
                "{} ids are more than one reply carries: ask for at most {} at a time",
                ids.len(),
                SessionsPage::SIZE
            ),
        ));
    }
    let mut rows = Vec::with_capacity(ids.len());
    for id in ids {
        match host.session_listed(id).await {
            Ok(session) => rows.push(session),
            Err(e) if e.code == HostErrorCode::UnknownSession => {}
            Err(e) => return Err(e),
        }
    }
    Ok(rows)
}

/// `GET /api/sessions/{id}`.
pub async fn session(
    State(host): State<Host>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(host.session(&id).await?).into_response())
}

/// `GET /api/agenda`: the agenda's listing ([`AgendaOp::List`]), oldest first.
pub async fn agenda(State(host): State<Host>) -> Result<Response, ApiError> {
    Ok(Json(host.agenda(AgendaOp::List).await?).into_response())
}

/// `?q=QUERY&scope=SCOPE&limit=N` of `GET /api/memories`.
#[derive(Debug, Deserialize)]
pub struct MemoryQuery {
    /// A full-text query: the best matches first (without it, the most recently changed).
    #[serde(default)]
    pub q: Option<String>,
    /// `all` (the default), `user` or `project:<absolute path>`.
    #[serde(default)]
    pub scope: Option<String>,
    /// At most this many (1 to 200, default 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `GET /api/memories?q=&scope=&limit=`: the memories of a scope, or those a query finds.
pub async fn memories(
    State(host): State<Host>,
    query: Result<Query<MemoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(MemoryQuery { q, scope, limit }) = query?;
    let op = match q.filter(|q| !q.trim().is_empty()) {
        Some(query) => MemoryOp::Search {
            query,
            scope,
            limit,
        },
        None => MemoryOp::List { scope, limit },
    };
    Ok(Json(host.memory(op).await?).into_response())
}

/// `GET /api/memories/{id}`: one memory, whole.
pub async fn memory(
    State(host): State<Host>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = id
        .parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("{id:?} is not a memory's number")))?;
    Ok(Json(host.memory(MemoryOp::Show { id }).await?).into_response())
}

/// `GET /api/approvals`.
pub async fn approvals(State(host): State<Host>) -> Result<Response, ApiError> {
    Ok(Json(host.approvals().await?).into_response())
}

/// `GET /api/settings`.
pub async fn settings(State(host): State<Host>) -> Result<Response, ApiError> {
    Ok(Json(host.settings().await?).into_response())
}

/// `?after=SEQ` of the events endpoints.
#[derive(Debug, Deserialize)]
pub struct AfterQuery {
    /// Events after this `seq` (`0`: from the start).
    #[serde(default)]
    pub after: Option<u64>,
    /// One session's events only (`/api/events`).
    #[serde(default)]
    pub session: Option<String>,
}

/// A page of one session's recorded events.
#[derive(Debug, Serialize, Deserialize)]
pub struct EventsPage {
    /// The events, oldest first.
    pub events: Vec<Envelope>,
    /// More events were recorded before the request than this page holds: ask again with
    /// `after` = the last `seq` here.
    pub more: bool,
}

/// `GET /api/sessions/{id}/events?after=SEQ`: what the session published after `SEQ` up to now
/// (never waits for what comes next; that is `/api/events`).
pub async fn session_events(
    State(host): State<Host>,
    Path(id): Path<String>,
    query: Result<Query<AfterQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let after = query.after.unwrap_or(0);
    let mut stream = host.subscribe(Some(&id), Some(after)).await?;
    let end = stream.history_end();
    let mut page = EventsPage {
        events: Vec::new(),
        more: false,
    };
    let mut last = after;
    let mut bytes = 0;
    while last < end {
        if page.events.len() == EVENTS_PAGE_LIMIT {
            page.more = true;
            break;
        }
        match stream.next().await {
            Some(StreamItem::Event(envelope)) => {
                last = envelope.seq;
                if envelope.seq <= end {
                    bytes += envelope.json_bytes();
                    if bytes > EVENTS_PAGE_BYTES && !page.events.is_empty() {
                        page.more = true;
                        break;
                    }
                    page.events.push(Arc::unwrap_or_clone(envelope));
                }
            }
            Some(StreamItem::Lagged { .. }) => {
                page.more = true;
                break;
            }
            None => break,
        }
    }
    Ok(Json(page).into_response())
}

/// `?from=OFFSET` of the record endpoint.
#[derive(Debug, Deserialize)]
pub struct FromQuery {
    /// Where to read on from (`0`: the start; else a page's `next`).
    #[serde(default)]
    pub from: Option<u64>,
}

/// One record of a session's `session.jsonl`, its event shaped as an [`Envelope`]'s is.
#[derive(Debug, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// When it was recorded (RFC 3339 UTC).
    pub ts: String,
    /// Its daemon-wide `seq`, when a daemon published it; none when a one-shot run logged it.
    pub seq: Option<u64>,
    /// The event.
    pub event: AppEvent,
}

/// A page of one session's record, as its `session.jsonl` holds it.
#[derive(Debug, Serialize, Deserialize)]
pub struct RecordPage {
    /// The records, oldest first.
    pub records: Vec<RecordedEvent>,
    /// Lines passed over: longer than a page, or not a record this build reads.
    pub passed_over: usize,
    /// Where the next page starts: ask again with `from` = this while `more` is true.
    pub next: u64,
    /// This page read something, so there may be more (a page that reads nothing ends it).
    pub more: bool,
}

/// `GET /api/sessions/{id}/record?from=OFFSET`: the session's record itself, at most
/// [`EVENTS_PAGE_BYTES`] of its lines a page, for the sessions a one-shot run recorded: their
/// records hold no `seq`, so `/events` has only what the daemon relayed of them and its ring
/// still holds (nothing, when the run ended before the daemon saw it).
pub async fn session_record(
    State(host): State<Host>,
    Path(id): Path<String>,
    query: Result<Query<FromQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let from = query.from.unwrap_or(0);
    let dir = host.log_dir(&id).await?;
    let page = tokio::task::spawn_blocking(move || {
        let mut tail = intendant_core::session_log::LogTail::at(&dir, from);
        let found = tail.read(EVENTS_PAGE_BYTES)?;
        Ok::<_, intendant_core::session_log::SessionLogError>(RecordPage {
            records: found
                .records
                .into_iter()
                .map(|logged| {
                    let SessionLogRecord { ts, seq, event } = logged.record;
                    RecordedEvent { ts, seq, event }
                })
                .collect(),
            passed_over: found.passed_over,
            next: tail.offset(),
            more: tail.offset() != from,
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading the record failed: {e}")))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(page).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::daemon::{Backend, SessionStatus, SessionSummary};
    use intendant_protocol::events::ControlMsg;
    use intendant_protocol::fleet::{FleetSessions, MemberSessions};

    #[test]
    fn intents_parse_from_their_wire_shape() {
        let i: WebIntent = serde_json::from_str(
            r#"{"intent":"session","session_id":"s","action":"approve","id":3}"#,
        )
        .unwrap();
        assert_eq!(
            i,
            WebIntent::Session(SessionIntent {
                session_id: "s".into(),
                msg: ControlMsg::Approve { id: 3 }
            })
        );
        let i: WebIntent = serde_json::from_str(r#"{"intent":"autonomy","level":"high"}"#).unwrap();
        assert_eq!(
            i,
            WebIntent::Autonomy {
                session_id: None,
                level: AutonomyLevel::High
            }
        );
        let i: WebIntent =
            serde_json::from_str(r#"{"intent":"start","task":"t","project":"/p"}"#).unwrap();
        assert!(matches!(i, WebIntent::Start(r) if r.task == "t"));
        for bad in [
            r#"{"intent":"nuke"}"#,
            r#"{"intent":"session","session_id":"s","action":"approve"}"#,
            r#"{"intent":"stop"}"#,
            r#"[1]"#,
        ] {
            assert!(serde_json::from_str::<WebIntent>(bad).is_err(), "{bad}");
        }
    }

    fn summary(id: &str, created: &str, status: SessionStatus) -> SessionSummary {
        SessionSummary {
            id: id.into(),
            parent: None,
            project: "/p".into(),
            task: "t".into(),
            backend: Backend::Native,
            provider: "mock".into(),
            model: "m".into(),
            status,
            reason: None,
            autonomy: AutonomyLevel::Medium,
            created: created.into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            final_text: None,
            result: None,
            worktree: None,
            skills: Vec::new(),
            usage: None,
            run_by: None,
            network: None,
        }
    }

    #[test]
    fn the_fleets_list_is_every_members_sessions_oldest_first_each_with_its_member() {
        let member = |name: &str, lost, sessions| MemberSessions {
            member: name.into(),
            published: "2026-12-01T10:00:00Z".into(),
            sessions,
            omitted: 0,
            lost,
        };
        let fleet = FleetSessions {
            member: "alpha".into(),
            members: vec![
                member(
                    "alpha",
                    false,
                    vec![summary("a2", "2026-12-01T10:00:02Z", SessionStatus::Idle)],
                ),
                member(
                    "beta",
                    true,
                    vec![
                        summary("b1", "2026-12-01T10:00:01Z", SessionStatus::Interrupted),
                        summary("b3", "2026-12-01T10:00:03Z", SessionStatus::Done),
                    ],
                ),
            ],
            error: None,
        };
        let rows = serde_json::to_value(fleet.rows()).unwrap();
        let rows = rows.as_array().unwrap();
        let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["b1", "a2", "b3"]);
        assert_eq!(rows[0]["member"], "beta");
        assert_eq!(rows[0]["member_lost"], true);
        assert_eq!(rows[0]["status"], "interrupted");
        assert_eq!(rows[1]["member"], "alpha");
        assert!(rows[1].get("member_lost").is_none(), "{}", rows[1]);
        assert_eq!(rows[1]["task"], "t", "the summary's fields stay at the top");
    }
}

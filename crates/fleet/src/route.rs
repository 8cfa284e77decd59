//! Control routed to a session's owner, and a session's events followed from another member
//! (`docs/fleet.md`, "One host, any door").
//!
//! Subjects (core NATS, not JetStream: nothing here is kept by the server):
//! - `intendant.fleet.control.<MEMBER>`: requests to that member ([`ControlRequest`], answered
//!   with a [`ControlReply`]). Each request carries an id the asker keeps across its retries;
//!   the owner remembers the answers of its last [`REMEMBERED`] ids, so a retry is answered with
//!   the first answer and never applied twice.
//! - `intendant.fleet.events.<MEMBER>.<SESSION>`: each event of the session as its owner
//!   numbered it ([`FleetEvent`]), with the `seq` of the session's event before it, so a follower
//!   sees a gap and fills it from the owner's record ([`ControlOp::Replay`]). A member's stream
//!   of every session subscribes to `intendant.fleet.events.*.*` ([`Member::follow_all`]).
//!
//! Member names are letters, digits, `-` and `_`, session ids the same: neither holds a `.` or a
//! wildcard, so a subject names exactly one member and session.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Envelope, HostError, HostErrorCode, SessionIntent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::Member;

/// How long one attempt of a routed request waits for the owner's answer.
const ATTEMPT: Duration = Duration::from_secs(4);
/// Attempts of one routed request (each with the same id) before the owner counts as unreachable.
const ATTEMPTS: usize = 3;
/// How many answered request ids an owner remembers (a retry of an older one would be applied
/// again; retries come within seconds, so this is far more than enough).
pub const REMEMBERED: usize = 4096;

/// Who answered, carried to the owner so that a model's answer stays a model's there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// A human's surface: `intendant ctl`, the dashboard, the terminal.
    Human,
    /// A model's: an MCP client; the owner holds it to its own `[mcp]` policy.
    Model,
}

/// What one member asks of a session's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlOp {
    /// Deliver an intent (an approval's answer, a question's answer, a follow-up).
    Send {
        /// The intent.
        intent: SessionIntent,
    },
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
    /// Set the session's autonomy level (within the owner's ceiling).
    SetAutonomy {
        /// The session.
        session_id: String,
        /// The level.
        level: AutonomyLevel,
    },
    /// The owner's pending approvals; `ok` is a list of `PendingApproval` (its newest
    /// [`crate::route::MAX_APPROVALS`] at most).
    Approvals,
    /// The session's events after `after` from the owner's record; `ok` is a [`Replayed`].
    Replay {
        /// The session.
        session_id: String,
        /// Events after this `seq`.
        after: u64,
    },
}

impl ControlOp {
    /// Whether the op changes something (its answer is remembered against a retry).
    pub fn changes(&self) -> bool {
        !matches!(self, ControlOp::Approvals | ControlOp::Replay { .. })
    }
}

/// The most approvals one owner answers with: its newest.
pub const MAX_APPROVALS: usize = 256;
/// The most bytes of events one replay answer carries (NATS's default message is 1 MiB).
pub const MAX_REPLAY_BYTES: usize = 512 * 1024;

/// One request on a member's control subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRequest {
    /// Chosen by the asker, the same for each retry.
    pub id: String,
    /// The asking member.
    pub from: String,
    /// The surface it was asked at.
    pub surface: Surface,
    /// What it asks.
    #[serde(flatten)]
    pub op: ControlOp,
}

/// The owner's answer: `ok` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlReply {
    /// What the op answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Value>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HostError>,
}

/// The `ok` of [`ControlOp::Replay`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replayed {
    /// The events, in order.
    pub events: Vec<Envelope>,
    /// The `seq` of the owner's last event when it was asked (0: none).
    pub history_end: u64,
    /// Events up to `history_end` were left out for the size: ask again after the last.
    pub more: bool,
}

/// One event as its owner publishes it for followers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetEvent {
    /// The `seq` of the event of the same session the owner published before this one (0: none
    /// since it started publishing). A follower whose last `seq` is below it missed events.
    pub prev: u64,
    /// The event.
    pub event: Envelope,
}

/// What a member answers control requests with: the op, asked at `surface` by `from`.
pub type ControlHandler = Arc<
    dyn Fn(ControlRequest) -> Pin<Box<dyn Future<Output = Result<Value, HostError>> + Send>>
        + Send
        + Sync,
>;

/// The control subject of `member`.
pub fn control_subject(member: &str) -> String {
    format!("intendant.fleet.control.{member}")
}

/// The events subject of `session` on `member`.
pub fn events_subject(member: &str, session: &str) -> String {
    format!("intendant.fleet.events.{member}.{session}")
}

/// Whether `name` can stand in a subject as one token (a session id from a request).
fn token(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Member {
    /// Asks `owner` to do `op`, as asked at `surface`: its answer, or a clear error when the
    /// owner does not answer (gone, or cut off). Retried with the same id, so it is applied
    /// once however many attempts reach the owner.
    pub async fn route(
        &self,
        owner: &str,
        surface: Surface,
        op: ControlOp,
    ) -> Result<Value, HostError> {
        if !token(owner) {
            return Err(HostError::new(
                HostErrorCode::InvalidRequest,
                format!("{owner:?} is not a member's name"),
            ));
        }
        let request = ControlRequest {
            id: format!("{}-{}", self.name(), crate::member::instance_id()),
            from: self.name().to_owned(),
            surface,
            op,
        };
        let bytes = serde_json::to_vec(&request)
            .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
        let client = self.nats();
        let subject = control_subject(owner);
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let asked = client.send_request(
                subject.clone(),
                async_nats::Request::new()
                    .payload(bytes.clone().into())
                    .timeout(Some(ATTEMPT)),
            );
            match asked.await {
                Ok(message) => {
                    let reply: ControlReply =
                        serde_json::from_slice(&message.payload).map_err(|e| {
                            HostError::new(
                                HostErrorCode::Internal,
                                format!("member {owner} answered what does not read: {e}"),
                            )
                        })?;
                    return match (reply.ok, reply.error) {
                        (_, Some(error)) => Err(error),
                        (ok, None) => Ok(ok.unwrap_or(Value::Null)),
                    };
                }
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    return Err(HostError::new(
                        HostErrorCode::Unavailable,
                        format!(
                            "member {owner} owns the session but does not answer (it is gone or \
                             cut off from the fleet); nothing was done"
                        ),
                    ));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(HostError::new(
            HostErrorCode::Unavailable,
            format!(
                "member {owner} owns the session but did not answer in {} attempts ({last}); \
                 it may or may not have been done",
                ATTEMPTS
            ),
        ))
    }

    /// Answers the control requests addressed to this member with `handler`, until the
    /// returned task is aborted. A request whose id was answered before gets the first answer
    /// again without `handler` running twice.
    pub async fn serve_control(
        &self,
        handler: ControlHandler,
    ) -> Result<tokio::task::JoinHandle<()>, HostError> {
        let client = self.nats();
        let mut requests = client
            .subscribe(control_subject(self.name()))
            .await
            .map_err(|e| HostError::new(HostErrorCode::Unavailable, e.to_string()))?;
        let answered = Arc::new(Answered::default());
        Ok(tokio::spawn(async move {
            while let Some(message) = requests.next().await {
                let Some(reply_to) = message.reply.clone() else {
                    continue;
                };
                let client = client.clone();
                let handler = Arc::clone(&handler);
                let answered = Arc::clone(&answered);
                tokio::spawn(async move {
                    let bytes = answer(&message.payload, &handler, &answered).await;
                    let _ = client.publish(reply_to, bytes.into()).await;
                });
            }
        }))
    }

    /// Publishes `event` of this member's session for followers on other members; `prev` is the
    /// `seq` of the session's event published before it (0: none).
    pub async fn publish_event(&self, prev: u64, event: Envelope) -> Result<(), String> {
        // Another member's event (a stream of every session passes them on) is never published
        // again as this member's.
        if !token(&event.session_id) || event.member.is_some() {
            return Ok(());
        }
        let subject = events_subject(self.name(), &event.session_id);
        let bytes = serde_json::to_vec(&FleetEvent { prev, event }).map_err(|e| e.to_string())?;
        self.nats()
            .publish(subject, bytes.into())
            .await
            .map_err(|e| e.to_string())
    }

    /// The events `owner` publishes of `session` from now on, as they come (a message that does
    /// not read is skipped).
    pub async fn follow(
        &self,
        owner: &str,
        session: &str,
    ) -> Result<futures::stream::BoxStream<'static, FleetEvent>, HostError> {
        if !token(owner) || !token(session) {
            return Err(HostError::new(
                HostErrorCode::UnknownSession,
                format!("no session {session:?} on member {owner:?}"),
            ));
        }
        let subscriber = self
            .nats()
            .subscribe(events_subject(owner, session))
            .await
            .map_err(|e| HostError::new(HostErrorCode::Unavailable, e.to_string()))?;
        Ok(subscriber
            .filter_map(|m| async move { serde_json::from_slice::<FleetEvent>(&m.payload).ok() })
            .boxed())
    }

    /// Every event every other member publishes of any of its sessions from now on, each with
    /// its member (from the subject), as they come: what the server delivers, live only (a
    /// message the server dropped for a slow reader is not read back; one that does not read,
    /// whose subject names no member, or whose event is of another session than its subject
    /// names, is skipped: see [`other_members_event`]).
    pub async fn follow_all(
        &self,
    ) -> Result<futures::stream::BoxStream<'static, (String, FleetEvent)>, HostError> {
        let own = self.name().to_owned();
        let subscriber = self
            .nats()
            .subscribe(ALL_EVENTS)
            .await
            .map_err(|e| HostError::new(HostErrorCode::Unavailable, e.to_string()))?;
        Ok(subscriber
            .filter_map(move |m| {
                let event = other_members_event(m.subject.as_str(), &m.payload, &own);
                async move { event }
            })
            .boxed())
    }
}

/// Every member's every session's events subject.
const ALL_EVENTS: &str = "intendant.fleet.events.*.*";

/// The member and the session an events subject names
/// (`intendant.fleet.events.<MEMBER>.<SESSION>`).
fn event_subject(subject: &str) -> Option<(&str, &str)> {
    let rest = subject.strip_prefix("intendant.fleet.events.")?;
    let (member, session) = rest.split_once('.')?;
    (token(member) && token(session)).then_some((member, session))
}

/// Another member's event as published on `subject`, with that member: `None` for one of
/// member `own`, a payload that does not read, or an event of another session than the subject
/// names (a member publishes only on its own sessions' subjects, so it cannot pass an event
/// off as another session's).
fn other_members_event(subject: &str, payload: &[u8], own: &str) -> Option<(String, FleetEvent)> {
    let (member, session) = event_subject(subject).filter(|(member, _)| *member != own)?;
    let event = serde_json::from_slice::<FleetEvent>(payload).ok()?;
    (event.event.session_id == session).then(|| (member.to_owned(), event))
}

/// The answer to one request's bytes, remembered by id when its op changes something.
async fn answer(payload: &[u8], handler: &ControlHandler, answered: &Answered) -> Vec<u8> {
    let request: ControlRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => {
            return reply(Err(HostError::new(
                HostErrorCode::InvalidRequest,
                format!("a control request that does not read: {e}"),
            )));
        }
    };
    if !request.op.changes() {
        return reply(handler(request).await);
    }
    let cell = answered.cell(&request.id);
    cell.get_or_init(|| async { reply(handler(request).await) })
        .await
        .clone()
}

fn reply(result: Result<Value, HostError>) -> Vec<u8> {
    let reply = match result {
        Ok(ok) => ControlReply {
            ok: Some(ok),
            error: None,
        },
        Err(error) => ControlReply {
            ok: None,
            error: Some(error),
        },
    };
    // A reply of a value and an error always serializes; an empty one says it did not.
    serde_json::to_vec(&reply).unwrap_or_default()
}

/// The answers of the last [`REMEMBERED`] changing requests, by id; a retry arriving while the
/// first is still being answered waits for that answer.
#[derive(Default)]
struct Answered {
    inner: Mutex<(HashMap<String, Cell>, VecDeque<String>)>,
}

/// One request's answer, once it is known.
type Cell = Arc<OnceCell<Vec<u8>>>;

impl Answered {
    fn cell(&self, id: &str) -> Cell {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (cells, order) = &mut *guard;
        if let Some(cell) = cells.get(id) {
            return Arc::clone(cell);
        }
        let cell = Arc::new(OnceCell::new());
        cells.insert(id.to_owned(), Arc::clone(&cell));
        order.push_back(id.to_owned());
        while order.len() > REMEMBERED {
            if let Some(old) = order.pop_front() {
                cells.remove(&old);
            }
        }
        cell
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting() -> (ControlHandler, Arc<AtomicUsize>) {
        let runs = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&runs);
        let handler: ControlHandler = Arc::new(move |_request| {
            let seen = Arc::clone(&seen);
            Box::pin(async move { Ok(Value::from(seen.fetch_add(1, Ordering::SeqCst))) })
        });
        (handler, runs)
    }

    fn request(id: &str, op: ControlOp) -> Vec<u8> {
        serde_json::to_vec(&ControlRequest {
            id: id.into(),
            from: "alpha".into(),
            surface: Surface::Human,
            op,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_retried_change_is_applied_once_and_answered_alike() {
        let (handler, runs) = counting();
        let answered = Answered::default();
        let stop = request(
            "a-1",
            ControlOp::Stop {
                session_id: "s".into(),
            },
        );
        let first = answer(&stop, &handler, &answered).await;
        let again = answer(&stop, &handler, &answered).await;
        assert_eq!(first, again);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Another id is another request; a read is never remembered.
        answer(
            &request(
                "a-2",
                ControlOp::Stop {
                    session_id: "s".into(),
                },
            ),
            &handler,
            &answered,
        )
        .await;
        answer(&request("a-3", ControlOp::Approvals), &handler, &answered).await;
        answer(&request("a-3", ControlOp::Approvals), &handler, &answered).await;
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_request_that_does_not_read_is_refused_and_runs_nothing() {
        let (handler, runs) = counting();
        let bytes = answer(b"{\"op\":\"explode\"}", &handler, &Answered::default()).await;
        let reply: ControlReply = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(reply.error.unwrap().code, HostErrorCode::InvalidRequest);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_remembered_ids_are_bounded() {
        let answered = Answered::default();
        for i in 0..REMEMBERED + 10 {
            answered.cell(&i.to_string());
        }
        let guard = answered.inner.lock().unwrap();
        assert_eq!(guard.0.len(), REMEMBERED);
        assert!(!guard.0.contains_key("0"));
    }

    #[test]
    fn an_events_subject_names_its_member() {
        assert_eq!(
            event_subject(&events_subject("beta", "20261203-1a2b")).map(|(member, _)| member),
            Some("beta")
        );
        for bad in [
            "intendant.fleet.events.beta",
            "intendant.fleet.control.beta.x",
            "intendant.fleet.events.be ta.x",
        ] {
            assert_eq!(event_subject(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_event_passed_off_as_another_sessions_or_of_this_member_is_skipped() {
        let payload = |session: &str| {
            serde_json::to_vec(&FleetEvent {
                prev: 0,
                event: intendant_protocol::daemon::Envelope {
                    member: None,
                    record_end: None,
                    seq: 7,
                    session_id: session.to_owned(),
                    ts: String::new(),
                    event: intendant_protocol::events::AppEvent::TurnStarted { turn: 1 },
                },
            })
            .unwrap()
        };
        let subject = events_subject("beta", "s1");
        let (member, event) = other_members_event(&subject, &payload("s1"), "alpha").unwrap();
        assert_eq!((member.as_str(), event.event.seq), ("beta", 7));
        assert!(other_members_event(&subject, &payload("s2"), "alpha").is_none());
        assert!(other_members_event(&subject, &payload("s1"), "beta").is_none());
        assert!(other_members_event(&subject, b"not json", "alpha").is_none());
    }

    #[test]
    fn subjects_take_plain_names_only() {
        assert_eq!(control_subject("alpha"), "intendant.fleet.control.alpha");
        assert_eq!(
            events_subject("beta", "20261203-1a2b"),
            "intendant.fleet.events.beta.20261203-1a2b"
        );
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert!(!token(bad), "{bad:?}");
        }
    }
}

//! The lines of the daemon's control socket (`$INTENDANT_HOME/daemon.sock`, `docs/daemon.md`).
//!
//! One JSON object per line, both ways. Each side opens with a hello carrying
//! [`DAEMON_PROTOCOL_VERSION`] ([`ClientHello`], [`ServerHello`]); then the client sends
//! [`Request`]s, each with an id of its choice and one [`Op`] (one per `SessionHost` method), and
//! the daemon answers each with a [`Reply`] carrying the same id: `{"id":1,"ok":...}` or
//! `{"id":1,"error":{"code":...,"message":...}}`. A [`Op::Subscribe`] opens a stream named by
//! the request's id; its items arrive as [`StreamLine`]s, interleaved with replies, until the
//! stream ends ([`StreamLine::End`], after a `lagged` item or at shutdown, or on
//! [`Op::Unsubscribe`]).
//!
//! The one decision to know: replies and stream items share the connection but never each
//! other's shape (a reply always has `id`, a stream line always `stream`), so a client tells
//! them apart by a key, and a reply to a malformed line has `"id": null`.

use serde::{Deserialize, Serialize};

use crate::autonomy::AutonomyLevel;
use crate::checkpoints::RewindRequest;
use crate::daemon::{
    DAEMON_PROTOCOL_VERSION, HostError, SessionIntent, SessionsPage, SettingsChange, StartRequest,
    StreamItem,
};

/// Longest line the daemon reads from a client, newline excluded; a longer one is answered
/// with an `invalid_request` error (under the id the line starts with, `{"id":N,...`, else a
/// null one) and skipped, and the connection stays usable.
pub const MAX_REQUEST_LINE: usize = 256 * 1024;

/// Longest task, follow-up or answer a daemon takes (from any surface), and a frontend reads
/// from stdin for `-`, in bytes: one request line holds it with room for the rest of the
/// request (a one-shot run's `-` keeps the same bound, so what it takes a daemon takes too).
pub const MAX_TASK_BYTES: usize = 192 * 1024;

/// Why `text` (`what` names it: "the task") is longer than a session takes
/// ([`MAX_TASK_BYTES`]); `None` when it fits.
pub fn over_task_bound(text: &str, what: &str) -> Option<String> {
    (text.len() > MAX_TASK_BYTES).then(|| {
        format!(
            "{what} is {} bytes, over the {MAX_TASK_BYTES} a session takes: put the rest in a \
             file of the project and name the file",
            text.len()
        )
    })
}

/// The client's first line: `{"hello":1,"client":"intendant-ctl 0.1.0"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    /// The protocol version the client speaks ([`DAEMON_PROTOCOL_VERSION`]).
    pub hello: u32,
    /// Who is connecting, for the daemon's log (free text); one beginning `intendant-mcp` is
    /// an MCP server (a model's connection: `docs/daemon.md`).
    #[serde(default)]
    pub client: String,
}

impl ClientHello {
    /// A hello of this protocol version from `client`.
    pub fn new(client: impl Into<String>) -> ClientHello {
        ClientHello {
            hello: DAEMON_PROTOCOL_VERSION,
            client: client.into(),
        }
    }
}

/// The daemon's first line:
/// `{"hello":1,"server":"intendant 0.1.0","pid":4242,"home":"...","started_at":"..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHello {
    /// The protocol version the daemon speaks ([`DAEMON_PROTOCOL_VERSION`]).
    pub hello: u32,
    /// The daemon's name and version.
    pub server: String,
    /// The daemon's process id.
    pub pid: u32,
    /// The state root it serves.
    pub home: String,
    /// When it began serving (RFC 3339, UTC); absent from a daemon older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

/// One request: an id chosen by the client (echoed on the reply) and one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Echoed on the [`Reply`]; for [`Op::Subscribe`] also the id of the stream it opens.
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// The operations of the socket, one per `SessionHost` method (plus [`Op::Unsubscribe`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Start a session; `ok` is its `SessionSummary`.
    Start {
        /// What to start.
        request: StartRequest,
    },
    /// The sessions, oldest first: every one, or a [`SessionsPage`] of them (`after`, `limit`);
    /// `ok` is a list of `SessionSummary`.
    Sessions {
        /// Which of them.
        #[serde(flatten)]
        page: SessionsPage,
    },
    /// How many sessions a [`SessionsPage`] admits, its `limit` aside (its bounds and
    /// `status`); `ok` is a number.
    SessionsCount {
        /// Which of them.
        #[serde(flatten)]
        page: SessionsPage,
    },
    /// One session; `ok` is its `SessionSummary`.
    Session {
        /// The session.
        session_id: String,
    },
    /// Every pending approval; `ok` is a list of `PendingApproval`.
    Approvals,
    /// Deliver an intent to a session; `ok` is `null`.
    Send {
        /// The intent.
        intent: SessionIntent,
    },
    /// End the session's current turn; `ok` is `null`.
    Interrupt {
        /// The session.
        session_id: String,
    },
    /// End the session; `ok` is `null`.
    Stop {
        /// The session.
        session_id: String,
    },
    /// Set one session's autonomy level, or the default of new sessions; `ok` is `null`.
    SetAutonomy {
        /// The session; absent for the default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// The level.
        level: AutonomyLevel,
    },
    /// The control plane's settings; `ok` is `Settings`.
    Settings,
    /// Change settings; `ok` is the new `Settings`.
    UpdateSettings {
        /// The change.
        change: SettingsChange,
    },
    /// Open an event stream named by this request's id; `ok` is [`Subscribed`], then
    /// [`StreamLine`]s follow.
    Subscribe {
        /// One session's events; absent for every session's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// Events after this `seq` (`0` for everything); absent for only new events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
    },
    /// Close a stream this connection opened; `ok` is `null` (a [`StreamLine::End`] follows).
    Unsubscribe {
        /// The stream's id (its subscribe request's id).
        stream: u64,
    },
    /// Rewind a session (or undo its last rewind, or preview either); `ok` is a
    /// `RewindReport`.
    Rewind {
        /// What to rewind.
        request: RewindRequest,
    },
    /// One agenda operation (`docs/agenda.md`); `ok` is a list of `AgendaItem` (the entries
    /// it listed or changed).
    Agenda {
        /// The operation.
        agenda: crate::agenda::AgendaOp,
    },
    /// Remove the records of sessions that ended long ago (`intendant sessions prune`); `ok`
    /// is a `PruneReport`.
    Prune {
        /// Which.
        request: crate::daemon::PruneRequest,
    },
    /// A session's log directory; `ok` is `{"path": "..."}`.
    LogDir {
        /// The session.
        session_id: String,
    },
    /// Stop every session and the daemon; `ok` is `null`.
    Shutdown,
    /// The daemon's load as its socket sees it; `ok` is [`Load`]. Answered by the socket
    /// itself, not by the host.
    Load,
    /// Every fleet member's sessions (`docs/fleet.md`), or a [`SessionsPage`] of them over
    /// every member (by id); `ok` is [`crate::fleet::FleetSessions`], an `invalid_request`
    /// error from a daemon in no fleet.
    FleetSessions {
        /// Which of them.
        #[serde(flatten)]
        page: SessionsPage,
    },
    /// How many sessions of every fleet member a [`SessionsPage`] admits, its `limit` aside;
    /// `ok` is a number, an `invalid_request` error from a daemon in no fleet.
    FleetSessionsCount {
        /// Which of them.
        #[serde(flatten)]
        page: SessionsPage,
    },
    /// Queue a session for a fleet member with a free slot (`ctl start --fleet`); `ok` is
    /// [`crate::fleet::FleetPlacement`], an error when the server cannot take it.
    FleetStart {
        /// What to run, and where it may.
        request: crate::fleet::FleetStartRequest,
    },
    /// A placement's outcome as the fleet keeps it (`ctl placement ID`); `ok` is
    /// [`crate::fleet::PlacementStatus`], `unknown_session` when the fleet keeps none of that
    /// id, `invalid_request` from a daemon in no fleet.
    FleetPlacement {
        /// The placement's id (what `ctl start --fleet` printed; not `id`, which is the
        /// request's).
        placement: String,
    },
}

impl Op {
    /// The `op` tag, e.g. `set_autonomy`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Start { .. } => "start",
            Op::Sessions { .. } => "sessions",
            Op::SessionsCount { .. } => "sessions_count",
            Op::Session { .. } => "session",
            Op::Approvals => "approvals",
            Op::Send { .. } => "send",
            Op::Interrupt { .. } => "interrupt",
            Op::Stop { .. } => "stop",
            Op::SetAutonomy { .. } => "set_autonomy",
            Op::Settings => "settings",
            Op::UpdateSettings { .. } => "update_settings",
            Op::Subscribe { .. } => "subscribe",
            Op::Unsubscribe { .. } => "unsubscribe",
            Op::Rewind { .. } => "rewind",
            Op::Agenda { .. } => "agenda",
            Op::Prune { .. } => "prune",
            Op::LogDir { .. } => "log_dir",
            Op::Shutdown => "shutdown",
            Op::Load => "load",
            Op::FleetSessions { .. } => "fleet_sessions",
            Op::FleetSessionsCount { .. } => "fleet_sessions_count",
            Op::FleetStart { .. } => "fleet_start",
            Op::FleetPlacement { .. } => "fleet_placement",
        }
    }
}

/// The answer to one request (or to a line that was not one: then `id` is `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The request's id; `None` when the line could not be read as a request.
    pub id: Option<u64>,
    /// What came of it.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A reply's result: `"ok": value` or `"error": {code, message}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done; the value's shape depends on the [`Op`].
    Ok(serde_json::Value),
    /// Refused.
    Error(HostError),
}

/// The `ok` of [`Op::Subscribe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribed {
    /// The stream's id (the request's id).
    pub stream: u64,
    /// The `seq` of the last event the stream replays (`0` when none): items with a greater
    /// `seq` were published after the subscription.
    pub history_end: u64,
}

/// The `ok` of [`Op::Load`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Connections on the control socket that completed the hello (this one included).
    pub clients: u64,
    /// The most it admits at once (`[daemon] max_clients`, as in force).
    pub max_clients: u64,
    /// The daemon's resident memory in bytes (`VmRSS`), when the system says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// The descriptors the daemon has open, when the system says (every session holds some
    /// until it ends, idle ones too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptors: Option<u64>,
    /// The most it may open (its soft limit); absent when unlimited or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_descriptors: Option<u64>,
    /// The processes and threads all its sessions have now, when a pids controller counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_processes: Option<u64>,
    /// The most they may have together (`[daemon] sessions_pids_max`, as in force).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_processes: Option<u64>,
    /// The dashboard's connections open now (`intendant serve --web`; absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_connections: Option<u64>,
    /// The most it serves at once (`[daemon] max_web_connections`, as in force).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_web_connections: Option<u64>,
    /// The fleet it belongs to, when it joined one (`intendant serve --fleet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::fleet::FleetView>,
    /// Its sessions, by what they are doing (absent from a daemon older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::daemon::SessionCounts>,
}

/// The `ok` of [`Op::LogDir`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogDirPath {
    /// The session's log directory.
    pub path: String,
}

/// One line of an open stream.
// An item is an event, ended lines are rare, and a line lives only until it is written or read:
// boxing the event would cost an allocation per event for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamLine {
    /// The next item: `{"stream":3,"item":{"kind":"event","seq":...}}`.
    Item {
        /// The stream's id.
        stream: u64,
        /// The item.
        item: StreamItem,
    },
    /// The stream ended; no more lines of it: `{"stream":3,"end":"lagged"}`.
    End {
        /// The stream's id.
        stream: u64,
        /// Why.
        end: StreamEnd,
    },
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// It lagged (the `lagged` item before this says from which `seq` to subscribe again).
    Lagged,
    /// The client unsubscribed.
    Unsubscribed,
    /// The daemon ended it (shutting down).
    Closed,
}

/// Any line the daemon sends, as a client reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServerLine {
    /// The daemon's hello (its first line).
    Hello(ServerHello),
    /// A line of an open stream.
    Stream(StreamLine),
    /// A reply to a request.
    Reply(Reply),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{Envelope, HostErrorCode};
    use crate::events::{AppEvent, ControlMsg};

    #[test]
    fn a_placements_id_does_not_collide_with_the_requests() {
        let asked = Request {
            id: 9,
            op: Op::FleetPlacement {
                placement: "p0a1b".into(),
            },
        };
        let line = serde_json::to_string(&asked).unwrap();
        assert_eq!(
            line,
            r#"{"id":9,"op":"fleet_placement","placement":"p0a1b"}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), asked);
    }

    #[test]
    fn requests_on_the_wire() {
        let send = Request {
            id: 4,
            op: Op::Send {
                intent: SessionIntent {
                    session_id: "s1".into(),
                    msg: ControlMsg::Approve { id: 9 },
                },
            },
        };
        let line = serde_json::to_string(&send).unwrap();
        assert_eq!(
            line,
            r#"{"id":4,"op":"send","intent":{"session_id":"s1","action":"approve","id":9}}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), send);

        let sub: Request = serde_json::from_str(r#"{"id":2,"op":"subscribe","after":0}"#).unwrap();
        assert_eq!(
            sub.op,
            Op::Subscribe {
                session_id: None,
                after: Some(0)
            }
        );
        let bare: Request = serde_json::from_str(r#"{"id":1,"op":"sessions"}"#).unwrap();
        assert_eq!(
            bare.op,
            Op::Sessions {
                page: SessionsPage::ALL
            }
        );
        let page = Request {
            id: 5,
            op: Op::Sessions {
                page: SessionsPage::after(Some("20261205T000000Z-a".into())),
            },
        };
        let line = serde_json::to_string(&page).unwrap();
        assert_eq!(
            line,
            r#"{"id":5,"op":"sessions","after":"20261205T000000Z-a","limit":256}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), page);
        let newest = Request {
            id: 6,
            op: Op::Sessions {
                page: SessionsPage::newest(3),
            },
        };
        let line = serde_json::to_string(&newest).unwrap();
        assert_eq!(line, r#"{"id":6,"op":"sessions","limit":3,"last":true}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), newest);
        let failed_before = Request {
            id: 8,
            op: Op::SessionsCount {
                page: SessionsPage {
                    before: Some("20261205T000000Z-a".into()),
                    status: Some(crate::daemon::SessionStatus::Failed),
                    ..SessionsPage::ALL
                },
            },
        };
        let line = serde_json::to_string(&failed_before).unwrap();
        assert_eq!(
            line,
            r#"{"id":8,"op":"sessions_count","before":"20261205T000000Z-a","status":"failed"}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(&line).unwrap(),
            failed_before
        );
        // A client older than the fleet's pages asks for every member's whole list.
        let fleet: Request = serde_json::from_str(r#"{"id":7,"op":"fleet_sessions"}"#).unwrap();
        assert_eq!(
            fleet.op,
            Op::FleetSessions {
                page: SessionsPage::ALL
            }
        );
        let auto: Request =
            serde_json::from_str(r#"{"id":3,"op":"set_autonomy","level":"high"}"#).unwrap();
        assert_eq!(
            auto.op,
            Op::SetAutonomy {
                session_id: None,
                level: AutonomyLevel::High
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"id":1,"op":"launch"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"sessions"}"#).is_err());
    }

    #[test]
    fn server_lines_are_told_apart() {
        let ok = ServerLine::Reply(Reply {
            id: Some(1),
            outcome: Outcome::Ok(serde_json::json!({"stream": 1})),
        });
        let err = ServerLine::Reply(Reply {
            id: None,
            outcome: Outcome::Error(HostError::new(HostErrorCode::InvalidRequest, "bad line")),
        });
        let item = ServerLine::Stream(StreamLine::Item {
            stream: 1,
            item: StreamItem::Event(std::sync::Arc::new(Envelope {
                member: None,
                record_end: None,
                seq: 5,
                session_id: "s".into(),
                ts: "2026-12-01T10:00:00.000Z".into(),
                event: AppEvent::TurnStarted { turn: 1 },
            })),
        });
        let end = ServerLine::Stream(StreamLine::End {
            stream: 1,
            end: StreamEnd::Lagged,
        });
        let hello = ServerLine::Hello(ServerHello {
            hello: DAEMON_PROTOCOL_VERSION,
            server: "intendant 0.1.0".into(),
            pid: 7,
            home: "/h".into(),
            started_at: Some("2026-12-01T09:00:00.000Z".into()),
        });
        let lines: Vec<String> = [&ok, &err, &item, &end, &hello]
            .iter()
            .map(|l| serde_json::to_string(l).unwrap())
            .collect();
        assert_eq!(lines[0], r#"{"id":1,"ok":{"stream":1}}"#);
        assert_eq!(
            lines[1],
            r#"{"id":null,"error":{"code":"invalid_request","message":"bad line"}}"#
        );
        assert!(lines[2].starts_with(r#"{"stream":1,"item":{"kind":"event","seq":5,"#));
        assert_eq!(lines[3], r#"{"stream":1,"end":"lagged"}"#);
        for (line, want) in lines.iter().zip([ok, err, item, end, hello]) {
            assert_eq!(serde_json::from_str::<ServerLine>(line).unwrap(), want);
        }
        let client = serde_json::to_string(&ClientHello::new("t")).unwrap();
        assert_eq!(client, r#"{"hello":1,"client":"t"}"#);
    }
}

//! The owner's side of routed control: requests from other members answered by this daemon's
//! supervisor, and every event of this daemon's sessions published for their followers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_daemon::control_plane;
use intendant_fleet::Member;
use intendant_fleet::route::{
    ControlHandler, ControlOp, ControlRequest, MAX_APPROVALS, MAX_REPLAY_BYTES, Replayed, Surface,
};
use intendant_protocol::agenda::AGENDA_SESSION;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{HostError, HostErrorCode, StreamItem};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg};
use intendant_protocol::memory::MEMORY_SESSION;
use serde_json::Value;

/// The longest one replay reads the owner's record for.
const REPLAY_WAIT: Duration = Duration::from_secs(5);
/// The key of the MCP ceiling, as errors name it.
const MCP_CEILING: &str = "[mcp] max_autonomy";

/// What answers the control requests of other members: `host` (this daemon's supervisor),
/// with `home`'s `[mcp]` policy for what a model asked.
pub fn handler(host: Arc<dyn SessionHost>, home: PathBuf) -> ControlHandler {
    Arc::new(move |request| {
        let host = Arc::clone(&host);
        let home = home.clone();
        Box::pin(async move { handle(host.as_ref(), &home, request).await })
    })
}

async fn handle(
    host: &dyn SessionHost,
    home: &Path,
    request: ControlRequest,
) -> Result<Value, HostError> {
    if let Some(id) = pseudo_session(&request.op) {
        // Memory proposals and schedules are the owner's own, answered where they wait.
        return Err(HostError::new(
            HostErrorCode::Forbidden,
            format!("the {id} approvals of a member are answered at that member"),
        ));
    }
    if request.surface == Surface::Model {
        model_may(host, home, &request.op).await?;
    }
    let null = |()| Value::Null;
    match request.op {
        ControlOp::Send { intent } => {
            let sent = host.send(intent).await?;
            serde_json::to_value(sent).map_err(internal)
        }
        ControlOp::Interrupt { session_id } => host.interrupt(&session_id).await.map(null),
        ControlOp::Stop { session_id } => host.stop(&session_id).await.map(null),
        ControlOp::SetAutonomy { session_id, level } => {
            host.set_autonomy(Some(&session_id), level).await.map(null)
        }
        ControlOp::Approvals => {
            let mut pending = host.approvals().await?;
            pending.retain(|p| p.session_id != AGENDA_SESSION && p.session_id != MEMORY_SESSION);
            let newest = pending.len().saturating_sub(MAX_APPROVALS);
            pending.drain(..newest);
            serde_json::to_value(pending).map_err(internal)
        }
        ControlOp::Replay { session_id, after } => {
            let replayed = replay(host, &session_id, after).await?;
            serde_json::to_value(replayed).map_err(internal)
        }
    }
}

fn internal(e: serde_json::Error) -> HostError {
    HostError::new(HostErrorCode::Internal, e.to_string())
}

/// The pseudo-session an op names, if it names one.
fn pseudo_session(op: &ControlOp) -> Option<&'static str> {
    let id = match op {
        ControlOp::Send { intent } => intent.session_id.as_str(),
        ControlOp::Interrupt { session_id }
        | ControlOp::Stop { session_id }
        | ControlOp::SetAutonomy { session_id, .. }
        | ControlOp::Replay { session_id, .. } => session_id.as_str(),
        ControlOp::Approvals => return None,
    };
    [AGENDA_SESSION, MEMORY_SESSION]
        .into_iter()
        .find(|pseudo| *pseudo == id)
}

/// Refuses what this daemon's `[mcp]` policy does not let a model do, as its own MCP server
/// would: answering an approval or changing autonomy only with `allow_model_approvals`,
/// approving everything after or raising autonomy only within `[mcp] max_autonomy`, a proposed
/// memory or a host allowed for good (`allow_host`) never.
async fn model_may(host: &dyn SessionHost, home: &Path, op: &ControlOp) -> Result<(), HostError> {
    let policy = control_plane::mcp_policy(home)
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))?;
    let forbidden = |message: String| HostError::new(HostErrorCode::Forbidden, message);
    let needs_approvals = || {
        if policy.allow_model_approvals {
            Ok(())
        } else {
            Err(forbidden(
                "a model's answer (over MCP at another member): the owning member does not let \
                 a model answer approvals or change autonomy ([mcp] allow_model_approvals)"
                    .to_owned(),
            ))
        }
    };
    let ceiling = |level: AutonomyLevel| {
        control_plane::within_ceiling(level, policy.max_autonomy, MCP_CEILING).map_err(forbidden)
    };
    match op {
        ControlOp::Send { intent } => {
            let id = match intent.msg {
                ControlMsg::Approve { id } | ControlMsg::Deny { id } | ControlMsg::Skip { id } => {
                    id
                }
                ControlMsg::ApproveAll { id } => {
                    ceiling(AutonomyLevel::Full)?;
                    id
                }
                ControlMsg::AllowHost { .. } => {
                    // It writes a trusted setting (security 17): never a model's answer.
                    return Err(forbidden(
                        "allowing a host for good (the project's [sandbox.network] allow) is a \
                         human's decision, never a model's answer"
                            .to_owned(),
                    ));
                }
                ControlMsg::Input { .. } | ControlMsg::FollowUp { .. } => return Ok(()),
            };
            needs_approvals()?;
            let memory = host.approvals().await?.iter().any(|p| {
                p.session_id == intent.session_id
                    && p.id == id
                    && p.category == ActionCategory::Memory
            });
            if memory {
                return Err(forbidden(
                    "a proposed memory is approved only by a human, never by a model's answer"
                        .to_owned(),
                ));
            }
            Ok(())
        }
        ControlOp::SetAutonomy { level, .. } => {
            needs_approvals()?;
            ceiling(*level)
        }
        ControlOp::Interrupt { .. }
        | ControlOp::Stop { .. }
        | ControlOp::Approvals
        | ControlOp::Replay { .. } => Ok(()),
    }
}

/// The events of `session` after `after` as this daemon has them, up to where its record ended
/// when asked, at most [`MAX_REPLAY_BYTES`] of them.
async fn replay(host: &dyn SessionHost, session: &str, after: u64) -> Result<Replayed, HostError> {
    let mut stream = host.subscribe(Some(session), Some(after)).await?;
    let history_end = stream.history_end();
    let mut replayed = Replayed {
        events: Vec::new(),
        history_end,
        more: false,
    };
    if history_end <= after {
        return Ok(replayed);
    }
    let mut bytes = 0;
    let read = async {
        while let Some(item) = stream.next().await {
            let StreamItem::Event(event) = item else {
                // Fell behind its own queue: the asker asks again after what it got.
                replayed.more = true;
                break;
            };
            let seq = event.seq;
            bytes += event.json_bytes();
            if bytes > MAX_REPLAY_BYTES && !replayed.events.is_empty() {
                replayed.more = true;
                break;
            }
            replayed.events.push(Arc::unwrap_or_clone(event));
            if seq >= history_end {
                break;
            }
        }
    };
    if tokio::time::timeout(REPLAY_WAIT, read).await.is_err() {
        replayed.more = true;
    }
    Ok(replayed)
}

/// Publishes every event of this daemon's sessions for followers on other members, each with
/// the `seq` of its session's event before it, for as long as the daemon runs. A subscription
/// that fell behind is taken up again after its last event (from the record: deltas older than
/// the ring are not there, as for any replay).
pub async fn publish_events(member: Arc<Member>, host: Arc<dyn SessionHost>) {
    let mut prev: HashMap<String, u64> = HashMap::new();
    let mut after: Option<u64> = None;
    loop {
        let Ok(mut stream) = host.subscribe(None, after).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        while let Some(item) = stream.next().await {
            match item {
                StreamItem::Event(event) => {
                    after = Some(event.seq);
                    let before = if matches!(event.event, AppEvent::SessionEnded { .. }) {
                        prev.remove(&event.session_id)
                    } else {
                        prev.insert(event.session_id.clone(), event.seq)
                    };
                    // With the server away the event is not kept: a follower fills the gap
                    // from this daemon's record once it sees the next.
                    let _ = member
                        .publish_event(before.unwrap_or(0), Arc::unwrap_or_clone(event))
                        .await;
                }
                StreamItem::Lagged { next_seq } => {
                    after = Some(next_seq.saturating_sub(1));
                    break;
                }
            }
        }
        // The stream ended (the daemon shutting down, or fell behind): take it up again.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_core::host::double::HostDouble;
    use intendant_protocol::daemon::SessionIntent;

    fn asked(surface: Surface, msg: ControlMsg) -> ControlRequest {
        ControlRequest {
            id: format!("alpha-{surface:?}-{msg:?}"),
            from: "alpha".into(),
            surface,
            op: ControlOp::Send {
                intent: SessionIntent {
                    session_id: "s1".into(),
                    msg,
                },
            },
        }
    }

    #[tokio::test]
    async fn a_models_answer_from_another_member_is_held_to_this_members_mcp_policy() {
        let home = tempfile::tempdir().unwrap();
        let double = HostDouble::new();
        let start = serde_json::from_value(serde_json::json!({"task": "t", "project": "/p"}));
        assert_eq!(double.start(start.unwrap()).await.unwrap().id, "s1");
        double.ask_approval("s1", 1);
        double.ask_approval_of("s1", 2, ActionCategory::Memory);
        let host: &dyn SessionHost = double.as_ref();

        // No [mcp] allow_model_approvals: a model's answer is refused, a human's goes through.
        let approve = |surface| asked(surface, ControlMsg::Approve { id: 1 });
        let refused = handle(host, home.path(), approve(Surface::Model)).await;
        assert_eq!(refused.unwrap_err().code, HostErrorCode::Forbidden);
        assert!(double.intents().is_empty(), "nothing was sent");
        handle(host, home.path(), approve(Surface::Human))
            .await
            .unwrap();
        assert_eq!(double.intents().len(), 1);
        // A model's follow-up needs no approval right.
        let follow = asked(Surface::Model, ControlMsg::FollowUp { text: "go".into() });
        handle(host, home.path(), follow).await.unwrap();
        assert_eq!(double.intents().len(), 2);

        // Allowed, but within [mcp] max_autonomy (high): approve-all is "full", refused; a
        // proposed memory never, whatever the policy.
        std::fs::write(
            home.path().join("intendant.toml"),
            "[mcp]\nallow_model_approvals = true\n",
        )
        .unwrap();
        let all = asked(Surface::Model, ControlMsg::ApproveAll { id: 1 });
        let refused = handle(host, home.path(), all).await.unwrap_err();
        assert_eq!(refused.code, HostErrorCode::Forbidden);
        assert!(
            refused.message.contains("[mcp] max_autonomy"),
            "{refused:?}"
        );
        let memory = asked(Surface::Model, ControlMsg::Approve { id: 2 });
        let refused = handle(host, home.path(), memory).await.unwrap_err();
        assert!(refused.message.contains("memory"), "{refused:?}");
        let raise = ControlRequest {
            id: "alpha-raise".into(),
            from: "alpha".into(),
            surface: Surface::Model,
            op: ControlOp::SetAutonomy {
                session_id: "s1".into(),
                level: AutonomyLevel::Full,
            },
        };
        let refused = handle(host, home.path(), raise).await.unwrap_err();
        assert_eq!(refused.code, HostErrorCode::Forbidden);
        assert_eq!(double.intents().len(), 2, "none of these was sent");

        // The owner's own pseudo-sessions are never answered from another member.
        let mut schedule = asked(Surface::Human, ControlMsg::Approve { id: 1 });
        if let ControlOp::Send { intent } = &mut schedule.op {
            intent.session_id = AGENDA_SESSION.into();
        }
        let refused = handle(host, home.path(), schedule).await.unwrap_err();
        assert_eq!(refused.code, HostErrorCode::Forbidden);
    }

    #[test]
    fn pseudo_sessions_are_named_and_sessions_are_not() {
        let send = |id: &str| ControlOp::Send {
            intent: SessionIntent {
                session_id: id.into(),
                msg: ControlMsg::Approve { id: 1 },
            },
        };
        assert_eq!(pseudo_session(&send("memory")), Some("memory"));
        assert_eq!(
            pseudo_session(&ControlOp::Stop {
                session_id: "agenda".into()
            }),
            Some("agenda")
        );
        assert_eq!(pseudo_session(&send("20261203-1a2b")), None);
        assert_eq!(pseudo_session(&ControlOp::Approvals), None);
    }
}

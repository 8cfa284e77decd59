//! Approvals offered as elicitations: while a session a client started runs, each approval it
//! asks for is put to that client as a form (approve / deny / skip / approve_all, and at a
//! `network` approval allow_host, the host for good: the person's answer), when the client
//! declared form elicitation. The tools answer the same approvals; whichever answers
//! first wins, and the other finds it already answered.

use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_protocol::daemon::{HostErrorCode, SessionIntent, StreamItem};
use intendant_protocol::events::{ActionCategory, AppEvent};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, EnumSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};

use super::args::Decision;
use super::redact::Redactor;

/// How long an elicitation waits for the person before it is withdrawn (the approval stays
/// pending for the tools).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether `peer` takes form elicitations.
pub fn supported(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
}

/// Offers every approval session `id` asks for to `peer`, until the session ends or the peer
/// goes away.
pub async fn offer_approvals(
    host: Arc<dyn SessionHost>,
    peer: Peer<RoleServer>,
    id: String,
    redactor: Redactor,
) {
    let Ok(mut stream) = host.subscribe(Some(&id), Some(0)).await else {
        return;
    };
    while let Some(item) = stream.next().await {
        let env = match item {
            StreamItem::Event(env) => env,
            StreamItem::Lagged { next_seq } => {
                match host
                    .subscribe(Some(&id), Some(next_seq.saturating_sub(1)))
                    .await
                {
                    Ok(s) => stream = s,
                    Err(_) => return,
                }
                continue;
            }
        };
        if let AppEvent::SessionEnded { .. } = env.event {
            return;
        }
        if let AppEvent::ApprovalRequired {
            id: approval,
            command_preview,
            detail,
            category,
            ..
        } = &env.event
        {
            let (approval, category) = (*approval, *category);
            let mut message = format!("Intendant session {id} asks to run:\n{command_preview}");
            if let Some(detail) = detail {
                message.push_str(&format!("\n\n{detail}"));
            }
            let network = category == ActionCategory::Network;
            let Some(decision) = ask(&peer, redactor.text(&message), network).await else {
                if peer.is_transport_closed() {
                    return;
                }
                continue;
            };
            let sent = host
                .send(SessionIntent {
                    session_id: id.clone(),
                    msg: decision.intent(approval),
                })
                .await;
            match sent {
                Ok(_) => {}
                Err(e) if e.code == HostErrorCode::AlreadyAnswered => {}
                Err(_) => return,
            }
        }
    }
}

/// Asks `peer` (`network`: about a connection, so allow_host is offered too); `None` when the
/// person cancelled, the client failed or time ran out.
async fn ask(peer: &Peer<RoleServer>, message: String, network: bool) -> Option<Decision> {
    let mut choices = vec!["approve", "deny", "skip", "approve_all"];
    let mut description = "approve, deny (stops the task), skip, or approve_all (this and every later command of the session)";
    if network {
        choices.push("allow_host");
        description = "approve (this connection), deny (stops the task), skip, approve_all (the host for this session), or allow_host (the host for good: added to the project's [sandbox.network] allow)";
    }
    let schema = ElicitationSchema::builder()
        .required_enum_schema(
            "decision",
            EnumSchema::builder(choices.into_iter().map(str::to_owned).collect())
                .description(description)
                .build(),
        )
        .build()
        .ok()?;
    let answer = peer
        .create_elicitation_with_timeout(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            },
            Some(ANSWER_TIMEOUT),
        )
        .await
        .ok()?;
    match answer.action {
        ElicitationAction::Accept => {
            let decision = answer.content?.get("decision")?.clone();
            // Only what was offered: allow_host answers a network approval only.
            serde_json::from_value(decision)
                .ok()
                .filter(|d| network || !matches!(d, Decision::AllowHost))
        }
        ElicitationAction::Decline => Some(Decision::Deny),
        // Cancel, and whatever later protocol versions add: the approval stays pending.
        _ => None,
    }
}

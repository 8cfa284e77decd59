//! Session resources: `intendant://session/ID` (the transcript as text, with the status on
//! top) and `intendant://session/ID/status` (the session summary as JSON), the daemon's agenda
//! `intendant://agenda` (its entries as JSON), and the watchers that send
//! `notifications/resources/updated` for a subscribed one while its session runs (for the
//! agenda: at each agenda event, a due reminder or a schedule started, missed or failed).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_protocol::daemon::{Envelope, HostError, HostErrorCode, SessionSummary, StreamItem};
use intendant_protocol::events::AppEvent;
use rmcp::model::{Resource, ResourceTemplate, ResourceUpdatedNotificationParam};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::follow;

/// The scheme and prefix of every session resource.
pub const PREFIX: &str = "intendant://session/";
/// The agenda's resource.
pub const AGENDA_URI: &str = "intendant://agenda";
/// Bytes of a transcript, at most: past it the oldest events are left out.
pub const MAX_TRANSCRIPT_BYTES: usize = 256 * 1024;
/// Updates of one resource are sent at most this often.
const UPDATE_INTERVAL: Duration = Duration::from_millis(250);

/// What a session resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionResource {
    /// The transcript.
    Transcript(String),
    /// The summary.
    Status(String),
    /// The daemon's agenda (its events are filed under the pseudo-session `agenda`).
    Agenda,
}

impl SessionResource {
    /// Parses `uri`; `None` when it names no session resource.
    pub fn parse(uri: &str) -> Option<SessionResource> {
        if uri == AGENDA_URI {
            return Some(SessionResource::Agenda);
        }
        let rest = uri.strip_prefix(PREFIX)?;
        let (id, status) = match rest.strip_suffix("/status") {
            Some(id) => (id, true),
            None => (rest, false),
        };
        if id.is_empty() || id.contains('/') {
            return None;
        }
        Some(if status {
            SessionResource::Status(id.to_owned())
        } else {
            SessionResource::Transcript(id.to_owned())
        })
    }

    /// The session id.
    pub fn session(&self) -> &str {
        match self {
            SessionResource::Transcript(id) | SessionResource::Status(id) => id,
            SessionResource::Agenda => intendant_protocol::agenda::AGENDA_SESSION,
        }
    }
}

/// The two resources of `session`.
pub fn listed(session: &SessionSummary) -> [Resource; 2] {
    let short: String = session.task.chars().take(60).collect();
    [
        Resource::new(
            format!("{PREFIX}{}", session.id),
            format!("session {}", session.id),
        )
        .with_description(format!(
            "Transcript of \"{short}\" ({})",
            session.status.name()
        ))
        .with_mime_type("text/plain"),
        Resource::new(
            format!("{PREFIX}{}/status", session.id),
            format!("session {} status", session.id),
        )
        .with_description(format!("Status of \"{short}\""))
        .with_mime_type("application/json"),
    ]
}

/// The agenda's resource.
pub fn agenda_listed() -> Resource {
    Resource::new(AGENDA_URI, "agenda")
        .with_description(
            "The daemon's agenda: work items with reminders and scheduled sessions (subscribe: \
             an update at each due reminder, and each schedule started, missed or failed)",
        )
        .with_mime_type("application/json")
}

/// The agenda's entries as JSON text.
pub async fn agenda_text(host: &dyn SessionHost) -> Result<String, HostError> {
    let entries = host
        .agenda(intendant_protocol::agenda::AgendaOp::List)
        .await?;
    serde_json::to_string_pretty(&entries)
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))
}

/// The URI templates of session resources.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}"), "session transcript")
            .with_mime_type("text/plain"),
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}/status"), "session status")
            .with_mime_type("application/json"),
    ]
}

/// The summary of `session` as JSON text.
pub async fn status_text(host: &dyn SessionHost, id: &str) -> Result<String, HostError> {
    let session = host.session(id).await?;
    serde_json::to_string_pretty(&session)
        .map_err(|e| HostError::new(HostErrorCode::Internal, e.to_string()))
}

/// The transcript of session `id`: a status line, then one entry per lifecycle event; the
/// oldest entries are left out past [`MAX_TRANSCRIPT_BYTES`].
pub async fn transcript_text(host: &dyn SessionHost, id: &str) -> Result<String, HostError> {
    let session = host.session(id).await?;
    let mut page = follow::page(host, id, 0, crate::mcp::args::MAX_EVENTS).await?;
    // The daemon's history of a session another process records (relayed from its log, each
    // event with its `record_end`) is what its ring holds of the run going on, and the runs a
    // one-shot process recorded before a resume through the daemon have no `seq`; the record
    // has every run of it. So the record is read when that history begins otherwise than with
    // the session's first start (`Envelope::begins_session`), or is empty for a session
    // another process runs or ran (it ended before the daemon saw it run).
    let from_record = match page.events.first() {
        Some(first) => serde_json::from_value::<Envelope>(first.clone())
            .map_or(true, |head| !head.begins_session()),
        None => session.status.is_finished() || session.run_by.is_some(),
    };
    let mut entries = if from_record {
        recorded_entries(host, id).await
    } else {
        Vec::new()
    };
    if entries.is_empty() {
        let mut after = 0;
        loop {
            entries.extend(page.events.iter().map(render));
            let more = page.more && page.next_after_seq > after;
            after = page.next_after_seq;
            if !more {
                break;
            }
            page = follow::page(host, id, after, crate::mcp::args::MAX_EVENTS).await?;
        }
    }
    let mut text = format!(
        "session {} · {} · {} ({}) · project {}\ntask: {}\ntokens: {} in, {} out · ${:.4}\n\n",
        session.id,
        session.status.name(),
        session.model,
        session.provider,
        session.project,
        session.task,
        session.input_tokens,
        session.output_tokens,
        session.cost_usd,
    );
    let mut total: usize = entries.iter().map(|e| e.len()).sum();
    let mut skip = 0;
    while total > MAX_TRANSCRIPT_BYTES && skip < entries.len() {
        total -= entries[skip].len();
        skip += 1;
    }
    if skip > 0 {
        let _ = writeln!(text, "… {skip} earlier events left out\n");
    }
    for entry in &entries[skip..] {
        text.push_str(entry);
    }
    if let Some(final_text) = &session.final_text {
        let _ = writeln!(text, "\nfinal: {final_text}");
    }
    Ok(text)
}

/// The entries of a session a one-shot run recorded, read from its record itself: for one
/// none of whose events went through the daemon (it ended before the daemon saw it run), or
/// whose start the daemon's ring no longer holds. None when this host has no record of it to
/// read (another member's session).
async fn recorded_entries(host: &dyn SessionHost, id: &str) -> Vec<String> {
    let Ok(dir) = host.log_dir(id).await else {
        return Vec::new();
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut entries = Vec::new();
        intendant_core::session_log::each_record(
            &dir,
            intendant_core::session_log::RECORD_READ_BYTES,
            |logged| entries.push(entry(logged.record.seq, logged.record.event)),
        )
        .map(|_| entries)
    });
    read.await.ok().and_then(Result::ok).unwrap_or_default()
}

/// One event (a bounded envelope as JSON) as a transcript entry: `#SEQ EVENT` (`- EVENT` for
/// a record no daemon numbered).
fn render(envelope: &Value) -> String {
    match serde_json::from_value(envelope["event"].clone()) {
        Ok(event) => entry(envelope["seq"].as_u64(), event),
        Err(_) => {
            let name = envelope["event"]["type"].as_str().unwrap_or("event");
            format!("{} {name}\n", seq_mark(envelope["seq"].as_u64()))
        }
    }
}

/// How an entry is numbered: `#SEQ`, or `-` for a record no daemon numbered.
fn seq_mark(seq: Option<u64>) -> String {
    seq.map_or_else(|| "-".to_owned(), |seq| format!("#{seq}"))
}

/// One event, numbered `seq`, as a transcript entry.
fn entry(seq: Option<u64>, event: AppEvent) -> String {
    let body = match event {
        AppEvent::ModelResponse { turn, text, .. } if !text.is_empty() => {
            format!("[turn {turn}] model: {text}")
        }
        AppEvent::ToolCall {
            name, arguments, ..
        } => format!("tool {name} {arguments}"),
        AppEvent::AgentOutput { name, output, .. } => format!("{name} → {output}"),
        AppEvent::ApprovalRequired {
            id,
            command_preview,
            ..
        } => format!("approval #{id} needed: {command_preview}"),
        AppEvent::ApprovalResolved { id, verdict } => {
            format!(
                "approval #{id}: {}",
                serde_json::to_string(&verdict).unwrap_or_default()
            )
        }
        AppEvent::HumanQuestion { id, question } => format!("question #{id}: {question}"),
        AppEvent::HumanAnswer { id, text } => format!("answer #{id}: {text}"),
        AppEvent::FollowUpHeld { text } => format!("follow-up held: {text}"),
        AppEvent::Done { message } => format!("done: {message}"),
        AppEvent::Error { message } => format!("error: {message}"),
        AppEvent::SessionEnded { status, reason, .. } => format!(
            "session ended {}: {reason}",
            serde_json::to_string(&status).unwrap_or_default()
        ),
        AppEvent::ControlCommand(msg) => {
            format!("intent {}", serde_json::to_string(&msg).unwrap_or_default())
        }
        other => other.name().to_owned(),
    };
    format!("{} {body}\n", seq_mark(seq))
}

/// The watchers of one client's subscribed resources.
#[derive(Default)]
pub struct Watchers {
    running: Mutex<HashMap<String, JoinHandle<()>>>,
}

impl Drop for Watchers {
    fn drop(&mut self) {
        if let Ok(running) = self.running.lock() {
            running.values().for_each(JoinHandle::abort);
        }
    }
}

impl Watchers {
    /// Starts notifying `peer` of changes to `uri` (of a session the host knows); a second
    /// subscription to the same URI keeps the first.
    pub async fn subscribe(
        &self,
        host: Arc<dyn SessionHost>,
        peer: Peer<RoleServer>,
        uri: String,
        resource: SessionResource,
    ) -> Result<(), HostError> {
        let id = resource.session().to_owned();
        match resource {
            SessionResource::Agenda => drop(
                host.agenda(intendant_protocol::agenda::AgendaOp::List)
                    .await?,
            ),
            SessionResource::Transcript(_) | SessionResource::Status(_) => {
                drop(host.session(&id).await?)
            }
        }
        let mut stream = host.subscribe(Some(&id), None).await?;
        // Only a session's own resource ends with it (the agenda never ends).
        let endless = matches!(resource, SessionResource::Agenda);
        let mut running = self
            .running
            .lock()
            .map_err(|_| HostError::new(HostErrorCode::Internal, "watcher table poisoned"))?;
        if running.get(&uri).is_some_and(|h| !h.is_finished()) {
            return Ok(());
        }
        let key = uri.clone();
        let task = tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                let ended = match &item {
                    StreamItem::Event(env) => matches!(env.event, AppEvent::SessionEnded { .. }),
                    StreamItem::Lagged { .. } => false,
                };
                if let StreamItem::Event(env) = &item
                    && matches!(env.event, AppEvent::ModelResponseDelta { .. })
                {
                    continue;
                }
                if peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                    .await
                    .is_err()
                {
                    return;
                }
                if ended {
                    return;
                }
                tokio::time::sleep(UPDATE_INTERVAL).await;
                // Everything that came meanwhile is covered by the one notification sent.
                loop {
                    match tokio::time::timeout(Duration::ZERO, stream.next()).await {
                        Ok(Some(StreamItem::Event(env)))
                            if !endless && matches!(env.event, AppEvent::SessionEnded { .. }) =>
                        {
                            let _ = peer
                                .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                                    uri.clone(),
                                ))
                                .await;
                            return;
                        }
                        Ok(Some(_)) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
            }
        });
        running.insert(key, task);
        Ok(())
    }

    /// Stops notifying about `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        if let Ok(mut running) = self.running.lock()
            && let Some(task) = running.remove(uri)
        {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse() {
        assert_eq!(
            SessionResource::parse("intendant://session/abc"),
            Some(SessionResource::Transcript("abc".into()))
        );
        assert_eq!(
            SessionResource::parse("intendant://session/abc/status"),
            Some(SessionResource::Status("abc".into()))
        );
        for bad in [
            "intendant://session/",
            "intendant://other/abc",
            "intendant://session/a/b",
        ] {
            assert_eq!(SessionResource::parse(bad), None, "{bad}");
        }
    }
}

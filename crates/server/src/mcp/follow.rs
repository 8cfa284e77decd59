//! Following a session through [`SessionHost::subscribe`] within a bounded time: waiting for a
//! round to end (`run_task` and `send_message` with `wait_s`), and reading one bounded page of
//! its events (`get_session`).
//!
//! A page reads the stream's replay up to its `history_end` (what had happened when it was
//! asked for), never the live tail, so it returns at once; [`PAGE_BUDGET`] bounds it anyway.

use std::time::Duration;

use intendant_core::host::{EventStream, SessionHost};
use intendant_protocol::daemon::{Envelope, HostError, StreamItem};
use intendant_protocol::events::{AppEvent, ControlMsg};
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

/// The longest one page is read.
pub const PAGE_BUDGET: Duration = Duration::from_secs(3);
/// Bytes of one string inside an event kept in a page; the rest is cut with a note.
pub const MAX_STRING_BYTES: usize = 4096;
/// Bytes of one page of events (serialized), at most.
pub const MAX_PAGE_BYTES: usize = 64 * 1024;

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// A round ended; the session waits for a follow-up.
    RoundComplete,
    /// The session ended.
    SessionEnded,
    /// The session waits for a human (an approval or a question).
    NeedsHuman,
    /// The wait ran out first.
    Timeout,
}

impl WaitEnd {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            WaitEnd::RoundComplete => "round_complete",
            WaitEnd::SessionEnded => "session_ended",
            WaitEnd::NeedsHuman => "needs_human",
            WaitEnd::Timeout => "timeout",
        }
    }
}

/// What a wait saw.
#[derive(Debug, Clone)]
pub struct WaitOutcome {
    /// Why it ended.
    pub end: WaitEnd,
    /// The last `done` message seen, if any.
    pub done_message: Option<String>,
}

/// A follow-up a wait is for, sent after the stream was subscribed: its round is the first
/// that begins after it reached the session (a turn, or a round's end, after a round's end; a
/// run's first round takes its task), so a round already going when it was sent is not it.
#[derive(Debug, Clone, Copy)]
pub struct SentFollowUp<'a> {
    /// Its text (a follow-up held with others reaches the session joined with them).
    pub text: &'a str,
    /// A round went on when it was sent, as the daemon said where it went
    /// ([`Sent::after_a_round`](intendant_protocol::daemon::Sent::after_a_round)): the round
    /// that takes it begins after that one's end.
    pub in_round: bool,
}

/// Reads `stream` (of session `id`) until a round ends (with `sent`, the round that took that
/// follow-up), the session ends or needs a human, or `deadline` passes. A lagging stream is
/// re-subscribed from where it lagged.
pub async fn wait_for_round(
    host: &dyn SessionHost,
    id: &str,
    mut stream: EventStream,
    deadline: Instant,
    sent: Option<SentFollowUp<'_>>,
) -> Result<WaitOutcome, HostError> {
    let mut watch = RoundWatch::new(sent);
    loop {
        let item = match timeout_at(deadline, stream.next()).await {
            Err(_) => return Ok(watch.outcome(WaitEnd::Timeout)),
            // The host ended the stream (shutdown): what the session is now says the rest.
            Ok(None) => return Ok(watch.outcome(WaitEnd::SessionEnded)),
            Ok(Some(item)) => item,
        };
        let env = match item {
            StreamItem::Event(env) => env,
            StreamItem::Lagged { next_seq } => {
                stream = host
                    .subscribe(Some(id), Some(next_seq.saturating_sub(1)))
                    .await?;
                continue;
            }
        };
        if let Some(end) = watch.read(&env.event) {
            return Ok(watch.outcome(end));
        }
    }
}

/// What [`wait_for_round`] has seen of a session's rounds.
struct RoundWatch<'a> {
    sent: Option<SentFollowUp<'a>>,
    /// The last `done` message (or refusal) of the round awaited.
    done_message: Option<String>,
    /// The round awaited began (any round, without `sent`).
    began: bool,
    /// A round has ended with none begun since.
    between: bool,
    /// The follow-up reached the session (its text in a control command on the stream; any
    /// round counts without `sent`).
    reached: bool,
}

impl<'a> RoundWatch<'a> {
    fn new(sent: Option<SentFollowUp<'a>>) -> RoundWatch<'a> {
        RoundWatch {
            sent,
            done_message: None,
            began: sent.is_none(),
            between: sent.is_none_or(|s| !s.in_round),
            // A round that ends before it reached the session (one that ended between the
            // subscribing and the sending) is not its.
            reached: sent.is_none(),
        }
    }

    fn outcome(&mut self, end: WaitEnd) -> WaitOutcome {
        WaitOutcome {
            end,
            done_message: self.done_message.take(),
        }
    }

    /// Reads one event; why the wait ends, if it does.
    fn read(&mut self, event: &AppEvent) -> Option<WaitEnd> {
        match event {
            // A refusal is the round's last word, as a done message would be.
            AppEvent::Done { message } | AppEvent::Refusal { text: message, .. } => {
                self.done_message = Some(message.clone());
                None
            }
            AppEvent::RoundComplete { .. } if self.began || (self.between && self.reached) => {
                Some(WaitEnd::RoundComplete)
            }
            AppEvent::RoundComplete { .. } => {
                self.between = true;
                None
            }
            AppEvent::TurnStarted { .. } => {
                if self.between && self.reached && !self.began {
                    self.began = true;
                    // What the rounds before it said is not its answer.
                    self.done_message = None;
                }
                self.between = false;
                None
            }
            AppEvent::SessionStarted { .. } => {
                self.between = false;
                None
            }
            AppEvent::ControlCommand(ControlMsg::FollowUp { text })
                if self.sent.is_some_and(|s| text.contains(s.text)) =>
            {
                self.reached = true;
                None
            }
            AppEvent::SessionEnded { .. } => Some(WaitEnd::SessionEnded),
            AppEvent::ApprovalRequired { .. } | AppEvent::HumanQuestion { .. } => {
                Some(WaitEnd::NeedsHuman)
            }
            AppEvent::ModelResponseDelta { .. }
            | AppEvent::ModelResponse { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolCall { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::ToolBatchResult { .. }
            | AppEvent::ApprovalResolved { .. }
            | AppEvent::HumanAnswer { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Usage { .. }
            | AppEvent::Error { .. }
            | AppEvent::Warning { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::AutonomyChanged { .. }
            | AppEvent::Egress { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. }
            | AppEvent::ControlCommand(_) => None,
        }
    }
}

/// One page of a session's events.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    /// The envelopes (`{seq, session_id, ts, event}`), streamed deltas left out, long strings
    /// cut.
    pub events: Vec<Value>,
    /// Pass as `after_seq` to read on.
    pub next_after_seq: u64,
    /// Whether the page ended because it was full (more events are ready).
    pub more: bool,
}

/// Reads the events of session `id` after `after` that had happened when it was called: at
/// most `max` of them and [`MAX_PAGE_BYTES`], within [`PAGE_BUDGET`].
pub async fn page(
    host: &dyn SessionHost,
    id: &str,
    after: u64,
    max: usize,
) -> Result<EventPage, HostError> {
    let mut stream = host.subscribe(Some(id), Some(after)).await?;
    let end = stream.history_end();
    let budget = Instant::now() + PAGE_BUDGET;
    let mut page = EventPage {
        events: Vec::new(),
        next_after_seq: after,
        more: false,
    };
    let mut bytes = 0usize;
    while page.next_after_seq < end {
        let env = match timeout_at(budget, stream.next()).await {
            Err(_) | Ok(None) => break,
            Ok(Some(StreamItem::Event(env))) => env,
            Ok(Some(StreamItem::Lagged { next_seq })) => {
                stream = host
                    .subscribe(Some(id), Some(next_seq.saturating_sub(1)))
                    .await?;
                continue;
            }
        };
        if matches!(env.event, AppEvent::ModelResponseDelta { .. }) {
            page.next_after_seq = env.seq;
            continue;
        }
        let value = bounded_envelope(&env);
        let size = value.to_string().len();
        if page.events.len() >= max || (bytes + size > MAX_PAGE_BYTES && !page.events.is_empty()) {
            page.more = true;
            break;
        }
        bytes += size;
        page.next_after_seq = env.seq;
        page.events.push(value);
    }
    Ok(page)
}

/// The envelope as JSON with every string longer than [`MAX_STRING_BYTES`] cut.
fn bounded_envelope(env: &Envelope) -> Value {
    let mut value = serde_json::to_value(env).unwrap_or(Value::Null);
    cut_strings(&mut value);
    value
}

fn cut_strings(value: &mut Value) {
    match value {
        Value::String(text) if text.len() > MAX_STRING_BYTES => {
            let mut end = MAX_STRING_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let rest = text.len() - end;
            text.truncate(end);
            text.push_str(&format!("… {rest} more bytes"));
        }
        Value::Array(items) => items.iter_mut().for_each(cut_strings),
        Value::Object(map) => map.values_mut().for_each(cut_strings),
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use intendant_protocol::daemon::Sent;
    use intendant_protocol::events::RoundEnd;

    use super::*;

    /// Where a watch for "the message", put where `sent` says, ends on `events`: its end and
    /// the answer it read.
    fn watched(sent: Sent, events: &[AppEvent]) -> Option<(WaitEnd, Option<String>)> {
        let mut watch = RoundWatch::new(Some(SentFollowUp {
            text: "the message",
            in_round: sent.after_a_round(),
        }));
        events.iter().find_map(|event| {
            let end = watch.read(event)?;
            Some((end, watch.outcome(end).done_message))
        })
    }

    /// A wait that ended with the round that answered.
    fn answered() -> Option<(WaitEnd, Option<String>)> {
        Some((WaitEnd::RoundComplete, Some("the answer".to_owned())))
    }

    fn done(message: &str) -> AppEvent {
        AppEvent::Done {
            message: message.to_owned(),
        }
    }

    fn round_complete() -> AppEvent {
        AppEvent::RoundComplete {
            round: 1,
            turns: 1,
            reason: RoundEnd::Done,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
        }
    }

    fn reached(text: &str) -> AppEvent {
        AppEvent::ControlCommand(ControlMsg::FollowUp {
            text: text.to_owned(),
        })
    }

    /// Subscribed while a round worked, which ended before the message was sent: the daemon
    /// put the message in a round of its own (`now`), and the round that ended first is not
    /// its answer. Asked by the session's status before sending, the wait had taken it for the
    /// message's round when the status said idle, and waited out its time when it said working.
    #[test]
    fn a_round_that_ended_before_the_message_reached_the_session_is_not_its_answer() {
        let events = [
            done("the round before"),
            round_complete(),
            reached("the message"),
            AppEvent::TurnStarted { turn: 2 },
            done("the answer"),
            round_complete(),
        ];
        assert_eq!(watched(Sent::Now, &events), answered());
    }

    /// Sent during a round (`after_round`, or `after_queued_round`: here a round whose approvals
    /// were answered, waiting for a slot, which the message reaches when the round goes on): the
    /// wait goes past that round's turns and end to the next round. Told `queued`, as the
    /// session was listed, the wait took the round's next turn for the message's round.
    #[test]
    fn a_message_sent_during_a_round_is_answered_by_the_next() {
        let events = [
            reached("the message"),
            AppEvent::TurnStarted { turn: 2 },
            done("the round going on"),
            round_complete(),
            AppEvent::TurnStarted { turn: 3 },
            done("the answer"),
            round_complete(),
        ];
        assert_eq!(watched(Sent::AfterQueuedRound, &events), answered());
    }

    #[test]
    fn long_strings_are_cut_on_a_char_boundary() {
        let mut value = serde_json::json!({"a": ["é".repeat(MAX_STRING_BYTES), "short"]});
        cut_strings(&mut value);
        let cut = value["a"][0].as_str().unwrap();
        assert!(cut.len() < MAX_STRING_BYTES + 40, "{}", cut.len());
        assert!(cut.ends_with(&format!("… {} more bytes", MAX_STRING_BYTES)));
        assert_eq!(value["a"][1], "short");
    }
}

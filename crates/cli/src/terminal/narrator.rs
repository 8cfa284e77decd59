//! How the events of one session read, in order. The live terminal and `intendant sessions
//! show` put every event through a [`Narrator`], so an event reads the same wherever it is
//! shown. The terminal adds only what a live view has around those lines (the streamed model
//! text, the progress line, the approval card and its prompts) and leaves out what its own
//! user just typed.
//!
//! A narrator keeps what a line needs from earlier events: the arguments of a call whose result
//! is to come, when the batch and the round started, the session's token and cost totals, and
//! the done message, which is said after the round's summary.

use std::collections::HashMap;
use std::time::Duration;

use intendant_core::preview::{escape_invisible, is_invisible};
use intendant_core::usage::reported_usage;
use intendant_protocol::agenda::AgendaNotice;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::{AppEvent, ControlMsg, EgressVerdict, EndStatus, McpServerState};
use intendant_protocol::hooks::HookVerdict;
use intendant_protocol::utc::UtcTime;
use intendant_providers::Usage;
use serde_json::Value;

use super::render::{Rendered, ToolView};
use super::style::{Tone, clip_width};
use super::units::{compact_count, human_duration, plural};

/// Indent of a stop reason under the closing line.
const REASON_INDENT: &str = "  why: ";
/// Characters of a done message shown.
const DONE_CHARS: usize = 500;
/// Indent of a multi-line text's continuation lines.
const CONTINUATION: &str = "\n          ";

/// How much of the long things to show; the rest of what is shown is the [`ToolView`]'s.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Lines of reasoning shown, or all of it.
    pub reasoning_lines: Option<usize>,
    /// Characters shown of a result no view interprets: its whole text up to this many, or
    /// only its first line, clipped to the width.
    pub text_chars: Option<usize>,
}

/// Words the events of one session, in order (see the module doc).
#[derive(Debug)]
pub struct Narrator {
    tools: ToolView,
    limits: Limits,
    /// The arguments of each call whose result is still to come, by call id.
    calls: HashMap<String, Value>,
    /// When the session, the current round and the current batch started (milliseconds since
    /// the epoch).
    started_at: Option<i64>,
    round_at: Option<i64>,
    batch_at: Option<i64>,
    usage: Usage,
    cost_usd: f64,
    /// The done message, said after the round's summary.
    pending_done: Option<String>,
    /// Whether the sandbox's second-layer warning was said (once per session is enough).
    sandbox_warned: bool,
    /// The session narrated; an approval of another one is a sub-agent's.
    session: Option<String>,
    /// Hosts the egress proxy decided about, with the verdict said: one line per new host
    /// (and again when its verdict changes), not one per connection.
    hosts: std::collections::HashSet<(String, EgressVerdict)>,
    /// A round works, or the run has not begun its first (it waits for a slot; a run's first
    /// round takes its task): a follow-up sent now is taken when that round ends.
    in_round: bool,
}

/// Milliseconds since the epoch of `time`, the clock a narrator reads.
pub fn epoch_millis(time: UtcTime) -> i64 {
    time.unix_seconds() * 1000 + i64::from(time.millis)
}

/// The time from `from` to `to`, when both are known and in order.
fn between(from: Option<i64>, to: Option<i64>) -> Option<Duration> {
    match (from, to) {
        (Some(from), Some(to)) => u64::try_from(to - from).ok().map(Duration::from_millis),
        (Some(_) | None, _) => None,
    }
}

impl Narrator {
    /// A narrator showing tools as `tools` does and long things within `limits`.
    pub fn new(tools: ToolView, limits: Limits) -> Narrator {
        Narrator {
            tools,
            limits,
            calls: HashMap::new(),
            started_at: None,
            round_at: None,
            batch_at: None,
            usage: Usage::default(),
            cost_usd: 0.0,
            pending_done: None,
            sandbox_warned: false,
            session: None,
            hosts: std::collections::HashSet::new(),
            in_round: true,
        }
    }

    /// Columns available, from now on (a terminal may have been resized).
    pub fn set_width(&mut self, width: usize) {
        self.tools.width = width;
    }

    /// The session's tokens and cost so far.
    pub fn totals(&self) -> (&Usage, f64) {
        (&self.usage, self.cost_usd)
    }

    /// The lines of `event`, which happened at `at` (milliseconds since the epoch, when
    /// known); none for an event that reads as nothing on its own (a delta, a batch's start,
    /// a done message until its round's summary). Whatever the event carries is shown with
    /// every control and direction-changing character escaped ([`printable`]).
    pub fn lines(&mut self, event: &AppEvent, at: Option<i64>) -> Vec<String> {
        if matches!(event, AppEvent::ModelResponseDelta { .. }) {
            return Vec::new();
        }
        match printable(event) {
            Some(escaped) => self.worded(&escaped, at),
            None => self.worded(event, at),
        }
    }

    /// [`Narrator::lines`] of an event already [`printable`] (the live view escapes it once for
    /// what it writes itself too).
    // Over 100 lines on purpose: one arm per event, every event worded in one place, so a new
    // event is a compile error here and nowhere else.
    pub(super) fn worded(&mut self, event: &AppEvent, at: Option<i64>) -> Vec<String> {
        if self.started_at.is_none() {
            self.started_at = at;
        }
        let p = self.tools.palette;
        let warning = |text: String| vec![p.paint(Tone::Warning, &text)];
        match event {
            AppEvent::SessionStarted {
                session_id,
                task,
                resumed,
                ..
            } => {
                self.started_at = at;
                self.session = Some(session_id.clone());
                self.in_round = true;
                let task = indent(task);
                if *resumed {
                    vec![format!("resumed session {session_id}: {task}")]
                } else {
                    vec![format!("session started: {task}")]
                }
            }
            AppEvent::SessionEnded {
                session_id,
                status,
                reason,
            } => {
                // What is sent before a resume's run begins waits for its first round.
                self.in_round = true;
                self.end_lines(session_id, *status, reason, at)
            }
            AppEvent::TurnStarted { turn } => {
                self.in_round = true;
                if self.round_at.is_none() {
                    self.round_at = at;
                }
                vec![format!("── turn {turn}")]
            }
            AppEvent::ModelResponseDelta { .. } => Vec::new(),
            AppEvent::ModelResponse {
                text, reasoning, ..
            } => {
                let mut lines = self.reasoning_lines(reasoning);
                if !text.trim().is_empty() {
                    lines.push(format!("model: {}", indent(text)));
                }
                lines
            }
            AppEvent::Refusal { text, .. } => warning(format!("✗ refused: {}", text)),
            AppEvent::Truncated { detail, .. } => warning(format!("! truncated: {}", detail)),
            AppEvent::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                self.calls.insert(call_id.clone(), arguments.clone());
                self.tools.call_lines(name, arguments)
            }
            AppEvent::ToolBatch { .. } => {
                self.batch_at = at;
                Vec::new()
            }
            AppEvent::AgentOutput {
                call_id,
                name,
                output,
            } => {
                let arguments = self.calls.remove(call_id);
                let elapsed = between(self.batch_at, at);
                match self
                    .tools
                    .result_lines(name, arguments.as_ref(), output, elapsed)
                {
                    Rendered::Lines(lines) => lines,
                    Rendered::Text => vec![self.text_line(name, output)],
                }
            }
            AppEvent::ToolBatchResult { output, .. } => {
                match output.get("sandbox_warning").and_then(Value::as_str) {
                    Some(text) if !std::mem::replace(&mut self.sandbox_warned, true) => {
                        warning(format!("! {text}"))
                    }
                    Some(_) | None => Vec::new(),
                }
            }
            AppEvent::ApprovalRequired {
                id,
                session_id,
                category,
                command_preview,
                detail,
            } => {
                let mut lines: Vec<String> = self.asker(session_id).into_iter().collect();
                lines.push(p.paint(
                    Tone::Warning,
                    &format!("? approval #{id} [{category}]: {}", indent(command_preview)),
                ));
                lines.extend(detail.iter().map(|d| format!("  {}", indent(d))));
                lines
            }
            AppEvent::ApprovalResolved { verdict, .. } => vec![format!("  → {verdict}")],
            AppEvent::HumanQuestion { question, .. } => warning(format!("? {}", indent(question))),
            AppEvent::HumanAnswer { text, .. } => {
                vec![format!("  answer: {}", indent(text))]
            }
            AppEvent::Usage { .. } => match reported_usage(event) {
                Some((usage, cost_usd)) => {
                    self.usage.add(&usage);
                    self.cost_usd += cost_usd;
                    vec![p.paint(
                        Tone::Dim,
                        &format!(
                            "  usage: {} in ({} cached), {} out, ${cost_usd:.4}",
                            usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
                        ),
                    )]
                }
                None => Vec::new(),
            },
            AppEvent::ContextManagement { action, detail } => {
                vec![format!("! context {action}: {}", detail)]
            }
            AppEvent::BudgetWarning {
                used_tokens,
                budget_tokens,
                ..
            } => warning(format!(
                "! budget: {used_tokens} of {budget_tokens} tokens used"
            )),
            AppEvent::RoundComplete {
                round,
                turns,
                reason,
                cost_usd,
                ..
            } => {
                self.in_round = false;
                let took = between(self.round_at.take(), at)
                    .map(|d| format!(" · {}", human_duration(d)))
                    .unwrap_or_default();
                let u = &self.usage;
                let line = format!(
                    "── round {round} {reason}: {turns} {} · tokens in {} (cached {}), out {} · ${cost_usd:.4}{took}",
                    plural(*turns as usize, "turn"),
                    compact_count(u.input_tokens),
                    compact_count(u.cached_input_tokens),
                    compact_count(u.output_tokens),
                );
                let mut lines = vec![p.paint(Tone::Dim, &line)];
                lines.extend(self.done_line());
                lines
            }
            AppEvent::Done { message } => {
                self.pending_done = Some(message.clone());
                Vec::new()
            }
            AppEvent::Error { message } => {
                vec![p.paint(Tone::Error, &format!("✗ error: {}", message))]
            }
            AppEvent::Warning { message } => warning(format!("! warning: {}", message)),
            AppEvent::AutonomyChanged { level, own } => warning(autonomy_line(*level, *own)),
            AppEvent::HookRun {
                hook,
                hook_event: event,
                verdict,
                duration_ms,
                tool,
                reason,
                failure,
            } => {
                let about = tool
                    .as_ref()
                    .map(|t| format!(" on {t}"))
                    .unwrap_or_default();
                let took = human_duration(Duration::from_millis(*duration_ms));
                let mut line = format!("⚙ hook {event}{about} `{}`: {verdict} ({took})", hook);
                if let Some(reason) = reason {
                    line.push_str(&format!(": {}", reason));
                }
                if let Some(failure) = failure {
                    line.push_str(&format!("; failed: {}", failure));
                }
                let tone = match (failure, verdict) {
                    (Some(_), _) | (None, HookVerdict::Deny | HookVerdict::Ask) => Tone::Warning,
                    (None, HookVerdict::Allow | HookVerdict::Approve | HookVerdict::None) => {
                        Tone::Dim
                    }
                };
                vec![p.paint(tone, &line)]
            }
            AppEvent::Egress {
                host,
                port,
                verdict,
                rule,
                ..
            } => {
                if !self.hosts.insert((host.clone(), *verdict)) {
                    return Vec::new();
                }
                let text = format!("network: {}:{port} {verdict} ({})", host, rule);
                match verdict {
                    EgressVerdict::Allowed => vec![p.paint(Tone::Dim, &format!("⇄ {text}"))],
                    EgressVerdict::Refused | EgressVerdict::Failed => warning(format!("! {text}")),
                }
            }
            AppEvent::Agenda {
                id,
                notice,
                text,
                detail,
            } => {
                let line = format!(
                    "agenda {id} {notice}: {}{}{}",
                    text,
                    if detail.is_empty() { "" } else { " — " },
                    detail
                );
                match notice {
                    AgendaNotice::Reminder | AgendaNotice::Started => {
                        vec![p.paint(Tone::Dim, &format!("⏰ {line}"))]
                    }
                    AgendaNotice::Missed | AgendaNotice::Failed => warning(format!("! {line}")),
                }
            }
            AppEvent::SessionsPruned { ids } => vec![p.paint(
                Tone::Dim,
                &format!("pruned the records of {} ended session(s)", ids.len()),
            )],
            AppEvent::SessionsChanged { ids } => vec![p.paint(
                Tone::Dim,
                &format!(
                    "{} session(s) recorded by another process listed as their records say",
                    ids.len()
                ),
            )],
            AppEvent::McpServer {
                server,
                state,
                detail,
            } => {
                let line = format!(
                    "mcp server {}: {state}{}{}",
                    server,
                    if detail.is_empty() { "" } else { ": " },
                    detail
                );
                match state {
                    McpServerState::Ready
                    | McpServerState::ToolsChanged
                    | McpServerState::LetGo => {
                        vec![p.paint(Tone::Dim, &format!("· {line}"))]
                    }
                    McpServerState::Failed
                    | McpServerState::Exited
                    | McpServerState::Restarting
                    | McpServerState::GaveUp
                    | McpServerState::ToolSkipped => warning(format!("! {line}")),
                }
            }
            AppEvent::ControlCommand(ControlMsg::FollowUp { text }) => {
                let when = if self.in_round {
                    " (taken when this round ends)"
                } else {
                    ""
                };
                vec![format!("user{when}: {}", indent(text))]
            }
            AppEvent::FollowUpHeld { text } => vec![p.paint(
                Tone::Dim,
                &format!(
                    "follow-up held until the session can take it: {}",
                    indent(text)
                ),
            )],
            // An answer shows up as its own resolved or answer event.
            AppEvent::ControlCommand(
                ControlMsg::Approve { .. }
                | ControlMsg::Deny { .. }
                | ControlMsg::Skip { .. }
                | ControlMsg::ApproveAll { .. }
                | ControlMsg::AllowHost { .. }
                | ControlMsg::Input { .. },
            ) => Vec::new(),
        }
    }

    /// The line naming the sub-agent that asks, when `session_id` is not the narrated session.
    pub fn asker(&self, session_id: &str) -> Option<String> {
        self.session
            .as_ref()
            .is_some_and(|own| own != session_id)
            .then(|| {
                self.tools
                    .palette
                    .paint(Tone::Strong, &format!("sub-agent {session_id} asks:"))
            })
    }

    /// Reasoning, dimmed: its first lines (as many as the limits allow), then how many more.
    pub fn reasoning_lines(&self, reasoning: &str) -> Vec<String> {
        let text = reasoning.trim();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let shown = match self.limits.reasoning_lines {
            Some(max) if !self.tools.verbose => lines.len().min(max),
            Some(_) | None => lines.len(),
        };
        let p = self.tools.palette;
        let room = self.tools.width.saturating_sub(4);
        let mut out: Vec<String> = lines[..shown]
            .iter()
            .map(|l| p.paint(Tone::Dim, &format!("  ⋮ {}", clip_width(l, room))))
            .collect();
        if shown < lines.len() {
            let hidden = lines.len() - shown;
            let more = format!(
                "  ⋮ … {hidden} more {} of reasoning (--verbose shows them)",
                plural(hidden, "line")
            );
            out.push(p.paint(Tone::Dim, &more));
        }
        out
    }

    /// The done message waiting for its round's summary, said once.
    fn done_line(&mut self) -> Option<String> {
        let message = self.pending_done.take()?;
        let message = intendant_protocol::text::clip(&message, DONE_CHARS);
        Some(format!("✓ done: {message}"))
    }

    /// The session's closing line with its token and cost totals, and why it stopped.
    fn end_lines(
        &mut self,
        session_id: &str,
        status: EndStatus,
        reason: &str,
        at: Option<i64>,
    ) -> Vec<String> {
        let mut lines: Vec<String> = self.done_line().into_iter().collect();
        let took = between(self.started_at, at)
            .map(|d| format!(", {}", human_duration(d)))
            .unwrap_or_default();
        let u = &self.usage;
        let line = format!(
            "session {session_id} {status}: tokens in {} (cached {}), out {} (reasoning {}), cost ${:.4}{took}",
            u.input_tokens,
            u.cached_input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            self.cost_usd,
        );
        let tone = match status {
            EndStatus::Completed => Tone::Success,
            EndStatus::Failed => Tone::Error,
            EndStatus::BudgetExhausted
            | EndStatus::TurnCap
            | EndStatus::Denied
            | EndStatus::Refused
            | EndStatus::Interrupted => Tone::Warning,
        };
        lines.push(self.tools.palette.paint(tone, &line));
        // A failure's reason is the error already shown; a stop's is said here, on one row
        // (an approval above showed a denied command whole).
        if !matches!(status, EndStatus::Completed | EndStatus::Failed) && !reason.is_empty() {
            let reason = reason.lines().next().unwrap_or_default();
            let room = self.tools.width.saturating_sub(REASON_INDENT.len());
            lines.push(format!("{REASON_INDENT}{}", clip_width(reason, room)));
        }
        lines
    }

    /// A result no view interprets (a skip or denial note, a context update): its first line,
    /// or its text up to the limit.
    fn text_line(&self, name: &str, output: &str) -> String {
        let name = self.tools.palette.paint(Tone::Strong, name);
        let text = match self.limits.text_chars {
            Some(max) => indent(&cut(output, max)),
            None => clip_width(
                output.lines().next().unwrap_or_default(),
                self.tools.width.saturating_sub(20),
            ),
        };
        format!("↳ {name}: {text}")
    }
}

/// How an autonomy change reads: the level in force, and the session's own level where its
/// parent's caps it.
pub fn autonomy_line(level: AutonomyLevel, own: AutonomyLevel) -> String {
    if own > level {
        format!("autonomy: {level} (its own is {own}; its parent's level caps it)")
    } else {
        format!("autonomy: {level}")
    }
}

/// Continuation lines of a multi-line text, indented under the first.
/// `event` with every text it carries (and every key of the objects it carries, a tool call's
/// arguments) passed through [`escape_invisible`], when any had a character to escape: the one
/// place a model's or a command's words are made safe to print, so no line of the narrator
/// sets a title, moves the cursor, clears the screen or turns text around. `None`: nothing to
/// escape.
pub(super) fn printable(event: &AppEvent) -> Option<AppEvent> {
    fn escape(value: &mut Value) -> bool {
        match value {
            Value::String(text) => {
                if !text.chars().any(is_invisible) {
                    return false;
                }
                // A result begins with JSON in a string (a shell's output, which the result's
                // view reads): its texts are escaped inside it, so it still reads as JSON.
                let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
                *text = match values.next() {
                    Some(Ok(mut inner)) if inner.is_object() => {
                        let rest = escape_invisible(&text[values.byte_offset()..]);
                        escape(&mut inner);
                        format!("{inner}{rest}")
                    }
                    _ => escape_invisible(text),
                };
                true
            }
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| escape(v) | changed),
            Value::Object(map) => {
                let mut changed = false;
                for (key, mut item) in std::mem::take(map) {
                    changed |= escape(&mut item);
                    let shown = escape_invisible(&key);
                    changed |= shown != key;
                    map.insert(shown, item);
                }
                changed
            }
            _ => false,
        }
    }
    let mut value = serde_json::to_value(event).ok()?;
    if !escape(&mut value) {
        return None;
    }
    // A closed set's name has nothing to escape, so the event reads back; were it not to, it
    // is named rather than shown raw.
    Some(
        serde_json::from_value(value).unwrap_or_else(|_| AppEvent::Warning {
            message: format!(
                "a {} event is not shown: its text could not be escaped",
                event.name()
            ),
        }),
    )
}

fn indent(text: &str) -> String {
    text.trim_end().replace('\n', CONTINUATION)
}

/// `text` up to `max_chars`, then how many characters were left out.
/// An escape ([`escape_invisible`]'s `\u{202e}`) is never cut in two: the cut comes before it.
fn cut(text: &str, max_chars: usize) -> String {
    let cut_at = |at: usize| {
        let head = &text[..at];
        match head.rfind("\\u{") {
            Some(open) if !head[open..].contains('}') => open,
            _ => at,
        }
    };
    match text.char_indices().nth(max_chars).map(|(at, _)| cut_at(at)) {
        Some(at) => format!(
            "{}… ({} more characters)",
            &text[..at],
            text[at..].chars().count()
        ),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminal::style::Palette;
    use serde_json::json;

    fn narrator(limits: Limits) -> Narrator {
        Narrator::new(
            ToolView {
                palette: Palette::new(false),
                width: 60,
                verbose: false,
                tail_lines: 3,
                diff_lines: 10,
            },
            limits,
        )
    }

    fn live() -> Narrator {
        narrator(Limits {
            reasoning_lines: Some(2),
            text_chars: None,
        })
    }

    fn event(value: serde_json::Value) -> AppEvent {
        serde_json::from_value(value).unwrap()
    }

    /// What a hostile model or command puts in a text to rewrite the operator's terminal: a
    /// window title, a colour, a cleared screen, a line rewritten from its start, reversed text.
    const HOSTILE: &str = "\u{1b}]0;TITLE\u{7}\u{1b}[31m\u{1b}[2J\rFAKE\u{202e}x\u{8}";

    /// `event` with every string it carries that still reads as the event made hostile (a
    /// closed set's name, which would not, left as it is).
    fn made_hostile(event: &AppEvent) -> AppEvent {
        fn strings(value: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            match value {
                serde_json::Value::String(_) => out.push(path.clone()),
                serde_json::Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        path.push(i.to_string());
                        strings(item, path, out);
                        path.pop();
                    }
                }
                serde_json::Value::Object(map) => {
                    for (key, item) in map {
                        path.push(key.clone());
                        strings(item, path, out);
                        path.pop();
                    }
                }
                _ => {}
            }
        }
        let mut value = serde_json::to_value(event).unwrap();
        let mut paths = Vec::new();
        strings(&value, &mut Vec::new(), &mut paths);
        for path in paths
            .iter()
            .filter(|p| p.first().is_some_and(|k| k != "type"))
        {
            let pointer = format!("/{}", path.join("/"));
            let before = value.pointer(&pointer).cloned().unwrap();
            let hostile = format!("{}{HOSTILE}", before.as_str().unwrap());
            *value.pointer_mut(&pointer).unwrap() = serde_json::Value::String(hostile);
            if serde_json::from_value::<AppEvent>(value.clone()).is_err() {
                *value.pointer_mut(&pointer).unwrap() = before;
            }
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn no_event_writes_a_control_character_or_a_direction_change_to_the_terminal() {
        // Model text and tool names reached the terminal raw: a title set, the screen
        // cleared, a line rewritten as "all tests passed".
        for limits in [
            Limits {
                reasoning_lines: Some(2),
                text_chars: None,
            },
            Limits {
                reasoning_lines: None,
                text_chars: Some(4000),
            },
        ] {
            let mut n = narrator(limits);
            for sample in intendant_protocol::events::one_of_each() {
                let hostile = made_hostile(&sample);
                for line in n.lines(&hostile, Some(0)) {
                    assert!(
                        !line.chars().any(|c| !matches!(c, '\n' | '\t')
                            && (c.is_control() || intendant_core::preview::is_invisible(c))),
                        "{}: {line:?}",
                        sample.name()
                    );
                }
            }
        }
    }

    fn started(id: &str) -> AppEvent {
        event(
            json!({"type": "session_started", "session_id": id, "task": "fix it",
                     "model": "m", "provider": "p", "project_root": "/r", "resumed": false}),
        )
    }

    #[test]
    fn a_round_reads_with_its_totals_its_time_and_then_the_done_message() {
        let mut n = live();
        let mut said = Vec::new();
        for (event, at) in [
            (started("s1"), 0),
            (event(json!({"type": "turn_started", "turn": 1})), 1_000),
            (
                event(json!({"type": "usage", "turn": 1, "input_tokens": 12_345,
                             "cached_input_tokens": 345, "output_tokens": 99,
                             "reasoning_tokens": 9, "cost_usd": 0.5})),
                2_000,
            ),
            (event(json!({"type": "done", "message": "Fixed."})), 2_500),
            (
                event(json!({"type": "round_complete", "round": 1, "turns": 1,
                             "reason": "done", "input_tokens": 12_345, "output_tokens": 99,
                             "cost_usd": 0.5})),
                4_000,
            ),
            (
                event(json!({"type": "session_ended", "session_id": "s1",
                             "status": "turn_cap", "reason": "the turn cap\nof 1"})),
                5_000,
            ),
        ] {
            said.extend(n.lines(&event, Some(at)));
        }
        assert_eq!(
            said,
            [
                "session started: fix it",
                "── turn 1",
                "  usage: 12345 in (345 cached), 99 out, $0.5000",
                "── round 1 done: 1 turn · tokens in 12.3k (cached 345), out 99 · $0.5000 · 3.0s",
                "✓ done: Fixed.",
                "session s1 turn_cap: tokens in 12345 (cached 345), out 99 (reasoning 9), \
                 cost $0.5000, 5.0s",
                "  why: the turn cap",
            ]
        );
        assert_eq!(n.totals().0.input_tokens, 12_345);
    }

    /// A follow-up sent while a round works is the session's next round: said so, where one
    /// sent between rounds starts the next at once.
    #[test]
    fn a_follow_up_sent_during_a_round_is_said_to_wait_for_its_end() {
        let mut n = live();
        let follow_up = |text: &str| {
            event(json!({"type": "control_command", "action": "follow_up", "text": text}))
        };
        let mut said = Vec::new();
        for event in [
            follow_up("before the run began"),
            started("s1"),
            follow_up("before its first turn"),
            event(json!({"type": "turn_started", "turn": 1})),
            follow_up("during it"),
            event(json!({"type": "round_complete", "round": 1, "turns": 1,
                         "reason": "done", "input_tokens": 1, "output_tokens": 1,
                         "cost_usd": 0.0})),
            follow_up("between rounds"),
        ] {
            said.extend(n.lines(&event, None));
        }
        let users: Vec<&String> = said.iter().filter(|l| l.starts_with("user")).collect();
        assert_eq!(
            users,
            [
                "user (taken when this round ends): before the run began",
                "user (taken when this round ends): before its first turn",
                "user (taken when this round ends): during it",
                "user: between rounds",
            ]
        );
    }

    #[test]
    fn an_unknown_time_leaves_durations_out_and_a_failure_has_no_why() {
        let mut n = live();
        n.lines(&event(json!({"type": "done", "message": "half"})), None);
        let said = n.lines(
            &event(json!({"type": "session_ended", "session_id": "s",
                          "status": "failed", "reason": "provider error"})),
            None,
        );
        assert_eq!(
            said,
            [
                "✓ done: half",
                "session s failed: tokens in 0 (cached 0), out 0 (reasoning 0), cost $0.0000",
            ]
        );
    }

    #[test]
    fn a_result_no_view_knows_is_its_first_line_live_and_cut_in_a_transcript() {
        let output = event(
            json!({"type": "agent_output", "call_id": "c", "name": "exec_command",
                                  "output": "skipped\u{202e} by the user\nsecond line"}),
        );
        assert_eq!(
            live().lines(&output, None),
            ["↳ exec_command: skipped\\u{202e} by the user"]
        );
        let mut transcript = narrator(Limits {
            reasoning_lines: None,
            text_chars: Some(12),
        });
        assert_eq!(
            transcript.lines(&output, None),
            ["↳ exec_command: skipped… (32 more characters)"]
        );
    }

    #[test]
    fn reasoning_is_cut_to_the_limit_and_whole_without_one() {
        let response = event(
            json!({"type": "model_response", "turn": 1, "text": "Answer.",
                                    "reasoning": "one\n\ntwo\nthree\nfour",
                                    "tool_calls": []}),
        );
        assert_eq!(
            live().lines(&response, None),
            [
                "  ⋮ one",
                "  ⋮ two",
                "  ⋮ … 2 more lines of reasoning (--verbose shows them)",
                "model: Answer.",
            ]
        );
        let mut whole = narrator(Limits {
            reasoning_lines: None,
            text_chars: None,
        });
        assert_eq!(whole.lines(&response, None).len(), 5);
    }

    #[test]
    fn a_sub_agents_approval_is_named_and_the_sandbox_warning_said_once() {
        let mut n = live();
        n.lines(&started("parent"), None);
        let ask = |session: &str| {
            event(
                json!({"type": "approval_required", "id": 4, "session_id": session,
                         "category": "network", "command_preview": "$ curl x",
                         "detail": "line one\nline two"}),
            )
        };
        assert_eq!(
            n.lines(&ask("parent"), None),
            [
                "? approval #4 [network]: $ curl x",
                "  line one\n          line two"
            ]
        );
        assert_eq!(
            n.lines(&ask("child"), None)[0],
            "sub-agent child asks:".to_owned()
        );
        let result = event(json!({"type": "tool_batch_result", "turn": 1,
                                  "output": {"sandbox_warning": "no second layer"}}));
        assert_eq!(n.lines(&result, None), ["! no second layer"]);
        assert!(n.lines(&result, None).is_empty());
    }

    #[test]
    fn messages_are_escaped_and_a_capped_autonomy_names_both_levels() {
        let mut n = live();
        assert_eq!(
            n.lines(
                &event(json!({"type": "error", "message": "bad\u{1b}[2J"})),
                None
            ),
            ["✗ error: bad\\u{1b}[2J"]
        );
        assert_eq!(
            autonomy_line(AutonomyLevel::Medium, AutonomyLevel::Full),
            "autonomy: medium (its own is full; its parent's level caps it)"
        );
        assert_eq!(
            autonomy_line(AutonomyLevel::Full, AutonomyLevel::Medium),
            "autonomy: full"
        );
        assert_eq!(cut("héllo", 2), "hé… (3 more characters)");
        assert_eq!(cut("hé", 2), "hé");
        assert_eq!(indent("a\nb\n"), "a\n          b");
    }

    #[test]
    fn each_new_host_of_the_egress_proxy_is_one_line() {
        let mut n = live();
        let egress = |host: &str, verdict: &str| {
            event(
                json!({"type": "egress", "host": host, "port": 443, "verdict": verdict,
                         "rule": "why", "bytes_up": 1, "bytes_down": 2, "duration_ms": 3}),
            )
        };
        assert_eq!(
            n.lines(&egress("crates.io", "allowed"), None),
            ["⇄ network: crates.io:443 allowed (why)"]
        );
        assert!(n.lines(&egress("crates.io", "allowed"), None).is_empty());
        assert_eq!(
            n.lines(&egress("evil.example\u{1b}", "refused"), None),
            ["! network: evil.example\\u{1b}:443 refused (why)"]
        );
        assert_eq!(
            n.lines(&egress("crates.io", "failed"), None),
            ["! network: crates.io:443 failed (why)"]
        );
    }
}

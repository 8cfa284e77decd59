//! `intendant sessions [--json]` lists recorded sessions, newest first;
//! `intendant sessions show ID [--json]` prints one session's transcript.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use intendant_core::session_log::{
    EventRecord, SessionMeta, age_seconds, human_age, intendant_home, list_sessions, logs_dir,
    read_events, read_meta, resolve_session_id,
};
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_protocol::utc::UtcTime;
use serde_json::{Value, json};

use crate::terminal::render::{Rendered, ToolView, compact_count, tool_call_line};
use crate::terminal::style::{Palette, display, terminal_width};

/// Arguments of `intendant sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: Option<SessionsCommand>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum SessionsCommand {
    /// Print the transcript of one session.
    Show {
        /// Session id (or a unique prefix of one).
        id: String,
    },
}

/// Characters of one tool output shown in a transcript before it is cut.
const OUTPUT_PREVIEW_CHARS: usize = 2000;
/// Last lines of a command's output shown in a transcript.
const TAIL_LINES: usize = 20;
/// Lines of an edit's diff shown in a transcript.
const DIFF_LINES: usize = 200;
/// Characters of a task shown in the listing.
const TASK_COLUMN_CHARS: usize = 40;

/// Runs `intendant sessions`.
pub fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    let text = match &args.command {
        None => list(&home, args.json)?,
        Some(SessionsCommand::Show { id }) => show(&home, id, args.json)?,
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

fn summary_json(meta: &SessionMeta) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(meta)?;
    if let Value::Object(map) = &mut v {
        map.insert("status".into(), meta.effective_status().into());
        map.insert("recorded_status".into(), meta.status.clone().into());
        map.insert("total_tokens".into(), meta.total_tokens().into());
        map.insert("age_seconds".into(), age_seconds(&meta.created).into());
    }
    Ok(v)
}

fn list(home: &Path, as_json: bool) -> anyhow::Result<String> {
    let sessions = list_sessions(home)?;
    if as_json {
        let rows = sessions
            .iter()
            .map(summary_json)
            .collect::<anyhow::Result<Vec<_>>>()?;
        return Ok(format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    if sessions.is_empty() {
        return Ok(format!("no sessions yet in {}\n", logs_dir(home).display()));
    }
    let mut out = format!(
        "{:<24}  {:>4}  {:<16}  {:<width$}  {:>8}  {:>8}\n",
        "ID",
        "AGE",
        "STATUS",
        "TASK",
        "TOKENS",
        "COST",
        width = TASK_COLUMN_CHARS
    );
    for m in &sessions {
        let age = age_seconds(&m.created).map_or_else(|| "?".to_owned(), human_age);
        let _ = writeln!(
            out,
            "{:<24}  {:>4}  {:<16}  {:<width$}  {:>8}  {:>8}",
            m.id,
            age,
            m.effective_status(),
            one_line(&m.task, TASK_COLUMN_CHARS),
            compact_count(m.total_tokens()),
            format!("${:.4}", m.cost_usd),
            width = TASK_COLUMN_CHARS
        );
    }
    Ok(out)
}

fn show(home: &Path, id: &str, as_json: bool) -> anyhow::Result<String> {
    let dir = resolve_session_id(home, id)?;
    let meta = read_meta(&dir)?;
    let events = read_events(&dir)?;
    if as_json {
        let v = json!({
            "meta": summary_json(&meta)?,
            "dir": dir.display().to_string(),
            "events": events.records,
            "torn_tail": events.torn_tail,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut out = String::new();
    let _ = writeln!(out, "session  {}", meta.id);
    let _ = writeln!(out, "task     {}", meta.task);
    let _ = writeln!(out, "status   {}", meta.effective_status());
    if let Some(reason) = &meta.reason {
        let _ = writeln!(out, "reason   {reason}");
    }
    let _ = writeln!(out, "model    {} ({})", meta.model, meta.provider);
    let _ = writeln!(out, "project  {}", meta.project_root.display());
    let _ = writeln!(out, "created  {}", meta.created);
    let _ = writeln!(
        out,
        "usage    {} turns, {} tokens in ({} cached), {} out, ${:.4}",
        meta.turns,
        meta.usage.input_tokens,
        meta.usage.cached_input_tokens,
        meta.usage.output_tokens,
        meta.cost_usd
    );
    let _ = writeln!(out, "log      {}", dir.display());
    let mut transcript = Transcript::new(ToolView {
        palette: Palette::for_stream(std::io::stdout().is_terminal()),
        width: terminal_width(),
        verbose: display().verbose,
        tail_lines: TAIL_LINES,
        diff_lines: DIFF_LINES,
    });
    for record in &events.records {
        transcript.record(&mut out, record);
    }
    if let Some(torn) = &events.torn_tail {
        let _ = writeln!(
            out,
            "\n(the log ends in a torn line {} of {} bytes, skipped: the writer stopped mid-write)",
            torn.line, torn.bytes
        );
    }
    Ok(out)
}

/// Renders records in order, tool calls and results as the live terminal does; a result's
/// elapsed time is the time from its batch's record to its own.
struct Transcript {
    tools: ToolView,
    /// When the current batch was recorded (milliseconds since the epoch).
    batch_at: Option<i64>,
    /// The arguments of each call whose result is still to come, by call id.
    calls: HashMap<String, Value>,
}

impl Transcript {
    fn new(tools: ToolView) -> Transcript {
        Transcript {
            tools,
            batch_at: None,
            calls: HashMap::new(),
        }
    }

    /// One record of the transcript: an event this build knows is rendered from its type; any
    /// other (a newer or older build's event) is shown raw under its name.
    fn record(&mut self, out: &mut String, record: &EventRecord) {
        let time = record.ts.get(11..19).unwrap_or(&record.ts);
        let at = UtcTime::parse_rfc3339(&record.ts)
            .map(|t| t.unix_seconds() * 1000 + i64::from(t.millis));
        let lines = match record.typed() {
            Ok(typed) => self.event_lines(&typed.event, at),
            Err(_) => vec![format!(
                "[{}] {}",
                record.event,
                Value::Object(record.data.clone())
            )],
        };
        for text in lines {
            let _ = writeln!(out, "{time}  {text}");
        }
    }

    /// Tool calls and results as the terminal shows them; everything else as [`event_lines`].
    fn event_lines(&mut self, event: &AppEvent, at: Option<i64>) -> Vec<String> {
        match event {
            AppEvent::ToolBatch { .. } => {
                self.batch_at = at;
                Vec::new()
            }
            AppEvent::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                self.calls.insert(call_id.clone(), arguments.clone());
                self.tools.call_lines(name, arguments)
            }
            AppEvent::AgentOutput {
                call_id,
                name,
                output,
            } => {
                let elapsed = match (self.batch_at, at) {
                    (Some(from), Some(to)) => u64::try_from(to - from)
                        .ok()
                        .map(std::time::Duration::from_millis),
                    (Some(_) | None, _) => None,
                };
                match self.tools.result_lines(
                    name,
                    self.calls.remove(call_id).as_ref(),
                    output,
                    elapsed,
                ) {
                    Rendered::Lines(lines) => lines,
                    Rendered::Text => event_lines(event),
                }
            }
            other => event_lines(other),
        }
    }
}

/// The transcript lines of one event (none for events the transcript leaves out).
fn event_lines(event: &AppEvent) -> Vec<String> {
    match event {
        AppEvent::SessionStarted { task, resumed, .. } => {
            let resumed = if *resumed { " (resumed)" } else { "" };
            vec![format!("── session started{resumed}: {task}")]
        }
        AppEvent::SessionEnded { status, reason, .. } => {
            vec![format!("── session ended: {status} ({reason})")]
        }
        AppEvent::TurnStarted { turn } => vec![format!("── turn {turn}")],
        AppEvent::ModelResponse {
            text, reasoning, ..
        } => {
            let mut lines = Vec::new();
            if !reasoning.is_empty() {
                lines.push(format!("thinking: {}", indent(reasoning)));
            }
            if !text.is_empty() {
                lines.push(format!("model: {}", indent(text)));
            }
            lines
        }
        AppEvent::Refusal { text, .. } => vec![format!("refused: {}", indent(text))],
        AppEvent::Truncated { detail, .. } => vec![format!("truncated: {detail}")],
        AppEvent::ToolCall {
            name, arguments, ..
        } => vec![tool_call_line(name, arguments)],
        AppEvent::AgentOutput { name, output, .. } => vec![format!(
            "← {name}: {}",
            indent(&cut(output, OUTPUT_PREVIEW_CHARS))
        )],
        AppEvent::ApprovalRequired {
            id,
            category,
            command_preview,
            detail,
            ..
        } => {
            let mut lines = vec![format!(
                "? approval #{id} [{category}]: {}",
                indent(command_preview)
            )];
            lines.extend(detail.iter().map(|d| format!("  {}", indent(d))));
            lines
        }
        AppEvent::ApprovalResolved { id, verdict } => {
            vec![format!("  approval #{id}: {verdict}")]
        }
        AppEvent::HumanQuestion { id, question } => {
            vec![format!("? question #{id}: {question}")]
        }
        AppEvent::HumanAnswer { id, text } => vec![format!("  answer #{id}: {text}")],
        AppEvent::Usage {
            input_tokens,
            cached_input_tokens,
            output_tokens,
            cost_usd,
            ..
        } => vec![format!(
            "  usage: {input_tokens} in ({cached_input_tokens} cached), {output_tokens} out, ${cost_usd:.4}"
        )],
        AppEvent::ContextManagement { action, detail } => {
            vec![format!("context: {action} {detail}")]
        }
        AppEvent::BudgetWarning {
            used_tokens,
            budget_tokens,
            ..
        } => vec![format!(
            "budget: {used_tokens} of {budget_tokens} tokens used"
        )],
        AppEvent::RoundComplete { round, reason, .. } => {
            vec![format!("── round {round} complete: {reason}")]
        }
        AppEvent::Done { message } => vec![format!("done: {message}")],
        AppEvent::Error { message } => vec![format!("error: {message}")],
        AppEvent::Warning { message } => vec![format!("warning: {message}")],
        AppEvent::AutonomyChanged { level, own } => vec![autonomy_line(*level, *own)],
        AppEvent::ControlCommand(ControlMsg::FollowUp { text }) => vec![format!("user: {text}")],
        // Approvals and answers show up in their own resolved/answer events.
        AppEvent::ControlCommand(
            ControlMsg::Approve { .. }
            | ControlMsg::Deny { .. }
            | ControlMsg::Skip { .. }
            | ControlMsg::ApproveAll { .. }
            | ControlMsg::Input { .. },
        ) => Vec::new(),
        // Batch input and results are in turns/; the transcript shows per-call output instead.
        // Deltas are never persisted (the whole response is).
        AppEvent::ToolBatch { .. }
        | AppEvent::ToolBatchResult { .. }
        | AppEvent::ModelResponseDelta { .. } => Vec::new(),
    }
}

/// Continuation lines of a multi-line text, indented under the first.
/// How an autonomy change reads, here and in the terminal: the level in force, and the
/// session's own level where its parent's caps it.
pub(crate) fn autonomy_line(level: AutonomyLevel, own: AutonomyLevel) -> String {
    if own > level {
        format!("autonomy: {level} (its own is {own}; its parent's level caps it)")
    } else {
        format!("autonomy: {level}")
    }
}

fn indent(text: &str) -> String {
    text.trim_end().replace('\n', "\n          ")
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!(
            "{}… ({} more characters)",
            &text[..at],
            text[at..].chars().count()
        ),
        None => text.to_owned(),
    }
}

fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max_chars.saturating_sub(1)) {
        Some((at, _)) if flat.chars().count() > max_chars => format!("{}…", &flat[..at]),
        Some(_) | None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_transcript() -> Transcript {
        Transcript::new(ToolView {
            palette: Palette::new(false),
            width: 100,
            verbose: false,
            tail_lines: TAIL_LINES,
            diff_lines: DIFF_LINES,
        })
    }

    fn record(event: &str, data: Value) -> EventRecord {
        let Value::Object(data) = data else {
            panic!("not an object")
        };
        EventRecord {
            ts: "2026-11-30T10:15:30.123Z".into(),
            seq: None,
            event: event.into(),
            data,
        }
    }

    #[test]
    fn transcript_lines() {
        let cases = [
            (
                record(
                    "session_started",
                    json!({"session_id": "s", "task": "t", "model": "m", "provider": "p",
                           "project_root": "/r", "resumed": true}),
                ),
                "10:15:30  ── session started (resumed): t\n",
            ),
            (
                record(
                    "approval_required",
                    json!({"id": 3, "session_id": "s", "category": "network",
                           "command_preview": "$ curl x"}),
                ),
                "10:15:30  ? approval #3 [network]: $ curl x\n",
            ),
            (
                record("approval_resolved", json!({"id": 3, "verdict": "skip"})),
                "10:15:30    approval #3: skip\n",
            ),
            (
                record(
                    "control_command",
                    json!({"action": "follow_up", "text": "more"}),
                ),
                "10:15:30  user: more\n",
            ),
            (
                record("control_command", json!({"action": "approve", "id": 3})),
                "",
            ),
            (record("tool_batch", json!({"turn": 1, "input": {}})), ""),
            (
                record("future_event", json!({"x": 1})),
                "10:15:30  [future_event] {\"x\":1}\n",
            ),
            // A known event recorded with other fields (another build's) is shown raw too.
            (
                record("turn_started", json!({"round": 2})),
                "10:15:30  [turn_started] {\"round\":2}\n",
            ),
            (
                record(
                    "round_complete",
                    json!({"round": 2, "turns": 5, "reason": "turn_cap", "input_tokens": 1,
                           "output_tokens": 1, "cost_usd": 0.0}),
                ),
                "10:15:30  ── round 2 complete: turn_cap\n",
            ),
        ];
        for (rec, want) in cases {
            let mut out = String::new();
            plain_transcript().record(&mut out, &rec);
            assert_eq!(out, want, "{}", rec.event);
        }
    }

    #[test]
    fn long_outputs_are_cut_with_a_count() {
        let mut out = String::new();
        let long = "x".repeat(OUTPUT_PREVIEW_CHARS + 10);
        plain_transcript().record(
            &mut out,
            &record(
                "agent_output",
                json!({"call_id": "c1", "name": "exec_command", "output": long}),
            ),
        );
        assert!(out.ends_with("… (10 more characters)\n"), "{out}");
    }

    #[test]
    fn text_helpers() {
        assert_eq!(compact_count(999), "999");
        assert_eq!(compact_count(12_345), "12.3k");
        assert_eq!(compact_count(2_500_000), "2.5M");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
        assert_eq!(cut("héllo", 2), "hé… (3 more characters)");
        assert_eq!(cut("hé", 2), "hé");
        assert_eq!(indent("a\nb\n"), "a\n          b");
    }
}

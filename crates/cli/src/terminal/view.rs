//! The live renderer: one event at a time, in order, to stdout (model text) and stderr
//! (everything else), clearing the progress line before anything is written.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use intendant_core::preview::{command_preview, escape_invisible};
use intendant_core::usage::reported_usage;
use intendant_protocol::events::{ActionCategory, AppEvent, EndStatus, RoundEnd};
use intendant_protocol::runtime::Command;
use intendant_providers::Usage;

use super::card::approval_card;
use super::input::{Awaiting, FOLLOW_UP_PROMPT, KeyMode, SharedInput, lock};
use super::progress::Progress;
use super::render::{Rendered, ToolView, compact_count as compact, human_duration, plural};
use super::style::{Palette, Tone, clip_width, display, terminal_width};

/// Last lines of a command's output shown live.
const TAIL_LINES: usize = 6;
/// Lines of an edit's diff shown live.
const DIFF_LINES: usize = 40;
/// Indent of a stop reason under the closing line.
const REASON_INDENT: &str = "  why: ";
/// A pause in streamed text after which the progress line comes back.
pub const STREAM_PAUSE: Duration = Duration::from_millis(500);
/// Lines of reasoning shown (dimmed) unless `--verbose`.
const REASONING_LINES: usize = 2;

pub struct View {
    input: SharedInput,
    keys: Arc<KeyMode>,
    /// Whether the loop waits for follow-ups (stdin is a terminal).
    follow_ups: bool,
    palette: Palette,
    tools: ToolView,
    progress: Progress,
    at_line_start: bool,
    usage: Usage,
    cost_usd: f64,
    started: Instant,
    round_started: Option<Instant>,
    batch_started: Option<Instant>,
    /// When the model's text last moved, while its response streams.
    last_delta: Option<Instant>,
    /// The arguments of each call whose result is still to come, by call id.
    calls: HashMap<String, serde_json::Value>,
    /// The done message, shown after the round's summary (right before the follow-up prompt).
    pending_done: Option<String>,
    /// Whether the sandbox's second-layer warning was shown (once per session is enough).
    sandbox_warned: bool,
    /// The session this view follows; an approval of another one is a sub-agent's.
    session: Option<String>,
}

/// Model text to stdout; a closed stdout (`| head`) just stops the text, never the run.
fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[allow(clippy::print_stderr)]
impl View {
    pub fn new(input: SharedInput, keys: Arc<KeyMode>, follow_ups: bool) -> View {
        let stderr_tty = std::io::stderr().is_terminal();
        let palette = Palette::for_stream(stderr_tty);
        let width = terminal_width();
        View {
            input,
            keys,
            follow_ups,
            palette,
            tools: ToolView {
                palette,
                width,
                verbose: display().verbose,
                tail_lines: TAIL_LINES,
                diff_lines: DIFF_LINES,
            },
            progress: Progress::new(stderr_tty && std::io::stdout().is_terminal(), width),
            at_line_start: true,
            usage: Usage::default(),
            cost_usd: 0.0,
            started: Instant::now(),
            round_started: None,
            batch_started: None,
            last_delta: None,
            calls: HashMap::new(),
            pending_done: None,
            sandbox_warned: false,
            session: None,
        }
    }

    fn end_text_line(&mut self) {
        if !self.at_line_start {
            write_stdout("\n");
            self.at_line_start = true;
        }
    }

    /// Lines on stderr, each on a line of its own, after the progress line is cleared.
    fn say(&mut self, lines: &[String]) {
        self.progress.stop();
        self.end_text_line();
        let mut err = std::io::stderr().lock();
        for line in lines {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn say_one(&mut self, line: String) {
        self.say(&[line]);
    }

    /// Tokens and cost so far, for the progress line.
    fn update_totals(&mut self) {
        let tokens = self.usage.input_tokens + self.usage.output_tokens;
        let totals = if tokens == 0 {
            String::new()
        } else {
            format!(" · {} tokens · ${:.4}", compact(tokens), self.cost_usd)
        };
        self.progress.set_totals(totals);
    }

    /// Shows the follow-up prompt, unless a follow-up is already queued or input has ended.
    fn prompt_follow_up(&mut self) {
        self.progress.stop();
        self.end_text_line();
        {
            let mut input = lock(&self.input);
            if input.closed || std::mem::take(&mut input.queued) {
                return;
            }
            input.awaiting = Awaiting::FollowUp;
        }
        eprint!("{FOLLOW_UP_PROMPT}");
        let _ = std::io::stderr().flush();
    }

    /// Shows an approval card; the next key or typed line answers it.
    fn ask_approval(
        &mut self,
        id: u64,
        category: ActionCategory,
        command_preview: &str,
        detail: Option<&str>,
    ) {
        self.progress.stop();
        self.end_text_line();
        // Armed before the prompt shows, so an answer typed right after it counts.
        lock(&self.input).awaiting = Awaiting::Approval(id);
        if self.follow_ups {
            self.keys.set_single(true);
        }
        let card = approval_card(
            category,
            command_preview,
            detail,
            terminal_width(),
            self.palette,
        );
        eprint!("{card}");
        let _ = std::io::stderr().flush();
    }

    /// Shows a question; the next typed line answers it.
    fn ask_question(&mut self, question: &str) {
        lock(&self.input).awaiting = Awaiting::Question;
        let question = escape_invisible(question);
        self.say(&[
            self.palette.paint(Tone::Warning, &format!("? {question}")),
            "  (type your answer and press Enter)".to_owned(),
        ]);
    }

    /// A shown question was answered or its batch ended: typed lines are follow-ups again.
    fn question_gone(&self) {
        let mut input = lock(&self.input);
        if input.awaiting == Awaiting::Question {
            input.awaiting = Awaiting::Work;
        }
    }

    fn flush_done(&mut self) {
        if let Some(message) = self.pending_done.take() {
            let message = intendant_core::conversation::clip(&escape_invisible(&message), 500);
            self.say_one(format!("✓ done: {message}"));
        }
    }

    /// The round's summary: turns, tokens, cost, elapsed.
    fn round_summary(&mut self, round: u32, turns: u32, reason: RoundEnd, cost_usd: f64) {
        let took = self
            .round_started
            .take()
            .map(|t| format!(" · {}", human_duration(t.elapsed())))
            .unwrap_or_default();
        let u = &self.usage;
        let line = format!(
            "── round {round} {reason}: {turns} {} · tokens in {} (cached {}), out {} · ${cost_usd:.4}{took}",
            plural(turns as usize, "turn"),
            compact(u.input_tokens),
            compact(u.cached_input_tokens),
            compact(u.output_tokens),
        );
        let line = self.palette.paint(Tone::Dim, &line);
        self.say_one(line);
    }

    /// The session's closing line with its token and cost totals.
    fn end_session(&mut self, session_id: &str, status: EndStatus, reason: &str) {
        self.flush_done();
        self.keys.set_single(false);
        let u = &self.usage;
        let line = format!(
            "session {session_id} {status}: tokens in {} (cached {}), out {} (reasoning {}), cost ${:.4}, {}",
            u.input_tokens,
            u.cached_input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            self.cost_usd,
            human_duration(self.started.elapsed()),
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
        let mut lines = vec![self.palette.paint(tone, &line)];
        // A failure's reason is the error already shown; a stop's is said here, on one row
        // (the card above showed a denied command whole).
        if !matches!(status, EndStatus::Completed | EndStatus::Failed) && !reason.is_empty() {
            let reason = escape_invisible(reason.lines().next().unwrap_or_default());
            let room = self.tools.width.saturating_sub(REASON_INDENT.len());
            lines.push(format!("{REASON_INDENT}{}", clip_width(&reason, room)));
        }
        self.say(&lines);
    }

    /// What a batch does, for the progress line.
    fn batch_label(input: &serde_json::Value) -> String {
        let commands: Vec<Command> = input
            .get("commands")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        match commands.as_slice() {
            [] => "running".to_owned(),
            [one] => format!("running {}", command_preview(one).replace('\n', " ")),
            [first, rest @ ..] => format!(
                "running {} (+{} more)",
                command_preview(first).replace('\n', " "),
                rest.len()
            ),
        }
    }

    /// Reasoning, dimmed: its first lines, or all of it under `--verbose`.
    fn reasoning(&mut self, reasoning: &str) {
        let text = escape_invisible(reasoning.trim());
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let shown = if self.tools.verbose {
            lines.len()
        } else {
            lines.len().min(REASONING_LINES)
        };
        let room = self.tools.width.saturating_sub(4);
        let mut out: Vec<String> = lines[..shown]
            .iter()
            .map(|l| {
                self.palette
                    .paint(Tone::Dim, &format!("  ⋮ {}", clip_width(l, room)))
            })
            .collect();
        if shown < lines.len() {
            let hidden = lines.len() - shown;
            let more = format!(
                "  ⋮ … {hidden} more {} of reasoning (--verbose shows them)",
                plural(hidden, "line")
            );
            out.push(self.palette.paint(Tone::Dim, &more));
        }
        self.say(&out);
    }

    /// Called when no event came for a while: a response whose text stopped at a line's end
    /// while the model goes on (writing a tool call's arguments, say) gets the progress line
    /// back on the next line, until its next text.
    pub fn idle(&mut self) {
        if self.at_line_start
            && !self.progress.is_shown()
            && self.last_delta.is_some_and(|t| t.elapsed() >= STREAM_PAUSE)
        {
            self.progress.start("streaming the response");
        }
    }

    /// Renders one event; `true` at the end of the session.
    pub fn render(&mut self, event: &AppEvent) -> bool {
        match event {
            AppEvent::TurnStarted { .. } => {
                lock(&self.input).awaiting = Awaiting::Work;
                // The window may have been resized since the last turn.
                self.tools.width = terminal_width();
                self.round_started.get_or_insert_with(Instant::now);
                self.progress.start("waiting for the model");
            }
            AppEvent::ModelResponseDelta { text } => {
                self.progress.stop();
                write_stdout(text);
                self.at_line_start = text.ends_with('\n');
                self.last_delta = Some(Instant::now());
            }
            AppEvent::ModelResponse { reasoning, .. } => {
                self.last_delta = None;
                self.progress.stop();
                self.end_text_line();
                if !reasoning.trim().is_empty() {
                    self.reasoning(reasoning);
                }
            }
            AppEvent::Refusal { text, .. } => {
                self.end_text_line();
                let line = format!("✗ refused: {}", escape_invisible(text));
                self.say_one(self.palette.paint(Tone::Warning, &line));
            }
            AppEvent::Truncated { detail, .. } => {
                self.end_text_line();
                let line = format!("! truncated: {}", escape_invisible(detail));
                self.say_one(self.palette.paint(Tone::Warning, &line));
            }
            AppEvent::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                self.calls.insert(call_id.clone(), arguments.clone());
                let lines = self.tools.call_lines(name, arguments);
                if !lines.is_empty() {
                    self.say(&lines);
                }
            }
            AppEvent::ToolBatch { input, .. } => {
                self.batch_started = Some(Instant::now());
                self.progress.start(&Self::batch_label(input));
            }
            AppEvent::AgentOutput {
                call_id,
                name,
                output,
            } => {
                let elapsed = self.batch_started.map(|t| t.elapsed());
                let lines = match self.tools.result_lines(
                    name,
                    self.calls.remove(call_id).as_ref(),
                    output,
                    elapsed,
                ) {
                    Rendered::Lines(lines) => lines,
                    Rendered::Text => {
                        let first = output.lines().next().unwrap_or_default();
                        vec![format!(
                            "↳ {}: {}",
                            self.palette.paint(Tone::Strong, name),
                            clip_width(
                                &escape_invisible(first),
                                self.tools.width.saturating_sub(20)
                            )
                        )]
                    }
                };
                if !lines.is_empty() {
                    self.say(&lines);
                }
            }
            AppEvent::ApprovalRequired {
                id,
                session_id,
                command_preview,
                detail,
                category,
            } => {
                if self.session.as_ref().is_some_and(|own| own != session_id) {
                    let line = format!("sub-agent {session_id} asks:");
                    self.say_one(self.palette.paint(Tone::Strong, &line));
                }
                self.ask_approval(*id, *category, command_preview, detail.as_deref())
            }
            AppEvent::ApprovalResolved { verdict, .. } => {
                self.keys.set_single(false);
                lock(&self.input).awaiting = Awaiting::Work;
                self.say_one(format!("  → {verdict}"));
            }
            AppEvent::HumanQuestion { question, .. } => self.ask_question(question),
            AppEvent::BudgetWarning {
                used_tokens,
                budget_tokens,
                ..
            } => {
                let line = format!("! budget: {used_tokens} of {budget_tokens} tokens used");
                self.say_one(self.palette.paint(Tone::Warning, &line));
            }
            AppEvent::ContextManagement { action, detail } => {
                self.say_one(format!("! context {action}: {detail}"))
            }
            AppEvent::Usage { .. } => {
                if let Some((usage, cost_usd)) = reported_usage(event) {
                    self.usage.add(&usage);
                    self.cost_usd += cost_usd;
                    self.update_totals();
                }
            }
            AppEvent::Done { message } => {
                self.end_text_line();
                self.pending_done = Some(message.clone());
            }
            AppEvent::Error { message } => {
                let line = format!("✗ error: {}", escape_invisible(message));
                self.say_one(self.palette.paint(Tone::Error, &line));
            }
            AppEvent::Warning { message } => {
                let line = format!("! warning: {}", escape_invisible(message));
                self.say_one(self.palette.paint(Tone::Warning, &line));
            }
            AppEvent::AutonomyChanged { level, own } => {
                let line = crate::sessions_cmd::autonomy_line(*level, *own);
                self.say_one(self.palette.paint(Tone::Warning, &line));
            }
            AppEvent::SessionEnded {
                session_id,
                status,
                reason,
            } => {
                self.end_session(session_id, *status, reason);
                return true;
            }
            AppEvent::SessionStarted {
                session_id,
                resumed,
                ..
            } => {
                self.session = Some(session_id.clone());
                if *resumed {
                    self.say_one(format!("resumed session {session_id}"));
                }
            }
            AppEvent::RoundComplete {
                round,
                turns,
                reason,
                cost_usd,
                ..
            } => {
                self.round_summary(*round, *turns, *reason, *cost_usd);
                self.flush_done();
                // Only a round that ended `done`, refused (a follow-up may rephrase) or was
                // interrupted is followed by a wait for the next follow-up.
                if self.follow_ups
                    && matches!(
                        reason,
                        RoundEnd::Done | RoundEnd::Refused | RoundEnd::Interrupted
                    )
                {
                    self.prompt_follow_up();
                }
            }
            AppEvent::ToolBatchResult { output, .. } => {
                self.progress.stop();
                if let Some(warning) = output.get("sandbox_warning").and_then(|w| w.as_str())
                    && !std::mem::replace(&mut self.sandbox_warned, true)
                {
                    let line = self.palette.paint(Tone::Warning, &format!("! {warning}"));
                    self.say_one(line);
                }
                self.question_gone();
            }
            AppEvent::HumanAnswer { .. } => self.question_gone(),
            AppEvent::ControlCommand(_) => {}
        }
        false
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.keys.set_single(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_labelled_by_its_first_command() {
        let input = serde_json::json!({"commands": [
            {"function": "execAsAgent", "nonce": 1, "command": "cargo test"},
            {"function": "inspectPath", "nonce": 2, "path": "a"}
        ]});
        assert_eq!(View::batch_label(&input), "running $ cargo test (+1 more)");
    }
}

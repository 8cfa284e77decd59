//! The live renderer: one event at a time, in order, to stdout (model text) and stderr
//! (everything else), clearing the progress line before anything is written.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use intendant_core::preview::command_preview;
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, RoundEnd};
use intendant_protocol::runtime::Command;
use intendant_protocol::utc::UtcTime;

use super::card::approval_card;
use super::input::{Awaiting, FOLLOW_UP_PROMPT, KeyMode, SharedInput, lock};
use super::narrator::{Limits, Narrator, epoch_millis};
use super::progress::Progress;
use super::render::ToolView;
use super::style::{Palette, display, terminal_width};
use super::units::compact_count as compact;

/// Last lines of a command's output shown live.
const TAIL_LINES: usize = 6;
/// Lines of an edit's diff shown live.
const DIFF_LINES: usize = 40;
/// A pause in streamed text after which the progress line comes back.
pub const STREAM_PAUSE: Duration = Duration::from_millis(500);
/// Lines of reasoning shown (dimmed) unless `--verbose`.
const REASONING_LINES: usize = 2;

/// The live view of one session: the [`Narrator`]'s lines, and around them what only a live
/// view has.
pub struct View {
    input: SharedInput,
    keys: Arc<KeyMode>,
    /// Whether the loop waits for follow-ups (stdin is a terminal).
    follow_ups: bool,
    palette: Palette,
    narrator: Narrator,
    progress: Progress,
    at_line_start: bool,
    /// When the model's text last moved, while its response streams.
    last_delta: Option<Instant>,
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
            narrator: Narrator::new(
                ToolView {
                    palette,
                    width,
                    verbose: display().verbose,
                    tail_lines: TAIL_LINES,
                    diff_lines: DIFF_LINES,
                },
                Limits {
                    reasoning_lines: Some(REASONING_LINES),
                    text_chars: None,
                },
            ),
            progress: Progress::new(stderr_tty && std::io::stdout().is_terminal(), width),
            at_line_start: true,
            last_delta: None,
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

    /// Lines on stderr, when there are any.
    fn say_any(&mut self, lines: &[String]) {
        if !lines.is_empty() {
            self.say(lines);
        }
    }

    /// An intent sent to the session, shown as `lines`: a follow-up, unless this view's user
    /// typed it (it is on their screen already; one another frontend sent, to a session an
    /// attach follows, is not); an answer shows as what it answered resolves.
    fn sent(&mut self, msg: &ControlMsg, lines: &[String]) {
        if let ControlMsg::FollowUp { text } = msg
            && !lock(&self.input).typed_here(text)
        {
            self.say_any(lines);
        }
    }

    /// Tokens and cost so far, for the progress line.
    fn update_totals(&mut self) {
        let (usage, cost_usd) = self.narrator.totals();
        let tokens = usage.input_tokens + usage.output_tokens;
        let totals = if tokens == 0 {
            String::new()
        } else {
            format!(" · {} tokens · ${cost_usd:.4}", compact(tokens))
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
        lock(&self.input).awaiting = Awaiting::Approval { id, category };
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

    /// Shows a question (its `lines`); the next typed line answers it.
    fn ask_question(&mut self, mut lines: Vec<String>) {
        lock(&self.input).awaiting = Awaiting::Question;
        lines.push("  (type your answer and press Enter)".to_owned());
        self.say(&lines);
    }

    /// A shown question was answered or its batch ended: typed lines are follow-ups again.
    fn question_gone(&self) {
        let mut input = lock(&self.input);
        if input.awaiting == Awaiting::Question {
            input.awaiting = Awaiting::Work;
        }
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

    /// Renders one event, which happened at `at` (milliseconds since the epoch; `None`: now, as
    /// it arrives live); `true` at the end of the session.
    pub fn render(&mut self, event: &AppEvent, at: Option<i64>) -> bool {
        let at = at.unwrap_or_else(|| epoch_millis(UtcTime::now()));
        // What streams and what is worded alike shows every text escaped (the streamed text and
        // the reasoning are written here, not by the narrator's lines).
        let escaped = super::narrator::printable(event);
        let event = escaped.as_ref().unwrap_or(event);
        let lines = self.narrator.worded(event, Some(at));
        match event {
            AppEvent::TurnStarted { .. } => {
                lock(&self.input).awaiting = Awaiting::Work;
                // The window may have been resized since the last turn.
                self.narrator.set_width(terminal_width());
                self.progress.start("waiting for the model");
            }
            AppEvent::ModelResponseDelta { text } => {
                self.progress.stop();
                write_stdout(text);
                self.at_line_start = text.ends_with('\n');
                self.last_delta = Some(Instant::now());
            }
            // The text streamed already: only the reasoning is left to show.
            AppEvent::ModelResponse { reasoning, .. } => {
                self.last_delta = None;
                self.progress.stop();
                self.end_text_line();
                let reasoning = self.narrator.reasoning_lines(reasoning);
                self.say_any(&reasoning);
            }
            AppEvent::ToolBatch { input, .. } => self.progress.start(&Self::batch_label(input)),
            AppEvent::ApprovalRequired {
                id,
                session_id,
                command_preview,
                detail,
                category,
            } => {
                if let Some(asker) = self.narrator.asker(session_id) {
                    self.say(&[asker]);
                }
                self.ask_approval(*id, *category, command_preview, detail.as_deref())
            }
            AppEvent::ApprovalResolved { .. } => {
                self.keys.set_single(false);
                lock(&self.input).awaiting = Awaiting::Work;
                self.say(&lines);
            }
            AppEvent::HumanQuestion { .. } => self.ask_question(lines),
            AppEvent::Usage { .. } => self.update_totals(),
            AppEvent::Done { .. } => self.end_text_line(),
            AppEvent::SessionEnded { .. } => {
                self.keys.set_single(false);
                self.say(&lines);
                return true;
            }
            // A new session's task is what its user just typed; a resumed one is named.
            AppEvent::SessionStarted { resumed, .. } => {
                if *resumed {
                    self.say(&lines);
                }
            }
            AppEvent::RoundComplete { reason, .. } => {
                self.say(&lines);
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
            AppEvent::ToolBatchResult { .. } => {
                self.progress.stop();
                self.say_any(&lines);
                self.question_gone();
            }
            AppEvent::Refusal { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolCall { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Error { .. }
            | AppEvent::Warning { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::AutonomyChanged { .. }
            | AppEvent::Egress { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. } => self.say_any(&lines),
            AppEvent::HumanAnswer { .. } => self.question_gone(),
            AppEvent::ControlCommand(msg) => self.sent(msg, &lines),
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

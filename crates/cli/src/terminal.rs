//! The terminal frontend (default): model text streams to stdout as it arrives; tool calls,
//! short results, usage and errors go to stderr; a spinner runs on stderr while the model is
//! thinking, only when stderr is a terminal.
//!
//! When stdin is a terminal the session stays open like a chat: a typed line answers a pending
//! approval or question; otherwise it is a follow-up, and after each completed round a `> `
//! prompt on stderr waits for the next one. End of input (Ctrl-D), `/exit` or `/quit` ends the
//! session. Without a terminal on stdin nothing is read: one task, then exit.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use intendant_core::approval::parse_terminal_answer;
use intendant_core::bus::EventBus;
use intendant_core::conversation::clip;
use intendant_core::preview::escape_invisible;
use intendant_core::usage::reported_usage;
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, EndStatus, RoundEnd};
use intendant_providers::Usage;

const SPINNER: [char; 4] = ['|', '/', '-', '\\'];
/// Shown on stderr when the session waits for a follow-up.
const FOLLOW_UP_PROMPT: &str = "> ";
/// Shown again after a line that is not an approval answer.
const APPROVAL_HELP: &str = "  please answer y (yes), s (skip), a (approve all) or n (no)\n";
/// Typed at the follow-up prompt, these end the session.
const EXIT_COMMANDS: [&str; 2] = ["/exit", "/quit"];

/// What a typed line is taken as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Awaiting {
    /// The model is working: a line is queued as a follow-up for the end of the round.
    #[default]
    Work,
    /// An approval prompt is shown: a line is y / s / a / n.
    Approval(u64),
    /// A question is shown: a line is its answer.
    Question,
    /// The round is over and the loop waits: a line starts the next round.
    FollowUp,
}

/// Shared by the renderer (which knows what is shown) and the stdin reader.
#[derive(Debug, Default)]
struct InputState {
    awaiting: Awaiting,
    /// A follow-up was typed while the model worked; the round's end takes it without a prompt.
    queued: bool,
    /// stdin ended or the user asked to exit: no more prompts.
    closed: bool,
}

type SharedInput = Arc<Mutex<InputState>>;

fn lock(state: &SharedInput) -> MutexGuard<'_, InputState> {
    // Every update leaves the state whole, so a panic elsewhere cannot leave it torn.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What to do with one typed line.
#[derive(Debug, PartialEq, Eq)]
enum LineAction {
    /// Send this intent.
    Send(ControlMsg),
    /// Show this on stderr and read on.
    AskAgain(&'static str),
    /// Nothing (an empty line while the model works).
    Ignore,
    /// End the session.
    End,
}

/// Decides what `line` means in the current state, updating it.
fn interpret(state: &mut InputState, line: &str) -> LineAction {
    match state.awaiting {
        Awaiting::Approval(id) => match parse_terminal_answer(line) {
            Some(answer) => LineAction::Send(answer.into_control(id)),
            None => LineAction::AskAgain(APPROVAL_HELP),
        },
        Awaiting::Question => LineAction::Send(ControlMsg::Input {
            text: line.to_owned(),
        }),
        Awaiting::Work | Awaiting::FollowUp => {
            let text = line.trim();
            if EXIT_COMMANDS.contains(&text) {
                return LineAction::End;
            }
            if text.is_empty() {
                return match state.awaiting {
                    Awaiting::FollowUp => LineAction::AskAgain(FOLLOW_UP_PROMPT),
                    Awaiting::Work | Awaiting::Approval(_) | Awaiting::Question => {
                        LineAction::Ignore
                    }
                };
            }
            state.queued = state.awaiting == Awaiting::Work;
            state.awaiting = Awaiting::Work;
            LineAction::Send(ControlMsg::FollowUp {
                text: text.to_owned(),
            })
        }
    }
}

/// Starts the renderer (until `session_ended`) and, with a terminal on stdin, the line reader.
/// The caller waits for follow-ups exactly when stdin is a terminal.
pub fn start(bus: &EventBus, human_available: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut events = bus.subscribe_frontend();
    let input: SharedInput = Arc::default();
    let follow_ups = std::io::stdin().is_terminal();
    if follow_ups {
        human_available.store(true, Ordering::SeqCst);
        let reader_bus = bus.clone();
        let reader_input = Arc::clone(&input);
        let reader_human = Arc::clone(&human_available);
        // A plain thread, not a runtime task: a blocked read must not keep the process alive.
        let spawned = std::thread::Builder::new()
            .name("stdin-lines".to_owned())
            .spawn(move || read_lines(&reader_bus, &reader_input, &reader_human));
        if spawned.is_err() {
            human_available.store(false, Ordering::SeqCst);
            lock(&input).closed = true;
            bus.close_intents();
        }
    }
    let spin = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        let mut view = View {
            input,
            follow_ups,
            spinning: false,
            frame: 0,
            spin,
            at_line_start: true,
            usage: Usage::default(),
            cost_usd: 0.0,
            sandbox_warned: false,
        };
        let mut tick = tokio::time::interval(Duration::from_millis(120));
        // Ticks missed while idle must not be drawn in a burst when the spinner starts.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => {
                        if view.render(&event) {
                            return;
                        }
                    }
                    None => return,
                },
                _ = tick.tick(), if view.spinning => view.spin_frame(),
            }
        }
    })
}

/// Turns typed lines into intents until end of input or an exit command, then closes the
/// intents lane: a waiting loop ends the session, a working one ends it after the round.
#[allow(clippy::print_stderr)]
fn read_lines(bus: &EventBus, input: &SharedInput, human_available: &AtomicBool) {
    let mut at_eof = true;
    for line in std::io::stdin().lock().lines() {
        let Ok(text) = line else { break };
        let action = interpret(&mut lock(input), &text);
        match action {
            LineAction::Send(msg) => bus.send_intent(msg),
            LineAction::AskAgain(text) => {
                eprint!("{text}");
                let _ = std::io::stderr().flush();
            }
            LineAction::Ignore => {}
            LineAction::End => {
                at_eof = false;
                break;
            }
        }
    }
    {
        let mut state = lock(input);
        // Ctrl-D at the prompt leaves the cursor after it; the summary belongs on its own line.
        if at_eof && state.awaiting == Awaiting::FollowUp {
            eprintln!();
        }
        state.closed = true;
    }
    human_available.store(false, Ordering::SeqCst);
    bus.close_intents();
}

/// Model text to stdout; a closed stdout (`| head`) just stops the text, never the run.
fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

struct View {
    input: SharedInput,
    /// Whether the loop waits for follow-ups (stdin is a terminal).
    follow_ups: bool,
    spinning: bool,
    frame: usize,
    spin: bool,
    at_line_start: bool,
    usage: Usage,
    cost_usd: f64,
    /// Whether the sandbox's second-layer warning was shown (once per session is enough).
    sandbox_warned: bool,
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
impl View {
    fn spin_frame(&mut self) {
        self.frame = (self.frame + 1) % SPINNER.len();
        eprint!("\r{} thinking…", SPINNER[self.frame]);
        let _ = std::io::stderr().flush();
    }

    fn stop_spinner(&mut self) {
        if self.spinning {
            self.spinning = false;
            eprint!("\r\x1b[2K");
        }
    }

    fn end_text_line(&mut self) {
        if !self.at_line_start {
            write_stdout("\n");
            self.at_line_start = true;
        }
    }

    /// Shows the follow-up prompt, unless a follow-up is already queued or input has ended.
    fn prompt_follow_up(&mut self) {
        self.stop_spinner();
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

    /// Shows an approval card; the next typed line answers it.
    fn ask_approval(
        &mut self,
        id: u64,
        category: ActionCategory,
        command_preview: &str,
        detail: Option<&str>,
    ) {
        self.stop_spinner();
        // Armed before the prompt shows, so an answer typed right after it counts.
        lock(&self.input).awaiting = Awaiting::Approval(id);
        eprint!(
            "{}",
            approval_card(category.name(), command_preview, detail, terminal_width())
        );
    }

    /// Shows a question; the next typed line answers it.
    fn ask_question(&mut self, question: &str) {
        self.stop_spinner();
        lock(&self.input).awaiting = Awaiting::Question;
        eprintln!("? {question}\n  (type your answer and press Enter)");
    }

    /// A shown question was answered or its batch ended: typed lines are follow-ups again.
    fn question_gone(&self) {
        let mut input = lock(&self.input);
        if input.awaiting == Awaiting::Question {
            input.awaiting = Awaiting::Work;
        }
    }

    /// The session's closing line with its token and cost totals.
    fn end_session(&mut self, session_id: &str, status: EndStatus) {
        self.stop_spinner();
        self.end_text_line();
        let u = &self.usage;
        eprintln!(
            "session {session_id} {status}: tokens in {} (cached {}), out {} (reasoning {}), cost ${:.4}",
            u.input_tokens,
            u.cached_input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            self.cost_usd
        );
    }

    /// Renders one event; `true` at the end of the session.
    fn render(&mut self, event: &AppEvent) -> bool {
        match event {
            AppEvent::TurnStarted { .. } => {
                lock(&self.input).awaiting = Awaiting::Work;
                self.spinning = self.spin;
            }
            AppEvent::ModelResponseDelta { text } => {
                self.stop_spinner();
                write_stdout(text);
                self.at_line_start = text.ends_with('\n');
            }
            AppEvent::ModelResponse { .. } => {
                self.stop_spinner();
                self.end_text_line();
            }
            AppEvent::ToolCall {
                name, arguments, ..
            } => eprintln!("{}", tool_call_line(name, arguments)),
            AppEvent::AgentOutput { name, output, .. } => {
                let first = output.lines().next().unwrap_or_default();
                eprintln!("  ↳ {name}: {}", clip(first, 160));
            }
            AppEvent::ApprovalRequired {
                id,
                command_preview,
                detail,
                category,
                ..
            } => self.ask_approval(*id, *category, command_preview, detail.as_deref()),
            AppEvent::ApprovalResolved { verdict, .. } => {
                lock(&self.input).awaiting = Awaiting::Work;
                eprintln!("  → {verdict}");
            }
            AppEvent::HumanQuestion { question, .. } => self.ask_question(question),
            AppEvent::BudgetWarning {
                used_tokens,
                budget_tokens,
                ..
            } => {
                eprintln!("! budget: {used_tokens} of {budget_tokens} tokens used");
            }
            AppEvent::ContextManagement { action, detail } => {
                eprintln!("! context {action}: {detail}")
            }
            AppEvent::Usage { .. } => {
                if let Some((usage, cost_usd)) = reported_usage(event) {
                    self.usage.add(&usage);
                    self.cost_usd += cost_usd;
                }
            }
            AppEvent::Done { message } => {
                self.end_text_line();
                eprintln!("✓ done: {}", clip(message, 500));
            }
            AppEvent::SessionEnded {
                session_id, status, ..
            } => {
                self.end_session(session_id, *status);
                return true;
            }
            AppEvent::SessionStarted {
                session_id,
                resumed: true,
                ..
            } => {
                eprintln!("resumed session {session_id}");
            }
            AppEvent::RoundComplete { reason, .. } => {
                // Only a round that ended `done` is followed by a wait for the next follow-up.
                if self.follow_ups && *reason == RoundEnd::Done {
                    self.prompt_follow_up();
                }
            }
            AppEvent::ToolBatchResult { output, .. } => {
                if let Some(warning) = output.get("sandbox_warning").and_then(|w| w.as_str())
                    && !std::mem::replace(&mut self.sandbox_warned, true)
                {
                    self.stop_spinner();
                    self.end_text_line();
                    eprintln!("! {warning}");
                }
                self.question_gone();
            }
            AppEvent::HumanAnswer { .. } => self.question_gone(),
            AppEvent::SessionStarted { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::Error { .. }
            | AppEvent::ControlCommand(_) => {}
        }
        false
    }
}

/// `▸ name key=value ...`: a tool call on one line, each argument clipped, invisible
/// characters escaped.
fn tool_call_line(name: &str, arguments: &serde_json::Value) -> String {
    let args = match arguments {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", clip(&v.to_string(), 80)))
            .collect::<Vec<_>>()
            .join(" "),
        other => clip(&other.to_string(), 120),
    };
    format!("▸ {name} {}", escape_invisible(&args))
}

/// Columns of a card when the terminal does not say.
const DEFAULT_WIDTH: usize = 100;
/// Previews longer than this show their length in the card's heading.
const LONG_PREVIEW_CHARS: usize = 80;

/// The width of the terminal on stderr, else `$COLUMNS`, else [`DEFAULT_WIDTH`].
fn terminal_width() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer, which outlives the call.
    let rc = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_col > 0 {
        return usize::from(size.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .filter(|c| *c > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// The approval card: the whole preview (already escaped by core), on the heading line when it
/// is short and single-line, else wrapped below it with its length; then an edit's detail.
fn approval_card(category: &str, preview: &str, detail: Option<&str>, width: usize) -> String {
    const INDENT: &str = "  ";
    const DETAIL_INDENT: &str = "  │ ";
    let chars = preview.chars().count();
    let heading = format!("? approve {category}: ");
    let mut card = String::new();
    if !preview.contains('\n') && chars <= LONG_PREVIEW_CHARS && heading.len() + chars <= width {
        card.push_str(&format!("{heading}{preview}\n"));
    } else {
        card.push_str(&format!("? approve {category} ({chars} characters):\n"));
        push_wrapped(&mut card, INDENT, preview, width);
    }
    if let Some(detail) = detail {
        push_wrapped(&mut card, DETAIL_INDENT, detail, width);
    }
    card.push_str("  [y]es / [s]kip / [a]ll / [n]o\n");
    card
}

/// Appends each line of `text` to `out`, cut into pieces that fit `width` after `indent`.
fn push_wrapped(out: &mut String, indent: &str, text: &str, width: usize) {
    let room = width.saturating_sub(indent.chars().count()).max(20);
    for line in text.split('\n') {
        let chars: Vec<char> = line.chars().collect();
        if chars.is_empty() {
            out.push_str(indent.trim_end());
            out.push('\n');
        }
        for piece in chars.chunks(room) {
            out.push_str(indent);
            out.extend(piece);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_card_shows_a_long_command_whole_and_wrapped() {
        let short = approval_card("command_exec", "$ ls", None, 80);
        assert_eq!(
            short,
            "? approve command_exec: $ ls\n  [y]es / [s]kip / [a]ll / [n]o\n"
        );
        let long = format!("$ {} && rm -rf ~/tail-marker", "x".repeat(380));
        let card = approval_card("command_exec", &long, None, 60);
        let chars = long.chars().count();
        assert!(card.starts_with(&format!("? approve command_exec ({chars} characters):\n")));
        let body: String = card
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  ") && !l.contains("[y]es"))
            .map(|l| l.strip_prefix("  ").unwrap())
            .collect();
        assert_eq!(body, long);
        assert!(card.lines().all(|l| l.chars().count() <= 60), "{card}");
        let edit = approval_card(
            "file_write",
            "edit a.txt (append)",
            Some("append 3 bytes:\n+ abc"),
            80,
        );
        assert!(
            edit.contains("edit a.txt (append)\n  │ append 3 bytes:\n  │ + abc\n"),
            "{edit}"
        );
    }

    fn follow_up(text: &str) -> LineAction {
        LineAction::Send(ControlMsg::FollowUp { text: text.into() })
    }

    #[test]
    fn a_pending_approval_or_question_takes_the_line() {
        let mut state = InputState {
            awaiting: Awaiting::Approval(7),
            ..InputState::default()
        };
        assert_eq!(
            interpret(&mut state, "maybe"),
            LineAction::AskAgain(APPROVAL_HELP)
        );
        assert_eq!(
            interpret(&mut state, "/exit"),
            LineAction::AskAgain(APPROVAL_HELP)
        );
        assert_eq!(
            interpret(&mut state, "s"),
            LineAction::Send(ControlMsg::Skip { id: 7 })
        );
        state.awaiting = Awaiting::Question;
        for answer in ["/quit", "", " teal "] {
            assert_eq!(
                interpret(&mut state, answer),
                LineAction::Send(ControlMsg::Input {
                    text: answer.into()
                })
            );
        }
        assert_eq!(state.awaiting, Awaiting::Question);
    }

    #[test]
    fn at_the_prompt_a_line_is_a_follow_up_an_exit_or_asked_again() {
        let mut state = InputState {
            awaiting: Awaiting::FollowUp,
            ..InputState::default()
        };
        assert_eq!(
            interpret(&mut state, "   "),
            LineAction::AskAgain(FOLLOW_UP_PROMPT)
        );
        assert_eq!(interpret(&mut state, " /exit "), LineAction::End);
        assert_eq!(interpret(&mut state, "/quit"), LineAction::End);
        assert_eq!(interpret(&mut state, "/exits"), follow_up("/exits"));
        // Sent: the model works again, and nothing is queued for the round's end.
        assert_eq!(state.awaiting, Awaiting::Work);
        assert!(!state.queued);
    }

    #[test]
    fn a_tool_call_is_one_line_with_clipped_arguments() {
        assert_eq!(
            tool_call_line("exec_command", &serde_json::json!({"command": "ls -la"})),
            "▸ exec_command command=\"ls -la\""
        );
        let long = tool_call_line(
            "write_file",
            &serde_json::json!({"content": "x".repeat(200)}),
        );
        assert!(long.chars().count() < 120, "{long}");
        assert!(!tool_call_line("f", &serde_json::json!("a\u{202e}b")).contains('\u{202e}'));
    }

    #[test]
    fn a_line_typed_while_the_model_works_is_queued() {
        let mut state = InputState::default();
        assert_eq!(interpret(&mut state, ""), LineAction::Ignore);
        assert!(!state.queued);
        assert_eq!(
            interpret(&mut state, " also add a test"),
            follow_up("also add a test")
        );
        assert!(state.queued);
        assert_eq!(interpret(&mut state, "/exit"), LineAction::End);
    }
}

//! What the person at the terminal types: lines become follow-ups, answers to questions and
//! approvals; at an approval one key answers. The terminal stays in its usual line mode
//! (the kernel echoes and edits the line) except while an approval card is shown, when it is
//! switched to single keys ([`KeyMode`]) so `y`, `s`, `a`, `n` or `?` act without Enter (and
//! `h`, the host for good, at a `network` approval).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_core::approval::{ApprovalAnswer, parse_terminal_answer};
use intendant_core::bus::EventBus;
use intendant_protocol::events::{ActionCategory, ControlMsg};

use super::card::answers;

/// Shown on stderr when the session waits for a follow-up.
pub const FOLLOW_UP_PROMPT: &str = "> ";
/// Typed at the follow-up prompt, these end the session.
const EXIT_COMMANDS: [&str; 2] = ["/exit", "/quit"];
/// Ctrl-D: end of input (in single-key mode the kernel passes it through as a byte).
const END_OF_INPUT: u8 = 0x04;
/// The erase key (DEL) and Ctrl-H, edited by hand in single-key mode.
const ERASE: [u8; 2] = [0x7f, 0x08];

/// What a typed line is taken as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Awaiting {
    /// The model is working: a line is queued as a follow-up for the end of the round.
    #[default]
    Work,
    /// An approval prompt is shown: a key or line is y / s / a / n (or h at a `network` one).
    Approval {
        /// The approval.
        id: u64,
        /// What it is about.
        category: ActionCategory,
    },
    /// A question is shown: a line is its answer.
    Question,
    /// The round is over and the loop waits: a line starts the next round.
    FollowUp,
}

/// Shared by the renderer (which knows what is shown) and the stdin reader.
#[derive(Debug, Default)]
pub struct InputState {
    /// What a typed line is taken as.
    pub awaiting: Awaiting,
    /// A follow-up was typed while the model worked; the round's end takes it without a prompt.
    pub queued: bool,
    /// stdin ended or the user asked to exit: no more prompts.
    pub closed: bool,
    /// Follow-ups typed here and not yet seen back as sent ([`InputState::typed_here`]).
    typed: VecDeque<String>,
}

/// Most typed follow-ups [`InputState`] remembers until they are seen back.
const TYPED_KEPT: usize = 32;

impl InputState {
    /// Remembers a follow-up typed here, to be told from one another frontend sent.
    fn typed(&mut self, text: &str) {
        if self.typed.len() == TYPED_KEPT {
            self.typed.pop_front();
        }
        self.typed.push_back(text.to_owned());
    }

    /// Whether a follow-up sent to the session, `text`, was typed here (it is on the screen
    /// already); each typed one answers once.
    pub fn typed_here(&mut self, text: &str) -> bool {
        let Some(at) = self.typed.iter().position(|t| t == text) else {
            return false;
        };
        self.typed.remove(at);
        true
    }
}

/// The input state, shared.
pub type SharedInput = Arc<Mutex<InputState>>;

/// Locks the shared input state.
pub fn lock(state: &SharedInput) -> MutexGuard<'_, InputState> {
    // Every update leaves the state whole, so a panic elsewhere cannot leave it torn.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What to do with one typed line.
#[derive(Debug, PartialEq, Eq)]
pub enum LineAction {
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
pub fn interpret(state: &mut InputState, line: &str) -> LineAction {
    match state.awaiting {
        Awaiting::Approval { id, category } => match answer_of(id, category, line) {
            Some(answer) => LineAction::Send(answer),
            None => LineAction::AskAgain(answers(category).1),
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
                    Awaiting::Work | Awaiting::Approval { .. } | Awaiting::Question => {
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

/// What one key at an approval does, before any other key of its line was typed: an answer,
/// the explanation, or the start of a typed line (`None`).
#[derive(Debug, PartialEq, Eq)]
pub enum KeyAction {
    /// Send this answer.
    Answer(ControlMsg),
    /// Show what the answers do.
    Explain,
    /// Enter alone: ask again.
    AskAgain,
}

/// The meaning of `key` typed first at approval `id` of `category`; `None` starts a typed line.
pub fn approval_key(id: u64, category: ActionCategory, key: u8) -> Option<KeyAction> {
    match key {
        b'\n' | b'\r' => Some(KeyAction::AskAgain),
        b'?' => Some(KeyAction::Explain),
        _ => {
            answer_of(id, category, char::from(key).encode_utf8(&mut [0; 4])).map(KeyAction::Answer)
        }
    }
}

/// The answer `input` gives to approval `id` of `category`: y, s, a or n, at a `network`
/// approval also h (host), the host for good, and at a `schedule` only y or n (the daemon
/// refuses any other answer to one); `None` for anything else.
fn answer_of(id: u64, category: ActionCategory, input: &str) -> Option<ControlMsg> {
    let word = input.trim().to_ascii_lowercase();
    if category == ActionCategory::Network && matches!(word.as_str(), "h" | "host") {
        return Some(ControlMsg::AllowHost { id });
    }
    let answer = parse_terminal_answer(&word)?;
    if category == ActionCategory::Schedule
        && !matches!(answer, ApprovalAnswer::Approve | ApprovalAnswer::Deny)
    {
        return None;
    }
    Some(answer.into_control(id))
}

/// Single-key mode of the terminal on stdin: the saved line-mode settings, restored whenever
/// single keys are not wanted. Inert when stdin is not a terminal.
#[derive(Debug)]
pub struct KeyMode {
    saved: Option<libc::termios>,
    single: AtomicBool,
}

impl KeyMode {
    /// Reads the terminal's current settings (line mode) to restore later.
    pub fn new() -> KeyMode {
        // SAFETY: a zeroed termios is a valid value for tcgetattr to overwrite.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr writes one termios into the pointer, which outlives the call.
        let ok = unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } == 0;
        KeyMode {
            saved: ok.then_some(saved),
            single: AtomicBool::new(false),
        }
    }

    /// Whether keys arrive one at a time now.
    pub fn is_single(&self) -> bool {
        self.single.load(Ordering::SeqCst)
    }

    /// Switches to single keys (`true`) or back to line mode. The kernel wakes a read that is
    /// waiting for a whole line, so the switch takes effect at once.
    pub fn set_single(&self, single: bool) {
        let Some(saved) = self.saved else { return };
        if self.single.swap(single, Ordering::SeqCst) == single {
            return;
        }
        let mut mode = saved;
        if single {
            mode.c_lflag &= !libc::ICANON;
            mode.c_cc[libc::VMIN] = 1;
            mode.c_cc[libc::VTIME] = 0;
        }
        // SAFETY: `mode` is a valid termios read from this terminal and changed only in flags.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &mode) };
    }
}

/// Writes `text` to stderr at once.
#[allow(clippy::print_stderr)]
fn show(text: &str) {
    eprint!("{text}");
    let _ = std::io::stderr().flush();
}

/// Turns typed input into intents until end of input or an exit command, then closes the
/// intents lane: a waiting loop ends the session, a working one ends it after the round.
pub fn read_input(
    bus: &EventBus,
    input: &SharedInput,
    keys: &KeyMode,
    human_available: &AtomicBool,
) {
    let mut at_eof = true;
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    'read: loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // After a key answered, the rest of its line in the same read was typed with it
        // (`yes` and Enter on a line-mode terminal): it is not the next input.
        let mut rest_of_answer = false;
        for &byte in &buf[..n] {
            if rest_of_answer {
                rest_of_answer = byte != b'\n';
                continue;
            }
            let awaiting = lock(input).awaiting;
            if let (Awaiting::Approval { id, category }, true) = (awaiting, line.is_empty())
                && let Some(action) = approval_key(id, category, byte)
            {
                let (prompt, help, explained) = answers(category);
                match action {
                    KeyAction::Answer(msg) => {
                        if keys.is_single() {
                            show("\n");
                        }
                        keys.set_single(false);
                        lock(input).awaiting = Awaiting::Work;
                        bus.send_intent(msg);
                        rest_of_answer = byte != b'\n';
                    }
                    KeyAction::Explain => {
                        let start = if keys.is_single() { "\n" } else { "" };
                        show(&format!("{start}{explained}{prompt}\n"));
                    }
                    KeyAction::AskAgain => show(help),
                }
                continue;
            }
            if byte == END_OF_INPUT && line.is_empty() {
                break 'read;
            }
            if ERASE.contains(&byte) && keys.is_single() {
                line.pop();
                continue;
            }
            if byte != b'\n' {
                line.push(byte);
                continue;
            }
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            let action = interpret(&mut lock(input), &text);
            match action {
                LineAction::Send(msg) => {
                    if matches!(awaiting, Awaiting::Approval { .. }) {
                        keys.set_single(false);
                    }
                    if let ControlMsg::FollowUp { text } = &msg {
                        lock(input).typed(text);
                    }
                    bus.send_intent(msg);
                }
                LineAction::AskAgain(text) => show(text),
                LineAction::Ignore => {}
                LineAction::End => {
                    at_eof = false;
                    break 'read;
                }
            }
        }
    }
    keys.set_single(false);
    {
        let mut state = lock(input);
        // Ctrl-D at the prompt leaves the cursor after it; the summary belongs on its own line.
        if at_eof && state.awaiting == Awaiting::FollowUp {
            show("\n");
        }
        state.closed = true;
    }
    human_available.store(false, Ordering::SeqCst);
    bus.close_intents();
}

#[cfg(test)]
mod tests {
    use super::super::card::{
        APPROVAL_HELP, NETWORK_APPROVAL_HELP, SCHEDULE_ANSWER_PROMPT, SCHEDULE_APPROVAL_HELP,
    };
    use super::*;

    fn follow_up(text: &str) -> LineAction {
        LineAction::Send(ControlMsg::FollowUp { text: text.into() })
    }

    #[test]
    fn a_pending_approval_or_question_takes_the_line() {
        let mut state = InputState {
            awaiting: Awaiting::Approval {
                id: 7,
                category: ActionCategory::CommandExec,
            },
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
        // The host for good answers a network approval only.
        assert_eq!(
            interpret(&mut state, "h"),
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
    fn h_answers_a_network_approval_with_the_host_for_good() {
        let mut state = InputState {
            awaiting: Awaiting::Approval {
                id: 9,
                category: ActionCategory::Network,
            },
            ..InputState::default()
        };
        assert_eq!(
            interpret(&mut state, "maybe"),
            LineAction::AskAgain(NETWORK_APPROVAL_HELP)
        );
        assert_eq!(
            interpret(&mut state, " Host "),
            LineAction::Send(ControlMsg::AllowHost { id: 9 })
        );
        assert_eq!(
            approval_key(9, ActionCategory::Network, b'h'),
            Some(KeyAction::Answer(ControlMsg::AllowHost { id: 9 }))
        );
        assert_eq!(
            approval_key(9, ActionCategory::Network, b'a'),
            Some(KeyAction::Answer(ControlMsg::ApproveAll { id: 9 }))
        );
        for other in [ActionCategory::CommandExec, ActionCategory::Memory] {
            assert_eq!(approval_key(9, other, b'h'), None, "{other:?}");
        }
    }

    #[test]
    fn a_schedule_is_answered_yes_or_no_only() {
        let mut state = InputState {
            awaiting: Awaiting::Approval {
                id: 4,
                category: ActionCategory::Schedule,
            },
            ..InputState::default()
        };
        for refused in ["s", "skip", "a", "all", "h"] {
            assert_eq!(
                interpret(&mut state, refused),
                LineAction::AskAgain(SCHEDULE_APPROVAL_HELP),
                "{refused}"
            );
        }
        assert_eq!(approval_key(4, ActionCategory::Schedule, b'a'), None);
        assert_eq!(
            approval_key(4, ActionCategory::Schedule, b'y'),
            Some(KeyAction::Answer(ControlMsg::Approve { id: 4 }))
        );
        assert_eq!(
            interpret(&mut state, "no"),
            LineAction::Send(ControlMsg::Deny { id: 4 })
        );
        assert_eq!(answers(ActionCategory::Schedule).0, SCHEDULE_ANSWER_PROMPT);
    }

    #[test]
    fn one_key_answers_an_approval_and_others_start_a_line() {
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b'y'),
            Some(KeyAction::Answer(ControlMsg::Approve { id: 3 }))
        );
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b'A'),
            Some(KeyAction::Answer(ControlMsg::ApproveAll { id: 3 }))
        );
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b'n'),
            Some(KeyAction::Answer(ControlMsg::Deny { id: 3 }))
        );
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b's'),
            Some(KeyAction::Answer(ControlMsg::Skip { id: 3 }))
        );
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b'?'),
            Some(KeyAction::Explain)
        );
        assert_eq!(
            approval_key(3, ActionCategory::CommandExec, b'\n'),
            Some(KeyAction::AskAgain)
        );
        assert_eq!(approval_key(3, ActionCategory::CommandExec, b'm'), None);
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

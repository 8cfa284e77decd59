//! The terminal frontend (default): model text streams to stdout as it arrives; tool calls,
//! short results, usage and errors go to stderr; a spinner runs on stderr while the model is
//! thinking, only when stderr is a terminal. When stdin is a terminal, typed lines answer the
//! model's questions.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use intendant_core::approval::parse_terminal_answer;
use intendant_core::bus::EventBus;
use intendant_core::conversation::clip;
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_providers::Usage;

const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

/// Starts the renderer (until `session_ended`) and, with a terminal on stdin, the answer reader.
pub fn start(bus: &EventBus, human_available: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut events = bus.subscribe_frontend();
    // The approval the typed line answers, if one is pending (else a line answers a question).
    let pending: Arc<Mutex<Option<u64>>> = Arc::default();
    if std::io::stdin().is_terminal() {
        human_available.store(true, Ordering::SeqCst);
        let reader_bus = bus.clone();
        let reader_pending = Arc::clone(&pending);
        let _ = std::thread::Builder::new()
            .name("stdin-answers".to_owned())
            .spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(text) = line else { break };
                    let approval = *reader_pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    match approval {
                        Some(id) => match parse_terminal_answer(&text) {
                            Some(answer) => reader_bus.send_intent(answer.into_control(id)),
                            None => reprompt(),
                        },
                        None => reader_bus.send_intent(ControlMsg::Input { text }),
                    }
                }
                human_available.store(false, Ordering::SeqCst);
                reader_bus.close_intents();
            });
    }
    let spin = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        let mut view = View {
            pending,
            spinning: false,
            frame: 0,
            spin,
            at_line_start: true,
            usage: Usage::default(),
            cost_usd: 0.0,
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

/// Model text to stdout; a closed stdout (`| head`) just stops the text, never the run.
fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[allow(clippy::print_stderr)]
fn reprompt() {
    eprintln!("  please answer y (yes), s (skip), a (approve all) or n (no)");
}

struct View {
    pending: Arc<Mutex<Option<u64>>>,
    spinning: bool,
    frame: usize,
    spin: bool,
    at_line_start: bool,
    usage: Usage,
    cost_usd: f64,
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

    /// Renders one event; `true` at the end of the session.
    fn render(&mut self, event: &AppEvent) -> bool {
        match event {
            AppEvent::TurnStarted { .. } => {
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
            } => {
                let args = match arguments {
                    serde_json::Value::Object(map) => map
                        .iter()
                        .map(|(k, v)| format!("{k}={}", clip(&v.to_string(), 80)))
                        .collect::<Vec<_>>()
                        .join(" "),
                    other => clip(&other.to_string(), 120),
                };
                eprintln!("▸ {name} {args}");
            }
            AppEvent::AgentOutput { name, output, .. } => {
                let first = output.lines().next().unwrap_or_default();
                eprintln!("  ↳ {name}: {}", clip(first, 160));
            }
            AppEvent::ApprovalRequired {
                id,
                command_preview,
                category,
                ..
            } => {
                self.stop_spinner();
                // Armed before the prompt shows, so an answer typed right after it counts.
                *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(*id);
                eprintln!(
                    "? approve {category}: {command_preview}\n  [y]es / [s]kip / [a]ll / [n]o"
                );
            }
            AppEvent::ApprovalResolved { verdict, .. } => {
                *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = None;
                eprintln!("  → {verdict}");
            }
            AppEvent::HumanQuestion { question, .. } => {
                self.stop_spinner();
                eprintln!("? {question}\n  (type your answer and press Enter)");
            }
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
            AppEvent::Usage {
                input_tokens,
                cached_input_tokens,
                output_tokens,
                reasoning_tokens,
                cost_usd,
                ..
            } => {
                self.usage.add(&Usage {
                    input_tokens: *input_tokens,
                    cached_input_tokens: *cached_input_tokens,
                    output_tokens: *output_tokens,
                    reasoning_tokens: *reasoning_tokens,
                });
                self.cost_usd += cost_usd;
            }
            AppEvent::Done { message } => {
                self.end_text_line();
                eprintln!("✓ done: {}", clip(message, 500));
            }
            AppEvent::SessionEnded {
                session_id, status, ..
            } => {
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
                return true;
            }
            AppEvent::SessionStarted {
                session_id,
                resumed: true,
                ..
            } => {
                eprintln!("resumed session {session_id}");
            }
            AppEvent::SessionStarted { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::ToolBatchResult { .. }
            | AppEvent::HumanAnswer { .. }
            | AppEvent::RoundComplete { .. }
            | AppEvent::Error { .. }
            | AppEvent::ControlCommand(_) => {}
        }
        false
    }
}

//! The `--json` frontend: every event as one JSON object per stdout line (nothing else on
//! stdout), and stdin lines as intents: a `ControlMsg` JSON object, or any other line as a
//! follow-up. Stdin EOF means nobody is there any more: questions get the headless answer and
//! the session ends after the current round.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use intendant_core::bus::EventBus;
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_protocol::socket::{MAX_REQUEST_LINE, over_task_bound};

use crate::stdin_text::{Line, read_line};

/// Writes one event line to stdout; `false` when stdout is gone.
pub fn print_event(event: &AppEvent) -> bool {
    let Ok(line) = serde_json::to_string(event) else {
        return true;
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// How long startup waits for the stdin reader to take in what is already there.
const STDIN_SETTLE: Duration = Duration::from_secs(2);

/// Starts the renderer (until `session_ended`) and the stdin reader. Returns once the reader
/// has taken in whatever stdin already held, so a closed stdin (`< /dev/null`) is known before
/// the first turn: the run is then headless from the start, never briefly "interactive".
pub fn start(bus: &EventBus, human_available: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut events = bus.subscribe_frontend();
    human_available.store(true, Ordering::SeqCst);
    let reader_bus = bus.clone();
    let reader_human = Arc::clone(&human_available);
    let (settled_tx, settled) = std::sync::mpsc::channel();
    // A plain thread, not a runtime task: a blocked read must not keep the process alive.
    let spawned = std::thread::Builder::new()
        .name("stdin-intents".to_owned())
        .spawn(move || read_intents(&reader_bus, &reader_human, &settled_tx));
    match spawned {
        // A writer that never pauses must not hold up the start for long.
        Ok(_) => {
            let _ = settled.recv_timeout(STDIN_SETTLE);
        }
        Err(_) => {
            human_available.store(false, Ordering::SeqCst);
            bus.close_intents();
        }
    }
    tokio::spawn(async move {
        let mut stdout_open = true;
        while let Some(event) = events.recv().await {
            let missed = events.take_lagged();
            if missed > 0 && stdout_open {
                stdout_open = print_event(&AppEvent::Error {
                    message: format!(
                        "frontend fell behind by {missed} events: some model_response_delta \
                         text was not shown (model_response has it whole); every other event \
                         is still delivered"
                    ),
                });
            }
            let end = matches!(event, AppEvent::SessionEnded { .. });
            let echo = matches!(event, AppEvent::ControlCommand(_));
            if stdout_open && !echo {
                stdout_open = print_event(&event);
            }
            if end {
                return;
            }
        }
    })
}

/// Parses one stdin line into an intent: a `ControlMsg` object, else follow-up text. A line
/// that looks like a control message (a JSON object with an `action`) but is not a valid one is
/// follow-up text too (`docs/controller.md`: what does not parse as a ControlMsg is a
/// follow-up), returned with a notice so a script sees that its message was not taken as a
/// command.
pub fn parse_line(line: &str) -> Option<(ControlMsg, Option<String>)> {
    let text = line.trim();
    if text.is_empty() {
        return None;
    }
    let mut notice = None;
    if text.starts_with('{')
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
        && value.get("action").is_some()
    {
        match serde_json::from_value(value) {
            Ok(msg) => return Some((msg, None)),
            Err(e) => {
                notice = Some(format!(
                    "not a valid control message ({e}); sent as follow-up text: {text}"
                ));
            }
        }
    }
    let follow_up = ControlMsg::FollowUp {
        text: text.to_owned(),
    };
    Some((follow_up, notice))
}

/// What a stdin line over the bound is told: dropped, and what fits.
pub fn too_long_line() -> String {
    format!(
        "a stdin line over {MAX_REQUEST_LINE} bytes was dropped: a control message or follow-up \
         is one line of at most that (a long follow-up: put it in a file of the project and name \
         the file)"
    )
}

/// Turns stdin lines into intents until end of file. `settled` is told once nothing more is
/// immediately readable (or at end of file).
fn read_intents(bus: &EventBus, human_available: &AtomicBool, settled: &mpsc::Sender<()>) {
    // At least the capacity of std's own stdin buffer, so reads bypass it and everything
    // already read sits in `reader`'s buffer, where it can be seen.
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, std::io::stdin());
    let mut line = Vec::new();
    loop {
        if reader.buffer().is_empty() && !stdin_readable_now() {
            let _ = settled.send(());
        }
        match read_line(&mut reader, &mut line, MAX_REQUEST_LINE) {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::TooLong) => bus.emit(AppEvent::Error {
                message: too_long_line(),
            }),
            Ok(Line::Complete) => {
                let text = String::from_utf8_lossy(&line);
                if let Some((msg, notice)) = parse_line(&text) {
                    if let Some(message) = notice {
                        bus.emit(AppEvent::Error { message });
                    }
                    // Held to the bound a daemon's session is held to.
                    let over = match &msg {
                        ControlMsg::FollowUp { text } => over_task_bound(text, "the follow-up"),
                        ControlMsg::Input { text } => over_task_bound(text, "the answer"),
                        _ => None,
                    };
                    match over {
                        Some(why) => bus.emit(AppEvent::Error {
                            message: format!("{why}: it was dropped"),
                        }),
                        None => bus.send_intent(msg),
                    }
                }
            }
        }
    }
    human_available.store(false, Ordering::SeqCst);
    bus.close_intents();
    let _ = settled.send(());
}

/// Whether a read of stdin would return at once (data or end of file).
#[cfg(unix)]
fn stdin_readable_now() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, initialized pollfd and a zero timeout; poll only writes `revents`.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0
}

/// Without a cheap probe, assume nothing is waiting (the reader still sees EOF when it comes).
#[cfg(not(unix))]
fn stdin_readable_now() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_intents() {
        let follow_up = |t: &str| ControlMsg::FollowUp { text: t.into() };
        assert_eq!(
            parse_line(r#"{"action":"approve","id":3}"#),
            Some((ControlMsg::Approve { id: 3 }, None))
        );
        assert_eq!(
            parse_line(r#" {"action":"follow_up","text":"go on"} "#),
            Some((follow_up("go on"), None))
        );
        assert_eq!(
            parse_line("  fix the test "),
            Some((follow_up("fix the test"), None))
        );
        assert_eq!(
            parse_line(r#"{"note":"x"}"#),
            Some((follow_up(r#"{"note":"x"}"#), None))
        );
        assert_eq!(parse_line("   "), None);
        // Not a ControlMsg: follow-up text, with a notice naming the problem.
        let (msg, notice) = parse_line(r#"{"action":"explode"}"#).unwrap();
        assert_eq!(msg, follow_up(r#"{"action":"explode"}"#));
        assert!(notice.unwrap().contains("explode"));
        let (msg, notice) = parse_line(r#"{"action":"approve"}"#).unwrap();
        assert_eq!(msg, follow_up(r#"{"action":"approve"}"#));
        assert!(notice.unwrap().contains("id"));
    }
}

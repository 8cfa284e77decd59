//! The terminal frontend (default): model text streams to stdout as it arrives; tool calls and
//! their results rendered for a human, approval cards, usage and errors go to stderr; a
//! progress line runs on stderr while nothing else moves, only when stdout and stderr are
//! terminals. It renders purely from [`AppEvent`](intendant_protocol::events::AppEvent)s on an
//! [`EventBus`], so it serves a local task and a daemon session attached over the socket alike.
//!
//! When stdin is a terminal the session stays open like a chat: a typed line answers a pending
//! question; otherwise it is a follow-up, and after each completed round a `> ` prompt on
//! stderr waits for the next one. At an approval one key answers. End of input (Ctrl-D),
//! `/exit` or `/quit` ends the session. Without a terminal on stdin nothing is read: one task,
//! then exit.
//!
//! # Layout
//! - `view`: the live renderer: the narrator's lines, and around them what only a live view
//!   has (streamed model text, the progress line, the approval card, prompts).
//! - `narrator`: how each event reads, said the same live and in `sessions show`.
//! - `input`: typed lines and keys to intents; single-key mode at approvals.
//! - `render`: tool calls and results for a human (shared with `sessions show`).
//! - `diff`: an edit's unified diff from its arguments.
//! - `card`: the approval card.
//! - `progress`: the spinner line.
//! - `style`: colour choice, tones, width and wrapping.
//! - `units`: how counts, sizes and durations read.

mod card;
mod diff;
mod input;
pub mod narrator;
mod progress;
pub mod render;
pub mod style;
pub mod units;
mod view;

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use intendant_core::bus::EventBus;

use input::{KeyMode, SharedInput, lock, read_input};
use view::View;

/// Starts the renderer (until `session_ended`) and, with a terminal on stdin, the line reader.
/// The caller waits for follow-ups exactly when stdin is a terminal.
pub fn start(bus: &EventBus, human_available: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut events = bus.subscribe_frontend();
    let input: SharedInput = Arc::default();
    let follow_ups = std::io::stdin().is_terminal();
    let keys = Arc::new(KeyMode::new());
    if follow_ups {
        human_available.store(true, Ordering::SeqCst);
        let reader_bus = bus.clone();
        let reader_input = Arc::clone(&input);
        let reader_keys = Arc::clone(&keys);
        let reader_human = Arc::clone(&human_available);
        // A plain thread, not a runtime task: a blocked read must not keep the process alive.
        let spawned = std::thread::Builder::new()
            .name("stdin-lines".to_owned())
            .spawn(move || read_input(&reader_bus, &reader_input, &reader_keys, &reader_human));
        if spawned.is_err() {
            human_available.store(false, Ordering::SeqCst);
            lock(&input).closed = true;
            bus.close_intents();
        }
    }
    tokio::spawn(async move {
        let mut view = View::new(input, keys, follow_ups);
        let mut idle = tokio::time::interval(view::STREAM_PAUSE / 2);
        idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
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
                _ = idle.tick() => view.idle(),
            }
        }
    })
}

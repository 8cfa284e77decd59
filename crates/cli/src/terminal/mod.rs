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
//! - `lineage`: session listings with each sub-agent under its parent.

mod card;
mod diff;
mod input;
pub mod lineage;
pub mod narrator;
mod progress;
pub mod render;
pub mod style;
pub mod units;
mod view;

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use intendant_core::bus::{EventBus, FrontendReceiver};
use intendant_protocol::events::AppEvent;
use tokio::sync::mpsc;

use input::{KeyMode, SharedInput, lock, read_input};
use view::View;

/// Where the renderer's events come from.
enum Source {
    /// A local session's bus, as its events happen.
    Live(FrontendReceiver),
    /// A daemon session's events with the time each happened, when its stamp reads (an attach
    /// replays its history at once: the time of arrival would make every turn and command
    /// read `0.0s`).
    Timed(mpsc::UnboundedReceiver<(AppEvent, Option<i64>)>),
}

impl Source {
    async fn recv(&mut self) -> Option<(AppEvent, Option<i64>)> {
        match self {
            Source::Live(events) => events.recv().await.map(|event| (event, None)),
            Source::Timed(events) => events.recv().await,
        }
    }

    /// Whether the renderer ends at the first `session_ended`: a local session's run ends
    /// there, while a daemon session's history holds each run of a resumed session, each with
    /// its end, so its sender ends it (by closing).
    fn ends_at_session_end(&self) -> bool {
        matches!(self, Source::Live(_))
    }
}

/// Starts the renderer (until `session_ended`) and, with a terminal on stdin, the line reader.
/// The caller waits for follow-ups exactly when stdin is a terminal.
pub fn start(bus: &EventBus, human_available: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    start_from(
        bus,
        human_available,
        Source::Live(bus.subscribe_frontend()),
        true,
    )
}

/// [`start`] for events sent on `events` with the time each happened (milliseconds since the
/// epoch; `None`: when it arrives), such as a daemon session's envelopes, until `events`
/// closes (a resumed session's history ends more than one run); `bus` still carries
/// what the human types, unless `answers` is false (a session whose human is elsewhere: its
/// approvals are shown, never asked).
pub fn start_timed(
    bus: &EventBus,
    human_available: Arc<AtomicBool>,
    events: mpsc::UnboundedReceiver<(AppEvent, Option<i64>)>,
    answers: bool,
) -> tokio::task::JoinHandle<()> {
    start_from(bus, human_available, Source::Timed(events), answers)
}

fn start_from(
    bus: &EventBus,
    human_available: Arc<AtomicBool>,
    mut events: Source,
    answers: bool,
) -> tokio::task::JoinHandle<()> {
    let input: SharedInput = Arc::default();
    let follow_ups = answers && std::io::stdin().is_terminal();
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
                    Some((event, at)) => {
                        if view.render(&event, at) && events.ends_at_session_end() {
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

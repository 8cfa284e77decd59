//! The progress line on stderr while nothing else moves: what is happening (waiting for the
//! model, running a command), for how long, and the session's tokens and cost so far. It is
//! cleared before anything else is written, and never drawn unless both stdout and stderr are
//! terminals (a pipe or a log file must not receive it).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::style::clip_width;

/// How often the spinner moves.
const TICK: Duration = Duration::from_millis(100);
/// Columns kept free for the spinner, elapsed time, tokens and cost.
const RESERVED_COLUMNS: usize = 40;

/// The spinner line, when one is shown.
pub struct Progress {
    enabled: bool,
    width: usize,
    bar: Option<ProgressBar>,
    totals: String,
}

impl Progress {
    /// A progress line that draws only when `enabled` (both streams are terminals).
    pub fn new(enabled: bool, width: usize) -> Progress {
        Progress {
            enabled,
            width,
            bar: None,
            totals: String::new(),
        }
    }

    /// Shows `what` is happening, timed from now (replacing what was shown).
    pub fn start(&mut self, what: &str) {
        self.stop();
        if !self.enabled {
            return;
        }
        let style = ProgressStyle::with_template("{spinner} {msg} · {elapsed}{prefix}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
            .with_style(style)
            .with_message(clip_width(
                what,
                self.width.saturating_sub(RESERVED_COLUMNS),
            ))
            .with_prefix(self.totals.clone());
        bar.enable_steady_tick(TICK);
        self.bar = Some(bar);
    }

    /// The session's totals shown after the elapsed time (`· 1.2k tokens · $0.0100`).
    pub fn set_totals(&mut self, totals: String) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(totals.clone());
        }
        self.totals = totals;
    }

    /// Whether a line is shown (or would be, on a terminal).
    pub fn is_shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Clears the line (nothing when none is shown).
    pub fn stop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

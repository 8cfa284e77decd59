//! How text looks on this terminal: whether to colour (`--color`, `NO_COLOR`, `CLICOLOR`,
//! `CLICOLOR_FORCE`, whether the stream is a terminal), the few tones the frontend uses, the
//! width of the terminal, and wrapping by display width (a CJK character takes two columns).

use std::sync::OnceLock;

use anstyle::{AnsiColor, Effects, Style};
use unicode_width::UnicodeWidthChar;

/// When to colour output (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when the stream is a terminal, unless `NO_COLOR` or `CLICOLOR=0` says otherwise
    /// (`CLICOLOR_FORCE` colours even a pipe).
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// How the terminal frontend renders, chosen once per process from the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Display {
    /// `--color`.
    pub color: ColorChoice,
    /// `--verbose`: raw tool results and whole reasoning besides the human rendering.
    pub verbose: bool,
}

static DISPLAY: OnceLock<Display> = OnceLock::new();

/// Sets how this process renders. One process has one terminal, so this is the process's
/// choice, like `NO_COLOR`; every frontend that renders here (a task run, `sessions show`, an
/// attached daemon session) reads it. Later calls are ignored.
pub fn configure(display: Display) {
    let _ = DISPLAY.set(display);
}

/// What [`configure`] set (the defaults when nothing did).
pub fn display() -> Display {
    DISPLAY.get().copied().unwrap_or_default()
}

/// Whether to colour a stream, by the conventions: the flag wins; then `NO_COLOR` (any
/// non-empty value) turns colour off; then `CLICOLOR_FORCE` (non-empty, not `0`) turns it on;
/// then `CLICOLOR=0` or `TERM=dumb` turn it off; else colour exactly when it is a terminal.
pub fn color_enabled(
    choice: ColorChoice,
    var: impl Fn(&str) -> Option<String>,
    is_terminal: bool,
) -> bool {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            if set("NO_COLOR").is_some() {
                return false;
            }
            if set("CLICOLOR_FORCE").is_some_and(|v| v != "0") {
                return true;
            }
            let off = set("CLICOLOR").is_some_and(|v| v == "0")
                || set("TERM").is_some_and(|v| v == "dumb");
            is_terminal && !off
        }
    }
}

/// What a piece of text is, hence how it is painted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// A failure and its message.
    Error,
    /// Something the user should notice (an approval heading, a warning).
    Warning,
    /// A success mark.
    Success,
    /// Secondary text: output tails, reasoning, summaries.
    Dim,
    /// A line a diff adds.
    Added,
    /// A line a diff removes.
    Removed,
    /// A diff's hunk header.
    Hunk,
    /// The name of what runs (a tool, a command).
    Strong,
}

/// Paints text in [`Tone`]s, or leaves it plain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Palette {
    enabled: bool,
}

impl Palette {
    /// A palette that paints when `enabled`.
    pub fn new(enabled: bool) -> Palette {
        Palette { enabled }
    }

    /// The palette for stderr (or stdout) of this process under [`display`].
    pub fn for_stream(is_terminal: bool) -> Palette {
        Palette::new(color_enabled(
            display().color,
            |name| std::env::var(name).ok(),
            is_terminal,
        ))
    }

    /// `text` in `tone`; unchanged when colour is off. A multi-line text is painted line by
    /// line, so a line never starts inside another line's colour.
    pub fn paint(&self, tone: Tone, text: &str) -> String {
        if !self.enabled || text.is_empty() {
            return text.to_owned();
        }
        let style = style_of(tone);
        text.split('\n')
            .map(|line| {
                if line.is_empty() {
                    String::new()
                } else {
                    format!("{style}{line}{style:#}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn style_of(tone: Tone) -> Style {
    let fg = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
    match tone {
        Tone::Error => fg(AnsiColor::Red).effects(Effects::BOLD),
        Tone::Warning => fg(AnsiColor::Yellow).effects(Effects::BOLD),
        Tone::Success => fg(AnsiColor::Green),
        Tone::Dim => Style::new().effects(Effects::DIMMED),
        Tone::Added => fg(AnsiColor::Green),
        Tone::Removed => fg(AnsiColor::Red),
        Tone::Hunk => fg(AnsiColor::Cyan),
        Tone::Strong => Style::new().effects(Effects::BOLD),
    }
}

/// Columns when the terminal does not say.
pub const DEFAULT_WIDTH: usize = 100;
/// The narrowest width wrapping assumes (a tiny window still gets readable pieces).
const MIN_WIDTH: usize = 20;

/// The width of the terminal on stderr, else `$COLUMNS`, else [`DEFAULT_WIDTH`].
pub fn terminal_width() -> usize {
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

/// Columns `c` takes (control characters, already escaped by then, count as none).
fn char_width(c: char) -> usize {
    c.width().unwrap_or(0)
}

/// Columns `text` takes.
pub fn text_width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

/// Each line of `text` cut into pieces of at most `width` columns after `indent`, each piece
/// prefixed with `indent`. Cuts fall between characters, never inside one: joined again
/// without their indents, the pieces are the text.
pub fn wrap(indent: &str, text: &str, width: usize) -> Vec<String> {
    let room = width.saturating_sub(text_width(indent)).max(MIN_WIDTH);
    let mut out = Vec::new();
    for line in text.split('\n') {
        if line.is_empty() {
            out.push(indent.trim_end().to_owned());
            continue;
        }
        let mut piece = String::new();
        let mut used = 0;
        for c in line.chars() {
            let w = char_width(c);
            if used + w > room && !piece.is_empty() {
                out.push(format!("{indent}{piece}"));
                piece.clear();
                used = 0;
            }
            piece.push(c);
            used += w;
        }
        out.push(format!("{indent}{piece}"));
    }
    out
}

/// `text` cut to at most `max` columns, with `…` when something was cut.
pub fn clip_width(text: &str, max: usize) -> String {
    if text_width(text) <= max {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn colour_follows_the_flag_then_the_conventions() {
        use ColorChoice::{Always, Auto, Never};
        assert!(color_enabled(Auto, vars(&[]), true));
        assert!(!color_enabled(Auto, vars(&[]), false));
        assert!(!color_enabled(Auto, vars(&[("NO_COLOR", "1")]), true));
        // An empty NO_COLOR is unset, by the convention.
        assert!(color_enabled(Auto, vars(&[("NO_COLOR", "")]), true));
        assert!(color_enabled(Auto, vars(&[("CLICOLOR_FORCE", "1")]), false));
        assert!(!color_enabled(
            Auto,
            vars(&[("CLICOLOR_FORCE", "0")]),
            false
        ));
        assert!(!color_enabled(
            Auto,
            vars(&[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")]),
            true
        ));
        assert!(!color_enabled(Auto, vars(&[("CLICOLOR", "0")]), true));
        assert!(!color_enabled(Auto, vars(&[("TERM", "dumb")]), true));
        assert!(color_enabled(Always, vars(&[("NO_COLOR", "1")]), false));
        assert!(!color_enabled(
            Never,
            vars(&[("CLICOLOR_FORCE", "1")]),
            true
        ));
    }

    #[test]
    fn painting_is_per_line_and_off_means_plain() {
        let on = Palette::new(true);
        assert_eq!(
            on.paint(Tone::Error, "a\n\nb"),
            "\x1b[1m\x1b[31ma\x1b[0m\n\n\x1b[1m\x1b[31mb\x1b[0m"
        );
        assert_eq!(Palette::new(false).paint(Tone::Error, "a\nb"), "a\nb");
    }

    #[test]
    fn wrapping_counts_columns_and_keeps_every_character() {
        let text = "日本語のテキスト and ascii";
        let pieces = wrap("  ", text, 22);
        assert!(pieces.iter().all(|p| text_width(p) <= 22), "{pieces:?}");
        let joined: String = pieces
            .iter()
            .map(|p| p.strip_prefix("  ").unwrap())
            .collect();
        assert_eq!(joined, text);
        assert_eq!(wrap("  │ ", "a\n\nb", 80), ["  │ a", "  │", "  │ b"]);
        assert_eq!(clip_width("abcdef", 4), "abc…");
        assert_eq!(clip_width("日本語", 4), "日…");
        assert_eq!(clip_width("abcd", 4), "abcd");
    }
}

//! How counts, sizes and durations read, the same wherever they are shown.

use std::time::Duration;

/// `0.4s`, `12s`, `3m05s`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..10 => format!("{:.1}s", d.as_secs_f64()),
        10..60 => format!("{secs}s"),
        _ => format!("{}m{:02}s", secs / 60, secs % 60),
    }
}

/// `text` on one line of at most `max_chars` characters (then `…`): its line breaks and tabs
/// as spaces, every other control or direction-changing character escaped (`\u{202e}`, never
/// cut in two), so a listing's cell cannot act on the terminal.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match c {
            '\n' | '\t' => " ".to_owned(),
            c => intendant_core::preview::escape_invisible(c.encode_utf8(&mut [0; 4])),
        };
        let width = piece.chars().count();
        // The last place is the ellipsis's when more follows.
        let room = if chars.peek().is_some() {
            max_chars.saturating_sub(1)
        } else {
            max_chars
        };
        if shown + width > room {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        shown += width;
    }
    out
}

/// `word` for one, `words` for any other count (`0+ more lines`, `1 more line`).
pub fn plural(count: usize, word: &str) -> String {
    if count == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// `999`, `12.3k`, `2.5M`.
pub fn compact_count(v: u64) -> String {
    match v {
        0..1_000 => v.to_string(),
        1_000..1_000_000 => format!("{:.1}k", v as f64 / 1_000.0),
        _ => format!("{:.1}M", v as f64 / 1_000_000.0),
    }
}

/// `512 B`, `1.2 KiB`, `3.4 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line_cut_with_an_ellipsis_and_escaped_whole() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
        assert_eq!(
            one_line("t\u{1b}]0;T\u{7}\u{202e}", 80),
            "t\\u{1b}]0;T\\u{7}\\u{202e}"
        );
        assert_eq!(one_line("ab\u{202e}cd", 6), "ab…", "an escape is never cut");
    }

    #[test]
    fn durations_and_sizes_read_as_people_write_them() {
        assert_eq!(plural(1, "line"), "line");
        assert_eq!(plural(0, "line"), "lines");
        assert_eq!(human_duration(Duration::from_millis(400)), "0.4s");
        assert_eq!(human_duration(Duration::from_secs(12)), "12s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 + 1), "3.0 MiB");
        assert_eq!(compact_count(999), "999");
        assert_eq!(compact_count(12_345), "12.3k");
        assert_eq!(compact_count(2_500_000), "2.5M");
    }
}

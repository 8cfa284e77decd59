//! `.env` text as both sides of the boundary read it: the controller takes its keys from it,
//! the runtime shows commands the same file with the credential entries removed.
//!
//! The design decision to know: an entry is removed by the same rule the environment scrub
//! uses ([`crate::env_policy::is_denied`]), so a name a command never sees in its environment
//! it never reads from a `.env` either, and everything else (ports, flags, comments) stays
//! byte for byte. Pure functions, no I/O.

use crate::env_policy::is_denied;

/// The name and the raw (trimmed, still quoted) value of a `KEY=VALUE` line, with an optional
/// `export ` before the name; `None` for blank lines, comments and lines that are no entry.
pub fn split_entry(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // `export` and any blank after it, as a shell sourcing the file (and dotenv loaders) read it.
    let line = match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        Some(_) | None => line,
    };
    let (key, raw) = line.split_once('=')?;
    let key = key.trim();
    let valid = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((key, raw.trim()))
}

/// Whether a quoted value that starts with `quote` ends in `rest` (the text after the opening
/// quote, or a later line): a double quote escaped by a backslash does not end it.
fn closes(quote: char, rest: &str) -> bool {
    let mut escaped = false;
    for c in rest.chars() {
        match c {
            '\\' if quote == '"' && !escaped => escaped = true,
            c if c == quote && !escaped => return true,
            _ => escaped = false,
        }
    }
    false
}

/// `text` without its credential entries (their whole value, over several lines when quoted
/// so), or `None` when it holds none and can be shown as it is.
pub fn scrub(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut removed = false;
    // The quote a multi-line value is still open with, and whether its entry is dropped.
    let mut open: Option<(char, bool)> = None;
    for line in text.split_inclusive('\n') {
        if let Some((quote, drop)) = open {
            if closes(quote, line) {
                open = None;
            }
            if !drop {
                out.push_str(line);
            }
            continue;
        }
        let Some((key, raw)) = split_entry(line) else {
            out.push_str(line);
            continue;
        };
        let drop = is_denied(key);
        let mut chars = raw.chars();
        if let Some(quote @ ('"' | '\'')) = chars.next()
            && !closes(quote, chars.as_str())
        {
            open = Some((quote, drop));
        }
        if drop {
            removed = true;
        } else {
            out.push_str(line);
        }
    }
    removed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_split_and_other_lines_are_not() {
        assert_eq!(split_entry("export A = 1 "), Some(("A", "1")));
        assert_eq!(split_entry("B='x'"), Some(("B", "'x'")));
        assert_eq!(split_entry("export\tC=2"), Some(("C", "2")));
        assert_eq!(split_entry("exportD=3"), Some(("exportD", "3")));
        assert_eq!(split_entry("export=4"), Some(("export", "4")));
        for line in ["", "  # c", "no equals", "1-X=no", "=v"] {
            assert_eq!(split_entry(line), None, "{line:?}");
        }
    }

    #[test]
    fn credential_entries_go_and_everything_else_stays() {
        let text = "# ports\nAPP_PORT=8080\nOPENAI_API_KEY=sk-live\nexport GITHUB_TOKEN='ghp'\n\
                    DEBUG=1 # note\nDB_PASSWORD=\"a\\\"b\"\nlast=x";
        let got = scrub(text).unwrap();
        assert_eq!(got, "# ports\nAPP_PORT=8080\nDEBUG=1 # note\nlast=x");
        assert_eq!(scrub("APP_PORT=8080\n"), None, "nothing to remove");
        assert_eq!(
            scrub("export\tGITHUB_TOKEN=ghp\nA=1\n").as_deref(),
            Some("A=1\n"),
            "a tab after export still exports"
        );
    }

    #[test]
    fn a_multi_line_secret_goes_whole_and_a_multi_line_value_stays_whole() {
        let text = "PRIVATE_KEY=\"-----BEGIN KEY-----\nQUJD==\nSECRET_X=y\n-----END KEY-----\"\n\
                    CERT='line1\nAPI_KEY=not-an-entry\n'\nAPP_PORT=1\n";
        let got = scrub(text).unwrap();
        assert_eq!(got, "CERT='line1\nAPI_KEY=not-an-entry\n'\nAPP_PORT=1\n");
    }
}

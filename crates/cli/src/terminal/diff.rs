//! What an `edit_file` call changes, as a unified diff built from its arguments alone (the
//! frontend renders events and never reads the project): a replace is the diff of the matched
//! text against its replacement; a write, append or insert adds every line; a line-range
//! replacement names the range it drops and adds the new lines.

use std::fmt::Write as _;

use intendant_core::preview::escape_invisible;
use intendant_protocol::runtime::EditOperation;
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use super::style::{Palette, Tone};
use super::units::plural;

/// Lines of context around each change of a replace.
const CONTEXT_LINES: usize = 3;

/// The diff lines of an `edit_file` call with these arguments, painted, at most `max_lines`
/// of them (then "… N more diff lines"). Empty when the arguments are not an edit.
pub fn edit_diff(arguments: &Value, palette: Palette, max_lines: usize) -> Vec<String> {
    let text = |key: &str| arguments.get(key).and_then(Value::as_str);
    let line = |key: &str| arguments.get(key).and_then(Value::as_u64);
    let Some(path) = text("file_path") else {
        return Vec::new();
    };
    let Some(operation) = text("operation").and_then(EditOperation::from_wire_name) else {
        return Vec::new();
    };
    let content = text("content").unwrap_or_default();
    let path = escape_invisible(path);
    let mut lines = vec![
        palette.paint(Tone::Strong, &format!("--- a/{path}")),
        palette.paint(Tone::Strong, &format!("+++ b/{path}")),
    ];
    let added_from = |start: u64| format!("@@ -{start},0 +{start},{} @@", line_count(content));
    match operation {
        EditOperation::Replace => {
            let old = text("match_content").unwrap_or_default();
            let diff = TextDiff::from_lines(old, content);
            for hunk in diff
                .unified_diff()
                .context_radius(CONTEXT_LINES)
                .iter_hunks()
            {
                lines.push(palette.paint(Tone::Hunk, &hunk.header().to_string()));
                for change in hunk.iter_changes() {
                    let (sign, tone) = match change.tag() {
                        ChangeTag::Delete => ('-', Some(Tone::Removed)),
                        ChangeTag::Insert => ('+', Some(Tone::Added)),
                        ChangeTag::Equal => (' ', None),
                    };
                    lines.push(diff_line(palette, sign, tone, change.value()));
                }
            }
        }
        EditOperation::Write => {
            lines.push(palette.paint(Tone::Hunk, "@@ whole file @@"));
            push_added(&mut lines, palette, content);
        }
        EditOperation::Append => {
            lines.push(palette.paint(Tone::Hunk, "@@ appended at the end @@"));
            push_added(&mut lines, palette, content);
        }
        EditOperation::InsertAt => {
            lines.push(palette.paint(Tone::Hunk, &added_from(line("line_number").unwrap_or(1))));
            push_added(&mut lines, palette, content);
        }
        EditOperation::ReplaceLines => {
            let start = line("line_number").unwrap_or(1);
            let end = line("end_line").unwrap_or(start);
            let dropped = end.saturating_sub(start) + 1;
            lines.push(palette.paint(
                Tone::Hunk,
                &format!(
                    "@@ -{start},{dropped} +{start},{} @@ (lines {start}..={end} replaced)",
                    line_count(content)
                ),
            ));
            push_added(&mut lines, palette, content);
        }
    }
    if lines.len() > max_lines {
        let more = lines.len() - max_lines;
        lines.truncate(max_lines);
        let mut note = String::new();
        let _ = write!(note, "… {more} more diff {}", plural(more, "line"));
        lines.push(palette.paint(Tone::Dim, &note));
    }
    lines
}

fn line_count(text: &str) -> usize {
    text.lines().count()
}

fn push_added(lines: &mut Vec<String>, palette: Palette, content: &str) {
    for line in content.lines() {
        lines.push(diff_line(palette, '+', Some(Tone::Added), line));
    }
}

/// One diff line: its sign and text (invisible characters escaped, line end dropped).
fn diff_line(palette: Palette, sign: char, tone: Option<Tone>, text: &str) -> String {
    let text = format!(
        "{sign}{}",
        escape_invisible(text.trim_end_matches(['\n', '\r']))
    );
    match tone {
        Some(tone) => palette.paint(tone, &text),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replace_is_a_unified_diff_of_the_match_and_its_replacement() {
        let args = json!({"file_path": "src/a.rs", "operation": "replace",
                          "match_content": "one\ntwo\nthree\n", "content": "one\n2\nthree\n"});
        assert_eq!(
            edit_diff(&args, Palette::new(false), 50),
            [
                "--- a/src/a.rs",
                "+++ b/src/a.rs",
                "@@ -1,3 +1,3 @@",
                " one",
                "-two",
                "+2",
                " three"
            ]
        );
        let painted = edit_diff(&args, Palette::new(true), 50);
        assert!(painted[4].contains("\x1b[31m-two"), "{painted:?}");
        assert!(painted[5].contains("\x1b[32m+2"), "{painted:?}");
    }

    #[test]
    fn writes_and_inserts_add_every_line_escaped_and_bounded() {
        let args =
            json!({"file_path": "b.txt", "operation": "write", "content": "x\u{202e}y\nz\n"});
        let lines = edit_diff(&args, Palette::new(false), 50);
        assert_eq!(lines[2..], ["@@ whole file @@", "+x\\u{202e}y", "+z"]);
        let args = json!({"file_path": "b.txt", "operation": "insert_at", "line_number": 4,
                          "content": "a\nb"});
        assert_eq!(
            edit_diff(&args, Palette::new(false), 50)[2],
            "@@ -4,0 +4,2 @@"
        );
        let args = json!({"file_path": "b.txt", "operation": "replace_lines", "line_number": 2,
                          "end_line": 5, "content": "n"});
        assert_eq!(
            edit_diff(&args, Palette::new(false), 50)[2],
            "@@ -2,4 +2,1 @@ (lines 2..=5 replaced)"
        );
        let long = json!({"file_path": "c", "operation": "append", "content": "l\n".repeat(30)});
        let lines = edit_diff(&long, Palette::new(false), 10);
        assert_eq!(lines.len(), 11);
        assert_eq!(lines[10], "… 23 more diff lines");
        assert!(edit_diff(&json!({"command": "ls"}), Palette::new(false), 10).is_empty());
    }
}

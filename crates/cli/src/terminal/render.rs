//! Tool calls and their results for a human, shared by the live terminal and `intendant
//! sessions show`: a shell command's exit code, elapsed time and last lines of output (with
//! where the full log is), an edit's diff, one line for `inspect_path`, `browse_url` and
//! `capture_screen`, errors in red. Everything shown is escaped first: a command's output may
//! hold terminal escapes or bidi controls, and none of them may reach the terminal raw.

use std::time::Duration;

use intendant_core::preview::escape_invisible;
use intendant_protocol::runtime::{
    AskHumanResult, BrowseResult, ERROR_PREFIX, EditResult, ExecResult, InspectResult, PtyResult,
    ScreenResult,
};
use intendant_protocol::tools::ToolName;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::diff::edit_diff;
use super::style::{Palette, Tone, clip_width};
use super::units::{human_bytes, human_duration, plural};

/// Indent of the lines under a call or result.
const BODY: &str = "  │ ";

/// How much of each thing to show.
#[derive(Debug, Clone, Copy)]
pub struct ToolView {
    /// Colours, or none.
    pub palette: Palette,
    /// Columns available.
    pub width: usize,
    /// Also show each result's raw text.
    pub verbose: bool,
    /// Last lines of a command's output shown.
    pub tail_lines: usize,
    /// Lines of an edit's diff shown.
    pub diff_lines: usize,
}

/// A rendered result: lines for a human, or a plain-text result this view does not interpret
/// (a skip or denial note, a context update), left to the caller.
#[derive(Debug, PartialEq)]
pub enum Rendered {
    /// The lines to show.
    Lines(Vec<String>),
    /// Not a result this view knows: show the text itself.
    Text,
}

impl ToolView {
    /// The lines shown when the model calls `name`: `▸ name key=value ...`, or for an edit its
    /// path, operation and diff; none for a one-line tool or `signal_done` (its result or the
    /// done line says it).
    pub fn call_lines(&self, name: &str, arguments: &Value) -> Vec<String> {
        let Some(tool) = ToolName::from_name(name) else {
            // A worker's or an MCP server's own tool: shown by its own name.
            return vec![tool_call_line(name, arguments)];
        };
        match tool {
            // Their result line says everything (or the done line does).
            ToolName::InspectPath
            | ToolName::BrowseUrl
            | ToolName::CaptureScreen
            | ToolName::SignalDone => Vec::new(),
            ToolName::EditFile => self.edit_call_lines(name, arguments),
            ToolName::ExecCommand
            | ToolName::ExecPty
            | ToolName::AskHuman
            | ToolName::ManageContext
            | ToolName::InvokeSkill
            | ToolName::SpawnSubAgent
            | ToolName::WaitSubAgents
            | ToolName::MessageSubAgent
            | ToolName::StopSubAgent
            | ToolName::SubmitResult
            | ToolName::WorkflowCheckpoint
            | ToolName::MemorySearch
            | ToolName::MemoryRead
            | ToolName::MemoryPropose => vec![tool_call_line(name, arguments)],
        }
    }

    /// An edit's path, operation and diff.
    fn edit_call_lines(&self, name: &str, arguments: &Value) -> Vec<String> {
        let p = self.palette;
        let field = |k: &str| arguments.get(k).and_then(Value::as_str).unwrap_or("?");
        let mut lines = vec![format!(
            "▸ {} {} ({})",
            p.paint(Tone::Strong, name),
            escape_invisible(field("file_path")),
            escape_invisible(field("operation"))
        )];
        lines.extend(
            edit_diff(arguments, p, self.diff_lines)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        lines
    }

    /// The lines of one call's result; `arguments` are the call's (when known), `elapsed` the
    /// time its batch took.
    pub fn result_lines(
        &self,
        name: &str,
        arguments: Option<&Value>,
        output: &str,
        elapsed: Option<Duration>,
    ) -> Rendered {
        let mut lines = match self.human_lines(name, arguments, output, elapsed) {
            Some(lines) => lines,
            None => return Rendered::Text,
        };
        if self.verbose {
            lines.extend(
                escape_invisible(output.trim_end())
                    .lines()
                    .map(|l| self.palette.paint(Tone::Dim, &format!("  raw: {l}"))),
            );
        }
        Rendered::Lines(lines)
    }

    // Over 100 lines on purpose: one arm per tool's result type, so how each tool reads is in
    // one place.
    fn human_lines(
        &self,
        name: &str,
        arguments: Option<&Value>,
        output: &str,
        elapsed: Option<Duration>,
    ) -> Option<Vec<String>> {
        let p = self.palette;
        let head = |text: String| format!("↳ {}: {text}", p.paint(Tone::Strong, name));
        if let Some(message) = output.strip_prefix(ERROR_PREFIX) {
            let mut lines = vec![head(
                p.paint(Tone::Error, &format!("error: {}", self.first_line(message))),
            )];
            lines.extend(
                self.tail(message.lines().skip(1).collect(), "", None)
                    .into_iter()
                    .map(|l| p.paint(Tone::Error, &l)),
            );
            return Some(lines);
        }
        // A worker's or an MCP server's own tool: its result is shown as text.
        let tool = ToolName::from_name(name)?;
        let took = elapsed
            .map(|d| format!(" · {}", human_duration(d)))
            .unwrap_or_default();
        // Which command this was: several run in one batch, and their results come together.
        let command = arguments
            .and_then(|a| a.get("command"))
            .and_then(Value::as_str)
            .map(|c| {
                let one_line = escape_invisible(c).replace('\n', " ");
                format!(
                    " · $ {}",
                    clip_width(&one_line, self.width.saturating_sub(40).max(20))
                )
            })
            .unwrap_or_default();
        match tool {
            ToolName::SignalDone => Some(Vec::new()),
            ToolName::ExecCommand => {
                let r: ExecResult = parse(output)?;
                let status = if r.running {
                    p.paint(
                        Tone::Success,
                        &format!("running in the background (pid {})", r.pid.unwrap_or(0)),
                    )
                } else if r.exit_code == 0 {
                    p.paint(Tone::Success, "exit 0")
                } else {
                    let why = r
                        .error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default();
                    p.paint(Tone::Error, &format!("exit {}{why}", r.exit_code))
                };
                let mut lines = vec![head(format!("{status}{took}{command}"))];
                let failed = r.exit_code != 0;
                lines.extend(self.stream(
                    &r.stdout,
                    r.stdout_truncated,
                    r.stdout_log.as_deref(),
                    None,
                ));
                let err_tone = if failed { Tone::Removed } else { Tone::Dim };
                lines.extend(self.stream(
                    &r.stderr,
                    r.stderr_truncated,
                    r.stderr_log.as_deref(),
                    Some(err_tone),
                ));
                Some(lines)
            }
            ToolName::ExecPty => {
                let r: PtyResult = parse(output)?;
                let status = match (r.timed_out, r.exit_code) {
                    (true, _) => p.paint(Tone::Error, "timed out (interrupted)"),
                    (false, Some(0)) => p.paint(Tone::Success, "exit 0"),
                    (false, Some(code)) => p.paint(Tone::Error, &format!("exit {code}")),
                    (false, None) => "finished".to_owned(),
                };
                let exited = if r.shell_exited { ", shell exited" } else { "" };
                let mut lines = vec![head(format!(
                    "[{}] {status}{exited}{took}{command}",
                    escape_invisible(&r.shell_id)
                ))];
                lines.extend(self.stream(
                    &r.output,
                    r.truncated,
                    r.transcript_log.as_deref(),
                    None,
                ));
                Some(lines)
            }
            ToolName::EditFile => {
                let r: EditResult = parse(output)?;
                let replaced = r
                    .replacements
                    .map(|n| format!(", {n} replaced"))
                    .unwrap_or_default();
                Some(vec![head(format!(
                    "{} {} ({}{replaced}), now {}",
                    p.paint(Tone::Success, "edited"),
                    escape_invisible(&r.file_path),
                    escape_invisible(&r.operation),
                    human_bytes(r.bytes)
                ))])
            }
            ToolName::InspectPath => {
                let r: InspectResult = parse(output)?;
                let what = if r.exists {
                    let mut parts = vec![r.kind.unwrap_or_else(|| "?".to_owned())];
                    parts.extend(r.size.map(human_bytes));
                    parts.extend(r.mode.map(|m| format!("mode {m}")));
                    parts.join(", ")
                } else {
                    "does not exist".to_owned()
                };
                Some(vec![format!(
                    "↳ {} {}: {what}",
                    p.paint(Tone::Strong, name),
                    escape_invisible(&r.path)
                )])
            }
            ToolName::BrowseUrl => {
                let r: BrowseResult = parse(output)?;
                let status_tone = if r.status < 400 {
                    Tone::Success
                } else {
                    Tone::Error
                };
                let moved = if r.final_url == r.url {
                    String::new()
                } else {
                    format!(" → {}", escape_invisible(&r.final_url))
                };
                let cut = if r.truncated { ", truncated" } else { "" };
                Some(vec![format!(
                    "↳ {} {}{moved}: {} {}, {} of text{cut}{took}",
                    p.paint(Tone::Strong, name),
                    escape_invisible(&r.url),
                    p.paint(status_tone, &r.status.to_string()),
                    escape_invisible(r.content_type.as_deref().unwrap_or("unknown type")),
                    human_bytes(r.text.len() as u64)
                )])
            }
            ToolName::CaptureScreen => {
                let r: ScreenResult = parse(output)?;
                Some(vec![format!(
                    "↳ {} {}: {}×{} PNG at {}",
                    p.paint(Tone::Strong, name),
                    escape_invisible(&r.display),
                    r.width,
                    r.height,
                    escape_invisible(&r.path)
                )])
            }
            ToolName::AskHuman => {
                let r: AskHumanResult = parse(output)?;
                Some(vec![head(format!(
                    "answered {}",
                    self.first_line(&r.answer)
                ))])
            }
            // Their results are plain text (or JSON read as text).
            ToolName::ManageContext
            | ToolName::InvokeSkill
            | ToolName::SpawnSubAgent
            | ToolName::WaitSubAgents
            | ToolName::MessageSubAgent
            | ToolName::StopSubAgent
            | ToolName::SubmitResult
            | ToolName::WorkflowCheckpoint
            | ToolName::MemorySearch
            | ToolName::MemoryRead
            | ToolName::MemoryPropose => None,
        }
    }

    /// The first line of `text`, escaped and cut to the width.
    fn first_line(&self, text: &str) -> String {
        let first = text.lines().next().unwrap_or_default();
        clip_width(&escape_invisible(first), self.width.saturating_sub(20))
    }

    /// The last lines of one output stream, after a note of how many were left out and where
    /// the whole is.
    fn stream(
        &self,
        text: &str,
        truncated: bool,
        log: Option<&str>,
        tone: Option<Tone>,
    ) -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        self.tail(lines, if truncated { "+" } else { "" }, log)
            .into_iter()
            .map(|l| match tone {
                Some(tone) => self.palette.paint(tone, &l),
                None => l,
            })
            .collect()
    }

    fn tail(&self, lines: Vec<&str>, more_mark: &str, log: Option<&str>) -> Vec<String> {
        let shown = lines.len().min(self.tail_lines);
        let hidden = lines.len() - shown;
        let mut out = Vec::new();
        if hidden > 0 || !more_mark.is_empty() {
            let log = log
                .map(|l| format!(", full log: {}", escape_invisible(l)))
                .unwrap_or_default();
            let lines = plural(hidden, "line");
            let line = format!("{BODY}… {hidden}{more_mark} more {lines}{log}");
            out.push(self.palette.paint(Tone::Dim, &line));
        }
        let room = self.width.saturating_sub(BODY.len());
        for line in &lines[hidden..] {
            out.push(format!(
                "{BODY}{}",
                clip_width(&escape_invisible(line), room)
            ));
        }
        out
    }
}

/// `▸ name key=value ...`: a tool call on one line, each argument clipped, invisible
/// characters escaped.
fn tool_call_line(name: &str, arguments: &Value) -> String {
    let args = match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", clip(&v.to_string(), 80)))
            .collect::<Vec<_>>()
            .join(" "),
        other => clip(&other.to_string(), 120),
    };
    format!("▸ {name} {}", escape_invisible(&args))
}

fn clip(text: &str, max: usize) -> String {
    intendant_protocol::text::clip(text, max)
}

/// The JSON value a result's text starts with (the loop may append notes after it).
fn first_json(output: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(output)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .filter(Value::is_object)
}

/// The result object `output` starts with, when it is a `T`.
fn parse<T: DeserializeOwned>(output: &str) -> Option<T> {
    serde_json::from_value(first_json(output)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view() -> ToolView {
        ToolView {
            palette: Palette::new(false),
            width: 80,
            verbose: false,
            tail_lines: 3,
            diff_lines: 40,
        }
    }

    fn lines(r: Rendered) -> Vec<String> {
        match r {
            Rendered::Lines(l) => l,
            Rendered::Text => panic!("not rendered"),
        }
    }

    #[test]
    fn a_shell_result_is_its_exit_time_and_last_lines() {
        let out = json!({"exit_code": 2, "pid": 9, "stdout": "1\n2\n3\n4\n5\n", "stderr": "bad\u{1b}[31m\n",
                         "stdout_truncated": false, "stderr_truncated": false,
                         "stdout_log": "/l/out.log", "stderr_log": "/l/err.log"})
        .to_string()
            + "\n\n[budget: 10 tokens]";
        let got = lines(view().result_lines(
            "exec_command",
            None,
            &out,
            Some(Duration::from_millis(1500)),
        ));
        assert_eq!(
            got,
            [
                "↳ exec_command: exit 2 · 1.5s",
                "  │ … 2 more lines, full log: /l/out.log",
                "  │ 3",
                "  │ 4",
                "  │ 5",
                "  │ bad\\u{1b}[31m",
            ]
        );
        let truncated = json!({"exit_code": 0, "pid": 9, "stdout": "x\n", "stderr": "",
                               "stdout_truncated": true, "stderr_truncated": false,
                               "stdout_log": "/l/out.log", "stderr_log": null});
        let got = lines(view().result_lines("exec_command", None, &truncated.to_string(), None));
        assert_eq!(
            got[..2],
            [
                "↳ exec_command: exit 0",
                "  │ … 0+ more lines, full log: /l/out.log"
            ]
        );
        // With the call's arguments, the header names the command, on one line.
        let args = json!({"command": "cargo test \\\n  --all"});
        let got = lines(view().result_lines(
            "exec_command",
            Some(&args),
            &truncated.to_string(),
            Some(Duration::from_secs(12)),
        ));
        assert_eq!(
            got[0],
            "↳ exec_command: exit 0 · 12s · $ cargo test \\   --all"
        );
    }

    #[test]
    fn errors_are_red_and_unknown_text_is_left_to_the_caller() {
        let v = ToolView {
            palette: Palette::new(true),
            ..view()
        };
        let got = lines(v.result_lines("exec_command", None, "Error: no such shell\nmore", None));
        assert!(got[0].contains("\x1b[31merror: no such shell"), "{got:?}");
        assert_eq!(
            view().result_lines("exec_command", None, "skipped by the user: not run", None),
            Rendered::Text
        );
        assert_eq!(
            view().result_lines("manage_context", None, "{\"a\":1}", None),
            Rendered::Text
        );
    }

    #[test]
    fn the_one_line_tools_have_one_line() {
        let inspect = json!({"path": "a.txt", "exists": true, "type": "file", "size": 2048,
                             "modified": 1, "mode": "644", "uid": 1, "gid": 1});
        assert_eq!(
            lines(view().result_lines("inspect_path", None, &inspect.to_string(), None)),
            ["↳ inspect_path a.txt: file, 2.0 KiB, mode 644"]
        );
        assert!(
            view()
                .call_lines("inspect_path", &json!({"path": "a.txt"}))
                .is_empty()
        );
        let browse = json!({"url": "http://a/", "final_url": "http://b/", "status": 404,
                            "content_type": "text/html", "text": "gone", "truncated": false});
        assert_eq!(
            lines(view().result_lines("browse_url", None, &browse.to_string(), None)),
            ["↳ browse_url http://a/ → http://b/: 404 text/html, 4 B of text"]
        );
        let screen = json!({"path": "/l/s.png", "display": ":99", "width": 640, "height": 480});
        assert_eq!(
            lines(view().result_lines("capture_screen", None, &screen.to_string(), None)),
            ["↳ capture_screen :99: 640×480 PNG at /l/s.png"]
        );
        let edit =
            json!({"file_path": "a.txt", "operation": "replace", "bytes": 10, "replacements": 2});
        assert_eq!(
            lines(view().result_lines("edit_file", None, &edit.to_string(), None)),
            ["↳ edit_file: edited a.txt (replace, 2 replaced), now 10 B"]
        );
    }

    #[test]
    fn verbose_adds_the_raw_result() {
        let v = ToolView {
            verbose: true,
            ..view()
        };
        let screen = json!({"path": "/l/s.png", "display": ":99", "width": 1, "height": 1});
        let got = lines(v.result_lines("capture_screen", None, &screen.to_string(), None));
        assert_eq!(got.len(), 2);
        assert!(got[1].starts_with("  raw: {"), "{got:?}");
    }

    #[test]
    fn a_tool_call_is_one_line_with_clipped_arguments() {
        assert_eq!(
            tool_call_line("exec_command", &json!({"command": "ls -la"})),
            "▸ exec_command command=\"ls -la\""
        );
        let long = tool_call_line("write_file", &json!({"content": "x".repeat(200)}));
        assert!(long.chars().count() < 120, "{long}");
        assert!(!tool_call_line("f", &json!("a\u{202e}b")).contains('\u{202e}'));
        let edit = view().call_lines(
            "edit_file",
            &json!({"file_path": "a", "operation": "append", "content": "z"}),
        );
        assert_eq!(
            edit,
            [
                "▸ edit_file a (append)",
                "  --- a/a",
                "  +++ b/a",
                "  @@ appended at the end @@",
                "  +z"
            ]
        );
    }
}

//! `[hooks]`: one array of tables per event, each entry one hook, read strictly.

use std::time::Duration;

use intendant_protocol::hooks::HookEvent;
use serde::Deserialize;

/// Seconds a hook may run when its entry sets no `timeout_sec`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Longest `timeout_sec` accepted: a hook holds up the turn it runs in.
pub const MAX_TIMEOUT_SECS: u64 = 600;

/// `[hooks]`: the hooks bound to each event, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// `[[hooks.session_start]]`.
    #[serde(default)]
    pub session_start: Vec<HookEntry>,
    /// `[[hooks.user_prompt]]`.
    #[serde(default)]
    pub user_prompt: Vec<HookEntry>,
    /// `[[hooks.pre_tool_use]]`.
    #[serde(default)]
    pub pre_tool_use: Vec<HookEntry>,
    /// `[[hooks.post_tool_use]]`.
    #[serde(default)]
    pub post_tool_use: Vec<HookEntry>,
    /// `[[hooks.approval_request]]`.
    #[serde(default)]
    pub approval_request: Vec<HookEntry>,
    /// `[[hooks.stop]]`.
    #[serde(default)]
    pub stop: Vec<HookEntry>,
    /// `[[hooks.session_end]]`.
    #[serde(default)]
    pub session_end: Vec<HookEntry>,
}

/// One hook.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// Which tools it is about (`exec_command`, `edit_*`, `exec_command|edit_file`); absent:
    /// every tool. Only the tool events take one.
    #[serde(default)]
    pub matcher: Option<Matcher>,
    /// The argv; a relative path with a `/` is the project's, a bare name is looked up in
    /// `PATH`.
    pub command: Command,
    /// Seconds it may run (default [`DEFAULT_TIMEOUT_SECS`], 1 to [`MAX_TIMEOUT_SECS`]).
    #[serde(default)]
    pub timeout_sec: Option<u64>,
    /// `false` runs it outside the sandbox (it counts, as every hook does, once trusted).
    #[serde(default)]
    pub sandbox: Option<bool>,
}

impl HookEntry {
    /// How long it may run.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_sec.unwrap_or(DEFAULT_TIMEOUT_SECS))
    }

    /// Whether it runs inside the session's sandbox (the default).
    pub fn sandboxed(&self) -> bool {
        self.sandbox.unwrap_or(true)
    }

    /// Whether it runs for a call of `tool` (`None`: the action is no tool call, so only a
    /// hook without a matcher runs).
    pub fn matches(&self, tool: Option<&str>) -> bool {
        match (&self.matcher, tool) {
            (None, _) => true,
            (Some(matcher), Some(tool)) => matcher.matches(tool),
            (Some(_), None) => false,
        }
    }
}

impl HooksConfig {
    /// The hooks of `event`, in order.
    pub fn of(&self, event: HookEvent) -> &[HookEntry] {
        match event {
            HookEvent::SessionStart => &self.session_start,
            HookEvent::UserPrompt => &self.user_prompt,
            HookEvent::PreToolUse => &self.pre_tool_use,
            HookEvent::PostToolUse => &self.post_tool_use,
            HookEvent::ApprovalRequest => &self.approval_request,
            HookEvent::Stop => &self.stop,
            HookEvent::SessionEnd => &self.session_end,
        }
    }

    /// Whether no hook is configured.
    pub fn is_empty(&self) -> bool {
        HookEvent::ALL.into_iter().all(|e| self.of(e).is_empty())
    }

    /// Checks what serde cannot: timeouts in range, matchers only on the tool events.
    pub fn validate(&self) -> Result<(), String> {
        for event in HookEvent::ALL {
            for (i, entry) in self.of(event).iter().enumerate() {
                let at = format!("[[hooks.{event}]] #{}", i + 1);
                if let Some(t) = entry.timeout_sec
                    && !(1..=MAX_TIMEOUT_SECS).contains(&t)
                {
                    return Err(format!(
                        "{at}: timeout_sec = {t} is out of range (1 to {MAX_TIMEOUT_SECS})"
                    ));
                }
                let about_tools = matches!(
                    event,
                    HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::ApprovalRequest
                );
                if entry.matcher.is_some() && !about_tools {
                    return Err(format!(
                        "{at}: a matcher selects tools, and {event} is about no tool call \
                         (only pre_tool_use, post_tool_use and approval_request take one)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each hook as `intendant trust` lists it: every hook runs something, so every one is a
    /// security setting.
    pub fn security_settings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for event in HookEvent::ALL {
            for entry in self.of(event) {
                let mut line = format!("[[hooks.{event}]] command = {:?}", entry.command.0);
                if let Some(m) = &entry.matcher {
                    line.push_str(&format!(", matcher = {:?}", m.0));
                }
                if !entry.sandboxed() {
                    line.push_str(", sandbox = false (runs outside the sandbox)");
                }
                out.push(line);
            }
        }
        out
    }
}

/// A hook's argv: at least the program, none of it empty.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct Command(pub Vec<String>);

impl TryFrom<Vec<String>> for Command {
    type Error = String;

    fn try_from(argv: Vec<String>) -> Result<Command, String> {
        match argv.first() {
            None => Err(
                "command is empty: give the program and its arguments, e.g. \
                         [\"./scripts/guard.py\"]"
                    .to_owned(),
            ),
            Some(program) if program.trim().is_empty() => {
                Err("command's program is blank".to_owned())
            }
            Some(_) if argv.iter().any(|a| a.contains('\0')) => {
                Err("command holds a NUL byte".to_owned())
            }
            Some(_) => Ok(Command(argv)),
        }
    }
}

impl Command {
    /// The command line as shown in events: its words joined by spaces.
    pub fn display(&self) -> String {
        self.0.join(" ")
    }
}

/// Tool-name patterns: alternatives split by `|`, each a name where `*` matches any run of
/// characters. Tool names only: anything but letters, digits, `_`, `-`, `.`, `*` is refused, so
/// a pattern written for another tool's syntax (`Bash(rm:*)`) is an error, not a silent miss.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Matcher(pub String);

impl TryFrom<String> for Matcher {
    type Error = String;

    fn try_from(pattern: String) -> Result<Matcher, String> {
        for alternative in pattern.split('|') {
            if alternative.is_empty() {
                return Err(format!(
                    "matcher {pattern:?} has an empty alternative: write tool names split by `|`"
                ));
            }
            if let Some(bad) = alternative
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*')))
            {
                return Err(format!(
                    "matcher {pattern:?}: {bad:?} is not allowed; a matcher names tools \
                     (`exec_command`, `edit_*`, `exec_command|edit_file`), never their arguments"
                ));
            }
        }
        Ok(Matcher(pattern))
    }
}

impl Matcher {
    /// Whether `tool` matches one alternative.
    pub fn matches(&self, tool: &str) -> bool {
        self.0
            .split('|')
            .any(|p| glob(p.as_bytes(), tool.as_bytes()))
    }
}

/// `*`-only glob over bytes, iterative with one backtrack point (linear in practice).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            Some(_) | None => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HooksConfig, String> {
        let config: HooksConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn an_entry_has_a_command_and_optional_matcher_timeout_and_sandbox() {
        let c = parse(
            "[[pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = [\"./guard.py\", \"-v\"]\n\
             timeout_sec = 30\n[[approval_request]]\ncommand = [\"reviewer\"]\nsandbox = false\n",
        )
        .unwrap();
        let guard = &c.pre_tool_use[0];
        assert_eq!(guard.command.0, ["./guard.py", "-v"]);
        assert_eq!(guard.timeout(), Duration::from_secs(30));
        assert!(guard.sandboxed());
        assert!(guard.matches(Some("exec_command")));
        assert!(!guard.matches(Some("edit_file")));
        assert!(!guard.matches(None));
        let reviewer = &c.approval_request[0];
        assert_eq!(
            reviewer.timeout(),
            Duration::from_secs(DEFAULT_TIMEOUT_SECS)
        );
        assert!(!reviewer.sandboxed());
        assert!(reviewer.matches(None), "no matcher: every action");
        assert_eq!(
            c.security_settings(),
            [
                "[[hooks.pre_tool_use]] command = [\"./guard.py\", \"-v\"], matcher = \"exec_command\"",
                "[[hooks.approval_request]] command = [\"reviewer\"], sandbox = false (runs outside the sandbox)",
            ]
        );
        assert!(!c.is_empty());
        assert!(HooksConfig::default().is_empty());
    }

    #[test]
    fn bad_entries_are_errors_that_say_what_is_wrong() {
        for (text, expected) in [
            ("[[pre_tool_use]]\ncommand = []\n", "command is empty"),
            ("[[pre_tool_use]]\ncommand = [\" \"]\n", "blank"),
            ("[[pre_tool_use]]\ncmd = [\"x\"]\n", "unknown field `cmd`"),
            (
                "[[pre_tool_use]]\nmatcher = \"x\"\n",
                "missing field `command`",
            ),
            (
                "[[before_tool]]\ncommand = [\"x\"]\n",
                "unknown field `before_tool`",
            ),
            (
                "[[pre_tool_use]]\ncommand = [\"x\"]\ntimeout_sec = 0\n",
                "timeout_sec = 0 is out of range",
            ),
            (
                "[[stop]]\ncommand = [\"x\"]\ntimeout_sec = 601\n",
                "[[hooks.stop]] #1: timeout_sec = 601",
            ),
            (
                "[[pre_tool_use]]\ncommand = [\"x\"]\nmatcher = \"Bash(rm:*)\"\n",
                "'(' is not allowed",
            ),
            (
                "[[pre_tool_use]]\ncommand = [\"x\"]\nmatcher = \"a||b\"\n",
                "empty alternative",
            ),
            (
                "[[session_start]]\ncommand = [\"x\"]\nmatcher = \"exec_command\"\n",
                "session_start is about no tool call",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }

    #[test]
    fn matchers_take_alternatives_and_stars() {
        let m = |p: &str| Matcher::try_from(p.to_owned()).unwrap();
        assert!(m("exec_command|edit_file").matches("edit_file"));
        assert!(m("edit_*").matches("edit_file"));
        assert!(!m("edit_*").matches("exec_command"));
        assert!(m("*").matches("anything"));
        assert!(m("mcp__*_read*").matches("mcp__fs_read_file"));
        assert!(!m("exec").matches("exec_command"), "whole names only");
        assert!(m("*_*_*").matches("a_b_c"));
        assert!(!m("*_*_*x").matches("a_b_c"));
    }
}

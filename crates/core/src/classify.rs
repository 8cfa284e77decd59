//! Action categories, and the classification of each runtime command before dispatch.
//!
//! Shell commands go through a conservative pattern classifier ([`classify_shell`]): it flags
//! destructive and network-using commands so the approval rules can treat them differently, and
//! when unsure it over-flags. It is a convenience for deciding when to ask, not a security
//! boundary: an obfuscated command can evade it, and what a command can actually touch is
//! bounded by the runtime's sandbox.

mod shell;

use intendant_protocol::runtime::{Command, EditOperation, Function};

pub use intendant_protocol::events::{ActionCategory, UnknownCategory};
pub use shell::classify_shell;

/// The categories of one runtime command, sorted and without duplicates. Never empty.
pub fn classify(cmd: &Command) -> Vec<ActionCategory> {
    let mut cats = match Function::from_wire_name(&cmd.function) {
        Some(Function::ExecAsAgent) => {
            let mut c = classify_shell(cmd.command.as_deref().unwrap_or_default());
            if cmd.display.is_some() {
                c.push(ActionCategory::DisplayControl);
            }
            c
        }
        Some(Function::ExecPty) => classify_shell(cmd.command.as_deref().unwrap_or_default()),
        Some(Function::CaptureScreen) => vec![ActionCategory::DisplayControl],
        Some(Function::InspectPath) => vec![ActionCategory::FileRead],
        Some(Function::EditFile | Function::WriteFile) => {
            let whole_write = cmd.function == Function::WriteFile.wire_name()
                || cmd
                    .operation
                    .as_deref()
                    .and_then(EditOperation::from_wire_name)
                    == Some(EditOperation::Write);
            // Writing empty content over a whole file erases it, as a delete would.
            if whole_write && cmd.content.as_deref().unwrap_or_default().is_empty() {
                vec![ActionCategory::FileWrite, ActionCategory::FileDelete]
            } else {
                vec![ActionCategory::FileWrite]
            }
        }
        Some(Function::Browse) => vec![ActionCategory::Network],
        Some(Function::AskHuman) => vec![ActionCategory::HumanInput],
        None => vec![ActionCategory::ToolCall],
    };
    cats.sort();
    cats.dedup();
    cats
}

#[cfg(test)]
mod tests {
    use super::*;
    use ActionCategory::*;

    fn cmd(function: &str) -> Command {
        Command {
            function: function.into(),
            nonce: 1,
            ..Command::default()
        }
    }

    #[test]
    fn functions_map_to_categories() {
        let exec = |c: &str, display: Option<u32>| Command {
            command: Some(c.into()),
            display,
            ..cmd("execAsAgent")
        };
        let edit = |op: &str, content: &str| Command {
            file_path: Some("a.txt".into()),
            operation: Some(op.into()),
            content: Some(content.into()),
            ..cmd("editFile")
        };
        let table: Vec<(Command, Vec<ActionCategory>)> = vec![
            (exec("ls -la", None), vec![CommandExec]),
            (
                exec("rm -rf build", None),
                vec![FileDelete, CommandExec, Destructive],
            ),
            (exec("curl https://x", None), vec![CommandExec, Network]),
            (exec("xclock", Some(1)), vec![CommandExec, DisplayControl]),
            (
                Command {
                    command: Some("git push --force".into()),
                    ..cmd("execPty")
                },
                vec![CommandExec, Network, Destructive],
            ),
            (cmd("captureScreen"), vec![DisplayControl]),
            (cmd("inspectPath"), vec![FileRead]),
            (edit("write", "x"), vec![FileWrite]),
            (edit("write", ""), vec![FileWrite, FileDelete]),
            (edit("replace_lines", ""), vec![FileWrite]),
            (edit("append", "y"), vec![FileWrite]),
            (cmd("writeFile"), vec![FileWrite, FileDelete]),
            (cmd("browse"), vec![Network]),
            (cmd("askHuman"), vec![HumanInput]),
            (cmd("launchMissiles"), vec![ToolCall]),
        ];
        for (c, want) in table {
            assert_eq!(classify(&c), want, "{c:?}");
        }
    }

    #[test]
    fn category_names_round_trip_and_unknown_is_listed() {
        for c in ActionCategory::ALL {
            assert_eq!(c.name().parse::<ActionCategory>().unwrap(), c);
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
        let e = "shell".parse::<ActionCategory>().unwrap_err().to_string();
        assert!(
            e.contains("\"shell\"") && e.contains("display_control"),
            "{e}"
        );
    }
}

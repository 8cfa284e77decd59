//! The closed sets that travel inside events: each is a unit enum that serializes as its
//! snake_case name, so a frontend matches on a variant instead of comparing strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Defines a unit enum whose wire name (serde, [`name`](Self::name), `Display`) is given once
/// per variant, plus `ALL` in declaration order.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[doc = $doc])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The wire name, as it appears in events and logs.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

closed_set! {
    /// How a session ended (`session_ended.status`). A session log whose writer died without
    /// `session_ended` (a killed controller) also reads as `interrupted`.
    pub enum EndStatus {
        /// The model finished (`signal_done`, or a response without tool calls).
        Completed = "completed",
        /// The token budget ran out.
        BudgetExhausted = "budget_exhausted",
        /// The turn cap was reached.
        TurnCap = "turn_cap",
        /// A human (or the headless rule) denied a command.
        Denied = "denied",
        /// The model refused the task, or the provider's safety filter stopped its answer.
        Refused = "refused",
        /// The provider or the runtime failed.
        Failed = "failed",
        /// The session was stopped (a signal, `ctl stop`, daemon shutdown) or its interrupted
        /// round was its last; it can be resumed.
        Interrupted = "interrupted",
    }
}

closed_set! {
    /// Why one round (a task or a follow-up) ended (`round_complete.reason`).
    pub enum RoundEnd {
        /// The model finished; the session may continue with a follow-up.
        Done = "done",
        /// The token budget ran out.
        BudgetExhausted = "budget_exhausted",
        /// The turn cap was reached.
        TurnCap = "turn_cap",
        /// A command was denied.
        Denied = "denied",
        /// The model refused, or the provider's safety filter stopped its answer; the session
        /// may continue with a follow-up.
        Refused = "refused",
        /// The turn was interrupted or the session stopped; after an interrupt the session may
        /// continue with a follow-up.
        Interrupted = "interrupted",
    }
}

impl RoundEnd {
    /// The session status of a session that ends with this round.
    pub fn session_status(self) -> EndStatus {
        match self {
            RoundEnd::Done => EndStatus::Completed,
            RoundEnd::BudgetExhausted => EndStatus::BudgetExhausted,
            RoundEnd::TurnCap => EndStatus::TurnCap,
            RoundEnd::Denied => EndStatus::Denied,
            RoundEnd::Refused => EndStatus::Refused,
            RoundEnd::Interrupted => EndStatus::Interrupted,
        }
    }
}

closed_set! {
    /// What happens to one command that passed the approval gate (`approval_resolved.verdict`).
    pub enum Verdict {
        /// Run it.
        Approve = "approve",
        /// Do not run it; the model is told it was skipped.
        Skip = "skip",
        /// Do not run it, and stop the task.
        Deny = "deny",
    }
}

closed_set! {
    /// How the conversation was changed (`context_management.action`).
    pub enum ContextAction {
        /// The controller replaced old messages with a compaction marker (context nearly full).
        AutoCompact = "auto_compact",
        /// The model asked to drop its oldest turns.
        DropTurns = "drop_turns",
        /// The model replaced earlier turns with its own summary.
        Summarize = "summarize",
    }
}

closed_set! {
    /// What a command does, for the approval rules (`approval_required.category`, and the keys
    /// of the `[approval]` table in `intendant.toml`).
    pub enum ActionCategory {
        /// Reads file metadata or contents (`inspectPath`).
        FileRead = "file_read",
        /// Creates or changes a file (`editFile`).
        FileWrite = "file_write",
        /// Removes files or empties one.
        FileDelete = "file_delete",
        /// Runs a shell command (`execAsAgent`, `execPty`).
        CommandExec = "command_exec",
        /// Reaches the network (`browse`, `curl`, `git push`, package installs).
        Network = "network",
        /// Hard to undo: recursive deletes, disk formatting, force pushes, shutdowns.
        Destructive = "destructive",
        /// Asks the human a question (`askHuman`); never an approval matter.
        HumanInput = "human_input",
        /// Looks at or drives a display (`captureScreen`, commands on a display).
        DisplayControl = "display_control",
        /// Any other tool (unknown runtime functions, caller-side tools).
        ToolCall = "tool_call",
    }
}

/// A category name that is not one of [`ActionCategory::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCategory {
    /// The value given.
    pub value: String,
}

impl fmt::Display for UnknownCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = ActionCategory::ALL.iter().map(|c| c.name()).collect();
        write!(
            f,
            "unknown action category {:?}: expected one of {}",
            self.value,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownCategory {}

impl FromStr for ActionCategory {
    type Err = UnknownCategory;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ActionCategory::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCategory {
                value: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire strings are the ones these fields carried as plain strings: exactly these, in
    /// this order, each round-tripping through serde and matching `name()` and `Display`.
    fn assert_wire_names<T>(all: &[T], expected: &[&str])
    where
        T: Serialize + for<'de> Deserialize<'de> + fmt::Display + fmt::Debug + PartialEq + Copy,
    {
        let wire: Vec<String> = all
            .iter()
            .map(|v| serde_json::to_string(v).unwrap())
            .collect();
        let quoted: Vec<String> = expected.iter().map(|s| format!("\"{s}\"")).collect();
        assert_eq!(wire, quoted);
        for (v, name) in all.iter().zip(expected) {
            assert_eq!(v.to_string(), *name);
            let back: T = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, *v);
        }
        assert!(serde_json::from_str::<T>("\"no_such_value\"").is_err());
    }

    #[test]
    fn end_status_wire_names() {
        assert_wire_names(
            &EndStatus::ALL,
            &[
                "completed",
                "budget_exhausted",
                "turn_cap",
                "denied",
                "refused",
                "failed",
                "interrupted",
            ],
        );
    }

    #[test]
    fn round_end_wire_names_and_session_status() {
        assert_wire_names(
            &RoundEnd::ALL,
            &[
                "done",
                "budget_exhausted",
                "turn_cap",
                "denied",
                "refused",
                "interrupted",
            ],
        );
        let statuses: Vec<&str> = RoundEnd::ALL
            .iter()
            .map(|r| r.session_status().name())
            .collect();
        assert_eq!(
            statuses,
            [
                "completed",
                "budget_exhausted",
                "turn_cap",
                "denied",
                "refused",
                "interrupted"
            ]
        );
    }

    #[test]
    fn verdict_wire_names() {
        assert_wire_names(&Verdict::ALL, &["approve", "skip", "deny"]);
    }

    #[test]
    fn context_action_wire_names() {
        assert_wire_names(
            &ContextAction::ALL,
            &["auto_compact", "drop_turns", "summarize"],
        );
    }

    #[test]
    fn action_category_wire_names_parse_and_unknown_is_listed() {
        let names = [
            "file_read",
            "file_write",
            "file_delete",
            "command_exec",
            "network",
            "destructive",
            "human_input",
            "display_control",
            "tool_call",
        ];
        assert_wire_names(&ActionCategory::ALL, &names);
        for (c, name) in ActionCategory::ALL.into_iter().zip(names) {
            assert_eq!(name.parse::<ActionCategory>(), Ok(c));
        }
        let e = "shell".parse::<ActionCategory>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown action category \"shell\": expected one of file_read, file_write, \
             file_delete, command_exec, network, destructive, human_input, display_control, \
             tool_call"
        );
    }
}

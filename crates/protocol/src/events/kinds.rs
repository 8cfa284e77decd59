//! The closed sets that travel inside events: each is a unit enum that serializes as its
//! snake_case name, so a frontend matches on a variant instead of comparing strings.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::closed_set::{UnknownName, closed_set};

closed_set! {
    /// How a session ended (`session_ended.status`). A session log whose writer died without
    /// `session_ended` (a killed controller) also reads as `interrupted`.
    pub enum EndStatus ("session end status") {
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

/// What `session_meta.json` records as a session's status: `running` until the session ends,
/// then its [`EndStatus`] (the same string `session_ended.status` carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum RecordedStatus {
    /// The session has not ended (or its writer died before it could say so).
    #[default]
    Running,
    /// The session ended this way.
    Ended(EndStatus),
}

impl RecordedStatus {
    /// The wire name, e.g. `running` or `budget_exhausted`.
    pub fn name(self) -> &'static str {
        match self {
            RecordedStatus::Running => "running",
            RecordedStatus::Ended(end) => end.name(),
        }
    }

    /// The status whose wire name is `name`; `None` for any other string.
    pub fn from_name(name: &str) -> Option<RecordedStatus> {
        match name {
            "running" => Some(RecordedStatus::Running),
            other => EndStatus::from_name(other).map(RecordedStatus::Ended),
        }
    }
}

impl From<RecordedStatus> for &'static str {
    fn from(status: RecordedStatus) -> &'static str {
        status.name()
    }
}

impl TryFrom<String> for RecordedStatus {
    type Error = UnknownName;

    fn try_from(name: String) -> Result<RecordedStatus, UnknownName> {
        RecordedStatus::from_name(&name).ok_or(UnknownName {
            what: "session status",
            value: name,
            expected: &RECORDED_STATUS_NAMES,
        })
    }
}

/// Every [`RecordedStatus`] name, for the error naming what was expected.
const RECORDED_STATUS_NAMES: [&str; EndStatus::ALL.len() + 1] = [
    "running",
    "completed",
    "budget_exhausted",
    "turn_cap",
    "denied",
    "refused",
    "failed",
    "interrupted",
];

impl fmt::Display for RecordedStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so a table column's width and alignment apply.
        f.pad(self.name())
    }
}

impl From<EndStatus> for RecordedStatus {
    fn from(end: EndStatus) -> RecordedStatus {
        RecordedStatus::Ended(end)
    }
}

closed_set! {
    /// Why one round (a task or a follow-up) ended (`round_complete.reason`).
    pub enum RoundEnd ("round end") {
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
    pub enum Verdict ("verdict") {
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
    pub enum ContextAction ("context action") {
        /// The controller replaced old messages with a compaction marker (context nearly full).
        AutoCompact = "auto_compact",
        /// The model asked to drop its oldest turns.
        DropTurns = "drop_turns",
        /// The model replaced earlier turns with its own summary.
        Summarize = "summarize",
        /// A human rewound the session (`intendant rewind`): its files restored to a turn's
        /// checkpoint, its conversation cut back to that turn, or both (or such a rewind undone).
        Rewind = "rewind",
    }
}

closed_set! {
    /// What a command does, for the approval rules (`approval_required.category`, and the keys
    /// of the `[approval]` table in `intendant.toml`).
    pub enum ActionCategory ("action category") {
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
        /// A tool of a configured MCP server (`mcp__<server>_<tool>`); its annotations shape
        /// the default rule.
        Mcp = "mcp",
        /// A session scheduled on the daemon's agenda (`ctl schedule`): only the owner
        /// approves it, at every autonomy level, and never a session's own processes.
        Schedule = "schedule",
        /// A fact a session's model proposes to remember (`memory_propose`): asked of a human
        /// at every autonomy level, never approved by a rule or by the model.
        Memory = "memory",
    }
}

closed_set! {
    /// What happened to a configured MCP server (`mcp_server.state`).
    pub enum McpServerState ("MCP server state") {
        /// It started (or restarted) and listed its tools; `detail` says how many.
        Ready = "ready",
        /// It could not be started, did not answer in time or could not list its tools.
        Failed = "failed",
        /// It ended while the session ran (its stderr's last lines in `detail`).
        Exited = "exited",
        /// It will be started again after a pause (`detail` says when).
        Restarting = "restarting",
        /// It changed its tool list (`notifications/tools/list_changed`), read again.
        ToolsChanged = "tools_changed",
        /// It failed too often in a row and is not started again this session.
        GaveUp = "gave_up",
        /// A tool it listed was left out (an invalid schema, a name clash).
        ToolSkipped = "tool_skipped",
        /// It was let go after its `idle_exit_sec` without a call (its tools still offered);
        /// the next call starts it again.
        LetGo = "let_go",
    }
}

closed_set! {
    /// What happened, in an `agenda` event.
    pub enum AgendaNotice ("agenda notice") {
        /// An item's reminder is due.
        Reminder = "reminder",
        /// A scheduled session was started (`detail` names it).
        Started = "started",
        /// A scheduled session was not run (`detail` says why).
        Missed = "missed",
        /// A scheduled session could not be started (`detail` says why).
        Failed = "failed",
    }
}

/// A category name that is not one of [`ActionCategory::ALL`].
pub type UnknownCategory = UnknownName;

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
    fn recorded_status_wire_names_are_running_then_the_end_statuses() {
        let table = [
            (RecordedStatus::Running, "running"),
            (RecordedStatus::Ended(EndStatus::Completed), "completed"),
            (
                RecordedStatus::Ended(EndStatus::BudgetExhausted),
                "budget_exhausted",
            ),
            (RecordedStatus::Ended(EndStatus::TurnCap), "turn_cap"),
            (RecordedStatus::Ended(EndStatus::Denied), "denied"),
            (RecordedStatus::Ended(EndStatus::Refused), "refused"),
            (RecordedStatus::Ended(EndStatus::Failed), "failed"),
            (RecordedStatus::Ended(EndStatus::Interrupted), "interrupted"),
        ];
        assert_eq!(
            table.len(),
            EndStatus::ALL.len() + 1,
            "every status is pinned"
        );
        let names: Vec<&str> = table.iter().map(|(_, name)| *name).collect();
        assert_eq!(names, RECORDED_STATUS_NAMES);
        for (status, name) in table {
            assert_eq!(status.name(), name);
            assert_eq!(status.to_string(), name);
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{name}\"")
            );
            let back: RecordedStatus = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, status);
        }
        assert_eq!(RecordedStatus::default(), RecordedStatus::Running);
        assert_eq!(format!("{:<9}|", RecordedStatus::Running), "running  |");
        assert_eq!(format!("{:>7}|", EndStatus::Failed), " failed|");
        let e = serde_json::from_str::<RecordedStatus>("\"paused\"").unwrap_err();
        assert!(
            e.to_string().contains(
                "unknown session status \"paused\": expected one of running, completed, \
                 budget_exhausted, turn_cap, denied, refused, failed, interrupted"
            ),
            "{e}"
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
            &["auto_compact", "drop_turns", "summarize", "rewind"],
        );
    }

    #[test]
    fn mcp_server_state_wire_names() {
        assert_wire_names(
            &McpServerState::ALL,
            &[
                "ready",
                "failed",
                "exited",
                "restarting",
                "tools_changed",
                "gave_up",
                "tool_skipped",
                "let_go",
            ],
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
            "mcp",
            "schedule",
            "memory",
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
             tool_call, mcp, schedule, memory"
        );
    }
}

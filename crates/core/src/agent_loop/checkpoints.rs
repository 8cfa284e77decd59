//! The checkpoints around a batch: the project before and after every batch that can change
//! files, taken by the controller (never the sandbox), numbered by the session's turn.
//!
//! A checkpoint that fails is a warning, not the end of the turn: the work goes on, and that
//! turn cannot be rewound.

use intendant_protocol::events::AppEvent;
use intendant_protocol::runtime::{Command, Function};

use super::AgentLoop;
use crate::checkpoint::{CheckpointError, ConversationCut, TurnRecorder};
use crate::conversation::Conversation;

/// Whether `command` can change the project's files.
pub(crate) fn can_change_files(command: &Command) -> bool {
    let Some(function) = Function::from_wire_name(&command.function) else {
        // A function this build does not know is checkpointed rather than trusted.
        return true;
    };
    match function {
        Function::ExecAsAgent | Function::ExecPty | Function::EditFile | Function::WriteFile => {
            true
        }
        Function::CaptureScreen | Function::InspectPath | Function::Browse | Function::AskHuman => {
            false
        }
    }
}

impl AgentLoop {
    /// Checkpoints the project before `commands` when one of them can change files; whether
    /// the batch is to be checkpointed after it too.
    pub(super) async fn checkpoint_before(&mut self, commands: &[Command]) -> bool {
        if !commands.iter().any(can_change_files) {
            return false;
        }
        let (Some(plan), Some(log)) = (&self.cfg.checkpoints, &self.cfg.session_log) else {
            return false;
        };
        let turn = log.session_turn(self.turn);
        let recorder = self
            .checkpoints
            .get_or_insert_with(|| TurnRecorder::new(plan.clone(), log.id()));
        let taken = recorder.before(turn, self.turn_items).await;
        let notices = recorder.take_notices();
        self.checkpoint_notices(notices);
        match taken {
            Ok(()) => true,
            Err(e) => {
                self.checkpoint_failed(turn, &e);
                false
            }
        }
    }

    /// Checkpoints the project after the batch [`AgentLoop::checkpoint_before`] began.
    pub(super) async fn checkpoint_after(&mut self) {
        let (Some(recorder), Some(log)) = (&mut self.checkpoints, &self.cfg.session_log) else {
            return;
        };
        let turn = log.session_turn(self.turn);
        let taken = recorder.after().await;
        let notices = recorder.take_notices();
        self.checkpoint_notices(notices);
        if let Err(e) = taken {
            self.checkpoint_failed(turn, &e);
        }
    }

    /// The conversation cuts the session's checkpoints record now (`None`: not checkpointed).
    pub(super) fn recorded_cuts(&self) -> Option<Vec<ConversationCut>> {
        let (Some(plan), Some(log)) = (&self.cfg.checkpoints, &self.cfg.session_log) else {
            return None;
        };
        match crate::checkpoint::recorded_cuts(&plan.home, &plan.project, log.id()) {
            Ok(cuts) => Some(cuts),
            Err(e) => {
                self.bus.emit(AppEvent::Warning {
                    message: format!("the session's rewinds cannot be read: {e}"),
                });
                None
            }
        }
    }

    /// Applies a rewind of the conversation recorded while the session waited for a
    /// follow-up (`ctl rewind`, the dashboard, MCP): the conversation is rebuilt from the log
    /// as a resume would, so the follow-up continues from before the turn rewound to.
    pub(super) fn take_rewinds(&mut self) {
        let Some(cuts) = self.recorded_cuts() else {
            return;
        };
        if cuts == self.cuts_seen {
            return;
        }
        let (Some(plan), Some(log)) = (&self.cfg.checkpoints, &self.cfg.session_log) else {
            return;
        };
        match crate::resume::recorded_conversation(&plan.home, log.dir(), &plan.project, log.id())
        {
            Ok((items, _, _)) => {
                self.conversation = Conversation::from_items(items);
                self.cuts_seen = cuts;
            }
            Err(e) => self.bus.emit(AppEvent::Warning {
                message: format!(
                    "a rewind of the conversation could not be applied, so the model still sees the whole conversation: {e}"
                ),
            }),
        }
    }

    /// Reports what went wrong in the checkpoints without failing them (a resident git that
    /// died, so a capture started git per command instead).
    fn checkpoint_notices(&self, notices: Vec<String>) {
        for message in notices {
            self.bus.emit(AppEvent::Warning { message });
        }
    }

    fn checkpoint_failed(&self, turn: u32, e: &CheckpointError) {
        self.bus.emit(AppEvent::Warning {
            message: TurnRecorder::failure(turn, e),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_functions_that_can_write_the_project_are_checkpointed() {
        let with = |function: Function| Command {
            function: function.wire_name().to_owned(),
            ..Command::default()
        };
        let checkpointed: Vec<Function> = Function::ALL
            .into_iter()
            .filter(|f| can_change_files(&with(*f)))
            .collect();
        assert_eq!(
            checkpointed,
            [
                Function::ExecAsAgent,
                Function::EditFile,
                Function::WriteFile,
                Function::ExecPty
            ]
        );
        let unknown = Command {
            function: "somethingNew".to_owned(),
            ..Command::default()
        };
        assert!(can_change_files(&unknown));
    }
}

//! The checkpoints a running session takes around its turns, whichever backend runs them (the
//! native loop around a batch, a worker around a round of its CLI): the session's checkpoints
//! opened at its first such turn, then one `before` and one `after` per turn.

use super::{CheckpointError, CheckpointPlan, SessionCheckpoints};

/// One running session's checkpointing. A failure is the caller's to report as a warning: the
/// turn goes on, and cannot be rewound.
#[derive(Debug)]
pub struct TurnRecorder {
    plan: CheckpointPlan,
    session: String,
    opened: Option<SessionCheckpoints>,
    /// The turn whose `before` was taken and whose `after` is still due.
    open_turn: Option<u32>,
}

impl TurnRecorder {
    /// The checkpoints of session `session` as `plan` says; nothing is opened yet.
    pub fn new(plan: CheckpointPlan, session: &str) -> TurnRecorder {
        TurnRecorder {
            plan,
            session: session.to_owned(),
            opened: None,
            open_turn: None,
        }
    }

    /// Captures the project before turn `turn` (the session's number), with the conversation
    /// items written before it when the session keeps them.
    pub async fn before(
        &mut self,
        turn: u32,
        conversation_items: Option<u64>,
    ) -> Result<(), CheckpointError> {
        self.open_turn = None;
        if self.opened.is_none() {
            let plan = &self.plan;
            self.opened = Some(
                SessionCheckpoints::open(&plan.home, &plan.project, &self.session, &plan.config)
                    .await?
                    .placed(plan.placement.clone()),
            );
        }
        if let Some(checkpoints) = &self.opened {
            checkpoints.before(turn, conversation_items).await?;
            self.open_turn = Some(turn);
        }
        Ok(())
    }

    /// Captures the project after the turn [`TurnRecorder::before`] captured; nothing when
    /// that failed or was not taken.
    pub async fn after(&mut self) -> Result<(), CheckpointError> {
        let (Some(turn), Some(checkpoints)) = (self.open_turn.take(), &self.opened) else {
            return Ok(());
        };
        checkpoints.after(turn).await.map(drop)
    }

    /// What went wrong in the session's checkpoints without failing them since last asked
    /// ([`SessionCheckpoints::take_notices`]), to report as warnings.
    pub fn take_notices(&self) -> Vec<String> {
        self.opened
            .as_ref()
            .map(SessionCheckpoints::take_notices)
            .unwrap_or_default()
    }

    /// Ends what the session's checkpoints keep running between turns
    /// ([`SessionCheckpoints::rest`]): called when the session's round ends.
    pub fn rest(&self) {
        if let Some(checkpoints) = &self.opened {
            checkpoints.rest();
        }
    }

    /// The warning for a checkpoint of turn `turn` that failed.
    pub fn failure(turn: u32, e: &CheckpointError) -> String {
        format!("turn {turn} could not be checkpointed, so it cannot be rewound: {e}")
    }
}

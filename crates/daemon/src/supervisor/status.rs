//! What the daemon knows of each session, folded from its events as they are published: the
//! status, usage totals, the pending question, and the daemon-wide approval queue; and, for a
//! session known only from its records, what it ended with, read back from its log.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::Path;

use intendant_core::session_log::{SessionLogError, SessionMeta, read_meta, rev_records};
use intendant_core::skills::invoked_skill;
use intendant_core::subagents::submitted_result;
use intendant_protocol::daemon::{
    Envelope, PendingApproval, SessionStatus, SessionSummary, SubmittedResult,
};
use intendant_protocol::events::{ActionCategory, AppEvent, EndStatus, RecordedStatus};

/// The status a finished session's `session_ended` status maps to.
pub(crate) fn end_status(status: EndStatus) -> SessionStatus {
    match status {
        EndStatus::Completed | EndStatus::BudgetExhausted | EndStatus::TurnCap => {
            SessionStatus::Done
        }
        // A denial ends the task the way the human (or a rule) wanted: it is done, not broken.
        EndStatus::Denied => SessionStatus::Done,
        // The model answered, with a refusal: finished, and its final text says so.
        EndStatus::Refused => SessionStatus::Done,
        EndStatus::Failed => SessionStatus::Failed,
        // Stopped: resumable, like a session whose controller died.
        EndStatus::Interrupted => SessionStatus::Interrupted,
    }
}

/// The status a recorded session's `session_meta.json` status maps to: its end status, else
/// (its log says it was still running, but its writer is gone) interrupted.
pub(crate) fn recorded_status(status: RecordedStatus) -> SessionStatus {
    match status {
        RecordedStatus::Running => SessionStatus::Interrupted,
        RecordedStatus::Ended(end) => end_status(end),
    }
}

/// The approvals waiting for a human, and those already answered while their session runs (so
/// a second answer is told so rather than taken for an unknown id). An ended session's are
/// forgotten: nobody can answer it any more (the host refuses with `session_finished` first),
/// and a daemon that runs for months would otherwise keep every approval it ever answered.
#[derive(Default)]
pub(crate) struct ApprovalQueue {
    pending: BTreeMap<u64, PendingApproval>,
    /// Answered approval ids, by session.
    answered: BTreeMap<String, BTreeSet<u64>>,
}

/// Why an answer cannot be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerRefused {
    Unknown,
    AlreadyAnswered,
    /// An answer only a `network` approval takes (`allow_host`), to one of this category.
    NotNetwork(ActionCategory),
}

impl ApprovalQueue {
    /// Every pending approval, oldest first.
    pub(crate) fn list(&self) -> Vec<PendingApproval> {
        self.pending.values().cloned().collect()
    }

    /// Pending approvals of `session`.
    pub(crate) fn count(&self, session: &str) -> u32 {
        let n = self
            .pending
            .values()
            .filter(|a| a.session_id == session)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether a pending approval of `session` is of a category `of` picks.
    pub(crate) fn any_pending(&self, session: &str, of: impl Fn(ActionCategory) -> bool) -> bool {
        self.pending
            .values()
            .any(|a| a.session_id == session && of(a.category))
    }

    /// Takes approval `id` of `session` out of the queue for an answer being delivered;
    /// `network_only`: the answer is one only a `network` approval takes (`allow_host`). The
    /// approval's category.
    pub(crate) fn answer(
        &mut self,
        session: &str,
        id: u64,
        network_only: bool,
    ) -> Result<ActionCategory, AnswerRefused> {
        match self.pending.get(&id) {
            Some(a)
                if a.session_id == session
                    && network_only
                    && a.category != ActionCategory::Network =>
            {
                Err(AnswerRefused::NotNetwork(a.category))
            }
            Some(a) if a.session_id == session => {
                let category = a.category;
                self.resolved(id);
                Ok(category)
            }
            Some(_) => Err(AnswerRefused::Unknown),
            None if self
                .answered
                .get(session)
                .is_some_and(|ids| ids.contains(&id)) =>
            {
                Err(AnswerRefused::AlreadyAnswered)
            }
            None => Err(AnswerRefused::Unknown),
        }
    }

    fn resolved(&mut self, id: u64) {
        if let Some(approval) = self.pending.remove(&id) {
            self.answered
                .entry(approval.session_id)
                .or_default()
                .insert(id);
        }
    }

    /// Forgets every approval of an ended session, pending or answered: nobody can answer them
    /// any more.
    fn end_session(&mut self, session: &str) {
        self.pending.retain(|_, a| a.session_id != session);
        self.answered.remove(session);
    }

    /// Approval ids kept as answered, over every session.
    #[cfg(test)]
    fn answered_count(&self) -> usize {
        self.answered.values().map(BTreeSet::len).sum()
    }
}

/// One session as the daemon tracks it.
pub(crate) struct Tracked {
    /// The listing, minus what is computed when it is read (pending approvals, the waiting
    /// overlay, the live autonomy level).
    pub(crate) summary: SessionSummary,
    /// A question waiting for an answer.
    pub(crate) question: Option<u64>,
    /// Known only from its records, and what it ended with not read back yet ([`Ending`]).
    pub(crate) ending_unread: bool,
    /// Ended, and its texts held as a listing cuts them, some of them longer: the whole ones
    /// are in its records ([`Whole`]), so an ended session costs the daemon a listing's entry
    /// however much its model wrote.
    pub(crate) cut: bool,
}

/// What a session last answered (`done`, `refusal`) and, a sub-agent, last submitted
/// (`submit_result`): what the daemon folded from its events while it ran, read back from the
/// end of its log for a session known only from its records (a restarted daemon's).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Ending {
    pub(crate) final_text: Option<String>,
    pub(crate) result: Option<SubmittedResult>,
}

impl Ending {
    /// Reads it from the end of session `dir`'s log, back to the last answer and (for a
    /// sub-agent, a `child`) the last valid report; the whole log when there is none.
    pub(crate) fn read(dir: &Path, child: bool) -> Result<Ending, SessionLogError> {
        let events: &[&str] = if child {
            &["done", "refusal", "tool_call"]
        } else {
            &["done", "refusal"]
        };
        let mut ending = Ending::default();
        rev_records(dir, events, |record| {
            match record.event {
                AppEvent::Done { message } | AppEvent::Refusal { text: message, .. } => {
                    ending.final_text.get_or_insert(message);
                }
                AppEvent::ToolCall {
                    name, arguments, ..
                } if ending.result.is_none() => {
                    ending.result = submitted_result(&name, &arguments);
                }
                _ => {}
            }
            if ending.final_text.is_some() && (ending.result.is_some() || !child) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(ending)
    }
}

/// The whole texts of a session whose tracking holds them cut ([`Tracked::cut`]), read back
/// from its records: its task and end reason from its `session_meta.json`, its last answer and
/// report from the end of its log.
pub(crate) struct Whole {
    meta: SessionMeta,
    pub(crate) ending: Ending,
}

impl Whole {
    pub(crate) fn read(dir: &Path, child: bool) -> Result<Whole, SessionLogError> {
        Ok(Whole {
            meta: read_meta(dir)?,
            ending: Ending::read(dir, child)?,
        })
    }

    /// Puts each whole text into `view` where `view` holds that text cut.
    pub(crate) fn restore(self, view: &mut SessionSummary) {
        uncut(&mut view.task, Some(self.meta.task));
        if let Some(reason) = &mut view.reason {
            uncut(reason, self.meta.reason);
        }
        if let Some(text) = &mut view.final_text {
            uncut(text, self.ending.final_text);
        }
        if let Some(result) = &mut view.result {
            uncut(&mut result.summary, self.ending.result.map(|r| r.summary));
        }
    }
}

/// Puts `whole` in place of `cut` when `cut` is `whole` as a listing cuts it.
fn uncut(cut: &mut String, whole: Option<String>) {
    if let Some(whole) = whole
        && SessionSummary::listed_text(&whole).is_some_and(|listed| listed == *cut)
    {
        *cut = whole;
    }
}

impl Tracked {
    /// A session's tracking from its summary (with no question pending).
    pub(crate) fn new(summary: SessionSummary) -> Tracked {
        Tracked {
            summary,
            question: None,
            ending_unread: false,
            cut: false,
        }
    }

    /// The tracking of a session known only from its records: its texts held cut, what it
    /// ended with not read yet.
    pub(crate) fn recorded(mut summary: SessionSummary) -> Tracked {
        let cut = summary.cut_to_listing();
        Tracked {
            summary,
            question: None,
            ending_unread: true,
            cut,
        }
    }

    /// Puts what the session's log says it ended with into the summary: once, and only while
    /// the session is known only from its records (a resume gives it a new tracking). An
    /// answer or report folded since the log was read is newer and stays.
    pub(crate) fn settle(&mut self, ending: Ending) {
        if !std::mem::take(&mut self.ending_unread) {
            return;
        }
        let s = &mut self.summary;
        s.final_text = s.final_text.take().or(ending.final_text);
        s.result = s.result.take().or(ending.result);
        self.cut |= s.cut_to_listing();
    }

    /// Folds one published envelope of this session into it and into `approvals`.
    pub(crate) fn absorb(&mut self, env: &Envelope, approvals: &mut ApprovalQueue) {
        let s = &mut self.summary;
        match &env.event {
            AppEvent::SessionStarted { .. } => {
                s.status = SessionStatus::Running;
                // A resumed session runs again: why it ended before is history.
                s.reason = None;
            }
            AppEvent::TurnStarted { .. } => s.status = SessionStatus::Running,
            AppEvent::ApprovalRequired {
                id,
                command_preview,
                detail,
                category,
                ..
            } => {
                approvals.pending.insert(
                    *id,
                    PendingApproval {
                        id: *id,
                        session_id: env.session_id.clone(),
                        project: s.project.clone(),
                        command_preview: command_preview.clone(),
                        detail: detail.clone(),
                        category: *category,
                        seq: env.seq,
                        requested: env.ts.clone(),
                    },
                );
            }
            AppEvent::ApprovalResolved { id, .. } => approvals.resolved(*id),
            AppEvent::HumanQuestion { id, .. } => self.question = Some(*id),
            AppEvent::HumanAnswer { .. } => self.question = None,
            AppEvent::Usage {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                s.input_tokens += input_tokens;
                s.output_tokens += output_tokens;
                s.cost_usd += cost_usd;
            }
            AppEvent::RoundComplete {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                s.input_tokens = *input_tokens;
                s.output_tokens = *output_tokens;
                s.cost_usd = *cost_usd;
                s.status = SessionStatus::Idle;
            }
            AppEvent::Done { message } | AppEvent::Refusal { text: message, .. } => {
                s.final_text = Some(message.clone());
            }
            AppEvent::AutonomyChanged { level, .. } => s.autonomy = *level,
            AppEvent::ToolCall {
                name, arguments, ..
            } => {
                // A child's report to its parent, as `submit_result` validates it (read in place:
                // this runs under the supervisor's lock for every tool call).
                if let Some(result) = submitted_result(name, arguments) {
                    s.result = Some(result);
                }
                if let Some(skill) = invoked_skill(name, arguments)
                    && !s.skills.iter().any(|k| k == skill)
                {
                    s.skills.push(skill.to_owned());
                }
            }
            AppEvent::SessionEnded { status, reason, .. } => {
                s.status = end_status(*status);
                s.reason = Some(reason.clone());
                // Ended: its whole texts are in its records.
                self.cut |= s.cut_to_listing();
                self.question = None;
                approvals.end_session(&env.session_id);
            }
            AppEvent::ModelResponseDelta { .. }
            | AppEvent::ModelResponse { .. }
            | AppEvent::Truncated { .. }
            | AppEvent::ToolBatch { .. }
            | AppEvent::AgentOutput { .. }
            | AppEvent::ToolBatchResult { .. }
            | AppEvent::BudgetWarning { .. }
            | AppEvent::ContextManagement { .. }
            | AppEvent::Error { .. }
            | AppEvent::Egress { .. }
            | AppEvent::Warning { .. }
            | AppEvent::HookRun { .. }
            | AppEvent::McpServer { .. }
            | AppEvent::Agenda { .. }
            | AppEvent::SessionsPruned { .. }
            | AppEvent::SessionsChanged { .. }
            | AppEvent::FollowUpHeld { .. }
            | AppEvent::ControlCommand(_) => {}
        }
    }

    /// The listing as frontends see it now.
    pub(crate) fn view(&self, approvals: &ApprovalQueue) -> SessionSummary {
        let mut s = self.summary.clone();
        s.pending_approvals = approvals.count(&s.id);
        s.status = self.status_with(s.pending_approvals);
        s
    }

    /// Its status as listed now: waiting for a human while an approval of it or a question
    /// waits, unless it is finished or queued.
    pub(crate) fn status(&self, approvals: &ApprovalQueue) -> SessionStatus {
        self.status_with(approvals.count(&self.summary.id))
    }

    /// [`Self::status`] with `pending` approvals of it waiting.
    fn status_with(&self, pending: u32) -> SessionStatus {
        let s = &self.summary;
        let waiting = pending > 0 || self.question.is_some();
        if waiting && !s.status.is_finished() && s.status != SessionStatus::Queued {
            SessionStatus::WaitingForHuman
        } else {
            s.status
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::autonomy::AutonomyLevel;
    use intendant_protocol::daemon::Backend;
    use intendant_protocol::events::{ActionCategory, Verdict};

    fn tracked(id: &str) -> Tracked {
        Tracked::new(SessionSummary {
            id: id.into(),
            parent: None,
            project: "/p".into(),
            task: "t".into(),
            backend: Backend::Native,
            provider: "mock".into(),
            model: "m".into(),
            status: SessionStatus::Queued,
            reason: None,
            autonomy: AutonomyLevel::Medium,
            created: String::new(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            pending_approvals: 0,
            skills: Vec::new(),
            final_text: None,
            result: None,
            worktree: None,
            usage: None,
            run_by: None,
            network: None,
        })
    }

    fn env(session: &str, seq: u64, event: AppEvent) -> Envelope {
        Envelope {
            member: None,
            record_end: None,
            seq,
            session_id: session.into(),
            ts: "t".into(),
            event,
        }
    }

    fn required(id: u64) -> AppEvent {
        AppEvent::ApprovalRequired {
            id,
            session_id: String::new(),
            command_preview: "$ rm x".into(),
            detail: None,
            category: ActionCategory::FileDelete,
        }
    }

    #[test]
    fn approvals_queue_across_sessions_and_refuse_bad_answers() {
        let mut q = ApprovalQueue::default();
        let (mut a, mut b) = (tracked("a"), tracked("b"));
        a.absorb(&env("a", 1, required(7)), &mut q);
        b.absorb(&env("b", 2, required(8)), &mut q);
        assert_eq!(q.list().iter().map(|p| p.id).collect::<Vec<_>>(), [7, 8]);
        assert_eq!(a.view(&q).status, SessionStatus::Queued, "not started yet");
        a.absorb(&env("a", 3, AppEvent::TurnStarted { turn: 1 }), &mut q);
        assert_eq!(a.view(&q).status, SessionStatus::WaitingForHuman);
        assert_eq!(
            q.answer("b", 7, false),
            Err(AnswerRefused::Unknown),
            "not b's"
        );
        assert_eq!(q.answer("a", 99, false), Err(AnswerRefused::Unknown));
        assert_eq!(
            q.answer("a", 7, true),
            Err(AnswerRefused::NotNetwork(ActionCategory::FileDelete)),
            "allow_host answers a network approval only, and leaves this one pending"
        );
        assert_eq!(q.answer("a", 7, false), Ok(ActionCategory::FileDelete));
        assert_eq!(q.answer("a", 7, false), Err(AnswerRefused::AlreadyAnswered));
        a.absorb(
            &env(
                "a",
                4,
                AppEvent::ApprovalResolved {
                    id: 7,
                    verdict: Verdict::Approve,
                },
            ),
            &mut q,
        );
        assert_eq!(a.view(&q).status, SessionStatus::Running);
        assert_eq!(q.list().len(), 1);
        b.absorb(
            &env(
                "b",
                5,
                AppEvent::SessionEnded {
                    session_id: "b".into(),
                    status: EndStatus::Failed,
                    reason: "x".into(),
                },
            ),
            &mut q,
        );
        assert!(q.list().is_empty(), "an ended session's approvals go");
        assert_eq!(
            q.answered_count(),
            1,
            "only the live session's answer is kept"
        );
        assert_eq!(
            q.answer("b", 8, false),
            Err(AnswerRefused::Unknown),
            "forgotten"
        );
        assert_eq!(b.view(&q).status, SessionStatus::Failed);
        a.absorb(
            &env(
                "a",
                6,
                AppEvent::SessionEnded {
                    session_id: "a".into(),
                    status: EndStatus::Completed,
                    reason: "done".into(),
                },
            ),
            &mut q,
        );
        assert_eq!(q.answered_count(), 0, "an ended session keeps nothing here");
    }

    #[test]
    fn why_a_session_ended_is_listed_until_it_runs_again() {
        let mut q = ApprovalQueue::default();
        let mut t = tracked("s");
        let ended = AppEvent::SessionEnded {
            session_id: "s".into(),
            status: EndStatus::Failed,
            reason: "provider error: 529 overloaded".into(),
        };
        t.absorb(&env("s", 1, ended), &mut q);
        assert_eq!(t.summary.status, SessionStatus::Failed);
        assert_eq!(
            t.summary.reason.as_deref(),
            Some("provider error: 529 overloaded")
        );
        let resumed = AppEvent::SessionStarted {
            session_id: "s".into(),
            task: String::new(),
            model: "m".into(),
            provider: "mock".into(),
            project_root: "/p".into(),
            resumed: true,
        };
        t.absorb(&env("s", 2, resumed), &mut q);
        assert_eq!(t.summary.reason, None);
    }

    #[test]
    fn an_ended_session_is_held_as_a_listing_cuts_it_and_given_back_whole_from_its_records() {
        let long = |what: &str| format!("{what} {}", "é".repeat(3_000));
        let answer = long("answer");
        let events = [
            AppEvent::Done {
                message: answer.clone(),
            },
            AppEvent::SessionEnded {
                session_id: "s".into(),
                status: EndStatus::Completed,
                reason: long("done"),
            },
        ];
        let dir = logged(&events);
        let mut meta = SessionMeta::new(Path::new("/p"), &long("task"), "m", "mock");
        meta.reason = Some(long("done"));
        std::fs::write(
            dir.path().join(intendant_core::session_log::META_FILE),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();
        let mut t = tracked("s");
        t.summary.task = long("task");
        let mut q = ApprovalQueue::default();
        t.absorb(&env("s", 1, events[0].clone()), &mut q);
        assert!(!t.cut, "running: whole");
        assert_eq!(t.summary.final_text.as_deref(), Some(answer.as_str()));
        t.absorb(&env("s", 2, events[1].clone()), &mut q);
        assert!(t.cut);
        let held = &t.summary;
        for text in [
            &held.task,
            held.final_text.as_ref().unwrap(),
            held.reason.as_ref().unwrap(),
        ] {
            assert!(text.len() <= SessionSummary::LISTED_TEXT_BYTES + 3 && text.ends_with('…'));
        }
        let mut view = t.summary.clone();
        Whole::read(dir.path(), false).unwrap().restore(&mut view);
        assert_eq!(view.task, long("task"));
        assert_eq!(view.final_text.as_deref(), Some(answer.as_str()));
        assert_eq!(view.reason, Some(long("done")));
        // A text that is not the record's cut (a newer one) is left as it is.
        let mut newer = t.summary.clone();
        newer.final_text = Some("answered since".into());
        Whole::read(dir.path(), false).unwrap().restore(&mut newer);
        assert_eq!(newer.final_text.as_deref(), Some("answered since"));
        // Short texts are not cut, so nothing is read back for them.
        let mut short = tracked("short");
        short.absorb(
            &env(
                "short",
                1,
                AppEvent::SessionEnded {
                    session_id: "short".into(),
                    status: EndStatus::Completed,
                    reason: "done".into(),
                },
            ),
            &mut q,
        );
        assert!(!short.cut);
    }

    #[test]
    fn a_childs_submitted_result_is_listed() {
        let mut q = ApprovalQueue::default();
        let mut child = tracked("c");
        let call = |name: &str, arguments: serde_json::Value| AppEvent::ToolCall {
            call_id: "x".into(),
            name: name.into(),
            arguments,
        };
        child.absorb(
            &env(
                "c",
                1,
                call("submit_result", serde_json::json!({"fields": 3})),
            ),
            &mut q,
        );
        assert_eq!(
            child.summary.result, None,
            "an invalid submit is not a result"
        );
        child.absorb(
            &env(
                "c",
                2,
                call(
                    "submit_result",
                    serde_json::json!({"summary": "did it", "fields": {"n": 1}}),
                ),
            ),
            &mut q,
        );
        let result = child.summary.result.unwrap();
        assert_eq!(result.summary, "did it");
        assert_eq!(result.fields["n"], 1);
    }

    /// A session directory whose log holds `events`, numbered from 1.
    fn logged(events: &[AppEvent]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for (seq, event) in (1..).zip(events) {
            let record = intendant_protocol::events::SessionLogRecord {
                ts: "t".into(),
                seq: Some(seq),
                event: event.clone(),
            };
            text.push_str(&serde_json::to_string(&record).unwrap());
            text.push('\n');
        }
        let path = dir.path().join(intendant_core::session_log::EVENTS_FILE);
        std::fs::write(path, text).unwrap();
        dir
    }

    #[test]
    fn what_a_log_says_a_session_ended_with_is_what_was_folded_while_it_ran() {
        let done = |m: &str| AppEvent::Done { message: m.into() };
        let refusal = |m: &str| AppEvent::Refusal {
            turn: 1,
            text: m.into(),
        };
        let submit = |arguments: serde_json::Value| AppEvent::ToolCall {
            call_id: "x".into(),
            name: "submit_result".into(),
            arguments,
        };
        let valid = |summary: &str| submit(serde_json::json!({ "summary": summary }));
        let turn = AppEvent::TurnStarted { turn: 2 };
        let cases: Vec<Vec<AppEvent>> = vec![
            vec![],
            vec![turn.clone()],
            vec![done("first"), turn.clone(), done("second"), turn.clone()],
            vec![done("answer"), refusal("no")],
            vec![valid("early"), done("one"), valid("late"), turn.clone()],
            // The last report is invalid: the one before it stands.
            vec![
                valid("kept"),
                done("d"),
                submit(serde_json::json!({"fields": 1})),
            ],
            vec![done("d"), valid("after the answer")],
            vec![valid("no answer")],
        ];
        for events in cases {
            let dir = logged(&events);
            for child in [false, true] {
                let mut folded = tracked("s");
                let mut q = ApprovalQueue::default();
                for (seq, event) in (1..).zip(&events) {
                    folded.absorb(&env("s", seq, event.clone()), &mut q);
                }
                let read = Ending::read(dir.path(), child).unwrap();
                assert_eq!(read.final_text, folded.summary.final_text, "{events:?}");
                // A top session has no report to read back (only sub-agents submit one).
                let result = folded.summary.result.filter(|_| child);
                assert_eq!(read.result, result, "{events:?} child {child}");
            }
        }
    }

    #[test]
    fn an_ending_read_back_is_settled_once_and_what_was_folded_since_stays() {
        let read = || Ending {
            final_text: Some("from the log".into()),
            result: Some(SubmittedResult {
                summary: "logged".into(),
                fields: Default::default(),
            }),
        };
        let mut t = Tracked {
            ending_unread: true,
            ..tracked("s")
        };
        t.summary.final_text = Some("answered since".into());
        t.settle(read());
        assert_eq!(t.summary.final_text.as_deref(), Some("answered since"));
        assert_eq!(t.summary.result.as_ref().unwrap().summary, "logged");
        assert!(!t.ending_unread);
        // Once settled, a later read changes nothing; nor does one for a session the daemon ran.
        t.summary.result = None;
        t.settle(read());
        assert_eq!(t.summary.result, None);
        let mut ran = tracked("r");
        ran.settle(read());
        assert_eq!(ran.summary.final_text, None);
    }

    #[test]
    fn recorded_statuses() {
        assert_eq!(
            recorded_status(RecordedStatus::Ended(EndStatus::Completed)),
            SessionStatus::Done
        );
        assert_eq!(
            recorded_status(RecordedStatus::Ended(EndStatus::Failed)),
            SessionStatus::Failed
        );
        assert_eq!(
            recorded_status(RecordedStatus::Running),
            SessionStatus::Interrupted
        );
    }
}

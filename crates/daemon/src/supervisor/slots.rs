//! Running slots: `[daemon] max_running` bounds the sessions doing work (a round in flight: a
//! model turn or a batch). A session waiting for a follow-up holds none, nor does one whose
//! round waits for a human to approve what it would run next (a command, a tool call, a
//! worker's request); a follow-up to the one, an answer to the other, takes a slot again, and
//! waits in the same first-come queue as a new session when none is free (listed `queued`). An
//! idle session lives `[daemon] idle_timeout`, then its intents lane is closed and it ends with
//! its last round's status (`completed`), resumable.
//!
//! The design decision to know: what would set a session to work is held back until it has a
//! slot. A session gives its slot back when its round ends (`round_complete`), and when its
//! round stops for an approval, unless a follow-up already reached it during the round (the
//! loop's inbox holds it and the next round starts at once). So a follow-up or an answer is
//! delivered to a session only while it holds a slot or waits for its first one, and the work
//! after it runs holding one. Three waits keep their slot: a connection waiting for a network
//! approval and a command's question to the human (each inside a batch in flight), and a memory
//! proposal (the session goes on meanwhile). A wait that ends without the human's answer (an
//! interrupt, a worker taking its request back) sets the session to work without asking for a
//! slot: it is counted running at once, and for that moment may be one over `max_running`.
//! A round whose model waits on its sub-agents (`wait_sub_agents`) gives its slot back too (its
//! children may need it: eight parents waiting on children queued behind them waited for good),
//! and queues for one, first come first served, when the wait ends.

use std::sync::Weak;
use std::time::Duration;

use intendant_core::bus::EventBus;
use intendant_protocol::daemon::{HostError, HostErrorCode, Sent, SessionStatus};
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg};
use intendant_protocol::socket::MAX_TASK_BYTES;

use super::{Inner, Placement, State, host_error, unknown_session};

/// Where a running session stands with respect to the slots.
#[derive(Debug)]
pub(super) enum Work {
    /// Waiting for its first slot; `waiting`: the bytes of the follow-ups that reached it
    /// meanwhile (its loop takes them, joined, when its first round ends).
    Starting { waiting: usize },
    /// Holds a slot: a round runs; `waiting`: the bytes of the follow-ups that reached it during
    /// the round (its loop takes them, joined, when the round ends).
    Working { waiting: usize },
    /// In a round that waits for a human to approve what it would run next (what it waits on
    /// is the approval queue's), holding no slot; `held`: follow-ups that reached it meanwhile.
    Asking { held: Vec<String> },
    /// In a round a human answered: the answers wait for a slot to be delivered.
    Answered {
        held: Vec<String>,
        answers: Vec<ControlMsg>,
    },
    /// Between rounds, holding no slot; `timer` ends the session once the spell lasts
    /// `[daemon] idle_timeout`, and tells this idle spell from a later one.
    Idle { timer: IdleTimer },
    /// Between rounds, its follow-ups' texts waiting for a slot.
    Queued(Vec<String>),
    /// Idle past `[daemon] idle_timeout`: its intents lane is closed and it is ending.
    Ending,
    /// In a round whose model waits on its sub-agents (`wait_sub_agents`), holding no slot: its
    /// children may need one (held, a parent waiting on children queued for a slot waited for
    /// good). `waiting` as `Working`'s: follow-ups reach its loop now, for after the round.
    Parked { waiting: usize },
    /// In such a round whose wait ended, waiting for a slot to go on.
    Rejoining { waiting: usize },
}

impl Work {
    /// The bytes of the follow-ups that reached the session and that it has not taken, as its
    /// next round takes them: joined into one message.
    fn waiting(&self) -> usize {
        match self {
            Work::Starting { waiting }
            | Work::Working { waiting }
            | Work::Parked { waiting }
            | Work::Rejoining { waiting } => *waiting,
            Work::Queued(texts)
            | Work::Asking { held: texts }
            | Work::Answered { held: texts, .. } => all_joined(texts),
            Work::Idle { .. } | Work::Ending => 0,
        }
    }
}

/// The bytes of `waiting` bytes of follow-ups with `text` joined to them, as the loop joins
/// follow-ups that arrive together (a blank line between).
fn joined(waiting: usize, text: &str) -> usize {
    match waiting {
        0 => text.len(),
        n => n + 2 + text.len(),
    }
}

/// The bytes of `texts` joined as the loop joins them.
fn all_joined(texts: &[String]) -> usize {
    texts.iter().fold(0, |n, t| joined(n, t))
}

/// The approval `msg` answers.
fn answered(msg: &ControlMsg) -> Option<u64> {
    match msg {
        ControlMsg::Approve { id }
        | ControlMsg::Deny { id }
        | ControlMsg::Skip { id }
        | ControlMsg::ApproveAll { id }
        | ControlMsg::AllowHost { id } => Some(*id),
        ControlMsg::Input { .. } | ControlMsg::FollowUp { .. } => None,
    }
}

/// Whether a round stops for an approval of `category`: a connection waits with its batch in
/// flight, and a memory proposal while the session goes on.
pub(super) fn stops_the_round(category: ActionCategory) -> bool {
    !matches!(category, ActionCategory::Network | ActionCategory::Memory)
}

/// The task that ends an idle session after `[daemon] idle_timeout` ([`idle_timer`]). Dropped
/// with its idle spell (a follow-up came, or the session ended), it is aborted: no timer outlives
/// the spell it times, however long the timeout.
#[derive(Debug)]
pub(super) struct IdleTimer(Option<tokio::task::AbortHandle>);

impl IdleTimer {
    /// A timer that is `task`, or none (no runtime to run one).
    pub(super) fn new(task: Option<tokio::task::AbortHandle>) -> IdleTimer {
        IdleTimer(task)
    }

    /// Whether this timer is the task running now.
    fn is_current_task(&self) -> bool {
        let current = tokio::task::try_id();
        self.0.as_ref().is_some_and(|t| Some(t.id()) == current)
    }

    /// The timer ran out: there is nothing left to abort.
    fn expired(mut self) {
        self.0 = None;
    }
}

impl Drop for IdleTimer {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// A follow-up or an answer to hand to a session just admitted for it, outside the
/// supervisor's lock.
pub(super) struct Delivery {
    bus: EventBus,
    msg: ControlMsg,
}

impl Delivery {
    /// Sends it (itself an event, numbered by the session's tap).
    pub(super) fn send(self) {
        self.bus.send_intent(self.msg);
    }
}

/// What became of a follow-up or an answer.
pub(super) enum Routed {
    /// The session holds or awaits a slot: send it to its bus now.
    Now(EventBus, ControlMsg),
    /// Queued for a slot; these deliveries (perhaps its own) are due now.
    Queued(Vec<Delivery>),
}

/// The follow-ups `texts`, as the loop joins those that arrive together, for `bus`.
fn follow_up(bus: &EventBus, texts: &[String]) -> Delivery {
    Delivery {
        bus: bus.clone(),
        msg: ControlMsg::FollowUp {
            text: texts.join("\n\n"),
        },
    }
}

/// The session's load as `ctl status` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Sessions holding a slot.
    pub running: u32,
    /// Sessions whose round waits for a human, holding none.
    pub asking: u32,
    /// Sessions whose round waits on their sub-agents, holding none.
    pub parked: u32,
    /// Sessions waiting for a follow-up, holding none.
    pub idle: u32,
    /// Sessions (or their follow-ups) waiting for a slot.
    pub queued: u32,
}

impl State {
    /// Admits queued sessions, first come first served, while slots are free; returns the
    /// follow-ups due to those admitted for one (the starting ones see their `Work` change).
    pub(super) fn admit(&mut self) -> Vec<Delivery> {
        let mut due = Vec::new();
        while self.running < self.settings.max_running {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let Some(entry) = self.sessions.get_mut(&id) else {
                continue;
            };
            let Some(live) = entry.live.as_mut() else {
                continue;
            };
            match std::mem::replace(&mut live.work, Work::Ending) {
                Work::Starting { waiting } | Work::Rejoining { waiting } => {
                    live.work = Work::Working { waiting };
                    self.running += 1;
                }
                Work::Queued(texts) => {
                    // One follow-up, as the loop joins those that arrive together: the round it
                    // starts takes it, so none is left for after it.
                    live.work = Work::Working { waiting: 0 };
                    self.running += 1;
                    due.push(follow_up(&live.bus, &texts));
                }
                Work::Answered { held, answers } => {
                    // The round goes on; the follow-ups held meanwhile are for after it.
                    live.work = Work::Working {
                        waiting: all_joined(&held),
                    };
                    self.running += 1;
                    due.extend(answers.into_iter().map(|msg| Delivery {
                        bus: live.bus.clone(),
                        msg,
                    }));
                    if !held.is_empty() {
                        due.push(follow_up(&live.bus, &held));
                    }
                }
                // Not waiting (a stale place in the queue): it keeps what it had.
                other @ (Work::Working { .. }
                | Work::Asking { .. }
                | Work::Idle { .. }
                | Work::Parked { .. }
                | Work::Ending) => {
                    live.work = other;
                    continue;
                }
            }
            // It holds a slot from now on: listed as working, not as waiting for one, before
            // its round's first event says so.
            let status = &mut entry.tracked.summary.status;
            if !status.is_finished() {
                *status = SessionStatus::Running;
            }
        }
        due
    }

    /// The round of session `id` ended: it gives its slot back unless a follow-up reached it
    /// during the round; if it goes idle, `arm` makes the timer of the idle spell. A round
    /// ends working (the loop resolves its approvals before its round ends), but one that ended
    /// still waiting holds no slot to give back: its held follow-ups queue for one.
    pub(super) fn round_complete(&mut self, id: &str, arm: impl FnOnce() -> IdleTimer) {
        let Some(entry) = self.sessions.get_mut(id) else {
            return;
        };
        let Some(live) = entry.live.as_mut() else {
            return;
        };
        match std::mem::replace(&mut live.work, Work::Ending) {
            Work::Working { waiting: 0 } => {
                self.running = self.running.saturating_sub(1);
                live.work = Work::Idle { timer: arm() };
            }
            // The next round takes them.
            Work::Working { .. } => live.work = Work::Working { waiting: 0 },
            // A wait on sub-agents cut short (an interrupt): follow-ups already in its loop
            // start the next round at once, counted running from now.
            Work::Parked { waiting } | Work::Rejoining { waiting } => {
                self.queue.retain(|q| q != id);
                if waiting == 0 {
                    live.work = Work::Idle { timer: arm() };
                } else {
                    live.work = Work::Working { waiting: 0 };
                    self.running += 1;
                    if !entry.tracked.summary.status.is_finished() {
                        entry.tracked.summary.status = SessionStatus::Running;
                    }
                }
            }
            Work::Asking { held } | Work::Answered { held, .. } => {
                self.queue.retain(|q| q != id);
                if held.is_empty() {
                    live.work = Work::Idle { timer: arm() };
                } else {
                    live.work = Work::Queued(held);
                    entry.tracked.summary.status = SessionStatus::Queued;
                    self.queue.push_back(id.to_owned());
                }
            }
            other
            @ (Work::Starting { .. } | Work::Idle { .. } | Work::Queued(_) | Work::Ending) => {
                live.work = other;
            }
        }
    }

    /// Follows a round's waits for approvals as session `id`'s `event` asks for or resolves
    /// one (already folded into the approval queue): a working session that stops for one
    /// gives its slot back; one whose waits ended without the human's answer (an interrupt, a
    /// worker taking its request back) is working again and counted so, its held follow-ups
    /// delivered. When the slots changed, the deliveries due now.
    pub(super) fn follow_waits(&mut self, id: &str, event: &AppEvent) -> Option<Vec<Delivery>> {
        let resolved = match event {
            AppEvent::ApprovalRequired { category, .. } if stops_the_round(*category) => None,
            AppEvent::ApprovalResolved { id: approval, .. } => Some(*approval),
            _ => return None,
        };
        let waiting = self.approvals.any_pending(id, stops_the_round);
        let live = self.sessions.get_mut(id).and_then(|e| e.live.as_mut())?;
        let Some(approval) = resolved else {
            // A follow-up already in the loop's inbox starts the next round at once: the
            // session keeps its slot for it.
            if !matches!(live.work, Work::Working { waiting: 0 }) {
                return None;
            }
            live.work = Work::Asking { held: Vec::new() };
            self.running = self.running.saturating_sub(1);
            return Some(self.admit());
        };
        let held = match &mut live.work {
            Work::Asking { held } if !waiting => std::mem::take(held),
            Work::Answered { held, answers } => {
                // An answer still held for this approval is stale: the loop is past it.
                answers.retain(|msg| answered(msg) != Some(approval));
                if waiting || !answers.is_empty() {
                    return None;
                }
                std::mem::take(held)
            }
            _ => return None,
        };
        live.work = Work::Working {
            waiting: all_joined(&held),
        };
        let due = if held.is_empty() {
            Vec::new()
        } else {
            vec![follow_up(&live.bus, &held)]
        };
        self.running += 1;
        self.queue.retain(|q| q != id);
        if let Some(entry) = self.sessions.get_mut(id)
            && !entry.tracked.summary.status.is_finished()
        {
            entry.tracked.summary.status = SessionStatus::Running;
        }
        Some(due)
    }

    /// Routes a human's answer `msg` (checked as pending; to an approval of `category`, or a
    /// question) to session `id`: to it now, unless its round waits for this approval holding
    /// no slot; then into the queue for one (follow-ups sent meanwhile are held for after the
    /// round). Where it went beside.
    pub(super) fn route_answer(
        &mut self,
        id: &str,
        msg: ControlMsg,
        category: Option<ActionCategory>,
    ) -> Result<(Routed, Sent), HostError> {
        let entry = self
            .sessions
            .get_mut(id)
            .ok_or_else(|| unknown_session(id))?;
        let Some(live) = entry.live.as_mut() else {
            return Err(unknown_session(id));
        };
        if !category.is_some_and(stops_the_round) {
            return Ok((Routed::Now(live.bus.clone(), msg), Sent::Now));
        }
        match std::mem::replace(&mut live.work, Work::Ending) {
            Work::Answered { held, mut answers } => {
                answers.push(msg);
                live.work = Work::Answered { held, answers };
                return Ok((Routed::Queued(Vec::new()), Sent::Queued));
            }
            Work::Asking { held } => {
                live.work = Work::Answered {
                    held,
                    answers: vec![msg],
                };
            }
            other => {
                live.work = other;
                return Ok((Routed::Now(live.bus.clone(), msg), Sent::Now));
            }
        }
        entry.tracked.summary.status = SessionStatus::Queued;
        self.queue.push_back(id.to_owned());
        let due = self.admit();
        Ok((Routed::Queued(due), self.sent_for_a_slot(id)))
    }

    /// Where an intent that queued session `id` for a slot went, once the slots free now
    /// were handed out: queued still, or admitted at once.
    fn sent_for_a_slot(&self, id: &str) -> Sent {
        let queued = self
            .sessions
            .get(id)
            .is_some_and(|e| e.tracked.summary.status == SessionStatus::Queued);
        if queued { Sent::Queued } else { Sent::Now }
    }

    /// Session `id`'s task ended: its slot (if it held one) and its place in the queue are
    /// freed.
    pub(super) fn release(&mut self, id: &str) {
        self.queue.retain(|q| q != id);
        let holds = self
            .sessions
            .get(id)
            .and_then(|e| e.live.as_ref())
            .is_some_and(|live| matches!(live.work, Work::Working { .. }));
        if holds {
            self.running = self.running.saturating_sub(1);
        }
    }

    /// Session `id`'s round waits on its sub-agents: a slot it holds is given to the queue
    /// meanwhile. The follow-ups due to those admitted for it; `None` when it held none.
    pub(super) fn set_aside(&mut self, id: &str) -> Option<Vec<Delivery>> {
        let live = self.sessions.get_mut(id).and_then(|e| e.live.as_mut())?;
        let Work::Working { waiting } = live.work else {
            return None;
        };
        live.work = Work::Parked { waiting };
        self.running = self.running.saturating_sub(1);
        Some(self.admit())
    }

    /// Session `id`'s wait on its sub-agents ended: it queues for a slot to go on (listed
    /// `queued` until it has one). The follow-ups due to those admitted now, itself perhaps.
    pub(super) fn rejoin(&mut self, id: &str) -> Vec<Delivery> {
        let Some(entry) = self.sessions.get_mut(id) else {
            return Vec::new();
        };
        let Some(live) = entry.live.as_mut() else {
            return Vec::new();
        };
        let Work::Parked { waiting } = live.work else {
            return Vec::new();
        };
        live.work = Work::Rejoining { waiting };
        if !entry.tracked.summary.status.is_finished() {
            entry.tracked.summary.status = SessionStatus::Queued;
        }
        self.queue.push_back(id.to_owned());
        self.admit()
    }

    /// Whether session `id` still waits for a slot to go on after a wait on its sub-agents.
    pub(super) fn rejoining(&self, id: &str) -> bool {
        self.sessions
            .get(id)
            .and_then(|e| e.live.as_ref())
            .is_some_and(|live| matches!(live.work, Work::Rejoining { .. }))
    }

    /// Whether session `id` still waits for its first slot.
    pub(super) fn starting(&self, id: &str) -> bool {
        self.sessions
            .get(id)
            .and_then(|e| e.live.as_ref())
            .is_some_and(|live| matches!(live.work, Work::Starting { .. }))
    }

    /// Routes a follow-up to session `id` (placed `placement`): to it now while it holds or
    /// awaits a slot, into the queue while it is idle. One held (it waits for a slot, or for the
    /// round's approvals to be answered) is recorded so ([`AppEvent::FollowUpHeld`]), before it
    /// is sent: a daemon that stops meanwhile leaves it for a resume. Where it went beside.
    pub(super) fn route_follow_up(
        &mut self,
        id: &str,
        text: String,
        placement: Placement,
    ) -> Result<(Routed, Sent), HostError> {
        let entry = self
            .sessions
            .get_mut(id)
            .ok_or_else(|| unknown_session(id))?;
        let ended = || {
            host_error(
                HostErrorCode::SessionFinished,
                format!(
                    "session {id} has ended; resume it to go on: `intendant ctl start --resume \
                     {id} \"...\"`"
                ),
            )
        };
        if entry.rewinding {
            return Err(host_error(
                HostErrorCode::InvalidRequest,
                format!(
                    "session {id} is being rewound; send the follow-up once the rewind is done"
                ),
            ));
        }
        if entry.running_elsewhere() {
            return Err(entry.not_running_here(id));
        }
        // An approval (or a question, which keeps the slot) waits for an answer.
        let for_a_human = entry.tracked.status(&self.approvals) == SessionStatus::WaitingForHuman;
        let live = match entry.live.as_mut() {
            Some(live) if !entry.tracked.summary.status.is_finished() => live,
            Some(_) | None => return Err(ended()),
        };
        let waiting = live.work.waiting();
        if joined(waiting, &text) > MAX_TASK_BYTES {
            return Err(host_error(
                HostErrorCode::Busy,
                format!(
                    "session {id} has {waiting} bytes of follow-ups it has not taken yet; this \
                     one's {} would bring them past the {MAX_TASK_BYTES} a round takes (they \
                     are joined into one message): send it once its next round has begun",
                    text.len()
                ),
            ));
        }
        let sent = match live.work {
            Work::Queued(_) => Sent::Queued,
            Work::Starting { .. } | Work::Answered { .. } => Sent::AfterQueuedRound,
            Work::Asking { .. } => Sent::AfterAnswer,
            _ if for_a_human => Sent::AfterAnswer,
            _ => Sent::AfterRound,
        };
        match &mut live.work {
            Work::Starting { waiting }
            | Work::Working { waiting }
            | Work::Parked { waiting }
            | Work::Rejoining { waiting } => {
                *waiting = joined(*waiting, &text);
                let routed = Routed::Now(live.bus.clone(), ControlMsg::FollowUp { text });
                return Ok((routed, sent));
            }
            Work::Queued(texts)
            | Work::Asking { held: texts }
            | Work::Answered { held: texts, .. } => {
                texts.push(text.clone());
                self.number(id, &AppEvent::FollowUpHeld { text }, placement);
                return Ok((Routed::Queued(Vec::new()), sent));
            }
            Work::Idle { .. } => live.work = Work::Queued(vec![text.clone()]),
            Work::Ending => {
                return Err(host_error(
                    HostErrorCode::SessionFinished,
                    format!(
                        "session {id} is ending: it waited for a follow-up longer than \
                         [daemon] idle_timeout; resume it to go on"
                    ),
                ));
            }
        }
        self.queue.push_back(id.to_owned());
        let due = self.admit();
        if let Some(entry) = self.sessions.get_mut(id)
            && entry
                .live
                .as_ref()
                .is_some_and(|live| matches!(live.work, Work::Queued(_)))
        {
            entry.tracked.summary.status = SessionStatus::Queued;
            self.number(id, &AppEvent::FollowUpHeld { text }, placement);
        }
        Ok((Routed::Queued(due), self.sent_for_a_slot(id)))
    }

    /// How many sessions run, idle and queue now.
    pub(super) fn load(&self) -> Load {
        let mut load = Load::default();
        for live in self.sessions.values().filter_map(|e| e.live.as_ref()) {
            match live.work {
                Work::Working { .. } => load.running += 1,
                Work::Asking { .. } => load.asking += 1,
                Work::Parked { .. } => load.parked += 1,
                Work::Idle { .. } | Work::Ending => load.idle += 1,
                Work::Starting { .. }
                | Work::Queued(_)
                | Work::Answered { .. }
                | Work::Rejoining { .. } => {
                    load.queued += 1;
                }
            }
        }
        load
    }
}

/// Ends session `id` if it is still in the idle spell this task times after `after` (a later
/// spell has a timer of its own; this one was aborted with its spell, or lost the race to it):
/// a warning says why, then its intents lane closes and it ends with its last round's status.
pub(super) async fn idle_timer(inner: Weak<Inner>, id: String, after: Duration) {
    tokio::time::sleep(after).await;
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let bus = {
        let mut state = inner.lock();
        let Some(live) = state.sessions.get_mut(&id).and_then(|e| e.live.as_mut()) else {
            return;
        };
        match std::mem::replace(&mut live.work, Work::Ending) {
            Work::Idle { timer } if timer.is_current_task() => timer.expired(),
            other => {
                live.work = other;
                return;
            }
        }
        live.bus.clone()
    };
    bus.emit(AppEvent::Warning {
        message: format!(
            "no follow-up for {}s ([daemon] idle_timeout): the session ends; resume it to go on",
            after.as_secs()
        ),
    });
    bus.close_intents();
}

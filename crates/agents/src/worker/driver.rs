//! The session loop every worker shares: a round per task or follow-up, each one protocol turn
//! that ends only when the protocol says so, with the worker's approval requests, interrupts and
//! the wedge probe handled around it.
//!
//! A protocol (codex app-server, claude stream-json, ACP) implements [`Protocol`]: how a turn is
//! started, what one message means, how an approval answer and an interrupt are sent. The loop
//! does the rest the same way for all of them.
//!
//! Interrupt and stop come through the session's one [`SessionCancel`]: each round is a turn of
//! it. An interrupt sends the protocol's interrupt, gives up a pending approval (answered `deny`
//! to the worker), and the round ends `interrupted` when the protocol says the turn stopped; the
//! session stays open for a follow-up. A stop does the same, waits at most one grace period for
//! the turn to stop, and ends the session `interrupted`; the worker is then ended by the child
//! supervisor (stdin closed, TERM, KILL after the grace period).

use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use intendant_core::approval::{ApprovalAnswer, ExternalAction};
use intendant_core::bus::EventBus;
use intendant_core::cancel::SessionCancel;
use intendant_core::checkpoint::TurnRecorder;
use intendant_core::child::CancelToken;
use intendant_core::containment::{LimitHits, Placement};
use intendant_core::intents::IntentInbox;
use intendant_core::outcome::SessionOutcome;
use intendant_core::session::WorkerContext;
use intendant_core::session_log::SessionLog;
use intendant_protocol::events::{AppEvent, EndStatus, RoundEnd};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::WorkerError;
use super::approvals::ApprovalQueue;
use super::events::WorkerEvents;
use super::framing::FrameError;
use super::process::WorkerProcess;

/// Default silence of an open turn before the wedge warning.
pub const DEFAULT_WEDGE_AFTER: Duration = Duration::from_secs(180);

/// Default time a worker is kept while its session waits for a follow-up: past it the worker
/// is let go (a waiting codex, claude or kimi holds some 80-370 MiB, `idle_workers`), and the
/// next follow-up starts it again on its conversation.
pub const DEFAULT_IDLE_EXIT: Duration = Duration::from_secs(300);

/// How the protocol ended a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// The turn finished.
    Completed,
    /// The turn stopped after an interrupt (ours, or a `cancel` approval answer).
    Interrupted,
    /// The worker says the turn failed, and why.
    Failed(String),
}

/// What a protocol handler may do while handling a message: emit events, ask the human.
pub struct Turn<'a, T> {
    /// The session's events.
    pub events: &'a mut WorkerEvents,
    approvals: &'a mut ApprovalQueue<T>,
}

impl<T: Send + 'static> Turn<'_, T> {
    /// Queues an approval question; its answer comes to [`Protocol::answer`] with `ticket`.
    pub fn ask(&mut self, ticket: T, action: ExternalAction) {
        self.approvals.ask(ticket, action);
    }

    /// The worker took back the questions whose ticket `is` matches: they leave the approval
    /// queue (resolved on the bus) and no answer is sent for them.
    pub fn withdraw(&mut self, is: impl Fn(&T) -> bool) {
        self.approvals.withdraw(is);
    }
}

/// One worker protocol, as the session loop drives it.
#[async_trait]
pub trait Protocol: Send {
    /// What an approval answer is sent back for (the worker's request id).
    type Ticket: Send + 'static;
    /// One message from the worker.
    type Message: Send + 'static;

    /// Sends the round's text and opens a turn.
    async fn start_turn(
        &mut self,
        text: &str,
        turn: &mut Turn<'_, Self::Ticket>,
    ) -> Result<(), WorkerError>;

    /// Handles one message (during a turn or between turns); `Some` when it ends the open turn.
    async fn on_message(
        &mut self,
        message: Self::Message,
        turn: &mut Turn<'_, Self::Ticket>,
    ) -> Result<Option<TurnEnd>, WorkerError>;

    /// Sends the human's answer to one approval request.
    async fn answer(
        &mut self,
        ticket: Self::Ticket,
        answer: ApprovalAnswer,
        turn: &mut Turn<'_, Self::Ticket>,
    ) -> Result<(), WorkerError>;

    /// Asks the worker to stop the open turn; the turn still ends only when the protocol says
    /// so ([`TurnEnd::Interrupted`]).
    async fn interrupt(&mut self, turn: &mut Turn<'_, Self::Ticket>) -> Result<(), WorkerError>;
}

/// A started worker, ready for the session loop.
pub struct Opened<P: Protocol> {
    /// The protocol the loop drives.
    pub protocol: P,
    /// The worker's messages; closed when its stdout ends.
    pub messages: mpsc::Receiver<Result<P::Message, FrameError>>,
    /// The worker's own conversation id when the handshake learned it (recorded at once, so a
    /// session that dies later still resumes it); `None` when the protocol reports it later.
    pub conversation: Option<String>,
    /// Whether a later start of the worker can take its conversation up again (an ACP agent
    /// that offers no `loadSession` cannot): only then is an idle worker let go.
    pub resumable: bool,
}

/// A worker started and opened.
pub struct Started<P: Protocol> {
    /// Its handshake's outcome.
    pub opened: Opened<P>,
    /// Its process.
    pub process: WorkerProcess,
}

/// What lets a session loop start its worker again, whatever the worker's protocol.
pub trait Relaunch<P: Protocol>: Send + Sync {
    /// The worker started again on its conversation `resume`.
    fn again<'a>(&'a self, resume: &'a str) -> BoxFuture<'a, Result<Started<P>, WorkerError>>;
}

/// A worker's `[agent.<name>]` timing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    /// Seconds an open turn may stay silent before a warning (`None`: the default).
    pub wedge_after_secs: Option<u64>,
    /// Seconds the worker is kept while its session waits for a follow-up (`None`: the
    /// default; 0: kept as long as the session).
    pub idle_exit_secs: Option<u64>,
    /// Seconds the worker may take to finish its handshake (`None`: the default).
    pub handshake_timeout_secs: Option<u64>,
}

impl Timing {
    /// The timing `config` sets.
    pub fn of(config: &crate::config::AgentConfig) -> Timing {
        Timing {
            wedge_after_secs: config.wedge_after_secs,
            idle_exit_secs: config.idle_exit_secs,
            handshake_timeout_secs: config.handshake_timeout_secs,
        }
    }
}

/// Settings of the loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopOptions {
    /// Silence of an open turn (no protocol traffic, no approval pending) before a warning.
    pub wedge_after: Duration,
    /// Whether a finished round waits for a follow-up (an interactive session).
    pub wait_for_follow_ups: bool,
    /// How long the worker is kept while the session waits for a follow-up (`None`: as long
    /// as the session).
    pub idle_exit: Option<Duration>,
}

/// A started worker and everything the loop needs to drive it.
pub struct WorkerSession<P: Protocol> {
    /// The protocol.
    pub protocol: P,
    /// The worker's messages; closed when its stdout ends.
    pub messages: mpsc::Receiver<Result<P::Message, FrameError>>,
    /// The worker process.
    pub process: WorkerProcess,
    /// The session's events.
    pub events: WorkerEvents,
    /// The session's approval gate and inbox.
    pub approvals: ApprovalQueue<P::Ticket>,
    /// Settings.
    pub options: LoopOptions,
    /// The session's interrupt and stop (each round is one of its turns).
    pub cancel: SessionCancel,
    /// The project's checkpoints before and after each round (`None`: not checkpointed), and
    /// the log that numbers the session's turns.
    pub checkpoints: Option<(TurnRecorder, SessionLog)>,
    /// The session's groups and their limit counters as the last round's end read them: a bound
    /// the worker's tools ran into is told the human after the round (`None`: no groups).
    pub limits: Option<(Placement, LimitHits)>,
    /// The session log (where the worker's conversation id is recorded).
    pub log: SessionLog,
    /// How to start the worker again once it was let go.
    pub relaunch: Box<dyn Relaunch<P>>,
    /// Whether the worker was let go while the session waited: its process has ended, and the
    /// next follow-up starts it again.
    pub parked: bool,
}

/// Silence detection while a turn is open: warns once per silence, never ends anything.
struct WedgeProbe {
    after: Duration,
    deadline: Instant,
    warned: bool,
}

impl WedgeProbe {
    fn new(after: Duration) -> WedgeProbe {
        WedgeProbe {
            after,
            deadline: Instant::now() + after,
            warned: false,
        }
    }

    fn touch(&mut self) {
        self.deadline = Instant::now() + self.after;
        self.warned = false;
    }

    async fn silent(&mut self) {
        if self.warned {
            return std::future::pending().await;
        }
        tokio::time::sleep_until(self.deadline).await;
        self.warned = true;
    }
}

/// How one round ended, for `round_complete` and the session outcome.
struct RoundResult {
    end: RoundEnd,
    reason: String,
}

/// The session a worker serves: what assembly decided ([`WorkerContext`]), its bus and inbox.
pub struct Served {
    /// The session's context (approval gate, log, interrupt and stop).
    pub ctx: WorkerContext,
    /// The session's events.
    pub bus: EventBus,
    /// The session's intents.
    pub inbox: IntentInbox,
}

impl<P: Protocol> WorkerSession<P> {
    /// The session of a started worker (`protocol` over `process` and its `messages`) serving
    /// `served`: its approvals through the session's gate, its events on the bus (usage priced
    /// for `model`), follow-ups when a human is there, the wedge warning after
    /// `wedge_after_secs` ([`DEFAULT_WEDGE_AFTER`] when unset), the worker let go past
    /// `idle_exit_secs` of waiting and started again through `relaunch`.
    pub fn new(
        started: Started<P>,
        relaunch: Box<dyn Relaunch<P>>,
        served: Served,
        model: Option<&str>,
        timing: Timing,
    ) -> WorkerSession<P> {
        let Started { opened, process } = started;
        let Served { ctx, bus, inbox } = served;
        let log = ctx.session_log.clone();
        let checkpoints = ctx.checkpoints.map(|plan| {
            (
                TurnRecorder::new(plan, &ctx.session_id),
                ctx.session_log.clone(),
            )
        });
        let idle_exit = match timing.idle_exit_secs {
            None => Some(DEFAULT_IDLE_EXIT),
            Some(0) => None,
            Some(secs) => Some(Duration::from_secs(secs)),
        };
        WorkerSession {
            protocol: opened.protocol,
            messages: opened.messages,
            process,
            events: WorkerEvents::new(bus.clone(), model.unwrap_or("")),
            options: LoopOptions {
                wedge_after: timing
                    .wedge_after_secs
                    .map_or(DEFAULT_WEDGE_AFTER, Duration::from_secs),
                wait_for_follow_ups: ctx.approval_gate.is_interactive(),
                idle_exit: idle_exit.filter(|_| opened.resumable),
            },
            approvals: ApprovalQueue::new(&ctx.session_id, bus, ctx.approval_gate, inbox),
            cancel: ctx.cancel,
            checkpoints,
            limits: ctx.placement.map(|placement| {
                let seen = placement.limit_hits();
                (placement, seen)
            }),
            log,
            relaunch,
            parked: false,
        }
    }

    /// Runs `task` and the follow-ups to the session's end, then stops the worker.
    pub async fn run(mut self, task: String) -> Result<SessionOutcome, WorkerError> {
        let result = match self.rounds(task).await {
            // However its loss was seen (its stream's end, or an answer of ours dropped with its
            // pipes a moment before), a worker gone is reported here as its exit, with its last
            // stderr lines.
            Err(WorkerError::Closed) => Err(self.process.exit_error().await),
            other => other,
        };
        drop(self.process.stop().await);
        result
    }

    async fn rounds(&mut self, task: String) -> Result<SessionOutcome, WorkerError> {
        let mut round = 0u32;
        let mut next = Some(task);
        let mut outcome = SessionOutcome {
            status: EndStatus::Completed,
            reason: String::new(),
            turns: 0,
        };
        while let Some(text) = next.take() {
            round += 1;
            let result = self.round(&text).await?;
            if let Some((recorder, _)) = &self.checkpoints {
                recorder.rest();
            }
            self.tell_limits_hit();
            let (total, cost_usd) = self.events.totals();
            self.events.emit(AppEvent::RoundComplete {
                round,
                turns: self.events.turns(),
                reason: result.end,
                input_tokens: total.input_tokens,
                output_tokens: total.output_tokens,
                cost_usd,
            });
            outcome = SessionOutcome {
                status: result.end.session_status(),
                reason: result.reason,
                turns: self.events.turns(),
            };
            // After an interrupt the session waits for what the human wants instead.
            let can_continue = match result.end {
                RoundEnd::Done | RoundEnd::Refused => true,
                RoundEnd::Interrupted => !self.cancel.is_stopped(),
                RoundEnd::BudgetExhausted | RoundEnd::TurnCap | RoundEnd::Denied => false,
            };
            if can_continue && self.options.wait_for_follow_ups {
                next = self.next_follow_up().await?;
                if next.is_none() && self.cancel.is_stopped() {
                    outcome.status = EndStatus::Interrupted;
                    outcome.reason = self.cancel.interrupted_reason();
                }
            }
        }
        Ok(outcome)
    }

    /// Tells the human which of the session's bounds the worker's tools ran into since the
    /// last round's end (a refused fork, a process killed for memory), as a batch's end tells
    /// a native session's model; the worker's model sees only what its tool printed.
    fn tell_limits_hit(&mut self) {
        let Some((placement, seen)) = &mut self.limits else {
            return;
        };
        let now = placement.limit_hits();
        for message in placement.limit_notes(seen, &now) {
            self.events.emit(AppEvent::Warning { message });
        }
        *seen = now;
    }

    async fn round(&mut self, text: &str) -> Result<RoundResult, WorkerError> {
        let cancel_turn = self.cancel.begin_turn();
        let token = cancel_turn.token().clone();
        if token.is_cancelled() {
            // Stopped before the round could start: nothing was sent.
            return Ok(RoundResult {
                end: RoundEnd::Interrupted,
                reason: self.cancel.interrupted_reason(),
            });
        }
        self.events.turn_started();
        // The CLI changes files itself, seen only after the fact: the round is the turn.
        self.checkpoint(true).await;
        let mut turn = Turn {
            events: &mut self.events,
            approvals: &mut self.approvals,
        };
        let driven = match self.protocol.start_turn(text, &mut turn).await {
            Ok(()) => self.drive_turn(&token).await,
            Err(e) => Err(e),
        };
        self.checkpoint(false).await;
        let (end, denied) = driven?;
        drop(cancel_turn);
        self.finish_round(end, denied).await
    }

    /// Checkpoints the project before (or after) the open round; a failure is a warning.
    async fn checkpoint(&mut self, before: bool) {
        let Some((recorder, log)) = &mut self.checkpoints else {
            return;
        };
        let turn = log.session_turn(self.events.turns());
        let taken = if before {
            recorder.before(turn, None).await
        } else {
            recorder.after().await
        };
        for notice in recorder.take_notices() {
            self.events.warning(notice);
        }
        if let Err(e) = taken {
            self.events.warning(TurnRecorder::failure(turn, &e));
        }
    }

    /// Drives the open turn until the protocol ends it (or a stopped worker overstays its grace
    /// period): messages, approval answers, the interrupt, the wedge probe. Returns how it ended
    /// and whether the human denied something in it.
    async fn drive_turn(&mut self, token: &CancelToken) -> Result<(TurnEnd, bool), WorkerError> {
        let mut wedge = WedgeProbe::new(self.options.wedge_after);
        let mut denied = false;
        let mut interrupted = false;
        // Once stopped, how long the worker has to stop its turn before it is ended anyway.
        let mut stop_deadline: Option<Instant> = None;
        let stopped = self.cancel.clone();
        let end = loop {
            let quiet = !self.approvals.busy();
            let deadline = async {
                match stop_deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            // Biased: an interrupt reaches the worker before the answer it gives up.
            tokio::select! {
                biased;
                () = token.cancelled(), if !interrupted => {
                    interrupted = true;
                    let mut turn = Turn {
                        events: &mut self.events,
                        approvals: &mut self.approvals,
                    };
                    self.protocol.interrupt(&mut turn).await?;
                }
                () = stopped.stopped(), if stop_deadline.is_none() => {
                    stop_deadline = Some(Instant::now() + self.process.grace());
                }
                () = deadline => {
                    self.events.warning(format!(
                        "{} did not stop its turn within {} s of the stop: ending it",
                        self.process.name(),
                        self.process.grace().as_secs()
                    ));
                    break TurnEnd::Interrupted;
                }
                message = self.messages.recv() => {
                    wedge.touch();
                    let message = match message {
                        Some(Ok(m)) => m,
                        Some(Err(e)) => return Err(WorkerError::Frame(e)),
                        // A worker that exits on its way out of a stopped session is stopped.
                        None if stopped.is_stopped() => break TurnEnd::Interrupted,
                        None => return Err(WorkerError::Closed),
                    };
                    let mut turn = Turn {
                        events: &mut self.events,
                        approvals: &mut self.approvals,
                    };
                    if let Some(end) = self.protocol.on_message(message, &mut turn).await? {
                        break end;
                    }
                }
                (ticket, answer) = self.approvals.next_answer(token) => {
                    wedge.touch();
                    let given_up = token.is_cancelled();
                    // A question given up by the interrupt is no denial of the human's.
                    denied |= answer == ApprovalAnswer::Deny && !given_up;
                    let mut turn = Turn {
                        events: &mut self.events,
                        approvals: &mut self.approvals,
                    };
                    // The interrupt may have landed while the question was being resolved:
                    // it still reaches the worker first.
                    if given_up && !interrupted {
                        interrupted = true;
                        self.protocol.interrupt(&mut turn).await?;
                    }
                    self.protocol.answer(ticket, answer, &mut turn).await?;
                }
                () = wedge.silent(), if quiet && !interrupted => {
                    self.events.warning(format!(
                        "{} has sent nothing for {} s while its turn is open (it may be wedged); \
                         the turn goes on: interrupt it to stop it",
                        self.process.name(),
                        self.options.wedge_after.as_secs()
                    ));
                }
            }
        };
        Ok((end, denied))
    }

    /// Settles what is left of the turn and says how the round ended.
    async fn finish_round(
        &mut self,
        end: TurnEnd,
        denied: bool,
    ) -> Result<RoundResult, WorkerError> {
        // Questions still open belong to a turn that is over.
        let settled = self.approvals.settle().await.is_some();
        if !settled {
            return Err(WorkerError::Protocol(
                "the approval gate was lost with an open question".to_owned(),
            ));
        }
        if denied {
            let reason = self
                .approvals
                .last_denial()
                .map_or_else(|| "denied".to_owned(), |d| d.reason());
            return Ok(RoundResult {
                end: RoundEnd::Denied,
                reason,
            });
        }
        match end {
            TurnEnd::Completed => {
                let message = match self.events.last_message().trim() {
                    "" => "finished".to_owned(),
                    _ => self.events.last_message().to_owned(),
                };
                self.events.emit(AppEvent::Done {
                    message: message.clone(),
                });
                Ok(RoundResult {
                    end: RoundEnd::Done,
                    reason: message,
                })
            }
            TurnEnd::Interrupted => Ok(RoundResult {
                end: RoundEnd::Interrupted,
                reason: self.cancel.interrupted_reason(),
            }),
            TurnEnd::Failed(message) => Err(WorkerError::TurnFailed(message)),
        }
    }

    /// The next follow-up (buffered ones first, plain input counts), handling the worker's
    /// messages while waiting; `None` once the input closes or the session is stopped. A
    /// worker kept idle past [`LoopOptions::idle_exit`] is let go, and started again on its
    /// conversation when the follow-up comes.
    async fn next_follow_up(&mut self) -> Result<Option<String>, WorkerError> {
        let text = self.wait_for_follow_up().await?;
        if text.is_some() && self.parked {
            match self.start_again().await {
                Ok(()) => {}
                // Stopped while it started: the session ends as a stop ends it.
                Err(WorkerError::Stopped) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(text)
    }

    /// Starts the worker let go again, on its recorded conversation.
    async fn start_again(&mut self) -> Result<(), WorkerError> {
        let Some(conversation) = self.log.meta().agent_thread else {
            return Err(WorkerError::Protocol(format!(
                "{} was let go while the session waited, and cannot be started again",
                self.process.name()
            )));
        };
        let started = self
            .relaunch
            .again(&conversation)
            .await
            .map_err(|e| match e {
                WorkerError::Stopped => e,
                e => WorkerError::Spawn(format!(
                    "{} was let go while the session waited and could not be started again on its \
                 conversation: {e}",
                    self.process.name()
                )),
            })?;
        self.protocol = started.opened.protocol;
        self.messages = started.opened.messages;
        self.process = started.process;
        self.parked = false;
        Ok(())
    }

    /// When a waiting worker is let go: after [`LoopOptions::idle_exit`] of waiting, where it
    /// can be started again (its conversation recorded); never for one let go.
    fn idle_deadline(&self) -> Option<Instant> {
        let after = self.options.idle_exit?;
        (!self.parked && self.log.meta().agent_thread.is_some()).then(|| Instant::now() + after)
    }

    async fn wait_for_follow_up(&mut self) -> Result<Option<String>, WorkerError> {
        let stopped = self.cancel.clone();
        let mut deadline = self.idle_deadline();
        loop {
            if stopped.is_stopped() {
                return Ok(None);
            }
            let Some((_, inbox)) = self.approvals.settle().await else {
                return Ok(None);
            };
            let idle = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                text = inbox.next_follow_up() => return Ok(text),
                () = stopped.stopped() => return Ok(None),
                () = idle => {
                    // Let go: its process ended, what it says no more read. Only a worker whose
                    // conversation is recorded, so it can be taken up again.
                    drop(self.process.stop().await);
                    self.parked = true;
                    deadline = None;
                }
                message = self.messages.recv(), if !self.parked => {
                    let message = match message {
                        Some(Ok(m)) => m,
                        Some(Err(e)) => return Err(WorkerError::Frame(e)),
                        None if stopped.is_stopped() => return Ok(None),
                        None => return Err(WorkerError::Closed),
                    };
                    let mut turn = Turn {
                        events: &mut self.events,
                        approvals: &mut self.approvals,
                    };
                    // Between turns nothing is open to end.
                    let _ = self.protocol.on_message(message, &mut turn).await?;
                }
            }
        }
    }
}

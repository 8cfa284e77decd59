//! `run_direct_mode`: the canonical agent loop. One model turn, one runtime batch, results back,
//! until the model signals done, stops calling tools, refuses, or a limit is reached; then, when
//! the frontend keeps the session open, the next follow-up starts another round in the same
//! conversation.
//!
//! Tools reach the model natively or, in text mode (`[provider] tool_mode = "text"`, or after a
//! server refused tool definitions), described in the system prompt with the calls read from the
//! answer's JSON (`tools::text`); both paths share the batch, its approvals and its limits.
//! `response` reads what one answer means beyond its calls: a refusal, a truncation.
//!
//! The loop talks to the world only through the [`EventBus`] (events out, intents in through
//! the [`IntentInbox`]) and the [`RuntimeRunner`]; it never runs a command itself.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::StreamExt;
use intendant_protocol::events::{AppEvent, ContextAction, EndStatus, RoundEnd, ToolCallInfo};
use intendant_protocol::hooks::{HookEvent, HookVerdict};
use intendant_providers::{
    ChatProvider, ChatRequest, ChatResponse, ConversationItem, ProviderError, ReplyLimits,
    ResponseAccumulator, StopReason, StreamEvent, ToolCall, ToolChoice, ToolDefinition, ToolImage,
    ToolMode,
};

use crate::approval::ApprovalGate;
use crate::bus::EventBus;
use crate::cancel::SessionCancel;
use crate::child::CancelToken;
use crate::conversation::{COMPACTION_THRESHOLD, Conversation};
use crate::hooks::Hooks;
use crate::intents::IntentInbox;
use crate::mcp_client::{McpHub, McpPlan};
use crate::outcome::{SessionError, SessionOutcome};
use crate::runner::RuntimeRunner;
use crate::sandboxed::Walls;
use crate::session_log::SessionLog;
use crate::skills::SkillSet;
use crate::subagents::SubAgents;
use crate::tools::text::{TextCommands, extract_commands, text_mode_prompt};
use crate::tools::{ToolSet, parse_arguments, shared_tool_definitions};
use crate::usage::{BudgetState, UsageTracker, usage_event};

mod batch;
mod checkpoints;
mod response;

/// Safety cap on model turns per session.
pub const MAX_TURNS: u32 = 500;
/// How often the loop looks for the runtime's question file.
const QUESTION_POLL: Duration = Duration::from_millis(20);
/// Restarts of a stream that failed after it began.
pub const STREAM_RESTARTS: u32 = 3;
/// Times `stop` hooks may send one round on before it ends anyway.
pub const MAX_STOP_CONTINUATIONS: u32 = 3;

/// Everything the loop needs, fixed for the session.
pub struct LoopConfig {
    /// Session id (events, prompt-cache key).
    pub session_id: String,
    /// The model API.
    pub provider: Arc<dyn ChatProvider>,
    /// Model name.
    pub model: String,
    /// System prompt.
    pub system_prompt: String,
    /// The runtime spawner.
    pub runner: RuntimeRunner,
    /// Context window in tokens.
    pub context_window: u64,
    /// Session token budget (input + output), if any.
    pub budget_tokens: Option<u64>,
    /// Turn cap.
    pub max_turns: u32,
    /// Output token cap per response.
    pub max_output_tokens: Option<u32>,
    /// Byte caps on one reply, enforced while it streams (`[limits]` in `intendant.toml`).
    pub reply_limits: ReplyLimits,
    /// How tools are offered to the model (`[provider] tool_mode`); a server that refuses tool
    /// definitions switches the session to [`ToolMode::Text`].
    pub tool_mode: ToolMode,
    /// Whether a human can currently answer questions (frontends clear it on input EOF).
    pub human_available: Arc<AtomicBool>,
    /// Whether to wait for a follow-up after each round.
    pub wait_for_follow_ups: bool,
    /// Pause before restarting a broken stream.
    pub stream_restart_delay: Duration,
    /// Where conversation items are recorded (turn files come from the events).
    pub session_log: Option<SessionLog>,
    /// Reviews every batch before dispatch.
    pub approval_gate: ApprovalGate,
    /// Names the key in use (`OPENAI_API_KEY (sk-…abcd)`) for authentication errors.
    pub auth_hint: Option<String>,
    /// The session's sub-agent side (children on the daemon's host), when it has one.
    pub sub_agents: Option<SubAgents>,
    /// The skills found at the session's start (`invoke_skill` answers from them); their
    /// discovery warnings are emitted when the loop starts.
    pub skills: SkillSet,
    /// Interrupts the current turn or stops the session (signals, `ctl interrupt`, `ctl stop`).
    pub cancel: SessionCancel,
    /// Where the project is checkpointed around every batch that can change files (`None`:
    /// `[checkpoints] enabled = false`, or no session log to number turns by).
    pub checkpoints: Option<crate::checkpoint::CheckpointPlan>,
    /// The owner's hooks (`[hooks]`, trusted): around the session, each prompt, each tool call,
    /// each stop; the approval gate holds the same ones for its reviewer.
    pub hooks: Hooks,
    /// The session's side of its egress proxy (`proxy` mode): attached to the bus when the
    /// loop starts, told what each batch runs so a `network` approval names its asker.
    pub egress: Option<Arc<crate::egress::SessionEgress>>,
    /// The MCP servers started when the loop starts (none: no MCP tools).
    pub mcp: McpPlan,
    /// The session's workflow checkpoints (`workflow_checkpoint`); `None`: the tool is not
    /// offered.
    pub workflow: Option<crate::workflow::WorkflowCheckpoints>,
    /// The session's memory tools (none: the store could not be opened; the tools are not
    /// offered): attached to the bus when the loop starts, its unanswered proposals dropped
    /// when the rounds end.
    pub memory: Option<Arc<crate::memory::SessionMemory>>,
}

/// Why one round ended, with what the session reports about it.
enum RoundStop {
    /// The model finished, with its final message.
    Done(String),
    BudgetExhausted,
    TurnCap,
    /// A command was denied, and why.
    Denied(String),
    /// The model refused (or a safety filter stopped it), with what it said.
    Refused(String),
    /// The turn was interrupted or the session stopped.
    Interrupted,
}

impl RoundStop {
    fn reason(&self) -> RoundEnd {
        match self {
            RoundStop::Done(_) => RoundEnd::Done,
            RoundStop::BudgetExhausted => RoundEnd::BudgetExhausted,
            RoundStop::TurnCap => RoundEnd::TurnCap,
            RoundStop::Denied(_) => RoundEnd::Denied,
            RoundStop::Refused(_) => RoundEnd::Refused,
            RoundStop::Interrupted => RoundEnd::Interrupted,
        }
    }
}

/// One session's run of the agent loop: its configuration, the bus, the conversation and the
/// counters it advances.
struct AgentLoop {
    cfg: LoopConfig,
    bus: EventBus,
    inbox: IntentInbox,
    conversation: Conversation,
    usage: UsageTracker,
    turn: u32,
    next_nonce: u64,
    task: String,
    /// A sub-agent that called `submit_result`: the session ends after this round.
    submitted: bool,
    /// How tools are offered now (starts as configured; may switch to text once).
    tool_mode: ToolMode,
    /// Responses in a row the output token cap cut short.
    truncated_in_a_row: u32,
    /// Text mode: the results of the current batch, sent back as one message.
    text_results: Vec<String>,
    /// The session's checkpoints, made at the first batch that can change files.
    checkpoints: Option<crate::checkpoint::TurnRecorder>,
    /// Items in `conversation.jsonl` when the current turn began (for a round's first turn,
    /// before the message that started the round: a rewind to it drops that message too).
    turn_items: Option<u64>,
    /// The session's MCP servers, started with the loop.
    mcp: Option<McpHub>,
    /// Items in `conversation.jsonl` before the current round's message, until its first turn.
    round_items: Option<u64>,
    /// The conversation cuts (rewinds) the conversation reflects.
    cuts_seen: Vec<crate::checkpoint::ConversationCut>,
}

/// Runs `task` (and any follow-ups) in `conversation`, emitting events on `bus` and taking
/// intents from `inbox`. The session's first and last events are emitted around it by
/// [`run_session`](crate::session::run_session).
pub(crate) async fn run_direct_mode(
    cfg: LoopConfig,
    conversation: Conversation,
    task: String,
    bus: EventBus,
    inbox: IntentInbox,
) -> Result<SessionOutcome, SessionError> {
    let usage = UsageTracker::new(&cfg.model, cfg.budget_tokens);
    let tool_mode = cfg.tool_mode;
    let mut cfg = cfg;
    let plan = std::mem::take(&mut cfg.mcp);
    let mcp = if plan.servers.is_empty() {
        None
    } else {
        let runner = cfg.runner.config();
        Some(
            McpHub::start(
                plan,
                Walls::of_session(runner),
                runner.cwd.clone(),
                runner.log_dir.clone(),
                bus.clone(),
            )
            .await,
        )
    };
    let mut state = AgentLoop {
        cfg,
        bus,
        inbox,
        conversation,
        usage,
        turn: 0,
        next_nonce: 1,
        task: task.clone(),
        submitted: false,
        tool_mode,
        truncated_in_a_row: 0,
        text_results: Vec::new(),
        checkpoints: None,
        turn_items: None,
        mcp,
        round_items: None,
        cuts_seen: Vec::new(),
    };
    state.cuts_seen = state.recorded_cuts().unwrap_or_default();
    let outcome = state.run(task).await;
    if let Some(hub) = state.mcp.take() {
        hub.shutdown().await;
    }
    outcome
}

impl AgentLoop {
    /// The session's `session_start` hooks, its rounds, then its `session_end` hooks (whatever
    /// the rounds came to).
    async fn run(&mut self, first_task: String) -> Result<SessionOutcome, SessionError> {
        if let Some(egress) = &self.cfg.egress {
            egress.attach(&self.bus);
        }
        if let Some(memory) = &self.cfg.memory {
            memory.attach(&self.bus);
        }
        for message in self.cfg.skills.warnings() {
            self.bus.emit(AppEvent::Warning {
                message: message.clone(),
            });
        }
        self.session_start_hooks().await;
        self.checkpoint_names_note().await;
        let result = self.run_rounds(first_task).await;
        if let Some(memory) = &self.cfg.memory {
            memory.close().await;
        }
        if self.cfg.hooks.has(HookEvent::SessionEnd) {
            let mut input = self
                .cfg
                .hooks
                .input(HookEvent::SessionEnd, self.cfg.approval_gate.level());
            let (status, message) = match &result {
                Ok(outcome) => (outcome.status, outcome.reason.clone()),
                Err(e) => (EndStatus::Failed, e.to_string()),
            };
            input.status = Some(status);
            input.message = Some(message);
            // The session is over: the hooks are bounded by their own timeouts only.
            let _ = self
                .cfg
                .hooks
                .run(&input, None, &self.bus, &CancelToken::new())
                .await;
        }
        result
    }

    /// Runs the `session_start` hooks; what they add for the model opens the conversation's
    /// next message.
    async fn session_start_hooks(&mut self) {
        let hooks = self.cfg.hooks.clone();
        if !hooks.has(HookEvent::SessionStart) {
            return;
        }
        let input = hooks.input(HookEvent::SessionStart, self.cfg.approval_gate.level());
        let token = self.cfg.cancel.begin_turn();
        let outcome = hooks.run(&input, None, &self.bus, token.token()).await;
        drop(token);
        for context in outcome.context {
            self.push(ConversationItem::User {
                text: format!("[from a session_start hook]\n{context}"),
            });
        }
    }

    /// Tells the model the names of the workflow checkpoints it has (a resumed session) or its
    /// parent has (a sub-agent), which its context does not show.
    async fn checkpoint_names_note(&mut self) {
        if let Some(note) = self.checkpoint_names().await {
            self.push(ConversationItem::User {
                text: format!("[workflow checkpoints]\n{note}"),
            });
        }
    }

    /// What the model is told of its workflow checkpoints (`WorkflowCheckpoints::names_note`),
    /// read on a blocking thread: a locked database waits its busy timeout there, not on the
    /// loop's runtime, which goes on serving cancels and events.
    async fn checkpoint_names(&self) -> Option<String> {
        let workflow = self.cfg.workflow.clone()?;
        tokio::task::spawn_blocking(move || workflow.names_note())
            .await
            .ok()
            .flatten()
    }

    /// `task` as the `user_prompt` hooks leave it: `Err` with the reason when one denied it
    /// (it is not sent), else the task with what they add for the model.
    async fn user_prompt_hooks(
        &self,
        task: String,
        cancel: &CancelToken,
    ) -> Result<String, String> {
        let hooks = &self.cfg.hooks;
        if !hooks.has(HookEvent::UserPrompt) {
            return Ok(task);
        }
        let mut input = hooks.input(HookEvent::UserPrompt, self.cfg.approval_gate.level());
        input.prompt = Some(task.clone());
        let outcome = hooks.run(&input, None, &self.bus, cancel).await;
        if outcome.verdict == HookVerdict::Deny {
            return Err(outcome.reason.unwrap_or_default());
        }
        let mut text = task;
        for context in outcome.context {
            text.push_str(&format!("\n\n[from a user_prompt hook]\n{context}"));
        }
        Ok(text)
    }

    /// One round, sent on (at most [`MAX_STOP_CONTINUATIONS`] times) while a `stop` hook denies
    /// that it is over: its reason is the model's next instruction.
    async fn round_with_stop_hooks(
        &mut self,
        cancel: &CancelToken,
    ) -> Result<RoundStop, SessionError> {
        let mut stop = self.run_round(cancel).await?;
        let mut continued = 0;
        while let RoundStop::Done(message) = &stop {
            if self.submitted
                || continued >= MAX_STOP_CONTINUATIONS
                || !self.cfg.hooks.has(HookEvent::Stop)
            {
                break;
            }
            let mut input = self
                .cfg
                .hooks
                .input(HookEvent::Stop, self.cfg.approval_gate.level());
            input.message = Some(message.clone());
            input.continued = Some(continued);
            let outcome = self.cfg.hooks.run(&input, None, &self.bus, cancel).await;
            if outcome.verdict != HookVerdict::Deny {
                break;
            }
            continued += 1;
            self.push(ConversationItem::User {
                text: format!(
                    "[a stop hook says the task is not done yet]\n{}",
                    outcome.reason.unwrap_or_default()
                ),
            });
            stop = self.run_round(cancel).await?;
        }
        Ok(stop)
    }

    async fn run_rounds(&mut self, first_task: String) -> Result<SessionOutcome, SessionError> {
        let mut round = 0u32;
        let mut next_task = Some(first_task);
        let mut outcome = SessionOutcome {
            status: EndStatus::Completed,
            reason: String::new(),
            turns: 0,
        };
        while let Some(task) = next_task.take() {
            round += 1;
            self.round_items = self
                .cfg
                .session_log
                .as_ref()
                .map(SessionLog::conversation_items);
            let turn = self.cfg.cancel.begin_turn();
            let stop = match self.user_prompt_hooks(task, turn.token()).await {
                Ok(text) => {
                    self.push(ConversationItem::User { text });
                    self.round_with_stop_hooks(turn.token()).await?
                }
                Err(reason) => {
                    RoundStop::Denied(format!("a user_prompt hook refused the prompt: {reason}"))
                }
            };
            drop(turn);
            let end = stop.reason();
            let status = end.session_status();
            let reason = match stop {
                RoundStop::Done(message)
                | RoundStop::Denied(message)
                | RoundStop::Refused(message) => message,
                RoundStop::BudgetExhausted => "the token budget is exhausted".to_owned(),
                RoundStop::TurnCap => {
                    format!("the {}-turn safety cap was reached", self.cfg.max_turns)
                }
                RoundStop::Interrupted => self.cfg.cancel.interrupted_reason(),
            };
            if let Some(recorder) = &self.checkpoints {
                recorder.rest();
            }
            let total = self.usage.total();
            self.bus.emit(AppEvent::RoundComplete {
                round,
                turns: self.turn,
                reason: end,
                input_tokens: total.input_tokens,
                output_tokens: total.output_tokens,
                cost_usd: self.usage.cost_usd(),
            });
            outcome = SessionOutcome {
                status,
                reason,
                turns: self.turn,
            };
            // After an interrupt the session waits for what the human wants instead.
            let can_continue = match end {
                RoundEnd::Done | RoundEnd::Refused => true,
                RoundEnd::Interrupted => !self.cfg.cancel.is_stopped(),
                RoundEnd::BudgetExhausted | RoundEnd::TurnCap | RoundEnd::Denied => false,
            };
            if can_continue && self.cfg.wait_for_follow_ups && !self.submitted {
                next_task = self.next_follow_up().await;
                if next_task.is_some() {
                    self.take_rewinds();
                }
                if next_task.is_none() && self.cfg.cancel.is_stopped() {
                    outcome.status = EndStatus::Interrupted;
                    outcome.reason = self.cfg.cancel.interrupted_reason();
                }
            }
        }
        Ok(outcome)
    }

    /// The next follow-up ([`IntentInbox::next_follow_up`]); `None` when the lane closed or the
    /// session was stopped.
    async fn next_follow_up(&mut self) -> Option<String> {
        let stopped = self.cfg.cancel.clone();
        if stopped.is_stopped() {
            return None;
        }
        tokio::select! {
            next = self.inbox.next_follow_up() => next,
            () = stopped.stopped() => None,
        }
    }

    /// The tools beyond the runtime's this session offers.
    fn tool_set(&self) -> ToolSet {
        ToolSet {
            sub_agents: self
                .cfg
                .sub_agents
                .as_ref()
                .is_some_and(SubAgents::can_spawn),
            submit_result: self
                .cfg
                .sub_agents
                .as_ref()
                .is_some_and(SubAgents::is_child),
            skills: !self.cfg.skills.is_empty(),
            workflow: self.cfg.workflow.is_some(),
            memory: self.cfg.memory.is_some(),
        }
    }

    fn push(&mut self, item: ConversationItem) {
        if let Some(log) = &self.cfg.session_log {
            // A logging failure must not kill the task; the event writer reports its own errors.
            let _ = log.append_conversation(&item);
        }
        self.conversation.push(item);
    }

    /// Model turns and their batches until the round ends; everything it waits on watches
    /// `cancel` (the round's turn token).
    async fn run_round(&mut self, cancel: &CancelToken) -> Result<RoundStop, SessionError> {
        loop {
            if cancel.is_cancelled() {
                return Ok(RoundStop::Interrupted);
            }
            if self.turn >= self.cfg.max_turns {
                return Ok(RoundStop::TurnCap);
            }
            self.turn += 1;
            self.turn_items = self.round_items.take().or_else(|| {
                self.cfg
                    .session_log
                    .as_ref()
                    .map(SessionLog::conversation_items)
            });
            self.maybe_compact().await;
            self.bus.emit(AppEvent::TurnStarted { turn: self.turn });
            // Dropping the request on a cancel drops the stream: nothing more is read.
            let response = tokio::select! {
                response = self.request_turn() => response?,
                () = cancel.cancelled() => return Ok(RoundStop::Interrupted),
            };
            for message in &response.warnings {
                self.bus.emit(AppEvent::Warning {
                    message: message.clone(),
                });
            }
            if let Some(end) = self.record_response(&response) {
                return Ok(end);
            }
            let truncation = self.truncation(&response);
            let calls = match self.tool_mode {
                ToolMode::Native => response.tool_calls.clone(),
                ToolMode::Text => match extract_commands(&response.text, self.turn) {
                    TextCommands::Calls(calls) => calls,
                    TextCommands::None => Vec::new(),
                    TextCommands::Invalid(problem) => {
                        let text = match truncation {
                            Some(note) => format!("{problem}\n\n{note}"),
                            None => problem,
                        };
                        self.push(ConversationItem::User { text });
                        continue;
                    }
                },
            };
            if calls.is_empty() {
                if let Some(end) = self.refusal(&response) {
                    return Ok(end);
                }
                if let Some(note) = truncation.filter(|_| self.may_continue_cut()) {
                    self.push(ConversationItem::User { text: note });
                    continue;
                }
                let message = if response.text.trim().is_empty() {
                    "finished".to_owned()
                } else {
                    response.text.clone()
                };
                self.bus.emit(AppEvent::Done {
                    message: message.clone(),
                });
                return Ok(RoundStop::Done(message));
            }
            // A refusal beside calls is shown; the calls still get their answers.
            let _shown = self.refusal(&response);
            let stop = self.run_tool_calls(&calls, cancel).await;
            self.flush_text_results();
            if let Some(end) = stop? {
                return Ok(end);
            }
            if let Some(note) = truncation {
                self.push(ConversationItem::User { text: note });
            }
        }
    }

    async fn maybe_compact(&mut self) {
        let window = self.cfg.context_window;
        let fraction = self
            .conversation
            .usage_fraction(&self.cfg.system_prompt, window);
        if fraction < COMPACTION_THRESHOLD {
            return;
        }
        // The names the model saved survive the cut: they are the state it must not lose.
        let names = self.checkpoint_names().await;
        let removed = self.conversation.auto_compact(&self.task, names.as_deref());
        if removed > 0 {
            self.bus.emit(AppEvent::ContextManagement {
                action: ContextAction::AutoCompact,
                detail: format!(
                    "context at {:.0}% of {window} tokens: replaced {removed} messages with a compaction marker",
                    fraction * 100.0
                ),
            });
        }
    }

    /// The tools this turn offers: the built-in ones for the session's tool set (shared), then
    /// the MCP servers' as they are now.
    fn tools(&self) -> Arc<[ToolDefinition]> {
        let builtin = shared_tool_definitions(self.tool_set());
        match &self.mcp {
            Some(hub) => builtin.iter().cloned().chain(hub.definitions()).collect(),
            None => builtin,
        }
    }

    /// This turn's request, tools offered per the tool mode.
    fn request(&self) -> ChatRequest {
        let tools = self.tools();
        let (system, tools) = match self.tool_mode {
            ToolMode::Native => (self.cfg.system_prompt.clone(), tools),
            ToolMode::Text => (
                format!("{}\n\n{}", self.cfg.system_prompt, text_mode_prompt(&tools)),
                Arc::from([]),
            ),
        };
        ChatRequest {
            model: self.cfg.model.clone(),
            system,
            items: self.conversation.items().to_vec(),
            tools,
            tool_choice: ToolChoice::Auto,
            max_output_tokens: self.cfg.max_output_tokens,
            reasoning_effort: None,
            output_schema: None,
            cache_key: Some(self.cfg.session_id.clone()),
        }
    }

    /// One model response, restarting a stream that breaks after it began; a server that
    /// refuses tool definitions switches the session to text mode and is asked again.
    async fn request_turn(&mut self) -> Result<ChatResponse, SessionError> {
        let mut request = self.request();
        let mut restarts = 0;
        loop {
            let stream = match self.cfg.provider.chat_stream(&request).await {
                Ok(stream) => Ok(stream),
                Err(e) if self.tool_mode == ToolMode::Native && e.rejects_tools() => {
                    self.tool_mode = ToolMode::Text;
                    self.bus.emit(AppEvent::Warning {
                        message: format!(
                            "the server refused tool definitions ({e}); this session continues \
                             with tools described in text (set [provider] tool_mode = \"text\" \
                             to start that way)"
                        ),
                    });
                    request = self.request();
                    continue;
                }
                Err(e) => Err(e),
            };
            let mut stream = stream.map_err(|e| self.provider_error(&e))?;
            let mut acc =
                ResponseAccumulator::with_limits(self.cfg.provider.name(), self.cfg.reply_limits);
            while let Some(event) = stream.next().await {
                acc.push(&event);
                if acc.over_limit() {
                    // Dropping the stream stops reading: the rest is never buffered.
                    break;
                }
                if let StreamEvent::TextDelta { text } = &event {
                    self.bus
                        .emit(AppEvent::ModelResponseDelta { text: text.clone() });
                }
            }
            match acc.finish() {
                Ok(response) => return Ok(response),
                Err(e) if e.is_retryable() && restarts < STREAM_RESTARTS => {
                    restarts += 1;
                    tokio::time::sleep(self.cfg.stream_restart_delay).await;
                }
                Err(e) => return Err(self.provider_error(&e)),
            }
        }
    }

    fn provider_error(&self, e: &ProviderError) -> SessionError {
        let auth = matches!(
            e,
            ProviderError::Http {
                status: 401 | 403,
                ..
            }
        );
        match (&self.cfg.auth_hint, auth) {
            (Some(hint), true) => {
                SessionError::Provider(format!("{e}\nthe API key was rejected: check {hint}"))
            }
            (Some(_) | None, _) => SessionError::Provider(e.to_string()),
        }
    }

    /// Records usage, emits the response and appends it to the conversation. Returns an end
    /// when the budget ran out.
    fn record_response(&mut self, response: &ChatResponse) -> Option<RoundStop> {
        let usage = response.usage.unwrap_or_default();
        let cost = self.usage.record(&usage);
        self.conversation
            .record_usage(usage.input_tokens, usage.output_tokens);
        self.bus.emit(usage_event(self.turn, &usage, cost));
        self.bus.emit(AppEvent::ModelResponse {
            turn: self.turn,
            text: response.text.clone(),
            reasoning: response.reasoning_text.clone(),
            tool_calls: response
                .tool_calls
                .iter()
                .map(|c| ToolCallInfo {
                    call_id: c.call_id.clone(),
                    name: c.name.clone(),
                    arguments: parse_arguments(c),
                })
                .collect(),
        });
        for item in &response.reasoning {
            self.push(ConversationItem::Reasoning(item.clone()));
        }
        // What a refused or filtered response began to say is not sent again: the providers
        // ask for the refused turn to be left out before going on (Anthropic: reset the
        // context), and the refusal itself stands in for it.
        let stopped = matches!(
            response.stop_reason,
            Some(StopReason::Refusal | StopReason::ContentFilter)
        );
        if !response.text.is_empty() && !stopped {
            self.push(ConversationItem::Assistant {
                text: response.text.clone(),
            });
        }
        if !response.refusal.is_empty() {
            self.push(ConversationItem::Refusal {
                text: response.refusal.clone(),
            });
        }
        for call in &response.tool_calls {
            self.push(ConversationItem::ToolCall(call.clone()));
        }
        match self.usage.budget_state() {
            BudgetState::Ok => None,
            BudgetState::Warn { used, budget } => {
                self.emit_budget_warning(used, budget);
                None
            }
            BudgetState::Exhausted => {
                let budget = self.usage.budget_tokens().unwrap_or(0);
                self.emit_budget_warning(self.usage.used_tokens(), budget);
                // Calls of this response get an answer so the conversation stays valid.
                for call in &response.tool_calls {
                    self.push_result(
                        call,
                        "not run: the token budget is exhausted".to_owned(),
                        true,
                        Vec::new(),
                    );
                }
                Some(RoundStop::BudgetExhausted)
            }
        }
    }

    fn emit_budget_warning(&self, used: u64, budget: u64) {
        self.bus.emit(AppEvent::BudgetWarning {
            used_tokens: used,
            budget_tokens: budget,
            fraction: if budget == 0 {
                1.0
            } else {
                used as f64 / budget as f64
            },
        });
    }

    /// Answers `call`: a tool result natively, with the `images` it returned; in text mode, a
    /// part of the batch's one message (text only: the output names the images).
    fn push_result(
        &mut self,
        call: &ToolCall,
        output: String,
        is_error: bool,
        images: Vec<ToolImage>,
    ) {
        self.bus.emit(AppEvent::AgentOutput {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: output.clone(),
        });
        match self.tool_mode {
            ToolMode::Native => self.push(ConversationItem::ToolResult {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                output,
                is_error,
                images,
            }),
            ToolMode::Text => {
                let failed = if is_error { " (failed)" } else { "" };
                self.text_results
                    .push(format!("Result of {}{failed}:\n{output}", call.name));
            }
        }
    }

    /// Text mode: sends the batch's results back as one message.
    fn flush_text_results(&mut self) {
        if self.text_results.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text_results).join("\n\n");
        self.push(ConversationItem::User { text });
    }
}

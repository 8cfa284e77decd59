//! The tool-call half of a turn: approvals, the `ask_human` policy, one runtime batch, and the
//! results mapped back by call id.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use intendant_protocol::events::{AppEvent, ContextAction, ControlMsg};
use intendant_protocol::hooks::{HookEvent, HookTool, HookToolResult, HookVerdict};
use intendant_protocol::runtime::{Command, ERROR_PREFIX, Function, HUMAN_QUESTION_FILE};
use intendant_providers::{ToolCall, ToolImage};

use super::{AgentLoop, QUESTION_POLL, RoundStop};
use crate::approval::{CallReview, DENIED_OUTPUT, McpCall, SKIPPED_OUTPUT, Verdict};
use crate::ask_human::{HEADLESS_RECOVERY_ANSWER, NOT_EXECUTED_NOTE, write_human_response};
use crate::child::CancelToken;
use crate::mcp_client::{CatalogTool, SEARCH_TOOL};
use crate::outcome::SessionError;
use crate::preview::command_preview;
use crate::preview::escape_invisible;
use crate::runner::{BatchOutput, RunnerError, new_secret};
use crate::subagents::SubAgentCall;
use crate::tools::{ContextDirective, ToolAction, map_tool_call, parse_arguments};
use intendant_protocol::text::clip;

/// One response's calls as planned: each with how it is answered, the final message if one
/// signalled done, and the context directives to apply after the batch.
struct Plan {
    planned: Vec<(ToolCall, Planned)>,
    done_message: Option<String>,
    directives: Vec<ContextDirective>,
    /// Call ids a `pre_tool_use` hook sent to a human (asked whatever their rule says).
    hook_asks: HashSet<String>,
    /// Call ids the controller answered by doing what they asked (a skill, a sub-agent or
    /// memory tool, a done signal, a context directive): with the runtime's, the calls that ran.
    handled: HashSet<String>,
}

impl AgentLoop {
    /// Runs one response's tool calls as one batch and appends the results.
    pub(super) async fn run_tool_calls(
        &mut self,
        calls: &[ToolCall],
        cancel: &CancelToken,
    ) -> Result<Option<RoundStop>, SessionError> {
        let Plan {
            mut planned,
            done_message,
            directives,
            hook_asks,
            mut handled,
        } = self.plan_calls(calls, cancel).await;
        self.apply_human_policy(&mut planned);
        if let Some(reason) = self.review(&mut planned, &hook_asks, cancel).await {
            return Ok(Some(self.answer_refused_batch(planned, reason, cancel)));
        }

        let mut images = HashMap::new();
        for (call_id, returned) in self.run_mcp_calls(&mut planned, cancel).await {
            handled.insert(call_id.clone());
            images.insert(call_id, returned);
        }
        let commands = runtime_commands(&planned);
        let batch = if commands.is_empty() {
            None
        } else {
            let checkpointed = self.checkpoint_before(&commands).await;
            let output = self.dispatch(commands, cancel).await?;
            if checkpointed {
                self.checkpoint_after().await;
            }
            Some(output)
        };

        let budget_line = self.usage.budget_line(
            self.conversation.estimated_tokens(&self.cfg.system_prompt),
            self.cfg.context_window,
        );
        let last = planned.len().saturating_sub(1);
        for (i, (call, plan)) in planned.into_iter().enumerate() {
            let ran = match &plan {
                Planned::Runtime(_) => batch.is_some(),
                Planned::Answered { .. } => handled.contains(&call.call_id),
                Planned::Mcp(_) => false,
            };
            let (mut output, is_error) = match plan {
                Planned::Answered { output, is_error } => (output, is_error),
                Planned::Runtime(cmd) => result_for(cmd.nonce, batch.as_ref()),
                // Every approved MCP call was answered by `run_mcp_calls`.
                Planned::Mcp(_) => (format!("{ERROR_PREFIX}the call was not run"), true),
            };
            if ran {
                output = self.post_tool_use(&call, output, is_error, cancel).await;
            }
            if i == last {
                if let Some(note) = batch.as_ref().and_then(BatchOutput::truncation_note) {
                    output.push_str(&format!("\n[{note}]"));
                }
                for note in batch.iter().flat_map(|batch| &batch.limit_notes) {
                    output.push_str(&format!("\n[{note}]"));
                }
                output.push_str("\n\n");
                output.push_str(&budget_line);
            }
            let images = images.remove(&call.call_id).unwrap_or_default();
            self.push_result(&call, output, is_error, images);
        }
        // Every call has its answer, so the conversation stays valid for a follow-up.
        if cancel.is_cancelled() {
            return Ok(Some(RoundStop::Interrupted));
        }
        // A connection the human denied while the batch ran ends the turn as a denied command
        // does (the command already got its 403).
        if let Some(reason) = self.cfg.egress.as_ref().and_then(|e| e.take_denial()) {
            return Ok(Some(RoundStop::Denied(reason)));
        }
        for directive in directives {
            self.apply_directive(directive).await;
        }
        if let Some(message) = done_message {
            self.bus.emit(AppEvent::Done {
                message: message.clone(),
            });
            return Ok(Some(RoundStop::Done(message)));
        }
        Ok(None)
    }

    // Over 100 lines on purpose: one match over every kind of call, so how each is answered
    // (runtime, controller, refusal) reads in one place.
    /// Announces each of `calls` and decides how it is answered: by the runtime, or here (a
    /// done signal, a context directive, an invalid call, a sub-agent tool, a skill).
    async fn plan_calls(&mut self, calls: &[ToolCall], cancel: &CancelToken) -> Plan {
        let mut planned: Vec<(ToolCall, Planned)> = Vec::new();
        let mut done_message = None;
        let mut directives = Vec::new();
        let mut hook_asks = HashSet::new();
        let mut handled = HashSet::new();
        for call in calls {
            self.bus.emit(AppEvent::ToolCall {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                arguments: parse_arguments(call),
            });
            if let Some(plan) = self.plan_mcp_call(call, &mut hook_asks, cancel).await {
                planned.push((call.clone(), plan));
                continue;
            }
            let nonce = self.next_nonce;
            self.next_nonce += 1;
            let action = map_tool_call(call, nonce);
            let runtime = matches!(action, ToolAction::Runtime(_));
            let invalid = matches!(action, ToolAction::Invalid(_));
            if !invalid {
                let pre = self.pre_tool_use(call, cancel).await;
                let refusal = match pre.verdict {
                    HookVerdict::Deny => Some(pre.reason.unwrap_or_default()),
                    // There is no approval for a tool the controller answers itself: a hook that
                    // wants a human for one (or failed) refuses it.
                    HookVerdict::Ask if !runtime => Some(format!(
                        "{} (a human cannot be asked about {}, so it is not run)",
                        pre.reason
                            .unwrap_or_else(|| "the hook asked for a human".to_owned()),
                        call.name
                    )),
                    HookVerdict::Ask => {
                        hook_asks.insert(call.call_id.clone());
                        None
                    }
                    HookVerdict::Allow | HookVerdict::Approve | HookVerdict::None => None,
                };
                if let Some(reason) = refusal {
                    planned.push((
                        call.clone(),
                        Planned::Answered {
                            output: format!(
                                "{ERROR_PREFIX}not run: a pre_tool_use hook denied it: {reason}"
                            ),
                            is_error: true,
                        },
                    ));
                    continue;
                }
            }
            if !runtime && !invalid {
                handled.insert(call.call_id.clone());
            }
            let plan = match action {
                ToolAction::Runtime(cmd) => Planned::Runtime(cmd),
                ToolAction::SignalDone { message } => {
                    done_message = Some(message);
                    Planned::Answered {
                        output: "done signal received".to_owned(),
                        is_error: false,
                    }
                }
                ToolAction::ManageContext(directive) => {
                    directives.push(directive);
                    Planned::Answered {
                        output: "context update applied".to_owned(),
                        is_error: false,
                    }
                }
                ToolAction::Invalid(message) => Planned::Answered {
                    output: format!("{ERROR_PREFIX}{message}"),
                    is_error: true,
                },
                ToolAction::SubAgent(call) => {
                    self.sub_agent_call(call, &mut done_message, cancel).await
                }
                ToolAction::WorkflowCheckpoint(call) => self.workflow_checkpoint(call).await,
                ToolAction::Memory(call) => self.memory_call(call).await,
                ToolAction::InvokeSkill { name } => self.skill_call(&name),
            };
            planned.push((call.clone(), plan));
        }

        Plan {
            planned,
            done_message,
            directives,
            hook_asks,
            handled,
        }
    }

    /// Answers a `workflow_checkpoint` call on a blocking thread (a locked database waits its
    /// busy timeout there, not on the loop's).
    async fn workflow_checkpoint(&self, call: crate::workflow::CheckpointCall) -> Planned {
        let Some(workflow) = self.cfg.workflow.clone() else {
            return Planned::Answered {
                output: format!(
                    "{ERROR_PREFIX}workflow_checkpoint is not available in this session"
                ),
                is_error: true,
            };
        };
        let answer = tokio::task::spawn_blocking(move || workflow.answer(&call))
            .await
            .unwrap_or_else(|e| Err(format!("workflow_checkpoint failed: {e}")));
        match answer {
            Ok(output) => Planned::Answered {
                output,
                is_error: false,
            },
            Err(message) => Planned::Answered {
                output: format!("{ERROR_PREFIX}{message}"),
                is_error: true,
            },
        }
    }

    /// The session's `pre_tool_use` hooks on `call`.
    async fn pre_tool_use(&self, call: &ToolCall, cancel: &CancelToken) -> crate::hooks::Outcome {
        let hooks = &self.cfg.hooks;
        let mut input = hooks.input(HookEvent::PreToolUse, self.cfg.approval_gate.level());
        input.tool = Some(hook_tool(call));
        hooks.run(&input, Some(&call.name), &self.bus, cancel).await
    }

    /// `output` of `call` with what the session's `post_tool_use` hooks add for the model: each
    /// one's `additional_context`, and a deny's reason.
    async fn post_tool_use(
        &self,
        call: &ToolCall,
        mut output: String,
        is_error: bool,
        cancel: &CancelToken,
    ) -> String {
        let hooks = &self.cfg.hooks;
        if !hooks.has(HookEvent::PostToolUse) {
            return output;
        }
        let mut input = hooks.input(HookEvent::PostToolUse, self.cfg.approval_gate.level());
        input.tool = Some(hook_tool(call));
        input.tool_result = Some(HookToolResult {
            output: output.clone(),
            is_error,
        });
        let outcome = hooks.run(&input, Some(&call.name), &self.bus, cancel).await;
        for context in &outcome.context {
            output.push_str(&format!("\n\n[from a post_tool_use hook]\n{context}"));
        }
        if outcome.verdict == HookVerdict::Deny {
            let reason = outcome.reason.unwrap_or_default();
            output.push_str(&format!(
                "\n\n[a post_tool_use hook objected to this result]\n{reason}"
            ));
        }
        output
    }

    /// Answers every call of a batch the review refused, and how the round ends: interrupted
    /// when the turn was, else denied for `reason`.
    fn answer_refused_batch(
        &mut self,
        planned: Vec<(ToolCall, Planned)>,
        reason: String,
        cancel: &CancelToken,
    ) -> RoundStop {
        let interrupted = cancel.is_cancelled();
        for (call, plan) in planned {
            let (text, is_error) = match plan {
                Planned::Answered { output, is_error } => (output, is_error),
                Planned::Runtime(_) | Planned::Mcp(_) if interrupted => {
                    (INTERRUPTED_OUTPUT.to_owned(), true)
                }
                Planned::Runtime(_) | Planned::Mcp(_) => {
                    ("not run: the task was stopped by a denial".to_owned(), true)
                }
            };
            self.push_result(&call, text, is_error, Vec::new());
        }
        if interrupted {
            RoundStop::Interrupted
        } else {
            RoundStop::Denied(reason)
        }
    }

    /// Answers a sub-agent tool call through the session's [`crate::subagents::SubAgents`]; a
    /// child's `submit_result` ends its round (and, being a child, its session). A wait for
    /// children ends when the turn is interrupted.
    async fn sub_agent_call(
        &mut self,
        call: SubAgentCall,
        done_message: &mut Option<String>,
        cancel: &CancelToken,
    ) -> Planned {
        let Some(sub_agents) = self.cfg.sub_agents.clone() else {
            return Planned::Answered {
                output: format!("{ERROR_PREFIX}sub-agent tools are not available in this session"),
                is_error: true,
            };
        };
        match call {
            SubAgentCall::Submit { summary, .. } if sub_agents.is_child() => {
                self.submitted = true;
                *done_message = Some(summary);
                Planned::Answered {
                    output: "result submitted; this session ends".to_owned(),
                    is_error: false,
                }
            }
            SubAgentCall::Submit { .. } => Planned::Answered {
                output: format!(
                    "{ERROR_PREFIX}submit_result is for sub-agents; this session was not started \
                     by another one (use signal_done)"
                ),
                is_error: true,
            },
            SubAgentCall::Spawn(_)
            | SubAgentCall::Wait { .. }
            | SubAgentCall::Message { .. }
            | SubAgentCall::Stop { .. }
                if !sub_agents.can_spawn() =>
            {
                Planned::Answered {
                    output: format!(
                        "{ERROR_PREFIX}this session is at the maximum sub-agent depth and cannot \
                         start or steer children"
                    ),
                    is_error: true,
                }
            }
            other => {
                // Only a wait is given up on: a spawn or a message must not be cut off halfway.
                let waits = matches!(other, SubAgentCall::Wait { .. });
                let handled = sub_agents.handle(other, self.usage.remaining());
                let (result, carved) = if waits {
                    tokio::select! {
                        handled = handled => handled,
                        () = cancel.cancelled() => {
                            return Planned::Answered {
                                output: INTERRUPTED_OUTPUT.to_owned(),
                                is_error: true,
                            };
                        }
                    }
                } else {
                    handled.await
                };
                self.usage.carve(carved);
                Planned::Answered {
                    output: result.output,
                    is_error: result.is_error,
                }
            }
        }
    }

    /// Answers `invoke_skill` from the skills read at the session's start.
    fn skill_call(&self, name: &str) -> Planned {
        match self.cfg.skills.invoke(name) {
            Ok(output) => Planned::Answered {
                output,
                is_error: false,
            },
            Err(message) => Planned::Answered {
                output: format!("{ERROR_PREFIX}{message}"),
                is_error: true,
            },
        }
    }

    /// Answers a memory tool call from the session's memories ([`crate::memory`]).
    async fn memory_call(&self, call: crate::memory::MemoryCall) -> Planned {
        let Some(memory) = self.cfg.memory.clone() else {
            return Planned::Answered {
                output: format!("{ERROR_PREFIX}memory tools are not available in this session"),
                is_error: true,
            };
        };
        let (output, is_error) = memory.answer(call).await;
        Planned::Answered { output, is_error }
    }

    /// Passes the runtime commands through the approval gate: skipped ones are answered as
    /// such; on a denial every denied command is answered and the denial reason returned.
    async fn review(
        &mut self,
        planned: &mut [(ToolCall, Planned)],
        hook_asks: &HashSet<String>,
        cancel: &CancelToken,
    ) -> Option<String> {
        let commands = runtime_commands(planned);
        let about: Vec<CallReview> = planned
            .iter()
            .filter(|(_, p)| matches!(p, Planned::Runtime(_)))
            .map(|(call, _)| CallReview {
                tool: Some(hook_tool(call)),
                at_least_ask: hook_asks.contains(&call.call_id),
            })
            .collect();
        let verdicts = if commands.is_empty() {
            Vec::new()
        } else {
            self.cfg
                .approval_gate
                .review_calls(
                    &self.cfg.session_id,
                    &commands,
                    &about,
                    &self.bus,
                    &mut self.inbox,
                    cancel,
                )
                .await
        };
        let mut verdicts = verdicts.into_iter();
        let mut denied = false;
        for (_, plan) in planned.iter_mut() {
            if !matches!(plan, Planned::Runtime(_)) {
                continue;
            }
            denied |= answer_verdict(plan, verdicts.next().unwrap_or(Verdict::Deny), cancel);
        }
        if !denied {
            denied = self.review_mcp_calls(planned, hook_asks, cancel).await;
        }
        denied.then(|| {
            self.cfg
                .approval_gate
                .last_denial()
                .map_or_else(|| "a command was denied".to_owned(), |d| d.reason())
        })
    }

    /// With nobody to answer, `ask_human` gets the recovery answer; with a human, the first
    /// question consumes the batch and every other runtime call is reported as not run.
    fn apply_human_policy(&self, planned: &mut [(ToolCall, Planned)]) {
        let is_ask = |p: &Planned| matches!(p, Planned::Runtime(c) if c.is(Function::AskHuman));
        let Some(first) = planned.iter().position(|(_, p)| is_ask(p)) else {
            return;
        };
        let human = self.cfg.human_available.load(Ordering::SeqCst);
        for (i, (_, plan)) in planned.iter_mut().enumerate() {
            if !human && is_ask(plan) {
                *plan = Planned::Answered {
                    output: HEADLESS_RECOVERY_ANSWER.to_owned(),
                    is_error: false,
                };
            } else if human && i != first && matches!(plan, Planned::Runtime(_)) {
                *plan = Planned::Answered {
                    output: NOT_EXECUTED_NOTE.to_owned(),
                    is_error: false,
                };
            }
        }
    }

    /// Runs one batch; a batch holding a question also waits for the human's answer and writes
    /// it to the answer file the runtime polls.
    async fn dispatch(
        &mut self,
        commands: Vec<Command>,
        cancel: &CancelToken,
    ) -> Result<BatchOutput, SessionError> {
        let granted = self.cfg.approval_gate.user_display_granted();
        self.cfg.runner.set_user_display_granted(granted);
        self.bus.emit(AppEvent::ToolBatch {
            turn: self.turn,
            input: serde_json::json!({ "commands": commands }),
        });
        if let Some(egress) = &self.cfg.egress {
            let previews: Vec<String> = commands.iter().map(command_preview).collect();
            egress.set_running(Some(previews.join("\n")));
        }
        let output = self.run_commands(commands, cancel).await;
        if let Some(egress) = &self.cfg.egress {
            egress.set_running(None);
        }
        output
    }

    /// [`AgentLoop::dispatch`]'s batch: run, and for a question, answered.
    async fn run_commands(
        &mut self,
        commands: Vec<Command>,
        cancel: &CancelToken,
    ) -> Result<BatchOutput, SessionError> {
        let question = commands
            .iter()
            .find(|c| c.is(Function::AskHuman))
            .map(|c| (c.nonce, c.question.clone().unwrap_or_default()));
        let output = match question {
            None => self.cfg.runner.run_batch(commands, None, cancel).await?,
            Some((id, question)) => {
                let token = new_secret()?;
                let log_dir = self.cfg.runner.config().log_dir.clone();
                // The runtime clears any answer file when it starts asking, so the answer may
                // only be written once its question file exists; a stale one must not count.
                let question_file = log_dir.join(HUMAN_QUESTION_FILE);
                let _ = std::fs::remove_file(&question_file);
                let runner = self.cfg.runner.clone();
                // A cancel stops the runtime (which waits for the answer), so the batch
                // resolves and the wait below ends with it.
                let batch = runner.run_batch(commands, Some(token.clone()), cancel);
                tokio::pin!(batch);
                while !question_file.exists() {
                    tokio::select! {
                        out = &mut batch => return self.finish_batch(out?),
                        () = tokio::time::sleep(QUESTION_POLL) => {}
                    }
                }
                // Only an answer sent once the question is shown counts: a line typed earlier
                // was not an answer to it (it stays buffered, e.g. as a follow-up).
                self.inbox.drain_ready();
                self.bus.emit(AppEvent::HumanQuestion { id, question });
                let answer = tokio::select! {
                    out = &mut batch => return self.finish_batch(out?),
                    answer = self.inbox.next_unbuffered_where(|m| matches!(m, ControlMsg::Input { .. })) => answer,
                };
                let text = match answer {
                    Some(ControlMsg::Input { text }) => text,
                    Some(
                        ControlMsg::FollowUp { .. }
                        | ControlMsg::Approve { .. }
                        | ControlMsg::Deny { .. }
                        | ControlMsg::Skip { .. }
                        | ControlMsg::ApproveAll { .. }
                        | ControlMsg::AllowHost { .. },
                    )
                    | None => HEADLESS_RECOVERY_ANSWER.to_owned(),
                };
                self.bus.emit(AppEvent::HumanAnswer {
                    id,
                    text: text.clone(),
                });
                if let Err(e) = write_human_response(&log_dir, &token, &text) {
                    return Err(SessionError::from(RunnerError::Io {
                        path: log_dir.display().to_string(),
                        message: format!("cannot write the human response: {e}"),
                    }));
                }
                batch.await?
            }
        };
        self.finish_batch(output)
    }

    fn finish_batch(&self, output: BatchOutput) -> Result<BatchOutput, SessionError> {
        self.bus.emit(AppEvent::ToolBatchResult {
            turn: self.turn,
            output: output.summary(),
        });
        for message in output.git_warnings.iter().chain(&output.limit_notes) {
            self.bus.emit(AppEvent::Warning {
                message: message.clone(),
            });
        }
        Ok(output)
    }

    /// Applies the model's `manage_context` edit; the marker it leaves names the session's
    /// workflow checkpoints, as auto-compaction's does.
    async fn apply_directive(&mut self, directive: ContextDirective) {
        let names = self.checkpoint_names().await;
        let (action, removed) = match &directive {
            ContextDirective::DropTurns { count } => (
                ContextAction::DropTurns,
                self.conversation.drop_turns(*count, names.as_deref()),
            ),
            ContextDirective::Summarize { summary } => (
                ContextAction::Summarize,
                self.conversation.summarize(summary, names.as_deref()),
            ),
        };
        self.bus.emit(AppEvent::ContextManagement {
            action,
            detail: format!("removed {removed} messages at the model's request"),
        });
    }
}

impl AgentLoop {
    /// How a call of an MCP tool (or of the tool search) is answered, when `call` is one: the
    /// session's `pre_tool_use` hooks may deny an MCP call or send it to a human (`hook_asks`).
    async fn plan_mcp_call(
        &self,
        call: &ToolCall,
        hook_asks: &mut HashSet<String>,
        cancel: &CancelToken,
    ) -> Option<Planned> {
        let hub = self.mcp.as_ref()?;
        if call.name == SEARCH_TOOL {
            let (output, is_error) = hub.search(&parse_arguments(call));
            return Some(Planned::Answered { output, is_error });
        }
        let tool = hub.lookup(&call.name)?;
        let pre = self.pre_tool_use(call, cancel).await;
        match pre.verdict {
            HookVerdict::Deny => {
                return Some(Planned::Answered {
                    output: format!(
                        "{ERROR_PREFIX}not run: a pre_tool_use hook denied it: {}",
                        pre.reason.unwrap_or_default()
                    ),
                    is_error: true,
                });
            }
            HookVerdict::Ask => {
                hook_asks.insert(call.call_id.clone());
            }
            HookVerdict::Allow | HookVerdict::Approve | HookVerdict::None => {}
        }
        Some(Planned::Mcp(Box::new(McpPlanned {
            tool,
            arguments: parse_arguments(call),
        })))
    }

    /// Puts every MCP call of the batch to the approval gate, in order: a skipped one is
    /// answered as such; after a denial the rest are denied too. Whether one was denied.
    async fn review_mcp_calls(
        &mut self,
        planned: &mut [(ToolCall, Planned)],
        hook_asks: &HashSet<String>,
        cancel: &CancelToken,
    ) -> bool {
        let mut denied = false;
        for (tool_call, plan) in planned.iter_mut() {
            let Planned::Mcp(call) = plan else {
                continue;
            };
            let verdict = if denied {
                Verdict::Deny
            } else {
                let question = mcp_question(call);
                let about = CallReview {
                    tool: Some(hook_tool(tool_call)),
                    at_least_ask: hook_asks.contains(&tool_call.call_id),
                };
                self.cfg
                    .approval_gate
                    .review_mcp(
                        &self.cfg.session_id,
                        &question,
                        &about,
                        (&self.bus, &mut self.inbox),
                        cancel,
                    )
                    .await
            };
            denied |= answer_verdict(plan, verdict, cancel);
        }
        denied
    }

    /// Runs the approved MCP calls, in order, each answered with its (bounded) result; the
    /// call ids it ran (their results go through `post_tool_use` like any other), each with
    /// the images its result attaches.
    async fn run_mcp_calls(
        &mut self,
        planned: &mut [(ToolCall, Planned)],
        cancel: &CancelToken,
    ) -> Vec<(String, Vec<ToolImage>)> {
        let mut ran = Vec::new();
        let Some(hub) = self.mcp.as_ref() else {
            return ran;
        };
        for (tool_call, plan) in planned.iter_mut() {
            let Planned::Mcp(call) = plan else {
                continue;
            };
            let rendered = hub.call(&call.tool, call.arguments.clone(), cancel).await;
            *plan = Planned::Answered {
                output: rendered.text,
                is_error: rendered.is_error,
            };
            ran.push((tool_call.call_id.clone(), rendered.images));
        }
        ran
    }
}

/// Bytes of an MCP call's arguments shown on the approval's one line; past it they go to the
/// detail.
const MCP_PREVIEW_ARGS: usize = 200;
/// Bytes of an MCP call's arguments an approval's detail shows.
const MCP_DETAIL_BYTES: usize = 8 * 1024;

/// What the approval gate is asked about an MCP call: its name and arguments, escaped.
fn mcp_question(call: &McpPlanned) -> McpCall {
    let arguments = call.arguments.to_string();
    let one_line = escape_invisible(&arguments);
    let (preview, detail) = if one_line.len() <= MCP_PREVIEW_ARGS {
        (format!("{} {one_line}", call.tool.model_name), None)
    } else {
        let pretty = serde_json::to_string_pretty(&call.arguments).unwrap_or(arguments);
        (
            format!(
                "{} {}",
                call.tool.model_name,
                clip(&one_line, MCP_PREVIEW_ARGS)
            ),
            Some(escape_invisible(&clip(&pretty, MCP_DETAIL_BYTES))),
        )
    };
    McpCall {
        name: call.tool.model_name.clone(),
        hint: call.tool.hint,
        preview,
        detail,
    }
}

/// An approved-to-be call of an MCP tool.
struct McpPlanned {
    tool: CatalogTool,
    arguments: serde_json::Value,
}

/// Tool output for a command that was not run because the turn was interrupted.
const INTERRUPTED_OUTPUT: &str = "not run: the turn was interrupted";

/// What happens to one tool call.
enum Planned {
    /// Sent to the runtime.
    Runtime(Box<Command>),
    /// A tool of an MCP server, called once approved.
    Mcp(Box<McpPlanned>),
    /// Answered by the controller without running anything.
    Answered {
        /// What the model is told.
        output: String,
        /// Whether the model is told it failed.
        is_error: bool,
    },
}

/// `call` as a hook is told about it.
fn hook_tool(call: &ToolCall) -> HookTool {
    HookTool {
        name: call.name.clone(),
        call_id: call.call_id.clone(),
        arguments: parse_arguments(call),
    }
}

/// The commands of `planned` that still go to the runtime, in order.
fn runtime_commands(planned: &[(ToolCall, Planned)]) -> Vec<Command> {
    planned
        .iter()
        .filter_map(|(_, p)| match p {
            Planned::Runtime(cmd) => Some((**cmd).clone()),
            Planned::Answered { .. } | Planned::Mcp(_) => None,
        })
        .collect()
}

/// The model-facing result of command `nonce`, explaining a missing result honestly.
fn result_for(nonce: u64, batch: Option<&BatchOutput>) -> (String, bool) {
    let Some(batch) = batch else {
        return (format!("{ERROR_PREFIX}the command was not run"), true);
    };
    if let Some(data) = batch.results.get(&nonce) {
        return (data.clone(), data.starts_with(ERROR_PREFIX));
    }
    let why = if batch.cancelled {
        "the turn was interrupted before this command finished (its runtime was stopped, or never started)"
            .to_owned()
    } else if batch.timed_out {
        "the batch hit the controller's hard timeout and the runtime was killed before this command finished".to_owned()
    } else if batch.stdout_dropped_bytes > 0 {
        "the runtime's output exceeded the controller's cap and this result was lost".to_owned()
    } else {
        let stderr = clip(batch.stderr_tail.trim(), 1000);
        match batch.exit_code {
            Some(0) => "the runtime returned no result for this command (an earlier failure may have aborted the batch)".to_owned(),
            Some(code) => format!("the runtime exited with status {code} without a result for this command: {stderr}"),
            None => format!("the runtime was terminated without a result for this command: {stderr}"),
        }
    };
    (format!("{ERROR_PREFIX}no result: {why}"), true)
}

/// Answers the model for a call that was not approved (`Approve` leaves it to run): skipped,
/// or denied (interrupted, when the turn was); whether it was a denial.
fn answer_verdict(plan: &mut Planned, verdict: Verdict, cancel: &CancelToken) -> bool {
    match verdict {
        Verdict::Approve => false,
        Verdict::Skip => {
            *plan = Planned::Answered {
                output: SKIPPED_OUTPUT.to_owned(),
                is_error: false,
            };
            false
        }
        Verdict::Deny => {
            let output = if cancel.is_cancelled() {
                INTERRUPTED_OUTPUT
            } else {
                DENIED_OUTPUT
            };
            *plan = Planned::Answered {
                output: output.to_owned(),
                is_error: true,
            };
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_results_are_explained() {
        let mut batch = BatchOutput::default();
        batch.results.insert(1, "{\"ok\":1}".into());
        batch.results.insert(2, "Error: boom".into());
        assert_eq!(result_for(1, Some(&batch)), ("{\"ok\":1}".into(), false));
        assert!(result_for(2, Some(&batch)).1);
        let (text, is_error) = result_for(3, Some(&batch));
        assert!(is_error && text.contains("no result"), "{text}");
        batch.timed_out = true;
        assert!(result_for(3, Some(&batch)).0.contains("hard timeout"));
        batch.timed_out = false;
        batch.stdout_dropped_bytes = 10;
        assert!(
            result_for(3, Some(&batch))
                .0
                .contains("exceeded the controller's cap")
        );
        batch.stdout_dropped_bytes = 0;
        batch.cancelled = true;
        assert!(result_for(3, Some(&batch)).0.contains("interrupted"));
        batch.cancelled = false;
        batch.exit_code = Some(2);
        batch.stderr_tail = "bad input".into();
        assert!(result_for(3, Some(&batch)).0.contains("status 2"));
        assert!(result_for(3, None).0.contains("not run"));
    }
}

//! [`ApprovalGate`]: asks the human about a batch through the bus and collects the verdicts.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

pub use intendant_protocol::events::Verdict;
use intendant_protocol::events::{AppEvent, ControlMsg};
use intendant_protocol::hooks::{HookApproval, HookEvent, HookTool, HookVerdict};
use intendant_protocol::runtime::Command;

use super::policy::{ApprovalPolicy, McpHint, Rule};
use crate::autonomy::AutonomyLevel;
use crate::bus::EventBus;
use crate::child::CancelToken;
use crate::classify::{ActionCategory, classify};
use crate::hooks::Hooks;
use crate::intents::IntentInbox;
use crate::preview::{command_preview, edit_detail};

/// Tool output for a command the user skipped.
pub const SKIPPED_OUTPUT: &str = "skipped by the user: not run";
/// Tool output for a command that was denied (the task stops).
pub const DENIED_OUTPUT: &str = "denied: not run; the task stops";

/// Approval ids are unique in the process, so answers can never reach the wrong session.
static NEXT_APPROVAL_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh approval id (unique in the process; the egress proxy's questions take theirs here
/// too).
pub(crate) fn next_approval_id() -> u64 {
    NEXT_APPROVAL_ID.fetch_add(1, Ordering::Relaxed)
}

/// A human's answer to one approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Run this command.
    Approve,
    /// Do not run this command; go on.
    Skip,
    /// Run this and everything after it (the session becomes `full`).
    ApproveAll,
    /// Do not run it; stop the task.
    Deny,
}

impl ApprovalAnswer {
    /// What happens to the action: approve-all approves it, the rest map one to one.
    pub fn verdict(self) -> Verdict {
        match self {
            ApprovalAnswer::Approve | ApprovalAnswer::ApproveAll => Verdict::Approve,
            ApprovalAnswer::Skip => Verdict::Skip,
            ApprovalAnswer::Deny => Verdict::Deny,
        }
    }

    /// The intent carrying this answer to approval `id`.
    pub fn into_control(self, id: u64) -> ControlMsg {
        match self {
            ApprovalAnswer::Approve => ControlMsg::Approve { id },
            ApprovalAnswer::Skip => ControlMsg::Skip { id },
            ApprovalAnswer::ApproveAll => ControlMsg::ApproveAll { id },
            ApprovalAnswer::Deny => ControlMsg::Deny { id },
        }
    }

    /// The approval `msg` answers and its answer, if it answers one.
    pub fn of_control(msg: &ControlMsg) -> Option<(u64, ApprovalAnswer)> {
        let (ControlMsg::Approve { id }
        | ControlMsg::Skip { id }
        | ControlMsg::ApproveAll { id }
        | ControlMsg::Deny { id }) = msg
        else {
            return None;
        };
        Some((*id, ApprovalAnswer::from_control(msg, *id)?))
    }

    /// The answer `msg` gives to approval `id`, if it is one.
    pub fn from_control(msg: &ControlMsg, id: u64) -> Option<ApprovalAnswer> {
        match msg {
            ControlMsg::Approve { id: i } if *i == id => Some(ApprovalAnswer::Approve),
            ControlMsg::Skip { id: i } if *i == id => Some(ApprovalAnswer::Skip),
            ControlMsg::ApproveAll { id: i } if *i == id => Some(ApprovalAnswer::ApproveAll),
            ControlMsg::Deny { id: i } if *i == id => Some(ApprovalAnswer::Deny),
            ControlMsg::Approve { .. }
            | ControlMsg::Skip { .. }
            | ControlMsg::ApproveAll { .. }
            | ControlMsg::Deny { .. }
            // A network approval's own answer (`egress`): it answers no command.
            | ControlMsg::AllowHost { .. }
            | ControlMsg::Input { .. }
            | ControlMsg::FollowUp { .. } => None,
        }
    }
}

/// Parses a reply to the terminal prompt `[y]es / [s]kip / [a]ll / [n]o` (case-insensitive,
/// surrounding space ignored); `None` for anything else, so the caller can ask again.
pub fn parse_terminal_answer(input: &str) -> Option<ApprovalAnswer> {
    match input.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(ApprovalAnswer::Approve),
        "s" | "skip" => Some(ApprovalAnswer::Skip),
        "a" | "all" => Some(ApprovalAnswer::ApproveAll),
        "n" | "no" => Some(ApprovalAnswer::Deny),
        _ => None,
    }
}

/// Who denied a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialSource {
    /// A `deny` rule.
    Rule,
    /// Approval was needed and no interactive human is attached.
    Headless,
    /// The human answered `deny`.
    User,
    /// The intents lane closed while waiting.
    NoAnswer,
    /// The turn was interrupted (or the session stopped) while waiting.
    Interrupted,
    /// An `approval_request` hook (the owner's external reviewer) answered `deny`.
    Reviewer,
}

/// Why the last denial happened (for the `session_ended` reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The denied command.
    pub command_preview: String,
    /// The category that decided it.
    pub category: ActionCategory,
    /// Who denied it.
    pub source: DenialSource,
}

impl Denial {
    /// A one-line explanation.
    pub fn reason(&self) -> String {
        let why = match self.source {
            DenialSource::Rule => format!("the [approval] rule denies {}", self.category),
            DenialSource::Headless => format!(
                "{} needs approval and no interactive human is attached (headless mode denies)",
                self.category
            ),
            DenialSource::User => "the user denied it".to_owned(),
            DenialSource::NoAnswer => format!(
                "{} needs approval and the input closed before an answer (no interactive human \
                 any more; headless mode denies)",
                self.category
            ),
            DenialSource::Interrupted => "the turn was interrupted before an answer".to_owned(),
            DenialSource::Reviewer => "the approval_request hook denied it".to_owned(),
        };
        format!("denied `{}`: {why}", self.command_preview)
    }
}

/// One action an external agent worker asks about (its own request, not a runtime command):
/// shown and answered like a command of the native loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalAction {
    /// What it does, one line (`$ COMMAND`, `edit PATH`), already escaped by the caller.
    pub preview: String,
    /// The category whose rule decides it.
    pub category: ActionCategory,
    /// For a file change, what it changes.
    pub detail: Option<String>,
}

/// What the loop knows of one command under review beyond the command itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallReview {
    /// The tool call it came from: an `approval_request` hook is told, and its matcher matches
    /// the tool's name.
    pub tool: Option<HookTool>,
    /// A `pre_tool_use` hook asked for a human (or failed): the command is asked about even
    /// where its rule would run it, and no earlier approval of it counts.
    pub at_least_ask: bool,
}

/// Who answered an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answerer {
    /// A human, or the headless rule standing in for one.
    Human,
    /// An `approval_request` hook: its approval is never remembered and grants no display.
    Reviewer,
}

/// One call of an MCP tool, as the gate asks about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpCall {
    /// The tool's model-facing name (`mcp__<server>_<tool>`), which `[approval]` keys match.
    pub name: String,
    /// What its annotations say.
    pub hint: McpHint,
    /// The call, one line (its name and arguments), already escaped by the caller.
    pub preview: String,
    /// Its arguments in full, when the preview had to cut them.
    pub detail: Option<String>,
}

/// Reviews every batch of one session before it is dispatched.
pub struct ApprovalGate {
    policy: ApprovalPolicy,
    interactive: bool,
    remembered: HashSet<String>,
    last_denial: Option<Denial>,
    user_display_granted: bool,
    hooks: Hooks,
}

impl ApprovalGate {
    /// A gate for one session. `interactive` says whether a human can answer approval requests.
    pub fn new(policy: ApprovalPolicy, interactive: bool) -> ApprovalGate {
        ApprovalGate {
            policy,
            interactive,
            remembered: HashSet::new(),
            last_denial: None,
            user_display_granted: false,
            hooks: Hooks::default(),
        }
    }

    /// Puts every request this gate would ask a human to the session's `approval_request`
    /// hooks first (see [`crate::hooks`]).
    pub fn set_hooks(&mut self, hooks: Hooks) {
        self.hooks = hooks;
    }

    /// The policy in force (its level rises to `full` after approve-all).
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    /// The autonomy level in force.
    pub fn level(&self) -> AutonomyLevel {
        self.policy.level()
    }

    /// The level as shared with whoever may change it while the session runs (the daemon's
    /// `set_autonomy`); approve-all raises it through the same handle.
    pub fn level_handle(&self) -> crate::autonomy::SharedLevel {
        self.policy.level_handle()
    }

    /// Whether commands may use the user's own display (`INTENDANT_USER_DISPLAY_GRANTED` on
    /// later runtime spawns). Granted for the rest of the session the first time a human
    /// approves a `display_control` command; never by a rule or an autonomy level alone.
    pub fn user_display_granted(&self) -> bool {
        self.user_display_granted
    }

    /// Whether a human can answer approval requests (headless sessions deny every `ask`).
    pub fn is_interactive(&self) -> bool {
        self.interactive
    }

    /// The most recent denial, if any.
    pub fn last_denial(&self) -> Option<&Denial> {
        self.last_denial.as_ref()
    }

    /// One verdict per command of `batch`, in order. Commands needing approval are announced
    /// with `approval_required` and wait for a matching answer on `inbox` (other intents stay
    /// buffered there); each answer is announced with `approval_resolved`. After a denial the
    /// rest of the batch is denied without asking. Once `cancel` (the turn's token) is
    /// cancelled, a pending request is resolved `deny` and nothing more is asked.
    pub async fn review(
        &mut self,
        session_id: &str,
        batch: &[Command],
        bus: &EventBus,
        inbox: &mut IntentInbox,
        cancel: &CancelToken,
    ) -> Vec<Verdict> {
        let about = vec![CallReview::default(); batch.len()];
        self.review_calls(session_id, batch, &about, bus, inbox, cancel)
            .await
    }

    /// [`ApprovalGate::review`], with what the loop knows of each command (`about`, one per
    /// command of `batch`, in order). A request the rules send to a human goes to the
    /// session's `approval_request` hooks first: `approve` runs it, `deny` denies it, `ask`
    /// (or a failed reviewer) asks the human. A `deny` rule is never put to them.
    pub async fn review_calls(
        &mut self,
        session_id: &str,
        batch: &[Command],
        about: &[CallReview],
        bus: &EventBus,
        inbox: &mut IntentInbox,
        cancel: &CancelToken,
    ) -> Vec<Verdict> {
        let mut verdicts = Vec::with_capacity(batch.len());
        for (i, cmd) in batch.iter().enumerate() {
            let about = about.get(i).cloned().unwrap_or_default();
            // The task stops at a denial; the rest of the batch is not asked about, and the
            // recorded denial stays the one that stopped it.
            if verdicts.contains(&Verdict::Deny) {
                verdicts.push(Verdict::Deny);
                continue;
            }
            let decision = self.policy.decide(cmd);
            let key = remember_key(cmd);
            let rule = match decision.rule {
                Rule::Auto if about.at_least_ask => Rule::Ask,
                other => other,
            };
            let verdict = match rule {
                Rule::Auto => Verdict::Approve,
                Rule::Deny => self
                    .deny(command_preview(cmd), decision.category, DenialSource::Rule)
                    .verdict(),
                Rule::Ask
                    if !about.at_least_ask
                        && key.as_ref().is_some_and(|k| self.remembered.contains(k)) =>
                {
                    Verdict::Approve
                }
                Rule::Ask => {
                    let question = ExternalAction {
                        preview: command_preview(cmd),
                        category: decision.category,
                        detail: edit_detail(cmd),
                    };
                    let (answer, answerer) = self
                        .ask(
                            session_id,
                            question,
                            about.tool.as_ref(),
                            (bus, &mut *inbox),
                            cancel,
                            None,
                        )
                        .await;
                    let verdict = answer.verdict();
                    if verdict == Verdict::Approve && answerer == Answerer::Human {
                        if let Some(k) = key {
                            self.remembered.insert(k);
                        }
                        if classify(cmd).contains(&ActionCategory::DisplayControl) {
                            self.user_display_granted = true;
                        }
                    }
                    verdict
                }
            };
            verdicts.push(verdict);
        }
        verdicts
    }

    /// The answer to one request of an external worker: the rule of its category decides, an
    /// `ask` goes to the human exactly as a command's does (`approval_required`, a wait on
    /// `inbox`, `approval_resolved`), and an approved preview is not asked about again. Without
    /// an interactive human, or when the input closes first, the answer is [`ApprovalAnswer::Deny`]
    /// (recorded in [`ApprovalGate::last_denial`]). Once `cancel` (the worker's turn token) is
    /// cancelled, a pending request is resolved `deny` as [`ApprovalGate::review`] resolves it;
    /// once `withdrawn` is (the worker took its request back, or its turn ended), it is resolved
    /// `skip` without a denial, so every queue showing it drops it.
    pub async fn review_external(
        &mut self,
        session_id: &str,
        action: &ExternalAction,
        bus: &EventBus,
        inbox: &mut IntentInbox,
        cancel: &CancelToken,
        withdrawn: &CancelToken,
    ) -> ApprovalAnswer {
        let key = format!("external\u{0}{}\u{0}{}", action.category, action.preview);
        match self.policy.effective(action.category) {
            Rule::Auto => ApprovalAnswer::Approve,
            Rule::Deny => {
                self.deny(action.preview.clone(), action.category, DenialSource::Rule);
                ApprovalAnswer::Deny
            }
            Rule::Ask if self.remembered.contains(&key) => ApprovalAnswer::Approve,
            Rule::Ask => {
                let (answer, answerer) = self
                    .ask(
                        session_id,
                        action.clone(),
                        None,
                        (bus, &mut *inbox),
                        cancel,
                        Some(withdrawn),
                    )
                    .await;
                if answer.verdict() == Verdict::Approve && answerer == Answerer::Human {
                    self.remembered.insert(key);
                }
                answer
            }
        }
    }

    /// The verdict on one MCP tool call: [`ApprovalPolicy::decide_mcp`] decides, an `ask` goes
    /// to the human exactly as a command's does, and an approved call (same tool, same
    /// arguments) is not asked about again.
    pub async fn review_mcp(
        &mut self,
        session_id: &str,
        call: &McpCall,
        about: &CallReview,
        (bus, inbox): (&EventBus, &mut IntentInbox),
        cancel: &CancelToken,
    ) -> Verdict {
        let mut decision = self.policy.decide_mcp(&call.name, call.hint);
        if about.at_least_ask && decision.rule == Rule::Auto {
            decision.rule = Rule::Ask;
        }
        let key = format!(
            "mcp\u{0}{}\u{0}{}\u{0}{}",
            call.name,
            call.preview,
            call.detail.as_deref().unwrap_or_default()
        );
        match decision.rule {
            Rule::Auto => Verdict::Approve,
            Rule::Deny => self
                .deny(call.preview.clone(), decision.category, DenialSource::Rule)
                .verdict(),
            Rule::Ask if !about.at_least_ask && self.remembered.contains(&key) => Verdict::Approve,
            Rule::Ask => {
                let question = ExternalAction {
                    preview: call.preview.clone(),
                    category: decision.category,
                    detail: call.detail.clone(),
                };
                let (answer, answerer) = self
                    .ask(
                        session_id,
                        question,
                        about.tool.as_ref(),
                        (bus, &mut *inbox),
                        cancel,
                        None,
                    )
                    .await;
                let verdict = answer.verdict();
                if verdict == Verdict::Approve && answerer == Answerer::Human {
                    self.remembered.insert(key);
                }
                verdict
            }
        }
    }

    /// Puts `question` (about `tool`, when it is a tool call) to the reviewer hooks, then,
    /// unless they approved or denied, announces it, waits for its answer (denying without an
    /// interactive human), and announces the verdict: `deny` once `cancel` is cancelled, `skip`
    /// (no denial) once `withdrawn` is.
    async fn ask(
        &mut self,
        session_id: &str,
        question: ExternalAction,
        tool: Option<&HookTool>,
        (bus, inbox): (&EventBus, &mut IntentInbox),
        cancel: &CancelToken,
        withdrawn: Option<&CancelToken>,
    ) -> (ApprovalAnswer, Answerer) {
        if cancel.is_cancelled() {
            let answer = self.deny(
                question.preview,
                question.category,
                DenialSource::Interrupted,
            );
            return (answer, Answerer::Human);
        }
        if let Some(reviewed) = self.hook_review(&question, tool, bus, cancel).await {
            return reviewed;
        }
        let id = next_approval_id();
        bus.emit(AppEvent::ApprovalRequired {
            id,
            session_id: session_id.to_owned(),
            command_preview: question.preview.clone(),
            detail: question.detail,
            category: question.category,
        });
        let mut interrupted = false;
        let mut taken_back = false;
        let answer = if self.interactive {
            let withdrawal = async {
                match withdrawn {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    interrupted = true;
                    None
                }
                () = withdrawal => {
                    taken_back = true;
                    None
                }
                answer = inbox.next_where(|m| ApprovalAnswer::from_control(m, id).is_some()) => {
                    answer.and_then(|m| ApprovalAnswer::from_control(&m, id))
                }
            }
        } else {
            None
        };
        let answer = match answer {
            Some(ApprovalAnswer::ApproveAll) => {
                self.policy.set_level(AutonomyLevel::Full);
                ApprovalAnswer::ApproveAll
            }
            Some(a @ (ApprovalAnswer::Approve | ApprovalAnswer::Skip)) => a,
            Some(ApprovalAnswer::Deny) => {
                self.deny(question.preview, question.category, DenialSource::User)
            }
            None if taken_back => ApprovalAnswer::Skip,
            None if interrupted => self.deny(
                question.preview,
                question.category,
                DenialSource::Interrupted,
            ),
            None if self.interactive => {
                self.deny(question.preview, question.category, DenialSource::NoAnswer)
            }
            None => self.deny(question.preview, question.category, DenialSource::Headless),
        };
        bus.emit(AppEvent::ApprovalResolved {
            id,
            verdict: answer.verdict(),
        });
        if answer == ApprovalAnswer::ApproveAll {
            // A sub-agent's level stays capped by its parent's: the event says what holds.
            let level = self.policy.level_handle();
            bus.emit(AppEvent::AutonomyChanged {
                level: level.get(),
                own: level.own(),
            });
        }
        (answer, Answerer::Human)
    }

    /// The reviewer hooks' answer to `question`, when they approve or deny it; `None` passes
    /// it on to the human (they asked, or there is no reviewer).
    async fn hook_review(
        &mut self,
        question: &ExternalAction,
        tool: Option<&HookTool>,
        bus: &EventBus,
        cancel: &CancelToken,
    ) -> Option<(ApprovalAnswer, Answerer)> {
        if !self.hooks.has(HookEvent::ApprovalRequest) {
            return None;
        }
        let mut input = self.hooks.input(HookEvent::ApprovalRequest, self.level());
        input.tool = tool.cloned();
        input.approval = Some(HookApproval {
            preview: question.preview.clone(),
            category: question.category,
            detail: question.detail.clone(),
        });
        let name = tool.map(|t| t.name.as_str());
        let outcome = self.hooks.run(&input, name, bus, cancel).await;
        match outcome.verdict {
            HookVerdict::Approve => Some((ApprovalAnswer::Approve, Answerer::Reviewer)),
            HookVerdict::Deny => {
                let answer = self.deny(
                    question.preview.clone(),
                    question.category,
                    DenialSource::Reviewer,
                );
                Some((answer, Answerer::Reviewer))
            }
            HookVerdict::Ask | HookVerdict::Allow | HookVerdict::None => None,
        }
    }

    fn deny(
        &mut self,
        command_preview: String,
        category: ActionCategory,
        source: DenialSource,
    ) -> ApprovalAnswer {
        self.last_denial = Some(Denial {
            command_preview,
            category,
            source,
        });
        ApprovalAnswer::Deny
    }
}

/// Identity of a command for remembered approvals: everything but the nonce.
fn remember_key(cmd: &Command) -> Option<String> {
    let mut c = cmd.clone();
    c.nonce = 0;
    serde_json::to_string(&c).ok()
}

//! Hooks: the owner's own commands, bound in `[hooks]` to a session's events (its start, each
//! prompt, before and after each tool call, each approval a human would be asked, each stop,
//! its end). A hook reads one JSON object on stdin and answers one on stdout (`docs/hooks.md`).
//!
//! The one design decision to know: a hook can only make a session safer or defer to a human.
//! A `pre_tool_use` allow is no approval (the call still goes through the ordinary rules); an
//! `approval_request` reviewer is asked only what a rule sends to a human, never what a `deny`
//! rule refuses; and the two gates fail closed: a hook of theirs that fails (missing, non-zero,
//! a timeout, too much or unreadable output) counts as `ask`, which a headless session denies.
//! The other events fail open with a warning. Every run is an [`AppEvent::HookRun`].
//!
//! # Layout
//! - `config`: `[hooks]`, its entries and tool-name matchers, read strictly.
//! - `run`: the [`HookLauncher`] boundary that starts one hook process, and [`run::interpret`],
//!   which turns how it ended into its answer or a failure.
//! - this file: [`Hooks`], a session's hooks: which run for an event, and what their answers
//!   add up to ([`Outcome`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::AppEvent;
use intendant_protocol::hooks::{HookEvent, HookInput, HookOutput, HookVerdict};

use crate::bus::EventBus;
use crate::child::CancelToken;
use intendant_protocol::text::clip;

pub mod config;
pub mod run;

pub use config::{HookEntry, HooksConfig, Matcher};
#[cfg(test)]
pub(crate) use run::PlainLauncher;
pub use run::{HookLauncher, HookProcess, SessionLauncher};

/// Bytes of one hook's `additional_context` kept for the model.
pub const MAX_CONTEXT_BYTES: usize = 16 * 1024;

/// What the hooks of one event added up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The decision: a deny wins, then an ask (a failure of a fail-closed event counts as one);
    /// `approve` only when every `approval_request` hook that ran approved; `none` when no hook
    /// ran or none decided.
    pub verdict: HookVerdict,
    /// The reason of the hook that decided it (a deny's or an ask's).
    pub reason: Option<String>,
    /// Each hook's `additional_context`, in order.
    pub context: Vec<String>,
}

impl Outcome {
    fn nothing() -> Outcome {
        Outcome {
            verdict: HookVerdict::None,
            reason: None,
            context: Vec::new(),
        }
    }
}

/// A session's hooks (none by default): cheap to clone.
#[derive(Clone, Default)]
pub struct Hooks {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    config: HooksConfig,
    project_root: PathBuf,
    session_id: String,
    /// Whether the session's sandbox is on: without it, hooks run as its commands do.
    sandbox_on: bool,
    launcher: Arc<dyn HookLauncher>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("config", &self.inner.as_ref().map(|i| &i.config))
            .finish_non_exhaustive()
    }
}

impl Hooks {
    /// The hooks of `config` for session `session_id` in `project_root`, started by `launcher`.
    /// A hook that must be sandboxed while `sandbox_on` and the launcher cannot sandbox is
    /// refused here, before anything runs: a hook never runs outside the walls it asked for.
    pub fn new(
        config: HooksConfig,
        project_root: &Path,
        session_id: &str,
        sandbox_on: bool,
        launcher: Arc<dyn HookLauncher>,
    ) -> Result<Hooks, String> {
        Hooks::check(&config, sandbox_on, launcher.can_sandbox())?;
        if config.is_empty() {
            return Ok(Hooks::default());
        }
        Ok(Hooks {
            inner: Some(Arc::new(Inner {
                config,
                project_root: project_root.to_path_buf(),
                session_id: session_id.to_owned(),
                sandbox_on,
                launcher,
            })),
        })
    }

    /// Whether `config` can run in a session whose sandbox is on (`sandbox_on`) with a launcher
    /// that can sandbox or not (`can_sandbox`): checked before a session exists, so a hook that
    /// would run outside the walls it asked for leaves no session behind.
    pub fn check(config: &HooksConfig, sandbox_on: bool, can_sandbox: bool) -> Result<(), String> {
        config.validate()?;
        if !sandbox_on || can_sandbox {
            return Ok(());
        }
        let sandboxed: Vec<String> = HookEvent::ALL
            .into_iter()
            .flat_map(|e| config.of(e).iter().map(move |h| (e, h)))
            .filter(|(_, h)| h.sandboxed())
            .map(|(e, h)| format!("[[hooks.{e}]] {:?}", h.command.0))
            .collect();
        if sandboxed.is_empty() {
            return Ok(());
        }
        Err(format!(
            "hooks run inside the session's sandbox, and this build cannot run one there yet: \
             {}; set `sandbox = false` on a hook you trust to run it outside the sandbox (the \
             file must then be trusted again)",
            sandboxed.join(", ")
        ))
    }

    /// Whether any hook runs for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| !i.config.of(event).is_empty())
    }

    /// The input of a hook of `event` at `autonomy`, its event-specific fields empty.
    pub fn input(&self, event: HookEvent, autonomy: AutonomyLevel) -> HookInput {
        let (session_id, project_root) = match &self.inner {
            Some(i) => (i.session_id.clone(), i.project_root.display().to_string()),
            None => (String::new(), String::new()),
        };
        HookInput {
            event,
            session_id,
            project_root,
            autonomy,
            tool: None,
            tool_result: None,
            prompt: None,
            approval: None,
            message: None,
            continued: None,
            status: None,
        }
    }

    /// Runs, in order, every hook of `input.event` that matches `tool` (the tool name the input
    /// is about, if any), each reported on `bus`, and adds up their answers. The first deny
    /// ends the run of the rest. Once `cancel` resolves, a running hook is stopped.
    pub async fn run(
        &self,
        input: &HookInput,
        tool: Option<&str>,
        bus: &EventBus,
        cancel: &CancelToken,
    ) -> Outcome {
        let Some(inner) = &self.inner else {
            return Outcome::nothing();
        };
        let event = input.event;
        let Ok(stdin) = serde_json::to_vec(input) else {
            return Outcome::nothing();
        };
        let mut outcome = Outcome::nothing();
        let mut approvals = 0usize;
        let mut ran = 0usize;
        for entry in inner.config.of(event).iter().filter(|h| h.matches(tool)) {
            ran += 1;
            let process = HookProcess {
                argv: resolve(&entry.command.0, &inner.project_root),
                cwd: inner.project_root.clone(),
                stdin: stdin.clone(),
                sandboxed: entry.sandboxed() && inner.sandbox_on,
                timeout: entry.timeout(),
            };
            let started = Instant::now();
            let report = inner.launcher.launch(process, cancel.clone()).await;
            let answer = run::interpret(event, report, entry.timeout());
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let counted = count(event, &answer);
            let reason = match &answer {
                Ok(HookOutput {
                    reason: Some(r), ..
                }) => Some(clip(r, run::MAX_REASON_BYTES)),
                Ok(_) | Err(_) => None,
            };
            let hook = entry.command.display();
            bus.emit(AppEvent::HookRun {
                hook: hook.clone(),
                hook_event: event,
                verdict: counted,
                duration_ms,
                tool: tool.map(str::to_owned),
                reason: reason.clone(),
                failure: answer.as_ref().err().cloned(),
            });
            match answer {
                Err(failure) => {
                    let then = if event.fails_closed() {
                        "it counts as `ask` (a human decides; headless, the call is denied)"
                    } else {
                        "the session goes on without it"
                    };
                    bus.emit(AppEvent::Warning {
                        message: format!("{event} hook `{hook}` failed: {failure}; {then}"),
                    });
                    if event.fails_closed() && outcome.verdict != HookVerdict::Ask {
                        outcome.verdict = HookVerdict::Ask;
                        outcome.reason =
                            Some(format!("the {event} hook `{hook}` failed: {failure}"));
                    }
                }
                Ok(answer) => {
                    if let Some(context) =
                        answer.additional_context.filter(|c| !c.trim().is_empty())
                    {
                        outcome.context.push(clip(&context, MAX_CONTEXT_BYTES));
                    }
                    match counted {
                        HookVerdict::Deny => {
                            outcome.verdict = HookVerdict::Deny;
                            outcome.reason =
                                Some(reason.unwrap_or_else(|| {
                                    format!("the {event} hook `{hook}` said deny")
                                }));
                            return outcome;
                        }
                        HookVerdict::Ask if outcome.verdict != HookVerdict::Ask => {
                            outcome.verdict = HookVerdict::Ask;
                            outcome.reason = reason;
                        }
                        HookVerdict::Approve => approvals += 1,
                        HookVerdict::Ask | HookVerdict::Allow | HookVerdict::None => {}
                    }
                }
            }
        }
        if outcome.verdict == HookVerdict::None {
            outcome.verdict = if ran > 0 && approvals == ran {
                HookVerdict::Approve
            } else if ran > 0 && event != HookEvent::ApprovalRequest {
                HookVerdict::Allow
            } else {
                HookVerdict::None
            };
        }
        outcome
    }
}

/// What one hook's answer counts as: its decision; with none, `ask` for a reviewer (it did not
/// approve) and `allow` for the rest; a failure, `ask` where the event fails closed.
fn count(event: HookEvent, answer: &Result<HookOutput, String>) -> HookVerdict {
    match answer {
        Ok(HookOutput {
            decision: Some(d), ..
        }) => *d,
        Ok(HookOutput { decision: None, .. }) if event == HookEvent::ApprovalRequest => {
            HookVerdict::Ask
        }
        Ok(HookOutput { decision: None, .. }) => HookVerdict::Allow,
        Err(_) if event.fails_closed() => HookVerdict::Ask,
        Err(_) => HookVerdict::None,
    }
}

/// The argv with its program made the project's when it is a relative path (`./guard.py`,
/// `scripts/guard.py`); a bare name stays for the `PATH` look-up.
fn resolve(argv: &[String], project_root: &Path) -> Vec<String> {
    let mut out = argv.to_vec();
    if let Some(program) = out.first_mut() {
        let path = Path::new(program.as_str());
        if program.contains('/') && path.is_relative() {
            *program = project_root.join(path).display().to_string();
        }
    }
    out
}

#[cfg(test)]
mod tests;

//! `intendant [TASK]`: turn the flags into a session spec, assemble it (`intendant_core::
//! session::assemble`), start a frontend, run it, and turn its outcome into an exit status.
//!
//! Exit status: 0 the task ended normally; 1 the run failed (provider error, runtime missing or
//! failing); 2 unusable configuration or arguments; 3 the run stopped before completing (budget
//! exhausted, turn cap, denied); 130 / 143 a SIGINT / SIGTERM stopped it (see
//! [`crate::signals`]).

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use intendant_core::bus::EventBus;
use intendant_core::intents::IntentInbox;
use intendant_core::outcome::{SessionError, SessionOutcome};
use intendant_core::session::assemble::{
    AssembleError, AssembledSession, AssemblyEnv, ResumeFrom, SessionSpec, TrustCheck, assemble,
};
use intendant_core::session::run_session;
use intendant_core::session_log::intendant_home;
use intendant_core::trust::Untrusted;
use intendant_daemon::worktree::{self, Worktree};
use intendant_protocol::events::{AppEvent, EndStatus};

use crate::flags::{RunArgs, RunOptions};
use crate::signals::SignalWatch;
use crate::stdin_text::StdinTextError;
use crate::sub_agents::Children;

/// Exit status of a run that failed.
const EXIT_FAILED: u8 = 1;
/// Exit status of unusable configuration or arguments.
const EXIT_CONFIG: u8 = 2;
/// Exit status of a run stopped before completing.
const EXIT_STOPPED: u8 = 3;

/// A failure before the loop starts, with its exit status.
struct StartError {
    code: u8,
    message: String,
}

fn config_error(message: impl std::fmt::Display) -> StartError {
    StartError {
        code: EXIT_CONFIG,
        message: message.to_string(),
    }
}

fn failed(message: impl std::fmt::Display) -> StartError {
    StartError {
        code: EXIT_FAILED,
        message: message.to_string(),
    }
}

/// Runs a task; prints its own errors.
pub fn run(task: Option<String>, args: RunArgs) -> anyhow::Result<ExitCode> {
    // What the session's processes leave this process as their subreaper is reaped as it
    // exits.
    intendant_core::child::own::start_reaper();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let json = args.json;
    let result = match args.validate() {
        Ok(options) => rt.block_on(run_async(task, options)),
        Err(e) => Err(config_error(e)),
    };
    // The stdin reader thread may still be blocked on a read; do not wait for it.
    rt.shutdown_background();
    match result {
        Ok(code) => Ok(code),
        Err(e) => {
            report_start_error(json, &e.message);
            Ok(ExitCode::from(e.code))
        }
    }
}

#[allow(clippy::print_stderr)]
fn report_start_error(json: bool, message: &str) {
    if json {
        crate::json::print_event(&AppEvent::Error {
            message: message.to_owned(),
        });
    }
    eprintln!("intendant: {message}");
}

/// The exit status of a finished session, reporting on stderr why it stopped or failed when
/// the frontend did not (`--json`; the terminal's closing line says it); `signalled` is the
/// status of a signal that stopped it.
fn exit_status(
    result: Result<SessionOutcome, SessionError>,
    report: bool,
    signalled: Option<u8>,
) -> ExitCode {
    match result {
        Ok(outcome) => match outcome.status {
            EndStatus::Completed => ExitCode::SUCCESS,
            EndStatus::BudgetExhausted
            | EndStatus::TurnCap
            | EndStatus::Denied
            | EndStatus::Refused => {
                if report {
                    report_stop(&outcome.reason);
                }
                ExitCode::from(EXIT_STOPPED)
            }
            EndStatus::Interrupted => {
                if report {
                    report_stop(&outcome.reason);
                }
                ExitCode::from(signalled.unwrap_or(EXIT_STOPPED))
            }
            EndStatus::Failed => ExitCode::from(EXIT_FAILED),
        },
        Err(e) => {
            if report {
                report_failure(&e.to_string());
            }
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The session spec the flags ask for.
fn spec(
    task: Option<String>,
    options: &RunOptions,
    interactive: bool,
    children: &Children,
) -> Result<SessionSpec, StartError> {
    let cwd = std::env::current_dir()
        .map_err(|e| failed(format!("cannot read the working directory: {e}")))?;
    Ok(SessionSpec {
        task,
        cwd,
        autonomy: options.autonomy,
        provider: options.provider.clone(),
        model: options.model.clone(),
        scenario: options.scenario.clone(),
        sandbox: options.sandbox,
        max_tokens: options.max_tokens,
        max_turns: options.max_turns,
        resume: options.resume.clone(),
        interactive,
        wait_for_follow_ups: interactive,
        // Nobody answers a one-shot run's proposal once it ended: it is dropped then.
        keep_memory_proposals: false,
        backend: options.backend.clone(),
        default_backend: None,
        orchestrate: options.orchestrate,
        sub_agents: Some(children.place()),
        extra_write_paths: Vec::new(),
        network: options
            .network
            .map(intendant_core::network::NetworkChoice::Owner),
    })
}

/// The task argument, or for `-` the task read from stdin (not with `--json`, whose stdin
/// carries control messages and follow-ups).
fn task_arg(task: String, json: bool) -> Result<String, StartError> {
    if task != "-" {
        return Ok(task);
    }
    if json {
        return Err(config_error(
            "the task `-` reads stdin, which --json keeps for control messages and follow-ups: \
             give the task as an argument",
        ));
    }
    if std::io::stdin().is_terminal() {
        report_failure("reading the task from stdin (end it with Ctrl-D)");
    }
    crate::stdin_text::task_text(task).map_err(|e| match e {
        StdinTextError::Empty => config_error("the task `-`: stdin held no task: nothing was run"),
        e => config_error(format!("the task `-`: {e}: nothing was run")),
    })
}

impl From<AssembleError> for StartError {
    fn from(e: AssembleError) -> StartError {
        match e {
            AssembleError::Config(message) => config_error(message),
            AssembleError::Failed(message) => failed(message),
        }
    }
}

async fn run_async(task: Option<String>, args: RunOptions) -> Result<ExitCode, StartError> {
    let task = task.map(|t| task_arg(t, args.json)).transpose()?;
    let interactive = args.json || std::io::stdin().is_terminal();
    let home = intendant_home().map_err(config_error)?;
    let env = AssemblyEnv::from_process(home);
    let children = Children::new(&env, args.autonomy, interactive);
    let spec = spec(task, &args, interactive, &children)?;
    // Security-relevant project settings count only once trusted: asked on a terminal,
    // refused headless.
    let mut ask = crate::wiring::ask_trust;
    let trust = if !args.json && crate::wiring::can_ask_trust() {
        TrustCheck::Ask(&mut ask as &mut dyn FnMut(&Untrusted) -> bool)
    } else {
        TrustCheck::Refuse
    };
    let (
        AssembledSession {
            start,
            backend,
            log,
            mut containment,
            human_available,
            notes,
            cancel,
            autonomy,
            ..
        },
        worktree,
    ) = assembled(spec, &env, trust).await?;
    let cancel_for_children = cancel.clone();
    // From here on a signal stops the session instead of killing this process around its
    // runtime.
    let signals = SignalWatch::install(cancel, !args.json && std::io::stdin().is_terminal())
        .map_err(|e| failed(format!("cannot watch for signals: {e}")))?;
    for note in &notes {
        report_failure(&format!("warning: {note}"));
    }

    let bus = EventBus::new();
    let inbox = IntentInbox::new(&bus);
    let log_writer = log.spawn_event_writer(bus.subscribe_session_log());
    // Children read the scenario from their own directories: make it absolute.
    let scenario = args
        .scenario
        .as_ref()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .map(|p| p.display().to_string());
    let forwarder = children
        .adopt(
            &start,
            &log,
            (scenario, cancel_for_children, autonomy),
            &bus,
        )
        .await;
    let frontend = if args.json {
        crate::json::start(&bus, Arc::clone(&human_available))
    } else {
        crate::terminal::start(&bus, Arc::clone(&human_available))
    };

    let session = run_session(start, backend, bus.clone(), inbox);
    let result = tokio::select! {
        result = session => result,
        () = signals.forced() => {
            // Dropping the session KILLed the runtime's tree; the rest of what it started
            // ends with the containment, and its sub-agents' when this process exits.
            forwarder.abort();
            frontend.abort();
            log_writer.abort();
            for warning in containment.end() {
                report_failure(&format!("warning: {warning}"));
            }
            report_stop("a second signal ended the run at once");
            return Ok(ExitCode::from(signals.exit_code().unwrap_or(EXIT_STOPPED)));
        }
    };
    // Sub-agents do not outlive the run's session.
    children.end().await;
    forwarder.abort();
    // The frontend and the log writer both stop at session_ended, which run_session always emits.
    let _ = frontend.await;
    let _ = log_writer.await;
    // The session's processes are gone: the repository pointers a command changed are put back.
    for warning in containment.end() {
        report_failure(&format!("warning: {warning}"));
    }
    if let Some(w) = worktree {
        let outcome = w.end_recorded(&log).await;
        report_failure(&format!("the worktree {}: {outcome}", w.path.display()));
    }
    if let Some(e) = log.take_write_error() {
        report_failure(&format!("the session log is incomplete: {e}"));
    }
    Ok(exit_status(result, args.json, signals.exit_code()))
}

/// `spec` assembled; a resumed sub-agent that worked in a worktree goes on in it, taken up again
/// (made again on its branch when it was removed at its end) and given the parts of the
/// repository its branch needs, as its first run had them, whatever directory this run was
/// started in.
async fn assembled(
    mut spec: SessionSpec,
    env: &AssemblyEnv,
    trust: TrustCheck<'_>,
) -> Result<(AssembledSession, Option<Worktree>), StartError> {
    let worktree = resumed_worktree(&env.home, spec.resume.as_ref()).await?;
    if let Some(w) = &worktree {
        report_failure(&format!(
            "the sub-agent goes on in its worktree {} on branch {}",
            w.path.display(),
            w.branch
        ));
        spec.cwd = w.path.clone();
        spec.extra_write_paths.extend(w.write_roots());
    }
    match assemble(
        spec,
        env,
        trust,
        Some(crate::wiring::agent_workers().as_ref()),
    ) {
        Ok(assembled) => {
            if let Some(w) = &worktree {
                let _ = assembled.log.update_meta(|m| m.worktree = Some(w.info()));
            }
            Ok((assembled, worktree))
        }
        Err(e) => {
            if let Some(w) = &worktree {
                w.end().await;
            }
            Err(e.into())
        }
    }
}

/// The worktree of the sub-agent `resume` names, taken up again ([`worktree::reopen_recorded`]);
/// `None` for any other session (an id no record answers to is the assembly's to report).
async fn resumed_worktree(
    home: &Path,
    resume: Option<&ResumeFrom>,
) -> Result<Option<Worktree>, StartError> {
    let Some(ResumeFrom::Id(id)) = resume else {
        return Ok(None);
    };
    let Ok(meta) = intendant_core::resume::recorded(home, id) else {
        return Ok(None);
    };
    worktree::reopen_recorded(home, &meta).await.map_err(|e| {
        failed(format!(
            "session {}'s worktree cannot be taken up again: {e}",
            meta.id
        ))
    })
}

#[allow(clippy::print_stderr)]
fn report_stop(reason: &str) {
    eprintln!("intendant: stopped: {reason}");
}

#[allow(clippy::print_stderr)]
fn report_failure(message: &str) {
    eprintln!("intendant: {message}");
}

//! `intendant [TASK]`: resolve everything a run needs, start a frontend, run the direct-mode
//! loop, and turn its outcome into an exit status.
//!
//! Exit status: 0 the task ended normally; 1 the run failed (provider error, runtime missing or
//! failing); 2 unusable configuration or arguments; 3 the run stopped before completing (budget
//! exhausted, turn cap, denied).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use intendant_core::agent_loop::{LoopConfig, LoopError, SessionOutcome};
use intendant_core::approval::{ApprovalGate, ApprovalPolicy};
use intendant_core::bus::EventBus;
use intendant_core::config::ProjectConfig;
use intendant_core::containment::SessionContainment;
use intendant_core::conversation::Conversation;
use intendant_core::dotenv::{EnvLookup, config_dir};
use intendant_core::intents::IntentInbox;
use intendant_core::provider_select::{ProviderChoice, Selection, mask_key, select};
use intendant_core::runner::{
    DEFAULT_BATCH_TIMEOUT, OUTPUT_CAP_BYTES, RUNTIME_PATH_ENV, RunnerConfig, RuntimeRunner,
    locate_runtime,
};
use intendant_core::runtime_env::{
    WriteRoots, absolutize, inherited_env, sandbox_enabled, write_root_covering,
};
use intendant_core::session::{DirectBackend, SessionStart, run_session};
use intendant_core::session_log::{SessionLog, SessionMeta, intendant_home, logs_dir};
use intendant_core::{prompts, resume};
use intendant_protocol::events::{AppEvent, EndStatus};
use intendant_providers::scenario::Scenario;
use intendant_providers::scripted::ScriptedProvider;
use intendant_providers::{ChatProvider, build_provider, capabilities};

use crate::RunArgs;

/// Exit status of a run that failed.
const EXIT_FAILED: u8 = 1;
/// Exit status of unusable configuration or arguments.
const EXIT_CONFIG: u8 = 2;
/// Exit status of a run stopped before completing.
const EXIT_STOPPED: u8 = 3;

/// Variable overriding the context window (tokens) used for auto-compaction.
const CONTEXT_WINDOW_ENV: &str = "INTENDANT_CONTEXT_WINDOW";
/// Variable overriding the per-batch hard timeout (seconds).
const BATCH_TIMEOUT_ENV: &str = "INTENDANT_BATCH_TIMEOUT_SECS";
/// Output token cap per response (lower when the model allows less).
const MAX_OUTPUT_TOKENS: u32 = 32_000;

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let json = args.json;
    let result = rt.block_on(run_async(task, args));
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

/// The provider and how it is named and authenticated.
struct ProviderSetup {
    provider: Arc<dyn ChatProvider>,
    name: String,
    model: String,
    auth_hint: Option<String>,
}

async fn setup_provider(selection: Selection, args: &RunArgs) -> Result<ProviderSetup, StartError> {
    match selection.choice {
        ProviderChoice::Mock => {
            let path = args.scenario.as_ref().ok_or_else(|| {
                config_error("--provider mock needs --scenario FILE (a fake-model scenario)")
            })?;
            let provider = Scenario::load(path)
                .and_then(ScriptedProvider::new)
                .map_err(|e| config_error(format!("scenario {}: {e}", path.display())))?;
            let model = if selection.model.is_empty() {
                provider.model().to_owned()
            } else {
                selection.model
            };
            Ok(ProviderSetup {
                provider: Arc::new(provider),
                name: "mock".to_owned(),
                model,
                auth_hint: None,
            })
        }
        ProviderChoice::Wire(kind) => {
            let config = selection
                .config
                .ok_or_else(|| config_error("no provider configuration"))?;
            let auth_hint = Some(match &config.api_key {
                Some(key) => format!("{} ({})", kind.api_key_env(), mask_key(key)),
                None => format!("{} (unset)", kind.api_key_env()),
            });
            let provider = build_provider(kind, config).map_err(config_error)?;
            Ok(ProviderSetup {
                provider,
                name: kind.as_str().to_owned(),
                model: selection.model,
                auth_hint,
            })
        }
    }
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, StartError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| config_error(format!("{name}={v:?} is not a valid number"))),
        Ok(_) | Err(_) => Ok(None),
    }
}

/// The session log (new or resumed) and the conversation to continue.
fn open_session(
    args: &RunArgs,
    home: &Path,
    project_root: &Path,
    cwd: &Path,
    task: &str,
    setup: &ProviderSetup,
) -> Result<(SessionLog, Conversation, bool), StartError> {
    let resumed = if let Some(id) = &args.resume {
        Some(resume::resume_by_id(home, id).map_err(config_error)?)
    } else if args.continue_latest {
        Some(resume::resume_latest(home, project_root).map_err(config_error)?)
    } else {
        None
    };
    match resumed {
        Some(state) => Ok((state.log, Conversation::from_items(state.items), true)),
        None => {
            let meta = SessionMeta::new(project_root, task, &setup.model, &setup.name);
            let log = SessionLog::create(home, meta).map_err(failed)?;
            let context = prompts::context_message(cwd, project_root, config_dir().as_deref());
            let conversation = Conversation::new(context);
            for item in conversation.items() {
                let _ = log.append_conversation(item);
            }
            Ok((log, conversation, false))
        }
    }
}

/// The task text: the one given, else (when resuming) a request to go on.
fn task_text(task: Option<String>, args: &RunArgs) -> Result<String, StartError> {
    let resuming = args.resume.is_some() || args.continue_latest;
    match task.filter(|t| !t.trim().is_empty()) {
        Some(t) => Ok(t),
        None if resuming => Ok("Continue the task.".to_owned()),
        None => Err(config_error(
            "no task given: run `intendant \"what to do\"` (see --help)",
        )),
    }
}

/// The sandbox write set (`None` without the sandbox), warning when the session records would
/// lie inside it.
fn sandbox_write_paths(
    args: &RunArgs,
    project_config: &ProjectConfig,
    project_root: &Path,
    log: &SessionLog,
    home: &Path,
) -> Option<Vec<PathBuf>> {
    let sandbox_flag = match (args.sandbox, args.no_sandbox) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    };
    sandbox_enabled(sandbox_flag, &project_config.sandbox).then(|| {
        let extra: Vec<PathBuf> = project_config
            .sandbox
            .extra_write_paths
            .iter()
            .map(|p| absolutize(project_root, p))
            .collect();
        let paths = WriteRoots::from_env(
            Some(project_root.to_path_buf()),
            log.artifacts_dir().to_path_buf(),
        )
        .write_paths(&extra);
        if let Some(root) = write_root_covering(&paths, &logs_dir(home)) {
            report_failure(&format!(
                "warning: the session records in {} lie inside the sandbox write root {}, so \
                 sandboxed commands can rewrite them; set INTENDANT_HOME outside every write root",
                logs_dir(home).display(),
                root.display()
            ));
        }
        paths
    })
}

/// The session's runtime runner, its runtimes contained in the session's process groups
/// (everything they start is killed when the containment is ended or dropped).
fn session_runner(
    runtime_path: PathBuf,
    args: &RunArgs,
    project_config: &ProjectConfig,
    project_root: &Path,
    log: &SessionLog,
    home: &Path,
) -> Result<(RuntimeRunner, SessionContainment), StartError> {
    let sandbox_write_paths = sandbox_write_paths(args, project_config, project_root, log, home);
    let batch_timeout =
        env_number::<u64>(BATCH_TIMEOUT_ENV)?.map_or(DEFAULT_BATCH_TIMEOUT, Duration::from_secs);
    let containment = SessionContainment::create(log.id(), &project_config.limits);
    for note in containment.notes() {
        report_failure(&format!("warning: {note}"));
    }
    let placement = containment
        .placement()
        .map_err(|e| failed(format!("cannot contain the session's processes: {e}")))?;
    let runner = RuntimeRunner::new(RunnerConfig {
        runtime_path,
        cwd: project_root.to_path_buf(),
        log_dir: log.artifacts_dir().to_path_buf(),
        sandbox_write_paths,
        sandbox_require_full: project_config.sandbox.require_full,
        user_display_granted: false,
        env: inherited_env(std::env::vars_os()),
        batch_timeout,
        output_cap: OUTPUT_CAP_BYTES,
        placement: Some(placement),
    });
    Ok((runner, containment))
}

/// The exit status of a finished session, reporting why it stopped or failed.
fn exit_status(result: Result<SessionOutcome, LoopError>) -> ExitCode {
    match result {
        Ok(outcome) => match outcome.status {
            EndStatus::Completed => ExitCode::SUCCESS,
            EndStatus::BudgetExhausted | EndStatus::TurnCap | EndStatus::Denied => {
                report_stop(&outcome.reason);
                ExitCode::from(EXIT_STOPPED)
            }
            EndStatus::Failed => ExitCode::from(EXIT_FAILED),
        },
        Err(e) => {
            report_failure(&e.to_string());
            ExitCode::from(EXIT_FAILED)
        }
    }
}

async fn run_async(task: Option<String>, args: RunArgs) -> Result<ExitCode, StartError> {
    let task = task_text(task, &args)?;
    let cwd = std::env::current_dir()
        .map_err(|e| failed(format!("cannot read the working directory: {e}")))?;
    let global_dir = config_dir();
    let env = EnvLookup::load(&cwd, global_dir.as_deref());
    let project_root = prompts::detect_project_root(&cwd);
    // Security-relevant project settings count only once trusted: asked on a terminal,
    // refused headless.
    let project_config = crate::trust_cmd::checked_project(
        &project_root,
        &env,
        !args.json && crate::trust_cmd::can_ask(),
    )
    .map_err(config_error)?
    .config;
    // Validated before the session directory exists, so a bad [approval] leaves no session.
    let policy =
        ApprovalPolicy::new(args.autonomy, &project_config.approval).map_err(config_error)?;

    let own_exe =
        std::env::current_exe().map_err(|e| failed(format!("cannot find this program: {e}")))?;
    let runtime_path =
        locate_runtime(std::env::var_os(RUNTIME_PATH_ENV), &own_exe).map_err(failed)?;

    let selection =
        select(args.provider.as_deref(), args.model.as_deref(), &env).map_err(config_error)?;
    let setup = setup_provider(selection, &args).await?;

    let home = intendant_home().map_err(config_error)?;
    let (log, conversation, resumed) =
        open_session(&args, &home, &project_root, &cwd, &task, &setup)?;

    let (runner, mut containment) = session_runner(
        runtime_path,
        &args,
        &project_config,
        &project_root,
        &log,
        &home,
    )?;
    let context_window = env_number::<u64>(CONTEXT_WINDOW_ENV)?
        .unwrap_or_else(|| capabilities(&setup.model).context_window);
    let (system_prompt, _) = prompts::system_prompt(&project_root, global_dir.as_deref());

    let interactive = args.json || std::io::stdin().is_terminal();
    let approval_gate = ApprovalGate::new(policy, interactive);

    let bus = EventBus::new();
    let inbox = IntentInbox::new(&bus);
    let log_writer = log.spawn_event_writer(bus.subscribe_session_log());
    let human_available = Arc::new(AtomicBool::new(false));
    let frontend = if args.json {
        crate::json::start(&bus, Arc::clone(&human_available))
    } else {
        crate::terminal::start(&bus, Arc::clone(&human_available))
    };

    let cfg = LoopConfig {
        session_id: log.id().to_owned(),
        provider: Arc::clone(&setup.provider),
        model: setup.model.clone(),
        system_prompt,
        runner,
        context_window,
        budget_tokens: args.max_tokens,
        max_turns: args.max_turns,
        max_output_tokens: Some(
            capabilities(&setup.model)
                .max_output_tokens
                .min(MAX_OUTPUT_TOKENS),
        ),
        reply_limits: project_config.limits.reply_limits(),
        human_available,
        wait_for_follow_ups: interactive,
        stream_restart_delay: Duration::from_millis(500),
        session_log: Some(log.clone()),
        auth_hint: setup.auth_hint.clone(),
        approval_gate,
    };
    let start = SessionStart {
        session_id: cfg.session_id.clone(),
        task,
        provider: setup.name.clone(),
        model: cfg.model.clone(),
        project_root,
        resumed,
    };
    let backend = Box::new(DirectBackend { cfg, conversation });
    let result = run_session(start, backend, bus.clone(), inbox).await;
    // The frontend and the log writer both stop at session_ended, which run_session always emits.
    let _ = frontend.await;
    let _ = log_writer.await;
    containment.end();
    if let Some(e) = log.take_write_error() {
        report_failure(&format!("the session log is incomplete: {e}"));
    }
    drop(setup);
    Ok(exit_status(result))
}

#[allow(clippy::print_stderr)]
fn report_stop(reason: &str) {
    eprintln!("intendant: stopped: {reason}");
}

#[allow(clippy::print_stderr)]
fn report_failure(message: &str) {
    eprintln!("intendant: {message}");
}

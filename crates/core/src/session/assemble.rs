//! Session assembly: the one way to start a session, from a plain [`SessionSpec`] to a
//! [`SessionStart`] plus the [`SessionBackend`] that runs it. The one-shot `intendant TASK`,
//! the daemon's supervisor and (later) sub-agents all come through [`assemble`], so provider
//! selection, prompts, the trust check, the session log, the approval gate, the runner and its
//! containment are decided in one place.
//!
//! Nothing here prints: warnings come back in [`AssembledSession::notes`], failures as an
//! [`AssembleError`] whose kind is the CLI's exit category (configuration or failure).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use intendant_protocol::daemon::Backend;
use intendant_providers::scenario::Scenario;
use intendant_providers::scripted::ScriptedProvider;
use intendant_providers::{
    ChatProvider, ToolMode, build_provider, capabilities, default_tool_mode,
};
use thiserror::Error;

use super::{DirectBackend, SessionBackend, SessionStart, WorkerContext, WorkerFactory};
use crate::agent_loop::LoopConfig;
use crate::approval::{ApprovalGate, ApprovalPolicy};
use crate::autonomy::{AutonomyLevel, SharedLevel};
use crate::cancel::SessionCancel;
use crate::config::ProjectConfig;
use crate::containment::SessionContainment;
use crate::conversation::Conversation;
use crate::dotenv::EnvLookup;
use crate::egress::{
    EgressPolicy, EgressProxy, Lookup, ProjectAllowList, ProxyLimits, SessionEgress, with_proxy_env,
};
use crate::git::GitRepo;
use crate::hooks::{Hooks, SessionLauncher};
use crate::host::SessionHost;
use crate::network::{
    EGRESS_PROXY_PORT_ENV, HolderSpec, NetworkChoice, NetworkError, NetworkMode,
    SANDBOX_CONNECT_PORTS_ENV, SessionNetwork, decide_mode,
};
use crate::provider_select::{ProviderChoice, Selection, mask_key, select};
use crate::runner::{
    DEFAULT_BATCH_TIMEOUT, OUTPUT_CAP_BYTES, RunnerConfig, RuntimeRunner, own_runtime,
};
use crate::runtime_env::{
    ReadMask, ReadRequest, ReadScope, WriteRoots, absolutize, inherited_env, read_masks,
    sandbox_enabled, write_root_covering,
};
use crate::session_log::{SessionLog, SessionMeta, logs_dir, unsent_follow_ups};
use crate::skills::SkillSet;
use crate::subagents::SubAgents;
use crate::trust::{Untrusted, checked_project};
use crate::{prompts, resume};

/// Variable overriding the context window (tokens) used for auto-compaction.
pub const CONTEXT_WINDOW_ENV: &str = "INTENDANT_CONTEXT_WINDOW";
/// Variable overriding the per-batch hard timeout (seconds).
pub const BATCH_TIMEOUT_ENV: &str = "INTENDANT_BATCH_TIMEOUT_SECS";
/// Output token cap per response (lower when the model allows less).
const MAX_OUTPUT_TOKENS: u32 = 32_000;
/// The instruction of a resumed session given no task.
pub const CONTINUE_TASK: &str = "Continue the task.";

/// Which earlier session to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeFrom {
    /// The session with this id (or unique id prefix).
    Id(String),
    /// The latest session of the project.
    Latest,
}

/// Everything a session is asked for, as plain values.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The task text (`None` or blank only when resuming).
    pub task: Option<String>,
    /// The directory the session is started in; the project root is detected from it.
    pub cwd: PathBuf,
    /// Autonomy level.
    pub autonomy: AutonomyLevel,
    /// Provider name (`None`: `$PROVIDER`, else the first with a key).
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Scenario file of the `mock` provider.
    pub scenario: Option<PathBuf>,
    /// Forces the write sandbox on or off (`None`: the project's setting, else the default).
    pub sandbox: Option<bool>,
    /// Session token budget.
    pub max_tokens: Option<u64>,
    /// Turn cap.
    pub max_turns: u32,
    /// Continue an earlier session instead of starting fresh.
    pub resume: Option<ResumeFrom>,
    /// Whether a human can answer approval requests (headless denies them).
    pub interactive: bool,
    /// Whether the session waits for a follow-up after each round (until its intents close).
    pub wait_for_follow_ups: bool,
    /// Whether a memory proposal still unanswered when the session ends stays pending for the
    /// daemon's approval queue (the daemon's sessions) instead of being dropped.
    pub keep_memory_proposals: bool,
    /// What runs the turns, as the caller asked (`--agent`, a start request's `backend`);
    /// `None`: see [`choose_backend`].
    pub backend: Option<Backend>,
    /// The host's default below the project's (the daemon's `[daemon] default_backend`);
    /// `None`: native.
    pub default_backend: Option<Backend>,
    /// Append the orchestration prompt (`--orchestrate`; a resume of a session whose first run
    /// had it has it whatever this says).
    pub orchestrate: bool,
    /// The daemon's host and this session's place among sub-agents: with it the session has
    /// the sub-agent tools (see [`crate::subagents`]).
    pub sub_agents: Option<SubAgentPlace>,
    /// Writable roots beyond the project's (a sub-agent's worktree needs its repository's git
    /// directory).
    pub extra_write_paths: Vec<PathBuf>,
    /// What network commands get and who chose it (`None`: `[sandbox] network`, else
    /// [`crate::network::DEFAULT_NETWORK`]).
    pub network: Option<NetworkChoice>,
}

/// Where a session stands among sub-agents.
#[derive(Clone)]
pub struct SubAgentPlace {
    /// The host children are started on.
    pub host: Arc<dyn SessionHost>,
    /// 0 for a top session, the parent's depth + 1 for a child.
    pub depth: u32,
    /// A child's role (its role prompt is appended to the system prompt).
    pub role: Option<String>,
    /// A child's parent session (recorded in its log: `meta.json` `parent`).
    pub parent: Option<String>,
    /// A child's parent's level as the parent's gate reads it: the child's own level is held
    /// under it ([`SharedLevel::under`]), so it never exceeds the parent's level now.
    pub parent_level: Option<SharedLevel>,
}

impl SubAgentPlace {
    /// This place for a session resuming `recorded`: a sub-agent stays one however it was
    /// resumed (alone, or through a host that knows no parent): at its recorded depth (deeper
    /// under a deeper parent), told its role, and under its parent in its record.
    pub fn resumed(self, recorded: Option<&SessionMeta>) -> SubAgentPlace {
        let Some(recorded) = recorded else {
            return self;
        };
        SubAgentPlace {
            depth: self.depth.max(recorded.sub_agent_depth()),
            role: self.role.or_else(|| recorded.role.clone()),
            parent: self.parent.or_else(|| recorded.parent.clone()),
            ..self
        }
    }
}

impl std::fmt::Debug for SubAgentPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgentPlace")
            .field("depth", &self.depth)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

pub use intendant_store::SharedStore;

/// What every session of one process shares: the state root, the runtime binary, where global
/// configuration lives, and the environment key and endpoint look-ups see.
#[derive(Clone)]
pub struct AssemblyEnv {
    /// The state root (`$INTENDANT_HOME`).
    pub home: PathBuf,
    /// The runtime binary (`None`: `$INTENDANT_RUNTIME`, else next to this program).
    pub runtime_path: Option<PathBuf>,
    /// The global configuration directory (`~/.config/intendant`).
    pub config_dir: Option<PathBuf>,
    /// The process environment as it was at start (credentials included; never logged).
    pub process_env: BTreeMap<String, String>,
    /// The state root's database, opened once per process on first use (workflow
    /// checkpoints, the memory tools; the daemon's agenda shares the same one). When it cannot
    /// be opened a session runs without the memory tools, and says so.
    pub store: intendant_store::SharedStore,
}

impl std::fmt::Debug for AssemblyEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values include API keys.
        f.debug_struct("AssemblyEnv")
            .field("home", &self.home)
            .field("runtime_path", &self.runtime_path)
            .field("config_dir", &self.config_dir)
            .field("process_env", &self.process_env.keys().collect::<Vec<_>>())
            .field("store", &self.store)
            .finish()
    }
}

impl AssemblyEnv {
    /// This process's: `home`, the runtime located at assembly, `~/.config/intendant`, the
    /// environment as [`crate::secrets`] kept it, and the state root's database, opened here.
    pub fn from_process(home: PathBuf) -> AssemblyEnv {
        AssemblyEnv {
            store: intendant_store::SharedStore::new(&home),
            home,
            runtime_path: None,
            config_dir: crate::dotenv::config_dir(),
            process_env: crate::secrets::vars().into_iter().collect(),
        }
    }

    /// Whether `name` is set non-empty in the environment.
    fn flag(&self, name: &str) -> bool {
        self.process_env.get(name).is_some_and(|v| !v.is_empty())
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, AssembleError> {
        match self.process_env.get(name) {
            Some(v) if !v.trim().is_empty() => {
                v.trim().parse().map(Some).map_err(|_| {
                    AssembleError::Config(format!("{name}={v:?} is not a valid number"))
                })
            }
            Some(_) | None => Ok(None),
        }
    }
}

/// Why a session could not be assembled; the kind is the exit category.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AssembleError {
    /// Unusable configuration or request (bad flags, untrusted settings, unknown session).
    #[error("{0}")]
    Config(String),
    /// Something needed failed (the runtime is missing, the log cannot be created).
    #[error("{0}")]
    Failed(String),
}

impl AssembleError {
    fn config(message: impl std::fmt::Display) -> AssembleError {
        AssembleError::Config(message.to_string())
    }

    fn failed(message: impl std::fmt::Display) -> AssembleError {
        AssembleError::Failed(message.to_string())
    }
}

/// How untrusted security-relevant project settings are handled.
pub enum TrustCheck<'a> {
    /// Each untrusted file is put to this (a human at a terminal); `true` trusts it.
    Ask(&'a mut dyn FnMut(&Untrusted) -> bool),
    /// Refused with an error naming the files and `intendant trust` (headless).
    Refuse,
}

/// A session ready to run: pass `start` and `backend` to [`run_session`](super::run_session).
pub struct AssembledSession {
    /// What `session_started` announces.
    pub start: SessionStart,
    /// What runs the turns.
    pub backend: Box<dyn SessionBackend>,
    /// Which backend that is, as [`choose_backend`] chose it.
    pub chosen_backend: Backend,
    /// The session's record (its event writer is the caller's to spawn on its bus).
    pub log: SessionLog,
    /// The session's process containment: end it once the session ended.
    pub containment: SessionContainment,
    /// Whether a human can answer questions now (a frontend clears it when its input ends).
    pub human_available: Arc<AtomicBool>,
    /// The session's autonomy level, as its approval gate reads it (a sub-agent's is held under
    /// its parent's).
    pub autonomy: SharedLevel,
    /// Warnings for the user, in the order they arose.
    pub notes: Vec<String>,
    /// Where the session checkpoints its project around every turn that can change files
    /// (`None`: a trusted `[checkpoints] enabled = false`).
    pub checkpoints: Option<crate::checkpoint::CheckpointPlan>,
    /// Interrupts the session's turn or stops the session (signals, `ctl interrupt`, `ctl stop`,
    /// daemon shutdown): the backend holds a clone.
    pub cancel: SessionCancel,
}

/// What runs the turns, decided before the session directory exists.
enum Plan<'a> {
    /// Our own loop with this provider.
    Native(ProviderSetup),
    /// The external agent CLI of this profile (and, for `acp`, command line), built by this
    /// factory.
    Agent(String, Vec<String>, &'a dyn WorkerFactory),
}

impl Plan<'_> {
    /// The provider and model the session runs as: the native loop's, or the agent CLI's name
    /// and the model asked for (`model`; none: the CLI's own default, recorded as empty).
    fn runs_as(&self, model: Option<&str>) -> (String, String) {
        match self {
            Plan::Native(setup) => (setup.name.clone(), setup.model.clone()),
            Plan::Agent(name, _, _) => (name.clone(), model.unwrap_or_default().to_owned()),
        }
    }
}

/// The provider and how it is named and authenticated.
struct ProviderSetup {
    provider: Arc<dyn ChatProvider>,
    name: String,
    model: String,
    auth_hint: Option<String>,
    /// The tool mode of this wire and model when `[provider] tool_mode` is unset.
    default_tool_mode: ToolMode,
}

/// Assembles the session `spec` asks for. Untrusted project settings go to `trust`; an agent
/// backend is built by `workers` (none: an agent backend is an error).
// One piece: every step is a named function; what is left here is their order (everything
// validated before the session directory exists), which is the point of reading it whole.
pub fn assemble(
    spec: SessionSpec,
    env: &AssemblyEnv,
    trust: TrustCheck<'_>,
    workers: Option<&dyn WorkerFactory>,
) -> Result<AssembledSession, AssembleError> {
    let task = task_text(spec.task.as_deref(), spec.resume.is_some())?;
    let lookup = EnvLookup::load_with(
        env.process_env.clone(),
        &spec.cwd,
        env.config_dir.as_deref(),
    );
    let mut notes = Vec::new();
    let (git, project_root) = find_project(&spec.cwd, &mut notes);
    let project_config = trusted_config(env, &project_root, &lookup, trust)?;
    // Validated before the session directory exists, so a bad [approval] leaves no session.
    let policy = approval_policy(&spec, &project_config)?;
    let egress_rules =
        EgressPolicy::new(&project_config.sandbox.network.egress).map_err(AssembleError::config)?;
    let mcp_servers = crate::mcp_client::configured_servers(
        &project_config.mcp_servers,
        env.config_dir.as_deref(),
    )
    .map_err(AssembleError::config)?;
    let runtime_path = runtime_path(env)?;
    let recorded = recorded_session(spec.resume.as_ref(), env, &project_root)?;
    if let Some(recorded) = &recorded {
        notes
            .extend(resume::check_project(recorded, &project_root).map_err(AssembleError::Config)?);
    }
    // A resume that names none keeps the network and the budget it ran with.
    let choice = spec.network.or_else(|| {
        let ran_with = recorded.as_ref().and_then(|r| r.network);
        ran_with.map(NetworkChoice::Recorded)
    });
    let network =
        decide_mode(choice, project_config.sandbox.network.mode).map_err(AssembleError::config)?;
    let spec = SessionSpec {
        max_tokens: spec
            .max_tokens
            .or(recorded.as_ref().and_then(|r| r.token_budget)),
        sub_agents: spec
            .sub_agents
            .clone()
            .map(|place| place.resumed(recorded.as_ref())),
        // A session that orchestrated goes on doing so.
        orchestrate: spec.orchestrate || recorded.as_ref().is_some_and(|r| r.orchestrated),
        ..spec
    };
    let task = resumed_task(recorded.as_ref(), env, task);
    let backend = session_backend(&spec, recorded.as_ref(), &project_config)?;
    let plan = plan_backend(&backend, &spec, &lookup, workers)?;
    let (provider_name, model) = plan.runs_as(spec.model.as_deref());
    let skills = session_skills(&plan, &project_root, env);
    let (log, conversation, resumed) = open_session(
        &spec,
        env,
        recorded.as_ref(),
        (&project_root, skills.catalog().as_deref()),
        &task,
        (&backend, &provider_name, &model),
    )?;
    let sandbox = sandbox_paths(
        &spec,
        &project_config,
        &project_root,
        &log,
        env,
        lookup.loaded(),
        &mut notes,
    );
    let (runner, containment, egress) = session_runner(
        runtime_path,
        sandbox,
        network,
        &project_config,
        (&project_root, git.as_ref()),
        &log,
        (
            env,
            EgressInputs {
                approvals: &policy,
                interactive: spec.interactive,
                rules: egress_rules,
                allow_list: ProjectAllowList::new(&env.home, &project_root),
            },
        ),
        &mut notes,
    )?;
    let hooks = session_hooks(&project_config, &project_root, &log, &runner)?;
    let memory = session_memory(
        env,
        &log,
        &project_root,
        &policy,
        spec.interactive,
        &mut notes,
    );
    if let Some(memory) = memory.as_ref().filter(|_| spec.keep_memory_proposals) {
        memory.keep_unanswered();
    }
    let mut approval_gate = ApprovalGate::new(policy, spec.interactive);
    approval_gate.set_hooks(hooks.clone());
    let autonomy = approval_gate.level_handle();
    // The level it starts at (a resume's as asked now), so a restarted daemon lists it; later
    // changes are recorded from their `autonomy_changed` events. Its network and budget, which
    // a resume keeps.
    log.update_meta(|m| {
        m.autonomy = Some(autonomy.get());
        m.network = Some(network);
        m.token_budget = spec.max_tokens;
    })
    .map_err(AssembleError::failed)?;
    let cancel = SessionCancel::new();
    log.stop_on_write_error(&cancel);
    let human_available = Arc::new(AtomicBool::new(false));
    let checkpoints = checkpoint_plan(env, &project_root, &project_config, &runner);
    let start = SessionStart {
        session_id: log.id().to_owned(),
        task,
        provider: provider_name,
        model,
        project_root: project_root.clone(),
        resumed,
        git,
        network,
    };
    let parts = BackendParts {
        spec: &spec,
        env,
        project_root,
        project_config: &project_config,
        log: &log,
        resumed,
        conversation,
        runner,
        approval_gate,
        autonomy: autonomy.clone(),
        human_available: Arc::clone(&human_available),
        cancel: cancel.clone(),
        skills,
        hooks,
        egress,
        mcp_servers,
        memory,
        checkpoints: checkpoints.clone(),
    };
    let runs_turns = match plan {
        Plan::Native(setup) => native_backend(setup, parts)?,
        Plan::Agent(name, command, workers) => agent_backend(&name, command, workers, parts)?,
    };
    Ok(AssembledSession {
        start,
        backend: runs_turns,
        chosen_backend: backend,
        log,
        containment,
        human_available,
        autonomy,
        notes,
        checkpoints,
        cancel,
    })
}

/// Where the session checkpoints its project: `project_config` passed the trust check, so
/// `[checkpoints] enabled = false` there is a human's choice.
fn checkpoint_plan(
    env: &AssemblyEnv,
    project_root: &Path,
    project_config: &ProjectConfig,
    runner: &RuntimeRunner,
) -> Option<crate::checkpoint::CheckpointPlan> {
    project_config
        .checkpoints
        .enabled()
        .then(|| crate::checkpoint::CheckpointPlan {
            home: env.home.clone(),
            project: project_root.to_path_buf(),
            config: project_config.checkpoints.clone(),
            placement: runner.config().placement.clone(),
        })
}

/// The session's hooks, each run inside the session's walls (or, opted out, with its scrubbed
/// environment and cgroup only), in the project root.
fn session_hooks(
    project_config: &ProjectConfig,
    project_root: &Path,
    log: &SessionLog,
    runner: &RuntimeRunner,
) -> Result<Hooks, AssembleError> {
    let config = runner.config();
    let launcher = SessionLauncher::new(crate::sandboxed::Walls::of_session(config));
    Hooks::new(
        project_config.hooks.clone(),
        project_root,
        log.id(),
        config.sandbox_write_paths.is_some(),
        Arc::new(launcher),
    )
    .map_err(AssembleError::Config)
}

/// The session's memory tools over the process's database (none, with a note, when it could
/// not be opened: the session runs without them). Its project scope is the canonical root.
fn session_memory(
    env: &AssemblyEnv,
    log: &SessionLog,
    project_root: &Path,
    policy: &ApprovalPolicy,
    interactive: bool,
    notes: &mut Vec<String>,
) -> Option<Arc<crate::memory::SessionMemory>> {
    match env.store.get() {
        Ok(store) => {
            let root = std::fs::canonicalize(project_root).unwrap_or_else(|_| project_root.into());
            Some(crate::memory::SessionMemory::new(
                intendant_store::memory::Memories::new(store),
                log.id(),
                &root,
                policy.clone(),
                interactive,
            ))
        }
        Err(e) => {
            notes.push(format!("the memory tools are off for this session: {e}"));
            None
        }
    }
}

/// The project a session started in `cwd` works on: its repository and the project root (the
/// repository's work tree, else `cwd`). The repository is resolved once, before any command of
/// the session runs: every git the controller runs for it later uses these directories, and
/// its pointers are put back after each batch ([`crate::git`]).
fn find_project(cwd: &Path, notes: &mut Vec<String>) -> (Option<GitRepo>, PathBuf) {
    let git = match GitRepo::discover(cwd) {
        Ok(repo) => repo,
        Err(e) => {
            notes.push(format!("{e}: the session works without its repository"));
            None
        }
    };
    notes.extend(git.iter().flat_map(|g| g.notes().iter().cloned()));
    let project_root = git
        .as_ref()
        .map_or_else(|| cwd.to_path_buf(), |g| g.work_tree().to_path_buf());
    (git, project_root)
}

/// The project's configuration, its untrusted security-relevant settings put to `trust`.
fn trusted_config(
    env: &AssemblyEnv,
    project_root: &Path,
    lookup: &EnvLookup,
    trust: TrustCheck<'_>,
) -> Result<ProjectConfig, AssembleError> {
    let ask = match trust {
        TrustCheck::Ask(ask) => Some(ask),
        TrustCheck::Refuse => None,
    };
    Ok(checked_project(&env.home, project_root, lookup, ask)
        .map_err(AssembleError::Config)?
        .config)
}

/// The session's approval policy at its level (a sub-agent's held under its parent's).
fn approval_policy(
    spec: &SessionSpec,
    project_config: &ProjectConfig,
) -> Result<ApprovalPolicy, AssembleError> {
    let level = match spec
        .sub_agents
        .as_ref()
        .and_then(|p| p.parent_level.as_ref())
    {
        Some(parent) => SharedLevel::under(parent, spec.autonomy),
        None => SharedLevel::new(spec.autonomy),
    };
    ApprovalPolicy::new(level, &project_config.approval).map_err(AssembleError::config)
}

/// The runtime binary: the one `env` names, else `$INTENDANT_RUNTIME` or the one next to this
/// program.
fn runtime_path(env: &AssemblyEnv) -> Result<PathBuf, AssembleError> {
    match &env.runtime_path {
        Some(path) => Ok(path.clone()),
        None => own_runtime().map_err(AssembleError::failed),
    }
}

/// The recorded session `resume` names (`None`: a new session).
fn recorded_session(
    resume: Option<&ResumeFrom>,
    env: &AssemblyEnv,
    project_root: &Path,
) -> Result<Option<SessionMeta>, AssembleError> {
    match resume {
        Some(ResumeFrom::Id(id)) => Ok(Some(
            resume::recorded(&env.home, id).map_err(AssembleError::config)?,
        )),
        Some(ResumeFrom::Latest) => Ok(Some(
            resume::latest(&env.home, project_root).map_err(AssembleError::config)?,
        )),
        None => Ok(None),
    }
}

/// The backend [`choose_backend`] chooses for `spec`: the one `recorded` ran on when it is
/// resumed.
fn session_backend(
    spec: &SessionSpec,
    recorded: Option<&SessionMeta>,
    project_config: &ProjectConfig,
) -> Result<Backend, AssembleError> {
    choose_backend(
        spec.backend.as_ref(),
        recorded.and_then(SessionMeta::recorded_backend).as_ref(),
        project_config.agent.default_backend.as_deref(),
        spec.default_backend.as_ref(),
    )
    .map_err(AssembleError::Config)
}

/// What runs the turns on `backend`: the native loop with the provider selected for it, or the
/// external agent CLI (which needs `workers`).
fn plan_backend<'a>(
    backend: &Backend,
    spec: &SessionSpec,
    lookup: &EnvLookup,
    workers: Option<&'a dyn WorkerFactory>,
) -> Result<Plan<'a>, AssembleError> {
    match backend {
        Backend::Native => {
            let selection = select(spec.provider.as_deref(), spec.model.as_deref(), lookup)
                .map_err(AssembleError::config)?;
            Ok(Plan::Native(setup_provider(
                selection,
                spec.scenario.as_deref(),
            )?))
        }
        Backend::Agent { name, command } => {
            let workers = workers.ok_or_else(|| {
                AssembleError::Config(format!(
                    "agent backend {name:?} is not available in this build (no worker factory)"
                ))
            })?;
            Ok(Plan::Agent(name.clone(), command.clone(), workers))
        }
    }
}

/// What a backend is built from: the session as assembled so far, and the handles its
/// frontends share with it.
struct BackendParts<'a> {
    spec: &'a SessionSpec,
    env: &'a AssemblyEnv,
    project_root: PathBuf,
    project_config: &'a ProjectConfig,
    log: &'a SessionLog,
    /// Whether an earlier session is continued.
    resumed: bool,
    conversation: Conversation,
    runner: RuntimeRunner,
    approval_gate: ApprovalGate,
    autonomy: SharedLevel,
    human_available: Arc<AtomicBool>,
    cancel: SessionCancel,
    /// The skills `invoke_skill` answers from (none for an agent backend).
    skills: SkillSet,
    /// The owner's hooks (the approval gate holds them too).
    hooks: Hooks,
    /// The session's side of its egress proxy (`proxy` mode with a namespace).
    egress: Option<Arc<SessionEgress>>,
    /// The MCP servers a native session starts (an agent backend has its own).
    mcp_servers: Vec<crate::mcp_client::McpServer>,
    /// The memory tools of a native session (an agent backend has none).
    memory: Option<Arc<crate::memory::SessionMemory>>,
    /// Where the project is checkpointed around each turn that can change files.
    checkpoints: Option<crate::checkpoint::CheckpointPlan>,
}

/// Intendant's own loop on `setup`'s provider, with the sub-agent tools when the session has a
/// place among sub-agents.
fn native_backend(
    setup: ProviderSetup,
    parts: BackendParts<'_>,
) -> Result<Box<dyn SessionBackend>, AssembleError> {
    let BackendParts {
        spec,
        env,
        project_root,
        project_config,
        log,
        resumed: _,
        conversation,
        runner,
        approval_gate,
        autonomy,
        human_available,
        cancel,
        skills,
        hooks,
        egress,
        mcp_servers,
        memory,
        checkpoints,
    } = parts;
    let context_window = env
        .number::<u64>(CONTEXT_WINDOW_ENV)?
        .unwrap_or_else(|| capabilities(&setup.model).context_window);
    let system_prompt = system_prompt(spec, &project_root, env.config_dir.as_deref());
    let sub_agents = spec.sub_agents.as_ref().map(|place| {
        SubAgents::new(
            Arc::clone(&place.host),
            log.id(),
            spec.cwd.display().to_string(),
            autonomy,
            place.depth,
            project_config.subagents,
        )
    });
    let cfg = LoopConfig {
        session_id: log.id().to_owned(),
        max_output_tokens: Some(
            capabilities(&setup.model)
                .max_output_tokens
                .min(MAX_OUTPUT_TOKENS),
        ),
        provider: setup.provider,
        model: setup.model,
        system_prompt,
        runner,
        context_window,
        budget_tokens: spec.max_tokens,
        max_turns: spec.max_turns,
        reply_limits: project_config.limits.reply_limits(),
        tool_mode: project_config
            .provider
            .tool_mode
            .unwrap_or(setup.default_tool_mode),
        human_available,
        wait_for_follow_ups: spec.wait_for_follow_ups,
        stream_restart_delay: Duration::from_millis(500),
        session_log: Some(log.clone()),
        auth_hint: setup.auth_hint,
        approval_gate,
        sub_agents,
        cancel,
        checkpoints,
        skills,
        hooks,
        egress,
        mcp: crate::mcp_client::McpPlan {
            servers: mcp_servers,
            process_env: Arc::new(env.process_env.clone()),
        },
        workflow: Some(crate::workflow::WorkflowCheckpoints::new(
            env.store.clone(),
            log.id(),
            spec.sub_agents.as_ref().and_then(|p| p.parent.clone()),
        )),
        memory,
    };
    Ok(Box::new(DirectBackend { cfg, conversation }))
}

/// The system prompt: the project's prompt cascade, then the orchestration prompt when asked
/// for, then a child's role prompt.
fn system_prompt(spec: &SessionSpec, project_root: &Path, config_dir: Option<&Path>) -> String {
    let (mut system_prompt, _) = prompts::system_prompt(project_root, config_dir);
    if spec.orchestrate {
        system_prompt.push_str("\n\n");
        system_prompt.push_str(&prompts::orchestrate_prompt(project_root, config_dir));
    }
    if let Some(place) = spec.sub_agents.as_ref().filter(|p| p.depth > 0) {
        system_prompt.push_str("\n\n");
        system_prompt.push_str(&prompts::sub_agent_prompt(
            place.role.as_deref(),
            project_root,
            config_dir,
        ));
    }
    system_prompt
}

/// The external agent CLI `name` (for `acp`, its `command` line), built by `workers`.
fn agent_backend(
    name: &str,
    command: Vec<String>,
    workers: &dyn WorkerFactory,
    parts: BackendParts<'_>,
) -> Result<Box<dyn SessionBackend>, AssembleError> {
    let BackendParts {
        spec,
        env: _,
        project_root,
        project_config,
        log,
        resumed,
        conversation: _,
        runner,
        approval_gate,
        autonomy: _,
        human_available: _,
        cancel,
        skills: _,
        hooks: _,
        egress: _,
        mcp_servers: _,
        memory: _,
        checkpoints,
    } = parts;
    let ctx = WorkerContext {
        command,
        session_id: log.id().to_owned(),
        project_root,
        model: spec.model.clone(),
        approval_gate,
        session_log: log.clone(),
        resumed_from: resumed.then(|| log.id().to_owned()),
        cancel,
        agent_config: project_config.agent.workers.clone(),
        checkpoints,
        placement: runner.config().placement.clone(),
        guard: Some(runner.config().runtime_path.clone()),
    };
    let log_dir = log.dir().to_path_buf();
    workers.build(name, ctx).map_err(|e| {
        // Nothing ran: a new session the worker could not be set up for is not kept (a resumed
        // one keeps its record).
        if !resumed {
            let _ = std::fs::remove_dir_all(&log_dir);
        }
        AssembleError::Config(e)
    })
}

/// What runs a session's turns. A resumed session continues on the backend `recorded` in its
/// log (a caller naming another is refused, never silently switched); otherwise the first that
/// names one: the caller's choice (`--agent`, a start request's), the project's `[agent]
/// default_backend`, the host's default (the daemon's `[daemon] default_backend`), else
/// Intendant's own loop.
pub fn choose_backend(
    requested: Option<&Backend>,
    recorded: Option<&Backend>,
    project_default: Option<&str>,
    host_default: Option<&Backend>,
) -> Result<Backend, String> {
    if let Some(recorded) = recorded {
        // Naming the recorded worker is enough; a command line given must be its own.
        let other = |asked: &Backend| {
            asked.name() != recorded.name()
                || (!asked.command().is_empty() && asked.command() != recorded.command())
        };
        return match requested {
            Some(asked) if other(asked) => Err(format!(
                "the resumed session ran on {}: it continues only there, so name that backend \
                 (`--agent {}`) or none, or start a new session for {}",
                recorded.name(),
                recorded.name(),
                asked.name()
            )),
            Some(_) | None => Ok(recorded.clone()),
        };
    }
    Ok(match (requested, project_default, host_default) {
        (Some(backend), _, _) => backend.clone(),
        (None, Some(name), _) => Backend::named(name),
        (None, None, Some(backend)) => backend.clone(),
        (None, None, None) => Backend::Native,
    })
}

/// The task text: the one given, else (when resuming) a request to go on.
fn task_text(task: Option<&str>, resuming: bool) -> Result<String, AssembleError> {
    match task.filter(|t| !t.trim().is_empty()) {
        Some(t) => Ok(t.to_owned()),
        None if resuming => Ok(CONTINUE_TASK.to_owned()),
        None => Err(AssembleError::config(
            "no task given: run `intendant \"what to do\"` (see --help)",
        )),
    }
}

/// The task a round starts with: `task`, but a resumed session's conversation is first given
/// what it lacks: the task it was started with, when it [never ran](SessionMeta::never_ran),
/// and the follow-ups sent to it that it never took ([`unsent_follow_ups`]: its daemon stopped
/// before a round began with them), joined as the loop joins follow-ups that arrive together.
fn resumed_task(recorded: Option<&SessionMeta>, env: &AssemblyEnv, task: String) -> String {
    let Some(meta) = recorded else {
        return task;
    };
    let dir = logs_dir(&env.home).join(&meta.id);
    let mut lacking = Vec::new();
    if meta.never_ran(&dir) {
        lacking.push(meta.task.clone());
    }
    lacking.extend(unsent_follow_ups(&dir).unwrap_or_default());
    if lacking.is_empty() {
        return task;
    }
    if task != CONTINUE_TASK && !lacking.contains(&task) {
        lacking.push(task);
    }
    lacking.join("\n\n")
}

fn setup_provider(
    selection: Selection,
    scenario: Option<&Path>,
) -> Result<ProviderSetup, AssembleError> {
    match selection.choice {
        ProviderChoice::Mock => {
            let path = scenario.ok_or_else(|| {
                AssembleError::config(
                    "the mock provider needs --scenario FILE (a fake-model scenario; a resume \
                     of a session that ran on it, which keeps no scenario, names one again)",
                )
            })?;
            let provider = Scenario::load(path)
                .and_then(ScriptedProvider::new)
                .map_err(|e| AssembleError::config(format!("scenario {}: {e}", path.display())))?;
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
                default_tool_mode: ToolMode::Native,
            })
        }
        ProviderChoice::Wire(kind) => {
            let config = selection
                .config
                .ok_or_else(|| AssembleError::config("no provider configuration"))?;
            let auth_hint = Some(match &config.api_key {
                Some(key) => format!("{} ({})", kind.api_key_env(), mask_key(key)),
                None => format!("{} (unset)", kind.api_key_env()),
            });
            let provider = build_provider(kind, config).map_err(AssembleError::config)?;
            Ok(ProviderSetup {
                provider,
                name: kind.as_str().to_owned(),
                default_tool_mode: default_tool_mode(kind, &selection.model),
                model: selection.model,
                auth_hint,
            })
        }
    }
}

/// The skills a session on `plan` offers: the native loop's, found in the project and the
/// user's config directory; an external agent CLI has skills of its own and no
/// `invoke_skill`.
fn session_skills(plan: &Plan<'_>, project_root: &Path, env: &AssemblyEnv) -> SkillSet {
    match plan {
        Plan::Native(_) => SkillSet::discover(project_root, env.config_dir.as_deref()),
        Plan::Agent(..) => SkillSet::default(),
    }
}

/// The session log (new, or reopened when `recorded` is the session to resume) and the
/// conversation to continue; `project` is the project root and the skill catalog a new
/// conversation's context lists; `runs_on` is the backend, provider and model the log records.
fn open_session(
    spec: &SessionSpec,
    env: &AssemblyEnv,
    recorded: Option<&SessionMeta>,
    project: (&Path, Option<&str>),
    task: &str,
    runs_on: (&Backend, &str, &str),
) -> Result<(SessionLog, Conversation, bool), AssembleError> {
    let (backend, provider_name, model) = runs_on;
    let (project_root, catalog) = project;
    match recorded {
        Some(recorded) => {
            let state =
                resume::resume_by_id(&env.home, &recorded.id).map_err(AssembleError::config)?;
            // Records older than the field learn what they resumed on.
            state
                .log
                .update_meta(|m| m.backend = Some(backend.clone()))
                .map_err(AssembleError::failed)?;
            Ok((state.log, Conversation::from_items(state.items), true))
        }
        None => {
            let place = spec.sub_agents.as_ref();
            let meta = SessionMeta {
                parent: place.and_then(|p| p.parent.clone()),
                role: place.and_then(|p| p.role.clone()),
                depth: place.map_or(0, |p| p.depth),
                orchestrated: spec.orchestrate,
                backend: Some(backend.clone()),
                ..SessionMeta::new(project_root, task, model, provider_name)
            };
            let log = SessionLog::create(&env.home, meta).map_err(AssembleError::failed)?;
            let context = prompts::context_message(
                &spec.cwd,
                project_root,
                env.config_dir.as_deref(),
                catalog,
            );
            let conversation = Conversation::new(context);
            for item in conversation.items() {
                let _ = log.append_conversation(item);
            }
            Ok((log, conversation, false))
        }
    }
}

/// The sandbox write set (`None` without the sandbox), with a note when the session records
/// would lie inside it, and what commands must not read.
fn sandbox_paths(
    spec: &SessionSpec,
    project_config: &ProjectConfig,
    project_root: &Path,
    log: &SessionLog,
    env: &AssemblyEnv,
    env_files: &[PathBuf],
    notes: &mut Vec<String>,
) -> Option<(Vec<PathBuf>, Vec<ReadMask>)> {
    sandbox_enabled(spec.sandbox, &project_config.sandbox).then(|| {
        let extra: Vec<PathBuf> = project_config
            .sandbox
            .extra_write_paths
            .iter()
            .chain(&spec.extra_write_paths)
            .map(|p| absolutize(project_root, p))
            .collect();
        let paths = WriteRoots::from_env(
            Some(project_root.to_path_buf()),
            log.artifacts_dir().to_path_buf(),
        )
        .write_paths(&extra);
        let home = &env.home;
        if let Some(root) = write_root_covering(&paths, &logs_dir(home)) {
            notes.push(format!(
                "the session records in {} lie inside the sandbox write root {}, so \
                 sandboxed commands can rewrite them; set INTENDANT_HOME outside every write root",
                logs_dir(home).display(),
                root.display()
            ));
        }
        let scope = ReadScope::from_env(home, env.config_dir.as_deref());
        let (masks, read_notes) = read_masks(
            &scope,
            &ReadRequest {
                project_root,
                write_paths: &paths,
                env_files,
                deny_read: &project_config.sandbox.deny_read,
                allow_read: &project_config.sandbox.allow_read,
            },
        );
        notes.extend(read_notes);
        (paths, masks)
    })
}

/// The session's runtime runner, its runtimes contained in the session's process groups
/// (everything they start is killed when the containment is ended or dropped).
#[allow(clippy::too_many_arguments)] // each is one decided piece of the session; a struct would only rename them
fn session_runner(
    runtime_path: PathBuf,
    sandbox: Option<(Vec<PathBuf>, Vec<ReadMask>)>,
    mode: NetworkMode,
    project_config: &ProjectConfig,
    (project_root, git): (&Path, Option<&GitRepo>),
    log: &SessionLog,
    (env, egress_inputs): (&AssemblyEnv, EgressInputs<'_>),
    notes: &mut Vec<String>,
) -> Result<
    (
        RuntimeRunner,
        SessionContainment,
        Option<Arc<SessionEgress>>,
    ),
    AssembleError,
> {
    let (sandbox_write_paths, sandbox_read_masks) = match sandbox {
        Some((paths, masks)) => (Some(paths), masks),
        None => (None, Vec::new()),
    };
    let batch_timeout = env
        .number::<u64>(BATCH_TIMEOUT_ENV)?
        .map_or(DEFAULT_BATCH_TIMEOUT, Duration::from_secs);
    let mut containment = SessionContainment::create(log.id(), &project_config.limits);
    containment.guard_git(git.cloned());
    notes.extend(containment.notes().iter().cloned());
    let placement = containment.placement();
    let mut command_env = inherited_env(std::env::vars_os());
    let mut egress = None;
    let netns = match (&sandbox_write_paths, mode.own_namespace()) {
        (Some(_), true) => {
            let proxy = match mode {
                NetworkMode::Proxy => Some(egress_proxy(log, egress_inputs)?),
                NetworkMode::None | NetworkMode::Host => None,
            };
            let holder = HolderSpec {
                runtime_path: runtime_path.clone(),
                relay: proxy
                    .as_ref()
                    .map(|(proxy, _)| proxy.handoff_socket().to_path_buf()),
                simulate_unavailable: env.flag(crate::network::SIMULATE_NO_NETNS_ENV),
            };
            let started = session_network(
                &holder,
                &placement,
                project_config.sandbox.require_full,
                notes,
            )?;
            match started {
                // The kernel refused the namespace: Landlock's TCP rules are the wall left.
                None => {
                    egress = landlock_fallback(proxy, &mut command_env, &mut containment, notes);
                    None
                }
                Some(mut network) => {
                    if let Some(why) = network.relay_error() {
                        notes.push(format!(
                        "commands have a network of their own but no way out of it, as with `network = \"none\"`: the session's egress proxy could not be handed the relay port ({why})"
                    ));
                    }
                    // Without a namespace the proxy would guard nothing: it ends with `proxy` here.
                    if let (Some((proxy, session)), Some(port)) = (proxy, network.relay_port()) {
                        network.hold_egress(proxy);
                        command_env = with_proxy_env(std::mem::take(&mut command_env), port);
                        // The runtime's `browse` goes through the proxy too (a control variable:
                        // commands never see it).
                        command_env.push((EGRESS_PROXY_PORT_ENV.into(), port.to_string().into()));
                        egress = Some(session);
                    }
                    let netns = network.netns();
                    containment.hold_network(network);
                    Some(netns)
                }
            }
        }
        // Without the sandbox, or with `host`, commands share the host's network as asked.
        (Some(_), false) | (None, _) => None,
    };
    let runner = RuntimeRunner::new(RunnerConfig {
        runtime_path,
        cwd: project_root.to_path_buf(),
        log_dir: log.artifacts_dir().to_path_buf(),
        sandbox_write_paths,
        sandbox_read_masks,
        sandbox_require_full: project_config.sandbox.require_full,
        user_display_granted: false,
        env: command_env,
        batch_timeout,
        output_cap: OUTPUT_CAP_BYTES,
        placement: Some(placement),
        git: git.cloned(),
        netns,
    });
    Ok((runner, containment, egress))
}

/// Where a session cannot have a network of its own: its commands' TCP connects limited by
/// Landlock (ABI 4+) to the egress proxy's relay port on the host's loopback (`proxy`), or to
/// none (`none`); returns the session's side of the proxy when it serves.
fn landlock_fallback(
    proxy: Option<(EgressProxy, Arc<SessionEgress>)>,
    command_env: &mut Vec<(OsString, OsString)>,
    containment: &mut SessionContainment,
    notes: &mut Vec<String>,
) -> Option<Arc<SessionEgress>> {
    const LIMITS: &str = "Landlock limits ports, not addresses, and neither UDP nor a listening port; on a kernel without Landlock TCP rules (before ABI 4) each runtime says it cannot";
    let mut egress = None;
    let mut ports = String::new();
    match proxy {
        Some((mut proxy, session)) => {
            let relay = tokio::runtime::Handle::try_current()
                .map_err(|e| e.to_string())
                .and_then(|rt| proxy.serve_host_relay(&rt).map_err(|e| e.to_string()));
            match relay {
                Ok(port) => {
                    *command_env = with_proxy_env(std::mem::take(command_env), port);
                    command_env.push((EGRESS_PROXY_PORT_ENV.into(), port.to_string().into()));
                    ports = port.to_string();
                    containment.hold_egress(proxy);
                    egress = Some(session);
                    notes.push(format!(
                        "the commands' TCP connects are limited to port {port}, the egress proxy's on the host's loopback ({LIMITS})"
                    ));
                }
                Err(why) => notes.push(format!(
                    "the egress proxy cannot listen on the host's loopback ({why}): the commands' TCP connects are all refused ({LIMITS})"
                )),
            }
        }
        None => notes.push(format!(
            "with `network = \"none\"` the commands' TCP connects are all refused ({LIMITS})"
        )),
    }
    command_env.push((SANDBOX_CONNECT_PORTS_ENV.into(), ports.into()));
    egress
}

/// What a `proxy` session's egress proxy is made of.
struct EgressInputs<'a> {
    /// The session's approval policy (its level shared with the gate).
    approvals: &'a ApprovalPolicy,
    /// Whether a human can answer.
    interactive: bool,
    /// `[sandbox.network]`, validated before the session existed.
    rules: EgressPolicy,
    /// Where a host a human allows for good is written.
    allow_list: ProjectAllowList,
}

/// The session's egress proxy, serving its socket in the session's directory, and the
/// session's side of it (approvals and events, attached to the bus when the session runs).
fn egress_proxy(
    log: &SessionLog,
    inputs: EgressInputs<'_>,
) -> Result<(EgressProxy, Arc<SessionEgress>), AssembleError> {
    let EgressInputs {
        approvals,
        interactive,
        rules,
        allow_list,
    } = inputs;
    let socket = crate::egress::handoff_path(log.dir()).map_err(AssembleError::config)?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
        AssembleError::failed(format!("the egress proxy needs the async runtime: {e}"))
    })?;
    let session = SessionEgress::new(log.id(), approvals.clone(), interactive, Some(allow_list));
    let proxy = EgressProxy::start(
        &socket,
        rules,
        Arc::clone(&session) as Arc<dyn crate::egress::EgressHooks>,
        ProxyLimits::default(),
        Lookup::System,
        &runtime,
    )
    .map_err(|e| {
        AssembleError::failed(format!(
            "cannot start the egress proxy on {}: {e}",
            socket.display()
        ))
    })?;
    Ok((proxy, session))
}

/// The session's own network, or `None` with a note where the kernel refuses one (a refusal
/// under `[sandbox] require_full`).
fn session_network(
    spec: &HolderSpec,
    placement: &crate::containment::Placement,
    require_full: bool,
    notes: &mut Vec<String>,
) -> Result<Option<SessionNetwork>, AssembleError> {
    match SessionNetwork::start(spec, |pid| placement.place(pid)) {
        Ok(network) => Ok(Some(network)),
        Err(e) if require_full => Err(AssembleError::config(format!(
            "full sandbox required (`[sandbox] require_full = true`) but commands cannot have a network of their own: {e}; refusing to start; set `[sandbox] require_full = false` to run them on the host's network, or `[sandbox] network = \"host\"`"
        ))),
        Err(e) => {
            let why = match &e {
                NetworkError::Unavailable { .. } => "",
                NetworkError::Holder(_) => " (unexpected; please report it)",
            };
            notes.push(format!(
                "commands share the host's network (its loopback services and the LAN included): {e}{why}; set `[sandbox] require_full = true` to refuse to run instead"
            ));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_log::list_sessions;

    struct World {
        project: tempfile::TempDir,
        home: tempfile::TempDir,
    }

    impl World {
        fn new() -> World {
            let project = tempfile::tempdir().unwrap();
            std::fs::create_dir(project.path().join(".git")).unwrap();
            let scenario = r#"{"model": "fake-model", "turns": [{"text": "hi", "tool_calls": [
                {"name": "signal_done", "arguments": {"message": "ok"}}]}]}"#;
            std::fs::write(project.path().join("s.json"), scenario).unwrap();
            World {
                project,
                home: tempfile::tempdir().unwrap(),
            }
        }

        fn env(&self) -> AssemblyEnv {
            AssemblyEnv {
                home: self.home.path().to_path_buf(),
                // Never spawned by these tests; it only has to exist.
                runtime_path: Some(std::env::current_exe().unwrap()),
                config_dir: None,
                store: SharedStore::new(self.home.path()),
                process_env: BTreeMap::new(),
            }
        }

        fn spec(&self, backend: Backend) -> SessionSpec {
            SessionSpec {
                task: Some("do it".into()),
                cwd: self.project.path().to_path_buf(),
                autonomy: AutonomyLevel::Medium,
                provider: Some("mock".into()),
                model: None,
                scenario: Some(self.project.path().join("s.json")),
                sandbox: Some(false),
                max_tokens: None,
                max_turns: 5,
                resume: None,
                interactive: false,
                wait_for_follow_ups: false,
                keep_memory_proposals: false,
                backend: Some(backend),
                default_backend: None,
                orchestrate: false,
                sub_agents: None,
                extra_write_paths: Vec::new(),
                network: None,
            }
        }

        fn sessions(&self) -> usize {
            list_sessions(self.home.path()).map_or(0, |s| s.len())
        }
    }

    fn error(result: Result<AssembledSession, AssembleError>) -> AssembleError {
        match result {
            Ok(_) => panic!("assembled"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_mock_session_is_assembled_with_its_log() {
        let world = World::new();
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        assert_eq!(session.start.provider, "mock");
        assert_eq!(session.start.model, "fake-model");
        assert_eq!(session.start.task, "do it");
        assert!(!session.start.resumed);
        assert_eq!(session.start.session_id, session.log.id());
        assert!(session.log.dir().join("session_meta.json").is_file());
        assert_eq!(world.sessions(), 1);
    }

    #[test]
    fn a_mock_session_resumed_without_a_scenario_is_told_to_name_one() {
        let world = World::new();
        let first = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        let id = first.log.id().to_owned();
        drop(first);
        // The resume names no scenario; its provider is the one recorded (as the daemon
        // restores it).
        let mut spec = world.spec(Backend::Native);
        spec.scenario = None;
        spec.task = None;
        spec.resume = Some(ResumeFrom::Id(id));
        let e = error(assemble(spec, &world.env(), TrustCheck::Refuse, None));
        assert!(
            e.to_string()
                .contains("the mock provider needs --scenario FILE")
                && e.to_string()
                    .contains("a resume of a session that ran on it"),
            "{e}"
        );
    }

    #[test]
    fn a_database_that_cannot_be_opened_leaves_the_session_without_memory_tools_and_says_so() {
        let world = World::new();
        // A link in the database's place is refused, never followed.
        std::os::unix::fs::symlink("/nowhere", world.home.path().join("intendant.db")).unwrap();
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        let note = session
            .notes
            .iter()
            .find(|n| n.contains("the memory tools are off for this session"));
        assert!(
            note.is_some_and(|n| n.contains("not a regular file")),
            "{:?}",
            session.notes
        );
        // With the database there, no such note.
        std::fs::remove_file(world.home.path().join("intendant.db")).unwrap();
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        assert!(!session.notes.iter().any(|n| n.contains("memory tools")));
        assert!(world.home.path().join("intendant.db").exists());
    }

    #[test]
    fn checkpoints_go_off_only_by_a_trusted_project_file() {
        let world = World::new();
        let planned = |session: &AssembledSession| session.checkpoints.clone();
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        let plan = planned(&session).expect("checkpointed by default");
        assert_eq!(plan.home, world.home.path());
        std::fs::write(
            world.project.path().join("intendant.toml"),
            "[checkpoints]\nenabled = false\nmax_file_mib = 1\n",
        )
        .unwrap();
        let home = world.home.path();
        let project = world.project.path();
        // Untrusted: a headless start is refused, naming both, and so is a human's no.
        let e = error(assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        ));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("[checkpoints] enabled = false")
                && m.contains("max_file_mib = 1")),
            "{e}"
        );
        let mut no = |_: &Untrusted| false;
        error(assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Ask(&mut no),
            None,
        ));
        // What a rewind's own checkpoint and a collection use: the defaults until trusted.
        let untrusted = crate::rewind::project_checkpoint_config(home, project);
        assert!(untrusted.enabled());
        assert_eq!(
            untrusted.max_file_bytes(),
            crate::checkpoint::DEFAULT_MAX_FILE_MIB * 1024 * 1024
        );
        let mut yes = |_: &Untrusted| true;
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Ask(&mut yes),
            None,
        )
        .unwrap();
        assert!(planned(&session).is_none(), "trusted, the setting applies");
        let trusted = crate::rewind::project_checkpoint_config(home, project);
        assert!(!trusted.enabled());
        assert_eq!(trusted.max_file_bytes(), 1024 * 1024);
    }

    #[test]
    fn a_headless_start_refuses_untrusted_settings_before_any_session_exists() {
        let world = World::new();
        std::fs::write(
            world.project.path().join("intendant.toml"),
            "[sandbox]\nenabled = false\n",
        )
        .unwrap();
        let e = error(assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        ));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("intendant trust")),
            "{e}"
        );
        assert_eq!(world.sessions(), 0);
        // A human who says yes is asked once per file, and the session starts.
        let mut asked = 0;
        let mut yes = |_: &Untrusted| {
            asked += 1;
            true
        };
        assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Ask(&mut yes),
            None,
        )
        .unwrap();
        assert_eq!(asked, 1);
    }

    #[test]
    fn the_projects_default_backend_runs_a_session_that_names_none() {
        let world = World::new();
        std::fs::write(
            world.project.path().join("intendant.toml"),
            "[agent]\ndefault_backend = \"codex\"\n",
        )
        .unwrap();
        let mut spec = world.spec(Backend::Native);
        spec.backend = None;
        // No worker factory here: the codex backend it picked is refused, naming it.
        let e = error(assemble(spec, &world.env(), TrustCheck::Refuse, None));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("\"codex\"")),
            "{e}"
        );
        // A backend the caller names (`--agent`, a start request's) overrides it.
        let session = assemble(
            world.spec(Backend::Native),
            &world.env(),
            TrustCheck::Refuse,
            None,
        )
        .unwrap();
        assert_eq!(session.start.provider, "mock");
    }

    #[test]
    fn the_backend_is_the_callers_then_the_projects_then_the_hosts_then_native() {
        let codex = Backend::named("codex");
        let kimi = Backend::named("kimi");
        let choose = |requested, project, host| choose_backend(requested, None, project, host);
        // The caller's choice wins over the project's and the host's.
        assert_eq!(
            choose(Some(&Backend::Native), Some("codex"), Some(&kimi)),
            Ok(Backend::Native)
        );
        // The project's wins over the host's.
        assert_eq!(choose(None, Some("codex"), Some(&kimi)), Ok(codex.clone()));
        assert_eq!(
            choose(None, Some("native"), Some(&kimi)),
            Ok(Backend::Native)
        );
        // The host's when the project names none; else native.
        assert_eq!(choose(None, None, Some(&kimi)), Ok(kimi.clone()));
        assert_eq!(choose(None, None, None), Ok(Backend::Native));
    }

    #[test]
    fn a_resumed_session_keeps_its_recorded_backend_and_refuses_another() {
        let codex = Backend::named("codex");
        let kimi = Backend::named("kimi");
        // Recorded wins over the project's and the host's defaults.
        assert_eq!(
            choose_backend(None, Some(&codex), Some("native"), Some(&kimi)),
            Ok(codex.clone())
        );
        assert_eq!(
            choose_backend(Some(&codex), Some(&codex), None, None),
            Ok(codex.clone())
        );
        let refused = choose_backend(Some(&kimi), Some(&codex), None, None).unwrap_err();
        assert!(
            refused.contains("ran on codex") && refused.contains("--agent codex"),
            "{refused}"
        );
        assert!(choose_backend(Some(&Backend::Native), Some(&codex), None, None).is_err());
        assert!(choose_backend(Some(&codex), Some(&Backend::Native), None, None).is_err());
    }

    /// A resume that names neither keeps the budget and the network the session ran with (the
    /// network held to the project's settings now): a session its owner, a parent or a request
    /// bounded so was resumed with no budget, on the project's network.
    #[test]
    fn a_resume_keeps_the_budget_and_the_network_the_session_ran_with() {
        let world = World::new();
        let mut spec = world.spec(Backend::Native);
        spec.max_tokens = Some(1234);
        spec.network = Some(NetworkChoice::Requested(NetworkMode::None));
        let first = assemble(spec, &world.env(), TrustCheck::Refuse, None).unwrap();
        assert_eq!(first.start.network, NetworkMode::None);
        let id = first.start.session_id.clone();
        drop(first);
        let mut spec = world.spec(Backend::Native);
        spec.task = Some("go on".into());
        spec.resume = Some(ResumeFrom::Id(id.clone()));
        let resumed = assemble(spec, &world.env(), TrustCheck::Refuse, None).unwrap();
        assert_eq!(resumed.start.network, NetworkMode::None);
        let meta = resumed.log.meta();
        assert_eq!(
            (meta.network, meta.token_budget),
            (Some(NetworkMode::None), Some(1234))
        );
        drop(resumed);
        // Named on the resume, they are as named (within the project's settings).
        let mut spec = world.spec(Backend::Native);
        spec.task = Some("and on".into());
        spec.resume = Some(ResumeFrom::Id(id));
        spec.max_tokens = Some(99);
        spec.network = Some(NetworkChoice::Requested(NetworkMode::Proxy));
        let named = assemble(spec, &world.env(), TrustCheck::Refuse, None).unwrap();
        assert_eq!(named.start.network, NetworkMode::Proxy);
        assert_eq!(named.log.meta().token_budget, Some(99));
    }

    #[test]
    fn the_assembled_session_carries_the_backend_it_chose() {
        let world = World::new();
        std::fs::write(
            world.project.path().join("intendant.toml"),
            "[agent]\ndefault_backend = \"native\"\n",
        )
        .unwrap();
        let mut yes = |_: &Untrusted| true;
        let mut spec = world.spec(Backend::Native);
        spec.backend = None;
        spec.default_backend = Some(Backend::named("codex"));
        // The project's `native` wins over the host's codex (no worker factory here).
        let session = assemble(spec, &world.env(), TrustCheck::Ask(&mut yes), None).unwrap();
        assert_eq!(session.chosen_backend, Backend::Native);
        std::fs::remove_file(world.project.path().join("intendant.toml")).unwrap();
        let mut spec = world.spec(Backend::Native);
        spec.backend = None;
        spec.default_backend = Some(Backend::named("codex"));
        // The host's codex when the project names none.
        let e = error(assemble(spec, &world.env(), TrustCheck::Refuse, None));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("\"codex\"")),
            "{e}"
        );
    }

    #[test]
    fn bad_requests_are_configuration_errors() {
        let world = World::new();
        let agent = Backend::named("codex");
        let e = error(assemble(
            world.spec(agent),
            &world.env(),
            TrustCheck::Refuse,
            None,
        ));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("codex")),
            "{e}"
        );
        let mut spec = world.spec(Backend::Native);
        spec.task = Some("  ".into());
        let e = error(assemble(spec, &world.env(), TrustCheck::Refuse, None));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("no task given")),
            "{e}"
        );
        let mut spec = world.spec(Backend::Native);
        spec.resume = Some(ResumeFrom::Id("nope".into()));
        spec.task = None;
        let e = error(assemble(spec, &world.env(), TrustCheck::Refuse, None));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains("no session")),
            "{e}"
        );
        let mut env = world.env();
        env.process_env
            .insert(BATCH_TIMEOUT_ENV.into(), "soon".into());
        let e = error(assemble(
            world.spec(Backend::Native),
            &env,
            TrustCheck::Refuse,
            None,
        ));
        assert!(
            matches!(&e, AssembleError::Config(m) if m.contains(BATCH_TIMEOUT_ENV)),
            "{e}"
        );
    }
}

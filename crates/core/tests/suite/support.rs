//! A test world: a temp project and `INTENDANT_HOME`, the fake model server on loopback for
//! one wire, and a session run in process through [`run_session`] with a real
//! `intendant-runtime` (the built binary), every lifecycle event collected as an [`AppEvent`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use intendant_core::agent_loop::LoopConfig;
use intendant_core::approval::{ApprovalGate, ApprovalPolicy};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::bus::EventBus;
use intendant_core::cancel::SessionCancel;
use intendant_core::conversation::Conversation;
use intendant_core::intents::IntentInbox;
use intendant_core::memory::SessionMemory;
use intendant_core::outcome::{SessionError, SessionOutcome};
use intendant_core::runner::{
    OUTPUT_CAP_BYTES, RUNTIME_BIN, RUNTIME_PATH_ENV, RunnerConfig, RuntimeRunner,
};
use intendant_core::runtime_env::inherited_env;
use intendant_core::session::{DirectBackend, SessionStart, run_session};
use intendant_core::session_log::{SessionLog, SessionMeta};
use intendant_protocol::events::AppEvent;
use intendant_providers::{
    ProviderConfig, ProviderKind, ReplyLimits, RetryNotice, RetryObserver, RetryPolicy, ToolMode,
    build_provider,
};
use intendant_store::memory::Memories;
use intendant_testkit::{FakeModelServer, RecordedRequest, Scenario, Wire};
use serde_json::{Value, json};

/// Model name the scenarios answer as.
const MODEL: &str = "fake-model";
/// Longest a whole session may take before the test fails (never reached by a healthy run).
const SESSION_LIMIT: Duration = Duration::from_secs(120);

/// The `intendant-runtime` binary: `$INTENDANT_RUNTIME`, else the one built into this target
/// directory.
pub fn runtime_bin() -> PathBuf {
    intendant_testkit::built_binary(RUNTIME_BIN, RUNTIME_PATH_ENV)
}

/// Called with every event of the session and its bus, from a task beside it: a stand-in for
/// a human at a frontend (answers, follow-ups, interrupts through a captured handle).
pub type Driver = Box<dyn FnMut(&AppEvent, &EventBus) + Send>;

/// How a session is limited and approved.
pub struct Options {
    pub autonomy: AutonomyLevel,
    pub max_turns: u32,
    pub budget_tokens: Option<u64>,
    pub context_window: u64,
    /// The session's cancellation handle (keep a clone to interrupt or stop it).
    pub cancel: SessionCancel,
    /// With a driver the session is interactive: approvals are asked, follow-ups awaited, and
    /// the session ends when the driver stops it or closes the intents lane.
    pub driver: Option<Driver>,
    /// How tools are offered to the model.
    pub tool_mode: ToolMode,
    /// Whether batches are checkpointed (in the world's state root).
    pub checkpoints: bool,
    /// Whether the session has the memory tools (over the world's state root's database).
    pub memory: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            autonomy: AutonomyLevel::Full,
            max_turns: 50,
            budget_tokens: None,
            context_window: 200_000,
            cancel: SessionCancel::new(),
            driver: None,
            tool_mode: ToolMode::Native,
            checkpoints: false,
            memory: false,
        }
    }
}

/// What one session did.
pub struct Run {
    pub outcome: Result<SessionOutcome, SessionError>,
    /// Every lifecycle event, in emit order.
    pub events: Vec<AppEvent>,
    /// The session's record directory (`logs/<id>/`).
    pub log_dir: PathBuf,
    /// Every retry the provider made, in order.
    pub retries: Vec<RetryNotice>,
}

impl Run {
    /// The outcome, which must be `Ok`.
    pub fn outcome(&self) -> &SessionOutcome {
        match &self.outcome {
            Ok(outcome) => outcome,
            Err(e) => panic!("the session failed: {e}\nevents: {:#?}", self.events),
        }
    }

    /// The events `pick` selects, mapped.
    pub fn pick<T>(&self, pick: impl Fn(&AppEvent) -> Option<T>) -> Vec<T> {
        self.events.iter().filter_map(pick).collect()
    }

    /// The tool result texts, in order.
    pub fn outputs(&self) -> Vec<String> {
        self.pick(|e| {
            if let AppEvent::AgentOutput { output, .. } = e {
                Some(output.clone())
            } else {
                None
            }
        })
    }
}

/// One test's world.
pub struct World {
    pub project: tempfile::TempDir,
    pub home: tempfile::TempDir,
    pub server: FakeModelServer,
    wire: Wire,
}

impl World {
    /// A world whose fake model answers on `wire` with `turns` (a JSON array of scenario turns).
    pub async fn new(wire: Wire, turns: Value) -> World {
        let scenario =
            Scenario::from_json(&json!({ "model": MODEL, "turns": turns }).to_string()).unwrap();
        World {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            server: FakeModelServer::start(scenario).await.unwrap(),
            wire,
        }
    }

    /// The memories of the world's state root.
    pub fn memories(&self) -> Memories {
        Memories::new(intendant_store::Store::open(self.home.path()).unwrap())
    }

    /// The requests that consumed a scripted turn.
    pub fn turn_requests(&self) -> Vec<RecordedRequest> {
        self.server.turn_requests()
    }

    /// Runs `task` as a headless session (nobody answers approvals or questions).
    pub async fn run(&self, task: &str, options: Options) -> Run {
        let project_root = self.project.path().to_path_buf();
        let meta = SessionMeta::new(&project_root, task, MODEL, "test");
        let log = SessionLog::create(self.home.path(), meta).unwrap();
        let retries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&retries);
        let observer: RetryObserver = Arc::new(move |n: &RetryNotice| {
            seen.lock().unwrap().push(n.clone());
        });
        let mut config = ProviderConfig::new(
            self.server.base_url(self.wire),
            Some("sk-test-core-0123456789".to_owned()),
        );
        config.retry = RetryPolicy {
            observer: Some(observer),
            ..RetryPolicy::with_base_delay(Duration::from_millis(1))
        };
        let provider = build_provider(provider_kind(self.wire), config).unwrap();
        let policy = ApprovalPolicy::new(options.autonomy, &BTreeMap::new()).unwrap();
        let interactive = options.driver.is_some();
        let runner = RuntimeRunner::new(RunnerConfig {
            runtime_path: runtime_bin(),
            cwd: project_root.clone(),
            log_dir: log.artifacts_dir().to_path_buf(),
            sandbox_write_paths: None,
            sandbox_read_masks: Vec::new(),
            sandbox_require_full: false,
            user_display_granted: false,
            env: inherited_env(std::env::vars_os()),
            batch_timeout: Duration::from_secs(60),
            output_cap: OUTPUT_CAP_BYTES,
            placement: None,
            git: None,
            netns: None,
        });
        let cfg = LoopConfig {
            session_id: log.id().to_owned(),
            provider,
            model: MODEL.to_owned(),
            system_prompt: "You are a test agent.".to_owned(),
            runner,
            context_window: options.context_window,
            budget_tokens: options.budget_tokens,
            max_turns: options.max_turns,
            max_output_tokens: Some(1000),
            reply_limits: ReplyLimits::default(),
            tool_mode: options.tool_mode,
            human_available: Arc::new(AtomicBool::new(false)),
            wait_for_follow_ups: interactive,
            stream_restart_delay: Duration::from_millis(1),
            session_log: Some(log.clone()),
            approval_gate: ApprovalGate::new(policy, interactive),
            auth_hint: None,
            sub_agents: None,
            cancel: options.cancel,
            checkpoints: options
                .checkpoints
                .then(|| intendant_core::checkpoint::CheckpointPlan {
                    home: self.home.path().to_path_buf(),
                    project: project_root.clone(),
                    config: intendant_core::checkpoint::CheckpointConfig::default(),
                    placement: None,
                }),
            skills: Default::default(),
            hooks: Default::default(),
            egress: None,
            mcp: Default::default(),
            workflow: Some(intendant_core::workflow::WorkflowCheckpoints::new(
                intendant_core::session::assemble::SharedStore::new(self.home.path()),
                log.id(),
                None,
            )),
            memory: options.memory.then(|| {
                SessionMemory::new(
                    self.memories(),
                    log.id(),
                    &std::fs::canonicalize(&project_root).unwrap(),
                    ApprovalPolicy::new(options.autonomy, &BTreeMap::new()).unwrap(),
                    interactive,
                )
            }),
        };

        let bus = EventBus::new();
        let inbox = IntentInbox::new(&bus);
        let mut lane = bus.subscribe_session_log();
        let writer = log.spawn_event_writer(bus.subscribe_session_log());
        let driver = match options.driver {
            Some(mut drive) => {
                let mut ring = bus.subscribe();
                let bus = bus.clone();
                Some(tokio::spawn(async move {
                    while let Ok(event) = ring.recv().await {
                        drive(&event, &bus);
                        if matches!(event, AppEvent::SessionEnded { .. }) {
                            return;
                        }
                    }
                }))
            }
            None => {
                // Headless: no intent will ever come.
                bus.close_intents();
                None
            }
        };
        let conversation = Conversation::new("Working directory: the test project".to_owned());
        let start = SessionStart {
            session_id: cfg.session_id.clone(),
            task: task.to_owned(),
            provider: "test".to_owned(),
            model: cfg.model.clone(),
            project_root,
            resumed: false,
            git: None,
            network: intendant_core::network::NetworkMode::Proxy,
        };
        let backend = Box::new(DirectBackend { cfg, conversation });
        let session = run_session(start, backend, bus.clone(), inbox);
        let outcome = tokio::time::timeout(SESSION_LIMIT, session)
            .await
            .expect("the session ended");
        writer.await.unwrap();
        if let Some(driver) = driver {
            driver.await.unwrap();
        }
        assert!(log.take_write_error().is_none());
        drop(bus);
        let mut events = Vec::new();
        while let Ok(event) = lane.try_recv() {
            events.push(event);
        }
        assert!(
            self.server.invariant_violations().is_empty(),
            "{:?}",
            self.server.invariant_violations()
        );
        let retries = retries.lock().unwrap().clone();
        Run {
            outcome,
            events,
            log_dir: log.dir().to_path_buf(),
            retries,
        }
    }
}

fn provider_kind(wire: Wire) -> ProviderKind {
    match wire {
        Wire::OpenAiResponses => ProviderKind::OpenAi,
        Wire::OpenAiChat => ProviderKind::OpenAiChat,
        Wire::Anthropic => ProviderKind::Anthropic,
        Wire::Gemini => ProviderKind::Gemini,
    }
}

/// A turn calling the tools of `list` (name, arguments).
pub fn calls(list: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = list
        .iter()
        .map(|(name, args)| json!({ "name": name, "arguments": args }))
        .collect();
    json!({ "tool_calls": calls })
}

/// A turn running one shell command.
pub fn exec_turn(command: &str) -> Value {
    calls(&[("exec_command", json!({ "command": command }))])
}

/// A turn calling `signal_done`.
pub fn done_turn(message: &str) -> Value {
    calls(&[("signal_done", json!({ "message": message }))])
}

/// A turn that only says `text`.
pub fn text_turn(text: &str) -> Value {
    json!({ "text": text })
}

/// The whole body of a recorded request, as text.
pub fn body_text(request: &RecordedRequest) -> String {
    request.body.to_string()
}

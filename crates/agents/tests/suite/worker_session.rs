//! The one way the worker suites run a session (fake CLIs and the pinned real ones alike):
//! a worker from `AgentWorkers` in a project with its own session log, approvals answered,
//! follow-ups sent, interrupts and stops made from `Options`, every event kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use intendant_agents::HostEnv;
use intendant_agents::worker::AgentWorkers;
use intendant_core::approval::{ApprovalAnswer, ApprovalGate, ApprovalPolicy};
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::bus::EventBus;
use intendant_core::cancel::SessionCancel;
use intendant_core::intents::IntentInbox;
use intendant_core::outcome::{SessionError, SessionOutcome};
use intendant_core::session::{SessionStart, WorkerContext, WorkerFactory, run_session};
use intendant_core::session_log::{SessionLog, SessionMeta};
use intendant_protocol::events::{AppEvent, ControlMsg, EndStatus, RoundEnd, Verdict};
use serde_json::Value;

/// How a test session runs.
pub(super) struct Options {
    pub(super) level: AutonomyLevel,
    /// Whether a human can answer (headless sessions deny every `ask`).
    pub(super) interactive: bool,
    /// The model asked for.
    pub(super) model: &'static str,
    /// Answers to the approval requests, in order (none left: the request stays pending).
    pub(super) answers: Vec<ApprovalAnswer>,
    /// Sent after each round, in order (none left: the input closes).
    pub(super) follow_ups: Vec<&'static str>,
    /// The level a human sets on the session after its first round (before the follow-up).
    pub(super) relevel_after_round: Option<AutonomyLevel>,
    /// The worker's `[agent.<name>]` settings.
    pub(super) table: toml::Table,
    pub(super) resume: Option<SessionLog>,
    /// Interrupts the turn at the first event of this name.
    pub(super) interrupt_on: Option<&'static str>,
    /// Stops the session at the first event of this name.
    pub(super) stop_on: Option<&'static str>,
    /// Creates `ROOT/go` at the first event of this name (a fake's `wait_file` of `../go`
    /// then goes on).
    pub(super) signal_on: Option<&'static str>,
    /// Checkpoints the project around each round, in the store under `ROOT/state`.
    pub(super) checkpoints: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            level: AutonomyLevel::Medium,
            interactive: true,
            model: "fake-model",
            answers: Vec::new(),
            follow_ups: Vec::new(),
            relevel_after_round: None,
            table: toml::Table::new(),
            resume: None,
            interrupt_on: None,
            stop_on: None,
            signal_on: None,
            checkpoints: false,
        }
    }
}

/// A finished session.
pub(super) struct Ran {
    pub(super) events: Vec<AppEvent>,
    pub(super) result: Result<SessionOutcome, SessionError>,
    pub(super) log: SessionLog,
}

impl Ran {
    pub(super) fn status(&self) -> EndStatus {
        self.events
            .iter()
            .find_map(|e| match e {
                AppEvent::SessionEnded { status, .. } => Some(*status),
                _ => None,
            })
            .expect("session_ended")
    }

    pub(super) fn errors(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Error { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn warnings(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Warning { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn names(&self) -> Vec<&'static str> {
        self.events.iter().map(AppEvent::name).collect()
    }

    pub(super) fn verdicts(&self) -> Vec<Verdict> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::ApprovalResolved { verdict, .. } => Some(*verdict),
                _ => None,
            })
            .collect()
    }

    pub(super) fn previews(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::ApprovalRequired {
                    command_preview, ..
                } => Some(command_preview.clone()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn done(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Done { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    /// How each round ended.
    pub(super) fn rounds(&self) -> Vec<RoundEnd> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AppEvent::RoundComplete { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    /// The session log's lines.
    pub(super) fn logged(&self) -> String {
        std::fs::read_to_string(self.log.dir().join("session.jsonl")).unwrap()
    }
}

/// Runs `worker` with these `[agent]` tables and caller environment, in `root`'s `project`
/// with session logs under its `state`; answers approvals, sends follow-ups and interrupts or
/// stops as `opts` says.
pub(super) async fn run_with(
    worker: &str,
    tables: BTreeMap<String, toml::Table>,
    host: HostEnv,
    root: &Path,
    opts: Options,
) -> Ran {
    let project = root.join("project");
    let (log, resumed_from) = match opts.resume {
        Some(log) => {
            let id = log.id().to_owned();
            (log, Some(id))
        }
        None => (
            SessionLog::create(
                &root.join("state"),
                SessionMeta::new(&project, "task", opts.model, worker),
            )
            .unwrap(),
            None,
        ),
    };
    let gate = ApprovalGate::new(
        ApprovalPolicy::new(opts.level, &BTreeMap::new()).unwrap(),
        opts.interactive,
    );
    let level = gate.level_handle();
    let mut relevel = opts.relevel_after_round;
    let cancel = SessionCancel::new();
    let ctx = WorkerContext {
        session_id: log.id().to_owned(),
        project_root: project.clone(),
        model: Some(opts.model.into()),
        command: Vec::new(),
        approval_gate: gate,
        session_log: log.clone(),
        resumed_from: resumed_from.clone(),
        cancel: cancel.clone(),
        agent_config: tables,
        checkpoints: opts
            .checkpoints
            .then(|| intendant_core::checkpoint::CheckpointPlan {
                home: root.join("state"),
                project: project.clone(),
                config: intendant_core::checkpoint::CheckpointConfig::default(),
                placement: None,
            }),
        placement: None,
        guard: None,
    };
    let backend = AgentWorkers::new(host).build(worker, ctx).unwrap();
    let bus = EventBus::new();
    let inbox = IntentInbox::new(&bus);
    let mut lane = bus.subscribe_session_log();
    let writer = log.spawn_event_writer(bus.subscribe_session_log());
    let answerer = bus.clone();
    let mut answers = opts.answers.into_iter();
    let mut follow_ups = opts.follow_ups.into_iter();
    let (mut interrupt_on, mut stop_on) = (opts.interrupt_on, opts.stop_on);
    let (mut signal_on, go) = (opts.signal_on, root.join("go"));
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = lane.recv().await {
            match &event {
                AppEvent::ApprovalRequired { id, .. } => {
                    if let Some(a) = answers.next() {
                        answerer.send_intent(a.into_control(*id));
                    }
                }
                AppEvent::RoundComplete { .. } => match follow_ups.next() {
                    Some(text) if relevel.is_some() => {
                        level.set(relevel.take().unwrap_or_default());
                        answerer.send_intent(ControlMsg::FollowUp { text: text.into() });
                    }
                    Some(text) => answerer.send_intent(ControlMsg::FollowUp { text: text.into() }),
                    // No more input: the session ends.
                    None => answerer.close_intents(),
                },
                _ => {}
            }
            if interrupt_on == Some(event.name()) {
                interrupt_on = None;
                assert!(cancel.interrupt(), "a turn is running at {}", event.name());
            }
            if stop_on == Some(event.name()) {
                stop_on = None;
                cancel.stop();
            }
            if signal_on == Some(event.name()) {
                signal_on = None;
                std::fs::write(&go, "").unwrap();
            }
            let end = matches!(event, AppEvent::SessionEnded { .. });
            seen.push(event);
            if end {
                break;
            }
        }
        seen
    });
    let start = SessionStart {
        session_id: log.id().to_owned(),
        task: "Create approved.txt".into(),
        provider: worker.into(),
        model: opts.model.into(),
        project_root: project,
        resumed: resumed_from.is_some(),
        git: None,
        network: intendant_core::network::NetworkMode::Proxy,
    };
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_session(start, backend, bus, inbox),
    )
    .await
    .expect("the session ends");
    let events = watcher.await.unwrap();
    writer.await.unwrap();
    Ran {
        events,
        result,
        log,
    }
}

/// Every JSON line of a fake CLI's record file.
pub(super) fn records(path: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Asserts that no process a fake recorded (its own `pid`, a `child` it spawned) is left.
pub(super) async fn assert_no_process_left(records: &[Value]) {
    let pids: Vec<i64> = records
        .iter()
        .flat_map(|r| [r.get("pid"), r.get("child")])
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    assert!(!pids.is_empty(), "the fake recorded its pid: {records:?}");
    for pid in pids {
        super::support::assert_dies(pid).await;
    }
}

/// An interrupted round, then a follow-up in the same conversation that answered
/// "Second answer.", with nothing reported wrong.
pub(super) fn assert_interrupted_then_followed_up(ran: &Ran) {
    assert_eq!(ran.status(), EndStatus::Completed, "{:?}", ran.events);
    assert_eq!(
        ran.rounds(),
        [RoundEnd::Interrupted, RoundEnd::Done],
        "{:?}",
        ran.events
    );
    assert_eq!(ran.done(), ["Second answer."]);
    assert!(
        ran.errors().is_empty() && ran.warnings().is_empty(),
        "{:?}",
        ran.events
    );
    assert!(ran.logged().contains("\"reason\":\"interrupted\""));
}

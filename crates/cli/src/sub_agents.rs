//! The sub-agents of a one-shot run (`intendant TASK`): the run's session spawns them on a
//! [`Supervisor::in_process`] in this process, which adopts the run's own session as their
//! parent. Their approvals reach the run's frontend: each `approval_required` of a child is
//! published on the run's bus (the terminal labels it with the child, `--json` prints it with
//! the child's `session_id`), and an answer to it on the bus is delivered to the child.
//!
//! Children stop when the run's session is interrupted or stopped, and [`Children::end`] stops
//! whatever still runs when the run's session ends.

use std::collections::HashMap;
use std::sync::Arc;

use intendant_core::autonomy::SharedLevel;
use intendant_core::bus::EventBus;
use intendant_core::cancel::SessionCancel;
use intendant_core::host::{EventStream, SessionHost};
use intendant_core::session::SessionStart;
use intendant_core::session::assemble::{AssemblyEnv, SubAgentPlace};
use intendant_core::session_log::SessionLog;
use intendant_daemon::control_plane::default_max_running;
use intendant_daemon::supervisor::Supervisor;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::daemon::{Backend, SessionIntent, Settings, StreamItem};
use intendant_protocol::events::{AppEvent, ControlMsg};

/// The in-process host of a run's sub-agents.
pub struct Children {
    host: Supervisor,
}

impl Children {
    /// A host for the sub-agents of a run at `autonomy` (their default), asking a human only
    /// when the run can (`interactive`).
    pub fn new(env: &AssemblyEnv, autonomy: AutonomyLevel, interactive: bool) -> Children {
        let settings = Settings {
            default_autonomy: autonomy,
            default_backend: Backend::Native,
            max_running: default_max_running(),
            max_autonomy: AutonomyLevel::Full,
        };
        Children {
            host: Supervisor::in_process(
                env.clone(),
                Some(crate::wiring::agent_workers()),
                settings,
                interactive,
            ),
        }
    }

    /// The run's session's place: a top session with this host for its children.
    pub fn place(&self) -> SubAgentPlace {
        SubAgentPlace {
            host: Arc::new(self.host.clone()),
            depth: 0,
            role: None,
            parent: None,
            parent_level: None,
        }
    }

    /// Registers the run's assembled session as the children's parent (they inherit its
    /// provider, model and scenario, follow its `cancel`, and are held under its live
    /// `autonomy`), and starts forwarding their approvals to and from `bus`.
    pub async fn adopt(
        &self,
        start: &SessionStart,
        log: &SessionLog,
        parent: (Option<String>, SessionCancel, SharedLevel),
        bus: &EventBus,
    ) -> tokio::task::JoinHandle<()> {
        let own = start.session_id.clone();
        let (scenario, cancel, autonomy) = parent;
        self.host.adopt(start, log, scenario, cancel, autonomy);
        // Subscribed before the session can spawn anything.
        let stream = self.host.subscribe(None, None).await;
        let host = self.host.clone();
        let bus = bus.clone();
        let intents = bus.subscribe_intents();
        tokio::spawn(async move {
            if let Ok(stream) = stream {
                forward(host, bus, own, stream, intents).await;
            }
        })
    }

    /// Stops the children still running and waits until each has ended (its log written, its
    /// worktree settled).
    pub async fn end(&self) {
        // The supervisor's shutdown stops each the way `ctl stop` does; `closed` waits for
        // their tasks, log writers and worktree endings.
        let _ = self.host.shutdown().await;
        self.host.closed().await;
    }
}

/// Publishes the children's approvals on the run's bus and delivers the answers to them.
async fn forward(
    host: Supervisor,
    bus: EventBus,
    own: String,
    mut stream: EventStream,
    mut intents: tokio::sync::mpsc::UnboundedReceiver<ControlMsg>,
) {
    // Pending approvals of children: approval id -> child session.
    let mut pending: HashMap<u64, String> = HashMap::new();
    let mut intents_open = true;
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(StreamItem::Event(env)) if env.session_id != own => match &env.event {
                    AppEvent::ApprovalRequired { id, .. } => {
                        pending.insert(*id, env.session_id.clone());
                        bus.emit(env.event.clone());
                    }
                    AppEvent::ApprovalResolved { id, .. } if pending.remove(id).is_some() => {
                        bus.emit(env.event.clone());
                    }
                    _ => {}
                },
                Some(StreamItem::Event(_)) => {}
                Some(StreamItem::Lagged { next_seq }) => {
                    // The ring still holds what this subscriber missed.
                    match host.subscribe(None, Some(next_seq.saturating_sub(1))).await {
                        Ok(again) => stream = again,
                        Err(_) => return,
                    }
                }
                None => return,
            },
            msg = intents.recv(), if intents_open => match msg {
                Some(
                    msg @ (ControlMsg::Approve { id }
                    | ControlMsg::Deny { id }
                    | ControlMsg::Skip { id }
                    | ControlMsg::ApproveAll { id }
                    | ControlMsg::AllowHost { id }),
                ) => {
                    if let Some(child) = pending.get(&id) {
                        let intent = SessionIntent {
                            session_id: child.clone(),
                            msg,
                        };
                        // Refused only when the child ended or the approval was answered.
                        let _ = host.send(intent).await;
                    }
                }
                Some(ControlMsg::Input { .. } | ControlMsg::FollowUp { .. }) => {}
                None => intents_open = false,
            },
        }
    }
}

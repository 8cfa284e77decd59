//! [`SessionEgress`]: the session's side of its proxy. A host in neither list is an approval of
//! category `network`, decided like any other action (the `[approval] network` rule, else the
//! level: refused at `low`, asked at `medium` and `high`, allowed at `full`), asked on the
//! session's bus while a batch runs, answered through its own subscription to the intents lane
//! (the loop is busy waiting for the batch); every connection's record becomes an `egress`
//! event. Besides the answers every approval takes, a human may answer `allow_host`: the host
//! for the session and, through [`ProjectAllowList`], in the project's allow list for good.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use futures::future::BoxFuture;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, Verdict};
use tokio::sync::{mpsc, oneshot};

use super::allow_list::ProjectAllowList;
use super::proxy::{AskOutcome, EgressHooks, EgressRecord};
use crate::approval::{ApprovalAnswer, ApprovalPolicy, Rule, effective_rule, next_approval_id};
use crate::bus::EventBus;

/// The session side of one session's egress proxy.
pub struct SessionEgress {
    session_id: String,
    policy: ApprovalPolicy,
    interactive: bool,
    /// Where `allow_host` writes (`None`: the answer keeps the host for the session only).
    allow_list: Option<ProjectAllowList>,
    bus: OnceLock<EventBus>,
    state: Mutex<State>,
}

/// A human's answer to a `network` approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NetworkAnswer {
    /// One of the answers every approval takes.
    Common(ApprovalAnswer),
    /// `allow_host`: the host for good.
    AllowHost,
}

impl NetworkAnswer {
    /// The approval `msg` answers and its answer, if it answers one.
    fn of_control(msg: &ControlMsg) -> Option<(u64, NetworkAnswer)> {
        if let ControlMsg::AllowHost { id } = msg {
            return Some((*id, NetworkAnswer::AllowHost));
        }
        ApprovalAnswer::of_control(msg).map(|(id, a)| (id, NetworkAnswer::Common(a)))
    }

    fn verdict(self) -> Verdict {
        match self {
            NetworkAnswer::Common(a) => a.verdict(),
            NetworkAnswer::AllowHost => Verdict::Approve,
        }
    }
}

#[derive(Default)]
struct State {
    /// Hosts a human approved for the rest of the session (`approve_all`).
    approved: HashSet<String>,
    /// What the session's current batch runs (the approval names it as the asker).
    running: Option<String>,
    /// A human's `deny` of a connection during the current batch: the turn ends after it, as
    /// it does after any denial.
    denied: Option<String>,
    /// Questions waiting for their answer, by approval id.
    pending: HashMap<u64, oneshot::Sender<NetworkAnswer>>,
    /// Whether answers can still arrive (attached, and the intents lane not closed).
    lane_open: bool,
    /// The task routing answers to `pending`.
    router: Option<tokio::task::AbortHandle>,
}

impl SessionEgress {
    /// The side of session `session_id`, deciding with `policy` (its level shared with the
    /// session's gate); `interactive`: whether a human can answer at all; `allow_list`: where
    /// a host allowed for good is written.
    pub fn new(
        session_id: &str,
        policy: ApprovalPolicy,
        interactive: bool,
        allow_list: Option<ProjectAllowList>,
    ) -> Arc<SessionEgress> {
        Arc::new(SessionEgress {
            session_id: session_id.to_owned(),
            policy,
            interactive,
            allow_list,
            bus: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    /// Connects it to the session's bus once the session runs (questions and records go there;
    /// answers come from its intents lane). Before, nobody can answer: asks are refused. Only
    /// the first call counts. Must be called inside a tokio runtime.
    pub fn attach(self: &Arc<Self>, bus: &EventBus) {
        if self.bus.set(bus.clone()).is_err() {
            return;
        }
        let rx = bus.subscribe_intents();
        // Open before the router runs: a lane that starts ended must be able to close it.
        self.lock().lane_open = true;
        let router = tokio::spawn(route_answers(Arc::downgrade(self), rx));
        self.lock().router = Some(router.abort_handle());
    }

    /// Names what the session runs now (`None` between batches): the command an approval says
    /// asked for the connection.
    pub fn set_running(&self, preview: Option<String>) {
        let mut state = self.lock();
        if preview.is_some() {
            state.denied = None;
        }
        state.running = preview;
    }

    /// The human's denial of a connection since the current batch started, if any (taken: the
    /// loop ends the turn with it). A `skip`, a rule's refusal or nobody to ask is no denial.
    pub fn take_denial(&self) -> Option<String> {
        self.lock().denied.take()
    }

    /// The rule for a host in neither list now, and why, for the record.
    fn rule(&self) -> (Rule, String) {
        let level = self.policy.level();
        match self.policy.configured(ActionCategory::Network) {
            Some(rule) => (
                effective_rule(ActionCategory::Network, rule, level),
                format!("[approval] network = \"{rule}\" at autonomy {level}"),
            ),
            None => match level {
                AutonomyLevel::Low => (
                    Rule::Deny,
                    "autonomy low refuses a host in neither list".into(),
                ),
                AutonomyLevel::Medium | AutonomyLevel::High => (
                    Rule::Ask,
                    format!("autonomy {level} asks about a host in neither list"),
                ),
                AutonomyLevel::Full => (
                    Rule::Auto,
                    "autonomy full allows a host in neither list".into(),
                ),
            },
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain sets and maps: a panic elsewhere cannot leave them inconsistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn decide(self: Arc<Self>, host: String, port: u16) -> AskOutcome {
        if self.lock().approved.contains(&host) {
            return AskOutcome::Allowed("approved by the user for this session".into());
        }
        let (rule, why) = self.rule();
        match rule {
            Rule::Auto => return AskOutcome::Allowed(why),
            Rule::Deny => return AskOutcome::Refused(why),
            Rule::Ask => {}
        }
        let headless = || {
            AskOutcome::Refused(format!(
                "{why}, and no human can answer (headless sessions refuse)"
            ))
        };
        let Some(bus) = self.bus.get().cloned().filter(|_| self.interactive) else {
            return headless();
        };
        let id = next_approval_id();
        let (tx, rx) = oneshot::channel();
        let running = {
            let mut state = self.lock();
            if !state.lane_open {
                return headless();
            }
            state.pending.insert(id, tx);
            state.running.clone()
        };
        let asker = running.unwrap_or_else(|| "(no batch running)".into());
        bus.emit(AppEvent::ApprovalRequired {
            id,
            session_id: self.session_id.clone(),
            command_preview: format!("connect to {host}:{port}"),
            detail: Some(format!(
                "asked by: {asker}\napprove: this connection only; approve all: {host} for the rest of this session; allow host: {host} for good, added to [sandbox.network] allow in the project's intendant.toml; skip: the command gets a 403; deny: a 403, and the turn ends."
            )),
            category: ActionCategory::Network,
        });
        let answer = rx.await.ok();
        self.lock().pending.remove(&id);
        bus.emit(AppEvent::ApprovalResolved {
            id,
            verdict: answer.map_or(Verdict::Deny, NetworkAnswer::verdict),
        });
        match answer {
            Some(NetworkAnswer::Common(ApprovalAnswer::Approve)) => {
                AskOutcome::Allowed("approved by the user for this connection".into())
            }
            Some(NetworkAnswer::Common(ApprovalAnswer::ApproveAll)) => {
                self.lock().approved.insert(host);
                AskOutcome::Allowed("approved by the user for this session".into())
            }
            Some(NetworkAnswer::AllowHost) => self.allow_for_good(host, &bus).await,
            Some(NetworkAnswer::Common(ApprovalAnswer::Skip)) => {
                AskOutcome::Refused("skipped by the user".into())
            }
            Some(NetworkAnswer::Common(ApprovalAnswer::Deny)) => {
                self.lock().denied.get_or_insert_with(|| {
                    format!("the user denied the connection to {host}:{port}")
                });
                AskOutcome::Refused("denied by the user".into())
            }
            None => AskOutcome::Refused(format!("{why}, and the input closed before an answer")),
        }
    }
}

impl SessionEgress {
    /// `allow_host`: `host` for the rest of the session, and in the project's allow list where
    /// that can be done safely; where not, a warning says why it holds for the session only.
    async fn allow_for_good(&self, host: String, bus: &EventBus) -> AskOutcome {
        self.lock().approved.insert(host.clone());
        let written = match self.allow_list.clone() {
            Some(list) => {
                let asked = host.clone();
                tokio::task::spawn_blocking(move || list.allow(&asked))
                    .await
                    .unwrap_or_else(|e| Err(format!("the edit did not finish: {e}")))
            }
            None => Err("this session has no project file to keep it in".into()),
        };
        match written {
            Ok(change) => AskOutcome::Allowed(format!("allowed by the user for good: {change}")),
            Err(why) => {
                bus.emit(AppEvent::Warning {
                    message: format!(
                        "{host} is allowed for the rest of this session only, not in the project's allow list: {why}"
                    ),
                });
                AskOutcome::Allowed(
                    "approved by the user for this session (the project's allow list was not changed)"
                        .into(),
                )
            }
        }
    }
}

impl EgressHooks for SessionEgress {
    fn ask(self: Arc<Self>, host: String, port: u16) -> BoxFuture<'static, AskOutcome> {
        Box::pin(self.decide(host, port))
    }

    fn record(&self, record: EgressRecord) {
        if let Some(bus) = self.bus.get() {
            bus.emit(AppEvent::Egress {
                host: record.host,
                port: record.port,
                verdict: record.verdict,
                rule: record.rule,
                bytes_up: record.bytes_up,
                bytes_down: record.bytes_down,
                duration_ms: u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX),
            });
        }
    }
}

impl Drop for SessionEgress {
    fn drop(&mut self) {
        if let Some(router) = self.lock().router.take() {
            router.abort();
        }
    }
}

/// Hands each approval answer on the intents lane to the question waiting for it; once the
/// lane closes, every waiting question (and every later one) is refused.
async fn route_answers(egress: Weak<SessionEgress>, mut rx: mpsc::UnboundedReceiver<ControlMsg>) {
    while let Some(msg) = rx.recv().await {
        let Some((id, answer)) = NetworkAnswer::of_control(&msg) else {
            continue;
        };
        let Some(egress) = egress.upgrade() else {
            return;
        };
        let waiting = egress.lock().pending.remove(&id);
        if let Some(tx) = waiting {
            let _ = tx.send(answer);
        }
    }
    if let Some(egress) = egress.upgrade() {
        let mut state = egress.lock();
        state.lane_open = false;
        state.pending.clear();
    }
}

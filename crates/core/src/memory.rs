//! The memory tools of a native session: `memory_search` and `memory_read` pull what humans
//! decided to remember (the session's project and the user's own scope), `memory_propose` asks
//! a human to remember a new fact. Nothing is ever put into a conversation unasked: a memory
//! reaches the model only as the answer to one of these calls.
//!
//! A proposal never blocks the session: it becomes an approval of category `memory` on the
//! session's bus (the same queue every surface answers: terminal, `ctl`, dashboard, MCP) and the
//! call returns at once. It is stored, with the session as its source, only when a human
//! approves it; no `[approval]` rule and no autonomy level approves one (`auto` is refused in
//! `intendant.toml`, `full` still asks), and the model has no tool that answers approvals. In a
//! session nobody can answer (headless), or once its intents lane closed, a proposal is refused
//! at once.
//!
//! Every proposal is kept in the database from the moment it is made
//! (`intendant_store::memory::proposals`) until a human answers it, so it is answered once
//! whichever surface answers. One still unanswered when the session ends is dropped, and the
//! record says so; in the daemon ([`SessionMemory::keep_unanswered`]) it stays pending instead,
//! and the daemon lists it in its approval queue (under the pseudo-session `memory`) across
//! restarts, like a scheduled session waiting for its owner. A resumed session takes its own
//! pending proposals back into its queue.
//!
//! Store calls are short and synchronous: they run on a blocking thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use intendant_protocol::events::{ActionCategory, AppEvent, ControlMsg, Verdict};
use intendant_protocol::runtime::ERROR_PREFIX;
use intendant_protocol::tools::ToolName;
use intendant_store::memory::proposals::Proposals;
use intendant_store::memory::{MAX_TEXT_BYTES, Memories, Memory, Scope, ScopeFilter};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::approval::{ApprovalAnswer, ApprovalPolicy, Rule, next_approval_id};
use crate::bus::EventBus;
use crate::preview::escape_invisible;
use crate::tool_args::Args;
use intendant_protocol::text::clip;

/// Results one `memory_search` returns by default.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// The most results one `memory_search` returns.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// Bytes of each memory's text a search result shows (`memory_read` gives it whole).
pub const SEARCH_TEXT_BYTES: usize = 1024;
/// Proposals of one session waiting for a human at once; more are refused until one is answered.
pub const MAX_PENDING_PROPOSALS: usize = 10;
/// Bytes of a proposal's text its approval's one line shows (the detail has it whole).
const PREVIEW_BYTES: usize = 160;

/// Which memories a `memory_search` covers, as the model names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchScope {
    /// The session's project and the user's (`all`, the default).
    All,
    /// The session's project only.
    Project,
    /// The user's only.
    User,
}

/// Where a proposed memory would apply, as the model names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposeScope {
    /// The session's project (the default).
    Project,
    /// The user, in every project.
    User,
}

/// A call of one of the memory tools, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryCall {
    /// `memory_search`.
    Search {
        /// FTS5 query (plain words work).
        query: String,
        /// Which memories.
        scope: SearchScope,
        /// At most this many results.
        limit: usize,
    },
    /// `memory_read`.
    Read {
        /// The memory's id.
        id: i64,
    },
    /// `memory_propose`.
    Propose {
        /// The fact.
        text: String,
        /// Where it would apply.
        scope: ProposeScope,
    },
}

/// The memory tools' definitions (name, description, parameters).
pub fn tools() -> Vec<(ToolName, &'static str, Value)> {
    vec![
        (
            ToolName::MemorySearch,
            "Search the memories humans kept for this project and for the user (conventions, \
             decisions, preferences). Full-text, best match first; the query may use plain \
             words, \"phrases\", OR, NOT and prefix*. Nothing is remembered for you unless you \
             search.",
            json!({"type": "object", "properties": {
                "query": {"type": "string"},
                "scope": {"type": "string", "enum": ["all", "project", "user"], "description": "Default all (this project and the user)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "description": "Default 10."}
            }, "required": ["query"], "additionalProperties": false}),
        ),
        (
            ToolName::MemoryRead,
            "Read one memory whole, by the id a search returned.",
            json!({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}},
                   "required": ["id"], "additionalProperties": false}),
        ),
        (
            ToolName::MemoryPropose,
            "Propose one durable fact worth remembering for later sessions (a convention, a \
             decision, a preference the user stated). Returns at once; a human approves or \
             drops it later, so do not wait for it. Keep it short and self-contained.",
            json!({"type": "object", "properties": {
                "text": {"type": "string", "description": "The fact, at most 16 KiB."},
                "scope": {"type": "string", "enum": ["project", "user"], "description": "Default project."}
            }, "required": ["text"], "additionalProperties": false}),
        ),
    ]
}

pub(crate) fn parse_search(a: &Args<'_>) -> Result<MemoryCall, String> {
    let scope = match a.string("scope")?.as_deref() {
        None | Some("all") => SearchScope::All,
        Some("project") => SearchScope::Project,
        Some("user") => SearchScope::User,
        Some(other) => {
            return Err(format!(
                "memory_search: scope {other:?} is not `all`, `project` or `user`"
            ));
        }
    };
    let limit = match a.narrow::<usize>("limit")? {
        None => DEFAULT_SEARCH_LIMIT,
        Some(n) if (1..=MAX_SEARCH_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(format!(
                "memory_search: limit {n} is not between 1 and {MAX_SEARCH_LIMIT}"
            ));
        }
    };
    Ok(MemoryCall::Search {
        query: a.required("query")?,
        scope,
        limit,
    })
}

pub(crate) fn parse_read(a: &Args<'_>) -> Result<MemoryCall, String> {
    let id = a
        .integer("id")?
        .ok_or("memory_read: missing required argument `id`")?;
    let id = i64::try_from(id).map_err(|_| "memory_read: `id` is out of range".to_owned())?;
    Ok(MemoryCall::Read { id })
}

pub(crate) fn parse_propose(a: &Args<'_>) -> Result<MemoryCall, String> {
    let scope = match a.string("scope")?.as_deref() {
        None | Some("project") => ProposeScope::Project,
        Some("user") => ProposeScope::User,
        Some(other) => {
            return Err(format!(
                "memory_propose: scope {other:?} is not `project` or `user`"
            ));
        }
    };
    Ok(MemoryCall::Propose {
        text: a.required("text")?,
        scope,
    })
}

/// One session's side of the memories: answers its memory tools, holds its proposals until a
/// human answers them.
pub struct SessionMemory {
    memories: Memories,
    session_id: String,
    project: Scope,
    policy: ApprovalPolicy,
    interactive: bool,
    /// Unanswered proposals stay pending at the end (the daemon's sessions).
    keep_unanswered: AtomicBool,
    /// Held while a resumed session takes its earlier proposals back: a new proposal waits
    /// for it, so it is never taken back as an earlier one.
    adoption: Arc<tokio::sync::Mutex<()>>,
    bus: OnceLock<EventBus>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Proposals waiting for a human: approval id to the proposal's id in the database (`None`
    /// while it is being written).
    pending: HashMap<u64, Option<i64>>,
    /// Whether answers can still arrive (attached, and the intents lane not closed).
    lane_open: bool,
    /// The task routing answers to `pending`.
    router: Option<tokio::task::AbortHandle>,
}

impl SessionMemory {
    /// The memory side of session `session_id` working on the project whose canonical root is
    /// `project_root`; `policy` is the session's (its `[approval] memory = "deny"` refuses every
    /// proposal); `interactive`: whether a human can answer at all.
    pub fn new(
        memories: Memories,
        session_id: &str,
        project_root: &std::path::Path,
        policy: ApprovalPolicy,
        interactive: bool,
    ) -> Arc<SessionMemory> {
        Arc::new(SessionMemory {
            memories,
            session_id: session_id.to_owned(),
            project: Scope::project(project_root),
            policy,
            interactive,
            keep_unanswered: AtomicBool::new(false),
            adoption: Arc::new(tokio::sync::Mutex::new(())),
            bus: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    /// Leaves a proposal still unanswered when the session ends pending in the database,
    /// for the daemon's approval queue, instead of dropping it. Call before the session runs.
    pub fn keep_unanswered(&self) {
        self.keep_unanswered.store(true, Ordering::Relaxed);
    }

    /// Connects it to the session's bus once the session runs (proposals are asked there,
    /// answers come from its intents lane). Only the first call counts; must be called inside a
    /// tokio runtime. Where unanswered proposals are kept, this session's earlier ones still
    /// pending (a resumed session) are asked again.
    pub fn attach(self: &Arc<Self>, bus: &EventBus) {
        if self.bus.set(bus.clone()).is_err() {
            return;
        }
        let rx = bus.subscribe_intents();
        self.lock().lane_open = true;
        let router = tokio::spawn(route_answers(Arc::downgrade(self), rx));
        self.lock().router = Some(router.abort_handle());
        if self.interactive && self.keep_unanswered.load(Ordering::Relaxed) {
            let me = self.clone();
            // Taken here, before any proposal can be made; nobody else holds it yet.
            if let Ok(held) = self.adoption.clone().try_lock_owned() {
                tokio::spawn(async move {
                    me.adopt_earlier().await;
                    drop(held);
                });
            }
        }
    }

    /// Asks again this session's proposals the database still holds pending.
    async fn adopt_earlier(&self) {
        let proposals = self.proposals();
        let session = self.session_id.clone();
        let earlier = blocking(move || proposals.pending()).await;
        let Some(bus) = self.bus.get() else {
            return;
        };
        match earlier {
            Ok(list) => {
                for p in list.into_iter().filter(|p| p.session_id == session) {
                    let id = next_approval_id();
                    self.lock().pending.insert(id, Some(p.id));
                    bus.emit(approval_of(id, &self.session_id, &p.scope, &p.text));
                }
            }
            Err(message) => bus.emit(AppEvent::Warning {
                message: format!(
                    "this session's earlier memory proposals could not be read: {message}"
                ),
            }),
        }
    }

    fn proposals(&self) -> Proposals {
        Proposals::new(self.memories.store().clone())
    }

    /// Answers one memory tool call: the text for the model and whether it is an error.
    pub async fn answer(self: &Arc<Self>, call: MemoryCall) -> (String, bool) {
        let result = match call {
            MemoryCall::Search {
                query,
                scope,
                limit,
            } => self.search(query, scope, limit).await,
            MemoryCall::Read { id } => self.read(id).await,
            MemoryCall::Propose { text, scope } => self.propose(text, scope).await,
        };
        match result {
            Ok(value) => (value.to_string(), false),
            Err(message) => (format!("{ERROR_PREFIX}{message}"), true),
        }
    }

    async fn search(
        &self,
        query: String,
        scope: SearchScope,
        limit: usize,
    ) -> Result<Value, String> {
        let filter = ScopeFilter::Only(match scope {
            SearchScope::All => vec![self.project.clone(), Scope::User],
            SearchScope::Project => vec![self.project.clone()],
            SearchScope::User => vec![Scope::User],
        });
        let memories = self.memories.clone();
        let found = blocking(move || memories.search(&query, &filter, limit)).await?;
        let hits: Vec<Value> = found
            .hits
            .iter()
            .map(|hit| {
                let whole = hit.memory.text.len() <= SEARCH_TEXT_BYTES;
                json!({
                    "id": hit.memory.id,
                    "scope": self.scope_name(&hit.memory.scope),
                    "text": clip(&hit.memory.text, SEARCH_TEXT_BYTES),
                    "whole": whole,
                    "updated": hit.memory.updated,
                })
            })
            .collect();
        let mut answer = json!({ "memories": hits });
        if found.read_as_plain_terms {
            answer["note"] =
                "the query is not valid FTS5 syntax: its words were searched as plain terms".into();
        }
        Ok(answer)
    }

    async fn read(&self, id: i64) -> Result<Value, String> {
        let memories = self.memories.clone();
        let memory = blocking(move || memories.get(id)).await?;
        match memory {
            Some(m) if m.scope == Scope::User || m.scope == self.project => Ok(self.shown(&m)),
            Some(_) | None => Err(format!(
                "there is no memory {id} in this project's or the user's memories"
            )),
        }
    }

    fn shown(&self, m: &Memory) -> Value {
        json!({
            "id": m.id,
            "scope": self.scope_name(&m.scope),
            "text": m.text,
            "source": m.source.to_string(),
            "created": m.created,
            "updated": m.updated,
        })
    }

    fn scope_name(&self, scope: &Scope) -> &'static str {
        if *scope == Scope::User {
            "user"
        } else {
            "project"
        }
    }

    /// Keeps `text` as a pending proposal and puts it to a human as an approval of category
    /// `memory`, without waiting for the answer.
    async fn propose(&self, text: String, scope: ProposeScope) -> Result<Value, String> {
        let nothing = "nothing was proposed or stored";
        if text.len() > MAX_TEXT_BYTES {
            return Err(format!(
                "a memory holds at most {MAX_TEXT_BYTES} bytes and this text has {}: {nothing}; \
                 propose one short fact",
                text.len()
            ));
        }
        if text.trim().is_empty() {
            return Err(format!("the text is empty: {nothing}"));
        }
        if self.policy.effective(ActionCategory::Memory) == Rule::Deny {
            return Err(format!(
                "the owner refuses memory proposals here ([approval] memory = \"deny\"): {nothing}"
            ));
        }
        let headless = || {
            format!(
                "no human can answer approvals in this session, and only a human can approve a \
                 memory: {nothing}; mention the fact in your final message instead"
            )
        };
        let Some(bus) = self.bus.get().filter(|_| self.interactive) else {
            return Err(headless());
        };
        let scope = match scope {
            ProposeScope::Project => self.project.clone(),
            ProposeScope::User => Scope::User,
        };
        let id = next_approval_id();
        {
            let mut state = self.lock();
            if !state.lane_open {
                return Err(headless());
            }
            if state.pending.len() >= MAX_PENDING_PROPOSALS {
                return Err(format!(
                    "{MAX_PENDING_PROPOSALS} proposals already wait for a human: {nothing}; \
                     propose again once they are answered"
                ));
            }
            // Held while it is written, so the bound counts it.
            state.pending.insert(id, None);
        }
        // After a resumed session's earlier proposals are taken back, never among them.
        let adopted = self.adoption.lock().await;
        drop(adopted);
        let proposals = self.proposals();
        let (kept_scope, kept_text, session) =
            (scope.clone(), text.clone(), self.session_id.clone());
        let kept = blocking(move || proposals.propose(&kept_scope, &kept_text, &session)).await;
        let row = match kept {
            Ok(proposal) => proposal.id,
            Err(message) => {
                self.lock().pending.remove(&id);
                return Err(format!(
                    "the proposal could not be kept ({message}): {nothing}; mention the fact in \
                     your final message instead"
                ));
            }
        };
        let ended = {
            let mut state = self.lock();
            if state.lane_open {
                state.pending.insert(id, Some(row));
            } else {
                state.pending.remove(&id);
            }
            !state.lane_open
        };
        if ended {
            // The session ended while it was written: `close` did not see it.
            if !self.keep_unanswered.load(Ordering::Relaxed) {
                let proposals = self.proposals();
                let _ = blocking(move || proposals.drop(row)).await;
            }
            return Err(headless());
        }
        bus.emit(approval_of(id, &self.session_id, &scope, &text));
        Ok(json!({
            "proposed": true,
            "approval": id,
            "note": "a human approves or drops it later; it is not a memory until then. Do not wait for it.",
        }))
    }

    /// The session is ending: no answer reaches it any more. Each proposal still waiting is
    /// dropped (resolved `deny`, a warning says nothing was stored), or, where unanswered
    /// proposals are kept, left pending in the daemon's queue (a warning says where). Call
    /// before `session_ended`.
    pub async fn close(&self) {
        let pending: Vec<(u64, Option<i64>)> = {
            let mut state = self.lock();
            state.lane_open = false;
            if let Some(router) = state.router.take() {
                router.abort();
            }
            state.pending.drain().collect()
        };
        let Some(bus) = self.bus.get() else {
            return;
        };
        let keep = self.keep_unanswered.load(Ordering::Relaxed);
        for (id, row) in pending {
            let Some(row) = row.filter(|_| keep) else {
                if let Some(row) = row {
                    let proposals = self.proposals();
                    // Already answered elsewhere, or the database failed: nothing to store.
                    let _ = blocking(move || proposals.drop(row)).await;
                }
                bus.emit(AppEvent::ApprovalResolved {
                    id,
                    verdict: Verdict::Deny,
                });
                bus.emit(AppEvent::Warning {
                    message: format!(
                        "memory proposal {id} was not answered before the session ended: nothing was stored"
                    ),
                });
                continue;
            };
            bus.emit(AppEvent::Warning {
                message: format!(
                    "memory proposal {id} was not answered before the session ended: it waits \
                     in the daemon's approval queue as memory proposal {row} (intendant ctl \
                     approve memory {row}, or the dashboard); nothing is stored until a human \
                     approves it"
                ),
            });
        }
    }

    /// A human's `answer` to proposal `id`: stored when approved, dropped otherwise.
    async fn settle(&self, id: u64, answer: ApprovalAnswer) {
        let row = {
            let mut state = self.lock();
            // Not ours, or not asked yet (still being written): not an answer to anything.
            let Some(&Some(row)) = state.pending.get(&id) else {
                return;
            };
            state.pending.remove(&id);
            row
        };
        let Some(bus) = self.bus.get() else {
            return;
        };
        bus.emit(AppEvent::ApprovalResolved {
            id,
            verdict: answer.verdict(),
        });
        let proposals = self.proposals();
        let settled = match answer {
            // Approve-all approves this one only: it never lets a later proposal through.
            ApprovalAnswer::Approve | ApprovalAnswer::ApproveAll => {
                blocking(move || proposals.approve(row).map(drop)).await
            }
            ApprovalAnswer::Skip | ApprovalAnswer::Deny => {
                blocking(move || proposals.drop(row).map(drop)).await
            }
        };
        if let Err(message) = settled {
            bus.emit(AppEvent::Warning {
                message: format!("memory proposal {id} could not be settled: {message}"),
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain maps and flags: a panic elsewhere cannot leave them inconsistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SessionMemory {
    fn drop(&mut self) {
        if let Some(router) = self.lock().router.take() {
            router.abort();
        }
    }
}

/// A proposal's approval as every surface shows it.
fn approval_of(id: u64, session_id: &str, scope: &Scope, text: &str) -> AppEvent {
    let one_line = escape_invisible(&text.replace('\n', " "));
    AppEvent::ApprovalRequired {
        id,
        session_id: session_id.to_owned(),
        command_preview: format!("remember ({scope}): {}", clip(&one_line, PREVIEW_BYTES)),
        detail: Some(format!(
            "The model proposes this memory for {scope}:\n\n{}\n\napprove: store it (found \
             later by memory_search in this scope); skip or deny: drop it. Only a human \
             approves a memory; `intendant memory edit|rm` changes it later.",
            escape_invisible(text)
        )),
        category: ActionCategory::Memory,
    }
}

/// Runs a store call on a blocking thread; its error as the text the model or a warning shows.
async fn blocking<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the memory store call failed: {e}")),
    }
}

/// Hands each approval answer on the intents lane to the proposal it answers; once the lane
/// closes, no proposal can be answered any more.
async fn route_answers(memory: Weak<SessionMemory>, mut rx: mpsc::UnboundedReceiver<ControlMsg>) {
    while let Some(msg) = rx.recv().await {
        let Some((id, answer)) = ApprovalAnswer::of_control(&msg) else {
            continue;
        };
        let Some(memory) = memory.upgrade() else {
            return;
        };
        memory.settle(id, answer).await;
    }
    if let Some(memory) = memory.upgrade() {
        memory.lock().lane_open = false;
    }
}

#[cfg(test)]
mod tests;

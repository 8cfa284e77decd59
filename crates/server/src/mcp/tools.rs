//! The tool catalog and what each tool does over the [`SessionHost`].
//!
//! Each call returns a JSON object: the tool's result, or `{"error": {"code", "message"}}` with a
//! stable code (the host's [`HostErrorCode`] names, `invalid_arguments` for arguments failing
//! the schema, and the delegation contract's codes for `delegate`). The server sends both as
//! structured content and as text, the error with `isError`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use intendant_core::host::SessionHost;
use intendant_daemon::control_plane::{McpPolicy, within_ceiling};
use intendant_protocol::agenda::AgendaOp;
use intendant_protocol::autonomy::AutonomyLevel;
use intendant_protocol::checkpoints::RewindRequest;
use intendant_protocol::daemon::{
    Backend, HostErrorCode, SessionIntent, SessionStatus, SessionSummary, SessionsPage,
    StartRequest,
};
use intendant_protocol::events::ControlMsg;
use intendant_protocol::mcp::{CallErrorCode, McpTool};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::args::{self, MAX_WAIT_S};
use super::delegate::Delegator;
use super::error::{ToolError, ToolResult};
use super::follow::{self, WaitEnd};

/// The tools, over one host.
pub struct Tools {
    host: Arc<dyn SessionHost>,
    delegator: Delegator,
    cwd: Option<PathBuf>,
    policy: Arc<McpPolicy>,
}

/// Whether `tool` answers approvals or raises autonomy: a model answering what was meant for a
/// human. Such tools exist only with `[mcp] allow_model_approvals = true`.
fn answers_for_a_human(tool: McpTool) -> bool {
    match tool {
        McpTool::ResolveApproval | McpTool::SetAutonomy => true,
        McpTool::RunTask
        | McpTool::ResumeSession
        | McpTool::SendMessage
        | McpTool::GetSession
        | McpTool::ListSessions
        | McpTool::ListApprovals
        | McpTool::AnswerQuestion
        | McpTool::Interrupt
        | McpTool::Stop
        | McpTool::Rewind
        | McpTool::Delegate
        | McpTool::Agenda
        | McpTool::Schedule => false,
    }
}
/// What `run_task` and `schedule` both say about the session to start.
struct SessionOptions {
    task: String,
    project_dir: String,
    autonomy: Option<args::Autonomy>,
    provider: Option<String>,
    model: Option<String>,
    backend: Option<String>,
    network: Option<args::Network>,
}

/// Where the ceilings of this surface are set, for its refusals.
const MCP_CEILING: &str = "[mcp] max_autonomy";

/// One entry of the catalog.
struct Spec {
    tool: McpTool,
    description: &'static str,
    schema: fn() -> Arc<rmcp::model::JsonObject>,
    read_only: bool,
}

fn spec<T: JsonSchema + 'static>(
    tool: McpTool,
    description: &'static str,
    read_only: bool,
) -> Spec {
    Spec {
        tool,
        description,
        schema: schema_for_type::<T>,
        read_only,
    }
}

// One table of every tool, in the order `tools/list` gives them: its length is the descriptions'
// text, and splitting it would scatter the catalog a client reads as one.
fn catalog() -> [Spec; 15] {
    [
        spec::<args::RunTask>(
            McpTool::RunTask,
            "Start a sandboxed Intendant session on a task in a project directory (this \
             server's working directory or a project its owner listed). Returns the session id \
             at once, or with wait_s waits (bounded) for the first round to end and returns its \
             final text. A session that needs an approval stops the wait: a human answers it \
             (this client's prompt, the dashboard or intendant ctl).",
            false,
        ),
        spec::<args::ResumeSession>(
            McpTool::ResumeSession,
            "Continue an ended session (stopped, interrupted by a restart of the daemon, or \
             finished) with the same conversation, in its own project (one this server may \
             use), at the level it ran at unless given one. Returns at once, or with wait_s \
             waits (bounded) for its round to end and returns its final text.",
            false,
        ),
        spec::<args::SendMessage>(
            McpTool::SendMessage,
            "Send a follow-up instruction to a session (it starts a new round); with wait_s, \
             wait (bounded) for that round to end.",
            false,
        ),
        spec::<args::GetSession>(
            McpTool::GetSession,
            "A session's status, final text, token usage and cost, and one page of its events \
             after a seq (bounded; read on with next_after_seq).",
            true,
        ),
        spec::<args::ListSessions>(
            McpTool::ListSessions,
            "The newest sessions the daemon knows (50 by default, at most 200), oldest first, \
             optionally of one status; `omitted` counts older ones, read on with \
             before = next_before.",
            true,
        ),
        spec::<args::ListApprovals>(
            McpTool::ListApprovals,
            "Every approval waiting for a human, oldest first, optionally of one session.",
            true,
        ),
        spec::<args::ResolveApproval>(
            McpTool::ResolveApproval,
            "Answer a pending approval: approve, deny (stops the task), skip (the command is \
             not run, the session goes on) or approve_all (this and every later command of the \
             session).",
            false,
        ),
        spec::<args::AnswerQuestion>(
            McpTool::AnswerQuestion,
            "Answer the question a session asked its human.",
            false,
        ),
        spec::<args::SessionRef>(
            McpTool::Interrupt,
            "End a session's current turn (the running command is killed); the session stays \
             open for follow-ups.",
            false,
        ),
        spec::<args::SessionRef>(
            McpTool::Stop,
            "End a session (the running command is killed); it ends interrupted and can be \
             resumed.",
            false,
        ),
        spec::<args::SetAutonomy>(
            McpTool::SetAutonomy,
            "Set a session's autonomy level, or without session_id the default of new \
             sessions.",
            false,
        ),
        spec::<args::Rewind>(
            McpTool::Rewind,
            "Rewind a session that is not running a turn: its project's files and its \
             conversation back to before a turn (or only one of them, with scope), or undo its \
             last rewind. With preview nothing changes and the answer lists the files that \
             would change and the diff: preview first. Files changed since the session's last \
             checkpoint by something else (a human's editor) refuse it; force (overriding \
             them) only where the owner set [mcp] allow_model_approvals.",
            false,
        ),
        spec::<args::Delegate>(
            McpTool::Delegate,
            "Delegate one bounded task to an external agent CLI (codex, claude-code): the \
             prompt goes in, one value matching the JSON Schema comes out, or one error with a \
             stable code (runtime_timeout, runtime_not_authenticated, ...).",
            false,
        ),
        spec::<args::Agenda>(
            McpTool::Agenda,
            "The daemon's agenda of parked work: list its entries (every work item and scheduled \
             session still to come, and the newest 200 that ended, with their state: pending, \
             approved, started, missed, ...), add an item \
             with an optional reminder (an agenda event when due), mark one done, or snooze its \
             reminder. Approving a scheduled session is its owner's, never this tool's.",
            false,
        ),
        spec::<args::Schedule>(
            McpTool::Schedule,
            "Schedule one session to start at a time (RFC 3339 with an offset, a date and time \
             with a zone name such as 2026-12-03T09:00 Europe/Paris, or +10m, +2h, +1d, \
             +1h30m), with run_task's options. Nothing runs until its owner approves the whole \
             request and its digest (intendant ctl agenda approve, or the dashboard): it waits \
             in the approval queue as category schedule, which no tool of this server answers. \
             Once, no recurrence; missed if the daemon was down at its time, never retried.",
            false,
        ),
    ]
}

/// The catalog as `policy` allows it.
fn offered(policy: &McpPolicy) -> impl Iterator<Item = Spec> {
    let all = policy.allow_model_approvals;
    catalog()
        .into_iter()
        .filter(move |s| all || !answers_for_a_human(s.tool))
}

/// Every tool `policy` allows, as `tools/list` shows it.
pub fn list(policy: &McpPolicy) -> Vec<Tool> {
    offered(policy)
        .map(|s| {
            let mut annotations = ToolAnnotations::default();
            annotations.read_only_hint = Some(s.read_only);
            annotations.open_world_hint = Some(false);
            Tool::new(s.tool.name(), s.description, (s.schema)()).with_annotations(annotations)
        })
        .collect()
}

/// Whether a tool of this name exists under `policy`.
pub fn exists(name: &str, policy: &McpPolicy) -> bool {
    offered(policy).any(|s| s.tool.name() == name)
}

/// The tool names under `policy`, for the unknown-tool error.
pub fn names(policy: &McpPolicy) -> Vec<&'static str> {
    offered(policy).map(|s| s.tool.name()).collect()
}

fn parse<T: DeserializeOwned>(tool: &str, arguments: Map<String, Value>) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments)).map_err(|e| {
        ToolError::new(
            CallErrorCode::InvalidArguments,
            format!("invalid arguments for {tool}: {e}"),
        )
    })
}

fn wait_deadline(wait_s: u64) -> Option<Instant> {
    (wait_s > 0).then(|| Instant::now() + Duration::from_secs(wait_s.min(MAX_WAIT_S)))
}

/// `session` as a tool result.
fn summary_json(session: &SessionSummary) -> Value {
    serde_json::to_value(session).unwrap_or(Value::Null)
}

impl Tools {
    /// The tools over `host` under the owner's `policy`; relative project directories are
    /// resolved against `cwd`, and refused without one (a client over HTTP has no working
    /// directory here).
    pub fn new(host: Arc<dyn SessionHost>, cwd: Option<PathBuf>, policy: Arc<McpPolicy>) -> Tools {
        Tools {
            host,
            delegator: Delegator::new(),
            cwd,
            policy,
        }
    }

    /// The owner's policy for this server.
    pub fn policy(&self) -> &McpPolicy {
        &self.policy
    }

    /// Refuses `level` above this surface's ceiling (the daemon holds it to its own too).
    fn within_ceiling(&self, level: AutonomyLevel) -> Result<(), ToolError> {
        within_ceiling(level, self.policy.max_autonomy, MCP_CEILING)
            .map_err(|m| ToolError::new(HostErrorCode::Forbidden, m))
    }

    /// The autonomy of a session started here: the one asked for, within the ceiling, else
    /// the daemon's default lowered to the ceiling.
    async fn start_autonomy(
        &self,
        asked: Option<AutonomyLevel>,
    ) -> Result<AutonomyLevel, ToolError> {
        match asked {
            Some(level) => {
                self.within_ceiling(level)?;
                Ok(level)
            }
            None => {
                let default = self.host.settings().await?.default_autonomy;
                Ok(default.min(self.policy.max_autonomy))
            }
        }
    }

    /// Refuses a project directory a human did not give this server: only its working
    /// directory (or one inside it) and the owner's `[mcp] projects` count.
    fn allowed_project(&self, real: &Path) -> Result<(), ToolError> {
        let roots = self
            .cwd
            .iter()
            .chain(&self.policy.projects)
            .filter_map(|root| std::fs::canonicalize(root).ok());
        for root in roots {
            if real.starts_with(&root) {
                return Ok(());
            }
        }
        Err(ToolError::new(
            HostErrorCode::Forbidden,
            format!(
                "the project directory {} is not one this server may use: only its working \
                 directory (or a directory inside it) and the projects its owner listed in \
                 [mcp] projects of $INTENDANT_HOME/intendant.toml",
                real.display()
            ),
        ))
    }

    /// The host.
    pub fn host(&self) -> &Arc<dyn SessionHost> {
        &self.host
    }

    /// Runs tool `name` (which [`exists`]).
    pub async fn call(&self, name: &str, arguments: Map<String, Value>) -> ToolResult {
        let tool = match McpTool::from_name(name) {
            Some(tool) if exists(name, &self.policy) => tool,
            Some(_) | None => {
                return Err(ToolError::new(
                    CallErrorCode::UnknownTool,
                    format!("no tool is called {name:?}"),
                ));
            }
        };
        match tool {
            McpTool::RunTask => self.run_task(parse(name, arguments)?).await,
            McpTool::ResumeSession => self.resume_session(parse(name, arguments)?).await,
            McpTool::SendMessage => self.send_message(parse(name, arguments)?).await,
            McpTool::GetSession => self.get_session(parse(name, arguments)?).await,
            McpTool::ListSessions => self.list_sessions(parse(name, arguments)?).await,
            McpTool::ListApprovals => self.list_approvals(parse(name, arguments)?).await,
            McpTool::ResolveApproval => self.resolve_approval(parse(name, arguments)?).await,
            McpTool::AnswerQuestion => self.answer_question(parse(name, arguments)?).await,
            McpTool::Interrupt => {
                let a: args::SessionRef = parse(name, arguments)?;
                self.host.interrupt(&a.session_id).await?;
                Ok(json!({ "session_id": a.session_id, "interrupted": true }))
            }
            McpTool::Stop => {
                let a: args::SessionRef = parse(name, arguments)?;
                self.host.stop(&a.session_id).await?;
                Ok(json!({ "session_id": a.session_id, "stopped": true }))
            }
            McpTool::SetAutonomy => self.set_autonomy(parse(name, arguments)?).await,
            McpTool::Rewind => self.rewind(parse(name, arguments)?).await,
            McpTool::Delegate => {
                let a: args::Delegate = parse(name, arguments)?;
                let project = match &a.project_dir {
                    Some(dir) => self.project_dir(dir)?,
                    None => self.cwd.clone().ok_or_else(|| {
                        ToolError::new(
                            HostErrorCode::InvalidRequest,
                            "this server has no working directory: give project_dir (absolute)",
                        )
                    })?,
                };
                self.delegator.run(a, &project).await
            }
            McpTool::Agenda => self.agenda(parse(name, arguments)?).await,
            McpTool::Schedule => self.schedule(parse(name, arguments)?).await,
        }
    }

    async fn agenda(&self, a: args::Agenda) -> ToolResult {
        let missing = |what: &str| {
            ToolError::new(
                HostErrorCode::InvalidRequest,
                format!("agenda {}: `{what}` is required", a.action.name()),
            )
        };
        // Times are read here, as `intendant ctl` reads them, and sent as UTC.
        let utc = |text: &str| {
            intendant_daemon::when::parse_when(
                text,
                intendant_protocol::utc::UtcTime::now().unix_seconds(),
            )
            .map(intendant_protocol::agenda::rfc3339)
            .map_err(|m| ToolError::new(HostErrorCode::InvalidRequest, m))
        };
        let op = match a.action {
            args::AgendaAction::List => AgendaOp::List,
            args::AgendaAction::Add => AgendaOp::Add {
                text: a.text.clone().ok_or_else(|| missing("text"))?,
                remind_at: a.remind_at.as_deref().map(utc).transpose()?,
            },
            args::AgendaAction::Done => AgendaOp::Done {
                id: a.id.ok_or_else(|| missing("id"))?,
            },
            args::AgendaAction::Snooze => AgendaOp::Snooze {
                id: a.id.ok_or_else(|| missing("id"))?,
                until: utc(a.until.as_deref().ok_or_else(|| missing("until"))?)?,
            },
        };
        let entries = self.host.agenda(op).await?;
        Ok(json!({ "entries": entries }))
    }

    /// Puts one start request on the agenda at `a.at`, pending its owner's approval: the same
    /// request `run_task` would start now, held to the same ceilings and project list.
    async fn schedule(&self, a: args::Schedule) -> ToolResult {
        let at = intendant_daemon::when::parse_when(
            &a.at,
            intendant_protocol::utc::UtcTime::now().unix_seconds(),
        )
        .map(intendant_protocol::agenda::rfc3339)
        .map_err(|m| ToolError::new(HostErrorCode::InvalidRequest, m))?;
        let request = self
            .start_request(SessionOptions {
                task: a.task,
                project_dir: a.project_dir,
                autonomy: a.autonomy,
                provider: a.provider,
                model: a.model,
                backend: a.backend,
                network: a.network,
            })
            .await?;
        let entries = self
            .host
            .agenda(AgendaOp::Schedule {
                at,
                request: Box::new(request),
            })
            .await?;
        Ok(json!({
            "entries": entries,
            "note": "scheduled, not approved: it starts only once its owner approves it \
                     (intendant ctl agenda approve ID, or the dashboard); no tool of this \
                     server approves it",
        }))
    }

    /// The start request of a `run_task` or `schedule`: the project resolved and allowed, the
    /// autonomy within this surface's ceiling.
    async fn start_request(&self, o: SessionOptions) -> Result<StartRequest, ToolError> {
        if o.task.trim().is_empty() {
            return Err(ToolError::new(
                CallErrorCode::InvalidArguments,
                "the task is empty",
            ));
        }
        let project = self.project_dir(&o.project_dir)?;
        let autonomy = self.start_autonomy(o.autonomy.map(Into::into)).await?;
        Ok(StartRequest {
            task: o.task,
            project: project.to_string_lossy().into_owned(),
            autonomy: Some(autonomy),
            provider: o.provider,
            model: o.model,
            backend: o.backend.as_deref().map(Backend::named),
            network: o.network.map(Into::into),
            ..StartRequest::default()
        })
    }

    /// `dir` resolved against the working directory, checked to be an existing directory.
    fn project_dir(&self, dir: &str) -> Result<PathBuf, ToolError> {
        let path = Path::new(dir);
        let path = match &self.cwd {
            _ if path.is_absolute() => path.to_path_buf(),
            Some(cwd) => cwd.join(path),
            None => {
                return Err(ToolError::new(
                    HostErrorCode::InvalidRequest,
                    format!(
                        "the project directory {dir:?} is relative, and this server has no \
                         working directory to resolve it against: give an absolute path"
                    ),
                ));
            }
        };
        match std::fs::canonicalize(&path) {
            Ok(real) if real.is_dir() => {
                self.allowed_project(&real)?;
                Ok(real)
            }
            Ok(_) => Err(ToolError::new(
                HostErrorCode::InvalidRequest,
                format!(
                    "the project directory {} is not a directory",
                    path.display()
                ),
            )),
            Err(e) => Err(ToolError::new(
                HostErrorCode::InvalidRequest,
                format!(
                    "the project directory {} cannot be used: {}",
                    path.display(),
                    e.kind()
                ),
            )),
        }
    }

    /// A rewind of a session whose project this server may use (a model reaches only the
    /// projects a human gave it, for a rewind as for a start). `force` overrides what a human
    /// changed in the project since the session's last checkpoint, so a model may set it (but
    /// for a preview) only where the owner let it answer for a human
    /// (`[mcp] allow_model_approvals`).
    async fn rewind(&self, a: args::Rewind) -> ToolResult {
        if a.force && !a.preview && !self.policy.allow_model_approvals {
            return Err(ToolError::new(
                HostErrorCode::Forbidden,
                "force overrides a human's changes to the project, which a model does here only \
                 with [mcp] allow_model_approvals = true; rewind without force (it refuses, \
                 naming the files, when a human changed any), or let a human rewind"
                    .to_owned(),
            ));
        }
        let session = self.host.session(&a.session_id).await?;
        let project = std::fs::canonicalize(&session.project).map_err(|e| {
            ToolError::new(
                HostErrorCode::InvalidRequest,
                format!(
                    "the project directory {} of session {} cannot be used: {}",
                    session.project,
                    a.session_id,
                    e.kind()
                ),
            )
        })?;
        self.allowed_project(&project)?;
        let request = RewindRequest {
            session_id: a.session_id,
            to_turn: a.to_turn,
            undo: a.undo,
            scope: a.scope.into(),
            force: a.force,
            preview: a.preview,
            with_children: a.with_children,
        };
        let report = self.host.rewind(request).await?;
        Ok(serde_json::to_value(report).unwrap_or(Value::Null))
    }

    async fn run_task(&self, a: args::RunTask) -> ToolResult {
        let request = self
            .start_request(SessionOptions {
                task: a.task,
                project_dir: a.project_dir,
                autonomy: a.autonomy,
                provider: a.provider,
                model: a.model,
                backend: a.backend,
                network: a.network,
            })
            .await?;
        self.started(request, a.wait_s, None).await
    }

    /// The session of `recorded` continued: in its own project, which must be one this server
    /// may use, at the level asked for or else the one it ran at, held to this surface's
    /// ceiling and the daemon's.
    async fn resume_session(&self, a: args::ResumeSession) -> ToolResult {
        let recorded = self.host.session(&a.session_id).await?;
        let project = self.project_dir(&recorded.project)?;
        let autonomy = match a.autonomy {
            Some(level) => self.start_autonomy(Some(level.into())).await?,
            None => {
                let ceiling = self.host.settings().await?.max_autonomy;
                recorded.autonomy.min(self.policy.max_autonomy).min(ceiling)
            }
        };
        // Subscribed before it starts, from now on: its history holds the rounds of its runs
        // before, which are not this one.
        let stream = match a.wait_s {
            0 => None,
            _ => Some(self.host.subscribe(Some(&recorded.id), None).await?),
        };
        let request = StartRequest {
            task: a.text,
            project: project.to_string_lossy().into_owned(),
            autonomy: Some(autonomy),
            resume: Some(recorded.id),
            ..StartRequest::default()
        };
        self.started(request, a.wait_s, stream).await
    }

    /// Starts `request`'s session and answers with it at once, or (`wait_s`) once its round
    /// ended or it needs a human, read on `stream` (a new session's: from its first event).
    async fn started(
        &self,
        request: StartRequest,
        wait_s: u64,
        stream: Option<intendant_core::host::EventStream>,
    ) -> ToolResult {
        let deadline = wait_deadline(wait_s);
        let started = self.host.start(request).await?;
        match deadline {
            None => Ok(json!({
                "session_id": started.id,
                "status": started.status.name(),
                "wait": "none",
                "session": summary_json(&started),
            })),
            Some(deadline) => {
                let stream = match stream {
                    Some(stream) => stream,
                    None => self.host.subscribe(Some(&started.id), Some(0)).await?,
                };
                self.waited(&started.id, stream, deadline, None).await
            }
        }
    }

    async fn send_message(&self, a: args::SendMessage) -> ToolResult {
        let deadline = wait_deadline(a.wait_s);
        // Subscribed before sending, so the round's first event cannot be missed.
        let stream = match deadline {
            Some(_) => Some(self.host.subscribe(Some(&a.session_id), None).await?),
            None => None,
        };
        let sent = self
            .host
            .send(SessionIntent {
                session_id: a.session_id.clone(),
                msg: ControlMsg::FollowUp {
                    text: a.text.clone(),
                },
            })
            .await?;
        match (stream, deadline) {
            (Some(stream), Some(deadline)) => {
                let follow_up = follow::SentFollowUp {
                    text: &a.text,
                    in_round: sent.after_a_round(),
                };
                let mut result = self
                    .waited(&a.session_id, stream, deadline, Some(follow_up))
                    .await?;
                result["sent"] = json!(sent);
                Ok(result)
            }
            _ => {
                let session = self.host.session(&a.session_id).await?;
                Ok(json!({
                    "session_id": session.id,
                    "status": session.status.name(),
                    "sent": sent,
                    "wait": "none",
                    "session": summary_json(&session),
                }))
            }
        }
    }

    /// Waits on `stream` (for the round that takes `sent`, if given) and reports where session
    /// `id` is.
    async fn waited(
        &self,
        id: &str,
        stream: intendant_core::host::EventStream,
        deadline: Instant,
        sent: Option<follow::SentFollowUp<'_>>,
    ) -> ToolResult {
        let outcome =
            follow::wait_for_round(self.host.as_ref(), id, stream, deadline, sent).await?;
        let session = self.host.session(id).await?;
        let final_text = session.final_text.clone().or(outcome.done_message);
        let mut result = json!({
            "session_id": session.id,
            "status": session.status.name(),
            "wait": outcome.end.name(),
            "final_text": final_text,
            "session": summary_json(&session),
        });
        if outcome.end == WaitEnd::NeedsHuman {
            let pending: Vec<_> = self
                .host
                .approvals()
                .await?
                .into_iter()
                .filter(|p| p.session_id == id)
                .collect();
            result["pending_approvals"] = serde_json::to_value(pending).unwrap_or(Value::Null);
        }
        Ok(result)
    }

    async fn get_session(&self, a: args::GetSession) -> ToolResult {
        let session = self.host.session(&a.session_id).await?;
        let max = a
            .max_events
            .unwrap_or(args::DEFAULT_EVENTS)
            .clamp(1, args::MAX_EVENTS);
        let page = follow::page(self.host.as_ref(), &a.session_id, a.after_seq, max).await?;
        Ok(json!({
            "session_id": session.id,
            "status": session.status.name(),
            "finished": session.status.is_finished(),
            "final_text": session.final_text,
            "usage": {
                "input_tokens": session.input_tokens,
                "output_tokens": session.output_tokens,
                "cost_usd": session.cost_usd,
            },
            "pending_approvals": session.pending_approvals,
            "session": summary_json(&session),
            "events": page.events,
            "next_after_seq": page.next_after_seq,
            "more_events": page.more,
        }))
    }

    async fn list_sessions(&self, a: args::ListSessions) -> ToolResult {
        let wanted = match a.status.as_deref() {
            None => None,
            Some(name) => Some(
                serde_json::from_value::<SessionStatus>(Value::String(name.to_owned())).map_err(
                    |_| {
                        ToolError::new(
                            CallErrorCode::InvalidArguments,
                            format!(
                                "unknown status {name:?}: queued, running, waiting_for_human, \
                                 idle, done, failed or interrupted"
                            ),
                        )
                    },
                )?,
            ),
        };
        let limit = a
            .limit
            .unwrap_or(args::DEFAULT_SESSIONS)
            .clamp(1, args::MAX_SESSIONS);
        // Only the page is read, and what is older only counted: a daemon keeps every session
        // its state root holds, and a model may ask again and again.
        let page = SessionsPage {
            before: a.before.clone(),
            status: wanted,
            ..SessionsPage::newest(u32::try_from(limit).unwrap_or(u32::MAX))
        };
        // In a fleet, every member's sessions, each with its member (as the dashboard lists them).
        let rows: Vec<(String, Value)> = match self.host.fleet_sessions_page(&page).await? {
            Some(fleet) => fleet
                .rows()
                .into_iter()
                .map(|row| (row.session.id.clone(), json!(row)))
                .collect(),
            None => self
                .host
                .sessions_page(&page)
                .await?
                .into_iter()
                .map(|s| (s.id.clone(), json!(s)))
                .collect(),
        };
        let omitted = match rows.first() {
            Some((first, _)) if rows.len() >= limit => {
                let older = SessionsPage {
                    before: Some(first.clone()),
                    status: wanted,
                    ..SessionsPage::ALL
                };
                match self.host.fleet_sessions_count(&older).await? {
                    Some(count) => count,
                    None => self.host.sessions_count(&older).await?,
                }
            }
            _ => 0,
        };
        let mut result = json!({
            "sessions": rows.iter().map(|(_, s)| s).collect::<Vec<_>>(),
            "omitted": omitted,
        });
        if omitted > 0
            && let Some((first, _)) = rows.first()
        {
            result["next_before"] = json!(first);
        }
        Ok(result)
    }

    async fn list_approvals(&self, a: args::ListApprovals) -> ToolResult {
        // `agenda` is the pseudo-session of scheduled sessions waiting for their owner, and
        // `memory` that of proposals whose session ended.
        if let Some(id) = a.session_id.as_ref().filter(|id| {
            *id != intendant_protocol::agenda::AGENDA_SESSION
                && *id != intendant_protocol::memory::MEMORY_SESSION
        }) {
            self.host.session(id).await?;
        }
        let approvals: Vec<_> = self
            .host
            .approvals()
            .await?
            .into_iter()
            .filter(|p| a.session_id.as_ref().is_none_or(|id| &p.session_id == id))
            .collect();
        Ok(json!({ "approvals": approvals }))
    }

    async fn resolve_approval(&self, a: args::ResolveApproval) -> ToolResult {
        if a.session_id == intendant_protocol::agenda::AGENDA_SESSION {
            // A schedule starts a whole session later, unattended: its owner approves it
            // (`intendant ctl agenda approve`, the dashboard), never a model's tool call.
            return Err(ToolError::new(
                HostErrorCode::Forbidden,
                "a scheduled session is approved only by its owner (intendant ctl agenda \
                 approve, or the dashboard), never through MCP"
                    .to_owned(),
            ));
        }
        let pending = self.host.approvals().await?;
        let memory = a.session_id == intendant_protocol::memory::MEMORY_SESSION
            || pending.iter().any(|p| {
                p.session_id == a.session_id
                    && p.id == a.approval_id
                    && p.category == intendant_protocol::events::ActionCategory::Memory
            });
        if memory {
            // A memory is what later sessions will be told: a human decides it (the terminal,
            // `ctl approve`, the dashboard, this client's elicitation), never a model's call.
            return Err(ToolError::new(
                HostErrorCode::Forbidden,
                "a proposed memory is approved only by a human (intendant ctl approve, the \
                 dashboard, the terminal, or this client's elicitation), never through \
                 resolve_approval"
                    .to_owned(),
            ));
        }
        if matches!(a.decision, args::Decision::AllowHost) {
            // It writes the project's allow list and keeps the file trusted: a human's
            // decision about a trusted setting, never a model's (security 17).
            return Err(ToolError::new(
                HostErrorCode::Forbidden,
                "allowing a host for good (the project's [sandbox.network] allow) is a human's \
                 decision (the terminal, intendant ctl allow-host, the dashboard, or this \
                 client's elicitation), never resolve_approval's; approve_all allows the host \
                 for the rest of the session"
                    .to_owned(),
            ));
        }
        if matches!(a.decision, args::Decision::ApproveAll) {
            // Every later command of the session approved: what `full` does.
            self.within_ceiling(AutonomyLevel::Full)?;
        }
        self.host
            .send(SessionIntent {
                session_id: a.session_id.clone(),
                msg: a.decision.intent(a.approval_id),
            })
            .await?;
        Ok(json!({
            "session_id": a.session_id,
            "approval_id": a.approval_id,
            "resolved": true,
        }))
    }

    async fn answer_question(&self, a: args::AnswerQuestion) -> ToolResult {
        self.host
            .send(SessionIntent {
                session_id: a.session_id.clone(),
                msg: ControlMsg::Input { text: a.text },
            })
            .await?;
        Ok(json!({ "session_id": a.session_id, "answered": true }))
    }

    async fn set_autonomy(&self, a: args::SetAutonomy) -> ToolResult {
        let level = a.level.into();
        self.within_ceiling(level)?;
        self.host
            .set_autonomy(a.session_id.as_deref(), level)
            .await?;
        Ok(json!({ "session_id": a.session_id, "autonomy": level }))
    }
}

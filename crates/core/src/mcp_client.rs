//! Intendant as an MCP client: the tools of the servers configured in `[mcp_servers.NAME]`,
//! offered to a native session's model as `mcp__<server>_<tool>`.
//!
//! The design decision to know: a stdio server is one of the session's programs, not the
//! controller's. It runs inside the session's walls ([`crate::sandboxed`]: the sandbox with the
//! project and a scratch directory of its own as its only write roots, the read masks, the
//! session's network and cgroup, the scrubbed environment plus what its entry names), so a
//! server a model can steer (every tool call is the model's) can do no more than a command.
//! Each call goes through the approval gate (category `mcp`, the tool's annotations shaping the
//! default) and its result back to the model bounded.
//!
//! # Layout
//! - `config`: `[mcp_servers.NAME]`, in the project's `intendant.toml` and the user's file.
//! - `server`: one server for the session's life: connection, tools, restarts with backoff.
//! - `catalog`: the model-facing names and definitions, deferred behind one search tool past a
//!   budget.
//! - `output`: a tool's result as the model's text, bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use intendant_protocol::events::{AppEvent, McpServerState};
use intendant_protocol::runtime::ERROR_PREFIX;
use intendant_providers::ToolDefinition;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::bus::EventBus;
use crate::child::CancelToken;
use crate::sandboxed::Walls;

pub mod catalog;
pub mod config;
pub mod output;
pub mod server;

pub use catalog::{CatalogTool, SEARCH_TOOL, TOOL_PREFIX};
pub use config::{McpConfigError, McpServer, McpServerEntry, Source, Transport};

use catalog::Catalog;
use server::{Context, Slot, Status};

/// The servers a session starts, and the controller's environment their entries may name
/// variables of (credentials included: never printed).
#[derive(Clone, Default)]
pub struct McpPlan {
    /// The enabled servers, validated.
    pub servers: Vec<McpServer>,
    /// The controller's environment as it started.
    pub process_env: Arc<BTreeMap<String, String>>,
}

impl std::fmt::Debug for McpPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the environment holds keys.
        f.debug_struct("McpPlan")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The session's MCP servers while it runs: started together, their tools offered, calls
/// dispatched; [`McpHub::shutdown`] (or dropping it) stops them.
pub struct McpHub {
    slots: Vec<Arc<Slot>>,
    changed: Arc<AtomicBool>,
    catalog: Mutex<Catalog>,
    /// Tools already reported as left out, so each is said once.
    skipped: Mutex<BTreeSet<(String, String)>>,
    stop: CancelToken,
    tasks: Vec<JoinHandle<()>>,
    bus: EventBus,
}

impl McpHub {
    /// Starts every server of `plan` at once inside `walls` (the session's, with `project_root`
    /// its project and `artifacts_dir` where scratch directories and stderr logs go), and
    /// returns once each has started or failed its first attempt (each bounded by its
    /// `startup_timeout_sec`). A server that fails does not stop the session: it is retried
    /// with backoff in the background.
    pub async fn start(
        plan: McpPlan,
        walls: Walls,
        project_root: PathBuf,
        artifacts_dir: PathBuf,
        bus: EventBus,
    ) -> McpHub {
        let stop = CancelToken::new();
        let changed = Arc::new(AtomicBool::new(true));
        let ctx = Context {
            walls,
            project_root,
            artifacts_dir,
            process_env: plan.process_env,
            bus: bus.clone(),
            stop: stop.clone(),
        };
        let mut slots = Vec::new();
        let mut tasks = Vec::new();
        let mut firsts = Vec::new();
        for config in plan.servers.into_iter().filter(|s| s.enabled) {
            let slot = Arc::new(Slot::new(config, Arc::clone(&changed)));
            let first = Arc::new(Notify::new());
            tasks.push(tokio::spawn(server::supervise(
                Arc::clone(&slot),
                ctx.clone(),
                Arc::clone(&first),
            )));
            slots.push(slot);
            firsts.push(first);
        }
        for first in firsts {
            first.notified().await;
        }
        let hub = McpHub {
            slots,
            changed,
            catalog: Mutex::new(Catalog::default()),
            skipped: Mutex::new(BTreeSet::new()),
            stop,
            tasks,
            bus,
        };
        hub.refresh();
        hub
    }

    fn catalog(&self) -> MutexGuard<'_, Catalog> {
        self.catalog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rebuilds the catalog when a server's status changed since the last look.
    fn refresh(&self) {
        if !self.changed.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut tools: Vec<CatalogTool> = Vec::new();
        let mut skipped = self.skipped.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in &self.slots {
            let (Status::Ready { tools: listed, .. } | Status::Resting { tools: listed }) =
                slot.status()
            else {
                continue;
            };
            let server = &slot.config.name;
            for tool in listed.iter().filter(|t| slot.config.offers(&t.name)) {
                let model_name = catalog::model_name(server, &tool.name);
                let refused = match catalog::checked_schema(&tool.input_schema) {
                    Err(why) => Some(why),
                    Ok(_) if tools.iter().any(|t| t.model_name == model_name) => {
                        Some(format!("its name {model_name} is taken by another tool"))
                    }
                    Ok(_) => None,
                };
                if let Some(why) = refused {
                    if skipped.insert((server.clone(), tool.name.to_string())) {
                        self.bus.emit(AppEvent::McpServer {
                            server: server.clone(),
                            state: McpServerState::ToolSkipped,
                            detail: format!("tool {:?} left out: {why}", tool.name),
                        });
                    }
                    continue;
                }
                let annotations = tool.annotations.as_ref();
                tools.push(CatalogTool {
                    model_name,
                    server: server.clone(),
                    tool: tool.name.to_string(),
                    description: catalog::bounded_description(
                        tool.description.as_deref().unwrap_or_default(),
                    ),
                    schema: catalog::checked_schema(&tool.input_schema)
                        .unwrap_or_else(|_| Value::Object(Default::default())),
                    hint: catalog::hint(
                        annotations.and_then(|a| a.read_only_hint),
                        annotations.and_then(|a| a.destructive_hint),
                    ),
                });
            }
        }
        self.catalog().replace(tools);
    }

    /// The definitions the next request offers: every tool, or [`SEARCH_TOOL`] and the tools
    /// loaded through it once they pass the budget.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.refresh();
        self.catalog().definitions()
    }

    /// The tool the model calls `name`, if a running server offers it.
    pub fn lookup(&self, name: &str) -> Option<CatalogTool> {
        self.refresh();
        self.catalog().find(name).cloned()
    }

    /// Answers a [`SEARCH_TOOL`] call with `arguments`.
    pub fn search(&self, arguments: &Value) -> (String, bool) {
        self.refresh();
        match arguments.get("query").and_then(Value::as_str) {
            Some(query) => (self.catalog().search(query), false),
            None => (
                format!("{ERROR_PREFIX}{SEARCH_TOOL} needs a string `query`"),
                true,
            ),
        }
    }

    /// Calls `tool` with `arguments`, bounded by its server's `tool_timeout_sec` and by
    /// `cancel`: the result's text (bounded), its images, and whether it is an error (the
    /// server's `isError`, a timeout, a server that is not running, a failed call).
    pub async fn call(
        &self,
        tool: &CatalogTool,
        arguments: Value,
        cancel: &CancelToken,
    ) -> output::Rendered {
        let fail = |message: String| output::Rendered {
            text: format!("{ERROR_PREFIX}{message}"),
            is_error: true,
            images: Vec::new(),
        };
        let Some(slot) = self.slots.iter().find(|s| s.config.name == tool.server) else {
            return fail(format!("no MCP server {:?}", tool.server));
        };
        let _under_way = slot.begin_call();
        let peer = tokio::select! {
            ready = slot.ready() => match ready {
                Ok(peer) => peer,
                Err(message) => return fail(message),
            },
            () = cancel.cancelled() => {
                return fail("the turn was interrupted before the MCP server was ready".into());
            }
        };
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return fail(format!(
                    "arguments of {} must be a JSON object, not {other}",
                    tool.model_name
                ));
            }
        };
        let params = CallToolRequestParams::new(tool.tool.clone()).with_arguments(arguments);
        let limit = slot.config.tool_timeout;
        tokio::select! {
            answer = tokio::time::timeout(limit, peer.call_tool(params)) => match answer {
                Err(_) => fail(format!(
                    "the MCP server {} did not answer within {} s (tool_timeout_sec)",
                    tool.server,
                    limit.as_secs_f64()
                )),
                Ok(Err(e)) => fail(format!("the MCP server {} failed the call: {e}", tool.server)),
                Ok(Ok(result)) => match serde_json::to_value(&result) {
                    Ok(value) => output::render(&value),
                    Err(e) => fail(format!("the result cannot be read: {e}")),
                },
            },
            () = cancel.cancelled() => fail("the turn was interrupted before the MCP server answered".into()),
        }
    }

    /// Each server's state now, with the tools it offers (`intendant mcp-servers check`).
    pub fn report(&self) -> Vec<ServerReport> {
        self.refresh();
        let catalog = self.catalog();
        self.slots
            .iter()
            .map(|slot| {
                let name = slot.config.name.clone();
                let state = match slot.status() {
                    Status::Ready { .. } | Status::Resting { .. } => Ok(catalog
                        .tools()
                        .iter()
                        .filter(|t| t.server == name)
                        .cloned()
                        .collect()),
                    Status::Starting => Err("still starting".to_owned()),
                    Status::Down { reason } => Err(reason),
                };
                ServerReport {
                    name,
                    source: slot.config.source,
                    state,
                }
            })
            .collect()
    }

    /// Stops every server and waits for them to be gone.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        // The supervisors close their servers (and a stdio server's process tree) once stopped.
        self.stop.cancel();
    }
}

/// One server as [`McpHub::report`] finds it.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// Its name.
    pub name: String,
    /// Where it is configured.
    pub source: Source,
    /// The tools it offers, or why it is not running.
    pub state: Result<Vec<CatalogTool>, String>,
}

/// The servers a session starts: the user's file in `config_dir`, then the project's
/// `[mcp_servers]` (already trusted), validated; the disabled ones left out.
pub fn configured_servers(
    project: &BTreeMap<String, McpServerEntry>,
    config_dir: Option<&std::path::Path>,
) -> Result<Vec<McpServer>, McpConfigError> {
    let user = config::user_entries(config_dir)?;
    Ok(config::servers(project, &user)?
        .into_iter()
        .filter(|s| s.enabled)
        .collect())
}

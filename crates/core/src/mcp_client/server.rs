//! One configured server for the session's life: connected (a stdio program inside the
//! session's walls, or a streamable HTTP endpoint), its tools listed and read again when it says
//! they changed, and started again with backoff when it ends. A stdio server without a call for
//! its `idle_exit_sec` is let go (its process ended, its tools still offered) and started again
//! by the next call, so a waiting session holds no server's process (a daemon with dozens of
//! waiting sessions held some 100 MiB of servers for each).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use intendant_protocol::events::{AppEvent, McpServerState};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, Peer, RoleClient};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::Notify;

use super::config::{McpServer, Transport};
use crate::bus::EventBus;
use crate::child::{CancelToken, ChildReport, Limits, Overflow};
use crate::sandboxed::{self, Confinement, SandboxedCommand, Walls};

/// Largest message a stdio server may send; a longer line is dropped by the transport (the call
/// it answered then fails at its timeout) and never buffered.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of a server's stderr kept for its log file.
const STDERR_KEPT: usize = 1024 * 1024;
/// Bytes of the end of its stderr shown in an event.
const STDERR_TAIL: usize = 2048;
/// Failures in a row after which a server is not started again this session.
pub const MAX_FAILURES: u32 = 5;
/// The first pause before a restart; each failure in a row doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a server whose connection closed may take to exit by itself before it is stopped.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// A server that ran this long before it ended starts again with a clean record.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Where a server is now.
#[derive(Debug, Clone)]
pub enum Status {
    /// Being started.
    Starting,
    /// Connected, with the tools it listed.
    Ready {
        /// The client side of the connection, for calls.
        peer: Peer<RoleClient>,
        /// Its tools as listed.
        tools: Vec<Tool>,
    },
    /// Not running; why.
    Down {
        /// What happened last.
        reason: String,
    },
    /// Let go after its `idle_exit_sec` without a call; the next call starts it again (it stays
    /// so until it is ready again).
    Resting {
        /// Its tools as last listed, still offered.
        tools: Vec<Tool>,
    },
}

/// What the session gives every server: its walls, its project, where artifacts go, the
/// controller's environment (for `env_vars` and tokens; never logged) and the bus.
#[derive(Clone)]
pub struct Context {
    /// The session's walls (the runtime, the sandbox, the network, the cgroups).
    pub walls: Walls,
    /// The project root: a stdio server's default working directory and a write root.
    pub project_root: PathBuf,
    /// The session's artifacts directory: each server's scratch directory and stderr log.
    pub artifacts_dir: PathBuf,
    /// The controller's environment as it started (credentials included).
    pub process_env: Arc<BTreeMap<String, String>>,
    /// Where the server's events go.
    pub bus: EventBus,
    /// Cancelled when the session's servers stop.
    pub stop: CancelToken,
}

/// One server and its current status.
pub struct Slot {
    /// Its configuration.
    pub config: McpServer,
    status: Mutex<Status>,
    /// Set when any server's status changes (shared by a session's slots: the hub rebuilds
    /// its catalog).
    changed: Arc<AtomicBool>,
    /// Told at each change of its status (a call waiting for the server to be ready).
    status_changed: Notify,
    /// The calls under way and when the last one ended.
    calls: Mutex<Calls>,
    /// Asks a server let go to start again.
    wake: Notify,
}

/// The calls of one server: it is let go only once none has run for its `idle_exit`.
#[derive(Debug, Clone, Copy)]
struct Calls {
    running: usize,
    last: Instant,
}

/// A call under way; its drop ends it.
pub struct CallUnderWay<'a> {
    slot: &'a Slot,
}

impl Drop for CallUnderWay<'_> {
    fn drop(&mut self) {
        let mut calls = self.slot.calls();
        calls.running = calls.running.saturating_sub(1);
        calls.last = Instant::now();
    }
}

impl Slot {
    /// A slot for `config`, starting; `changed` is set at each change of its status.
    pub fn new(config: McpServer, changed: Arc<AtomicBool>) -> Slot {
        Slot {
            config,
            status: Mutex::new(Status::Starting),
            changed,
            status_changed: Notify::new(),
            calls: Mutex::new(Calls {
                running: 0,
                last: Instant::now(),
            }),
            wake: Notify::new(),
        }
    }

    /// Its status now.
    pub fn status(&self) -> Status {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, status: Status) {
        *self.lock() = status;
        self.changed.store(true, Ordering::SeqCst);
        self.status_changed.notify_waiters();
    }

    /// Counts a call from now until the returned guard is dropped: the server is not let go
    /// meanwhile.
    pub fn begin_call(&self) -> CallUnderWay<'_> {
        self.calls().running += 1;
        CallUnderWay { slot: self }
    }

    /// The server's peer once it is ready: at once when it is, after its start when it is
    /// starting or was let go (which asks it to start again), each bounded by its
    /// `startup_timeout_sec`; else why it is not running.
    pub async fn ready(&self) -> Result<Peer<RoleClient>, String> {
        let name = &self.config.name;
        let deadline = tokio::time::Instant::now() + self.config.startup_timeout;
        loop {
            let changed = self.status_changed.notified();
            tokio::pin!(changed);
            // Registered before the look, so a change in between is not missed.
            changed.as_mut().enable();
            match self.status() {
                Status::Ready { peer, .. } => return Ok(peer),
                Status::Down { reason } => {
                    return Err(format!("the MCP server {name} is not running: {reason}"));
                }
                Status::Resting { .. } => self.wake.notify_one(),
                Status::Starting => {}
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!(
                    "the MCP server {name} did not start within {} s (startup_timeout_sec); \
                     try again shortly",
                    self.config.startup_timeout.as_secs_f64()
                ));
            }
        }
    }

    /// Resolves once no call has run for `after`, the slot then [`Status::Resting`] with the
    /// tools it listed. Decided under the calls' lock, so a call either began before (and the
    /// server is kept) or finds it resting and wakes it: none gets the peer of a server on its
    /// way out.
    async fn rest_after(&self, after: Duration) {
        loop {
            let wait = {
                let calls = self.calls();
                let due = calls.last + after;
                if calls.running == 0 && Instant::now() >= due {
                    let tools = match self.status() {
                        Status::Ready { tools, .. } | Status::Resting { tools } => tools,
                        Status::Starting | Status::Down { .. } => Vec::new(),
                    };
                    // A wake a call left while the server ran is not a call for it now; one
                    // after this is (the call saw it resting).
                    let stale = self.wake.notified();
                    tokio::pin!(stale);
                    stale.as_mut().enable();
                    self.set(Status::Resting { tools });
                    return;
                }
                if calls.running == 0 {
                    due.saturating_duration_since(Instant::now())
                } else {
                    after
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// The client side: it hears `tools/list_changed`.
#[derive(Clone)]
struct Handler {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("intendant", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// A live connection and what ends it.
struct Live {
    peer: Peer<RoleClient>,
    /// Ends the client (its transport).
    close: rmcp::service::RunningServiceCancellationToken,
    /// Resolves when the client stopped (the transport closed or was cancelled).
    serving: tokio::task::JoinHandle<()>,
    /// A stdio server's process, supervised to its end, and its stop.
    process: Option<(
        tokio::task::JoinHandle<std::io::Result<ChildReport>>,
        CancelToken,
    )>,
    tools_changed: Arc<Notify>,
}

/// How a connection ended.
enum Ended {
    /// The session's servers were stopped.
    Stopped,
    /// The server went away, with why.
    Lost(String),
    /// It was let go after its `idle_exit` without a call.
    Rested,
}

/// Runs `slot` until the session's servers stop: connects, lists its tools, watches for
/// changes and for its end, and starts it again with backoff. `first` is notified once the
/// first attempt is over, whatever its result.
pub async fn supervise(slot: Arc<Slot>, ctx: Context, first: Arc<Notify>) {
    let name = slot.config.name.clone();
    let emit = |state: McpServerState, detail: String| {
        ctx.bus.emit(AppEvent::McpServer {
            server: name.clone(),
            state,
            detail,
        });
    };
    let mut failures = 0u32;
    let mut first = Some(first);
    loop {
        // A server started again after it was let go keeps offering its tools meanwhile.
        if !matches!(slot.status(), Status::Resting { .. }) {
            slot.set(Status::Starting);
        }
        let started = Instant::now();
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(slot.config.startup_timeout, connect(&slot.config, &ctx)) => attempt,
            () = ctx.stop.cancelled() => return,
        };
        let reason = match attempt {
            Ok(Ok((live, tools))) => {
                emit(McpServerState::Ready, tool_count(&tools));
                slot.set(Status::Ready {
                    peer: live.peer.clone(),
                    tools,
                });
                if let Some(first) = first.take() {
                    first.notify_one();
                }
                match watch(&slot, live, &ctx).await {
                    Ended::Stopped => return,
                    Ended::Lost(reason) => {
                        emit(McpServerState::Exited, reason.clone());
                        reason
                    }
                    Ended::Rested => {
                        if !rest(&slot, &ctx).await {
                            return;
                        }
                        failures = 0;
                        continue;
                    }
                }
            }
            Ok(Err(reason)) => {
                emit(McpServerState::Failed, reason.clone());
                reason
            }
            Err(_) => {
                let reason = format!(
                    "it did not start and list its tools within {} s (startup_timeout_sec)",
                    slot.config.startup_timeout.as_secs_f64()
                );
                emit(McpServerState::Failed, reason.clone());
                reason
            }
        };
        failures = if started.elapsed() >= STABLE_AFTER {
            1
        } else {
            failures + 1
        };
        if failures >= MAX_FAILURES {
            emit(
                McpServerState::GaveUp,
                format!("{failures} failures in a row; its tools are gone for this session"),
            );
            slot.set(Status::Down { reason });
            // Told once the status says why: whoever waits reads the failure, never `Starting`.
            if let Some(first) = first.take() {
                first.notify_one();
            }
            return;
        }
        let pause = backoff(failures);
        slot.set(Status::Down {
            reason: format!("{reason}; restarting in {} s", pause.as_secs_f64()),
        });
        if let Some(first) = first.take() {
            first.notify_one();
        }
        emit(
            McpServerState::Restarting,
            format!(
                "in {} s (failure {failures} of {MAX_FAILURES})",
                pause.as_secs_f64()
            ),
        );
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = ctx.stop.cancelled() => return,
        }
    }
}

/// Holds `slot`, let go and resting (said on the bus), its tools still offered, until a call
/// asks for it (`true`) or the session's servers stop (`false`).
async fn rest(slot: &Slot, ctx: &Context) -> bool {
    let idle = slot.config.idle_exit.unwrap_or_default().as_secs_f64();
    ctx.bus.emit(AppEvent::McpServer {
        server: slot.config.name.clone(),
        state: McpServerState::LetGo,
        detail: format!("no call for {idle} s (idle_exit_sec); the next call starts it again"),
    });
    tokio::select! {
        () = slot.wake.notified() => true,
        () = ctx.stop.cancelled() => false,
    }
}

/// The pause before restart number `failures` (1-based): doubling from [`FIRST_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF)
}

fn tool_count(tools: &[Tool]) -> String {
    match tools.len() {
        1 => "1 tool".to_owned(),
        n => format!("{n} tools"),
    }
}

/// Waits for the connection's end, reading the tools again each time the server says they
/// changed; closes it when the session's servers stop.
async fn watch(slot: &Slot, live: Live, ctx: &Context) -> Ended {
    let Live {
        peer,
        close,
        mut serving,
        process,
        tools_changed,
    } = live;
    let (mut process, process_stop) = match process {
        Some((task, stop)) => (Some(task), Some(stop)),
        None => (None, None),
    };
    let mut report: Option<ChildReport> = None;
    let idle_exit = slot.config.idle_exit;
    let ended = loop {
        let exited = async {
            match process.as_mut() {
                Some(task) => task.await.ok(),
                None => std::future::pending().await,
            }
        };
        let idle = async {
            match idle_exit {
                Some(after) => slot.rest_after(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ctx.stop.cancelled() => break Ended::Stopped,
            () = idle => break Ended::Rested,
            _ = &mut serving => break Ended::Lost("its connection closed".into()),
            finished = exited => {
                process = None;
                report = finished.and_then(Result::ok);
                break Ended::Lost("it ended".into());
            }
            () = tools_changed.notified() => {
                match peer.list_all_tools().await {
                    Ok(tools) => {
                        ctx.bus.emit(AppEvent::McpServer {
                            server: slot.config.name.clone(),
                            state: McpServerState::ToolsChanged,
                            detail: tool_count(&tools),
                        });
                        slot.set(Status::Ready { peer: peer.clone(), tools });
                    }
                    Err(e) => break Ended::Lost(format!("it could not list its changed tools: {e}")),
                }
            }
        }
    };
    close.cancel();
    serving.abort();
    if let Some(mut task) = process {
        // A closed connection is usually a process on its way out: its own exit status says
        // more than the stop would.
        let exited = match ended {
            Ended::Lost(_) => tokio::time::timeout(EXIT_WAIT, &mut task).await.ok(),
            Ended::Stopped | Ended::Rested => None,
        };
        let joined = match exited {
            Some(joined) => joined,
            None => {
                if let Some(stop) = &process_stop {
                    stop.cancel();
                }
                task.await
            }
        };
        report = joined.ok().and_then(Result::ok);
    }
    if let Some(stop) = process_stop {
        stop.cancel();
    }
    keep_stderr(ctx, &slot.config.name, report.as_ref());
    match ended {
        Ended::Lost(reason) if report.is_some() => {
            Ended::Lost(format!("{reason}; {}", exit_reason(report.as_ref())))
        }
        other => other,
    }
}

/// Why a stdio server's process ended, with the end of its stderr.
fn exit_reason(report: Option<&ChildReport>) -> String {
    let Some(report) = report else {
        return "its process ended".into();
    };
    let how = match report.ending {
        crate::child::Ending::Exited(Some(code)) => {
            format!("its process exited with status {code}")
        }
        crate::child::Ending::Exited(None) => "its process was killed by a signal".into(),
        crate::child::Ending::TimedOut => "its process ran out of time".into(),
        crate::child::Ending::Cancelled => "its process was stopped".into(),
        crate::child::Ending::OutputTooLarge => "its process wrote too much".into(),
    };
    let tail = report.stderr_tail.trim();
    if tail.is_empty() {
        how
    } else {
        format!(
            "{how}; stderr ends: {}",
            crate::preview::escape_invisible(tail)
        )
    }
}

/// Appends what was kept of a stdio server's stderr to its log in the artifacts directory.
fn keep_stderr(ctx: &Context, name: &str, report: Option<&ChildReport>) {
    let Some(report) = report.filter(|r| !r.stderr.bytes.is_empty()) else {
        return;
    };
    use std::io::Write;
    let path = ctx.artifacts_dir.join(format!("mcp-{name}.stderr.log"));
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(&report.stderr.bytes);
    }
}

/// Connects to `server` and lists its tools.
async fn connect(server: &McpServer, ctx: &Context) -> Result<(Live, Vec<Tool>), String> {
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler {
        tools_changed: Arc::clone(&tools_changed),
    };
    match &server.transport {
        Transport::Stdio {
            command,
            args,
            env,
            env_vars,
            cwd,
            sandbox,
        } => {
            let scratch = ctx.artifacts_dir.join("mcp").join(&server.name);
            std::fs::create_dir_all(&scratch).map_err(|e| {
                format!(
                    "cannot make its scratch directory {}: {e}",
                    scratch.display()
                )
            })?;
            let vars = stdio_vars(env, env_vars, &scratch, &ctx.process_env);
            let cwd = match cwd {
                Some(dir) => crate::runtime_env::absolutize(&ctx.project_root, dir),
                None => ctx.project_root.clone(),
            };
            let confinement = if *sandbox {
                Confinement::Writes(vec![ctx.project_root.clone(), scratch])
            } else {
                Confinement::Unsandboxed
            };
            let command = SandboxedCommand {
                program: command.into(),
                args: args.iter().map(OsString::from).collect(),
                cwd,
                vars,
                confinement,
            };
            let (running, pipes) = sandboxed::spawn(&ctx.walls, &command, stdio_limits())
                .await
                .map_err(|e| e.to_string())?;
            let stop = CancelToken::new();
            let process_stop = stop.clone();
            let mut process = tokio::spawn(async move {
                let stop = process_stop;
                running.finish(stop.cancelled()).await
            });
            let transport = AsyncRwTransport::<RoleClient, _, _>::new(pipes.stdout, pipes.stdin)
                .with_max_line_length(MAX_MESSAGE_BYTES);
            let started = tokio::select! {
                started = handler.serve(transport) => started.map_err(|e| e.to_string()),
                report = &mut process => {
                    return Err(exit_reason(report.ok().and_then(Result::ok).as_ref()));
                }
            };
            let service = match started {
                Ok(service) => service,
                Err(e) => {
                    let why = format!("the MCP handshake failed: {e}");
                    return Err(abandon(process, &stop, ctx, &server.name, why).await);
                }
            };
            let tools = match service.peer().list_all_tools().await {
                Ok(tools) => tools,
                Err(e) => {
                    let why = format!("it could not list its tools: {e}");
                    return Err(abandon(process, &stop, ctx, &server.name, why).await);
                }
            };
            let live = live(service, Some((process, stop)), tools_changed);
            Ok((live, tools))
        }
        Transport::Http {
            url,
            bearer_token_env_var,
            headers,
            env_headers,
        } => {
            let config = http_config(
                url,
                bearer_token_env_var.as_deref(),
                headers,
                env_headers,
                &ctx.process_env,
            )?;
            connect_http(url, config, handler, tools_changed).await
        }
    }
}

/// The handshake with a streamable HTTP server at `url`, and its tools.
async fn connect_http(
    url: &str,
    config: rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig,
    handler: Handler,
    tools_changed: Arc<Notify>,
) -> Result<(Live, Vec<Tool>), String> {
    let client = intendant_netguard::http::client().map_err(|e| e.to_string())?;
    let transport =
        rmcp::transport::StreamableHttpClientTransport::with_client(client.clone(), config);
    let service = match handler.serve(transport).await {
        Ok(service) => service,
        Err(e) => {
            let mut why = format!("the MCP handshake with {url} failed: {e}");
            if let Some(cause) = why_unreachable(&client, url).await {
                why.push_str(&format!(" ({cause})"));
            }
            return Err(why);
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("it could not list its tools: {e}"))?;
    Ok((live(service, None, tools_changed), tools))
}

/// Why `url` cannot be reached at all (a refused connection, a certificate not trusted), asked
/// once a handshake failed: rmcp's error keeps only the first line of the HTTP client's, and the
/// cause is in the rest. `None` when the server answers (the handshake failed for another reason).
async fn why_unreachable(client: &reqwest::Client, url: &str) -> Option<String> {
    let probe = client
        .head(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    probe
        .err()
        .map(|e| intendant_netguard::http::error_chain(&e))
}

/// Stops a stdio server that failed to start, keeps its stderr, and says why it failed.
async fn abandon(
    process: tokio::task::JoinHandle<std::io::Result<ChildReport>>,
    stop: &CancelToken,
    ctx: &Context,
    name: &str,
    why: String,
) -> String {
    stop.cancel();
    let report = process.await.ok().and_then(Result::ok);
    keep_stderr(ctx, name, report.as_ref());
    format!("{why}; {}", exit_reason(report.as_ref()))
}

fn live(
    service: rmcp::service::RunningService<RoleClient, Handler>,
    process: Option<(
        tokio::task::JoinHandle<std::io::Result<ChildReport>>,
        CancelToken,
    )>,
    tools_changed: Arc<Notify>,
) -> Live {
    let peer = service.peer().clone();
    let close = service.cancellation_token();
    let serving = tokio::spawn(async move {
        let _ = service.waiting().await;
    });
    Live {
        peer,
        close,
        serving,
        process,
        tools_changed,
    }
}

/// A stdio server's variables: its `env`, the controller's variables `env_vars` names (those
/// set), and its scratch directory as `TMPDIR` and npm's cache (so `npx -y PACKAGE` works
/// inside the walls), unless its `env` sets them.
fn stdio_vars(
    env: &BTreeMap<String, String>,
    env_vars: &[String],
    scratch: &Path,
    process_env: &BTreeMap<String, String>,
) -> Vec<(String, OsString)> {
    let mut vars: Vec<(String, OsString)> = Vec::new();
    for (name, value) in [
        ("TMPDIR", scratch.join("tmp")),
        ("npm_config_cache", scratch.join("npm-cache")),
    ] {
        let _ = std::fs::create_dir_all(&value);
        vars.push((name.to_owned(), value.into_os_string()));
    }
    for name in env_vars {
        if let Some(value) = process_env.get(name) {
            vars.retain(|(k, _)| k != name);
            vars.push((name.clone(), value.into()));
        }
    }
    for (name, value) in env {
        vars.retain(|(k, _)| k != name);
        vars.push((name.clone(), value.into()));
    }
    vars
}

fn stdio_limits() -> Limits {
    Limits {
        max_stdout: 0,
        stdout_overflow: Overflow::Drain,
        max_stderr: STDERR_KEPT,
        stderr_tail: STDERR_TAIL,
        deadline: None,
        grace: Duration::from_secs(2),
        drain: Duration::from_secs(2),
    }
}

/// The HTTP transport's configuration: the bearer token and header values from the named
/// variables (a named variable that is unset is an error: the server would refuse us anyway).
fn http_config(
    url: &str,
    bearer_token_env_var: Option<&str>,
    headers: &BTreeMap<String, String>,
    env_headers: &BTreeMap<String, String>,
    process_env: &BTreeMap<String, String>,
) -> Result<rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig, String> {
    let lookup = |var: &str| {
        process_env
            .get(var)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| format!("the variable {var} it names is not set"))
    };
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        )
        .max_sse_event_size(MAX_MESSAGE_BYTES);
    if let Some(var) = bearer_token_env_var {
        config = config.auth_header(lookup(var)?);
    }
    let mut custom = std::collections::HashMap::new();
    let named = env_headers
        .iter()
        .map(|(header, var)| lookup(var).map(|value| (header.clone(), value)));
    for pair in headers
        .iter()
        .map(|(h, v)| Ok((h.clone(), v.clone())))
        .chain(named)
    {
        let (header, value) = pair?;
        let name = http::HeaderName::from_bytes(header.as_bytes())
            .map_err(|e| format!("header {header:?}: {e}"))?;
        let value = http::HeaderValue::from_str(&value)
            .map_err(|e| format!("the value of header {header:?}: {e}"))?;
        custom.insert(name, value);
    }
    Ok(config.custom_headers(custom))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn a_stdio_server_gets_its_env_the_named_variables_and_its_scratch() {
        let scratch = tempfile::tempdir().unwrap();
        let process: BTreeMap<String, String> = [
            ("GITHUB_TOKEN", "ghp-named"),
            ("OPENAI_API_KEY", "sk-not-named"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let env: BTreeMap<String, String> = [("LOG".to_owned(), "1".to_owned())].into();
        let vars = stdio_vars(
            &env,
            &["GITHUB_TOKEN".to_owned(), "UNSET_VAR".to_owned()],
            scratch.path(),
            &process,
        );
        let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["TMPDIR", "npm_config_cache", "GITHUB_TOKEN", "LOG"]);
        assert!(scratch.path().join("tmp").is_dir());
    }

    #[test]
    fn http_tokens_come_from_named_variables_only() {
        let process: BTreeMap<String, String> = [("TOKEN".to_owned(), "secret".to_owned())].into();
        let headers: BTreeMap<String, String> = [("X-A".to_owned(), "1".to_owned())].into();
        let env_headers: BTreeMap<String, String> = [("X-B".to_owned(), "TOKEN".to_owned())].into();
        assert!(
            http_config(
                "http://127.0.0.1:1/mcp",
                Some("TOKEN"),
                &headers,
                &env_headers,
                &process
            )
            .is_ok()
        );
        let e = http_config(
            "http://127.0.0.1:1/mcp",
            Some("MISSING"),
            &headers,
            &env_headers,
            &process,
        )
        .unwrap_err();
        assert!(e.contains("MISSING"), "{e}");
        let bad: BTreeMap<String, String> = [("bad header".to_owned(), "1".to_owned())].into();
        assert!(http_config("http://x", None, &bad, &BTreeMap::new(), &process).is_err());
    }
}

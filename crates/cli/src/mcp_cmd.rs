//! `intendant mcp`: the MCP server (`intendant_server::mcp`) on stdin and stdout, for one
//! client (`claude mcp add intendant -- intendant mcp`, a codex `mcp_servers` entry).
//!
//! Sessions run in the daemon of the state root: the server connects to it through the control
//! socket, and when none runs it starts one in the background (`intendant serve`, its stderr
//! appended to `$INTENDANT_HOME/daemon.log`), which outlives this client and serves the next.
//! `--no-daemon` runs sessions in this process instead, for this one client; they end with it.
//! stdout carries MCP messages only.

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use intendant_core::host::SessionHost;
use intendant_core::session_log::intendant_home;
use intendant_protocol::daemon::HostErrorCode;
use intendant_server::socket::RemoteHost;

/// How long a daemon started here may take to listen.
const DAEMON_START: Duration = Duration::from_secs(15);
/// Pause between connection attempts while it starts.
const RETRY: Duration = Duration::from_millis(100);
/// The daemon's log in the state root, when `intendant mcp` started it.
const DAEMON_LOG: &str = "daemon.log";
/// Its hello's name: begins with `socket::MCP_CLIENT`, so the daemon serves it as a model's
/// connection (a test pins it).
const CLIENT: &str = concat!("intendant-mcp ", env!("CARGO_PKG_VERSION"));

/// Arguments of `intendant mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Run sessions in this process, for this one client, instead of in the daemon of the state
    /// root (they end when the client disconnects).
    #[arg(long)]
    no_daemon: bool,
}

/// Runs `intendant mcp`.
pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let home = intendant_home()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let policy = intendant_daemon::control_plane::mcp_policy(&home)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async {
        let host: Arc<dyn SessionHost> = if args.no_daemon {
            in_process(&home)?
        } else {
            Arc::new(connect_or_start(&home).await?)
        };
        let served = intendant_server::mcp::serve_stdio(host.clone(), cwd, policy).await;
        if args.no_daemon {
            let _ = host.shutdown().await;
        }
        served.map_err(|e| anyhow::anyhow!("MCP server: {e}"))
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    result.map(|()| ExitCode::SUCCESS)
}

/// The daemon of `home`, started in the background when none runs.
async fn connect_or_start(home: &std::path::Path) -> anyhow::Result<RemoteHost> {
    match RemoteHost::connect(home, CLIENT).await {
        Ok(host) => return Ok(host),
        Err(e) if e.code == HostErrorCode::Unavailable => {}
        Err(e) => anyhow::bail!("cannot reach the daemon: {}", e.message),
    }
    let mut daemon = start_daemon(home)?;
    let deadline = tokio::time::Instant::now() + DAEMON_START;
    loop {
        match RemoteHost::connect(home, CLIENT).await {
            Ok(host) => return Ok(host),
            Err(e) if e.code != HostErrorCode::Unavailable => {
                anyhow::bail!("cannot reach the daemon: {}", e.message)
            }
            Err(_) => {}
        }
        // A daemon that exited already (another one won the state root's lock meanwhile, and
        // that one is reached on the next attempt; or it failed, see its log).
        if let Ok(Some(status)) = daemon.try_wait()
            && !status.success()
            && RemoteHost::connect(home, CLIENT).await.is_err()
        {
            anyhow::bail!(
                "the daemon started for {} exited ({status}); see {}",
                home.display(),
                home.join(DAEMON_LOG).display()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the daemon started for {} did not listen within {}s; see {}",
                home.display(),
                DAEMON_START.as_secs(),
                home.join(DAEMON_LOG).display()
            );
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Starts `intendant serve` for `home` in its own process group, detached from this client's
/// terminal and stdio. Credentials live only in this process's memory
/// (`intendant_core::secrets`), so they are handed to the daemon explicitly.
fn start_daemon(home: &std::path::Path) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(home).with_context(|| format!("cannot create {}", home.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join(DAEMON_LOG))
        .with_context(|| format!("cannot open {}", home.join(DAEMON_LOG).display()))?;
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let secrets = intendant_core::secrets::vars_os()
        .into_iter()
        .filter(|(name, _)| {
            name.to_str()
                .is_some_and(intendant_core::secrets::is_secret_name)
        });
    std::process::Command::new(exe)
        .arg("serve")
        .env("INTENDANT_HOME", home)
        .envs(secrets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the daemon (intendant serve)")
}

/// A session supervisor in this process, for `--no-daemon`; what it tells an operator goes to
/// stderr (stdout is the protocol's).
#[allow(clippy::print_stderr)]
fn in_process(home: &std::path::Path) -> anyhow::Result<Arc<dyn SessionHost>> {
    let log = intendant_daemon::log::DaemonLog::new(|line| eprintln!("intendant mcp: {line}"));
    let supervisor = crate::wiring::daemon_supervisor(home, log)
        .map_err(|e| anyhow::anyhow!("cannot start the session supervisor: {}", e.message))?;
    Ok(Arc::new(supervisor))
}

#[cfg(test)]
mod tests {
    #[test]
    fn its_hello_names_an_mcp_server() {
        assert!(super::CLIENT.starts_with(intendant_server::socket::MCP_CLIENT));
    }
}

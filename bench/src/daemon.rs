//! What the benchmarks that drive a real `intendant serve` share: the daemon's command line, a
//! connection to its socket once it answers, and a `nats-server` and a git remote of their own
//! for the fleet's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_server::socket::RemoteHost;

/// `intendant` (`bin`) with a scrubbed environment: its home and state root beneath `root`,
/// pointed at the fake model on `port`, with no output (`TOKIO_WORKER_THREADS` is kept).
pub fn command(bin: &Path, root: &Path, port: u16) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("INTENDANT_HOME", root.join("state"))
        .env("OPENAI_API_KEY", "sk-bench")
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Passed on, so a run can give the daemon as many async workers as a bigger machine's
    // default (`TOKIO_WORKER_THREADS=6`), the setting a race in the event stream showed under,
    // and tune its allocators, to weigh what they hold of its RSS and cost of its CPU:
    // jemalloc's options (its Rust heap) and glibc's arenas (what C libraries allocate).
    for passed in [
        "TOKIO_WORKER_THREADS",
        "_RJEM_MALLOC_CONF",
        "MALLOC_ARENA_MAX",
    ] {
        if let Some(value) = std::env::var_os(passed) {
            cmd.env(passed, value);
        }
    }
    cmd
}

/// The socket of the daemon whose state root is `home`, as `client`, once it answers; an
/// error after `wait`. Tried every millisecond for the first half second (a start is timed by
/// when this returns), then every 20 ms.
pub async fn connect(home: &Path, client: &str, wait: Duration) -> Result<Arc<RemoteHost>> {
    let started = Instant::now();
    loop {
        match RemoteHost::connect(home, client).await {
            Ok(host) => return Ok(Arc::new(host)),
            Err(e) if started.elapsed() > wait => bail!("the daemon never answered: {e}"),
            Err(_) if started.elapsed() < Duration::from_millis(500) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `nats-server` for benchmark `bench`; where it is not installed, each of `rows` (measuring
/// `measured`) is recorded as unavailable, the run says so, and `None` is returned.
#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
pub fn nats_server_for(bench: &str, rows: &[&str], measured: &str) -> Result<Option<PathBuf>> {
    if let Some(nats) = nats_server() {
        return Ok(Some(nats));
    }
    for row in rows {
        crate::report::unavailable(
            row,
            measured,
            "nats-server is not installed (apt-get install nats-server)",
        )?;
    }
    println!("{bench}: nats-server is not installed; nothing measured");
    Ok(None)
}

/// `nats-server` on the `PATH` or where Debian puts it.
fn nats_server() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nats-server"))
        .chain([PathBuf::from("/usr/sbin/nats-server")])
        .find(|p| p.is_file())
}

/// Starts `nats-server -js` (`bin`) on a free loopback port storing in `dir`; it and its URL,
/// or an error if it does not listen within `wait`.
pub fn start_nats(bin: &Path, dir: &Path, wait: Duration) -> Result<(Child, String)> {
    std::fs::create_dir_all(dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting nats-server")?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > wait {
            bail!("nats-server never listened");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, format!("nats://127.0.0.1:{port}")))
}

/// A bare repository `remote.git` in `dir` with one commit on `main`; its path.
pub fn bare_remote(dir: &Path) -> Result<PathBuf> {
    let seed = dir.join("seed");
    std::fs::create_dir_all(&seed)?;
    let git = |cwd: &Path, args: &[&str]| -> Result<()> {
        let ok = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@b"])
            .args(args)
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?
            .success();
        if ok {
            Ok(())
        } else {
            bail!("git {args:?} failed")
        }
    };
    git(dir, &["init", "--quiet", "--bare", "remote.git"])?;
    git(&seed, &["init", "--quiet", "-b", "main"])?;
    std::fs::write(seed.join("README"), "bench\n")?;
    git(&seed, &["add", "README"])?;
    git(&seed, &["commit", "--quiet", "-m", "first"])?;
    let remote = dir.join("remote.git");
    git(
        &seed,
        &["push", "--quiet", &remote.display().to_string(), "main"],
    )?;
    Ok(remote)
}

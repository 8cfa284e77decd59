//! Debian's `nats-server` for the fleet's tests: JetStream on a free loopback port, its store in
//! a directory the test owns. The test keeps the [`std::process::Child`] and ends it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::optional;

/// How long a started server may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed `nats-server` (on `PATH`, or Debian's `/usr/sbin/nats-server`), or `None`
/// after the note of [`optional::require`] (a failure under `CI`).
pub fn binary() -> Option<PathBuf> {
    optional::require(
        optional::on_path("nats-server")
            .or_else(|| Some(PathBuf::from("/usr/sbin/nats-server")).filter(|path| path.is_file())),
        "nats-server is not installed",
        "apt-get install nats-server",
    )
}

/// A loopback port free a moment ago.
pub fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `bin` with JetStream on `127.0.0.1:port`, its store in `store`, with `extra`
/// arguments (e.g. `--user`, `--pass`), and returns once it listens; an error (the process
/// killed) when it does not within ten seconds.
pub fn spawn(bin: &Path, port: u16, store: &Path, extra: &[&str]) -> io::Result<Child> {
    let mut child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(store)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + LISTEN_TIMEOUT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nats-server did not listen on port {port} within {LISTEN_TIMEOUT:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

//! Telling the service manager that started the daemon how it is: systemd's `sd_notify`
//! protocol for `Type=notify` services. `READY=1` once the control socket (and the dashboard,
//! when asked for) answers, `STATUS=` the sessions' load as it changes, `WATCHDOG=1` while the
//! daemon answers, `STOPPING=1` when it drains. Each is one datagram of `NAME=value` lines to
//! the socket `NOTIFY_SOCKET` names: an absolute path, or `@NAME` in the abstract namespace.
//!
//! The design decision to know: the manager's variables are taken out of the process
//! environment when `intendant` starts ([`take_from_env`]), before any thread or child exists,
//! so nothing the daemon starts (a session's command, hook, MCP server or worker) inherits
//! them, not even through the owner's `INTENDANT_ENV_PASSTHROUGH`. A process that finds the
//! socket anyway is refused by systemd itself, which takes a service's notifications from its
//! main process only (`NotifyAccess=main`, the default; docs/daemon.md says to keep it).

use std::ffi::{OsStr, OsString};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The variable naming the manager's socket.
const SOCKET_VAR: &str = "NOTIFY_SOCKET";
/// The variable giving the watchdog's timeout, in microseconds.
const WATCHDOG_USEC_VAR: &str = "WATCHDOG_USEC";
/// The variable naming the process the watchdog is meant for (none: this one).
const WATCHDOG_PID_VAR: &str = "WATCHDOG_PID";

/// How long a notification may wait for room in the manager's queue before it is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// What the manager set, as [`take_from_env`] found it.
#[derive(Debug, Default)]
struct Taken {
    socket: Option<OsString>,
    watchdog_usec: Option<OsString>,
    watchdog_pid: Option<OsString>,
}

/// The manager's variables, taken out of the environment at start.
static TAKEN: OnceLock<Taken> = OnceLock::new();

/// Takes `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` out of the process environment
/// and keeps them for [`Manager::from_start`]. A second call keeps the first one's.
///
/// # Safety
/// No other thread may exist (it edits the process environment); call it at the start of
/// `main`.
pub unsafe fn take_from_env() {
    let take = |name: &str| {
        let value = std::env::var_os(name);
        if value.is_some() {
            // SAFETY: the caller guarantees this process is single-threaded.
            unsafe { std::env::remove_var(name) };
        }
        value
    };
    let taken = Taken {
        socket: take(SOCKET_VAR),
        watchdog_usec: take(WATCHDOG_USEC_VAR),
        watchdog_pid: take(WATCHDOG_PID_VAR),
    };
    let _ = TAKEN.set(taken);
}

/// Why the manager's variables cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// `NOTIFY_SOCKET` names no socket this daemon can send to.
    #[error(
        "NOTIFY_SOCKET={0:?} names no socket this daemon can send to (an absolute path short \
         enough for a socket address, or @NAME): the service manager cannot be told the daemon \
         is ready"
    )]
    Address(String),
    /// `WATCHDOG_USEC` is not a duration.
    #[error("WATCHDOG_USEC={0:?} is not a number of microseconds")]
    Watchdog(String),
    /// No socket to send from.
    #[error("cannot make a socket to tell the service manager: {0}")]
    Socket(std::io::Error),
}

/// The service manager that started this process and asked to be told.
#[derive(Debug)]
pub struct Manager {
    socket: UnixDatagram,
    addr: SocketAddr,
    watchdog: Option<Duration>,
}

impl Manager {
    /// The manager [`take_from_env`] found; `None` when none asked to be told (or it was never
    /// called).
    pub fn from_start() -> Result<Option<Manager>, NotifyError> {
        let Some(taken) = TAKEN.get() else {
            return Ok(None);
        };
        Manager::new(
            taken.socket.as_deref(),
            taken.watchdog_usec.as_deref(),
            taken.watchdog_pid.as_deref(),
            std::process::id(),
        )
    }

    /// The manager the variables name, for process `own_pid`: the watchdog is this process's
    /// only when `WATCHDOG_PID` is unset or names it.
    fn new(
        socket: Option<&OsStr>,
        watchdog_usec: Option<&OsStr>,
        watchdog_pid: Option<&OsStr>,
        own_pid: u32,
    ) -> Result<Option<Manager>, NotifyError> {
        let Some(socket) = socket.filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let addr = address(socket)?;
        let watchdog = match watchdog_usec {
            Some(usec) => watchdog_period(usec)?,
            None => None,
        };
        let ours = watchdog_pid
            .is_none_or(|pid| pid.to_str().and_then(|p| p.parse::<u32>().ok()) == Some(own_pid));
        let socket = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
        socket
            .set_write_timeout(Some(SEND_TIMEOUT))
            .map_err(NotifyError::Socket)?;
        Ok(Some(Manager {
            socket,
            addr,
            watchdog: watchdog.filter(|_| ours),
        }))
    }

    /// The watchdog's timeout, when the manager keeps one on this process: a [`Manager::alive`]
    /// is due well within each.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// The daemon answers: `READY=1`, with `status`.
    pub fn ready(&self, status: &str) -> std::io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// The daemon still answers (`WATCHDOG=1` when the manager keeps a watchdog), and its
    /// status when it changed.
    pub fn alive(&self, status: Option<&str>) -> std::io::Result<()> {
        let mut lines = Vec::new();
        if self.watchdog.is_some() {
            lines.push("WATCHDOG=1".to_owned());
        }
        if let Some(status) = status {
            lines.push(format!("STATUS={}", one_line(status)));
        }
        if lines.is_empty() {
            return Ok(());
        }
        self.send(&lines.join("\n"))
    }

    /// The daemon drains: `STOPPING=1`, with `status`.
    pub fn stopping(&self, status: &str) -> std::io::Result<()> {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
    }

    fn send(&self, message: &str) -> std::io::Result<()> {
        self.socket
            .send_to_addr(message.as_bytes(), &self.addr)
            .map(|_| ())
    }
}

/// How often the manager hears how the daemon is, at most (more often when half its watchdog's
/// timeout is shorter).
const STATUS_EVERY: Duration = Duration::from_secs(2);

/// Tells `manager` the daemon is ready, then, every [`STATUS_EVERY`] or half its watchdog's
/// timeout, that it is alive (`WATCHDOG=1`), with its status when that changed. Each time
/// `look` (the daemon's status in a line) runs first, on a blocking thread, and the next look
/// waits for it: a daemon whose async workers, or whatever `look` reads, are stuck tells
/// nothing more, and a manager keeping a watchdog restarts it. The first failure to reach the
/// manager goes to `complain`. Runs until aborted.
pub async fn keep_told<L>(manager: Arc<Manager>, look: L, complain: impl Fn(&std::io::Error))
where
    L: Fn() -> String + Send + Sync + 'static,
{
    let every = manager
        .watchdog()
        .map_or(STATUS_EVERY, |timeout| (timeout / 2).min(STATUS_EVERY));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let look = Arc::new(look);
    let mut told: Option<String> = None;
    let mut complained = false;
    loop {
        ticks.tick().await;
        let (manager, look, last) = (Arc::clone(&manager), Arc::clone(&look), told.clone());
        let sent = tokio::task::spawn_blocking(move || {
            let status = look();
            let sent = match &last {
                None => manager.ready(&status),
                Some(last) => manager.alive((*last != status).then_some(status.as_str())),
            };
            sent.map(|()| status)
        });
        match sent.await {
            Ok(Ok(status)) => told = Some(status),
            Ok(Err(e)) if !complained => {
                complained = true;
                complain(&e);
            }
            Ok(Err(_)) => {}
            Err(_) => return,
        }
    }
}

/// The address `NOTIFY_SOCKET` names.
fn address(socket: &OsStr) -> Result<SocketAddr, NotifyError> {
    use std::os::unix::ffi::OsStrExt;
    let bad = || NotifyError::Address(socket.to_string_lossy().into_owned());
    match socket.as_bytes() {
        [b'/', ..] => SocketAddr::from_pathname(socket).map_err(|_| bad()),
        [b'@', name @ ..] if !name.is_empty() => abstract_address(name).ok_or_else(bad),
        _ => Err(bad()),
    }
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> Option<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name).ok()
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_name: &[u8]) -> Option<SocketAddr> {
    None
}

/// `WATCHDOG_USEC` as a duration; `None` for 0 (no watchdog).
fn watchdog_period(usec: &OsStr) -> Result<Option<Duration>, NotifyError> {
    let micros = usec
        .to_str()
        .and_then(|u| u.trim().parse::<u64>().ok())
        .ok_or_else(|| NotifyError::Watchdog(usec.to_string_lossy().into_owned()))?;
    Ok((micros > 0).then(|| Duration::from_micros(micros)))
}

/// `text` on one line: a newline would start another assignment.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening() -> (tempfile::TempDir, UnixDatagram, OsString) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        (dir, socket, path.into_os_string())
    }

    fn received(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn no_socket_no_manager() {
        assert!(Manager::new(None, None, None, 1).unwrap().is_none());
        assert!(
            Manager::new(Some(OsStr::new("")), Some(OsStr::new("1000")), None, 1)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn each_notification_is_one_datagram_of_assignments() {
        let (_dir, socket, path) = listening();
        let manager = Manager::new(Some(&path), Some(OsStr::new("2000000")), None, 7)
            .unwrap()
            .unwrap();
        assert_eq!(manager.watchdog(), Some(Duration::from_secs(2)));
        manager.ready("0 running,\n1 idle").unwrap();
        assert_eq!(received(&socket), "READY=1\nSTATUS=0 running, 1 idle");
        manager.alive(None).unwrap();
        assert_eq!(received(&socket), "WATCHDOG=1");
        manager.alive(Some("1 running")).unwrap();
        assert_eq!(received(&socket), "WATCHDOG=1\nSTATUS=1 running");
        manager.stopping("stopping").unwrap();
        assert_eq!(received(&socket), "STOPPING=1\nSTATUS=stopping");
    }

    #[test]
    fn the_watchdog_is_only_this_processs() {
        let (_dir, socket, path) = listening();
        let usec = Some(OsStr::new("500000"));
        let other = Manager::new(Some(&path), usec, Some(OsStr::new("8")), 7)
            .unwrap()
            .unwrap();
        assert_eq!(other.watchdog(), None);
        // Without a watchdog and with nothing changed, nothing is sent.
        other.alive(None).unwrap();
        other.alive(Some("s")).unwrap();
        assert_eq!(received(&socket), "STATUS=s");
        let ours = Manager::new(Some(&path), usec, Some(OsStr::new("7")), 7)
            .unwrap()
            .unwrap();
        assert_eq!(ours.watchdog(), Some(Duration::from_millis(500)));
        let off = Manager::new(Some(&path), Some(OsStr::new("0")), None, 7)
            .unwrap()
            .unwrap();
        assert_eq!(off.watchdog(), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_name_is_reached() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("intendant-notify-test-{}", std::process::id());
        let socket =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let manager = Manager::new(Some(OsStr::new(&format!("@{name}"))), None, None, 1)
            .unwrap()
            .unwrap();
        manager.ready("up").unwrap();
        assert_eq!(received(&socket), "READY=1\nSTATUS=up");
    }

    #[test]
    fn the_watchdog_falls_silent_while_the_look_is_stuck() {
        let (_dir, socket, path) = listening();
        let manager = Manager::new(Some(&path), Some(OsStr::new("100000")), None, 7)
            .unwrap()
            .unwrap();
        let table = Arc::new(std::sync::Mutex::new(0u32));
        let read = Arc::clone(&table);
        let look = move || format!("{} running", read.lock().unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let told = rt.spawn(keep_told(Arc::new(manager), look, |e| panic!("{e}")));
        let next = |within: Duration| {
            socket.set_read_timeout(Some(within)).unwrap();
            let mut buf = [0u8; 256];
            let n = socket.recv(&mut buf).ok()?;
            Some(String::from_utf8(buf[..n].to_vec()).unwrap())
        };
        let long = Duration::from_secs(10);
        assert_eq!(next(long).as_deref(), Some("READY=1\nSTATUS=0 running"));
        assert_eq!(next(long).as_deref(), Some("WATCHDOG=1"));
        // The table held (as a stuck daemon's would be): no ping past the one already under
        // way, for twenty of the watchdog's half-periods.
        let mut held = table.lock().unwrap();
        let mut pings = 0;
        while next(Duration::from_secs(1)).is_some() {
            pings += 1;
            assert!(pings <= 1, "pinged while stuck");
        }
        // Let go, with a change: the pings resume and the status follows.
        *held = 3;
        drop(held);
        assert_eq!(next(long).as_deref(), Some("WATCHDOG=1\nSTATUS=3 running"));
        told.abort();
    }

    #[test]
    fn a_manager_gone_is_said_once_and_the_daemon_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("notify").into_os_string();
        let manager = Manager::new(Some(&gone), Some(OsStr::new("100000")), None, 7)
            .unwrap()
            .unwrap();
        let complaints = Arc::new(std::sync::Mutex::new(Vec::new()));
        let heard = Arc::clone(&complaints);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let told = keep_told(
                Arc::new(manager),
                || "0 running".to_owned(),
                move |e| heard.lock().unwrap().push(e.kind()),
            );
            // Ten looks at least (every 50 ms): each fails to reach the manager.
            let _ = tokio::time::timeout(Duration::from_millis(600), told).await;
        });
        let complaints = complaints.lock().unwrap();
        assert_eq!(*complaints, [std::io::ErrorKind::NotFound]);
    }

    #[test]
    fn what_cannot_be_followed_is_named() {
        for bad in ["relative/notify", "@", "vsock:2:1234"] {
            let e = Manager::new(Some(OsStr::new(bad)), None, None, 1).unwrap_err();
            assert!(matches!(e, NotifyError::Address(_)), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        let e = Manager::new(
            Some(OsStr::new("/run/notify")),
            Some(OsStr::new("soon")),
            None,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("WATCHDOG_USEC=\"soon\""), "{e}");
    }
}

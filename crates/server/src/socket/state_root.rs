//! One daemon per state root: the lock, and the socket bound next to it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

/// The lock file's name in the state root; it holds the daemon's pid.
pub const LOCK_FILE: &str = "daemon.lock";
/// The control socket's name in the state root.
pub const SOCKET_FILE: &str = "daemon.sock";

/// Why a daemon cannot serve a state root.
#[derive(Debug, thiserror::Error)]
pub enum StateRootError {
    /// Another daemon holds the lock.
    #[error("a daemon already serves {}{}", home.display(), match (pid, gone) {
        (Some(pid), false) => format!(" (pid {pid})"),
        (Some(pid), true) => format!(
            " (pid {pid}, which has exited, yet a process it started still holds its lock \
             after {} s; try again once that process ends)",
            LOCK_LINGER.as_secs()
        ),
        (None, _) => String::new(),
    })]
    Held {
        /// The state root.
        home: PathBuf,
        /// The holder's pid, as its lock file says.
        pid: Option<u32>,
        /// That process has exited: a child it started still holds the lock's file open.
        gone: bool,
    },
    /// Something listens on the socket although this process holds the lock (a daemon that
    /// takes no lock); it is never replaced.
    #[error("something already listens on {}; it is left alone", path.display())]
    SocketInUse {
        /// The socket's path.
        path: PathBuf,
    },
    /// The socket's path is taken by something that is not a socket.
    #[error("{} exists and is not a socket", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Creating, locking or binding failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateRootError + '_ {
    move |source| StateRootError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<home>/daemon.sock`.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET_FILE)
}

/// The state root's daemon lock, held for as long as this value lives (the kernel drops it
/// when the process dies, so a crash never leaves it held).
#[derive(Debug)]
pub struct DaemonLock {
    home: PathBuf,
    _file: File,
}

impl DaemonLock {
    /// Creates the state root (0700) if needed and takes its lock, writing this process's pid
    /// into it. [`StateRootError::Held`] when another process holds it.
    pub fn acquire(home: &Path) -> Result<DaemonLock, StateRootError> {
        private_dir(home)?;
        let path = home.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc_o_nofollow())
            .open(&path)
            .map_err(io(&path))?;
        lock_waiting_out_a_dead_holder(&file, home, &path, LOCK_LINGER)?;
        file.set_len(0).map_err(io(&path))?;
        file.rewind().map_err(io(&path))?;
        writeln!(file, "{}", std::process::id()).map_err(io(&path))?;
        Ok(DaemonLock {
            home: home.to_path_buf(),
            _file: file,
        })
    }

    /// The state root it locks.
    pub fn home(&self) -> &Path {
        &self.home
    }
}

/// How long a state root's lock is waited for when the daemon named in it has exited.
pub const LOCK_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes `file`'s lock. Held by a daemon that runs: [`StateRootError::Held`] at once. Held
/// while the daemon named in it has exited: waited for, at most `linger`.
///
/// The design decision to know: the lock is the open file's, so it is released only when every
/// descriptor of it is closed, and a daemon killed (`kill -9`) while a child it started was
/// between its fork and its `exec` leaves that child holding a copy for a moment. A restart at
/// once (a supervisor, a script) must not be told a daemon serves when none does.
fn lock_waiting_out_a_dead_holder(
    mut file: &File,
    home: &Path,
    path: &Path,
    linger: std::time::Duration,
) -> Result<(), StateRootError> {
    let deadline = std::time::Instant::now() + linger;
    loop {
        match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => return Err(io(path)(e.into())),
        }
        let mut text = String::new();
        file.rewind().map_err(io(path))?;
        let pid: Option<u32> = file
            .read_to_string(&mut text)
            .ok()
            .and_then(|_| text.trim().parse().ok());
        let gone = pid.is_some_and(|pid| !intendant_core::session_log::process_running(pid));
        if !gone || std::time::Instant::now() >= deadline {
            return Err(StateRootError::Held {
                home: home.to_path_buf(),
                pid,
                gone,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Creates `dir` 0700, or makes an existing one 0700 (the socket's directory must admit nobody
/// else).
fn private_dir(dir: &Path) -> Result<(), StateRootError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io(dir))?;
    let meta = std::fs::metadata(dir).map_err(io(dir))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

/// The bound control socket, not yet serving. The socket file is removed when it is dropped.
#[derive(Debug)]
pub struct ControlSocket {
    pub(super) listener: tokio::net::UnixListener,
    pub(super) path: PathBuf,
    pub(super) home: PathBuf,
    /// Where refused peers are reported.
    pub(super) refusals: intendant_daemon::log::DaemonLog,
    /// What its clients may hold.
    pub(super) limits: intendant_daemon::control_plane::ClientLimits,
    /// The fleet this daemon joined, if any (`ctl status` shows its members).
    pub(super) fleet: Option<std::sync::Arc<intendant_fleet::Member>>,
    /// What serves the connections of an MCP server (`intendant mcp`), if not the host.
    pub(super) model_host: Option<ModelHost>,
    /// The dashboard beside it, if any (`load` shows its connections).
    pub(super) web: Option<crate::web::WebLoad>,
}

/// The host of an MCP server's connections ([`ControlSocket::with_model_host`]).
#[derive(Clone)]
pub(super) struct ModelHost(pub(super) std::sync::Arc<dyn intendant_core::host::SessionHost>);

impl std::fmt::Debug for ModelHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelHost")
    }
}

impl ControlSocket {
    /// Binds `<home>/daemon.sock` (mode 0600) under `lock`. A socket file nothing listens on
    /// (a crashed daemon's) is replaced; one something listens on is left alone
    /// ([`StateRootError::SocketInUse`]). Must be called inside a tokio runtime.
    pub fn bind(lock: &DaemonLock) -> Result<ControlSocket, StateRootError> {
        let home = lock.home();
        let path = socket_path(home);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(&path) {
                    Ok(_) => return Err(StateRootError::SocketInUse { path }),
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        std::fs::remove_file(&path).map_err(io(&path))?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&path)(e)),
                }
            }
            Ok(_) => return Err(StateRootError::NotASocket { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
        let listener = tokio::net::UnixListener::bind(&path).map_err(io(&path))?;
        // The directory is 0700, so the moment between bind and chmod admits nobody else.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(&path))?;
        Ok(ControlSocket {
            listener,
            path,
            home: home.to_path_buf(),
            refusals: intendant_daemon::log::DaemonLog::discard(),
            limits: intendant_daemon::control_plane::ClientLimits::default(),
            fleet: None,
            model_host: None,
            web: None,
        })
    }

    /// Shows `member`'s fleet in its `load` answers.
    pub fn with_fleet(mut self, member: std::sync::Arc<intendant_fleet::Member>) -> ControlSocket {
        self.fleet = Some(member);
        self
    }

    /// Serves the connections whose hello names an MCP server ([`super::MCP_CLIENT`], what
    /// `intendant mcp` says) with `host` instead of the host `serve` is given: a fleet member's
    /// door for a model, whose routed answers stay a model's at the session's owner.
    pub fn with_model_host(
        mut self,
        host: std::sync::Arc<dyn intendant_core::host::SessionHost>,
    ) -> ControlSocket {
        self.model_host = Some(ModelHost(host));
        self
    }

    /// Serves its clients within `limits` (the defaults unless told).
    pub fn with_limits(
        mut self,
        limits: intendant_daemon::control_plane::ClientLimits,
    ) -> ControlSocket {
        self.limits = limits;
        self
    }

    /// Shows the connections of the dashboard served beside it in `load` (`ctl status`).
    pub fn with_web(mut self, web: crate::web::WebLoad) -> ControlSocket {
        self.web = Some(web);
        self
    }

    /// Reports every refused peer (a process of a session) to `log`.
    pub fn with_refusal_log(mut self, log: intendant_daemon::log::DaemonLog) -> ControlSocket {
        // A flood of refused connections must not bury the rest of the journal.
        self.refusals = log.at_most(crate::peer::REFUSALS_A_SECOND);
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        // Best effort: a socket file left behind is replaced by the next daemon anyway.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_held_once_and_names_its_pid() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("state");
        let lock = DaemonLock::acquire(&root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        match DaemonLock::acquire(&root) {
            Err(StateRootError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("second lock: {other:?}"),
        }
        drop(lock);
        DaemonLock::acquire(&root).unwrap();
    }

    /// A lock held by a copy of the file a dead daemon left (a child it forked, not yet past its
    /// `exec`): waited for while that copy lives, taken once it closes; refused naming the dead
    /// pid if it stays open past the wait.
    #[test]
    fn a_lock_a_dead_daemons_child_still_holds_is_waited_for() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("state");
        drop(DaemonLock::acquire(&root).unwrap());
        let path = root.join(LOCK_FILE);
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        std::fs::write(&path, format!("{dead_pid}\n")).unwrap();
        let hold = || {
            let copy = File::open(&path).unwrap();
            rustix::fs::flock(&copy, FlockOperation::NonBlockingLockExclusive).unwrap();
            copy
        };
        let open = |linger| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let taken = lock_waiting_out_a_dead_holder(&file, &root, &path, linger);
            (file, taken)
        };
        // The copy closes after 200 ms: taken.
        let copy = hold();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(copy);
        });
        let started = std::time::Instant::now();
        let (file, taken) = open(std::time::Duration::from_secs(20));
        taken.unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(150));
        closer.join().unwrap();
        drop(file);
        // It stays open: refused after the wait, saying the daemon exited.
        let _copy = hold();
        match open(std::time::Duration::from_millis(100)).1 {
            Err(e @ StateRootError::Held { gone: true, .. }) => {
                assert!(e.to_string().contains("which has exited"), "{e}");
                assert!(e.to_string().contains(&dead_pid.to_string()), "{e}");
            }
            other => panic!("a copy still open: {other:?}"),
        }
        // A daemon that runs (this process) is refused at once, whatever the wait.
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        let started = std::time::Instant::now();
        match open(std::time::Duration::from_secs(20)).1 {
            Err(StateRootError::Held { gone: false, .. }) => {}
            other => panic!("a live holder: {other:?}"),
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn an_open_state_root_is_made_private() {
        let home = tempfile::tempdir().unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let _lock = DaemonLock::acquire(home.path()).unwrap();
        let mode = std::fs::metadata(home.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
        let home = tempfile::tempdir().unwrap();
        let lock = DaemonLock::acquire(home.path()).unwrap();
        let path = socket_path(home.path());
        // A crashed daemon's socket: bound, then its listener gone.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let bound = ControlSocket::bind(&lock).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        match ControlSocket::bind(&lock) {
            Err(StateRootError::SocketInUse { .. }) => {}
            other => panic!("live socket: {other:?}"),
        }
        assert!(path.exists(), "the live socket stays");
        drop(bound);
        assert!(!path.exists(), "the socket is removed with its server");
        std::fs::write(&path, "x").unwrap();
        match ControlSocket::bind(&lock) {
            Err(StateRootError::NotASocket { .. }) => {}
            other => panic!("a file: {other:?}"),
        }
    }
}

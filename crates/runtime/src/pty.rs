//! `execPty`: commands in persistent `bash` sessions on pseudo-terminals, one per `shell_id`.
//!
//! The shell runs `bash --norc --noprofile --noediting -i` on a PTY whose echo is off, with
//! empty prompts, so its output is only what commands print. Each command is written to a
//! private file and *sourced* (`. file`), so multi-line commands, long commands (a terminal line
//! holds at most 4 KiB) and syntax errors cannot desynchronise the session, and `cd` and
//! variables persist. Around it the shell prints `__PTY_START_<nonce>__` and
//! `__PTY_END_<nonce>__ <status>`; the markers are built by `printf` from pieces, so an echoed
//! command line never contains them.
//!
//! A reader thread drains the PTY into a bounded channel; the command's bytes are ANSI-stripped,
//! streamed to a transcript file and kept in memory only as a 10 KiB tail. The transcript is kept
//! as `<nonce>_<random>_pty.log` only when the output was larger than the tail.

use intendant_protocol::runtime::PtyResult;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::{artifact, child};

mod capture;
pub use capture::{AnsiStripper, Capture};

/// Per-command deadline.
pub const PTY_DEADLINE: Duration = Duration::from_secs(30);
/// `shell_id` when none is given.
pub const DEFAULT_SHELL_ID: &str = "default";
/// Most PTY sessions one runtime process keeps open at once.
pub const MAX_PTY_SESSIONS: usize = 16;
/// Bytes read from the PTY at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// Chunks in flight between the reader thread and the runtime (bounds memory at 1 MiB).
const CHUNK_CHANNEL_CAPACITY: usize = 64;
/// How often a waiting command checks whether its shell died.
const LIVENESS_INTERVAL: Duration = Duration::from_millis(100);
/// How long a shell gets to exit after `SIGHUP` when the runtime ends.
const HANGUP_GRACE: Duration = Duration::from_millis(500);
/// Control-C: interrupts the foreground job of a timed-out command.
const INTERRUPT: u8 = 0x03;

/// Why an `execPty` command could not run (the batch goes on).
#[derive(Debug, Error)]
pub enum PtyError {
    /// Opening a pseudo-terminal failed.
    #[error("could not open a pseudo-terminal: {0}")]
    Open(#[source] io::Error),
    /// Starting bash failed.
    #[error("could not start bash on the pseudo-terminal: {0}")]
    Spawn(#[source] io::Error),
    /// The command file could not be written to the log dir.
    #[error("could not stage the command in the log dir: {0}")]
    Stage(#[source] io::Error),
    /// Writing to the shell failed (it is discarded; the next command starts a new one).
    #[error("could not write to the shell: {0}")]
    Write(#[source] io::Error),
    /// Opening another session would pass [`MAX_PTY_SESSIONS`].
    #[error("too many PTY sessions: at most {MAX_PTY_SESSIONS} shell_ids per runtime process")]
    TooManySessions,
}

/// The PTY sessions of one runtime process.
#[derive(Debug)]
pub struct PtySessions {
    log_dir: PathBuf,
    sessions: HashMap<String, PtySession>,
}

impl PtySessions {
    /// No sessions yet; artifacts go to `log_dir`.
    pub fn new(log_dir: &Path) -> Self {
        PtySessions {
            log_dir: log_dir.to_path_buf(),
            sessions: HashMap::new(),
        }
    }

    /// Runs `command` in session `shell_id` with the [`PTY_DEADLINE`].
    pub fn run(
        &mut self,
        nonce: u64,
        shell_id: &str,
        command: &str,
    ) -> Result<PtyResult, PtyError> {
        self.run_with_deadline(nonce, shell_id, command, PTY_DEADLINE)
    }

    /// Runs `command` in session `shell_id` (opened on first use), waiting at most `deadline`.
    pub fn run_with_deadline(
        &mut self,
        nonce: u64,
        shell_id: &str,
        command: &str,
        deadline: Duration,
    ) -> Result<PtyResult, PtyError> {
        if !self.sessions.contains_key(shell_id) {
            if self.sessions.len() >= MAX_PTY_SESSIONS {
                return Err(PtyError::TooManySessions);
            }
            self.sessions
                .insert(shell_id.to_owned(), PtySession::open()?);
        }
        let Some(session) = self.sessions.get_mut(shell_id) else {
            return Err(PtyError::Open(io::Error::other("session vanished")));
        };
        let result = session.run(&self.log_dir, nonce, command, deadline);
        let dead = match &result {
            Ok(r) => r.shell_exited,
            Err(PtyError::Write(_)) => true,
            Err(
                PtyError::Open(_)
                | PtyError::Spawn(_)
                | PtyError::Stage(_)
                | PtyError::TooManySessions,
            ) => false,
        };
        if dead {
            self.sessions.remove(shell_id);
        }
        result.map(|mut r| {
            r.shell_id = shell_id.to_owned();
            r
        })
    }
}

/// One shell on one PTY.
#[derive(Debug)]
struct PtySession {
    master: File,
    child: Child,
    chunks: Receiver<Vec<u8>>,
}

impl PtySession {
    fn open() -> Result<Self, PtyError> {
        let (master, slave) = open_pty().map_err(PtyError::Open)?;
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(PtyError::Open);
        let env = child::child_env();
        let mut cmd = Command::new(child::shell_program(env));
        cmd.args(["--norc", "--noprofile", "--noediting", "-i"])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("DISPLAY")
            .envs([
                ("PS1", ""),
                ("PS2", ""),
                ("PS0", ""),
                ("PS4", ""),
                ("PROMPT_COMMAND", ""),
                ("TERM", "dumb"),
                ("HISTFILE", "/dev/null"),
            ])
            .stdin(Stdio::from(dup(&slave)?))
            .stdout(Stdio::from(dup(&slave)?))
            .stderr(Stdio::from(slave));
        // SAFETY: runs between fork and exec; setsid and ioctl are async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                // stdin is already the slave here; make it the controlling terminal.
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        child::terminate_with_runtime(&mut cmd, libc::SIGKILL);
        let child = child::spawn_session(&mut cmd).map_err(PtyError::Spawn)?;
        // Dropping the command closes our slave copies, so the reader sees EIO once bash is gone.
        drop(cmd);
        let master = File::from(master);
        let reader = master.try_clone().map_err(PtyError::Open)?;
        let (tx, rx) = sync_channel(CHUNK_CHANNEL_CAPACITY);
        std::thread::Builder::new()
            // Not the model-chosen shell_id: a NUL in a thread name panics.
            .name("pty-reader".to_owned())
            .spawn(move || drain(reader, tx))
            .map_err(PtyError::Spawn)?;
        Ok(PtySession {
            master,
            child,
            chunks: rx,
        })
    }

    fn run(
        &mut self,
        log_dir: &Path,
        nonce: u64,
        command: &str,
        deadline: Duration,
    ) -> Result<PtyResult, PtyError> {
        let prefix = nonce.to_string();
        let (mut staged, staged_path) =
            artifact::create_unique(log_dir, &prefix, "pty_cmd.sh").map_err(PtyError::Stage)?;
        let staged_guard = RemoveOnDrop(staged_path.clone());
        staged
            .write_all(command.as_bytes())
            .and_then(|()| staged.write_all(b"\n"))
            .map_err(PtyError::Stage)?;
        drop(staged);

        let transcript = artifact::create_unique(log_dir, &prefix, "pty.log");
        let mut capture = Capture::new(nonce, transcript);
        let line = format!(
            "printf '%s_%s_{nonce}__\\n' __PTY START; . {path}; __intendant_rc=$?; \
             printf '\\n%s_%s_{nonce}__ %s\\n' __PTY END \"$__intendant_rc\"; unset __intendant_rc\n",
            path = shell_quote(&staged_path.display().to_string()),
        );
        self.master
            .write_all(line.as_bytes())
            .map_err(PtyError::Write)?;

        let deadline_at = child::deadline_after(deadline);
        let mut end = Ending::TimedOut;
        loop {
            let remaining = deadline_at.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            match self.chunks.recv_timeout(remaining.min(LIVENESS_INTERVAL)) {
                Ok(chunk) => {
                    if let Some(status) = capture.feed(&chunk) {
                        end = Ending::Finished(status);
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // A background job may hold the terminal open after bash itself exited.
                    if let Ok(Some(_)) = self.child.try_wait() {
                        end = Ending::ShellExited;
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    end = Ending::ShellExited;
                    break;
                }
            }
        }
        if let Ending::ShellExited = end {
            while let Ok(chunk) = self.chunks.try_recv() {
                if capture.feed(&chunk).is_some() {
                    break;
                }
            }
        }
        drop(staged_guard);
        let (timed_out, exit_code, shell_exited) = match end {
            Ending::Finished(status) => (false, status, false),
            Ending::TimedOut => {
                // Interrupt the foreground job so the shell is usable for the next command;
                // its late output is discarded before the next start marker.
                let _ = self.master.write_all(&[INTERRUPT]);
                (true, None, false)
            }
            Ending::ShellExited => {
                let status = self.child.wait().ok().map(child::exit_code);
                (false, status, true)
            }
        };
        let (output, truncated, transcript_log) = capture.finish();
        Ok(PtyResult {
            shell_id: String::new(),
            output,
            truncated,
            transcript_log,
            timed_out,
            exit_code,
            shell_exited,
        })
    }
}

impl Drop for PtySession {
    fn drop(&mut self) {
        let Ok(sid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // An interactive bash forwards SIGHUP to its jobs before exiting, which reaches
        // background jobs that live in their own process groups.
        child::stop(&mut self.child, libc::SIGHUP, HANGUP_GRACE);
        // Jobs that ignore SIGHUP (nohup) are still in the shell's session: end them too.
        child::kill_session(sid);
    }
}

enum Ending {
    Finished(Option<i32>),
    TimedOut,
    ShellExited,
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn drain(mut reader: File, tx: SyncSender<Vec<u8>>) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EIO: every slave descriptor is closed, the shell is gone.
            Err(_) => return,
        }
    }
}

fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let size = libc::winsize {
        ws_row: 50,
        ws_col: 250,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: out-pointers to two ints; null name and termios; a valid winsize.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty succeeded, so both are fresh fds owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: F_SETFD on an fd we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: a zeroed termios is a valid out-buffer for tcgetattr.
    let mut tio: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and termios pointer.
    if unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut tio) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // No echo (the command line never shows up in the output) and no \n -> \r\n.
    tio.c_lflag &= !(libc::ECHO | libc::ECHOE | libc::ECHOK | libc::ECHONL);
    tio.c_oflag &= !libc::ONLCR;
    // SAFETY: valid fd and termios pointer.
    if unsafe { libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &tio) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((master, slave))
}

/// Single-quotes `s` for bash.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

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

use intendant_protocol::runtime::{LOG_TAIL_BYTES, PtyResult};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::{artifact, envguard, exec};

/// Per-command deadline.
pub const PTY_DEADLINE: Duration = Duration::from_secs(30);
/// `shell_id` when none is given.
pub const DEFAULT_SHELL_ID: &str = "default";
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
            self.sessions
                .insert(shell_id.to_owned(), PtySession::open(shell_id)?);
        }
        let Some(session) = self.sessions.get_mut(shell_id) else {
            return Err(PtyError::Open(io::Error::other("session vanished")));
        };
        let result = session.run(&self.log_dir, nonce, command, deadline);
        let dead = match &result {
            Ok(r) => r.shell_exited,
            Err(PtyError::Write(_)) => true,
            Err(PtyError::Open(_) | PtyError::Spawn(_) | PtyError::Stage(_)) => false,
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
    fn open(shell_id: &str) -> Result<Self, PtyError> {
        let (master, slave) = open_pty().map_err(PtyError::Open)?;
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(PtyError::Open);
        let env = envguard::command_env();
        let mut cmd = Command::new(exec::shell_program(&env));
        cmd.args(["--norc", "--noprofile", "--noediting", "-i"])
            .env_clear()
            .envs(env)
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
        exec::terminate_with_runtime(&mut cmd, libc::SIGKILL);
        let child = cmd.spawn().map_err(PtyError::Spawn)?;
        // Dropping the command closes our slave copies, so the reader sees EIO once bash is gone.
        drop(cmd);
        let master = File::from(master);
        let reader = master.try_clone().map_err(PtyError::Open)?;
        let (tx, rx) = sync_channel(CHUNK_CHANNEL_CAPACITY);
        std::thread::Builder::new()
            .name(format!("pty-{shell_id}"))
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

        let deadline_at = exec::deadline_after(deadline);
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
                let status = self.child.wait().ok().map(exec::exit_code);
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
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // An interactive bash forwards SIGHUP to its jobs before exiting, which reaches
        // background jobs that live in their own process groups.
        // SAFETY: plain syscall on our unreaped child.
        unsafe { libc::kill(pid, libc::SIGHUP) };
        let deadline = Instant::now() + HANGUP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: as above; the session's group id is the shell's pid.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
        let _ = self.child.wait();
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

/// Where a command's output stands in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitStart,
    Body,
    AwaitStatus,
}

/// Extracts one command's output from the PTY stream, bounded in memory.
pub struct Capture {
    start: Vec<u8>,
    end: Vec<u8>,
    phase: Phase,
    pending: Vec<u8>,
    stripper: AnsiStripper,
    tail: Vec<u8>,
    total: u64,
    transcript: Result<(BufWriter<File>, PathBuf), String>,
}

/// Bytes of the status field after the end marker beyond which it is considered garbage.
const MAX_STATUS_BYTES: usize = 32;

impl Capture {
    /// A capture for command `nonce`, streaming to `transcript` (or noting why it cannot).
    pub fn new(nonce: u64, transcript: io::Result<(File, PathBuf)>) -> Self {
        Capture {
            start: format!("__PTY_START_{nonce}__\n").into_bytes(),
            end: format!("\n__PTY_END_{nonce}__ ").into_bytes(),
            phase: Phase::AwaitStart,
            pending: Vec::new(),
            stripper: AnsiStripper::default(),
            tail: Vec::new(),
            total: 0,
            transcript: transcript
                .map(|(f, p)| (BufWriter::new(f), p))
                .map_err(|e| e.to_string()),
        }
    }

    /// Feeds raw PTY bytes; `Some(status)` once the end marker and its status line arrived.
    pub fn feed(&mut self, raw: &[u8]) -> Option<Option<i32>> {
        self.stripper.strip_into(raw, &mut self.pending);
        loop {
            match self.phase {
                Phase::AwaitStart => match find(&self.pending, &self.start) {
                    Some(at) => {
                        self.pending.drain(..at + self.start.len());
                        self.phase = Phase::Body;
                    }
                    None => {
                        let keep = self.start.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        self.pending.drain(..cut);
                        return None;
                    }
                },
                Phase::Body => match find(&self.pending, &self.end) {
                    Some(at) => {
                        let body: Vec<u8> = self.pending.drain(..at).collect();
                        self.commit(&body);
                        self.pending.drain(..self.end.len());
                        self.phase = Phase::AwaitStatus;
                    }
                    None => {
                        let keep = self.end.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        let body: Vec<u8> = self.pending.drain(..cut).collect();
                        self.commit(&body);
                        return None;
                    }
                },
                Phase::AwaitStatus => {
                    return match self.pending.iter().position(|b| *b == b'\n') {
                        Some(nl) => Some(
                            std::str::from_utf8(&self.pending[..nl])
                                .ok()
                                .and_then(|s| s.trim().parse().ok()),
                        ),
                        None if self.pending.len() > MAX_STATUS_BYTES => Some(None),
                        None => None,
                    };
                }
            }
        }
    }

    fn commit(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.total += bytes.len() as u64;
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * LOG_TAIL_BYTES {
            let cut = self.tail.len() - LOG_TAIL_BYTES;
            self.tail.drain(..cut);
        }
        if let Ok((w, _)) = &mut self.transcript
            && let Err(e) = w.write_all(bytes)
        {
            self.fail_transcript(format!("write failed: {e}"));
        }
    }

    fn fail_transcript(&mut self, why: String) {
        if let Ok((_, path)) = &self.transcript {
            let _ = std::fs::remove_file(path);
        }
        self.transcript = Err(why);
    }

    /// The result's `output`, `truncated` and `transcript_log`; deletes an unneeded transcript.
    pub fn finish(mut self) -> (String, bool, Option<String>) {
        if self.phase == Phase::Body {
            let rest = std::mem::take(&mut self.pending);
            self.commit(&rest);
        }
        let truncated = self.total > LOG_TAIL_BYTES as u64;
        if !truncated {
            if let Ok((_, path)) = &self.transcript {
                let _ = std::fs::remove_file(path);
            }
            return (
                String::from_utf8_lossy(&self.tail).into_owned(),
                false,
                None,
            );
        }
        let flushed = match &mut self.transcript {
            Ok((w, _)) => w.flush().map_err(|e| format!("flush failed: {e}")),
            Err(why) => Err(why.clone()),
        };
        if let Err(why) = flushed {
            self.fail_transcript(why);
        }
        let (marker, kept) = match &self.transcript {
            Ok((_, path)) => (
                format!(
                    "[output truncated: {} bytes in total, showing the end; full transcript: {}]\n",
                    self.total,
                    path.display()
                ),
                Some(path.display().to_string()),
            ),
            Err(why) => (
                format!(
                    "[output truncated: {} bytes in total, showing the end; the full transcript could not be preserved: {why}]\n",
                    self.total
                ),
                None,
            ),
        };
        let room = LOG_TAIL_BYTES.saturating_sub(marker.len());
        let from = self.tail.len().saturating_sub(room);
        let tail = artifact::skip_partial_char(&self.tail[from..]);
        let mut output = marker;
        output.push_str(&String::from_utf8_lossy(tail));
        (output, true, kept)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Streaming removal of terminal escape sequences, carriage returns and stray control bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum AnsiStripper {
    /// Plain text.
    #[default]
    Ground,
    /// After ESC.
    Escape,
    /// ESC followed by intermediate bytes (e.g. a charset designation `ESC ( B`).
    Intermediate,
    /// Inside a CSI sequence `ESC [ ... final`.
    Csi,
    /// Inside a string sequence (OSC, DCS, ...) ended by BEL or `ESC \`.
    Str,
    /// ESC inside a string sequence.
    StrEscape,
}

impl AnsiStripper {
    /// Appends the printable part of `input` to `out`, carrying state across calls.
    pub fn strip_into(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            *self = match (*self, b) {
                (AnsiStripper::Ground, 0x1b) => AnsiStripper::Escape,
                (AnsiStripper::Ground, b'\n' | b'\t') => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Ground, 0x00..=0x1f | 0x7f) => AnsiStripper::Ground,
                (AnsiStripper::Ground, _) => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Escape, b'[') => AnsiStripper::Csi,
                (AnsiStripper::Escape, b']' | b'P' | b'X' | b'^' | b'_') => AnsiStripper::Str,
                (AnsiStripper::Escape | AnsiStripper::Intermediate, 0x20..=0x2f) => {
                    AnsiStripper::Intermediate
                }
                (AnsiStripper::Escape | AnsiStripper::Intermediate, _) => AnsiStripper::Ground,
                (AnsiStripper::Csi, 0x40..=0x7e) => AnsiStripper::Ground,
                (AnsiStripper::Csi, _) => AnsiStripper::Csi,
                // A newline ends an unterminated string so it cannot swallow the end marker.
                (AnsiStripper::Str | AnsiStripper::StrEscape, b'\n') => {
                    out.push(b);
                    AnsiStripper::Ground
                }
                (AnsiStripper::Str, 0x07) => AnsiStripper::Ground,
                (AnsiStripper::Str, 0x1b) => AnsiStripper::StrEscape,
                (AnsiStripper::Str, _) => AnsiStripper::Str,
                (AnsiStripper::StrEscape, b'\\') => AnsiStripper::Ground,
                (AnsiStripper::StrEscape, _) => AnsiStripper::Str,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(chunks: &[&[u8]]) -> String {
        let mut s = AnsiStripper::default();
        let mut out = Vec::new();
        for c in chunks {
            s.strip_into(c, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strips_sequences_across_chunks() {
        assert_eq!(strip(&[b"\x1b[1;3", b"1mred\x1b[0m\r\n"]), "red\n");
        assert_eq!(strip(&[b"\x1b]0;title\x07a\x1b(Bb"]), "ab");
        assert_eq!(strip(&[b"x\x1b]8;;http://e\x1b", b"\\y"]), "xy");
        assert_eq!(strip(&["é\t€".as_bytes()]), "é\t€");
    }

    #[test]
    fn capture_finds_markers_split_anywhere() {
        let stream = b"junk __PTY_START_7__\nhello\nworld\n__PTY_END_7__ 3\nlater";
        for split in 0..stream.len() {
            let mut c = Capture::new(7, Err(io::Error::other("none")));
            let first = c.feed(&stream[..split]);
            let status = first.or_else(|| c.feed(&stream[split..]));
            assert_eq!(status, Some(Some(3)), "split at {split}");
            let (out, truncated, log) = c.finish();
            assert_eq!(out, "hello\nworld");
            assert!(!truncated);
            assert!(log.is_none());
        }
    }

    #[test]
    fn capture_ignores_other_nonces_and_bounds_memory() {
        let mut c = Capture::new(2, Err(io::Error::other("disk full")));
        assert_eq!(c.feed(b"__PTY_START_1__\nold\n__PTY_END_1__ 0\n"), None);
        assert_eq!(c.feed(b"__PTY_START_2__\n"), None);
        let line = [b'x'; 1000];
        for _ in 0..100 {
            assert_eq!(c.feed(&line), None);
            assert!(c.pending.len() < 2000 && c.tail.len() <= 2 * LOG_TAIL_BYTES + 1000);
        }
        assert_eq!(c.feed(b"\n__PTY_END_2__ 0\n"), Some(Some(0)));
        let (out, truncated, log) = c.finish();
        assert!(truncated);
        assert!(log.is_none());
        assert!(out.len() <= LOG_TAIL_BYTES);
        assert!(out.starts_with("[output truncated: 100000 bytes"), "{out}");
        assert!(out.contains("could not be preserved: disk full"));
    }
}

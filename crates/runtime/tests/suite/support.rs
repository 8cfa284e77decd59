//! Running the built binary on a batch and reading its envelopes.

use intendant_protocol::runtime::ResultEnvelope;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_intendant-runtime");

/// What one runtime invocation produced.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub envelopes: Vec<ResultEnvelope>,
}

impl Run {
    /// The envelope `i`'s data parsed as `T` (panics on an `Error:` string).
    pub fn data<T: DeserializeOwned>(&self, i: usize) -> T {
        let data = &self.envelopes[i].data;
        serde_json::from_str(data).unwrap_or_else(|e| panic!("envelope {i} data {data:?}: {e}"))
    }

    /// Envelope `i`'s data as a JSON value.
    pub fn value(&self, i: usize) -> Value {
        self.data(i)
    }

    /// Envelope `i`'s data, which must be an error; returns the message.
    pub fn error(&self, i: usize) -> &str {
        let data = &self.envelopes[i].data;
        data.strip_prefix("Error: ")
            .unwrap_or_else(|| panic!("envelope {i} is not an error: {data}"))
    }

    pub fn code(&self) -> i32 {
        self.status.code().expect("runtime killed by a signal")
    }
}

/// A runtime invocation being set up.
pub struct Batch {
    cmd: Command,
    input: Vec<u8>,
}

impl Batch {
    /// A batch of `input` with artifacts in `log_dir` and a clean Intendant environment.
    pub fn new(input: &Value, log_dir: &Path) -> Batch {
        Batch::raw(serde_json::to_vec(input).unwrap(), Some(log_dir))
    }

    /// Raw stdin bytes; `log_dir` None leaves `INTENDANT_LOG_DIR` unset.
    pub fn raw(input: Vec<u8>, log_dir: Option<&Path>) -> Batch {
        let mut cmd = Command::new(BIN);
        for var in [
            "INTENDANT_LOG_DIR",
            "INTENDANT_HOME",
            "INTENDANT_USER_DISPLAY_GRANTED",
            "INTENDANT_SANDBOX_WRITE_PATHS",
            "DISPLAY",
        ] {
            cmd.env_remove(var);
        }
        if let Some(dir) = log_dir {
            cmd.env("INTENDANT_LOG_DIR", dir);
        }
        Batch { cmd, input }
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Batch {
        self.cmd.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Batch {
        self.cmd.env_remove(key);
        self
    }

    /// Starts the runtime in `dir` (the project root, as the controller does).
    pub fn dir(mut self, dir: &Path) -> Batch {
        self.cmd.current_dir(dir);
        self
    }

    /// Runs the binary under `wrapper` (e.g. `unshare --net`), keeping the environment so far.
    pub fn under(self, wrapper: &[&str]) -> Batch {
        let (program, args) = wrapper.split_first().expect("a wrapper program");
        let mut cmd = Command::new(program);
        cmd.args(args).arg(BIN);
        self.wrapped(cmd)
    }

    /// Runs the binary as `nobody` ([`as_nobody`]), from a copy in `stage` that `nobody` can
    /// reach whatever the build directory's permissions; the caller makes the batch's
    /// directories `nobody`'s.
    pub fn by_nobody(self, stage: &Path) -> Batch {
        use std::os::unix::fs::PermissionsExt;
        let bin = stage.join("intendant-runtime");
        std::fs::set_permissions(stage, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.wrapped(as_nobody(&bin))
    }

    /// `cmd` (which runs the binary) with this batch's directory, environment and input.
    fn wrapped(self, mut cmd: Command) -> Batch {
        if let Some(dir) = self.cmd.get_current_dir() {
            cmd.current_dir(dir);
        }
        for (key, value) in self.cmd.get_envs() {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        Batch {
            cmd,
            input: self.input,
        }
    }

    /// Has the binary inherit `fds` of this process at their numbers (they stay close-on-exec
    /// here: only the child clears the flag), as the controller passes a session's namespace.
    /// After [`Batch::by_nobody`] and [`Batch::under`], which start a new command.
    pub fn inherit(mut self, fds: Vec<std::os::fd::RawFd>) -> Batch {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs between fork and exec and only calls fcntl, which is
        // async-signal-safe, on descriptors the child inherited.
        unsafe {
            self.cmd.pre_exec(move || {
                for fd in &fds {
                    if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        self
    }

    /// Starts the binary with piped stdio; the caller feeds stdin (the batch's input is unused).
    pub fn spawn(&mut self) -> Child {
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Runs the binary to completion.
    pub fn run(mut self) -> Run {
        let mut child = self.spawn();
        let mut stdin = child.stdin.take().unwrap();
        let input = std::mem::take(&mut self.input);
        // A writer thread, so a runtime that stops reading early cannot deadlock the test.
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let envelopes = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
            .collect();
        Run {
            status: out.status,
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            envelopes,
        }
    }
}

/// Runs `commands` (a JSON array) with artifacts in `log_dir`.
pub fn run(commands: Value, log_dir: &Path) -> Run {
    Batch::new(&serde_json::json!({ "commands": commands }), log_dir).run()
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Polls `cond` every 20 ms for up to `limit`.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Files in `dir` whose names satisfy `pred`.
pub fn files_matching(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pred))
        .collect();
    v.sort();
    v
}

/// A display number for a test: 90 + `offset`, so tests never share a virtual display.
pub fn display_number(offset: u32) -> u32 {
    90 + offset
}

/// Whether Xvfb is on PATH for a display test to use; when it is not, the test is skipped with
/// a note naming the package, or fails under `CI` (`intendant_testkit::optional`).
pub fn xvfb_present() -> bool {
    use intendant_testkit::optional;
    optional::require(
        optional::on_path("Xvfb"),
        "Xvfb is not on PATH, so this display test cannot run",
        "apt-get install xvfb xauth",
    )
    .is_some()
}

/// Whether the tests run as root (CI does).
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The uid and gid of `nobody` (one definition, in the test kit).
pub use intendant_testkit::accounts::nobody;

/// `program` run as `nobody` through `setpriv` (util-linux), without supplementary groups.
pub fn as_nobody(program: &Path) -> Command {
    let (uid, gid) = nobody();
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "--"])
        .arg(program);
    c
}

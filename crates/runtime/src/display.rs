//! X display gating and the on-demand virtual displays.
//!
//! Display `:0` is the user's own session: commands and screenshots may reach it only when the
//! controller granted it (`INTENDANT_USER_DISPLAY_GRANTED` non-empty). Every other number is a
//! virtual display: when no X server answers there, this module starts
//! `Xvfb :N -screen 0 1280x800x24 -nolisten tcp` once, keeps it for the life of the runtime
//! process and stops it when the runtime ends (drop, or `SIGTERM` through the parent-death signal
//! should the runtime be killed).

use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::{artifact, child};

pub use intendant_protocol::runtime::USER_DISPLAY_GRANTED_ENV;
/// Screen geometry of a virtual display.
pub const XVFB_SCREEN: &str = "1280x800x24";
/// How long a freshly started Xvfb gets to accept connections.
pub const XVFB_READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Most virtual displays one runtime process starts (each Xvfb holds a framebuffer).
pub const MAX_VIRTUAL_DISPLAYS: usize = 4;
/// How long Xvfb gets to exit after `SIGTERM` before it is killed.
const XVFB_STOP_GRACE: Duration = Duration::from_secs(2);
/// Bytes of the Xvfb log quoted in an error.
const XVFB_LOG_QUOTE: usize = 1024;

/// Why a display cannot be used.
#[derive(Debug, Error)]
pub enum DisplayError {
    /// `:0` without the user's grant.
    #[error(
        "display :{0} is the user's session display; access was not granted (INTENDANT_USER_DISPLAY_GRANTED is unset)"
    )]
    UserDisplayRefused(u32),
    /// Xvfb could not be started.
    #[error("could not start Xvfb for :{display} (is the xvfb package installed?): {source}")]
    Spawn {
        /// Display number.
        display: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Xvfb exited before accepting connections.
    #[error("Xvfb for :{display} exited with {status} before it was ready; its log: {log}")]
    Exited {
        /// Display number.
        display: u32,
        /// Its exit status.
        status: ExitStatus,
        /// The end of its output.
        log: String,
    },
    /// Xvfb did not accept connections in time.
    #[error("Xvfb for :{display} did not accept connections within {waited:?}; its log: {log}")]
    NotReady {
        /// Display number.
        display: u32,
        /// How long it was given.
        waited: Duration,
        /// The end of its output.
        log: String,
    },
    /// Starting another Xvfb would pass [`MAX_VIRTUAL_DISPLAYS`].
    #[error(
        "cannot start a virtual display for :{0}: this runtime already runs {MAX_VIRTUAL_DISPLAYS}"
    )]
    TooMany(u32),
    /// The Xvfb log file could not be created in the log dir.
    #[error("could not create the Xvfb log in the log dir: {0}")]
    Log(#[source] io::Error),
}

/// The displays of one runtime process.
#[derive(Debug)]
pub struct Displays {
    log_dir: PathBuf,
    user_display_granted: bool,
    started: HashMap<u32, Child>,
}

impl Displays {
    /// Displays for a runtime writing logs to `log_dir`, with the grant read from the environment.
    pub fn new(log_dir: &Path) -> Self {
        let granted = std::env::var_os(USER_DISPLAY_GRANTED_ENV).is_some_and(|v| !v.is_empty());
        Self::with_grant(log_dir, granted)
    }

    /// Displays with an explicit user-display grant.
    pub fn with_grant(log_dir: &Path, user_display_granted: bool) -> Self {
        Displays {
            log_dir: log_dir.to_path_buf(),
            user_display_granted,
            started: HashMap::new(),
        }
    }

    /// Makes display `number` usable and returns its `DISPLAY` value, e.g. `:99`.
    pub fn prepare(&mut self, number: u32) -> Result<String, DisplayError> {
        let name = format!(":{number}");
        if number == 0 {
            return if self.user_display_granted {
                Ok(name)
            } else {
                Err(DisplayError::UserDisplayRefused(number))
            };
        }
        if server_answers(number) {
            return Ok(name);
        }
        if let Some(mut child) = self.started.remove(&number) {
            // Ours but no longer answering: it died. Reap it and start afresh.
            stop(&mut child);
        }
        if self.started.len() >= MAX_VIRTUAL_DISPLAYS {
            return Err(DisplayError::TooMany(number));
        }
        let child = self.start_xvfb(number)?;
        self.started.insert(number, child);
        Ok(name)
    }

    fn start_xvfb(&self, number: u32) -> Result<Child, DisplayError> {
        let (log, _path) =
            artifact::create_unique(&self.log_dir, &format!("display{number}"), "xvfb.log")
                .map_err(DisplayError::Log)?;
        let log_out = log.try_clone().map_err(DisplayError::Log)?;
        let log_err = log.try_clone().map_err(DisplayError::Log)?;
        let mut cmd = Command::new("Xvfb");
        cmd.arg(format!(":{number}"))
            .args(["-screen", "0", XVFB_SCREEN, "-nolisten", "tcp"])
            .env_clear()
            .envs(child::child_env().iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log_out)
            .stderr(log_err)
            .process_group(0);
        child::terminate_with_runtime(&mut cmd, libc::SIGTERM);
        let mut child = child::spawn_group(&mut cmd).map_err(|source| DisplayError::Spawn {
            display: number,
            source,
        })?;
        let deadline = Instant::now() + XVFB_READY_TIMEOUT;
        loop {
            if server_answers(number) {
                return Ok(child);
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    // Another process may have won the race for the same number.
                    if server_answers(number) {
                        return Ok(child);
                    }
                    return Err(DisplayError::Exited {
                        display: number,
                        status,
                        log: log_quote(&log),
                    });
                }
                Ok(None) => {}
                Err(source) => {
                    stop(&mut child);
                    return Err(DisplayError::Spawn {
                        display: number,
                        source,
                    });
                }
            }
            if Instant::now() >= deadline {
                stop(&mut child);
                return Err(DisplayError::NotReady {
                    display: number,
                    waited: XVFB_READY_TIMEOUT,
                    log: log_quote(&log),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Displays {
    fn drop(&mut self) {
        for child in self.started.values_mut() {
            stop(child);
        }
    }
}

/// The Unix socket of display `number`.
pub fn socket_path(number: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.X11-unix/X{number}"))
}

/// Whether an X server accepts connections on display `number`.
pub fn server_answers(number: u32) -> bool {
    UnixStream::connect(socket_path(number)).is_ok()
}

fn log_quote(log: &std::fs::File) -> String {
    artifact::read_tail(log, XVFB_LOG_QUOTE)
        .map(|t| t.text.trim().replace('\n', " | "))
        .unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// Asks Xvfb to exit (it removes its lock and socket on `SIGTERM`), then kills it if it lingers.
fn stop(xvfb: &mut Child) {
    child::stop(xvfb, libc::SIGTERM, XVFB_STOP_GRACE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_display_needs_grant() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Displays::with_grant(dir.path(), false);
        assert!(matches!(
            d.prepare(0),
            Err(DisplayError::UserDisplayRefused(0))
        ));
        let mut d = Displays::with_grant(dir.path(), true);
        assert_eq!(d.prepare(0).unwrap(), ":0");
    }
}

//! Finding a CLI (configured path, then PATH), reading its version, and choosing its auth class:
//! the three checks readiness and delegation share.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use intendant_core::child::{self, ChildSpec, Ending, Limits, Overflow};

use crate::auth::{self, AuthCandidate, AuthProbe, AuthRefusal};
use crate::env::{self, HostEnv};
use crate::error::{CliError, ErrorCode};
use crate::profile::{AgentProfile, Version};

/// Deadline of the version command (a Node CLI can be slow to start on a busy machine).
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes read from the version command.
const VERSION_OUTPUT_LIMIT: usize = 64 * 1024;

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The executable: `configured` when given (relative to the current directory), else the first
/// executable `profile.executable` on the caller's PATH.
pub fn find_executable(
    profile: &AgentProfile,
    configured: Option<&Path>,
    host: &HostEnv,
) -> Result<PathBuf, CliError> {
    if let Some(path) = configured {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        if !path.exists() {
            return Err(CliError::new(
                ErrorCode::CliMissingExecutable,
                format!(
                    "the configured {} executable does not exist: {}",
                    profile.name,
                    path.display()
                ),
            )
            .with_recovery(profile.install_command));
        }
        if !is_executable(&path) {
            return Err(CliError::new(
                ErrorCode::CliPermissionDenied,
                format!(
                    "the configured {} executable is not an executable file: {}",
                    profile.name,
                    path.display()
                ),
            )
            .with_recovery(format!("chmod +x {}", path.display())));
        }
        return Ok(path);
    }
    on_path(profile.executable, host).ok_or_else(|| {
        CliError::new(
            ErrorCode::CliMissingExecutable,
            format!(
                "`{}` ({}) was not found on PATH",
                profile.executable, profile.package
            ),
        )
        .with_recovery(profile.install_command)
    })
}

/// The first executable `name` on the caller's absolute PATH entries.
pub fn on_path(name: &str, host: &HostEnv) -> Option<PathBuf> {
    host.get("PATH").and_then(|paths| {
        std::env::split_paths(paths)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    })
}

/// Runs the version command and checks the result against the profile's range.
pub async fn probe_version(
    profile: &AgentProfile,
    exe: &Path,
    host: &HostEnv,
) -> Result<Version, CliError> {
    let child_env = env::child_env(host, &profile.env, &[], &[]);
    let spec = ChildSpec {
        program: exe.to_owned(),
        args: profile.version_args.iter().map(Into::into).collect(),
        env: child_env.os_vars(),
        cwd: PathBuf::from("/"),
        stdin: Vec::new(),
        passed: None,
    };
    let grace = Duration::from_secs(2);
    let limits = Limits {
        max_stdout: VERSION_OUTPUT_LIMIT,
        stdout_overflow: Overflow::Stop,
        max_stderr: VERSION_OUTPUT_LIMIT,
        stderr_tail: 0,
        deadline: Some(VERSION_TIMEOUT),
        grace,
        drain: grace,
    };
    let finished = child::run(spec, limits, std::future::pending())
        .await
        .map_err(|e| spawn_error(profile, exe, &e))?;
    let unreadable = |why: &str| {
        CliError::new(
            ErrorCode::CliUnsupportedVersion,
            format!(
                "cannot read the {} version: {why} (it needs {})",
                profile.name, profile.runs_on
            ),
        )
        .with_detail("supported", profile.versions.to_string())
        .with_recovery(format!("{}@latest", profile.install_command))
    };
    match finished.ending {
        Ending::Exited(Some(0)) => {}
        Ending::Exited(_) => return Err(unreadable("the version command failed")),
        Ending::TimedOut | Ending::Cancelled => {
            return Err(unreadable("the version command did not finish"));
        }
        Ending::OutputTooLarge => return Err(unreadable("the version output is too large")),
    }
    let text = String::from_utf8_lossy(&finished.stdout.bytes);
    let version = (profile.parse_version)(&text)
        .ok_or_else(|| unreadable("no version number in its output"))?;
    if !profile.versions.contains(version) {
        return Err(CliError::new(
            ErrorCode::CliUnsupportedVersion,
            format!(
                "{} {} is outside the supported range {}",
                profile.name, version, profile.versions
            ),
        )
        .with_detail("version", version.to_string())
        .with_detail("supported", profile.versions.to_string())
        .with_recovery(profile.install_command));
    }
    Ok(version)
}

/// Maps a spawn failure to a stable code.
pub fn spawn_error(profile: &AgentProfile, exe: &Path, e: &std::io::Error) -> CliError {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorCode::CliMissingExecutable,
        std::io::ErrorKind::PermissionDenied => ErrorCode::CliPermissionDenied,
        _ => ErrorCode::CliPermissionDenied,
    };
    CliError::new(
        code,
        format!("cannot run {} at {}", profile.name, exe.display()),
    )
    .with_detail("io_error", e.kind().to_string())
    .with_recovery(profile.install_command)
}

/// The auth class the CLI will use, narrowed by `allowed_auth`.
pub fn choose_auth(
    profile: &AgentProfile,
    host: &HostEnv,
    overrides: &[String],
    allowed: &[String],
) -> Result<AuthCandidate, CliError> {
    let probe = AuthProbe {
        env: host,
        config_overrides: overrides,
    };
    match auth::choose((profile.detect_auth)(&probe), allowed) {
        Ok(c) => Ok(c),
        Err(AuthRefusal::NoneFound) => Err(CliError::new(
            ErrorCode::CliNotAuthenticated,
            format!("{} has no login or API key it can use", profile.name),
        )
        .with_recovery(profile.login_command)),
        Err(AuthRefusal::NotAllowed { found }) => Err(CliError::new(
            ErrorCode::CliPermissionDenied,
            format!(
                "{} is authenticated only by auth classes that [agent.{}] allowed_auth excludes",
                profile.name, profile.name
            ),
        )
        .with_detail(
            "found",
            found
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(","),
        )
        .with_detail("allowed", allowed.join(","))
        .with_recovery(profile.login_command)),
        Err(AuthRefusal::UnknownClass(name)) => Err(CliError::new(
            ErrorCode::CliPermissionDenied,
            format!(
                "[agent.{}] allowed_auth names an unknown auth class",
                profile.name
            ),
        )
        .with_detail("unknown", name)
        .with_detail(
            "known",
            "chatgpt,claude.ai,kimi_login,api_key,custom_endpoint",
        )),
    }
}

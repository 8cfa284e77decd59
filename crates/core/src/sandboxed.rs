//! One program run inside a session's walls with its stdio piped for its whole life: an MCP
//! server, a hook. The one way the controller starts anything but a batch for a session.
//!
//! The design decision to know: the controller never starts such a program itself. It starts
//! `intendant-runtime --sandboxed-stdio PID -- PROGRAM ARG...` (PID: the controller's) with the
//! session's walls in the same variables a batch gets ([`crate::runtime_env::wall_vars`]: the
//! write set, the read masks, the second layer, the session's network), places it in the
//! session's cgroups, and only then writes the start line: the runtime applies every wall to
//! itself and starts the program below itself, as its guard (it ends the program and all it
//! started if the controller dies). So the program has exactly a command's walls, its
//! environment is the command scrub plus what the caller names, it sits in the session's cgroup
//! (ended with the session) and it runs under the one child supervisor ([`crate::child`]):
//! stderr bounded, the tree stopped TERM then KILL, reaped.

use std::ffi::OsString;
use std::path::PathBuf;

use intendant_protocol::env_policy;
use intendant_protocol::runtime::{SANDBOXED_KEEP_ENV, SANDBOXED_START_LINE, SANDBOXED_STDIO_ARG};
use thiserror::Error;
use tokio::io::AsyncWriteExt;

use crate::child::{self, ChildSpec, Limits, Pipes, Running};
use crate::containment::Placement;
use crate::network::SessionNetns;
use crate::runner::RunnerConfig;
use crate::runtime_env::{ReadMask, wall_vars};

/// A session's walls, as its runtimes get them.
#[derive(Debug, Clone)]
pub struct Walls {
    /// The runtime executable.
    pub runtime_path: PathBuf,
    /// The inherited environment, already filtered by the policy (the runtime scrubs it again).
    pub env: Vec<(OsString, OsString)>,
    /// The session's sandbox; `None`: the session runs without one.
    pub sandbox: Option<SandboxWalls>,
    /// The session's network namespace; `None`: the host's network.
    pub netns: Option<SessionNetns>,
    /// The session's cgroups; `None` places the program nowhere.
    pub placement: Option<Placement>,
}

/// The sandbox part of a session's walls.
#[derive(Debug, Clone)]
pub struct SandboxWalls {
    /// The write set of the session's commands (the project, temporary and cache directories,
    /// the artifacts directory, the configured extras).
    pub command_write_paths: Vec<PathBuf>,
    /// What must not be read.
    pub read_masks: Vec<ReadMask>,
    /// `[sandbox] require_full`.
    pub require_full: bool,
}

impl Walls {
    /// The walls of the session whose runner is configured by `runner`.
    pub fn of_session(runner: &RunnerConfig) -> Walls {
        Walls {
            runtime_path: runner.runtime_path.clone(),
            env: runner.env.clone(),
            sandbox: runner
                .sandbox_write_paths
                .as_ref()
                .map(|paths| SandboxWalls {
                    command_write_paths: paths.clone(),
                    read_masks: runner.sandbox_read_masks.clone(),
                    require_full: runner.sandbox_require_full,
                }),
            netns: runner.netns.clone(),
            placement: runner.placement.clone(),
        }
    }
}

/// Where a program may write, and whether it is sandboxed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// The session's sandbox (when it has one) with exactly these write roots (besides `/dev`);
    /// roots that do not exist are skipped, so create a scratch directory first.
    Writes(Vec<PathBuf>),
    /// The session's sandbox with its commands' own write set.
    CommandWrites,
    /// A trusted opt-out: no sandbox and the host's network. The environment scrub, the cgroup
    /// and the supervision stay.
    Unsandboxed,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SandboxedCommand {
    /// The program: a path, or a name looked up in the program's `PATH`.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables set on top of the scrubbed environment, kept whatever the scrub says (a key
    /// among them only because a trusted setting names it). Names must be plain variable names
    /// and never Intendant's own (`INTENDANT_*`).
    pub vars: Vec<(String, OsString)>,
    /// Where it may write.
    pub confinement: Confinement,
}

/// Why a program could not be started.
#[derive(Debug, Error)]
pub enum SandboxedError {
    /// A variable that cannot be given: not a plain name, or one of Intendant's controls.
    #[error("variable {name:?} cannot be given to {program}: {why}")]
    Variable {
        /// The program.
        program: String,
        /// The variable's name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// The walls cannot be passed to the runtime.
    #[error("cannot pass the session's walls to {program}: {message}")]
    Walls {
        /// The program.
        program: String,
        /// What failed.
        message: String,
    },
    /// Starting, placing or starting up the runtime failed.
    #[error("cannot start {program} inside the session's walls: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What failed.
        source: std::io::Error,
    },
}

/// Whether `name` is a plain variable name: letters, digits and `_`, not starting with a digit.
fn plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The runtime's command line and environment for `command` inside `walls`.
pub fn runtime_spec(
    walls: &Walls,
    command: &SandboxedCommand,
) -> Result<ChildSpec, SandboxedError> {
    let program = command.program.to_string_lossy().into_owned();
    let mut env = walls.env.clone();
    let mut keep: Vec<&str> = Vec::new();
    for (name, value) in &command.vars {
        let refuse = |why| SandboxedError::Variable {
            program: program.clone(),
            name: name.clone(),
            why,
        };
        if !plain_name(name) {
            return Err(refuse("not a plain variable name"));
        }
        if env_policy::is_control(name) {
            return Err(refuse(
                "Intendant's own variables are not given to programs",
            ));
        }
        env.retain(|(k, _)| k != name.as_str());
        env.push((name.into(), value.clone()));
        keep.push(name);
    }
    if !keep.is_empty() {
        env.push((SANDBOXED_KEEP_ENV.into(), keep.join(",").into()));
    }
    let walls_err = |message: String| SandboxedError::Walls {
        program: program.clone(),
        message,
    };
    let (controls, netns) = match (&walls.sandbox, &command.confinement) {
        (Some(sandbox), Confinement::Writes(paths)) => (
            wall_vars(Some(paths), &sandbox.read_masks, sandbox.require_full),
            walls.netns.as_ref(),
        ),
        (Some(sandbox), Confinement::CommandWrites) => (
            wall_vars(
                Some(&sandbox.command_write_paths),
                &sandbox.read_masks,
                sandbox.require_full,
            ),
            walls.netns.as_ref(),
        ),
        // Without a sandbox the session's commands share the host's network too.
        (None, Confinement::Writes(_) | Confinement::CommandWrites)
        | (_, Confinement::Unsandboxed) => (wall_vars(None, &[], false), None),
    };
    env.extend(controls.map_err(&walls_err)?);
    let passed = netns
        .map(SessionNetns::passed)
        .transpose()
        .map_err(&walls_err)?;
    let mut args: Vec<OsString> = vec![
        SANDBOXED_STDIO_ARG.into(),
        std::process::id().to_string().into(),
        "--".into(),
    ];
    args.push(command.program.clone());
    args.extend(command.args.iter().cloned());
    Ok(ChildSpec {
        program: walls.runtime_path.clone(),
        args,
        env,
        cwd: command.cwd.clone(),
        stdin: Vec::new(),
        passed,
    })
}

/// Starts `command` inside `walls` under `limits` (its stderr read and bounded by them, its
/// deadline, if any, for its whole life) and returns it running with its stdin and stdout.
/// [`Running::finish`] stops its whole tree and says how it ended (a runtime that could not
/// set up the walls exits 3, a program that cannot be executed 127, each with the reason on
/// stderr); dropping the [`Running`] kills it. Needs a tokio runtime.
pub async fn spawn(
    walls: &Walls,
    command: &SandboxedCommand,
    limits: Limits,
) -> Result<(Running, Pipes), SandboxedError> {
    let spec = runtime_spec(walls, command)?;
    let spawn_err = |source| SandboxedError::Spawn {
        program: command.program.to_string_lossy().into_owned(),
        source,
    };
    let (running, mut pipes) = child::spawn_lasting_interactive(
        spec,
        limits,
        walls.placement.as_ref().map(Placement::lent),
    )
    .await
    .map_err(spawn_err)?;
    // Placed: from here on nothing the program starts can leave the session's cgroups.
    let started = match pipes.stdin.write_all(SANDBOXED_START_LINE).await {
        Ok(()) => pipes.stdin.flush().await,
        Err(e) => Err(e),
    };
    match started {
        Ok(()) => Ok((running, pipes)),
        // The runtime is already gone (a wall it could not raise): `finish` says how it ended
        // and why, which a broken pipe here would hide.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok((running, pipes)),
        Err(e) => Err(spawn_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walls(sandbox: bool) -> Walls {
        Walls {
            runtime_path: "/bin/intendant-runtime".into(),
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("MY_FLAG".into(), "old".into()),
            ],
            sandbox: sandbox.then(|| SandboxWalls {
                command_write_paths: vec!["/p".into(), "/tmp".into()],
                read_masks: vec![ReadMask::Hide("/state".into())],
                require_full: true,
            }),
            netns: None,
            placement: None,
        }
    }

    fn command(confinement: Confinement) -> SandboxedCommand {
        SandboxedCommand {
            program: "node".into(),
            args: vec!["server.js".into()],
            cwd: "/p".into(),
            vars: vec![
                ("MY_FLAG".into(), "new".into()),
                ("OPENAI_API_KEY".into(), "sk-named".into()),
            ],
            confinement,
        }
    }

    fn var<'a>(spec: &'a ChildSpec, name: &str) -> Option<&'a str> {
        spec.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn the_runtime_gets_the_program_its_walls_and_the_kept_names() {
        let spec = runtime_spec(
            &walls(true),
            &command(Confinement::Writes(vec!["/p".into(), "/s".into()])),
        )
        .unwrap();
        assert_eq!(
            spec.args,
            vec![
                OsString::from(SANDBOXED_STDIO_ARG),
                std::process::id().to_string().into(),
                "--".into(),
                "node".into(),
                "server.js".into()
            ]
        );
        assert_eq!(var(&spec, "INTENDANT_SANDBOX_WRITE_PATHS"), Some("/p:/s"));
        assert_eq!(var(&spec, "INTENDANT_SANDBOX_REQUIRE_FULL"), Some("1"));
        assert!(var(&spec, "INTENDANT_SANDBOX_READ_MASKS").is_some());
        assert_eq!(
            var(&spec, SANDBOXED_KEEP_ENV),
            Some("MY_FLAG,OPENAI_API_KEY")
        );
        assert_eq!(spec.env.iter().filter(|(k, _)| k == "MY_FLAG").count(), 1);
        assert_eq!(var(&spec, "MY_FLAG"), Some("new"));
        let session = runtime_spec(&walls(true), &command(Confinement::CommandWrites)).unwrap();
        assert_eq!(
            var(&session, "INTENDANT_SANDBOX_WRITE_PATHS"),
            Some("/p:/tmp")
        );
    }

    #[test]
    fn an_opt_out_or_a_session_without_sandbox_passes_no_walls() {
        for spec in [
            runtime_spec(&walls(true), &command(Confinement::Unsandboxed)).unwrap(),
            runtime_spec(&walls(false), &command(Confinement::CommandWrites)).unwrap(),
        ] {
            for wall in [
                "INTENDANT_SANDBOX_WRITE_PATHS",
                "INTENDANT_SANDBOX_READ_MASKS",
                "INTENDANT_SANDBOX_REQUIRE_FULL",
                "INTENDANT_SESSION_NETNS",
            ] {
                assert_eq!(var(&spec, wall), None, "{:?}", spec.env);
            }
        }
    }

    #[test]
    fn bad_or_control_variable_names_are_refused() {
        for name in [
            "INTENDANT_SANDBOX_WRITE_PATHS",
            "intendant_log_dir",
            "A=B",
            "",
            "1X",
            "A,B",
        ] {
            let mut cmd = command(Confinement::CommandWrites);
            cmd.vars = vec![(name.into(), "/".into())];
            let err = runtime_spec(&walls(true), &cmd).unwrap_err();
            assert!(
                matches!(err, SandboxedError::Variable { .. }),
                "{name}: {err}"
            );
        }
    }
}

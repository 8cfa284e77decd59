//! `--sandboxed-stdio PID -- PROGRAM [ARG...]`: the runtime as the wall of one long-lived
//! program (an MCP server, a hook) instead of a batch.
//!
//! The design decision to know: the runtime applies exactly what it applies before a batch
//! (non-dumpable, the session's network, both sandbox layers from the same variables), then
//! starts the program below itself as the guard of controller PID ([`crate::guard`]), so the
//! program runs with every wall and ends, with all it started, when the controller dies; its
//! stdin, stdout and stderr are the runtime's own, piped by the controller for the program's
//! whole life. Before the start the runtime reads one line, [`SANDBOXED_START_LINE`], from
//! stdin byte by byte (nothing of the program's input is consumed): the controller writes it
//! once the runtime sits in the session's cgroups, so nothing the program starts can escape
//! them. The program's environment is the command scrub ([`crate::envguard`]) plus the
//! variables [`SANDBOXED_KEEP_ENV`] names.

use std::ffi::{OsStr, OsString};
use std::io::Read;

use crate::guard::GuardArgs;

pub use intendant_protocol::runtime::{
    SANDBOXED_KEEP_ENV, SANDBOXED_START_LINE, SANDBOXED_STDIO_ARG,
};

/// Most bytes read while waiting for the start line.
const START_LINE_MAX: usize = 64;

/// Reads the start line from `input` one byte at a time (so nothing after it is consumed).
/// `Ok(false)`: the input ended first (the controller gave up: nothing is run).
pub fn await_start(input: &mut impl Read) -> Result<bool, String> {
    let mut line = Vec::with_capacity(START_LINE_MAX);
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(0) => return Ok(false),
            Ok(_) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
                if line.len() >= START_LINE_MAX {
                    return Err("stdin did not start with the start line".into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read the start line: {e}")),
        }
    }
    if line != SANDBOXED_START_LINE {
        return Err("stdin did not start with the start line".into());
    }
    Ok(true)
}

/// The program's environment: the command scrub of `vars`, plus the variables
/// [`SANDBOXED_KEEP_ENV`] (read from `vars`) names, with their values from `vars`.
pub fn program_env<I>(vars: I) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
    let keep: Vec<OsString> = vars
        .iter()
        .find(|(k, _)| k == SANDBOXED_KEEP_ENV)
        .map(|(_, v)| {
            v.to_string_lossy()
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(OsString::from)
                .collect()
        })
        .unwrap_or_default();
    let mut env = crate::envguard::command_env_from(vars.iter().cloned());
    for name in &keep {
        let kept = vars.iter().find(|(k, _)| k == name);
        if let Some((k, v)) = kept
            && !is_control(k)
        {
            env.retain(|(e, _)| e != k);
            env.push((k.clone(), v.clone()));
        }
    }
    env
}

fn is_control(name: &OsStr) -> bool {
    name.to_str()
        .is_none_or(intendant_protocol::env_policy::is_control)
}

/// The program's command: exactly `env` (the program is looked up in `env`'s `PATH`).
pub fn command(args: &GuardArgs, env: Vec<(OsString, OsString)>) -> std::process::Command {
    let mut cmd = args.command();
    cmd.env_clear().envs(env);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_is_read_and_nothing_after_it() {
        let mut input: &[u8] = b"start\n{\"jsonrpc\":\"2.0\"}\n";
        assert_eq!(await_start(&mut input), Ok(true));
        assert_eq!(input, b"{\"jsonrpc\":\"2.0\"}\n");
        let mut closed: &[u8] = b"";
        assert_eq!(await_start(&mut closed), Ok(false));
        let mut cut: &[u8] = b"sta";
        assert_eq!(await_start(&mut cut), Ok(false));
        let mut wrong: &[u8] = b"{\"jsonrpc\":\"2.0\"}\n";
        assert!(await_start(&mut wrong).is_err());
        let mut endless: &[u8] = &[b'x'; 1000];
        assert!(await_start(&mut endless).is_err());
    }

    #[test]
    fn kept_names_pass_the_scrub_and_controls_never_do() {
        let vars: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "sk-kept"),
            ("ANTHROPIC_API_KEY", "sk-dropped"),
            ("INTENDANT_SANDBOX_WRITE_PATHS", "/p"),
            (
                SANDBOXED_KEEP_ENV,
                "OPENAI_API_KEY, INTENDANT_SANDBOX_WRITE_PATHS,ABSENT",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let env = program_env(vars);
        let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
        assert_eq!(names, vec!["PATH", "OPENAI_API_KEY"]);
        assert_eq!(env[1].1, "sk-kept");
    }
}

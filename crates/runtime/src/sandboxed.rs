//! `--sandboxed-stdio -- PROGRAM [ARG...]`: the runtime as the wall of one long-lived program
//! (an MCP server, a hook) instead of a batch.
//!
//! The design decision to know: the runtime applies exactly what it applies before a batch
//! (non-dumpable, the session's network, both sandbox layers from the same variables), then
//! *becomes* the program with `execve`, so the program runs with every wall and nothing of the
//! runtime stays around it; its stdin, stdout and stderr are the runtime's own, piped by the
//! controller for the program's whole life. Before the `execve` the runtime reads one line,
//! [`SANDBOXED_START_LINE`], from stdin byte by byte (nothing of the program's input is
//! consumed): the controller writes it once the runtime sits in the session's cgroups, so
//! nothing the program starts can escape them. The program's environment is the command scrub
//! ([`crate::envguard`]) plus the variables [`SANDBOXED_KEEP_ENV`] names.

use std::ffi::{OsStr, OsString};
use std::io::Read;

pub use intendant_protocol::runtime::{
    SANDBOXED_KEEP_ENV, SANDBOXED_START_LINE, SANDBOXED_STDIO_ARG,
};

/// Most bytes read while waiting for the start line.
const START_LINE_MAX: usize = 64;

/// The program to become: the arguments after `--`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioArgs {
    /// The program (a path, or a name looked up in the program's `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl StdioArgs {
    /// Parses the arguments after [`SANDBOXED_STDIO_ARG`]: `--`, then the program and its
    /// arguments. Anything else is an error.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<StdioArgs, String> {
        let usage = format!("usage: {SANDBOXED_STDIO_ARG} -- PROGRAM [ARG...]");
        let mut args = args.into_iter();
        match args.next() {
            Some(sep) if sep == "--" => {}
            Some(other) => return Err(format!("unexpected argument {other:?}; {usage}")),
            None => return Err(format!("no program given; {usage}")),
        }
        let program = args
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("no program given; {usage}"))?;
        Ok(StdioArgs {
            program,
            args: args.collect(),
        })
    }
}

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

/// Becomes the program: `execve` with `env` (the program is looked up in `env`'s `PATH`).
/// Returns only when that failed.
#[cfg(unix)]
pub fn exec(args: &StdioArgs, env: Vec<(OsString, OsString)>) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(&args.program)
        .args(&args.args)
        .env_clear()
        .envs(env)
        .exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_need_the_separator_and_a_program() {
        assert_eq!(
            StdioArgs::parse(os(&["--", "node", "server.js", "--flag"])),
            Ok(StdioArgs {
                program: "node".into(),
                args: os(&["server.js", "--flag"]),
            })
        );
        assert!(
            StdioArgs::parse(os(&[]))
                .unwrap_err()
                .contains("no program")
        );
        assert!(
            StdioArgs::parse(os(&["--"]))
                .unwrap_err()
                .contains("no program")
        );
        assert!(
            StdioArgs::parse(os(&["--", ""]))
                .unwrap_err()
                .contains("no program")
        );
        assert!(
            StdioArgs::parse(os(&["node"]))
                .unwrap_err()
                .contains("unexpected argument")
        );
    }

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

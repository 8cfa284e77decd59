//! The environment of a model-driven shell.
//!
//! The controller already cleared the runtime's environment down to the allowlist of
//! [`intendant_protocol::env_policy`]; this is the second, independent boundary
//! (`docs/security.md`): whatever this process holds, `execAsAgent` and `execPty` start their
//! shell with `env_clear().envs(command_env())`, so provider keys and ambient credentials are
//! dropped again, and so are the runtime's own `INTENDANT_*` controls (sandbox paths, display
//! grant, log dir, passthrough list): a command needs none of them, and the log dir is where the
//! `askHuman` answer channel lives.

use intendant_protocol::env_policy;
use std::ffi::{OsStr, OsString};

/// The environment `execAsAgent` and `execPty` give their shell, computed from this process's
/// own environment with provider keys and ambient credentials scrubbed.
pub fn command_env() -> Vec<(OsString, OsString)> {
    command_env_from(std::env::vars_os())
}

/// [`command_env`] over an explicit environment: the credential scrub, then the controls.
pub fn command_env_from<I>(vars: I) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    env_policy::scrub(vars)
        .into_iter()
        .filter(|(k, _)| !is_control(k))
        .collect()
}

fn is_control(name: &OsStr) -> bool {
    name.to_str().is_none_or(env_policy::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(vars: &[(OsString, OsString)]) -> Vec<&str> {
        vars.iter().filter_map(|(k, _)| k.to_str()).collect()
    }

    #[test]
    fn drops_keys_credentials_and_controls_keeps_the_rest() {
        let input: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("MY_PROJECT_FLAG", "1"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("anthropic_api_key", "sk-ant"),
            ("GITHUB_TOKEN", "ghp"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("INTENDANT_SANDBOX_WRITE_PATHS", "/work"),
            ("INTENDANT_USER_DISPLAY_GRANTED", "1"),
            ("Intendant_Log_Dir", "/logs"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        assert_eq!(
            names(&command_env_from(input)),
            vec!["PATH", "HOME", "MY_PROJECT_FLAG"]
        );
    }

    #[test]
    fn command_env_reads_this_process() {
        // PATH is set for every test run; nothing denied can survive the scrub.
        let env = command_env();
        assert!(names(&env).contains(&"PATH"));
        assert!(names(&env).iter().all(|n| !env_policy::is_denied(n)));
    }
}

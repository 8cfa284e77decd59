//! The caller's environment as a value, and the minimal environment a CLI child gets.
//!
//! Passing [`HostEnv`] explicitly (instead of reading `std::env` deep inside) keeps detection and
//! child-environment construction testable and makes every admitted variable visible here.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Variables every child keeps when set: executable discovery, locale, temporary directory,
/// certificates, proxies, and HOME for the CLI's own saved login.
pub const BASE_KEEP: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// A snapshot of environment variables (non-UTF-8 entries are dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    vars: BTreeMap<String, String>,
}

impl HostEnv {
    /// The current process environment, with the credentials the controller secluded at start.
    pub fn current() -> HostEnv {
        HostEnv {
            vars: intendant_core::secrets::vars().into_iter().collect(),
        }
    }

    /// An environment from explicit pairs (tests, library callers).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> HostEnv {
        HostEnv {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// One variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Sets one variable (builder style).
    #[must_use]
    pub fn with(mut self, name: &str, value: &str) -> HostEnv {
        self.vars.insert(name.to_owned(), value.to_owned());
        self
    }

    /// `$HOME`, when set.
    pub fn home(&self) -> Option<PathBuf> {
        self.get("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }

    /// A directory from `$var`, else `$HOME/<fallback>`.
    pub fn dir_or_home(&self, var: &str, fallback: &str) -> Option<PathBuf> {
        match self.get(var).filter(|v| !v.is_empty()) {
            Some(v) => Some(PathBuf::from(v)),
            None => self.home().map(|h| h.join(fallback)),
        }
    }

    /// Iterates over all variables.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Which environment the child gets: a fixed allow-list plus the profile's own additions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildEnvPolicy {
    /// Variables kept from the caller when set (besides the common base list).
    pub keep: &'static [&'static str],
    /// Variables always set to fixed values (telemetry, update checks, colour off).
    pub fixed: &'static [(&'static str, &'static str)],
}

/// Whether `name` is a plain environment variable name.
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The child's environment and the secret values in it (for redaction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// Variables set in the child; nothing else is inherited.
    pub vars: BTreeMap<String, String>,
    /// Values of admitted variables that may be secrets.
    pub secrets: Vec<String>,
}

impl ChildEnv {
    /// The variables as a [`intendant_core::child::ChildSpec`] takes them.
    pub fn os_vars(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect()
    }
}

/// Builds the child environment: the base list, the profile's keep list, the auth variables the
/// chosen auth class needs, the explicitly admitted names, then the profile's fixed values.
pub fn child_env(
    host: &HostEnv,
    policy: &ChildEnvPolicy,
    auth_env: &[String],
    admitted: &[String],
) -> ChildEnv {
    let mut out = ChildEnv::default();
    for name in BASE_KEEP.iter().chain(policy.keep.iter()) {
        if let Some(v) = host.get(name) {
            out.vars.insert((*name).to_owned(), v.to_owned());
        }
    }
    for name in auth_env.iter().chain(admitted.iter()) {
        if let Some(v) = host.get(name) {
            out.vars.insert(name.clone(), v.to_owned());
            out.secrets.push(v.to_owned());
        }
    }
    for (k, v) in policy.fixed {
        out.vars.insert((*k).to_owned(), (*v).to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: ChildEnvPolicy = ChildEnvPolicy {
        keep: &["CODEX_HOME"],
        fixed: &[("NO_COLOR", "1")],
    };

    #[test]
    fn only_listed_variables_reach_the_child() {
        let host = HostEnv::from_pairs([
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("CODEX_HOME", "/c"),
            ("OPENAI_API_KEY", "sk-secret-1"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("FAKE_API_KEY", "k2"),
        ]);
        let env = child_env(&host, &POLICY, &[], &["FAKE_API_KEY".to_owned()]);
        let names: Vec<&str> = env.vars.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["CODEX_HOME", "FAKE_API_KEY", "HOME", "NO_COLOR", "PATH"]
        );
        assert_eq!(env.secrets, ["k2"]);
    }

    #[test]
    fn env_names_are_checked() {
        assert!(is_valid_env_name("ANTHROPIC_BASE_URL"));
        assert!(!is_valid_env_name("1X"));
        assert!(!is_valid_env_name("A=B"));
        assert!(!is_valid_env_name(""));
    }
}

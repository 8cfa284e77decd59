//! The one environment policy of Intendant: which variables a model-driven command may see.
//!
//! It is applied at two boundaries (the environment defaults closed; `docs/security.md`):
//! - the controller clears the runtime's environment and copies back only what
//!   [`filter_env`] admits (the allowlist plus exact passthrough names);
//! - the runtime repeats the credential scrub, [`scrub`], on whatever environment it was given
//!   before it starts a model-driven shell.
//!
//! The design decision to know: the deny rules win over everything. A name that looks like a
//! provider key or an ambient credential is refused even when it is on the allowlist or named in
//! [`PASSTHROUGH_ENV`]; passthrough can only admit names the deny rules leave alone.
//!
//! Names are compared case-insensitively (Windows environments are, and `Path` vs `PATH` must
//! not become a bypass); names that are not valid UTF-8 are never admitted. Pure functions, no
//! I/O: callers pass the variables in.

use std::ffi::OsStr;

/// Variable holding extra names the user deliberately grants to commands: exact names,
/// separated by commas (surrounding whitespace ignored), e.g. `MY_FLAG, PROJECT_MODE`. Entries
/// holding a wildcard, `=`, whitespace inside, or NUL are rejected, never treated as patterns.
pub const PASSTHROUGH_ENV: &str = "INTENDANT_ENV_PASSTHROUGH";

/// Prefix of Intendant's own control variables (sandbox paths, log dir, display grant...).
pub const CONTROL_PREFIX: &str = "INTENDANT_";

/// OS and process essentials, locale and non-secret toolchain variables, exact names.
const ALLOWED_NAMES: &[&str] = &[
    // process essentials
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "USERNAME",
    "SHELL",
    "PWD",
    "HOSTNAME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TZ",
    "LANG",
    "LANGUAGE",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "LD_LIBRARY_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    // terminal
    "TERM",
    "COLORTERM",
    "TERMINFO",
    "TERMINFO_DIRS",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "COLUMNS",
    "LINES",
    // desktop session (the runtime gates display access itself)
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_DIRS",
    "XDG_CONFIG_DIRS",
    // Windows essentials
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
    "PROGRAMFILES",
    "PROGRAMFILES(X86)",
    "NUMBER_OF_PROCESSORS",
    "PROCESSOR_ARCHITECTURE",
    // Rust
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "CARGO_TARGET_DIR",
    "CARGO_TERM_COLOR",
    "CARGO_BUILD_JOBS",
    "RUST_BACKTRACE",
    "RUST_LOG",
    "RUST_MIN_STACK",
    // Go
    "GOPATH",
    "GOROOT",
    "GOBIN",
    "GOCACHE",
    "GOMODCACHE",
    "GOFLAGS",
    "GOOS",
    "GOARCH",
    "GOTOOLCHAIN",
    "CGO_ENABLED",
    // Node, Python, JVM, C
    "NODE_PATH",
    "NVM_DIR",
    "NVM_BIN",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "JAVA_HOME",
    "GRADLE_USER_HOME",
    "M2_HOME",
    "CC",
    "CXX",
    "AR",
    "PKG_CONFIG_PATH",
];

/// Prefixes admitted as a family: the locale categories.
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Provider and model vendors: any of their variables that carries a key is an absolute deny.
const PROVIDER_PREFIXES: &[&str] = &[
    "OPENAI_",
    "ANTHROPIC_",
    "CLAUDE_",
    "GEMINI_",
    "GOOGLE_",
    "VERTEX",
    "AZURE_OPENAI_",
    "MISTRAL_",
    "GROQ_",
    "DEEPSEEK_",
    "XAI_",
    "COHERE_",
    "OPENROUTER_",
    "TOGETHER_",
    "FIREWORKS_",
    "PERPLEXITY_",
    "MOONSHOT_",
    "KIMI_",
    "CODEX_",
    "HF_",
    "HUGGING",
    "REPLICATE_",
    "OLLAMA_",
];

/// Markers that make a provider-prefixed variable a key.
const PROVIDER_SECRET_MARKERS: &[&str] = &["KEY", "TOKEN", "SECRET", "AUTH", "CREDENTIAL"];

/// Markers that make any variable a credential, wherever they appear in the name.
const CREDENTIAL_MARKERS: &[&str] = &[
    "API_KEY",
    "APIKEY",
    "API_TOKEN",
    "APITOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "PRIVATEKEY",
    "ACCESS_KEY",
    "ACCESSKEY",
    "AUTH_TOKEN",
    "AUTHTOKEN",
    "SESSION_TOKEN",
    "_TOKEN_",
];

/// Ambient credentials and credential locators, exact names.
const CREDENTIAL_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "DOCKER_AUTH_CONFIG",
    "REGISTRY_AUTH_FILE",
    "NETRC",
    "PGPASSFILE",
    "MYSQL_PWD",
    "DBUS_SESSION_BUS_ADDRESS",
    "DATABASE_URL",
    "VAULT_ADDR",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "CLOUDSDK_CONFIG",
];

/// Cloud vendors whose variables are denied when they carry a secret-ish word.
const CLOUD_PREFIXES: &[&str] = &[
    "AWS_",
    "AZURE_",
    "GCP_",
    "GCLOUD_",
    "CLOUDSDK_",
    "DO_",
    "DIGITALOCEAN_",
];

/// Why a name is denied; `None` from [`deny_reason`] means it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// A provider or model API key: never admitted, passthrough cannot override.
    ProviderKey,
    /// An ambient credential (agent sockets, cloud and forge tokens, passwords...).
    AmbientCredential,
}

/// Why `name` is denied, if it is. Case-insensitive.
pub fn deny_reason(name: &str) -> Option<DenyReason> {
    let upper = name.to_ascii_uppercase();
    let n = upper.as_str();
    let provider = PROVIDER_PREFIXES.iter().any(|p| n.starts_with(p))
        && PROVIDER_SECRET_MARKERS.iter().any(|m| n.contains(m));
    if provider
        || n.ends_with("_API_KEY")
        || n.ends_with("_API_TOKEN")
        || n.contains("API_KEY")
        || n.contains("APIKEY")
    {
        return Some(DenyReason::ProviderKey);
    }
    let cloud = CLOUD_PREFIXES.iter().any(|p| n.starts_with(p))
        && [
            "KEY",
            "TOKEN",
            "SECRET",
            "SESSION",
            "PASSWORD",
            "CREDENTIAL",
        ]
        .iter()
        .any(|m| n.contains(m));
    if cloud
        || CREDENTIAL_NAMES.contains(&n)
        || CREDENTIAL_MARKERS.iter().any(|m| n.contains(m))
        || n.ends_with("TOKEN")
        || n.starts_with("TOKEN_")
        || n.ends_with("_PAT")
        || n.ends_with("_AUTH")
        || n.ends_with("_DATABASE_URL")
        || n.ends_with("_DSN")
    {
        return Some(DenyReason::AmbientCredential);
    }
    None
}

/// Whether `name` is refused whatever the allowlist or passthrough says.
pub fn is_denied(name: &str) -> bool {
    deny_reason(name).is_some()
}

/// Whether `name` is one of Intendant's own control variables (`INTENDANT_*`).
pub fn is_control(name: &str) -> bool {
    name.len() >= CONTROL_PREFIX.len()
        && name.as_bytes()[..CONTROL_PREFIX.len()].eq_ignore_ascii_case(CONTROL_PREFIX.as_bytes())
}

/// Whether `name` is on the built-in allowlist (before the deny rules).
pub fn is_essential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ALLOWED_NAMES.contains(&upper.as_str()) || ALLOWED_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Parsed [`PASSTHROUGH_ENV`]: the accepted names and the entries refused as malformed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passthrough {
    /// Exact names granted, in the order given, without duplicates.
    pub names: Vec<String>,
    /// Entries that are not plain names (wildcards, `=`, spaces, NUL), for a warning.
    pub rejected: Vec<String>,
}

impl Passthrough {
    /// Whether `name` was granted (exact match; names are case-sensitive on Unix).
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// Parses the value of [`PASSTHROUGH_ENV`]: comma-separated exact names.
pub fn parse_passthrough(value: &str) -> Passthrough {
    let mut out = Passthrough::default();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let plain = entry
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
        if !plain {
            out.rejected.push(entry.to_owned());
        } else if !out.contains(entry) {
            out.names.push(entry.to_owned());
        }
    }
    out
}

/// Whether the controller copies `name` into the runtime's environment: on the allowlist or
/// granted by passthrough, and not denied. Control variables are injected individually by the
/// controller, never inherited, so they are not admitted here.
pub fn is_allowed(name: &str, passthrough: &Passthrough) -> bool {
    !is_denied(name) && !is_control(name) && (is_essential(name) || passthrough.contains(name))
}

/// The controller's boundary: keeps only the admitted variables (see [`is_allowed`]).
pub fn filter_env<I, K, V>(vars: I, passthrough: &Passthrough) -> Vec<(K, V)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
{
    vars.into_iter()
        .filter(|(k, _)| {
            k.as_ref()
                .to_str()
                .is_some_and(|n| is_allowed(n, passthrough))
        })
        .collect()
}

/// The runtime's repeat of the credential scrub: drops every denied name and every name that
/// is not valid UTF-8 (it cannot be checked), keeps the rest.
pub fn scrub<I, K, V>(vars: I) -> Vec<(K, V)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
{
    vars.into_iter()
        .filter(|(k, _)| k.as_ref().to_str().is_some_and(|n| !is_denied(n)))
        .collect()
}

#[cfg(test)]
mod tests;

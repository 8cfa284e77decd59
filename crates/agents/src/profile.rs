//! What Intendant knows about one external CLI, as one plain value ([`AgentProfile`]).
//!
//! A profile is data plus a few plain functions: no trait objects, no registry framework. The
//! three profiles live in `profiles/`, one file each, and are selected by name through
//! [`crate::profiles::find`].

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::{AuthCandidate, AuthProbe};
use crate::env::ChildEnvPolicy;
use crate::error::CliError;

/// A dotted numeric version, e.g. `0.171.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

impl Version {
    /// A version from its parts.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// The first `N.N.N` (or `N.N`) token in `text`, ignoring any pre-release suffix.
    pub fn find_in(text: &str) -> Option<Version> {
        text.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
            .map(|t| t.trim_start_matches('v'))
            .find_map(Version::parse)
    }

    fn parse(token: &str) -> Option<Version> {
        let core = token.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Version::new(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Supported versions: `min <= v < below`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    /// Lowest supported version (inclusive).
    pub min: Version,
    /// First unsupported version above the range (exclusive).
    pub below: Version,
}

impl VersionRange {
    /// Whether `v` is inside the range.
    pub fn contains(&self, v: Version) -> bool {
        self.min <= v && v < self.below
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ">={}, <{}", self.min, self.below)
    }
}

/// How the CLI is told its reasoning effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffortSpelling {
    /// A flag taking the level, e.g. `--effort high`.
    Flag(&'static str),
    /// A config override key, e.g. codex `-c model_reasoning_effort="high"`.
    ConfigKey(&'static str),
    /// The CLI has no per-invocation effort control.
    Unsupported,
}

/// How the CLI spells the settings Intendant sets; documentation of record and argv source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagSpellings {
    /// Model selection, e.g. `--model`.
    pub model: &'static str,
    /// Reasoning effort.
    pub effort: EffortSpelling,
    /// Permission / approval flags for a non-interactive, never-asking run.
    pub permission: &'static [&'static str],
    /// Sandbox flags (read-only where the CLI has a sandbox).
    pub sandbox: &'static [&'static str],
    /// The flag carrying the answer's JSON Schema, if the CLI has one.
    pub json_schema: Option<&'static str>,
    /// The flag for one `KEY=VALUE` config override, if the CLI has one.
    pub config_override: Option<&'static str>,
    /// The top-level keys a config override may set: those that choose an endpoint, switch
    /// telemetry off or tune the model's output. Any other key (approval, sandbox, features,
    /// tools, the model itself) would undo the hardened invocation and is refused.
    pub config_override_keys: &'static [&'static str],
}

impl FlagSpellings {
    /// The model flag and, when requested, the effort in this CLI's spelling. The caller has
    /// checked that `effort` is a plain word and that the CLI supports one.
    pub fn model_and_effort(&self, model: &str, effort: Option<&str>) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![self.model.into(), model.into()];
        match (self.effort, effort, self.config_override) {
            (EffortSpelling::Flag(flag), Some(level), _) => {
                args.push(flag.into());
                args.push(level.into());
            }
            (EffortSpelling::ConfigKey(key), Some(level), Some(flag)) => {
                args.push(flag.into());
                args.push(format!("{key}=\"{level}\"").into());
            }
            (EffortSpelling::ConfigKey(_), _, _)
            | (EffortSpelling::Flag(_), None, _)
            | (EffortSpelling::Unsupported, _, _) => {}
        }
        args
    }
}

/// A recognizable sign in the CLI's output that the provider is overloaded or rate limiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverloadSign {
    /// Lower-case substring searched for in the failure text.
    pub needle: &'static str,
    /// What it means.
    pub condition: ProviderCondition,
}

/// A classification of a provider failure; never the provider's text itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderCondition {
    /// Requests or tokens per time window exhausted (HTTP 429, usage limits).
    RateLimited,
    /// The provider is overloaded (HTTP 529 / 503).
    Overloaded,
    /// The provider refused the credentials.
    AuthRejected,
}

impl ProviderCondition {
    /// Whether the same request may succeed later without changes.
    pub fn is_retryable(self) -> bool {
        match self {
            ProviderCondition::RateLimited | ProviderCondition::Overloaded => true,
            ProviderCondition::AuthRejected => false,
        }
    }
}

/// Everything an argv builder needs; all paths are inside the private workspace.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The model requested.
    pub model: String,
    /// Optional reasoning effort.
    pub effort: Option<String>,
    /// The answer schema, compact JSON.
    pub schema_json: String,
    /// The mode-0600 schema file.
    pub schema_file: PathBuf,
    /// The mode-0600 file the CLI writes its final message to (when it supports one).
    pub result_file: PathBuf,
    /// The empty mode-0700 working directory.
    pub workdir: PathBuf,
    /// `KEY=VALUE` config overrides from `[agent.<name>] config` and `--agent-config`.
    pub config_overrides: Vec<String>,
}

/// What the child left behind, bounded.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// All of stdout (bounded by the request's output limit).
    pub stdout: Vec<u8>,
    /// The first bytes of stderr, used only for classification.
    pub stderr_head: Vec<u8>,
    /// The result file's content, when the CLI wrote one.
    pub result_file: Option<Vec<u8>>,
}

/// Token usage as reported by the CLI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input tokens (including cached).
    pub input_tokens: u64,
    /// Of which served from cache.
    pub cached_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// A successfully ended turn, before schema and application validation.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The final value, parsed.
    pub value: Value,
    /// Lifecycle event types in the order first seen.
    pub events: Vec<String>,
    /// The model the CLI reports it used, when it reports one.
    pub effective_model: Option<String>,
    /// Token usage.
    pub usage: TokenUsage,
    /// Cost the CLI reports in USD (metered use only is ever shown as spent money).
    pub reported_cost_usd: Option<f64>,
    /// Attempts the CLI reports (1 when it does not say).
    pub attempts: u32,
}

/// Whether and how the CLI does a bounded, schema-checked delegation.
#[derive(Debug, Clone, Copy)]
pub enum Delegation {
    /// Supported: how to build argv and how to read the transcript.
    Supported {
        /// The protocol spoken, e.g. `exec-jsonl`.
        protocol: &'static str,
        /// Builds argv after the executable (never containing the prompt).
        build_argv: fn(&Invocation) -> Vec<OsString>,
        /// Applies the CLI's success rules to a transcript.
        interpret: fn(&Transcript, &[OverloadSign]) -> Result<TurnOutcome, CliError>,
    },
    /// Not supported, and why (shown in `runtime_unsupported_capability`).
    Unsupported {
        /// One sentence.
        reason: &'static str,
    },
}

/// Everything Intendant knows about one external CLI.
#[derive(Debug, Clone, Copy)]
pub struct AgentProfile {
    /// The name users select it by (`codex`, `claude-code`, `kimi`).
    pub name: &'static str,
    /// The runtime kind reported in readiness and responses (`codex-cli`).
    pub runtime: &'static str,
    /// The npm package it ships in.
    pub package: &'static str,
    /// Executable name looked up on PATH when no path is configured.
    pub executable: &'static str,
    /// Supported versions.
    pub versions: VersionRange,
    /// What the executable needs to start (shown when the version command fails).
    pub runs_on: &'static str,
    /// Arguments that print the version.
    pub version_args: &'static [&'static str],
    /// Reads the version from the version command's stdout.
    pub parse_version: fn(&str) -> Option<Version>,
    /// Flag spellings.
    pub flags: FlagSpellings,
    /// Child environment policy.
    pub env: ChildEnvPolicy,
    /// The readiness probe for credentials: which auth class would the CLI use, given the
    /// caller's environment and files. Never reads more than it needs; never returns values.
    pub detect_auth: fn(&AuthProbe<'_>) -> Vec<AuthCandidate>,
    /// Overload and rate-limit signs in the CLI's failure output.
    pub overload_signs: &'static [OverloadSign],
    /// Delegation support.
    pub delegation: Delegation,
    /// The command that installs a supported version.
    pub install_command: &'static str,
    /// The command that logs in.
    pub login_command: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_found_in_cli_output() {
        assert_eq!(
            Version::find_in("codex-cli 0.171.0"),
            Some(Version::new(0, 171, 0))
        );
        assert_eq!(
            Version::find_in("2.1.332 (Claude Code)"),
            Some(Version::new(2, 1, 332))
        );
        assert_eq!(
            Version::find_in("v2.1.0-beta.1\n"),
            Some(Version::new(2, 1, 0))
        );
        assert_eq!(Version::find_in("no version here"), None);
    }

    #[test]
    fn effort_is_spelled_per_cli() {
        let mut flags = FlagSpellings {
            model: "--model",
            effort: EffortSpelling::Flag("--effort"),
            permission: &[],
            sandbox: &[],
            json_schema: None,
            config_override: Some("-c"),
            config_override_keys: &[],
        };
        let argv = |f: &FlagSpellings| -> Vec<String> {
            f.model_and_effort("m", Some("high"))
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect()
        };
        assert_eq!(argv(&flags), ["--model", "m", "--effort", "high"]);
        flags.effort = EffortSpelling::ConfigKey("model_reasoning_effort");
        assert_eq!(
            argv(&flags),
            ["--model", "m", "-c", "model_reasoning_effort=\"high\""]
        );
        flags.effort = EffortSpelling::Unsupported;
        assert_eq!(argv(&flags), ["--model", "m"]);
    }

    #[test]
    fn ranges_are_half_open() {
        let r = VersionRange {
            min: Version::new(1, 0, 0),
            below: Version::new(2, 0, 0),
        };
        assert!(r.contains(Version::new(1, 0, 0)));
        assert!(r.contains(Version::new(1, 99, 3)));
        assert!(!r.contains(Version::new(2, 0, 0)));
        assert!(!r.contains(Version::new(0, 9, 9)));
    }
}

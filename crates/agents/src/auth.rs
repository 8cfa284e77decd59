//! Auth classes, billing classes, and the narrowing by `[agent.<name>] allowed_auth`.
//!
//! Detection looks at which variables are set and at the CLIs' own login files, and keeps only
//! a classification: no value, account or organization field survives it.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::env::HostEnv;

/// Most bytes read from a CLI's login file when classifying it.
const MAX_LOGIN_FILE_BYTES: u64 = 1 << 20;

/// How the CLI authenticates to its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthClass {
    /// A ChatGPT subscription login saved by `codex login`.
    #[serde(rename = "chatgpt")]
    Chatgpt,
    /// A Claude subscription login saved by `claude` (`/login`) or a `setup-token` token.
    #[serde(rename = "claude.ai")]
    ClaudeAi,
    /// A Kimi Code subscription login saved by `kimi login`.
    #[serde(rename = "kimi_login")]
    KimiLogin,
    /// A provider API key (metered).
    #[serde(rename = "api_key")]
    ApiKey,
    /// A configured custom endpoint that needs no key (e.g. a local model server).
    #[serde(rename = "custom_endpoint")]
    CustomEndpoint,
}

impl AuthClass {
    /// The wire name (also what `allowed_auth` lists).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthClass::Chatgpt => "chatgpt",
            AuthClass::ClaudeAi => "claude.ai",
            AuthClass::KimiLogin => "kimi_login",
            AuthClass::ApiKey => "api_key",
            AuthClass::CustomEndpoint => "custom_endpoint",
        }
    }

    /// Parses an `allowed_auth` entry.
    pub fn parse(name: &str) -> Option<AuthClass> {
        [
            AuthClass::Chatgpt,
            AuthClass::ClaudeAi,
            AuthClass::KimiLogin,
            AuthClass::ApiKey,
            AuthClass::CustomEndpoint,
        ]
        .into_iter()
        .find(|c| c.as_str() == name)
    }

    /// How use under this class is paid for.
    pub fn billing(self) -> BillingClass {
        match self {
            AuthClass::Chatgpt | AuthClass::ClaudeAi | AuthClass::KimiLogin => {
                BillingClass::SubscriptionLimits
            }
            AuthClass::ApiKey => BillingClass::Metered,
            AuthClass::CustomEndpoint => BillingClass::EndpointDefined,
        }
    }
}

impl fmt::Display for AuthClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How use is paid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BillingClass {
    /// Counted against a subscription's usage limits; no per-request money.
    SubscriptionLimits,
    /// Billed per token to an API account.
    Metered,
    /// Whatever the custom endpoint does; Intendant cannot know.
    EndpointDefined,
}

/// One way the CLI could authenticate, with the variables the child needs for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthCandidate {
    /// The class.
    pub class: AuthClass,
    /// Names of caller variables admitted into the child for this class (keys included).
    pub admit_env: Vec<String>,
}

impl AuthCandidate {
    /// A candidate needing no extra variables (login files are found through HOME).
    pub fn login(class: AuthClass) -> AuthCandidate {
        AuthCandidate {
            class,
            admit_env: Vec::new(),
        }
    }

    /// A candidate carried by one environment variable.
    pub fn env(class: AuthClass, name: &str) -> AuthCandidate {
        AuthCandidate {
            class,
            admit_env: vec![name.to_owned()],
        }
    }
}

/// What a profile's auth probe may look at.
#[derive(Debug, Clone, Copy)]
pub struct AuthProbe<'a> {
    /// The caller's environment.
    pub env: &'a HostEnv,
    /// Config overrides in effect (`KEY=VALUE`), e.g. a codex custom provider.
    pub config_overrides: &'a [String],
}

impl AuthProbe<'_> {
    /// Whether `name` is set to a non-blank value.
    pub fn has_env(&self, name: &str) -> bool {
        self.env.get(name).is_some_and(|v| !v.trim().is_empty())
    }
}

/// Reads a CLI's small login or config file; `None` when absent, unreadable or larger than
/// the bound (a file that big is not one the CLI wrote, and is never read whole).
pub fn read_login_file(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_LOGIN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= MAX_LOGIN_FILE_BYTES).then_some(text)
}

/// Reads a small JSON login file; `None` when absent, too large or not JSON.
pub fn read_login_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&read_login_file(path)?).ok()
}

/// Why no candidate could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthRefusal {
    /// Nothing was found at all.
    NoneFound,
    /// Something was found, but `allowed_auth` excludes all of it.
    NotAllowed {
        /// What was found.
        found: Vec<AuthClass>,
    },
    /// `allowed_auth` names a class that does not exist.
    UnknownClass(String),
}

/// Picks the first candidate (they come in the profile's preference order) that `allowed`
/// permits; an empty `allowed` permits every class.
pub fn choose(
    candidates: Vec<AuthCandidate>,
    allowed: &[String],
) -> Result<AuthCandidate, AuthRefusal> {
    let mut allowed_classes = Vec::with_capacity(allowed.len());
    for name in allowed {
        match AuthClass::parse(name.trim()) {
            Some(c) => allowed_classes.push(c),
            None => return Err(AuthRefusal::UnknownClass(name.clone())),
        }
    }
    if candidates.is_empty() {
        return Err(AuthRefusal::NoneFound);
    }
    let found: Vec<AuthClass> = candidates.iter().map(|c| c.class).collect();
    candidates
        .into_iter()
        .find(|c| allowed_classes.is_empty() || allowed_classes.contains(&c.class))
        .ok_or(AuthRefusal::NotAllowed { found })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_classes_are_not_metered() {
        assert_eq!(
            AuthClass::Chatgpt.billing(),
            BillingClass::SubscriptionLimits
        );
        assert_eq!(
            AuthClass::ClaudeAi.billing(),
            BillingClass::SubscriptionLimits
        );
        assert_eq!(AuthClass::ApiKey.billing(), BillingClass::Metered);
        assert_eq!(
            serde_json::to_value(AuthClass::ClaudeAi).unwrap(),
            "claude.ai"
        );
    }

    #[test]
    fn allowed_auth_narrows_in_preference_order() {
        let cands = vec![
            AuthCandidate::login(AuthClass::Chatgpt),
            AuthCandidate::env(AuthClass::ApiKey, "CODEX_API_KEY"),
        ];
        assert_eq!(
            choose(cands.clone(), &[]).unwrap().class,
            AuthClass::Chatgpt
        );
        assert_eq!(
            choose(cands.clone(), &["api_key".into()]).unwrap().class,
            AuthClass::ApiKey
        );
        assert_eq!(
            choose(cands.clone(), &["claude.ai".into()]),
            Err(AuthRefusal::NotAllowed {
                found: vec![AuthClass::Chatgpt, AuthClass::ApiKey]
            })
        );
        assert_eq!(
            choose(cands, &["bogus".into()]),
            Err(AuthRefusal::UnknownClass("bogus".into()))
        );
        assert_eq!(choose(vec![], &[]), Err(AuthRefusal::NoneFound));
    }
}

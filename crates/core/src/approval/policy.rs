//! The rules: each category's rule at a level, the `[approval]` overrides, and the decision
//! about one command.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use intendant_protocol::runtime::Command;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::autonomy::{AutonomyLevel, SharedLevel};
use crate::classify::{ActionCategory, classify};

/// How an `[approval]` key names MCP tools instead of a category: the tools' own prefix.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// What happens to a command of a category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Run without asking.
    Auto,
    /// Ask a human first.
    Ask,
    /// Never run.
    Deny,
}

impl Rule {
    /// Every rule, most permissive first (the order is also the strictness order).
    pub const ALL: [Rule; 3] = [Rule::Auto, Rule::Ask, Rule::Deny];

    /// The name used in `intendant.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Auto => "auto",
            Rule::Ask => "ask",
            Rule::Deny => "deny",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invalid `[approval]` table.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApprovalConfigError {
    /// A key that is not an action category.
    #[error("intendant.toml [approval]: {0}")]
    UnknownCategory(#[from] crate::classify::UnknownCategory),
    /// `auto` for a category only a human may approve.
    #[error(
        "intendant.toml [approval]: {category} = \"auto\" is not allowed: {category} is always \
         asked of a human (\"ask\", or \"deny\" to refuse every one)"
    )]
    HumanOnly {
        /// The key.
        category: ActionCategory,
    },
    /// A value that is not a rule.
    #[error(
        "intendant.toml [approval]: {category} = {value:?} is not a rule: expected \"auto\", \
         \"ask\" or \"deny\""
    )]
    UnknownRule {
        /// The key.
        category: String,
        /// The value given.
        value: String,
    },
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| s.to_owned())
    }
}

/// The rule of `category` at `level` when `intendant.toml` says nothing.
///
/// `low` asks for everything but file reads; from `medium` up, file reads, browsing and other
/// tools run, and writes, deletes, command execution, destructive actions and display control
/// ask. Human input is `auto` because it is not an approval matter.
pub fn default_rule(category: ActionCategory, level: AutonomyLevel) -> Rule {
    use ActionCategory::*;
    match (category, level) {
        (FileRead | HumanInput, _) => Rule::Auto,
        (Network | ToolCall, AutonomyLevel::Low) => Rule::Ask,
        (Network | ToolCall, AutonomyLevel::Medium | AutonomyLevel::High | AutonomyLevel::Full) => {
            Rule::Auto
        }
        // Without annotations an MCP tool is taken to change things (the protocol's default).
        (
            FileWrite | FileDelete | CommandExec | Destructive | DisplayControl | Mcp | Schedule,
            _,
        ) => Rule::Ask,
        // A proposed memory is a human's decision at every level (`effective_rule`).
        (Memory, _) => Rule::Ask,
    }
}

/// What an MCP tool says of itself in its annotations (`readOnlyHint`, `destructiveHint`):
/// hints from a server a human configured, which shape the default rule only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpHint {
    /// `readOnlyHint: true`.
    ReadOnly,
    /// Not read-only, `destructiveHint: false`: it only adds.
    Additive,
    /// Not read-only and not said to be only additive (the protocol's default).
    Destructive,
}

/// The rule of an MCP tool described by `hint` at `level` when nothing is configured: a
/// read-only tool runs from `medium` up (asked at `low`), any other asks (and the level relaxes
/// that as for its category: an additive one runs from `high`, a destructive one at `full`).
pub fn default_mcp_rule(hint: McpHint, level: AutonomyLevel) -> Rule {
    match (hint, level) {
        (McpHint::ReadOnly, AutonomyLevel::Low) => Rule::Ask,
        (McpHint::ReadOnly, AutonomyLevel::Medium | AutonomyLevel::High | AutonomyLevel::Full) => {
            Rule::Auto
        }
        (McpHint::Additive | McpHint::Destructive, _) => Rule::Ask,
    }
}

/// Whether the `[approval]` key `pattern` (`mcp__files_*`: `*` matches any run of characters)
/// matches the tool name `name`.
pub fn tool_pattern_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return name.is_empty(),
    };
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// What `rule` means for `category` at `level`. A `memory` proposal is asked of a human at
/// every level unless denied: no rule and no level approves it.
pub fn effective_rule(category: ActionCategory, rule: Rule, level: AutonomyLevel) -> Rule {
    match (rule, level) {
        (Rule::Deny, _) => Rule::Deny,
        // A scheduled session starts later, unattended: a human approves it at every level,
        // whatever `[approval]` says.
        (Rule::Auto | Rule::Ask, _) if category == ActionCategory::Schedule => Rule::Ask,
        (Rule::Auto | Rule::Ask, _) if category == ActionCategory::Memory => Rule::Ask,
        (Rule::Auto, _) => Rule::Auto,
        (Rule::Ask, _) if category == ActionCategory::HumanInput => Rule::Auto,
        (Rule::Ask, AutonomyLevel::Low | AutonomyLevel::Medium) => Rule::Ask,
        (Rule::Ask, AutonomyLevel::High) if category == ActionCategory::Destructive => Rule::Ask,
        (Rule::Ask, AutonomyLevel::High | AutonomyLevel::Full) => Rule::Auto,
    }
}

/// The rules of one session: the autonomy level plus `intendant.toml` overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    level: SharedLevel,
    overrides: BTreeMap<ActionCategory, Rule>,
    /// `[approval]` keys naming MCP tools (`mcp__…`, `*` a wildcard) and their rules.
    tool_rules: Vec<(String, Rule)>,
}

/// The decision about one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The strictest effective rule among the command's categories.
    pub rule: Rule,
    /// The category that rule came from (the first such, in category order).
    pub category: ActionCategory,
}

impl ApprovalPolicy {
    /// A policy from the `[approval]` table of `intendant.toml` (category name to rule name), at
    /// `level` (a plain level, or a sub-agent's level [under its parent's](SharedLevel::under)).
    pub fn new(
        level: impl Into<SharedLevel>,
        table: &BTreeMap<String, String>,
    ) -> Result<ApprovalPolicy, ApprovalConfigError> {
        let mut overrides = BTreeMap::new();
        let mut tool_rules = Vec::new();
        for (key, value) in table {
            let rule = value
                .parse()
                .map_err(|value| ApprovalConfigError::UnknownRule {
                    category: key.clone(),
                    value,
                })?;
            if key.starts_with(MCP_TOOL_PREFIX) {
                tool_rules.push((key.clone(), rule));
                continue;
            }
            let category: ActionCategory = key.parse()?;
            if category == ActionCategory::Memory && rule == Rule::Auto {
                return Err(ApprovalConfigError::HumanOnly { category });
            }
            overrides.insert(category, rule);
        }
        Ok(ApprovalPolicy {
            level: level.into(),
            overrides,
            tool_rules,
        })
    }

    /// The current autonomy level.
    pub fn level(&self) -> AutonomyLevel {
        self.level.get()
    }

    /// Changes the autonomy level (approve-all raises it to `full`; a sub-agent's stays capped by
    /// its parent's).
    pub fn set_level(&mut self, level: AutonomyLevel) {
        self.level.set(level);
    }

    /// The level as shared with whoever may change it while the session runs (every clone of
    /// this policy shares it too).
    pub fn level_handle(&self) -> SharedLevel {
        self.level.clone()
    }

    /// The configured rule of `category`, or the level's default.
    pub fn rule(&self, category: ActionCategory) -> Rule {
        self.rule_at(category, self.level())
    }

    fn rule_at(&self, category: ActionCategory, level: AutonomyLevel) -> Rule {
        self.overrides
            .get(&category)
            .copied()
            .unwrap_or_else(|| default_rule(category, level))
    }

    /// The rule `[approval]` sets for `category`, if it sets one.
    pub fn configured(&self, category: ActionCategory) -> Option<Rule> {
        self.overrides.get(&category).copied()
    }

    /// The effective rule of `category` at the current level.
    pub fn effective(&self, category: ActionCategory) -> Rule {
        self.effective_at(category, self.level())
    }

    fn effective_at(&self, category: ActionCategory, level: AutonomyLevel) -> Rule {
        effective_rule(category, self.rule_at(category, level), level)
    }

    /// The decision about a call of the MCP tool `name` (its model-facing name), described by
    /// `hint`, at the level in force now: an `[approval]` key matching the name decides (the
    /// most specific one: the most characters besides `*`), else `[approval] mcp`, else
    /// [`default_mcp_rule`]; a destructive tool is also held to `[approval] destructive`. The
    /// level relaxes `ask` as for `destructive` (a destructive tool) or other tools.
    pub fn decide_mcp(&self, name: &str, hint: McpHint) -> Decision {
        let level = self.level();
        let relaxed_as = match hint {
            McpHint::Destructive => ActionCategory::Destructive,
            McpHint::ReadOnly | McpHint::Additive => ActionCategory::Mcp,
        };
        let named = self
            .tool_rules
            .iter()
            .filter(|(pattern, _)| tool_pattern_matches(pattern, name))
            .max_by_key(|(pattern, _)| pattern.chars().filter(|c| *c != '*').count())
            .map(|(_, rule)| *rule);
        if let Some(rule) = named {
            return Decision {
                rule: effective_rule(relaxed_as, rule, level),
                category: ActionCategory::Mcp,
            };
        }
        let rule = self
            .overrides
            .get(&ActionCategory::Mcp)
            .copied()
            .unwrap_or_else(|| default_mcp_rule(hint, level));
        let decision = Decision {
            rule: effective_rule(relaxed_as, rule, level),
            category: ActionCategory::Mcp,
        };
        match (hint, self.overrides.get(&ActionCategory::Destructive)) {
            (McpHint::Destructive, Some(rule)) => {
                let destructive = effective_rule(ActionCategory::Destructive, *rule, level);
                if destructive > decision.rule {
                    return Decision {
                        rule: destructive,
                        category: ActionCategory::Destructive,
                    };
                }
                decision
            }
            (McpHint::Destructive | McpHint::ReadOnly | McpHint::Additive, _) => decision,
        }
    }

    /// The decision about `cmd`: the strictest effective rule among its categories, at the
    /// level in force now (read once, so one decision never mixes two levels).
    pub fn decide(&self, cmd: &Command) -> Decision {
        let level = self.level();
        let mut decision: Option<Decision> = None;
        for category in classify(cmd) {
            let rule = self.effective_at(category, level);
            if decision.is_none_or(|d| rule > d.rule) {
                decision = Some(Decision { rule, category });
            }
        }
        // `classify` never returns an empty list; a tool call is the conservative fallback.
        decision.unwrap_or(Decision {
            rule: self.effective_at(ActionCategory::ToolCall, level),
            category: ActionCategory::ToolCall,
        })
    }
}

//! Autonomy levels: how much a session may do before it asks a human. The rules each level
//! implies live with the controller (`intendant_core::approval`); the level itself is a wire
//! value (flags, `intendant.toml`, daemon settings, socket and dashboard requests).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// `--autonomy low|medium|high|full`, ordered from least to most autonomous.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AutonomyLevel {
    /// Ask for everything but reading files.
    Low,
    /// Ask for writes, deletes, command execution, destructive actions and display control.
    #[default]
    Medium,
    /// Auto-approve every `ask` except destructive actions.
    High,
    /// Auto-approve everything that is not `deny`.
    Full,
}

/// An autonomy level name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAutonomyLevel {
    /// The value given.
    pub value: String,
}

impl fmt::Display for UnknownAutonomyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown autonomy level {:?}: expected one of low, medium, high, full",
            self.value
        )
    }
}

impl std::error::Error for UnknownAutonomyLevel {}

impl AutonomyLevel {
    /// Every level, least autonomous first.
    pub const ALL: [AutonomyLevel; 4] = [
        AutonomyLevel::Low,
        AutonomyLevel::Medium,
        AutonomyLevel::High,
        AutonomyLevel::Full,
    ];

    /// The flag value, e.g. `medium`.
    pub fn name(self) -> &'static str {
        match self {
            AutonomyLevel::Low => "low",
            AutonomyLevel::Medium => "medium",
            AutonomyLevel::High => "high",
            AutonomyLevel::Full => "full",
        }
    }
}

impl fmt::Display for AutonomyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AutonomyLevel {
    type Err = UnknownAutonomyLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        AutonomyLevel::ALL
            .into_iter()
            .find(|l| l.name() == wanted)
            .ok_or_else(|| UnknownAutonomyLevel {
                value: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for level in AutonomyLevel::ALL {
            assert_eq!(level.name().parse::<AutonomyLevel>().unwrap(), level);
            assert_eq!(level.to_string(), level.name());
            let json = serde_json::to_string(&level).unwrap();
            assert_eq!(json, format!("\"{level}\""));
        }
        assert_eq!(
            " HIGH ".parse::<AutonomyLevel>().unwrap(),
            AutonomyLevel::High
        );
        assert_eq!(AutonomyLevel::default(), AutonomyLevel::Medium);
        assert!(
            AutonomyLevel::ALL.windows(2).all(|w| w[0] < w[1]),
            "ordered least autonomous first"
        );
    }

    #[test]
    fn unknown_level_lists_the_valid_ones() {
        let e = "max".parse::<AutonomyLevel>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"max\""), "{msg}");
        for level in AutonomyLevel::ALL {
            assert!(msg.contains(level.name()), "{msg}");
        }
    }
}

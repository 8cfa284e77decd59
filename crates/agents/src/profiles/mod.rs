//! The registered CLI profiles, selected by name. Adding a CLI is one new file here, its
//! `pub mod` line, and one entry in [`PROFILES`] (the registration).

use crate::profile::AgentProfile;

pub mod claude_code;
pub mod codex;
pub mod kimi;

/// Every known profile, in the order `intendant agents list` shows them.
pub const PROFILES: &[&AgentProfile] = &[&codex::PROFILE, &claude_code::PROFILE, &kimi::PROFILE];

/// The profile called `name`.
pub fn find(name: &str) -> Option<&'static AgentProfile> {
    PROFILES.iter().copied().find(|p| p.name == name)
}

/// The names of all profiles.
pub fn names() -> Vec<&'static str> {
    PROFILES.iter().map(|p| p.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let names = names();
        assert_eq!(names, ["codex", "claude-code", "kimi"]);
        for n in names {
            assert_eq!(find(n).map(|p| p.name), Some(n));
        }
        assert!(find("nope").is_none());
    }
}

//! Key lookup: the process environment first, then `.env` files (the launch directory and its
//! ancestors, nearest first, then `~/.config/intendant/.env`).
//!
//! Values are kept in memory and looked up by name; the process environment is never modified
//! here (setting variables in a running multi-threaded process is unsound; the credentials were
//! already moved out of it at start, see [`crate::secrets`]), and no value is ever logged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File name searched for.
pub const DOTENV_FILE: &str = ".env";

/// Environment variables plus `.env` values, the environment winning.
#[derive(Clone, Default)]
pub struct EnvLookup {
    process: BTreeMap<String, String>,
    files: BTreeMap<String, String>,
    /// Files that were read, nearest first.
    loaded: Vec<PathBuf>,
    /// The project files among them (not the global one): digest and what each sets.
    project: Vec<(crate::digest::FileDigest, Vec<(String, String)>)>,
}

/// Which endpoint settings [`EnvLookup::project_endpoints`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// Only those a run would use.
    InEffect,
    /// Every one a project file sets.
    All,
}

/// Endpoint variables: where a provider key is sent. From a project `.env` they count only once
/// the file is trusted (see `trust`).
pub const ENDPOINT_VARS: [&str; 3] = ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GEMINI_BASE_URL"];

impl std::fmt::Debug for EnvLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values include API keys.
        f.debug_struct("EnvLookup")
            .field("loaded", &self.loaded)
            .field("file_keys", &self.files.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl EnvLookup {
    /// Reads the process environment (with the credentials [`crate::secrets`] secluded) and
    /// the `.env` files for a launch in `cwd`, with the global file in `config_dir` (normally
    /// `~/.config/intendant`).
    pub fn load(cwd: &Path, config_dir: Option<&Path>) -> EnvLookup {
        let process = crate::secrets::vars().into_iter().collect();
        EnvLookup::load_with(process, cwd, config_dir)
    }

    /// [`EnvLookup::load`] with an explicit process environment.
    pub fn load_with(
        process: BTreeMap<String, String>,
        cwd: &Path,
        config_dir: Option<&Path>,
    ) -> EnvLookup {
        let mut lookup = EnvLookup {
            process,
            ..EnvLookup::default()
        };
        let global = config_dir.map(|d| d.join(DOTENV_FILE));
        let dirs = cwd
            .ancestors()
            .map(Path::to_path_buf)
            .chain(config_dir.map(Path::to_path_buf));
        for dir in dirs {
            let path = dir.join(DOTENV_FILE);
            // A FIFO or an endless file a command left here is skipped, never waited on.
            let Ok(bytes) =
                crate::regular_file::read(&path, crate::config::MAX_PROJECT_FILE_BYTES, true)
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            let parsed = parse_dotenv(&text);
            if global.as_ref() != Some(&path) {
                lookup
                    .project
                    .push((crate::digest::FileDigest::of(&path, &bytes), parsed.clone()));
            }
            for (key, value) in parsed {
                // Nearer files were read first and win.
                lookup.files.entry(key).or_insert(value);
            }
            lookup.loaded.push(path);
        }
        lookup
    }

    /// Each project `.env` file with the endpoint settings it sets ([`ENDPOINT_VARS`] with a
    /// value): with [`Endpoints::InEffect`] only those a run would use (not overridden by the
    /// environment or a nearer file), with [`Endpoints::All`] every one (what `trust` records).
    pub fn project_endpoints(
        &self,
        which: Endpoints,
    ) -> Vec<(crate::digest::FileDigest, Vec<String>)> {
        let mut claimed: Vec<&str> = match which {
            Endpoints::All => Vec::new(),
            Endpoints::InEffect => ENDPOINT_VARS
                .iter()
                .copied()
                .filter(|n| self.process.get(*n).is_some_and(|v| !v.trim().is_empty()))
                .collect(),
        };
        let mut out = Vec::new();
        for (file, vars) in &self.project {
            let mut settings = Vec::new();
            for name in ENDPOINT_VARS {
                let set = vars
                    .iter()
                    .rev()
                    .find(|(k, v)| k == name && !v.trim().is_empty());
                if let Some((_, value)) = set {
                    if !claimed.contains(&name) {
                        settings.push(format!("{name}={}", value.trim()));
                    }
                    if which == Endpoints::InEffect {
                        claimed.push(name);
                    }
                }
            }
            out.push((file.clone(), settings));
        }
        out
    }

    /// The `.env` files that were read, nearest first (the global one last).
    pub fn loaded(&self) -> &[PathBuf] {
        &self.loaded
    }

    /// The value of `name`: the environment, else the nearest `.env`; empty counts as unset.
    pub fn get(&self, name: &str) -> Option<&str> {
        let nonempty = |v: &String| !v.trim().is_empty();
        self.process
            .get(name)
            .filter(|v| nonempty(v))
            .or_else(|| self.files.get(name).filter(|v| nonempty(v)))
            .map(String::as_str)
    }
}

/// `~/.config/intendant` (or `$XDG_CONFIG_HOME/intendant`).
pub fn config_dir() -> Option<PathBuf> {
    let var = |n: &str| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CONFIG_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".config")))
        .map(|d| d.join("intendant"))
}

/// Parses `.env` text: `KEY=VALUE` lines, optional `export `, `#` comments, single or double
/// quotes (double quotes understand `\n`, `\"` and `\\`). Malformed lines are skipped.
pub fn parse_dotenv(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(intendant_protocol::dotenv::split_entry)
        .map(|(key, raw)| (key.to_owned(), parse_value(raw)))
        .collect()
}

fn parse_value(raw: &str) -> String {
    if let Some(rest) = raw.strip_prefix('\'') {
        return rest.split('\'').next().unwrap_or_default().to_owned();
    }
    if let Some(rest) = raw.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some(other) => out.push(other),
                    None => break,
                },
                other => out.push(other),
            }
        }
        return out;
    }
    // Unquoted: an inline comment starts at ` #`.
    raw.split(" #").next().unwrap_or_default().trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let parsed = parse_dotenv(
            "# c\nA=1\nexport B = two \nC='x # y'\nD=\"a\\nb\\\"\"\nE=v # note\nbad line\n1-X=no\n",
        );
        let map: BTreeMap<_, _> = parsed.into_iter().collect();
        assert_eq!(map["A"], "1");
        assert_eq!(map["B"], "two");
        assert_eq!(map["C"], "x # y");
        assert_eq!(map["D"], "a\nb\"");
        assert_eq!(map["E"], "v");
        assert_eq!(map.len(), 5);
    }

    #[test]
    fn environment_then_nearest_file_then_global() {
        let root = tempfile::tempdir().unwrap();
        let nested = root.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        let global = root.path().join("global");
        std::fs::create_dir_all(&global).unwrap();
        std::fs::write(root.path().join(".env"), "K1=outer\nK2=outer\n").unwrap();
        std::fs::write(root.path().join("a/.env"), "K1=inner\n").unwrap();
        std::fs::write(global.join(".env"), "K2=global\nK3=global\n").unwrap();
        let mut process = BTreeMap::new();
        process.insert("K3".to_owned(), "env".to_owned());
        process.insert("K4".to_owned(), String::new());
        let l = EnvLookup::load_with(process, &nested, Some(&global));
        assert_eq!(l.get("K1"), Some("inner"));
        assert_eq!(l.get("K2"), Some("outer"));
        assert_eq!(l.get("K3"), Some("env"));
        assert_eq!(l.get("K4"), None);
        assert!(!format!("{l:?}").contains("inner"));
    }
}

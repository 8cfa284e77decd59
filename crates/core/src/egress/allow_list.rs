//! [`ProjectAllowList`]: a host a human allowed for good (`allow_host`, a `network` approval's
//! answer) added to the project's `[sandbox.network] allow` in `intendant.toml`.
//!
//! `allow` relaxes the policy, so it counts only in a trusted file (`trust`). The human's answer
//! is a decision about exactly one host, so the file's trust is re-recorded for the edited
//! content only where the content before it already counted: the file was missing, relaxed
//! nothing, or a human trusted exactly those bytes. A file with settings no human trusted is
//! left untouched (the answer then keeps the host for the session only, and says why): adding
//! to it and trusting the result would make a planted setting count. The file is read without
//! following a link, edited in place (comments and order kept), checked to differ from the old
//! file in that one entry only, and replaced by a rename, so a command writing it meanwhile
//! loses its edit rather than having it trusted.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::policy::{EgressPolicy, normalize_host};
use crate::config::{CONFIG_FILE_NAME, ProjectConfig};
use crate::digest::{FileDigest, sha256_hex};
use crate::trust::TrustStore;

/// The largest `intendant.toml` edited (a bigger one is refused unread).
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Where a session's hosts allowed for good are written: its project and the state root whose
/// trust records count.
#[derive(Debug, Clone)]
pub struct ProjectAllowList {
    home: PathBuf,
    project_root: PathBuf,
}

/// What an `allow_host` answer changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowListChange {
    /// The host was added to the file, whose new content is trusted.
    Added {
        /// The file.
        file: PathBuf,
    },
    /// The file already listed the host (nothing written).
    AlreadyListed {
        /// The file.
        file: PathBuf,
    },
}

impl std::fmt::Display for AllowListChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowListChange::Added { file } => {
                write!(f, "added to [sandbox.network] allow in {}", file.display())
            }
            AllowListChange::AlreadyListed { file } => {
                write!(
                    f,
                    "already in [sandbox.network] allow in {}",
                    file.display()
                )
            }
        }
    }
}

impl ProjectAllowList {
    /// The allow list of the project at `project_root`, trusted in the state root `home`.
    pub fn new(home: &Path, project_root: &Path) -> ProjectAllowList {
        ProjectAllowList {
            home: home.to_path_buf(),
            project_root: project_root.to_path_buf(),
        }
    }

    /// Adds `host` (a name or address as the proxy compares it) to the project's
    /// `[sandbox.network] allow`, keeping the file trusted; an error says why nothing changed.
    pub fn allow(&self, host: &str) -> Result<AllowListChange, String> {
        let root = std::fs::canonicalize(&self.project_root).map_err(|e| {
            format!(
                "cannot resolve the project {}: {e}",
                self.project_root.display()
            )
        })?;
        let path = root.join(CONFIG_FILE_NAME);
        let unchanged = |why: String| format!("{} was not changed: {why}", path.display());
        let host = normalize_host(host).map_err(&unchanged)?;
        let old = read_regular(&path).map_err(&unchanged)?;
        let old_text = String::from_utf8(old.clone().unwrap_or_default())
            .map_err(|_| unchanged("it is not UTF-8".into()))?;
        let old_config = ProjectConfig::parse(&old_text).map_err(&unchanged)?;
        let store = TrustStore::new(&self.home);
        let settings = old_config.security_settings();
        let counted = old.is_none()
            || settings.is_empty()
            || store.is_trusted(&FileDigest {
                path: path.clone(),
                sha256: sha256_hex(old.as_deref().unwrap_or_default()),
            });
        if !counted {
            return Err(unchanged(format!(
                "it sets {} and no human trusted this content, so a trusted edit of it would make those count too; review it and run `intendant trust {}`, then allow the host again (or add \"{host}\" to [sandbox.network] allow and trust the file)",
                settings.join("; "),
                root.display()
            )));
        }
        if old_config.sandbox.network.egress.allow.contains(&host) {
            return Ok(AllowListChange::AlreadyListed { file: path });
        }
        let new_text = with_allowed(&old_text, &host).map_err(&unchanged)?;
        check_one_more(&old_config, &new_text, &host).map_err(&unchanged)?;
        replace(&root, &path, new_text.as_bytes()).map_err(&unchanged)?;
        store
            .trust(&FileDigest {
                path: path.clone(),
                sha256: sha256_hex(new_text.as_bytes()),
            })
            .map_err(|e| {
                format!(
                    "{} lists \"{host}\" now, but its trust could not be recorded ({e}): run `intendant trust {}`",
                    path.display(),
                    root.display()
                )
            })?;
        Ok(AllowListChange::Added { file: path })
    }
}

/// The bytes of the regular file at `path`, `None` when there is none; a link, a directory or
/// a file over [`MAX_CONFIG_BYTES`] is an error ([`crate::regular_file::read`]).
fn read_regular(path: &Path) -> Result<Option<Vec<u8>>, String> {
    use std::io::ErrorKind;
    match crate::regular_file::read(path, MAX_CONFIG_BYTES, false) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == ErrorKind::FileTooLarge => {
            Err(format!("it is over {MAX_CONFIG_BYTES} bytes"))
        }
        Err(e) if e.kind() == ErrorKind::InvalidInput => Err(e.to_string()),
        Err(e) => Err(format!("cannot read it: {e}")),
    }
}

/// `text` with `host` appended to `[sandbox.network] allow`, made where missing (a mode given as
/// `network = "proxy"` becomes the table's `mode`).
fn with_allowed(text: &str, host: &str) -> Result<String, String> {
    use toml_edit::{Array, DocumentMut, Item, Table, Value};
    let mut doc: DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    let sandbox = doc
        .entry("sandbox")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or("[sandbox] is not a table")?;
    let network = sandbox
        .entry("network")
        .or_insert(Item::Table(Table::new()));
    if let Some(mode) = network.as_str().map(str::to_owned) {
        let mut table = Table::new();
        table.insert("mode", toml_edit::value(mode));
        *network = Item::Table(table);
    }
    let network = network
        .as_table_like_mut()
        .ok_or("[sandbox] network is neither a mode nor a table")?;
    let allow = network
        .entry("allow")
        .or_insert(Item::Value(Value::Array(Array::new())))
        .as_array_mut()
        .ok_or("[sandbox.network] allow is not a list")?;
    allow.push(host);
    Ok(doc.to_string())
}

/// Refuses `new_text` unless it is valid configuration whose only change from `old` is one
/// more `allow` entry, `host`.
fn check_one_more(old: &ProjectConfig, new_text: &str, host: &str) -> Result<(), String> {
    let new =
        ProjectConfig::parse(new_text).map_err(|e| format!("the edit would not parse: {e}"))?;
    EgressPolicy::new(&new.sandbox.network.egress)
        .map_err(|e| format!("the edit would not be a valid policy: {e}"))?;
    let mut expected = old.clone();
    expected.sandbox.network.egress.allow.push(host.to_owned());
    if new != expected {
        return Err("the edit would change more than the allow list (please report it)".into());
    }
    Ok(())
}

/// Writes `bytes` to a new file in `dir` and renames it over `path` (a link there is replaced,
/// never followed).
fn replace(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| format!("no randomness: {e}"))?;
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let temp = dir.join(format!(".{CONFIG_FILE_NAME}.{suffix}"));
    let write = || -> std::io::Result<()> {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write it: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::review_project;

    struct Project {
        home: tempfile::TempDir,
        root: tempfile::TempDir,
    }

    impl Project {
        fn new(config: Option<&str>) -> Project {
            let p = Project {
                home: tempfile::tempdir().unwrap(),
                root: tempfile::tempdir().unwrap(),
            };
            if let Some(text) = config {
                std::fs::write(p.file(), text).unwrap();
            }
            p
        }
        fn file(&self) -> PathBuf {
            self.root.path().join(CONFIG_FILE_NAME)
        }
        fn list(&self) -> ProjectAllowList {
            ProjectAllowList::new(self.home.path(), self.root.path())
        }
        fn text(&self) -> String {
            std::fs::read_to_string(self.file()).unwrap()
        }
        fn trust(&self) {
            let (_, digest) = ProjectConfig::load_digest(self.root.path()).unwrap();
            TrustStore::new(self.home.path())
                .trust(&digest.unwrap())
                .unwrap();
        }
        /// The configuration as the next session gets it, and whether every setting counts.
        fn next_session(&self) -> (ProjectConfig, bool) {
            let env = crate::dotenv::EnvLookup::default();
            let review = review_project(
                &TrustStore::new(self.home.path()),
                self.root.path(),
                &env,
                crate::dotenv::Endpoints::InEffect,
            )
            .unwrap();
            (review.config, review.untrusted.is_empty())
        }
    }

    #[test]
    fn a_trusted_file_gets_the_host_keeps_its_comments_and_stays_trusted() {
        let p = Project::new(Some(
            "# the team's settings\n[sandbox.network]\n# our registry\nallow = [\"pkg.internal\"] # keep\n\n[approval]\ncommand_exec = \"auto\"\n",
        ));
        p.trust();
        let change = p.list().allow("Api.Example.COM.").unwrap();
        assert!(
            matches!(change, AllowListChange::Added { .. }),
            "{change:?}"
        );
        let text = p.text();
        for kept in [
            "# the team's settings",
            "# our registry",
            "# keep",
            "command_exec",
        ] {
            assert!(text.contains(kept), "{text}");
        }
        let (config, trusted) = p.next_session();
        assert!(trusted, "the human's answer keeps the file trusted: {text}");
        assert_eq!(
            config.sandbox.network.egress.allow,
            ["pkg.internal", "api.example.com"]
        );
        // Twice is once.
        assert!(matches!(
            p.list().allow("api.example.com").unwrap(),
            AllowListChange::AlreadyListed { .. }
        ));
        assert_eq!(p.text(), text);
    }

    #[test]
    fn a_missing_file_or_one_that_relaxes_nothing_is_made_to_list_the_host_trusted() {
        let p = Project::new(None);
        p.list().allow("a.example").unwrap();
        let (config, trusted) = p.next_session();
        assert!(trusted);
        assert_eq!(config.sandbox.network.egress.allow, ["a.example"]);

        // A mode written as a string becomes the table's mode; tightening settings stay.
        let p = Project::new(Some(
            "[sandbox]\nnetwork = \"proxy\"\nrequire_full = true\n[approval]\nnetwork = \"ask\"\n",
        ));
        p.list().allow("b.example").unwrap();
        let (config, trusted) = p.next_session();
        assert!(trusted, "{}", p.text());
        assert_eq!(
            config.sandbox.network.mode,
            Some(intendant_protocol::network::NetworkMode::Proxy)
        );
        assert!(config.sandbox.require_full);
        assert_eq!(config.sandbox.network.egress.allow, ["b.example"]);
        assert_eq!(
            config.approval.get("network").map(String::as_str),
            Some("ask")
        );
    }

    #[test]
    fn a_file_with_untrusted_settings_is_left_as_it_is_and_stays_untrusted() {
        // A command planted these: the human's answer about one host must not make them count.
        let planted = "[sandbox]\nenabled = false\n[approval]\ncommand_exec = \"auto\"\n";
        let p = Project::new(Some(planted));
        let e = p.list().allow("a.example").unwrap_err();
        assert!(
            e.contains("was not changed")
                && e.contains("enabled = false")
                && e.contains("intendant trust"),
            "{e}"
        );
        assert_eq!(p.text(), planted);
        assert!(!p.next_session().1);
        assert!(
            !p.home.path().join(crate::trust::TRUST_DIR).exists(),
            "no trust record was written"
        );

        // Trusted once, then edited by a command: untrusted again, so refused too.
        let p = Project::new(Some("[sandbox.network]\nallow = [\"x.example\"]\n"));
        p.trust();
        std::fs::write(
            p.file(),
            "[sandbox.network]\nallow = [\"x.example\", \"*.evil.example\"]\n",
        )
        .unwrap();
        assert!(p.list().allow("a.example").is_err());
        assert!(!p.next_session().1);
    }

    #[test]
    fn a_link_garbage_or_a_bad_host_changes_nothing() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("elsewhere.toml");
        std::fs::write(&target, "").unwrap();
        let p = Project::new(None);
        std::os::unix::fs::symlink(&target, p.file()).unwrap();
        let e = p.list().allow("a.example").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");

        for bad in [
            "[sandbox\n",
            "[sandbox.network]\nallow = \"x\"\n",
            "[sandbox]\nnetwork = 3\n",
        ] {
            let p = Project::new(Some(bad));
            assert!(p.list().allow("a.example").is_err(), "{bad:?}");
            assert_eq!(p.text(), bad);
        }
        let p = Project::new(None);
        std::fs::write(p.file(), [0xffu8, 0xfe]).unwrap();
        assert!(p.list().allow("a.example").unwrap_err().contains("UTF-8"));
        assert_eq!(std::fs::read(p.file()).unwrap(), [0xffu8, 0xfe]);

        let p = Project::new(Some("[sandbox]\nrequire_full = true\n"));
        for bad in ["a b", "x\"]\n[sandbox]\nenabled = false\n#", ""] {
            let e = p.list().allow(bad).unwrap_err();
            assert!(e.contains("was not changed"), "{e}");
        }
        assert_eq!(p.text(), "[sandbox]\nrequire_full = true\n");
        let leftovers: Vec<_> = std::fs::read_dir(p.root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }
}

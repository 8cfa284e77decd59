//! Trust records: security-relevant project settings count only once a human trusted the exact
//! content of the file that sets them.
//!
//! A session's commands can write the project (it is a write root), so `intendant.toml` and the
//! project's `.env` files are what the *next* session would otherwise obey: a planted
//! `[sandbox] enabled = false`, an `[approval]` rule set to `auto`, an `[agent.*]` executable or
//! a `*_BASE_URL` sending the user's key elsewhere. Each such setting is listed by
//! [`ProjectConfig::security_settings`] and [`EnvLookup::project_endpoints`]; a file that sets
//! any is honoured only when `$INTENDANT_HOME/trust/` (outside every write root) holds a record
//! of its canonical path with the sha256 of its current bytes. Any edit makes it untrusted again.
//! Records are written 0600 in a 0700 directory, by a temporary file renamed into place.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, ProjectConfig};
use crate::digest::{FileDigest, sha256_hex};
use crate::dotenv::{Endpoints, EnvLookup};

/// Directory under `$INTENDANT_HOME` holding the records.
pub const TRUST_DIR: &str = "trust";

/// A project file whose security-relevant settings are not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The file.
    pub file: FileDigest,
    /// Each setting, as the file spells it (`[sandbox] enabled = false`).
    pub settings: Vec<String>,
}

/// One record on disk.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    path: PathBuf,
    sha256: String,
}

/// The trust records of one state root.
#[derive(Debug, Clone)]
pub struct TrustStore {
    dir: PathBuf,
}

impl TrustStore {
    /// The store of the state root `intendant_home`.
    pub fn new(intendant_home: &Path) -> TrustStore {
        TrustStore {
            dir: intendant_home.join(TRUST_DIR),
        }
    }

    fn record_path(&self, path: &Path) -> PathBuf {
        let key = sha256_hex(path.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{key}.json"))
    }

    /// Whether a human trusted exactly this content at this path.
    pub fn is_trusted(&self, file: &FileDigest) -> bool {
        std::fs::read(self.record_path(&file.path))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok())
            .is_some_and(|r| r.path == file.path && r.sha256 == file.sha256)
    }

    /// Records that a human trusts this content (replacing any record of the same path).
    pub fn trust(&self, file: &FileDigest) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let record = serde_json::to_vec(&Record {
            path: file.path.clone(),
            sha256: file.sha256.clone(),
        })
        .map_err(std::io::Error::other)?;
        let target = self.record_path(&file.path);
        let temp = target.with_extension(format!("tmp{}", std::process::id()));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        out.write_all(&record)?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&temp, &target)
    }

    /// The files among `candidates` that set security-relevant settings without a record.
    pub fn review(&self, candidates: Vec<(FileDigest, Vec<String>)>) -> Vec<Untrusted> {
        candidates
            .into_iter()
            .filter(|(file, settings)| !settings.is_empty() && !self.is_trusted(file))
            .map(|(file, settings)| Untrusted { file, settings })
            .collect()
    }
}

/// The project's configuration and the files whose security settings need a human's trust.
#[derive(Debug, Clone)]
pub struct ProjectTrust {
    /// `intendant.toml` (default when missing).
    pub config: ProjectConfig,
    /// Every project file with security settings and no matching record.
    pub untrusted: Vec<Untrusted>,
    /// Every project file with security settings, trusted or not.
    pub relevant: Vec<(FileDigest, Vec<String>)>,
}

/// Loads `intendant.toml` from `project_root` and reviews it and the endpoint settings of the
/// project `.env` files of `env` (`which` of them) against `store`.
pub fn review_project(
    store: &TrustStore,
    project_root: &Path,
    env: &EnvLookup,
    which: Endpoints,
) -> Result<ProjectTrust, ConfigError> {
    let (config, digest) = ProjectConfig::load_digest(project_root)?;
    let mut relevant = Vec::new();
    if let Some(digest) = digest {
        relevant.push((digest, config.security_settings()));
    }
    relevant.extend(env.project_endpoints(which));
    relevant.retain(|(_, settings)| !settings.is_empty());
    let untrusted = store.review(relevant.clone());
    Ok(ProjectTrust {
        config,
        untrusted,
        relevant,
    })
}

/// Loads the project's configuration and reviews its trust in the state root `home`. Each
/// untrusted file is put to `ask` (a human at a terminal; `true` trusts it and records that);
/// without `ask` (headless), or when `ask` says no, an untrusted file is the [`refusal`].
pub fn checked_project(
    home: &Path,
    project_root: &Path,
    env: &EnvLookup,
    ask: Option<&mut dyn FnMut(&Untrusted) -> bool>,
) -> Result<ProjectTrust, String> {
    let store = TrustStore::new(home);
    let review = review_project(&store, project_root, env, Endpoints::InEffect)
        .map_err(|e| e.to_string())?;
    if review.untrusted.is_empty() {
        return Ok(review);
    }
    let Some(ask) = ask else {
        return Err(refusal(&review.untrusted, project_root));
    };
    for untrusted in &review.untrusted {
        if !ask(untrusted) {
            return Err(refusal(&review.untrusted, project_root));
        }
        store
            .trust(&untrusted.file)
            .map_err(|e| format!("cannot record trust: {e}"))?;
    }
    Ok(review)
}

/// The headless refusal: which files set what, and how to trust them.
pub fn refusal(untrusted: &[Untrusted], project_root: &Path) -> String {
    let files: Vec<String> = untrusted
        .iter()
        .map(|u| format!("{} sets {}", u.file.path.display(), u.settings.join("; ")))
        .collect();
    format!(
        "untrusted security-relevant project settings: {}. They count only once a human trusts \
         this exact content: review the file(s), then run `intendant trust {}` (or remove the \
         settings)",
        files.join(" and "),
        project_root.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_record_trusts_exactly_one_content_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let file = home.path().join("intendant.toml");
        std::fs::write(&file, "[sandbox]\nenabled = false\n").unwrap();
        let first = FileDigest::of(&file, b"[sandbox]\nenabled = false\n");
        let settings = vec!["[sandbox] enabled = false".to_owned()];
        assert_eq!(
            store.review(vec![(first.clone(), settings.clone())]).len(),
            1
        );
        store.trust(&first).unwrap();
        assert!(store.is_trusted(&first));
        assert!(
            store
                .review(vec![(first.clone(), settings.clone())])
                .is_empty()
        );
        let edited = FileDigest::of(&file, b"[sandbox]\nenabled = false\n# more\n");
        assert!(!store.is_trusted(&edited));
        // Nothing security-relevant: nothing to review.
        assert!(store.review(vec![(edited, Vec::new())]).is_empty());
        let records: Vec<_> = std::fs::read_dir(home.path().join(TRUST_DIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(records.len(), 1);
        let mode = std::fs::metadata(&records[0]).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(home.path().join(TRUST_DIR))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
    }

    /// Trust a human gave one project's settings is not borrowed by a link a session's commands
    /// made to them: from another project the link is not read at all, and within their own
    /// project (to a nested project's trusted file) it is named by where it is, which no human
    /// trusted.
    #[test]
    fn a_link_to_a_trusted_file_borrows_no_trust() {
        use crate::config::{CONFIG_FILE_NAME, ProjectConfig};
        let home = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let trusted = tempfile::tempdir().unwrap();
        let nested = trusted.path().join("tools");
        std::fs::create_dir(&nested).unwrap();
        for (dir, name) in [(trusted.path(), "top"), (nested.as_path(), "tools")] {
            let text = format!("# {name}\n[sandbox]\nenabled = false\n");
            std::fs::write(dir.join(CONFIG_FILE_NAME), text).unwrap();
            let (_, digest) = ProjectConfig::load_digest(dir).unwrap();
            store.trust(&digest.unwrap()).unwrap();
        }
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            trusted.path().join(CONFIG_FILE_NAME),
            other.path().join(CONFIG_FILE_NAME),
        )
        .unwrap();
        let refused = ProjectConfig::load_digest(other.path()).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        // The trusted project's own file replaced by a link to its nested project's.
        let own = trusted.path().join(CONFIG_FILE_NAME);
        std::fs::remove_file(&own).unwrap();
        std::os::unix::fs::symlink("tools/intendant.toml", &own).unwrap();
        let refused = ProjectConfig::load_digest(trusted.path()).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        // Were it read, it would be named by its place, which no human trusted with this text.
        let linked = FileDigest::of(&own, &std::fs::read(&own).unwrap());
        let place = trusted
            .path()
            .canonicalize()
            .unwrap()
            .join(CONFIG_FILE_NAME);
        assert_eq!(linked.path, place);
        assert!(!store.is_trusted(&linked));
    }
}

//! What sandboxed commands must not read: the [`ReadMask`]s the controller hands the runtime.
//!
//! Hidden by default (only existing paths; the runtime puts an empty read-only directory or
//! file in each one's place): the state root, the user's Intendant configuration directory, the
//! credentials under the home directory ([`HOME_SECRETS`]), and other users' homes this user can
//! read. The `.env` files the controller reads keys from are shown with their credential entries
//! removed. `[sandbox] deny_read` adds to the set; `[sandbox] allow_read` (a trusted setting)
//! takes default entries out or shows a path beneath one again, but never the state root: it
//! holds the control plane (socket, web token, other sessions), not a preference.
//!
//! The design decision to know: a write root is never hidden. One that lies beneath a hidden
//! path (the session's artifacts directory, a sub-agent's worktree, both in the state root)
//! stays visible there, so the controller only says so when that is a surprise (the project).

use std::path::{Path, PathBuf};

pub use intendant_protocol::runtime::ReadMask;

/// Credentials beneath the home directory: SSH and GPG keys, cloud and cluster logins, git and
/// registry credentials, the logins of the coding CLIs.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
];

/// The same credentials where `$XDG_CONFIG_HOME` moves them.
const XDG_CONFIG_SECRETS: &[&str] = &["gcloud", "gh"];

/// Where the controller runs: the places the default set is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadScope {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$USER` (else `$LOGNAME`): the user's own entry of `homes_dir` is not hidden.
    pub user: Option<String>,
    /// `$XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
    /// The user's Intendant configuration directory (`~/.config/intendant`).
    pub config_dir: Option<PathBuf>,
    /// The state root (`$INTENDANT_HOME`).
    pub state_root: PathBuf,
    /// The directory of users' homes (`/home`).
    pub homes_dir: PathBuf,
    /// Root's home (`/root`), hidden from everyone but root.
    pub root_home: PathBuf,
    /// Whether this process runs as root.
    pub is_root: bool,
    /// `$PATH`: a home that holds a directory of it (Homebrew's `/home/linuxbrew`) is a
    /// place tools are installed, not someone's secrets.
    pub path_dirs: Vec<PathBuf>,
}

impl ReadScope {
    /// The scope of this process, for the state root `state_root` and the configuration
    /// directory `config_dir`.
    pub fn from_env(state_root: &Path, config_dir: Option<&Path>) -> ReadScope {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        ReadScope {
            home: var("HOME").map(PathBuf::from),
            user: var("USER")
                .or_else(|| var("LOGNAME"))
                .and_then(|v| v.into_string().ok()),
            xdg_config_home: var("XDG_CONFIG_HOME").map(PathBuf::from),
            config_dir: config_dir.map(Path::to_path_buf),
            state_root: state_root.to_path_buf(),
            homes_dir: PathBuf::from("/home"),
            root_home: PathBuf::from("/root"),
            is_root: rustix::process::geteuid().is_root(),
            path_dirs: var("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default(),
        }
    }
}

/// What one session adds to the scope.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    /// The project root.
    pub project_root: &'a Path,
    /// The sandbox write set.
    pub write_paths: &'a [PathBuf],
    /// The `.env` files on the key search path ([`crate::dotenv::EnvLookup::loaded`]).
    pub env_files: &'a [PathBuf],
    /// `[sandbox] deny_read`, as written.
    pub deny_read: &'a [PathBuf],
    /// `[sandbox] allow_read`, as written (already trusted).
    pub allow_read: &'a [PathBuf],
}

/// A configured path: `~` and `~/...` are the home directory's, a relative one the project's.
pub fn config_path(project_root: &Path, home: Option<&Path>, path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        (Ok(_), None) | (Err(_), _) => absolutize(project_root, path),
    }
}

/// The canonical path when it exists (the runtime compares it with canonical write roots),
/// else as given: a path that appears later is still hidden from the next batch on.
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The read masks of one session, and notes for what the user should know about them.
pub fn read_masks(scope: &ReadScope, request: &ReadRequest<'_>) -> (Vec<ReadMask>, Vec<String>) {
    let mut notes = Vec::new();
    let home = scope.home.as_deref();
    let config = |p: &PathBuf| resolved(&config_path(request.project_root, home, p));
    let state_root = resolved(&scope.state_root);
    let write_roots: Vec<PathBuf> = request.write_paths.iter().map(|p| resolved(p)).collect();
    let project = resolved(request.project_root);
    let allowed: Vec<PathBuf> = request.allow_read.iter().map(config).collect();

    let mut defaults: Vec<PathBuf> = Vec::new();
    if let Some(home) = home {
        defaults.extend(HOME_SECRETS.iter().map(|s| home.join(s)));
    }
    if let Some(xdg) = &scope.xdg_config_home {
        defaults.extend(XDG_CONFIG_SECRETS.iter().map(|s| xdg.join(s)));
    }
    defaults.extend(scope.config_dir.clone());
    defaults.extend(other_homes(scope));
    let defaults = defaults.iter().map(|p| resolved(p));
    let mut hidden: Vec<PathBuf> = defaults
        .filter(|p| !allowed.iter().any(|a| p.starts_with(a)))
        .collect();
    hidden.extend(request.deny_read.iter().map(config));
    hidden.push(state_root.clone());

    let mut masks: Vec<ReadMask> = Vec::new();
    for path in hidden {
        let listed = masks.iter().any(|m| m.path() == path);
        if listed || !encodable(&path, &mut notes) {
            continue;
        }
        if write_roots.contains(&path) {
            notes.push(format!(
                "{} is a sandbox write root, so commands can read it although it is on the \
                 hidden list",
                path.display()
            ));
            continue;
        }
        if project.starts_with(&path) && path != state_root {
            notes.push(format!(
                "the project lies inside {}, which is hidden from commands: only the project \
                 stays visible there",
                path.display()
            ));
        }
        masks.push(ReadMask::Hide(path));
    }
    for path in allowed {
        let beneath_hidden = masks
            .iter()
            .any(|m| matches!(m, ReadMask::Hide(h) if path.starts_with(h) && path != *h));
        if path.starts_with(&state_root) {
            notes.push(format!(
                "[sandbox] allow_read cannot show {}: the state root stays hidden",
                path.display()
            ));
        } else if beneath_hidden && encodable(&path, &mut notes) {
            masks.push(ReadMask::Reveal(path));
        }
    }
    let home_env = home.map(|h| h.join(crate::dotenv::DOTENV_FILE));
    let mut scrubbed: Vec<PathBuf> = Vec::new();
    for file in request.env_files.iter().chain(home_env.iter()) {
        let file = resolved(file);
        let hidden_whole = scope
            .config_dir
            .as_deref()
            .is_some_and(|d| file.starts_with(resolved(d)));
        if !hidden_whole && !scrubbed.contains(&file) && encodable(&file, &mut notes) {
            scrubbed.push(file);
        }
    }
    masks.extend(scrubbed.into_iter().map(ReadMask::ScrubEnv));
    (masks, notes)
}

/// What a session's commands cannot read as the controller can, named by real paths: the
/// places hidden from them by default (less those that hold the project, which stays visible
/// there as a write root) and the `.env` files they see scrubbed of their keys. A file the
/// controller reads from a project for the model (an instruction file, a skill) through a link
/// must not be one of these: `AGENTS.md -> .env` put the keys before the model.
#[derive(Debug, Default)]
pub struct Unreadable {
    /// Where the masks come from: the project root and the user's configuration directory.
    from: (PathBuf, Option<PathBuf>),
    /// The masks, worked out at the first [`Unreadable::covers`] (most sessions' instruction
    /// files are no links, and a start then reads no `.env` nor `/home` for them).
    masks: std::sync::OnceLock<Vec<ReadMask>>,
    project: PathBuf,
}

impl Unreadable {
    /// For a session in `project_root` under this process's environment (its state root, `$HOME`,
    /// the `.env` files on the key search path from the project, the user's configuration
    /// directory `config_dir`), with the default hiding and the project's own `[sandbox]
    /// deny_read`: no write root, and nothing shown again (`allow_read` is not read).
    pub fn for_project(project_root: &Path, config_dir: Option<&Path>) -> Unreadable {
        Unreadable {
            from: (
                project_root.to_path_buf(),
                config_dir.map(Path::to_path_buf),
            ),
            masks: std::sync::OnceLock::new(),
            project: resolved(project_root),
        }
    }

    /// The masks of [`Unreadable::for_project`]'s session.
    fn masks(&self) -> &[ReadMask] {
        self.masks.get_or_init(|| {
            let (project_root, config_dir) = (&self.from.0, self.from.1.as_deref());
            let state_root = crate::session_log::intendant_home().unwrap_or_default();
            let scope = ReadScope::from_env(&state_root, config_dir);
            let env_files = crate::dotenv::EnvLookup::load_with(
                std::collections::BTreeMap::new(),
                project_root,
                config_dir,
            )
            .loaded()
            .to_vec();
            // What the project's own file hides too (it only tightens, so it counts untrusted).
            let deny_read = crate::config::ProjectConfig::load(project_root)
                .map(|config| config.sandbox.deny_read)
                .unwrap_or_default();
            let request = ReadRequest {
                project_root,
                write_paths: &[],
                env_files: &env_files,
                deny_read: &deny_read,
                allow_read: &[],
            };
            read_masks(&scope, &request).0
        })
    }

    /// [`Unreadable`] of these masks, for a test.
    #[cfg(test)]
    fn of_masks(masks: Vec<ReadMask>, project: PathBuf) -> Unreadable {
        Unreadable {
            from: (project.clone(), None),
            masks: std::sync::OnceLock::from(masks),
            project,
        }
    }

    /// Whether the file at the real path `real` is one the session's commands cannot read, or
    /// a `.env` anywhere: one on the key search path of a launch from a directory below the
    /// project is scrubbed for its commands, and no instruction is a `.env`.
    pub fn covers(&self, real: &Path) -> bool {
        let revealed = |place: &Path| {
            self.masks().iter().any(|mask| {
                matches!(mask, ReadMask::Reveal(shown) if shown.starts_with(place) && real.starts_with(shown))
            })
        };
        self.masks().iter().any(|mask| match mask {
            // A hidden place around the project hides none of the project's own files.
            ReadMask::Hide(place) => {
                real.starts_with(place)
                    && !revealed(place)
                    && !(self.project.starts_with(place) && real.starts_with(&self.project))
            }
            ReadMask::ScrubEnv(file) => real == file,
            ReadMask::Reveal(_) => false,
        }) || real.file_name() == Some(std::ffi::OsStr::new(crate::dotenv::DOTENV_FILE))
    }
}

/// Whether `path` fits a path list; a note says so when it does not.
fn encodable(path: &Path, notes: &mut Vec<String>) -> bool {
    let ok = std::env::join_paths([path]).is_ok();
    if !ok {
        notes.push(format!(
            "{} cannot be hidden from commands (its name holds the path-list separator)",
            path.display()
        ));
    }
    ok
}

/// Entries of `/home` other than the user's own that this user can read, and `/root` for
/// anyone but root; a home holding a `$PATH` directory stays (tools live there).
fn other_homes(scope: &ReadScope) -> Vec<PathBuf> {
    let own: Vec<PathBuf> = scope
        .home
        .iter()
        .map(|h| resolved(h))
        .chain(scope.user.iter().map(|u| scope.homes_dir.join(u)))
        .collect();
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&scope.homes_dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    if !scope.is_root {
        candidates.push(scope.root_home.clone());
    }
    candidates
        .into_iter()
        .filter(|p| {
            let real = resolved(p);
            real.is_dir()
                && !own
                    .iter()
                    .any(|o| *o == real || *o == *p || o.starts_with(&real))
                && !scope.path_dirs.iter().any(|d| d.starts_with(p))
                && rustix::fs::access(p, rustix::fs::Access::READ_OK | rustix::fs::Access::EXEC_OK)
                    .is_ok()
        })
        .collect()
}

/// Absolute form of `path` relative to `base` (config paths may be relative to the project).
pub fn absolutize(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

#[cfg(test)]
mod tests;

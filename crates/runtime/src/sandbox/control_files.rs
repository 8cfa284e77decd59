//! Which paths inside the write roots stay read-only: the places a command could plant
//! configuration or code that the user (or the next session) later trusts outside the sandbox.
//!
//! Per write root: `intendant.toml`, `.env` and every `.env.*`; the configuration other programs
//! run from a project ([`PROGRAM_CONFIG`]: `.vscode/`, `.idea/`, `.claude/`, `.mcp.json`,
//! `.codex/`, `.cursor/`); and everything git reads as configuration or as a pointer to another
//! repository: `.git/config`, `.git/hooks`, `.git/info`, `.git/commondir`, each linked
//! worktree's `.git/worktrees/*/gitdir`, `commondir` and `config.worktree`, and for a root whose
//! `.git` is a gitfile, that file itself and, through it, its git directory's pointers and its
//! common directory's `config`, `hooks` and `info`. When that root is a linked worktree (a
//! sub-agent's) and the repository's common directory lies inside a write root, the whole common
//! directory is read-only but for the write roots beneath it, which are opened again
//! ([`Guard::Reopen`]): the controller grants a child the objects, its own git directory and its
//! own branch's directory, so it can commit to its branch and move no other ref. In the
//! toolchain homes (`$CARGO_HOME` or `~/.cargo`, `$RUSTUP_HOME` or `~/.rustup`): cargo's `bin/`,
//! its `env` scripts and its `config`/`config.toml`, rustup's `settings.toml` and every
//! installed toolchain directory (not only `bin/`: `lib/` holds the compiler's shared libraries,
//! code just the same).
//!
//! Only paths that exist are protected (a bind mount needs something to mount on); the
//! exceptions are `.git/hooks` and `.git/info` in a repository that has none, which are created
//! empty first (git itself creates both on `init`, and they are invisible to `git status`). A
//! pointer that does not exist (`.git/commondir` of an ordinary repository) is the controller's
//! to watch: it records the pointers at the session's start and puts them back after every
//! batch. Every directory between the write root and a protected path is pinned (bound onto
//! itself, still writable), because the kernel refuses to rename or remove a mount point but
//! happily renames its parent: without the pin, `mv .git .git.old` followed by a fresh `.git`
//! would replace the protected hooks.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::FileType;
use std::path::{Component, Path, PathBuf};

/// What the mount layer does to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Bound onto itself, writable: it can no longer be renamed or removed.
    Pin(PathBuf),
    /// Bound onto itself read-only: no write, rename over, removal or metadata change.
    ReadOnly(PathBuf),
    /// A write root beneath a read-only guard, bound onto itself writable again.
    Reopen(PathBuf),
}

/// Where the toolchain homes are, as the runtime's environment says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolchainHomes {
    /// `$CARGO_HOME`, else `$HOME/.cargo`.
    pub cargo_home: Option<PathBuf>,
    /// `$RUSTUP_HOME`, else `$HOME/.rustup`.
    pub rustup_home: Option<PathBuf>,
}

impl ToolchainHomes {
    /// Reads `CARGO_HOME`, `RUSTUP_HOME` and `HOME` from the process environment.
    pub fn from_env() -> ToolchainHomes {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home_child = |sub: &str| var("HOME").map(|h| h.join(sub));
        ToolchainHomes {
            cargo_home: var("CARGO_HOME").or_else(|| home_child(".cargo")),
            rustup_home: var("RUSTUP_HOME").or_else(|| home_child(".rustup")),
        }
    }
}

/// Files in `$CARGO_HOME` a login shell sources or a later `cargo` obeys.
const CARGO_HOME_ENTRIES: &[&str] = &["bin", "env", "env.fish", "env.nu", "config", "config.toml"];

/// Entries of a project root that other programs read as their configuration and may run
/// code from (tasks, hooks, MCP servers): an editor's, an IDE's, the agent CLIs'.
const PROGRAM_CONFIG: &[&str] = &[
    ".vscode",
    ".idea",
    ".claude",
    ".mcp.json",
    ".codex",
    ".cursor",
];

/// Files of a git directory that point git elsewhere or configure one worktree.
const GIT_DIR_POINTERS: &[&str] = &["commondir", "gitdir", "config.worktree"];

/// The write root the private `/dev` replaces: nothing of the real one is visible inside, so
/// there is nothing there to guard.
const PRIVATE_DEV: &str = "/dev";

/// A path to protect if it exists.
///
/// The walk runs once per runtime process, before the first command, and its system calls were
/// a tenth of a one-command runtime's CPU, so it asks the kernel as little as it can: each
/// directory is listed once, a name the listing lacks is not looked up, the type the listing
/// gives is not asked again, and the child of a canonical directory, not itself a link, is
/// known canonical without resolving every component again.
#[derive(Debug)]
struct Candidate {
    path: PathBuf,
    /// The type the directory listing gave; `None`: look it up (and it may not exist).
    kind: Option<FileType>,
    /// Whether `path` is a name in a directory known to be canonical.
    in_canonical_dir: bool,
}

/// One directory's entries: name and type of each.
type Listing = Vec<(OsString, FileType)>;

/// Directory listings, each read at most once.
#[derive(Debug, Default)]
struct Listings {
    dirs: HashMap<PathBuf, Option<Listing>>,
}

impl Listings {
    /// The entries of `dir`, or `None` when it cannot be listed (then each name must be
    /// looked up on its own, as it may still exist).
    fn of(&mut self, dir: &Path) -> Option<&[(OsString, FileType)]> {
        self.dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| {
                let read = std::fs::read_dir(dir).ok()?;
                Some(
                    read.filter_map(Result::ok)
                        .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
                        .collect(),
                )
            })
            .as_deref()
    }

    /// The entry `name` of the canonical directory `dir`, as a candidate: with its type when
    /// listed, none when the listing lacks it, to be looked up when there is no listing.
    fn child(&mut self, dir: &Path, name: &str) -> Option<Candidate> {
        let kind = match self.of(dir) {
            Some(entries) => Some(entries.iter().find(|(n, _)| n == name).map(|(_, k)| *k)?),
            None => None,
        };
        Some(Candidate {
            path: dir.join(name),
            kind,
            in_canonical_dir: true,
        })
    }
}

/// The guards for `roots` (canonical write roots), in mount order: a pin before anything
/// beneath it. Paths outside every root are left out: the read-only tree covers them already.
pub fn guards(roots: &[PathBuf], homes: &ToolchainHomes) -> Vec<Guard> {
    let mut listings = Listings::default();
    let mut protected: Vec<Candidate> = Vec::new();
    for root in roots.iter().filter(|r| r.as_os_str() != PRIVATE_DEV) {
        project_candidates(roots, root, &mut listings, &mut protected);
    }
    if let Some(cargo) = homes.cargo_home.as_deref().and_then(canonical) {
        // Only children that are not links count, and those lie beneath a root only when the
        // home does.
        if roots.iter().any(|r| cargo.starts_with(r)) {
            for entry in CARGO_HOME_ENTRIES {
                protected.extend(listings.child(&cargo, entry));
            }
        }
    }
    if let Some(rustup) = homes.rustup_home.as_deref().and_then(canonical) {
        protected.extend(listings.child(&rustup, "settings.toml"));
        let toolchains = rustup.join("toolchains");
        // A real directory keeps its entries' paths canonical; a link is resolved per entry.
        let real_dir = listings
            .child(&rustup, "toolchains")
            .and_then(|c| c.kind)
            .is_some_and(|k| k.is_dir());
        let entries: Listing = listings.of(&toolchains).unwrap_or_default().to_vec();
        protected.extend(entries.into_iter().map(|(name, kind)| Candidate {
            path: toolchains.join(name),
            kind: Some(kind),
            in_canonical_dir: real_dir,
        }));
    }
    plan(roots, protected)
}

/// The control files of a project-like root.
fn project_candidates(
    roots: &[PathBuf],
    root: &Path,
    listings: &mut Listings,
    out: &mut Vec<Candidate>,
) {
    if let Some(kind) = root_files(root, listings, out) {
        git_candidates(roots, root, kind, listings, out);
    }
}

/// The control files directly in `root`; returns what its `.git` is, when it has one.
fn root_files(root: &Path, listings: &mut Listings, out: &mut Vec<Candidate>) -> Option<FileType> {
    let mut dot_git = None;
    match listings.of(root) {
        Some(entries) => {
            for (name, kind) in entries {
                let text = name.to_str();
                if text.is_some_and(|n| {
                    n == "intendant.toml"
                        || n == ".env"
                        || n.starts_with(".env.")
                        || PROGRAM_CONFIG.contains(&n)
                }) {
                    out.push(Candidate {
                        path: root.join(name),
                        kind: Some(*kind),
                        in_canonical_dir: true,
                    });
                } else if text == Some(".git") {
                    dot_git = Some(*kind);
                }
            }
        }
        // Unlistable: the fixed names may still exist.
        None => {
            for name in ["intendant.toml", ".env"] {
                out.push(Candidate {
                    path: root.join(name),
                    kind: None,
                    in_canonical_dir: true,
                });
            }
            dot_git = std::fs::symlink_metadata(root.join(".git"))
                .ok()
                .map(|m| m.file_type());
        }
    }
    dot_git
}

/// The control files of the repository `root`'s `.git` (of type `kind`) leads to: its hooks,
/// config and info, the pointers of its git dir and of every linked worktree.
fn git_candidates(
    roots: &[PathBuf],
    root: &Path,
    kind: FileType,
    listings: &mut Listings,
    out: &mut Vec<Candidate>,
) {
    let dot_git = root.join(".git");
    let (git_dir, common_dir, in_canonical_dir, linked) = if kind.is_dir() {
        // A real directory in a canonical root: canonical itself, and strictly beneath a root.
        (dot_git.clone(), dot_git, true, false)
    } else if kind.is_file() {
        out.push(Candidate {
            path: dot_git.clone(),
            kind: Some(kind),
            in_canonical_dir: true,
        });
        let Some(git_dir) = gitdir_of(&dot_git) else {
            return;
        };
        let commondir = std::fs::read_to_string(git_dir.join("commondir")).ok();
        let linked = commondir.is_some();
        let common = commondir
            .map(|c| git_dir.join(c.trim()))
            .unwrap_or_else(|| git_dir.clone());
        (git_dir, common, false, linked)
    } else {
        return;
    };
    let inside = in_canonical_dir
        || canonical(&common_dir).is_some_and(|c| innermost_root(roots, &c).is_some());
    if inside {
        for dir in ["hooks", "info"] {
            let path = common_dir.join(dir);
            if std::fs::symlink_metadata(&path).is_err() {
                // Best effort: if it cannot be made, the docs' limit for a missing path applies.
                let _ = std::fs::create_dir(&path);
            }
        }
    }
    let candidate = |path: PathBuf| Candidate {
        path,
        kind: None,
        in_canonical_dir,
    };
    if linked && inside {
        // A linked worktree's repository inside a write root: all of it read-only but for
        // the write roots beneath it (plan reopens those).
        out.push(candidate(common_dir.clone()));
    }
    for name in ["hooks", "config", "info"] {
        out.push(candidate(common_dir.join(name)));
    }
    if git_dir != common_dir {
        out.push(candidate(git_dir.join("info")));
    }
    for name in GIT_DIR_POINTERS {
        out.push(candidate(git_dir.join(name)));
    }
    // Every linked worktree's entry: where it says its checkout and its repository are.
    let worktrees = common_dir.join("worktrees");
    let entries: Listing = listings.of(&worktrees).unwrap_or_default().to_vec();
    for (name, _) in entries.into_iter().filter(|(_, k)| k.is_dir()) {
        for pointer in GIT_DIR_POINTERS {
            out.push(candidate(worktrees.join(&name).join(pointer)));
        }
    }
}

/// The directory a `.git` file (`gitdir: PATH`) points at.
fn gitdir_of(dot_git_file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git_file).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let base = dot_git_file.parent()?;
    Some(base.join(target))
}

fn canonical(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

/// Whether the last component of `p` is a plain name (not `.`, `..` or a root).
fn ends_in_name(p: &Path) -> bool {
    matches!(p.components().next_back(), Some(Component::Normal(n)) if n != OsStr::new(""))
}

/// Turns protected candidates into guards: existing, not symlinks (a bind would protect the
/// target, not the name), canonical, beneath a root; pins for the directories in between.
fn plan(roots: &[PathBuf], candidates: Vec<Candidate>) -> Vec<Guard> {
    let mut read_only: Vec<PathBuf> = Vec::new();
    for candidate in candidates {
        let kind = match candidate.kind {
            Some(kind) => kind,
            None => match std::fs::symlink_metadata(&candidate.path) {
                Ok(meta) => meta.file_type(),
                Err(_) => continue,
            },
        };
        if kind.is_symlink() {
            continue;
        }
        // A name that is not a link, in a canonical directory, is its own canonical path.
        let path = if candidate.in_canonical_dir && ends_in_name(&candidate.path) {
            candidate.path
        } else {
            let Some(path) = canonical(&candidate.path) else {
                continue;
            };
            path
        };
        // A path listed as a write root itself was granted on purpose (the controller's, or a
        // trusted `extra_write_paths`): it stays writable.
        if innermost_root(roots, &path).is_some()
            && !read_only.contains(&path)
            && !roots.contains(&path)
        {
            read_only.push(path);
        }
    }
    // Write roots beneath a read-only path are opened again: the controller listed them.
    let reopened: Vec<PathBuf> = roots
        .iter()
        .filter(|r| read_only.iter().any(|q| *r != q && r.starts_with(q)))
        .cloned()
        .collect();
    // A protected path beneath another protected one is covered by it, unless a reopened root
    // lies between them.
    let covered = |p: &Path| {
        read_only.iter().any(|q| {
            q != p
                && p.starts_with(q)
                && !reopened
                    .iter()
                    .any(|r| p.starts_with(r) && r.starts_with(q) && r != q)
        })
    };
    let read_only: Vec<PathBuf> = read_only.iter().filter(|p| !covered(p)).cloned().collect();
    // A root holding a protected path is a mount point, which cannot be renamed; but a
    // directory between it and a root around it could be (a project under `/tmp`), taking the
    // project along, so the command could put a copy with a `.git/config` of its own where the
    // project was. Those directories are pinned too, out to the outermost root.
    let mut holding: Vec<&Path> = read_only
        .iter()
        .filter_map(|p| innermost_root(roots, p))
        .collect();
    let mut next = 0;
    while let Some(&root) = holding.get(next) {
        if let Some(outer) = innermost_root(roots, root)
            && !holding.contains(&outer)
        {
            holding.push(outer);
        }
        next += 1;
    }
    let pins = pins(roots, read_only.iter().map(PathBuf::as_path).chain(holding));
    let mut out: Vec<Guard> = pins.into_iter().map(Guard::Pin).collect();
    out.extend(read_only.into_iter().map(Guard::ReadOnly));
    out.extend(reopened.into_iter().map(Guard::Reopen));
    // Mount order: shallower paths first, so a pin is in place before what lies beneath it,
    // and a reopened root after the read-only path above it.
    out.sort_by_key(|g| match g {
        Guard::Pin(p) | Guard::ReadOnly(p) | Guard::Reopen(p) => p.components().count(),
    });
    out
}

/// The directories strictly between each of `paths` and the innermost of `roots` it lies
/// beneath, each once, shallowest first: bound onto themselves, they keep a mount on the path
/// where it was put (the kernel refuses to rename a mount point, not its parent).
pub fn pins<'a>(roots: &[PathBuf], paths: impl IntoIterator<Item = &'a Path>) -> Vec<PathBuf> {
    let mut pins: Vec<PathBuf> = Vec::new();
    for path in paths {
        let Some(root) = innermost_root(roots, path) else {
            continue;
        };
        for dir in path.ancestors().skip(1) {
            if dir == root || !dir.starts_with(root) {
                break;
            }
            if !pins.iter().any(|p| p == dir) {
                pins.push(dir.to_path_buf());
            }
        }
    }
    pins.sort_by_key(|p| p.components().count());
    pins
}

/// The deepest root `path` lies strictly beneath.
fn innermost_root<'a>(roots: &'a [PathBuf], path: &Path) -> Option<&'a Path> {
    roots
        .iter()
        .filter(|r| path != r.as_path() && path.starts_with(r))
        .max_by_key(|r| r.components().count())
        .map(PathBuf::as_path)
}

#[cfg(test)]
#[path = "control_files/tests.rs"]
mod tests;

//! Agent Skills: procedures a project (or its user) wrote down as a folder holding `SKILL.md`
//! (front matter with `name` and `description`, then instructions) and any files beside it.
//!
//! The one design decision to know: a skill is read once, when the session starts, and kept in
//! memory. `invoke_skill` answers from that copy, never from the disk at call time, so a command
//! the model ran cannot swap a skill for a link to a file outside the project and have the
//! controller (which runs unsandboxed) read it back. Skills are text: they grant no permission,
//! and the files they name are read or run through the ordinary, approved tools.
//!
//! Discovery order: the project's `.intendant/skills/`, then its `.agents/skills/`, then the
//! user's `skills/` in the config directory. A project skill shadows a user skill of the same
//! name; two of one level with the same name are a clash (the first found wins, with a warning).
//! Nothing here fails a session: bad input becomes a warning and the skill is left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod front_matter;

pub use front_matter::{FrontMatter, FrontMatterError, parse_front_matter};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Skill folders under the project root, in the order they are read.
pub const PROJECT_SKILL_DIRS: [&str; 2] = [".intendant/skills", ".agents/skills"];
/// Skill folders under the user's config directory.
pub const USER_SKILL_DIR: &str = "skills";
/// Largest `SKILL.md` read; a bigger one is left out (only this much plus one byte is read).
pub const MAX_SKILL_FILE_BYTES: u64 = 128 * 1024;
/// Bytes of the catalog the model sees (names and descriptions); the skills that do not fit
/// are counted in one closing line and stay invocable by name.
pub const CATALOG_BUDGET_BYTES: usize = 8 * 1024;
/// Bytes kept for the catalog's closing line (skills not listed).
const CLOSING_LINE_ROOM: usize = 100;
/// Skills read from one folder; more are left out with a warning.
const MAX_SKILLS_PER_DIR: usize = 100;
/// Files listed for one skill, and how deep its folder is walked.
const MAX_LISTED_FILES: usize = 200;
const MAX_LIST_DEPTH: usize = 4;
/// Entries looked at while listing one skill's files, so a huge tree costs a bounded walk.
const MAX_WALKED_ENTRIES: usize = 5_000;

/// The skill an `invoke_skill` call names, as the model asked (an unknown name is given too, so
/// a listing shows what it tried); `None` for any other call, a blank or an over-long name.
pub fn invoked_skill<'a>(tool: &str, arguments: &'a serde_json::Value) -> Option<&'a str> {
    if tool != intendant_protocol::tools::ToolName::InvokeSkill.name() {
        return None;
    }
    arguments
        .get("name")
        .and_then(serde_json::Value::as_str)
        .filter(|skill| !skill.trim().is_empty() && skill.len() <= 200)
}

/// Where a skill was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillSource {
    /// The project's `.intendant/skills/` or `.agents/skills/`.
    Project,
    /// The user's config directory (`~/.config/intendant/skills/`).
    User,
}

impl SkillSource {
    /// How the source is named to the user and the model.
    pub fn label(self) -> &'static str {
        match self {
            SkillSource::Project => "project",
            SkillSource::User => "user",
        }
    }
}

/// One discovered skill, as read at the session's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (front matter `name`).
    pub name: String,
    /// What it is for and when to use it (front matter `description`).
    pub description: String,
    /// Where it was found.
    pub source: SkillSource,
    /// Its folder.
    pub dir: PathBuf,
    /// The instructions: `SKILL.md` after the front matter, trimmed.
    pub instructions: String,
    /// The other files in its folder, relative to it, sorted; links are listed, not followed.
    pub files: Vec<String>,
}

impl Skill {
    /// What `invoke_skill` returns: where the skill lives, its instructions and its files.
    pub fn invocation_text(&self) -> String {
        let mut out = format!(
            "Skill {} ({} skill, folder {})\n\n{}",
            self.name,
            self.source.label(),
            self.dir.display(),
            self.instructions
        );
        if self.files.is_empty() {
            out.push_str("\n\nThe skill has no other files.");
        } else {
            out.push_str(
                "\n\nFiles in the skill folder (paths relative to it; read or run them with the \
                 ordinary tools):",
            );
            for file in &self.files {
                out.push_str("\n- ");
                out.push_str(file);
            }
        }
        out
    }
}

/// The skills a session offers, with the warnings their discovery raised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    skills: Vec<Skill>,
    shadowed: Vec<Skill>,
    warnings: Vec<String>,
}

impl SkillSet {
    /// Discovers the skills of `project_root` and of the user's `config_dir`.
    pub fn discover(project_root: &Path, config_dir: Option<&Path>) -> SkillSet {
        let mut set = SkillSet::default();
        let mut found: Vec<Skill> = Vec::new();
        let root = project_root
            .canonicalize()
            .unwrap_or_else(|_| project_root.to_path_buf());
        let unreadable = crate::runtime_env::Unreadable::for_project(&root, config_dir);
        let inside = Inside {
            root: &root,
            unreadable: &unreadable,
        };
        for dir in PROJECT_SKILL_DIRS {
            // Named from the canonical root, so each file read beneath it is named inside it.
            let dir = root.join(dir);
            found.extend(read_dir_skills(
                &dir,
                SkillSource::Project,
                Some(inside),
                &mut set.warnings,
            ));
        }
        if let Some(config_dir) = config_dir {
            found.extend(read_dir_skills(
                &config_dir.join(USER_SKILL_DIR),
                SkillSource::User,
                None,
                &mut set.warnings,
            ));
        }
        for skill in found {
            match set.skills.iter().find(|s| s.name == skill.name) {
                Some(first) if first.source == skill.source => {
                    set.warnings.push(format!(
                        "skill name clash: {} in {} and in {}; the first is used",
                        skill.name,
                        first.dir.display(),
                        skill.dir.display()
                    ));
                }
                Some(_) => set.shadowed.push(skill),
                None => set.skills.push(skill),
            }
        }
        set.skills.sort_by(|a, b| a.name.cmp(&b.name));
        set
    }

    /// The skills offered, by name.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// User skills a project skill of the same name shadows.
    pub fn shadowed(&self) -> &[Skill] {
        &self.shadowed
    }

    /// What discovery left out and why, in the order it arose.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Whether no skill was found.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The catalog for the model's context (names and descriptions within
    /// [`CATALOG_BUDGET_BYTES`]); `None` without skills.
    pub fn catalog(&self) -> Option<String> {
        self.catalog_within(CATALOG_BUDGET_BYTES)
    }

    fn catalog_within(&self, budget: usize) -> Option<String> {
        if self.skills.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Skills: procedures written down for this project. When the task matches one, call \
             invoke_skill with its name to read its instructions and the list of its files \
             before you start. Skills are instructions, not permissions: what they ask you to \
             run goes through the ordinary tools and approvals.",
        );
        // Room for the closing line, so the whole catalog stays within the budget.
        let lines_budget = budget.saturating_sub(CLOSING_LINE_ROOM);
        let mut listed = 0;
        for skill in &self.skills {
            let line = format!("\n- {}: {}", skill.name, skill.description);
            if out.len() + line.len() > lines_budget {
                break;
            }
            out.push_str(&line);
            listed += 1;
        }
        let left = self.skills.len() - listed;
        if left > 0 {
            out.push_str(&format!(
                "\n({left} more skills are not listed here for space; invoke_skill knows them \
                 by name)"
            ));
        }
        Some(out)
    }

    /// What `invoke_skill` answers for `name`: the skill's text, or an error naming the skills
    /// there are.
    pub fn invoke(&self, name: &str) -> Result<String, String> {
        match self.get(name.trim()) {
            Some(skill) => Ok(skill.invocation_text()),
            None if self.skills.is_empty() => Err(format!(
                "invoke_skill: no skill {name:?}; this session has no skills"
            )),
            None => {
                let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
                Err(format!(
                    "invoke_skill: no skill {name:?}; the skills are: {}",
                    names.join(", ")
                ))
            }
        }
    }
}

/// The project a project's skills must be read inside: its canonical root, and what its
/// commands cannot read there (a link to it is not followed).
#[derive(Clone, Copy)]
struct Inside<'a> {
    root: &'a Path,
    unreadable: &'a crate::runtime_env::Unreadable,
}

/// Whether `path` resolves inside `root` (both canonical), with the resolved path.
fn resolves_inside(path: &Path, root: &Path) -> Result<PathBuf, PathBuf> {
    match path.canonicalize() {
        Ok(real) if real.starts_with(root) => Ok(real),
        Ok(real) => Err(real),
        Err(_) => Err(path.to_path_buf()),
    }
}

/// The skills in the folders of `dir`; `inside`: the canonical root every path must resolve
/// into (a project's), `None` for the user's own folder.
fn read_dir_skills(
    dir: &Path,
    source: SkillSource,
    inside: Option<Inside<'_>>,
    warnings: &mut Vec<String>,
) -> Vec<Skill> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Vec::new();
    }
    if let Some(Inside { root, .. }) = inside
        && let Err(real) = resolves_inside(dir, root)
    {
        warnings.push(format!(
            "skills folder {} leads outside the project (to {}); its skills are not loaded",
            dir.display(),
            real.display()
        ));
        return Vec::new();
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            warnings.push(format!("skills folder {}: {e}", dir.display()));
            return Vec::new();
        }
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    if folders.len() > MAX_SKILLS_PER_DIR {
        warnings.push(format!(
            "skills folder {} holds {} skills; only the first {MAX_SKILLS_PER_DIR} are read",
            dir.display(),
            folders.len()
        ));
        folders.truncate(MAX_SKILLS_PER_DIR);
    }
    let mut skills = Vec::new();
    for folder in folders {
        match read_skill(&folder, source, inside) {
            Ok(Some(skill)) => skills.push(skill),
            Ok(None) => {}
            Err(message) => warnings.push(format!(
                "skill {} left out: {message}",
                folder.join(SKILL_FILE).display()
            )),
        }
    }
    skills
}

/// The skill in `folder`; `None` when it holds no `SKILL.md`.
fn read_skill(
    folder: &Path,
    source: SkillSource,
    inside: Option<Inside<'_>>,
) -> Result<Option<Skill>, String> {
    let file = folder.join(SKILL_FILE);
    if std::fs::symlink_metadata(&file).is_err() {
        return Ok(None);
    }
    if let Some(Inside { root, .. }) = inside
        && let Err(real) = resolves_inside(&file, root)
    {
        return Err(format!(
            "it leads outside the project (to {})",
            real.display()
        ));
    }
    let text = read_bounded(&file, inside)?;
    let (front, body) = parse_front_matter(&text).map_err(|e| e.to_string())?;
    Ok(Some(Skill {
        name: front.name,
        description: front.description,
        source,
        dir: folder.to_path_buf(),
        instructions: body.trim().to_owned(),
        files: list_files(folder),
    }))
}

/// The file's text, refused when larger than [`MAX_SKILL_FILE_BYTES`], not a regular file or
/// not UTF-8; never waited on, never read past that bound ([`crate::regular_file`]); beneath
/// `inside` (a project's root) when given, so a link swapped in after [`resolves_inside`]
/// looked is not followed out of it.
fn read_bounded(file: &Path, inside: Option<Inside<'_>>) -> Result<String, String> {
    let read = match inside {
        // A name not beneath the root is opened as given, which `read_beneath` refuses.
        Some(Inside { root, unreadable }) => crate::regular_file::read_beneath(
            root,
            file.strip_prefix(root).unwrap_or(file),
            MAX_SKILL_FILE_BYTES,
            crate::regular_file::Reach::Linked(&|real| unreadable.covers(real)),
        ),
        None => crate::regular_file::read(file, MAX_SKILL_FILE_BYTES, true),
    };
    let bytes = read.map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            format!(
                "it is larger than {} KiB (keep SKILL.md short and put details in files beside it)",
                MAX_SKILL_FILE_BYTES / 1024
            )
        } else {
            format!("cannot read it: {e}")
        }
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// The files under `folder` but `SKILL.md`, relative and sorted, without following links.
fn list_files(folder: &Path) -> Vec<String> {
    let mut files = BTreeMap::new();
    let mut pending = vec![(folder.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > MAX_WALKED_ENTRIES {
                break;
            }
            let path = entry.path();
            let Ok(relative) = path.strip_prefix(folder) else {
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = relative.display().to_string();
            if kind.is_dir() {
                if depth + 1 < MAX_LIST_DEPTH {
                    pending.push((path, depth + 1));
                }
            } else if kind.is_symlink() {
                files.insert(name.clone(), format!("{name} (link)"));
            } else if name != SKILL_FILE {
                files.insert(name.clone(), name);
            }
        }
    }
    let mut listed: Vec<String> = files.into_values().collect();
    if listed.len() > MAX_LISTED_FILES {
        let more = listed.len() - MAX_LISTED_FILES;
        listed.truncate(MAX_LISTED_FILES);
        listed.push(format!("… {more} more files"));
    }
    listed
}

#[cfg(test)]
mod tests;

//! The system prompt cascade and the context injected at the start of every conversation.
//!
//! System prompt: `<project root>/SysPrompt.md`, else `~/.config/intendant/SysPrompt.md`, else
//! the built-in default. Context: the working directory, then `INTENDANT.md` (global, then
//! project) and the project's `AGENTS.md`, then the skill catalog ([`crate::skills`]). Appended to the system prompt through the same
//! cascade: the orchestration prompt (`Orchestrate.md`, for `--orchestrate`) and a sub-agent's
//! role prompt (`roles/<role>.md`: `research`, `implementation`, `review` are built in).

use crate::config::MAX_PROJECT_FILE_BYTES;
use crate::runtime_env::Unreadable;
use std::path::{Path, PathBuf};

/// File name of a custom system prompt.
pub const SYSTEM_PROMPT_FILE: &str = "SysPrompt.md";
/// File name of Intendant project instructions.
pub const INSTRUCTIONS_FILE: &str = "INTENDANT.md";
/// File name of the cross-tool agent instructions.
pub const AGENTS_FILE: &str = "AGENTS.md";
/// Bytes of each instruction file injected.
const MAX_INSTRUCTION_BYTES: usize = 64 * 1024;

/// The built-in system prompt (native tools: tool docs live in the tool definitions).
pub const DEFAULT_SYSTEM_PROMPT: &str = "\
You are Intendant, an autonomous software engineer working in the user's project on their \
machine. You act only through the tools provided; every command runs in a sandboxed executor.

How to work:
- Investigate before changing things: inspect files and run commands to learn the project.
- Make focused changes with edit_file; run the project's build and tests with exec_command to \
  verify them.
- Independent tool calls may be issued together in one response; they run in order.
- Every tool result ends with a budget line; keep the work proportionate to what is left.
- When context runs long, use manage_context to drop or summarize old turns.
- On long work, keep the state you must not lose (the plan, what is done) in a \
  workflow_checkpoint document: compaction drops old messages and gives back only its name.
- Ask the human (ask_human) only when you truly cannot proceed on a reasonable, stated assumption.
- When the task is complete and verified, call signal_done with a short summary of what changed.";

/// File name of the orchestration prompt.
pub const ORCHESTRATE_FILE: &str = "Orchestrate.md";
/// Directory (under the project root or the config directory) of role prompts, `<role>.md`.
pub const ROLES_DIR: &str = "roles";

/// The built-in orchestration prompt: how to split a task among sub-agents.
pub const DEFAULT_ORCHESTRATE_PROMPT: &str = "\
Orchestrate: this task may be worth splitting. When it has parts that can proceed independently, \
start a sub-agent for each with spawn_sub_agent (a self-contained task, a role, isolation \
`worktree` so each works on its own branch), keep working on what only you can do, then \
wait_sub_agents for their reports. Merge the branches of those that committed work (git merge \
in your directory), check the combined result with the project's tests, and only then call \
signal_done. Keep the orchestration's state in workflow_checkpoint documents (the plan, what each \
sub-agent was given and what it returned) and update them as it changes: when the context is \
compacted or the session resumed, only their names are given back, and your sub-agents can read \
them (parent: true). Do not split small tasks: a sub-agent costs a session of its own.";

/// Said to every sub-agent before its role prompt.
pub const SUB_AGENT_PREAMBLE: &str = "\
You are a sub-agent: another session started you on one part of its task and waits for your \
report. Work only on that part. If you work in a git worktree (your working directory), commit \
your changes there, on the branch it has checked out (no other branch can move), before reporting. When your part is done, call submit_result with a summary \
and structured fields (files changed, branch, findings); that ends your session.";

/// Built-in role prompts.
const BUILT_IN_ROLES: [(&str, &str); 3] = [
    (
        "research",
        "Role: research. Read and run what you need to answer the question; change nothing \
         unless told to. Report findings with the evidence (paths, lines, command output).",
    ),
    (
        "implementation",
        "Role: implementation. Make the change, keep it focused, and verify it with the \
         project's build and tests before reporting.",
    ),
    (
        "review",
        "Role: review. Read the change critically: correctness, tests, edge cases, style. \
         Report concrete problems with their locations; do not rewrite the change yourself.",
    ),
];

/// Where an instruction file is read from.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// The project, which a session's commands write: `name` is read beneath it, a link
    /// followed only while it stays in it, to a file the commands could read themselves
    /// ([`crate::regular_file::read_beneath`], [`Unreadable`]), so a link a command made to a
    /// file it cannot read (the state root, the user's keys, a `.env`) does not put that file
    /// in front of the model.
    Project(&'a Path, &'a Unreadable),
    /// The user's own configuration directory, whose links are the user's.
    Global(&'a Path),
}

/// An instruction file's text: a regular file of at most [`MAX_PROJECT_FILE_BYTES`] in UTF-8
/// (a FIFO or an endless file a command left in the project is skipped, never waited on), with
/// the path it is named by.
fn read_instructions(place: Place<'_>, name: &Path) -> (Option<String>, PathBuf) {
    let (bytes, path) = match place {
        Place::Project(root, unreadable) => (
            crate::regular_file::read_beneath(
                root,
                name,
                MAX_PROJECT_FILE_BYTES,
                crate::regular_file::Reach::Linked(&|real| unreadable.covers(real)),
            ),
            root.join(name),
        ),
        Place::Global(dir) => {
            let path = dir.join(name);
            (
                crate::regular_file::read(&path, MAX_PROJECT_FILE_BYTES, true),
                path,
            )
        }
    };
    (bytes.ok().and_then(|b| String::from_utf8(b).ok()), path)
}

/// The text of the instruction file `name` in `place` when it has any.
fn nonempty(place: Place<'_>, name: &Path) -> Option<String> {
    read_instructions(place, name)
        .0
        .filter(|t| !t.trim().is_empty())
}

/// A prompt file found through the cascade: the project's, else the global one, else `None`.
fn cascade_file(project_root: &Path, config_dir: Option<&Path>, name: &Path) -> Option<String> {
    let unreadable = Unreadable::for_project(project_root, config_dir);
    nonempty(Place::Project(project_root, &unreadable), name)
        .or_else(|| config_dir.and_then(|dir| nonempty(Place::Global(dir), name)))
}

/// Whether a task does not look simple, the daemon's automatic choice of the orchestration
/// prompt: it lists two or more items (lines starting `-`, `*`, `+` or `N.` / `N)`), or runs
/// to at least 60 words over three or more sentences. Small tasks stay with one session.
pub fn wants_orchestration(task: &str) -> bool {
    let items = task
        .lines()
        .map(str::trim_start)
        .filter(|line| {
            let bullet = ["- ", "* ", "+ "].iter().any(|b| line.starts_with(b));
            let digits = line.chars().take_while(char::is_ascii_digit).count();
            let numbered = digits > 0
                && matches!(line[digits..].chars().next(), Some('.' | ')'))
                && line[digits + 1..].starts_with(' ');
            bullet || numbered
        })
        .count();
    if items >= 2 {
        return true;
    }
    let words = task.split_whitespace().count();
    let sentences = task
        .split_whitespace()
        .filter(|w| w.ends_with(['.', '?', '!', ';']))
        .count()
        + usize::from(!task.trim_end().ends_with(['.', '?', '!', ';']) && words > 0);
    words >= 60 && sentences >= 3
}

/// The orchestration prompt through the cascade (`Orchestrate.md`, else built in).
pub fn orchestrate_prompt(project_root: &Path, config_dir: Option<&Path>) -> String {
    cascade_file(project_root, config_dir, Path::new(ORCHESTRATE_FILE))
        .unwrap_or_else(|| DEFAULT_ORCHESTRATE_PROMPT.to_owned())
}

/// What a sub-agent of `role` is told: the preamble, then the role's prompt through the cascade
/// (`roles/<role>.md`, else the built-in one, else a line naming the role). A role name that is
/// not a plain word is not looked up as a file.
pub fn sub_agent_prompt(
    role: Option<&str>,
    project_root: &Path,
    config_dir: Option<&Path>,
) -> String {
    let mut out = SUB_AGENT_PREAMBLE.to_owned();
    let Some(role) = role.map(str::trim).filter(|r| !r.is_empty()) else {
        return out;
    };
    let plain = role
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let file = plain
        .then(|| {
            cascade_file(
                project_root,
                config_dir,
                &Path::new(ROLES_DIR).join(format!("{role}.md")),
            )
        })
        .flatten();
    let text = file.unwrap_or_else(|| {
        BUILT_IN_ROLES
            .iter()
            .find(|(name, _)| *name == role)
            .map(|(_, text)| (*text).to_owned())
            .unwrap_or_else(|| format!("Role: {role}."))
    });
    out.push_str("\n\n");
    out.push_str(&text);
    out
}

/// Where the system prompt came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    /// `<project root>/SysPrompt.md`.
    Project,
    /// `~/.config/intendant/SysPrompt.md`.
    Global,
    /// Compiled in.
    BuiltIn,
}

/// Resolves the system prompt through the cascade.
pub fn system_prompt(project_root: &Path, config_dir: Option<&Path>) -> (String, PromptSource) {
    let name = Path::new(SYSTEM_PROMPT_FILE);
    let unreadable = Unreadable::for_project(project_root, config_dir);
    if let Some(text) = nonempty(Place::Project(project_root, &unreadable), name) {
        return (text, PromptSource::Project);
    }
    if let Some(text) = config_dir.and_then(|dir| nonempty(Place::Global(dir), name)) {
        return (text, PromptSource::Global);
    }
    (DEFAULT_SYSTEM_PROMPT.to_owned(), PromptSource::BuiltIn)
}

/// The first context message: working directory, project instructions, then the skill
/// catalog ([`crate::skills::SkillSet::catalog`]) when the session has skills.
pub fn context_message(
    cwd: &Path,
    project_root: &Path,
    config_dir: Option<&Path>,
    skill_catalog: Option<&str>,
) -> String {
    let mut out = format!(
        "Working directory: {}\nProject root: {}\nRelative paths in tool calls resolve against the project root.",
        cwd.display(),
        project_root.display()
    );
    let unreadable = Unreadable::for_project(project_root, config_dir);
    let mut section = |title: String, place: Place<'_>, name: &str| {
        if let (Some(text), path) = read_instructions(place, Path::new(name))
            && !text.trim().is_empty()
        {
            out.push_str(&format!(
                "\n\n# {title} ({})\n{}",
                path.display(),
                intendant_protocol::text::clip(text.trim(), MAX_INSTRUCTION_BYTES)
            ));
        }
    };
    if let Some(dir) = config_dir {
        section(
            format!("{INSTRUCTIONS_FILE}, global instructions"),
            Place::Global(dir),
            INSTRUCTIONS_FILE,
        );
    }
    section(
        format!("{INSTRUCTIONS_FILE}, project instructions"),
        Place::Project(project_root, &unreadable),
        INSTRUCTIONS_FILE,
    );
    section(
        format!("{AGENTS_FILE}, project instructions"),
        Place::Project(project_root, &unreadable),
        AGENTS_FILE,
    );
    if let Some(catalog) = skill_catalog {
        out.push_str("\n\n# Skills\n");
        out.push_str(catalog);
    }
    out
}

/// Project root: the work tree of the git repository holding `cwd` (resolved without running
/// git, [`crate::git::GitRepo::discover`]), else `cwd`.
pub fn detect_project_root(cwd: &Path) -> PathBuf {
    match crate::git::GitRepo::discover(cwd) {
        Ok(Some(repo)) => repo.work_tree().to_path_buf(),
        Ok(None) | Err(_) => cwd.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cascade_prefers_project_then_global() {
        let project = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        assert_eq!(
            system_prompt(project.path(), Some(global.path())).1,
            PromptSource::BuiltIn
        );
        std::fs::write(global.path().join(SYSTEM_PROMPT_FILE), "g").unwrap();
        assert_eq!(
            system_prompt(project.path(), Some(global.path())),
            ("g".into(), PromptSource::Global)
        );
        std::fs::write(project.path().join(SYSTEM_PROMPT_FILE), "p").unwrap();
        assert_eq!(
            system_prompt(project.path(), Some(global.path())),
            ("p".into(), PromptSource::Project)
        );
    }

    #[test]
    fn only_tasks_that_do_not_look_simple_get_the_orchestration_prompt() {
        assert!(!wants_orchestration("fix the typo in README.md"));
        assert!(!wants_orchestration(""));
        assert!(!wants_orchestration("- one item only"));
        assert!(wants_orchestration(
            "Do both:\n- add a --json flag\n- document it"
        ));
        assert!(wants_orchestration(
            "1. port the parser\n2) port the printer"
        ));
        assert!(!wants_orchestration("12.5 is the answer\n3.14 too"));
        let long = "Rewrite the storage layer so it uses the new pager. ".repeat(5)
            + "Then migrate every caller and keep the old tests passing. Report what changed.";
        assert!(wants_orchestration(&long));
        let one_long_sentence = "word ".repeat(80);
        assert!(!wants_orchestration(&one_long_sentence));
    }

    #[test]
    fn the_prompts_tell_the_model_to_keep_its_state_in_workflow_checkpoints() {
        // Compaction and a resume give back only the names: the model must know to write them,
        // and an orchestrator that its sub-agents can read them.
        assert!(DEFAULT_SYSTEM_PROMPT.contains("workflow_checkpoint document"));
        for said in [
            "workflow_checkpoint documents",
            "compacted or the session resumed, only their names are given back",
            "parent: true",
        ] {
            assert!(DEFAULT_ORCHESTRATE_PROMPT.contains(said), "{said}");
        }
    }

    #[test]
    fn role_and_orchestration_prompts_use_the_same_cascade() {
        let project = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        let (p, g) = (project.path(), Some(global.path()));
        let review = sub_agent_prompt(Some("review"), p, g);
        assert!(review.starts_with(SUB_AGENT_PREAMBLE) && review.contains("Role: review"));
        assert_eq!(sub_agent_prompt(None, p, g), SUB_AGENT_PREAMBLE);
        assert!(sub_agent_prompt(Some("triage"), p, g).ends_with("Role: triage."));
        std::fs::create_dir(global.path().join(ROLES_DIR)).unwrap();
        std::fs::write(global.path().join("roles/review.md"), "global review").unwrap();
        assert!(sub_agent_prompt(Some("review"), p, g).ends_with("global review"));
        std::fs::create_dir(project.path().join(ROLES_DIR)).unwrap();
        std::fs::write(project.path().join("roles/review.md"), "project review").unwrap();
        assert!(sub_agent_prompt(Some("review"), p, g).ends_with("project review"));
        // Not a plain word: never a path.
        assert!(sub_agent_prompt(Some("../review"), p, g).ends_with("Role: ../review."));
        assert_eq!(orchestrate_prompt(p, g), DEFAULT_ORCHESTRATE_PROMPT);
        std::fs::write(project.path().join(ORCHESTRATE_FILE), "split it").unwrap();
        assert_eq!(orchestrate_prompt(p, g), "split it");
    }

    #[test]
    fn context_orders_global_project_agents() {
        let project = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        std::fs::write(global.path().join(INSTRUCTIONS_FILE), "GLOBAL").unwrap();
        std::fs::write(project.path().join(INSTRUCTIONS_FILE), "PROJECT").unwrap();
        std::fs::write(project.path().join(AGENTS_FILE), "AGENTS").unwrap();
        let c = context_message(
            project.path(),
            project.path(),
            Some(global.path()),
            Some("CATALOG"),
        );
        let (g, p, a, s) = (
            c.find("GLOBAL").unwrap(),
            c.find("PROJECT").unwrap(),
            c.find("AGENTS").unwrap(),
            c.find("# Skills\nCATALOG").unwrap(),
        );
        assert!(c.starts_with("Working directory: "));
        assert!(g < p && p < a && a < s, "{c}");
        let without = context_message(project.path(), project.path(), None, None);
        assert!(!without.contains("# Skills"), "{without}");
    }

    /// A command that links the project's instruction files to files it cannot read (the
    /// state root, the user's keys) does not get them put before the model of the next
    /// session, nor in a sub-agent's role prompt; a link within the project is read.
    #[test]
    fn instruction_files_linked_out_of_the_project_are_not_read() {
        let project = tempfile::tempdir().unwrap();
        let hidden = tempfile::tempdir().unwrap();
        let secret = hidden.path().join("canary");
        std::fs::write(&secret, "CANARY-KEY").unwrap();
        let root = project.path();
        std::os::unix::fs::symlink(&secret, root.join(INSTRUCTIONS_FILE)).unwrap();
        std::fs::write(root.join("notes.md"), "OWN WORDS").unwrap();
        std::os::unix::fs::symlink("notes.md", root.join(AGENTS_FILE)).unwrap();
        std::os::unix::fs::symlink(&secret, root.join(SYSTEM_PROMPT_FILE)).unwrap();
        std::os::unix::fs::symlink(hidden.path(), root.join(ROLES_DIR)).unwrap();
        std::fs::rename(&secret, hidden.path().join("review.md")).unwrap();
        std::fs::write(&secret, "CANARY-KEY").unwrap();
        let c = context_message(root, root, None, None);
        assert!(!c.contains("CANARY"), "{c}");
        assert!(c.contains("OWN WORDS"), "{c}");
        // Inside the project too: its `.env`, which commands see scrubbed of its keys.
        std::fs::write(root.join(".env"), "OPENAI_API_KEY=sk-CANARY-KEY\n").unwrap();
        std::fs::remove_file(root.join(INSTRUCTIONS_FILE)).unwrap();
        std::os::unix::fs::symlink(".env", root.join(INSTRUCTIONS_FILE)).unwrap();
        let c = context_message(root, root, None, None);
        assert!(!c.contains("CANARY"), "{c}");
        // A `.env` below the project (on the key search path of a launch from there), and what
        // the project's own `deny_read` hides.
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/.env"), "OPENAI_API_KEY=sk-CANARY-SUB\n").unwrap();
        std::fs::remove_file(root.join(INSTRUCTIONS_FILE)).unwrap();
        std::os::unix::fs::symlink("sub/.env", root.join(INSTRUCTIONS_FILE)).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::write(root.join("secrets/prod.key"), "DB_PASSWORD=CANARY-DENIED\n").unwrap();
        std::fs::write(
            root.join(crate::config::CONFIG_FILE_NAME),
            "[sandbox]\ndeny_read = [\"secrets\"]\n",
        )
        .unwrap();
        std::fs::remove_file(root.join(AGENTS_FILE)).unwrap();
        std::os::unix::fs::symlink("secrets/prod.key", root.join(AGENTS_FILE)).unwrap();
        let c = context_message(root, root, None, None);
        assert!(!c.contains("CANARY"), "{c}");
        let (prompt, source) = system_prompt(root, None);
        assert_eq!(source, PromptSource::BuiltIn);
        assert!(!prompt.contains("CANARY"));
        let role = sub_agent_prompt(Some("review"), root, None);
        assert!(!role.contains("CANARY"), "{role}");
    }

    #[test]
    fn project_root_falls_back_to_cwd() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(detect_project_root(dir.path()), dir.path());
    }
}

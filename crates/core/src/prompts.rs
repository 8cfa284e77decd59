//! The system prompt cascade and the context injected at the start of every conversation.
//!
//! System prompt: `<project root>/SysPrompt.md`, else `~/.config/intendant/SysPrompt.md`, else
//! the built-in default. Context: the working directory, then `INTENDANT.md` (global, then
//! project) and the project's `AGENTS.md`.

use std::path::Path;

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
- Ask the human (ask_human) only when you truly cannot proceed on a reasonable, stated assumption.
- When the task is complete and verified, call signal_done with a short summary of what changed.";

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
    let read = |dir: &Path| {
        std::fs::read_to_string(dir.join(SYSTEM_PROMPT_FILE))
            .ok()
            .filter(|t| !t.trim().is_empty())
    };
    if let Some(text) = read(project_root) {
        return (text, PromptSource::Project);
    }
    if let Some(text) = config_dir.and_then(read) {
        return (text, PromptSource::Global);
    }
    (DEFAULT_SYSTEM_PROMPT.to_owned(), PromptSource::BuiltIn)
}

/// The first context message: working directory and project instructions.
pub fn context_message(cwd: &Path, project_root: &Path, config_dir: Option<&Path>) -> String {
    let mut out = format!(
        "Working directory: {}\nProject root: {}\nRelative paths in tool calls resolve against the project root.",
        cwd.display(),
        project_root.display()
    );
    let mut section = |title: String, path: &Path| {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.trim().is_empty()
        {
            out.push_str(&format!(
                "\n\n# {title} ({})\n{}",
                path.display(),
                crate::conversation::clip(text.trim(), MAX_INSTRUCTION_BYTES)
            ));
        }
    };
    if let Some(dir) = config_dir {
        section(
            format!("{INSTRUCTIONS_FILE}, global instructions"),
            &dir.join(INSTRUCTIONS_FILE),
        );
    }
    section(
        format!("{INSTRUCTIONS_FILE}, project instructions"),
        &project_root.join(INSTRUCTIONS_FILE),
    );
    section(
        format!("{AGENTS_FILE}, project instructions"),
        &project_root.join(AGENTS_FILE),
    );
    out
}

/// Project root: `git rev-parse --show-toplevel` run in `cwd`, else `cwd`.
pub fn detect_project_root(cwd: &Path) -> std::path::PathBuf {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(cwd)
        .stderr(std::process::Stdio::null())
        .output();
    match output {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if text.is_empty() {
                cwd.to_path_buf()
            } else {
                text.into()
            }
        }
        Ok(_) | Err(_) => cwd.to_path_buf(),
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
    fn context_orders_global_project_agents() {
        let project = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        std::fs::write(global.path().join(INSTRUCTIONS_FILE), "GLOBAL").unwrap();
        std::fs::write(project.path().join(INSTRUCTIONS_FILE), "PROJECT").unwrap();
        std::fs::write(project.path().join(AGENTS_FILE), "AGENTS").unwrap();
        let c = context_message(project.path(), project.path(), Some(global.path()));
        let (g, p, a) = (
            c.find("GLOBAL").unwrap(),
            c.find("PROJECT").unwrap(),
            c.find("AGENTS").unwrap(),
        );
        assert!(c.starts_with("Working directory: "));
        assert!(g < p && p < a, "{c}");
    }

    #[test]
    fn project_root_falls_back_to_cwd() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(detect_project_root(dir.path()), dir.path());
    }
}

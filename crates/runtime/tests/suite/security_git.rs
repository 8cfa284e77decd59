//! Attacks on what git reads as configuration or as a pointer to another repository, through
//! the built binary under both sandbox layers: a command tries to redirect the project's git
//! (`.git/commondir`, a worktree's gitfile, `gitdir`), to plant configuration other programs run
//! (`.vscode/`, `.claude/`, `.mcp.json`...), and, as a sub-agent in a worktree, to move or delete
//! a ref that is not its own branch. `git commit` keeps working in a plain repository and on the
//! child's own branch.

use super::security_sandbox::{assert_refused, sh as quote, shell_batch};
use super::support::{Batch, Run, nobody, running_as_root, tempdir};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};

/// git with an identity and nothing from the user's configuration.
const GIT: &str = "git -c user.name=t -c user.email=t@t";

fn sh(dir: &Path, script: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("set -e; {script}")])
        .current_dir(dir)
        .status()
        .expect("git and sh are needed for the git sandbox tests");
    assert!(status.success(), "{script}");
}

/// Who runs the batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum As {
    /// This test's user (root in CI).
    Caller,
    /// `nobody`, through `setpriv` (the user-namespace path of the mount layer).
    Nobody,
}

/// Runs `attacks` then `control` (numbered after them) in `cwd` with `roots` writable.
fn run(
    who: As,
    roots: &[PathBuf],
    cwd: &Path,
    logs: &Path,
    attacks: &[String],
    control: &str,
) -> Run {
    let commands = shell_batch(attacks, control);
    // The runtime's own logs directory is a write root as the controller gives it.
    let roots = std::env::join_paths(roots.iter().chain([&logs.to_path_buf()])).unwrap();
    let batch = Batch::new(&json!({ "commands": commands }), logs)
        .env("INTENDANT_SANDBOX_WRITE_PATHS", roots)
        .env("INTENDANT_SANDBOX_REQUIRE_FULL", "1")
        .env("HOME", logs);
    match who {
        As::Caller => batch.dir(cwd).run(),
        As::Nobody => {
            let stage = tempdir();
            batch.dir(cwd).by_nobody(stage.path()).run()
        }
    }
}

/// Hands `dir` and everything in it to `nobody`.
fn give_to_nobody(dir: &Path) {
    let (uid, gid) = nobody();
    sh(dir, &format!("chown -R {uid}:{gid} ."));
}

/// Every attack failed and the control succeeded; the control's stdout.
fn refused(run: &Run, attacks: &[String]) -> String {
    let control = assert_refused(run, attacks);
    control["stdout"].as_str().unwrap_or_default().to_owned()
}

/// Every file under `dir` with its content (directories as `/`), to compare after a batch.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.push((p.clone(), "/".to_owned()));
                stack.push(p);
            } else {
                out.push((p.clone(), fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn git_pointers_and_program_configuration_cannot_be_written_replaced_or_removed() {
    let dir = tempdir();
    let base = fs::canonicalize(dir.path()).unwrap();
    let p = base.join("project");
    let logs = base.join("logs");
    fs::create_dir_all(&logs).unwrap();
    fs::create_dir_all(&p).unwrap();
    sh(
        &p,
        &format!(
            "git init -q -b main && echo a > a.txt && git add a.txt && {GIT} commit -qm a && \
             git worktree add -q -b side {} && \
             mkdir .vscode .idea .claude .codex .cursor && echo '{{}}' > .vscode/tasks.json && \
             echo x > .idea/workspace.xml && echo '{{}}' > .claude/settings.json && \
             echo '{{}}' > .mcp.json && echo x > .codex/config.toml && echo '{{}}' > .cursor/mcp.json",
            quote(&base.join("side"))
        ),
    );
    let watched: Vec<PathBuf> = [
        ".vscode",
        ".idea",
        ".claude",
        ".codex",
        ".cursor",
        ".git/info",
        ".git/worktrees",
    ]
    .iter()
    .map(|d| p.join(d))
    .collect();
    let before: Vec<_> = watched.iter().map(|d| snapshot(d)).collect();
    let mcp = fs::read_to_string(p.join(".mcp.json")).unwrap();
    let attacks: Vec<String> = [
        "echo '{\"tasks\":[{\"command\":\"sh evil\",\"runOptions\":{\"runOn\":\"folderOpen\"}}]}' > .vscode/tasks.json",
        "echo x > .vscode/settings.json",
        "rm -rf .vscode",
        "mv .vscode .vscode.old",
        "echo '{\"hooks\":{}}' > .claude/settings.json",
        "echo x > .claude/settings.local.json",
        "echo '{\"mcpServers\":{\"x\":{\"command\":\"sh\"}}}' > .mcp.json",
        "rm -f .mcp.json",
        "echo x > new && mv -f new .mcp.json",
        "echo x > .codex/config.toml",
        "echo x > .cursor/mcp.json",
        "echo x > .idea/workspace.xml",
        "echo '*.txt filter=evil' > .git/info/attributes",
        "echo x >> .git/info/exclude",
        "rm -rf .git/info",
        "echo /tmp/evil/.git > .git/worktrees/side/gitdir",
        "echo /tmp/evil > .git/worktrees/side/commondir",
        "rm -f .git/worktrees/side/gitdir",
        "mv .git/worktrees/side .git/worktrees/side.old",
    ]
    .iter()
    .map(|c| format!("cd {} && {c}", quote(&p)))
    .collect();
    let control = format!(
        "echo b > b.txt && git add b.txt && {GIT} commit -qm b && git log --oneline | wc -l"
    );
    let out = run(
        As::Caller,
        std::slice::from_ref(&p),
        &p,
        &logs,
        &attacks,
        &control,
    );
    assert_eq!(refused(&out, &attacks), "2\n");
    let after: Vec<_> = watched.iter().map(|d| snapshot(d)).collect();
    assert_eq!(after, before);
    assert_eq!(fs::read_to_string(p.join(".mcp.json")).unwrap(), mcp);
    assert!(!p.join(".vscode.old").exists());
}

/// A repository with `main`, a sibling's branch and the child's worktree on
/// `intendant/c1/work`, laid out as the controller makes it; the child's write roots.
struct Child {
    _dir: tempfile::TempDir,
    base: PathBuf,
    common: PathBuf,
    worktree: PathBuf,
    roots: Vec<PathBuf>,
}

impl Child {
    fn new() -> Child {
        let dir = tempdir();
        let base = fs::canonicalize(dir.path()).unwrap();
        let project = base.join("project");
        let worktree = base.join("home/worktrees/c1");
        fs::create_dir_all(&project).unwrap();
        fs::create_dir_all(base.join("logs")).unwrap();
        sh(
            &project,
            &format!(
                "git init -q -b main && echo a > a.txt && git add a.txt && {GIT} commit -qm a && \
                 git branch intendant/c2/work && git branch keep && \
                 git worktree add -q -b intendant/c1/work {}",
                quote(&worktree)
            ),
        );
        let common = project.join(".git");
        let roots = vec![
            worktree.clone(),
            common.join("objects"),
            common.join("worktrees/c1"),
            common.join("refs/heads/intendant/c1"),
            common.join("logs/refs/heads/intendant/c1"),
        ];
        Child {
            _dir: dir,
            base,
            common,
            worktree,
            roots,
        }
    }

    fn refs(&self) -> String {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "for-each-ref",
                "--format=%(refname) %(objectname)",
            ])
            .current_dir(self.common.parent().unwrap())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }
}

fn child_attacks(c: &Child) -> Vec<String> {
    let main = c.common.join("refs/heads/main");
    [
        format!("{GIT} commit -q --allow-empty -m x && git branch -f main HEAD"),
        "git update-ref refs/heads/main HEAD".to_owned(),
        "git update-ref -d refs/heads/keep".to_owned(),
        "git branch -D keep".to_owned(),
        "git branch -f intendant/c2/work HEAD".to_owned(),
        "git branch evil".to_owned(),
        "git pack-refs --all".to_owned(),
        format!(
            "echo 0000000000000000000000000000000000000000 > {}",
            quote(&main)
        ),
        format!("echo x > {}", quote(&c.common.join("packed-refs"))),
        format!(
            "echo 'ref: refs/heads/evil' > {}",
            quote(&c.common.join("HEAD"))
        ),
        format!("echo x > {}", quote(&c.common.join("config"))),
        "echo 'gitdir: /tmp/evil/.git' > .git".to_owned(),
        "rm -f .git".to_owned(),
        format!(
            "echo /tmp/evil > {}",
            quote(&c.common.join("worktrees/c1/commondir"))
        ),
        format!(
            "echo /tmp/evil/.git > {}",
            quote(&c.common.join("worktrees/c1/gitdir"))
        ),
    ]
    .into_iter()
    .map(|a| format!("cd {} && {a}", quote(&c.worktree)))
    .collect()
}

/// The child's attacks all fail, its commit lands on its own branch, and no other ref, the
/// gitfile or `packed-refs` changed. `enclosing`: the whole arena is a write root too.
fn attack_child(who: As, enclosing: bool) {
    let c = Child::new();
    if who == As::Nobody {
        give_to_nobody(&c.base);
    }
    let before = c.refs();
    let gitfile = fs::read_to_string(c.worktree.join(".git")).unwrap();
    let attacks = child_attacks(&c);
    let control = format!(
        "echo b > b.txt && git add b.txt && {GIT} commit -qm b && git rev-parse --abbrev-ref HEAD"
    );
    let mut roots = c.roots.clone();
    if enclosing {
        roots.push(c.base.clone());
    }
    let out = run(
        who,
        &roots,
        &c.worktree,
        &c.base.join("logs"),
        &attacks,
        &control,
    );
    assert_eq!(refused(&out, &attacks), "intendant/c1/work\n");
    // Only the child's own branch moved (by its commits); every other ref is as it was.
    let others = |refs: &str| -> Vec<String> {
        refs.lines()
            .filter(|l| !l.starts_with("refs/heads/intendant/c1/"))
            .map(str::to_owned)
            .collect()
    };
    let after = c.refs();
    assert_eq!(others(&after), others(&before), "{after}");
    assert_ne!(after, before, "the child's own branch got its commit");
    assert_eq!(
        fs::read_to_string(c.worktree.join(".git")).unwrap(),
        gitfile
    );
    assert!(!c.common.join("packed-refs").exists());
}

#[test]
fn a_worktree_child_commits_to_its_own_branch_and_moves_no_other_ref() {
    attack_child(As::Caller, false);
}

#[test]
fn a_worktree_child_moves_no_other_ref_when_the_repository_lies_inside_a_write_root() {
    // As for a project under /tmp: the repository is writable through an enclosing root, and
    // the mount layer's guards alone keep the other refs read-only.
    attack_child(As::Caller, true);
}

#[test]
fn as_an_ordinary_user_a_worktree_child_moves_no_other_ref() {
    if !running_as_root() {
        // This test's user is the ordinary user already.
        attack_child(As::Caller, true);
        return;
    }
    attack_child(As::Nobody, true);
}

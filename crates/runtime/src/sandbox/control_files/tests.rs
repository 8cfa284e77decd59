use super::*;
use std::fs;

#[test]
fn existing_control_files_are_read_only_and_their_parents_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join(".git/config"), "").unwrap();
    fs::write(root.join("intendant.toml"), "").unwrap();
    fs::write(root.join(".env.local"), "").unwrap();
    fs::write(root.join("main.rs"), "").unwrap();
    let got = guards(std::slice::from_ref(&root), &ToolchainHomes::default());
    assert_eq!(got[0], Guard::Pin(root.join(".git")), "{got:?}");
    for p in ["intendant.toml", ".env.local", ".git/config", ".git/hooks"] {
        assert!(got.contains(&Guard::ReadOnly(root.join(p))), "{p}: {got:?}");
    }
    assert!(
        root.join(".git/hooks").is_dir(),
        "a missing hooks dir is created"
    );
    assert!(
        !got.iter()
            .any(|g| *g == Guard::ReadOnly(root.join("main.rs")))
    );
    assert!(
        !got.iter().any(|g| *g == Guard::ReadOnly(root.join(".env"))),
        "a missing file has nothing to mount on"
    );
}

#[test]
fn the_directories_between_a_project_and_a_root_around_it_are_pinned() {
    // A project under another write root (`/tmp`): renaming a directory between the two took
    // the project along, and a copy with a planted `.git/config` could take its place.
    let dir = tempfile::tempdir().unwrap();
    let outer = fs::canonicalize(dir.path()).unwrap();
    let project = outer.join("a/b/project");
    fs::create_dir_all(project.join(".git")).unwrap();
    fs::write(project.join(".git/config"), "").unwrap();
    let elsewhere = outer.join("c/d/plain");
    fs::create_dir_all(&elsewhere).unwrap();
    let roots = [outer.clone(), project.clone(), elsewhere.clone()];
    let got = guards(&roots, &ToolchainHomes::default());
    for pinned in [outer.join("a"), outer.join("a/b")] {
        assert!(
            got.contains(&Guard::Pin(pinned.clone())),
            "{pinned:?}: {got:?}"
        );
    }
    // A root holding nothing protected pins nothing around it (its directories stay free to
    // rename and remove).
    assert!(
        !got.iter()
            .any(|g| matches!(g, Guard::Pin(p) if p.starts_with(outer.join("c")))),
        "{got:?}"
    );
    // Pins come first, shallowest first.
    let a = got.iter().position(|g| *g == Guard::Pin(outer.join("a")));
    let config = got
        .iter()
        .position(|g| *g == Guard::ReadOnly(project.join(".git/config")));
    assert!(a < config, "{got:?}");
}

#[test]
fn toolchain_entries_inside_a_root_are_protected_and_outside_ones_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let cargo = base.join("cargo");
    let rustup = base.join("rustup");
    fs::create_dir_all(cargo.join("bin")).unwrap();
    fs::write(cargo.join("env"), "").unwrap();
    fs::create_dir_all(rustup.join("toolchains/stable/bin")).unwrap();
    let homes = ToolchainHomes {
        cargo_home: Some(cargo.clone()),
        rustup_home: Some(rustup.clone()),
    };
    let got = guards(&[cargo.clone(), rustup.clone()], &homes);
    for p in [
        cargo.join("bin"),
        cargo.join("env"),
        rustup.join("toolchains/stable"),
    ] {
        assert!(got.contains(&Guard::ReadOnly(p.clone())), "{p:?}: {got:?}");
    }
    assert!(
        got.contains(&Guard::Pin(rustup.join("toolchains"))),
        "{got:?}"
    );
    // Not a write root: the read-only tree already covers it, no guard needed.
    assert!(guards(&[], &homes).is_empty());
}

#[test]
fn linked_toolchains_and_a_linked_git_resolve_to_what_they_point_at() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let real = base.join("store/toolchains");
    fs::create_dir_all(real.join("stable/lib")).unwrap();
    let rustup = base.join("rustup");
    fs::create_dir_all(&rustup).unwrap();
    std::os::unix::fs::symlink(&real, rustup.join("toolchains")).unwrap();
    std::os::unix::fs::symlink(base.join("store"), base.join(".git")).unwrap();
    let homes = ToolchainHomes {
        cargo_home: None,
        rustup_home: Some(rustup.clone()),
    };
    let got = guards(std::slice::from_ref(&base), &homes);
    assert!(
        got.contains(&Guard::ReadOnly(real.join("stable"))),
        "{got:?}"
    );
    assert!(got.contains(&Guard::Pin(base.join("store"))), "{got:?}");
    assert!(
        !got.iter().any(|g| matches!(g, Guard::ReadOnly(p) | Guard::Pin(p) if p.starts_with(rustup.join("toolchains")))),
        "a link is never bound: {got:?}"
    );
    assert!(
        !got.iter()
            .any(|g| matches!(g, Guard::ReadOnly(p) if p.ends_with("hooks"))),
        "a linked .git is no repository of this root: {got:?}"
    );
}

#[test]
fn a_worktree_git_file_protects_the_common_dir() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let common = root.join("main.git");
    let wt_dir = common.join("worktrees/w");
    fs::create_dir_all(common.join("hooks")).unwrap();
    fs::write(common.join("config"), "").unwrap();
    fs::create_dir_all(&wt_dir).unwrap();
    fs::write(wt_dir.join("commondir"), "../..\n").unwrap();
    let project = root.join("w");
    fs::create_dir_all(&project).unwrap();
    fs::write(
        project.join(".git"),
        format!("gitdir: {}\n", wt_dir.display()),
    )
    .unwrap();
    let got = guards(std::slice::from_ref(&root), &ToolchainHomes::default());
    assert!(got.is_empty(), "the project is not a root itself: {got:?}");
    let roots = [root.clone(), project.clone()];
    // A linked worktree: its whole repository, and its gitfile.
    let got = guards(&roots, &ToolchainHomes::default());
    assert!(got.contains(&Guard::ReadOnly(common.clone())), "{got:?}");
    assert!(
        got.contains(&Guard::ReadOnly(project.join(".git"))),
        "{got:?}"
    );
    // A `--separate-git-dir` checkout (no commondir): its hooks and configuration.
    fs::remove_file(wt_dir.join("commondir")).unwrap();
    fs::write(wt_dir.join("config"), "").unwrap();
    let got = guards(&roots, &ToolchainHomes::default());
    for p in [
        wt_dir.join("hooks"),
        wt_dir.join("config"),
        project.join(".git"),
    ] {
        assert!(got.contains(&Guard::ReadOnly(p.clone())), "{p:?}: {got:?}");
    }
}

#[test]
fn git_pointers_and_program_configuration_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    for d in [
        ".git/worktrees/w",
        ".vscode",
        ".claude",
        ".idea",
        ".codex",
        ".cursor",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in [
        ".git/worktrees/w/gitdir",
        ".git/worktrees/w/commondir",
        ".mcp.json",
    ] {
        fs::write(root.join(f), "").unwrap();
    }
    let got = guards(std::slice::from_ref(&root), &ToolchainHomes::default());
    for p in [
        ".git/info",
        ".git/worktrees/w/gitdir",
        ".git/worktrees/w/commondir",
        ".vscode",
        ".claude",
        ".idea",
        ".codex",
        ".cursor",
        ".mcp.json",
    ] {
        assert!(got.contains(&Guard::ReadOnly(root.join(p))), "{p}: {got:?}");
    }
    assert!(
        root.join(".git/info").is_dir(),
        "a missing info dir is created"
    );
    assert!(
        got.contains(&Guard::Pin(root.join(".git/worktrees/w"))),
        "{got:?}"
    );
    assert!(
        !got.iter()
            .any(|g| *g == Guard::ReadOnly(root.join(".git/commondir"))),
        "a missing pointer has nothing to mount on: the controller restores it"
    );
}

#[test]
fn a_linked_worktree_gets_its_repository_read_only_but_for_its_own_roots() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let common = base.join("project/.git");
    let own = common.join("worktrees/c1");
    for d in [
        "hooks",
        "objects",
        "refs/heads/intendant/c1",
        "logs/refs/heads/intendant/c1",
    ] {
        fs::create_dir_all(common.join(d)).unwrap();
    }
    fs::create_dir_all(&own).unwrap();
    fs::write(own.join("commondir"), "../..\n").unwrap();
    let wt = base.join("home/worktrees/c1");
    fs::create_dir_all(&wt).unwrap();
    fs::write(
        own.join("gitdir"),
        format!("{}\n", wt.join(".git").display()),
    )
    .unwrap();
    fs::write(wt.join(".git"), format!("gitdir: {}\n", own.display())).unwrap();
    let roots = vec![
        base.clone(),
        wt.clone(),
        common.join("objects"),
        own.clone(),
        common.join("refs/heads/intendant/c1"),
        common.join("logs/refs/heads/intendant/c1"),
    ];
    let got = guards(&roots, &ToolchainHomes::default());
    assert!(got.contains(&Guard::ReadOnly(common.clone())), "{got:?}");
    for r in &roots[2..] {
        assert!(got.contains(&Guard::Reopen(r.clone())), "{r:?}: {got:?}");
    }
    for p in [wt.join(".git"), own.join("gitdir"), own.join("commondir")] {
        assert!(got.contains(&Guard::ReadOnly(p.clone())), "{p:?}: {got:?}");
    }
    assert!(
        !got.contains(&Guard::ReadOnly(common.join("hooks"))),
        "covered by the repository's own guard: {got:?}"
    );
    let position = |g: &Guard| got.iter().position(|x| x == g).unwrap();
    assert!(
        position(&Guard::ReadOnly(common.clone())) < position(&Guard::Reopen(own.clone()))
            && position(&Guard::Reopen(own.clone()))
                < position(&Guard::ReadOnly(own.join("gitdir"))),
        "mount order: {got:?}"
    );
    // A repository listed as a write root itself was granted on purpose: not read-only.
    let mut granted = roots.clone();
    granted.push(common.clone());
    let got = guards(&granted, &ToolchainHomes::default());
    assert!(!got.contains(&Guard::ReadOnly(common.clone())), "{got:?}");
    // With the repository outside every root (the usual place), only the child's own roots
    // are writable anyway: nothing of the repository is guarded but their pointers.
    let got = guards(&roots[1..], &ToolchainHomes::default());
    assert!(
        !got.iter()
            .any(|g| matches!(g, Guard::ReadOnly(p) if p == &common)),
        "{got:?}"
    );
    assert!(
        got.contains(&Guard::ReadOnly(own.join("gitdir"))),
        "{got:?}"
    );
}

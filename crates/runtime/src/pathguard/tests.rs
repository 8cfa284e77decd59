use super::*;
use std::os::unix::fs::symlink;

/// Every blocked form, as given by a model.
const BLOCKED_RAW: &[&str] = &[
    "/etc/shadow",
    "/etc//shadow",
    "/etc/./shadow",
    "//etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/proc",
    "/proc/",
    "/proc/self/environ",
    "/proc/1/mem",
    "/sys",
    "/sys/kernel/notes",
    "/dev",
    "/dev/sda",
    "/dev/shm/x",
    "/root/.ssh",
    "/root/.ssh/id_ed25519",
    "/home/u/.ssh/authorized_keys",
    "/home/u/.gnupg/private-keys-v1.d/k",
    "/home/u/.SSH/id_rsa",
    "/home/u/.GnuPG/x",
    ".ssh/id_rsa",
    "./.gnupg",
    "~/.ssh/config",
    "project/.ssh/new_key",
];

const TRAVERSAL_RAW: &[&str] = &[
    "..",
    "../x",
    "a/../b",
    "a/..",
    "/tmp/../etc/passwd",
    "/tmp/a/../../etc/shadow",
    "./../x",
];

#[test]
fn every_blocked_form_is_refused() {
    for raw in BLOCKED_RAW {
        match validate_path(raw) {
            Err(PathGuardError::Blocked { .. }) => {}
            other => panic!("{raw}: {other:?}"),
        }
    }
}

#[test]
fn traversal_is_refused_before_anything_else() {
    for raw in TRAVERSAL_RAW {
        match validate_path(raw) {
            Err(PathGuardError::Traversal { .. }) => {}
            other => panic!("{raw}: {other:?}"),
        }
    }
}

#[test]
fn empty_and_nul_are_refused() {
    assert!(matches!(validate_path(""), Err(PathGuardError::Empty)));
    assert!(matches!(
        validate_path("/tmp/a\0b"),
        Err(PathGuardError::NulByte)
    ));
}

#[test]
fn near_misses_are_allowed() {
    let dir = tempfile::tempdir().unwrap();
    for raw in [
        "/etc/hosts",
        "/etc/passwd",
        "/etc/shadow.d.example",
        "/procfs",
        "/devices",
    ] {
        assert!(validate_path(raw).is_ok(), "{raw}");
    }
    let ok = dir.path().join("ssh").join("new.txt");
    assert!(validate_path(ok.to_str().unwrap()).is_ok());
    let dotted = dir.path().join(".sshd_config");
    assert!(validate_path(dotted.to_str().unwrap()).is_ok());
}

#[test]
fn relative_paths_resolve_against_the_working_directory() {
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(validate_path("Cargo.toml").unwrap(), cwd.join("Cargo.toml"));
    assert_eq!(
        validate_path("./src/./lib.rs").unwrap(),
        cwd.join("src/lib.rs")
    );
}

/// A tempdir with links into blocked places; names are relative to the returned root.
fn linked_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::create_dir_all(root.join("home/.ssh")).unwrap();
    symlink("/etc/shadow", root.join("shadow_link")).unwrap();
    symlink("/proc/self", root.join("proc_dir_link")).unwrap();
    symlink("../home/.ssh", root.join("real/rel_ssh")).unwrap();
    symlink("/root/.ssh/not_there_yet", root.join("dangling")).unwrap();
    symlink(root.join("dangling"), root.join("chain")).unwrap();
    symlink("/dev", root.join("devlink")).unwrap();
    symlink(root.join("loop_b"), root.join("loop_a")).unwrap();
    symlink(root.join("loop_a"), root.join("loop_b")).unwrap();
    symlink(root.join("real"), root.join("ok_link")).unwrap();
    dir
}

#[test]
fn symlinks_into_blocked_places_are_refused() {
    let dir = linked_tree();
    for rel in [
        "shadow_link",
        "proc_dir_link/environ",
        "proc_dir_link/not_a_file_yet",
        "real/rel_ssh/id_rsa",
        "real/rel_ssh/new_key",
        "dangling",
        "chain",
        "devlink/null",
        "devlink/new_node",
    ] {
        let p = dir.path().join(rel);
        match validate_path(p.to_str().unwrap()) {
            Err(PathGuardError::Blocked { .. }) => {}
            other => panic!("{rel}: {other:?}"),
        }
    }
}

#[test]
fn symlink_loops_are_refused() {
    let dir = linked_tree();
    let p = dir.path().join("loop_a");
    assert!(matches!(
        validate_path(p.to_str().unwrap()),
        Err(PathGuardError::SymlinkLoop { .. })
    ));
}

#[test]
fn harmless_links_resolve_and_keep_the_lexical_path() {
    let dir = linked_tree();
    let p = dir.path().join("ok_link/new.txt");
    let checked = check_path(p.to_str().unwrap()).unwrap();
    assert_eq!(checked.absolute, p);
    let real = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(checked.resolved, real.join("real/new.txt"));
}

#[test]
fn resolution_matches_canonicalize_for_existing_paths() {
    let dir = linked_tree();
    for rel in ["real", "ok_link", "real/rel_ssh"] {
        let p = dir.path().join(rel);
        let resolved = resolve(&p, "x").unwrap();
        assert_eq!(resolved, std::fs::canonicalize(&p).unwrap(), "{rel}");
    }
}

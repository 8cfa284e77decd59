//! The structured path guard through the binary: every blocked form, as given and through
//! links, is refused by `inspectPath` and `editFile`, and no edit lands.

use super::support::{run, tempdir};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::symlink;

const BLOCKED: &[&str] = &[
    "/etc/shadow",
    "/etc//shadow",
    "/etc/./gshadow",
    "/etc/shadow-",
    "/proc/self/environ",
    "/proc/1/mem",
    "/proc",
    "/sys/kernel/notes",
    "/dev/null",
    "/dev/shm/x",
    "/root/.ssh/authorized_keys",
    "/root/.gnupg/pubring.kbx",
    "/home/u/.SSH/id_rsa",
    ".ssh/id_rsa",
    "../etc/passwd",
    "/tmp/../etc/shadow",
    "a/b/../../x",
];

fn refusals(path_key: &str, function: &str, paths: &[String]) -> Vec<Value> {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"function": function, "nonce": i, path_key: p,
                   "operation": "write", "content": "pwned"})
        })
        .collect()
}

#[test]
fn every_blocked_path_form_is_refused_by_inspect_and_edit() {
    let logs = tempdir();
    let paths: Vec<String> = BLOCKED.iter().map(|p| (*p).to_owned()).collect();
    for (key, function) in [("path", "inspectPath"), ("file_path", "editFile")] {
        let r = run(Value::Array(refusals(key, function, &paths)), logs.path());
        assert!(r.status.success(), "{}", r.stderr);
        for (i, p) in paths.iter().enumerate() {
            let err = r.error(i);
            assert!(
                err.contains("blocked") || err.contains("traversal"),
                "{function} {p}: {err}"
            );
        }
    }
}

#[test]
fn links_into_blocked_places_are_refused_and_nothing_is_written() {
    let dir = tempdir();
    let root = dir.path();
    let ssh = root.join("home/.ssh");
    fs::create_dir_all(&ssh).unwrap();
    fs::create_dir(root.join("work")).unwrap();
    symlink(&ssh, root.join("work/keys")).unwrap();
    symlink(ssh.join("authorized_keys"), root.join("work/dangling")).unwrap();
    symlink("/etc/shadow", root.join("work/shadow")).unwrap();
    symlink("/proc/self", root.join("work/me")).unwrap();
    let targets: Vec<String> = [
        "work/keys/authorized_keys",
        "work/keys/id_ed25519",
        "work/dangling",
        "work/shadow",
        "work/me/environ",
        "work/me/new_file",
    ]
    .iter()
    .map(|t| root.join(t).to_string_lossy().into_owned())
    .collect();
    let logs = tempdir();
    for (key, function) in [("path", "inspectPath"), ("file_path", "editFile")] {
        let r = run(Value::Array(refusals(key, function, &targets)), logs.path());
        for (i, t) in targets.iter().enumerate() {
            assert!(
                r.error(i).contains("blocked"),
                "{function} {t}: {}",
                r.error(i)
            );
        }
    }
    assert_eq!(
        fs::read_dir(&ssh).unwrap().count(),
        0,
        "a key file was planted"
    );
}

#[test]
fn ordinary_paths_still_work() {
    let dir = tempdir();
    let file = dir.path().join("notes/ssh.txt");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let f = file.to_str().unwrap();
    let r = run(
        json!([
            {"function": "editFile", "nonce": 1, "file_path": f, "operation": "write", "content": "ok"},
            {"function": "inspectPath", "nonce": 2, "path": "/etc/hosts"},
        ]),
        dir.path(),
    );
    let _: Value = r.value(0);
    assert_eq!(r.value(1)["exists"], true);
    assert_eq!(fs::read_to_string(&file).unwrap(), "ok");
}

//! Attacks on the Landlock write sandbox, through the built binary: a command (shell, PTY or
//! structured edit) tries to write outside `INTENDANT_SANDBOX_WRITE_PATHS`. Tests run as root
//! in CI, which Landlock confines all the same.

use super::support::{Batch, Run, tempdir};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// `inside/` is the only writable root (the log dir lives in it); `outside/victim.txt` is the
/// file every attack tries to reach.
struct Arena {
    _dir: tempfile::TempDir,
    inside: PathBuf,
    outside: PathBuf,
    victim: PathBuf,
    logs: PathBuf,
}

const ORIGINAL: &str = "original content\n";

impl Arena {
    fn new() -> Arena {
        let dir = tempdir();
        let inside = dir.path().join("inside");
        let outside = dir.path().join("outside");
        let logs = inside.join("logs");
        fs::create_dir_all(&logs).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let victim = outside.join("victim.txt");
        fs::write(&victim, ORIGINAL).unwrap();
        Arena {
            _dir: dir,
            inside,
            outside,
            victim,
            logs,
        }
    }

    fn run(&self, commands: Value) -> Run {
        Batch::new(&json!({ "commands": commands }), &self.logs)
            .env("INTENDANT_SANDBOX_WRITE_PATHS", &self.inside)
            .run()
    }

    fn assert_untouched(&self) {
        assert_eq!(fs::read_to_string(&self.victim).unwrap(), ORIGINAL);
        let mut left: Vec<String> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["victim.txt"], "nothing may appear outside");
    }
}

fn sh(path: &Path) -> String {
    format!("'{}'", path.display())
}

#[test]
fn shell_writes_outside_the_sandbox_are_refused() {
    let a = Arena::new();
    let (v, o, i) = (sh(&a.victim), sh(&a.outside), sh(&a.inside));
    let attacks = [
        format!("echo pwned > {v}"),
        format!("echo pwned >> {v}"),
        format!("truncate -s 0 {v}"),
        format!(": > {v}"),
        format!("rm -f {v}"),
        format!("touch {o}/new"),
        format!("mkdir {o}/dir"),
        format!("cp {v} {o}/copy"),
        format!("echo pwned > /proc/self/root{}", a.victim.display()),
        format!("echo pwned | tee -a {v}"),
        format!("echo pwned | dd of={v} conv=notrunc"),
        // perl-base is essential on Debian: a plain open(2) with no shell redirection involved.
        format!("perl -e 'open(my $f, \">\", $ARGV[0]) or exit 1; print $f \"pwned\"' {v}"),
    ];
    let mut commands: Vec<Value> = attacks
        .iter()
        .enumerate()
        .map(|(n, c)| json!({"function": "execAsAgent", "nonce": n, "command": c}))
        .collect();
    // Positive control: the sandbox must not be a wall around everything.
    commands.push(json!({"function": "execAsAgent", "nonce": 99,
        "command": format!("echo fine > {i}/ok && echo hi > /dev/null && cat {v}")}));
    let run = a.run(Value::Array(commands));
    assert!(run.status.success(), "{}", run.stderr);
    for (n, attack) in attacks.iter().enumerate() {
        let r = run.value(n);
        assert_ne!(r["exit_code"], 0, "attack {attack} succeeded: {r}");
    }
    let control = run.value(attacks.len());
    assert_eq!(control["exit_code"], 0, "{control}");
    assert_eq!(control["stdout"], ORIGINAL, "reads stay open");
    assert_eq!(fs::read_to_string(a.inside.join("ok")).unwrap(), "fine\n");
    a.assert_untouched();
}

#[test]
fn pty_writes_outside_the_sandbox_are_refused() {
    let a = Arena::new();
    let v = sh(&a.victim);
    let run = a.run(json!([
        {"function": "execPty", "nonce": 1, "command": format!("echo pwned > {v}; echo rc=$?")},
        {"function": "execPty", "nonce": 2, "command": format!("touch {}/new; echo rc=$?", sh(&a.outside))},
        {"function": "execPty", "nonce": 3, "command": format!("echo ok > {}/pty_ok; echo rc=$?", sh(&a.inside))},
    ]));
    assert!(run.status.success(), "{}", run.stderr);
    for i in 0..2 {
        let out = run.value(i)["output"].as_str().unwrap().to_owned();
        assert!(out.contains("rc=1"), "PTY attack {i} not refused: {out}");
    }
    assert!(run.value(2)["output"].as_str().unwrap().contains("rc=0"));
    assert!(a.inside.join("pty_ok").exists());
    a.assert_untouched();
}

#[test]
fn edit_file_outside_the_sandbox_is_refused() {
    let a = Arena::new();
    let victim = a.victim.to_str().unwrap();
    let new = a.outside.join("new.txt");
    let run = a.run(json!([
        {"function": "editFile", "nonce": 1, "file_path": victim, "operation": "write", "content": "pwned"},
        {"function": "editFile", "nonce": 2, "file_path": victim, "operation": "append", "content": "pwned"},
        {"function": "editFile", "nonce": 3, "file_path": victim, "operation": "replace", "match_content": "original", "content": "pwned"},
        {"function": "writeFile", "nonce": 4, "file_path": new.to_str().unwrap(), "content": "pwned"},
        {"function": "editFile", "nonce": 5, "file_path": a.inside.join("ok.txt").to_str().unwrap(), "operation": "write", "content": "ok"},
    ]));
    for i in 0..4 {
        assert!(!run.error(i).is_empty());
    }
    let _: Value = run.value(4);
    assert_eq!(fs::read_to_string(a.inside.join("ok.txt")).unwrap(), "ok");
    a.assert_untouched();
}

#[test]
fn symlink_inside_pointing_outside_gives_no_write() {
    let a = Arena::new();
    // A link planted beforehand and one the command makes itself.
    symlink(&a.victim, a.inside.join("planted")).unwrap();
    let made = a.inside.join("made");
    let run = a.run(json!([
        {"function": "execAsAgent", "nonce": 1, "command": format!("echo pwned > {}", sh(&a.inside.join("planted")))},
        {"function": "execAsAgent", "nonce": 2, "command": format!("ln -s {} {} && echo pwned >> {}", sh(&a.victim), sh(&made), sh(&made))},
        {"function": "editFile", "nonce": 3, "file_path": a.inside.join("planted").to_str().unwrap(), "operation": "write", "content": "pwned"},
        {"function": "execAsAgent", "nonce": 4, "command": format!("ln -s {} {}/dirlink && echo x > {}/dirlink/new", sh(&a.outside), sh(&a.inside), sh(&a.inside))},
    ]));
    assert_ne!(run.value(0)["exit_code"], 0);
    assert_ne!(run.value(1)["exit_code"], 0);
    assert!(!run.error(2).is_empty());
    assert_ne!(run.value(3)["exit_code"], 0);
    a.assert_untouched();
}

#[test]
fn hard_link_to_an_outside_file_cannot_be_made_or_written() {
    let a = Arena::new();
    let link = a.inside.join("hard");
    let run = a.run(json!([
        {"function": "execAsAgent", "nonce": 1, "command": format!("ln {} {}", sh(&a.victim), sh(&link))},
        {"function": "execAsAgent", "nonce": 2, "command": format!("echo pwned >> {}", sh(&link))},
    ]));
    let made = run.value(0);
    assert_ne!(made["exit_code"], 0, "{made}");
    // Landlock answers a cross-directory link that would widen rights with EXDEV.
    assert!(
        made["stderr"].as_str().unwrap().contains("cross-device"),
        "{made}"
    );
    // The second command may create an ordinary file inside; it must not reach the victim.
    let _ = run.value(1);
    a.assert_untouched();
}

#[test]
fn rename_out_of_the_sandbox_is_refused() {
    let a = Arena::new();
    let mine = a.inside.join("mine.txt");
    fs::write(&mine, "mine").unwrap();
    let run = a.run(json!([
        {"function": "execAsAgent", "nonce": 1, "command": format!("mv {} {}/", sh(&mine), sh(&a.outside))},
        {"function": "execAsAgent", "nonce": 2, "command": format!("mv {} {}/stolen", sh(&a.victim), sh(&a.inside))},
        {"function": "execAsAgent", "nonce": 3, "command": format!("perl -e 'rename($ARGV[0], $ARGV[1]) or exit 1' {} {}/x", sh(&mine), sh(&a.outside))},
    ]));
    for i in 0..3 {
        assert_ne!(run.value(i)["exit_code"], 0, "rename {i} succeeded");
    }
    assert_eq!(fs::read_to_string(&mine).unwrap(), "mine");
    assert!(!a.inside.join("stolen").exists());
    a.assert_untouched();
}

#[test]
fn missing_landlock_fails_closed_naming_the_opt_outs() {
    let a = Arena::new();
    let marker = a.inside.join("ran");
    let run = Batch::new(
        &json!({"commands": [{"function": "execAsAgent", "nonce": 1, "command": format!("touch {}", sh(&marker))}]}),
        &a.logs,
    )
    .env("INTENDANT_SANDBOX_WRITE_PATHS", &a.inside)
    .env("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE", "1")
    .run();
    assert!(!run.status.success());
    assert!(run.stdout.is_empty(), "nothing may run: {}", run.stdout);
    assert!(run.stderr.contains("--no-sandbox"), "{}", run.stderr);
    assert!(
        run.stderr.contains("[sandbox] enabled = false"),
        "{}",
        run.stderr
    );
    assert!(!marker.exists(), "a command ran unconfined");
}

#[test]
fn simulation_hook_is_inert_without_a_sandbox_request() {
    // The hook can only turn a requested sandbox into a refusal; it never blocks a run that
    // asked for no sandbox, and never loosens one that did.
    let a = Arena::new();
    let run = Batch::new(
        &json!({"commands": [{"function": "execAsAgent", "nonce": 1, "command": "true"}]}),
        &a.logs,
    )
    .env("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE", "1")
    .env_remove("INTENDANT_SANDBOX_WRITE_PATHS")
    .run();
    assert!(run.status.success(), "{}", run.stderr);
}

#[test]
fn nonexistent_write_paths_are_skipped_not_granted() {
    let a = Arena::new();
    let missing = a.outside.join("later");
    let paths = std::env::join_paths([&missing, &a.inside]).unwrap();
    let run = Batch::new(
        &json!({"commands": [
            {"function": "execAsAgent", "nonce": 1, "command": format!("mkdir {}", sh(&missing))},
            {"function": "execAsAgent", "nonce": 2, "command": format!("echo ok > {}/ok", sh(&a.inside))},
        ]}),
        &a.logs,
    )
    .env("INTENDANT_SANDBOX_WRITE_PATHS", paths)
    .run();
    assert!(run.status.success(), "{}", run.stderr);
    assert_ne!(
        run.value(0)["exit_code"],
        0,
        "a missing root must not become writable"
    );
    assert_eq!(run.value(1)["exit_code"], 0);
    a.assert_untouched();
}

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::record::RewindRequest;
use super::restore::split_at_directory;
use super::*;

struct Fixture {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let project = std::fs::canonicalize(project).unwrap();
    Fixture {
        _tmp: tmp,
        home,
        project,
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

fn config() -> CheckpointConfig {
    CheckpointConfig::default()
}

async fn session(f: &Fixture, id: &str) -> SessionCheckpoints {
    SessionCheckpoints::open(&f.home, &f.project, id, &config())
        .await
        .unwrap()
}

/// Session `s1` of `f`'s project with files over 1 MiB left out.
async fn capped_session(f: &Fixture) -> SessionCheckpoints {
    let cfg = CheckpointConfig {
        max_file_mib: Some(1),
        ..CheckpointConfig::default()
    };
    SessionCheckpoints::open(&f.home, &f.project, "s1", &cfg)
        .await
        .unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A turn: checkpoint, change the project, checkpoint.
async fn turn(cp: &SessionCheckpoints, n: u32, change: impl FnOnce()) {
    cp.before(n, Some(u64::from(n) * 10)).await.unwrap();
    change();
    cp.after(n).await.unwrap();
}

fn rewind_code(turn: u32) -> RewindRequest {
    RewindRequest {
        turn,
        code: true,
        conversation: false,
        force: false,
        conversation_items_now: 0,
    }
}

/// Every file under `root` (links as `-> target`, modes of files), `.git` left out.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if e.file_name() == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&path).unwrap().display()
                ));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                let mode = meta.permissions().mode() & 0o111;
                out.push(format!(
                    "{rel} x{mode:o} {}",
                    std::fs::read_to_string(&path).unwrap_or_default()
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

#[tokio::test]
async fn a_repository_is_checkpointed_without_touching_its_index_refs_or_history() {
    let f = fixture();
    git(&f.project, &["init", "-q"]);
    write(&f.project, "tracked.txt", "one\n");
    write(&f.project, ".gitignore", "target/\n");
    write(&f.project, "target/out.bin", "build output\n");
    git(&f.project, &["add", "-A"]);
    git(&f.project, &["commit", "-qm", "first"]);
    write(&f.project, "untracked.txt", "new\n");
    write(&f.project, "tracked.txt", "two\n");
    let git_before = listing_bytes(&f.project.join(".git"));
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "tracked.txt", "three\n")).await;
    assert_eq!(
        listing_bytes(&f.project.join(".git")),
        git_before,
        "the project's .git changed"
    );
    let turns = cp.turns().unwrap();
    let changes = cp.turn_changes(&turns[0]).await.unwrap();
    assert_eq!(
        changes,
        vec![Change {
            path: "tracked.txt".into(),
            kind: ChangeKind::Modified
        }]
    );
    let files = cp
        .store()
        .git
        .run(
            &["ls-tree", "-r", "--name-only", &turns[0].before.tree],
            None,
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&files).lines().collect::<Vec<_>>(),
        [".gitignore", "tracked.txt", "untracked.txt"],
        "tracked and untracked files, not the ignored build output"
    );
    let ignored = cp.store().ignored(&cp.index).await.unwrap();
    assert_eq!(ignored, ["target/"]);
}

/// Every file under `dir` with its bytes, for comparing a directory before and after.
fn listing_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_directory_that_is_no_repository_rewinds_contents_modes_and_links() {
    let f = fixture();
    write(&f.project, "src/main.rs", "fn main() {}\n");
    write(&f.project, "run.sh", "#!/bin/sh\n");
    write(&f.project, "crlf.txt", "a\r\nb\r\n");
    write(&f.project, ".gitattributes", "* text eol=lf\n");
    std::os::unix::fs::symlink("src/main.rs", f.project.join("link")).unwrap();
    let start = listing(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        std::fs::set_permissions(
            f.project.join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        write(&f.project, "crlf.txt", "changed\n");
        std::fs::remove_file(f.project.join("link")).unwrap();
        std::os::unix::fs::symlink("elsewhere", f.project.join("link")).unwrap();
    })
    .await;
    turn(&cp, 2, || write(&f.project, "src/new.rs", "new\n")).await;
    let after = listing(&f.project);
    let outcome = cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(
        listing(&f.project),
        start,
        "the exact bytes, the exec bit and the link target"
    );
    assert!(outcome.report.removed.contains(&"src/new.rs".to_owned()));
    cp.undo(false).await.unwrap();
    assert_eq!(
        listing(&f.project),
        after,
        "the undo puts back what the rewind replaced"
    );
}

#[tokio::test]
async fn a_turn_deleting_the_whole_project_rewinds_exactly() {
    let f = fixture();
    write(&f.project, "a/b/c.txt", "deep\n");
    write(&f.project, "top.txt", "top\n");
    let start = listing(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        for e in std::fs::read_dir(&f.project).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    })
    .await;
    assert!(listing(&f.project).is_empty());
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing(&f.project), start);
}

#[tokio::test]
async fn renamed_directories_and_a_file_turned_directory_rewind_exactly() {
    let f = fixture();
    write(&f.project, "old/x.txt", "x\n");
    write(&f.project, "old/sub/y.txt", "y\n");
    write(&f.project, "plain", "file\n");
    let start = listing(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        std::fs::rename(f.project.join("old"), f.project.join("new")).unwrap();
        std::fs::remove_file(f.project.join("plain")).unwrap();
        write(&f.project, "plain/inner.txt", "now a directory\n");
    })
    .await;
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(
        listing(&f.project),
        start,
        "no `new/` left, `plain` a file again"
    );
}

#[tokio::test]
async fn a_file_replaced_by_a_link_to_etc_passwd_is_restored_without_writing_through_it() {
    let f = fixture();
    let outside = f.home.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    write(&outside, "victim", "untouched\n");
    write(&f.project, "config.txt", "mine\n");
    write(&f.project, "dir/file.txt", "inside\n");
    let start = listing(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        std::fs::remove_file(f.project.join("config.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", f.project.join("config.txt")).unwrap();
        // The directory becomes a link out of the project: restoring must not write there.
        std::fs::remove_dir_all(f.project.join("dir")).unwrap();
        std::os::unix::fs::symlink(&outside, f.project.join("dir")).unwrap();
    })
    .await;
    let passwd = std::fs::read("/etc/passwd").unwrap();
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing(&f.project), start);
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    assert_eq!(
        listing(&outside),
        ["victim x0 untouched\n"],
        "nothing written outside"
    );
}

#[tokio::test]
async fn a_file_over_the_cap_is_left_out_named_and_removed_by_a_rewind_to_before_it() {
    let f = fixture();
    write(&f.project, "small.txt", "small\n");
    let cp = capped_session(&f).await;
    cp.before(1, None).await.unwrap();
    // A sparse 2 GiB file: nothing reads its bytes.
    let big = std::fs::File::create(f.project.join("huge.bin")).unwrap();
    big.set_len(2 * 1024 * 1024 * 1024).unwrap();
    write(&f.project, "small.txt", "changed\n");
    let after = cp.after(1).await.unwrap();
    assert_eq!(
        after.left_out,
        [LeftOut::TooLarge {
            path: "huge.bin".into(),
            bytes: 2 * 1024 * 1024 * 1024
        }]
    );
    assert!(after.left_out[0].describe().contains("max_file_mib"));
    cp.rewind(rewind_code(1)).await.unwrap();
    assert!(
        !f.project.join("huge.bin").exists(),
        "it did not exist before turn 1"
    );
    assert_eq!(read(&f.project, "small.txt"), "small\n");
}

#[tokio::test]
async fn a_nested_repository_is_left_out_named_and_left_alone() {
    let f = fixture();
    write(&f.project, "vendor/lib/src.txt", "theirs\n");
    git(&f.project.join("vendor/lib"), &["init", "-q"]);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "mine.txt", "x\n")).await;
    let turns = cp.turns().unwrap();
    assert_eq!(
        turns[0].before.left_out,
        [LeftOut::NestedRepository {
            path: "vendor/lib".into()
        }]
    );
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(read(&f.project, "vendor/lib/src.txt"), "theirs\n");
    assert!(!f.project.join("mine.txt").exists());
}

/// A name of 200 bytes, 25 directories deep under `root`: a path of 5,025 bytes, past what the
/// system takes in one path (4,096), made a directory at a time through descriptors.
const DEEP_NAME_BYTES: usize = 200;
const DEEP_LEVELS: usize = 25;

/// The deepest directory of the tree [`DEEP_LEVELS`] down, open (made when `make`), or `None`
/// when some level is not there.
fn deep_dir(root: &Path, make: bool) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, mkdirat, openat};
    let name = "d".repeat(DEEP_NAME_BYTES);
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(root, flags, Mode::empty()).ok()?;
    for _ in 0..DEEP_LEVELS {
        if make {
            mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        }
        dir = openat(&dir, name.as_str(), flags, Mode::empty()).ok()?;
    }
    Some(dir)
}

/// What `deep.txt` at the bottom of the deep tree under `root` holds, if it is there.
fn deep_file(root: &Path) -> Option<String> {
    use rustix::fs::{Mode, OFlags, openat};
    let dir = deep_dir(root, false)?;
    let file = openat(
        &dir,
        "deep.txt",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(file), &mut text).ok()?;
    Some(text)
}

#[tokio::test]
async fn a_directory_past_path_max_is_left_out_named_and_left_alone() {
    use rustix::fs::{Mode, OFlags, openat};
    let f = fixture();
    let dir = deep_dir(&f.project, true).unwrap();
    let file = openat(
        &dir,
        "deep.txt",
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&file, b"deep\n").unwrap();
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "mine.txt", "x\n")).await;
    let turns = cp.turns().unwrap();
    // Named by every capture, before the turn and after it: nothing under it is captured.
    for snapshot in [&turns[0].before, turns[0].after.as_ref().unwrap()] {
        let too_long: Vec<&LeftOut> = snapshot
            .left_out
            .iter()
            .filter(|l| matches!(l, LeftOut::PathTooLong { .. }))
            .collect();
        assert_eq!(too_long.len(), 1, "{:?}", snapshot.left_out);
        let path = too_long[0].path();
        assert!(
            path.starts_with(&"d".repeat(DEEP_NAME_BYTES)) && path.len() > 3000,
            "{path}"
        );
        let said = too_long[0].describe();
        assert!(
            said.contains("longer than the system takes") && said.len() < 400,
            "{said}"
        );
    }
    cp.rewind(rewind_code(1)).await.unwrap();
    assert!(!f.project.join("mine.txt").exists());
    assert_eq!(
        deep_file(&f.project).as_deref(),
        Some("deep\n"),
        "left alone"
    );
}

#[tokio::test]
async fn a_change_outside_the_session_refuses_the_rewind_and_names_it_unless_forced() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "by the session\n")).await;
    write(&f.project, "notes.txt", "the user's editor\n");
    let err = cp.rewind(rewind_code(1)).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::ChangedOutside { files } if files == &["notes.txt"]),
        "{err}"
    );
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(
        read(&f.project, "a.txt"),
        "by the session\n",
        "nothing restored"
    );
    cp.rewind(RewindRequest {
        force: true,
        ..rewind_code(1)
    })
    .await
    .unwrap();
    assert_eq!(read(&f.project, "a.txt"), "a\n");
    assert!(!f.project.join("notes.txt").exists());
}

#[tokio::test]
async fn unknown_turns_and_sessions_and_nothing_to_undo_are_clear_errors() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let err = SessionCheckpoints::existing(&f.home, &f.project, "nosuch", &config())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CheckpointError::NoCheckpoints { .. }),
        "{err}"
    );
    let err = SessionCheckpoints::open(&f.home, &f.project, "../escape", &config())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CheckpointError::InvalidSessionId { .. }),
        "{err}"
    );
    let cp = session(&f, "s1").await;
    turn(&cp, 3, || write(&f.project, "a.txt", "b\n")).await;
    let err = cp.rewind(rewind_code(4)).await.unwrap_err();
    assert!(
        err.to_string().contains("no turn 4") && err.to_string().contains("turns are 3"),
        "{err}"
    );
    let err = cp.diff(1, 3).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::UnknownTurn { turn: 1, .. }),
        "{err}"
    );
    let err = cp.undo(false).await.unwrap_err();
    assert!(
        matches!(err, CheckpointError::NothingToUndo { .. }),
        "{err}"
    );
    // A turn before the first checkpointed one rewinds to that one's start.
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(read(&f.project, "a.txt"), "a\n");
}

#[tokio::test]
async fn a_store_left_half_written_by_a_kill_is_consistent_on_next_use() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
    // What a kill leaves: git's index lock and a torn record line.
    let dir = cp.dir.path().to_path_buf();
    std::fs::write(dir.join("index.lock"), b"").unwrap();
    let mut record = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("record.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut record, br#"{"kind":"before","turn":2,"ts":"#).unwrap();
    drop(cp);
    let cp = session(&f, "s1").await;
    turn(&cp, 2, || write(&f.project, "a.txt", "c\n")).await;
    let turns: Vec<u32> = cp.turns().unwrap().iter().map(|t| t.turn).collect();
    assert_eq!(turns, [1, 2]);
    // An index that is garbage is rebuilt, not an error.
    std::fs::write(dir.join("index"), b"garbage").unwrap();
    turn(&cp, 3, || write(&f.project, "a.txt", "d\n")).await;
    cp.rewind(rewind_code(2)).await.unwrap();
    assert_eq!(read(&f.project, "a.txt"), "b\n");
}

#[tokio::test]
async fn a_conversation_rewind_records_its_cut_and_an_undo_lifts_it() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
    turn(&cp, 2, || write(&f.project, "a.txt", "c\n")).await;
    let outcome = cp
        .rewind(RewindRequest {
            turn: 2,
            code: false,
            conversation: true,
            force: false,
            conversation_items_now: 35,
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.conversation_cut,
        Some(ConversationCut {
            keep: 20,
            until: 35
        })
    );
    assert_eq!(read(&f.project, "a.txt"), "c\n", "the files stay");
    assert_eq!(
        cp.conversation_cuts().unwrap(),
        [ConversationCut {
            keep: 20,
            until: 35
        }]
    );
    cp.undo(false).await.unwrap();
    assert!(cp.conversation_cuts().unwrap().is_empty());
}

#[tokio::test]
async fn a_second_session_of_the_project_shares_objects_and_starts_from_a_warm_index() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let one = session(&f, "s1").await;
    turn(&one, 1, || write(&f.project, "b.txt", "b\n")).await;
    let two = session(&f, "s2").await;
    assert!(two.index.is_file(), "seeded from the first session's index");
    let snap = two.before(1, None).await.unwrap();
    assert_eq!(
        snap.tree,
        one.turns().unwrap()[0].after.as_ref().unwrap().tree
    );
}

#[test]
fn the_raw_diff_and_the_blob_batch_are_read_exactly() {
    let z = "0".repeat(40);
    let a = "a".repeat(40);
    let raw = format!(
        ":000000 100755 {z} {a} A\0bin/run\0:100644 000000 {a} {z} D\0gone\0:160000 160000 {a} {a} M\0sub\0"
    );
    let changes = parse_raw_diff(raw.as_bytes()).unwrap();
    assert_eq!(changes.len(), 2, "a gitlink has no content to restore");
    assert_eq!(changes[0].new.as_ref().unwrap().mode, "100755");
    assert_eq!(changes[1].kind, ChangeKind::Deleted);
    assert!(parse_raw_diff(b":bad\0").is_err());
    let batch = format!("{a} blob 3\nx\ny\n{a} blob 0\n\n");
    assert_eq!(
        parse_batch(batch.as_bytes(), 2).unwrap(),
        [b"x\ny".to_vec(), Vec::new()]
    );
    assert!(parse_batch(format!("{a} blob 9\nab\n").as_bytes(), 1).is_err());
}

#[tokio::test]
async fn a_resume_reads_the_cuts_in_force_and_drops_only_those_items() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
    turn(&cp, 2, || write(&f.project, "a.txt", "c\n")).await;
    assert!(recorded_cuts(&f.home, &f.project, "s1").unwrap().is_empty());
    assert!(
        recorded_cuts(&f.home, &f.project, "never-ran")
            .unwrap()
            .is_empty()
    );
    cp.rewind(RewindRequest {
        turn: 2,
        code: true,
        conversation: true,
        force: false,
        conversation_items_now: 25,
    })
    .await
    .unwrap();
    let cuts = recorded_cuts(&f.home, &f.project, "s1").unwrap();
    assert_eq!(
        cuts,
        [ConversationCut {
            keep: 20,
            until: 25
        }]
    );
    let kept = apply_cuts((0..30).collect(), &cuts);
    assert_eq!(kept, (0..20).chain(25..30).collect::<Vec<_>>());
}

/// What a command could plant for the controller's store git to run: a filter named by
/// `.gitattributes` and defined in the project's `.git/config`, an fsmonitor, hooks, a
/// `.git` gitfile redirected to a repository it made, and a `GIT_*` variable of the controller.
/// The store reads none of it: no planted program runs, and the files are stored byte for byte.
#[tokio::test]
async fn a_planted_filter_fsmonitor_hook_or_gitfile_runs_nothing_in_the_store() {
    let f = fixture();
    git(&f.project, &["init", "-q"]);
    let marker = f.home.join("ran");
    let script = f.project.join("evil.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho ran >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let evil = script.display().to_string();
    let hooks = f.project.display().to_string();
    for (key, value) in [
        ("filter.evil.clean", evil.as_str()),
        ("filter.evil.smudge", evil.as_str()),
        ("filter.evil.required", "true"),
        ("core.fsmonitor", evil.as_str()),
        ("core.hooksPath", hooks.as_str()),
    ] {
        git(&f.project, &["config", key, value]);
    }
    write(&f.project, ".gitattributes", "* filter=evil\n");
    for hook in ["post-checkout", "pre-commit", "post-index-change"] {
        let path = f.project.join(".git/hooks").join(hook);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho {hook} >> {}\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    write(&f.project, "a.txt", "original\r\n");
    // The plants are live: a plain git in the project runs them.
    git(&f.project, &["add", "a.txt"]);
    assert!(
        marker.exists(),
        "the planted filter should run under a plain git"
    );
    git(&f.project, &["rm", "-q", "--cached", "a.txt"]);
    std::fs::remove_file(&marker).unwrap();
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        // A redirected .git: a gitfile naming a repository with its own fsmonitor.
        let other = f.project.join("other");
        git(&f.project, &["init", "-q", "other"]);
        git(&other, &["config", "core.fsmonitor", &evil]);
        std::fs::rename(f.project.join(".git"), f.project.join("real-git")).unwrap();
        write(
            &f.project,
            ".git",
            &format!("gitdir: {}\n", other.join(".git").display()),
        );
        write(&f.project, "a.txt", "changed\r\n");
    })
    .await;
    cp.rewind(rewind_code(1)).await.unwrap();
    // A turn changing only a file the index holds: the resident git stores it.
    turn(&cp, 2, || write(&f.project, "a.txt", "again\r\n")).await;
    assert_eq!(cp.last.resident.pids().len(), 3, "the resident git ran");
    cp.rewind(rewind_code(2)).await.unwrap();
    cp.undo(false).await.unwrap();
    assert!(
        !marker.exists(),
        "a planted program ran: {}",
        read(&f.home, "ran")
    );
    assert_eq!(
        std::fs::read(f.project.join("a.txt")).unwrap(),
        b"again\r\n",
        "stored and restored byte for byte, no filter, no line-ending change"
    );
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(
        std::fs::read(f.project.join("a.txt")).unwrap(),
        b"original\r\n"
    );
}

/// Every file and directory under `root` with all its permission bits (links as `-> target`),
/// `.git` left out.
fn listing_modes(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if rel == ".git" {
                continue;
            }
            if meta.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&path).unwrap().display()
                ));
            } else if meta.is_dir() {
                out.push(format!("{rel}/ {:o}", meta.mode() & 0o7777));
                stack.push(path);
            } else {
                out.push(format!(
                    "{rel} {:o} {}",
                    meta.mode() & 0o7777,
                    std::fs::read_to_string(&path).unwrap_or_default()
                ));
            }
        }
    }
    out.sort();
    out
}

fn chmod(root: &Path, rel: &str, mode: u32) {
    std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn every_permission_bit_of_files_and_directories_rewinds_exactly() {
    let f = fixture();
    // A project made under umask 002, with every kind of exception.
    for (rel, mode) in [
        ("a.txt", 0o664),
        ("b.txt", 0o664),
        ("secret.key", 0o600),
        ("bin/tool", 0o4755),
        ("bin/group", 0o2750),
        ("bin/run.sh", 0o775),
        ("bin/flip", 0o664),
        ("shared/x.txt", 0o664),
        ("private/y.txt", 0o664),
    ] {
        write(&f.project, rel, rel);
        chmod(&f.project, rel, mode);
    }
    chmod(&f.project, "shared", 0o1777);
    chmod(&f.project, "private", 0o700);
    let start = listing_modes(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        chmod(&f.project, "secret.key", 0o644);
        chmod(&f.project, "bin/tool", 0o755);
        chmod(&f.project, "bin/group", 0o750);
        chmod(&f.project, "bin/run.sh", 0o664);
        chmod(&f.project, "bin/flip", 0o775);
        chmod(&f.project, "shared", 0o755);
        chmod(&f.project, "private", 0o755);
        write(&f.project, "a.txt", "changed");
    })
    .await;
    let after = listing_modes(&f.project);
    let turns = cp.turns().unwrap();
    let changed: Vec<String> = cp
        .turn_changes(&turns[0])
        .await
        .unwrap()
        .into_iter()
        .map(|c| format!("{} {}", c.kind.letter(), c.path))
        .collect();
    assert_eq!(
        changed,
        [
            "M a.txt",
            "M bin/flip",
            "M bin/group",
            "M bin/run.sh",
            "M bin/tool",
            "M private",
            "M secret.key",
            "M shared"
        ],
        "mode-only changes are listed too"
    );
    let diff = cp.diff(1, 1).await.unwrap();
    assert!(
        diff.contains("a/bin/tool b/bin/tool\nold mode 104755\nnew mode 100755\n"),
        "{diff}"
    );
    assert!(
        diff.contains("a/shared b/shared\nold mode 041777\nnew mode 040755\n"),
        "{diff}"
    );
    let outcome = cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(
        listing_modes(&f.project),
        start,
        "setuid, setgid, sticky, 0600 and 0700 back"
    );
    assert!(
        outcome
            .report
            .modes_restored
            .contains(&"bin/tool".to_owned()),
        "{:?}",
        outcome.report
    );
    cp.undo(false).await.unwrap();
    assert_eq!(listing_modes(&f.project), after);
}

#[tokio::test]
async fn a_file_and_a_directory_recreated_by_a_rewind_get_their_exact_modes() {
    let f = fixture();
    write(&f.project, "keep.txt", "k");
    write(&f.project, "locked/secret", "s");
    chmod(&f.project, "locked/secret", 0o400);
    chmod(&f.project, "locked", 0o711);
    write(&f.project, "suid", "s");
    chmod(&f.project, "suid", 0o6755);
    let start = listing_modes(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        chmod(&f.project, "locked", 0o755);
        std::fs::remove_dir_all(f.project.join("locked")).unwrap();
        std::fs::remove_file(f.project.join("suid")).unwrap();
    })
    .await;
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing_modes(&f.project), start);
}

#[tokio::test]
async fn a_mode_restore_never_changes_what_a_planted_link_points_at() {
    let f = fixture();
    let outside = f.home.parent().unwrap().join("outside");
    write(&outside, "victim", "theirs");
    chmod(&outside, "victim", 0o644);
    write(&outside, "dir/inner", "theirs");
    chmod(&outside, "dir", 0o755);
    write(&f.project, "secret", "mine");
    chmod(&f.project, "secret", 0o4700);
    write(&f.project, "dir/inner", "mine");
    chmod(&f.project, "dir", 0o1777);
    let start = listing_modes(&f.project);
    let outside_start = listing_modes(&outside);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        std::fs::remove_file(f.project.join("secret")).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), f.project.join("secret")).unwrap();
        std::fs::remove_dir_all(f.project.join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("dir"), f.project.join("dir")).unwrap();
    })
    .await;
    // A mode restore of a file the user then replaced by a link: forced, it still does not
    // follow it.
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing_modes(&f.project), start);
    assert_eq!(
        listing_modes(&outside),
        outside_start,
        "nothing outside changed"
    );
    std::fs::remove_file(f.project.join("secret")).unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), f.project.join("secret")).unwrap();
    let project = ProjectDir::open(&f.project).unwrap();
    assert!(!project.set_mode("secret", 0o4777).unwrap());
    assert!(
        !project
            .set_mode("dir/../secret", 0o777)
            .is_ok_and(|set| set)
    );
    assert_eq!(
        listing_modes(&outside),
        outside_start,
        "nothing outside changed"
    );
}

const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

/// Makes session `id`'s last checkpoint look `days` old.
fn age_session(f: &Fixture, cp: &SessionCheckpoints, days: u64) {
    let _ = f;
    let record = std::fs::File::options()
        .append(true)
        .open(cp.dir.join("record.jsonl"))
        .unwrap();
    record
        .set_modified(std::time::SystemTime::now() - DAY * days as u32)
        .unwrap();
}

/// Whether the store holds object `id`.
async fn holds(cp: &SessionCheckpoints, id: &str) -> bool {
    cp.store()
        .git
        .run(&["cat-file", "-e", id], None, Vec::new())
        .await
        .is_ok()
}

async fn gc(f: &Fixture, retention: Option<std::time::Duration>) -> GcReport {
    let mut reports = collect_garbage(&f.home, std::time::SystemTime::now(), |project| {
        assert_eq!(project, Some(f.project.as_path()));
        retention
    })
    .await
    .unwrap();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

/// A blob of `text` in the store, as `hash-object -w` writes it.
async fn stored(cp: &SessionCheckpoints, text: &str) -> String {
    let id = cp
        .store()
        .git
        .run(
            &["hash-object", "-w", "--stdin"],
            None,
            text.as_bytes().to_vec(),
        )
        .await
        .unwrap();
    String::from_utf8(id).unwrap().trim().to_owned()
}

#[tokio::test]
async fn gc_removes_expired_sessions_and_only_the_objects_no_kept_record_names() {
    let f = fixture();
    write(&f.project, "a.txt", "start\n");
    let old = session(&f, "old").await;
    turn(&old, 1, || {
        write(&f.project, "old.txt", "only the old session saw this\n")
    })
    .await;
    let old_blob = stored(&old, "only the old session saw this\n").await;
    age_session(&f, &old, 40);
    std::fs::remove_file(f.project.join("old.txt")).unwrap();
    let new = session(&f, "new").await;
    turn(&new, 1, || {
        write(&f.project, "a.txt", "the new session's\n")
    })
    .await;
    turn(&new, 2, || write(&f.project, "b.txt", "more\n")).await;
    // What a checkpoint killed before its record line leaves: an object nothing names.
    let orphan = stored(&new, "written by a killed checkpoint\n").await;

    let kept_all = gc(&f, None).await;
    assert_eq!(kept_all.sessions_removed, Vec::<String>::new());
    assert!(
        holds(&old, &old_blob).await,
        "no retention: the old session stays"
    );
    assert!(
        !holds(&new, &orphan).await,
        "an object no record names goes anyway"
    );

    let report = gc(&f, Some(DAY * 30)).await;
    assert_eq!(report.sessions_removed, ["old"]);
    assert_eq!(report.sessions_kept, 1);
    assert!(
        report.objects_removed >= 1 && report.bytes_freed > 0,
        "{report:?}"
    );
    assert_eq!(report.error, None);
    assert!(!holds(&new, &old_blob).await);
    assert!(
        !f.home
            .join("checkpoints")
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().path().join("sessions/old").exists() })
    );
    // Everything the kept session names is still there: it lists, diffs and rewinds.
    assert!(new.diff(1, 2).await.unwrap().contains("the new session's"));
    new.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(read(&f.project, "a.txt"), "start\n");
    new.undo(false).await.unwrap();
    assert_eq!(read(&f.project, "a.txt"), "the new session's\n");
    let again = gc(&f, Some(DAY * 30)).await;
    assert_eq!(
        (again.objects_removed, again.sessions_removed.len()),
        (0, 0)
    );
    // A session that had expired is an unknown one now.
    let err = SessionCheckpoints::existing(&f.home, &f.project, "old", &config())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CheckpointError::NoCheckpoints { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_session_in_use_is_kept_and_an_unreadable_record_stops_the_collection_naming_it() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let busy = session(&f, "busy").await;
    turn(&busy, 1, || write(&f.project, "a.txt", "busy\n")).await;
    age_session(&f, &busy, 90);
    let stale = session(&f, "stale").await;
    turn(&stale, 1, || write(&f.project, "a.txt", "stale\n")).await;
    age_session(&f, &stale, 90);
    let broken = session(&f, "broken").await;
    turn(&broken, 1, || write(&f.project, "a.txt", "broken\n")).await;
    turn(&broken, 2, || write(&f.project, "a.txt", "broken 2\n")).await;
    let record = broken.dir.join("record.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines[1] = "not json".to_owned();
    std::fs::write(&record, lines.join("\n") + "\n").unwrap();
    let orphan = stored(&busy, "garbage\n").await;

    let report = gc(&f, Some(DAY)).await;
    let error = report.error.clone().unwrap();
    assert!(
        error.contains("broken/record.jsonl") && error.contains("nothing"),
        "{error}"
    );
    assert!(report.sessions_removed.is_empty(), "{report:?}");
    assert!(holds(&busy, &orphan).await, "nothing pruned");
    assert!(stale.dir.join("record.jsonl").exists());

    std::fs::remove_dir_all(broken.dir.path()).unwrap();
    let held = std::fs::File::options()
        .append(true)
        .open(busy.dir.join("lock"))
        .unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let report = gc(&f, Some(DAY)).await;
    assert_eq!(report.sessions_removed, ["stale"], "{report:?}");
    assert_eq!(report.sessions_kept, 1, "the busy one, however old");
    drop(held);
    assert!(busy.dir.join("record.jsonl").exists());
    busy.rewind(RewindRequest {
        force: true,
        ..rewind_code(1)
    })
    .await
    .unwrap();
    assert_eq!(read(&f.project, "a.txt"), "a\n");
}

#[tokio::test]
async fn a_collection_killed_at_any_step_leaves_every_kept_checkpoint_restorable() {
    let f = fixture();
    for i in 0..50 {
        write(&f.project, &format!("src/f{i}.txt"), &format!("{i}\n"));
    }
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "src/f0.txt", "changed\n")).await;
    // Garbage enough for `git prune` to take a while.
    let store = cp.store().dir().to_path_buf();
    let blobs: String = (0..1500).map(|i| format!("garbage {i}\n")).collect();
    // A first collection writes the keep refs; then what kills at each step leave behind.
    gc(&f, Some(DAY)).await;
    store_many(&cp, &blobs);
    std::fs::create_dir_all(store.join("sessions/.expired-gone/half")).unwrap();
    std::fs::write(store.join("git/packed-refs.intendant-tmp"), "torn").unwrap();
    // A prune killed midway.
    let mut prune = std::process::Command::new("git")
        .args(["prune", "--expire=now"])
        .env("GIT_DIR", store.join("git"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let _ = prune.kill();
    let _ = prune.wait();
    // Every kept checkpoint restores; a checkpoint taken now works.
    turn(&cp, 2, || write(&f.project, "src/f1.txt", "changed\n")).await;
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(read(&f.project, "src/f0.txt"), "0\n");
    let report = gc(&f, Some(DAY)).await;
    assert_eq!(report.error, None);
    assert!(!store.join("sessions/.expired-gone").exists());
    assert!(!store.join("git/packed-refs.intendant-tmp").exists());
    assert!(!holds(&cp, &stored_id("garbage 7\n")).await);
    cp.undo(false).await.unwrap();
    assert_eq!(read(&f.project, "src/f1.txt"), "changed\n");
}

/// Stores one blob per line of `lines` (each with its newline), in one git run.
fn store_many(cp: &SessionCheckpoints, lines: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let mut paths = String::new();
    for (i, line) in lines.lines().enumerate() {
        let p = tmp.path().join(i.to_string());
        std::fs::write(&p, format!("{line}\n")).unwrap();
        paths.push_str(&format!("{}\n", p.display()));
    }
    let mut child = std::process::Command::new("git")
        .args(["hash-object", "-w", "--stdin-paths"])
        .env("GIT_DIR", cp.store().dir().join("git"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), paths.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
}

/// The id git gives a blob of `text`, without storing it.
fn stored_id(text: &str) -> String {
    let mut child = std::process::Command::new("git")
        .args(["hash-object", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The store's collection lock of `cp`, taken exclusively as a collection in progress holds it.
fn hold_the_store_lock(cp: &SessionCheckpoints) -> std::fs::File {
    let gc_lock = std::fs::File::options()
        .append(true)
        .open(cp.store().dir().join("gc.lock"))
        .unwrap();
    rustix::fs::flock(&gc_lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    gc_lock
}

// One thread runs the test and the waiting checkpoint: the wait is off it, on the blocking pool.
#[tokio::test]
async fn a_checkpoint_waits_for_a_collection_in_progress() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
    let gc_lock = hold_the_store_lock(&cp);
    let home = f.home.clone();
    let project = f.project.clone();
    let waiting = tokio::spawn(async move {
        let cp = SessionCheckpoints::open(&home, &project, "s1", &config())
            .await
            .unwrap();
        cp.before(2, None).await.unwrap();
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the checkpoint waits for the collection"
    );
    drop(gc_lock);
    waiting.await.unwrap();
    assert_eq!(cp.turns().unwrap().len(), 2);
}

/// A checkpoint waiting for the store's lock leaves the runtime's workers to the lock's holder.
/// The daemon's collection at start holds the lock while it awaits `git`; sessions resumed
/// then waited for it inside `flock` on the async workers, and with as many waiting as there
/// are workers nothing could run the collection again: the daemon hung (the soak, after its
/// restart). Here one worker, a holder that releases on a timer, and a checkpoint queued behind.
#[test]
fn a_checkpoint_waiting_for_the_store_lock_leaves_the_worker_to_its_holder() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let f = fixture();
            write(&f.project, "a.txt", "a\n");
            let cp = std::sync::Arc::new(session(&f, "s1").await);
            turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
            let gc_lock = hold_the_store_lock(&cp);
            // Both on the one worker: the holder needs it again when its timer fires.
            let holder = tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                drop(gc_lock);
            });
            let waiter = {
                let cp = cp.clone();
                tokio::spawn(async move { cp.before(2, None).await.map(|_| ()) })
            };
            holder.await.unwrap();
            waiter.await.unwrap().unwrap();
            assert_eq!(cp.turns().unwrap().len(), 2);
        });
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the checkpoint held the only worker while the lock's holder waited for it");
}

#[tokio::test]
async fn a_file_over_the_cap_made_outside_the_session_refuses_the_rewind_that_would_remove_it() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let cp = capped_session(&f).await;
    turn(&cp, 1, || write(&f.project, "a.txt", "b\n")).await;
    // The user's own 2 GiB file, after the session's last checkpoint: no checkpoint holds it,
    // so a rewind to before turn 1 (which had none) would remove it for good.
    let big = std::fs::File::create(f.project.join("dataset.bin")).unwrap();
    big.set_len(2 * 1024 * 1024 * 1024).unwrap();
    let err = cp.rewind(rewind_code(1)).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::ChangedOutside { files } if files == &["dataset.bin"]),
        "{err}"
    );
    assert!(f.project.join("dataset.bin").exists());
    let preview = cp.preview(Some(1), true, false, 0).await.unwrap();
    assert!(
        preview
            .changes
            .iter()
            .any(|c| c.path == "dataset.bin" && c.kind == ChangeKind::Deleted),
        "{:?}",
        preview.changes
    );
    // One that grew is seen too.
    turn(&cp, 2, || big.set_len(3 * 1024 * 1024 * 1024).unwrap()).await;
    let listed = cp.turn_changes(&cp.turns().unwrap()[1]).await.unwrap();
    assert_eq!(
        listed,
        [Change {
            path: "dataset.bin".into(),
            kind: ChangeKind::Modified
        }]
    );
}

/// The checkpointed turn `n`'s changes, as `M path` lines.
async fn changed_in(cp: &SessionCheckpoints, n: u32) -> Vec<String> {
    let turns = cp.turns().unwrap();
    let turn = turns.iter().find(|t| t.turn == n).unwrap();
    cp.turn_changes(turn)
        .await
        .unwrap()
        .into_iter()
        .map(|c| format!("{} {}", c.kind.letter(), c.path))
        .collect()
}

#[tokio::test]
async fn a_chmod_alone_is_captured_and_rewound_exactly_in_the_same_second_and_later() {
    let f = fixture();
    for rel in ["a.txt", "b.txt"] {
        write(&f.project, rel, rel);
        chmod(&f.project, rel, 0o644);
    }
    let start = listing_modes(&f.project);
    let cp = session(&f, "s1").await;
    // In the second of the last capture, where git's whole-second stat compare sees nothing.
    turn(&cp, 1, || chmod(&f.project, "a.txt", 0o600)).await;
    // Seconds after b.txt last changed, where git's compare is what sees it.
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    turn(&cp, 2, || chmod(&f.project, "b.txt", 0o600)).await;
    assert_eq!(changed_in(&cp, 1).await, ["M a.txt"]);
    assert_eq!(changed_in(&cp, 2).await, ["M b.txt"]);
    let end = listing_modes(&f.project);
    let outcome = cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing_modes(&f.project), start, "both back to 0644");
    assert_eq!(outcome.report.modes_restored, ["a.txt", "b.txt"]);
    cp.undo(false).await.unwrap();
    assert_eq!(listing_modes(&f.project), end, "both 0600 again");
}

#[tokio::test]
async fn a_chmod_by_an_editor_after_the_last_checkpoint_refuses_the_rewind_and_is_in_the_next() {
    let f = fixture();
    write(&f.project, "a.txt", "a");
    write(&f.project, "b.txt", "b");
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || write(&f.project, "a.txt", "by the session")).await;
    chmod(&f.project, "b.txt", 0o600);
    let err = cp.rewind(rewind_code(1)).await.unwrap_err();
    assert!(
        matches!(&err, CheckpointError::ChangedOutside { files } if files == &["b.txt"]),
        "{err}"
    );
    let next = cp.before(2, None).await.unwrap();
    let turns = cp.turns().unwrap();
    let outside = cp
        .store()
        .changes(turns[0].after.as_ref().unwrap(), &next)
        .await
        .unwrap();
    assert_eq!(
        outside,
        [Change {
            path: "b.txt".into(),
            kind: ChangeKind::Modified
        }]
    );
}

#[tokio::test]
async fn a_rewind_by_another_process_is_seen_by_the_session_that_carries_its_last_capture() {
    let f = fixture();
    write(&f.project, "a.txt", "a");
    chmod(&f.project, "a.txt", 0o644);
    let start = listing_modes(&f.project);
    let daemon = session(&f, "s1").await;
    turn(&daemon, 1, || {
        write(&f.project, "a.txt", "b");
        chmod(&f.project, "a.txt", 0o600);
        write(&f.project, "c.txt", "c");
    })
    .await;
    // The same session's checkpoints opened again, as `intendant rewind` does.
    let cli = session(&f, "s1").await;
    cli.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing_modes(&f.project), start);
    let next = daemon.before(2, None).await.unwrap();
    let rewound = cli
        .entries()
        .unwrap()
        .last()
        .unwrap()
        .snapshot_after()
        .clone();
    assert_eq!(
        daemon.store().changes(&rewound, &next).await.unwrap(),
        [],
        "the daemon's checkpoint holds the rewound files and modes"
    );
    daemon.after(2).await.unwrap();
    turn(&daemon, 3, || chmod(&f.project, "a.txt", 0o640)).await;
    assert_eq!(changed_in(&daemon, 3).await, ["M a.txt"]);
}

#[tokio::test]
async fn a_checkpoint_that_finds_nothing_changed_writes_no_index_and_reuses_the_tree() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    write(&f.project, "a.txt", "a");
    std::fs::write(f.project.join("big.bin"), vec![7u8; 2 * 1024 * 1024]).unwrap();
    let cp = capped_session(&f).await;
    cp.before(1, None).await.unwrap();
    write(&f.project, "a.txt", "b");
    // Out of git's racy second, so git does not list a.txt again to compare its content.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let after = cp.after(1).await.unwrap();
    let index = |cp: &SessionCheckpoints| {
        let meta = std::fs::metadata(&cp.index).unwrap();
        (meta.ino(), meta.mtime(), meta.mtime_nsec())
    };
    let written = index(&cp);
    let before = cp.before(2, None).await.unwrap();
    assert_eq!(before, after, "the same tree, left-out file and mode table");
    assert_eq!(index(&cp), written, "the index was not written again");
    assert_eq!(before.left_out.len(), 1, "{:?}", before.left_out);
}

#[tokio::test]
async fn a_setuid_bit_set_just_before_a_first_capture_is_kept_and_rewound() {
    let f = fixture();
    write(&f.project, "tool", "v1");
    chmod(&f.project, "tool", 0o755);
    let start = listing_modes(&f.project);
    let daemon = session(&f, "s1").await;
    turn(&daemon, 1, || chmod(&f.project, "tool", 0o4755)).await;
    let after = listing_modes(&f.project);
    // A first capture in another process, the bit set a moment ago: no outside change.
    let cli = session(&f, "s1").await;
    assert_eq!(cli.changed_outside().await.unwrap(), []);
    cli.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing_modes(&f.project), start, "the bit is gone");
    let cli = session(&f, "s1").await;
    cli.undo(false).await.unwrap();
    assert_eq!(listing_modes(&f.project), after, "and back");
}

/// The store's git directory moved away for the length of `f`: a capture that starts a `git`
/// fails meanwhile.
async fn without_git<T>(cp: &SessionCheckpoints, f: impl AsyncFnOnce() -> T) -> T {
    let git = cp.store().dir().join("git");
    let away = cp.store().dir().join("git.away");
    std::fs::rename(&git, &away).unwrap();
    let out = f().await;
    std::fs::rename(&away, &git).unwrap();
    out
}

#[tokio::test]
async fn a_capture_that_finds_nothing_changed_starts_no_git_and_every_change_is_seen() {
    let f = fixture();
    write(&f.project, "a.txt", "aaaa");
    write(&f.project, "dir/b.txt", "b");
    write(&f.project, "plain", "p");
    std::os::unix::fs::symlink("a.txt", f.project.join("link")).unwrap();
    let cp = session(&f, "s1").await;
    let first = cp.before(1, None).await.unwrap();
    let again = without_git(&cp, async || cp.after(1).await).await.unwrap();
    assert_eq!(again, first, "no git ran, the same snapshot");
    // Each change, made at once after a capture (in its clock tick, or close), is seen; the
    // files stay small and the same size, so only their content, mode or kind tells.
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let changes: Vec<Step> = vec![
        ("a.txt", Box::new(|| write(&f.project, "a.txt", "bbbb"))),
        (
            "dir/b.txt",
            Box::new(|| chmod(&f.project, "dir/b.txt", 0o600)),
        ),
        (
            "link",
            Box::new(|| {
                std::fs::remove_file(f.project.join("link")).unwrap();
                std::os::unix::fs::symlink("b.txt", f.project.join("link")).unwrap();
            }),
        ),
        (
            "plain",
            Box::new(|| {
                std::fs::remove_file(f.project.join("plain")).unwrap();
                write(&f.project, "plain/inner", "p");
            }),
        ),
        ("new.txt", Box::new(|| write(&f.project, "new.txt", "n"))),
    ];
    let mut turn = 2;
    for (path, change) in changes {
        let before = cp.before(turn, None).await.unwrap();
        change();
        let after = cp.after(turn).await.unwrap();
        let seen: Vec<String> = cp
            .store()
            .changes(&before, &after)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert!(
            seen.iter().any(|p| p == path),
            "turn {turn}: {path} not seen in {seen:?}"
        );
        turn += 1;
    }
    // The user's editor between turns: the next capture holds it, with no git then either
    // once it is captured.
    write(&f.project, "dir/b.txt", "B");
    let last = cp
        .entries()
        .unwrap()
        .last()
        .unwrap()
        .snapshot_after()
        .clone();
    let next = cp.before(turn, None).await.unwrap();
    assert_ne!(next.tree, last.tree);
    let same = without_git(&cp, async || cp.after(turn).await)
        .await
        .unwrap();
    assert_eq!(same, next);
}

#[tokio::test]
async fn a_tree_too_big_for_a_stat_table_keeps_the_git_listing() {
    let f = fixture();
    for i in 0..=stat_table::MAX_ENTRIES / 100 {
        let dir = f.project.join(format!("d{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..100 {
            std::fs::write(dir.join(j.to_string()), "").unwrap();
        }
    }
    let cp = session(&f, "s1").await;
    let first = cp.before(1, None).await.unwrap();
    let err = without_git(&cp, async || cp.after(1).await).await;
    assert!(err.is_err(), "git ran: the session does not walk its tree");
    assert_eq!(cp.after(1).await.unwrap(), first);
}

/// A repository with an ignore file, tracked and ignored files and a link: what the capture
/// equality tests change, kind by kind.
fn mixed_project(root: &Path) {
    git(root, &["init", "-q"]);
    write(root, ".gitignore", "*.log\nbuild/\n");
    write(root, "a.txt", "a");
    write(root, "b.txt", "b");
    write(root, "src/c.rs", "c");
    write(root, "run.log", "ignored");
    write(root, "build/out", "ignored");
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
}

#[tokio::test]
async fn what_a_session_captures_from_its_walk_is_what_a_fresh_capture_finds() {
    let f = fixture();
    mixed_project(&f.project);
    let cp = capped_session(&f).await;
    let changes: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| write(&f.project, "a.txt", "changed")),
        Box::new(|| std::fs::remove_file(f.project.join("b.txt")).unwrap()),
        Box::new(|| {
            std::fs::remove_file(f.project.join("link")).unwrap();
            std::os::unix::fs::symlink("src/c.rs", f.project.join("link")).unwrap();
        }),
        Box::new(|| {
            std::fs::remove_file(f.project.join("a.txt")).unwrap();
            std::os::unix::fs::symlink("src", f.project.join("a.txt")).unwrap();
        }),
        Box::new(|| chmod(&f.project, "src/c.rs", 0o755)),
        Box::new(|| chmod(&f.project, "src", 0o700)),
        Box::new(|| write(&f.project, "run.log", "ignored, changed")),
        Box::new(|| std::fs::remove_file(f.project.join("run.log")).unwrap()),
        Box::new(|| write(&f.project, "build/more", "ignored, new")),
        Box::new(|| write(&f.project, "src/new.rs", "new")),
        Box::new(|| write(&f.project, ".gitignore", "*.log\n")),
        Box::new(|| {
            std::fs::write(f.project.join("src/c.rs"), vec![b'x'; 2 * 1024 * 1024]).unwrap()
        }),
        Box::new(|| write(&f.project, "src/c.rs", "small again")),
        Box::new(|| std::fs::remove_dir_all(f.project.join("src")).unwrap()),
    ];
    cp.before(1, None).await.unwrap();
    for (i, change) in changes.iter().enumerate() {
        change();
        let ours = cp.after(1).await.unwrap();
        equals_fresh(&cp, &f, &ours, &format!("change {i}")).await;
    }
}

/// The index file's identity and time: unchanged while captures leave it behind.
fn index_stamp(cp: &SessionCheckpoints) -> (u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&cp.index).unwrap();
    (meta.ino(), meta.mtime(), meta.mtime_nsec())
}

/// A capture of the project from scratch (an index of its own) equals `ours`: the tree, what
/// is left out and every mode.
async fn equals_fresh(cp: &SessionCheckpoints, f: &Fixture, ours: &Snapshot, what: &str) {
    let fresh_index = f.home.join("fresh-index");
    let _ = std::fs::remove_file(&fresh_index);
    let fresh = cp.store().snapshot(&fresh_index).await.unwrap();
    assert_eq!(ours.tree, fresh.tree, "{what}");
    assert_eq!(ours.left_out, fresh.left_out, "{what}");
    assert_eq!(
        cp.store().changes(ours, &fresh).await.unwrap(),
        [],
        "{what}: modes"
    );
}

/// Whether process `pid` is gone (not even a zombie left to reap), within five seconds.
async fn gone(pid: u32) -> bool {
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn captures_through_the_resident_git_equal_a_fresh_capture_after_every_kind_of_change() {
    let f = fixture();
    mixed_project(&f.project);
    write(&f.project, "src/deep/er/d.rs", "d");
    write(&f.project, "only/one.txt", "1");
    write(&f.project, "tool.sh", "#!/bin/sh\n");
    let cp = capped_session(&f).await;
    cp.before(1, None).await.unwrap();
    // Changes to files the index holds only: each taken by the resident git, the index left
    // as the first capture wrote it.
    let resident: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| write(&f.project, "a.txt", "changed")),
        Box::new(|| write(&f.project, "src/deep/er/d.rs", "deep, changed")),
        Box::new(|| {
            write(&f.project, "b.txt", "both");
            write(&f.project, "src/c.rs", "at once");
        }),
        Box::new(|| chmod(&f.project, "tool.sh", 0o755)),
        Box::new(|| std::fs::remove_file(f.project.join("b.txt")).unwrap()),
        // The directory's one file goes: so does the directory, from the tree.
        Box::new(|| std::fs::remove_file(f.project.join("only/one.txt")).unwrap()),
        Box::new(|| write(&f.project, "a.txt", "a")),
        Box::new(|| chmod(&f.project, "src/c.rs", 0o4755)),
    ];
    let index = index_stamp(&cp);
    for (i, change) in resident.iter().enumerate() {
        change();
        let ours = cp.after(1).await.unwrap();
        assert_eq!(
            cp.last.resident.pids().len(),
            3,
            "change {i}: the resident git took it"
        );
        assert_eq!(
            index_stamp(&cp),
            index,
            "change {i}: the index was not written"
        );
        equals_fresh(&cp, &f, &ours, &format!("resident change {i}")).await;
    }
    // Then every other kind, with the index behind what the tree holds: each taken by git's
    // listing (which brings the index level) or, for files the index holds, the resident git.
    let others: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| {
            std::fs::remove_file(f.project.join("link")).unwrap();
            std::os::unix::fs::symlink("src/c.rs", f.project.join("link")).unwrap();
        }),
        Box::new(|| write(&f.project, "a.txt", "resident again")),
        Box::new(|| {
            std::fs::remove_file(f.project.join("a.txt")).unwrap();
            std::os::unix::fs::symlink("src", f.project.join("a.txt")).unwrap();
        }),
        Box::new(|| chmod(&f.project, "src", 0o700)),
        Box::new(|| write(&f.project, "run.log", "ignored, changed")),
        Box::new(|| std::fs::remove_file(f.project.join("run.log")).unwrap()),
        Box::new(|| write(&f.project, "build/more", "ignored, new")),
        Box::new(|| write(&f.project, "src/new.rs", "new")),
        Box::new(|| write(&f.project, "src/new.rs", "new, changed")),
        Box::new(|| write(&f.project, ".gitignore", "*.log\n")),
        Box::new(|| {
            std::fs::write(f.project.join("src/c.rs"), vec![b'x'; 2 * 1024 * 1024]).unwrap()
        }),
        Box::new(|| write(&f.project, "src/c.rs", "small again")),
        Box::new(|| std::fs::remove_dir_all(f.project.join("src")).unwrap()),
        Box::new(|| std::fs::remove_file(f.project.join("tool.sh")).unwrap()),
        Box::new(|| {
            for entry in std::fs::read_dir(&f.project).unwrap() {
                let path = entry.unwrap().path();
                if path.file_name().is_some_and(|n| n != ".git") {
                    if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(path).unwrap();
                    } else {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
        }),
    ];
    for (i, change) in others.iter().enumerate() {
        change();
        let ours = cp.after(1).await.unwrap();
        equals_fresh(&cp, &f, &ours, &format!("other change {i}")).await;
    }
    assert_eq!(cp.take_notices(), Vec::<String>::new());
    let pids = cp.last.resident.pids();
    drop(cp);
    for pid in pids {
        assert!(gone(pid).await, "helper {pid} outlived its session");
    }
}

#[tokio::test]
async fn a_resident_git_killed_or_hung_mid_session_falls_back_with_a_notice() {
    let f = fixture();
    write(&f.project, "a.txt", "a");
    write(&f.project, "dir/b.txt", "b");
    let cp = session(&f, "s1").await;
    cp.last
        .resident
        .set_deadline(std::time::Duration::from_secs(2));
    cp.before(1, None).await.unwrap();
    write(&f.project, "a.txt", "resident");
    cp.after(1).await.unwrap();
    let mut all = Vec::new();
    // Each helper in turn: killed (hash-object, cat-file) or stopped (mktree, hung).
    for (i, signal) in [libc::SIGKILL, libc::SIGKILL, libc::SIGSTOP]
        .into_iter()
        .enumerate()
    {
        let pids = cp.last.resident.pids();
        assert_eq!(pids.len(), 3, "round {i}: running again");
        all.extend(pids.iter().copied());
        let pid = i32::try_from(pids[i]).unwrap();
        // SAFETY: kill(2) with a pid this session started and still holds.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        write(&f.project, "dir/b.txt", &format!("round {i}"));
        let ours = cp.after(1).await.unwrap();
        equals_fresh(&cp, &f, &ours, &format!("round {i}")).await;
        let notices = cp.take_notices();
        assert_eq!(notices.len(), 1, "round {i}: {notices:?}");
        assert!(
            notices[0].contains("resident git failed"),
            "round {i}: {notices:?}"
        );
        // The next capture starts them again (after the third failure: no more).
        write(&f.project, "a.txt", &format!("next {i}"));
        let ours = cp.after(1).await.unwrap();
        equals_fresh(&cp, &f, &ours, &format!("after round {i}")).await;
    }
    assert!(
        cp.last.resident.pids().is_empty(),
        "given up after three failures"
    );
    assert_eq!(cp.take_notices(), Vec::<String>::new());
    drop(cp);
    for pid in all {
        assert!(gone(pid).await, "helper {pid} was left behind");
    }
}

/// The rewind's own capture (and the undo's), taken from what the restore did when the session
/// walks no more, against a fresh capture of the project from scratch.
async fn assert_recorded_as_found(cp: &SessionCheckpoints, f: &Fixture, what: &str) {
    let recorded = cp
        .entries()
        .unwrap()
        .last()
        .unwrap()
        .snapshot_after()
        .clone();
    equals_fresh(cp, f, &recorded, what).await;
    // And the session's next capture, through its index, agrees.
    assert_eq!(
        cp.changed_outside().await.unwrap(),
        [],
        "{what}: next capture"
    );
}

#[tokio::test]
async fn a_rewind_in_a_session_that_walks_no_more_records_what_a_fresh_capture_finds() {
    let f = fixture();
    git(&f.project, &["init", "-q"]);
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "a.txt", "a");
    write(&f.project, "b.txt", "b");
    write(&f.project, "src/c.rs", "c");
    write(&f.project, "src/d/e.rs", "e");
    write(&f.project, "run.log", "ignored");
    std::os::unix::fs::symlink("a.txt", f.project.join("link")).unwrap();
    let cp = capped_session(&f).await;
    cp.walk_no_more();
    let project = f.project.clone();
    turn(&cp, 1, || {
        write(&project, "a.txt", "changed");
        std::fs::remove_file(project.join("b.txt")).unwrap();
        std::fs::rename(project.join("src/d"), project.join("src/moved")).unwrap();
        std::fs::remove_file(project.join("link")).unwrap();
        std::os::unix::fs::symlink("src", project.join("link")).unwrap();
        chmod(&project, "src/c.rs", 0o755);
        chmod(&project, "src", 0o700);
        std::fs::write(project.join("big.bin"), vec![b'x'; 2 * 1024 * 1024]).unwrap();
        write(&project, "src/new.rs", "new");
        write(&project, "run.log", "ignored, changed");
    })
    .await;
    turn(&cp, 2, || {
        std::fs::remove_file(project.join("a.txt")).unwrap();
        write(&project, "a.txt/inner", "a file turned directory");
        std::fs::remove_dir_all(project.join("src/moved")).unwrap();
        write(&project, "src/moved", "a directory turned file");
        std::fs::remove_file(project.join("big.bin")).unwrap();
        write(&project, "big.bin/small", "a large file turned directory");
    })
    .await;
    turn(&cp, 3, || {
        std::fs::remove_dir_all(project.join("src")).unwrap();
        std::fs::write(project.join("huge.bin"), vec![b'y'; 2 * 1024 * 1024]).unwrap();
    })
    .await;
    // A file over the cap is not captured: the rewind to before turn 3 removes it, and the
    // undos cannot bring it back.
    let mut before_rewinds = listing(&f.project);
    before_rewinds.retain(|entry| !entry.starts_with("huge.bin "));
    for to in [3, 2, 1] {
        cp.rewind(rewind_code(to)).await.unwrap();
        assert_recorded_as_found(&cp, &f, &format!("rewind to {to}")).await;
    }
    assert_eq!(read(&f.project, "b.txt"), "b");
    assert_eq!(read(&f.project, "src/d/e.rs"), "e");
    for n in 0..3 {
        cp.undo(false).await.unwrap();
        assert_recorded_as_found(&cp, &f, &format!("undo {n}")).await;
    }
    assert_eq!(listing(&f.project), before_rewinds);
    // A restored ignore file changes what is ignored: that capture lists the project.
    turn(&cp, 4, || {
        write(&project, ".gitignore", "");
    })
    .await;
    cp.rewind(rewind_code(4)).await.unwrap();
    assert_recorded_as_found(&cp, &f, "rewind of an ignore file").await;
}

#[tokio::test]
async fn a_resting_session_holds_no_resident_git_and_its_next_turn_starts_it_again() {
    let f = fixture();
    write(&f.project, "a.txt", "a");
    let cp = session(&f, "s1").await;
    cp.before(1, None).await.unwrap();
    write(&f.project, "a.txt", "resident");
    cp.after(1).await.unwrap();
    let pids = cp.last.resident.pids();
    assert_eq!(pids.len(), 3, "the resident git took the turn");
    cp.rest();
    assert!(cp.last.resident.pids().is_empty());
    for pid in pids {
        assert!(gone(pid).await, "helper {pid} outlived the rest");
    }
    cp.before(2, None).await.unwrap();
    write(&f.project, "a.txt", "after the rest");
    let ours = cp.after(2).await.unwrap();
    assert_eq!(cp.last.resident.pids().len(), 3, "started again");
    equals_fresh(&cp, &f, &ours, "after the rest").await;
    assert_eq!(cp.take_notices(), Vec::<String>::new());
}

/// A project of `count` small files in ten directories, with an executable, a link, an empty
/// file and a file over `capped_session`'s cap among them.
fn big_project(root: &Path, count: usize) {
    for i in 0..count {
        write(
            root,
            &format!("d{}/f{i}.txt", i % 10),
            &format!("file {i}\n"),
        );
    }
    write(root, "run.sh", "#!/bin/sh\n");
    chmod(root, "run.sh", 0o755);
    write(root, "empty", "");
    std::os::unix::fs::symlink("d1/f1.txt", root.join("link")).unwrap();
    std::fs::write(root.join("large.bin"), vec![b'x'; 2 * 1024 * 1024]).unwrap();
}

/// The tree plain git makes of `project` (`git add -A && git write-tree` in a repository of
/// its own, outside the project), for a project holding no ignore file.
fn plain_tree(project: &Path, git_dir: &Path, skip: &str) -> String {
    let dirs = [
        format!("--git-dir={}", git_dir.display()),
        format!("--work-tree={}", project.display()),
    ];
    let run = |args: &[&str]| {
        let all: Vec<&str> = dirs
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        git(project, &all).trim().to_owned()
    };
    run(&["init", "-q"]);
    run(&["add", "-A", "--", ".", &format!(":!{skip}")]);
    run(&["write-tree"])
}

#[tokio::test]
async fn a_big_first_checkpoint_goes_into_one_pack_and_holds_what_git_would() {
    let f = fixture();
    big_project(&f.project, bulk::BULK_MIN + 100);
    let cp = capped_session(&f).await;
    cp.walk_no_more();
    let first = cp.before(1, None).await.unwrap();
    let count = bulk::ObjectCount::of(&cp.store().git).await.unwrap();
    assert_eq!(count.packs, 1, "{count:?}");
    assert!(count.packed > bulk::BULK_MIN as u64, "{count:?}");
    assert!(
        count.loose < 50,
        "only trees and the mode table are loose: {count:?}"
    );
    assert_eq!(cp.take_notices(), Vec::<String>::new());
    let expected = plain_tree(&f.project, &f.home.join("plain"), "large.bin");
    assert_eq!(first.tree, expected);
    assert_eq!(
        first.left_out,
        [LeftOut::TooLarge {
            path: "large.bin".to_owned(),
            bytes: 2 * 1024 * 1024
        }]
    );
    // The index knows every file's stat: a capture that finds nothing changed writes none.
    let stamp = std::fs::metadata(&cp.index).unwrap().modified().unwrap();
    assert_eq!(cp.after(1).await.unwrap(), first);
    assert_eq!(
        std::fs::metadata(&cp.index).unwrap().modified().unwrap(),
        stamp
    );
    // Every kind of path rewinds from the pack.
    cp.before(2, None).await.unwrap();
    write(&f.project, "d3/f3.txt", "changed\n");
    std::fs::remove_file(f.project.join("link")).unwrap();
    std::fs::remove_file(f.project.join("run.sh")).unwrap();
    std::fs::remove_file(f.project.join("empty")).unwrap();
    cp.after(2).await.unwrap();
    cp.rewind(rewind_code(2)).await.unwrap();
    assert_eq!(read(&f.project, "d3/f3.txt"), "file 3\n");
    assert_eq!(
        std::fs::read_link(f.project.join("link")).unwrap(),
        Path::new("d1/f1.txt")
    );
    let mode = std::fs::metadata(f.project.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(read(&f.project, "empty"), "");
    assert_eq!(cp.after(3).await.unwrap().tree, expected);
}

#[tokio::test]
async fn a_small_first_checkpoint_and_a_store_that_holds_the_files_write_no_pack() {
    let f = fixture();
    big_project(&f.project, bulk::BULK_MIN - 10);
    let cp = session(&f, "s1").await;
    cp.before(1, None).await.unwrap();
    assert_eq!(
        bulk::ObjectCount::of(&cp.store().git).await.unwrap().packs,
        0
    );
    // A session whose index is lost captures from scratch, with every file already stored.
    for i in 0..20 {
        write(&f.project, &format!("more/{i}"), &i.to_string());
    }
    std::fs::remove_file(&cp.index).unwrap();
    let other = session(&f, "s2").await;
    assert!(!other.index.exists());
    other.before(1, None).await.unwrap();
    assert_eq!(
        bulk::ObjectCount::of(&cp.store().git).await.unwrap().packs,
        0
    );
}

#[tokio::test]
async fn a_pack_that_cannot_be_written_leaves_the_first_checkpoint_whole_and_says_so() {
    let f = fixture();
    big_project(&f.project, bulk::BULK_MIN + 10);
    let cp = capped_session(&f).await;
    // fast-import cannot make its pack where a file stands in for the directory.
    let packs = cp.store().git.git_dir.join("objects/pack");
    std::fs::remove_dir_all(&packs).unwrap();
    std::fs::write(&packs, "").unwrap();
    let first = cp.before(1, None).await.unwrap();
    assert_eq!(
        first.tree,
        plain_tree(&f.project, &f.home.join("plain"), "large.bin")
    );
    let notices = cp.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("into one pack failed"), "{notices:?}");
    assert!(notices[0].contains("fast-import"), "{notices:?}");
    std::fs::remove_file(&packs).unwrap();
    cp.before(2, None).await.unwrap();
    write(&f.project, "d1/f1.txt", "changed\n");
    cp.after(2).await.unwrap();
    cp.rewind(rewind_code(2)).await.unwrap();
    assert_eq!(read(&f.project, "d1/f1.txt"), "file 1\n");
}

#[tokio::test]
async fn gc_packs_a_first_checkpoints_pack_again_with_only_what_kept_records_reach() {
    let f = fixture();
    let files = bulk::BULK_MIN + 10;
    let dropped = files / 2;
    big_project(&f.project, files);
    let old = session(&f, "old").await;
    old.walk_no_more();
    turn(&old, 1, || {
        write(&f.project, "d2/f2.txt", "the old session's\n")
    })
    .await;
    let gone = stored(&old, "file 5\n").await;
    age_session(&f, &old, 40);
    // Files only the old session's checkpoints held go with it.
    for i in 0..dropped {
        std::fs::remove_file(f.project.join(format!("d{}/f{i}.txt", i % 10))).unwrap();
    }
    let new = session(&f, "new").await;
    turn(&new, 1, || {
        write(&f.project, "d7/f107.txt", "the new session's\n")
    })
    .await;
    let before = bulk::ObjectCount::of(&new.store().git).await.unwrap();
    let report = gc(&f, Some(DAY * 30)).await;
    assert_eq!(report.sessions_removed, ["old"]);
    assert!(report.objects_removed >= dropped as u64, "{report:?}");
    let after = bulk::ObjectCount::of(&new.store().git).await.unwrap();
    assert_eq!(after.packs, 1, "{after:?}");
    assert!(
        after.objects() + dropped as u64 <= before.objects(),
        "{before:?} {after:?}"
    );
    assert!(
        !holds(&new, &gone).await,
        "a file no kept checkpoint holds is gone"
    );
    new.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(read(&f.project, "d7/f107.txt"), "file 107\n");
}

#[tokio::test]
async fn a_rewind_reports_the_ignored_paths_a_listing_after_it_finds() {
    for walks in [true, false] {
        let f = fixture();
        git(&f.project, &["init", "-q"]);
        write(&f.project, ".git/info/exclude", "# nothing yet\n");
        write(&f.project, ".gitignore", "build/\n");
        write(&f.project, "src/a.rs", "a");
        write(&f.project, "build/out", "ignored");
        let cp = session(&f, "s1").await;
        if !walks {
            cp.walk_no_more();
        }
        turn(&cp, 1, || write(&f.project, "src/keep.log", "kept")).await;
        turn(&cp, 2, || {
            std::fs::remove_file(f.project.join("src/keep.log")).unwrap();
        })
        .await;
        // Ignored from now on by the repository's exclude file, which no checkpoint holds: the
        // file the rewind brings back is ignored for a listing through the index before the
        // capture after the restore, and (taken by that capture) not through the index after.
        write(&f.project, ".git/info/exclude", "*.log\n");
        write(&f.project, "src/other.log", "ignored");
        let outcome = cp.rewind(rewind_code(2)).await.unwrap();
        assert_eq!(read(&f.project, "src/keep.log"), "kept");
        let after = cp.store().ignored(&cp.index).await.unwrap();
        assert_eq!(outcome.ignored, after, "walks: {walks}");
        assert!(
            outcome.ignored.contains(&"build/".to_owned())
                && outcome.ignored.contains(&"src/other.log".to_owned()),
            "walks: {walks}: {:?}",
            outcome.ignored
        );
    }
}

#[test]
fn an_ignored_listing_near_what_a_restore_touched_is_asked_again() {
    use super::record::ignored_near;
    let touched = ["src/a/b.rs".to_owned(), "top.txt".to_owned()];
    let removed = ["old/x".to_owned()];
    let near = |listed: &[&str]| {
        let listed: Vec<String> = listed.iter().map(|s| (*s).to_owned()).collect();
        ignored_near(&listed, &touched, &removed)
    };
    assert!(!near(&[]));
    assert!(!near(&["build/", "srcx/y.o", "run.log", "target/debug/x"]));
    assert!(near(&["src/a/b.rs"]), "the path itself");
    assert!(near(&["top.txt"]), "a path at the root");
    assert!(near(&["src/"]), "a directory above it");
    assert!(near(&["src/a/c.o"]), "inside a directory above it");
    assert!(near(&["src/z/deep/c.o"]), "deeper inside one");
    assert!(near(&["old/"]), "the directory of a removed path");
    assert!(near(&["old/deep/y.o"]), "inside it");
}

#[tokio::test]
async fn blobs_over_the_output_budget_are_read_in_batches_as_they_are_at_once() {
    let f = fixture();
    let cp = session(&f, "s1").await;
    let texts = ["alpha\n", "", "a longer blob\nof two lines\n", "alpha\n"];
    let mut ids = Vec::new();
    for text in texts {
        ids.push(stored(&cp, text).await);
    }
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let expected: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    let store = cp.store();
    assert_eq!(
        store.read_blobs_within(ids.clone(), 1 << 20).await.unwrap(),
        expected
    );
    // Over 16 bytes the first try is cut, and each blob is read in a batch of its own.
    assert_eq!(
        store.read_blobs_within(ids.clone(), 16).await.unwrap(),
        expected
    );
    let mut with_missing = ids.clone();
    let absent = "1".repeat(40);
    with_missing.insert(1, &absent);
    for budget in [1 << 20, 16] {
        let err = store
            .read_blobs_within(with_missing.clone(), budget)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("missing objects"),
            "{budget}: {err}"
        );
    }
}

#[test]
fn a_restore_writes_the_files_of_one_directory_through_one_walk_and_walks_again_when_it_went() {
    let f = fixture();
    let outside = f.home.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let dir = ProjectDir::open(&f.project).unwrap();
    let file = |text: &str| Content::File {
        bytes: text.as_bytes().to_vec(),
        executable: false,
    };
    for i in 0..5 {
        dir.write(&format!("d/f{i}"), &file(&format!("{i}")))
            .unwrap();
    }
    // A directory where the checkpoint has a file: replaced.
    write(&f.project, "d/sub/inner", "old");
    dir.write("d/sub", &file("a file now")).unwrap();
    assert_eq!(read(&f.project, "d/sub"), "a file now");
    // The directory of the last write removed, and a link to outside put in its place: the
    // next write walks again, replaces the link, and writes nothing outside.
    std::fs::remove_dir_all(f.project.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, f.project.join("d")).unwrap();
    dir.write("d/f5", &file("5")).unwrap();
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
    assert!(
        std::fs::symlink_metadata(f.project.join("d"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(read(&f.project, "d/f5"), "5");
    // Removing through the same restore forgets the directory too.
    dir.remove("d/f5").unwrap();
    dir.write("d/f6", &file("6")).unwrap();
    assert_eq!(read(&f.project, "d/f6"), "6");
    dir.write("d/../x", &file("no")).unwrap_err();
    let mut names: Vec<String> = std::fs::read_dir(f.project.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f6"], "no temporary file is left");
}

#[test]
fn a_file_is_rewritten_in_place_only_when_nothing_but_it_can_be_touched() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    let outside = f.home.join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    let dir = ProjectDir::open(&f.project).unwrap();
    let file = |text: &str| Content::File {
        bytes: text.as_bytes().to_vec(),
        executable: false,
    };
    let ino = |rel: &str| {
        std::fs::symlink_metadata(f.project.join(rel))
            .unwrap()
            .ino()
    };
    // A file of its own: rewritten in place, a longer one cut to the new length.
    write(&f.project, "own.txt", "a much longer old content\n");
    let before = ino("own.txt");
    dir.write("own.txt", &file("short\n")).unwrap();
    assert_eq!(read(&f.project, "own.txt"), "short\n");
    assert_eq!(ino("own.txt"), before, "rewritten in place");
    // A name linked to a file outside the project, and two names of one file inside it: only
    // the restored name changes.
    std::fs::hard_link(&outside, f.project.join("linked.txt")).unwrap();
    write(&f.project, "pair-a", "pair\n");
    std::fs::hard_link(f.project.join("pair-a"), f.project.join("pair-b")).unwrap();
    dir.write("linked.txt", &file("restored\n")).unwrap();
    dir.write("pair-a", &file("restored\n")).unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    assert_eq!(read(&f.project, "linked.txt"), "restored\n");
    assert_eq!(read(&f.project, "pair-b"), "pair\n");
    assert_eq!(read(&f.project, "pair-a"), "restored\n");
    // A FIFO where the checkpoint has a file: replaced, and nothing blocks on it.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.project.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    dir.write("fifo", &file("a file now\n")).unwrap();
    assert!(
        std::fs::symlink_metadata(f.project.join("fifo"))
            .unwrap()
            .is_file()
    );
    // A link to outside: replaced by the file, never written through.
    std::os::unix::fs::symlink(&outside, f.project.join("link.txt")).unwrap();
    dir.write("link.txt", &file("mine\n")).unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    assert!(
        std::fs::symlink_metadata(f.project.join("link.txt"))
            .unwrap()
            .is_file()
    );
    // A new file is made at its name, with its exact mode.
    dir.write(
        "new.sh",
        &Content::File {
            bytes: b"#!/bin/sh\n".to_vec(),
            executable: true,
        },
    )
    .unwrap();
    let mode = std::fs::metadata(f.project.join("new.sh")).unwrap().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        names(&f.project),
        [
            "fifo",
            "link.txt",
            "linked.txt",
            "new.sh",
            "own.txt",
            "pair-a",
            "pair-b"
        ],
        "no temporary file is left"
    );
}

#[test]
fn many_files_are_written_by_two_writers_that_share_no_directory_and_make_common_ones_once() {
    let f = fixture();
    let outside = f.home.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // Where the directory both writers start in goes, a link to outside; where another
    // directory goes, a file.
    std::os::unix::fs::symlink(&outside, f.project.join("new")).unwrap();
    write(&f.project, "plain", "in the way\n");
    let mut writes: Vec<(String, Content)> = (0..300)
        .map(|i| {
            let rel = match i % 4 {
                0 => format!("new/a{}/b/f{i}", i % 7),
                1 => format!("new/f{i}"),
                2 => format!("new/plain/c{}/f{i}", i % 5),
                _ => format!("plain/d{}/f{i}", i % 3),
            };
            let content = Content::File {
                bytes: format!("{i}\n").into_bytes(),
                executable: i % 2 == 0,
            };
            (rel, content)
        })
        .collect();
    writes.sort_by(|a, b| a.0.cmp(&b.0));
    let at = split_at_directory(&writes);
    assert!(at > 0 && at < writes.len(), "the writes are split");
    let dir_of = |rel: &str| rel.rsplit_once('/').unwrap().0.to_owned();
    assert_ne!(dir_of(&writes[at - 1].0), dir_of(&writes[at].0));
    assert!(writes[at].0.starts_with("new/"), "both writers make `new`");
    ProjectDir::open(&f.project)
        .unwrap()
        .write_all(&writes)
        .unwrap();
    for (rel, content) in &writes {
        let Content::File { bytes, executable } = content else {
            unreachable!()
        };
        assert_eq!(std::fs::read(f.project.join(rel)).unwrap(), *bytes, "{rel}");
        let mode = std::fs::metadata(f.project.join(rel))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111 != 0, *executable, "{rel}");
    }
    assert!(
        std::fs::symlink_metadata(f.project.join("new"))
            .unwrap()
            .is_dir()
    );
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "nothing outside"
    );
    assert_eq!(
        names(&f.project),
        ["new", "plain"],
        "no temporary file is left"
    );
    // A write that fails names its path, whichever writer met it.
    let blocked = writes.len() - 1;
    let failing: Vec<(String, Content)> = writes
        .iter()
        .enumerate()
        .map(|(i, (rel, content))| match i == blocked {
            true => ("x/../y".to_owned(), content.clone()),
            false => (rel.clone(), content.clone()),
        })
        .collect();
    let (path, _) = ProjectDir::open(&f.project)
        .unwrap()
        .write_all(&failing)
        .unwrap_err();
    assert_eq!(path, "x/../y");
}

#[tokio::test]
async fn a_turn_removing_a_deep_tree_of_many_files_rewinds_exactly() {
    let f = fixture();
    for i in 0..400 {
        write(
            &f.project,
            &format!("src/m{}/n{}/f{i}.rs", i % 4, i % 9),
            &format!("// {i}\n"),
        );
    }
    write(&f.project, "README", "top\n");
    let start = listing(&f.project);
    let cp = session(&f, "s1").await;
    turn(&cp, 1, || {
        std::fs::remove_dir_all(f.project.join("src")).unwrap();
        write(&f.project, "src", "a file now\n");
    })
    .await;
    let outcome = cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(outcome.report.written.len(), 400);
    assert_eq!(listing(&f.project), start);
}

#[tokio::test]
async fn an_empty_projects_first_checkpoint_lists_and_writes_nothing_and_what_follows_is_whole() {
    let f = fixture();
    let cp = session(&f, "s1").await;
    let index = cp.store().dir().join("sessions/s1/index");
    // No git at all: any git would refuse the store's configuration.
    let config = cp.store().dir().join("git/config");
    let kept = std::fs::read(&config).unwrap();
    std::fs::write(&config, "[core\n").unwrap();
    let first = cp.before(1, None).await;
    std::fs::write(&config, kept).unwrap();
    let first = first.unwrap();
    assert_eq!(first.tree, store_git::EMPTY_TREE);
    assert!(first.left_out.is_empty());
    assert!(!index.exists(), "no git wrote an index");
    equals_fresh(&cp, &f, &first, "the empty project").await;
    // Carried without an index: the next capture of the still empty project starts no git.
    let again = without_git(&cp, async || cp.after(1).await).await.unwrap();
    assert_eq!(again, first);
    // What comes next goes through git's listing, as after any first capture.
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "dir/b.sh", "#!/bin/sh\n");
    chmod(&f.project, "dir/b.sh", 0o755);
    std::os::unix::fs::symlink("a.txt", f.project.join("link")).unwrap();
    let second = cp.before(2, None).await.unwrap();
    write(&f.project, "a.txt", "changed\n");
    let after = cp.after(2).await.unwrap();
    equals_fresh(&cp, &f, &after, "files added to an empty project").await;
    assert_eq!(changed_in(&cp, 2).await, ["M a.txt"]);
    cp.rewind(rewind_code(2)).await.unwrap();
    assert_eq!(read(&f.project, "a.txt"), "a\n");
    assert_ne!(second.tree, first.tree);
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(names(&f.project), Vec::<String>::new(), "back to empty");
}

#[tokio::test]
async fn a_blob_written_in_process_is_the_object_git_writes_and_reads() {
    let f = fixture();
    let cp = session(&f, "s1").await;
    let git_dir = cp.store().dir().join("git");
    let mut big = vec![0u8; 1 << 20];
    getrandom::fill(&mut big).unwrap();
    for bytes in [Vec::new(), b"644 a.txt\n755 dir\n".to_vec(), big] {
        let id = cp.store().git.write_blob(bytes.clone()).await.unwrap();
        let mut hash = std::process::Command::new("git")
            .args(["hash-object", "--stdin"])
            .current_dir(&git_dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut hash.stdin.take().unwrap(), &bytes).unwrap();
        let named = hash.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&named.stdout).trim(), id);
        assert_eq!(git(&git_dir, &["cat-file", "-t", &id]).trim(), "blob");
        let read = std::process::Command::new("git")
            .args(["cat-file", "blob", &id])
            .current_dir(&git_dir)
            .output()
            .unwrap();
        assert!(read.status.success() && read.stdout == bytes, "{id}");
        let object = git_dir.join("objects").join(&id[..2]).join(&id[2..]);
        let meta = std::fs::metadata(&object).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o444,
            "read-only as git's"
        );
        // Already there: left as it is, the same id.
        let again = cp.store().git.write_blob(bytes).await.unwrap();
        assert_eq!(again, id);
        let still = std::fs::metadata(&object).unwrap();
        assert_eq!(
            (still.ino(), still.modified().unwrap()),
            (meta.ino(), meta.modified().unwrap())
        );
        // Another blob may share the directory (1 in 256); no temporary file may.
        let entries = names(object.parent().unwrap());
        assert!(entries.contains(&id[2..].to_owned()), "{entries:?}");
        assert!(
            entries.iter().all(|name| !name.starts_with("tmp_")),
            "no temporary file left: {entries:?}"
        );
    }
    let fsck = std::process::Command::new("git")
        .args(["fsck", "--strict", "--no-dangling"])
        .current_dir(&git_dir)
        .output()
        .unwrap();
    // Every object is read and checked; a store without refs only gets notices about that.
    let said = String::from_utf8_lossy(&fsck.stderr);
    assert!(
        fsck.status.success()
            && fsck.stdout.is_empty()
            && said.lines().all(|l| l.starts_with("notice:")),
        "{said}"
    );
}

/// The entries of `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_new_store_is_made_in_process_as_a_bare_repository_git_reads() {
    let f = fixture();
    write(&f.project, "a.txt", "one\n");
    let cp = session(&f, "s1").await;
    let git_dir = cp.store().dir().join("git");
    assert_eq!(
        git(&git_dir, &["rev-parse", "--is-bare-repository"]).trim(),
        "true"
    );
    assert!(
        !git_dir.join("hooks").exists(),
        "no git init (its template's sample hooks)"
    );
    assert_eq!(
        names(cp.store().dir()),
        ["git", "project", "sessions"],
        "nothing left of the temporary directory"
    );
    let start = listing(&f.project);
    turn(&cp, 1, || write(&f.project, "a.txt", "two\n")).await;
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing(&f.project), start);
    git(&git_dir, &["fsck", "--no-dangling"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_opening_a_new_project_at_once_share_one_whole_store() {
    let f = std::sync::Arc::new(fixture());
    write(&f.project, "a.txt", "one\n");
    let opens: Vec<_> = (0..8)
        .map(|n| {
            let f = f.clone();
            tokio::spawn(async move {
                let cp = session(&f, &format!("s{n}")).await;
                cp.before(1, None).await.unwrap();
                cp
            })
        })
        .collect();
    let mut trees = BTreeSet::new();
    let mut dir = None;
    for open in opens {
        let cp = open.await.unwrap();
        trees.insert(cp.entries().unwrap()[0].snapshot_after().tree.clone());
        dir = Some(cp.store().dir().to_path_buf());
    }
    assert_eq!(trees.len(), 1, "every session captured the same tree");
    let dir = dir.unwrap();
    assert_eq!(names(&dir), ["gc.lock", "git", "project", "sessions"]);
    git(&dir.join("git"), &["fsck", "--no-dangling"]);
}

#[tokio::test]
async fn a_store_git_directory_without_objects_is_made_whole_by_git_init() {
    let f = fixture();
    write(&f.project, "a.txt", "one\n");
    let dir = session(&f, "s1").await.store().dir().to_path_buf();
    // What an older build's interrupted `git init` left.
    std::fs::remove_dir_all(dir.join("git/objects")).unwrap();
    let cp = session(&f, "s2").await;
    let start = listing(&f.project);
    turn(&cp, 1, || write(&f.project, "a.txt", "two\n")).await;
    cp.rewind(rewind_code(1)).await.unwrap();
    assert_eq!(listing(&f.project), start);
}

/// A FIFO where git reads a file of the project (a `.gitignore`, which git opens without
/// `O_NONBLOCK`) stalled every checkpoint of the session, and every later session's, for git's
/// ten-minute deadline each: the checkpoint now fails within seconds, naming the FIFO, and the
/// next one, the FIFO gone, is taken.
#[tokio::test]
async fn a_fifo_where_git_reads_a_file_fails_the_checkpoint_at_once_saying_so() {
    let f = fixture();
    git(&f.project, &["init", "-q"]);
    write(&f.project, "tracked.txt", "one\n");
    let cp = session(&f, "s1").await;
    cp.before(1, Some(10)).await.unwrap();
    let fifo = f.project.join("sub").join(".gitignore");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    write(&f.project, "tracked.txt", "two\n");
    // Stopped for the FIFO, not at the deadline ("no answer within 600s").
    let err = cp.after(1).await.unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");
    std::fs::remove_file(&fifo).unwrap();
    turn(&cp, 2, || write(&f.project, "tracked.txt", "three\n")).await;
}

/// A sparse `.gitignore` of 2 GiB (no disk used) made git read it into memory whole, in the
/// controller's groups: git's memory is bounded now, so the checkpoint fails saying git ran out
/// of it, and the next one, the file gone, is taken.
#[tokio::test]
async fn a_huge_gitignore_fails_the_checkpoint_without_git_holding_it() {
    let f = fixture();
    git(&f.project, &["init", "-q"]);
    write(&f.project, "tracked.txt", "one\n");
    let cp = session(&f, "s1").await;
    cp.before(1, Some(10)).await.unwrap();
    let huge = f.project.join("sub").join(".gitignore");
    std::fs::create_dir_all(huge.parent().unwrap()).unwrap();
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    write(&f.project, "tracked.txt", "two\n");
    let err = cp.after(1).await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("memory"), "{err}");
    std::fs::remove_file(&huge).unwrap();
    turn(&cp, 2, || write(&f.project, "tracked.txt", "three\n")).await;
}

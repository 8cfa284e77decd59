use std::path::{Path, PathBuf};

use intendant_protocol::checkpoints::{ChangeKind, RewindRequest, RewindScope};
use intendant_providers::ConversationItem;

use super::*;
use crate::checkpoint::{CheckpointConfig, SessionCheckpoints};
use crate::session_log::{SessionLog, SessionMeta};

struct Recorded {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    log: SessionLog,
}

impl Recorded {
    fn dir(&self) -> &Path {
        self.log.dir()
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.project.join(rel)).ok()
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.project.join(rel), text).unwrap();
    }

    async fn checkpoints(&self) -> SessionCheckpoints {
        SessionCheckpoints::open(
            &self.home,
            &self.project,
            self.log.id(),
            &CheckpointConfig::default(),
        )
        .await
        .unwrap()
    }

    /// One turn of the session: two conversation items, and `change` between its checkpoints.
    async fn turn(&self, cp: &SessionCheckpoints, n: u32, change: impl FnOnce(&Recorded)) {
        let items = self.log.conversation_items();
        self.log
            .append_conversation(&ConversationItem::User {
                text: format!("turn {n}"),
            })
            .unwrap();
        cp.before(n, Some(items)).await.unwrap();
        change(self);
        cp.after(n).await.unwrap();
        self.log
            .append_conversation(&ConversationItem::Assistant {
                text: format!("did {n}"),
            })
            .unwrap();
    }
}

/// A recorded session whose turn 1 wrote `a.txt` (v1) and turn 2 rewrote it (v2) and made
/// `b.txt`.
async fn recorded() -> Recorded {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let project = std::fs::canonicalize(project).unwrap();
    let log = SessionLog::create(&home, SessionMeta::new(&project, "t", "m", "mock")).unwrap();
    let session = Recorded {
        _tmp: tmp,
        home,
        project,
        log,
    };
    let cp = session.checkpoints().await;
    session.turn(&cp, 1, |s| s.write("a.txt", "v1\n")).await;
    session
        .turn(&cp, 2, |s| {
            s.write("a.txt", "v2\n");
            s.write("b.txt", "new\n");
        })
        .await;
    session
}

fn rewinds_recorded(s: &Recorded) -> usize {
    std::fs::read_to_string(
        s.home
            .join("checkpoints")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("sessions")
            .join(s.log.id())
            .join("record.jsonl"),
    )
    .unwrap()
    .lines()
    .filter(|l| l.contains("\"kind\":\"rewind\""))
    .count()
}

#[tokio::test]
async fn a_preview_changes_nothing_then_the_rewind_and_its_undo_do_what_it_said() {
    let s = recorded().await;
    let id = s.log.id().to_owned();
    let preview = RewindRequest {
        preview: true,
        ..RewindRequest::to_turn(&id, 2)
    };
    let seen = rewind_recorded(&s.home, s.dir(), &preview).await.unwrap();
    assert_eq!(seen.event, None, "a preview records nothing");
    let report = seen.report;
    assert!(report.preview);
    assert_eq!(report.checkpoint_turn, Some(2));
    let changes: Vec<(&str, ChangeKind)> = report
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind))
        .collect();
    assert_eq!(
        changes,
        [
            ("a.txt", ChangeKind::Modified),
            ("b.txt", ChangeKind::Deleted)
        ]
    );
    let diff = report.diff.as_deref().unwrap();
    assert!(
        diff.contains("-v2\n+v1\n") && diff.contains("-new\n"),
        "{diff}"
    );
    // Turn 2 began after turn 1's two items; four are written now.
    let cut = report.conversation_cut.unwrap();
    assert_eq!((cut.keep, cut.until), (2, 4));
    assert!(
        report
            .summary
            .starts_with("rewinding to before turn 2: 2 files would change"),
        "{}",
        report.summary
    );
    assert_eq!(s.read("a.txt").as_deref(), Some("v2\n"), "nothing changed");
    assert_eq!(rewinds_recorded(&s), 0);
    assert!(describe(&report).contains("  M a.txt\n  D b.txt\n"));

    let done = rewind_recorded(&s.home, s.dir(), &RewindRequest::to_turn(&id, 2))
        .await
        .unwrap();
    assert_eq!(s.read("a.txt").as_deref(), Some("v1\n"));
    assert_eq!(s.read("b.txt"), None);
    assert_eq!(rewinds_recorded(&s), 1);
    assert!(
        done.report
            .summary
            .starts_with("rewound to before turn 2: 1 file restored, 1 removed"),
        "{}",
        done.report.summary
    );
    match done.event {
        Some(AppEvent::ContextManagement { action, detail }) => {
            assert_eq!(action, ContextAction::Rewind);
            assert_eq!(detail, done.report.summary);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        crate::checkpoint::recorded_cuts(&s.home, &s.project, &id).unwrap(),
        [cut]
    );

    let undo_preview = RewindRequest {
        preview: true,
        ..RewindRequest::undo(&id)
    };
    let seen = rewind_recorded(&s.home, s.dir(), &undo_preview)
        .await
        .unwrap()
        .report;
    assert_eq!(seen.changes.len(), 2, "{seen:?}");
    assert_eq!(s.read("a.txt").as_deref(), Some("v1\n"));
    let undone = rewind_recorded(&s.home, s.dir(), &RewindRequest::undo(&id))
        .await
        .unwrap();
    assert!(undone.report.summary.starts_with("undid the last rewind"));
    assert_eq!(s.read("a.txt").as_deref(), Some("v2\n"));
    assert_eq!(s.read("b.txt").as_deref(), Some("new\n"));
    assert!(
        crate::checkpoint::recorded_cuts(&s.home, &s.project, &id)
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_conversation_only_rewind_leaves_the_files() {
    let s = recorded().await;
    let request = RewindRequest {
        scope: RewindScope::Conversation,
        ..RewindRequest::to_turn(s.log.id(), 1)
    };
    let done = rewind_recorded(&s.home, s.dir(), &request).await.unwrap();
    assert!(done.report.changes.is_empty());
    assert_eq!(s.read("a.txt").as_deref(), Some("v2\n"));
    let cut = done.report.conversation_cut.unwrap();
    assert_eq!((cut.keep, cut.until), (0, 4));
    assert!(done.report.summary.contains("files left as they are"));
}

#[tokio::test]
async fn bad_requests_unknown_turns_and_outside_edits_are_clear_refusals() {
    let s = recorded().await;
    let id = s.log.id().to_owned();
    let neither = RewindRequest {
        to_turn: None,
        ..RewindRequest::to_turn(&id, 1)
    };
    let e = rewind_recorded(&s.home, s.dir(), &neither)
        .await
        .unwrap_err();
    assert!(e.is_refusal() && e.to_string().contains("to_turn"), "{e}");

    let e = rewind_recorded(&s.home, s.dir(), &RewindRequest::to_turn(&id, 7))
        .await
        .unwrap_err();
    assert!(e.is_refusal(), "{e}");
    assert!(
        e.to_string().contains("no turn 7") && e.to_string().contains("1, 2"),
        "{e}"
    );

    let e = rewind_recorded(&s.home, s.dir(), &RewindRequest::undo(&id))
        .await
        .unwrap_err();
    assert!(
        e.is_refusal() && e.to_string().contains("no rewind to undo"),
        "{e}"
    );

    // The user's editor wrote a file since the last checkpoint: the preview names it, the
    // rewind refuses and changes nothing, and a forced one goes ahead.
    s.write("mine.txt", "mine\n");
    let preview = RewindRequest {
        preview: true,
        ..RewindRequest::to_turn(&id, 2)
    };
    let seen = rewind_recorded(&s.home, s.dir(), &preview)
        .await
        .unwrap()
        .report;
    assert_eq!(seen.changed_outside, ["mine.txt"]);
    assert!(
        seen.summary.contains("refused unless forced: mine.txt"),
        "{}",
        seen.summary
    );
    let e = rewind_recorded(&s.home, s.dir(), &RewindRequest::to_turn(&id, 2))
        .await
        .unwrap_err();
    assert!(e.is_refusal() && e.to_string().contains("mine.txt"), "{e}");
    assert_eq!(s.read("a.txt").as_deref(), Some("v2\n"));
    let forced = RewindRequest {
        force: true,
        ..RewindRequest::to_turn(&id, 2)
    };
    rewind_recorded(&s.home, s.dir(), &forced).await.unwrap();
    assert_eq!(s.read("a.txt").as_deref(), Some("v1\n"));

    // A session that never checkpointed.
    let other =
        SessionLog::create(&s.home, SessionMeta::new(&s.project, "t", "m", "mock")).unwrap();
    let e = rewind_recorded(&s.home, other.dir(), &RewindRequest::to_turn(other.id(), 1))
        .await
        .unwrap_err();
    assert!(
        e.is_refusal() && e.to_string().contains("has no checkpoints"),
        "{e}"
    );
    // A directory that holds no session.
    let e = rewind_recorded(
        &s.home,
        &s.home.join("nowhere"),
        &RewindRequest::to_turn("x", 1),
    )
    .await
    .unwrap_err();
    assert!(!e.is_refusal(), "{e}");
}

#[test]
fn a_long_diff_is_cut_on_a_character_boundary() {
    let text = "é".repeat(10);
    let (cut, truncated) = bounded(text.clone(), 5);
    assert!(truncated);
    assert_eq!(cut, "éé");
    assert_eq!(bounded(text.clone(), 100), (text, false));
}

#[tokio::test]
async fn a_retention_shorter_than_the_default_needs_a_humans_trust() {
    let s = recorded().await;
    let cp = s.checkpoints().await;
    // Ten days old: past a one-day retention, within the default thirty.
    let store = cp.store().dir().to_path_buf();
    let session_record = std::fs::read_dir(store.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path().join("record.jsonl"))
        .find(|p| p.exists())
        .unwrap();
    let age = |p: &Path| {
        std::fs::File::options()
            .append(true)
            .open(p)
            .unwrap()
            .set_modified(
                std::time::SystemTime::now() - std::time::Duration::from_secs(10 * 86_400),
            )
            .unwrap();
    };
    age(&session_record);
    // What a session could write: the file is new, so its commands could create it.
    s.write("intendant.toml", "[checkpoints]\nretention_days = 1\n");
    let reports = collect_checkpoint_garbage(&s.home).await.unwrap();
    assert_eq!(
        reports[0].sessions_removed,
        Vec::<String>::new(),
        "untrusted: the default"
    );
    assert!(session_record.exists());
    let (config, digest) = ProjectConfig::load_digest(&s.project).unwrap();
    assert!(
        config
            .security_settings()
            .iter()
            .any(|l| l.contains("retention_days = 1")),
        "the trust review names it"
    );
    crate::trust::TrustStore::new(&s.home)
        .trust(&digest.unwrap())
        .unwrap();
    age(&session_record);
    let reports = collect_checkpoint_garbage(&s.home).await.unwrap();
    assert_eq!(reports[0].sessions_removed.len(), 1, "{:?}", reports[0]);
    assert!(!session_record.exists());
}

/// A sub-agent's worktree is left alone by its parent's rewind unless asked; `with_children`
/// puts it back to how it was when the parent's turn began (refused while the child runs), and
/// an undo with children undoes both.
#[tokio::test]
async fn a_parents_rewind_leaves_a_childs_worktree_alone_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let worktree = home.join("worktrees").join("child");
    std::fs::create_dir_all(&worktree).unwrap();
    let project = std::fs::canonicalize(project).unwrap();
    let worktree = std::fs::canonicalize(worktree).unwrap();
    std::fs::write(worktree.join("base.txt"), "from the parent's HEAD\n").unwrap();
    let log = SessionLog::create(&home, SessionMeta::new(&project, "t", "m", "mock")).unwrap();
    let parent = Recorded {
        _tmp: tmp,
        home: home.clone(),
        project: project.clone(),
        log,
    };
    let id = parent.log.id().to_owned();
    let pause = || std::thread::sleep(std::time::Duration::from_millis(5));
    let parent_cp = parent.checkpoints().await;
    parent
        .turn(&parent_cp, 1, |s| s.write("a.txt", "v1\n"))
        .await;
    pause();
    let child_meta = SessionMeta {
        parent: Some(id.clone()),
        ..SessionMeta::new(&worktree, "sub", "m", "mock")
    };
    let child = Recorded {
        _tmp: tempfile::tempdir().unwrap(),
        home: home.clone(),
        project: worktree.clone(),
        log: SessionLog::create(&home, child_meta).unwrap(),
    };
    let child_id = child.log.id().to_owned();
    let child_cp = child.checkpoints().await;
    child.turn(&child_cp, 1, |s| s.write("w.txt", "c1\n")).await;
    child
        .turn(&child_cp, 2, |s| {
            s.write("w.txt", "c2\n");
            s.write("x.txt", "made\n");
        })
        .await;
    pause();
    parent
        .turn(&parent_cp, 2, |s| s.write("a.txt", "v2\n"))
        .await;
    let with_children = |mut request: RewindRequest| {
        request.with_children = true;
        request
    };

    // The child's log says it runs: a rewind with children waits, and nothing changes.
    let e = rewind_recorded(
        &home,
        parent.dir(),
        &with_children(RewindRequest::to_turn(&id, 1)),
    )
    .await
    .unwrap_err();
    assert!(
        e.is_refusal() && e.to_string().contains("is running"),
        "{e}"
    );
    assert_eq!(parent.read("a.txt").as_deref(), Some("v2\n"));
    child
        .log
        .update_meta(|m| {
            m.status = intendant_protocol::events::RecordedStatus::Ended(
                intendant_protocol::events::EndStatus::Completed,
            )
        })
        .unwrap();

    // Not asked: the worktree stays as the child left it.
    let alone = rewind_recorded(&home, parent.dir(), &RewindRequest::to_turn(&id, 1))
        .await
        .unwrap();
    assert!(alone.children.is_empty() && alone.report.children.is_empty());
    assert_eq!(parent.read("a.txt"), None);
    assert_eq!(child.read("w.txt").as_deref(), Some("c2\n"));
    rewind_recorded(&home, parent.dir(), &RewindRequest::undo(&id))
        .await
        .unwrap();
    assert_eq!(parent.read("a.txt").as_deref(), Some("v2\n"));

    // A preview with children names the child's files and changes nothing.
    let preview = rewind_recorded(
        &home,
        parent.dir(),
        &with_children(RewindRequest {
            preview: true,
            ..RewindRequest::to_turn(&id, 1)
        }),
    )
    .await
    .unwrap();
    assert_eq!(preview.report.children.len(), 1);
    let seen: Vec<&str> = preview.report.children[0]
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(seen, ["w.txt", "x.txt"]);
    assert!(describe(&preview.report).contains(&format!("sub-agent {child_id}: ")));
    assert_eq!(child.read("w.txt").as_deref(), Some("c2\n"));

    // Asked: the worktree goes back to before the child's turns that came after the moment.
    let both = rewind_recorded(
        &home,
        parent.dir(),
        &with_children(RewindRequest::to_turn(&id, 1)),
    )
    .await
    .unwrap();
    assert_eq!(parent.read("a.txt"), None);
    assert_eq!(child.read("w.txt"), None);
    assert_eq!(child.read("x.txt"), None);
    assert_eq!(
        child.read("base.txt").as_deref(),
        Some("from the parent's HEAD\n")
    );
    assert_eq!(both.children.len(), 1);
    assert_eq!(both.children[0].session_id, child_id);
    assert!(both.children[0].event.is_some());
    assert_eq!(both.report.children[0].conversation_cut, None, "files only");

    // The undo with children undoes both.
    rewind_recorded(
        &home,
        parent.dir(),
        &with_children(RewindRequest::undo(&id)),
    )
    .await
    .unwrap();
    assert_eq!(parent.read("a.txt").as_deref(), Some("v2\n"));
    assert_eq!(child.read("w.txt").as_deref(), Some("c2\n"));

    // A parent turn after every child turn: nothing of the child's to put back.
    let later = rewind_recorded(
        &home,
        parent.dir(),
        &with_children(RewindRequest::to_turn(&id, 2)),
    )
    .await
    .unwrap();
    assert!(later.report.children.is_empty());
    assert_eq!(parent.read("a.txt").as_deref(), Some("v1\n"));
    assert_eq!(child.read("w.txt").as_deref(), Some("c2\n"));
}

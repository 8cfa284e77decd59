//! Checkpoints around the batches of a real session: the controller captures the project
//! before and after every batch that can change files, shell commands included.

use intendant_core::checkpoint::{ChangeKind, CheckpointConfig, RewindRequest, SessionCheckpoints};
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, World, done_turn, exec_turn};

#[tokio::test]
async fn a_shell_commands_changes_are_checkpointed_by_turn_and_rewound() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            exec_turn("printf 'by the shell\\n' > made.txt && rm gone.txt && chmod +x keep.sh"),
            exec_turn("echo reading only"),
            done_turn("finished"),
        ]),
    )
    .await;
    let project = world.project.path();
    std::fs::write(project.join("gone.txt"), "was here\n").unwrap();
    std::fs::write(project.join("keep.sh"), "#!/bin/sh\n").unwrap();
    let run = world
        .run(
            "work",
            Options {
                checkpoints: true,
                ..Options::default()
            },
        )
        .await;
    assert_eq!(run.outcome().turns, 3);
    let id = run
        .log_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let config = CheckpointConfig::default();
    let cp = SessionCheckpoints::existing(world.home.path(), project, &id, &config)
        .await
        .unwrap();
    let turns = cp.turns().unwrap();
    assert_eq!(
        turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
        [1, 2],
        "the two exec batches, not the signal_done turn"
    );
    let changed: Vec<(String, ChangeKind)> = cp
        .turn_changes(&turns[0])
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.path, c.kind))
        .collect();
    assert_eq!(
        changed,
        [
            ("gone.txt".to_owned(), ChangeKind::Deleted),
            ("keep.sh".to_owned(), ChangeKind::Modified),
            ("made.txt".to_owned(), ChangeKind::Added),
        ]
    );
    assert!(cp.turn_changes(&turns[1]).await.unwrap().is_empty());
    assert!(turns[0].conversation_items.is_some());
    assert!(
        cp.store().dir().starts_with(world.home.path()),
        "the store lives in the state root"
    );
    cp.rewind(RewindRequest {
        turn: 1,
        code: true,
        conversation: false,
        force: false,
        conversation_items_now: 0,
    })
    .await
    .unwrap();
    assert!(!project.join("made.txt").exists());
    assert_eq!(
        std::fs::read_to_string(project.join("gone.txt")).unwrap(),
        "was here\n"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(project.join("keep.sh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o111, 0);
}

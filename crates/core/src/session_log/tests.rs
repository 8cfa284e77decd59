use super::meta::process_start;
use super::*;
use intendant_protocol::events::{ControlMsg, EndStatus};

fn new_log(home: &Path) -> SessionLog {
    SessionLog::create(
        home,
        SessionMeta::new(Path::new("/proj"), "fix the bug", "m1", "mock"),
    )
    .unwrap()
}

#[test]
fn create_lays_out_the_directory() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let id = log.id().to_owned();
    assert_eq!(log.dir(), home.path().join("logs").join(&id));
    // 20261130T101530Z-1a2b3c
    assert_eq!(id.len(), 23, "{id}");
    assert_eq!(&id[8..9], "T");
    assert_eq!(&id[15..17], "Z-");
    assert!(id[17..].chars().all(|c| c.is_ascii_hexdigit()));
    for f in [META_FILE, EVENTS_FILE, CONVERSATION_FILE, TURNS_DIR] {
        assert!(log.dir().join(f).exists(), "{f}");
    }
    let meta = read_meta(log.dir()).unwrap();
    assert_eq!(meta.id, id);
    assert_eq!(meta.task, "fix the bug");
    assert_eq!(meta.status, RecordedStatus::Running);
    assert_eq!(meta.pid, Some(std::process::id()));
    #[cfg(target_os = "linux")]
    assert!(meta.pid_start.is_some());
    assert_eq!(meta.effective_status(), RecordedStatus::Running);
    assert!(intendant_protocol::utc::UtcTime::parse_rfc3339(&meta.created).is_some());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(log.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

#[test]
fn ids_sort_in_the_order_sessions_started_even_within_one_second() {
    // Every millisecond's suffix sorts before the next one's, whatever the random bits.
    for millis in 0..999 {
        let (this, next) = (id_suffix(millis).unwrap(), id_suffix(millis + 1).unwrap());
        assert!(this < next, "{millis}: {this} !< {next}");
        assert!(this.len() == 6 && this.chars().all(|c| c.is_ascii_hexdigit()));
    }
    // Within one millisecond they differ (14 random bits).
    let same: std::collections::BTreeSet<String> =
        (0..64).map(|_| id_suffix(500).unwrap()).collect();
    assert!(same.len() > 32, "{same:?}");
    // Sessions made a few milliseconds apart are listed, by id, in the order they were made.
    let home = tempfile::tempdir().unwrap();
    let made: Vec<String> = (0..12)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            new_log(home.path()).id().to_owned()
        })
        .collect();
    let mut sorted = made.clone();
    sorted.sort();
    assert_eq!(sorted, made);
}

#[test]
fn events_are_recorded_with_ts_and_name_and_fold_into_meta() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    log.record_event(&AppEvent::TurnStarted { turn: 1 })
        .unwrap();
    log.record_event(&AppEvent::ModelResponseDelta { text: "x".into() })
        .unwrap();
    for _ in 0..2 {
        log.record_event(&AppEvent::Usage {
            turn: 1,
            input_tokens: 100,
            cached_input_tokens: 10,
            output_tokens: 20,
            reasoning_tokens: 5,
            cost_usd: 0.25,
        })
        .unwrap();
    }
    log.record_event(&AppEvent::ControlCommand(ControlMsg::Approve { id: 3 }))
        .unwrap();
    log.record_event(&AppEvent::SessionEnded {
        session_id: log.id().into(),
        status: EndStatus::Completed,
        reason: "done".into(),
    })
    .unwrap();

    let read = read_events(log.dir()).unwrap();
    assert_eq!(read.torn_tail, None);
    let names: Vec<&str> = read.records.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "turn_started",
            "usage",
            "usage",
            "control_command",
            "session_ended"
        ]
    );
    assert_eq!(read.records[0].data["turn"], 1);
    assert!(!read.records[0].data.contains_key("type"));
    assert_eq!(read.records[3].data["action"], "approve");
    assert!(intendant_protocol::utc::UtcTime::parse_rfc3339(&read.records[0].ts).is_some());

    let meta = read_meta(log.dir()).unwrap();
    assert_eq!(meta.turns, 1);
    assert_eq!(meta.usage.input_tokens, 200);
    assert_eq!(meta.usage.output_tokens, 40);
    assert_eq!(meta.total_tokens(), 240);
    assert!((meta.cost_usd - 0.5).abs() < 1e-9);
    assert_eq!(meta.status, RecordedStatus::Ended(EndStatus::Completed));
    assert_eq!(meta.reason.as_deref(), Some("done"));
}

#[test]
fn a_session_that_cannot_be_made_whole_leaves_no_directory() {
    let home = tempfile::tempdir().unwrap();
    // The artifacts root taken by a file: the session's directory and its files are made,
    // then its artifacts directory cannot be.
    std::fs::write(home.path().join("artifacts"), b"not a directory").unwrap();
    let err = SessionLog::create(
        home.path(),
        SessionMeta::new(Path::new("/proj"), "fix the bug", "m1", "mock"),
    )
    .err()
    .expect("the artifacts root is a file");
    assert!(err.to_string().contains("artifacts"), "{err}");
    let left: Vec<_> = std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "a half-made session was kept: {left:?}");
    // The file in the way is not the session's to remove.
    assert!(home.path().join("artifacts").is_file());
}

#[test]
fn an_io_error_names_its_path_once() {
    let path = Path::new("/state/logs/x/session.jsonl");
    let bare = SessionLogError::io(path, std::io::Error::other("Too many open files"));
    let named = SessionLogError::io(
        path,
        std::io::Error::other(format!("{}: Too many open files", path.display())),
    );
    for err in [bare, named] {
        assert_eq!(
            err.to_string(),
            "session log: /state/logs/x/session.jsonl: Too many open files"
        );
    }
}

#[test]
fn conversation_round_trips() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let items = vec![
        ConversationItem::User { text: "hi".into() },
        ConversationItem::ToolCall(intendant_providers::ToolCall {
            call_id: "c1".into(),
            name: "exec_command".into(),
            arguments: "{\"command\":\"ls\"}".into(),
            thought_signature: None,
            provider_id: false,
        }),
        ConversationItem::ToolResult {
            call_id: "c1".into(),
            name: "exec_command".into(),
            output: "a\nb".into(),
            is_error: false,
            images: Vec::new(),
        },
    ];
    for item in &items {
        log.append_conversation(item).unwrap();
    }
    let read = read_conversation(log.dir()).unwrap();
    assert_eq!(read.records, items);
}

#[test]
fn turn_files_are_named_and_validated() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let p = log.write_turn_file(7, "reasoning.txt", b"because").unwrap();
    assert_eq!(p, log.dir().join("turns/turn_007_reasoning.txt"));
    assert_eq!(std::fs::read(&p).unwrap(), b"because");
    for bad in ["", "../x", "a/b", ".hidden", "sp ace"] {
        assert!(
            matches!(
                log.write_turn_file(1, bad, b""),
                Err(SessionLogError::InvalidTurnFileName { .. })
            ),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn event_writer_drains_the_lane_and_stops_at_its_session_end() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = log.spawn_event_writer(rx);
    tx.send(AppEvent::TurnStarted { turn: 1 }).unwrap();
    tx.send(AppEvent::SessionEnded {
        session_id: "someone-else".into(),
        status: EndStatus::Failed,
        reason: "x".into(),
    })
    .unwrap();
    tx.send(AppEvent::SessionEnded {
        session_id: log.id().into(),
        status: EndStatus::Completed,
        reason: "ok".into(),
    })
    .unwrap();
    handle.await.unwrap();
    assert_eq!(read_events(log.dir()).unwrap().records.len(), 3);
    assert!(log.take_write_error().is_none());
    assert_eq!(
        read_meta(log.dir()).unwrap().status,
        RecordedStatus::Ended(EndStatus::Completed)
    );
}

#[test]
fn listing_is_newest_first_and_ids_resolve() {
    let home = tempfile::tempdir().unwrap();
    assert!(list_sessions(home.path()).unwrap().is_empty());
    let logs = home.path().join("logs");
    for id in [
        "20260101T000000Z-aaaaaa",
        "20260301T000000Z-bbbbbb",
        "20260201T000000Z-cccccc",
    ] {
        std::fs::create_dir_all(logs.join(id)).unwrap();
        let meta = SessionMeta {
            id: id.into(),
            ..SessionMeta::default()
        };
        write_meta_atomic(
            &crate::record_dir::RecordDir::open(&logs.join(id)).unwrap(),
            &meta,
        )
        .unwrap();
    }
    std::fs::create_dir_all(logs.join("not-a-session")).unwrap();
    let ids: Vec<String> = list_sessions(home.path())
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        ids,
        [
            "20260301T000000Z-bbbbbb",
            "20260201T000000Z-cccccc",
            "20260101T000000Z-aaaaaa"
        ]
    );
    assert_eq!(
        resolve_session_id(home.path(), "20260201").unwrap(),
        logs.join("20260201T000000Z-cccccc")
    );
    assert!(matches!(
        resolve_session_id(home.path(), "2026"),
        Err(SessionLogError::AmbiguousSession { .. })
    ));
    assert!(matches!(
        resolve_session_id(home.path(), "1999"),
        Err(SessionLogError::UnknownSession { .. })
    ));
    assert!(matches!(
        resolve_session_id(home.path(), "../etc"),
        Err(SessionLogError::InvalidSessionId { .. })
    ));
}

/// A directory whose metadata is there but does not read (cut short, or with a status a newer
/// build wrote) is left out of the listing and named in what the operator is told, five at
/// most; a directory without metadata (or one being created) and a stray file are no sessions.
#[test]
fn a_listing_names_the_directories_whose_metadata_does_not_read() {
    let home = tempfile::tempdir().unwrap();
    let kept = new_log(home.path()).id().to_owned();
    let cut = new_log(home.path());
    let whole = std::fs::read(cut.dir().join(META_FILE)).unwrap();
    std::fs::write(cut.dir().join(META_FILE), &whole[..whole.len() / 2]).unwrap();
    let newer = new_log(home.path());
    let text = std::fs::read_to_string(newer.dir().join(META_FILE)).unwrap();
    let text = text.replace("\"status\": \"running\"", "\"status\": \"paused\"");
    assert!(text.contains("paused"), "{text}");
    std::fs::write(newer.dir().join(META_FILE), text).unwrap();
    let logs = home.path().join("logs");
    std::fs::create_dir_all(logs.join("20260101T000000Z-nometa")).unwrap();
    std::fs::write(logs.join("stray.txt"), "hi").unwrap();

    let listing = read_listing(home.path()).unwrap();
    let ids: Vec<&str> = listing.sessions.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, [kept.as_str()]);
    let mut left_out: Vec<&Path> = listing.unreadable.iter().map(|u| u.dir.as_path()).collect();
    left_out.sort();
    let mut want = vec![cut.dir(), newer.dir()];
    want.sort();
    assert_eq!(left_out, want);
    let lines = listing.unreadable_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, dir) in lines.iter().zip(&want) {
        assert!(
            line.starts_with("not listed, its files kept: ")
                && line.contains(&dir.join(META_FILE).display().to_string()),
            "{line}"
        );
        assert_eq!(
            line.contains("unknown session status \"paused\""),
            *dir == newer.dir(),
            "{line}"
        );
    }

    for _ in 0..5 {
        let more = new_log(home.path());
        // Its error quotes a status of a megabyte, which its line does not.
        let text = format!("{{\"status\": \"{}\"}}", "x".repeat(1 << 20));
        std::fs::write(more.dir().join(META_FILE), text).unwrap();
    }
    let lines = read_listing(home.path()).unwrap().unreadable_lines();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(lines.iter().all(|line| line.len() <= 1024 + '…'.len_utf8()));
    assert!(lines.iter().any(|line| line.ends_with("xxx…")), "{lines:?}");
    assert_eq!(
        lines[5],
        "and 2 more session directories whose metadata does not read"
    );
}

#[test]
fn dead_or_replaced_writer_reads_as_interrupted() {
    let running = |pid, pid_start| SessionMeta {
        status: RecordedStatus::Running,
        pid,
        pid_start,
        ..SessionMeta::default()
    };
    let me = std::process::id();
    let my_start = process_start(me);
    assert_eq!(
        running(Some(me), my_start).effective_status(),
        RecordedStatus::Running
    );
    assert_eq!(
        running(None, None).effective_status(),
        RecordedStatus::Running
    );
    #[cfg(target_os = "linux")]
    {
        assert!(my_start.is_some());
        // Pids are bounded well below this on Linux.
        assert_eq!(
            running(Some(u32::MAX - 1), None).effective_status(),
            RecordedStatus::Ended(EndStatus::Interrupted)
        );
        // The pid is alive but belongs to a process started at another time: a reused pid.
        let other_start = my_start.map(|t| t + 1);
        assert_eq!(
            running(Some(me), other_start).effective_status(),
            RecordedStatus::Ended(EndStatus::Interrupted)
        );
    }
    let ended = SessionMeta {
        status: RecordedStatus::Ended(EndStatus::Completed),
        ..running(Some(u32::MAX - 1), None)
    };
    assert_eq!(
        ended.effective_status(),
        RecordedStatus::Ended(EndStatus::Completed)
    );
}

/// A writer killed while its parent has not reaped it yet (a daemon `kill -9`ed under a
/// supervisor that waits late) is a zombie: its `/proc` entry and start time are still there,
/// yet it writes nothing any more, so a daemon started meanwhile must list its sessions as
/// interrupted, not running for good.
#[cfg(target_os = "linux")]
#[test]
fn a_writer_that_exited_but_is_not_reaped_reads_as_interrupted() {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sh")
        .args(["-c", "read _"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = process_start(pid);
    assert!(start.is_some(), "a live process has a start time");
    let running = SessionMeta {
        status: RecordedStatus::Running,
        pid: Some(pid),
        pid_start: start,
        ..SessionMeta::default()
    };
    assert_eq!(running.effective_status(), RecordedStatus::Running);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let zombie = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.starts_with(" Z"))
        })
    };
    while !zombie() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never exited"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        running.effective_status(),
        RecordedStatus::Ended(EndStatus::Interrupted)
    );
    child.wait().unwrap();
}

#[test]
fn events_write_turn_files_and_resumed_runs_number_after_earlier_turns() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    log.record_event(&AppEvent::TurnStarted { turn: 1 })
        .unwrap();
    log.record_event(&AppEvent::ModelResponse {
        turn: 1,
        text: "I will list files.".into(),
        reasoning: String::new(),
        tool_calls: Vec::new(),
    })
    .unwrap();
    log.record_event(&AppEvent::ToolBatch {
        turn: 1,
        input: serde_json::json!({"commands": [{"function": "execAsAgent", "nonce": 1}]}),
    })
    .unwrap();
    let turns = log.dir().join(TURNS_DIR);
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_001_model.txt")).unwrap(),
        "I will list files."
    );
    let input: serde_json::Value =
        serde_json::from_slice(&std::fs::read(turns.join("turn_001_batch_input.json")).unwrap())
            .unwrap();
    assert_eq!(input["commands"][0]["function"], "execAsAgent");

    let (dir, meta) = (log.dir().to_path_buf(), log.meta());
    drop(log);
    let resumed = SessionLog::reopen(home.path(), &dir, meta).unwrap();
    resumed
        .record_event(&AppEvent::TurnStarted { turn: 1 })
        .unwrap();
    resumed
        .record_event(&AppEvent::ModelResponse {
            turn: 1,
            text: "Resumed.".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
        })
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_001_model.txt")).unwrap(),
        "I will list files."
    );
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_002_model.txt")).unwrap(),
        "Resumed."
    );
    assert_eq!(read_meta(&dir).unwrap().turns, 2);
}

#[test]
fn a_turn_start_is_written_with_its_usage_or_before_its_first_file_or_at_the_round_end() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let on_disk = || read_meta(log.dir()).unwrap();
    let usage = |turn| AppEvent::Usage {
        turn,
        input_tokens: 10,
        cached_input_tokens: 0,
        output_tokens: 5,
        reasoning_tokens: 0,
        cost_usd: 0.0,
    };
    let turn_files = || {
        std::fs::read_dir(log.dir().join(TURNS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>()
    };
    // The start alone is held in memory; its usage writes both.
    log.record_event(&AppEvent::TurnStarted { turn: 1 })
        .unwrap();
    assert_eq!((log.meta().turns, on_disk().turns), (1, 0));
    log.record_event(&usage(1)).unwrap();
    assert_eq!(on_disk().turns, 1);
    assert_eq!(on_disk().usage.input_tokens, 10);
    // No usage (a provider without it): the turn's first file writes the start first.
    log.record_event(&AppEvent::TurnStarted { turn: 2 })
        .unwrap();
    assert_eq!(on_disk().turns, 1);
    log.record_event(&AppEvent::ToolBatch {
        turn: 2,
        input: serde_json::json!({"commands": []}),
    })
    .unwrap();
    assert_eq!(on_disk().turns, 2);
    assert_eq!(
        turn_files(),
        ["turn_002_batch_input.json"],
        "written in place"
    );
    // Neither: the round's end writes it.
    log.record_event(&AppEvent::TurnStarted { turn: 3 })
        .unwrap();
    assert_eq!(on_disk().turns, 2);
    log.record_event(&AppEvent::RoundComplete {
        round: 1,
        turns: 3,
        reason: intendant_protocol::events::RoundEnd::TurnCap,
        input_tokens: 10,
        output_tokens: 5,
        cost_usd: 0.0,
    })
    .unwrap();
    assert_eq!(on_disk().turns, 3);
    // A run that dies mid-call leaves its last start unwritten, and with it no file: a resume
    // numbers its first turn 4, over nothing.
    log.record_event(&AppEvent::TurnStarted { turn: 4 })
        .unwrap();
    let (dir, meta) = (log.dir().to_path_buf(), read_meta(log.dir()).unwrap());
    drop(log);
    assert_eq!(meta.turns, 3);
    let resumed = SessionLog::reopen(home.path(), &dir, meta).unwrap();
    assert_eq!(resumed.session_turn(1), 4);
    assert!(
        !dir.join(TURNS_DIR)
            .join("turn_004_batch_input.json")
            .exists()
    );
}

#[test]
fn reasoning_and_batch_results_are_written_from_their_events() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    log.record_event(&AppEvent::ModelResponse {
        turn: 1,
        text: String::new(),
        reasoning: "Listing first.".into(),
        tool_calls: Vec::new(),
    })
    .unwrap();
    let summary = serde_json::json!({"results": [{"nonce": 1, "ok": true}], "timed_out": false});
    log.record_event(&AppEvent::ToolBatchResult {
        turn: 1,
        output: summary.clone(),
    })
    .unwrap();
    let turns = log.dir().join(TURNS_DIR);
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_001_reasoning.txt")).unwrap(),
        "Listing first."
    );
    // No visible text: no model.txt.
    assert!(!turns.join("turn_001_model.txt").exists());
    assert_eq!(
        std::fs::read_to_string(turns.join("turn_001_batch_result.json")).unwrap(),
        summary.to_string()
    );
}

#[test]
fn reopen_cuts_torn_tails_and_appends() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    log.append_conversation(&ConversationItem::User { text: "a".into() })
        .unwrap();
    let dir = log.dir().to_path_buf();
    let meta = log.meta();
    drop(log);
    let conv = dir.join(CONVERSATION_FILE);
    let mut bytes = std::fs::read(&conv).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"user\",\"te");
    std::fs::write(&conv, bytes).unwrap();
    assert!(read_conversation(&dir).unwrap().torn_tail.is_some());

    let log = SessionLog::reopen(home.path(), &dir, meta).unwrap();
    log.append_conversation(&ConversationItem::User { text: "b".into() })
        .unwrap();
    let read = read_conversation(&dir).unwrap();
    assert_eq!(read.torn_tail, None);
    assert_eq!(read.records.len(), 2);
    assert_eq!(read_meta(&dir).unwrap().resumes, 1);
}

/// Leaves half a line at the end of `dir`'s `session.jsonl` (a write cut short); what the file
/// then holds.
fn tear_events(dir: &Path) -> Vec<u8> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(EVENTS_FILE))
        .unwrap()
        .write_all(b"{\"torn")
        .unwrap();
    std::fs::read(dir.join(EVENTS_FILE)).unwrap()
}

#[test]
fn a_record_has_one_writer_and_a_second_is_refused_until_the_first_closes_it() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let dir = log.dir().to_path_buf();
    let meta = log.meta();
    // Its creator holds it: a reopen (a resume beside it) is refused, and cuts nothing.
    let events_before = tear_events(&dir);
    let Err(refused) = SessionLog::reopen(home.path(), &dir, meta.clone()) else {
        panic!("a second writer of one record is refused");
    };
    assert!(
        matches!(&refused, SessionLogError::Claimed { id } if *id == meta.id),
        "{refused}"
    );
    assert!(refused.to_string().contains("being resumed"), "{refused}");
    assert_eq!(std::fs::read(dir.join(EVENTS_FILE)).unwrap(), events_before);
    drop(log);
    // Closed: the next writer takes it, and a third is refused while it holds it.
    let first = SessionLog::reopen(home.path(), &dir, meta.clone()).unwrap();
    assert!(matches!(
        SessionLog::reopen(home.path(), &dir, meta.clone()),
        Err(SessionLogError::Claimed { .. })
    ));
    drop(first);
    SessionLog::reopen(home.path(), &dir, meta).unwrap();
}

#[test]
fn a_note_for_an_ended_session_is_refused_beside_its_writer_and_holds_off_a_resume() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let dir = log.dir().to_path_buf();
    let note = AppEvent::Warning {
        message: "rewound".into(),
    };
    // Its writer still holds it: refused, nothing cut or appended.
    let before = tear_events(&dir);
    assert!(matches!(
        OfflineRecord::claim(&dir),
        Err(SessionLogError::Claimed { .. })
    ));
    assert_eq!(std::fs::read(dir.join(EVENTS_FILE)).unwrap(), before);
    let meta = log.meta();
    drop(log);
    // Ended: taken, its torn tail cut, the note appended whole; and while it is held, no
    // resume reopens the session.
    let mut record = OfflineRecord::claim(&dir).unwrap();
    assert!(matches!(
        SessionLog::reopen(home.path(), &dir, meta.clone()),
        Err(SessionLogError::Claimed { .. })
    ));
    record
        .record_published(&note, 42, "2026-12-06T08:00:00.000Z")
        .unwrap();
    drop(record);
    let text = std::fs::read_to_string(dir.join(EVENTS_FILE)).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["seq"], 42);
    assert_eq!(last["message"], "rewound");
    assert!(!text.contains("{\"torn"));
    SessionLog::reopen(home.path(), &dir, meta).unwrap();
}

#[test]
fn a_resume_marks_logs_changed_for_a_daemon_that_lists_the_session_ended() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let dir = log.dir().to_path_buf();
    let meta = log.meta();
    drop(log);
    // As long ago as a session a daemon listed and saw end.
    let logs = logs_dir(home.path());
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(&logs)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let log = SessionLog::reopen(home.path(), &dir, meta).unwrap();
    let marked = std::fs::metadata(&logs).unwrap().modified().unwrap();
    let written = std::fs::metadata(dir.join(META_FILE))
        .unwrap()
        .modified()
        .unwrap();
    assert!(
        marked > long_ago && marked >= written,
        "logs/ is marked changed once the record names its new writer"
    );
    assert_eq!(read_meta(&dir).unwrap().pid, Some(std::process::id()));
    drop(log);
}

#[tokio::test]
async fn the_writer_keeps_its_first_error() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    // Open handles still append to the unlinked files, and the writer notices the names are gone;
    // the metadata rewrite has nowhere to go.
    std::fs::remove_dir_all(log.dir()).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = log.spawn_event_writer(rx);
    tx.send(AppEvent::TurnStarted { turn: 1 }).unwrap();
    tx.send(AppEvent::TurnStarted { turn: 2 }).unwrap();
    drop(tx);
    handle.await.unwrap();
    let e = log.take_write_error().unwrap();
    assert!(
        matches!(
            e,
            SessionLogError::Io { .. } | SessionLogError::Replaced { .. }
        ),
        "{e}"
    );
    assert!(log.take_write_error().is_none());
}

#[test]
fn a_record_replaced_behind_the_writer_is_reported_and_not_written_through() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "").unwrap();
    let events = log.dir().join(EVENTS_FILE);
    std::fs::remove_file(&events).unwrap();
    std::os::unix::fs::symlink(&victim, &events).unwrap();
    let e = log
        .record_event(&AppEvent::TurnStarted { turn: 1 })
        .unwrap_err();
    assert!(matches!(e, SessionLogError::Replaced { .. }), "{e}");
    assert!(e.to_string().contains("replaced"), "{e}");
    // Planted links at the metadata's and a turn file's temporary or final names change nothing.
    std::os::unix::fs::symlink(
        &victim,
        log.dir().join(TURNS_DIR).join("turn_002_model.txt"),
    )
    .unwrap();
    log.write_turn_file(2, "model.txt", b"mine").unwrap();
    std::fs::remove_file(log.dir().join(META_FILE)).unwrap();
    std::os::unix::fs::symlink(&victim, log.dir().join(META_FILE)).unwrap();
    log.update_meta(|m| m.turns = 7).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "");
    assert_eq!(read_meta(log.dir()).unwrap().turns, 7);
    // A reader refuses the link rather than read the victim.
    let e = read_events(log.dir()).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // Resuming refuses to append through it.
    let (dir, meta) = (log.dir().to_path_buf(), log.meta());
    drop(log);
    let e = SessionLog::reopen(home.path(), &dir, meta).err().unwrap();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "");
}

#[test]
fn the_artifacts_directory_is_apart_from_the_records() {
    let home = tempfile::tempdir().unwrap();
    let log = new_log(home.path());
    assert_eq!(
        log.artifacts_dir(),
        home.path().join(ARTIFACTS_DIR).join(log.id())
    );
    assert!(log.artifacts_dir().is_dir());
    assert!(!log.artifacts_dir().starts_with(log.dir()));
    assert!(!log.dir().starts_with(log.artifacts_dir()));
}

#[test]
fn the_recorded_backend_is_the_field_else_a_worker_that_recorded_its_conversation() {
    use intendant_protocol::daemon::Backend;
    let mut meta = SessionMeta::new(Path::new("/p"), "t", "m", "codex");
    assert_eq!(meta.recorded_backend(), None);
    // A record older than the field: a worker conversation id says a worker ran it.
    meta.agent_thread = Some("thr-1".into());
    assert_eq!(meta.recorded_backend(), Some(Backend::named("codex")));
    meta.backend = Some(Backend::Native);
    assert_eq!(meta.recorded_backend(), Some(Backend::Native));
}

/// A `session_meta.json` exactly as this version wrote it before `status` was typed: it still
/// reads, its status means the same, and writing it back gives the same JSON.
#[test]
fn meta_files_as_written_read_and_write_back_unchanged() {
    let written = |status: &str| {
        format!(
            r#"{{
  "id": "20261201T101530Z-1a2b3c",
  "created": "2026-12-01T10:15:30Z",
  "updated": "2026-12-01T10:16:02Z",
  "project_root": "/proj",
  "task": "fix the bug",
  "status": "{status}",
  "reason": "done",
  "model": "m1",
  "provider": "mock",
  "pid": 4242,
  "pid_start": 123456,
  "turns": 3,
  "usage": {{
    "input_tokens": 200,
    "cached_input_tokens": 0,
    "output_tokens": 40,
    "reasoning_tokens": 0
  }},
  "cost_usd": 0.5,
  "resumes": 1,
  "backend": {{
    "kind": "native"
  }}
}}"#
        )
    };
    let cases = [
        ("running", RecordedStatus::Running),
        ("completed", RecordedStatus::Ended(EndStatus::Completed)),
        (
            "budget_exhausted",
            RecordedStatus::Ended(EndStatus::BudgetExhausted),
        ),
        ("turn_cap", RecordedStatus::Ended(EndStatus::TurnCap)),
        ("denied", RecordedStatus::Ended(EndStatus::Denied)),
        ("refused", RecordedStatus::Ended(EndStatus::Refused)),
        ("failed", RecordedStatus::Ended(EndStatus::Failed)),
        ("interrupted", RecordedStatus::Ended(EndStatus::Interrupted)),
    ];
    for (name, status) in cases {
        let dir = tempfile::tempdir().unwrap();
        let text = written(name);
        std::fs::write(dir.path().join(META_FILE), &text).unwrap();
        let meta = read_meta(dir.path()).unwrap();
        assert_eq!(meta.status, status, "{name}");
        assert_eq!(meta.turns, 3);
        let again: serde_json::Value = serde_json::to_value(&meta).unwrap();
        let before: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(again, before, "{name} writes back unchanged");
    }
    // A file missing `status` (every field defaults) is a session that has not ended.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(META_FILE), r#"{"id":"x"}"#).unwrap();
    assert_eq!(
        read_meta(dir.path()).unwrap().status,
        RecordedStatus::Running
    );
    // A status this version never wrote is refused with the names it knows, not guessed at.
    std::fs::write(dir.path().join(META_FILE), r#"{"status":"paused"}"#).unwrap();
    let e = read_meta(dir.path()).unwrap_err().to_string();
    assert!(e.contains("unknown session status \"paused\""), "{e}");
}

/// A really full disk (a small tmpfs, its last pages taken by a ballast file): a conversation
/// item cut part-way by `ENOSPC` is cut off again, so the record stays whole and readable; the
/// failure is kept and stops the session, saying why; once space is freed the next item lands
/// on a line of its own.
#[test]
fn a_write_cut_short_by_a_full_disk_leaves_the_record_whole_and_stops_the_session() {
    use intendant_testkit::full_disk;
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().to_path_buf();
    let ran = std::thread::spawn(move || {
        full_disk::small_tmpfs(&mount, 1024 * 1024)?;
        let log = new_log(&mount);
        let cancel = crate::cancel::SessionCancel::new();
        log.stop_on_write_error(&cancel);
        let user = |text: &str| ConversationItem::User { text: text.into() };
        log.append_conversation(&user("before")).unwrap();
        let ballast = full_disk::fill(&mount);
        // Two pages free: an item of five pages gets part of its line written, then ENOSPC.
        let taken = std::fs::metadata(&ballast).unwrap().len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&ballast)
            .unwrap();
        file.set_len(taken - 8192).unwrap();
        let conversation = log.dir().join(CONVERSATION_FILE);
        let whole = std::fs::metadata(&conversation).unwrap().len();
        let e = log
            .append_conversation(&user(&"x".repeat(5 * 4096)))
            .unwrap_err();
        assert!(e.to_string().contains("No space left on device"), "{e}");
        assert_eq!(
            std::fs::metadata(&conversation).unwrap().len(),
            whole,
            "the part written was cut off"
        );
        let read = read_conversation(log.dir()).unwrap();
        assert_eq!(read.torn_tail, None);
        assert_eq!(read.records, vec![user("before")]);
        assert!(cancel.is_stopped(), "the session is stopped");
        let reason = cancel.interrupted_reason();
        assert!(
            reason.starts_with(
                "the session was stopped: its log could not be written (No space left on device"
            ) && reason.contains(CONVERSATION_FILE),
            "the cause first, then where: {reason}"
        );
        // Space freed: the next item is written whole after the last whole line.
        std::fs::remove_file(&ballast).unwrap();
        log.append_conversation(&user("after")).unwrap();
        let read = read_conversation(log.dir()).unwrap();
        assert_eq!(read.torn_tail, None);
        assert_eq!(read.records, vec![user("before"), user("after")]);
        let kept = log.take_write_error().unwrap();
        assert!(matches!(kept, SessionLogError::Io { .. }), "{kept}");
        assert_eq!(
            kept.to_string(),
            e.to_string(),
            "the caller's copy says the same"
        );
        Some(())
    })
    .join()
    .unwrap();
    if ran.is_none() {
        full_disk::skipped();
    }
}

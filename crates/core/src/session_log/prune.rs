//! Removing the records of sessions that ended long ago: a state root keeps every session it
//! ever ran until a human prunes them (`intendant sessions prune`) or sets a retention
//! (`[daemon] session_retention_days`).
//!
//! [`plan`] reads which sessions qualify: ended (a session recorded `running` qualifies only
//! once its writer is gone), last written more than the asked age ago, and kept when something
//! still names it (a sub-agent of it that stays, or what the caller's `keep` says, such as a
//! worktree not yet merged). [`carry_out`] removes each: its log directory and its artifacts are
//! renamed out of the listing first (`.pruning-<id>`, one atomic step, so no reader sees half a
//! session) and then deleted; what a crash leaves of that is deleted by the next prune.
//!
//! Event numbers go on across a prune: a daemon numbers its events after the highest `seq` its
//! logs hold, so the highest one a prune removes is kept in `logs/seq_floor` ([`seq_floor`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use intendant_protocol::daemon::{KeptSession, PruneReport, PruneRequest, PrunedSession};
use intendant_protocol::events::RecordedStatus;

use super::{
    SessionLogError, SessionMeta, age_seconds, artifacts_root, last_seq, list_sessions, logs_dir,
};

/// The file under `logs/` keeping the highest `seq` of the logs prunes removed.
pub const SEQ_FLOOR_FILE: &str = "seq_floor";
/// What a session's directory is renamed to while it is deleted (never a session id: ids
/// start with a digit).
const PRUNING_PREFIX: &str = ".pruning-";

/// Which sessions under `home` `request` would remove, and which old ones stay and why
/// (`dry_run` set). `keep` says why a session must stay whatever its age (`None`: nothing
/// holds it); a session also stays while a sub-agent of it stays.
pub fn plan(
    home: &Path,
    request: &PruneRequest,
    keep: &dyn Fn(&SessionMeta) -> Option<String>,
) -> Result<PruneReport, SessionLogError> {
    let sessions = list_sessions(home)?;
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut old = Vec::new();
    for meta in &sessions {
        let ended = meta.effective_status() != RecordedStatus::Running;
        let why = if !ended {
            Some("it is running".to_owned())
        } else {
            keep(meta)
        };
        match why {
            Some(why) => {
                held.insert(meta.id.clone(), why);
            }
            None if old_enough(meta, request) => old.push(meta),
            None => {
                held.insert(meta.id.clone(), String::new());
            }
        }
    }
    // A session stays while any sub-agent of it does (so a kept sub-agent's parent is still
    // there to read): each kept session keeps its ancestors.
    let parents: BTreeMap<&str, &str> = sessions
        .iter()
        .filter_map(|m| Some((m.id.as_str(), m.parent.as_deref()?)))
        .collect();
    let mut keeping_kin: BTreeMap<String, String> = BTreeMap::new();
    for id in held.keys() {
        let mut child = id.as_str();
        while let Some(&parent) = parents.get(child) {
            if held.contains_key(parent) || keeping_kin.contains_key(parent) {
                break;
            }
            keeping_kin.insert(parent.to_owned(), format!("its sub-agent {child} is kept"));
            child = parent;
        }
    }
    let mut report = PruneReport {
        dry_run: true,
        ..PruneReport::default()
    };
    // Oldest first.
    for meta in old.into_iter().rev() {
        if let Some(why) = keeping_kin.remove(&meta.id) {
            report.kept.push(KeptSession {
                id: meta.id.clone(),
                why,
            });
            continue;
        }
        let bytes = tree_bytes(&logs_dir(home).join(&meta.id))
            + tree_bytes(&artifacts_root(home).join(&meta.id));
        report.bytes += bytes;
        report.removed.push(PrunedSession {
            id: meta.id.clone(),
            updated: meta.updated.clone(),
            bytes,
        });
    }
    prune_schedules(home, request, true, &mut report);
    // The old sessions something holds, named too (a young one's reason is not news).
    for meta in sessions.iter().rev() {
        if let Some(why) = held.get(&meta.id)
            && !why.is_empty()
            && old_enough(meta, request)
        {
            report.kept.push(KeptSession {
                id: meta.id.clone(),
                why: why.clone(),
            });
        }
    }
    Ok(report)
}

/// The agenda's part of a prune: its scheduled sessions that ended, made and due before
/// `request`'s cut, counted (`dry_run`) or removed, into `report`. A state root without a
/// database has none; one that cannot be read is said in the report, and the sessions' prune
/// goes on.
fn prune_schedules(home: &Path, request: &PruneRequest, dry_run: bool, report: &mut PruneReport) {
    let db = home.join(intendant_store::DB_FILE);
    if !db.exists() {
        return;
    }
    let now = intendant_protocol::utc::UtcTime::now().unix_seconds();
    let before = now.saturating_sub(i64::try_from(request.older_than_secs).unwrap_or(i64::MAX));
    let pruned = intendant_store::Store::open_at(&db)
        .and_then(|store| intendant_store::agenda::prune_ended_schedules(&store, before, dry_run));
    match pruned {
        Ok(count) => {
            report.schedules = count;
            report.schedules_error = None;
        }
        Err(e) => {
            report.schedules = 0;
            report.schedules_error = Some(e.to_string());
        }
    }
}

/// Whether `meta` was last written at least `request`'s age ago (an unreadable time never is).
fn old_enough(meta: &SessionMeta, request: &PruneRequest) -> bool {
    age_seconds(&meta.updated)
        .and_then(|age| u64::try_from(age).ok())
        .is_some_and(|age| age >= request.older_than_secs)
}

/// Removes the sessions `plan` chose (`report.removed`, from [`plan`]), keeping `logs/seq_floor`
/// at least the highest `seq` their logs held; one that cannot be removed moves to `kept` with
/// the system's reason, and the agenda's schedules that ended before `request`'s cut.
/// Leftovers of an earlier prune cut short are deleted first. `removed` is told of each session
/// as it goes (a prune of thousands takes as long as the disk does: its caller says how far it
/// is).
pub fn carry_out(
    home: &Path,
    mut report: PruneReport,
    request: &PruneRequest,
    removed: &mut dyn FnMut(&PrunedSession),
) -> PruneReport {
    prune_schedules(home, request, false, &mut report);
    sweep_leftovers(&logs_dir(home));
    sweep_leftovers(&artifacts_root(home));
    let chosen = std::mem::take(&mut report.removed);
    report.dry_run = false;
    report.bytes = 0;
    let mut floor = 0;
    for session in chosen {
        let dir = logs_dir(home).join(&session.id);
        // Held from here until it is gone: a resume that took it since the plan (another
        // process's, or a client's of the daemon) keeps it, and none takes it meanwhile.
        let _held = match hold_unwritten(&dir, request) {
            Ok(held) => held,
            Err(why) => {
                report.kept.push(KeptSession {
                    id: session.id,
                    why,
                });
                continue;
            }
        };
        if let Ok(Some(seq)) = last_seq(&dir) {
            floor = floor.max(seq);
        }
        // The floor is written before the first log goes: a crash in between loses no number.
        if let Err(e) = raise_seq_floor(home, floor) {
            report.kept.push(KeptSession {
                id: session.id,
                why: format!("its event numbers could not be kept: {e}"),
            });
            continue;
        }
        // Its artifacts first: a prune cut short between the two leaves the session listed, for
        // the next prune to take, rather than artifacts no listing names and no prune removes.
        match remove_tree(&artifacts_root(home).join(&session.id)).and_then(|()| remove_tree(&dir))
        {
            Ok(()) => {
                report.bytes += session.bytes;
                removed(&session);
                report.removed.push(session);
            }
            Err(e) => report.kept.push(KeptSession {
                id: session.id,
                why: format!("it could not be removed: {e}"),
            }),
        }
    }
    report
}

/// Takes the writer's lock of the session recorded in `dir` for its removal and reads its record
/// again under it: why it must stay, if a writer holds it or wrote it since the plan read it
/// (resumed, it is no longer ended or old enough). A directory without a log has no writer to
/// hold off.
fn hold_unwritten(dir: &Path, request: &PruneRequest) -> Result<Option<std::fs::File>, String> {
    let held = match super::hold_record(dir) {
        Ok(held) => held,
        Err(SessionLogError::Claimed { .. }) => {
            return Err("it is being resumed".to_owned());
        }
        Err(e) => return Err(format!("its record could not be held: {e}")),
    };
    match super::read_meta(dir) {
        Ok(meta) if meta.effective_status() == RecordedStatus::Running => {
            Err("it is running".to_owned())
        }
        Ok(meta) if !old_enough(&meta, request) => Err("it was resumed since".to_owned()),
        Ok(_) | Err(_) => Ok(held),
    }
}

/// The highest `seq` of the logs prunes removed from `home` (0 when none was, or the file is
/// unreadable: then the logs left are all there is to go on).
pub fn seq_floor(home: &Path) -> u64 {
    std::fs::read_to_string(logs_dir(home).join(SEQ_FLOOR_FILE))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Raises `logs/seq_floor` to `seq` (never lowers it), replacing the file by a rename.
fn raise_seq_floor(home: &Path, seq: u64) -> std::io::Result<()> {
    if seq <= seq_floor(home) {
        return Ok(());
    }
    let logs = logs_dir(home);
    let tmp = logs.join(format!("{PRUNING_PREFIX}{SEQ_FLOOR_FILE}"));
    std::fs::write(&tmp, format!("{seq}\n"))?;
    std::fs::rename(&tmp, logs.join(SEQ_FLOOR_FILE))
}

/// Removes the tree at `path` (absent is fine): renamed to `.pruning-<name>` beside it first, so
/// it leaves every listing at once, then deleted however deep its commands made it
/// ([`crate::remove_tree`]). A link is removed, never followed.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let mut doomed = std::ffi::OsString::from(PRUNING_PREFIX);
    doomed.push(name);
    let doomed = parent.join(doomed);
    match std::fs::rename(path, &doomed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    crate::remove_tree::remove_tree(&doomed)
}

/// Deletes what an earlier prune left renamed under `dir` (it was cut short).
fn sweep_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(PRUNING_PREFIX))
        {
            // Best effort: what stays is retried by the next prune.
            let _ = crate::remove_tree::remove_tree(&entry.path());
        }
    }
}

/// Bytes of the files under `path` (links not followed; 0 when absent).
fn tree_bytes(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            total += meta.len();
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&path) {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::events::EndStatus;

    const DAY: u64 = 86_400;

    /// Records session `id` under `home` as last written `days_ago`, ended (or running, with
    /// this process as its writer), with `parent`, and a log whose last event is `seq`.
    fn record(home: &Path, id: &str, days_ago: u64, ended: bool, parent: Option<&str>, seq: u64) {
        let dir = logs_dir(home).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days_ago * DAY);
        let updated = intendant_protocol::utc::UtcTime::from_system(then).rfc3339();
        let meta = SessionMeta {
            id: id.to_owned(),
            created: updated.clone(),
            updated,
            status: if ended {
                RecordedStatus::Ended(EndStatus::Completed)
            } else {
                RecordedStatus::Running
            },
            pid: (!ended).then(std::process::id),
            parent: parent.map(str::to_owned),
            ..SessionMeta::new(Path::new("/proj"), "a task", "m", "mock")
        };
        std::fs::write(
            dir.join(super::super::META_FILE),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.join(super::super::EVENTS_FILE),
            format!("{{\"ts\":\"x\",\"seq\":{seq},\"event\":\"session_ended\"}}\n"),
        )
        .unwrap();
        let artifacts = artifacts_root(home).join(id);
        std::fs::create_dir_all(&artifacts).unwrap();
        std::fs::write(artifacts.join("1_out.log"), vec![b'x'; 1000]).unwrap();
    }

    fn ids(report: &PruneReport) -> Vec<&str> {
        report.removed.iter().map(|s| s.id.as_str()).collect()
    }

    fn kept(report: &PruneReport) -> Vec<(&str, &str)> {
        let mut kept: Vec<_> = report
            .kept
            .iter()
            .map(|k| (k.id.as_str(), k.why.as_str()))
            .collect();
        kept.sort();
        kept
    }

    fn older_than(days: u64) -> PruneRequest {
        PruneRequest {
            older_than_secs: days * DAY,
            dry_run: false,
        }
    }

    #[test]
    fn sessions_ended_long_enough_ago_go_and_everything_else_stays_saying_why() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        record(home, "20260101T000000Z-000001", 90, true, None, 10);
        record(home, "20260102T000000Z-000002", 60, true, None, 20);
        // Young: stays, and is not news.
        record(home, "20261201T000000Z-000003", 3, true, None, 30);
        // Old but still running (its writer, this process, lives).
        record(home, "20260103T000000Z-000004", 50, false, None, 5);
        // Old, with a young sub-agent: stays while it does.
        record(home, "20260104T000000Z-000005", 45, true, None, 6);
        record(
            home,
            "20261202T000000Z-000006",
            2,
            true,
            Some("20260104T000000Z-000005"),
            31,
        );
        // Old, with an old sub-agent: both go.
        record(home, "20260105T000000Z-000007", 40, true, None, 7);
        record(
            home,
            "20260105T000000Z-000008",
            40,
            true,
            Some("20260105T000000Z-000007"),
            8,
        );
        // Old, held by the caller (a worktree), and its old parent with it.
        record(home, "20260106T000000Z-000009", 40, true, None, 9);
        record(
            home,
            "20260106T000000Z-000010",
            40,
            true,
            Some("20260106T000000Z-000009"),
            11,
        );
        let keep = |meta: &SessionMeta| {
            (meta.id == "20260106T000000Z-000010").then(|| "its worktree is there".to_owned())
        };

        let planned = plan(home, &older_than(30), &keep).unwrap();
        assert!(planned.dry_run);
        assert_eq!(
            ids(&planned),
            [
                "20260101T000000Z-000001",
                "20260102T000000Z-000002",
                "20260105T000000Z-000007",
                "20260105T000000Z-000008",
            ],
            "oldest first"
        );
        assert_eq!(
            kept(&planned),
            [
                ("20260103T000000Z-000004", "it is running"),
                (
                    "20260104T000000Z-000005",
                    "its sub-agent 20261202T000000Z-000006 is kept"
                ),
                (
                    "20260106T000000Z-000009",
                    "its sub-agent 20260106T000000Z-000010 is kept"
                ),
                ("20260106T000000Z-000010", "its worktree is there"),
            ]
        );
        assert!(
            planned.removed.iter().all(|s| s.bytes > 1000),
            "{planned:?}"
        );
        assert_eq!(
            planned.bytes,
            planned.removed.iter().map(|s| s.bytes).sum::<u64>()
        );
        // A plan removes nothing.
        assert_eq!(list_sessions(home).unwrap().len(), 10);

        let mut told = Vec::new();
        let done = carry_out(home, planned.clone(), &older_than(30), &mut |s| {
            // Told once it is gone.
            assert!(!logs_dir(home).join(&s.id).exists());
            told.push(s.clone());
        });
        assert!(!done.dry_run);
        assert_eq!(done.removed, planned.removed);
        assert_eq!(told, done.removed, "each removed session told as it went");
        assert_eq!(done.bytes, planned.bytes);
        let left: Vec<String> = list_sessions(home)
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(left.len(), 6, "{left:?}");
        for gone in ids(&done) {
            assert!(!left.iter().any(|id| id == gone));
            assert!(!logs_dir(home).join(gone).exists());
            assert!(!artifacts_root(home).join(gone).exists());
        }
        // Nothing renamed is left behind, and the highest seq removed is kept.
        for dir in [logs_dir(home), artifacts_root(home)] {
            for entry in std::fs::read_dir(dir).unwrap() {
                let name = entry.unwrap().file_name();
                assert!(!name.to_string_lossy().starts_with('.'), "{name:?}");
            }
        }
        assert_eq!(seq_floor(home), 20);
        // Again: nothing more is old enough.
        assert!(
            plan(home, &older_than(30), &keep)
                .unwrap()
                .removed
                .is_empty()
        );
    }

    #[test]
    fn the_seq_floor_only_rises_and_a_cut_short_prune_is_finished_by_the_next() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        assert_eq!(seq_floor(home), 0);
        record(home, "20260101T000000Z-000001", 90, true, None, 500);
        carry_out(
            home,
            plan(home, &older_than(1), &|_| None).unwrap(),
            &older_than(1),
            &mut |_| {},
        );
        assert_eq!(seq_floor(home), 500);
        record(home, "20260102T000000Z-000002", 90, true, None, 40);
        // What a crash between the rename and the delete leaves, with a readable meta inside:
        // never listed, deleted by the next prune.
        record(home, "20260103T000000Z-000003", 90, true, None, 41);
        std::fs::rename(
            logs_dir(home).join("20260103T000000Z-000003"),
            logs_dir(home).join(".pruning-20260103T000000Z-000003"),
        )
        .unwrap();
        assert_eq!(list_sessions(home).unwrap().len(), 1);
        let done = carry_out(
            home,
            plan(home, &older_than(1), &|_| None).unwrap(),
            &older_than(1),
            &mut |_| {},
        );
        assert_eq!(ids(&done), ["20260102T000000Z-000002"]);
        assert_eq!(seq_floor(home), 500, "never lowered");
        assert!(
            !logs_dir(home)
                .join(".pruning-20260103T000000Z-000003")
                .exists()
        );
    }

    #[test]
    fn a_session_resumed_since_the_plan_is_kept_not_removed_under_its_writer() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let id = "20260101T000000Z-000001";
        record(home, id, 90, true, None, 1);
        let dir = logs_dir(home).join(id);
        // Resumed since the plan, still running: its writer holds its record.
        let planned = plan(home, &older_than(1), &|_| None).unwrap();
        let meta = super::super::read_meta(&dir).unwrap();
        let writer = super::super::SessionLog::reopen(home, &dir, meta).unwrap();
        let done = carry_out(home, planned, &older_than(1), &mut |_| {});
        assert!(done.removed.is_empty(), "{done:?}");
        assert_eq!(kept(&done), [(id, "it is being resumed")]);
        assert!(dir.join(super::super::EVENTS_FILE).exists());
        // Resumed and ended since the plan: written now, not old enough any more.
        let planned_before_it_ended = plan(home, &older_than(1), &|_| None).unwrap();
        drop(writer);
        assert_eq!(ids(&planned_before_it_ended), Vec::<&str>::new());
        record(home, id, 90, true, None, 1);
        let planned = plan(home, &older_than(1), &|_| None).unwrap();
        assert_eq!(ids(&planned), [id]);
        let meta = super::super::read_meta(&dir).unwrap();
        let resumed = super::super::SessionLog::reopen(home, &dir, meta).unwrap();
        resumed
            .record_event(&intendant_protocol::events::AppEvent::SessionEnded {
                session_id: id.into(),
                status: EndStatus::Completed,
                reason: "done".into(),
            })
            .unwrap();
        drop(resumed);
        let done = carry_out(home, planned, &older_than(1), &mut |_| {});
        assert!(done.removed.is_empty(), "{done:?}");
        assert_eq!(kept(&done), [(id, "it was resumed since")]);
        assert!(dir.exists());
    }

    #[test]
    fn a_session_that_cannot_be_removed_is_kept_saying_why() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        record(home, "20260101T000000Z-000001", 90, true, None, 1);
        let planned = plan(home, &older_than(1), &|_| None).unwrap();
        // Gone meanwhile (another prune, a human): nothing to remove is not a failure.
        std::fs::remove_dir_all(logs_dir(home).join("20260101T000000Z-000001")).unwrap();
        let done = carry_out(home, planned, &older_than(1), &mut |_| {});
        assert_eq!(ids(&done), ["20260101T000000Z-000001"]);
        assert!(done.kept.is_empty());

        // One whose event numbers cannot be kept (the floor's place taken by a directory) is
        // kept, saying so: its log is the only record of them.
        record(home, "20260102T000000Z-000002", 90, true, None, 7);
        std::fs::create_dir_all(logs_dir(home).join(SEQ_FLOOR_FILE).join("x")).unwrap();
        let planned = plan(home, &older_than(1), &|_| None).unwrap();
        let done = carry_out(home, planned, &older_than(1), &mut |_| {});
        assert!(done.removed.is_empty(), "{done:?}");
        assert_eq!(done.kept.len(), 1);
        assert!(
            done.kept[0]
                .why
                .starts_with("its event numbers could not be kept"),
            "{:?}",
            done.kept
        );
        assert!(logs_dir(home).join("20260102T000000Z-000002").exists());
    }

    #[test]
    fn security_a_link_a_command_planted_in_its_artifacts_is_removed_never_followed() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let victim = tempfile::tempdir().unwrap();
        let precious = "keep me ".repeat(100_000);
        std::fs::write(victim.path().join("precious.txt"), &precious).unwrap();
        record(home, "20260101T000000Z-000001", 90, true, None, 1);
        // What a session's command may write: its own artifacts directory, links and all.
        let artifacts = artifacts_root(home).join("20260101T000000Z-000001");
        std::os::unix::fs::symlink(victim.path(), artifacts.join("to-dir")).unwrap();
        std::fs::create_dir(artifacts.join("deeper")).unwrap();
        std::os::unix::fs::symlink(
            victim.path().join("precious.txt"),
            artifacts.join("deeper").join("to-file"),
        )
        .unwrap();
        let planned = plan(home, &older_than(1), &|_| None).unwrap();
        // The links count as links, not as what they name.
        assert!(planned.removed[0].bytes < 100_000, "{planned:?}");
        let done = carry_out(home, planned, &older_than(1), &mut |_| {});
        assert_eq!(ids(&done), ["20260101T000000Z-000001"]);
        assert!(!artifacts.exists());
        assert_eq!(
            std::fs::read_to_string(victim.path().join("precious.txt")).unwrap(),
            precious
        );
    }

    #[test]
    fn an_unreadable_time_is_never_old_enough() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        record(home, "20260101T000000Z-000001", 90, true, None, 1);
        let path = logs_dir(home)
            .join("20260101T000000Z-000001")
            .join(super::super::META_FILE);
        let mut meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        meta["updated"] = "yesterday".into();
        std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
        assert!(
            plan(home, &older_than(0), &|_| None)
                .unwrap()
                .removed
                .is_empty()
        );
    }

    #[test]
    fn the_agendas_schedules_that_ended_before_the_cut_go_with_the_sessions() {
        use intendant_store::agenda;
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        record(home, "20260101T000000Z-000001", 90, true, None, 10);
        // No database: nothing to count, and none made.
        let planned = plan(home, &older_than(30), &|_| None).unwrap();
        assert_eq!((planned.schedules, &planned.schedules_error), (0, &None));
        assert!(!home.join(intendant_store::DB_FILE).exists());

        let now = intendant_protocol::utc::UtcTime::now().unix_seconds();
        let day = DAY as i64;
        let store = intendant_store::Store::open(home).unwrap();
        const REQUEST: &str = r#"{"task":"t","project":"/p"}"#;
        // Made 60 days ago for 59 days ago and never approved: missed.
        let old =
            agenda::add_schedule(&store, "old", now - 59 * day, REQUEST, now - 60 * day).unwrap();
        // Refused 10 days ago: younger than the cut.
        let young =
            agenda::add_schedule(&store, "young", now + day, REQUEST, now - 10 * day).unwrap();
        agenda::reject(&store, young.id).unwrap();
        agenda::claim_due(&store, now, 60, "test").unwrap();
        assert_eq!(
            agenda::get(&store, old.id).unwrap().state,
            agenda::State::Missed
        );

        let planned = plan(home, &older_than(30), &|_| None).unwrap();
        assert_eq!(planned.schedules, 1, "{planned:?}");
        assert!(
            agenda::get(&store, old.id).is_ok(),
            "a plan removes nothing"
        );
        let done = carry_out(home, planned, &older_than(30), &mut |_| {});
        assert_eq!((done.schedules, &done.schedules_error), (1, &None));
        assert!(agenda::get(&store, old.id).is_err());
        assert!(agenda::get(&store, young.id).is_ok());

        // A database that cannot be read is said, and the sessions' prune goes on.
        drop(store);
        std::fs::write(home.join(intendant_store::DB_FILE), b"not a database").unwrap();
        record(home, "20260102T000000Z-000002", 90, true, None, 11);
        let planned = plan(home, &older_than(30), &|_| None).unwrap();
        assert!(planned.schedules_error.is_some(), "{planned:?}");
        let done = carry_out(home, planned, &older_than(30), &mut |_| {});
        assert_eq!(ids(&done), ["20260102T000000Z-000002"]);
        assert!(done.schedules_error.is_some());
    }
}

//! Resuming a recorded session: rebuild the conversation from `conversation.jsonl` and reopen
//! the same session directory for appends.
//!
//! A session cut off mid-turn may end with tool calls that never got results, which every
//! provider rejects; those get a synthetic "not run" result in the rebuilt conversation (not on
//! disk, so every resume repairs the same way). A torn last line is skipped and reported.

use std::path::Path;

use intendant_protocol::events::RecordedStatus;
use intendant_providers::ConversationItem;

use crate::session_log::{
    SessionLog, SessionLogError, SessionMeta, TornTail, list_sessions, read_conversation,
    read_meta, resolve_session_id,
};

/// Result text given to a tool call that never completed before the session was cut off.
pub const INTERRUPTED_CALL_OUTPUT: &str =
    "not run: the session was interrupted before this call completed; reissue it if still needed";

/// A session ready to go on.
pub struct ResumeState {
    /// The reopened session directory (appends continue in the same files).
    pub log: SessionLog,
    /// Metadata as recorded before this resume.
    pub meta: SessionMeta,
    /// The rebuilt conversation, oldest first.
    pub items: Vec<ConversationItem>,
    /// Set when `conversation.jsonl` ended in a torn line (skipped).
    pub torn_tail: Option<TornTail>,
    /// How many dangling tool calls were given a synthetic result.
    pub closed_calls: usize,
}

/// Resumes the session `id` (an exact id or a unique prefix) under `home`.
pub fn resume_by_id(home: &Path, id: &str) -> Result<ResumeState, SessionLogError> {
    let dir = resolve_session_id(home, id)?;
    let meta = read_meta(&dir)?;
    if let Some(pid) = meta.pid
        && pid != std::process::id()
        && meta.status == RecordedStatus::Running
        && meta.writer_alive()
    {
        return Err(SessionLogError::StillRunning { id: meta.id, pid });
    }
    let (items, torn_tail, closed_calls) =
        recorded_conversation(home, &dir, &meta.project_root, &meta.id)?;
    let log = SessionLog::reopen(home, &dir, meta.clone())?;
    Ok(ResumeState {
        log,
        meta,
        items,
        torn_tail,
        closed_calls,
    })
}

/// The conversation of session `id` of `project`, recorded in `dir`, as the model is to see it
/// next: `conversation.jsonl` without what rewinds cut, every dangling tool call closed. Also
/// the torn last line it skipped, and how many calls it closed.
pub fn recorded_conversation(
    home: &Path,
    dir: &Path,
    project: &Path,
    id: &str,
) -> Result<(Vec<ConversationItem>, Option<TornTail>, usize), SessionLogError> {
    let read = read_conversation(dir)?;
    let cuts =
        crate::checkpoint::recorded_cuts(home, project, id).map_err(|e| SessionLogError::Meta {
            path: dir.to_path_buf(),
            message: format!("its conversation rewinds cannot be read: {e}"),
        })?;
    let mut items = crate::checkpoint::apply_cuts(read.records, &cuts);
    let closed_calls = close_dangling_calls(&mut items);
    Ok((items, read.torn_tail, closed_calls))
}

/// Resumes the most recent session whose project root is `project_root`.
pub fn resume_latest(home: &Path, project_root: &Path) -> Result<ResumeState, SessionLogError> {
    resume_by_id(home, &latest(home, project_root)?.id)
}

/// The metadata of the session `id` (an exact id or a unique prefix) under `home`, read only:
/// what a resume would continue.
pub fn recorded(home: &Path, id: &str) -> Result<SessionMeta, SessionLogError> {
    read_meta(&resolve_session_id(home, id)?)
}

/// The metadata of the session of `project_root` worked on last (`--continue`): the top session
/// whose record was written last. A sub-agent is its parent's to run (`--continue` took the
/// child a session had started last, the newest record of the project), and a session resumed
/// since is later than one started before that resume.
pub fn latest(home: &Path, project_root: &Path) -> Result<SessionMeta, SessionLogError> {
    let wanted = canonical(project_root);
    list_sessions(home)?
        .into_iter()
        .filter(|m| m.parent.is_none() && canonical(&m.project_root) == wanted)
        .max_by(|a, b| a.updated.cmp(&b.updated).then_with(|| a.id.cmp(&b.id)))
        .ok_or_else(|| SessionLogError::NoSessionForProject {
            project_root: project_root.to_path_buf(),
        })
}

/// Whether a resume of `recorded` may go on in `project_root`: in the project it worked in, or
/// (that directory gone: moved, or a sub-agent's worktree removed) where it is asked to, with a
/// note saying so. A resume elsewhere while its project is still there is refused, naming it:
/// its conversation is about that project's files, and its checkpoints are that project's.
pub fn check_project(
    recorded: &SessionMeta,
    project_root: &Path,
) -> Result<Option<String>, String> {
    let worked_in = &recorded.project_root;
    if canonical(worked_in) == canonical(project_root) {
        return Ok(None);
    }
    let id = &recorded.id;
    if worked_in.is_dir() {
        return Err(format!(
            "session {id} worked in {}, not {}: resume it in its own project",
            worked_in.display(),
            project_root.display()
        ));
    }
    let branch = recorded
        .worktree
        .as_ref()
        .map(|w| {
            format!(
                " (the worktree of branch {}, which keeps its commits)",
                w.branch
            )
        })
        .unwrap_or_default();
    Ok(Some(format!(
        "session {id} worked in {}{branch}, which no longer exists: it goes on in {}",
        worked_in.display(),
        project_root.display()
    )))
}

fn canonical(p: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Gives every tool call without a result a synthetic error result, placed before the next user
/// message (or at the end). Returns how many were added.
fn close_dangling_calls(items: &mut Vec<ConversationItem>) -> usize {
    let mut added = 0;
    let mut i = 0;
    while i < items.len() {
        if let ConversationItem::ToolCall(call) = &items[i] {
            let answered = items[i + 1..].iter().any(|it| {
                matches!(it, ConversationItem::ToolResult { call_id, .. } if *call_id == call.call_id)
            });
            if !answered {
                let result = ConversationItem::ToolResult {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    output: INTERRUPTED_CALL_OUTPUT.to_owned(),
                    is_error: true,
                    images: Vec::new(),
                };
                let at = items[i + 1..]
                    .iter()
                    .position(|it| matches!(it, ConversationItem::User { .. }))
                    .map_or(items.len(), |p| i + 1 + p);
                items.insert(at, result);
                added += 1;
            }
        }
        i += 1;
    }
    added
}

#[cfg(test)]
mod tests {
    use intendant_protocol::events::EndStatus;

    use super::*;
    use crate::conversation::tests::{call, result, user};

    #[test]
    fn a_resume_goes_on_in_its_own_project_or_where_asked_once_that_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let (own, other) = (root.path().join("own"), root.path().join("other"));
        std::fs::create_dir(&own).unwrap();
        std::fs::create_dir(&other).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        let mut meta = SessionMeta::new(&own, "task", "m", "p");
        meta.id = "20261207T000000Z-abcdef".into();
        // Its own project, however it is spelled.
        assert_eq!(check_project(&meta, &own), Ok(None));
        assert_eq!(check_project(&meta, &link), Ok(None));
        // Elsewhere while its own is there: refused, naming both.
        let refused = check_project(&meta, &other).unwrap_err();
        assert!(
            refused.contains(&own.display().to_string())
                && refused.contains(&other.display().to_string()),
            "{refused}"
        );
        // Its own gone (a sub-agent's worktree, removed): where asked, said so with its branch.
        meta.worktree = Some(intendant_protocol::daemon::WorktreeInfo {
            path: own.display().to_string(),
            branch: "intendant/p-0".into(),
            outcome: Some("removed".into()),
        });
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir(&own).unwrap();
        let note = check_project(&meta, &other).unwrap().unwrap();
        assert!(
            note.contains("no longer exists")
                && note.contains("intendant/p-0")
                && note.contains(&other.display().to_string()),
            "{note}"
        );
    }

    #[test]
    fn dangling_calls_get_results_before_the_next_user_turn() {
        let mut items = vec![
            user("task"),
            call("a"),
            call("b"),
            result("a"),
            user("more"),
        ];
        assert_eq!(close_dangling_calls(&mut items), 1);
        assert_eq!(items.len(), 6);
        assert!(matches!(
            &items[4],
            ConversationItem::ToolResult { call_id, is_error: true, .. } if call_id == "b"
        ));
        assert_eq!(items[5], user("more"));

        let mut tail = vec![user("task"), call("a")];
        assert_eq!(close_dangling_calls(&mut tail), 1);
        assert!(matches!(&tail[2], ConversationItem::ToolResult { call_id, .. } if call_id == "a"));

        let mut whole = vec![user("task"), call("a"), result("a")];
        assert_eq!(close_dangling_calls(&mut whole), 0);
    }

    fn session(home: &Path, root: &Path, items: &[ConversationItem]) -> String {
        let log = SessionLog::create(home, SessionMeta::new(root, "t", "m", "mock")).unwrap();
        for it in items {
            log.append_conversation(it).unwrap();
        }
        log.update_meta(|m| m.status = RecordedStatus::Ended(EndStatus::Completed))
            .unwrap();
        log.id().to_owned()
    }

    #[test]
    fn resume_by_id_rebuilds_and_reopens() {
        let home = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let id = session(home.path(), root.path(), &[user("task"), call("a")]);
        let dir = home.path().join("logs").join(&id);
        let conv = dir.join(crate::session_log::CONVERSATION_FILE);
        let mut bytes = std::fs::read(&conv).unwrap();
        bytes.extend_from_slice(b"{\"type\":\"tool_res");
        std::fs::write(&conv, bytes).unwrap();

        let state = resume_by_id(home.path(), &id[..20]).unwrap();
        assert_eq!(state.log.id(), id);
        assert_eq!(state.log.dir(), dir);
        assert!(state.torn_tail.is_some());
        assert_eq!(state.closed_calls, 1);
        assert_eq!(state.items.len(), 3);
        assert_eq!(
            state.meta.status,
            RecordedStatus::Ended(EndStatus::Completed)
        );
        state.log.append_conversation(&user("again")).unwrap();
        let reread = read_conversation(&dir).unwrap();
        assert_eq!(reread.torn_tail, None);
        assert_eq!(reread.records.len(), 3);
        let meta = read_meta(&dir).unwrap();
        assert_eq!(meta.status, RecordedStatus::Running);
        assert_eq!(meta.resumes, 1);
    }

    #[test]
    fn resume_latest_picks_this_projects_newest() {
        let home = tempfile::tempdir().unwrap();
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let first_a = session(home.path(), a.path(), &[user("a1")]);
        let only_b = session(home.path(), b.path(), &[user("b1")]);
        // Ids carry second resolution; make the order certain.
        let newer = "29991231T235959Z-ffffff";
        std::fs::rename(
            home.path().join("logs").join(&first_a),
            home.path().join("logs").join(newer),
        )
        .unwrap();
        let dir = home.path().join("logs").join(newer);
        let mut meta = read_meta(&dir).unwrap();
        meta.id = newer.into();
        std::fs::write(
            dir.join(crate::session_log::META_FILE),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();

        let state = resume_latest(home.path(), a.path()).unwrap();
        assert_eq!(state.log.id(), newer);
        assert_eq!(state.items, vec![user("a1")]);
        let state = resume_latest(home.path(), b.path()).unwrap();
        assert_eq!(state.log.id(), only_b);
        let other = tempfile::tempdir().unwrap();
        assert!(matches!(
            resume_latest(home.path(), other.path()),
            Err(SessionLogError::NoSessionForProject { .. })
        ));
    }

    #[test]
    fn continue_takes_the_top_session_worked_on_last_not_a_sub_agent() {
        let home = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let older = session(home.path(), root.path(), &[user("older")]);
        let newer = session(home.path(), root.path(), &[user("newer")]);
        let written = |id: &str, updated: &str, parent: Option<&str>| {
            let dir = home.path().join("logs").join(id);
            let mut meta = read_meta(&dir).unwrap();
            meta.updated = updated.into();
            meta.parent = parent.map(str::to_owned);
            std::fs::write(
                dir.join(crate::session_log::META_FILE),
                serde_json::to_vec(&meta).unwrap(),
            )
            .unwrap();
        };
        written(&older, "2026-12-07T10:00:00.000Z", None);
        written(&newer, "2026-12-07T09:00:00.000Z", None);
        // The older session, resumed since, was worked on last.
        assert_eq!(latest(home.path(), root.path()).unwrap().id, older);
        // A sub-agent of it, written later still, is not taken.
        let child = session(home.path(), root.path(), &[user("child")]);
        written(&child, "2026-12-07T11:00:00.000Z", Some(&older));
        assert_eq!(latest(home.path(), root.path()).unwrap().id, older);
        written(&newer, "2026-12-07T12:00:00.000Z", None);
        assert_eq!(latest(home.path(), root.path()).unwrap().id, newer);
    }

    #[test]
    fn a_live_session_of_another_process_is_not_resumed() {
        let home = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let log =
            SessionLog::create(home.path(), SessionMeta::new(root.path(), "t", "m", "x")).unwrap();
        // pid 1 is alive on every Linux system and is not this process.
        let start = std::fs::read_to_string("/proc/1/stat").ok().and_then(|s| {
            s[s.rfind(')')? + 1..]
                .split_whitespace()
                .nth(19)?
                .parse()
                .ok()
        });
        log.update_meta(|m| {
            m.pid = Some(1);
            m.pid_start = start;
        })
        .unwrap();
        #[cfg(target_os = "linux")]
        assert!(matches!(
            resume_by_id(home.path(), log.id()),
            Err(SessionLogError::StillRunning { pid: 1, .. })
        ));
    }
}

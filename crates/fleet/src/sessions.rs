//! Each member's sessions in the bucket [`crate::SESSIONS_BUCKET`]: one record per member,
//! rewritten when its list changes, read by every member to list the fleet's sessions.

use async_nats::jetstream::kv;
use intendant_protocol::daemon::{SessionStatus, SessionSummary};
use intendant_protocol::fleet::MemberSessions;
use intendant_protocol::utc::UtcTime;

/// The largest record a member writes: well under NATS's default 1 MiB message.
pub(crate) const MAX_RECORD_BYTES: usize = 512 * 1024;
/// The most characters of a session's final text published.
const FINAL_TEXT_CHARS: usize = 240;

/// What a member publishes of `sessions`, its newest (at least [`MemberSessions::LIMIT`] of
/// them, or all) out of `total`: the newest [`MemberSessions::LIMIT`], oldest first, without
/// their `usage`, and how many older ones it leaves out.
pub(crate) fn newest(
    mut sessions: Vec<SessionSummary>,
    total: usize,
) -> (Vec<SessionSummary>, usize) {
    sessions.sort_by(|a, b| (&a.created, &a.id).cmp(&(&b.created, &b.id)));
    sessions.drain(..sessions.len().saturating_sub(MemberSessions::LIMIT));
    // What a session's processes use changes by the moment: at the other members it would be
    // stale, and the record rewritten at every change. It is read on the member running it.
    for session in &mut sessions {
        session.usage = None;
    }
    let omitted = total.max(sessions.len()) - sessions.len();
    (sessions, omitted)
}

/// The record of `member` listing its [`newest`] `sessions` (`omitted` older ones left out),
/// bounded: each final text cut short, and older ones left out until it fits
/// [`MAX_RECORD_BYTES`].
pub(crate) fn record(
    member: &str,
    (mut sessions, mut omitted): (Vec<SessionSummary>, usize),
) -> Result<Vec<u8>, String> {
    for session in &mut sessions {
        if let Some(text) = &mut session.final_text
            && text.chars().count() > FINAL_TEXT_CHARS
        {
            *text = text.chars().take(FINAL_TEXT_CHARS).collect::<String>() + "…";
        }
        session.result = None;
    }
    loop {
        let bytes = serde_json::to_vec(&MemberSessions {
            member: member.to_owned(),
            published: UtcTime::now().rfc3339(),
            sessions: sessions.clone(),
            omitted: omitted as u64,
            lost: false,
        })
        .map_err(|e| e.to_string())?;
        if bytes.len() <= MAX_RECORD_BYTES || sessions.is_empty() {
            return Ok(bytes);
        }
        // Each round drops the oldest eighth (at least one): a few rounds at most.
        let cut = (sessions.len() / 8).max(1);
        sessions.drain(..cut);
        omitted += cut;
    }
}

/// Writes `member`'s record.
pub(crate) async fn publish(store: &kv::Store, member: &str, bytes: Vec<u8>) -> Result<(), String> {
    store
        .put(member, bytes.into())
        .await
        .map(drop)
        .map_err(|e| format!("the member's sessions cannot be published: {e}"))
}

/// Every member's record but `except`'s, by name; a member not in `alive` is marked lost and
/// its unfinished sessions shown `interrupted`.
pub(crate) async fn read_all(
    store: &kv::Store,
    except: &str,
    alive: &[String],
) -> Result<Vec<MemberSessions>, String> {
    let error = |e: String| format!("the fleet's sessions cannot be read: {e}");
    let keys = crate::buckets::keys(store).await.map_err(error)?;
    let mut members = Vec::new();
    for key in keys.into_iter().filter(|k| k != except) {
        let Some(bytes) = store.get(&key).await.map_err(|e| error(e.to_string()))? else {
            continue;
        };
        // A record that does not read (another version's) is left out rather than fail all.
        let Ok(mut record) = serde_json::from_slice::<MemberSessions>(&bytes) else {
            continue;
        };
        if !alive.contains(&record.member) {
            lose(&mut record);
        }
        members.push(record);
    }
    members.sort_by(|a, b| a.member.cmp(&b.member));
    Ok(members)
}

/// Leaves out of a lost member's list each session a live member lists too (resumed there
/// from the mirror): the live member's is the session now.
pub(crate) fn drop_taken_over(members: &mut [MemberSessions]) {
    let live: std::collections::HashSet<String> = members
        .iter()
        .filter(|m| !m.lost)
        .flat_map(|m| m.sessions.iter().map(|s| s.id.clone()))
        .collect();
    for member in members.iter_mut().filter(|m| m.lost) {
        member.sessions.retain(|s| !live.contains(&s.id));
    }
}

/// Marks `record` as a lost member's: nothing runs its unfinished sessions any more.
fn lose(record: &mut MemberSessions) {
    record.lost = true;
    for session in &mut record.sessions {
        if !session.status.is_finished() {
            session.status = SessionStatus::Interrupted;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: usize, status: SessionStatus, text: &str) -> SessionSummary {
        serde_json::from_value(serde_json::json!({
            "id": format!("s{id}"), "project": "/p", "task": "t", "backend": {"kind": "native"},
            "provider": "mock", "model": "m", "status": status.name(), "autonomy": "medium",
            "created": format!("2026-01-01T00:{:02}:{:02}Z", id / 60, id % 60), "input_tokens": 0, "output_tokens": 0,
            "cost_usd": 0.0, "pending_approvals": 0, "final_text": text,
        }))
        .unwrap()
    }

    #[test]
    fn what_a_sessions_processes_use_is_not_published() {
        // It changes by the moment: published, every heartbeat would rewrite the record.
        let mut busy = session(1, SessionStatus::Running, "");
        busy.usage = Some(intendant_protocol::daemon::SessionUsage {
            processes: 3,
            memory_bytes: None,
            cpu_ms: Some(1200),
        });
        let (kept, _) = newest(vec![busy], 1);
        assert_eq!(kept[0].usage, None);
    }

    #[test]
    fn a_record_keeps_the_newest_sessions_and_stays_under_its_size() {
        // Out of order: the newest are kept, whatever order they were given in.
        let many: Vec<_> = (0..300)
            .rev()
            .map(|i| session(i, SessionStatus::Done, "short"))
            .collect();
        let bytes = record("alpha", newest(many, 300)).unwrap();
        let read: MemberSessions = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(read.sessions.len(), MemberSessions::LIMIT);
        assert_eq!(read.omitted, 300 - MemberSessions::LIMIT as u64);
        assert_eq!(read.sessions.last().unwrap().id, "s299");
        // Given only its newest (a daemon's page of them), out of many more.
        let page: Vec<_> = (9_744..10_000)
            .map(|i| session(i, SessionStatus::Done, "short"))
            .collect();
        let read: MemberSessions =
            serde_json::from_slice(&record("alpha", newest(page, 10_000)).unwrap()).unwrap();
        assert_eq!(read.sessions.len(), MemberSessions::LIMIT);
        assert_eq!(read.omitted, 10_000 - MemberSessions::LIMIT as u64);

        let long = "x".repeat(100_000);
        let big: Vec<_> = (0..200)
            .map(|i| session(i, SessionStatus::Done, &long))
            .collect();
        let bytes = record("alpha", newest(big, 200)).unwrap();
        assert!(bytes.len() <= MAX_RECORD_BYTES);
        let read: MemberSessions = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(read.sessions.len(), 200, "cut texts fit");
        assert!(
            read.sessions[0]
                .final_text
                .as_ref()
                .unwrap()
                .chars()
                .count()
                <= FINAL_TEXT_CHARS + 1
        );
    }

    #[test]
    fn a_session_a_live_member_lists_is_left_out_of_a_lost_members_list() {
        let member = |name: &str, lost: bool, ids: &[usize]| MemberSessions {
            member: name.into(),
            published: String::new(),
            sessions: ids
                .iter()
                .map(|i| session(*i, SessionStatus::Running, ""))
                .collect(),
            omitted: 0,
            lost,
        };
        let mut members = vec![
            member("beta", true, &[1, 2]),
            member("gamma", false, &[2, 3]),
        ];
        drop_taken_over(&mut members);
        let ids = |m: &MemberSessions| m.sessions.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&members[0]), ["s1"]);
        assert_eq!(ids(&members[1]), ["s2", "s3"]);
    }

    #[test]
    fn a_lost_members_unfinished_sessions_read_interrupted() {
        let mut record = MemberSessions {
            member: "beta".into(),
            published: String::new(),
            sessions: vec![
                session(1, SessionStatus::Running, ""),
                session(2, SessionStatus::Done, ""),
                session(3, SessionStatus::Idle, ""),
            ],
            omitted: 0,
            lost: false,
        };
        lose(&mut record);
        let statuses: Vec<_> = record.sessions.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                SessionStatus::Interrupted,
                SessionStatus::Done,
                SessionStatus::Interrupted
            ]
        );
        assert!(record.lost);
    }
}

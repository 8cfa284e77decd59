//! A fleet member's records mirrored to the fleet (`docs/fleet.md`, "Failover"): every second
//! the daemon looks at its sessions' records and publishes what grew since (whole lines of
//! `session.jsonl` and `conversation.jsonl`), then `session_meta.json` when it changed, and a
//! placed session's origin (`fleet/origin/<id>.json` beneath the state root). What the server
//! did not acknowledge is sent again the next time from where the fleet's copy ends: the
//! records on disk are the queue, so a member cut off from the server loses nothing and catches
//! up once it is back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use intendant_fleet::mirror::{Mirror, RecordFile, RecordOrigin, usable_id};

/// How often the records are looked at.
const POLL: Duration = Duration::from_secs(1);

/// What the fleet holds of one session, as far as this member knows.
#[derive(Default)]
struct Sent {
    /// Bytes of each growing file the fleet holds (`None`: not asked yet).
    files: [Option<u64>; 2],
    /// The metadata last published.
    meta: Option<Vec<u8>>,
    /// The origin was published.
    origin: bool,
    /// Sizes and the metadata's time when everything was last sent: unchanged, nothing to do.
    seen: Option<Stamp>,
}

type Stamp = (u64, u64, Option<SystemTime>);

/// The origin file of placed session `id` beneath the state root `home`.
pub(crate) fn origin_path(home: &Path, id: &str) -> PathBuf {
    home.join("fleet").join("origin").join(format!("{id}.json"))
}

/// Writes where placed session `id`'s project comes from, for the mirror to publish.
pub(crate) fn write_origin(home: &Path, id: &str, origin: &RecordOrigin) -> Result<(), String> {
    let path = origin_path(home, id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let bytes = serde_json::to_vec(origin).map_err(|e| e.to_string())?;
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Mirrors the records beneath `home` to the fleet for as long as the daemon runs.
pub(crate) async fn mirror_records(mirror: Mirror, home: PathBuf) {
    let mut sent: HashMap<String, Sent> = HashMap::new();
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connects = mirror.connects();
    loop {
        ticks.tick().await;
        // Connected again: the server may have restarted and lost what it acknowledged last
        // (killed before writing it), so where each copy ends is asked again, and the
        // metadata and origins sent again.
        let now = mirror.connects();
        if now != connects {
            connects = now;
            sent.clear();
        }
        let logs = intendant_core::session_log::logs_dir(&home);
        let Ok(entries) = std::fs::read_dir(&logs) else {
            continue;
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|id| usable_id(id))
            .collect();
        ids.sort();
        // A session pruned from the state root is forgotten here too.
        sent.retain(|id, _| ids.binary_search(id).is_ok());
        for id in ids {
            let state = sent.entry(id.clone()).or_default();
            // The server away: the rest waits for the next round, from where each copy ends.
            if sync(&mirror, &home, &logs.join(&id), &id, state)
                .await
                .is_err()
            {
                break;
            }
        }
    }
}

/// Sizes of the growing files and the metadata's time, or `None` when the record is not whole.
fn stamp(dir: &Path) -> Option<Stamp> {
    let len = |name: &str| std::fs::symlink_metadata(dir.join(name)).map(|m| m.len());
    let meta = std::fs::symlink_metadata(dir.join("session_meta.json")).ok()?;
    Some((
        len(RecordFile::Log.file_name()).unwrap_or(0),
        len(RecordFile::Conversation.file_name()).unwrap_or(0),
        meta.modified().ok(),
    ))
}

/// Publishes what of session `id`'s record in `dir` the fleet does not hold yet.
async fn sync(
    mirror: &Mirror,
    home: &Path,
    dir: &Path,
    id: &str,
    state: &mut Sent,
) -> Result<(), String> {
    let Some(now) = stamp(dir) else {
        return Ok(());
    };
    if state.seen == Some(now) {
        return Ok(());
    }
    for (i, file) in RecordFile::ALL.into_iter().enumerate() {
        let held = match state.files[i] {
            Some(held) => held,
            None => {
                let held = mirror.mirrored_len(id, file).await?;
                state.files[i] = Some(held);
                held
            }
        };
        let lines = whole_lines_from(&dir.join(file.file_name()), held);
        if !lines.is_empty() {
            mirror.append(id, file, held, &lines).await?;
            state.files[i] = Some(held + lines.len() as u64);
        }
    }
    if let Ok(meta) = std::fs::read(dir.join("session_meta.json"))
        && state.meta.as_ref() != Some(&meta)
    {
        mirror.put_meta(id, meta.clone()).await?;
        state.meta = Some(meta);
    }
    if !state.origin
        && let Ok(bytes) = std::fs::read(origin_path(home, id))
        && let Ok(origin) = serde_json::from_slice::<RecordOrigin>(&bytes)
    {
        mirror.put_origin(id, &origin).await?;
        state.origin = true;
    }
    state.seen = Some(now);
    Ok(())
}

/// The bytes of `path` from `offset` up to its last newline (a line being written is left for
/// the next round); nothing when the file is shorter (replaced) or unreadable.
fn whole_lines_from(path: &Path, offset: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    match bytes.iter().rposition(|b| *b == b'\n') {
        Some(last) => {
            bytes.truncate(last + 1);
            bytes
        }
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_after_the_offset_are_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, "one\ntwo\nthr").unwrap();
        assert_eq!(whole_lines_from(&path, 0), b"one\ntwo\n");
        assert_eq!(whole_lines_from(&path, 4), b"two\n");
        assert!(whole_lines_from(&path, 8).is_empty(), "a torn line waits");
        assert!(whole_lines_from(&path, 100).is_empty());
        assert!(whole_lines_from(&dir.path().join("none"), 0).is_empty());
    }
}

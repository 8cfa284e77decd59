//! Sessions' records mirrored to the fleet in the stream [`crate::RECORDS_STREAM`], so that a
//! session of a member that died can be resumed on another (`docs/fleet.md`, "Failover").
//!
//! Subjects, per session id: `intendant.fleet.records.<id>.meta` (its `session_meta.json`, the
//! newest only: each is a rollup of its subject), `.origin` (where a placed session's project
//! comes from: [`RecordOrigin`], the newest only), and `.log` and `.conversation` (its
//! `session.jsonl` and `conversation.jsonl`, which only grow, as chunks: each says in the header
//! `Intendant-Offset` where in the file it starts, and carries a `Nats-Msg-Id` of the session,
//! file and offset, so a chunk sent twice after a lost acknowledgement is stored once).
//!
//! The stream is bounded ([`MAX_BYTES`], [`MAX_AGE`]; the oldest chunks go first). A record
//! whose first chunks went, or that has a gap, is refused when read rather than rebuilt wrong.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use serde::{Deserialize, Serialize};

use crate::Member;

/// Subjects of the records.
const SUBJECTS: &str = "intendant.fleet.records.>";
/// The most bytes the stream holds: past it the oldest chunks are dropped.
pub const MAX_BYTES: i64 = 1024 * 1024 * 1024;
/// How long a chunk is kept.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The largest chunk published (NATS's default message is at most 1 MiB).
pub const MAX_CHUNK: usize = 256 * 1024;
/// The header saying where in its file a chunk starts.
const OFFSET_HEADER: &str = "Intendant-Offset";
/// How long one publish or read may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A file of a session's record that only grows, mirrored in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFile {
    /// `session.jsonl`, its events.
    Log,
    /// `conversation.jsonl`, what the model saw.
    Conversation,
}

impl RecordFile {
    /// Both, in the order they are mirrored.
    pub const ALL: [RecordFile; 2] = [RecordFile::Log, RecordFile::Conversation];

    /// The file's name in a session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            RecordFile::Log => "session.jsonl",
            RecordFile::Conversation => "conversation.jsonl",
        }
    }

    fn token(self) -> &'static str {
        match self {
            RecordFile::Log => "log",
            RecordFile::Conversation => "conversation",
        }
    }
}

/// Where a placed session's project comes from, so that another member can make it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordOrigin {
    /// The member that runs (or last ran) the session.
    pub member: String,
    /// The repository it was placed with (`ctl start --fleet --repo`).
    pub repo: String,
    /// The ref it was placed at, if one was named.
    #[serde(default)]
    pub git_ref: Option<String>,
}

/// A session's record as the fleet holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirroredRecord {
    /// Its `session_meta.json`, as last published.
    pub meta: Vec<u8>,
    /// Its `session.jsonl` up to the last chunk published.
    pub log: Vec<u8>,
    /// Its `conversation.jsonl` up to the last chunk published.
    pub conversation: Vec<u8>,
    /// Where its project comes from, for a placed session.
    pub origin: Option<RecordOrigin>,
}

/// The records' stream, as one member writes and reads it.
#[derive(Debug, Clone)]
pub struct Mirror {
    jetstream: jetstream::Context,
    stream: stream::Stream,
}

/// Whether `id` can stand in a subject: letters, digits, `-` and `_` only.
pub fn usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn subject(id: &str, part: &str) -> String {
    format!("intendant.fleet.records.{id}.{part}")
}

fn checked(id: &str) -> Result<(), String> {
    if usable_id(id) {
        Ok(())
    } else {
        Err(format!("the session id {id:?} cannot be mirrored"))
    }
}

async fn timed<T>(
    what: &str,
    future: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| Err(format!("{what}: no answer from the server")))
}

impl Mirror {
    /// The records' stream of `member`'s fleet, made when it is not there yet (in fields a 2.9
    /// server knows).
    pub async fn open(member: &Member) -> Result<Mirror, String> {
        let jetstream = member.jetstream().clone();
        let stream = jetstream
            .get_or_create_stream(stream::Config {
                name: crate::RECORDS_STREAM.to_owned(),
                description: Some("intendant: fleet sessions' records, for failover".to_owned()),
                subjects: vec![SUBJECTS.to_owned()],
                max_bytes: MAX_BYTES,
                max_age: MAX_AGE,
                max_message_size: i32::try_from(MAX_CHUNK * 2).unwrap_or(i32::MAX),
                discard: stream::DiscardPolicy::Old,
                storage: stream::StorageType::File,
                allow_rollup: true,
                allow_direct: true,
                duplicate_window: Duration::from_secs(120),
                num_replicas: 1,
                ..stream::Config::default()
            })
            .await
            .map_err(|e| format!("the records' stream cannot be made: {e}"))?;
        Ok(Mirror { jetstream, stream })
    }

    /// How many times this member's connection to the server was made (the first included): a
    /// change means the server may have restarted, and what it acknowledged last before a
    /// `kill -9` may be gone (nats-server writes a stored message to its file a few
    /// milliseconds after acknowledging it), so the mirror asks again where each copy ends.
    pub fn connects(&self) -> u64 {
        crate::buckets::connects(&self.jetstream)
    }

    /// How many bytes of session `id`'s `file` the fleet holds (0 when none).
    pub async fn mirrored_len(&self, id: &str, file: RecordFile) -> Result<u64, String> {
        checked(id)?;
        let last = timed("reading the mirror", self.last(subject(id, file.token()))).await?;
        Ok(last.map_or(0, |(offset, payload)| offset + payload.len() as u64))
    }

    /// Publishes `bytes` as session `id`'s `file` from `offset` on, in chunks of at most
    /// [`MAX_CHUNK`], each acknowledged before the next (a failure leaves the rest unsent: the
    /// caller sends again from where the fleet's copy ends).
    pub async fn append(
        &self,
        id: &str,
        file: RecordFile,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), String> {
        checked(id)?;
        let mut at = offset;
        for chunk in bytes.chunks(MAX_CHUNK) {
            let mut headers = HeaderMap::new();
            headers.insert(OFFSET_HEADER, at.to_string().as_str());
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                format!("{id}.{}.{at}", file.token()).as_str(),
            );
            self.publish(subject(id, file.token()), headers, chunk.to_vec())
                .await?;
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// Publishes session `id`'s metadata (`session_meta.json` as it is now), replacing the
    /// last.
    pub async fn put_meta(&self, id: &str, bytes: Vec<u8>) -> Result<(), String> {
        checked(id)?;
        self.put(subject(id, "meta"), bytes).await
    }

    /// Publishes where session `id`'s project comes from, replacing the last.
    pub async fn put_origin(&self, id: &str, origin: &RecordOrigin) -> Result<(), String> {
        checked(id)?;
        let bytes = serde_json::to_vec(origin).map_err(|e| e.to_string())?;
        self.put(subject(id, "origin"), bytes).await
    }

    /// Session `id`'s record as the fleet holds it, `None` when it holds none; an error when
    /// part of it is gone (the stream's limits dropped its first chunks) or the server does not
    /// answer.
    pub async fn read(&self, id: &str) -> Result<Option<MirroredRecord>, String> {
        checked(id)?;
        let Some((_, meta)) = timed("reading the mirror", self.last(subject(id, "meta"))).await?
        else {
            return Ok(None);
        };
        let origin = timed("reading the mirror", self.last(subject(id, "origin")))
            .await?
            .and_then(|(_, bytes)| serde_json::from_slice(&bytes).ok());
        let mut record = MirroredRecord {
            meta,
            origin,
            ..MirroredRecord::default()
        };
        for file in RecordFile::ALL {
            let bytes = self.file(id, file).await?;
            match file {
                RecordFile::Log => record.log = bytes,
                RecordFile::Conversation => record.conversation = bytes,
            }
        }
        Ok(Some(record))
    }

    /// Every chunk of session `id`'s `file`, put together; a chunk sent twice is taken once.
    async fn file(&self, id: &str, file: RecordFile) -> Result<Vec<u8>, String> {
        let subject = subject(id, file.token());
        let mut bytes = Vec::new();
        let mut sequence = 1;
        loop {
            let next = self
                .stream
                .direct_get_next_for_subject(&subject, Some(sequence));
            let message = match tokio::time::timeout(TIMEOUT, next).await {
                Err(_) => return Err("reading the mirror: no answer from the server".to_owned()),
                Ok(Err(e)) if e.kind() == stream::DirectGetErrorKind::NotFound => {
                    return Ok(bytes);
                }
                Ok(Err(e)) => return Err(format!("reading the mirror: {e}")),
                Ok(Ok(message)) => message,
            };
            sequence = message.sequence + 1;
            let offset = offset_of(&message.headers).ok_or_else(|| {
                format!("the mirror of {id}'s {} is unreadable", file.file_name())
            })?;
            let have = bytes.len() as u64;
            let end = offset + message.payload.len() as u64;
            if offset > have {
                return Err(format!(
                    "the mirror of {id}'s {} is incomplete: bytes {have} to {offset} are gone \
                     (the records' stream dropped them)",
                    file.file_name()
                ));
            }
            if end > have {
                let skip = usize::try_from(have - offset).unwrap_or(usize::MAX);
                bytes.extend_from_slice(&message.payload[skip..]);
            }
        }
    }

    /// The last message on `subject`: its offset header (0 without one) and payload.
    async fn last(&self, subject: String) -> Result<Option<(u64, Vec<u8>)>, String> {
        match self.stream.direct_get_last_for_subject(subject).await {
            Ok(message) => Ok(Some((
                offset_of(&message.headers).unwrap_or(0),
                message.payload.to_vec(),
            ))),
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading the mirror: {e}")),
        }
    }

    async fn put(&self, subject: String, bytes: Vec<u8>) -> Result<(), String> {
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_ROLLUP, "sub");
        self.publish(subject, headers, bytes).await
    }

    async fn publish(
        &self,
        subject: String,
        headers: HeaderMap,
        bytes: Vec<u8>,
    ) -> Result<(), String> {
        timed("publishing to the mirror", async {
            self.jetstream
                .publish_with_headers(subject, headers, bytes.into())
                .await
                .map_err(|e| format!("publishing to the mirror: {e}"))?
                .await
                .map(drop)
                .map_err(|e| format!("publishing to the mirror: {e}"))
        })
        .await
    }
}

fn offset_of(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(OFFSET_HEADER)
        .and_then(|v| v.as_str().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_stand_in_a_subject() {
        assert!(usable_id("20261203-004812-1a2b"));
        for bad in ["", "a.b", "a*", "a>", "a b", "../x"] {
            assert!(!usable_id(bad), "{bad}");
        }
    }
}

//! Placements' outcomes, kept in the key-value bucket [`crate::PLACEMENTS_BUCKET`] (one key per
//! placement id): `pending` written by the member that queues a placement before it queues it,
//! then `taken`, `started` (with the session) or `failed` (with the reason) by the member that
//! took it. `ctl placement ID` and `ctl start --fleet --wait` read it on any member.
//!
//! Bounded: a record is dropped [`MAX_AGE`] after it was last written (the work queue keeps a
//! request as long), and past [`MAX_RECORDS`] the oldest records go first.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use intendant_protocol::fleet::{PlacementState, PlacementStatus};
use intendant_protocol::utc::UtcTime;

/// How long a placement's record is kept after it was last written.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// The most records kept: past it the oldest are dropped.
pub const MAX_RECORDS: i64 = 100_000;

/// The bucket, made when it is not there yet (see [`crate::buckets::bucket`]): the oldest records go
/// first past [`MAX_RECORDS`], since a status is worth less than the next placement's.
pub(crate) async fn bucket(jetstream: &jetstream::Context) -> Result<kv::Store, String> {
    crate::buckets::bucket(
        jetstream,
        crate::PLACEMENTS_BUCKET,
        "intendant: each fleet placement's outcome",
        MAX_AGE,
        Some(MAX_RECORDS),
    )
    .await
}

/// Whether `id` can be a key (what `place` makes: letters and digits).
pub(crate) fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric())
}

/// A record of placement `id` queued by `by`, in `state` now.
pub(crate) fn status(id: &str, by: &str, state: PlacementState) -> PlacementStatus {
    PlacementStatus {
        id: id.to_owned(),
        by: by.to_owned(),
        state,
        member: None,
        session: None,
        reason: None,
        updated: UtcTime::now().rfc3339(),
    }
}

/// Writes `status` under its id.
pub(crate) async fn write(store: &kv::Store, status: &PlacementStatus) -> Result<(), String> {
    if !usable(&status.id) {
        return Err(format!("the placement id {:?} is not usable", status.id));
    }
    let bytes = serde_json::to_vec(status).map_err(|e| e.to_string())?;
    store
        .put(status.id.as_str(), bytes.into())
        .await
        .map(drop)
        .map_err(|e| format!("the placement's status cannot be written: {e}"))
}

/// The record of placement `id`, if the fleet keeps one.
pub(crate) async fn read(store: &kv::Store, id: &str) -> Result<Option<PlacementStatus>, String> {
    if !usable(id) {
        return Ok(None);
    }
    let value = store
        .get(id)
        .await
        .map_err(|e| format!("the placements' bucket cannot be read: {e}"))?;
    Ok(value.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
}

/// `text` with the user and password of every URL in it left out (`https://u:p@host/x` reads
/// `https://host/x`): a failure's reason is kept in the fleet and shown on every member.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the first `/`, whitespace or quote; a `@` before it ends the
        // user information.
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(user) => out.push_str(&authority[user + 1..]),
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_user_and_password_are_left_out_of_a_reason() {
        assert_eq!(
            redact_urls(
                "cloning https://me:s3cret@git.example/x.git: fatal: 'https://me:s3cret@git.example/x.git' not found"
            ),
            "cloning https://git.example/x.git: fatal: 'https://git.example/x.git' not found"
        );
        assert_eq!(
            redact_urls("cloning /srv/x.git: no"),
            "cloning /srv/x.git: no"
        );
        assert_eq!(redact_urls("ssh://git@host:22/x"), "ssh://host:22/x");
        assert_eq!(redact_urls("a://"), "a://");
    }

    #[test]
    fn only_plain_ids_are_keys() {
        assert!(usable("p0123abcd"));
        for bad in ["", "a.b", "*", ">", "a b", "p-1"] {
            assert!(!usable(bad), "{bad:?}");
        }
    }
}

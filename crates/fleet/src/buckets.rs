//! The fleet's key-value buckets, made in fields every server the fleet supports knows, and
//! the count of a member's connections to the server.

use std::time::Duration;

use async_nats::jetstream::{self, kv};

/// How many times `jetstream`'s connection to the server was made (the first included).
pub(crate) fn connects(jetstream: &jetstream::Context) -> u64 {
    jetstream
        .client()
        .statistics()
        .connects
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// The key-value bucket `name`, made when it is not there yet.
///
/// The bucket's stream is made here rather than with `create_key_value`: async-nats asks the
/// server for the account's info first and cannot read the answer of a nats-server before 2.10
/// (no `reserved_memory`), which Debian ships (2.9). The stream is what `create_key_value` would
/// make, in fields a 2.9 server knows: one value per key, rollups allowed, direct gets.
///
/// With `keep_newest`, at most that many records are kept and the oldest go first; without it
/// the bucket is bounded by age alone and a write past the server's limits is refused.
pub(crate) async fn bucket(
    jetstream: &jetstream::Context,
    name: &str,
    description: &str,
    max_age: Duration,
    keep_newest: Option<i64>,
) -> Result<kv::Store, String> {
    if let Ok(store) = jetstream.get_key_value(name).await {
        return Ok(store);
    }
    jetstream
        .get_or_create_stream(jetstream::stream::Config {
            name: format!("KV_{name}"),
            description: Some(description.to_owned()),
            subjects: vec![format!("$KV.{name}.>")],
            max_messages_per_subject: 1,
            max_messages: keep_newest.unwrap_or(-1),
            max_age,
            storage: jetstream::stream::StorageType::File,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: match keep_newest {
                Some(_) => jetstream::stream::DiscardPolicy::Old,
                None => jetstream::stream::DiscardPolicy::New,
            },
            num_replicas: 1,
            ..jetstream::stream::Config::default()
        })
        .await
        .map_err(|e| format!("the bucket {name} cannot be made: {e}"))?;
    jetstream
        .get_key_value(name)
        .await
        .map_err(|e| format!("the bucket {name} cannot be opened: {e}"))
}

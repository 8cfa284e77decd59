//! The fleet's key-value buckets, made in fields every server the fleet supports knows, their
//! keys as the server has them, and the count of a member's connections to the server.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::TryStreamExt;

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

/// Every key in `store` now, from the server's own count of its stream's subjects.
///
/// Not async-nats's `Store::keys`, which follows a consumer until the server says nothing is
/// pending: while keys are rewritten, its listings left a key out (more than half of 500 while
/// two keys were rewritten) or gave one many times (the test below, pointed at it). A key whose
/// last entry is a delete is listed too: reading it finds nothing.
pub(crate) async fn keys(store: &kv::Store) -> Result<Vec<String>, String> {
    let subjects: Vec<(String, usize)> = store
        .stream
        .info_with_subjects(format!("{}>", store.prefix))
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut keys: Vec<String> = subjects
        .into_iter()
        .filter_map(|(subject, _)| subject.strip_prefix(&store.prefix).map(str::to_owned))
        .collect();
    keys.sort();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two keys rewritten as fast as the server takes them: every listing has both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listing_under_writes_to_other_keys_has_every_key() {
        let Some(bin) = intendant_testkit::nats::binary() else {
            return;
        };
        let store_dir = tempfile::tempdir().unwrap();
        let port = intendant_testkit::nats::free_port().unwrap();
        let mut server = intendant_testkit::nats::spawn(&bin, port, store_dir.path(), &[]).unwrap();
        let client = async_nats::connect(format!("127.0.0.1:{port}"))
            .await
            .unwrap();
        let jetstream = jetstream::new(client);
        let store = bucket(&jetstream, "test", "keys", Duration::from_secs(60), None)
            .await
            .unwrap();
        store.put("gone", "x".into()).await.unwrap();
        store.delete("gone").await.unwrap();
        let writers: Vec<_> = ["alpha", "beta"]
            .into_iter()
            .map(|key| {
                let store = store.clone();
                tokio::spawn(async move {
                    for n in 0_u64.. {
                        let _ = store.put(key, n.to_string().into()).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..200 {
            let keys = keys(&store).await.unwrap();
            assert_eq!(keys, ["alpha", "beta", "gone"]);
        }
        assert_eq!(
            store.get("gone").await.unwrap(),
            None,
            "a deleted key reads as none"
        );
        writers.iter().for_each(tokio::task::JoinHandle::abort);
        let _ = server.kill();
        let _ = server.wait();
    }
}

//! Placement: the work-queue stream [`crate::WORK_STREAM`] that `ctl start --fleet` puts a
//! session on, and the pull consumers a member takes one from when it has a free slot.
//!
//! Subjects: `intendant.fleet.work.any` (any member), `intendant.fleet.work.member.<NAME>` (that
//! member alone), `intendant.fleet.work.label.<LABEL>` (a member with that label). A work-queue
//! stream lets consumers' filters not overlap, so each subject has one durable consumer shared
//! by every member that may take from it (`any`, `member_<NAME>`, `label_<LABEL>`): a request is
//! delivered to one member, once.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use intendant_protocol::fleet::FleetStartRequest;

/// Subjects of the work queue.
pub(crate) const WORK_SUBJECTS: &str = "intendant.fleet.work.>";
/// The most requests waiting at once: past it a request is refused, never dropped silently.
const MAX_WAITING: i64 = 10_000;
/// How long a request waits for a member before the stream drops it.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// How long a member has to acknowledge a request it took before it is offered again.
const ACK_WAIT: Duration = Duration::from_secs(30);
/// The longest one pull from a consumer may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(5);

/// The subject a request for `on` or `label` (or any member) waits on.
pub(crate) fn subject(request: &FleetStartRequest) -> String {
    match (&request.on, &request.label) {
        (Some(member), _) => format!("intendant.fleet.work.member.{member}"),
        (None, Some(label)) => format!("intendant.fleet.work.label.{label}"),
        (None, None) => "intendant.fleet.work.any".to_owned(),
    }
}

/// The work-queue stream, made when it is not there yet (in fields a 2.9 server knows).
pub(crate) async fn stream(jetstream: &jetstream::Context) -> Result<stream::Stream, String> {
    jetstream
        .get_or_create_stream(stream::Config {
            name: crate::WORK_STREAM.to_owned(),
            description: Some("intendant: sessions waiting for a fleet member".to_owned()),
            subjects: vec![WORK_SUBJECTS.to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            max_messages: MAX_WAITING,
            max_age: MAX_WAIT,
            discard: stream::DiscardPolicy::New,
            storage: stream::StorageType::File,
            num_replicas: 1,
            ..stream::Config::default()
        })
        .await
        .map_err(|e| format!("the work queue cannot be made: {e}"))
}

/// The consumers a member named `name` with `labels` takes requests from, its own first.
pub(crate) async fn consumers(
    stream: &stream::Stream,
    name: &str,
    labels: &[String],
) -> Result<Vec<consumer::PullConsumer>, String> {
    let mut wanted = vec![(
        format!("member_{name}"),
        format!("intendant.fleet.work.member.{name}"),
    )];
    wanted.extend(labels.iter().map(|label| {
        (
            format!("label_{label}"),
            format!("intendant.fleet.work.label.{label}"),
        )
    }));
    wanted.push(("any".to_owned(), "intendant.fleet.work.any".to_owned()));
    let mut consumers = Vec::new();
    for (durable, filter) in wanted {
        let consumer = stream
            .get_or_create_consumer(
                &durable,
                consumer::pull::Config {
                    durable_name: Some(durable.clone()),
                    filter_subject: filter,
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    ..consumer::pull::Config::default()
                },
            )
            .await
            .map_err(|e| format!("the work queue's consumer {durable} cannot be made: {e}"))?;
        consumers.push(consumer);
    }
    Ok(consumers)
}

/// Takes one waiting request from the first of `consumers` that has one, acknowledged (it is
/// this member's now: it is never offered again, also if this member fails to run it).
pub(crate) async fn take(
    consumers: &[consumer::PullConsumer],
) -> Result<Option<FleetStartRequest>, String> {
    for consumer in consumers {
        // A pull nobody answers must not stall the member's taking for good.
        let pulled = tokio::time::timeout(PULL_TIMEOUT, pull(consumer)).await;
        let Ok(pulled) = pulled else {
            continue;
        };
        if let Some(request) = pulled? {
            return Ok(Some(request));
        }
    }
    Ok(None)
}

/// One request from `consumer`, acknowledged, if one waits.
async fn pull(consumer: &consumer::PullConsumer) -> Result<Option<FleetStartRequest>, String> {
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .map_err(|e| format!("the work queue cannot be read: {e}"))?;
    let Some(message) = batch.next().await else {
        return Ok(None);
    };
    let message = message.map_err(|e| format!("the work queue cannot be read: {e}"))?;
    message
        .double_ack()
        .await
        .map_err(|e| format!("a request cannot be taken: {e}"))?;
    // A request that does not read (another version's) is taken and dropped.
    Ok(serde_json::from_slice(&message.payload).ok())
}

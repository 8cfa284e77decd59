//! Placement: the work-queue stream [`crate::WORK_STREAM`] that `ctl start --fleet` puts a
//! session on, and the pull consumers a member takes one from when it has a free slot.
//!
//! Subjects: `intendant.fleet.work.any` (any member), `intendant.fleet.work.member.<NAME>` (that
//! member alone), `intendant.fleet.work.label.<LABEL>` (a member with that label). A work-queue
//! stream lets consumers' filters not overlap, so each subject has one durable consumer shared
//! by every member that may take from it (`any`, `member_<NAME>`, `label_<LABEL>`): a request is
//! delivered to one member, once.
//!
//! Waking: a member does not poll the queue. The member that queues a request publishes, once
//! the server acknowledged it (so it is stored), a core NATS signal on the request's subject
//! beneath `intendant.fleet.placed.` (`any`, `member.<NAME>`, `label.<LABEL>`): each member
//! subscribed to its own wakes and pulls. A member also pulls when a slot of its own frees while
//! requests may wait, and every [`LOOK_EVERY`] whatever it heard, for what no signal announced
//! (one queued while it was cut off from the server, or offered again after another member took
//! it and died before acknowledging it).

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
/// How often a member with a free slot looks at the queue without a signal.
pub const LOOK_EVERY: Duration = Duration::from_secs(5);
/// The prefix of the signals that a request was queued (core NATS, not kept by the server).
const SIGNAL_PREFIX: &str = "intendant.fleet.placed";

/// The subject a request for `on` or `label` (or any member) waits on.
pub(crate) fn subject(request: &FleetStartRequest) -> String {
    match (&request.on, &request.label) {
        (Some(member), _) => format!("intendant.fleet.work.member.{member}"),
        (None, Some(label)) => format!("intendant.fleet.work.label.{label}"),
        (None, None) => "intendant.fleet.work.any".to_owned(),
    }
}

/// The signal subject that says a request for `request`'s subject was queued.
pub(crate) fn signal_subject(request: &FleetStartRequest) -> String {
    let work = subject(request);
    let tail = work.strip_prefix("intendant.fleet.work.").unwrap_or("any");
    format!("{SIGNAL_PREFIX}.{tail}")
}

/// The signal subjects a member named `name` with `labels` wakes on (as its consumers, below).
pub(crate) fn signal_subjects(name: &str, labels: &[String]) -> Vec<String> {
    let mut subjects = vec![format!("{SIGNAL_PREFIX}.member.{name}")];
    subjects.extend(
        labels
            .iter()
            .map(|label| format!("{SIGNAL_PREFIX}.label.{label}")),
    );
    subjects.push(format!("{SIGNAL_PREFIX}.any"));
    subjects
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
        loop {
            // A pull nobody answers must not stall the member's taking for good.
            let pulled = tokio::time::timeout(PULL_TIMEOUT, pull(consumer)).await;
            let Ok(pulled) = pulled else {
                break;
            };
            match pulled? {
                Pulled::Request(request) => return Ok(Some(*request)),
                // Taken and dropped: the next one of the same consumer is asked for, so that
                // an empty answer means the consumer has nothing left.
                Pulled::Unreadable => {}
                Pulled::Nothing => break,
            }
        }
    }
    Ok(None)
}

/// What one pull from a consumer gave.
enum Pulled {
    /// A request, acknowledged.
    Request(Box<FleetStartRequest>),
    /// A request that does not read (another version's), acknowledged and dropped.
    Unreadable,
    /// Nothing waits.
    Nothing,
}

/// One request from `consumer`, acknowledged, if one waits.
async fn pull(consumer: &consumer::PullConsumer) -> Result<Pulled, String> {
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .map_err(|e| format!("the work queue cannot be read: {e}"))?;
    let Some(message) = batch.next().await else {
        return Ok(Pulled::Nothing);
    };
    let message = message.map_err(|e| format!("the work queue cannot be read: {e}"))?;
    message
        .double_ack()
        .await
        .map_err(|e| format!("a request cannot be taken: {e}"))?;
    Ok(
        serde_json::from_slice(&message.payload).map_or(Pulled::Unreadable, |request| {
            Pulled::Request(Box::new(request))
        }),
    )
}

/// The signals a member wakes on when a request it may take was queued
/// ([`crate::Member::placement_signals`]).
pub struct PlacementSignals {
    subscriptions: futures::stream::SelectAll<async_nats::Subscriber>,
}

impl std::fmt::Debug for PlacementSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementSignals")
            .field("subscriptions", &self.subscriptions.len())
            .finish()
    }
}

impl PlacementSignals {
    /// Subscribes `client` to `subjects`.
    pub(crate) async fn subscribe(
        client: &async_nats::Client,
        subjects: Vec<String>,
    ) -> Result<PlacementSignals, String> {
        let mut subscriptions = Vec::new();
        for subject in subjects {
            let subscriber = client
                .subscribe(subject.clone())
                .await
                .map_err(|e| format!("cannot subscribe to {subject}: {e}"))?;
            subscriptions.push(subscriber);
        }
        Ok(PlacementSignals {
            subscriptions: futures::stream::select_all(subscriptions),
        })
    }

    /// Waits for the next signal, and takes every other one already there with it (a burst of
    /// placements is one wake-up); `false` once the connection closed for good (no signal
    /// comes any more: [`LOOK_EVERY`] alone wakes the member).
    pub async fn next(&mut self) -> bool {
        if self.subscriptions.next().await.is_none() {
            return false;
        }
        while let Some(Some(_)) = futures::FutureExt::now_or_never(self.subscriptions.next()) {}
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::daemon::StartRequest;

    fn request(on: Option<&str>, label: Option<&str>) -> FleetStartRequest {
        FleetStartRequest {
            id: "p1".to_owned(),
            by: "alpha".to_owned(),
            start: StartRequest::default(),
            repo: "/r.git".to_owned(),
            git_ref: None,
            on: on.map(str::to_owned),
            label: label.map(str::to_owned),
        }
    }

    #[test]
    fn a_requests_signal_reaches_exactly_the_members_that_may_take_it() {
        let labels = vec!["gpu".to_owned()];
        let beta = signal_subjects("beta", &labels);
        let gamma = signal_subjects("gamma", &[]);
        let on_beta = signal_subject(&request(Some("beta"), None));
        let gpu = signal_subject(&request(None, Some("gpu")));
        let any = signal_subject(&request(None, None));
        assert_eq!(on_beta, "intendant.fleet.placed.member.beta");
        assert!(beta.contains(&on_beta) && !gamma.contains(&on_beta));
        assert!(beta.contains(&gpu) && !gamma.contains(&gpu));
        assert!(beta.contains(&any) && gamma.contains(&any));
        // Never a subject of the work queue: the stream would keep the signal as a request.
        for subject in beta.iter().chain(&gamma) {
            assert!(!subject.starts_with("intendant.fleet.work."), "{subject}");
        }
    }
}

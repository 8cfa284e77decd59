//! `GET /api/events`: the daemon's events live, as server-sent events.
//!
//! Each event is one SSE message whose `id` is the envelope's `seq` and whose data is the
//! envelope as JSON. A browser that reconnects sends the last id as `Last-Event-ID` and the
//! stream resumes right after it, so nothing is shown twice or missed; `?after=SEQ` does the
//! same for a first connection (`Last-Event-ID` wins), and neither means "from now on". A
//! subscriber that falls behind gets one `lagged` event and the stream ends: the browser
//! reconnects by itself from its last id and re-fetches its lists. On a fleet member the
//! stream of every session also carries every other member's events, each with its `member`
//! and no `id` (its `seq` is that member's): live only, not resumed. Comments keep idle
//! connections open through proxies. At most `[daemon] max_web_streams` streams are open at
//! once; one more is a 503 `busy`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use futures::stream::{self, Stream};
use intendant_core::host::EventStream;
use intendant_protocol::daemon::StreamItem;
use tokio_util::task::AbortOnDropHandle;

use super::api::{AfterQuery, ApiError, Host};
use crate::outbox::{self, Outbox};

/// How often an idle stream sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a browser waits before reconnecting (SSE `retry`), in milliseconds.
const RETRY: Duration = Duration::from_millis(500);

/// How many live streams may be open at once, how many are, and what each may hold unsent.
#[derive(Debug, Clone)]
pub struct StreamCap {
    open: Arc<AtomicUsize>,
    max: usize,
    /// Bytes of events one stream keeps for a client that has not read them
    /// (`[daemon] client_buffer_kib`).
    buffer: usize,
}

/// One open stream of a [`StreamCap`], given back when the stream is dropped.
struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StreamCap {
    /// At most `max` streams at once, each keeping at most `buffer` bytes of events unsent.
    pub fn new(max: usize, buffer: usize) -> StreamCap {
        StreamCap {
            open: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
            buffer,
        }
    }

    fn enter(&self) -> Result<StreamSlot, ApiError> {
        if self.open.fetch_add(1, Ordering::SeqCst) >= self.max {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::busy(format!(
                "busy: {} live event streams are open, the most [daemon] max_web_streams allows",
                self.max
            )));
        }
        Ok(StreamSlot(self.open.clone()))
    }
}

/// `GET /api/events[?session=ID][&after=SEQ]`.
pub async fn events(
    State(host): State<Host>,
    Extension(cap): Extension<StreamCap>,
    headers: HeaderMap,
    query: Result<Query<AfterQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let slot = cap.enter()?;
    let Query(query) = query?;
    let after = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not a sequence number"))?,
        ),
        None => query.after,
    };
    let stream = host.subscribe(query.session.as_deref(), after).await?;
    Ok(Sse::new(sse_events(stream, slot, cap.buffer))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// The SSE messages of `stream`, ending after a `lagged` one; `slot` is held as long.
///
/// The host's stream is read as it publishes, into a queue of at most `buffer` bytes (the
/// control socket's rule): the response takes from that queue as its client reads, and an
/// event that finds no room makes the stream lag, so a client that reads nothing holds
/// `buffer` however large the events.
fn sse_events(
    stream: EventStream,
    slot: StreamSlot,
    buffer: usize,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = Event::default().retry(RETRY).comment("intendant");
    let (out, rx) = Outbox::new(buffer);
    let room = out.room().clone();
    let forwarder = tokio::spawn(async move {
        let (_, last) = outbox::forward(stream, &out, std::future::pending(), sse_event).await;
        if let Some((lagged, bytes)) = last {
            let _ = out.send(lagged, bytes).await;
        }
    });
    // The forwarder ends with the response (a client gone, or the daemon shutting down).
    let state = (rx, room, slot, AbortOnDropHandle::new(forwarder));
    let items = stream::unfold(state, |(mut rx, room, slot, forwarder)| async move {
        let queued = rx.recv().await?;
        room.add_permits(queued.room as usize);
        Some((queued.item, (rx, room, slot, forwarder)))
    });
    stream::once(async move { first })
        .chain(items)
        .map(Ok::<Event, Infallible>)
}

/// One stream item as an SSE message, and about how many bytes it is.
fn sse_event(item: StreamItem) -> (Event, usize) {
    match item {
        StreamItem::Event(envelope) => {
            let data = serde_json::to_string(&envelope).unwrap_or_else(|_| "{}".into());
            let bytes = data.len() + SSE_FRAMING;
            // Another fleet member's event carries that member's `seq`: no `id`, so the
            // browser resumes after this daemon's last event.
            let event = match envelope.resume_seq() {
                None => Event::default().data(data),
                Some(seq) => Event::default().id(seq.to_string()).data(data),
            };
            (event, bytes)
        }
        StreamItem::Lagged { next_seq } => {
            let data = format!("{{\"next_seq\":{next_seq}}}");
            let bytes = data.len() + SSE_FRAMING;
            (Event::default().event("lagged").data(data), bytes)
        }
    }
}

/// What an SSE message adds to its data (`id: `, `data: `, its seq, newlines), at most.
const SSE_FRAMING: usize = 48;

//! The HTTP side shared by every wire: POST with retry, error classification with bounded and
//! masked body excerpts, and the idle-timed SSE event stream.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};

use intendant_netguard::http::{error_chain, is_tls_refusal};

use crate::config::{ProviderConfig, ProviderKind};
use crate::mask::{mask_secret, masked_excerpt};
use crate::retry::parse_retry_after;
use crate::sse::{WireParser, WireStreamDecoder};
use crate::{EventStream, ProviderError, StreamEvent};

/// Most bytes of an error body read to build a message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// One wire's HTTP client.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: reqwest::Client,
    pub(crate) config: ProviderConfig,
    pub(crate) provider: &'static str,
}

impl HttpClient {
    pub(crate) fn new(kind: ProviderKind, config: ProviderConfig) -> Result<Self, ProviderError> {
        let client = intendant_netguard::http::client_builder()
            .map_err(|e| ProviderError::Config(e.to_string()))?
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::custom(same_origin_redirects))
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            config,
            provider: kind.as_str(),
        })
    }

    /// The API key, or a configuration error naming the variable when `kind` needs one.
    pub(crate) fn api_key(&self, kind: ProviderKind) -> Result<Option<&str>, ProviderError> {
        match self.config.api_key.as_deref() {
            Some(key) => Ok(Some(key)),
            None if kind.requires_api_key() => Err(ProviderError::Config(format!(
                "{} is not set (needed by the {} provider)",
                kind.api_key_env(),
                kind.as_str()
            ))),
            None => Ok(None),
        }
    }

    /// Masks the configured key and key-like strings.
    pub(crate) fn mask(&self, text: &str) -> String {
        mask_secret(text, self.config.api_key.as_deref())
    }

    /// The masked, bounded excerpt of server text for an error message.
    fn excerpt(&self, text: &str) -> String {
        masked_excerpt(text, self.config.api_key.as_deref())
    }

    /// POSTs `body` (retrying establishment per the policy) and returns the response's events.
    pub(crate) async fn post_sse<P: WireParser>(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: String,
        parser: P,
    ) -> Result<EventStream, ProviderError> {
        let body = Bytes::from(body);
        let response = self
            .config
            .retry
            .run(|| self.attempt(url, headers, body.clone()))
            .await?;
        let decoder = WireStreamDecoder::with_limit(parser, self.config.max_event_bytes);
        Ok(drive(
            response.bytes_stream().boxed(),
            decoder,
            self.config.idle_timeout,
            self.config.api_key.clone(),
        ))
    }

    async fn attempt(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = match tokio::time::timeout(self.config.header_timeout, request.send()).await
        {
            Err(_) => {
                return Err(ProviderError::Transport {
                    provider: self.provider,
                    message: format!(
                        "no response headers within {} ms",
                        self.config.header_timeout.as_millis()
                    ),
                    retryable: false,
                });
            }
            Ok(Err(e)) => {
                return Err(ProviderError::Transport {
                    provider: self.provider,
                    message: self.mask(&error_chain(&e)),
                    retryable: !e.is_timeout() && !is_tls_refusal(&e),
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_redirection() {
            // Only a redirect the policy would not follow gets here.
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    response
                        .url()
                        .join(v)
                        .map_or_else(|_| v.to_owned(), |url| url.to_string())
                })
                .unwrap_or_else(|| "(no location)".to_owned());
            return Err(ProviderError::Redirect {
                provider: self.provider,
                location: self.excerpt(&location),
            });
        }
        if status.is_success() {
            let json = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().starts_with("application/json"));
            if !json {
                return Ok(response);
            }
            // Some servers ignore `stream: true`, or report errors as a 200 JSON body.
            let body = read_bounded(response).await;
            return Err(ProviderError::Stream {
                provider: self.provider,
                message: self.excerpt(&format!(
                    "expected an event stream, got a JSON body: {}",
                    error_message(&body)
                )),
                retryable: false,
                retry_after_ms: None,
            });
        }
        let retry_after_ms = parse_retry_after(response.headers());
        let body = read_bounded(response).await;
        Err(ProviderError::Http {
            provider: self.provider,
            status: status.as_u16(),
            message: self.excerpt(&error_message(&body)),
            retry_after_ms,
        })
    }
}

/// Most redirects followed within one origin.
const MAX_REDIRECTS: usize = 10;

/// Follows a redirect only within the origin of the first request (scheme, host and port):
/// every provider request carries the key in a header reqwest re-sends across origins.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same = attempt.previous().first().is_some_and(|first| {
        first.scheme() == attempt.url().scheme()
            && first.host_str() == attempt.url().host_str()
            && first.port_or_known_default() == attempt.url().port_or_known_default()
    });
    if same && attempt.previous().len() <= MAX_REDIRECTS {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

async fn read_bounded(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

/// The human part of an API error body: `error.message` (with `error.type`/`status`) when the
/// body is the usual JSON envelope, the raw text otherwise.
pub(crate) fn error_message(body: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return body.to_owned();
    };
    // Gemini sometimes wraps the envelope in a one-element array.
    let value = value.get(0).unwrap_or(&value);
    let error = value.get("error").unwrap_or(value);
    let message = error.get("message").and_then(|m| m.as_str());
    let kind = ["type", "status", "code"]
        .iter()
        .find_map(|k| error.get(*k).and_then(|v| v.as_str()));
    match (kind, message) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (None, Some(message)) => message.to_owned(),
        (Some(_) | None, None) => body.to_owned(),
    }
}

struct DriveState<P> {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: WireStreamDecoder<P>,
    pending: VecDeque<StreamEvent>,
    scratch: Vec<StreamEvent>,
    idle: Duration,
    secret: Option<String>,
}

/// Turns a response body into normalized events: idle timeout between chunks, terminal event
/// guaranteed, error messages masked, the body dropped once a terminal event is out.
fn drive<P: WireParser>(
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: WireStreamDecoder<P>,
    idle: Duration,
    secret: Option<String>,
) -> EventStream {
    let state = DriveState {
        body,
        decoder,
        pending: VecDeque::new(),
        scratch: Vec::new(),
        idle,
        secret,
    };
    stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        loop {
            if let Some(event) = st.pending.pop_front() {
                let event = mask_event(event, st.secret.as_deref());
                let finished = st.pending.is_empty() && st.decoder.is_finished();
                return Some((event, if finished { None } else { Some(st) }));
            }
            if st.decoder.is_finished() {
                return None;
            }
            match tokio::time::timeout(st.idle, st.body.next()).await {
                Err(_) => st.scratch.push(StreamEvent::Error {
                    message: format!("no data for {} ms (idle timeout)", st.idle.as_millis()),
                    retryable: true,
                    retry_after_ms: None,
                }),
                Ok(None) => st.decoder.finish(&mut st.scratch),
                Ok(Some(Err(e))) => st.scratch.push(StreamEvent::Error {
                    message: format!("stream read failed: {}", error_chain(&e)),
                    retryable: true,
                    retry_after_ms: None,
                }),
                Ok(Some(Ok(chunk))) => st.decoder.feed(&chunk, &mut st.scratch),
            }
            let failed = st
                .scratch
                .iter()
                .any(|e| matches!(e, StreamEvent::Error { .. }));
            st.pending.extend(st.scratch.drain(..));
            if failed && !st.decoder.is_finished() {
                // Idle timeout or read failure: nothing more will come; stop after this batch.
                st.decoder.abort();
            }
        }
    })
    .boxed()
}

fn mask_event(event: StreamEvent, secret: Option<&str>) -> StreamEvent {
    match event {
        StreamEvent::Error {
            message,
            retryable,
            retry_after_ms,
        } => StreamEvent::Error {
            message: masked_excerpt(&message, secret),
            retryable,
            retry_after_ms,
        },
        StreamEvent::Warning { message } => StreamEvent::Warning {
            message: masked_excerpt(&message, secret),
        },
        other @ (StreamEvent::TextDelta { .. }
        | StreamEvent::RefusalDelta { .. }
        | StreamEvent::ReasoningDelta { .. }
        | StreamEvent::ReasoningDone { .. }
        | StreamEvent::ToolCallStart { .. }
        | StreamEvent::ToolCallArgumentsDelta { .. }
        | StreamEvent::ToolCallDone { .. }
        | StreamEvent::Usage { .. }
        | StreamEvent::Completed { .. }) => other,
    }
}

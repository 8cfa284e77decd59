//! The connection-establishment retry policy: up to five retries (six attempts) on HTTP 429,
//! 5xx and non-timeout transport failures, exponential backoff with jitter, `retry-after`
//! honoured. Every sleep is reported to an optional observer so tests can assert it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::ProviderError;

/// Retries after the first attempt.
pub const DEFAULT_MAX_RETRIES: u32 = 5;

/// Backoff base: the first retry waits about this long, each next one twice as long.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);

/// Longest server-requested delay honoured as is; longer ones are clamped to it.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// One retry about to happen.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// 1 for the first retry (the second attempt), up to `max_retries`.
    pub retry: u32,
    /// How long the policy sleeps before it.
    pub delay: Duration,
    /// What failed.
    pub error: ProviderError,
}

/// Called before every retry sleep.
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// How connection establishment is retried.
#[derive(Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Backoff base delay.
    pub base_delay: Duration,
    /// Cap on a server-requested delay.
    pub max_retry_after: Duration,
    /// Sees every retry before its sleep.
    pub observer: Option<RetryObserver>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("base_delay", &self.base_delay)
            .field("max_retry_after", &self.max_retry_after)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: DEFAULT_MAX_RETRIES,
            base_delay: DEFAULT_BASE_DELAY,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            observer: None,
        }
    }
}

impl RetryPolicy {
    /// The default policy with another base delay.
    pub fn with_base_delay(base_delay: Duration) -> Self {
        Self {
            base_delay,
            ..Self::default()
        }
    }

    /// Adds an observer.
    pub fn observed(mut self, observer: RetryObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Exponential part of the delay before retry number `retry` (1-based):
    /// `base_delay x 2^(retry-1)`.
    pub fn exponential_delay(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(20);
        self.base_delay.saturating_mul(1u32 << exp)
    }

    /// The sleep before retry number `retry` after `error`: the server's `retry-after` when it
    /// sent one (clamped), otherwise the exponential delay plus up to 10% jitter.
    pub fn delay_for(&self, retry: u32, error: &ProviderError) -> Duration {
        if let Some(ms) = retry_after_ms(error) {
            return Duration::from_millis(ms).min(self.max_retry_after);
        }
        let exp = self.exponential_delay(retry);
        let jitter_cap = u64::try_from(exp.as_millis() / 10).unwrap_or(u64::MAX);
        exp + Duration::from_millis(fastrand::u64(0..=jitter_cap))
    }

    /// Runs `attempt` until it succeeds, fails with a non-retryable error, or the retries are
    /// spent.
    pub async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mut retry = 0;
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if !error.is_retryable() || retry >= self.max_retries {
                return Err(error);
            }
            retry += 1;
            let delay = self.delay_for(retry, &error);
            if let Some(observer) = &self.observer {
                observer(&RetryNotice {
                    retry,
                    delay,
                    error,
                });
            }
            tokio::time::sleep(delay).await;
        }
    }
}

fn retry_after_ms(error: &ProviderError) -> Option<u64> {
    match error {
        ProviderError::Http { retry_after_ms, .. }
        | ProviderError::Stream { retry_after_ms, .. } => *retry_after_ms,
        ProviderError::Transport { .. }
        | ProviderError::Redirect { .. }
        | ProviderError::TooLarge { .. }
        | ProviderError::Config(_) => None,
    }
}

/// The server-requested delay from `retry-after-ms`, or `retry-after` in (possibly
/// fractional) seconds or as an HTTP date.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<u64> {
    parse_retry_after_at(headers, SystemTime::now())
}

/// [`parse_retry_after`] relative to `now` (HTTP dates in the past mean "now").
pub fn parse_retry_after_at(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds_to_ms(ms / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds_to_ms(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

fn seconds_to_ms(secs: f64) -> Option<u64> {
    if secs.is_finite() && secs >= 0.0 {
        // Saturating float-to-int conversion is the intent here.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some((secs * 1000.0).round() as u64)
    } else {
        None
    }
}

/// A delay hinted in an error message ("Please try again in 1.5s" / "in 300ms"), as OpenAI
/// puts it in rate-limit errors delivered inside a stream.
pub fn retry_hint_from_message(message: &str) -> Option<u64> {
    let lower = message.to_ascii_lowercase();
    let start = lower.find("try again in ")? + "try again in ".len();
    let rest = &lower[start..];
    let num_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let value: f64 = rest[..num_len].parse().ok()?;
    let unit = rest[num_len..].trim_start();
    if unit.starts_with("ms") {
        seconds_to_ms(value / 1000.0)
    } else if unit.starts_with('s') {
        seconds_to_ms(value)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            parse_retry_after_at(&headers(&[("retry-after", "2")]), now),
            Some(2000)
        );
        assert_eq!(
            parse_retry_after_at(&headers(&[("retry-after", "0.25")]), now),
            Some(250)
        );
        assert_eq!(
            parse_retry_after_at(
                &headers(&[("retry-after-ms", "40"), ("retry-after", "9")]),
                now
            ),
            Some(40)
        );
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            parse_retry_after_at(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:40 GMT")]),
                now
            ),
            Some(3000)
        );
        assert_eq!(
            parse_retry_after_at(&headers(&[("retry-after", "soon")]), now),
            None
        );
        assert_eq!(parse_retry_after_at(&headers(&[]), now), None);
    }

    #[test]
    fn message_hints() {
        assert_eq!(
            retry_hint_from_message("Please try again in 1.898s."),
            Some(1898)
        );
        assert_eq!(retry_hint_from_message("try again in 300ms"), Some(300));
        assert_eq!(retry_hint_from_message("no hint"), None);
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        let policy = RetryPolicy::with_base_delay(Duration::from_millis(100));
        let err = ProviderError::Transport {
            provider: "t",
            message: String::new(),
            retryable: true,
        };
        for retry in 1..=5 {
            let exp = Duration::from_millis(100 * (1 << (retry - 1)));
            let d = policy.delay_for(retry, &err);
            assert!(d >= exp && d <= exp + exp / 10, "retry {retry}: {d:?}");
        }
    }
}

//! Behaviour every wire shares, run against each wire: HTTP error classes, the retry policy,
//! key masking, framing, truncation, idle timeout, endless lines.

use std::time::Duration;

use intendant_providers::{ProviderError, ProviderKind, StreamEvent};

use super::support::{
    Canned, Piece, ScriptServer, TEST_KEY, assert_masked, config, fixture, fold, run,
    simple_request,
};

/// One wire under test.
pub struct WireCase {
    pub kind: ProviderKind,
    pub base_path: &'static str,
    pub model: &'static str,
    pub dir: &'static str,
    pub text_fixture: &'static str,
    pub expected_text: &'static str,
    /// An SSE body (after HTTP 200) carrying a retryable server error with this message.
    pub error_sse: fn(&str) -> String,
}

const TEXT: &str = "Hi there! Größe: 5 € — done.";

pub fn cases() -> Vec<WireCase> {
    vec![
        WireCase {
            kind: ProviderKind::OpenAi,
            base_path: "/v1",
            model: "gpt-5",
            dir: "openai_responses",
            text_fixture: "text.sse",
            expected_text: TEXT,
            error_sse: |m| {
                let data = serde_json::json!({"type": "error", "code": "server_error", "message": m, "sequence_number": 1});
                format!("event: error\ndata: {data}\n\n")
            },
        },
        WireCase {
            kind: ProviderKind::Anthropic,
            base_path: "",
            model: "claude-sonnet-4-5",
            dir: "anthropic",
            text_fixture: "text.sse",
            expected_text: TEXT,
            error_sse: |m| {
                let data = serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": m}});
                format!("event: error\ndata: {data}\n\n")
            },
        },
        WireCase {
            kind: ProviderKind::Gemini,
            base_path: "",
            model: "gemini-2.5-flash",
            dir: "gemini",
            text_fixture: "text.sse",
            expected_text: TEXT,
            error_sse: |m| {
                let data = serde_json::json!({"error": {"code": 503, "message": m, "status": "UNAVAILABLE"}});
                format!("data: {data}\r\n\r\n")
            },
        },
        WireCase {
            kind: ProviderKind::OpenAiChat,
            base_path: "/v1",
            model: "qwen3:8b",
            dir: "openai_chat",
            text_fixture: "text.sse",
            expected_text: TEXT,
            error_sse: |m| {
                let data = serde_json::json!({"error": {"message": m, "type": "server_error", "code": null}});
                format!("data: {data}\n\n")
            },
        },
    ]
}

impl WireCase {
    fn text_bytes(&self) -> Vec<u8> {
        fixture(self.dir, self.text_fixture)
    }

    /// The text fixture with LF line ends.
    fn lf_bytes(&self) -> Vec<u8> {
        String::from_utf8(self.text_bytes())
            .unwrap()
            .replace("\r\n", "\n")
            .into_bytes()
    }

    async fn run(
        &self,
        server: &ScriptServer,
        tweak: impl FnOnce(&mut intendant_providers::ProviderConfig),
    ) -> (
        Result<Vec<StreamEvent>, ProviderError>,
        super::support::Notices,
    ) {
        let (mut cfg, notices) = config(server, self.base_path);
        tweak(&mut cfg);
        (
            run(self.kind, cfg, &simple_request(self.model)).await,
            notices,
        )
    }
}

fn last_error(events: &[StreamEvent]) -> (&str, bool) {
    match events.last() {
        Some(StreamEvent::Error {
            message, retryable, ..
        }) => (message.as_str(), *retryable),
        other => panic!("expected an error event last, got {other:?}"),
    }
}

#[tokio::test]
async fn text_fixture_streams_whole_split_bytewise_and_crlf() {
    for case in cases() {
        let lf = case.lf_bytes();
        let crlf = String::from_utf8(lf.clone())
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes();
        for canned in [
            Canned::sse_chunked(&case.text_bytes(), usize::MAX),
            Canned::sse_chunked(&lf, 1),
            Canned::sse_chunked(&crlf, 7),
            Canned::sse_chunked(&crlf, 1),
            // Pauses make the pieces arrive as separate reads on the client.
            Canned::sse(
                crlf.chunks(50)
                    .flat_map(|c| {
                        [
                            Piece::Bytes(c.to_vec()),
                            Piece::Delay(Duration::from_millis(1)),
                        ]
                    })
                    .collect(),
            ),
        ] {
            let server = ScriptServer::start(vec![canned]).await;
            let (events, _) = case.run(&server, |_| {}).await;
            let resp = fold(&events.unwrap()).unwrap();
            assert_eq!(resp.text, case.expected_text, "{}", case.kind);
        }
    }
}

#[tokio::test]
async fn client_errors_fail_at_once_with_masked_messages() {
    for case in cases() {
        for status in [400u16, 401, 403, 404, 413] {
            let body = format!(
                "{{\"error\":{{\"type\":\"invalid_request_error\",\"message\":\"Incorrect API key provided: {TEST_KEY} and sk-other-0123456789abcdef\"}}}}"
            );
            let server = ScriptServer::start(vec![Canned::status(status, &body)]).await;
            let (result, notices) = case.run(&server, |_| {}).await;
            let err = result.unwrap_err();
            assert!(
                matches!(err, ProviderError::Http { status: s, .. } if s == status),
                "{err}"
            );
            assert!(!err.is_retryable());
            assert_eq!(
                server.requests().len(),
                1,
                "{} {status}: one attempt",
                case.kind
            );
            assert!(notices.lock().unwrap().is_empty());
            let text = err.to_string();
            assert!(text.contains("Incorrect API key provided"), "{text}");
            assert!(!text.contains("sk-other-0123456789abcdef"), "{text}");
            assert_masked(&text);
        }
    }
}

#[tokio::test]
async fn retryable_statuses_are_retried_honouring_retry_after() {
    for case in cases() {
        let server = ScriptServer::start(vec![
            Canned::status(429, "{\"error\":{\"message\":\"slow down\"}}").header("retry-after-ms", "30"),
            Canned::status(500, "{}"),
            Canned::status(503, "{}").header("retry-after", "0.05"),
            Canned::status(529, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"),
            Canned::sse_chunked(&case.text_bytes(), 100),
        ])
        .await;
        let (result, notices) = case.run(&server, |_| {}).await;
        let resp = fold(&result.unwrap()).unwrap();
        assert_eq!(resp.text, case.expected_text);
        assert_eq!(server.requests().len(), 5, "{}", case.kind);
        let notices = notices.lock().unwrap();
        let retries: Vec<u32> = notices.iter().map(|n| n.retry).collect();
        assert_eq!(retries, [1, 2, 3, 4]);
        assert_eq!(
            notices[0].delay,
            Duration::from_millis(30),
            "retry-after-ms honoured"
        );
        assert_eq!(
            notices[2].delay,
            Duration::from_millis(50),
            "retry-after seconds honoured"
        );
        for (n, exp_ms) in [(1usize, 20u64), (3, 80)] {
            let exp = Duration::from_millis(exp_ms);
            assert!(
                notices[n].delay >= exp && notices[n].delay <= exp + exp / 10,
                "{:?}",
                notices[n]
            );
        }
        let statuses: Vec<u16> = notices
            .iter()
            .map(|n| match n.error {
                ProviderError::Http { status, .. } => status,
                _ => 0,
            })
            .collect();
        assert_eq!(statuses, [429, 500, 503, 529]);
    }
}

#[tokio::test]
async fn retries_stop_after_six_attempts_with_doubling_backoff() {
    for case in cases() {
        let server = ScriptServer::start(vec![Canned::status(
            503,
            "{\"error\":{\"message\":\"busy\"}}",
        )])
        .await;
        let (result, notices) = case.run(&server, |_| {}).await;
        let err = result.unwrap_err();
        assert!(matches!(err, ProviderError::Http { status: 503, .. }));
        assert_eq!(server.requests().len(), 6, "{}", case.kind);
        let delays: Vec<Duration> = notices.lock().unwrap().iter().map(|n| n.delay).collect();
        assert_eq!(delays.len(), 5);
        for (i, d) in delays.iter().enumerate() {
            let exp = Duration::from_millis(10 << i);
            assert!(*d >= exp && *d <= exp + exp / 10, "retry {i}: {d:?}");
        }
    }
}

#[tokio::test]
async fn refused_connections_are_retried_then_reported() {
    for case in cases() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let server = ScriptServer::start(vec![Canned::status(500, "")]).await;
        let (result, notices) = case
            .run(&server, |cfg| {
                cfg.base_url = format!("http://{addr}{}", case.base_path)
            })
            .await;
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Transport {
                    retryable: true,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(notices.lock().unwrap().len(), 5);
        assert_masked(&err.to_string());
    }
}

#[tokio::test]
async fn a_certificate_not_trusted_fails_at_once_naming_why() {
    let server = ScriptServer::start(vec![Canned::status(500, "")]).await;
    let upstream: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let front = intendant_testkit::tls::Front::start(upstream).unwrap();
    for case in cases() {
        let (result, notices) = case
            .run(&server, |cfg| {
                cfg.base_url = format!("https://localhost:{}{}", front.port(), case.base_path)
            })
            .await;
        let err = result.unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, ProviderError::Transport { .. }), "{said}");
        assert!(!err.is_retryable(), "{said}");
        assert!(
            said.contains("invalid peer certificate: UnknownIssuer"),
            "{said}"
        );
        assert!(notices.lock().unwrap().is_empty(), "{}", case.kind);
    }
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn header_timeout_fails_at_once() {
    for case in cases() {
        let mut canned = Canned::sse(vec![]);
        canned.no_head = true;
        let server = ScriptServer::start(vec![canned]).await;
        let (result, notices) = case
            .run(&server, |cfg| {
                cfg.header_timeout = Duration::from_millis(200)
            })
            .await;
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Transport {
                    retryable: false,
                    ..
                }
            ),
            "{err}"
        );
        assert!(!err.is_retryable());
        assert_eq!(server.requests().len(), 1);
        assert!(notices.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn missing_key_is_a_config_error_naming_the_variable() {
    for case in cases() {
        let server = ScriptServer::start(vec![Canned::sse_chunked(&case.text_bytes(), 1000)]).await;
        let (result, _) = case.run(&server, |cfg| cfg.api_key = None).await;
        if !case.kind.requires_api_key() {
            // Local servers need no key: the request goes out without credentials.
            assert!(result.is_ok());
            let req = &server.requests()[0];
            assert_eq!(req.header("authorization"), None);
            continue;
        }
        let err = result.unwrap_err();
        assert!(matches!(err, ProviderError::Config(_)));
        assert!(err.to_string().contains(case.kind.api_key_env()), "{err}");
        assert!(server.requests().is_empty());
    }
}

#[tokio::test]
async fn truncated_stream_ends_in_a_retryable_error() {
    for case in cases() {
        let bytes = case.lf_bytes();
        let server = ScriptServer::start(vec![Canned::sse(vec![
            Piece::Bytes(bytes[..bytes.len() * 2 / 3].to_vec()),
            Piece::Cut,
        ])])
        .await;
        let (result, _) = case.run(&server, |_| {}).await;
        let events = result.unwrap();
        let (message, retryable) = last_error(&events);
        assert!(retryable, "{}: {message}", case.kind);
        assert!(fold(&events).unwrap_err().is_retryable());
    }
}

#[tokio::test]
async fn silence_past_the_idle_timeout_is_a_retryable_error() {
    for case in cases() {
        let bytes = case.lf_bytes();
        let server = ScriptServer::start(vec![Canned::sse(vec![
            Piece::Bytes(bytes[..bytes.len() / 2].to_vec()),
            Piece::Hang,
        ])])
        .await;
        let (result, _) = case
            .run(&server, |cfg| cfg.idle_timeout = Duration::from_millis(200))
            .await;
        let events = result.unwrap();
        let (message, retryable) = last_error(&events);
        assert!(
            retryable && message.contains("idle"),
            "{}: {message}",
            case.kind
        );
    }
}

#[tokio::test]
async fn endless_line_is_cut_at_the_cap() {
    for case in cases() {
        let server = ScriptServer::start(vec![Canned::sse(vec![
            Piece::Bytes(b"data: {\"type\":\"".to_vec()),
            Piece::Endless(b'a'),
        ])])
        .await;
        let (result, _) = case
            .run(&server, |cfg| cfg.max_event_bytes = 256 * 1024)
            .await;
        let events = result.unwrap();
        let (message, retryable) = last_error(&events);
        assert!(
            !retryable && message.contains("262144-byte limit"),
            "{}: {message}",
            case.kind
        );
        assert_eq!(events.len(), 1);
    }
}

#[tokio::test]
async fn error_event_after_200_is_reported_with_the_key_masked() {
    for case in cases() {
        let body = (case.error_sse)(&format!(
            "upstream said {TEST_KEY} AIzaSyD0123456789abcdefghij"
        ));
        let server = ScriptServer::start(vec![Canned::sse_chunked(body.as_bytes(), 5)]).await;
        let (result, _) = case.run(&server, |_| {}).await;
        let events = result.unwrap();
        let (message, retryable) = last_error(&events);
        assert!(retryable, "{}: {message}", case.kind);
        assert!(message.contains("upstream said"), "{message}");
        assert!(!message.contains("SyD0123456789"), "{message}");
        assert_masked(message);
    }
}

#[tokio::test]
async fn malformed_event_json_is_a_non_retryable_error() {
    for case in cases() {
        let server =
            ScriptServer::start(vec![Canned::sse_chunked(b"data: {\"broken\n\n", 100)]).await;
        let (result, _) = case.run(&server, |_| {}).await;
        let events = result.unwrap();
        let (message, retryable) = last_error(&events);
        assert!(
            !retryable && message.contains("malformed"),
            "{}: {message}",
            case.kind
        );
    }
}

#[tokio::test]
async fn a_json_body_instead_of_a_stream_is_a_clear_error() {
    for case in cases() {
        let body = format!("{{\"error\":{{\"message\":\"proxy says no to {TEST_KEY}\"}}}}");
        let server = ScriptServer::start(vec![Canned::status(200, &body)]).await;
        let (result, notices) = case.run(&server, |_| {}).await;
        let err = result.unwrap_err();
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(
            text.contains("expected an event stream") && text.contains("proxy says no"),
            "{text}"
        );
        assert_masked(&text);
        assert!(notices.lock().unwrap().is_empty());
    }
}

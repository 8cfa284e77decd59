//! Faults: HTTP errors with retry-after, error events after 200, cuts, stalls, delays, and byte
//! chunking at awkward places; a faulted attempt never consumes the turn.

use std::time::{Duration, Instant};

use intendant_testkit::{
    Delivery, ErrorKind, FakeModelServer, Fault, ResponsesErrorShape, Scenario, Served,
    TcpChunking, Turn, Wire,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::support::{parse_sse, post, request_for, stream, user_message};
use super::wires::fold;

fn faulty(faults: Vec<Fault>) -> Scenario {
    Scenario::new(vec![Turn {
        faults,
        ..Turn::text("Grüße 🌍 after the fault")
    }])
}

#[tokio::test]
async fn http_status_with_retry_after_for_the_first_attempts_then_the_turn() {
    for wire in Wire::ALL {
        let fault = Fault::HttpStatus {
            status: 429,
            retry_after: Some(2),
            times: 2,
        };
        let server = FakeModelServer::start(faulty(vec![fault])).await.unwrap();
        let (path, body) = request_for(wire, vec![user_message(wire, "hi")]);
        for _ in 0..2 {
            let reply = post(&server, &path, &body).await;
            assert_eq!(reply.status, 429, "{wire}");
            assert_eq!(reply.headers["retry-after"], "2", "{wire}");
            let error: Value = serde_json::from_str(&reply.body).unwrap();
            let classified = match wire {
                Wire::OpenAiResponses | Wire::OpenAiChat => error["error"]["code"].clone(),
                Wire::Anthropic => error["error"]["type"].clone(),
                Wire::Gemini => error["error"]["status"].clone(),
            };
            let want = match wire {
                Wire::OpenAiResponses | Wire::OpenAiChat => "rate_limit_exceeded",
                Wire::Anthropic => "rate_limit_error",
                Wire::Gemini => "RESOURCE_EXHAUSTED",
            };
            assert_eq!(classified, want, "{wire}");
        }
        let folded = fold(
            wire,
            &stream(&server, wire, vec![user_message(wire, "hi")]).await,
        );
        assert_eq!(folded.text, "Grüße 🌍 after the fault");
        let served: Vec<Served> = server.requests().into_iter().map(|r| r.served).collect();
        assert_eq!(
            served,
            vec![
                Served::Fault {
                    index: 0,
                    attempt: 0
                },
                Served::Fault {
                    index: 0,
                    attempt: 1
                },
                Served::Turn {
                    index: 0,
                    attempt: 2
                },
            ]
        );
    }
}

#[tokio::test]
async fn anthropic_529_is_overloaded_error() {
    let fault = Fault::HttpStatus {
        status: 529,
        retry_after: None,
        times: 1,
    };
    let server = FakeModelServer::start(faulty(vec![fault])).await.unwrap();
    let (path, body) = request_for(Wire::Anthropic, vec![user_message(Wire::Anthropic, "hi")]);
    let reply = post(&server, &path, &body).await;
    assert_eq!(reply.status, 529);
    assert!(reply.headers.get("retry-after").is_none());
    let error: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "overloaded_error");
}

/// The error event each wire sends, as (event name, classifying value).
fn error_event_class(wire: Wire, events: &[super::support::Event]) -> (Option<String>, String) {
    let last = events.last().unwrap();
    let data = last.json();
    let class = match wire {
        Wire::OpenAiResponses => data
            .pointer("/response/error/code")
            .or_else(|| data.pointer("/error/code"))
            .or_else(|| data.get("code"))
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned(),
        Wire::OpenAiChat => data["error"]["code"].as_str().unwrap().to_owned(),
        Wire::Anthropic => data["error"]["type"].as_str().unwrap().to_owned(),
        Wire::Gemini => data["error"]["status"].as_str().unwrap().to_owned(),
    };
    (last.name.clone(), class)
}

#[tokio::test]
async fn error_event_after_200_in_each_wire_shape() {
    let cases = [
        (
            Wire::Anthropic,
            ErrorKind::Overloaded,
            ResponsesErrorShape::Failed,
            Some("error"),
            "overloaded_error",
        ),
        (
            Wire::Anthropic,
            ErrorKind::InvalidRequest,
            ResponsesErrorShape::Failed,
            Some("error"),
            "invalid_request_error",
        ),
        (
            Wire::OpenAiResponses,
            ErrorKind::RateLimit,
            ResponsesErrorShape::Failed,
            Some("response.failed"),
            "rate_limit_exceeded",
        ),
        (
            Wire::OpenAiResponses,
            ErrorKind::Server,
            ResponsesErrorShape::Flat,
            Some("error"),
            "server_error",
        ),
        (
            Wire::OpenAiResponses,
            ErrorKind::Overloaded,
            ResponsesErrorShape::Nested,
            Some("error"),
            "server_is_overloaded",
        ),
        (
            Wire::OpenAiChat,
            ErrorKind::Server,
            ResponsesErrorShape::Failed,
            None,
            "server_error",
        ),
        (
            Wire::Gemini,
            ErrorKind::Overloaded,
            ResponsesErrorShape::Failed,
            None,
            "UNAVAILABLE",
        ),
    ];
    for (wire, kind, shape, name, class) in cases {
        let fault = Fault::ErrorEvent {
            kind,
            message: "Overloaded".into(),
            shape,
            times: 1,
        };
        let server = FakeModelServer::start(faulty(vec![fault])).await.unwrap();
        let events = stream(&server, wire, vec![user_message(wire, "hi")]).await;
        assert!(
            events.len() >= 2,
            "{wire}: the stream visibly started before the error"
        );
        assert_eq!(
            error_event_class(wire, &events),
            (name.map(str::to_owned), class.to_owned()),
            "{wire}"
        );
        if wire == Wire::OpenAiChat {
            assert!(
                events.iter().all(|e| e.data != "[DONE]"),
                "no [DONE] after an error"
            );
        }
        let retry = fold(
            wire,
            &stream(&server, wire, vec![user_message(wire, "hi")]).await,
        );
        assert_eq!(
            retry.text, "Grüße 🌍 after the fault",
            "{wire}: the retry gets the turn"
        );
    }
}

#[tokio::test]
async fn cut_stream_fails_the_body_read_and_the_retry_succeeds() {
    for wire in Wire::ALL {
        let server = FakeModelServer::start(faulty(vec![Fault::Cut {
            after_events: 1,
            times: 1,
        }]))
        .await
        .unwrap();
        let (path, body) = request_for(wire, vec![user_message(wire, "hi")]);
        let response = intendant_netguard::http::client()
            .unwrap()
            .post(format!("http://{}{path}", server.addr()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert!(
            response.text().await.is_err(),
            "{wire}: a cut body is an error, not a short success"
        );
        let folded = fold(
            wire,
            &stream(&server, wire, vec![user_message(wire, "hi")]).await,
        );
        assert_eq!(folded.text, "Grüße 🌍 after the fault");
    }
}

#[tokio::test]
async fn cut_leaves_half_an_event_on_the_wire() {
    let server = FakeModelServer::start(faulty(vec![Fault::Cut {
        after_events: 2,
        times: 1,
    }]))
    .await
    .unwrap();
    let (path, body) = request_for(Wire::Anthropic, vec![]);
    let (chunks, terminated) = raw_exchange(&server, &path, &body).await;
    assert!(!terminated, "no final zero-length chunk");
    let bytes = chunks.concat();
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(parse_sse(&text).len(), 3, "two whole events and a fragment");
    assert!(!text.ends_with("\n\n"), "ends mid-event: {text:?}");
}

#[tokio::test]
async fn stall_keeps_silent_until_the_client_gives_up() {
    let server = FakeModelServer::start(faulty(vec![Fault::Stall {
        after_events: 1,
        times: 1,
    }]))
    .await
    .unwrap();
    let (path, body) = request_for(Wire::OpenAiResponses, vec![]);
    let client = intendant_netguard::http::client_builder()
        .unwrap()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let response = client
        .post(format!("http://{}{path}", server.addr()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let error = response.text().await.unwrap_err();
    assert!(error.is_timeout(), "{error}");
    let folded = fold(
        Wire::OpenAiResponses,
        &stream(&server, Wire::OpenAiResponses, vec![]).await,
    );
    assert_eq!(folded.text, "Grüße 🌍 after the fault");
}

#[tokio::test]
async fn delays_hold_back_the_first_chunk_and_space_the_rest() {
    let delivery = Delivery {
        first_chunk_delay_ms: 150,
        chunk_delay_ms: 20,
        ..Delivery::default()
    };
    let turn = Turn {
        delivery,
        ..Turn::text("slow")
    };
    let server = FakeModelServer::start(Scenario::new(vec![turn]))
        .await
        .unwrap();
    let started = Instant::now();
    let events = stream(&server, Wire::Anthropic, vec![]).await;
    // Lower bounds only: sleeping guarantees at least this long.
    let minimum = 150 + 20 * (events.len() as u64 - 1);
    assert!(started.elapsed() >= Duration::from_millis(minimum));
}

/// Sends one request over raw TCP and returns the HTTP chunks of the body and whether the
/// terminating chunk arrived.
async fn raw_exchange(server: &FakeModelServer, path: &str, body: &Value) -> (Vec<Vec<u8>>, bool) {
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let mut reader = BufReader::new(stream);
    send_request(reader.get_mut(), path, body, true).await;
    read_chunked_response(&mut reader).await
}

async fn send_request(stream: &mut TcpStream, path: &str, body: &Value, keep_alive: bool) {
    let body = body.to_string();
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\nconnection: {connection}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
}

async fn read_chunked_response(reader: &mut BufReader<TcpStream>) -> (Vec<Vec<u8>>, bool) {
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("transfer-encoding:") {
            assert_eq!(value.trim(), "chunked");
        }
    }
    let mut chunks = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await.unwrap() == 0 {
            return (chunks, false);
        }
        let size = usize::from_str_radix(line.trim(), 16).unwrap();
        if size == 0 {
            let mut end = [0; 2];
            reader.read_exact(&mut end).await.unwrap();
            return (chunks, true);
        }
        let mut chunk = vec![0; size];
        if reader.read_exact(&mut chunk).await.is_err() {
            return (chunks, false);
        }
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf).await.unwrap();
        chunks.push(chunk);
    }
}

#[tokio::test]
async fn awkward_chunking_splits_utf8_crlf_and_json_yet_reassembles_exactly() {
    let text = "Grüße, 世界 🌍 \"q\" \\ done";
    for wire in Wire::ALL {
        let delivery = Delivery {
            tcp: TcpChunking::Awkward,
            delta_chars: 4,
            ..Delivery::default()
        };
        let turn = Turn {
            delivery,
            ..Turn::text(text)
        };
        let server = FakeModelServer::start(Scenario::new(vec![turn]))
            .await
            .unwrap();
        let (path, body) = request_for(wire, vec![]);
        let (chunks, terminated) = raw_exchange(&server, &path, &body).await;
        assert!(terminated, "{wire}");
        assert!(
            chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
            "{wire}: some write ends inside a UTF-8 character"
        );
        assert!(
            chunks.iter().any(|c| c.ends_with(b"da")),
            "{wire}: a write ends inside `data:`"
        );
        if wire == Wire::Gemini {
            assert!(
                chunks.iter().any(|c| c.ends_with(b"\r")),
                "CR and LF arrive separately"
            );
        }
        let whole = String::from_utf8(chunks.concat()).unwrap();
        assert_eq!(fold(wire, &parse_sse(&whole)).text, text, "{wire}");
    }
}

#[tokio::test]
async fn fixed_size_chunking_ignores_event_boundaries() {
    let delivery = Delivery {
        tcp: TcpChunking::Every(7),
        ..Delivery::default()
    };
    let server = FakeModelServer::start(Scenario::new(vec![Turn {
        delivery,
        ..Turn::text("sevens")
    }]))
    .await
    .unwrap();
    let (path, body) = request_for(Wire::OpenAiChat, vec![]);
    let (chunks, _) = raw_exchange(&server, &path, &body).await;
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.len() == 7));
    let whole = String::from_utf8(chunks.concat()).unwrap();
    assert_eq!(fold(Wire::OpenAiChat, &parse_sse(&whole)).text, "sevens");
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("one"), Turn::text("two")]))
        .await
        .unwrap();
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let (path, body) = request_for(Wire::Anthropic, vec![]);
    for want in ["one", "two"] {
        send_request(reader.get_mut(), &path, &body, true).await;
        let (chunks, terminated) = read_chunked_response(&mut reader).await;
        assert!(terminated);
        let whole = String::from_utf8(chunks.concat()).unwrap();
        assert_eq!(fold(Wire::Anthropic, &parse_sse(&whole)).text, want);
    }
}

#[tokio::test]
async fn end_early_closes_the_body_cleanly_without_the_terminal_event() {
    for wire in Wire::ALL {
        let fault = Fault::EndEarly {
            after_events: 1,
            times: 1,
        };
        let server = FakeModelServer::start(faulty(vec![fault])).await.unwrap();
        let (path, body) = request_for(wire, vec![]);
        let (chunks, terminated) = raw_exchange(&server, &path, &body).await;
        assert!(terminated, "{wire}: the HTTP body ends properly");
        let events = parse_sse(&String::from_utf8(chunks.concat()).unwrap());
        assert_eq!(events.len(), 1, "{wire}");
        let terminal = [
            "response.completed",
            "message_stop",
            "[DONE]",
            "finishReason",
        ];
        let text: String = events
            .iter()
            .map(|e| format!("{:?}{}", e.name, e.data))
            .collect();
        assert!(terminal.iter().all(|t| !text.contains(t)), "{wire}: {text}");
    }
}

#[tokio::test]
async fn endless_line_streams_until_the_client_hangs_up() {
    let fault = Fault::EndlessLine {
        after_events: 1,
        times: 1,
    };
    let server = FakeModelServer::start(faulty(vec![fault])).await.unwrap();
    let (path, body) = request_for(Wire::OpenAiChat, vec![]);
    let mut response = intendant_netguard::http::client()
        .unwrap()
        .post(format!("http://{}{path}", server.addr()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut seen = 0;
    let mut tail = Vec::new();
    while seen < 4 * 1024 * 1024 {
        let chunk = response
            .chunk()
            .await
            .unwrap()
            .expect("the line keeps coming");
        seen += chunk.len();
        tail = chunk.to_vec();
    }
    assert!(tail.iter().all(|b| *b == b'x'), "no newline ever arrives");
    drop(response);
    // The server noticed the hang-up and still serves the turn to the next attempt.
    let folded = fold(
        Wire::OpenAiChat,
        &stream(&server, Wire::OpenAiChat, vec![]).await,
    );
    assert_eq!(folded.text, "Grüße 🌍 after the fault");
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("continued")]))
        .await
        .unwrap();
    let (path, body) = request_for(Wire::Anthropic, vec![]);
    let body = body.to_string();
    let mut reader = BufReader::new(TcpStream::connect(server.addr()).await.unwrap());
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    reader.get_mut().write_all(head.as_bytes()).await.unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    reader.read_line(&mut line).await.unwrap();
    reader.get_mut().write_all(body.as_bytes()).await.unwrap();
    let (chunks, terminated) = read_chunked_response(&mut reader).await;
    assert!(terminated);
    let text = String::from_utf8(chunks.concat()).unwrap();
    assert_eq!(fold(Wire::Anthropic, &parse_sse(&text)).text, "continued");
}

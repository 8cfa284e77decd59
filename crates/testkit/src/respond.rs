//! Routing one request and writing its response: model listings, token counting, and model
//! requests served per the plan (clean turn, fault, side reply, exhaustion).

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::http::{self, Request};
use crate::ids;
use crate::scenario::{
    Delivery, ErrorKind, Fault, FloodKind, OnExhausted, Replay, ToolCallSpec, Turn,
};
use crate::state::{Plan, RecordedRequest, Served, Shared, record};
use crate::wire::{self, IssuedCall, IssuedReasoning, RenderCtx, RequestFacts, SseEvent, Wire};

/// Whole events sent before an injected error event (the stream has visibly started).
const EVENTS_BEFORE_ERROR: usize = 3;
/// The endless line is written in pieces of this size, up to this cap.
const ENDLESS_PIECE: usize = 64 * 1024;
const ENDLESS_CAP: usize = 256 * 1024 * 1024;

enum Route {
    Model {
        wire: Wire,
        gemini_model: Option<String>,
        gemini_stream: bool,
    },
    Models(ModelsShape),
    CountTokens,
    NotFound,
}

#[derive(Clone, Copy)]
enum ModelsShape {
    OpenAi,
    Anthropic,
    Gemini,
}

fn route(request: &Request, path: &str, query: &str) -> Route {
    let post = request.method == "POST";
    match path {
        "/v1/responses" | "/responses" if post => Route::Model {
            wire: Wire::OpenAiResponses,
            gemini_model: None,
            gemini_stream: false,
        },
        "/v1/chat/completions" | "/chat/completions" if post => Route::Model {
            wire: Wire::OpenAiChat,
            gemini_model: None,
            gemini_stream: false,
        },
        "/v1/messages" if post => Route::Model {
            wire: Wire::Anthropic,
            gemini_model: None,
            gemini_stream: false,
        },
        "/v1/messages/count_tokens" if post => Route::CountTokens,
        "/v1/models" | "/models" if request.method == "GET" => {
            let anthropic = request.header("anthropic-version").is_some()
                || request.header("x-api-key").is_some();
            Route::Models(if anthropic {
                ModelsShape::Anthropic
            } else {
                ModelsShape::OpenAi
            })
        }
        "/v1beta/models" if request.method == "GET" => Route::Models(ModelsShape::Gemini),
        _ => {
            // Gemini serves the same methods under v1 and v1beta.
            let rest = path
                .strip_prefix("/v1beta/models/")
                .or_else(|| path.strip_prefix("/v1/models/"));
            let Some(rest) = rest.filter(|_| post) else {
                return Route::NotFound;
            };
            let sse = query.split('&').any(|pair| pair == "alt=sse");
            match rest.rsplit_once(':') {
                Some((model, "streamGenerateContent")) if sse => Route::Model {
                    wire: Wire::Gemini,
                    gemini_model: Some(model.to_owned()),
                    gemini_stream: true,
                },
                Some((model, "generateContent")) => Route::Model {
                    wire: Wire::Gemini,
                    gemini_model: Some(model.to_owned()),
                    gemini_stream: false,
                },
                _ => Route::NotFound,
            }
        }
    }
}

fn parse_body(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Serves one request; returns whether the connection may be reused.
pub(crate) async fn handle<R, W>(
    shared: &Shared,
    request: Request,
    reader: &mut R,
    writer: &mut W,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let route = route(&request, path, query);
    let body = parse_body(&request.body);
    let keep_alive = request.keep_alive;
    let mut recorded = RecordedRequest {
        method: request.method.clone(),
        path: request.target.clone(),
        headers: request.headers.clone(),
        body: body.clone(),
        wire: None,
        served: Served::Rejected { status: 404 },
    };
    let encoding = request
        .header("content-encoding")
        .map(str::to_ascii_lowercase);
    if let Some(encoding) = encoding.filter(|e| e != "identity") {
        recorded.served = Served::Rejected { status: 415 };
        shared
            .state()
            .violations
            .push(format!("request {path} uses content-encoding {encoding}"));
        record(shared, recorded);
        let body =
            json!({ "error": { "message": format!("unsupported content-encoding {encoding}") } });
        return reply_json(writer, 415, &body, keep_alive).await;
    }
    match route {
        Route::NotFound => {
            record(shared, recorded);
            let body = json!({ "error": { "message": format!("no route for {} {path}", request.method),
                "type": "not_found_error" } });
            reply_json(writer, 404, &body, keep_alive).await
        }
        Route::Models(shape) => {
            recorded.served = Served::Models;
            record(shared, recorded);
            reply_json(
                writer,
                200,
                &models(shape, &shared.scenario.model),
                keep_alive,
            )
            .await
        }
        Route::CountTokens => {
            recorded.served = Served::CountTokens;
            recorded.wire = Some(Wire::Anthropic);
            record(shared, recorded);
            let tokens = request.body.len().div_ceil(4);
            reply_json(writer, 200, &json!({ "input_tokens": tokens }), keep_alive).await
        }
        Route::Model {
            wire,
            gemini_model,
            gemini_stream,
        } => {
            recorded.wire = Some(wire);
            if !body.is_object() {
                recorded.served = Served::Rejected { status: 400 };
                record(shared, recorded);
                let error = wire::http_error_body(wire, 400, "request body is not a JSON object");
                return reply_json(writer, 400, &error, keep_alive).await;
            }
            let mut facts = wire::inspect(wire, &body);
            if wire == Wire::Gemini {
                facts.model = gemini_model;
                facts.stream = gemini_stream;
            }
            facts.credential = credential(&request);
            facts.host = request.header("host").map(str::to_owned);
            facts.target.clone_from(&request.target);
            let raw = String::from_utf8_lossy(&request.body);
            let (plan, served) = shared.plan(wire, &facts, &raw);
            recorded.served = served;
            record(shared, recorded);
            serve_plan(shared, wire, &facts, plan, reader, writer, keep_alive).await
        }
    }
}

/// The credential a request carries, in whichever header its wire uses.
fn credential(request: &Request) -> Option<String> {
    let bearer = request
        .header("authorization")
        .map(|value| value.strip_prefix("Bearer ").unwrap_or(value));
    bearer
        .or_else(|| request.header("x-api-key"))
        .or_else(|| request.header("x-goog-api-key"))
        .map(str::to_owned)
}

fn models(shape: ModelsShape, model: &str) -> Value {
    match shape {
        ModelsShape::OpenAi => json!({ "object": "list", "data": [
            { "id": model, "object": "model", "created": 1_700_000_000, "owned_by": "fake" } ] }),
        ModelsShape::Anthropic => json!({ "data": [ { "type": "model", "id": model,
            "display_name": model, "created_at": "2025-01-01T00:00:00Z" } ],
            "has_more": false, "first_id": model, "last_id": model }),
        ModelsShape::Gemini => json!({ "models": [ { "name": format!("models/{model}"),
            "displayName": model, "supportedGenerationMethods": ["generateContent", "streamGenerateContent"] } ] }),
    }
}

async fn reply_json<W: AsyncWrite + Unpin>(
    writer: &mut W,
    status: u16,
    body: &Value,
    keep_alive: bool,
) -> std::io::Result<bool> {
    http::write_full(
        writer,
        status,
        &[],
        "application/json",
        body.to_string().as_bytes(),
        keep_alive,
    )
    .await?;
    Ok(keep_alive)
}

/// Issued ids and tokens for one rendering of `turn`.
struct Issue {
    calls: Vec<IssuedCall>,
    reasoning: Option<IssuedReasoning>,
}

fn issue(wire: Wire, turn: &Turn) -> Issue {
    let calls = turn
        .tool_calls
        .iter()
        .map(|spec| {
            let generated = match wire {
                Wire::OpenAiResponses | Wire::OpenAiChat => ids::id("call_"),
                Wire::Anthropic => ids::id("toolu_01"),
                Wire::Gemini => ids::id("gemini_call_"),
            };
            IssuedCall {
                id: spec.id.clone().unwrap_or(generated),
                item_id: ids::id("fc_"),
                name: spec.name.clone(),
                arguments: spec.arguments.to_string(),
            }
        })
        .collect();
    let reasoning = turn.reasoning.as_ref().map(|reasoning| {
        let prefix = match wire {
            Wire::OpenAiResponses => "gAAAAAB",
            Wire::OpenAiChat | Wire::Anthropic | Wire::Gemini => "",
        };
        IssuedReasoning {
            item_id: ids::id("rs_"),
            text: reasoning.text.clone(),
            signature: reasoning
                .signature
                .clone()
                .unwrap_or_else(|| ids::signature(prefix)),
        }
    });
    Issue { calls, reasoning }
}

/// Records a clean turn's issued ids in the ledger, for the echo checks of later requests.
fn record_issue(shared: &Shared, wire: Wire, facts: &RequestFacts, index: usize, issue: &Issue) {
    let sent = issue
        .reasoning
        .as_ref()
        .filter(|_| signature_sent(wire, facts));
    shared
        .state()
        .ledger
        .record(wire, index, &issue.calls, sent);
}

/// Whether the client actually received the reasoning token (and so must echo it).
fn signature_sent(wire: Wire, facts: &RequestFacts) -> bool {
    match wire {
        Wire::OpenAiResponses => facts.wants_encrypted_reasoning,
        Wire::OpenAiChat => false,
        Wire::Anthropic | Wire::Gemini => true,
    }
}

/// What a plan serves: the turn to render, the fault injected instead of it, and the index of
/// a clean scripted turn (whose issued ids the ledger records).
struct Serving {
    turn: Turn,
    fault: Option<Fault>,
    clean_index: Option<usize>,
}

/// The turn a plan renders; `None` when the scenario is exhausted and answers with an error.
fn serving(shared: &Shared, plan: Plan) -> Option<Serving> {
    let (turn, fault, clean_index) = match plan {
        Plan::Clean { index, turn } => (turn, None, Some(index)),
        Plan::Fault { turn, fault, .. } => (turn, Some(fault), None),
        Plan::Side { turn } => (turn, None, None),
        Plan::Exhausted => match shared.scenario.on_exhausted {
            OnExhausted::Done => (Turn::text("done"), None, None),
            OnExhausted::Error => return None,
        },
    };
    Some(Serving {
        turn,
        fault,
        clean_index,
    })
}

async fn serve_plan<R, W>(
    shared: &Shared,
    wire: Wire,
    facts: &RequestFacts,
    plan: Plan,
    reader: &mut R,
    writer: &mut W,
    keep_alive: bool,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Some(Serving {
        turn,
        fault,
        clean_index,
    }) = serving(shared, plan)
    else {
        let message = format!(
            "fake model scenario exhausted: all {} turns were consumed",
            shared.scenario.turns.len()
        );
        let body = wire::http_error_body(wire, 400, &message);
        return reply_json(writer, 400, &body, keep_alive).await;
    };
    if let (Some(replay), None) = (&turn.replay, &fault) {
        return serve_replay(shared, replay, writer, keep_alive).await;
    }
    let issue = issue(wire, &turn);
    if let Some(index) = clean_index {
        record_issue(shared, wire, facts, index, &issue);
    }
    let model = facts
        .model
        .clone()
        .unwrap_or_else(|| shared.scenario.model.clone());
    let (response_id, message_id) = match wire {
        Wire::OpenAiResponses => (ids::id("resp_"), ids::id("msg_")),
        Wire::OpenAiChat => (ids::id("chatcmpl-"), ids::id("msg_")),
        Wire::Anthropic => (ids::id("msg_01"), ids::id("msg_01")),
        Wire::Gemini => (ids::id(""), ids::id("")),
    };
    let ctx = RenderCtx {
        turn: &turn,
        model: &model,
        response_id: &response_id,
        message_id: &message_id,
        calls: &issue.calls,
        reasoning: issue.reasoning.as_ref(),
        facts,
        created: ids::now_secs(),
    };
    match fault {
        Some(Fault::HttpStatus {
            status,
            retry_after,
            ..
        }) => serve_http_status(wire, status, retry_after, writer, keep_alive).await,
        Some(Fault::EchoKey { status, pad, .. }) => {
            let echoed = facts.credential.as_deref().unwrap_or("(no credential)");
            let message = format!("{} {echoed} was rejected", "#".repeat(pad));
            let body = wire::http_error_body(wire, status, &message);
            reply_json(writer, status, &body, keep_alive).await
        }
        Some(Fault::Redirect { to, status, .. }) => {
            let origin = match (to, &facts.host) {
                (Some(origin), _) => origin,
                (None, Some(host)) => format!("http://{host}"),
                (None, None) => String::new(),
            };
            let location = format!("{}{}", origin.trim_end_matches('/'), facts.target);
            let headers = [("location", location)];
            http::write_full(writer, status, &headers, "text/plain", b"", keep_alive).await?;
            Ok(keep_alive)
        }
        fault if !facts.stream => {
            serve_json(wire, &ctx, fault.as_ref(), reader, writer, keep_alive).await
        }
        fault => serve_stream(wire, &ctx, fault, reader, writer, keep_alive).await,
    }
}

/// A recorded response: the file's bytes as the body, unchanged. A file that cannot be read is
/// a 500 and an invariant violation, so the test fails saying which.
async fn serve_replay<W: AsyncWrite + Unpin>(
    shared: &Shared,
    replay: &Replay,
    writer: &mut W,
    keep_alive: bool,
) -> std::io::Result<bool> {
    match std::fs::read(&replay.file) {
        Ok(body) => {
            http::write_full(
                writer,
                replay.status,
                &[],
                replay.content_type(),
                &body,
                keep_alive,
            )
            .await?;
            Ok(keep_alive)
        }
        Err(e) => {
            let message = format!("cannot read replay {}: {e}", replay.file.display());
            shared.state().violations.push(message.clone());
            reply_json(
                writer,
                500,
                &json!({ "error": { "message": message } }),
                keep_alive,
            )
            .await
        }
    }
}

/// An injected HTTP error status, before any stream, with the wire's error body.
async fn serve_http_status<W: AsyncWrite + Unpin>(
    wire: Wire,
    status: u16,
    retry_after: Option<u64>,
    writer: &mut W,
    keep_alive: bool,
) -> std::io::Result<bool> {
    let message = format!("injected HTTP {status}");
    let headers: Vec<(&str, String)> = retry_after
        .iter()
        .map(|s| ("retry-after", s.to_string()))
        .collect();
    let body = wire::http_error_body(wire, status, &message).to_string();
    http::write_full(
        writer,
        status,
        &headers,
        "application/json",
        body.as_bytes(),
        keep_alive,
    )
    .await?;
    Ok(keep_alive)
}

/// The turn as an event stream, broken per the fault (HTTP status faults never get here).
async fn serve_stream<R, W>(
    wire: Wire,
    ctx: &RenderCtx<'_>,
    fault: Option<Fault>,
    reader: &mut R,
    writer: &mut W,
    keep_alive: bool,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let delivery = ctx.turn.delivery;
    let events = wire::render_stream(wire, ctx);
    let content_type = "text/event-stream; charset=utf-8";
    match fault {
        None => {
            http::write_stream_head(writer, content_type, keep_alive).await?;
            write_events(writer, &events, delivery).await?;
            http::write_last_chunk(writer).await?;
            Ok(keep_alive)
        }
        Some(Fault::ErrorEvent {
            kind,
            message,
            shape,
            ..
        }) => {
            let prefix = EVENTS_BEFORE_ERROR.min(events.len().saturating_sub(1));
            let mut sent = events[..prefix].to_vec();
            sent.push(wire::error_event(wire, ctx, kind, &message, shape));
            http::write_stream_head(writer, content_type, keep_alive).await?;
            write_events(writer, &sent, delivery).await?;
            http::write_last_chunk(writer).await?;
            Ok(keep_alive)
        }
        Some(Fault::Cut { after_events, .. }) => {
            let whole = after_events.min(events.len().saturating_sub(1));
            let mut sent = events[..whole].to_vec();
            if let Some(next) = events.get(whole) {
                sent.push(next[..next.len() / 2].to_vec());
            }
            http::write_stream_head(writer, content_type, false).await?;
            write_events(writer, &sent, delivery).await?;
            Ok(false)
        }
        Some(Fault::EndEarly { after_events, .. }) => {
            let whole = after_events.min(events.len().saturating_sub(1));
            http::write_stream_head(writer, content_type, keep_alive).await?;
            write_events(writer, &events[..whole], delivery).await?;
            http::write_last_chunk(writer).await?;
            Ok(keep_alive)
        }
        Some(Fault::EndlessLine { after_events, .. }) => {
            let whole = after_events.min(events.len().saturating_sub(1));
            http::write_stream_head(writer, content_type, false).await?;
            write_events(writer, &events[..whole], delivery).await?;
            http::write_chunk(writer, b"data: ").await?;
            let filler = vec![b'x'; ENDLESS_PIECE];
            // The client hanging up ends this with a write error; the cap ends it otherwise.
            for _ in 0..ENDLESS_CAP / ENDLESS_PIECE {
                http::write_chunk(writer, &filler).await?;
            }
            Ok(false)
        }
        Some(Fault::Stall { after_events, .. }) => {
            let whole = after_events.min(events.len().saturating_sub(1));
            http::write_stream_head(writer, content_type, false).await?;
            write_events(writer, &events[..whole], delivery).await?;
            wait_for_close(reader).await;
            Ok(false)
        }
        Some(Fault::Flood { what, bytes, .. }) => serve_flood(wire, ctx, what, bytes, writer).await,
        Some(Fault::HttpStatus { .. } | Fault::EchoKey { .. } | Fault::Redirect { .. }) => {
            Ok(keep_alive)
        }
    }
}

/// Size of one flood delta.
const FLOOD_PIECE: usize = 16 * 1024;

/// Streams a turn whose text (or tool-call arguments) has one delta repeated until `bytes` of
/// it went out; the client hanging up ends it with a write error.
async fn serve_flood<W: AsyncWrite + Unpin>(
    wire: Wire,
    ctx: &RenderCtx<'_>,
    what: FloodKind,
    bytes: usize,
    writer: &mut W,
) -> std::io::Result<bool> {
    let piece = "x".repeat(FLOOD_PIECE);
    let grown = piece.repeat(3);
    let mut turn = match what {
        FloodKind::Text => Turn::text(grown),
        FloodKind::ToolArguments => Turn::tool_calls(vec![ToolCallSpec::new(
            "exec_command",
            json!({ "command": grown }),
        )]),
    };
    turn.delivery.delta_chars = FLOOD_PIECE;
    let issue = issue(wire, &turn);
    let flood_ctx = RenderCtx {
        turn: &turn,
        calls: &issue.calls,
        reasoning: None,
        ..*ctx
    };
    let events = wire::render_stream(wire, &flood_ctx);
    // The first event carrying a whole piece is a delta of nothing but flood.
    let at = events
        .iter()
        .position(|event| event.windows(FLOOD_PIECE).any(|w| w == piece.as_bytes()))
        .unwrap_or(0);
    http::write_stream_head(writer, "text/event-stream; charset=utf-8", false).await?;
    for event in &events[..at] {
        http::write_chunk(writer, event).await?;
    }
    if let Some(repeated) = events.get(at) {
        for _ in 0..bytes.div_ceil(FLOOD_PIECE) {
            http::write_chunk(writer, repeated).await?;
        }
    }
    for event in events.iter().skip(at + 1) {
        http::write_chunk(writer, event).await?;
    }
    http::write_last_chunk(writer).await?;
    Ok(false)
}

/// Non-streaming requests get the same turn as one JSON document; faults map onto it.
async fn serve_json<R, W>(
    wire: Wire,
    ctx: &RenderCtx<'_>,
    fault: Option<&Fault>,
    reader: &mut R,
    writer: &mut W,
    keep_alive: bool,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let body = wire::render_json(wire, ctx).to_string().into_bytes();
    match fault {
        None
        | Some(
            Fault::HttpStatus { .. }
            | Fault::EchoKey { .. }
            | Fault::Redirect { .. }
            | Fault::Flood { .. },
        ) => {
            http::pause(ctx.turn.delivery.first_chunk_delay_ms).await;
            http::write_full(writer, 200, &[], "application/json", &body, keep_alive).await?;
            Ok(keep_alive)
        }
        Some(Fault::ErrorEvent { kind, message, .. }) => {
            let status = match kind {
                ErrorKind::Overloaded => {
                    if wire == Wire::Anthropic {
                        529
                    } else {
                        503
                    }
                }
                ErrorKind::RateLimit => 429,
                ErrorKind::Server => 500,
                ErrorKind::InvalidRequest => 400,
            };
            reply_json(
                writer,
                status,
                &wire::http_error_body(wire, status, message),
                keep_alive,
            )
            .await
        }
        Some(Fault::Cut { .. } | Fault::EndEarly { .. } | Fault::EndlessLine { .. }) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let mut bytes = head.into_bytes();
            bytes.extend_from_slice(&body[..body.len() / 2]);
            tokio::io::AsyncWriteExt::write_all(writer, &bytes).await?;
            Ok(false)
        }
        Some(Fault::Stall { .. }) => {
            wait_for_close(reader).await;
            Ok(false)
        }
    }
}

async fn write_events<W: AsyncWrite + Unpin>(
    writer: &mut W,
    events: &[SseEvent],
    delivery: Delivery,
) -> std::io::Result<()> {
    http::pause(delivery.first_chunk_delay_ms).await;
    for (index, piece) in http::pieces(events, delivery.tcp).iter().enumerate() {
        if index > 0 {
            http::pause(delivery.chunk_delay_ms).await;
        }
        http::write_chunk(writer, piece).await?;
    }
    Ok(())
}

/// Holds a stalled response open until the client hangs up (or the server is dropped).
async fn wait_for_close<R: AsyncRead + Unpin>(reader: &mut R) {
    let mut buffer = [0; 1024];
    while let Ok(read) = reader.read(&mut buffer).await {
        if read == 0 {
            break;
        }
    }
}

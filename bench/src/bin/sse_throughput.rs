//! `sse_throughput`: SSE parse + fold throughput per wire, beside a raw line split of the same
//! bytes. Goal: ratio at least 0.5x.
//!
//! For each wire a realistic recorded stream (about 50 MB of text-delta events framed exactly as
//! the API frames them, between the wire's start and terminal events; each delta event has the
//! members of the golden fixtures' events in the API's order, with the counters that change from
//! event to event, such as Responses' `sequence_number`) is built in memory, cut
//! into 16 KiB network-sized chunks, and pushed through `WireStreamDecoder` (SSE framing, JSON
//! decoding, normalization) into a `ResponseAccumulator`. Two baselines over the same bytes:
//! `memchr` splits the chunks into lines, carrying partial lines across chunks, and touches every
//! line (the floor: no copy, no UTF-8 check); `lines()` is `BufRead::lines`, an owned,
//! UTF-8-checked `String` per line (what the simplest SSE reader does). The goal is stated
//! against the `lines()` baseline; both ratios are printed. Each side runs `ROUNDS` times,
//! alternating, and the fastest round of each is compared.
//!
//! `sse_throughput --profile [wire...]` runs only parse + fold, `PROFILE_ROUNDS` times, so that
//! `perf record` or `valgrind --tool=callgrind` sees nothing else.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_providers::anthropic::MessagesParser;
use intendant_providers::gemini::GeminiParser;
use intendant_providers::openai_chat::ChatParser;
use intendant_providers::openai_responses::ResponsesParser;
use intendant_providers::sse::{WireParser, WireStreamDecoder};
use intendant_providers::{ResponseAccumulator, StreamEvent};
use serde_json::json;

const TARGET_BYTES: usize = 50 * 1024 * 1024;
const CHUNK: usize = 16 * 1024;
const ROUNDS: usize = 3;
const PROFILE_ROUNDS: usize = 20;

/// Token-sized text pieces, some multi-byte, as models stream them.
const WORDS: &[&str] = &[
    "The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    ".",
    "\n",
    " Größe",
    " naïve",
    " café",
    " — ",
    "\"quoted\"",
    " 42",
    " fn",
    " main",
    "()",
    " {",
    " }",
    " 😀",
    " 終わり",
    " and",
    " then",
    " some",
    " more",
    " text",
    ",",
];

struct Wire {
    name: &'static str,
    head: String,
    /// The `n`th delta event carrying the (JSON-quoted) text, members in the API's order.
    delta: fn(usize, &str) -> String,
    tail: String,
    /// Parses and folds a recording with this wire's parser.
    parse: fn(&[u8]) -> Result<(Duration, usize)>,
}

fn wires() -> Vec<Wire> {
    let ev = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    vec![
        Wire {
            name: "openai",
            parse: |bytes| parse_and_fold(ResponsesParser::default(), bytes),
            head: ev(
                "response.created",
                json!({"type": "response.created", "sequence_number": 0,
                "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}}),
            ) + &ev(
                "response.output_item.added",
                json!({"type": "response.output_item.added", "sequence_number": 1,
                "output_index": 0, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            ),
            delta: |n, t| {
                format!(
                    "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"output_index\":0,\"content_index\":0,\"delta\":{t},\"logprobs\":[]}}\n\n",
                    n + 2
                )
            },
            tail: ev(
                "response.completed",
                json!({"type": "response.completed", "sequence_number": 9,
                "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}),
            ),
        },
        Wire {
            name: "anthropic",
            parse: |bytes| parse_and_fold(MessagesParser::default(), bytes),
            head: ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ) + &ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            delta: |_, t| {
                format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}\n\n"
                )
            },
            tail: ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ) + &ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
            ) + &ev("message_stop", json!({"type": "message_stop"})),
        },
        Wire {
            name: "gemini",
            parse: |bytes| parse_and_fold(GeminiParser::new(), bytes),
            head: String::new(),
            // Intermediate chunks as Gemini sends them: the prompt's usage, unchanged until the
            // final chunk adds the candidates' count.
            delta: |_, t| {
                format!(
                    "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":{t}}}],\"role\":\"model\"}},\"index\":0}}],\"usageMetadata\":{{\"promptTokenCount\":2006,\"totalTokenCount\":2006,\"promptTokensDetails\":[{{\"modality\":\"TEXT\",\"tokenCount\":2006}}]}},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"mWqtaJ6CHPfZz7IP2Mrd8Q8\"}}\r\n\r\n"
                )
            },
            tail: format!(
                "data: {}\r\n\r\n",
                json!({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}})
            ),
        },
        Wire {
            name: "openai-chat",
            parse: |bytes| parse_and_fold(ChatParser::new(), bytes),
            head: String::new(),
            delta: |_, t| {
                format!(
                    "data: {{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4.1-2025-04-14\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_c7ca0ebaca\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{t}}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
                )
            },
            tail: format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            ),
        },
    ]
}

/// The recorded stream and the text it carries.
fn record(wire: &Wire) -> (Vec<u8>, String) {
    let mut bytes = wire.head.clone().into_bytes();
    let mut text = String::new();
    let mut i = 0usize;
    while bytes.len() < TARGET_BYTES {
        let word = WORDS[i % WORDS.len()];
        i += 1;
        let quoted = serde_json::to_string(word).unwrap_or_default();
        bytes.extend_from_slice((wire.delta)(i, &quoted).as_bytes());
        text.push_str(word);
    }
    bytes.extend_from_slice(wire.tail.as_bytes());
    (bytes, text)
}

fn parse_and_fold<P: WireParser>(parser: P, bytes: &[u8]) -> Result<(Duration, usize)> {
    let start = Instant::now();
    let mut decoder = WireStreamDecoder::new(parser);
    let mut acc = ResponseAccumulator::new("bench");
    let mut events: Vec<StreamEvent> = Vec::new();
    // The accumulator folds borrowed events, so they are dropped in place, not moved out.
    for chunk in bytes.chunks(CHUNK) {
        decoder.feed(chunk, &mut events);
        for event in &events {
            acc.push(event);
        }
        events.clear();
    }
    decoder.finish(&mut events);
    for event in &events {
        acc.push(event);
    }
    let response = acc.finish()?;
    let elapsed = start.elapsed();
    Ok((elapsed, black_box(response.text.len())))
}

fn line_split(bytes: &[u8]) -> (Duration, usize) {
    let start = Instant::now();
    let mut carry: Vec<u8> = Vec::new();
    let mut lines = 0usize;
    let mut touched = 0usize;
    for chunk in bytes.chunks(CHUNK) {
        let mut rest = chunk;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let line = if carry.is_empty() {
                &rest[..end]
            } else {
                carry.extend_from_slice(&rest[..end]);
                carry.as_slice()
            };
            touched = touched.wrapping_add(black_box(line).len());
            lines += 1;
            carry.clear();
            rest = &rest[end + 1..];
        }
        carry.extend_from_slice(rest);
    }
    let elapsed = start.elapsed();
    black_box(touched);
    (elapsed, lines)
}

fn std_lines(bytes: &[u8]) -> Result<Duration> {
    use std::io::BufRead;
    let start = Instant::now();
    let mut touched = 0usize;
    for line in std::io::Cursor::new(bytes).lines() {
        touched = touched.wrapping_add(black_box(line?).len());
    }
    let elapsed = start.elapsed();
    black_box(touched);
    Ok(elapsed)
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    println!(
        "sse_throughput: parse + fold vs raw line splits, {CHUNK}-byte chunks, best of {ROUNDS}"
    );
    // Optional arguments name the wires to run (default: all); `--profile` runs only the
    // parse + fold side, many rounds, so a profiler sees nothing else.
    let mut only: Vec<String> = std::env::args().skip(1).collect();
    let profile = only.iter().any(|a| a == "--profile");
    only.retain(|a| a != "--profile");
    let mut worst = f64::INFINITY;
    for wire in wires()
        .into_iter()
        .filter(|w| only.is_empty() || only.iter().any(|o| o == w.name))
    {
        let (bytes, text) = record(&wire);
        if profile {
            for _ in 0..PROFILE_ROUNDS {
                (wire.parse)(&bytes)?;
            }
            continue;
        }
        let mut best_parse = Duration::MAX;
        let mut best_split = Duration::MAX;
        let mut best_lines = Duration::MAX;
        for _ in 0..ROUNDS {
            let (d, folded) = (wire.parse)(&bytes)?;
            if folded != text.len() {
                bail!(
                    "{}: folded {folded} text bytes, expected {}",
                    wire.name,
                    text.len()
                );
            }
            best_parse = best_parse.min(d);
            best_split = best_split.min(line_split(&bytes).0);
            best_lines = best_lines.min(std_lines(&bytes)?);
        }
        let parse = mb_per_s(bytes.len(), best_parse);
        let split = mb_per_s(bytes.len(), best_split);
        let lines = mb_per_s(bytes.len(), best_lines);
        let ratio = parse / lines;
        worst = worst.min(ratio);
        intendant_bench::report::record(&Figure {
            row: &format!("sse_fold_{}", wire.name),
            measured: &format!("SSE parse + fold of a recorded {} stream", wire.name),
            value: parse,
            baseline: "`BufRead::lines()` of the same bytes",
            baseline_value: lines,
            unit: "MB/s",
            better: Better::Higher,
            goal: Some(0.5),
            limit: None,
        })?;
        println!(
            "  {:<12} {:>5.1} MB  parse+fold {:>7.1} MB/s | lines() {:>7.1} MB/s ratio {ratio:.3}x | memchr {:>8.1} MB/s ratio {:.3}x",
            wire.name,
            bytes.len() as f64 / (1024.0 * 1024.0),
            parse,
            lines,
            split,
            parse / split
        );
    }
    println!("  worst ratio vs lines(): {worst:.3}x (goal >= 0.5x)");
    Ok(())
}

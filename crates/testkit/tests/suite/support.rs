//! Shared helpers: posting model requests and parsing SSE the way a careful client would.

use intendant_testkit::{FakeModelServer, Wire};
use serde_json::{Value, json};

/// One SSE event: its `event:` name (if any) and its `data:` payload.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("bad JSON {:?}: {e}", self.data))
    }
}

/// Parses a complete SSE body (LF or CRLF framing).
pub fn parse_sse(body: &str) -> Vec<Event> {
    let normalized = body.replace("\r\n", "\n");
    normalized
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = Some(value.trim().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                }
            }
            Event {
                name,
                data: data.join("\n"),
            }
        })
        .collect()
}

/// The path and a minimal streaming request body for `wire`, offering one tool `shell`.
pub fn request_for(wire: Wire, history: Vec<Value>) -> (String, Value) {
    match wire {
        Wire::OpenAiResponses => (
            "/v1/responses".into(),
            json!({ "model": "gpt-test", "stream": true, "store": false,
                "include": ["reasoning.encrypted_content"],
                "tools": [{ "type": "function", "name": "shell", "parameters": { "type": "object" } }],
                "input": history }),
        ),
        Wire::OpenAiChat => (
            "/v1/chat/completions".into(),
            json!({ "model": "gpt-test", "stream": true, "stream_options": { "include_usage": true },
                "tools": [{ "type": "function", "function": { "name": "shell", "parameters": { "type": "object" } } }],
                "messages": history }),
        ),
        Wire::Anthropic => (
            "/v1/messages".into(),
            json!({ "model": "claude-test", "stream": true, "max_tokens": 1000,
                "tools": [{ "name": "shell", "input_schema": { "type": "object" } }],
                "messages": history }),
        ),
        Wire::Gemini => (
            "/v1beta/models/gemini-test:streamGenerateContent?alt=sse".into(),
            json!({ "tools": [{ "functionDeclarations": [{ "name": "shell", "parameters": { "type": "object" } }] }],
                "contents": history }),
        ),
    }
}

pub fn user_message(wire: Wire, text: &str) -> Value {
    match wire {
        Wire::OpenAiResponses => {
            json!({ "type": "message", "role": "user", "content": [{ "type": "input_text", "text": text }] })
        }
        Wire::OpenAiChat | Wire::Anthropic => json!({ "role": "user", "content": text }),
        Wire::Gemini => json!({ "role": "user", "parts": [{ "text": text }] }),
    }
}

/// A finished HTTP exchange.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

pub async fn post(server: &FakeModelServer, path: &str, body: &Value) -> Reply {
    let url = format!("http://{}{path}", server.addr());
    let response = intendant_netguard::http::client()
        .unwrap()
        .post(url)
        .header("x-api-key", "sk-test-secret")
        .json(body)
        .send()
        .await
        .expect("request reaches the fake");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body reads completely");
    Reply {
        status,
        headers,
        body,
    }
}

/// Posts a streaming request for `wire` with `history` and returns the parsed events.
pub async fn stream(server: &FakeModelServer, wire: Wire, history: Vec<Value>) -> Vec<Event> {
    let (path, body) = request_for(wire, history);
    let reply = post(server, &path, &body).await;
    assert_eq!(reply.status, 200, "body: {}", reply.body);
    parse_sse(&reply.body)
}

//! The scenario file format: parsing, defaults, and clear errors for bad input.

use std::path::Path;

use intendant_testkit::{
    Delivery, FakeModelServer, Fault, OnExhausted, Scenario, ScenarioError, ServerError,
    TcpChunking, Turn,
};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn documented_example_parses_with_defaults_filled_in() {
    let json = r#"{
      "model": "fake-model",
      "on_exhausted": "done",
      "side_requests": { "when_no_tools": true, "models": ["claude-haiku-4-5"] },
      "turns": [
        { "reasoning": { "text": "Let me look." },
          "tool_calls": [ { "name": "shell", "arguments": { "command": ["ls"] } } ],
          "usage": { "input": 120, "cached": 100, "output": 12, "reasoning": 5 },
          "faults": [ { "type": "http_status", "status": 429, "retry_after": 1, "times": 2 } ] },
        { "text": "All done.", "expect": { "tool_results_for_previous": true } }
      ]
    }"#;
    let scenario = Scenario::from_json(json).unwrap();
    assert_eq!(scenario.turns.len(), 2);
    assert_eq!(scenario.on_exhausted, OnExhausted::Done);
    assert_eq!(scenario.side_requests.reply, "ok");
    assert_eq!(
        scenario.turns[0].faults,
        vec![Fault::HttpStatus {
            status: 429,
            retry_after: Some(1),
            times: 2
        }]
    );
    assert_eq!(scenario.turns[0].delivery, Delivery::default());
    assert_eq!(scenario.turns[1].usage.input, 10, "default usage");
}

#[test]
fn every_fault_and_chunking_mode_has_a_json_spelling() {
    let json = r#"{ "turns": [ { "text": "x",
      "delivery": { "tcp": { "every": 3 }, "first_chunk_delay_ms": 5 },
      "faults": [
        { "type": "error_event", "kind": "overloaded" },
        { "type": "error_event", "kind": "rate_limit", "shape": "nested", "message": "slow down" },
        { "type": "cut", "after_events": 4 },
        { "type": "stall" }
      ] } ] }"#;
    let scenario = Scenario::from_json(json).unwrap();
    let turn = &scenario.turns[0];
    assert_eq!(turn.delivery.tcp, TcpChunking::Every(3));
    assert_eq!(turn.faults.len(), 4);
    assert_eq!(
        turn.faults[3],
        Fault::Stall {
            after_events: 2,
            times: 1
        }
    );
    let round_trip = Scenario::from_json(&serde_json::to_string(&scenario).unwrap()).unwrap();
    assert_eq!(round_trip, scenario);
}

#[test]
fn fixtures_load() {
    for name in ["codex_exec_command.json", "claude_bash.json"] {
        let scenario = Scenario::load(&fixture(name)).unwrap();
        assert_eq!(scenario.turns.len(), 2, "{name}");
    }
}

#[test]
fn a_replayed_file_is_found_beside_the_scenario_and_served_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let body = b"data: {\"x\":1}\r\n\r\n";
    std::fs::write(dir.path().join("s.sse"), body).unwrap();
    let file = dir.path().join("scenario.json");
    std::fs::write(&file, r#"{"turns": [{"replay": {"file": "s.sse"}}]}"#).unwrap();
    let scenario = Scenario::load(&file).unwrap();
    let replay = scenario.turns[0].replay.clone().unwrap();
    assert_eq!(replay.file, dir.path().join("s.sse"));
    assert_eq!(replay.content_type(), "text/event-stream");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = intendant_testkit::FakeModelServer::start(scenario)
            .await
            .unwrap();
        let url = format!(
            "{}/chat/completions",
            server.base_url(intendant_testkit::Wire::OpenAiChat)
        );
        let response = intendant_netguard::http::client()
            .unwrap()
            .post(url)
            .body(r#"{"model":"m","messages":[],"stream":true}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.bytes().await.unwrap().as_ref(), body);
    });
    // The scripted model has no HTTP to replay over: it refuses the turn.
    let e = intendant_testkit::scenario::Scenario::load(&file)
        .and_then(intendant_providers::scripted::ScriptedProvider::new)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("replays are served only by the fake model server"),
        "{e}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let cases = [
        (
            r#"{ "turns": [ { "txt": "typo" } ] }"#,
            "unknown field `txt`",
        ),
        (
            r#"{ "turns": [ {} ] }"#,
            "needs text, reasoning, tool calls or a replay",
        ),
        (
            r#"{ "turns": [ { "text": "x", "replay": { "file": "a.sse" } } ] }"#,
            "a replayed turn serves its file",
        ),
        (
            r#"{ "turns": [ { "replay": { "file": "a.sse", "status": 99 } } ] }"#,
            "not an HTTP status",
        ),
        (
            r#"{ "turns": [ { "replay": { "path": "a.sse" } } ] }"#,
            "unknown field `path`",
        ),
        (
            r#"{ "turns": [ { "text": "x", "delivery": { "delta_chars": 0 } } ] }"#,
            "delta_chars",
        ),
        (
            r#"{ "turns": [ { "text": "x", "delivery": { "tcp": { "every": 0 } } } ] }"#,
            "tcp.every",
        ),
        (
            r#"{ "turns": [ { "text": "x", "usage": { "input": 1, "cached": 2 } } ] }"#,
            "cached exceeds",
        ),
        (
            r#"{ "turns": [ { "text": "x", "faults": [ { "type": "http_status", "status": 200 } ] } ] }"#,
            "not an error status",
        ),
        (
            r#"{ "turns": [ { "text": "x", "faults": [ { "type": "cut", "times": 0 } ] } ] }"#,
            "times = 0",
        ),
        (
            r#"{ "turns": [ { "tool_calls": [ { "name": "" } ] } ] }"#,
            "empty name",
        ),
        (
            r#"{ "turns": [ { "text": "x", "faults": [ { "type": "explode" } ] } ] }"#,
            "unknown variant `explode`",
        ),
    ];
    for (json, needle) in cases {
        let error = Scenario::from_json(json).unwrap_err().to_string();
        assert!(error.contains(needle), "{json}: {error}");
    }
    let missing = Scenario::load(Path::new("/nonexistent/scenario.json")).unwrap_err();
    assert!(matches!(missing, ScenarioError::Read { .. }));
    assert!(missing.to_string().contains("/nonexistent/scenario.json"));
}

#[tokio::test]
async fn the_server_refuses_an_invalid_scenario() {
    let scenario = Scenario::new(vec![Turn::default()]);
    let error = FakeModelServer::start(scenario).await.err().unwrap();
    assert!(matches!(error, ServerError::Scenario(_)), "{error}");
}

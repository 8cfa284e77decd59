//! The official SDKs (openai, @anthropic-ai/sdk, @google/genai; installed by
//! `scripts/install-clis.sh`) stream a turn from the fake, delivered as awkwardly as it gets, and
//! assemble exactly the scripted text, reasoning, signature, parallel calls and usage; and they
//! recognise each wire's error event as an error. This covers the two wires no real CLI here
//! speaks (Chat Completions, Gemini) with the vendors' own parsers.

use std::path::{Path, PathBuf};

use intendant_testkit::{
    Delivery, ErrorKind, FakeModelServer, Fault, Reasoning, ResponsesErrorShape, Scenario,
    TcpChunking, ToolCallSpec, Turn, Usage, Wire, clis,
};
use serde_json::{Value, json};
use tokio::process::Command;

use super::real_clis::{describe, isolated, run};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/stream_turn.cjs")
}

/// Node 24 and the SDK root, or `None` when skipping.
fn toolchain() -> Option<(PathBuf, PathBuf)> {
    let node = clis::require_installed("node 24", clis::node24())?;
    let root = clis::require_installed("official SDKs", clis::sdk_root())?;
    Some((node, root))
}

/// Runs the SDK script for `wire` against `server`; returns (success, stdout JSON or stderr).
async fn sdk_stream(
    node: &Path,
    root: &Path,
    server: &FakeModelServer,
    wire: Wire,
) -> (bool, String) {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(node);
    isolated(&mut command, home.path());
    command
        .env("SDK_ROOT", root)
        .arg(script())
        .arg(wire.to_string())
        .arg(server.base_url(wire));
    let output = run(command).await;
    if output.status.success() {
        (true, String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        (false, describe(&output))
    }
}

fn rich_turn() -> Turn {
    Turn {
        text: Some("Grüße, 世界 🌍! \"quoted\" \\ back".into()),
        reasoning: Some(Reasoning {
            text: "Think: ünïcödé 🤔".into(),
            signature: None,
        }),
        tool_calls: vec![
            ToolCallSpec::new(
                "shell",
                json!({ "command": ["echo", "a \"b\" ✓"], "n": -1500 }),
            ),
            ToolCallSpec::new("shell", json!({ "command": ["ls"] })),
        ],
        usage: Usage {
            input: 1200,
            cached: 1000,
            output: 90,
            reasoning: 30,
        },
        delivery: Delivery {
            delta_chars: 1,
            tcp: TcpChunking::Awkward,
            ..Delivery::default()
        },
        ..Turn::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_assemble_the_scripted_turn() {
    let Some((node, root)) = toolchain() else {
        return;
    };
    for wire in Wire::ALL {
        let server = FakeModelServer::start(Scenario::new(vec![rich_turn()]))
            .await
            .unwrap();
        let (ok, out) = sdk_stream(&node, &root, &server, wire).await;
        assert!(ok, "{wire}: {out}");
        let got: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(got["text"], "Grüße, 世界 🌍! \"quoted\" \\ back", "{wire}");
        assert_eq!(got["reasoning"], "Think: ünïcödé 🤔", "{wire}");
        let calls = got["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2, "{wire}");
        assert_eq!(
            calls[0]["arguments"],
            json!({ "command": ["echo", "a \"b\" ✓"], "n": -1500 }),
            "{wire}"
        );
        assert_eq!(
            calls[1]["arguments"],
            json!({ "command": ["ls"] }),
            "{wire}"
        );
        let reasoning_tokens = if wire == Wire::Anthropic { 0 } else { 30 };
        assert_eq!(
            got["usage"],
            json!([1200, 1000, 90, reasoning_tokens]),
            "{wire}"
        );
        let (signed, stop) = match wire {
            Wire::OpenAiResponses => (true, "completed"),
            Wire::OpenAiChat => (false, "tool_calls"),
            Wire::Anthropic => (true, "tool_use"),
            Wire::Gemini => (true, "STOP"),
        };
        assert_eq!(got["signature"].is_string(), signed, "{wire}");
        assert_eq!(got["stop"], stop, "{wire}");
        assert_eq!(server.invariant_violations(), Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_recognise_each_error_event() {
    let Some((node, root)) = toolchain() else {
        return;
    };
    let cases = [
        (
            Wire::OpenAiResponses,
            ResponsesErrorShape::Failed,
            "server_is_overloaded",
        ),
        (
            Wire::OpenAiResponses,
            ResponsesErrorShape::Flat,
            "Overloaded now",
        ),
        (
            Wire::OpenAiResponses,
            ResponsesErrorShape::Nested,
            "Overloaded now",
        ),
        (
            Wire::OpenAiChat,
            ResponsesErrorShape::Failed,
            "Overloaded now",
        ),
        (
            Wire::Anthropic,
            ResponsesErrorShape::Failed,
            "overloaded_error",
        ),
        (Wire::Gemini, ResponsesErrorShape::Failed, "UNAVAILABLE"),
    ];
    for (wire, shape, needle) in cases {
        let fault = Fault::ErrorEvent {
            kind: ErrorKind::Overloaded,
            message: "Overloaded now".into(),
            shape,
            times: 1,
        };
        let turn = Turn {
            faults: vec![fault],
            ..Turn::text("a text long enough to be mid-stream")
        };
        let server = FakeModelServer::start(Scenario::new(vec![turn]))
            .await
            .unwrap();
        let (ok, out) = sdk_stream(&node, &root, &server, wire).await;
        assert!(!ok, "{wire} {shape:?}: the SDK must fail: {out}");
        assert!(
            out.contains(needle),
            "{wire} {shape:?}: expected {needle:?} in {out}"
        );
    }
}

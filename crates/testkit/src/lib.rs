//! Test fakes for Intendant. The centrepiece is [`FakeModelServer`]: a model API on 127.0.0.1
//! that speaks all four wires (OpenAI Responses, OpenAI Chat Completions, Anthropic Messages,
//! Gemini) from one scripted [`Scenario`], with injected faults, and that records every request
//! and checks that clients echo tool call ids and reasoning signatures byte for byte.
//!
//! The one design decision to know: HTTP is hand-written on raw tokio sockets rather than a
//! server framework, because the faults (a stream cut mid-event, writes split inside UTF-8
//! characters and between CR and LF) need control of every byte on the wire.
//!
//! ```no_run
//! use intendant_testkit::{FakeModelServer, Scenario, ToolCallSpec, Turn, Wire};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let scenario = Scenario::new(vec![
//!     Turn::tool_calls(vec![ToolCallSpec::new("shell", serde_json::json!({ "cmd": "ls" }))]),
//!     Turn::text("done"),
//! ]);
//! let server = FakeModelServer::start(scenario).await?;
//! let base = server.base_url(Wire::Anthropic); // point the client here, run it, then:
//! assert!(server.invariant_violations().is_empty());
//! # let _ = base;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - `scenario`: the scenario file format (turns, faults, delivery, expectations), shared with
//!   the product's scripted model in `intendant_providers::scenario`.
//! - `server`: the listener and its connections.
//! - `state`: shared state, recording, and the per-request plan with its `expect` checks.
//! - `respond`: routing and writing each response per the plan.
//! - `wire`: one module per API rendering its SSE events, error shapes and request echoes.
//! - `ledger`: what was issued, and the invariant checks against it.
//! - `http`: minimal HTTP/1.1 with keep-alive and chunked streaming.
//! - `clis`: where the pinned real CLIs are installed for acceptance tests.
//! - `optional`: skip (outside CI) or fail (under `CI`) when a test's system package is missing.
//! - `full_disk`: a small tmpfs in a mount namespace of one thread or child, for `ENOSPC` tests.
//! - `nats`: Debian's `nats-server` with JetStream on a loopback port, for the fleet's tests.
//! - `tls`: TLS in front of a loopback server, with a test authority, for `https` clients.
//!
//! A turn may also replay a recorded response byte for byte (`"replay": {"file": ...}`): the
//! streams under `fixtures/streams/<wire>/` (see their README) are served that way to the real
//! binary by the CLI's replay suite ([`stream_fixture`] finds them).

pub mod accounts;
pub mod clis;
pub mod fake_clis;
pub mod full_disk;
mod http;
mod ids;
mod ledger;
pub mod nats;
pub mod optional;
pub mod procs;
mod respond;
mod server;
mod state;
pub mod tls;
mod wire;

pub use intendant_providers::scenario;
pub use scenario::{
    Delivery, ErrorKind, Expect, Fault, FloodKind, OnExhausted, Reasoning, Replay,
    ResponsesErrorShape, Scenario, ScenarioError, Script, SideRequests, StopKind, TcpChunking,
    ToolCallSpec, Turn, Usage,
};
pub use server::{FakeModelServer, ServerError};
pub use state::{RecordedRequest, Served};
pub use wire::Wire;

/// The recorded stream `case` of `wire` under `crates/testkit/fixtures/streams/<wire>/`.
pub fn stream_fixture(wire: &str, case: &str) -> std::path::PathBuf {
    [
        env!("CARGO_MANIFEST_DIR"),
        "fixtures",
        "streams",
        wire,
        case,
    ]
    .iter()
    .collect()
}

/// A binary built into this test's target directory (`target/debug/`, two levels above the
/// test binary in `deps/`), or the path `$override_var` names when set: the suites that run
/// real batches find `intendant-runtime` this way. Panics, naming the cargo command to run,
/// when it was not built.
pub fn built_binary(name: &str, override_var: &str) -> std::path::PathBuf {
    if let Some(path) = std::env::var_os(override_var).filter(|v| !v.is_empty()) {
        return path.into();
    }
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()));
    let path = target.map(|t| t.join(name)).unwrap_or_default();
    assert!(
        path.is_file(),
        "{} is missing: build the workspace first (`cargo build -p {name}`)",
        path.display()
    );
    path
}

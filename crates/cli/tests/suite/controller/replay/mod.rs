//! The replay suite: streams in each service's exact wire format (`crates/testkit/fixtures/
//! streams/<wire>/`, their origins in the README there) served byte for byte by the fake model
//! server to the real `intendant --json`, one test per stream: reasoning, tool calls, refusals,
//! truncation and errors on every wire, and sessions driven through the text tool path.

mod anthropic;
mod chat;
mod gemini;
mod responses;
mod text_path;

use std::path::PathBuf;
use std::process::Output;

use intendant_testkit::{Wire, stream_fixture};
use serde_json::{Value, json};

use super::harness::{Ctl, body_text, events_of, read};

/// The fixture directory of `wire`.
fn wire_dir(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAiResponses => "openai_responses",
        Wire::OpenAiChat => "openai_chat",
        Wire::Anthropic => "anthropic",
        Wire::Gemini => "gemini",
    }
}

/// A turn that replays `case` of `wire`.
fn replay(wire: Wire, case: &str) -> Value {
    let file = stream_fixture(wire_dir(wire), case);
    assert!(file.is_file(), "missing fixture {}", file.display());
    json!({ "replay": { "file": file } })
}

/// A turn that replays `case` of `wire` with an HTTP error `status`.
fn replay_status(wire: Wire, case: &str, status: u16) -> Value {
    let mut turn = replay(wire, case);
    turn["replay"]["status"] = json!(status);
    turn
}

/// One finished `--json` run of `turns`.
struct Replayed {
    ctl: Ctl,
    out: Output,
    events: Vec<Value>,
}

impl Replayed {
    fn run(wire: Wire, turns: Value) -> Replayed {
        Self::run_with_config(wire, turns, None)
    }

    /// Runs with `config` as the project's `intendant.toml`.
    fn run_with_config(wire: Wire, turns: Value, config: Option<&str>) -> Replayed {
        let ctl = Ctl::new(wire, turns);
        if let Some(config) = config {
            std::fs::write(ctl.project().join("intendant.toml"), config).unwrap();
        }
        let (out, events) = ctl.run_json("do the task", &[]);
        Replayed { ctl, out, events }
    }

    fn of(&self, kind: &str) -> Vec<&Value> {
        events_of(&self.events, kind)
    }

    /// The `session_ended` status.
    fn status(&self) -> String {
        let ended = self.of("session_ended");
        assert_eq!(ended.len(), 1, "{}", self.dump());
        ended[0]["status"].as_str().unwrap_or_default().to_owned()
    }

    fn done_message(&self) -> String {
        let done = self.of("done");
        assert_eq!(done.len(), 1, "{}", self.dump());
        done[0]["message"].as_str().unwrap_or_default().to_owned()
    }

    /// The body of the `n`th model request (0-based).
    fn request(&self, n: usize) -> String {
        let requests = self.ctl.turn_requests();
        assert!(
            requests.len() > n,
            "only {} requests: {}",
            requests.len(),
            self.dump()
        );
        body_text(&requests[n])
    }

    fn requests(&self) -> usize {
        self.ctl.turn_requests().len()
    }

    /// The outputs of `tool`'s results.
    fn outputs(&self, tool: &str) -> Vec<String> {
        super::harness::outputs_of(&self.events, tool)
    }

    /// The session's record directory.
    fn record_dir(&self) -> PathBuf {
        let logs = self.ctl.intendant_home().join("logs");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&logs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs.remove(0)
    }

    fn record(&self, file: &str) -> String {
        read(&self.record_dir().join(file))
    }

    fn dump(&self) -> String {
        format!(
            "exit {:?}\nstderr:\n{}\nevents:\n{:#?}",
            self.out.status,
            String::from_utf8_lossy(&self.out.stderr),
            self.events
        )
    }
}

/// A refusal is an event with the model's words, the round and session end `refused` (exit 3,
/// a stop), and the session log records it.
fn assert_refused(run: &Replayed, text: &str) {
    let refusals = run.of("refusal");
    assert_eq!(refusals.len(), 1, "{}", run.dump());
    assert_eq!(refusals[0]["text"], text, "{}", run.dump());
    assert!(
        run.of("done").is_empty(),
        "a refusal is no done: {}",
        run.dump()
    );
    assert_eq!(run.of("round_complete")[0]["reason"], "refused");
    assert_eq!(run.status(), "refused");
    assert_eq!(run.out.status.code(), Some(3), "{}", run.dump());
    let log = run.record("session.jsonl");
    assert!(
        log.lines()
            .any(|l| l.contains("\"event\":\"refusal\"") && l.contains(text)),
        "{log}"
    );
}

/// A truncated response is an event naming what was cut; the cut call never ran.
fn assert_truncated_call(run: &Replayed, tool: &str, not_written: &str) {
    let truncated = run.of("truncated");
    assert_eq!(truncated.len(), 1, "{}", run.dump());
    let detail = truncated[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("`{tool}`")) && detail.contains("not run"),
        "{detail}"
    );
    assert!(
        run.of("tool_call").iter().all(|c| c["name"] != tool),
        "the cut call was offered for running: {}",
        run.dump()
    );
    assert!(run.outputs(tool).is_empty());
    assert!(
        !run.ctl.project().join(not_written).exists(),
        "the cut call ran"
    );
    // The model is told, and the session goes on to its next turn.
    let told = run.request(1);
    assert!(
        told.contains("was cut off at the output token limit"),
        "{told}"
    );
    assert!(
        told.contains(&format!("`{tool}`")) && told.contains("was not run"),
        "{told}"
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
}

/// A stream that failed mid-way with a retryable error is restarted and the session finishes.
fn assert_restarted(run: &Replayed) {
    assert_eq!(run.requests(), 2, "{}", run.dump());
    assert_eq!(run.done_message(), "recovered");
    assert_eq!(run.status(), "completed");
}

/// A plain text turn saying `recovered`.
fn recovered() -> Value {
    json!({ "text": "recovered" })
}

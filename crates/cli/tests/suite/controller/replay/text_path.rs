//! Sessions driven through the text tool path: a llama.cpp model without tool calling writing
//! JSON commands (chosen by `[provider] tool_mode = "text"`, or after Ollama refused the tool
//! definitions), and a command cut off mid-JSON.

use intendant_testkit::Wire;
use serde_json::json;

use super::{Replayed, replay, replay_status};

const WIRE: Wire = Wire::OpenAiChat;
const TEXT_MODE: &str = "[provider]\ntool_mode = \"text\"\n";

/// The run went through the text path: no tool definitions offered, the command ran (through
/// the same batch and events as a native call) and its result went back as text.
fn assert_text_session(run: &Replayed, first_text_request: usize) {
    assert_eq!(run.status(), "completed", "{}", run.dump());
    let first = run.request(first_text_request);
    assert!(!first.contains(r#""tools""#), "tools were offered: {first}");
    assert!(
        first.contains("# Tools") && first.contains("exec_command"),
        "{first}"
    );
    let marker = std::fs::read_to_string(run.ctl.project().join("marker.txt")).unwrap();
    assert_eq!(marker.trim(), "text-path");
    assert_eq!(run.of("tool_batch").len(), 1, "{}", run.dump());
    assert_eq!(run.outputs("exec_command").len(), 1);
    let second = run.request(first_text_request + 1);
    assert!(second.contains("Result of exec_command"), "{second}");
    assert!(!second.contains("tool_call_id"), "{second}");
    assert_eq!(run.done_message(), "marker.txt created");
}

#[test]
fn text_path_session_runs_json_commands_end_to_end() {
    let run = Replayed::run_with_config(
        WIRE,
        json!([
            replay(WIRE, "text_mode_call.sse"),
            replay(WIRE, "text_mode_done.sse")
        ]),
        Some(TEXT_MODE),
    );
    assert_text_session(&run, 0);
    assert!(run.of("warning").is_empty(), "{}", run.dump());
}

#[test]
fn a_server_refusing_tool_definitions_switches_to_the_text_path() {
    let run = Replayed::run(
        WIRE,
        json!([
            replay_status(WIRE, "ollama_tools_rejected.json", 400),
            replay(WIRE, "text_mode_call.sse"),
            replay(WIRE, "text_mode_done.sse")
        ]),
    );
    assert!(run.request(0).contains(r#""tools""#));
    let warnings = run.of("warning");
    assert_eq!(warnings.len(), 1, "{}", run.dump());
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("does not support tools")
    );
    assert_text_session(&run, 1);
}

#[test]
fn text_path_json_cut_off_is_explained_and_never_run() {
    let run = Replayed::run_with_config(
        WIRE,
        json!([replay(WIRE, "text_mode_cut.sse"), { "text": "I will stop here." }]),
        Some(TEXT_MODE),
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert_eq!(run.of("truncated").len(), 1, "{}", run.dump());
    assert!(
        run.of("tool_batch").is_empty(),
        "the cut command ran: {}",
        run.dump()
    );
    let told = run.request(1);
    assert!(told.contains("Your last answer was not run"), "{told}");
    assert!(told.contains("cut off at the output token limit"), "{told}");
    assert_eq!(run.done_message(), "I will stop here.");
}

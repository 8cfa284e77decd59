//! The text tool path on every wire: the model answers in text, its JSON commands run through
//! the same batch as native calls, and their results go back as one message.

use intendant_protocol::events::{AppEvent, EndStatus};
use intendant_providers::ToolMode;
use intendant_testkit::Wire;
use serde_json::json;

use super::support::{Options, World, body_text, text_turn};

fn text_mode() -> Options {
    Options {
        tool_mode: ToolMode::Text,
        ..Options::default()
    }
}

async fn runs_json_commands_from_text(wire: Wire) {
    let command = "```json\n{\"calls\": [{\"tool\": \"exec_command\", \"arguments\": {\"command\": \"echo from-text > t.txt\"}}]}\n```";
    let world = World::new(
        wire,
        json!([
            text_turn(&format!("Creating it.\n{command}")),
            text_turn("{\"done\": true, \"message\": \"t.txt written\"}")
        ]),
    )
    .await;
    let run = world.run("write t.txt", text_mode()).await;
    let outcome = run.outcome();
    assert_eq!(
        (outcome.status, outcome.reason.as_str()),
        (EndStatus::Completed, "t.txt written"),
        "{wire:?}"
    );
    let written = std::fs::read_to_string(world.project.path().join("t.txt")).unwrap();
    assert_eq!(written.trim(), "from-text");
    let calls = run.pick(|e| match e {
        AppEvent::ToolCall { name, .. } => Some(name.clone()),
        _ => None,
    });
    assert_eq!(calls, ["exec_command", "signal_done"], "{wire:?}");
    let requests = world.turn_requests();
    let first = body_text(&requests[0]);
    assert!(
        first.contains("# Tools") && first.contains("exec_command"),
        "{first}"
    );
    let second = body_text(&requests[1]);
    assert!(second.contains("Result of exec_command"), "{second}");
}

#[tokio::test]
async fn text_tools_on_openai_responses() {
    runs_json_commands_from_text(Wire::OpenAiResponses).await;
}

#[tokio::test]
async fn text_tools_on_anthropic() {
    runs_json_commands_from_text(Wire::Anthropic).await;
}

#[tokio::test]
async fn text_tools_on_gemini() {
    runs_json_commands_from_text(Wire::Gemini).await;
}

#[tokio::test]
async fn text_tools_on_openai_chat() {
    runs_json_commands_from_text(Wire::OpenAiChat).await;
}

#[tokio::test]
async fn a_malformed_command_is_explained_and_the_model_tries_again() {
    let world = World::new(
        Wire::OpenAiResponses,
        json!([
            text_turn(
                "{\"calls\": [{\"tool\": \"exec_command\", \"arguments\": {\"command\": }}]}"
            ),
            text_turn("Giving up.")
        ]),
    )
    .await;
    let run = world.run("try", text_mode()).await;
    assert_eq!(run.outcome().reason, "Giving up.");
    assert!(run.outputs().is_empty(), "nothing ran");
    let told = body_text(&world.turn_requests()[1]);
    assert!(
        told.contains("Your last answer was not run") && told.contains("not valid"),
        "{told}"
    );
}

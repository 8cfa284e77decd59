//! Gemini streams: Gemini 3 calls with ids, `MAX_TOKENS` after thoughts, `UNAVAILABLE`
//! mid-stream, `PROHIBITED_CONTENT`.

use intendant_testkit::Wire;
use serde_json::{Value, json};

use super::super::harness::done_turn;
use super::{Replayed, assert_restarted, recovered, replay};

const WIRE: Wire = Wire::Gemini;

#[test]
fn gemini3_call_ids_are_echoed_on_the_calls_and_their_responses() {
    let run = Replayed::run(
        WIRE,
        json!([
            replay(WIRE, "gemini3_function_call_ids.sse"),
            done_turn("ok")
        ]),
    );
    assert_eq!(run.status(), "completed", "{}", run.dump());
    assert!(run.outputs("exec_command")[0].contains("gemini-one"));
    let body: Value = serde_json::from_str(&run.request(1)).unwrap();
    let parts: Vec<&Value> = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .collect();
    let ids = |key: &str| -> Vec<(String, String)> {
        parts
            .iter()
            .filter_map(|p| p.get(key))
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or_default().to_owned(),
                    f["id"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let expected = [
        ("exec_command".to_owned(), "u7f3qk2p".to_owned()),
        ("inspect_path".to_owned(), "c9m1xw4e".to_owned()),
    ];
    assert_eq!(ids("functionCall"), expected, "{body}");
    assert_eq!(ids("functionResponse"), expected, "{body}");
    // The signature rides on the first call, as received.
    let first = parts
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .unwrap();
    assert!(
        first["thoughtSignature"]
            .as_str()
            .unwrap_or_default()
            .starts_with("CpwCAdHtim9q3Xk5")
    );
}

#[test]
fn gemini_max_tokens_is_shown_and_the_model_is_asked_to_go_on() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "max_tokens_thinking.sse"), { "text": "2. Run the tests." }]),
    );
    let truncated = run.of("truncated");
    assert_eq!(truncated.len(), 1, "{}", run.dump());
    assert!(
        truncated[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cut off")
    );
    let told = run.request(1);
    assert!(
        told.contains("was cut off at the output token limit"),
        "{told}"
    );
    assert!(told.contains("Continue from where it stopped"), "{told}");
    assert_eq!(run.done_message(), "2. Run the tests.");
}

#[test]
fn gemini_unavailable_mid_stream_restarts_the_stream() {
    let run = Replayed::run(
        WIRE,
        json!([replay(WIRE, "unavailable_midstream.sse"), recovered()]),
    );
    assert_restarted(&run);
}

#[test]
fn gemini_prohibited_content_is_shown_as_a_refusal() {
    let run = Replayed::run(WIRE, json!([replay(WIRE, "prohibited_content.sse")]));
    super::assert_refused(&run, "the provider's safety filter stopped the response");
}

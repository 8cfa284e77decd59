use super::*;

fn calls(text: &str) -> Vec<(String, Value)> {
    match extract_commands(text, 3) {
        TextCommands::Calls(calls) => calls
            .into_iter()
            .map(|c| (c.name, serde_json::from_str(&c.arguments).unwrap()))
            .collect(),
        other => panic!("{text:?}: {other:?}"),
    }
}

fn invalid(text: &str) -> String {
    match extract_commands(text, 1) {
        TextCommands::Invalid(message) => message,
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn the_whole_answer_as_json_is_read() {
    let got = calls(r#" {"calls":[{"tool":"exec_command","arguments":{"command":"ls"}}]} "#);
    assert_eq!(
        got,
        [("exec_command".into(), serde_json::json!({"command": "ls"}))]
    );
}

#[test]
fn a_fenced_block_inside_prose_is_read_and_ids_are_unique() {
    let text = "I will look first.\n```json\n{\"calls\": [\n {\"tool\": \"inspect_path\", \"arguments\": {\"path\": \"a\"}},\n {\"name\": \"exec_command\", \"command\": \"ls\"}]}\n```\nThen decide.";
    let TextCommands::Calls(list) = extract_commands(text, 7) else {
        panic!()
    };
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].call_id, "text_7_0");
    assert_eq!(list[1].call_id, "text_7_1");
    assert_eq!(list[1].name, "exec_command");
    assert_eq!(list[1].arguments, r#"{"command":"ls"}"#, "the flat form");
}

#[test]
fn bare_json_in_prose_is_read_and_other_braces_are_not_commands() {
    let text = "Set {x} first. {\"tool\": \"exec_command\", \"arguments\": \"{\\\"command\\\":\\\"pwd\\\"}\"} ok";
    assert_eq!(
        calls(text),
        [("exec_command".into(), serde_json::json!({"command": "pwd"}))]
    );
}

#[test]
fn done_is_explicit_and_runs_after_the_calls() {
    let got = calls(
        r#"{"calls":[{"tool":"exec_command","arguments":{"command":"make"}}],"done":true,"message":"built"}"#,
    );
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1],
        (
            "signal_done".into(),
            serde_json::json!({"message": "built"})
        )
    );
    assert_eq!(
        calls("```json\n{\"done\": true}\n```"),
        [("signal_done".into(), serde_json::json!({"message": ""}))]
    );
}

#[test]
fn prose_without_commands_is_a_final_answer() {
    assert_eq!(
        extract_commands("All done, nothing to run.", 1),
        TextCommands::None
    );
    assert_eq!(
        extract_commands("The config is {\"a\": 1}.", 1),
        TextCommands::None,
        "JSON that is no command is prose"
    );
}

#[test]
fn malformed_or_cut_json_is_explained_never_guessed() {
    let cut = invalid(
        "Running it:\n{\"calls\": [{\"tool\": \"exec_command\", \"arguments\": {\"command\": \"rm -rf bu",
    );
    assert!(cut.contains("ends before it is complete"), "{cut}");
    let fence = invalid("```json\n{\"calls\": [{\"tool\": \"exec_command\",]}\n```");
    assert!(fence.contains("code block 1 is not valid"), "{fence}");
    let unclosed = invalid("```json\n{\"calls\": [{\"tool\": \"exec_command\"");
    assert!(unclosed.contains("not valid"), "{unclosed}");
    assert!(invalid(r#"{"calls": [{"arguments": {}}]}"#).contains("names no `tool`"));
    assert!(invalid(r#"{"calls": "ls"}"#).contains("must be a list"));
    assert!(invalid(r#"{"done": "yes"}"#).contains("true or false"));
    assert!(invalid(r#"{"done": false}"#).contains("neither calls"));
    assert!(invalid(r#"{"tool": "x", "arguments": [1]}"#).contains("not an object"));
}

#[test]
fn the_prompt_lists_every_tool_with_its_schema() {
    let tools = crate::tools::tool_definitions(crate::tools::ToolSet::default());
    let prompt = text_mode_prompt(&tools);
    for tool in &tools {
        assert!(
            prompt.contains(&format!("- {}: ", tool.name)),
            "{}",
            tool.name
        );
    }
    assert!(prompt.contains("\"done\": true"));
}

#[test]
fn a_long_run_of_braces_is_read_in_linear_time() {
    // Quadratic scanning took minutes here; linear takes milliseconds.
    let text = format!(
        "{} then {}",
        "{".repeat(1_000_000),
        r#"{"tool": "x", "arguments": {}}"#
    );
    let started = std::time::Instant::now();
    assert_eq!(calls(&text).len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(invalid(&format!("{}\"tool\": [", "{".repeat(1_000_000))).contains("not valid"));
}

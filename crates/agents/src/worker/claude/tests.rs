use super::*;

fn feed(codec: &mut ClaudeCodec, line: &str) -> Vec<Step> {
    codec
        .handle(&serde_json::from_str::<Value>(line).unwrap())
        .unwrap()
}

fn ask_line(id: &str, tool: &str, input: &str) -> String {
    format!(
        r#"{{"type":"control_request","request_id":"{id}","request":{{"subtype":"can_use_tool","tool_name":"{tool}","input":{input}}}}}"#
    )
}

fn sent(step: Option<Step>) -> Value {
    match step {
        Some(Step::Send(v)) => v,
        other => panic!("not a line: {other:?}"),
    }
}

#[test]
fn permission_modes_follow_autonomy() {
    assert_eq!(permission_mode(AutonomyLevel::Low), "plan");
    assert_eq!(permission_mode(AutonomyLevel::Medium), "default");
    assert_eq!(permission_mode(AutonomyLevel::Full), "default");
    let args = launch_args(&ClaudeLaunch {
        model: Some("m".into()),
        resume: Some("abc".into()),
        autonomy: AutonomyLevel::Low,
        ..ClaudeLaunch::default()
    });
    let joined = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        joined.contains("--input-format stream-json --output-format stream-json --verbose"),
        "{joined}"
    );
    assert!(
        joined.contains("--permission-prompt-tool stdio --permission-mode plan"),
        "{joined}"
    );
    assert!(joined.ends_with("--model m --resume abc"), "{joined}");
    let sources = args.iter().position(|a| a == "--setting-sources").unwrap();
    assert_eq!(
        args[sources + 1],
        "",
        "no settings file answers for our gate"
    );
}

#[test]
fn a_can_use_tool_request_is_a_question_answered_with_the_input() {
    let mut c = ClaudeCodec::new();
    let steps = feed(
        &mut c,
        &ask_line(
            "r1",
            "Bash",
            r#"{"command":"touch a.txt","description":"x"}"#,
        ),
    );
    let [Step::Ask(key, action)] = steps.as_slice() else {
        panic!("{steps:?}")
    };
    assert_eq!(key, "r1");
    assert_eq!(action.preview, "$ touch a.txt");
    let v = sent(c.answer("r1", ApprovalAnswer::Approve));
    assert_eq!(v["type"], "control_response");
    assert_eq!(v["response"]["subtype"], "success");
    assert_eq!(v["response"]["request_id"], "r1");
    assert_eq!(v["response"]["response"]["behavior"], "allow");
    assert_eq!(
        v["response"]["response"]["updatedInput"],
        json!({"command": "touch a.txt", "description": "x"})
    );
    assert!(
        c.answer("r1", ApprovalAnswer::Approve).is_none(),
        "answered once"
    );
}

#[test]
fn skip_denies_and_goes_on_deny_denies_and_interrupts() {
    let mut c = ClaudeCodec::new();
    for id in ["a", "b"] {
        feed(
            &mut c,
            &ask_line(id, "Write", r#"{"file_path":"f","content":"x"}"#),
        );
    }
    let skip = sent(c.answer("a", ApprovalAnswer::Skip));
    assert_eq!(skip["response"]["response"]["behavior"], "deny");
    assert_eq!(skip["response"]["response"]["interrupt"], false);
    assert_eq!(skip["response"]["response"]["message"], SKIPPED_OUTPUT);
    let deny = sent(c.answer("b", ApprovalAnswer::Deny));
    assert_eq!(deny["response"]["response"]["interrupt"], true);
    assert_eq!(deny["response"]["response"]["message"], DENIED_OUTPUT);
    let end = feed(
        &mut c,
        r#"{"type":"result","subtype":"error_during_execution","is_error":true,"usage":{}}"#,
    );
    assert_eq!(end.last(), Some(&Step::TurnEnded(TurnEnd::Interrupted)));
}

#[test]
fn a_withdrawn_question_is_not_answered() {
    let mut c = ClaudeCodec::new();
    feed(&mut c, &ask_line("r", "Bash", r#"{"command":"ls"}"#));
    // It leaves our approval queue too; a second cancel of it is nothing.
    let cancel = r#"{"type":"control_cancel_request","request_id":"r"}"#;
    assert_eq!(feed(&mut c, cancel), [Step::Withdraw("r".to_owned())]);
    assert!(feed(&mut c, cancel).is_empty());
    assert!(c.answer("r", ApprovalAnswer::Approve).is_none());
}

#[test]
fn an_unknown_control_request_gets_an_error_response() {
    let mut c = ClaudeCodec::new();
    let steps = feed(
        &mut c,
        r#"{"type":"control_request","request_id":"h","request":{"subtype":"hook_callback"}}"#,
    );
    let v = sent(steps.into_iter().find(|s| matches!(s, Step::Send(_))));
    assert_eq!(v["response"]["subtype"], "error");
    assert_eq!(v["response"]["request_id"], "h");
    assert!(
        v["response"]["error"]
            .as_str()
            .unwrap()
            .contains("hook_callback")
    );
}

#[test]
fn a_refused_initialize_is_an_error_and_a_refused_interrupt_is_not() {
    let mut c = ClaudeCodec::new();
    let init = c.initialize();
    assert_eq!(init["request"]["subtype"], "initialize");
    let id = init["request_id"].as_str().unwrap().to_owned();
    let refusal = |id: &str| json!({"type":"control_response","response":{"subtype":"error","request_id":id,"error":"no"}});
    let e = c.handle(&refusal(&id)).unwrap_err();
    assert!(e.to_string().contains("refused initialize"), "{e}");
    let int = c.interrupt();
    assert_eq!(int["request"]["subtype"], "interrupt");
    let id = int["request_id"].as_str().unwrap().to_owned();
    assert!(c.handle(&refusal(&id)).unwrap().is_empty());
}

#[test]
fn messages_map_onto_our_events_and_the_result_ends_the_turn() {
    let mut c = ClaudeCodec::new();
    let first = c.user_message("go");
    assert_eq!(first["message"]["content"], "go");
    let s = feed(
        &mut c,
        r#"{"type":"system","subtype":"init","session_id":"S1"}"#,
    );
    assert_eq!(s, [Step::WorkerSession("S1".into())]);
    assert_eq!(c.user_message("again")["session_id"], "S1");
    let s = feed(
        &mut c,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"Cre"}},"parent_tool_use_id":null}"#,
    );
    assert_eq!(s, [Step::Delta("Cre".into())]);
    let s = feed(
        &mut c,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Creating."}]},"parent_tool_use_id":null}"#,
    );
    assert_eq!(
        s,
        [Step::Message {
            text: "Creating.".into(),
            reasoning: "hm".into()
        }]
    );
    let s = feed(
        &mut c,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":null}"#,
    );
    assert_eq!(
        s,
        [Step::ToolCall {
            call_id: "t1".into(),
            name: "exec_command".into(),
            arguments: json!({"command": "ls"})
        }]
    );
    let s = feed(
        &mut c,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a.txt"}]}]},"parent_tool_use_id":null}"#,
    );
    assert_eq!(
        s,
        [Step::ToolOutput {
            call_id: "t1".into(),
            name: "exec_command".into(),
            output: "a.txt".into()
        }]
    );
    // A sub-agent's messages stay its own.
    let s = feed(
        &mut c,
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"inner"}]},"parent_tool_use_id":"t9"}"#,
    );
    assert!(s.is_empty());
    let s = feed(
        &mut c,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","total_cost_usd":0.5,"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":3}}"#,
    );
    let [
        Step::Usage(usage, cost),
        Step::TurnEnded(TurnEnd::Completed),
    ] = s.as_slice()
    else {
        panic!("{s:?}")
    };
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens
        ),
        (15, 5, 3)
    );
    assert_eq!(*cost, Some(0.5));
    // The running cost total becomes per-turn costs.
    let s = feed(
        &mut c,
        r#"{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.75,"usage":{}}"#,
    );
    let Step::Usage(_, Some(cost)) = s[0] else {
        panic!("{s:?}")
    };
    assert!((cost - 0.25).abs() < 1e-9);
}

#[test]
fn a_failed_result_says_why_and_malformed_messages_are_errors() {
    let mut c = ClaudeCodec::new();
    let s = feed(
        &mut c,
        r#"{"type":"result","subtype":"error_max_turns","is_error":true,"usage":{}}"#,
    );
    let Some(Step::TurnEnded(TurnEnd::Failed(message))) = s.last() else {
        panic!("{s:?}")
    };
    assert!(message.contains("error_max_turns"), "{message}");
    assert!(c.handle(&json!({"no": "type"})).is_err());
    assert!(c.handle(&json!({"type": "assistant"})).is_err());
    assert!(c.handle(&json!({"type": "control_request"})).is_err());
    assert!(feed(&mut c, r#"{"type":"rate_limit_event"}"#).is_empty());
}

#[test]
fn tools_become_our_questions() {
    let q = tool_question_of(
        "Edit",
        &json!({"file_path": "f", "old_string": "a", "new_string": "b"}),
    );
    assert_eq!(q.preview, "edit f (replace)");
    let q = tool_question_of("Bash", &json!({"no": "command"}));
    assert_eq!(q.preview, "tool Bash");
    let q = tool_question_of("WebFetch", &json!({"url": "https://x"}));
    assert_eq!(q.preview, "browse https://x");
}

use super::*;

fn codec() -> AcpCodec {
    let mut c = AcpCodec::new("kimi", "S");
    c.prompt("task");
    c
}

fn update(c: &mut AcpCodec, u: Value) -> Vec<Step> {
    c.on_notification("session/update", &json!({"sessionId": "S", "update": u}))
}

fn sent(steps: &[Step]) -> Vec<Value> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Send(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

/// kimi's question as recorded: the command only in the streamed arguments.
fn kimi_ask(c: &mut AcpCodec) -> Vec<Step> {
    update(
        c,
        json!({"sessionUpdate":"tool_call","toolCallId":"0:t1","title":"Bash","kind":"execute","status":"pending"}),
    );
    update(
        c,
        json!({"sessionUpdate":"tool_call_update","toolCallId":"0:t1","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"{\"command\":\"touch approved.txt\"}"}}]}),
    );
    c.on_request(
        json!(0),
        "session/request_permission",
        &json!({"sessionId":"S","options":[{"optionId":"approve_once","name":"Approve once","kind":"allow_once"},{"optionId":"approve_always","name":"Approve for this session","kind":"allow_always"},{"optionId":"reject","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"0:t1","title":"Bash","content":[{"type":"content","content":{"type":"text","text":"Requesting approval to Running: touch approved.txt"}}]}}),
    )
}

#[test]
fn a_permission_request_uses_the_streamed_arguments_and_options_are_picked_by_kind() {
    let mut c = codec();
    let s = kimi_ask(&mut c);
    let [Step::Ask(key, action)] = s.as_slice() else {
        panic!("{s:?}")
    };
    assert_eq!(key, "0");
    assert_eq!(action.preview, "$ touch approved.txt");
    let out = sent(&c.answer("0", ApprovalAnswer::Approve));
    assert_eq!(
        out,
        [
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"approve_once"}}})
        ]
    );
    kimi_ask(&mut c);
    let out = sent(&c.answer("0", ApprovalAnswer::ApproveAll));
    assert_eq!(out[0]["result"]["outcome"]["optionId"], "approve_always");
    kimi_ask(&mut c);
    let out = sent(&c.answer("0", ApprovalAnswer::Skip));
    assert_eq!(out.len(), 1, "a skip goes on");
    assert_eq!(out[0]["result"]["outcome"]["optionId"], "reject");
    assert!(
        c.answer("0", ApprovalAnswer::Skip).is_empty(),
        "answered once"
    );
}

#[test]
fn a_deny_rejects_and_cancels_the_turn() {
    let mut c = codec();
    kimi_ask(&mut c);
    let out = sent(&c.answer("0", ApprovalAnswer::Deny));
    assert_eq!(out[0]["result"]["outcome"]["optionId"], "reject");
    assert_eq!(out[1]["method"], "session/cancel");
    assert_eq!(out[1]["params"]["sessionId"], "S");
    let s = c
        .on_prompt_answer(Ok(json!({"stopReason": "cancelled"})))
        .unwrap();
    assert_eq!(s.last(), Some(&Step::TurnEnded(TurnEnd::Interrupted)));
}

#[test]
fn without_a_matching_option_the_answer_is_cancelled_never_allow() {
    let mut c = codec();
    let s = c.on_request(
        json!("p"),
        "session/request_permission",
        &json!({"options":[{"optionId":"yes","kind":"allow_once"}],"toolCall":{"toolCallId":"x","title":"Write","kind":"edit","content":[{"type":"diff","path":"/w/f","oldText":null,"newText":"hi"}]}}),
    );
    let [Step::Ask(key, action)] = s.as_slice() else {
        panic!("{s:?}")
    };
    assert_eq!(action.preview, "edit /w/f (write)");
    let out = sent(&c.answer(key, ApprovalAnswer::Skip));
    assert_eq!(out[0]["id"], "p");
    assert_eq!(out[0]["result"]["outcome"], json!({"outcome": "cancelled"}));
}

#[test]
fn cancel_answers_open_questions_cancelled_once() {
    let mut c = codec();
    kimi_ask(&mut c);
    let out = sent(&c.cancel());
    assert_eq!(out[0]["method"], "session/cancel");
    assert_eq!(out[1]["id"], 0);
    assert_eq!(out[1]["result"]["outcome"]["outcome"], "cancelled");
    assert!(c.cancel().is_empty(), "cancelled once");
    // A question asked after the cancel is refused at once.
    let s = kimi_ask(&mut c);
    assert_eq!(sent(&s)[0]["result"]["outcome"]["outcome"], "cancelled");
    assert!(!s.iter().any(|s| matches!(s, Step::Ask(..))));
    let s = c
        .on_prompt_answer(Ok(json!({"stopReason": "cancelled"})))
        .unwrap();
    assert_eq!(s.last(), Some(&Step::TurnEnded(TurnEnd::Interrupted)));
    assert!(c.cancel().is_empty(), "nothing to cancel between turns");
}

#[test]
fn updates_map_onto_our_events() {
    let mut c = codec();
    let s = update(
        &mut c,
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Creating"}}),
    );
    assert_eq!(s, [Step::Delta("Creating".into())]);
    update(
        &mut c,
        json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}),
    );
    let s = update(
        &mut c,
        json!({"sessionUpdate":"tool_call","toolCallId":"t","title":"Bash","kind":"execute","status":"pending","rawInput":{"command":"ls"}}),
    );
    assert_eq!(
        s,
        [
            Step::Message {
                text: "Creating".into(),
                reasoning: "hm".into()
            },
            Step::ToolCall {
                call_id: "t".into(),
                name: "exec_command".into(),
                arguments: json!({"command": "ls"})
            }
        ]
    );
    let s = update(
        &mut c,
        json!({"sessionUpdate":"tool_call_update","toolCallId":"t","title":"Running: ls","status":"completed","rawOutput":"a.txt"}),
    );
    assert_eq!(
        s,
        [Step::ToolOutput {
            call_id: "t".into(),
            name: "exec_command".into(),
            output: "a.txt".into()
        }]
    );
    // Another session's updates, and updates we do not show, are dropped.
    assert!(
        c.on_notification(
            "session/update",
            &json!({"sessionId": "other", "update": {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}})
        )
        .is_empty()
    );
    assert!(update(&mut c, json!({"sessionUpdate":"usage_update","used":1})).is_empty());
    update(
        &mut c,
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done."}}),
    );
    let s = c
        .on_prompt_answer(Ok(
            json!({"stopReason":"end_turn","usage":{"inputTokens":7,"outputTokens":2}}),
        ))
        .unwrap();
    let [
        Step::Message { text, .. },
        Step::Usage(usage, None),
        Step::TurnEnded(TurnEnd::Completed),
    ] = s.as_slice()
    else {
        panic!("{s:?}")
    };
    assert_eq!(text, "Done.");
    assert_eq!((usage.input_tokens, usage.output_tokens), (7, 2));
}

#[test]
fn unknown_requests_get_an_error() {
    let mut c = codec();
    let s = c.on_request(
        json!(9),
        "fs/read_text_file",
        &json!({"path": "/etc/passwd"}),
    );
    let out = sent(&s);
    assert_eq!(out[0]["id"], 9);
    assert_eq!(out[0]["error"]["code"], METHOD_NOT_FOUND);
    assert!(s.iter().any(|s| matches!(s, Step::Warning(_))));
    assert!(c.on_notification("x/unknown", &Value::Null).is_empty());
}

#[test]
fn a_failed_prompt_and_other_stop_reasons_fail_the_turn() {
    let mut c = codec();
    let error = WorkerError::Rpc {
        method: "session/prompt".into(),
        error: super::super::rpc::RpcError {
            code: -32000,
            message: "model unreachable".into(),
        },
    };
    let s = c.on_prompt_answer(Err(error)).unwrap();
    let Some(Step::TurnEnded(TurnEnd::Failed(message))) = s.last() else {
        panic!("{s:?}")
    };
    assert!(message.contains("model unreachable"), "{message}");
    c.prompt("again");
    let s = c
        .on_prompt_answer(Ok(json!({"stopReason": "max_tokens"})))
        .unwrap();
    let Some(Step::TurnEnded(TurnEnd::Failed(message))) = s.last() else {
        panic!("{s:?}")
    };
    assert!(message.contains("max_tokens"));
    assert!(c.on_prompt_answer(Err(WorkerError::Closed)).is_err());
}

#[test]
fn the_read_only_mode_is_found_among_the_offered_ones() {
    let opened = json!({"modes":{"currentModeId":"default","availableModes":[{"id":"default"},{"id":"plan"}]}});
    assert_eq!(read_only_mode(&opened).as_deref(), Some("plan"));
    assert_eq!(read_only_mode(&json!({"sessionId": "S"})), None);
}

//! Recording and invariants: a well-behaved client leaves no violations on any wire; each way of
//! mangling the echo (unknown tool result id, altered signature or text, dropped reasoning,
//! altered arguments) is reported; side traffic and exhaustion follow the scenario's policy.

use intendant_testkit::{
    Expect, FakeModelServer, OnExhausted, Reasoning, Scenario, Script, Served, SideRequests,
    ToolCallSpec, Turn, Wire,
};
use serde_json::{Value, json};

use super::support::{post, request_for, stream, user_message};
use super::wires::{Folded, fold};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tamper {
    None,
    UnknownResultId,
    AlteredSignature,
    AlteredReasoningText,
    DroppedReasoning,
    AlteredArguments,
}

fn scenario() -> Scenario {
    Scenario::new(vec![
        Turn {
            reasoning: Some(Reasoning {
                text: "plan".into(),
                signature: None,
            }),
            tool_calls: vec![
                ToolCallSpec::new("shell", json!({ "command": "ls" })),
                ToolCallSpec::new("shell", json!({ "command": "pwd" })),
            ],
            ..Turn::default()
        },
        Turn {
            expect: Some(Expect {
                tool_results_for_previous: true,
                ..Expect::default()
            }),
            ..Turn::text("done")
        },
    ])
}

/// The history a client sends after `folded`, mangled per `tamper`.
fn echo(wire: Wire, folded: &Folded, tamper: Tamper) -> Vec<Value> {
    let mut signature = folded.signature.clone().unwrap_or_default();
    if tamper == Tamper::AlteredSignature {
        signature.push('=');
    }
    let thinking = if tamper == Tamper::AlteredReasoningText {
        "plan!"
    } else {
        folded.reasoning.as_str()
    };
    let keep_reasoning = tamper != Tamper::DroppedReasoning;
    let calls: Vec<(String, String, Value)> = folded
        .calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, args))| {
            let mut args = args.clone();
            if tamper == Tamper::AlteredArguments && i == 0 {
                args["command"] = json!("rm -rf /");
            }
            let mut id = id.clone().unwrap_or_default();
            if tamper == Tamper::UnknownResultId && i == 1 {
                id = "call_made_up".into();
            }
            (id, name.clone(), args)
        })
        .collect();
    let mut history = vec![user_message(wire, "go")];
    match wire {
        Wire::OpenAiResponses => {
            if keep_reasoning {
                history.push(json!({ "type": "reasoning", "summary": [{ "type": "summary_text", "text": thinking }],
                    "encrypted_content": signature }));
            }
            for (i, (id, name, args)) in calls.iter().enumerate() {
                let call_id = folded.calls[i].0.clone().unwrap();
                history.push(
                    json!({ "type": "function_call", "call_id": call_id, "name": name,
                    "arguments": args.to_string() }),
                );
                history
                    .push(json!({ "type": "function_call_output", "call_id": id, "output": "ok" }));
            }
        }
        Wire::OpenAiChat => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (_, name, args))| {
                    json!({ "id": folded.calls[i].0, "type": "function",
                    "function": { "name": name, "arguments": args.to_string() } })
                })
                .collect();
            history.push(json!({ "role": "assistant", "content": null, "tool_calls": tool_calls }));
            for (id, _, _) in &calls {
                history.push(json!({ "role": "tool", "tool_call_id": id, "content": "ok" }));
            }
        }
        Wire::Anthropic => {
            let mut content = Vec::new();
            if keep_reasoning {
                content.push(
                    json!({ "type": "thinking", "thinking": thinking, "signature": signature }),
                );
            }
            for (i, (_, name, args)) in calls.iter().enumerate() {
                content.push(json!({ "type": "tool_use", "id": folded.calls[i].0, "name": name, "input": args }));
            }
            history.push(json!({ "role": "assistant", "content": content }));
            let results: Vec<Value> = calls
                .iter()
                .map(|(id, _, _)| json!({ "type": "tool_result", "tool_use_id": id, "content": "ok" }))
                .collect();
            history.push(json!({ "role": "user", "content": results }));
        }
        Wire::Gemini => {
            let mut parts = vec![json!({ "text": thinking, "thought": true })];
            for (i, (_, name, args)) in calls.iter().enumerate() {
                let mut part = json!({ "functionCall": { "name": name, "args": args } });
                if i == 0 && keep_reasoning {
                    part["thoughtSignature"] = json!(signature);
                }
                parts.push(part);
            }
            history.push(json!({ "role": "model", "parts": parts }));
            let results: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (_, name, _))| {
                    let name = if tamper == Tamper::UnknownResultId && i == 1 {
                        "made_up"
                    } else {
                        name
                    };
                    json!({ "functionResponse": { "name": name, "response": { "output": "ok" } } })
                })
                .collect();
            history.push(json!({ "role": "user", "parts": results }));
        }
    }
    history
}

async fn violations_after(wire: Wire, tamper: Tamper) -> Vec<String> {
    let server = FakeModelServer::start(scenario()).await.unwrap();
    let folded = fold(
        wire,
        &stream(&server, wire, vec![user_message(wire, "go")]).await,
    );
    let second = fold(
        wire,
        &stream(&server, wire, echo(wire, &folded, tamper)).await,
    );
    assert_eq!(second.text, "done");
    server.invariant_violations()
}

#[tokio::test]
async fn a_faithful_echo_leaves_no_violations() {
    for wire in Wire::ALL {
        assert_eq!(
            violations_after(wire, Tamper::None).await,
            Vec::<String>::new(),
            "{wire}"
        );
    }
}

#[tokio::test]
async fn each_mangled_echo_is_reported() {
    let cases = [
        (Tamper::UnknownResultId, "answers no tool call"),
        (Tamper::AlteredSignature, "never issued (or was altered)"),
        (Tamper::DroppedReasoning, "without the reasoning signature"),
        (Tamper::AlteredArguments, "differs from the issued one"),
        (Tamper::AlteredReasoningText, "reasoning text echoed"),
    ];
    for wire in Wire::ALL {
        for (tamper, needle) in cases {
            // Chat carries no signature and Gemini echoes no reasoning text: nothing to check.
            let inapplicable = matches!(
                (wire, tamper),
                (
                    Wire::OpenAiChat,
                    Tamper::AlteredSignature
                        | Tamper::DroppedReasoning
                        | Tamper::AlteredReasoningText,
                ) | (Wire::Gemini, Tamper::AlteredReasoningText)
            );
            // Gemini calls have no ids, so altered arguments make the call unknown.
            let needle = match (wire, tamper) {
                (Wire::Gemini, Tamper::AlteredArguments) => "never issued with these arguments",
                _ => needle,
            };
            let violations = violations_after(wire, tamper).await;
            if inapplicable {
                assert!(violations.is_empty(), "{wire} {tamper:?}: {violations:?}");
                continue;
            }
            assert!(
                violations.iter().any(|v| v.contains(needle)),
                "{wire} {tamper:?}: expected {needle:?} in {violations:?}"
            );
        }
    }
}

#[tokio::test]
async fn missing_tool_results_fail_the_expectation() {
    for wire in Wire::ALL {
        let server = FakeModelServer::start(scenario()).await.unwrap();
        stream(&server, wire, vec![user_message(wire, "go")]).await;
        stream(
            &server,
            wire,
            vec![user_message(wire, "forgot the results")],
        )
        .await;
        let violations = server.invariant_violations();
        assert_eq!(
            violations.len(),
            2,
            "{wire}: one per unanswered call: {violations:?}"
        );
        assert!(
            violations[0].contains("expected a tool result"),
            "{violations:?}"
        );
    }
}

#[tokio::test]
async fn expect_checks_offered_tools_and_body_text() {
    let expect = Expect {
        tools: vec!["edit".into()],
        body_contains: vec!["needle".into()],
        ..Expect::default()
    };
    let turn = Turn {
        expect: Some(expect),
        ..Turn::text("x")
    };
    let server = FakeModelServer::start(Scenario::new(vec![turn]))
        .await
        .unwrap();
    stream(
        &server,
        Wire::Anthropic,
        vec![user_message(Wire::Anthropic, "haystack")],
    )
    .await;
    let violations = server.invariant_violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[0].contains("\"edit\"") && violations[1].contains("needle"));
}

#[tokio::test]
async fn requests_are_recorded_with_headers_and_bodies() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("x")]))
        .await
        .unwrap();
    let (path, body) = request_for(
        Wire::Gemini,
        vec![user_message(Wire::Gemini, "hello there")],
    );
    post(&server, &path, &body).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, path);
    assert_eq!(request.header("X-API-Key"), Some("sk-test-secret"));
    assert_eq!(request.body, body);
    assert_eq!(request.wire, Some(Wire::Gemini));
    assert_eq!(
        request.served,
        Served::Turn {
            index: 0,
            attempt: 0
        }
    );
    assert_eq!(
        server.base_url(Wire::OpenAiResponses),
        format!("http://{}/v1", server.addr())
    );
    assert_eq!(
        server.base_url(Wire::Anthropic),
        format!("http://{}", server.addr())
    );
}

#[tokio::test]
async fn each_conversation_plays_the_script_its_user_messages_name() {
    for wire in Wire::ALL {
        let mut scenario = Scenario::new(vec![Turn::text("outer one"), Turn::text("outer two")]);
        scenario.scripts = vec![Script {
            when_task_contains: "NESTED-TASK".into(),
            turns: vec![Turn::text("nested one")],
        }];
        let server = FakeModelServer::start(scenario).await.unwrap();
        let said = |texts: &[&str]| {
            let history = texts.iter().map(|t| user_message(wire, t)).collect();
            let server = &server;
            async move { fold(wire, &stream(server, wire, history).await).text }
        };
        // Interleaved, as an outer agent waiting on a session it started would be.
        assert_eq!(said(&["use the tool"]).await, "outer one", "{wire}");
        assert_eq!(said(&["please: NESTED-TASK"]).await, "nested one", "{wire}");
        assert_eq!(
            said(&["use the tool", "go on"]).await,
            "outer two",
            "{wire}"
        );
        assert_eq!(
            said(&["please: NESTED-TASK", "more"]).await,
            "done",
            "{wire}"
        );
        assert_eq!(server.turns_consumed(), 2, "{wire}");
        assert_eq!(server.script_turns_consumed(0), 1, "{wire}");
        let served: Vec<Served> = server.requests().into_iter().map(|r| r.served).collect();
        assert_eq!(
            served,
            [
                Served::Turn {
                    index: 0,
                    attempt: 0
                },
                Served::Turn {
                    index: 2,
                    attempt: 0
                },
                Served::Turn {
                    index: 1,
                    attempt: 0
                },
                Served::Exhausted,
            ],
            "{wire}: script turns are numbered after the main ones"
        );
    }
}

#[tokio::test]
async fn side_requests_get_the_side_reply_and_consume_nothing() {
    let mut scenario = Scenario::new(vec![Turn::text("scripted")]);
    scenario.side_requests = SideRequests {
        when_no_tools: true,
        models: vec!["claude-haiku".into()],
        reply: "title".into(),
    };
    let server = FakeModelServer::start(scenario).await.unwrap();
    let (path, mut body) = request_for(Wire::Anthropic, vec![user_message(Wire::Anthropic, "x")]);
    let no_tools = {
        let mut b = body.clone();
        b.as_object_mut().unwrap().remove("tools");
        b
    };
    let reply = fold(
        Wire::Anthropic,
        &super::support::parse_sse(&post(&server, &path, &no_tools).await.body),
    );
    assert_eq!(reply.text, "title");
    body["model"] = json!("claude-haiku");
    let reply = fold(
        Wire::Anthropic,
        &super::support::parse_sse(&post(&server, &path, &body).await.body),
    );
    assert_eq!(reply.text, "title");
    assert_eq!(server.turns_consumed(), 0);
    let reply = fold(
        Wire::Anthropic,
        &stream(
            &server,
            Wire::Anthropic,
            vec![user_message(Wire::Anthropic, "x")],
        )
        .await,
    );
    assert_eq!(reply.text, "scripted");
    let counted = post(
        &server,
        "/v1/messages/count_tokens",
        &json!({ "messages": [] }),
    )
    .await;
    let counted: Value = serde_json::from_str(&counted.body).unwrap();
    assert!(counted["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn exhaustion_answers_done_or_a_non_retryable_error() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("only")]))
        .await
        .unwrap();
    for want in ["only", "done", "done"] {
        assert_eq!(
            fold(
                Wire::OpenAiChat,
                &stream(&server, Wire::OpenAiChat, vec![]).await
            )
            .text,
            want
        );
    }
    assert_eq!(server.requests()[2].served, Served::Exhausted);
    let mut scenario = Scenario::new(vec![]);
    scenario.on_exhausted = OnExhausted::Error;
    let server = FakeModelServer::start(scenario).await.unwrap();
    let (path, body) = request_for(Wire::Anthropic, vec![]);
    let reply = post(&server, &path, &body).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("invalid_request_error") && reply.body.contains("exhausted"));
}

#[tokio::test]
async fn bad_requests_are_rejected_clearly() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("x")]))
        .await
        .unwrap();
    let url = format!("http://{}/v1/messages", server.addr());
    let client = intendant_netguard::http::client().unwrap();
    let reply = client.post(&url).body("not json").send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 400);
    assert!(reply.text().await.unwrap().contains("not a JSON object"));
    let reply = client
        .post(&url)
        .header("content-encoding", "zstd")
        .body("\u{28}\u{b5}")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 415);
    assert!(server.invariant_violations()[0].contains("content-encoding zstd"));
    assert_eq!(server.turns_consumed(), 0);
}

#[tokio::test]
async fn recordings_mask_credentials_when_shown() {
    let server = FakeModelServer::start(Scenario::new(vec![Turn::text("x")]))
        .await
        .unwrap();
    let (_, body) = request_for(Wire::Gemini, vec![]);
    let path = "/v1beta/models/g:streamGenerateContent?alt=sse&key=AIza-secret";
    post(&server, path, &body).await;
    let request = server.requests().remove(0);
    assert_eq!(
        request.header("x-api-key"),
        Some("sk-test-secret"),
        "raw access for assertions"
    );
    let shown = format!(
        "{request:?} {}",
        serde_json::to_string(&request.redacted()).unwrap()
    );
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("key=***") && shown.contains("alt=sse"));
}

//! The `intendant-fake-model` binary: port line, serving, recording with masked credentials,
//! exit status reflecting invariant violations, and clear errors.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_intendant-fake-model");

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn serves_prints_the_port_and_records_with_masked_keys() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("requests.jsonl");
    let mut child = Command::new(BIN)
        .args(["--scenario", &fixture("claude_bash.json"), "--record"])
        .arg(&record)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap();
    assert!(port > 0);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut human = String::new();
    stderr.read_line(&mut human).unwrap();
    assert!(human.contains(&format!("127.0.0.1:{port}")), "{human}");

    let reply = intendant_netguard::http::client()
        .unwrap()
        .post(format!("http://127.0.0.1:{port}/v1/messages"))
        .header("x-api-key", "sk-ant-very-secret")
        .json(&json!({ "model": "m", "stream": true, "max_tokens": 10,
            "tools": [{ "name": "Bash", "input_schema": { "type": "object" } }],
            "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(reply.contains("tool_use"));

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "no violations, exit 0: {exit:?}");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(!recorded.contains("very-secret"), "credentials are masked");
    let line: Value = serde_json::from_str(recorded.lines().next().unwrap()).unwrap();
    assert_eq!(
        line["served"],
        json!({ "kind": "turn", "index": 0, "attempt": 0 })
    );
    assert!(
        line["headers"]
            .to_string()
            .contains("\"x-api-key\",\"***\"")
    );
}

#[tokio::test]
async fn exits_nonzero_when_the_client_broke_an_invariant() {
    let mut child = Command::new(BIN)
        .args(["--scenario", &fixture("claude_bash.json")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap();
    let body = json!({ "model": "m", "stream": true, "max_tokens": 10,
        "tools": [{ "name": "Bash", "input_schema": { "type": "object" } }],
        "messages": [{ "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "toolu_never_issued", "content": "x" } ] }] });
    intendant_netguard::http::client()
        .unwrap()
        .post(format!("http://127.0.0.1:{port}/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("toolu_never_issued"), "{stderr}");
}

#[test]
fn a_bad_scenario_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(
        &path,
        r#"{ "turns": [ { "text": "x", "faults": [ { "type": "nope" } ] } ] }"#,
    )
    .unwrap();
    let output = Command::new(BIN)
        .arg("--scenario")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        output.stdout.is_empty(),
        "no port line for a server that never started"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown variant `nope`"), "{stderr}");
}

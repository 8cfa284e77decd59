//! `askHuman`: question file, answer file, token gating, cleanup.

use super::support::{Batch, eventually, run, tempdir};
use intendant_protocol::runtime::{AskHumanResult, HumanResponse};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes `content` as the answer file the way a controller must: temp file, then rename.
fn answer(dir: &Path, content: &[u8]) {
    let tmp = dir.join(".human_response.writing");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, dir.join("human_response")).unwrap();
}

/// Waits for the question file and returns its content.
fn await_question(dir: &Path) -> String {
    let q = dir.join("human_question");
    assert!(
        eventually(Duration::from_secs(20), || q.exists()),
        "no question posed"
    );
    std::fs::read_to_string(q).unwrap()
}

#[test]
fn answered_by_a_concurrent_writer() {
    let dir = tempdir();
    // A stale answer from an earlier question must not answer this one.
    answer(dir.path(), b"stale\n");
    let path: PathBuf = dir.path().to_path_buf();
    let human = std::thread::spawn(move || {
        let question = await_question(&path);
        answer(&path, b"Use port 8080\n");
        question
    });
    let r = run(
        json!([
            {"function":"askHuman","nonce":1,"question":"Which port?"},
            {"function":"execAsAgent","nonce":2,"command":"true"},
        ]),
        dir.path(),
    );
    assert_eq!(human.join().unwrap(), "Which port?\n");
    assert_eq!(r.data::<AskHumanResult>(0).answer, "Use port 8080");
    assert!(
        r.stderr.contains("Which port?"),
        "question echoed to stderr"
    );
    assert!(!dir.path().join("human_question").exists());
    assert!(!dir.path().join("human_response").exists());
    assert_eq!(r.envelopes.len(), 2);
}

#[test]
fn with_a_token_only_the_matching_answer_is_accepted() {
    let dir = tempdir();
    let token = "hr-token-51c2";
    let path: PathBuf = dir.path().to_path_buf();
    let human = std::thread::spawn(move || {
        await_question(&path);
        let response = path.join("human_response");
        for forged in [
            b"plain text answer".to_vec(),
            serde_json::to_vec(&HumanResponse {
                token: Some("guess".into()),
                answer: "forged".into(),
            })
            .unwrap(),
        ] {
            answer(&path, &forged);
            assert!(
                eventually(Duration::from_secs(10), || !response.exists()),
                "a wrong answer file must be discarded"
            );
        }
        let real = HumanResponse {
            token: Some(token.into()),
            answer: "the real one".into(),
        };
        answer(&path, &serde_json::to_vec(&real).unwrap());
    });
    let input = json!({
        "commands": [{"function":"askHuman","nonce":1,"question":"Proceed?"}],
        "human_response_token": token,
    });
    let r = Batch::new(&input, dir.path()).run();
    human.join().unwrap();
    assert_eq!(r.data::<AskHumanResult>(0).answer, "the real one");
    assert_eq!(
        r.stderr.matches("discarded an answer file").count(),
        2,
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains(token));
}

#[test]
fn missing_question_is_an_error_and_the_batch_goes_on() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"askHuman","nonce":1},{"function":"execAsAgent","nonce":2,"command":"true"}]),
        dir.path(),
    );
    assert_eq!(r.error(0), "missing `question`");
    assert_eq!(r.code(), 0);
    assert_eq!(r.envelopes.len(), 2);
}

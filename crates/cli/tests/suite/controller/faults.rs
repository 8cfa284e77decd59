//! Provider faults through the loop: a 429 then success, a 401 failing fast with the key named
//! and masked, a stream cut mid-response restarted (at most three times), and no key at all.

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{Ctl, DUMMY_KEY, assert_success, calls, done_turn, events_of, run_with_limit};

fn rate_limit_429_is_retried_then_succeeds(wire: Wire) {
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] =
        json!([{ "type": "http_status", "status": 429, "retry_after": 0, "times": 1 }]);
    let ctl = Ctl::new(wire, json!([first, done_turn("ok")]));
    let (out, events) = ctl.run_json("task", &[]);
    assert_success(&out);
    let requests = ctl.turn_requests();
    assert_eq!(requests.len(), 3, "one 429, then two clean turns");
    assert_eq!(events_of(&events, "done").len(), 1);
}

fn unauthorized_401_fails_fast_naming_the_masked_key(wire: Wire) {
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] = json!([{ "type": "http_status", "status": 401, "times": 1 }]);
    let ctl = Ctl::new(wire, json!([first, done_turn("ok")]));
    let (out, events) = ctl.run_json("task", &[]);
    assert_eq!(out.status.code(), Some(1), "a 401 is a failed run");
    assert_eq!(ctl.server.requests().len(), 1, "a 401 is never retried");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (_, key_env, _) = super::harness::wire_env(wire);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(
        stderr.contains(&format!("{key_env} (sk-…6789)")),
        "{stderr}"
    );
    let everything = format!("{stderr}{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        !everything.contains(DUMMY_KEY),
        "the key leaked: {everything}"
    );
    let errors = events_of(&events, "error");
    assert!(
        errors
            .iter()
            .any(|e| { e["message"].as_str().unwrap_or_default().contains(key_env) })
    );
    assert_eq!(events_of(&events, "session_ended")[0]["status"], "failed");
    // Nor is it anywhere in the session log.
    for entry in std::fs::read_dir(ctl.intendant_home().join("logs")).unwrap() {
        let dir = entry.unwrap().path();
        for file in ["session.jsonl", "session_meta.json", "conversation.jsonl"] {
            let text = super::harness::read(&dir.join(file));
            assert!(!text.contains(DUMMY_KEY), "the key leaked into {file}");
        }
    }
}

#[test]
fn rate_limit_429_then_success_openai_responses() {
    rate_limit_429_is_retried_then_succeeds(Wire::OpenAiResponses);
}

#[test]
fn rate_limit_429_then_success_openai_chat() {
    rate_limit_429_is_retried_then_succeeds(Wire::OpenAiChat);
}

#[test]
fn rate_limit_429_then_success_anthropic() {
    rate_limit_429_is_retried_then_succeeds(Wire::Anthropic);
}

#[test]
fn rate_limit_429_then_success_gemini() {
    rate_limit_429_is_retried_then_succeeds(Wire::Gemini);
}

#[test]
fn unauthorized_401_fails_fast_openai_responses() {
    unauthorized_401_fails_fast_naming_the_masked_key(Wire::OpenAiResponses);
}

#[test]
fn unauthorized_401_fails_fast_openai_chat() {
    unauthorized_401_fails_fast_naming_the_masked_key(Wire::OpenAiChat);
}

#[test]
fn unauthorized_401_fails_fast_anthropic() {
    unauthorized_401_fails_fast_naming_the_masked_key(Wire::Anthropic);
}

#[test]
fn unauthorized_401_fails_fast_gemini() {
    unauthorized_401_fails_fast_naming_the_masked_key(Wire::Gemini);
}

#[test]
fn a_stream_cut_mid_response_is_restarted() {
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] = json!([{ "type": "cut", "after_events": 2, "times": 2 }]);
    let ctl = Ctl::new(Wire::Gemini, json!([first, done_turn("ok")]));
    let (out, events) = ctl.run_json("task", &[]);
    assert_success(&out);
    assert_eq!(
        ctl.turn_requests().len(),
        4,
        "two cut attempts, then two clean turns"
    );
    assert_eq!(events_of(&events, "tool_call").len(), 2);
}

#[test]
fn a_stream_cut_four_times_fails_after_three_restarts() {
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] = json!([{ "type": "cut", "after_events": 2, "times": 4 }]);
    let ctl = Ctl::new(Wire::OpenAiChat, json!([first, done_turn("ok")]));
    let (out, events) = ctl.run_json("task", &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ctl.turn_requests().len(),
        4,
        "one attempt and three restarts, then the run fails"
    );
    assert!(events_of(&events, "tool_call").is_empty());
    assert_eq!(events_of(&events, "session_ended")[0]["status"], "failed");
}

#[test]
fn a_provider_over_https_is_trusted_through_ssl_cert_file_and_refused_without_it() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([done_turn("over tls")]));
    let port: u16 = ctl
        .server
        .base_url(Wire::OpenAiResponses)
        .trim_end_matches("/v1")
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let front = intendant_testkit::tls::Front::start(port).unwrap();
    let (_, _, url_env) = super::harness::wire_env(Wire::OpenAiResponses);
    let run = |authority: Option<&std::path::Path>| {
        let mut cmd = ctl.command(&["--json"]);
        cmd.env(url_env, format!("https://localhost:{}/v1", front.port()));
        if let Some(authority) = authority {
            cmd.env("SSL_CERT_FILE", authority);
        }
        run_with_limit({
            cmd.arg("task");
            cmd
        })
    };

    // A checkout cannot add a root: `.env` files are read for keys, not for trust.
    std::fs::write(
        ctl.project().join(".env"),
        format!(
            "SSL_CERT_FILE={}\n",
            intendant_testkit::tls::authority().display()
        ),
    )
    .unwrap();
    let out = run(None);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an untrusted certificate fails the run"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(
        ctl.server.requests().is_empty(),
        "nothing was sent before trust"
    );

    let out = run(Some(&intendant_testkit::tls::authority()));
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("over tls"));
    assert_eq!(ctl.turn_requests().len(), 1);
}

#[test]
fn no_key_is_a_configuration_error() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([done_turn("ok")]));
    let out = run_with_limit({
        let mut cmd = ctl.bare_command();
        cmd.arg("task");
        cmd
    });
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no API key found") && stderr.contains("OPENAI_API_KEY"),
        "{stderr}"
    );
}

/// Every file under `dir`, recursively, as text.
fn texts_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(texts_under(&path));
        } else {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            out.push((path, text));
        }
    }
    out
}

#[test]
fn a_key_the_server_echoes_never_leaves_the_controller_even_when_the_excerpt_cuts_it() {
    // No known prefix, and longer than the 512-character error excerpt leaves of it once the
    // pad has put the cut inside it.
    let key: String = (0..300)
        .map(|i| char::from(b"Qz7Kp2Wm9Rt4"[i % 12]))
        .collect();
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] = json!([{ "type": "echo_key", "status": 401, "pad": 440 }]);
    let ctl = Ctl::new(Wire::Anthropic, json!([first, done_turn("ok")]));
    let mut cmd = ctl.command(&["--json"]);
    cmd.env("ANTHROPIC_API_KEY", &key).arg("task");
    let out = run_with_limit(cmd);
    assert_eq!(out.status.code(), Some(1), "a 401 is a failed run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("[REDACTED]"),
        "the echo was masked: {stderr}"
    );
    let mut places = vec![
        ("stderr".into(), stderr),
        (
            "--json stdout".into(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ),
    ];
    places.extend(
        texts_under(&ctl.intendant_home())
            .into_iter()
            .map(|(path, text)| (path.display().to_string(), text)),
    );
    for (place, text) in places {
        for piece in (0..=key.len() - 8).map(|i| &key[i..i + 8]) {
            assert!(
                !text.contains(piece),
                "{piece} of the key leaked into {place}"
            );
        }
    }
}

/// Bytes of every file under `dir`, recursively.
fn bytes_under(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            if path.is_dir() {
                bytes_under(&path)
            } else {
                std::fs::metadata(&path).unwrap().len()
            }
        })
        .sum()
}

/// A 64 MiB reply against caps of 1 MiB per reply and 256 KiB per call: the run fails with the
/// cap and its key named, and the session's files stay within a few times the cap.
fn a_flood_fails_at_its_cap_with_bounded_session_files(wire: Wire, what: &str, key: &str) {
    let mut first = calls(&[("exec_command", json!({ "command": "echo ok" }))]);
    first["faults"] = json!([{ "type": "flood", "what": what, "bytes": 64 * 1024 * 1024 }]);
    let ctl = Ctl::new(wire, json!([first, done_turn("ok")]));
    std::fs::write(
        ctl.project().join("intendant.toml"),
        "[limits]\nmax_reply_bytes = 1048576\nmax_tool_call_bytes = 262144\n",
    )
    .unwrap();
    let (out, events) = ctl.run_json("task", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(key), "the cap's key is named: {stderr}");
    let errors = events_of(&events, "error");
    assert!(
        errors
            .iter()
            .any(|e| e["message"].as_str().unwrap_or_default().contains(key)),
        "{errors:?}"
    );
    assert_eq!(events_of(&events, "session_ended")[0]["status"], "failed");
    assert_eq!(ctl.turn_requests().len(), 1, "a cap is not retried");
    let written = bytes_under(&ctl.intendant_home());
    assert!(
        written < 4 * 1024 * 1024,
        "{written} bytes under INTENDANT_HOME"
    );
}

#[test]
fn an_endless_text_reply_fails_at_the_reply_cap() {
    a_flood_fails_at_its_cap_with_bounded_session_files(
        Wire::OpenAiResponses,
        "text",
        "max_reply_bytes",
    );
}

#[test]
fn a_huge_tool_call_fails_at_the_tool_call_cap() {
    a_flood_fails_at_its_cap_with_bounded_session_files(
        Wire::Anthropic,
        "tool_arguments",
        "max_tool_call_bytes",
    );
}

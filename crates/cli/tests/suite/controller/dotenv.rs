//! Keys and endpoints found in `.env` files: the launch directory's ancestors and the global
//! `~/.config/intendant/.env`; the environment wins; keys never reach the runtime.

use intendant_testkit::Wire;
use serde_json::json;

use super::harness::{
    Ctl, assert_success, calls, done_turn, outputs_of, parse_events, run_with_limit,
};

#[test]
fn keys_come_from_dotenv_files_and_never_reach_commands() {
    let ctl = Ctl::new(
        Wire::Anthropic,
        json!([
            calls(&[("exec_command", json!({ "command": "env" }))]),
            done_turn("ok")
        ]),
    );
    // The endpoint in the project's parent directory, the key in the global file, a decoy key
    // for another provider nowhere: selection must pick Anthropic by its key alone.
    std::fs::write(
        ctl.root.path().join(".env"),
        format!(
            "ANTHROPIC_BASE_URL={}\n",
            ctl.server.base_url(Wire::Anthropic)
        ),
    )
    .unwrap();
    let global = ctl.home().join(".config/intendant");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::write(
        global.join(".env"),
        "export ANTHROPIC_API_KEY=\"sk-ant-from-dotenv-9999\"\n",
    )
    .unwrap();
    // A project endpoint counts once a human trusted the file.
    let trusted = ctl.bare_command().arg("trust").output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    let mut cmd = ctl.bare_command();
    cmd.args([
        "--json",
        "--no-sandbox",
        "--autonomy",
        "full",
        "--model",
        "fake-model",
        "list the environment",
    ]);
    let out = run_with_limit(cmd);
    assert_success(&out);
    let requests = ctl.turn_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("x-api-key"),
        Some("sk-ant-from-dotenv-9999")
    );
    let events = parse_events(&out.stdout);
    let env_dump = outputs_of(&events, "exec_command").join("\n");
    assert!(env_dump.contains("HOME="), "{env_dump}");
    assert!(
        !env_dump.contains("sk-ant-from-dotenv"),
        "the key reached a command: {env_dump}"
    );
    assert!(!env_dump.contains("ANTHROPIC_API_KEY"), "{env_dump}");
}

#[test]
fn the_environment_wins_over_dotenv() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([done_turn("ok")]));
    std::fs::write(
        ctl.project().join(".env"),
        "OPENAI_API_KEY=sk-from-file-1111\nOPENAI_BASE_URL=http://127.0.0.1:9/v1\n",
    )
    .unwrap();
    let mut cmd = ctl.command(&["--json", "task"]);
    cmd.env("OPENAI_API_KEY", "sk-from-env-2222");
    let out = run_with_limit(cmd);
    assert_success(&out);
    let requests = ctl.turn_requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-from-env-2222")
    );
}

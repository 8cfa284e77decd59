//! Ordinary work still runs inside the sandbox, both layers on: a Rust crate builds and tests
//! with cargo, an npm script runs, pip installs a local wheel into a virtualenv, and a test
//! suite reads the project's `.env`. Every wall added to the sandbox must leave these working.

use std::path::Path;

use intendant_testkit::Wire;
use serde_json::json;

use super::controller::harness::{
    Ctl, assert_success, calls, done_turn, outputs_of, parse_events, run_with_limit,
};

/// A pure-Python wheel of one module, `mini` (`X = 42`), written with Python's `zipfile` so
/// nothing is built or fetched.
fn write_wheel(path: &Path) {
    let script = r#"
import sys, zipfile
files = {
    "mini/__init__.py": "X = 42\n",
    "mini-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: mini\nVersion: 0.1\n",
    "mini-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
files["mini-0.1.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, "mini-0.1.dist-info/RECORD"])
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
"#;
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .status()
        .expect("python3 runs");
    assert!(status.success());
}

#[test]
fn cargo_npm_pip_and_a_dotenv_reading_suite_work_inside_the_sandbox() {
    let commands = [
        "cargo new --vcs none demo -q && cd demo && cargo build --offline -q && cargo test --offline -q 2>&1 | grep 'test result: ok' && echo CARGO-OK",
        "mkdir js && cd js && npm init -y >/dev/null && npm pkg set 'scripts.test=node -e \"console.log(6*7)\"' && npm test && echo NPM-OK",
        "python3 -m venv .venv && .venv/bin/pip install -q --no-index --no-deps ./mini-0.1-py3-none-any.whl && .venv/bin/python -c 'import mini; print(\"PIP-OK\", mini.X)'",
        "python3 -c 'import sys; env = dict(l.strip().split(\"=\", 1) for l in open(\".env\") if \"=\" in l); sys.exit(0 if env.get(\"APP_PORT\") == \"8080\" else 1)' && echo DOTENV-OK",
    ];
    let turn: Vec<(&str, serde_json::Value)> = commands
        .iter()
        .map(|c| {
            (
                "exec_command",
                json!({ "command": c, "timeout_ms": 240_000 }),
            )
        })
        .collect();
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([calls(&turn), done_turn("built")]),
    );
    write_wheel(&ctl.project().join("mini-0.1-py3-none-any.whl"));
    std::fs::write(ctl.project().join(".env"), "APP_PORT=8080\n").unwrap();
    // The toolchain the test runs with: rustup's proxies find it through RUSTUP_HOME.
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".rustup").into()))
        .expect("a rustup home");
    let mut cmd = ctl.command(&["--sandbox", "--json"]);
    cmd.env("RUSTUP_HOME", rustup_home)
        .arg("build, run and test");
    let out = run_with_limit(cmd);
    assert_success(&out);
    let events = parse_events(&out.stdout);
    let outputs = outputs_of(&events, "exec_command");
    assert_eq!(outputs.len(), commands.len(), "{outputs:#?}");
    for (output, marker) in outputs
        .iter()
        .zip(["CARGO-OK", "NPM-OK", "PIP-OK 42", "DOTENV-OK"])
    {
        assert!(
            output.contains(marker) && output.contains(r#""exit_code":0"#),
            "{marker} missing:\n{output}"
        );
    }
    assert!(
        outputs[1].contains("42"),
        "the npm script ran: {}",
        outputs[1]
    );
}

/// A command may run longer than tokio's blocking pool keeps an idle thread (10 s): the
/// runtime dies with the thread that started it, which therefore must outlive the batch. When
/// the runtime was started from the blocking pool, this batch ended at 10 s with no result.
#[test]
fn a_batch_outlives_ten_idle_seconds_of_the_thread_pool() {
    let turn = [(
        "exec_command",
        json!({ "command": "sleep 12; echo LIVED", "timeout_ms": 60_000 }),
    )];
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([calls(&turn), done_turn("slept")]),
    );
    let mut cmd = ctl.command(&["--sandbox", "--json"]);
    cmd.arg("sleep a while");
    let out = run_with_limit(cmd);
    assert_success(&out);
    let outputs = outputs_of(&parse_events(&out.stdout), "exec_command");
    assert!(
        outputs.len() == 1
            && outputs[0].contains("LIVED")
            && outputs[0].contains(r#""exit_code":0"#),
        "{outputs:#?}"
    );
}

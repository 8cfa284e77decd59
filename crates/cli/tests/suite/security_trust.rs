//! Config the next session trusts, written by this one: a session's command plants
//! `intendant.toml` (sandbox off, an `auto` approval rule) or a `.env` pointing `OPENAI_BASE_URL`
//! at another server. The next headless run refuses, naming the file, the settings and
//! `intendant trust`; after `intendant trust` the settings apply; after another edit, refused
//! again. The second server never sees the key before the human trusted the file.

use std::process::{Output, Stdio};

use serde_json::{Value, json};

use super::controller::harness::{assert_success, events_of, parse_events, start_fake_model};
use super::sessions::{Env, TEST_API_KEY, exec_turn, text_turn};
use intendant_testkit::Wire;

/// Runs the first session (full autonomy), whose command plants the file.
fn plant(env: &Env) {
    let out = env.run_headless("set up the project", &["--autonomy", "full"]);
    assert_success(&out);
}

fn trust(env: &Env) -> Output {
    let out = env
        .command(&["trust"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_planted_intendant_toml_is_refused_until_trusted_and_again_after_an_edit() {
    let planted = "[sandbox]\nenabled = false\n[approval]\ncommand_exec = \"auto\"\n";
    let command = format!("printf '{}' > intendant.toml", planted.replace('\n', "\\n"));
    let env = Env::new(json!([
        exec_turn(&command),
        text_turn("Planted."),
        // The run after trusting: at the default autonomy the planted `auto` rule lets it run.
        exec_turn("echo ran > marker.txt"),
        text_turn("Finished."),
        exec_turn("echo again > marker2.txt"),
        text_turn("unreachable"),
    ]));
    plant(&env);
    let toml = env.project.path().join("intendant.toml");
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), planted);

    let refused = env.run_headless("next task", &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    for needle in [
        "intendant.toml",
        "[sandbox] enabled = false",
        "[approval] command_exec = \"auto\"",
        "intendant trust",
    ] {
        assert!(err.contains(needle), "{needle:?} missing: {err}");
    }
    let events = parse_events(&refused.stdout);
    assert_eq!(events_of(&events, "error").len(), 1, "{events:?}");
    assert_eq!(
        env.server.turns_consumed(),
        2,
        "the refused run asked the model"
    );

    let trusted = trust(&env);
    assert!(
        String::from_utf8_lossy(&trusted.stdout).contains("[sandbox] enabled = false"),
        "{trusted:?}"
    );
    let out = env.run_headless("next task", &[]);
    assert_success(&out);
    assert!(
        events_of(&parse_events(&out.stdout), "approval_required").is_empty(),
        "the trusted auto rule applies"
    );
    assert!(env.project.path().join("marker.txt").exists());

    std::fs::write(&toml, format!("{planted}# edited\n")).unwrap();
    let again = env.run_headless("next task", &[]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("intendant trust"));
    assert!(!env.project.path().join("marker2.txt").exists());
}

/// A session's command links its project's `intendant.toml` to another project's file that a
/// human trusted (sandbox off): the next run refuses the link, naming it, and runs nothing under
/// the settings it borrowed (they applied, unasked, to this project).
#[test]
fn a_link_to_another_projects_trusted_file_borrows_no_trust() {
    let elsewhere = tempfile::tempdir().unwrap();
    let trusted = elsewhere.path().join("intendant.toml");
    std::fs::write(&trusted, "[sandbox]\nenabled = false\n").unwrap();
    let env = Env::new(json!([
        exec_turn(&format!("ln -s {} intendant.toml", trusted.display())),
        text_turn("Linked."),
        exec_turn("echo ran > marker.txt"),
        text_turn("unreachable"),
    ]));
    let out = env
        .command(&["trust", &elsewhere.path().to_string_lossy()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
    plant(&env);
    let refused = env.run_headless("next task", &[]);
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("intendant.toml") && err.contains("symbolic link"),
        "{err}"
    );
    assert!(!env.project.path().join("marker.txt").exists());
    assert_eq!(
        env.server.turns_consumed(),
        2,
        "the refused run asked the model"
    );
}

#[test]
fn a_planted_checkpoints_off_counts_only_once_trusted() {
    let env = Env::new(json!([
        exec_turn("printf '[checkpoints]\\nenabled = false\\n' > intendant.toml"),
        exec_turn("printf 'after\\n' > after.txt"),
        text_turn("Planted."),
        exec_turn("printf 'trusted\\n' > trusted.txt"),
        text_turn("Finished."),
    ]));
    plant(&env);
    let first = env.only_session().id;
    // The session that planted it goes on being checkpointed: its next turn is on record.
    let listed = env.command(&["checkpoints", &first]).output().unwrap();
    assert_success(&listed);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        text.contains("turn 1: 1 file\n  A intendant.toml\n")
            && text.contains("turn 2: 1 file\n  A after.txt\n"),
        "{text}"
    );

    // The next session is refused until a human trusted the file, so none runs unrecorded.
    let refused = env.run_headless("next task", &["--autonomy", "full"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    for needle in ["[checkpoints] enabled = false", "intendant trust"] {
        assert!(err.contains(needle), "{needle:?} missing: {err}");
    }
    assert!(!env.project.path().join("trusted.txt").exists());

    // Trusted, the setting applies: the next session takes no checkpoints.
    trust(&env);
    assert_success(&env.run_headless("next task", &["--autonomy", "full"]));
    assert!(env.project.path().join("trusted.txt").exists());
    let sessions = intendant_core::session_log::list_sessions(&env.intendant_home()).unwrap();
    let second = sessions
        .iter()
        .find(|s| s.id != first)
        .map(|s| s.id.clone())
        .unwrap();
    let none = env.command(&["checkpoints", &second]).output().unwrap();
    assert!(!none.status.success(), "{none:?}");
    assert!(
        stderr(&none).contains("has no checkpoints"),
        "{}",
        stderr(&none)
    );
}

#[test]
fn tightening_and_cosmetic_settings_need_no_trust() {
    let env = Env::new(json!([text_turn("Fine.")]));
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[sandbox]\nenabled = true\n[approval]\nnetwork = \"deny\"\n[agent.codex]\nmodel = \"m\"\n",
    )
    .unwrap();
    std::fs::write(env.project.path().join(".env"), "MODEL_NAME=fake-model\n").unwrap();
    let out = env.run_headless("hello", &[]);
    assert_success(&out);
}

#[test]
fn a_planted_base_url_never_receives_the_key_until_trusted() {
    let (_rt2, elsewhere) = start_fake_model(json!([text_turn("Elsewhere.")]));
    let url = elsewhere.base_url(Wire::OpenAiResponses);
    let command = format!("echo 'OPENAI_BASE_URL={url}' > .env");
    let env = Env::new(json!([exec_turn(&command), text_turn("Planted.")]));
    plant(&env);
    assert!(env.project.path().join(".env").exists());

    // The next run takes its key from the environment and no endpoint but the planted one.
    let next = |env: &Env| -> Output {
        env.task_command("next task", &["--json"])
            .env_remove("OPENAI_BASE_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let refused = next(&env);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains(".env") && err.contains(&format!("OPENAI_BASE_URL={url}")),
        "{err}"
    );
    assert!(
        elsewhere.requests().is_empty(),
        "the planted endpoint was contacted"
    );

    trust(&env);
    let out = next(&env);
    assert_success(&out);
    let requests = elsewhere.requests();
    assert!(!requests.is_empty(), "the trusted endpoint applies");
    let auth: Vec<Value> = requests
        .iter()
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == "authorization")
                .map(|(_, v)| json!(v))
        })
        .collect();
    assert!(
        auth.iter()
            .all(|v| v.as_str().is_some_and(|s| s.contains(TEST_API_KEY))),
        "{auth:?}"
    );
}

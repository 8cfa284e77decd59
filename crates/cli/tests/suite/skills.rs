//! Agent Skills through the binary against the fake model: the catalog in the request the
//! model receives, `invoke_skill` answered with the instructions and the file list, each kind
//! of bad skill a warning event (never a failed session), `intendant skills list|show`, and the
//! same in a daemon session.

use std::path::Path;

use intendant_testkit::Wire;
use serde_json::{Value, json};

use super::controller::harness::{
    Ctl, assert_success, body_text, calls, done_turn, events_of, outputs_of, run_with_limit,
};
use super::daemon::World;
use super::sessions::tool_outputs;

/// Writes `folder/SKILL.md` under `dir` with `name`, `description` and `body`.
fn write_skill(dir: &Path, folder: &str, name: &str, description: &str, body: &str) {
    let path = dir.join(folder);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}"),
    )
    .unwrap();
}

/// A project with a good skill (and a script beside it), a user skill, a user skill the
/// project's shadows, and one of each bad kind; `outside` is a directory outside the project.
fn plant_skills(project: &Path, home: &Path, outside: &Path) {
    let skills = project.join(".intendant/skills");
    write_skill(
        &skills,
        "lint",
        "lint",
        "run the project's linters before committing",
        "Run scripts/check.sh and fix what it reports.\n",
    );
    std::fs::create_dir_all(skills.join("lint/scripts")).unwrap();
    std::fs::write(skills.join("lint/scripts/check.sh"), "#!/bin/sh\n").unwrap();
    let user = home.join(".config/intendant/skills");
    write_skill(
        &user,
        "triage",
        "triage",
        "sort new issues by area",
        "Label them.\n",
    );
    write_skill(&user, "lint", "lint", "the user's lint", "USER LINT\n");
    // Bad input, each a warning.
    std::fs::create_dir_all(skills.join("bare")).unwrap();
    std::fs::write(skills.join("bare/SKILL.md"), "# Instructions only\n").unwrap();
    let huge = "y".repeat(10 * 1024 * 1024);
    write_skill(&skills, "huge", "huge", "too big", &huge);
    write_skill(
        &project.join(".agents/skills"),
        "lint-again",
        "lint",
        "a clash",
        "CLASH\n",
    );
    write_skill(outside, "leak", "leak", "outside the project", "LEAKED\n");
    std::fs::create_dir_all(project.join(".intendant")).unwrap();
    std::os::unix::fs::symlink(outside.join("leak"), project.join(".agents/skills/linked"))
        .unwrap();
}

fn warnings(events: &[Value]) -> String {
    events_of(events, "warning")
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_model_sees_the_catalog_and_invoke_skill_returns_the_instructions() {
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            calls(&[
                ("invoke_skill", json!({ "name": "lint" })),
                ("invoke_skill", json!({ "name": "deploy" }))
            ]),
            done_turn("ok")
        ]),
    );
    let outside = tempfile::tempdir().unwrap();
    plant_skills(&ctl.project(), &ctl.home(), outside.path());
    let (out, events) = ctl.run_json("lint the project", &[]);
    assert_success(&out);

    let first = body_text(&ctl.turn_requests()[0]);
    assert!(
        first.contains("- lint: run the project's linters before committing"),
        "{first}"
    );
    assert!(
        first.contains("- triage: sort new issues by area"),
        "{first}"
    );
    assert!(first.contains("\"name\":\"invoke_skill\""), "{first}");
    for kept_out in [
        "Run scripts/check.sh",
        "the user's lint",
        "LEAKED",
        "a clash",
    ] {
        assert!(!first.contains(kept_out), "{kept_out} reached the model");
    }

    let outputs = outputs_of(&events, "invoke_skill");
    assert_eq!(outputs.len(), 2, "{events:#?}");
    assert!(
        outputs[0].contains("Run scripts/check.sh and fix what it reports."),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[0].contains("\n- scripts/check.sh"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].contains("no skill \"deploy\"; the skills are: lint, triage"),
        "{}",
        outputs[1]
    );
    let second = body_text(&ctl.turn_requests()[1]);
    assert!(second.contains("Run scripts/check.sh and fix"), "{second}");
    let calls: Vec<&Value> = events_of(&events, "tool_call")
        .into_iter()
        .filter(|e| e["name"] == "invoke_skill")
        .collect();
    assert_eq!(calls[0]["arguments"]["name"], "lint");

    let warned = warnings(&events);
    for expected in [
        "bare/SKILL.md left out: it has no front matter",
        "huge/SKILL.md left out: it is larger than 128 KiB",
        "skill name clash: lint",
        "linked/SKILL.md left out: it leads outside the project",
    ] {
        assert!(warned.contains(expected), "{expected}:\n{warned}");
    }
    let about_skills = events_of(&events, "warning")
        .into_iter()
        .filter(|e| e["message"].as_str().unwrap_or_default().contains("skill"))
        .count();
    assert_eq!(about_skills, 4, "{warned}");
}

#[test]
fn a_skills_folder_linked_out_of_the_project_is_a_warning_not_a_failure() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([done_turn("ok")]));
    let outside = tempfile::tempdir().unwrap();
    write_skill(outside.path(), "leak", "leak", "outside", "LEAKED\n");
    std::fs::create_dir_all(ctl.project().join(".intendant")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ctl.project().join(".intendant/skills")).unwrap();
    let (out, events) = ctl.run_json("task", &[]);
    assert_success(&out);
    let warned = warnings(&events);
    assert!(
        warned.contains(".intendant/skills leads outside the project"),
        "{warned}"
    );
    let first = body_text(&ctl.turn_requests()[0]);
    assert!(!first.contains("leak"), "{first}");
    // Without skills there is no catalog and no invoke_skill tool.
    assert!(!first.contains("invoke_skill"), "{first}");
    assert!(!first.contains("# Skills"), "{first}");
}

#[test]
fn skills_list_and_show_say_what_a_session_would_offer() {
    let ctl = Ctl::new(Wire::OpenAiResponses, json!([]));
    let outside = tempfile::tempdir().unwrap();
    plant_skills(&ctl.project(), &ctl.home(), outside.path());
    let list = run_with_limit({
        let mut cmd = ctl.bare_command();
        cmd.args(["skills", "list"]);
        cmd
    });
    assert_success(&list);
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(
        stdout.contains("lint (project): run the project's linters before committing"),
        "{stdout}"
    );
    assert!(
        stdout.contains("triage (user): sort new issues by area"),
        "{stdout}"
    );
    assert!(
        stdout.contains("lint (user, shadowed by the project's)"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(
        stderr.contains("warning: skill name clash: lint"),
        "{stderr}"
    );

    let show = run_with_limit({
        let mut cmd = ctl.bare_command();
        cmd.args(["skills", "show", "lint"]);
        cmd
    });
    assert_success(&show);
    let stdout = String::from_utf8_lossy(&show.stdout);
    assert!(
        stdout.starts_with("Skill lint (project skill, folder "),
        "{stdout}"
    );
    assert!(stdout.contains("Run scripts/check.sh"), "{stdout}");
    assert!(stdout.contains("- scripts/check.sh"), "{stdout}");

    let missing = run_with_limit({
        let mut cmd = ctl.bare_command();
        cmd.args(["skills", "show", "nope"]);
        cmd
    });
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no skill \"nope\""),
        "{missing:?}"
    );
}

#[test]
fn a_daemon_session_lists_and_invokes_skills_and_warns_of_bad_ones() {
    let mut world = World::new(json!([
        calls(&[("invoke_skill", json!({ "name": "lint" }))]),
        done_turn("ok")
    ]));
    let outside = tempfile::tempdir().unwrap();
    plant_skills(&world.project(), &world.user_home(), outside.path());
    world.serve();
    let id = world.start("lint the project", &[]);
    world.wait_status(&id, "idle");
    let bodies = world.turn_bodies();
    assert_eq!(bodies.len(), 2);
    let first = bodies[0].to_string();
    assert!(
        first.contains("- lint: run the project's linters"),
        "{first}"
    );
    assert!(
        first.contains("- triage: sort new issues by area"),
        "{first}"
    );
    assert!(first.contains("\"name\":\"invoke_skill\""), "{first}");
    let outputs = tool_outputs(&bodies[1]);
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("Run scripts/check.sh and fix")),
        "{outputs:?}"
    );
    // The listing names the skills the session invoked (the dashboard shows them).
    assert_eq!(world.session(&id)["skills"], json!(["lint"]));
    // An idle session's attach would follow it live: stop it, then replay its record.
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
    let events: Vec<Value> = world
        .replay(&id)
        .into_iter()
        .map(|envelope| envelope["event"].clone())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_call" && e["name"] == "invoke_skill"),
        "{events:#?}"
    );
    let warned = warnings(&events);
    assert!(warned.contains("huge/SKILL.md left out"), "{warned}");
    assert!(warned.contains("it leads outside the project"), "{warned}");
    assert_eq!(world.stop_daemon(), 0);
    // A restarted daemon still lists what the session invoked (from its record).
    world.serve();
    assert_eq!(world.session(&id)["skills"], json!(["lint"]));
    assert_eq!(world.stop_daemon(), 0);
}

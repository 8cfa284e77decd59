use super::*;

fn write_skill(dir: &Path, folder: &str, text: &str) -> PathBuf {
    let path = dir.join(folder);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(path.join(SKILL_FILE), text).unwrap();
    path
}

fn skill_text(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
}

#[test]
fn the_strict_subset_reads_name_and_description_and_ignores_other_keys() {
    let text = "---\n# a comment\nname: release-notes\ndescription: \"Write notes: the \\\"why\\\"\"\nlicense: MIT\nmetadata:\n  author: someone\n  version: '1'\nallowed-tools: Bash(git log:*)\n---\n# Steps\n1. read git log\n";
    let (front, body) = parse_front_matter(text).unwrap();
    assert_eq!(front.name, "release-notes");
    assert_eq!(front.description, "Write notes: the \"why\"");
    assert_eq!(body, "# Steps\n1. read git log\n");
    let single = "---\nname: a\ndescription: 'it''s short' # trailing comment\n---\n";
    assert_eq!(
        parse_front_matter(single).unwrap().0.description,
        "it's short"
    );
    let plain = "\u{feff}---\r\nname: a\r\ndescription: plain # comment\r\n---\r\nbody";
    let (front, body) = parse_front_matter(plain).unwrap();
    assert_eq!((front.description.as_str(), body), ("plain", "body"));
}

#[test]
fn bad_front_matter_is_named_precisely() {
    use FrontMatterError as E;
    let cases: [(&str, E); 10] = [
        ("# Title\nno front matter", E::Missing),
        ("", E::Missing),
        ("---\nname: a\ndescription: b\n", E::Unclosed),
        (
            "---\nname a\n---\n",
            E::NotKeyValue {
                line: 2,
                text: "name a".into(),
            },
        ),
        (
            "---\nname: a\nname: b\n---\n",
            E::Duplicate {
                line: 3,
                key: "name".into(),
            },
        ),
        (
            "---\nname: a\ndescription: \"open\n---\n",
            E::BadQuote {
                line: 3,
                key: "description".into(),
            },
        ),
        (
            "---\nname: a\ndescription: |\n  many lines\n---\n",
            E::NotOneLine {
                line: 3,
                key: "description".into(),
            },
        ),
        ("---\ndescription: b\n---\n", E::MissingKey("name")),
        (
            "---\nname: a\ndescription:\n---\n",
            E::MissingKey("description"),
        ),
        (
            "---\nname: Bad_Name\ndescription: b\n---\n",
            E::BadName("Bad_Name".into()),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_front_matter(text).unwrap_err(), expected, "{text:?}");
    }
    for name in ["-a", "a-", "a--b", &"a".repeat(65)] {
        let text = skill_text(name, "d", "");
        assert!(
            matches!(parse_front_matter(&text), Err(E::BadName(_))),
            "{name}"
        );
    }
    let long = skill_text("a", &"d".repeat(1025), "");
    assert_eq!(parse_front_matter(&long).unwrap_err(), E::LongDescription);
}

#[test]
fn project_skills_shadow_user_skills_and_a_clash_keeps_the_first() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let p = project.path();
    write_skill(
        &p.join(".intendant/skills"),
        "deploy",
        &skill_text("deploy", "project deploy", "run make deploy"),
    );
    write_skill(
        &p.join(".agents/skills"),
        "deploy-copy",
        &skill_text("deploy", "shared deploy", "other"),
    );
    write_skill(
        &config.path().join("skills"),
        "deploy",
        &skill_text("deploy", "user deploy", "user"),
    );
    write_skill(
        &config.path().join("skills"),
        "triage",
        &skill_text("triage", "user triage", "sort issues"),
    );
    let set = SkillSet::discover(p, Some(config.path()));
    let names: Vec<(&str, SkillSource)> = set
        .skills()
        .iter()
        .map(|s| (s.name.as_str(), s.source))
        .collect();
    assert_eq!(
        names,
        [
            ("deploy", SkillSource::Project),
            ("triage", SkillSource::User)
        ]
    );
    assert_eq!(set.get("deploy").unwrap().description, "project deploy");
    assert_eq!(set.shadowed().len(), 1);
    assert_eq!(set.warnings().len(), 1, "{:?}", set.warnings());
    assert!(set.warnings()[0].contains("skill name clash: deploy"));
    assert!(set.warnings()[0].contains("deploy-copy"));
}

#[test]
fn bad_skills_are_left_out_with_a_warning_and_the_rest_load() {
    let project = tempfile::tempdir().unwrap();
    let skills = project.path().join(".intendant/skills");
    write_skill(&skills, "good", &skill_text("good", "fine", "do it"));
    write_skill(
        &skills,
        "bare",
        "# Just instructions\nno front matter here\n",
    );
    let huge = write_skill(&skills, "huge", "");
    let body = "x".repeat(10 * 1024 * 1024);
    std::fs::write(huge.join(SKILL_FILE), skill_text("huge", "big", &body)).unwrap();
    std::fs::create_dir_all(skills.join("not-a-skill")).unwrap();
    let set = SkillSet::discover(project.path(), None);
    assert_eq!(set.skills().len(), 1);
    assert_eq!(set.skills()[0].name, "good");
    let warnings = set.warnings().join("\n");
    assert!(
        warnings.contains("bare/SKILL.md left out: it has no front matter"),
        "{warnings}"
    );
    assert!(
        warnings.contains("huge/SKILL.md left out: it is larger than 128 KiB"),
        "{warnings}"
    );
    assert_eq!(set.warnings().len(), 2, "{warnings}");
}

#[test]
fn skills_reached_through_a_link_out_of_the_project_are_refused() {
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write_skill(
        outside.path(),
        "leak",
        &skill_text("leak", "outside", "secret"),
    );
    std::fs::create_dir_all(project.path().join(".intendant")).unwrap();
    std::os::unix::fs::symlink(outside.path(), project.path().join(".intendant/skills")).unwrap();
    // One level down: a skill folder inside the project whose SKILL.md links out.
    let agents = project.path().join(".agents/skills/sneaky");
    std::fs::create_dir_all(&agents).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("leak").join(SKILL_FILE),
        agents.join(SKILL_FILE),
    )
    .unwrap();
    let set = SkillSet::discover(project.path(), None);
    assert!(set.is_empty(), "{:?}", set.skills());
    let warnings = set.warnings().join("\n");
    assert!(
        warnings.contains(".intendant/skills leads outside the project"),
        "{warnings}"
    );
    assert!(
        warnings.contains("sneaky/SKILL.md left out: it leads outside the project"),
        "{warnings}"
    );
    // A link that stays inside the project is followed.
    std::fs::remove_file(project.path().join(".intendant/skills")).unwrap();
    write_skill(
        &project.path().join("docs/skills"),
        "inside",
        &skill_text("inside", "in the project", "ok"),
    );
    std::os::unix::fs::symlink(
        project.path().join("docs/skills"),
        project.path().join(".intendant/skills"),
    )
    .unwrap();
    let set = SkillSet::discover(project.path(), None);
    assert_eq!(set.skills().len(), 1);
    assert_eq!(set.skills()[0].name, "inside");
}

#[test]
fn invoking_returns_instructions_and_files_from_the_copy_read_at_start() {
    let project = tempfile::tempdir().unwrap();
    let dir = write_skill(
        &project.path().join(".intendant/skills"),
        "lint",
        &skill_text(
            "lint",
            "run the linters",
            "\nRun scripts/lint.sh, then fix.\n",
        ),
    );
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("scripts/lint.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.join("reference.md"), "ref").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.join("host")).unwrap();
    let set = SkillSet::discover(project.path(), None);
    let text = set.invoke("lint").unwrap();
    assert!(
        text.starts_with("Skill lint (project skill, folder "),
        "{text}"
    );
    assert!(
        text.contains("\n\nRun scripts/lint.sh, then fix.\n\nFiles"),
        "{text}"
    );
    assert!(
        text.ends_with("\n- host (link)\n- reference.md\n- scripts/lint.sh"),
        "{text}"
    );
    // Later changes on disk do not reach the session.
    std::fs::write(dir.join(SKILL_FILE), skill_text("lint", "x", "CHANGED")).unwrap();
    assert!(!set.invoke("lint").unwrap().contains("CHANGED"));
    let unknown = set.invoke("deploy").unwrap_err();
    assert_eq!(
        unknown,
        "invoke_skill: no skill \"deploy\"; the skills are: lint"
    );
    assert!(
        SkillSet::default()
            .invoke("lint")
            .unwrap_err()
            .contains("this session has no skills")
    );
}

#[test]
fn the_catalog_lists_names_and_descriptions_within_its_budget() {
    assert_eq!(SkillSet::default().catalog(), None);
    let project = tempfile::tempdir().unwrap();
    let skills = project.path().join(".intendant/skills");
    for i in 0..30 {
        let name = format!("skill-{i:02}");
        write_skill(
            &skills,
            &name,
            &skill_text(&name, &format!("does thing {i}"), "SECRET BODY"),
        );
    }
    let set = SkillSet::discover(project.path(), None);
    let full = set.catalog().unwrap();
    assert!(full.contains("\n- skill-00: does thing 0"), "{full}");
    assert!(full.contains("\n- skill-29: does thing 29"), "{full}");
    assert!(
        !full.contains("SECRET BODY"),
        "bodies stay out of the catalog"
    );
    let small = set.catalog_within(600).unwrap();
    assert!(small.len() <= 600, "{}", small.len());
    assert!(small.contains("- skill-00:"), "{small}");
    assert!(!small.contains("- skill-29:"), "{small}");
    assert!(
        small.contains("more skills are not listed here for space"),
        "{small}"
    );
}

#[test]
fn an_invoked_skill_is_named_only_by_an_invoke_skill_call() {
    use serde_json::json;
    assert_eq!(
        invoked_skill("invoke_skill", &json!({ "name": "lint" })),
        Some("lint")
    );
    assert_eq!(
        invoked_skill("exec_command", &json!({ "name": "lint" })),
        None
    );
    assert_eq!(invoked_skill("invoke_skill", &json!({ "name": " " })), None);
    assert_eq!(invoked_skill("invoke_skill", &json!({ "name": 3 })), None);
    assert_eq!(invoked_skill("invoke_skill", &json!("lint")), None);
    let long = "x".repeat(201);
    assert_eq!(
        invoked_skill("invoke_skill", &json!({ "name": long })),
        None
    );
}

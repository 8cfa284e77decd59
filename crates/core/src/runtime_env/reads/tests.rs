use super::*;
use std::fs;

/// A machine in a temporary directory: a home with credentials, other homes, a state root.
struct Machine {
    _dir: tempfile::TempDir,
    base: PathBuf,
    scope: ReadScope,
    project: PathBuf,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        let home = base.join("homes/me");
        for d in [".ssh", ".aws", ".config/intendant", ".config/gh", "proj"] {
            fs::create_dir_all(home.join(d)).unwrap();
        }
        fs::write(home.join(".netrc"), "machine x").unwrap();
        fs::write(home.join(".env"), "A=1").unwrap();
        fs::create_dir_all(base.join("homes/other")).unwrap();
        fs::create_dir_all(base.join("homes/brew/bin")).unwrap();
        fs::create_dir_all(base.join("state")).unwrap();
        let scope = ReadScope {
            home: Some(home.clone()),
            user: Some("me".into()),
            xdg_config_home: None,
            config_dir: Some(home.join(".config/intendant")),
            state_root: base.join("state"),
            homes_dir: base.join("homes"),
            root_home: base.join("roothome"),
            is_root: true,
            path_dirs: vec![base.join("homes/brew/bin")],
        };
        Machine {
            _dir: dir,
            project: home.join("proj"),
            base,
            scope,
        }
    }

    fn masks(
        &self,
        write_paths: &[PathBuf],
        deny: &[&str],
        allow: &[&str],
    ) -> (Vec<ReadMask>, Vec<String>) {
        let deny: Vec<PathBuf> = deny.iter().map(PathBuf::from).collect();
        let allow: Vec<PathBuf> = allow.iter().map(PathBuf::from).collect();
        let env_files = [self.project.join(".env")];
        read_masks(
            &self.scope,
            &ReadRequest {
                project_root: &self.project,
                write_paths,
                env_files: &env_files,
                deny_read: &deny,
                allow_read: &allow,
            },
        )
    }

    fn home(&self) -> PathBuf {
        self.scope.home.clone().unwrap()
    }
}

fn hidden(masks: &[ReadMask]) -> Vec<PathBuf> {
    masks
        .iter()
        .filter_map(|m| match m {
            ReadMask::Hide(p) => Some(p.clone()),
            ReadMask::Reveal(_) | ReadMask::ScrubEnv(_) => None,
        })
        .collect()
}

#[test]
fn the_default_set_hides_credentials_config_state_root_and_other_homes() {
    let m = Machine::new();
    let (masks, notes) = m.masks(std::slice::from_ref(&m.project), &[], &[]);
    let hidden = hidden(&masks);
    let home = m.home();
    for p in [
        home.join(".ssh"),
        home.join(".aws"),
        home.join(".netrc"),
        home.join(".config/gh"),
        home.join(".config/intendant"),
        m.base.join("state"),
        m.base.join("homes/other"),
    ] {
        assert!(hidden.contains(&p), "{p:?} not in {hidden:?}");
    }
    // Nonexistent ones are passed too (the runtime skips them with one stat).
    assert!(hidden.contains(&home.join(".kube")));
    assert!(!hidden.contains(&home), "the own home stays: {hidden:?}");
    assert!(
        !hidden.contains(&m.base.join("homes/brew")),
        "a home on PATH stays: {hidden:?}"
    );
    assert!(
        !hidden.contains(&m.base.join("roothome")),
        "root reads /root"
    );
    assert!(masks.contains(&ReadMask::ScrubEnv(m.project.join(".env"))));
    assert!(masks.contains(&ReadMask::ScrubEnv(home.join(".env"))));
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn deny_read_adds_allow_read_relaxes_but_never_the_state_root() {
    let m = Machine::new();
    let (masks, notes) = m.masks(
        std::slice::from_ref(&m.project),
        &["secrets", "~/private"],
        &[
            "~/.aws",
            "~/.ssh/config",
            &m.base.join("state/logs").display().to_string(),
        ],
    );
    let hidden = hidden(&masks);
    let home = m.home();
    assert!(hidden.contains(&m.project.join("secrets")), "{hidden:?}");
    assert!(hidden.contains(&home.join("private")), "{hidden:?}");
    assert!(!hidden.contains(&home.join(".aws")), "{hidden:?}");
    assert!(hidden.contains(&home.join(".ssh")), "{hidden:?}");
    assert!(masks.contains(&ReadMask::Reveal(home.join(".ssh/config"))));
    assert!(hidden.contains(&m.base.join("state")));
    assert!(
        !masks
            .iter()
            .any(|m| matches!(m, ReadMask::Reveal(p) if p.ends_with("logs"))),
        "{masks:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("state root stays hidden")),
        "{notes:?}"
    );
}

#[test]
fn a_write_root_is_never_hidden_and_a_hidden_project_is_said() {
    let m = Machine::new();
    let inside = m.home().join(".ssh/work");
    fs::create_dir_all(&inside).unwrap();
    let Machine { scope, .. } = &m;
    let env_files: [PathBuf; 0] = [];
    let (masks, notes) = read_masks(
        scope,
        &ReadRequest {
            project_root: &inside,
            write_paths: &[inside.clone(), m.home().join(".aws")],
            env_files: &env_files,
            deny_read: &[],
            allow_read: &[],
        },
    );
    let hidden = hidden(&masks);
    assert!(
        hidden.contains(&m.home().join(".ssh")),
        "the rest of it stays hidden"
    );
    assert!(!hidden.contains(&m.home().join(".aws")), "{hidden:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("only the project stays visible")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("is a sandbox write root")),
        "{notes:?}"
    );
}

#[test]
fn root_home_is_hidden_from_others_and_config_paths_expand() {
    let mut m = Machine::new();
    fs::create_dir_all(m.base.join("roothome")).unwrap();
    m.scope.is_root = false;
    let (masks, _) = m.masks(&[], &[], &[]);
    assert!(hidden(&masks).contains(&m.base.join("roothome")));
    let home = Path::new("/h");
    assert_eq!(
        config_path(Path::new("/p"), Some(home), Path::new("~/.x")),
        Path::new("/h/.x")
    );
    assert_eq!(
        config_path(Path::new("/p"), Some(home), Path::new("s")),
        Path::new("/p/s")
    );
    assert_eq!(
        config_path(Path::new("/p"), None, Path::new("/abs")),
        Path::new("/abs")
    );
}

/// A hidden place around the project hides none of the project's files; one inside it does,
/// as does a `.env` commands see scrubbed; a place shown again is not hidden.
#[test]
fn what_commands_cannot_read_is_named_by_real_path() {
    let project = PathBuf::from("/home/u/work");
    let unreadable = Unreadable::of_masks(
        vec![
            ReadMask::Hide("/home".into()),
            ReadMask::Reveal("/home/u".into()),
            ReadMask::Hide("/home/u/.ssh".into()),
            ReadMask::Hide("/home/u/work/.state".into()),
            ReadMask::ScrubEnv("/home/u/work/.env".into()),
        ],
        project.clone(),
    );
    assert!(!unreadable.covers(&project.join("AGENTS.md")));
    assert!(unreadable.covers(&project.join(".state/web-token")));
    assert!(unreadable.covers(&project.join(".env")));
    assert!(
        unreadable.covers(&project.join("sub/.env")),
        "a .env anywhere"
    );
    assert!(unreadable.covers(Path::new("/home/u/.ssh/id_rsa")));
    assert!(!unreadable.covers(Path::new("/home/u/notes")));
    assert!(unreadable.covers(Path::new("/home/other/notes")));
}

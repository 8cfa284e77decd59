//! Attacks on what a command may read, through the built binary: the state root (web token,
//! daemon lock and socket, other sessions' records, the database `intendant.db`), the credentials in the home directory
//! and the keys in `.env` files, hidden by the read masks of the second layer
//! (`INTENDANT_SANDBOX_READ_MASKS`). Run as root (CI) and as `nobody`, for whom the namespace
//! lives inside a user namespace.

use super::security_sandbox::{note, sh};
use super::support::{BIN, as_nobody, nobody, running_as_root, tempdir};
use intendant_protocol::runtime::SANDBOX_DEGRADED_WARNING;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const PROJECT_KEY: &str = "sk-project-planted";

/// A host as a session finds it: a state root with a daemon's files and other sessions'
/// records, a home with credentials, a project with a `.env`.
struct Host {
    dir: tempfile::TempDir,
    state: PathBuf,
    artifacts: PathBuf,
    home: PathBuf,
    project: PathBuf,
    _socket: UnixListener,
}

impl Host {
    fn new() -> Host {
        let dir = tempdir();
        let base = fs::canonicalize(dir.path()).unwrap();
        let state = base.join("ih");
        let artifacts = state.join("artifacts/s1");
        let home = base.join("home");
        let project = base.join("project");
        for d in [
            artifacts.clone(),
            state.join("artifacts/s2"),
            state.join("logs/s2"),
            state.join("trust"),
            state.join("checkpoints/project-0123/git/objects"),
            home.join(".ssh"),
            home.join(".aws"),
            home.join(".config/intendant"),
            project.clone(),
        ] {
            fs::create_dir_all(d).unwrap();
        }
        let files = [
            (state.join("web-token"), TOKEN.to_owned()),
            (state.join("daemon.lock"), "4242\n".to_owned()),
            (state.join("logs/s2/events.jsonl"), "{}\n".to_owned()),
            (state.join("trust/t.json"), "{}\n".to_owned()),
            // The controller's database (memories, the agenda), and its WAL beside it.
            (state.join("intendant.db"), "memory-db-secret\n".to_owned()),
            (
                state.join("intendant.db-wal"),
                "memory-wal-secret\n".to_owned(),
            ),
            (
                state.join("checkpoints/project-0123/git/HEAD"),
                "ref: refs/heads/checkpoint-store\n".to_owned(),
            ),
            (
                state.join("artifacts/s2/out.log"),
                "other session\n".to_owned(),
            ),
            (home.join(".ssh/id_rsa"), "PRIVATE KEY\n".to_owned()),
            (
                home.join(".aws/credentials"),
                "aws_secret_access_key=x\n".to_owned(),
            ),
            (
                home.join(".netrc"),
                "machine h login u password p\n".to_owned(),
            ),
            (
                home.join(".config/intendant/.env"),
                "OPENAI_API_KEY=sk-global\n".to_owned(),
            ),
            (
                project.join(".env"),
                format!(
                    "# settings\nAPP_PORT=8080\nOPENAI_API_KEY={PROJECT_KEY}\n\
                     PRIVATE_KEY=\"-----BEGIN-----\nbody-of-the-key\n-----END-----\"\nDEBUG=1\n"
                ),
            ),
        ];
        for (path, text) in files {
            fs::write(path, text).unwrap();
        }
        let socket = UnixListener::bind(state.join("daemon.sock")).unwrap();
        Host {
            dir,
            state,
            artifacts,
            home,
            project,
            _socket: socket,
        }
    }

    fn masks(&self) -> String {
        let h = |p: PathBuf| format!("h{}", p.display());
        [
            h(self.state.clone()),
            h(self.home.join(".ssh")),
            h(self.home.join(".aws")),
            h(self.home.join(".netrc")),
            h(self.home.join(".kube")),
            h(self.home.join(".config/intendant")),
            format!("e{}", self.project.join(".env").display()),
        ]
        .join(":")
    }

    fn write_paths(&self) -> String {
        format!("{}:{}", self.project.display(), self.artifacts.display())
    }

    /// Hands the whole tree to `nobody` (a copy of the runtime with it), for a run as that user.
    fn give_to_nobody(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let (uid, gid) = nobody();
        let bin = self.dir.path().join("intendant-runtime");
        fs::copy(BIN, &bin).unwrap();
        let mut stack = vec![self.dir.path().to_path_buf()];
        while let Some(p) = stack.pop() {
            std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).unwrap();
            if p.is_dir() && !p.is_symlink() {
                fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
                stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
        }
        bin
    }

    /// Runs `commands` as the given user (`nobody`: through `setpriv`), with `env` added.
    fn run(&self, commands: &[&str], unprivileged: bool, env: &[(&str, &str)]) -> Outcome {
        let mut cmd = if unprivileged {
            as_nobody(&self.give_to_nobody())
        } else {
            std::process::Command::new(BIN)
        };
        let commands: Vec<Value> = commands
            .iter()
            .enumerate()
            .map(|(n, c)| json!({"function": "execAsAgent", "nonce": n, "command": c}))
            .collect();
        let input = json!({ "commands": commands }).to_string();
        cmd.current_dir(&self.project)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("INTENDANT_LOG_DIR", &self.artifacts)
            .env("INTENDANT_SANDBOX_WRITE_PATHS", self.write_paths())
            .env("INTENDANT_SANDBOX_READ_MASKS", self.masks())
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd
            .spawn()
            .expect("setpriv (util-linux) runs the nobody case");
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // A runtime that refuses to start reads nothing: a broken pipe is its answer.
        let _ = stdin.write_all(input.as_bytes());
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let results = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let envelope: Value = serde_json::from_str(l).unwrap();
                serde_json::from_str(envelope["data"].as_str().unwrap()).unwrap()
            })
            .collect();
        Outcome {
            code: out.status.code().unwrap_or(-1),
            results,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

struct Outcome {
    code: i32,
    results: Vec<Value>,
    stderr: String,
}

impl Outcome {
    fn stdout(&self, n: usize) -> &str {
        self.results[n]["stdout"].as_str().unwrap_or_default()
    }

    /// Command `n` failed with `says` in its stderr.
    fn refused(&self, n: usize, says: &str) {
        let r = &self.results[n];
        assert_ne!(r["exit_code"], 0, "attack {n} succeeded: {r}");
        assert!(
            r["stderr"].as_str().unwrap_or_default().contains(says),
            "attack {n} should say {says:?}: {r}"
        );
    }

    fn succeeded(&self, n: usize) -> &str {
        let r = &self.results[n];
        assert_eq!(r["exit_code"], 0, "command {n} failed: {r}");
        self.stdout(n)
    }
}

/// The probes every run makes: attacks first (each must fail), then what must keep working.
fn probe(host: &Host, unprivileged: bool, env: &[(&str, &str)]) -> Option<Outcome> {
    let s = |p: PathBuf| sh(&p);
    let connect = format!(
        "timeout 10 python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' {}",
        s(host.state.join("daemon.sock"))
    );
    let commands = [
        format!("cat {}", s(host.state.join("web-token"))),
        format!("cat {}", s(host.state.join("daemon.lock"))),
        format!("ls {}", s(host.state.join("logs"))),
        connect,
        format!("cat {}", s(host.home.join(".ssh/id_rsa"))),
        format!("cat {}", s(host.home.join(".aws/credentials"))),
        format!("cat {}", s(host.home.join(".config/intendant/.env"))),
        format!("cat {}", s(host.state.join("artifacts/s2/out.log"))),
        format!("touch {}", s(host.state.join("planted"))),
        format!("echo x > {}", s(host.home.join(".netrc"))),
        "echo OPENAI_API_KEY=sk-new >> .env".to_owned(),
        // What must keep working.
        format!("ls -A {}", s(host.state.clone())),
        format!("ls -A {}", s(host.state.join("artifacts"))),
        format!("wc -c < {}", s(host.home.join(".netrc"))),
        "cat .env".to_owned(),
        format!(
            "echo ok > {a}/out && cat {a}/out",
            a = s(host.artifacts.clone())
        ),
        ". ./.env && echo \"$APP_PORT $DEBUG\"".to_owned(),
        "env | grep INTENDANT_ || echo none".to_owned(),
        // The checkpoint store: neither readable nor writable.
        format!(
            "cat {}",
            s(host.state.join("checkpoints/project-0123/git/HEAD"))
        ),
        format!(
            "touch {}",
            s(host
                .state
                .join("checkpoints/project-0123/git/objects/planted"))
        ),
        // The database: neither readable nor writable, nor its WAL.
        format!("cat {}", s(host.state.join("intendant.db"))),
        format!("echo planted >> {}", s(host.state.join("intendant.db"))),
        format!("cat {}", s(host.state.join("intendant.db-wal"))),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let out = host.run(&commands, unprivileged, env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    if out.stderr.contains(SANDBOX_DEGRADED_WARNING) {
        assert!(
            out.stderr.contains("reads are not confined"),
            "a missing layer says reads are open: {}",
            out.stderr
        );
        note(&format!(
            "no mount namespace for this user here; the runtime said so: {}",
            out.stderr
        ));
        return None;
    }
    Some(out)
}

fn assert_reads_confined(out: &Outcome) {
    let enoent = "No such file or directory";
    for n in [0, 1, 2, 4, 5, 6, 7] {
        out.refused(n, enoent);
    }
    out.refused(3, "FileNotFoundError");
    out.refused(8, "Read-only file system");
    for n in [9, 10] {
        assert_ne!(out.results[n]["exit_code"], 0, "{}", out.results[n]);
    }
    assert_eq!(out.succeeded(11), "artifacts\n", "the state root is empty");
    assert_eq!(out.succeeded(12), "s1\n", "only this session's artifacts");
    assert_eq!(out.succeeded(13).trim(), "0", "a hidden file reads empty");
    let env = out.succeeded(14);
    assert!(
        env.contains("APP_PORT=8080") && env.contains("DEBUG=1"),
        "{env}"
    );
    for secret in [PROJECT_KEY, "body-of-the-key", "BEGIN", "sk-new"] {
        assert!(!env.contains(secret), "{secret} in {env}");
    }
    assert_eq!(out.succeeded(15), "ok\n");
    assert_eq!(out.succeeded(16), "8080 1\n");
    assert_eq!(
        out.succeeded(17),
        "none\n",
        "the masks are no command's business"
    );
    out.refused(18, enoent);
    assert_ne!(out.results[19]["exit_code"], 0, "{}", out.results[19]);
    out.refused(20, enoent);
    assert_ne!(out.results[21]["exit_code"], 0, "{}", out.results[21]);
    out.refused(22, enoent);
    // What the commands printed, not the result's log paths: those hold
    // random hex that may spell a secret's digits.
    let all: String = out
        .results
        .iter()
        .map(|r| format!("{}{}", r["stdout"], r["stderr"]))
        .collect();
    for secret in [
        TOKEN,
        "4242",
        "PRIVATE KEY",
        "sk-global",
        "other session",
        "checkpoint-store",
        "memory-db-secret",
        "memory-wal-secret",
    ] {
        assert!(!all.contains(secret), "{secret} leaked: {all}");
    }
}

#[test]
fn the_state_root_credentials_and_env_keys_are_hidden_from_commands() {
    let host = Host::new();
    let out = probe(&host, false, &[("INTENDANT_SANDBOX_REQUIRE_FULL", "1")])
        .expect("require_full refuses rather than run without the layer");
    assert_reads_confined(&out);
    // Outside the sandbox nothing changed.
    assert_eq!(
        fs::read_to_string(host.state.join("web-token")).unwrap(),
        TOKEN
    );
    let env = fs::read_to_string(host.project.join(".env")).unwrap();
    assert!(
        env.contains(PROJECT_KEY) && !env.contains("sk-new"),
        "{env}"
    );
    assert_eq!(
        fs::read_to_string(host.state.join("intendant.db")).unwrap(),
        "memory-db-secret\n",
        "the database is untouched"
    );
}

#[test]
fn an_ordinary_user_gets_the_same_hiding_inside_a_user_namespace() {
    if !running_as_root() {
        // Already an ordinary user: the same probe, as this user.
        let host = Host::new();
        if let Some(out) = probe(&host, false, &[]) {
            assert_reads_confined(&out);
        }
        return;
    }
    let host = Host::new();
    if let Some(out) = probe(&host, true, &[]) {
        assert_reads_confined(&out);
    }
}

#[test]
fn a_write_root_is_never_hidden_and_a_hidden_parent_keeps_it_visible() {
    let host = Host::new();
    let parent = host.project.parent().unwrap().to_path_buf();
    let masks = format!("h{}:h{}", host.project.display(), parent.display());
    let out = host.run(
        &[
            "echo hi > kept && cat kept",
            &format!("ls -A {}", sh(&parent)),
        ],
        false,
        &[
            ("INTENDANT_SANDBOX_REQUIRE_FULL", "1"),
            ("INTENDANT_SANDBOX_READ_MASKS", &masks),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.succeeded(0), "hi\n");
    let listed = out.succeeded(1);
    assert!(listed.contains("project"), "{listed}");
    assert!(!listed.contains("home"), "siblings are hidden: {listed}");
}

#[test]
fn a_state_root_in_dev_shm_is_hidden_but_for_its_artifacts_directory() {
    // `/dev/shm` lies inside the private `/dev`, which is a write root of its own: a state root
    // there is still hidden, and the artifacts directory beneath it still bound back.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let state = fs::canonicalize(shm.path()).unwrap();
    let artifacts = state.join("artifacts/s1");
    fs::create_dir_all(&artifacts).unwrap();
    fs::write(state.join("web-token"), TOKEN).unwrap();
    let host = Host::new();
    let write_paths = format!("{}:{}", artifacts.display(), host.project.display());
    let masks = format!("h{}", state.display());
    let out = host.run(
        &[
            &format!("echo hi > {0}/x && cat {0}/x", sh(&artifacts)),
            &format!("ls -A {}", sh(&state)),
            &format!("cat {}", sh(&state.join("web-token"))),
        ],
        false,
        &[
            ("INTENDANT_LOG_DIR", artifacts.to_str().unwrap()),
            ("INTENDANT_SANDBOX_WRITE_PATHS", &write_paths),
            ("INTENDANT_SANDBOX_READ_MASKS", &masks),
            ("INTENDANT_SANDBOX_REQUIRE_FULL", "1"),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.succeeded(0), "hi\n");
    assert_eq!(out.succeeded(1), "artifacts\n");
    out.refused(2, "No such file");
}

#[test]
fn hiding_that_fails_counts_as_a_missing_layer_and_require_full_refuses() {
    let host = Host::new();
    // A path shown again beneath a hidden one, deeper than the hiding tmpfs holds inodes for.
    let deep: PathBuf = (0..300).fold(host.home.join("deep"), |p, _| p.join("d"));
    fs::create_dir_all(&deep).unwrap();
    let masks = format!("h{}:r{}", host.home.join("deep").display(), deep.display());
    let marker = host.project.join("ran");
    let touch = format!("touch {}", sh(&marker));
    let env = [("INTENDANT_SANDBOX_READ_MASKS", masks.as_str())];
    let out = host.run(
        &[&touch],
        false,
        &[env[0], ("INTENDANT_SANDBOX_REQUIRE_FULL", "1")],
    );
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.results.is_empty() && !marker.exists(),
        "nothing may run"
    );
    for says in ["reads are not confined", "require_full = false"] {
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
    }
    let out = host.run(&[&touch], false, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stderr.matches(SANDBOX_DEGRADED_WARNING).count(),
        1,
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("reads are not confined"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_malformed_mask_list_is_a_refusal() {
    let host = Host::new();
    let out = host.run(
        &["true"],
        false,
        &[("INTENDANT_SANDBOX_READ_MASKS", "x/abs")],
    );
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("unknown kind"), "{}", out.stderr);
    assert!(out.results.is_empty());
}

#[test]
fn a_revealed_file_beneath_a_hidden_directory_stays_readable_and_nothing_else() {
    let host = Host::new();
    let ssh = host.home.join(".ssh");
    fs::write(ssh.join("known_hosts"), "github.com ssh-ed25519 AAAA\n").unwrap();
    let masks = format!("h{}:r{}", ssh.display(), ssh.join("known_hosts").display());
    let out = host.run(
        &[
            &format!("ls -A {}", sh(&ssh)),
            &format!("cat {}", sh(&ssh.join("known_hosts"))),
            &format!("cat {}", sh(&ssh.join("id_rsa"))),
        ],
        false,
        &[
            ("INTENDANT_SANDBOX_REQUIRE_FULL", "1"),
            ("INTENDANT_SANDBOX_READ_MASKS", &masks),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.succeeded(0), "known_hosts\n");
    assert_eq!(out.succeeded(1), "github.com ssh-ed25519 AAAA\n");
    out.refused(2, "No such file or directory");
}

#[test]
fn a_path_hidden_inside_a_write_root_cannot_be_moved_out_from_under_its_mask() {
    // `deny_read` paths are the project's: a command that renamed a directory above one would
    // find the path under a name the next runtime does not hide.
    let host = Host::new();
    let secret = host.project.join("conf/deploy/secret.txt");
    fs::create_dir_all(secret.parent().unwrap()).unwrap();
    fs::write(&secret, "deploy-secret\n").unwrap();
    let masks = format!("{}:h{}", host.masks(), secret.display());
    let env = [
        ("INTENDANT_SANDBOX_REQUIRE_FULL", "1"),
        ("INTENDANT_SANDBOX_READ_MASKS", masks.as_str()),
    ];
    let out = host.run(
        &[
            "mv conf moved",
            "mv conf/deploy conf/moved",
            "cat conf/deploy/secret.txt",
        ],
        false,
        &env,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.refused(0, "busy");
    out.refused(1, "busy");
    assert_eq!(out.succeeded(2), "", "a hidden file reads empty");
    let out = host.run(
        &["cat moved/deploy/secret.txt conf/moved/secret.txt"],
        false,
        &env,
    );
    let all = serde_json::to_string(&out.results).unwrap();
    assert!(!all.contains("deploy-secret"), "{all}");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "deploy-secret\n");
}

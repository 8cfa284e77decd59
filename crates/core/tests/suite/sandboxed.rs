//! `intendant_core::sandboxed::spawn` with the real runtime: a program in a session's walls
//! talks over its pipes for as long as it lives, cannot write outside its roots, read the
//! hidden state root or see a provider key, and is ended with the session's containment.

use std::path::PathBuf;
use std::time::Duration;

use intendant_core::child::{Ending, Limits, Overflow};
use intendant_core::containment::{LimitsConfig, SessionContainment};
use intendant_core::runtime_env::ReadMask;
use intendant_core::sandboxed::{self, Confinement, SandboxWalls, SandboxedCommand, Walls};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::support::runtime_bin;

const SECRET: &str = "the-web-token-of-the-daemon";
const KEY: &str = "sk-provider-key-of-the-controller";

struct Host {
    _dir: tempfile::TempDir,
    state: PathBuf,
    project: PathBuf,
    scratch: PathBuf,
    outside: PathBuf,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let host = Host {
            state: base.join("ih"),
            project: base.join("project"),
            scratch: base.join("ih/artifacts/s1/scratch"),
            outside: base.join("outside"),
            _dir: dir,
        };
        for d in [&host.project, &host.scratch, &host.outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(host.state.join("web-token"), SECRET).unwrap();
        host
    }

    /// The session's walls: its sandbox hides the state root; the controller's own
    /// environment holds a provider key (the policy filter is the runtime's to repeat).
    fn walls(&self) -> Walls {
        Walls {
            runtime_path: runtime_bin(),
            env: vec![
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("OPENAI_API_KEY".into(), KEY.into()),
            ],
            sandbox: Some(SandboxWalls {
                command_write_paths: vec![self.project.clone(), "/tmp".into()],
                read_masks: vec![ReadMask::Hide(self.state.clone())],
                require_full: false,
            }),
            netns: None,
            placement: None,
        }
    }

    fn command(&self, script: &str) -> SandboxedCommand {
        SandboxedCommand {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: self.project.clone(),
            vars: vec![("MY_SETTING".into(), "given".into())],
            confinement: Confinement::Writes(vec![self.project.clone(), self.scratch.clone()]),
        }
    }
}

/// Waits for `running` to end and checks it exited 0, saying its stderr if not.
async fn exits_cleanly(running: intendant_core::child::Running) {
    let report = running.finish(std::future::pending()).await.unwrap();
    assert_eq!(
        report.ending,
        Ending::Exited(Some(0)),
        "{}",
        report.stderr_tail
    );
}

fn limits() -> Limits {
    Limits {
        max_stdout: 0,
        stdout_overflow: Overflow::Drain,
        max_stderr: 64 * 1024,
        stderr_tail: 4096,
        deadline: Some(Duration::from_secs(60)),
        grace: Duration::from_secs(2),
        drain: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn a_program_in_the_walls_answers_on_its_pipes_and_cannot_break_out() {
    let host = Host::new();
    // A line protocol: each request answered by one line, as a stdio MCP server does.
    let script = format!(
        r#"while read req; do case "$req" in
  write-outside) echo x > {outside}/planted 2>/dev/null && echo wrote || echo refused;;
  write-scratch) echo x > {scratch}/made && echo wrote || echo refused;;
  read-state) cat {state}/web-token 2>/dev/null || echo hidden;;
  env) env | tr '\n' ' '; echo;;
esac; done"#,
        outside = host.outside.display(),
        scratch = host.scratch.display(),
        state = host.state.display(),
    );
    let (running, pipes) = sandboxed::spawn(&host.walls(), &host.command(&script), limits())
        .await
        .unwrap();
    let mut stdin = pipes.stdin;
    let mut lines = BufReader::new(pipes.stdout).lines();
    let mut ask = async |req: &str| {
        stdin
            .write_all(format!("{req}\n").as_bytes())
            .await
            .unwrap();
        lines.next_line().await.unwrap().unwrap()
    };
    assert_eq!(ask("write-outside").await, "refused");
    assert_eq!(ask("write-scratch").await, "wrote");
    let state = ask("read-state").await;
    assert!(!state.contains(SECRET), "the state root was read: {state}");
    let env = ask("env").await;
    assert!(
        !env.contains(KEY),
        "a provider key reached the program: {env}"
    );
    assert!(env.contains("MY_SETTING=given"), "{env}");
    assert!(!env.contains("INTENDANT_"), "{env}");
    assert!(!host.outside.join("planted").exists());
    drop(stdin);
    exits_cleanly(running).await;
}

#[tokio::test]
async fn a_named_key_is_given_and_a_failing_wall_is_reported() {
    let host = Host::new();
    let mut cmd = host.command("echo \"$OPENAI_API_KEY\"");
    cmd.vars
        .push(("OPENAI_API_KEY".into(), "sk-named-by-the-user".into()));
    let (running, pipes) = sandboxed::spawn(&host.walls(), &cmd, limits())
        .await
        .unwrap();
    let mut lines = BufReader::new(pipes.stdout).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("sk-named-by-the-user")
    );
    running.finish(std::future::pending()).await.unwrap();

    let mut walls = host.walls();
    walls
        .env
        .push(("INTENDANT_SANDBOX_SIMULATE_UNAVAILABLE".into(), "1".into()));
    let (running, _pipes) = sandboxed::spawn(&walls, &host.command("true"), limits())
        .await
        .unwrap();
    let report = running.finish(std::future::pending()).await.unwrap();
    assert_eq!(report.ending, Ending::Exited(Some(3)));
    assert!(
        report.stderr_tail.contains("--no-sandbox"),
        "{}",
        report.stderr_tail
    );
}

#[tokio::test]
async fn the_program_and_what_it_started_end_with_the_session() {
    let host = Host::new();
    let mut containment = SessionContainment::create("sandboxed-test", &LimitsConfig::default());
    let mut walls = host.walls();
    walls.placement = Some(containment.placement());
    // A detached grandchild in a session of its own, as a daemonizing server leaves behind.
    let cmd = host.command("setsid sleep 300 & echo $!; cat");
    let (running, pipes) = sandboxed::spawn(&walls, &cmd, limits()).await.unwrap();
    let mut lines = BufReader::new(pipes.stdout).lines();
    let pid: u32 = lines.next_line().await.unwrap().unwrap().parse().unwrap();
    let leader = running.id().unwrap();
    assert!(PathBuf::from(format!("/proc/{pid}")).exists());
    let notes = containment.end();
    assert!(notes.is_empty(), "{notes:?}");
    let gone = |p: u32| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    for _ in 0..200 {
        if gone(pid) && gone(leader) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone(pid), "the detached grandchild outlived the session");
    assert!(gone(leader), "the program outlived the session");
    // The containment may have reaped it already (where it kills descendants as subreaper).
    drop(running);
}

/// A session's network is held by descriptor alone: its holder is gone once the session holds
/// the namespace, a program inside the session's walls joins it (and holds no descriptor but
/// its stdio: none of the namespace's, none of the controller's), and once the session's
/// network ended no program of the session starts.
#[tokio::test]
async fn a_sessions_namespace_is_held_without_a_process_and_ends_with_the_session() {
    use intendant_core::network::{HolderSpec, NetworkError, SessionNetwork};
    use intendant_testkit::procs::processes_in_namespace;
    use std::os::unix::fs::MetadataExt;
    let host = Host::new();
    let spec = HolderSpec {
        runtime_path: runtime_bin(),
        relay: None,
        simulate_unavailable: false,
    };
    let mut network = match SessionNetwork::start(&spec, |_| Ok(())) {
        Ok(network) => network,
        Err(NetworkError::Unavailable { reason }) => {
            eprintln!("note: no network namespace here: {reason}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let passed = network.netns().passed().unwrap();
    let net = passed.files.last().unwrap();
    let inode = std::fs::File::from(net.try_clone().unwrap())
        .metadata()
        .unwrap()
        .ino();
    drop(passed);
    let ns = format!("net:[{inode}]");
    assert!(
        processes_in_namespace(&ns).is_empty(),
        "no process holds the namespace: {:?}",
        processes_in_namespace(&ns)
    );
    let mut walls = host.walls();
    walls.netns = Some(network.netns());
    // The shell's descriptors, listed from a subshell while the shell itself waits.
    let script = "readlink /proc/self/ns/net; (cd /proc/$$/fd && echo *); cat";
    let (running, pipes) = sandboxed::spawn(&walls, &host.command(script), limits())
        .await
        .unwrap();
    let mut lines = BufReader::new(pipes.stdout).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some(ns.as_str())
    );
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("0 1 2"),
        "the program holds its stdio alone: no namespace, nothing of the controller's"
    );
    drop(pipes.stdin);
    exits_cleanly(running).await;

    network.end();
    let refused = sandboxed::spawn(&walls, &host.command("true"), limits())
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        refused.to_string().contains("network namespace has ended"),
        "{refused}"
    );
    assert!(processes_in_namespace(&ns).is_empty());
}

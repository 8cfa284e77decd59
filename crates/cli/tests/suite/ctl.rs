//! `intendant ctl` through the real socket against an in-memory host (the socket server of
//! `intendant-server` in this process, the built binary as the client): verbs, output and exit
//! codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use intendant_core::host::SessionHost;
use intendant_core::host::double::HostDouble;
use intendant_protocol::daemon::SessionIntent;
use intendant_protocol::events::ControlMsg;
use intendant_server::socket::{ControlSocket, DaemonLock};
use serde_json::Value;

struct World {
    root: tempfile::TempDir,
    host: Arc<HostDouble>,
    rt: Option<tokio::runtime::Runtime>,
}

impl World {
    /// A state root with no daemon.
    fn bare() -> World {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("project")).unwrap();
        World {
            root,
            host: HostDouble::new(),
            rt: None,
        }
    }

    /// A state root whose socket is served by an in-memory host.
    fn served() -> World {
        let mut world = World::bare();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let host: Arc<dyn SessionHost> = world.host.clone();
        let home = world.home();
        rt.block_on(async {
            let lock = DaemonLock::acquire(&home).unwrap();
            let socket = ControlSocket::bind(&lock).unwrap();
            tokio::spawn(async move {
                let _lock = lock;
                socket.serve(host, std::future::pending()).await;
            });
        });
        world.rt = Some(rt);
        world
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("ihome")
    }

    fn project(&self) -> PathBuf {
        self.root.path().join("project")
    }

    fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_command(args).output().unwrap()
    }

    fn ctl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_intendant"));
        command
            .arg("ctl")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path())
            .env("INTENDANT_HOME", self.home())
            .current_dir(self.project())
            .stdin(Stdio::null());
        command
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn ctl_without_a_daemon_exits_3() {
    let world = World::bare();
    let out = world.ctl(&["sessions"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("no daemon"), "{}", stderr(&out));
    assert!(stderr(&out).contains("intendant serve"), "{}", stderr(&out));
    let out = world.ctl(&["no-such-verb"]);
    assert_eq!(code(&out), 2, "usage: {}", stderr(&out));
}

/// An attach replays a session's history with the times the daemon stamped on its events: a
/// command that took 2.5 s reads `2.5s`, where events all arriving at once read `0.0s`.
#[test]
fn an_attach_replays_with_the_time_each_event_happened() {
    use intendant_protocol::events::AppEvent;
    let world = World::served();
    assert_eq!(stdout(&world.ctl(&["start", "time it"])), "s1\n");
    world.host.publish_at(
        "s1",
        AppEvent::ToolCall {
            call_id: "c1".into(),
            name: "exec_command".into(),
            arguments: serde_json::json!({"command": "sleep 2.5"}),
        },
        "2026-12-01T10:00:01.000Z",
    );
    world.host.publish_at(
        "s1",
        AppEvent::ToolBatch {
            turn: 1,
            input: serde_json::json!({"commands": []}),
        },
        "2026-12-01T10:00:01.000Z",
    );
    world.host.publish_at(
        "s1",
        AppEvent::AgentOutput {
            call_id: "c1".into(),
            name: "exec_command".into(),
            output: serde_json::json!({
                "exit_code": 0, "pid": 7, "stdout": "", "stderr": "",
                "stdout_truncated": false, "stderr_truncated": false
            })
            .to_string(),
        },
        "2026-12-01T10:00:03.500Z",
    );
    assert_eq!(code(&world.ctl(&["stop", "s1"])), 0);
    let out = world.ctl(&["attach", "s1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let result = stderr(&out)
        .lines()
        .find(|l| l.contains("exec_command: exit 0"))
        .map(str::to_owned);
    assert!(
        result.as_deref().is_some_and(|l| l.contains("2.5s")),
        "{result:?} in {}",
        stderr(&out)
    );
}

/// A task is shown in the listing escaped: one a model wrote for a sub-agent, or someone else
/// started, cannot set the terminal's title or turn its row around.
#[test]
fn a_task_in_the_listing_is_shown_escaped() {
    let world = World::served();
    let out = world.ctl(&["start", "task\u{1b}]0;TITLE\u{7}\u{202e}\u{9b}2J"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&world.ctl(&["sessions"]));
    assert!(
        text.contains("task\\u{1b}]0;TITLE\\u{7}\\u{202e}\\u{9b}2J"),
        "{text:?}"
    );
    assert!(
        !text.contains(['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}']),
        "{text:?}"
    );
}

#[test]
fn ctl_verbs_drive_the_host() {
    let world = World::served();
    let out = world.ctl(&["start", "--autonomy", "high", "build it"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "s1\n");
    let listed = json_lines(&world.ctl(&["--json", "sessions"]));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], "s1");
    assert_eq!(listed[0]["autonomy"], "high");
    assert_eq!(
        listed[0]["project"],
        Path::new(&world.project()).display().to_string()
    );
    let text = stdout(&world.ctl(&["sessions"]));
    assert!(text.contains("s1") && text.contains("build it"), "{text}");

    // Refusals: exit 1 with the daemon's reason.
    let out = world.ctl(&["approve", "s1", "7"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("no approval 7"), "{}", stderr(&out));
    let out = world.ctl(&["stop", "nope"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("no session nope"), "{}", stderr(&out));
    assert_eq!(code(&world.ctl(&["approve", "s1", "not-a-number"])), 2);

    assert_eq!(stdout(&world.ctl(&["approvals"])), "no approvals pending\n");
    world.host.ask_approval("s1", 7);
    let pending = json_lines(&world.ctl(&["--json", "approvals"]));
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0]["id"].clone(), pending[0]["session_id"].clone()),
        (7.into(), "s1".into())
    );
    let table = stdout(&world.ctl(&["approvals"]));
    assert!(table.contains("rm -rf build7"), "{table}");
    let out = world.ctl(&["--json", "approve", "s1", "7"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        json_lines(&out),
        [serde_json::json!({"ok": true, "sent": "now"})]
    );
    assert_eq!(code(&world.ctl(&["send", "s1", "and test it"])), 0);
    assert_eq!(code(&world.ctl(&["answer", "s1", "yes"])), 0);
    assert_eq!(
        world.host.intents(),
        [
            ControlMsg::Approve { id: 7 },
            ControlMsg::FollowUp {
                text: "and test it".into()
            },
            ControlMsg::Input { text: "yes".into() },
        ]
        .map(|msg| SessionIntent {
            session_id: "s1".into(),
            msg
        })
    );

    assert_eq!(stdout(&world.ctl(&["autonomy"])), "medium\n");
    assert_eq!(stdout(&world.ctl(&["autonomy", "full"])), "full\n");
    assert_eq!(
        json_lines(&world.ctl(&["--json", "autonomy", "low", "--session", "s1"])),
        [serde_json::json!({"autonomy": "low"})]
    );
    assert_eq!(code(&world.ctl(&["autonomy", "reckless"])), 2);
    assert_eq!(stdout(&world.ctl(&["logs", "s1"])), "/logs/s1\n");
    let status = stdout(&world.ctl(&["status"]));
    assert!(
        status.contains(&format!("pid {}", std::process::id())),
        "{status}"
    );
    assert!(status.contains("1 session, 1 active"), "{status}");
    // Since when it serves, as `systemctl status` says it.
    assert!(
        status.lines().next().unwrap().contains(", up ") && status.contains(" (since 20"),
        "{status}"
    );
    let since = &json_lines(&world.ctl(&["--json", "status"]))[0];
    let started = since["started_at"].as_str().unwrap();
    assert!(
        intendant_protocol::utc::UtcTime::parse_rfc3339(started).is_some(),
        "{since}"
    );
    assert!(since["uptime_secs"].as_i64().unwrap() < 600, "{since}");

    assert_eq!(code(&world.ctl(&["interrupt", "s1"])), 0);
    assert_eq!(code(&world.ctl(&["stop", "s1"])), 0);
    // A finished session replays up to its end, then attach returns.
    let out = world.ctl(&["--json", "attach", "s1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = json_lines(&out);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(events[1]["event"]["type"], "approval_required");
    let out = world.ctl(&["--json", "attach", "s1", "--since", "1"]);
    assert_eq!(json_lines(&out).len(), 1);
    let out = world.ctl(&["attach", "s1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Only the sessions of one status, whole or the newest of them.
    assert_eq!(stdout(&world.ctl(&["start", "and another"])), "s2\n");
    let ids = |args: &[&str]| -> Vec<String> {
        json_lines(&world.ctl(&[&["--json", "sessions"], args].concat()))
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&["--status", "interrupted"]), ["s1"]);
    assert_eq!(ids(&["--status", "interrupted", "--last", "1"]), ["s1"]);
    assert_eq!(ids(&["--status", "done"]), Vec::<String>::new());
    assert_eq!(ids(&[]), ["s1", "s2"]);
    // `ctl status` counts the ended ones by how they ended, and says who waits for a human.
    world.host.set_status(
        "s2",
        intendant_protocol::daemon::SessionStatus::WaitingForHuman,
    );
    let status = stdout(&world.ctl(&["status"]));
    assert!(
        status.contains("2 sessions, 1 active")
            && status.contains("0 running, 1 waiting for a human, 0 idle, 0 queued")
            && status.contains("0 done, 0 failed, 1 interrupted"),
        "{status}"
    );
    let counted = json_lines(&world.ctl(&["--json", "status"]));
    assert_eq!(
        (&counted[0]["interrupted"], &counted[0]["done"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{counted:?}"
    );
    // Attached to a queued session, which shows nothing yet, the terminal is told why.
    world
        .host
        .set_status("s2", intendant_protocol::daemon::SessionStatus::Queued);
    let mut attach = world
        .ctl_command(&["attach", "s2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr_pipe = attach.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stderr_pipe), &mut line);
        let _ = tx.send(line);
    });
    // It follows the session until killed; its first line comes at once or not at all.
    let said = rx.recv_timeout(std::time::Duration::from_secs(30));
    attach.kill().unwrap();
    attach.wait().unwrap();
    let said = said.unwrap_or_else(|_| rx.recv().unwrap());
    assert!(
        said.contains("session s2 is queued") && said.contains("max_running"),
        "{said}"
    );
    let out = world.ctl(&["sessions", "--status", "sleeping"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown session status \"sleeping\"")
            && stderr(&out).contains("waiting_for_human"),
        "{}",
        stderr(&out)
    );

    let out = world.ctl(&["shutdown"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(world.host.is_shut_down());
}

/// `ctl ARGS` with `input` on its stdin; one that never returns (a call waiting for a reply
/// that never comes) fails.
fn ctl_fed(world: &World, args: &[&str], input: &[u8]) -> Output {
    super::controller::harness::run_fed(world.ctl_command(args), input)
}

#[test]
fn a_task_or_follow_up_given_as_dash_is_read_from_stdin_bounded() {
    let world = World::served();
    let task = "build it\nthen test it, line by line\n";
    let out = ctl_fed(&world, &["start", "-"], task.as_bytes());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(world.host.started()[0].task, task.trim_end());
    let out = ctl_fed(&world, &["send", "s1", "-"], b"and lint it\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = ctl_fed(&world, &["answer", "s1", "-"], b"yes");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A literal `-` elsewhere is not read.
    assert_eq!(
        world
            .host
            .intents()
            .into_iter()
            .map(|i| i.msg)
            .collect::<Vec<_>>(),
        [
            ControlMsg::FollowUp {
                text: "and lint it".into()
            },
            ControlMsg::Input { text: "yes".into() }
        ]
    );

    // Too long, not text, nothing, or stdin wanted for answers: refused before any request.
    let huge = vec![b'a'; intendant_protocol::socket::MAX_TASK_BYTES + 1];
    for (args, input, said) in [
        (&["send", "s1", "-"][..], &huge[..], "stdin holds more than"),
        (&["send", "s1", "-"][..], &b"\xff\xfe"[..], "not UTF-8"),
        (&["start", "-"][..], &b"  \n"[..], "stdin held nothing"),
        (&["start", "--attach", "-"][..], &b"x"[..], "--attach keeps"),
    ] {
        let out = ctl_fed(&world, args, input);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("nothing was sent") || said == "--attach keeps");
    }
    assert_eq!(world.host.started().len(), 1);
    assert_eq!(world.host.intents().len(), 2);

    // Within the bound but past the socket's line once escaped (a control character is six
    // bytes of JSON): refused by the client at once, where the daemon, skipping the line,
    // answered no id the call waited for, and `ctl send` hung.
    let escaped = vec![1u8; intendant_protocol::socket::MAX_TASK_BYTES / 2];
    let out = ctl_fed(&world, &["send", "s1", "-"], &escaped);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("over the 262144 the daemon reads in one: nothing was sent"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.host.intents().len(), 2);
}

#[test]
fn ctl_web_token_prints_and_rotates_it_without_a_daemon() {
    let world = World::bare();
    let out = world.ctl(&["web-token"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let first = stdout(&out).trim().to_string();
    assert_eq!(first.len(), 64, "{first}");
    assert_eq!(stdout(&world.ctl(&["web-token"])).trim(), first, "kept");
    let rotated = json_lines(&world.ctl(&["--json", "web-token", "--rotate"]));
    let second = rotated[0]["token"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(
        std::fs::read_to_string(world.home().join("web-token"))
            .unwrap()
            .trim(),
        second
    );
}

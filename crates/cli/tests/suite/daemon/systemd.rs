//! `intendant serve` under a service manager's `Type=notify`: the built daemon tells a datagram
//! socket the test binds in systemd's place, which reads each sender's credentials as systemd
//! does (`NotifyAccess=main` takes a notification from the service's main process only); and
//! `ctl reload`, the unit's `ExecReload`.

use std::mem::MaybeUninit;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use serde_json::json;

use super::{WAIT, World, code, stderr, wait_until};
use crate::suite::sessions::{exec_turn, text_turn, tool_outputs};

/// The shortest wait a read timeout takes (zero would mean none).
const MS: Duration = Duration::from_millis(1);

/// A socket in the service manager's place.
struct Manager {
    _dir: tempfile::TempDir,
    socket: UnixDatagram,
    path: PathBuf,
}

impl Manager {
    fn bind() -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        rustix::net::sockopt::set_socket_passcred(&socket, true).unwrap();
        Manager {
            _dir: dir,
            socket,
            path,
        }
    }

    /// The next notification and the pid that sent it; `None` when none came within `within`.
    fn next_within(&self, within: Duration) -> Option<(String, u32)> {
        self.socket.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let got =
            match rustix::net::recvmsg(&self.socket, &mut iov, &mut control, RecvFlags::empty()) {
                Ok(got) => got,
                Err(rustix::io::Errno::AGAIN) => return None,
                Err(e) => panic!("recvmsg: {e}"),
            };
        let pid = control
            .drain()
            .find_map(|message| match message {
                RecvAncillaryMessage::ScmCredentials(cred) => Some(cred.pid.as_raw_nonzero().get()),
                _ => None,
            })
            .expect("the sender's credentials");
        let text = String::from_utf8(buf[..got.bytes].to_vec()).unwrap();
        Some((text, u32::try_from(pid).unwrap()))
    }

    /// The next notification, which must come.
    fn next(&self) -> (String, u32) {
        self.next_within(WAIT).expect("a notification")
    }

    /// Notifications until one `is` matches; that one.
    fn until(&self, what: &str, is: impl Fn(&str) -> bool) -> (String, u32) {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "never: {what}");
            let (text, pid) = self.next();
            if is(&text) {
                return (text, pid);
            }
        }
    }

    /// `NOTIFY_SOCKET` naming this socket, for `intendant serve`'s environment.
    fn variable(&self) -> (&'static str, &str) {
        ("NOTIFY_SOCKET", self.path.to_str().unwrap())
    }
}

#[test]
fn serve_tells_its_manager_it_is_ready_alive_its_load_and_stopping() {
    let manager = Manager::bind();
    let mut world = World::new(json!([text_turn("done")]));
    let pid = world.spawn_serve(&[manager.variable(), ("WATCHDOG_USEC", "300000")]);
    let (ready, from) = manager.next();
    assert_eq!(from, pid, "{ready}");
    assert!(
        ready.starts_with(
            "READY=1\nSTATUS=0 running, 0 waiting for a human, 0 idle, 0 queued (max_running "
        ),
        "{ready}"
    );
    // Ready means it answers: no waiting for the socket.
    let status = world.ctl(&["status"]);
    assert_eq!(code(&status), 0, "{status:?}");
    // Every half of the watchdog's 300 ms (bounded generously: a loaded machine is slow).
    for _ in 0..3 {
        let (ping, from) = manager
            .next_within(Duration::from_secs(10))
            .expect("a ping");
        assert_eq!((ping.as_str(), from), ("WATCHDOG=1", pid));
    }
    let id = world.start("say done", &[]);
    world.wait_status(&id, "idle");
    let (told, from) = manager.until("the idle session in the status", |text| {
        text.contains("STATUS=0 running, 0 waiting for a human, 1 idle, 0 queued")
    });
    assert_eq!(from, pid);
    assert!(told.starts_with("WATCHDOG=1\n"), "{told}");
    world.ctl_ok(&["shutdown"]);
    let (stopping, from) = manager.until("stopping", |text| text.contains("STOPPING=1"));
    assert_eq!(from, pid);
    assert!(
        stopping.starts_with("STOPPING=1\nSTATUS=stopping: "),
        "{stopping}"
    );
    let mut child = world.daemon.take().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn serve_names_a_manager_socket_it_cannot_use_and_does_not_start() {
    let mut world = World::new(json!([]));
    let child = world
        .command(&["serve"])
        .env("NOTIFY_SOCKET", "vsock:2:1234")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    world.daemon = Some(child);
    wait_until("serve exits", || {
        world.daemon.as_mut().unwrap().try_wait().unwrap().is_some()
    });
    let out = world.daemon.take().unwrap().wait_with_output().unwrap();
    assert_eq!(code(&out), 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NOTIFY_SOCKET=\"vsock:2:1234\""),
        "{stderr}"
    );
    assert!(!world.home().join("daemon.sock").exists());
}

/// What the session's command tries: the manager's variables (granted by the owner's
/// passthrough, so only their removal at start keeps them out), and a forged `STOPPING=1` to the
/// socket it was told of some other way.
const FORGE: &str = r#"printenv NOTIFY_SOCKET WATCHDOG_USEC; echo "printenv:$?"; python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b"STOPPING=1", sys.argv[1]); print("forged")' "$SOCKET_PATH" 2>&1; echo "sent:$?""#;

#[test]
fn security_a_session_neither_inherits_the_managers_socket_nor_speaks_as_the_daemon() {
    let manager = Manager::bind();
    let forge = FORGE.replace("$SOCKET_PATH", manager.path.to_str().unwrap());
    let mut world = World::new(json!([exec_turn(&forge), text_turn("done")]));
    let pid = world.spawn_serve(&[
        manager.variable(),
        ("WATCHDOG_USEC", "60000000"),
        ("INTENDANT_ENV_PASSTHROUGH", "NOTIFY_SOCKET,WATCHDOG_USEC"),
    ]);
    let (ready, _) = manager.next();
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    let id = world.start("forge", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let outputs = tool_outputs(world.turn_bodies().last().unwrap()).join("\n");
    assert!(outputs.contains("printenv:1"), "{outputs}");
    assert!(!outputs.contains("notify"), "{outputs}");
    // Whatever reached the socket from the session came from a pid not the daemon's: what
    // systemd refuses (`NotifyAccess=main`). The daemon itself never said it stops.
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Some((text, from)) =
        manager.next_within(deadline.saturating_duration_since(Instant::now()).max(MS))
    {
        if from == pid {
            assert!(!text.contains("STOPPING"), "{text}");
        } else {
            assert_eq!(text, "STOPPING=1", "from {from}: {outputs}");
        }
    }
    assert_eq!(world.session(&id)["status"], "idle");
}

#[test]
fn ctl_reload_puts_the_edited_file_in_force_or_names_what_is_wrong() {
    let mut world = World::new(json!([text_turn("done")]));
    world.serve();
    let id = world.start("wait here", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let file = world.home().join("intendant.toml");
    std::fs::write(
        &file,
        "[daemon]\nmax_autonomy = \"high\"\nmax_running = 3\n",
    )
    .unwrap();
    assert_eq!(
        world.ctl_ok(&["reload"]),
        "reloaded: default autonomy medium (at most high), at most 3 running\n"
    );
    assert_eq!(world.session(&id)["autonomy"], "high");
    std::fs::write(&file, "[daemn]\nmax_running = 1\n").unwrap();
    let out = world.ctl(&["reload"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("daemn"), "{}", stderr(&out));
    // More running sessions than the descriptor limit can keep room for: every start would be
    // refused (it was reloaded, and each start told to end sessions there were none of).
    std::fs::write(&file, "[daemon]\nmax_running = 100000000\n").unwrap();
    let out = world.ctl(&["reload"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("max_running = 100000000 keeps")
            && stderr(&out).contains("no session could start"),
        "{}",
        stderr(&out)
    );
    let status = world.ctl_ok(&["status"]);
    assert!(status.contains("at most 3 running"), "{status}");
    // And a daemon started with it says so and does not serve.
    assert_eq!(world.stop_daemon(), 0);
    let out = world.command(&["serve"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no session could start"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

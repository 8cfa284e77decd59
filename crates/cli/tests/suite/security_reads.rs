//! Reads from inside a daemon session, as an attacker's command would make them: the daemon's
//! web token, lock and socket, other sessions' records, the user's credentials and the keys in
//! `.env` files. The real `intendant serve` runs the session on the fake model; the scripted
//! command probes everything in one batch and the model is sent what it saw.

use serde_json::json;

use super::daemon::World;
use super::sessions::{exec_turn, text_turn, tool_outputs};

const PROJECT_KEY: &str = "sk-planted-in-the-project";
const GLOBAL_KEY: &str = "sk-planted-in-the-config-dir";
const SSH_KEY: &str = "-----PLANTED SSH KEY-----";

/// One line per probe, `name=what the command saw`. Paths are relative to the project (the
/// state root is `../ihome`, `$HOME` is `../home`): the command's environment names neither.
const PROBE: &str = r#"
echo "token=$(cat ../ihome/web-token 2>&1)"
echo "lock=$(cat ../ihome/daemon.lock 2>&1)"
echo "logs=$(ls ../ihome/logs 2>&1)"
echo "state=$(ls -A ../ihome 2>&1 | tr '\n' ,)"
echo "sock=$(timeout 10 python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("../ihome/daemon.sock"); print("connected")' 2>&1 | tail -1)"
echo "ssh=$(cat ~/.ssh/id_rsa 2>&1)"
echo "aws=$(cat ~/.aws/credentials 2>&1)"
echo "global=$(cat ~/.config/intendant/.env 2>&1)"
echo "env=$(tr '\n' , < .env)"
echo "port=$(. ./.env; echo $APP_PORT)"
echo "proc=$(cat /proc/[0-9]*/root$(cd ../ihome && pwd)/web-token 2>/dev/null | head -c 80)"
echo "fds=$(ls -l /proc/self/fd/ | grep -e ihome -e socket: | grep -v ihome/artifacts/ | tr "\n" " ")"
"#;

#[test]
fn a_daemon_session_reads_neither_the_control_plane_nor_the_users_secrets() {
    let mut world = World::new(json!([exec_turn(PROBE), text_turn("Done.")]));
    let home = world.project().parent().unwrap().join("home");
    for dir in [".ssh", ".aws", ".config/intendant"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), SSH_KEY).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        "aws_secret_access_key=planted\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".config/intendant/.env"),
        format!("GEMINI_API_KEY={GLOBAL_KEY}\n"),
    )
    .unwrap();
    std::fs::write(
        world.project().join(".env"),
        format!("APP_PORT=8080\nOPENAI_API_KEY={PROJECT_KEY}\n"),
    )
    .unwrap();
    world.serve();
    let token = world.ctl_ok(&["web-token"]).trim().to_owned();
    assert_eq!(token.len(), 64, "{token}");
    let lock = std::fs::read_to_string(world.home().join("daemon.lock")).unwrap();
    let id = world.start("probe", &["--autonomy", "full"]);
    world.wait_status(&id, "idle");

    let bodies = world.turn_bodies();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let outputs = tool_outputs(&bodies[1]);
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    // The result object, then the budget line the controller appends.
    let first = outputs[0].lines().next().unwrap_or_default();
    let result: serde_json::Value = serde_json::from_str(first).unwrap();
    let seen = result["stdout"].as_str().unwrap().to_owned();
    let line = |name: &str| -> String {
        seen.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} line in {seen}"))
            .to_owned()
    };
    let enoent = "No such file or directory";
    for name in ["token", "lock", "logs", "ssh", "aws", "global"] {
        assert!(line(name).contains(enoent), "{name}: {seen}");
    }
    assert_eq!(line("state"), "artifacts,", "only the artifacts: {seen}");
    let sock = line("sock");
    assert!(
        sock.contains("FileNotFoundError") || sock.contains("ConnectionRefused"),
        "the socket is unreachable, at once: {sock}"
    );
    assert!(line("env").contains("APP_PORT=8080"), "{seen}");
    assert_eq!(line("port"), "8080", "a test reading .env still works");
    assert_eq!(line("proc"), "", "no way round through /proc: {seen}");
    // The command's own output logs are in its artifacts; nothing else of the state root.
    assert_eq!(line("fds"), "", "no descriptor into the state root: {seen}");
    for secret in [
        token.as_str(),
        lock.trim(),
        PROJECT_KEY,
        GLOBAL_KEY,
        SSH_KEY,
        "planted",
    ] {
        assert!(!seen.contains(secret), "{secret:?} leaked: {seen}");
    }
    // Outside the sandbox every file is as it was.
    let env = std::fs::read_to_string(world.project().join(".env")).unwrap();
    assert!(env.contains(PROJECT_KEY), "{env}");
    world.ctl_ok(&["stop", &id]);
    assert_eq!(world.stop_daemon(), 0);
}

//! The controller attacked by the commands it supervises: a model-driven command walks up its
//! process tree to `intendant` and tries to read its environment (the provider key) and memory
//! (the per-spawn protocol token), and to open its descriptors for writing (its end of the
//! runtime's stdout pipe, its `--json` stdin). Every attempt must fail as an ordinary user (the
//! sandbox off and on) and as root under the sandbox; as root without the sandbox only the
//! environment is checked (`CAP_SYS_PTRACE` opens the rest: a documented limit), and it must
//! not hold the key because the inherited environment block is overwritten at start.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::controller::harness::{
    Ctl, DUMMY_KEY, JsonSession, done_turn, intendant_bin, outputs_of,
};
use intendant_testkit::Wire;

/// Finds the controller, then tries each channel into it; prints a marker for each that works.
const ATTACK: &str = r#"
p=$$
while [ "$p" -gt 1 ] && [ "$(cat /proc/$p/comm)" != intendant ]; do
  read -r _ _ _ p _ < /proc/$p/stat
done
echo "CONTROLLER $p"
tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -a API_KEY
(exec 3</proc/$p/mem) 2>/dev/null && echo "OPENED mem"
while read -r range perms _; do
  case "$perms" in rw*) ;; *) continue ;; esac
  s=$((0x${range%-*})); e=$((0x${range#*-}))
  dd if=/proc/$p/mem bs=4096 skip=$((s / 4096)) count=$(((e - s) / 4096)) 2>/dev/null
done < /proc/$p/maps 2>/dev/null | grep -a -o 'runtime_protocol_token":"[0-9a-f]\{16,\}' | sed 's/^/TOKEN-FOUND /' | head -n 1
for f in /proc/$p/fd/*; do
  (exec 3>>"$f") 2>/dev/null && echo "OPENED-W $f $(readlink "$f")"
done
(exec 3>>/proc/$p/fd/0) 2>/dev/null && echo "OPENED-W stdin"
echo ATTACK_DONE
"#;

/// Who runs the controller, and whether the sandbox is on.
#[derive(Debug, Clone, Copy)]
struct Attacker {
    unprivileged: bool,
    sandbox: bool,
}

pub(super) fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

/// `cmd` run as `nobody` through `setpriv`, on copies of the binaries `nobody` can execute.
fn as_nobody(ctl: &Ctl, cmd: &Command) -> Command {
    as_nobody_in(ctl.root.path(), cmd)
}

/// `cmd` run as `nobody` through `setpriv`, on copies of the binaries in `root/bin`, with
/// everything under `root` handed to `nobody`.
pub(super) fn as_nobody_in(root: &Path, cmd: &Command) -> Command {
    let stage = root.join("bin");
    std::fs::create_dir_all(&stage).unwrap();
    let bin = intendant_bin();
    for name in ["intendant", "intendant-runtime"] {
        let to = stage.join(name);
        std::fs::copy(bin.with_file_name(name), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (uid, gid) = intendant_testkit::accounts::nobody();
    chown_tree(root, uid, gid);
    setpriv_nobody(&stage.join("intendant"), cmd)
}

/// `cmd`'s arguments, working directory and environment given to `program`, run as `nobody`
/// through `setpriv` (`program` must be a copy `nobody` can execute).
pub(super) fn setpriv_nobody(program: &Path, cmd: &Command) -> Command {
    let (uid, gid) = intendant_testkit::accounts::nobody();
    let mut wrapped = Command::new("setpriv");
    wrapped
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program)
        .args(cmd.get_args())
        .env_clear()
        .current_dir(cmd.get_current_dir().unwrap());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped
}

/// Runs the attack in a `--json` session whose stdin stays open; returns the command's output.
fn attack(who: Attacker) -> String {
    let ctl = Ctl::new(
        Wire::OpenAiResponses,
        json!([
            { "tool_calls": [ { "name": "exec_command", "arguments": { "command": ATTACK } } ] },
            done_turn("done"),
        ]),
    );
    let mut args = vec!["--json"];
    if who.sandbox {
        args.push("--sandbox");
    }
    let mut cmd = ctl.command(&args);
    cmd.arg("probe the controller");
    let cmd = if who.unprivileged && running_as_root() {
        as_nobody(&ctl, &cmd)
    } else {
        cmd
    };
    let mut session = JsonSession::spawn(cmd);
    session.wait_for("agent_output");
    let (_, events) = session.finish();
    let outputs = outputs_of(&events, "exec_command");
    assert_eq!(outputs.len(), 1, "{events:#?}");
    // The result JSON, then the loop's budget note.
    let output: Value = serde_json::Deserializer::from_str(&outputs[0])
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    let stdout = output["stdout"].as_str().unwrap_or(&outputs[0]).to_owned();
    assert!(
        stdout.contains("ATTACK_DONE"),
        "the attack did not run: {stdout}"
    );
    let found = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CONTROLLER "))
        .and_then(|p| p.trim().parse::<u32>().ok());
    assert!(
        found.is_some_and(|p| p > 1),
        "the attack did not find the controller: {stdout}"
    );
    stdout
}

fn assert_sealed(who: Attacker, stdout: &str) {
    assert!(!stdout.contains(DUMMY_KEY), "{who:?}: key read: {stdout}");
    for marker in ["OPENED", "TOKEN-FOUND"] {
        assert!(!stdout.contains(marker), "{who:?}: {stdout}");
    }
}

#[test]
fn an_unprivileged_command_cannot_read_or_drive_the_controller() {
    for sandbox in [false, true] {
        let who = Attacker {
            unprivileged: true,
            sandbox,
        };
        assert_sealed(who, &attack(who));
    }
}

#[test]
fn a_root_command_under_the_sandbox_cannot_read_or_drive_the_controller() {
    if !running_as_root() {
        return; // the unprivileged test covers this user
    }
    let who = Attacker {
        unprivileged: false,
        sandbox: true,
    };
    assert_sealed(who, &attack(who));
}

#[test]
fn the_key_is_gone_from_the_controllers_environ_even_for_root() {
    // Without the sandbox, root opens everything (CAP_SYS_PTRACE); the environment block itself
    // must no longer hold the key.
    let who = Attacker {
        unprivileged: false,
        sandbox: false,
    };
    let stdout = attack(who);
    assert!(
        !stdout.contains(DUMMY_KEY),
        "key read from environ: {stdout}"
    );
    assert!(!stdout.contains("OPENAI_API_KEY"), "{stdout}");
}

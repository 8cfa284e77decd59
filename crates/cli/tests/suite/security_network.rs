//! A session's own network through the built binary (`--network none`): one namespace for the
//! whole session, so a server a command starts in one batch is reached from a later one, while
//! the test's own listener on the host's 127.0.0.1 never is; where the kernel refuses the
//! namespace the run says so, and `[sandbox] require_full` refuses.

use std::net::TcpListener;
use std::process::{Output, Stdio};

use serde_json::json;

use super::controller::harness::assert_success;
use super::sessions::{Env, exec_turn, text_turn, tool_outputs};

/// A state root outside every sandbox write root (`/tmp`, where `Env` lives, is one).
fn state_root() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// `python3 -c` that connects to 127.0.0.1:`port` and prints `reached <answer>` or `refused`.
fn connect(port: u16) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket\ntry:\n s=socket.create_connection((\"127.0.0.1\",{port}),timeout=3); s.sendall(b\"ping\\n\"); print(\"reached\", s.recv(64).decode().strip())\nexcept OSError as e:\n print(\"refused\", e)'"
    )
}

/// A background server on 127.0.0.1:`port` answering `pong`, left running past its batch.
fn serve(port: u16) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\",{port})); s.listen(8)\nwhile True:\n c,_=s.accept(); c.recv(64); c.sendall(b\"pong\\n\"); c.close()' </dev/null >/dev/null 2>&1"
    )
}

/// A model turn calling `exec_command` with `wait_for_port`.
fn serve_turn(port: u16) -> serde_json::Value {
    json!({ "tool_calls": [ { "name": "exec_command", "arguments": {
        "command": serve(port), "wait_for_port": port, "timeout_ms": 10000 } } ] })
}

/// `intendant --sandbox --json --autonomy full EXTRA TASK` with a state root outside the roots.
fn run(env: &Env, home: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--sandbox",
        "--json",
        "--autonomy",
        "full",
    ];
    args.extend_from_slice(extra);
    args.push("use the network");
    env.command(&args)
        .env("INTENDANT_HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn security_network_a_session_keeps_one_loopback_of_its_own_and_never_reaches_the_hosts() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let inner = free_port();
    let env = Env::new(json!([
        serve_turn(inner),
        exec_turn(&connect(inner)),
        exec_turn(&format!(
            "{}; readlink /proc/self/ns/net",
            connect(host_port)
        )),
        text_turn("done")
    ]));
    let root = state_root();
    let out = run(&env, root.path(), &["--network", "none"]);
    assert_success(&out);
    let bodies = env.turn_bodies();
    let second = tool_outputs(&bodies[2]).join("\n");
    assert!(
        second.contains("reached pong"),
        "a later batch reaches the server: {second}"
    );
    let third = tool_outputs(&bodies[3]).join("\n");
    assert!(third.contains("refused"), "the host's listener: {third}");
    assert!(
        host.accept().is_err(),
        "nothing reached the host's listener"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", inner)).is_err(),
        "the session's server lives in its own namespace"
    );
    // Ended with the session: no process is left in its namespace.
    let start = third
        .rfind("net:[")
        .unwrap_or_else(|| panic!("no namespace in {third}"));
    let end = start + third[start..].find(']').unwrap() + 1;
    let ns = third[start..end].to_owned();
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        own.to_string_lossy(),
        ns,
        "commands ran in a namespace of their own"
    );
    let left = intendant_testkit::procs::processes_in_namespace(&ns);
    assert!(
        left.is_empty(),
        "processes left in the session's namespace: {left:?}"
    );
}

#[test]
fn with_the_hosts_network_a_command_reaches_the_hosts_listener() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = host.accept() {
            use std::io::{Read, Write};
            let mut buf = [0u8; 16];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"host\n");
        }
    });
    let env = Env::new(json!([exec_turn(&connect(host_port)), text_turn("done")]));
    let root = state_root();
    let out = run(&env, root.path(), &["--network", "host"]);
    assert_success(&out);
    let first = tool_outputs(&env.turn_bodies()[1]).join("\n");
    assert!(first.contains("reached host"), "{first}");
}

#[test]
fn without_network_namespaces_the_run_says_so_and_require_full_refuses() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    let env = Env::new(json!([exec_turn(&connect(host_port)), text_turn("done")]));
    let root = state_root();
    // `--network none` where the network namespaces are taken to be missing.
    let run = || {
        env.model_command(
            "go",
            &[
                "--sandbox",
                "--json",
                "--autonomy",
                "full",
                "--network",
                "none",
            ],
        )
        .env("INTENDANT_HOME", root.path())
        .env("INTENDANT_SANDBOX_SIMULATE_NO_NETNS", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
    };
    let out = run();
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("commands share the host's network")
            && stderr.contains("network namespaces are unavailable (simulated)"),
        "{stderr}"
    );
    std::fs::write(
        env.project.path().join("intendant.toml"),
        "[sandbox]\nrequire_full = true\n",
    )
    .unwrap();
    let refused = run();
    assert_eq!(refused.status.code(), Some(2), "a configuration refusal");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("require_full") && stderr.contains("network of their own"),
        "{stderr}"
    );
}

#[test]
fn a_network_mode_that_is_not_one_is_refused() {
    let env = Env::new(json!([text_turn("done")]));
    let root = state_root();
    let out = run(&env, root.path(), &["--network", "wide-open"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("proxy, none, host"), "{stderr}");
}

/// Per session from the daemon (`ctl start --network`): `none` gives that session its own
/// loopback without a proxy, the default gives it the egress proxy; `host`, more open than the
/// project's settings, is refused before any session exists: a request never widens the walls.
/// A resume that names no network keeps the session's, after a restart too (it got the
/// project's, the proxy: the narrowing it was started with was lost).
#[test]
fn security_network_ctl_start_narrows_a_sessions_network_and_never_widens_it() {
    let show = "echo \"proxy=${HTTP_PROXY:-unset}\"; readlink /proc/self/ns/net";
    let mut world = super::daemon::World::new(json!([
        exec_turn(show),
        text_turn("done"),
        exec_turn(show),
        text_turn("done again")
    ]));
    world.serve();
    let refused = world.try_start("reach the host", &["--network", "host"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("network \"host\" was asked") && stderr.contains("may only narrow"),
        "{stderr}"
    );
    assert_eq!(world.ctl_ok(&["--json", "sessions"]).trim(), "");
    let bad = world.ctl(&["start", "--network", "wide-open", "x"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("proxy, none, host"));

    let id = world.start("look", &["--network", "none", "--autonomy", "full"]);
    world.wait_status(&id, "idle");
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    // What the batch answered in turn request `n` showed: no proxy, a namespace of its own.
    let assert_closed = |world: &super::daemon::World, n: usize| {
        let bodies: Vec<_> = world
            .server
            .turn_requests()
            .into_iter()
            .map(|r| r.body)
            .collect();
        // The newest: a request carries every output of the conversation before it.
        let shown = tool_outputs(&bodies[n]).pop().unwrap_or_default();
        assert!(shown.contains("proxy=unset"), "{shown}");
        assert!(
            shown.contains("net:[") && !shown.contains(&*own.to_string_lossy()),
            "{shown}"
        );
    };
    assert_closed(&world, 1);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");

    assert_eq!(world.stop_daemon(), 0);
    world.serve();
    world.ctl_ok(&["start", "--resume", &id, "look again"]);
    world.wait_status(&id, "idle");
    assert_closed(&world, 3);
    world.ctl_ok(&["stop", &id]);
    world.wait_status(&id, "interrupted");
}

/// Nothing said (no flag, no `[sandbox] network`): commands get a network of their own whose
/// only way out is the egress proxy.
#[test]
fn security_network_by_default_commands_have_their_own_network_and_the_proxy() {
    let env = Env::new(json!([
        exec_turn("echo \"proxy=${HTTP_PROXY:-unset}\"; readlink /proc/self/ns/net"),
        text_turn("done")
    ]));
    let root = state_root();
    let out = run(&env, root.path(), &[]);
    assert_success(&out);
    let shown = tool_outputs(&env.turn_bodies()[1]).join("\n");
    assert!(shown.contains("proxy=http://127.0.0.1:"), "{shown}");
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert!(
        shown.contains("net:[") && !shown.contains(&*own.to_string_lossy()),
        "{shown}"
    );
}

/// Where the session's namespace cannot be made (simulated), Landlock's TCP rules are the wall
/// left: in `proxy` a command's connect to the test's own loopback listener is refused while
/// the egress proxy's port answers (a 403 for a host in no list, nobody to ask); in `none` no
/// TCP connect goes through at all. The run says commands share the host's network and what
/// the ports wall does not stop.
#[test]
fn security_network_without_namespaces_landlock_limits_connects_to_the_proxys_port() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let proxied = "curl -s -m 10 -o /dev/null -w 'code=%{http_code}\\n' http://unlisted.example/; echo \"proxy=$HTTP_PROXY\"";
    let env = Env::new(json!([
        exec_turn(&format!("{}; {proxied}", connect(host_port))),
        text_turn("done"),
        exec_turn(&connect(host_port)),
        text_turn("done")
    ]));
    let root = state_root();
    let fallback = |mode: &str| {
        env.model_command(
            "go",
            &[
                "--sandbox",
                "--json",
                "--autonomy",
                "full",
                "--network",
                mode,
            ],
        )
        .env("INTENDANT_HOME", root.path())
        .env("INTENDANT_SANDBOX_SIMULATE_NO_NETNS", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
    };
    let out = fallback("proxy");
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("commands share the host's network")
            && stderr.contains("limited to port")
            && stderr.contains("ports, not addresses"),
        "{stderr}"
    );
    let bodies = env.turn_bodies();
    let first = tool_outputs(&bodies[1]).join("\n");
    assert!(
        first.contains("refused") && first.contains("ermission denied"),
        "Landlock refuses the host's listener: {first}"
    );
    assert!(
        first.contains("code=403") || first.contains("code=502"),
        "the proxy's port answers (000 would be a refused connect): {first}"
    );
    assert!(first.contains("proxy=http://127.0.0.1:"), "{first}");
    assert!(
        host.accept().is_err(),
        "the test's listener was never reached"
    );

    let out = fallback("none");
    assert_success(&out);
    let bodies = env.turn_bodies();
    let second = tool_outputs(&bodies[3]).join("\n");
    assert!(
        second.contains("refused") && second.contains("ermission denied"),
        "{second}"
    );
    assert!(host.accept().is_err());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("all refused"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! The fleet's membership through the built binaries: Debian's `nats-server` with JetStream on a
//! loopback port started by the test, and daemons on state roots of their own (three
//! "machines") joining it. Waits poll with a bounded deadline; nothing asserts on time.

use std::process::{Child, Command, Stdio};

use intendant_testkit::nats;
use serde_json::{Value, json};

use super::daemon::{World, signal, stderr, wait_until};

/// A `nats-server -js` on a free loopback port, its store in a directory of its own; killed on
/// drop.
pub(super) struct Nats {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
    /// The command that started it (to start it again on the same port and store).
    bin: std::path::PathBuf,
    extra: Vec<String>,
}

impl Nats {
    /// Starts it with `extra` arguments, or `None` after the note when it is not installed.
    pub(super) fn start(extra: &[&str]) -> Option<Nats> {
        let bin = nats::binary()?;
        let store = tempfile::tempdir().unwrap();
        let port = nats::free_port().unwrap();
        let child = nats::spawn(&bin, port, store.path(), extra).unwrap();
        Some(Nats {
            child,
            port,
            _store: store,
            bin,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        })
    }

    /// Stops it (SIGTERM) and waits for it to be gone.
    pub(super) fn stop(&mut self) {
        signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }

    /// Kills it with SIGKILL (no shutdown of its own: what it had not written is lost) and
    /// waits for it to be gone.
    pub(super) fn kill(&mut self) {
        signal(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Starts it again on the same port and store.
    pub(super) fn restart(&mut self) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        self.child = nats::spawn(&self.bin, self.port, self._store.path(), &extra).unwrap();
    }

    pub(super) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the state root's `[fleet]` (and the state root, owner-only).
pub(super) fn fleet_settings(world: &World, table: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(world.home()).unwrap();
    std::fs::set_permissions(world.home(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        world.home().join("intendant.toml"),
        format!("[fleet]\n{table}"),
    )
    .unwrap();
}

/// Starts `world`'s daemon joined to `url`, and waits until it answers.
pub(super) fn serve_in(world: &mut World, url: &str) {
    let child = world
        .command(&["serve", "--fleet", url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    world.daemon = Some(child);
    wait_until("the daemon answers", || {
        world.ctl(&["status"]).status.success()
    });
}

/// `intendant serve --fleet url` run to its end (one that cannot join).
fn serve_fails(world: &World, url: &str) -> std::process::Output {
    world
        .command(&["serve", "--fleet", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// The members `world`'s daemon lists, by name.
fn members(world: &World) -> Vec<Value> {
    let status: Value = serde_json::from_str(&world.ctl_ok(&["--json", "status"])).unwrap();
    status["fleet"]["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn names(members: &[Value]) -> Vec<String> {
    members
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn daemons_on_three_state_roots_see_each_other_and_a_killed_one_is_gone() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let mut worlds: Vec<World> = (0..3).map(|_| World::new(json!([]))).collect();
    for (world, (name, labels)) in worlds.iter_mut().zip([
        ("alpha", "[\"gpu\"]"),
        ("beta", "[]"),
        ("gamma", "[\"codex\", \"gpu\"]"),
    ]) {
        fleet_settings(
            world,
            &format!("name = \"{name}\"\nlabels = {labels}\nheartbeat_sec = 1\n"),
        );
        serve_in(world, &nats.url());
    }
    let seen = members(&worlds[0]);
    assert_eq!(names(&seen), ["alpha", "beta", "gamma"], "{seen:#?}");
    assert_eq!(seen[2]["labels"], json!(["codex", "gpu"]));
    assert_eq!(seen[0]["max_running"].as_u64().map(|n| n > 0), Some(true));
    let text = worlds[1].ctl_ok(&["status"]);
    assert!(
        text.contains(&format!(
            "fleet at {}: 3 member(s), this one beta",
            nats.url()
        )),
        "{text}"
    );
    assert!(text.contains("  gamma [codex, gpu] on "), "{text}");

    // A second daemon under a live member's name is refused, and says whose it is.
    let twin = World::new(json!([]));
    fleet_settings(&twin, "name = \"alpha\"\n");
    let out = serve_fails(&twin, &nats.url());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains("is a fleet member named \"alpha\""),
        "{}",
        stderr(&out)
    );

    // Killed: the others list it gone within three heartbeats.
    worlds[1].kill_daemon();
    wait_until("beta is listed gone", || {
        names(&members(&worlds[0])) == ["alpha", "gamma"]
    });
    // Stopped: it leaves at once (its record deleted before its daemon exits, not gone stale).
    assert_eq!(worlds[2].stop_daemon(), 0);
    assert_eq!(names(&members(&worlds[0])), ["alpha"]);
    // The killed one restarts under its name once its record went stale.
    serve_in(&mut worlds[1], &nats.url());
    wait_until("beta is back", || {
        names(&members(&worlds[0])) == ["alpha", "beta"]
    });
    for world in &mut worlds {
        if world.daemon.is_some() {
            assert_eq!(world.stop_daemon(), 0);
        }
    }
}

#[test]
fn a_wrong_credential_an_unreachable_server_and_a_bad_key_are_refused_clearly() {
    let Some(nats) = Nats::start(&["--user", "fleet", "--pass", "right-secret-1"]) else {
        return;
    };
    let world = World::new(json!([]));
    fleet_settings(&world, "heartbeat_sec = 1\n");
    let wrong = format!("nats://fleet:wrong-secret-2@127.0.0.1:{}", nats.port);
    let out = serve_fails(&world, &wrong);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr(&out);
    assert!(said.contains("refused this daemon's credentials"), "{said}");
    assert!(
        !said.contains("wrong-secret-2"),
        "the password is never shown: {said}"
    );

    let mut world = world;
    serve_in(
        &mut world,
        &format!("nats://fleet:right-secret-1@127.0.0.1:{}", nats.port),
    );
    let status = world.ctl_ok(&["--json", "status"]);
    assert!(!status.contains("right-secret-1"), "{status}");
    assert_eq!(members(&world).len(), 1);
    assert_eq!(world.stop_daemon(), 0);

    let out = serve_fails(&world, "nats://127.0.0.1:1");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains("cannot reach the fleet's NATS server"),
        "{}",
        stderr(&out)
    );

    // No fleet configured: the daemon serves alone and says nothing of a fleet.
    let mut world = world;
    std::fs::write(world.home().join("intendant.toml"), "[daemon]\n").unwrap();
    world.serve();
    let status: Value = serde_json::from_str(&world.ctl_ok(&["--json", "status"])).unwrap();
    assert!(status.get("fleet").is_none(), "{status}");
    assert!(!world.ctl_ok(&["status"]).contains("fleet"));
    assert_eq!(world.stop_daemon(), 0);

    fleet_settings(&world, "url = \"nats://127.0.0.1:1\"\nbogus = true\n");
    let out = world
        .command(&["serve"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("unknown field `bogus`"),
        "{}",
        stderr(&out)
    );
}

/// `ctl --json sessions` of `world`'s daemon: each session with its member.
pub(super) fn fleet_sessions(world: &World) -> Vec<Value> {
    world
        .ctl_ok(&["--json", "sessions"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(super) fn find<'a>(sessions: &'a [Value], id: &str) -> Option<&'a Value> {
    sessions.iter().find(|s| s["id"] == id)
}

#[test]
fn every_member_lists_the_fleets_sessions_and_a_killed_members_read_interrupted() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let mut alpha = World::new(json!([super::sessions::text_turn("all done")]));
    let mut beta = World::new(json!([super::sessions::exec_turn("sleep 120")]));
    for (world, name) in [(&mut alpha, "alpha"), (&mut beta, "beta")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    let done = alpha.start("say it", &[]);
    let long = beta.start("wait a while", &["--autonomy", "full"]);
    beta.wait_status(&long, "running");

    // Each member lists both, each session under its member.
    let mut seen = Vec::new();
    wait_until("alpha lists beta's running session", || {
        seen = fleet_sessions(&alpha);
        find(&seen, &long).is_some_and(|s| s["status"] == "running")
    });
    assert_eq!(find(&seen, &long).unwrap()["member"], "beta", "{seen:#?}");
    assert_eq!(find(&seen, &done).unwrap()["member"], "alpha", "{seen:#?}");
    wait_until("beta lists alpha's session", || {
        find(&fleet_sessions(&beta), &done).is_some()
    });
    let text = beta.ctl_ok(&["sessions"]);
    assert!(text.contains("member alpha:"), "{text}");
    assert!(text.contains("member beta (this one):"), "{text}");
    assert!(text.contains(&long) && text.contains(&done), "{text}");

    // Beta killed mid-command: alpha lists its session interrupted once its heartbeat is gone.
    beta.kill_daemon();
    wait_until("beta's session is listed interrupted", || {
        find(&fleet_sessions(&alpha), &long).is_some_and(|s| s["status"] == "interrupted")
    });
    let text = alpha.ctl_ok(&["sessions"]);
    assert!(
        text.contains("member beta (lost: its unfinished sessions are listed interrupted):"),
        "{text}"
    );
    assert_eq!(alpha.stop_daemon(), 0);
}

/// Runs git in `dir` with a fixed author, and says what it printed.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_session_placed_on_a_member_runs_in_its_clone_and_pushes_its_branch_back() {
    let Some(mut nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared.path().join("origin.git");
    git(shared.path(), &["init", "--quiet", "--bare", "origin.git"]);
    let seed = shared.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    git(&seed, &["init", "--quiet", "-b", "main"]);
    std::fs::write(seed.join("README"), "hello\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "--quiet", "-m", "first"]);
    git(
        &seed,
        &["push", "--quiet", origin.to_str().unwrap(), "main"],
    );

    let mut alpha = World::new(json!([]));
    let mut beta = World::new(json!([
        super::sessions::exec_turn(
            "echo placed > work.txt && git add work.txt && git -c user.name=a -c user.email=a@b commit -q -m 'fleet work'"
        ),
        super::sessions::text_turn("committed"),
    ]));
    for (world, name) in [(&mut alpha, "alpha"), (&mut beta, "beta")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    let placed = place_ok(
        &alpha,
        &[
            "--on",
            "beta",
            "--repo",
            origin.to_str().unwrap(),
            "--ref",
            "main",
            "--autonomy",
            "full",
        ],
        "make a commit",
    );
    assert!(placed.trim().starts_with('p'), "{placed}");

    // Beta takes it, runs it in its clone, and alpha lists it under beta.
    let mut session = Value::Null;
    wait_until(
        "alpha lists the placed session on beta, its round done",
        || {
            session = fleet_sessions(&alpha)
                .into_iter()
                .find(|s| s["task"] == "make a commit")
                .unwrap_or(Value::Null);
            session["status"] == "idle" || session["status"] == "done"
        },
    );
    assert_eq!(session["member"], "beta", "{session:#?}");
    let project = session["project"].as_str().unwrap();
    assert!(
        project.starts_with(beta.home().to_str().unwrap()),
        "the clone is beneath beta's state root: {project}"
    );
    let id = session["id"].as_str().unwrap().to_owned();
    let branch = format!("intendant/{id}");
    wait_until("the session's branch is pushed back", || {
        Command::new("git")
            .args([
                "--git-dir",
                origin.to_str().unwrap(),
                "rev-parse",
                "--verify",
                "-q",
                &branch,
            ])
            .output()
            .unwrap()
            .status
            .success()
    });
    let log = git(&origin, &["log", "--format=%s", &branch]);
    assert_eq!(log, "fleet work\nfirst\n");
    assert_eq!(
        git(&origin, &["show", &format!("{branch}:work.txt")]),
        "placed\n"
    );

    // With the server gone, a placement is refused with a reason, never queued locally.
    let _ = nats.child.kill();
    let _ = nats.child.wait();
    let out = alpha.ctl(&[
        "start",
        "--fleet",
        "--repo",
        origin.to_str().unwrap(),
        "--provider",
        "openai",
        "another",
    ]);
    assert!(!out.status.success(), "{out:?}");
    let said = stderr(&out);
    assert!(said.contains("could not be queued"), "{said}");
    assert_eq!(alpha.stop_daemon(), 0);
    assert_eq!(beta.stop_daemon(), 0);
}

/// `ctl start --fleet` at `world` with `args` before the task, for the fake model (its provider
/// and model): the output as it came.
pub(super) fn place(world: &World, args: &[&str], task: &str) -> std::process::Output {
    let fixed = [
        "start",
        "--fleet",
        "--provider",
        "openai",
        "--model",
        "fake-model",
    ];
    world.ctl(&[&fixed[..], args, &[task]].concat())
}

/// [`place`], which must succeed: what it printed.
fn place_ok(world: &World, args: &[&str], task: &str) -> String {
    let out = place(world, args, task);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare repository `origin.git` in `shared` with one commit on `main` (the fleet's remote).
pub(super) fn shared_remote(shared: &std::path::Path) -> std::path::PathBuf {
    let origin = shared.join("origin.git");
    git(shared, &["init", "--quiet", "--bare", "origin.git"]);
    let seed = shared.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    git(&seed, &["init", "--quiet", "-b", "main"]);
    std::fs::write(seed.join("README"), "hello\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "--quiet", "-m", "first"]);
    git(
        &seed,
        &["push", "--quiet", origin.to_str().unwrap(), "main"],
    );
    origin
}

#[test]
fn a_killed_members_placed_session_is_resumed_on_another_from_its_mirrored_record() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    let mut beta = World::new(json!([
        super::sessions::exec_turn(
            "echo placed > work.txt && git add work.txt && git -c user.name=a -c user.email=a@b commit -q -m 'fleet work'"
        ),
        super::sessions::text_turn("committed"),
        super::sessions::exec_turn("sleep 120"),
    ]));
    let mut gamma = World::new(json!([super::sessions::text_turn("resumed here")]));
    for (world, name) in [(&mut beta, "beta"), (&mut gamma, "gamma")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    place_ok(
        &gamma,
        &[
            "--on",
            "beta",
            "--repo",
            origin.to_str().unwrap(),
            "--ref",
            "main",
            "--autonomy",
            "full",
        ],
        "make a commit",
    );
    let mut session = Value::Null;
    wait_until("beta runs the placed session to its idle", || {
        session = fleet_sessions(&gamma)
            .into_iter()
            .find(|s| s["task"] == "make a commit")
            .unwrap_or(Value::Null);
        session["status"] == "idle"
    });
    let id = session["id"].as_str().unwrap().to_owned();
    let branch = format!("intendant/{id}");
    wait_until("its branch is pushed", || {
        git(&origin, &["branch", "--list", &branch]).contains(&branch)
    });
    // A follow-up starts a turn that runs a long command; beta dies in the middle of it.
    beta.ctl_ok(&["send", &id, "keep going"]);
    let log = beta.session_dir(&id).join("session.jsonl");
    wait_until("the long command runs", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("sleep 120"))
    });
    // While beta lives, the session is its own: another member refuses to take it.
    let out = gamma.ctl(&["start", "--resume", &id, "go on"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr(&out).contains("still member beta's"),
        "{}",
        stderr(&out)
    );
    // The mirror publishes what grew each second: give it two.
    std::thread::sleep(std::time::Duration::from_secs(2));
    beta.kill_daemon();
    wait_until("gamma lists beta's session interrupted", || {
        find(&fleet_sessions(&gamma), &id).is_some_and(|s| s["status"] == "interrupted")
    });

    // Gamma resumes it from the fleet's copy of its record, in a clone of its pushed branch.
    let resumed = gamma.ctl_ok(&["start", "--resume", &id, "finish it"]);
    assert_eq!(resumed.trim(), id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let now = loop {
        let now = fleet_sessions(&gamma)
            .into_iter()
            .find(|s| s["id"] == id.as_str() && s["member"] == "gamma")
            .unwrap_or(Value::Null);
        if now["status"] == "idle" {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{now:#?}\n{}",
            std::fs::read_to_string(gamma.session_dir(&id).join("session.jsonl")).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let project = now["project"].as_str().unwrap();
    assert!(
        project.starts_with(gamma.home().to_str().unwrap()),
        "{project}"
    );
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(project).join("work.txt")).unwrap(),
        "placed\n",
        "the clone has the session's pushed work"
    );
    // The model saw the whole conversation: the first round's answer, the follow-up, and the
    // command cut off by the kill closed as not run.
    let body = gamma.turn_bodies().pop().unwrap().to_string();
    for seen in [
        "make a commit",
        "committed",
        "keep going",
        "sleep 120",
        "finish it",
    ] {
        assert!(body.contains(seen), "{seen} in {body}");
    }
    assert!(body.contains("the session was interrupted"), "{body}");
    let record = std::fs::read_to_string(gamma.session_dir(&id).join("session.jsonl")).unwrap();
    assert!(
        record.contains("resumed here"),
        "the record goes on where it was"
    );
    // Listed once: as gamma's, no longer as the lost beta's.
    let listed: Vec<Value> = fleet_sessions(&gamma)
        .into_iter()
        .filter(|s| s["id"] == id.as_str())
        .collect();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    // And counted once, as gamma's (known here: beta's copy is not counted again).
    let counted = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            use intendant_core::host::SessionHost;
            let host = intendant_server::socket::RemoteHost::connect(&gamma.home(), "test")
                .await
                .unwrap();
            host.fleet_sessions_count(&intendant_protocol::daemon::SessionsPage::ALL)
                .await
                .unwrap()
        });
    assert_eq!(counted, Some(fleet_sessions(&gamma).len() as u64));
    assert_eq!(counted, Some(1));
    assert_eq!(gamma.stop_daemon(), 0);
}

#[test]
fn a_member_cut_off_from_a_restarted_server_runs_on_and_catches_up_losing_nothing() {
    let Some(mut nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    let mut beta = World::new(json!([
        super::sessions::exec_turn("sleep 4 && echo outage > during.txt"),
        super::sessions::text_turn("done during the outage"),
    ]));
    let mut gamma = World::new(json!([super::sessions::text_turn("resumed after it")]));
    for (world, name) in [(&mut beta, "beta"), (&mut gamma, "gamma")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    place_ok(
        &gamma,
        &[
            "--on",
            "beta",
            "--repo",
            origin.to_str().unwrap(),
            "--autonomy",
            "full",
        ],
        "outlast it",
    );
    let mut id = String::new();
    wait_until("beta runs the placed session", || {
        id = beta
            .ctl_ok(&["--json", "sessions"])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|s| s["task"] == "outlast it" && s["status"] == "running")
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .unwrap_or_default();
        !id.is_empty()
    });

    // The server goes away mid-command: beta's session runs on to its round's end.
    nats.stop();
    let mut local = Value::Null;
    wait_until("the session idles on beta without the server", || {
        local = beta
            .ctl_ok(&["--json", "sessions"])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|s| s["id"] == id.as_str())
            .unwrap_or(Value::Null);
        local["status"] == "idle"
    });
    assert_eq!(local["final_text"], "done during the outage", "{local:#?}");

    // Back on the same store: beta reconnects by itself, its list and records catch up.
    nats.restart();
    wait_until("gamma lists beta's session idle again", || {
        find(&fleet_sessions(&gamma), &id)
            .is_some_and(|s| s["status"] == "idle" && s["member"] == "beta")
    });
    // Everything written while cut off reached the fleet's copy: beta dies, gamma resumes it.
    std::thread::sleep(std::time::Duration::from_secs(2));
    beta.kill_daemon();
    wait_until("beta is gone", || {
        find(&fleet_sessions(&gamma), &id).is_some_and(|s| s["status"] == "interrupted")
    });
    gamma.ctl_ok(&["start", "--resume", &id, "and now?"]);
    let mut body = String::new();
    wait_until("gamma's model is asked to go on", || {
        body = gamma
            .turn_bodies()
            .pop()
            .map(|b| b.to_string())
            .unwrap_or_default();
        !body.is_empty()
    });
    assert!(body.contains("done during the outage"), "{body}");
    assert!(body.contains("and now?"), "{body}");
    let clone = gamma.home().join("fleet/work").join(format!("r-{id}"));
    assert_eq!(
        std::fs::read_to_string(clone.join("during.txt")).ok(),
        None,
        "uncommitted work is not pushed"
    );
    assert_eq!(gamma.stop_daemon(), 0);
}

/// `intendant doctor --json` in `world`'s state root.
fn doctor(world: &World) -> Value {
    let out = world.command(&["doctor", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn doctor_says_whether_the_fleet_is_reachable_complete_and_this_member_alive() {
    let Some(nats) = Nats::start(&["--user", "fleet", "--pass", "right-secret-3"]) else {
        return;
    };
    let mut world = World::new(json!([]));
    let url = format!("nats://fleet:right-secret-3@127.0.0.1:{}", nats.port);
    fleet_settings(
        &world,
        &format!("url = \"{url}\"\nname = \"alpha\"\nheartbeat_sec = 1\n"),
    );
    world.serve();
    let report = doctor(&world);
    for key in [
        "fleet",
        "fleet_server",
        "fleet_jetstream",
        "fleet_streams",
        "fleet_member",
    ] {
        assert_eq!(report[key]["ok"], true, "{key}: {report:#}");
    }
    assert!(
        report["fleet_streams"]["detail"]
            .as_str()
            .unwrap()
            .contains("intendant_fleet_records")
    );
    assert!(!report.to_string().contains("right-secret-3"), "{report}");
    let text = String::from_utf8(world.command(&["doctor"]).output().unwrap().stdout).unwrap();
    assert!(
        text.contains("fleet member: member \"alpha\" (pid"),
        "{text}"
    );

    // Stopped: its record is gone, and the doctor says so.
    assert_eq!(world.stop_daemon(), 0);
    let report = doctor(&world);
    assert_eq!(report["fleet_server"]["ok"], true, "{report:#}");
    assert_eq!(report["fleet_member"]["ok"], false, "{report:#}");
    assert!(
        report["fleet_member"]["detail"]
            .as_str()
            .unwrap()
            .contains("not serving")
    );

    // A wrong password: refused, and never shown.
    let wrong = format!("nats://fleet:wrong-secret-4@127.0.0.1:{}", nats.port);
    fleet_settings(&world, &format!("url = \"{wrong}\"\n"));
    let report = doctor(&world);
    assert_eq!(report["fleet_server"]["ok"], false, "{report:#}");
    let detail = report["fleet_server"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("refused this daemon's credentials"),
        "{detail}"
    );
    assert!(!report.to_string().contains("wrong-secret-4"), "{report}");
    assert!(report.get("fleet_member").is_none(), "{report:#}");

    // No fleet: one line saying so, nothing asked.
    std::fs::write(world.home().join("intendant.toml"), "[daemon]\n").unwrap();
    let report = doctor(&world);
    assert_eq!(report["fleet"]["ok"], true);
    assert!(
        report["fleet"]["detail"]
            .as_str()
            .unwrap()
            .contains("none configured")
    );
    assert!(report.get("fleet_server").is_none());
}

#[test]
fn thirty_sessions_placed_on_the_fleet_spread_over_three_members_and_all_complete() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    let turns: Vec<Value> = (0..30)
        .map(|_| super::sessions::text_turn("done"))
        .collect();
    let mut worlds: Vec<World> = (0..3).map(|_| World::new(json!(turns))).collect();
    for (world, name) in worlds.iter_mut().zip(["alpha", "beta", "gamma"]) {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    let started = std::time::Instant::now();
    for i in 0..30 {
        let task = format!("fleet task {i}");
        place_ok(&worlds[i % 3], &["--repo", origin.to_str().unwrap()], &task);
    }
    let mut seen = Vec::new();
    wait_until("all thirty sessions end their round", || {
        seen = fleet_sessions(&worlds[0])
            .into_iter()
            .filter(|s| {
                s["task"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("fleet task "))
                    && s["status"] == "idle"
                    && s["final_text"] == "done"
            })
            .collect();
        seen.len() == 30
    });
    let mut tasks: Vec<&str> = seen.iter().map(|s| s["task"].as_str().unwrap()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    assert_eq!(tasks.len(), 30, "each placed once");
    for member in ["alpha", "beta", "gamma"] {
        assert!(
            seen.iter().any(|s| s["member"] == member),
            "{member} took some: {seen:#?}"
        );
    }
    eprintln!("thirty placed sessions done in {:?}", started.elapsed());
    for world in &mut worlds {
        assert_eq!(world.stop_daemon(), 0);
    }
}

#[test]
fn a_member_takes_a_placed_session_only_while_it_has_a_free_slot() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    // One slot. The first session holds it until the test lets its command end; the model's
    // answers go out in order, so a second session let in early would take "first done".
    let mut beta = World::new(json!([
        super::sessions::exec_turn("while [ ! -e release ]; do sleep 0.1; done"),
        super::sessions::text_turn("first done"),
        super::sessions::text_turn("second done"),
    ]));
    // The URL in the file too: the doctor reads the queue's depth through it.
    fleet_settings(
        &beta,
        &format!(
            "url = \"{}\"\nname = \"beta\"\nheartbeat_sec = 1\n",
            nats.url()
        ),
    );
    let settings = std::fs::read_to_string(beta.home().join("intendant.toml")).unwrap();
    std::fs::write(
        beta.home().join("intendant.toml"),
        format!("[daemon]\nmax_running = 1\n\n{settings}"),
    )
    .unwrap();
    serve_in(&mut beta, &nats.url());
    let place = |task: &str| {
        place_ok(
            &beta,
            &[
                "--on",
                "beta",
                "--repo",
                origin.to_str().unwrap(),
                "--autonomy",
                "full",
            ],
            task,
        );
    };
    let placed = |task: &str| {
        fleet_sessions(&beta)
            .into_iter()
            .find(|s| s["task"] == task)
            .unwrap_or(Value::Null)
    };
    place("first");
    let mut first = Value::Null;
    wait_until("the first runs, holding the slot", || {
        first = placed("first");
        first["status"] == "running"
    });
    place("second");
    // The member heard of the second (its signal) with no slot free: it stays on the queue.
    // Given time to be taken wrongly, it is still there, and beta lists no second session.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let report = doctor(&beta);
    let streams = report["fleet_streams"]["detail"].as_str().unwrap();
    assert!(
        streams.contains("intendant_fleet_work (1 messages)"),
        "{streams}"
    );
    assert_eq!(placed("second"), Value::Null);
    assert_eq!(placed("first")["status"], "running");

    // The slot frees as the first's round ends: the member takes the second then.
    std::fs::write(
        std::path::Path::new(first["project"].as_str().unwrap()).join("release"),
        "",
    )
    .unwrap();
    wait_until("both sessions end their round, in order", || {
        placed("first")["final_text"] == "first done"
            && placed("second")["final_text"] == "second done"
    });
    let report = doctor(&beta);
    let streams = report["fleet_streams"]["detail"].as_str().unwrap();
    assert!(
        streams.contains("intendant_fleet_work (0 messages)"),
        "{streams}"
    );
    assert_eq!(beta.stop_daemon(), 0);
}

#[test]
fn a_members_long_history_is_listed_across_the_fleet_a_page_at_a_time() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let mut alpha = World::in_memory(json!([]));
    let mut beta = World::new(json!([super::sessions::text_turn("beta's answer")]));
    // Alpha's history: more sessions than one page, from before this daemon.
    let mut history = Vec::new();
    for n in 0..300 {
        let dir = alpha.record_ended(&format!("old task {n}"));
        history.push(dir.file_name().unwrap().to_str().unwrap().to_owned());
    }
    // In id order, the listing's (ids made in one second sort by their random part).
    history.sort();
    for (world, name) in [(&mut alpha, "alpha"), (&mut beta, "beta")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    let newest = beta.start("the newest", &[]);
    let mut seen = Vec::new();
    wait_until("alpha lists beta's session", || {
        seen = fleet_sessions(&alpha);
        find(&seen, &newest).is_some()
    });
    // Every one of alpha's once, beta's under beta, read a page at a time.
    let mut ids: Vec<&str> = seen.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 301, "every session once");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 301, "none twice");
    assert!(
        history
            .iter()
            .all(|id| find(&seen, id).is_some_and(|s| s["member"] == "alpha"))
    );
    assert_eq!(find(&seen, &newest).unwrap()["member"], "beta");

    // One page, by id over every member: the first five, and the newest two (beta's among them
    // where its id sorts there: ids made in one second sort by their random part).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut everyone = history.clone();
    everyone.push(newest);
    everyone.sort();
    let (first, last, counts) = rt.block_on(async {
        use intendant_core::host::SessionHost;
        use intendant_protocol::daemon::SessionsPage;
        let host = intendant_server::socket::RemoteHost::connect(&alpha.home(), "test")
            .await
            .unwrap();
        let first = SessionsPage {
            limit: Some(5),
            ..SessionsPage::ALL
        };
        let last = SessionsPage::newest(2);
        // Counted by the daemon over every member (what MCP's `list_sessions` says it left
        // out), its own sessions where it keeps them.
        let before = SessionsPage {
            before: Some(everyone[100].clone()),
            ..SessionsPage::ALL
        };
        let counts = (
            host.fleet_sessions_count(&SessionsPage::ALL).await.unwrap(),
            host.fleet_sessions_count(&before).await.unwrap(),
            host.sessions_count(&SessionsPage::ALL).await.unwrap(),
        );
        (
            host.fleet_page(&first).await.unwrap(),
            host.fleet_page(&last).await.unwrap(),
            counts,
        )
    });
    assert_eq!(counts, (Some(301), Some(100), 300));
    let listed = |fleet: &intendant_protocol::fleet::FleetSessions| {
        let mut ids: Vec<String> = fleet
            .members
            .iter()
            .flat_map(|m| m.sessions.iter().map(|s| s.id.clone()))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(first.members.len(), 2, "every member is named");
    assert_eq!(listed(&first), everyone[..5]);
    assert_eq!(listed(&last), everyone[299..]);
}

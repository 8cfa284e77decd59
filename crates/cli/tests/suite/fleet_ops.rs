//! What an operator of the fleet relies on: a `nats-server` killed with SIGKILL loses nothing it
//! acknowledged, and a placement's outcome (started as a session on a member, or failed with the
//! reason) reaches the member that asked for it, and a dashboard's stream of every session
//! carries every member's events. A real `nats-server` on loopback, daemons on
//! state roots of their own, the fake model.

use std::process::Output;

use serde_json::{Value, json};

use super::daemon::{World, stderr, wait_until};
use super::fleet::{Nats, find, fleet_sessions, fleet_settings, place, serve_in, shared_remote};
use super::fleet_route::{get_json, login, sse};
use super::sessions::{exec_turn, text_turn};

/// Members named `names`, each with its own fake model playing `turns`.
fn members(nats: &Nats, named: Vec<(&str, Value)>) -> Vec<World> {
    named
        .into_iter()
        .map(|(name, turns)| {
            let mut world = World::new(turns);
            fleet_settings(&world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
            serve_in(&mut world, &nats.url());
            world
        })
        .collect()
}

/// `ctl --json placement ID` at `world`.
fn placement(world: &World, id: &str) -> Value {
    serde_json::from_str(&world.ctl_ok(&["--json", "placement", id])).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_placements_outcome_started_or_failed_with_the_reason_reaches_the_requester() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    let origin = origin.to_str().unwrap();
    let mut worlds = members(
        &nats,
        vec![
            ("alpha", json!([])),
            ("beta", json!([text_turn("placed and done")])),
        ],
    );

    // No such repository: the member that took it says why, and the asker hears it.
    let missing = shared.path().join("missing.git");
    let out = place(
        &worlds[0],
        &[
            "--on",
            "beta",
            "--repo",
            missing.to_str().unwrap(),
            "--wait",
        ],
        "from nowhere",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr(&out);
    assert!(said.contains("failed on beta: cloning"), "{said}");
    assert!(said.contains("missing.git"), "{said}");

    // A ref the repository does not have: queued, then failed; looked up on the asking member.
    let out = place(
        &worlds[0],
        &["--on", "beta", "--repo", origin, "--ref", "no-such-ref"],
        "on a bad ref",
    );
    assert!(out.status.success(), "{out:?}");
    let id = stdout(&out).trim().to_owned();
    assert!(
        stderr(&out).contains(&format!("intendant ctl placement {id}")),
        "the default says how to look it up: {}",
        stderr(&out)
    );
    let mut status = Value::Null;
    wait_until("the bad ref's placement failed", || {
        status = placement(&worlds[0], &id);
        status["state"] == "failed"
    });
    assert_eq!(status["member"], "beta", "{status:#}");
    assert_eq!(status["by"], "alpha", "{status:#}");
    assert!(
        status["reason"].as_str().unwrap().contains("no-such-ref"),
        "{status:#}"
    );
    let text = worlds[0].ctl_ok(&["placement", &id]);
    assert!(text.starts_with("failed on beta: cloning"), "{text}");

    // A URL's password never reaches the fleet's record or any member's words.
    let out = place(
        &worlds[0],
        &[
            "--on",
            "beta",
            "--repo",
            "http://fleet:s3cret-pw@127.0.0.1:1/x.git",
            "--wait",
        ],
        "with a password",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("failed on beta"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("s3cret-pw"), "{}", stderr(&out));

    // A good one: the session's id and its member, the same as the fleet lists it.
    let out = place(
        &worlds[0],
        &[
            "--on",
            "beta",
            "--repo",
            origin,
            "--wait",
            "--timeout",
            "60",
        ],
        "placed well",
    );
    assert!(out.status.success(), "{out:?}");
    let said = stdout(&out);
    let (session, member) = said.trim().split_once(" on ").unwrap();
    assert_eq!(member, "beta", "{said}");
    wait_until("alpha lists the placed session under beta", || {
        find(&fleet_sessions(&worlds[0]), session).is_some_and(|s| s["member"] == "beta")
    });
    let out = place(
        &worlds[1],
        &["--json", "--on", "beta", "--repo", origin, "--wait"],
        "placed well again",
    );
    // Beta's model has no second turn, but the session starts: the placement's outcome is
    // that it started.
    assert!(out.status.success(), "{out:?}");
    let status: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(status["state"], "started", "{status:#}");
    assert_eq!(status["member"], "beta", "{status:#}");
    assert!(status["session"].as_str().is_some_and(|s| s != session));

    // An id the fleet keeps nothing of.
    let out = worlds[0].ctl(&["placement", "p0123456789abcdef"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains("keeps no placement"),
        "{}",
        stderr(&out)
    );
    for world in &mut worlds {
        assert_eq!(world.stop_daemon(), 0);
    }
}

#[test]
fn a_nats_server_killed_with_sigkill_and_restarted_loses_nothing_it_acknowledged() {
    let Some(mut nats) = Nats::start(&[]) else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let origin = shared_remote(shared.path());
    let origin = origin.to_str().unwrap();
    let mut worlds = members(
        &nats,
        vec![
            (
                "alpha",
                json!([
                    exec_turn("sleep 120"),
                    text_turn("placed after the kill"),
                    text_turn("resumed on alpha"),
                ]),
            ),
            (
                "beta",
                json!([
                    exec_turn("echo approved > approved.txt"),
                    text_turn("approved and done"),
                ]),
            ),
        ],
    );
    // A session running on each member: alpha's own, beta's placed from alpha and waiting for
    // an approval.
    let long = worlds[0].start("wait long", &["--autonomy", "full"]);
    worlds[0].wait_status(&long, "running");
    let out = place(
        &worlds[0],
        &["--on", "beta", "--repo", origin, "--wait"],
        "write approved",
    );
    assert!(out.status.success(), "{out:?}");
    let placed = stdout(&out);
    let id = placed.trim().split_once(" on ").unwrap().0.to_owned();
    worlds[1].wait_status(&id, "waiting_for_human");
    let mut pending = Vec::new();
    wait_until("alpha lists beta's approval", || {
        pending = worlds[0].approvals_of(&id);
        !pending.is_empty()
    });
    wait_until("beta lists alpha's session", || {
        find(&fleet_sessions(&worlds[1]), &long).is_some()
    });
    // The mirror publishes what grew each second: give it two.
    std::thread::sleep(std::time::Duration::from_secs(2));

    nats.kill();
    nats.restart();

    // Both sessions listed on both members again, each under its member.
    for world in &worlds {
        wait_until("each member lists both sessions again", || {
            let seen = fleet_sessions(world);
            find(&seen, &long).is_some_and(|s| s["member"] == "alpha" && s["status"] == "running")
                && find(&seen, &id)
                    .is_some_and(|s| s["member"] == "beta" && s["status"] == "waiting_for_human")
        });
    }
    // The approval is still answerable from the other member, once.
    let approval = pending[0]["id"].to_string();
    wait_until("alpha's answer reaches beta", || {
        let out = worlds[0].ctl(&["approve", &id, &approval]);
        out.status.success() || stderr(&out).contains("already")
    });
    let done = worlds[1].wait_status(&id, "idle");
    assert_eq!(done["final_text"], "approved and done", "{done:#}");
    // The placement taken before the kill is not offered again: it ran once.
    let runs = fleet_sessions(&worlds[0])
        .into_iter()
        .filter(|s| s["task"] == "write approved")
        .count();
    assert_eq!(runs, 1);

    // Placement still works, the other way round.
    let out = place(
        &worlds[1],
        &["--on", "alpha", "--repo", origin, "--wait"],
        "after the kill",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).trim().ends_with(" on alpha"), "{out:?}");
    let after = stdout(&out).trim().split_once(" on ").unwrap().0.to_owned();
    worlds[0].wait_status(&after, "idle");

    // The mirror holds beta's whole record, from before the kill and after it: beta dies,
    // alpha resumes the session from the fleet's copy.
    std::thread::sleep(std::time::Duration::from_secs(2));
    worlds[1].kill_daemon();
    wait_until("alpha lists beta's session interrupted", || {
        find(&fleet_sessions(&worlds[0]), &id).is_some_and(|s| s["status"] == "interrupted")
    });
    worlds[0].ctl_ok(&["start", "--resume", &id, "go on"]);
    let mut body = String::new();
    wait_until("alpha's model is asked to go on", || {
        body = worlds[0]
            .turn_bodies()
            .get(2)
            .map(Value::to_string)
            .unwrap_or_default();
        !body.is_empty()
    });
    for seen in [
        "write approved",
        "echo approved > approved.txt",
        "approved and done",
        "go on",
    ] {
        assert!(body.contains(seen), "{seen} in {body}");
    }
    assert_eq!(worlds[0].stop_daemon(), 0);
}

#[test]
fn a_dashboards_stream_of_every_session_carries_another_members_events_marked_with_it() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let mut alpha = World::new(json!([text_turn("alpha's own")]));
    fleet_settings(&alpha, "name = \"alpha\"\nheartbeat_sec = 1\n");
    let mut daemon = alpha.command(&["serve", "--fleet", &nats.url(), "--web"]);
    daemon.stderr(std::process::Stdio::null());
    let url = super::web::spawn_web(&mut alpha, daemon);
    let mut beta = members(
        &nats,
        vec![(
            "beta",
            json!([text_turn("beta's first"), text_turn("beta's second")]),
        )],
    )
    .pop()
    .unwrap();
    let cookie = login(&url);
    // The tab's one stream: every session, no `session=`.
    let live = sse(url.port, "/api/events", &cookie);
    // Its subscription is made as the request is answered: give it a moment.
    std::thread::sleep(std::time::Duration::from_secs(1));

    let id = beta.start("on beta", &[]);
    let own = alpha.start("on alpha", &[]);
    let mut seen: Vec<Value> = Vec::new();
    let done = |seen: &[Value], id: &str| {
        seen.iter()
            .any(|e| e["session_id"] == id && e["event"]["type"] == "round_complete")
    };
    while !(done(&seen, &id) && done(&seen, &own)) {
        let envelope = live
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("both rounds reach alpha's stream: {seen:#?}"));
        seen.push(envelope);
    }
    let betas: Vec<&Value> = seen.iter().filter(|e| e["session_id"] == id).collect();
    assert!(
        betas.iter().all(|e| e["member"] == "beta"),
        "each of beta's events is marked with its member: {betas:#?}"
    );
    let kinds: Vec<&str> = betas
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"session_started"), "{kinds:?}");
    assert!(
        serde_json::to_string(&betas)
            .unwrap()
            .contains("beta's first"),
        "{betas:#?}"
    );
    // Beta's own numbering, in order.
    let seqs: Vec<u64> = betas.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // This member's own events are as they always were: no member, this daemon's seqs.
    let alphas: Vec<&Value> = seen.iter().filter(|e| e["session_id"] == own).collect();
    assert!(
        alphas.iter().all(|e| e.get("member").is_none()),
        "{alphas:#?}"
    );

    // A follow-up on beta: its next round reaches alpha's stream too, and alpha's list shows
    // the session idle again without waiting for a poll.
    beta.ctl_ok(&["send", &id, "again"]);
    let mut rounds = 0;
    while rounds < 1 {
        let envelope = live
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the second round reaches alpha's stream");
        if envelope["session_id"] == id.as_str() && envelope["event"]["type"] == "round_complete" {
            assert_eq!(envelope["member"], "beta");
            rounds += 1;
        }
    }
    wait_until("alpha's list has beta's second answer", || {
        let listed = get_json(url.port, "/api/sessions", &cookie);
        find(listed.as_array().unwrap(), &id).is_some_and(|s| s["final_text"] == "beta's second")
    });
    assert_eq!(beta.stop_daemon(), 0);
    assert_eq!(alpha.stop_daemon(), 0);
}

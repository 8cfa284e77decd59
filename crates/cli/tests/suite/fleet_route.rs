//! One host, any door: control given at one fleet member for a session another owns reaches the
//! owner once and is acknowledged, the approvals list shows the fleet's queue, and a session is
//! followed from another member with the owner's `seq`s, none left out. A real `nats-server` on
//! loopback, daemons on state roots of their own, the fake model.

use std::process::Stdio;

use serde_json::{Value, json};

use super::daemon::{World, signal, stderr, wait_until};
use super::fleet::{Nats, find, fleet_sessions, fleet_settings, serve_in};
use super::sessions::{exec_turn, text_turn};

/// Two members, alpha and beta, each with its own fake model.
fn two_members(nats: &Nats, alpha_turns: Value, beta_turns: Value) -> (World, World) {
    let mut alpha = World::new(alpha_turns);
    let mut beta = World::new(beta_turns);
    for (world, name) in [(&mut alpha, "alpha"), (&mut beta, "beta")] {
        fleet_settings(world, &format!("name = \"{name}\"\nheartbeat_sec = 1\n"));
        serve_in(world, &nats.url());
    }
    (alpha, beta)
}

/// The lines `ctl --json attach` printed, as envelopes.
fn envelopes(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(envelopes: &[Value]) -> Vec<String> {
    envelopes
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_approval_a_follow_up_and_a_stop_given_at_another_member_reach_the_owner_once() {
    let Some(nats) = Nats::start(&[]) else {
        return;
    };
    let (alpha, mut beta) = two_members(
        &nats,
        json!([]),
        json!([
            exec_turn("echo one > one.txt"),
            text_turn("first done"),
            exec_turn("sleep 120"),
        ]),
    );
    let id = beta.start("write one", &[]);
    beta.wait_status(&id, "waiting_for_human");
    wait_until("alpha lists beta's session", || {
        find(&fleet_sessions(&alpha), &id).is_some()
    });
    // Followed live from alpha from its start: what beta's log holds, in beta's order.
    let follower = alpha
        .command(&["ctl", "--json", "attach", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The fleet's queue: alpha lists beta's pending approval.
    let mut pending = Vec::new();
    wait_until("alpha lists beta's approval", || {
        pending = alpha.approvals_of(&id);
        !pending.is_empty()
    });
    assert_eq!(pending.len(), 1, "{pending:#?}");
    let approval = pending[0]["id"].to_string();

    // Answered at alpha: acknowledged there, applied at beta once.
    alpha.ctl_ok(&["approve", &id, &approval]);
    beta.wait_status(&id, "idle");
    assert_eq!(
        std::fs::read_to_string(beta.project().join("one.txt")).unwrap(),
        "one\n"
    );
    let again = alpha.ctl(&["approve", &id, &approval]);
    assert!(!again.status.success(), "{again:?}");
    assert!(stderr(&again).contains("already"), "{}", stderr(&again));
    assert!(alpha.approvals_of(&id).is_empty());

    // A follow-up given at alpha runs beta's next turn with it.
    alpha.ctl_ok(&["send", &id, "carry on please"]);
    wait_until("beta's model is asked with the follow-up", || {
        beta.turn_bodies().len() == 3
    });
    assert!(
        beta.turn_bodies()[2]
            .to_string()
            .contains("carry on please")
    );
    // Its command waits for an approval (medium autonomy): a stop ends it there.
    beta.wait_status(&id, "waiting_for_human");

    // A stop given at alpha ends it at beta.
    alpha.ctl_ok(&["stop", &id]);
    beta.wait_status(&id, "interrupted");

    let followed = follower.wait_with_output().unwrap();
    let followed = envelopes(&followed.stdout);
    let owned = beta.replay(&id);
    let lifecycle = |all: &[Value]| -> Vec<Value> {
        all.iter()
            .filter(|e| e["event"]["type"] != "model_response_delta")
            .cloned()
            .collect()
    };
    assert_eq!(
        lifecycle(&followed),
        lifecycle(&owned),
        "alpha followed beta's record exactly"
    );
    let seqs: Vec<u64> = followed
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let said = kinds(&followed);
    let resolved: Vec<&Value> = followed
        .iter()
        .filter(|e| {
            e["event"]["type"] == "approval_resolved" && e["event"]["id"] == pending[0]["id"]
        })
        .collect();
    assert_eq!(resolved.len(), 1, "answered once: {followed:#?}");
    assert_eq!(resolved[0]["event"]["verdict"], "approve");
    assert_eq!(said.last().map(String::as_str), Some("session_ended"));

    // And replayed from alpha once it ended.
    assert_eq!(lifecycle(&alpha.replay(&id)), lifecycle(&owned));

    // The owner gone: control given for its session is refused, saying why.
    let mut killed = beta.daemon.take().unwrap();
    signal(killed.id(), libc::SIGKILL);
    let _ = killed.wait();
    let out = alpha.ctl(&["send", &id, "anyone there?"]);
    assert!(!out.status.success(), "{out:?}");
    let said = stderr(&out);
    assert!(said.contains("member beta"), "{said}");
    let mut alpha = alpha;
    assert_eq!(alpha.stop_daemon(), 0);
}

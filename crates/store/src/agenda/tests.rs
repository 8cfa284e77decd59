use std::sync::{Arc, Barrier};

use super::*;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

const REQUEST: &str = r#"{"task":"nightly review","project":"/p"}"#;

#[test]
fn an_item_is_added_reminded_once_snoozed_and_done() {
    let (_d, store) = store();
    let item = add_item(&store, "call the vendor", Some(100), 10).unwrap();
    assert_eq!(
        (item.kind, item.state, item.at),
        (Kind::Item, State::Open, Some(100))
    );
    assert!(take_due_reminders(&store, 99).unwrap().is_empty());
    let due = take_due_reminders(&store, 100).unwrap();
    assert_eq!(due.len(), 1);
    assert!(due[0].reminded);
    assert!(take_due_reminders(&store, 200).unwrap().is_empty(), "once");
    snooze(&store, item.id, 300, 200).unwrap();
    assert_eq!(
        take_due_reminders(&store, 300).unwrap().len(),
        1,
        "armed again"
    );
    let done = done(&store, item.id).unwrap();
    assert_eq!(done.state, State::Done);
    assert!(matches!(
        snooze(&store, item.id, 400, 300),
        Err(AgendaError::WrongState { .. })
    ));
    assert!(matches!(
        super::done(&store, 99),
        Err(AgendaError::Unknown(99))
    ));
}

#[test]
fn bad_input_is_refused_and_nothing_is_added() {
    let (_d, store) = store();
    for (text, at) in [("  ", Some(100)), ("x", Some(5)), ("x", Some(10))] {
        assert!(
            matches!(add_item(&store, text, at, 10), Err(AgendaError::Invalid(_))),
            "{text:?} {at:?}"
        );
    }
    let e = add_schedule(&store, "t", 9, REQUEST, 10).unwrap_err();
    assert!(e.to_string().contains("in the past"), "{e}");
    let long = "x".repeat(MAX_TEXT_BYTES + 1);
    assert!(add_item(&store, &long, None, 10).is_err());
    assert!(list(&store).unwrap().is_empty());
}

#[test]
fn schedules_waiting_for_approval_and_entries_still_to_come_are_bounded() {
    let (dir, store) = store();
    let mut pending = Vec::new();
    for _ in 0..MAX_PENDING {
        pending.push(add_schedule(&store, "t", 1_000, REQUEST, 10).unwrap().id);
    }
    // One more waiting is refused, from a second connection (another daemon) too; items still
    // go in, their bound being a larger one.
    let other = Store::open(dir.path()).unwrap();
    for s in [&store, &other] {
        let e = add_schedule(s, "t", 1_000, REQUEST, 10).unwrap_err();
        assert!(matches!(e, AgendaError::Full(_)), "{e}");
        assert!(
            e.to_string()
                .contains("100 scheduled sessions already wait"),
            "{e}"
        );
    }
    add_item(&store, "an item", None, 10).unwrap();
    // An answer makes room.
    reject(&store, pending[0]).unwrap();
    approve(&store, pending[1], 20).unwrap();
    add_schedule(&other, "t", 1_000, REQUEST, 10).unwrap();
    add_schedule(&other, "t", 1_000, REQUEST, 10).unwrap();
    assert!(add_schedule(&store, "t", 1_000, REQUEST, 10).is_err());
    // Open items and schedules not yet run, together: at most MAX_LIVE.
    let live = |store: &Store| {
        list(store)
            .unwrap()
            .iter()
            .filter(|e| matches!(e.state, State::Open | State::Pending | State::Approved))
            .count()
    };
    while live(&store) < MAX_LIVE {
        add_item(&store, "an item", None, 10).unwrap();
    }
    let e = add_item(&other, "one too many", None, 10).unwrap_err();
    assert!(e.to_string().contains("1000 open items"), "{e}");
    let last = list(&store).unwrap().last().unwrap().id;
    done(&store, last).unwrap();
    add_item(&store, "fits again", None, 10).unwrap();
    assert_eq!(live(&store), MAX_LIVE);
}

#[test]
fn a_schedule_waits_for_approval_and_is_claimed_once_at_its_time() {
    let (_d, store) = store();
    let s = add_schedule(&store, "nightly review", 100, REQUEST, 10).unwrap();
    assert_eq!(s.state, State::Pending);
    assert_eq!(s.digest.as_deref(), Some(digest(REQUEST).as_str()));
    assert_eq!(
        digest("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(claim_due(&store, 50, 60, "d1").unwrap(), Due::default());
    approve(&store, s.id, 20).unwrap();
    assert!(
        claim_due(&store, 99, 60, "d1").unwrap().to_start.is_empty(),
        "not yet"
    );
    let due = claim_due(&store, 100, 60, "d1").unwrap();
    assert_eq!(due.to_start.len(), 1);
    assert_eq!(due.to_start[0].request.as_deref(), Some(REQUEST));
    assert_eq!(
        claim_due(&store, 101, 60, "d2").unwrap(),
        Due::default(),
        "claimed once"
    );
    let started = record_started(&store, s.id, "sess-1").unwrap();
    assert_eq!(
        (started.state, started.session_id.as_deref()),
        (State::Started, Some("sess-1"))
    );
    assert_eq!(claim_due(&store, 1000, 60, "d2").unwrap(), Due::default());
}

#[test]
fn an_unapproved_late_or_uncertain_schedule_is_missed_and_never_run() {
    let (_d, store) = store();
    let pending = add_schedule(&store, "a", 100, REQUEST, 10).unwrap();
    let late = add_schedule(&store, "b", 100, REQUEST, 10).unwrap();
    let lost = add_schedule(&store, "c", 100, REQUEST, 10).unwrap();
    approve(&store, late.id, 20).unwrap();
    approve(&store, lost.id, 20).unwrap();
    // `lost` is claimed by a daemon that dies before recording a session.
    store
        .write(|tx| {
            tx.execute(
                "UPDATE agenda SET state = 'claimed', claimed_at = 100 WHERE id = ?1",
                [lost.id],
            )
        })
        .unwrap();
    // The daemon comes back long after.
    let due = claim_due(&store, 1000, 60, "d").unwrap();
    assert!(due.to_start.is_empty());
    let states: Vec<(i64, State)> = due.not_run.iter().map(|e| (e.id, e.state)).collect();
    assert_eq!(
        states,
        [
            (pending.id, State::Missed),
            (late.id, State::Missed),
            (lost.id, State::Missed)
        ]
    );
    assert!(due.not_run[2].note.as_deref().unwrap().contains("unknown"));
    assert_eq!(
        claim_due(&store, 2000, 60, "d").unwrap(),
        Due::default(),
        "never again"
    );
    assert!(approve(&store, pending.id, 2000).is_err());
}

#[test]
fn approval_needs_a_pending_schedule_whose_time_is_ahead() {
    let (_d, store) = store();
    let item = add_item(&store, "x", None, 10).unwrap();
    assert!(matches!(
        approve(&store, item.id, 10),
        Err(AgendaError::WrongState { .. })
    ));
    let s = add_schedule(&store, "t", 100, REQUEST, 10).unwrap();
    let e = approve(&store, s.id, 100).unwrap_err();
    assert!(e.to_string().contains("its time has passed"), "{e}");
    reject(&store, s.id).unwrap();
    assert!(approve(&store, s.id, 20).is_err());
}

#[test]
fn a_request_changed_after_approval_is_not_started() {
    let (_d, store) = store();
    let s = add_schedule(&store, "t", 100, REQUEST, 10).unwrap();
    approve(&store, s.id, 20).unwrap();
    store
        .write(|tx| {
            tx.execute(
                "UPDATE agenda SET request = '{\"task\":\"rm -rf\"}' WHERE id = ?1",
                [s.id],
            )
        })
        .unwrap();
    let due = claim_due(&store, 100, 60, "d").unwrap();
    assert!(due.to_start.is_empty());
    assert_eq!(due.not_run[0].state, State::Failed);
}

#[test]
fn two_daemons_on_one_database_start_a_due_schedule_once() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let a = Store::open(dir.path()).unwrap();
        let b = Store::open(dir.path()).unwrap();
        let s = add_schedule(&a, "t", 100, REQUEST, 10).unwrap();
        approve(&a, s.id, 20).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = [(a, "d1"), (b, "d2")]
            .into_iter()
            .map(|(store, name)| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    claim_due(&store, 100, 60, name).unwrap().to_start.len()
                })
            })
            .collect();
        let started: usize = racers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(started, 1, "round {round}");
    }
}

#[test]
fn a_listing_holds_what_is_still_to_come_and_the_newest_of_what_ended() {
    let (_d, store) = store();
    let open = add_item(&store, "kept open", None, 10).unwrap().id;
    let waiting = add_schedule(&store, "waits", 1_000, REQUEST, 10)
        .unwrap()
        .id;
    // More ended entries than a listing carries: schedules missed at once, as a client
    // scheduling in a loop would leave them.
    let mut ended = Vec::new();
    for _ in 0..LISTED_HISTORY + 50 {
        ended.push(add_schedule(&store, "missed", 11, REQUEST, 10).unwrap().id);
        claim_due(&store, 12, 3600, "daemon").unwrap();
    }
    let listed: Vec<i64> = list(&store).unwrap().iter().map(|e| e.id).collect();
    let mut expected = vec![open, waiting];
    expected.extend(&ended[50..]);
    assert_eq!(
        listed, expected,
        "oldest first: what is still to come, then the newest ended"
    );
    let pending: Vec<i64> = pending(&store).unwrap().iter().map(|e| e.id).collect();
    assert_eq!(pending, [waiting]);
    assert!(
        ended
            .iter()
            .all(|id| get(&store, *id).unwrap().state == State::Missed),
        "the ledger keeps every one"
    );
}

#[test]
fn a_prune_takes_the_schedules_that_ended_before_its_time_and_leaves_the_rest() {
    let (_d, store) = store();
    // Made at 10, due at 100: missed by 1000.
    let missed = add_schedule(&store, "missed", 100, REQUEST, 10).unwrap();
    let refused = add_schedule(&store, "refused", 100, REQUEST, 10).unwrap();
    reject(&store, refused.id).unwrap();
    // Made at 10, due long after the prune's time: still to come.
    let ahead = add_schedule(&store, "ahead", 50_000, REQUEST, 10).unwrap();
    approve(&store, ahead.id, 20).unwrap();
    let cancelled_late = add_schedule(&store, "due after the cut", 5_000, REQUEST, 10).unwrap();
    done(&store, cancelled_late.id).unwrap();
    // Work items stay, done or not.
    let item = add_item(&store, "an item", None, 10).unwrap();
    done(&store, item.id).unwrap();
    add_item(&store, "open item", None, 10).unwrap();
    claim_due(&store, 1000, 60, "d").unwrap();
    assert_eq!(get(&store, missed.id).unwrap().state, State::Missed);

    // Counted without a change, then removed: the missed and the refused, made and due
    // before 2000.
    assert_eq!(prune_ended_schedules(&store, 2000, true).unwrap(), 2);
    assert_eq!(list(&store).unwrap().len(), 6, "a dry run removes nothing");
    assert_eq!(prune_ended_schedules(&store, 2000, false).unwrap(), 2);
    let left: Vec<i64> = list(&store).unwrap().iter().map(|e| e.id).collect();
    assert!(!left.contains(&missed.id) && !left.contains(&refused.id));
    assert_eq!(left.len(), 4);
    assert_eq!(get(&store, ahead.id).unwrap().state, State::Approved);
    assert_eq!(prune_ended_schedules(&store, 2000, false).unwrap(), 0);
    // Once its time is before the cut too, the one cancelled is taken.
    assert_eq!(prune_ended_schedules(&store, 6000, false).unwrap(), 1);
    assert!(get(&store, cancelled_late.id).is_err());
}
